//! GLUE 2 from an LDAP information system (ARC's `o=glue` on port 2135),
//! read anonymously.

use std::collections::BTreeMap;

use ldap3::{LdapConnAsync, Scope, SearchEntry};

use super::{DiscoveryError, Endpoint};

/// The GLUE 2 attributes an endpoint is read from.
const ATTRIBUTES: [&str; 5] = [
    "objectClass",
    "GLUE2EndpointID",
    "GLUE2EndpointURL",
    "GLUE2EndpointInterfaceName",
    "GLUE2EndpointHealthState",
];

/// The computing endpoints under `base` at the LDAP server `url`.
pub async fn endpoints(url: &str, base: &str) -> Result<Vec<Endpoint>, DiscoveryError> {
    let fail = |e: ldap3::LdapError| DiscoveryError::Unreadable(format!("{url}: {e}"));
    let (conn, mut ldap) = LdapConnAsync::new(url).await.map_err(fail)?;
    ldap3::drive!(conn);
    let (entries, _) = ldap
        .search(
            base,
            Scope::Subtree,
            "(objectClass=GLUE2ComputingEndpoint)",
            ATTRIBUTES.to_vec(),
        )
        .await
        .map_err(fail)?
        .success()
        .map_err(fail)?;
    let _ = ldap.unbind().await;
    Ok(entries
        .into_iter()
        .filter_map(|e| {
            let e = SearchEntry::construct(e);
            let attrs: BTreeMap<String, Vec<String>> =
                e.attrs.into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect();
            Endpoint::from_attributes(&attrs)
        })
        .collect())
}
