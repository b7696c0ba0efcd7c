//! Sites found in GLUE 2: the computing endpoints an ARC information system
//! publishes (LDAP, `o=glue`) or a file lists (LDIF, as `ldapsearch`
//! prints them). Each ARC REST endpoint becomes an embedded ARC site of the
//! broker, reached with the credentials of `[discovery.arc]`; the listing is
//! read again at an interval, new endpoints are connected to concurrently,
//! each within a timeout, and one that does not answer is reported and
//! skipped until a later reading.

pub mod ldap;

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine as _;
use serde::Deserialize;

/// The GLUE 2 interface name of A-REX's REST interface.
pub const ARC_REST: &str = "org.nordugrid.arcrest";

/// Where endpoints are listed, and how the CEs found are reached.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// A file of GLUE 2 computing endpoints in LDIF (relative to the
    /// configuration file).
    pub endpoints: Option<PathBuf>,
    /// An LDAP information system publishing GLUE 2, `ldap://host:port`
    /// (ARC's on port 2135).
    pub ldap: Option<String>,
    /// The LDAP search base.
    #[serde(default = "default_base")]
    pub base: String,
    /// Seconds between two readings of the listing.
    #[serde(default = "default_interval")]
    pub interval_s: u64,
    /// Seconds a reading of the listing, and the first contact with each
    /// new endpoint, may take before it counts as unreachable.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// The `[arc]` settings of the sites made for the endpoints found (their
    /// `url` is the endpoint's).
    pub arc: brokk_site::arc::ArcConfig,
}

fn default_base() -> String {
    "o=glue".into()
}
fn default_interval() -> u64 {
    300
}
fn default_timeout() -> u64 {
    10
}

/// A listing that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscoveryError {
    /// Malformed LDIF.
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The file or the information system could not be read.
    #[error("{0}")]
    Unreadable(String),
}

/// One GLUE 2 computing endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `GLUE2EndpointID`.
    pub id: String,
    /// `GLUE2EndpointURL`.
    pub url: String,
    /// `GLUE2EndpointInterfaceName`.
    pub interface: String,
    /// `GLUE2EndpointHealthState`, when published.
    pub health: Option<String>,
}

impl Endpoint {
    /// The endpoint from one entry's attributes (names in lower case), if it
    /// is a computing endpoint with a URL.
    pub fn from_attributes(attrs: &BTreeMap<String, Vec<String>>) -> Option<Endpoint> {
        let first = |name: &str| attrs.get(name).and_then(|v| v.first()).cloned();
        let classes = attrs.get("objectclass")?;
        if !classes.iter().any(|c| c.eq_ignore_ascii_case("GLUE2ComputingEndpoint")) {
            return None;
        }
        let url = first("glue2endpointurl")?;
        Some(Endpoint {
            id: first("glue2endpointid").unwrap_or_else(|| url.clone()),
            interface: first("glue2endpointinterfacename").unwrap_or_default(),
            health: first("glue2endpointhealthstate"),
            url,
        })
    }

    /// The name of the site made for it: `arc-HOST-PORT`, lower case, with
    /// anything but letters, digits and `-` as `-`.
    pub fn site_name(&self) -> String {
        let rest = self.url.split_once("://").map_or(self.url.as_str(), |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or(rest);
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (h, p),
            _ => (authority, "443"),
        };
        let clean: String = format!("{host}-{port}")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        format!("arc-{clean}")
    }
}

/// Reads the listing once: its ARC REST endpoints.
pub async fn listing(d: &DiscoveryConfig) -> Result<Vec<Endpoint>, DiscoveryError> {
    let mut all = Vec::new();
    if let Some(path) = &d.endpoints {
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| DiscoveryError::Unreadable(format!("{}: {e}", path.display())))?;
        all.extend(parse_ldif(&text).map_err(|e| match e {
            DiscoveryError::Syntax { line, column, message } => {
                DiscoveryError::Unreadable(format!("{}:{line}:{column}: {message}", path.display()))
            }
            e => e,
        })?);
    }
    if let Some(url) = &d.ldap {
        all.extend(crate::discovery::ldap::endpoints(url, &d.base).await?);
    }
    Ok(arc_rest(all))
}

