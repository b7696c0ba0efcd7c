//! A cluster of N processors under a local policy: FCFS without backfilling
//! (seed 001, assumption 3), or backfilling with a number of reservations for the
//! jobs at the head of the queue (1 is EASY, Maui-style pivots; unbounded is
//! conservative, as seed 002 uses it), planned on the planner's availability
//! profile.
//!
//! Semantics, where the trace format leaves them open:
//! - a job runs for its recorded run time; the estimate (exact, or the trace's
//!   requested time) is used only for planning, and a job is never killed at it;
//! - a running job that overruns its estimate is planned as ending one second
//!   from now, and every planned duration is at least one second;
//! - reservations are recomputed at every scheduling pass, in queue order;
//! - events at the same instant are all applied before scheduling.
//!
//! FCFS, EASY and unprotected backfilling take a fast path (a walk over running
//! jobs by planned end for the head's "shadow" time and spare processors); more
//! reservations plan on the planner's profile. Both paths give the same schedule
//! for EASY, which `simulate_on_profile` lets the tests check.

use std::collections::BTreeSet;

use brokk_model::{Duration, Time};
use brokk_planner::{FreeList, Planner, Reply, Request};

use crate::engine::EventQueue;

/// A job as the simulator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
    /// The trace's partition (SWF field 16; the site in grid logs), -1 if unknown.
    pub partition: i64,
}

/// The local scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// First come, first served; a blocked head blocks everyone.
    Fcfs,
    /// Backfilling that protects the first `reservations` queued jobs
    /// (0 = none, 1 = EASY, `usize::MAX` = conservative).
    Backfill {
        /// How many queued jobs get a reservation.
        reservations: usize,
    },
}

impl Policy {
    /// EASY backfilling: only the queue's head is protected.
    pub const EASY: Policy = Policy::Backfill { reservations: 1 };
    /// Conservative backfilling: every queued job is protected.
    pub const CONSERVATIVE: Policy = Policy::Backfill {
        reservations: usize::MAX,
    };
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
                partition: r.partition,
            })
        })
        .collect()
}

/// Simulates `jobs` on `procs` processors under `policy`; jobs larger than the
/// machine are left out. Outcomes come in job order.
pub fn simulate(procs: u32, jobs: &[SimJob], policy: Policy) -> Vec<Outcome> {
    Machine::new(procs, jobs, false).run(policy)
}

/// Like [`simulate`] but always plans on the planner's profile, also where the
/// fast path applies: the reference the fast path is tested against.
pub fn simulate_on_profile(procs: u32, jobs: &[SimJob], policy: Policy) -> Vec<Outcome> {
    Machine::new(procs, jobs, true).run(policy)
}

/// The state of one simulated machine.
struct Machine<'a> {
    procs: u32,
    jobs: &'a [SimJob],
    on_profile: bool,
    free: u32,
    /// Queued jobs, in arrival order.
    waiting: Vec<usize>,
    /// Running jobs by (planned end, index); the planned end is start + estimate.
    running: BTreeSet<(i64, usize)>,
    started: Vec<Option<Time>>,
    outcomes: Vec<Option<Outcome>>,
}

impl<'a> Machine<'a> {
    fn new(procs: u32, jobs: &'a [SimJob], on_profile: bool) -> Self {
        Machine {
            procs,
            jobs,
            on_profile,
            free: procs,
            waiting: Vec::new(),
            running: BTreeSet::new(),
            started: vec![None; jobs.len()],
            outcomes: vec![None; jobs.len()],
        }
    }

    fn run(mut self, policy: Policy) -> Vec<Outcome> {
        let jobs = self.jobs;
        // Arrivals in (time, job order); finishes through the event queue.
        let mut arrivals: Vec<usize> = (0..jobs.len())
            .filter(|&i| jobs[i].size <= self.procs && jobs[i].size > 0)
            .collect();
        arrivals.sort_by_key(|&i| jobs[i].submit);
        let start = arrivals.first().map_or(Time::EPOCH, |&i| jobs[i].submit);
        let mut finishes: EventQueue<usize> = EventQueue::new(start);
        let mut next_arrival = 0;
        loop {
            let arrival_at = arrivals.get(next_arrival).map(|&i| jobs[i].submit);
            let now = match (arrival_at, finishes.peek_time()) {
                (None, None) => break,
                (Some(a), None) => a,
                (None, Some(f)) => f,
                (Some(a), Some(f)) => a.min(f),
            };
            while finishes.peek_time() == Some(now) {
                if let Some((_, i)) = finishes.pop() {
                    self.finish(i, now);
                }
            }
            while arrivals.get(next_arrival).is_some_and(|&i| jobs[i].submit == now) {
                self.waiting.push(arrivals[next_arrival]);
                next_arrival += 1;
            }
            for i in self.schedule(now, policy) {
                // A finish is never before now, so this cannot fail.
                let _ = finishes.schedule(now + jobs[i].run, i);
            }
        }
        self.outcomes.into_iter().flatten().collect()
    }

