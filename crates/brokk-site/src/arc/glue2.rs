//! A CE's GLUE 2 document (A-REX's REST `/info`, JSON) reduced to what the
//! agent plans and publishes with. The JSON is converted from XML, so an
//! element that may repeat is an object when it occurs once and a list when
//! it occurs more often; the reader accepts both.

use serde_json::Value;

/// What the agent reads of a CE's GLUE 2 document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Glue2 {
    /// The computing manager's total slots.
    pub total_slots: Option<u32>,
    /// Free slots over the computing shares.
    pub free_slots: Option<u32>,
    /// Running jobs of the computing service.
    pub running: Option<u32>,
    /// Waiting jobs of the computing service.
    pub waiting: Option<u32>,
    /// The REST endpoint's health state (`ok`, `warning`, `critical`, ...).
    pub health: Option<String>,
    /// The LRMS (`fork`, `slurm`, ...).
    pub lrms: Option<String>,
    /// Published benchmarks: (type, value).
    pub benchmarks: Vec<(String, f64)>,
    /// The computing shares (queues).
    pub shares: Vec<Glue2Share>,
}

/// One GLUE 2 ComputingShare.
#[derive(Debug, Clone, PartialEq)]
pub struct Glue2Share {
    /// The queue jobs name (`MappingQueue`, else the share's `Name`).
    pub name: String,
    /// Its free slots.
    pub free_slots: Option<u32>,
    /// Its longest wall time, seconds.
    pub max_wall_time: Option<u64>,
}

/// The first value under `key` anywhere in `v`, depth first.
pub(crate) fn find<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|x| find(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

/// Every object under `key` anywhere in `v` (a list's items one by one).
fn all<'a>(v: &'a Value, key: &str, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == key {
                    match x {
                        Value::Array(a) => out.extend(a.iter()),
                        x => out.push(x),
                    }
                } else {
                    all(x, key, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| all(x, key, out)),
        _ => {}
    }
}

/// A number, written as one or as a string.
pub(crate) fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn count(v: Option<&Value>) -> Option<u32> {
    v.and_then(number).filter(|n| *n >= 0.0).map(|n| n as u32)
}

/// The first value of attribute `name` (lower case) of an LDAP entry.
fn attr<'a>(e: &'a super::ldap::Entry, name: &str) -> Option<&'a str> {
    e.get(name).and_then(|v| v.first()).map(String::as_str)
}

/// Whether an LDAP entry is of GLUE 2 class `class`.
fn is(e: &super::ldap::Entry, class: &str) -> bool {
    e.get("objectclass")
        .is_some_and(|c| c.iter().any(|c| c.eq_ignore_ascii_case(class)))
}

/// A count in an LDAP attribute.
fn ldap_count(e: &super::ldap::Entry, name: &str) -> Option<u32> {
    attr(e, name)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|n| *n >= 0.0)
        .map(|n| n as u32)
}

impl Glue2 {
    /// Reads a CE's GLUE 2 from its LDAP rendering (`o=glue`): the
    /// entries of the computing service whose ARC REST endpoint is `url`
    /// (all entries when none names it, as on a CE's own information
    /// system).
    pub fn from_ldap(entries: &[super::ldap::Entry], url: &str) -> Glue2 {
        let rest = |e: &&super::ldap::Entry| {
            is(e, "GLUE2ComputingEndpoint") && attr(e, "glue2endpointinterfacename") == Some("org.nordugrid.arcrest")
        };
        let endpoint = entries
            .iter()
            .filter(rest)
            .find(|e| attr(e, "glue2endpointurl") == Some(url))
            .or_else(|| entries.iter().find(rest));
        // The service is the endpoint's parent in the tree.
        let service_dn = endpoint
            .and_then(|e| attr(e, "dn"))
            .and_then(|dn| dn.split_once(',').map(|(_, parent)| parent.to_string()));
        let mine: Vec<&super::ldap::Entry> = entries
            .iter()
            .filter(|e| match (&service_dn, attr(e, "dn")) {
                (Some(s), Some(dn)) => dn.ends_with(s.as_str()),
                _ => true,
            })
            .collect();
        let of = |class: &'static str| mine.iter().copied().filter(move |e| is(e, class));
        let service = of("GLUE2ComputingService").next();
        let manager = of("GLUE2ComputingManager").next();
        let shares: Vec<Glue2Share> = of("GLUE2ComputingShare")
            .filter_map(|s| {
                Some(Glue2Share {
                    name: attr(s, "glue2computingsharemappingqueue")
                        .or_else(|| attr(s, "glue2entityname"))?
                        .to_string(),
                    free_slots: ldap_count(s, "glue2computingsharefreeslots"),
                    max_wall_time: ldap_count(s, "glue2computingsharemaxwalltime")
                        .filter(|n| *n > 0)
                        .map(u64::from),
                })
            })
            .collect();
        let free: Vec<u32> = shares.iter().filter_map(|s| s.free_slots).collect();
        Glue2 {
            total_slots: manager.and_then(|m| ldap_count(m, "glue2computingmanagertotalslots")),
            free_slots: (!free.is_empty()).then(|| free.iter().sum()),
            running: service.and_then(|s| ldap_count(s, "glue2computingservicerunningjobs")),
            waiting: service.and_then(|s| ldap_count(s, "glue2computingservicewaitingjobs")),
            health: endpoint
                .and_then(|e| attr(e, "glue2endpointhealthstate"))
                .map(str::to_string),
            lrms: manager
                .and_then(|m| attr(m, "glue2managerproductname"))
                .map(str::to_string),
            benchmarks: of("GLUE2Benchmark")
                .filter_map(|b| {
                    let value = attr(b, "glue2benchmarkvalue")?.trim().parse().ok()?;
                    Some((attr(b, "glue2benchmarktype")?.to_string(), value))
                })
                .collect(),
            shares,
        }
    }

