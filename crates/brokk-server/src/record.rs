//! The record of what the service accepted and how each job ended, for
//! replaying a week of real submissions against another policy in the
//! simulator (`workload.record` in an experiment).
//!
//! The format is JSON Lines, appended, one event per line:
//!
//! ```json
//! {"event":"accepted","at":1795338000,"id":"4f1c...","owner":"ann","job":{...canonical job...},"preferences":{...}}
//! {"event":"ended","at":1795338130,"id":"4f1c...","state":"finished","site":"alpha","started":1795338004,"ended":1795338130,"exit_code":0}
//! ```
//!
//! Times are Unix seconds. A line is written after the database holds what
//! it says; a crash may lose the last lines, never add wrong ones.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use brokk_model::Job;
use brokk_proto::wire::BrokerJob;

/// Appends events to the record file.
#[derive(Debug)]
pub struct Recorder {
    file: Mutex<std::fs::File>,
}

impl Recorder {
    /// Opens (creating if needed) the record at `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder { file: Mutex::new(file) })
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

    /// A job that ended.
    pub fn ended(&self, v: &BrokerJob) {
        self.write(serde_json::json!({
            "event": "ended", "at": v.ended.map(|t| t.0), "id": v.id, "state": v.state,
            "site": v.site, "started": v.started.map(|t| t.0), "ended": v.ended.map(|t| t.0),
            "exit_code": v.exit_code,
        }));
    }
}
