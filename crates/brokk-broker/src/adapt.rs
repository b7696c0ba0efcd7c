//! Job queue adaptation (seed 003, 3.3): while a job waits, keep looking for a
//! resource that would deliver it sooner, counting restaging and a restart from
//! scratch, and move it when the gain beats a margin. A job that has started is
//! never moved.

use brokk_model::{Duration, Job, JobPreferences, Time};

use crate::predict::{Predictor, STANDARD_PREDICTOR};
use crate::select::rank;
use crate::site::{JobHandle, JobState, Site, SiteError};
use crate::submit::{submit, SubmitOptions};

/// A job the broker watches.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracked {
    /// The job as submitted.
    pub job: Job,
    /// Its preferences.
    pub prefs: JobPreferences,
    /// Whose job it is.
    pub owner: String,
    /// The site it is on.
    pub endpoint: String,
    /// The site's handle.
    pub handle: JobHandle,
}

/// How eager adaptation is.
#[derive(Clone, Copy)]
pub struct AdaptOptions<'a> {
    /// Move only when the predicted delivery is earlier by at least this much.
    pub margin: Duration,
    /// How deliveries are predicted.
    pub predictor: &'a dyn Predictor,
}

impl Default for AdaptOptions<'static> {
    fn default() -> Self {
        AdaptOptions {
            margin: Duration::minutes(10),
            predictor: &STANDARD_PREDICTOR,
        }
    }
}

/// What one adaptation step did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adapted {
    /// Stayed where it is.
    Stayed,
    /// Has started (or ended), so it is no longer a candidate.
    Started,
    /// Moved to another site.
    Moved {
        /// Where it was.
        from: String,
        /// Where it is now.
        to: String,
    },
}

/// One adaptation step for `t` at `now`: re-rank, and move the job if another site
/// would deliver it earlier by the margin. On a move `t` is updated.
pub fn adapt(
    t: &mut Tracked,
    sites: &mut [&mut dyn Site],
    now: Time,
    opts: AdaptOptions,
) -> Result<Adapted, SiteError> {
    let Some(cur) = sites.iter().position(|s| s.endpoint() == t.endpoint) else {
        return Err(SiteError::Unknown);
    };
    let expected_start = match sites[cur].status(&t.handle)? {
        JobState::Queued { expected_start } => expected_start,
        _ => return Ok(Adapted::Started),
    };
    let infos: Vec<_> = sites.iter().filter_map(|s| s.info().ok()).collect();
    let ranking = rank(&t.job, &t.prefs, &infos, now, opts.predictor);
    let Some(here) = ranking.ranked.iter().find(|r| infos[r.index].endpoint == t.endpoint) else {
        return Ok(Adapted::Stayed);
    };
    // Here the job is already staged in and queued: what remains is its wait, then
    // execution and stage-out.
    let remaining = expected_start.map_or(here.prediction.queue_wait, |s| Duration((s - now).0.max(0)))
        + here.prediction.execution.unwrap_or(Duration::ZERO)
        + here.prediction.stage_out.unwrap_or(Duration::ZERO);
    let Some(best) = ranking.ranked.iter().find(|r| infos[r.index].endpoint != t.endpoint) else {
        return Ok(Adapted::Stayed);
    };
    // Elsewhere it starts over: stage-in, wait, execution, stage-out.
    if best.prediction.ttd() + opts.margin > remaining {
        return Ok(Adapted::Stayed);
    }
    // Cancel first so the job can never run twice; resubmit through the normal path,
    // which falls back over all sites (the old one included) if the best refuses.
    sites[cur].cancel_job(&t.owner, &t.handle)?;
    let s = submit(
        &t.job,
        &t.prefs,
        &t.owner,
        sites,
        now,
        SubmitOptions {
            predictor: opts.predictor,
            ..SubmitOptions::default()
        },
    )
    .map_err(|e| SiteError::Refused {
        site: t.endpoint.clone(),
        reason: e.to_string(),
    })?;
    let from = std::mem::replace(&mut t.endpoint, s.endpoint.clone());
    t.handle = s.handle;
    if from == t.endpoint {
        return Ok(Adapted::Stayed);
    }
    Ok(Adapted::Moved {
        from,
        to: t.endpoint.clone(),
    })
}
