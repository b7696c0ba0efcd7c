//! A cluster's local queue under FCFS or backfilling with a number of
//! protected jobs (1 is EASY, unbounded is conservative), planned on the
//! planner's availability profile: the rules of the simulator's clusters,
//! driven by an event loop that tells the queue of arrivals and ends and
//! asks it what starts.
//!
//! Waiting jobs are served in arrival order, or in a [`QueueOrder`]'s.
//!
//! Semantics, where the trace format leaves them open:
//! - the estimate is used only for planning, and a job is never killed at it;
//! - a running job that overruns its estimate is planned as ending one second
//!   from now, and every planned duration is at least one second;
//! - in arrival order, a protected job keeps its reservation from pass to
//!   pass and moves it up when room frees before it (compression, in order of
//!   planned start), never later, as a site core keeps a queued job's slot
//!   ([`crate::SiteCore`]); under a queue order, the protected jobs are
//!   planned again at every pass in the order's order.
//!
//! In arrival order every policy gives the site core's schedule, which a
//! property test checks (`brokk-sim/tests/grid.rs`); this queue is the fast
//! path of the same rules for trace runs, without the core's reservations,
//! owners, records and effects.
//!
//! FCFS, EASY and unprotected backfilling take a fast path (a walk over running
//! jobs by planned end for the head's "shadow" time and spare processors),
//! which gives exactly the schedule of a profile built for every pass (the
//! `on_profile` switch lets the tests check). K protected jobs and
//! conservative backfilling in arrival order keep their reservations on one
//! profile between passes (`KeptPlan`): an arrival starts now if it fits
//! around them, else is reserved at its earliest start while fewer than K
//! hold one, else waits; an end moves the reservations up and gives the
//! waiting jobs their turn; only an overrun that breaks a reservation plans
//! the waiting jobs again from scratch. Queue orders plan on a profile built
//! for the pass.

use std::collections::BTreeSet;

use brokk_model::{Duration, Time};
use brokk_planner::{BTree, Planner, Profile, Reply, Request, Steps};

use crate::order::QueueOrder;

/// A job of a trace-driven queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueJob {
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
    /// The submitting user (SWF field 12), -1 if unknown.
    pub user: i64,
    /// The trace's queue number (SWF field 15), -1 if unknown.
    pub queue: i64,
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

impl std::str::FromStr for Policy {
    type Err = String;

    /// `fcfs`, `easy`, `conservative` or `backfill:K` (K protected jobs).
    fn from_str(name: &str) -> Result<Policy, String> {
        match name {
            "fcfs" => Ok(Policy::Fcfs),
            "easy" => Ok(Policy::EASY),
            "conservative" => Ok(Policy::CONSERVATIVE),
            _ => name
                .strip_prefix("backfill:")
                .and_then(|k| k.parse().ok())
                .map(|reservations| Policy::Backfill { reservations })
                .ok_or_else(|| {
                    format!("policy {name:?}: one of fcfs, easy, conservative or backfill:K (K protected jobs)")
                }),
        }
    }
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
    /// The submitting user, -1 if unknown.
    pub user: i64,
}

/// One cluster's queue and running jobs.
pub struct LocalQueue<'a> {
    procs: u32,
    jobs: &'a [QueueJob],
    on_profile: bool,
    /// The order waiting jobs are served in; arrival order when none.
    order: Option<Box<dyn QueueOrder + 'a>>,
    free: u32,
    /// Queued jobs, in arrival order, or the order's after a pass.
    waiting: Vec<usize>,
    /// Running jobs by (planned end, index); the planned end is start + estimate.
    running: BTreeSet<(i64, usize)>,
    started: Vec<Option<Time>>,
    outcomes: Vec<Option<Outcome>>,
    /// Conservative backfilling's profile, kept between passes.
    kept: Option<KeptPlan>,
    /// Spans above which the kept profile is a tree.
    flat_spans: usize,
}

/// How far ahead a reservation may be planned.
const HORIZON: i64 = 1 << 40;

