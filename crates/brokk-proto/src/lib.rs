//! The site API's wire types and [`RemoteSite`], a blocking HTTP client that
//! implements the broker's [`brokk_broker::Site`] trait, so the broker
//! drives a remote `brokk site` exactly like an in-memory site.
//!
//! Conventions: JSON bodies, times in RFC 3339 UTC, durations in whole
//! seconds, bearer tokens; errors are `{"error": "..."}` with a status code.

pub mod broker;
pub mod client;
pub mod openapi;
pub mod wire;

pub use client::RemoteSite;

/// A service's base URL, parsed once; one that does not parse becomes an
/// address no request reaches, so the calls fail as unreachable.
pub(crate) fn base_url(text: &str) -> reqwest::Url {
    reqwest::Url::parse(text)
        .or_else(|_| reqwest::Url::parse("http://invalid.invalid/"))
        .expect("a constant URL parses")
}

/// `base` with the path made of `segments`, each one percent-encoded, so a
/// `/`, `?` or `..` inside a value a user chose (a file name, an id, an
/// idempotency key) stays one segment and cannot reach another endpoint.
pub(crate) fn url_with(base: &reqwest::Url, segments: &[&str]) -> reqwest::Url {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url
}

/// The deepest cause of a transport error (`Connection refused (os error
/// 111)`): what a user can act on, without the wrapping that repeats the URL.
pub(crate) fn innermost(e: &reqwest::Error) -> &(dyn std::error::Error + 'static) {
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause
}

/// The wall clock in whole seconds: what the service, the agents and the CLI
/// read (the broker's algorithms and the simulator take time as an argument).
pub fn wall_clock() -> brokk_model::Time {
    let now = std::time::SystemTime::now().duration_since(std::time::SystemTime::UNIX_EPOCH);
    brokk_model::Time(now.map_or(0, |d| d.as_secs() as i64))
}
