//! Co-allocation for a simultaneous start ([ET-interop], 3.2: Algorithms 1 and 2).
//!
//! A window [te, tl] of width delta slides through [Te, Tl]. In each iteration
//! every job without a reservation starting in the window has its old one moved
//! into it (or, failing that, cancelled) or gets a new one at its best resource
//! that can take it; the earliest next start any refusal names is remembered.
//! Jobs left without a reservation are matched by breadth-first augmenting paths
//! through resources other jobs hold (Algorithm 2: create the new reservation at
//! the end of the path first, then hand each held reservation down the path
//! without moving its start). If some job still has none, the window moves so
//! that it ends at the earliest remembered next start. On failure nothing stays
//! reserved.

use std::collections::VecDeque;

use brokk_core::{Change, Reply, Request, ReservationId};
use brokk_model::{Duration, Job, Time};

use crate::site::{JobHandle, Site, SiteError};

/// One job of a co-allocated request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoJob {
    /// Processors (or other units) to reserve.
    pub amount: u32,
    /// How long to hold them.
    pub duration: Duration,
    /// Memory per processor in MiB, used only to order jobs by size.
    pub memory_mib: u64,
    /// Indices of the sites that can run the job, best first.
    pub resources: Vec<usize>,
}

/// The co-allocation request: jobs, the acceptable start window [Te, Tl] and delta.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoRequest {
    /// The jobs.
    pub jobs: Vec<CoJob>,
    /// Te: earliest acceptable start.
    pub earliest: Time,
    /// Tl: latest acceptable start.
    pub latest: Time,
    /// The largest allowed difference between the jobs' starts.
    pub delta: Duration,
    /// Reservations made while searching are preliminary holds that lapse
    /// at this time unless claimed (a job submitted into one commits it),
    /// so a broker that stops mid-way leaves nothing booked; `None` makes
    /// them committed at once.
    pub hold: Option<Time>,
}

/// What happened, step by step, for tests and for explaining a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A new iteration with window [te, tl].
    Window(Time, Time),
    /// A new reservation for a job at a site.
    Created {
        /// Job index as given.
        job: usize,
        /// Site index.
        site: usize,
        /// Its start.
        start: Time,
    },
    /// A job's reservation moved into the window.
    Moved {
        /// Job index.
        job: usize,
        /// Site index.
        site: usize,
        /// Its new start.
        start: Time,
    },
    /// A reservation that could not be moved into the window was released.
    Cancelled {
        /// Job index.
        job: usize,
        /// Site index.
        site: usize,
    },
    /// An augmenting path J, R, J', R', ... was found for a job.
    Path(Vec<PathStep>),
    /// A reservation was handed from one job to another along a path.
    HandedOver {
        /// The job that held it.
        from: usize,
        /// The job that holds it now.
        to: usize,
        /// Site index.
        site: usize,
    },
}

/// One element of an augmenting path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStep {
    /// A job (index as given).
    Job(usize),
    /// A site (index).
    Site(usize),
}

/// A successful co-allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoAllocation {
    /// For each job as given: its site, reservation and start.
    pub assignments: Vec<(usize, ReservationId, Time)>,
    /// The trace of the run.
    pub events: Vec<Event>,
}

/// A failed co-allocation; every reservation made along the way was released.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no common start for the jobs within the window")]
pub struct CoAllocError {
    /// The trace of the run.
    pub events: Vec<Event>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    site: usize,
    id: ReservationId,
    start: Time,
}

impl CoRequest {
    /// The request for `jobs` over sites described by `infos` (`None`: a
    /// site that did not answer, used by no part): each part may go to any
    /// site with enough slots, for its wall time (an hour when it states
    /// none), starting in `window` with starts at most `delta` apart.
    pub fn of(
        jobs: &[Job],
        infos: &[Option<brokk_model::ResourceInfo>],
        window: (Time, Time),
        delta: Duration,
        hold: Option<Time>,
    ) -> CoRequest {
        CoRequest {
            jobs: jobs
                .iter()
                .map(|j| {
                    let amount = j.cpus.unwrap_or(1).max(1);
                    CoJob {
                        amount,
                        duration: j.wall_time.unwrap_or(Duration::hours(1)),
                        memory_mib: 0,
                        resources: (0..infos.len())
                            .filter(|&k| infos[k].as_ref().is_some_and(|i| i.total_slots >= amount))
                            .collect(),
                    }
                })
                .collect(),
            earliest: window.0,
            latest: window.1,
            delta,
            hold,
        }
    }
}