/// Conservative backfilling's plan between passes: running jobs' planned runs
/// and waiting jobs' reservations on one usage profile, equal to the profile a
/// pass would build afresh as long as usage only grew where no reservation
/// needs it.
struct KeptPlan {
    used: Usage,
    /// Each job's span in `used`, `[start, end)`: its planned run while it
    /// runs, its reservation while it waits.
    span: Vec<Option<(i64, i64)>>,
    /// The earliest start of a waiting job's reservation (`i64::MAX` for
    /// none).
    next_start: i64,
    /// Arrivals not placed yet, in queue order.
    unplanned: Vec<usize>,
    /// Waiting jobs left without a reservation (the first `protects` have
    /// one), in arrival order.
    unprotected: Vec<usize>,
    /// How many waiting jobs may hold a reservation that starts later than
    /// now (`usize::MAX`: conservative, all).
    protects: usize,
    /// Usage grew where a reservation was (an overrun): the waiting jobs
    /// are planned again.
    stale: bool,
    /// Usage fell where a reservation could move to (an early end): each
    /// reservation moves up as far as it now fits, never later.
    compress: bool,
    /// The running jobs' spans alone, kept up to date while re-plans come
    /// often (users' estimates: nearly every end is early), so a re-plan
    /// starts from a copy; dropped after [`KEEP_RUNNING_FOR`] ends without
    /// one, so workloads that rarely re-plan do not pay for it.
    running: Option<Steps>,
    /// Ends since the last re-plan.
    quiet: u32,
}

/// Ends without a re-plan after which the running jobs' own profile is no
/// longer kept.
const KEEP_RUNNING_FOR: u32 = 8;

/// The kept profile's structure, chosen at each rebuild by the number of
/// spans: a flat vector scans a queue's few dozen spans faster than a tree is
/// walked, and a B+ tree keeps a backlog of thousands logarithmic.
enum Usage {
    Flat(Steps),
    Tree(BTree),
}

/// Spans above which the kept profile is a B+ tree.
const FLAT_SPANS: usize = 512;

impl Usage {
    fn get(&mut self) -> &mut dyn Profile {
        match self {
            Usage::Flat(p) => p,
            Usage::Tree(p) => p,
        }
    }

    /// Empties the profile, in the structure that suits `spans` spans.
    fn reset(&mut self, spans: usize, flat_spans: usize) {
        match self {
            Usage::Flat(p) if spans <= flat_spans => p.clear(),
            _ if spans <= flat_spans => *self = Usage::Flat(Steps::new()),
            _ => *self = Usage::Tree(BTree::new()),
        }
    }

    /// Starts the profile again from the running jobs' `spans` (start, end,
    /// size), in the structure that suits `total` spans: the flat one from a
    /// sort of their ends, a tree span by span (it counts the ends of each
    /// span it holds, so a later removal must match an addition).
    fn reset_to(&mut self, total: usize, flat_spans: usize, spans: impl Iterator<Item = (i64, i64, i32)>) {
        self.reset(total, flat_spans);
        match self {
            Usage::Flat(p) => p.set_sum(spans),
            Usage::Tree(p) => spans.for_each(|(s, e, a)| p.add(s, e, a)),
        }
    }
}

impl KeptPlan {
    fn new(jobs: usize, protects: usize) -> Self {
        KeptPlan {
            unprotected: Vec::new(),
            protects,
            used: Usage::Flat(Steps::new()),
            span: vec![None; jobs],
            next_start: i64::MAX,
            unplanned: Vec::new(),
            stale: true,
            compress: false,
            running: None,
            quiet: 0,
        }
    }

    /// Sets running job `i`'s span to `span`, in the profile and, while it
    /// is kept, in the running jobs' own.
    fn set_running_span(&mut self, i: usize, size: u32, span: Option<(i64, i64)>) {
        if let Some(r) = &mut self.running {
            if let Some((s, e)) = self.span[i] {
                r.remove(s, e, size as i32);
            }
            if let Some((s, e)) = span {
                r.add(s, e, size as i32);
            }
        }
        self.set_span(i, size, span);
    }

    /// Reserves job `i` at its earliest start from `now`, or (`now_only`)
    /// only if it can start now; whether it got a reservation.
    fn plan(&mut self, i: usize, job: &QueueJob, procs: u32, now: Time, now_only: bool) -> bool {
        let d = job.estimate.0.max(1);
        let thr = procs as i32 - job.size as i32;
        let latest = if now_only {
            now.0
        } else {
            now.0.saturating_add(HORIZON) - d
        };
        let Some(s) = self.used.get().add_at_earliest(thr, d, now.0, latest, job.size as i32) else {
            return false;
        };
        self.span[i] = Some((s, s + d));
        self.next_start = self.next_start.min(s);
        true
    }

