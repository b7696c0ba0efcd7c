//! Reading the record `brokk serve` keeps (`record = ...` in its
//! configuration): the jobs it accepted, when, where and how long the ones
//! that ended ran, as SWF records, and the sites with the size they
//! reported, so an experiment can replay real submissions against another
//! platform or policy, or on the recorded sites themselves. The format is
//! described in `brokk_server::record`.

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
    #[serde(default)]
    id: String,
    site: Option<String>,
    total_slots: Option<u32>,
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

/// What a record holds, ready for an experiment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Replay {
    /// The accepted jobs in order of acceptance, as SWF records; a job that
    /// ended at a site has that site's number as its partition.
    pub jobs: Vec<SwfJob>,
    /// The sites, numbered from 1 in the order the record names them, with
    /// the size each last reported (`None` if it never did).
    pub sites: Vec<(i64, String, Option<u32>)>,
}

/// Reads a record: jobs with size from their processors (1 when they state
/// none), requested time from their wall time (an hour when they state
/// none), run time as recorded for a job that finished, its requested time
/// otherwise; each owner becomes a user number. Unknown events are skipped.
pub fn read(reader: impl BufRead) -> Result<Replay, ReplayError> {
    let mut jobs: Vec<SwfJob> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut users: HashMap<String, i64> = HashMap::new();
    let mut sites: Vec<(i64, String, Option<u32>)> = Vec::new();
    let site_number = |sites: &mut Vec<(i64, String, Option<u32>)>, name: &str| -> usize {
        match sites.iter().position(|(_, n, _)| n == name) {
            Some(k) => k,
            None => {
                sites.push((sites.len() as i64 + 1, name.to_string(), None));
                sites.len() - 1
            }
        }
    };
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
                if let Some(site) = &e.site {
                    let at = site_number(&mut sites, site);
                    jobs[k].partition = sites[at].0;
                }
                // A job that exited non-zero ran too, for as long as it did.
                if let (Some(state @ ("finished" | "failed")), Some(s), Some(t)) =
                    (e.state.as_deref(), e.started, e.ended)
                {
                    jobs[k].run = (t - s).max(1);
                    jobs[k].wait = (s - jobs[k].submit).max(0);
                    jobs[k].status = i64::from(state == "finished");
                }
            }
            "site" => {
                let site = e.site.ok_or_else(|| fail("a site event needs `site`".into()))?;
                let k = site_number(&mut sites, &site);
                if let Some(n) = e.total_slots.filter(|&n| n > 0) {
                    sites[k].2 = Some(n);
                }
            }
            _ => {}
        }
    }
    Ok(Replay { jobs, sites })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_jobs_become_records_with_their_recorded_run_times() {
        let text = r#"{"event":"site","at":90,"site":"t","available":true,"total_slots":8,"benchmarks":[]}
{"event":"accepted","at":100,"id":"a","owner":"ann","job":{"executable":"x","cpus":4,"wall_time":600},"preferences":{}}
{"event":"accepted","at":105,"id":"b","owner":"bob","job":{"executable":"y"},"preferences":{}}
{"event":"ended","at":400,"id":"a","state":"finished","site":"s","started":110,"ended":400,"exit_code":0}
{"event":"site","at":500,"site":"t","available":false,"reason":"down"}
{"event":"something-new","id":"c"}
"#;
        let Replay { jobs, sites } = read(text.as_bytes()).unwrap();
        assert_eq!(sites, [(1, "t".to_string(), Some(8)), (2, "s".to_string(), None)]);
        assert_eq!((jobs[0].partition, jobs[1].partition), (2, -1));
        assert_eq!(jobs.len(), 2);
        assert_eq!((jobs[0].submit, jobs[0].req_procs, jobs[0].req_time), (100, 4, 600));
        assert_eq!((jobs[0].run, jobs[0].wait, jobs[0].user), (290, 10, 1));
        assert_eq!((jobs[1].run, jobs[1].req_procs, jobs[1].user), (3600, 1, 2));
        let bad = read("{\"event\":\"accepted\"}\n".as_bytes()).unwrap_err();
        assert_eq!(bad.line, 1);
    }
}