/// Runs Algorithms 1 and 2 over `sites` on behalf of `owner`.
pub fn coallocate(req: &CoRequest, sites: &mut [&mut dyn Site], owner: &str) -> Result<CoAllocation, CoAllocError> {
    // Larger jobs first (processors, memory, run time) so that fewer paths are needed.
    let mut order: Vec<usize> = (0..req.jobs.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&req.jobs[a], &req.jobs[b]);
        (y.amount, y.memory_mib, y.duration).cmp(&(x.amount, x.memory_mib, x.duration))
    });
    let mut held: Vec<Option<Held>> = vec![None; req.jobs.len()];
    let mut events = Vec::new();
    let mut te = req.earliest;
    let mut tl = req.earliest + req.delta;
    loop {
        events.push(Event::Window(te, tl));
        let inside = |h: &Option<Held>| h.is_some_and(|h| h.start >= te && h.start <= tl);
        let mut unmatched = Vec::new();
        let mut best: Option<Time> = None;
        for &j in &order {
            if inside(&held[j]) {
                continue;
            }
            if let Some(h) = held[j] {
                let change = Change {
                    window: Some((te, tl)),
                    ..Change::default()
                };
                match sites[h.site].modify(owner, h.id, change) {
                    Ok(start) => {
                        held[j] = Some(Held { start, ..h });
                        events.push(Event::Moved {
                            job: j,
                            site: h.site,
                            start,
                        });
                        continue;
                    }
                    Err(_) => {
                        let _ = sites[h.site].cancel(owner, h.id);
                        held[j] = None;
                        events.push(Event::Cancelled { job: j, site: h.site });
                    }
                }
            }
            match create(sites, owner, &req.jobs[j], &req.jobs[j].resources, te, tl, req.hold) {
                Ok((h, _)) => {
                    held[j] = Some(h);
                    events.push(Event::Created {
                        job: j,
                        site: h.site,
                        start: h.start,
                    });
                }
                Err(next) => {
                    unmatched.push(j);
                    best = min_time(best, next);
                }
            }
        }
        // Step 13: augment only if every unmatched job could use a resource another job holds.
        let augmentable = !unmatched.is_empty()
            && unmatched.iter().all(|&j| {
                req.jobs[j].resources.iter().any(|&r| {
                    held.iter()
                        .enumerate()
                        .any(|(k, h)| k != j && h.is_some_and(|h| h.site == r))
                })
            });
        if augmentable {
            for &j in &unmatched {
                let Some(path) = augmenting_path(req, &held, j) else {
                    continue;
                };
                events.push(Event::Path(path.clone()));
                if let Err(next) = update_path(req, sites, owner, &mut held, &path, te, tl, &mut events) {
                    best = min_time(best, next);
                }
            }
        }
        if held.iter().all(inside) {
            let assignments = held.iter().flatten().map(|h| (h.site, h.id, h.start)).collect();
            return Ok(CoAllocation { assignments, events });
        }
        // Step 20: move the window so it ends at the earliest next start seen.
        match best {
            Some(t) if t > tl && Time(t.0 - req.delta.0) <= req.latest => {
                tl = t;
                te = Time(t.0 - req.delta.0);
            }
            _ => {
                for h in held.iter().flatten() {
                    let _ = sites[h.site].cancel(owner, h.id);
                }
                return Err(CoAllocError { events });
            }
        }
    }
}