    /// Places arrival `i` as a site core places a new job: it starts now if
    /// it fits around the reservations; else it is reserved at its earliest
    /// start while fewer than `protects` waiting jobs hold one and none
    /// waits unprotected before it; else it waits unprotected.
    fn place(&mut self, i: usize, job: &QueueJob, procs: u32, now: Time, protected: &mut usize) {
        if self.protects == usize::MAX {
            self.plan(i, job, procs, now, false);
            return;
        }
        if self.plan(i, job, procs, now, true) {
            return;
        }
        if self.unprotected.is_empty() && *protected < self.protects && self.plan(i, job, procs, now, false) {
            *protected += 1;
            return;
        }
        self.unprotected.push(i);
    }

    /// The unprotected waiting jobs, in arrival order, start now where they
    /// fit around the reservations, or are reserved while fewer than
    /// `protects` hold one: a site core's promotion after a release.
    fn promote(&mut self, jobs: &[QueueJob], procs: u32, now: Time, protected: &mut usize) {
        let waiting = std::mem::take(&mut self.unprotected);
        for i in waiting {
            let may_protect = *protected < self.protects;
            if self.plan(i, &jobs[i], procs, now, !may_protect) {
                *protected += usize::from(self.span[i].is_some_and(|(s, _)| s > now.0));
            } else {
                self.unprotected.push(i);
            }
        }
    }

    /// Waiting jobs whose reservation starts later than `now`.
    fn protected(&self, waiting: &[usize], now: Time) -> usize {
        if self.protects == usize::MAX {
            return 0;
        }
        waiting
            .iter()
            .filter(|&&i| self.span[i].is_some_and(|(s, _)| s > now.0))
            .count()
    }

    /// Moves each reservation of the `waiting` jobs as early as it now fits
    /// from `now`, never later than it was, in order of planned start (ties
    /// in arrival order): conservative backfilling's compression after an
    /// early end, as a site core moves its queued jobs' slots up.
    fn move_up(&mut self, waiting: &[usize], jobs: &[QueueJob], procs: u32, now: Time) {
        let mut queued: Vec<(i64, usize)> = waiting
            .iter()
            .filter_map(|&i| self.span[i].map(|(s, _)| (s, i)))
            .filter(|&(s, _)| s > now.0)
            .collect();
        queued.sort_unstable();
        for (old, i) in queued {
            let size = jobs[i].size as i32;
            let Some((_, end)) = self.span[i] else { continue };
            let d = end - old;
            let used = self.used.get();
            used.remove(old, end, size);
            // Its own old place is free, so it always fits by then.
            let s = used
                .add_at_earliest(procs as i32 - size, d, now.0, old, size)
                .unwrap_or_else(|| {
                    used.add(old, end, size);
                    old
                });
            self.span[i] = Some((s, s + d));
        }
        self.next_start = waiting
            .iter()
            .filter_map(|&i| self.span[i].map(|(s, _)| s))
            .min()
            .unwrap_or(i64::MAX);
    }

    /// Sets job `i`'s span in the profile to `span`.
    fn set_span(&mut self, i: usize, size: u32, span: Option<(i64, i64)>) {
        let used = self.used.get();
        if let Some((s, e)) = self.span[i] {
            used.remove(s, e, size as i32);
        }
        if let Some((s, e)) = span {
            used.add(s, e, size as i32);
        }
        self.span[i] = span;
    }
}

impl<'a> LocalQueue<'a> {
    /// An idle cluster of `procs` processors for `jobs` (referred to by
    /// index); `on_profile` plans every policy on the profile (the reference
    /// for the fast path).
    pub fn new(procs: u32, jobs: &'a [QueueJob], on_profile: bool) -> Self {
        LocalQueue {
            procs,
            jobs,
            on_profile,
            order: None,
            free: procs,
            waiting: Vec::new(),
            running: BTreeSet::new(),
            started: vec![None; jobs.len()],
            outcomes: vec![None; jobs.len()],
            kept: None,
            flat_spans: FLAT_SPANS,
        }
    }

