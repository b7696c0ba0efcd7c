//! GLUE 2 endpoints from an LDAP information system (ARC's `o=glue` on port
//! 2135), read anonymously.

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
    let entries = brokk_site::arc::ldap::search(url, base, "(objectClass=GLUE2ComputingEndpoint)", &ATTRIBUTES)
        .await
        .map_err(DiscoveryError::Unreadable)?;
    Ok(entries.iter().filter_map(Endpoint::from_attributes).collect())
}