/// The ARC REST endpoints among `all`, each URL once, in order.
pub fn arc_rest(all: Vec<Endpoint>) -> Vec<Endpoint> {
    let mut seen = std::collections::BTreeSet::new();
    all.into_iter()
        .filter(|e| e.interface == ARC_REST && seen.insert(e.url.clone()))
        .collect()
}

/// The computing endpoints of an LDIF text (RFC 2849, as `ldapsearch -LLL`
/// prints it: folded lines, comments, base64 values).
pub fn parse_ldif(text: &str) -> Result<Vec<Endpoint>, DiscoveryError> {
    // Unfolded lines with the number of the line each began on.
    let mut lines: Vec<(usize, String)> = Vec::new();
    let mut in_comment = false;
    for (n, raw) in text.lines().enumerate() {
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if let Some(more) = raw.strip_prefix(' ') {
            if !in_comment {
                match lines.last_mut() {
                    Some((_, l)) if !l.is_empty() => l.push_str(more),
                    _ => {
                        return Err(DiscoveryError::Syntax {
                            line: n + 1,
                            column: 1,
                            message: "a continuation line with nothing to continue".into(),
                        })
                    }
                }
            }
            continue;
        }
        in_comment = raw.starts_with('#');
        if !in_comment {
            lines.push((n + 1, raw.to_string()));
        }
    }
    let mut found = Vec::new();
    let mut entry: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (n, line) in lines.iter().map(|(n, l)| (*n, l.as_str())).chain([(0, "")]) {
        if line.trim().is_empty() {
            found.extend(Endpoint::from_attributes(&entry));
            entry.clear();
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(DiscoveryError::Syntax {
                line: n,
                column: line.len() + 1,
                message: "expected `attribute: value`".into(),
            });
        };
        let value = if let Some(b64) = value.strip_prefix(':') {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .map_err(|e| DiscoveryError::Syntax {
                    line: n,
                    column: name.len() + 3,
                    message: format!("base64 value: {e}"),
                })?;
            String::from_utf8_lossy(&bytes).into_owned()
        } else if value.starts_with('<') {
            // A value by URL: not fetched.
            continue;
        } else {
            value.trim_start().to_string()
        };
        // Attribute options (`;lang-en`) do not change what it is.
        let name = name.split(';').next().unwrap_or(name).trim().to_ascii_lowercase();
        entry.entry(name).or_default().push(value);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Endpoints as ARC's LDAP information system renders them (the first
    /// two as the testbed's `ldapsearch -LLL -x -H ldap://vm:2135 -b o=glue`
    /// printed them, with more attributes), folded lines, a comment, another
    /// interface, another class, a base64 value and an attribute option.
    const LDIF: &str = "\
dn: GLUE2EndpointID=urn:ogf:Endpoint:vm:ldapglue2:2135,GLUE2ServiceID=urn:ogf:
 ComputingService:vm:arex,GLUE2GroupID=services,o=glue
objectClass: GLUE2Endpoint
objectClass: GLUE2ComputingEndpoint
GLUE2EndpointURL: ldap://vm:2135/o=glue
GLUE2EndpointInterfaceName: org.nordugrid.ldapglue2

dn: GLUE2EndpointID=urn:ogf:ComputingEndpoint:vm:rest:https://vm:443/arex,GLUE
 2ServiceID=urn:ogf:ComputingService:vm:arex,GLUE2GroupID=services,o=glue
objectClass: GLUE2Endpoint
objectClass: GLUE2ComputingEndpoint
GLUE2EndpointID: urn:ogf:ComputingEndpoint:vm:rest:https://vm:443/arex
GLUE2EndpointURL: https://vm:443/arex
GLUE2EndpointInterfaceName: org.nordugrid.arcrest
GLUE2EndpointHealthState: ok

# an EMI-ES endpoint of the same CE
dn: GLUE2EndpointID=urn:ogf:ComputingEndpoint:vm:emies:https://vm:443/arex,o=glue
objectClass: GLUE2ComputingEndpoint
GLUE2EndpointURL: https://vm:443/arex
GLUE2EndpointInterfaceName: org.ogf.glue.emies.activitycreation

dn: GLUE2ShareID=urn:ogf:ComputingShare:vm:fork,o=glue
objectClass: GLUE2ComputingShare
GLUE2ShareID: urn:ogf:ComputingShare:vm:fork

dn: GLUE2EndpointID=second,o=glue
objectClass: GLUE2ComputingEndpoint
GLUE2EndpointURL:: aHR0cHM6Ly9jZTIuZXhhbXBsZS5vcmc6ODQ0My9hcmV4
GLUE2EndpointInterfaceName;x-lang: org.nordugrid.arcrest
";

    #[test]
    fn arc_rest_endpoints_are_read_from_ldif() {
        let all = parse_ldif(LDIF).unwrap();
        assert_eq!(all.len(), 4, "{all:?}");
        let rest = arc_rest(all);
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].url, "https://vm:443/arex");
        assert_eq!(rest[0].id, "urn:ogf:ComputingEndpoint:vm:rest:https://vm:443/arex");
        assert_eq!(rest[0].health.as_deref(), Some("ok"));
        assert_eq!(rest[0].site_name(), "arc-vm-443");
        assert_eq!(rest[1].url, "https://ce2.example.org:8443/arex");
        assert_eq!(rest[1].site_name(), "arc-ce2-example-org-8443");
    }

    #[test]
    fn bad_ldif_is_an_error_with_its_place() {
        let e = parse_ldif("objectClass: GLUE2ComputingEndpoint\nno colon here\n").unwrap_err();
        assert_eq!(
            e,
            DiscoveryError::Syntax {
                line: 2,
                column: 14,
                message: "expected `attribute: value`".into()
            }
        );
        let e = parse_ldif(" folded first\n").unwrap_err();
        assert!(matches!(e, DiscoveryError::Syntax { line: 1, .. }), "{e}");
        let e = parse_ldif("GLUE2EndpointURL:: %%%\n").unwrap_err();
        assert!(e.to_string().contains("base64"), "{e}");
    }

    proptest::proptest! {
        /// Whatever a listing holds, reading it ends in endpoints or an
        /// error placed in the text, never a panic.
        #[test]
        fn any_text_reads_or_is_placed(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::string::string_regex("[A-Za-z2;]{0,12}:{1,2} ?[ -~]{0,30}").unwrap(),
                    proptest::string::string_regex(" [ -~]{0,20}").unwrap(),
                    proptest::string::string_regex("#[ -~]{0,10}").unwrap(),
                    proptest::string::string_regex("[^\n]{0,20}").unwrap(),
                    proptest::strategy::Just(String::new()),
                ],
                0..30,
            )
        ) {
            let text = lines.join("\n");
            match parse_ldif(&text) {
                Ok(_) => {}
                Err(DiscoveryError::Syntax { line, column, .. }) => {
                    proptest::prop_assert!(line >= 1 && line <= lines.len().max(1), "line {line}");
                    proptest::prop_assert!(column >= 1);
                }
                Err(e) => proptest::prop_assert!(false, "{e}"),
            }
        }
    }

    #[test]
    fn a_url_without_a_port_is_named_by_https_port() {
        let e = Endpoint {
            id: String::new(),
            url: "https://CE.Example.org/arex".into(),
            interface: ARC_REST.into(),
            health: None,
        };
        assert_eq!(e.site_name(), "arc-ce-example-org-443");
    }
}