fn min_time(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// Step 9: the first of `resources` (best first) that grants a reservation starting
/// in [te, tl]; on failure, the earliest next start any of them named.
#[allow(clippy::too_many_arguments)] // the step's inputs, as the paper names them
fn create(
    sites: &mut [&mut dyn Site],
    owner: &str,
    job: &CoJob,
    resources: &[usize],
    te: Time,
    tl: Time,
    hold: Option<Time>,
) -> Result<(Held, Option<Time>), Option<Time>> {
    let req = Request {
        amount: job.amount,
        duration: job.duration,
        earliest: te,
        latest: tl,
        flexible: false,
    };
    let mut next = None;
    for &r in resources {
        match sites[r].reserve(owner, &req, hold) {
            Ok(Reply::Granted { id, start }) => return Ok((Held { site: r, id, start }, next)),
            Ok(Reply::Rejected { next_start }) => next = min_time(next, next_start),
            Ok(Reply::Never { .. }) | Err(_) => {}
        }
    }
    Err(next)
}

/// Breadth-first search for the shortest path J, R1, J2, R2, ..., Jn, Rn where each
/// Ri (i < n) is held by J(i+1) and Rn is a resource Jn could move to.
fn augmenting_path(req: &CoRequest, held: &[Option<Held>], start: usize) -> Option<Vec<PathStep>> {
    let n = req.jobs.len();
    let mut parent: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut seen = vec![false; n];
    seen[start] = true;
    let mut queue = VecDeque::from([start]);
    while let Some(j) = queue.pop_front() {
        for &r in &req.jobs[j].resources {
            for k in 0..n {
                if seen[k] || held[k].is_none_or(|h| h.site != r) {
                    continue;
                }
                seen[k] = true;
                parent[k] = Some((j, r));
                // Can k move to a resource it does not hold?
                if let Some(&free) = req.jobs[k].resources.iter().find(|&&x| x != r) {
                    let mut path = vec![PathStep::Job(k), PathStep::Site(free)];
                    let mut cur = k;
                    while let Some((p, via)) = parent[cur] {
                        path.splice(0..0, [PathStep::Job(p), PathStep::Site(via)]);
                        cur = p;
                    }
                    return Some(path);
                }
                queue.push_back(k);
            }
        }
    }
    None
}

/// Algorithm 2: create the reservation at the end of the path, then hand each held
/// reservation one step back along it, keeping its start.
#[allow(clippy::too_many_arguments)]
fn update_path(
    req: &CoRequest,
    sites: &mut [&mut dyn Site],
    owner: &str,
    held: &mut [Option<Held>],
    path: &[PathStep],
    te: Time,
    tl: Time,
    events: &mut Vec<Event>,
) -> Result<(), Option<Time>> {
    let steps: Vec<(usize, usize)> = path
        .chunks(2)
        .filter_map(|c| match c {
            [PathStep::Job(j), PathStep::Site(r)] => Some((*j, *r)),
            _ => None,
        })
        .collect();
    let Some(&(last_job, last_site)) = steps.last() else {
        return Err(None);
    };
    let (new, _) = create(sites, owner, &req.jobs[last_job], &[last_site], te, tl, req.hold)?;
    events.push(Event::Created {
        job: last_job,
        site: last_site,
        start: new.start,
    });
    let mut incoming = new;
    // Walk back: the reservation at steps[i].1 is held by steps[i + 1].0 and goes to steps[i].0.
    for i in (0..steps.len() - 1).rev() {
        let (to, site) = steps[i];
        let from = steps[i + 1].0;
        let Some(h) = held[from].filter(|h| h.site == site) else {
            return Err(None);
        };
        let job = &req.jobs[to];
        let change = Change {
            amount: Some(job.amount),
            duration: Some(job.duration),
            window: None,
        };
        match sites[site].modify(owner, h.id, change) {
            Ok(_) => {
                held[from] = Some(incoming);
                held[to] = Some(h);
                events.push(Event::HandedOver { from, to, site });
                incoming = h;
            }
            Err(e) => {
                // `from` already has the reservation further along the path; its old one
                // is no use to anyone now.
                let _ = sites[site].cancel(owner, h.id);
                held[from] = Some(incoming);
                events.push(Event::Cancelled { job: from, site });
                return Err(match e {
                    SiteError::NotGranted(Reply::Rejected { next_start }) => next_start,
                    _ => None,
                });
            }
        }
    }
    Ok(())
}

/// Why co-allocated jobs could not be placed into their reservations;
/// nothing of the co-allocation is left at any site.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlaceError {
    /// A part could not be submitted into its hold.
    #[error("submitting into the co-allocation: {0}")]
    Submit(SiteError),
    /// A hold could not be committed.
    #[error("committing the co-allocation: {0}")]
    Commit(SiteError),
}

