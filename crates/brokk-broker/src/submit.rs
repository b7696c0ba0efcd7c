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
