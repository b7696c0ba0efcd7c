//! What the services' OpenAPI documents share: the bearer scheme their `/v1`
//! calls take, and the path form OpenAPI reads. The documents themselves are
//! generated from the handlers' `#[utoipa::path]` and the wire types, so a
//! route or a field cannot exist without its description.

use serde_json::Value;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;

/// Adds the `bearer` scheme (`Authorization: Bearer TOKEN`) to a document.
pub struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, doc: &mut OpenApi) {
        let scheme = SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build());
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme("bearer", scheme);
    }
}

/// The document as served, serialized once: axum's catch-all segments
/// (`{*name}`) become OpenAPI's plain path parameters (`{name}`), which is
/// what a client fills in, and a response the handler described by its
/// body alone gets its status's reason (`OK`, `Created`) as the description
/// OpenAPI requires.
pub fn served(doc: OpenApi) -> String {
    let mut v = serde_json::to_value(&doc).unwrap_or_default();
    if let Some(paths) = v.get_mut("paths").and_then(Value::as_object_mut) {
        *paths = std::mem::take(paths)
            .into_iter()
            .map(|(p, item)| (p.replace("{*", "{"), item))
            .collect();
        let operations = paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|i| i.values_mut());
        for responses in operations.filter_map(|op| op.get_mut("responses").and_then(Value::as_object_mut)) {
            for (code, r) in responses.iter_mut() {
                if let Some(r) = r.as_object_mut().filter(|r| !r.contains_key("description")) {
                    let reason = code
                        .parse()
                        .ok()
                        .and_then(|c| reqwest::StatusCode::from_u16(c).ok())
                        .and_then(|c| c.canonical_reason())
                        .unwrap_or("answer");
                    r.insert("description".into(), reason.into());
                }
            }
        }
    }
    serde_json::to_string_pretty(&v).unwrap_or_default()
}