/// Places `jobs[k]` into the reservation `plan` holds for it, in two
/// phases: every part is submitted into its hold, where it waits (`keys[k]`
/// names the submission, so a repeat is the same job); only then are the
/// holds committed and the parts free to start. Until the last commit a
/// failure (or a stop of the broker: the holds lapse and take their parts
/// with them) leaves nothing running: the parts placed are cancelled and
/// every reservation of the plan released.
pub fn place(
    plan: &CoAllocation,
    jobs: &[Job],
    keys: &[String],
    sites: &mut [&mut dyn Site],
    owner: &str,
) -> Result<Vec<JobHandle>, PlaceError> {
    let mut placed: Vec<(usize, JobHandle)> = Vec::new();
    let undo = |placed: &[(usize, JobHandle)], sites: &mut [&mut dyn Site]| {
        for (s, h) in placed {
            let _ = sites[*s].cancel_job(owner, h);
        }
        for &(s, r, _) in &plan.assignments {
            let _ = sites[s].cancel(owner, r);
        }
    };
    for (k, &(site, rid, _)) in plan.assignments.iter().enumerate() {
        match sites[site].submit_held(owner, &jobs[k], rid, &keys[k]) {
            Ok(h) => placed.push((site, h)),
            Err(e) => {
                undo(&placed, sites);
                return Err(PlaceError::Submit(e));
            }
        }
    }
    for &(site, rid, _) in &plan.assignments {
        if let Err(e) = sites[site].commit(owner, rid) {
            undo(&placed, sites);
            return Err(PlaceError::Commit(e));
        }
    }
    Ok(placed.into_iter().map(|(_, h)| h).collect())
}

/// Why [`search`] found no placement; nothing of it is left at any site.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearchError {
    /// No common start within the window on these sites.
    #[error("no co-allocation fits the window on these sites")]
    NoFit,
    /// The parts would all run at once and no site assignment holds them
    /// together, whatever the window: refused before any site is asked.
    #[error("{0}")]
    NeverTogether(String),
    /// A start was found, but the parts could not be placed into it.
    #[error(transparent)]
    Place(#[from] PlaceError),
}

/// What a broker's driver does for a co-allocation its core asks for
/// ([`crate::broker::Effect::CoAllocate`]): the search for a common start
/// of `jobs` over `sites` (described by `infos`, `None` for a site that did
/// not answer), then every part placed into its hold under its key
/// ([`place`]). Each part's site, the site's id for it and its start.
pub fn search(
    jobs: &[Job],
    keys: &[String],
    infos: &[Option<brokk_model::ResourceInfo>],
    asked: crate::broker::CoSearch,
    sites: &mut [&mut dyn Site],
    owner: &str,
) -> Result<Vec<(usize, String, Time)>, SearchError> {
    let request = CoRequest::of(jobs, infos, asked.window, asked.delta, Some(asked.hold));
    let capacities: Vec<u32> = infos.iter().map(|i| i.as_ref().map_or(0, |i| i.total_slots)).collect();
    if let Some(why) = never_together(&request, &capacities) {
        return Err(SearchError::NeverTogether(why));
    }
    let plan = coallocate(&request, sites, owner).map_err(|_| SearchError::NoFit)?;
    let handles = place(&plan, jobs, keys, sites, owner)?;
    Ok(plan
        .assignments
        .iter()
        .zip(handles)
        .map(|(&(site, _, start), h)| (site, h.0, start))
        .collect())
}

/// Steps the proof that parts cannot be packed may take; past it, the
/// search over the window decides.
const PACKING_BUDGET: u32 = 100_000;