    fn finish(&mut self, i: usize, now: Time) {
        let j = &self.jobs[i];
        let s = self.started[i].unwrap_or(now);
        self.running.remove(&((s + j.estimate).0, i));
        self.free += j.size;
        self.outcomes[i] = Some(Outcome {
            id: j.id,
            submit: j.submit,
            start: s,
            end: now,
            size: j.size,
        });
    }

    fn start(&mut self, i: usize, now: Time) {
        let j = &self.jobs[i];
        self.free -= j.size;
        self.started[i] = Some(now);
        self.running.insert(((now + j.estimate).0, i));
    }

    /// Starts what the policy allows now; returns the started jobs.
    fn schedule(&mut self, now: Time, policy: Policy) -> Vec<usize> {
        let jobs = self.jobs;
        let mut out = Vec::new();
        // Every policy starts jobs from the head while they fit.
        let mut head = 0;
        while let Some(&i) = self.waiting.get(head) {
            if jobs[i].size > self.free {
                break;
            }
            self.start(i, now);
            out.push(i);
            head += 1;
        }
        self.waiting.drain(..head);
        let reservations = match policy {
            Policy::Backfill { reservations } if !self.waiting.is_empty() => reservations,
            _ => return out,
        };
        let backfilled = if self.on_profile || reservations > 1 {
            self.backfill_on_profile(now, reservations)
        } else {
            self.backfill_around_shadow(now, reservations == 1)
        };
        if !backfilled.is_empty() {
            for &i in &backfilled {
                self.start(i, now);
            }
            // `backfilled` is in queue order, so one merge pass removes it.
            let mut next = backfilled.iter().peekable();
            self.waiting.retain(|&w| {
                if next.peek() == Some(&&w) {
                    next.next();
                    false
                } else {
                    true
                }
            });
            out.extend(backfilled);
        }
        out
    }

    /// A running job's planned end as of `now`: overdue jobs end in a second.
    fn planned_end(end: i64, now: Time) -> i64 {
        end.max(now.0 + 1)
    }

    /// EASY (or no protection): the head, blocked, gets the earliest time enough
    /// processors come free (its shadow) and the processors spare then; a queued
    /// job may start now if it fits and either ends by the shadow or uses only
    /// spare processors.
    fn backfill_around_shadow(&self, now: Time, protect_head: bool) -> Vec<usize> {
        let jobs = self.jobs;
        let mut free = self.free;
        let (shadow, mut spare) = if protect_head {
            let need = jobs[self.waiting[0]].size;
            let mut avail = self.free;
            let mut shadow = None;
            for &(end, i) in &self.running {
                let end = Self::planned_end(end, now);
                // Jobs ending at the shadow itself also free their processors.
                if shadow.is_some_and(|s| end > s) {
                    break;
                }
                avail += jobs[i].size;
                if shadow.is_none() && avail >= need {
                    shadow = Some(end);
                }
            }
            // The head fits the empty machine, so a shadow always exists.
            (shadow.unwrap_or(now.0), avail.saturating_sub(need))
        } else {
            (i64::MAX, u32::MAX)
        };
        let mut out = Vec::new();
        for &i in &self.waiting[usize::from(protect_head)..] {
            if free == 0 {
                break;
            }
            let j = &jobs[i];
            if j.size > free {
                continue;
            }
            let ends_by_shadow = now.0 + j.estimate.0.max(1) <= shadow;
            if ends_by_shadow || j.size <= spare {
                free -= j.size;
                if !ends_by_shadow {
                    spare -= j.size;
                }
                out.push(i);
            }
        }
        out
    }

    /// The general rule: the first `reservations` queued jobs are reserved at
    /// their earliest starts on an availability profile, in queue order, and any
    /// other may start now if it fits around them.
    fn backfill_on_profile(&self, now: Time, reservations: usize) -> Vec<usize> {
        let jobs = self.jobs;
        let horizon = Time(now.0.saturating_add(1 << 40));
        let mut plan = Planner::new(self.procs, horizon, FreeList::new());
        for &(end, i) in &self.running {
            let req = Request {
                amount: jobs[i].size,
                duration: Duration(Self::planned_end(end, now) - now.0),
                earliest: now,
                latest: now,
                flexible: false,
            };
            let _ = plan.reserve("running", &req, None);
        }
        let mut out = Vec::new();
        for (k, &i) in self.waiting.iter().enumerate() {
            let d = jobs[i].estimate.max(Duration(1));
            let latest = if k < reservations { Time(horizon.0 - d.0) } else { now };
            let req = Request {
                amount: jobs[i].size,
                duration: d,
                earliest: now,
                latest,
                flexible: false,
            };
            if let Reply::Granted { start, .. } = plan.reserve("queued", &req, None) {
                if start == now {
                    out.push(i);
                }
            }
        }
        out
    }
}
