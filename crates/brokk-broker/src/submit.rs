//! Submission with fallback (seed 003, Algorithm 1): rank the sites, optionally
//! reserve on the best few, submit to the best and fall back to the next on
//! failure; release every reservation that is not used.

use brokk_core::{Reply, Request, ReservationId};
use brokk_model::{Duration, Job, JobPreferences, ResourceInfo, Time};

use crate::predict::{Prediction, Predictor, STANDARD_PREDICTOR};
use crate::select::{assess, selector_for, validate_at, Invalid, Mismatch, Ranked, Ranking};
use crate::site::{JobHandle, Site, SiteError};

/// How to submit.
#[derive(Clone, Copy)]
pub struct SubmitOptions<'a> {
    /// Reserve on this many of the best-ranked sites before choosing (0: none).
    pub reserve_top_k: usize,
    /// How long a reservation may start after the earliest possible start.
    pub reservation_window: Duration,
    /// How deliveries are predicted.
    pub predictor: &'a dyn Predictor,
}

impl Default for SubmitOptions<'static> {
    fn default() -> Self {
        SubmitOptions {
            reserve_top_k: 0,
            reservation_window: Duration::hours(24),
            predictor: &STANDARD_PREDICTOR,
        }
    }
}

/// Where the job went.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The chosen site.
    pub endpoint: String,
    /// The site's handle for the job.
    pub handle: JobHandle,
    /// The reservation the job runs in, if any.
    pub reservation: Option<ReservationId>,
    /// The prediction the choice was made on.
    pub prediction: Prediction,
    /// Sites tried before it, or that could not be asked, and why.
    pub failed: Vec<(String, SiteError)>,
}

/// Why a job could not be submitted anywhere.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SubmitError {
    /// The job itself is not acceptable.
    #[error("{0}")]
    Invalid(Invalid),
    /// No site could take it: those that cannot run it, and those that failed.
    #[error("no site took the job ({} unsuitable, {} failed)", excluded.len(), failed.len())]
    NoSite {
        /// Sites that cannot run the job, with every reason.
        excluded: Vec<(String, Vec<Mismatch>)>,
        /// Sites that failed when asked, with the error.
        failed: Vec<(String, SiteError)>,
    },
}

impl SubmitError {
    /// Whether the job should be kept for another try: a site that did not
    /// answer may be the one able to run it.
    pub fn worth_retrying(&self) -> bool {
        matches!(self, SubmitError::NoSite { failed, .. } if failed.iter().any(|(_, e)| e.is_unavailable()))
    }
}

/// Submits `job` for `owner` to the best of `sites` at `now`.
pub fn submit(
    job: &Job,
    prefs: &JobPreferences,
    owner: &str,
    sites: &mut [&mut dyn Site],
    now: Time,
    opts: SubmitOptions<'_>,
) -> Result<Submission, SubmitError> {
    let mut failed = Vec::new();
    // The information of each site that answered, and which site it came from.
    let mut infos = Vec::new();
    let mut site_of = Vec::new();
    for (k, s) in sites.iter().enumerate() {
        match s.info() {
            Ok(i) => {
                infos.push(i);
                site_of.push(k);
            }
            Err(e) => failed.push((s.endpoint().to_string(), e)),
        }
    }
    submit_informed(job, prefs, owner, sites, (&infos, &site_of), failed, now, opts)
}