/// Why the parts of `req` can never run together on sites of `capacities`
/// processors, if that is so: when the starts may differ by less than the
/// shortest part lasts, every part runs at the latest start, so they must
/// fit the sites all at once, each part whole at one site. Without this
/// proof the search steps its window through every later start any site
/// names until the window's end (an HTTP round trip or more per step:
/// half a minute and more over a month) to refuse the same. `None` when
/// they may fit, or when the proof would take more than
/// [`PACKING_BUDGET`] steps.
pub fn never_together(req: &CoRequest, capacities: &[u32]) -> Option<String> {
    let shortest = req.jobs.iter().map(|j| j.duration).min()?;
    if req.delta >= shortest {
        return None;
    }
    let mut order: Vec<usize> = (0..req.jobs.len()).collect();
    order.sort_by_key(|&j| std::cmp::Reverse(req.jobs[j].amount));
    let mut free = capacities.to_vec();
    let mut budget = PACKING_BUDGET;
    if packs(req, &order, &mut free, &mut budget) != Some(false) {
        return None;
    }
    let list = |v: Vec<String>| v.join(", ");
    Some(format!(
        "the parts ({} processors) run at the same time and no choice of sites holds them all at once (sites of {} \
         processors): no window can change that",
        list(req.jobs.iter().map(|j| j.amount.to_string()).collect()),
        list(capacities.iter().map(u32::to_string).collect()),
    ))
}

/// Whether parts `order` (largest first) fit the sites' `free`
/// processors, each at one of its resources; `None` when the budget ran out.
fn packs(req: &CoRequest, order: &[usize], free: &mut [u32], budget: &mut u32) -> Option<bool> {
    let Some((&j, rest)) = order.split_first() else {
        return Some(true);
    };
    let amount = req.jobs[j].amount;
    let mut tried: Vec<(u32, Vec<bool>)> = Vec::new();
    for &r in &req.jobs[j].resources {
        let left = free.get(r).copied().unwrap_or(0);
        if left < amount {
            continue;
        }
        // Sites with the same room left, open to the same parts still to
        // place, are alike for what follows: try one of them.
        let alike = (left, rest.iter().map(|&k| req.jobs[k].resources.contains(&r)).collect());
        if tried.contains(&alike) {
            continue;
        }
        *budget = budget.checked_sub(1)?;
        tried.push(alike);
        free[r] -= amount;
        let fits = packs(req, rest, free, budget);
        free[r] += amount;
        if fits != Some(false) {
            return fits;
        }
    }
    Some(false)
}

/// Where one part of an interrupted co-allocation was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The site (index).
    pub site: usize,
    /// The part's job there.
    pub job: JobHandle,
    /// How it stands there.
    pub standing: Standing,
}

/// How a part of an interrupted co-allocation stands at its site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// It has not ended and waits in (or runs in) this reservation.
    Waiting(ReservationId),
    /// It ended after it started: its hold had been committed, so the
    /// commit phase had begun before the stop.
    Ran,
    /// It ended without starting (cancelled, or its hold lapsed).
    Gone,
}

/// Settles a co-allocation a stop of the broker interrupted, given where
/// each part was found (`None`: it never reached a site). Every part in
/// place (waiting in its hold, or already run because its hold was
/// committed) means the placement had finished: the holds still waiting are
/// committed and the co-allocation completes (`true`). A part that ran
/// settles it the same way even if another's commit now fails: the stop came
/// during the commits, and cancelling the rest would leave the one that ran
/// alone anyway, so only the parts whose commit failed are cancelled.
/// Otherwise the placement never finished: whatever reached a site is
/// cancelled there (`false`), and the holds lapse.
pub fn settle(parts: &[Option<Found>], sites: &mut [&mut dyn Site], owner: &str) -> bool {
    let in_place: Option<Vec<&Found>> = parts
        .iter()
        .map(|p| p.as_ref().filter(|f| f.standing != Standing::Gone))
        .collect();
    if let Some(in_place) = in_place {
        let ran = in_place.iter().any(|f| f.standing == Standing::Ran);
        let mut failed = Vec::new();
        for f in &in_place {
            if let Standing::Waiting(r) = f.standing {
                if sites[f.site].commit(owner, r).is_err() {
                    failed.push(*f);
                }
            }
        }
        if failed.is_empty() {
            return true;
        }
        if ran {
            for f in failed {
                let _ = sites[f.site].cancel_job(owner, &f.job);
            }
            return false;
        }
    }
    for f in parts.iter().flatten() {
        let _ = sites[f.site].cancel_job(owner, &f.job);
    }
    false
}
