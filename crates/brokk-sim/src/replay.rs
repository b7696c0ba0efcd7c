//! Reading the record `brokk serve` keeps (`record = ...` in its
//! configuration): the jobs it accepted, when, and how long the ones that
//! ended ran, as SWF records, so an experiment can replay real submissions
//! against another platform or policy. The format is described in
//! `brokk_server::record`.

use std::collections::HashMap;
use std::io::BufRead;

use serde::Deserialize;

use crate::swf::SwfJob;

/// A record that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ReplayError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Deserialize)]
struct Event {
    event: String,
    id: String,
    at: Option<i64>,
    owner: Option<String>,
    job: Option<RecordedJob>,
    started: Option<i64>,
    ended: Option<i64>,
    state: Option<String>,
}

#[derive(Deserialize, Default)]
struct RecordedJob {
    cpus: Option<u32>,
    wall_time: Option<i64>,
}

/// The accepted jobs of a record, in order of acceptance, as SWF records:
/// size from the job's processors (1 when it states none), requested time
/// from its wall time (an hour when it states none), run time as recorded
/// for a job that finished, its requested time otherwise; each owner
/// becomes a user number. Unknown events are skipped.
pub fn read(reader: impl BufRead) -> Result<Vec<SwfJob>, ReplayError> {
    let mut jobs: Vec<SwfJob> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut users: HashMap<String, i64> = HashMap::new();
    for (n, line) in reader.lines().enumerate() {
        let fail = |message: String| ReplayError { line: n + 1, message };
        let line = line.map_err(|e| fail(e.to_string()))?;
        if line.trim().is_empty() {
            continue;
        }
        let e: Event = serde_json::from_str(&line).map_err(|e| fail(e.to_string()))?;
        match e.event.as_str() {
            "accepted" => {
                let at = e.at.ok_or_else(|| fail("an accepted event needs `at`".into()))?;
                let job = e.job.unwrap_or_default();
                let wall = job.wall_time.filter(|w| *w > 0).unwrap_or(3600);
                let next = users.len() as i64 + 1;
                let user = *users.entry(e.owner.unwrap_or_default()).or_insert(next);
                index.insert(e.id, jobs.len());
                jobs.push(SwfJob {
                    id: jobs.len() as i64 + 1,
                    submit: at,
                    wait: -1,
                    run: wall,
                    procs: i64::from(job.cpus.unwrap_or(1).max(1)),
                    req_procs: i64::from(job.cpus.unwrap_or(1).max(1)),
                    req_time: wall,
                    user,
                    partition: -1,
                    ..SwfJob::default()
                });
            }
            "ended" => {
                let Some(&k) = index.get(&e.id) else { continue };
                if let (Some("finished"), Some(s), Some(t)) = (e.state.as_deref(), e.started, e.ended) {
                    jobs[k].run = (t - s).max(1);
                    jobs[k].wait = (s - jobs[k].submit).max(0);
                    jobs[k].status = 1;
                }
            }
            _ => {}
        }
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_jobs_become_records_with_their_recorded_run_times() {
        let text = r#"{"event":"accepted","at":100,"id":"a","owner":"ann","job":{"executable":"x","cpus":4,"wall_time":600},"preferences":{}}
{"event":"accepted","at":105,"id":"b","owner":"bob","job":{"executable":"y"},"preferences":{}}
{"event":"ended","at":400,"id":"a","state":"finished","site":"s","started":110,"ended":400,"exit_code":0}
{"event":"something-new","id":"c"}
"#;
        let jobs = read(text.as_bytes()).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].submit, jobs[0].req_procs, jobs[0].req_time), (100, 4, 600));
        assert_eq!((jobs[0].run, jobs[0].wait, jobs[0].user), (290, 10, 1));
        assert_eq!((jobs[1].run, jobs[1].req_procs, jobs[1].user), (3600, 1, 2));
        let bad = read("{\"event\":\"accepted\"}\n".as_bytes()).unwrap_err();
        assert_eq!(bad.line, 1);
    }
}