/// [`submit`] with the sites' information already at hand: `infos[i]` is
/// what site `site_of[i]` published (a driver with its own information
/// cache passes it without copies); `failed` lists sites that could not be
/// asked.
#[allow(clippy::too_many_arguments)] // submit's arguments, and the information
pub fn submit_informed(
    job: &Job,
    prefs: &JobPreferences,
    owner: &str,
    sites: &mut [&mut dyn Site],
    (infos, site_of): (&[ResourceInfo], &[usize]),
    mut failed: Vec<(String, SiteError)>,
    now: Time,
    opts: SubmitOptions<'_>,
) -> Result<Submission, SubmitError> {
    validate_at(job, now).map_err(SubmitError::Invalid)?;
    let Ranking { mut ranked, excluded } = assess(job, prefs, infos, now, opts.predictor);
    // `rank`'s order: by score, ties to the site listed first.
    let order = |r: &Ranked| (r.score, r.index);
    // The reservation held for each candidate, when the sites were asked for any.
    let mut held: Vec<Option<ReservationId>> = Vec::new();
    let reserving = opts.reserve_top_k > 0 && prefs.use_reservations != Some(false);
    if reserving {
        ranked.sort_by_key(order);
        held = vec![None; ranked.len()];
        let selector = selector_for(prefs.objective());
        for (r, reservation) in ranked.iter_mut().zip(&mut held).take(opts.reserve_top_k) {
            if !infos[r.index].reservations {
                continue;
            }
            let earliest = now + r.prediction.stage_in.unwrap_or(Duration::ZERO);
            let req = Request {
                amount: job.cpus.unwrap_or(1),
                duration: r.prediction.requested_wall_time.unwrap_or(Duration::hours(1)),
                earliest,
                latest: earliest + opts.reservation_window,
                flexible: false,
            };
            // Two-phase: a preliminary hold that the submission commits and that lapses if the broker dies.
            let hold = Some(now + Duration::minutes(10));
            if let Ok(Reply::Granted { id, start }) = sites[site_of[r.index]].reserve(owner, &req, hold) {
                *reservation = Some(id);
                r.prediction = opts.predictor.predict(job, prefs, &infos[r.index], Some(start), now);
                r.score = selector.score(&r.prediction);
            }
        }
        let mut both: Vec<(Ranked, Option<ReservationId>)> = ranked.into_iter().zip(held).collect();
        both.sort_by_key(|(r, _)| (r.score, site_of[r.index]));
        (ranked, held) = both.into_iter().unzip();
    } else if let Some(best) = (0..ranked.len()).min_by_key(|&k| order(&ranked[k])) {
        // Most submissions go to the best: the rest are put in order only
        // when it refuses.
        ranked.swap(0, best);
    }

    let mut chosen = None;
    for i in 0..ranked.len() {
        if i == 1 && !reserving {
            ranked[1..].sort_by_key(order);
        }
        let site = site_of[ranked[i].index];
        let reservation = held.get(i).copied().flatten();
        match send_to(job, owner, sites[site], &ranked[i].prediction, reservation) {
            Ok(handle) => {
                chosen = Some((i, handle));
                break;
            }
            Err(e) => failed.push((sites[site].endpoint().to_string(), e)),
        }
    }

    // Step 14: release every reservation that the job does not use.
    for (i, (r, reservation)) in ranked.iter().zip(&held).enumerate() {
        if let (Some(id), false) = (reservation, chosen.as_ref().is_some_and(|(c, _)| *c == i)) {
            let _ = sites[site_of[r.index]].cancel(owner, *id);
        }
    }

    match chosen {
        Some((i, handle)) => {
            let r = ranked.swap_remove(i);
            Ok(Submission {
                endpoint: infos[r.index].endpoint.clone(),
                handle,
                reservation: held.get(i).copied().flatten(),
                prediction: r.prediction,
                failed,
            })
        }
        None => Err(SubmitError::NoSite { excluded, failed }),
    }
}

/// Submits `job` to `site` with the predicted (conservative) execution time
/// as its wall time, into `reservation` when one is held there.
fn send_to(
    job: &Job,
    owner: &str,
    site: &mut dyn Site,
    prediction: &Prediction,
    reservation: Option<ReservationId>,
) -> Result<JobHandle, SiteError> {
    match prediction.requested_wall_time {
        Some(w) if job.wall_time != Some(w) => {
            let mut to_send = job.clone();
            to_send.wall_time = Some(w);
            site.submit(owner, &to_send, reservation)
        }
        _ => site.submit(owner, job, reservation),
    }
}
