//! What the broker core's submission ([ET-brokering]'s Algorithm 1: rank
//! the sites, optionally hold on the best few, send to the best and fall
//! back to the next on failure, give back every hold not used; written in
//! `broker`) shares with its drivers: what a hold asks, how long it lasts,
//! and why a job went nowhere.

use brokk_core::Request;
use brokk_model::{Duration, Job, Time};

use crate::predict::Prediction;
use crate::select::{Invalid, Mismatch};
use crate::site::SiteError;

/// How long the preliminary hold on a candidate site lasts: the
/// submission commits it, and it lapses by itself if the broker dies.
pub const HOLD_FOR: Duration = Duration::minutes(10);

/// What a job that reserves before it is sent asks of a candidate site,
/// predicted as `prediction` there at `now`: its processors for its
/// requested wall time (an hour when none), from when its input can be
/// staged in to `window` later.
pub fn hold_request(job: &Job, prediction: &Prediction, now: Time, window: Duration) -> Request {
    let earliest = now + prediction.stage_in.unwrap_or(Duration::ZERO);
    Request {
        amount: job.cpus.unwrap_or(1),
        duration: prediction.requested_wall_time.unwrap_or(Duration::hours(1)),
        earliest,
        latest: earliest + window,
        flexible: false,
    }
}

/// Sets in `job`'s environment what its batch system would have set, from
/// what the broker knows and the site cannot: `BROKK_JOB_ID`, the id its
/// user sees at the broker (the site's own number is another); and for a
/// job written for Slurm (`format` `slurm`), `SLURM_JOB_ID` (the same id,
/// as `sbatch` answered), `SLURM_NTASKS` and `SLURM_CPUS_PER_TASK` as its
/// directives asked. A variable the job already carries is kept: a job a
/// broker above sent keeps the id its user saw there, and a user's own
/// setting stands.
pub fn with_batch_variables(job: &mut Job, id: &str, format: &str) {
    let cpt = job.cpus_per_task.unwrap_or(1).max(1);
    let mut vars = vec![("BROKK_JOB_ID", id.to_string())];
    if format == "slurm" {
        vars.extend([
            ("SLURM_JOB_ID", id.to_string()),
            ("SLURM_NTASKS", (job.cpus.unwrap_or(1).max(1) / cpt).max(1).to_string()),
            ("SLURM_CPUS_PER_TASK", cpt.to_string()),
        ]);
    }
    for (name, value) in vars {
        if !job.environment.iter().any(|v| v.name == name) {
            job.environment.push(brokk_model::EnvVar {
                name: name.into(),
                value,
            });
        }
    }
}

/// Why a job could not be submitted anywhere.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// The job itself is not acceptable.
    #[error("{0}")]
    Invalid(Invalid),
    /// No site could take it: those that cannot run it, and those that failed.
    #[error("no site took the job ({} unsuitable, {} failed){}", excluded.len(), failed.len(), why_no_site(excluded, failed))]
    NoSite {
        /// Sites that cannot run the job, with every reason.
        excluded: Vec<(String, Vec<Mismatch>)>,
        /// Sites that failed when asked, with the error.
        failed: Vec<(String, SiteError)>,
    },
}

/// Each site's reason, as many as a line can hold: `: a: why; b failed:
/// why; ...`.
fn why_no_site(excluded: &[(String, Vec<Mismatch>)], failed: &[(String, SiteError)]) -> String {
    const SHOWN: usize = 5;
    let mut each: Vec<String> = excluded
        .iter()
        .map(|(site, m)| {
            let words: Vec<String> = m.iter().map(ToString::to_string).collect();
            format!("{site}: {}", words.join(", "))
        })
        .chain(failed.iter().map(|(site, e)| format!("{site} failed: {e}")))
        .collect();
    if each.is_empty() {
        return String::new();
    }
    let more = each.len().saturating_sub(SHOWN);
    each.truncate(SHOWN);
    let tail = if more > 0 {
        format!("; and {more} more")
    } else {
        String::new()
    };
    format!(": {}{tail}", each.join("; "))
}

impl SubmitError {
    /// Whether the job should be kept for another try: a site that did not
    /// answer may be the one able to run it.
    pub fn worth_retrying(&self) -> bool {
        matches!(self, SubmitError::NoSite { failed, .. } if failed.iter().any(|(_, e)| e.is_unavailable()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(job: &Job) -> Vec<(String, String)> {
        job.environment
            .iter()
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect()
    }

    #[test]
    fn a_job_finds_the_id_its_user_sees_and_slurm_jobs_their_variables() {
        let mut plain = Job::default();
        with_batch_variables(&mut plain, "j42", "condor");
        assert_eq!(env(&plain), [("BROKK_JOB_ID".to_string(), "j42".to_string())]);
        // `--ntasks=4 --cpus-per-task=2`: 8 processors.
        let mut slurm = Job {
            cpus: Some(8),
            cpus_per_task: Some(2),
            ..Job::default()
        };
        with_batch_variables(&mut slurm, "j43", "slurm");
        let e = env(&slurm);
        for (name, value) in [
            ("SLURM_JOB_ID", "j43"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_CPUS_PER_TASK", "2"),
        ] {
            assert!(e.contains(&(name.to_string(), value.to_string())), "{e:?}");
        }
        // A broker below keeps what the broker above set.
        with_batch_variables(&mut slurm, "site-7", "json");
        assert_eq!(env(&slurm).iter().filter(|(n, _)| n == "BROKK_JOB_ID").count(), 1);
        assert!(env(&slurm).contains(&("BROKK_JOB_ID".to_string(), "j43".to_string())));
    }
}
