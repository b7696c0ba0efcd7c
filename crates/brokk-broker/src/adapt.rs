//! Job queue adaptation's rule ([ET-brokering] 3.3): while a job waits,
//! keep looking for a resource that would deliver it sooner, counting
//! restaging and a restart from scratch, and move it when the gain beats a
//! margin. A job that has started is never moved. The broker core runs the
//! rounds (`BrokerCore::adapt`).

use brokk_model::{Duration, Job, JobPreferences, ResourceInfo, Time};

use crate::predict::Predictor;
use crate::select::rank;

/// Whether job `job` (with `prefs`), waiting at the site of `infos[here]`
/// and expected to start there at `expected_start` when the site says,
/// would be delivered at least `margin` sooner at another of `infos`: here
/// it is staged in and queued, so what remains is its wait, its execution
/// and its stage-out; elsewhere it starts over (stage-in, wait, execution,
/// stage-out). The best other site's position when it would.
#[allow(clippy::too_many_arguments)] // the job, where it is, and the rule's figures
pub fn worth_moving(
    job: &Job,
    prefs: &JobPreferences,
    infos: &[ResourceInfo],
    here: usize,
    expected_start: Option<Time>,
    now: Time,
    margin: Duration,
    predictor: &dyn Predictor,
) -> Option<usize> {
    let ranking = rank(job, prefs, infos, now, predictor);
    let at_here = ranking.ranked.iter().find(|r| r.index == here)?;
    let remaining = expected_start.map_or(at_here.prediction.queue_wait, |s| Duration((s - now).0.max(0)))
        + at_here.prediction.execution.unwrap_or(Duration::ZERO)
        + at_here.prediction.stage_out.unwrap_or(Duration::ZERO);
    let best = ranking.ranked.iter().find(|r| r.index != here)?;
    (best.prediction.ttd() + margin <= remaining).then_some(best.index)
}
