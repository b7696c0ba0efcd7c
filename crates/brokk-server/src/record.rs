//! The record of what the service accepted, what the sites reported of
//! themselves, and how each job ended, for replaying a week of real
//! submissions against another policy in the simulator (`workload.record`
//! in an experiment).
//!
//! The format is JSON Lines, appended, one event per line:
//!
//! ```json
//! {"event":"site","at":1795337990,"site":"alpha","available":true,"total_slots":64,"benchmarks":[{"name":"specint2006","value":30.0}]}
//! {"event":"accepted","at":1795338000,"id":"4f1c...","owner":"ann","job":{...canonical job...},"preferences":{...}}
//! {"event":"ended","at":1795338130,"id":"4f1c...","state":"finished","site":"alpha","started":1795338004,"ended":1795338130,"exit_code":0}
//! {"event":"site","at":1795339000,"site":"alpha","available":false,"reason":"connection refused"}
//! ```
//!
//! A `site` event is written when the service first hears from a site and
//! whenever its size or availability changes. Times are Unix seconds. A job
//! line is written after the database holds what it says; a crash may lose
//! the last lines, never add wrong ones.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use brokk_model::{Job, ResourceInfo, Time};
use brokk_proto::wire::BrokerJob;

/// Appends events to the record file.
#[derive(Debug)]
pub struct Recorder {
    file: Mutex<std::fs::File>,
    /// What was last recorded of each site: its size, or `None` when it
    /// was unavailable.
    sites: Mutex<HashMap<String, Option<u32>>>,
}

impl Recorder {
    /// Opens (creating if needed) the record at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder {
            file: Mutex::new(file),
            sites: Mutex::default(),
        })
    }

    fn write(&self, line: serde_json::Value) {
        let Ok(mut f) = self.file.lock() else { return };
        if let Err(e) = writeln!(f, "{line}") {
            tracing::warn!("writing the record: {e}");
        }
    }

    /// A job accepted, as described, with its preferences (JSON text).
    pub fn accepted(&self, v: &BrokerJob, job: &Job, prefs: &str) {
        let prefs: serde_json::Value = serde_json::from_str(prefs).unwrap_or_default();
        self.write(serde_json::json!({
            "event": "accepted", "at": v.submitted.0, "id": v.id, "owner": v.owner,
            "job": job, "preferences": prefs,
        }));
    }

    /// What site `name` answered at `at` (its information, or why there is
    /// none), if its size or availability changed since the last record.
    pub fn site(&self, name: &str, at: Time, answer: Result<&ResourceInfo, String>) {
        let now = answer.as_ref().ok().map(|i| i.total_slots);
        {
            let Ok(mut last) = self.sites.lock() else { return };
            if last.get(name) == Some(&now) {
                return;
            }
            last.insert(name.to_string(), now);
        }
        self.write(match answer {
            Ok(info) => serde_json::json!({
                "event": "site", "at": at.0, "site": name, "available": true,
                "total_slots": info.total_slots, "benchmarks": info.benchmarks,
            }),
            Err(reason) => serde_json::json!({
                "event": "site", "at": at.0, "site": name, "available": false, "reason": reason,
            }),
        });
    }

    /// A job that ended.
    pub fn ended(&self, v: &BrokerJob) {
        self.write(serde_json::json!({
            "event": "ended", "at": v.ended.map(|t| t.0), "id": v.id, "state": v.state(),
            "site": v.site, "started": v.started.map(|t| t.0), "ended": v.ended.map(|t| t.0),
            "exit_code": v.exit_code,
        }));
    }
}