    /// Keeps conservative backfilling's profile as a tree above `spans`
    /// spans instead of the tuned default (0: always a tree), so tests reach
    /// the tree path with small queues.
    pub fn with_flat_spans(mut self, spans: usize) -> Self {
        self.flat_spans = spans;
        self
    }

    /// Serves waiting jobs in `order` instead of arrival order.
    pub fn with_order(mut self, order: Box<dyn QueueOrder + 'a>) -> Self {
        self.order = Some(order);
        self
    }

    /// Job `i` arrives and joins the queue.
    pub fn arrive(&mut self, i: usize) {
        self.waiting.push(i);
        if let Some(k) = &mut self.kept {
            k.unplanned.push(i);
        }
    }

    /// Every job's outcome, in job order, for the jobs that ended.
    pub fn into_outcomes(self) -> Vec<Outcome> {
        self.outcomes.into_iter().flatten().collect()
    }

    /// Job `i` ends at `now`.
    pub fn finish(&mut self, i: usize, now: Time) {
        let j = &self.jobs[i];
        let s = self.started[i].unwrap_or(now);
        self.running.remove(&((s + j.estimate).0, i));
        self.free += j.size;
        if let Some(k) = &mut self.kept {
            // An early end frees room reservations move up into; any end
            // frees processors an unprotected job may start on.
            let early = k.span[i].is_some_and(|(_, e)| now.0 < e);
            if (early || !k.unprotected.is_empty()) && !self.waiting.is_empty() {
                k.compress = true;
            }
            k.set_running_span(i, j.size, None);
            k.quiet += 1;
            if k.quiet > KEEP_RUNNING_FOR {
                k.running = None;
            }
        }
        if let Some(order) = &mut self.order {
            order.ended(j, s, now);
        }
        self.outcomes[i] = Some(Outcome {
            id: j.id,
            submit: j.submit,
            start: s,
            end: now,
            size: j.size,
            user: j.user,
        });
    }

    fn start(&mut self, i: usize, now: Time) {
        let j = &self.jobs[i];
        self.free -= j.size;
        self.started[i] = Some(now);
        self.running.insert(((now + j.estimate).0, i));
        if let Some(order) = &mut self.order {
            order.started(j, now);
        }
    }

    /// Puts the waiting jobs in the order's order at `now`; equal keys keep
    /// arrival order (then the trace's order).
    fn sort_waiting(&mut self, now: Time) {
        let Some(order) = &self.order else { return };
        let jobs = self.jobs;
        let mut keyed: Vec<(f64, Time, usize)> = self
            .waiting
            .iter()
            .map(|&i| (order.key(&jobs[i], now), jobs[i].submit, i))
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        self.waiting.clear();
        self.waiting.extend(keyed.into_iter().map(|(_, _, i)| i));
    }

    /// Starts what the policy allows now; returns the started jobs.
    pub fn schedule(&mut self, now: Time, policy: Policy) -> Vec<usize> {
        if let Policy::Backfill { reservations } = policy {
            if reservations > 1 && self.order.is_none() && !self.on_profile {
                return self.schedule_on_kept_plan(now, reservations);
            }
        }
        self.kept = None;
        self.sort_waiting(now);
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
        self.start_waiting(&backfilled, now);
        out.extend(backfilled);
        out
    }

    /// Starts `these` waiting jobs, given in queue order, at `now`.
    fn start_waiting(&mut self, these: &[usize], now: Time) {
        if these.is_empty() {
            return;
        }
        for &i in these {
            self.start(i, now);
        }
        // `these` is in queue order, so one merge pass removes it.
        let mut next = these.iter().peekable();
        self.waiting.retain(|&w| {
            if next.peek() == Some(&&w) {
                next.next();
                false
            } else {
                true
            }
        });
    }

