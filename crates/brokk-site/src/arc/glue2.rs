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

impl Glue2 {
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

    #[test]
    fn shares_as_a_list_add_up() {
        let doc = json!({"ComputingService": {"ComputingShare": [{"FreeSlots": 3}, {"FreeSlots": "4"}]}});
        assert_eq!(Glue2::from_json(&doc).free_slots, Some(7));
        assert_eq!(Glue2::from_json(&json!({})), Glue2::default());
    }
}