    /// Reads the document.
    pub fn from_json(doc: &Value) -> Glue2 {
        let service = find(doc, "ComputingService").unwrap_or(doc);
        let manager = find(service, "ComputingManager");
        let mut shares = Vec::new();
        all(service, "ComputingShare", &mut shares);
        let free: Vec<u32> = shares.iter().filter_map(|s| count(s.get("FreeSlots"))).collect();
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let listed = shares
            .iter()
            .filter_map(|s| {
                Some(Glue2Share {
                    name: text(s.get("MappingQueue")).or_else(|| text(s.get("Name")))?,
                    free_slots: count(s.get("FreeSlots")),
                    max_wall_time: s
                        .get("MaxWallTime")
                        .and_then(number)
                        .filter(|n| *n > 0.0)
                        .map(|n| n as u64),
                })
            })
            .collect();
        let mut endpoints = Vec::new();
        all(service, "ComputingEndpoint", &mut endpoints);
        let health = endpoints
            .iter()
            .find(|e| e.get("InterfaceName").and_then(Value::as_str) == Some("org.nordugrid.arcrest"))
            .and_then(|e| e.get("HealthState"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut benchmarks = Vec::new();
        let mut found = Vec::new();
        all(service, "Benchmark", &mut found);
        for b in found {
            if let (Some(t), Some(v)) = (b.get("Type").and_then(Value::as_str), b.get("Value").and_then(number)) {
                benchmarks.push((t.to_string(), v));
            }
        }
        Glue2 {
            total_slots: manager.and_then(|m| count(m.get("TotalSlots"))),
            free_slots: (!free.is_empty()).then(|| free.iter().sum()),
            running: count(service.get("RunningJobs")),
            waiting: count(service.get("WaitingJobs")),
            health,
            lrms: manager
                .and_then(|m| m.get("ProductName"))
                .and_then(Value::as_str)
                .map(str::to_string),
            benchmarks,
            shares: listed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_fork_ce_document_is_read() {
        // Shaped as A-REX 6.17 answers (one share, six endpoints).
        let doc = json!({"Domains": {"AdminDomain": {"Services": {"ComputingService": {
            "RunningJobs": 1, "WaitingJobs": "2",
            "ComputingEndpoint": [
                {"InterfaceName": "org.ogf.glue.emies.activitymanagement", "HealthState": "critical"},
                {"InterfaceName": "org.nordugrid.arcrest", "HealthState": "ok"}
            ],
            "ComputingShare": {"MappingQueue": "fork", "FreeSlots": 2, "MaxWallTime": "3600"},
            "ComputingManager": {"ProductName": "fork", "TotalSlots": 4,
                "ExecutionEnvironments": {"ExecutionEnvironment": {"Benchmark": {"Type": "HEPSPEC", "Value": 1.5}}}}
        }}}}});
        let g = Glue2::from_json(&doc);
        assert_eq!(g.total_slots, Some(4));
        assert_eq!(g.free_slots, Some(2));
        assert_eq!((g.running, g.waiting), (Some(1), Some(2)));
        assert_eq!(g.health.as_deref(), Some("ok"));
        assert_eq!(g.lrms.as_deref(), Some("fork"));
        assert_eq!(g.benchmarks, vec![("HEPSPEC".to_string(), 1.5)]);
        assert_eq!(
            g.shares,
            vec![Glue2Share {
                name: "fork".into(),
                free_slots: Some(2),
                max_wall_time: Some(3600)
            }]
        );
    }

    fn entry(pairs: &[(&str, &str)]) -> crate::arc::ldap::Entry {
        let mut e = crate::arc::ldap::Entry::new();
        for (k, v) in pairs {
            e.entry(k.to_ascii_lowercase()).or_default().push(v.to_string());
        }
        e
    }

    #[test]
    fn a_ces_ldap_rendering_is_read_and_only_its_own_service() {
        // As the testbed's ARC 6.17 information system publishes a fork CE,
        // beside another service's share that must not count.
        let svc = "GLUE2ServiceID=urn:ogf:ComputingService:vm:arex,GLUE2GroupID=services,o=glue";
        let entries = vec![
            entry(&[
                ("dn", svc),
                ("objectClass", "GLUE2ComputingService"),
                ("GLUE2ComputingServiceRunningJobs", "1"),
                ("GLUE2ComputingServiceWaitingJobs", "2"),
            ]),
            entry(&[
                (
                    "dn",
                    &format!("GLUE2EndpointID=urn:ogf:ComputingEndpoint:vm:rest:https://vm:443/arex,{svc}"),
                ),
                ("objectClass", "GLUE2Endpoint"),
                ("objectClass", "GLUE2ComputingEndpoint"),
                ("GLUE2EndpointURL", "https://vm:443/arex"),
                ("GLUE2EndpointInterfaceName", "org.nordugrid.arcrest"),
                ("GLUE2EndpointHealthState", "ok"),
            ]),
            entry(&[
                ("dn", &format!("GLUE2ShareID=urn:ogf:ComputingShare:vm:fork,{svc}")),
                ("objectClass", "GLUE2ComputingShare"),
                ("GLUE2EntityName", "fork"),
                ("GLUE2ComputingShareMappingQueue", "fork"),
                ("GLUE2ComputingShareFreeSlots", "2"),
            ]),
            entry(&[
                ("dn", &format!("GLUE2ManagerID=urn:ogf:ComputingManager:vm:fork,{svc}")),
                ("objectClass", "GLUE2ComputingManager"),
                ("GLUE2ManagerProductName", "fork"),
                ("GLUE2ComputingManagerTotalSlots", "2"),
            ]),
            entry(&[
                (
                    "dn",
                    &format!("GLUE2BenchmarkID=urn:ogf:Benchmark:vm:execenv0:HEPSPEC,GLUE2ResourceID=x,{svc}"),
                ),
                ("objectClass", "GLUE2Benchmark"),
                ("GLUE2BenchmarkType", "HEPSPEC"),
                ("GLUE2BenchmarkValue", "1.0"),
            ]),
            entry(&[
                (
                    "dn",
                    "GLUE2ShareID=other,GLUE2ServiceID=other,GLUE2GroupID=services,o=glue",
                ),
                ("objectClass", "GLUE2ComputingShare"),
                ("GLUE2ComputingShareMappingQueue", "other"),
                ("GLUE2ComputingShareFreeSlots", "50"),
            ]),
        ];
        let g = Glue2::from_ldap(&entries, "https://vm:443/arex");
        assert_eq!(g.total_slots, Some(2));
        assert_eq!(g.free_slots, Some(2));
        assert_eq!((g.running, g.waiting), (Some(1), Some(2)));
        assert_eq!(g.health.as_deref(), Some("ok"));
        assert_eq!(g.lrms.as_deref(), Some("fork"));
        assert_eq!(g.benchmarks, vec![("HEPSPEC".to_string(), 1.0)]);
        assert_eq!(g.shares.len(), 1);
        assert_eq!(g.shares[0].name, "fork");
    }

    #[test]
    fn shares_as_a_list_add_up() {
        let doc = json!({"ComputingService": {"ComputingShare": [{"FreeSlots": 3}, {"FreeSlots": "4"}]}});
        assert_eq!(Glue2::from_json(&doc).free_slots, Some(7));
        assert_eq!(Glue2::from_json(&json!({})), Glue2::default());
    }
}