    /// Backfilling with `protects` protected jobs (conservative: all) in
    /// arrival order on the kept profile: overruns are extended to end a
    /// second from now, reservations moved up after an end, new arrivals
    /// placed (everyone again when an overrun broke the plan), and every job
    /// whose reservation begins now starts; its reservation is its planned
    /// run.
    fn schedule_on_kept_plan(&mut self, now: Time, protects: usize) -> Vec<usize> {
        let jobs = self.jobs;
        let procs = self.procs;
        let k = self.kept.get_or_insert_with(|| KeptPlan::new(jobs.len(), protects));
        for &(end, i) in &self.running {
            if end > now.0 {
                break;
            }
            let Some((s, e)) = k.span[i] else { continue };
            if e != now.0 + 1 {
                k.set_running_span(i, jobs[i].size, Some((s, now.0 + 1)));
                if e < now.0 + 1 && k.used.get().max_used(e, now.0 + 1) > procs as i32 {
                    k.stale = true;
                }
            }
        }
        // A reservation before now was waiting for a job that overran
        // between passes.
        k.stale |= k.next_start < now.0;
        // While every waiting job is larger than the free processors, none
        // starts now however the queue is planned: planning afresh keeps
        // nothing from pass to pass, so the re-plan waits for a pass where
        // one could start (about a fifth of re-plans on KTH-SP2 with users'
        // estimates).
        if k.stale && self.waiting.iter().all(|&i| jobs[i].size > self.free) {
            return Vec::new();
        }
        if k.stale {
            // Rebuilt from the running jobs: cheaper than taking out each
            // reservation when the queue is longer than the machine is busy.
            let total = self.running.len() + self.waiting.len();
            k.quiet = 0;
            match (&k.running, total <= self.flat_spans) {
                // The running jobs' spans are current (the overruns above
                // went into them too): the flat profile starts as their copy.
                (Some(r), true) => {
                    k.used.reset(total, self.flat_spans);
                    if let Usage::Flat(p) = &mut k.used {
                        p.clone_from(r);
                    }
                }
                _ => {
                    for &(end, i) in &self.running {
                        let s = self.started[i].map_or(now.0, |t| t.0);
                        k.span[i] = Some((s, Self::planned_end(end, now)));
                    }
                    let spans = self.running.iter().filter_map(|&(_, i)| {
                        let (s, e) = k.span[i]?;
                        Some((s, e, jobs[i].size as i32))
                    });
                    k.used.reset_to(total, self.flat_spans, spans);
                    // Kept from now on, while re-plans keep coming.
                    k.running = match &k.used {
                        Usage::Flat(p) => Some(p.clone()),
                        Usage::Tree(_) => None,
                    };
                }
            }
            k.next_start = i64::MAX;
            for &i in &self.waiting {
                k.span[i] = None;
            }
            k.unplanned.clone_from(&self.waiting);
            k.unprotected.clear();
            k.stale = false;
            k.compress = false;
        }
        let compress = std::mem::take(&mut k.compress);
        if compress {
            k.move_up(&self.waiting, jobs, procs, now);
        }
        let mut protected = k.protected(&self.waiting, now);
        if compress {
            k.promote(jobs, procs, now, &mut protected);
        }
        for i in std::mem::take(&mut k.unplanned) {
            k.place(i, &jobs[i], procs, now, &mut protected);
        }
        if k.next_start > now.0 {
            return Vec::new();
        }
        let mut starting = Vec::new();
        k.next_start = i64::MAX;
        for &i in &self.waiting {
            match k.span[i] {
                Some((s, _)) if s == now.0 => starting.push(i),
                Some((s, _)) => k.next_start = k.next_start.min(s),
                None => {}
            }
        }
        if let Some(r) = &mut k.running {
            for &i in &starting {
                if let Some((s, e)) = k.span[i] {
                    r.add(s, e, jobs[i].size as i32);
                }
            }
        }
        self.start_waiting(&starting, now);
        starting
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

    /// The general rule: in queue order, each job starts now if it fits, and
    /// is reserved at its earliest start while fewer than `reservations` hold
    /// a later one; any other may start now if it fits around them.
    fn backfill_on_profile(&self, now: Time, reservations: usize) -> Vec<usize> {
        let jobs = self.jobs;
        let horizon = Time(now.0.saturating_add(1 << 40));
        let mut plan = Planner::new(self.procs, horizon, BTree::new());
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
        // Protected: those reserved later than now (a job that starts now
        // protects nothing), as the site core counts them.
        let mut protected = 0;
        for &i in &self.waiting {
            let d = jobs[i].estimate.max(Duration(1));
            let latest = if protected < reservations {
                Time(horizon.0 - d.0)
            } else {
                now
            };
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
                } else {
                    protected += 1;
                }
            }
        }
        out
    }
}
