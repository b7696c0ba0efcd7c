//! A cluster of N processors under a local policy: FCFS without backfilling
//! (seed 001, assumption 3), or backfilling with a number of reservations for the
//! jobs at the head of the queue (1 is EASY, Maui-style pivots; unbounded is
//! conservative, as seed 002 uses it), planned on the planner's availability
//! profile.
//!
//! Semantics, where the trace format leaves them open:
//! - a job runs for its recorded run time; the estimate (exact, or the trace's
//!   requested time) is used only for planning;
//! - a job that overruns its estimate is planned as ending now;
//! - reservations are recomputed at every scheduling pass, in queue order;
//! - events at the same instant are all applied before scheduling.

use brokk_model::{Duration, Time};
use brokk_planner::{FreeList, Planner, Reply, Request};

use crate::engine::EventQueue;

/// A job as the simulator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimJob {
    /// Identifier (the trace's job number).
    pub id: i64,
    /// Arrival time.
    pub submit: Time,
    /// How long it actually runs.
    pub run: Duration,
    /// Processors.
    pub size: u32,
    /// What the scheduler believes the run time is.
    pub estimate: Duration,
}

/// The local scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// First come, first served; a blocked head blocks everyone.
    Fcfs,
    /// Backfilling that protects the first `reservations` queued jobs
    /// (1 = EASY, `usize::MAX` = conservative).
    Backfill {
        /// How many queued jobs get a reservation.
        reservations: usize,
    },
}

/// When a job ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The job.
    pub id: i64,
    /// Arrival.
    pub submit: Time,
    /// Start.
    pub start: Time,
    /// End.
    pub end: Time,
    /// Processors.
    pub size: u32,
}

/// Where the planning estimate of a trace job comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimates {
    /// The scheduler knows each run time exactly.
    Exact,
    /// The user's requested time (SWF field 9), the run time when missing.
    Requested,
}

/// Turns SWF records into simulator jobs. The size is the requested processors
/// (field 8), else the allocated ones (field 5); the job runs for field 4. Records
/// without a usable size or run time (-1) are left out, whatever their status.
pub fn from_swf(records: &[crate::swf::SwfJob], estimates: Estimates) -> Vec<SimJob> {
    records
        .iter()
        .filter_map(|r| {
            let size = if r.req_procs > 0 { r.req_procs } else { r.procs };
            if size <= 0 || r.run < 0 || r.submit < 0 {
                return None;
            }
            let estimate = match estimates {
                Estimates::Requested if r.req_time > 0 => r.req_time,
                _ => r.run,
            };
            Some(SimJob {
                id: r.id,
                submit: Time(r.submit),
                run: Duration(r.run),
                size: u32::try_from(size).ok()?,
                estimate: Duration(estimate),
            })
        })
        .collect()
}

enum Event {
    Arrive(usize),
    Finish(usize),
}

/// Simulates `jobs` on `procs` processors under `policy`; jobs larger than the
/// machine are left out. Outcomes come in job order.
pub fn simulate(procs: u32, jobs: &[SimJob], policy: Policy) -> Vec<Outcome> {
    let start = jobs.iter().map(|j| j.submit).min().unwrap_or(Time::EPOCH);
    let mut q: EventQueue<Event> = EventQueue::new(start);
    for (i, j) in jobs.iter().enumerate() {
        if j.size <= procs && j.size > 0 {
            let _ = q.schedule(j.submit, Event::Arrive(i));
        }
    }
    let mut waiting: Vec<usize> = Vec::new();
    let mut running: Vec<(usize, Time)> = Vec::new();
    let mut free = procs;
    let mut started: Vec<Option<Time>> = vec![None; jobs.len()];
    let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
    while let Some((now, ev)) = q.pop() {
        let mut apply = |ev: Event, waiting: &mut Vec<usize>, running: &mut Vec<(usize, Time)>, free: &mut u32| match ev
        {
            Event::Arrive(i) => waiting.push(i),
            Event::Finish(i) => {
                running.retain(|&(r, _)| r != i);
                *free += jobs[i].size;
                let s = started[i].unwrap_or(now);
                outcomes[i] = Some(Outcome {
                    id: jobs[i].id,
                    submit: jobs[i].submit,
                    start: s,
                    end: now,
                    size: jobs[i].size,
                });
            }
        };
        apply(ev, &mut waiting, &mut running, &mut free);
        // Apply every other event of this instant before scheduling.
        while q.peek_time() == Some(now) {
            if let Some((_, ev)) = q.pop() {
                apply(ev, &mut waiting, &mut running, &mut free);
            }
        }
        let to_start = pick(procs, jobs, &waiting, &running, free, now, policy);
        for i in to_start {
            waiting.retain(|&w| w != i);
            free -= jobs[i].size;
            started[i] = Some(now);
            running.push((i, now));
            let _ = q.schedule(now + jobs[i].run, Event::Finish(i));
        }
    }
    outcomes.into_iter().flatten().collect()
}

/// The waiting jobs (indices) to start now.
fn pick(
    procs: u32,
    jobs: &[SimJob],
    waiting: &[usize],
    running: &[(usize, Time)],
    mut free: u32,
    now: Time,
    policy: Policy,
) -> Vec<usize> {
    let mut out = Vec::new();
    let mut rest = waiting.iter().copied().peekable();
    // Both policies start jobs from the head while they fit.
    while let Some(&i) = rest.peek() {
        if jobs[i].size > free {
            break;
        }
        free -= jobs[i].size;
        out.push(i);
        rest.next();
    }
    let Policy::Backfill { reservations } = policy else {
        return out;
    };
    let blocked: Vec<usize> = rest.collect();
    if blocked.is_empty() {
        return out;
    }
    // The availability profile: running jobs until their estimated ends (now, if
    // overdue), then the protected jobs at their earliest starts.
    let horizon = Time(now.0.saturating_add(1 << 40));
    let mut plan = Planner::new(procs, horizon, FreeList::new());
    let hold = |plan: &mut Planner<FreeList>, size: u32, from: Time, until: Time| {
        if until > from {
            let req = Request {
                amount: size,
                duration: until - from,
                earliest: from,
                latest: from,
                flexible: false,
            };
            let _ = plan.reserve("running", &req, None);
        }
    };
    for &(i, s) in running {
        hold(
            &mut plan,
            jobs[i].size,
            now,
            (s + jobs[i].estimate).max(now + Duration(1)),
        );
    }
    for &i in &out {
        hold(&mut plan, jobs[i].size, now, now + jobs[i].estimate.max(Duration(1)));
    }
    for (k, &i) in blocked.iter().enumerate() {
        let d = jobs[i].estimate.max(Duration(1));
        if k < reservations {
            // Protected: reserve at its earliest start.
            let req = Request {
                amount: jobs[i].size,
                duration: d,
                earliest: now,
                latest: Time(horizon.0 - d.0),
                flexible: false,
            };
            if let Reply::Granted { start, .. } = plan.reserve("queued", &req, None) {
                if start == now {
                    out.push(i);
                }
            }
        } else {
            // Backfill only if it fits now without touching any reservation.
            let req = Request {
                amount: jobs[i].size,
                duration: d,
                earliest: now,
                latest: now,
                flexible: false,
            };
            if let Reply::Granted { .. } = plan.reserve("backfill", &req, None) {
                out.push(i);
            }
        }
    }
    out
}
