//! Rescue after a resource fails ([VRM] 6): which reservations booked at a
//! failed resource the broker moves elsewhere, and when.
//!
//! A failed resource is down for a time nobody knows. A job running on it
//! is lost; a job booked there that has not started can be moved (only its
//! inputs follow it). Moving too late leaves the other resources full;
//! moving too early moves jobs the resource would have run after it
//! recovered (the overhead). The broker therefore keeps a *rescue
//! horizon*, recomputed at every step (a slot) while the resource is down:
//! every job booked there that starts before the horizon's end is moved,
//! the others stay (the resource may be back by then), and the resource's
//! capacity beyond the horizon stays open to new bookings. The strategies
//! differ only in how far the horizon reaches.
//!
//! The rules take time as an argument and the move itself as a callback, so
//! that the same step runs live (the move is an admission over the other
//! sites) and in the simulator.

use std::fmt;

use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{Availability, Duration, Job, ResourceInfo, Time};
use serde::{Deserialize, Serialize};

use crate::site::{JobHandle, JobState, Site, SiteError};

/// How far a rescue reaches ahead at each step ([VRM] 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Strategy {
    /// A1: only the jobs starting within the coming step, at the last
    /// moment: no job is moved needlessly, but the others are fuller by then.
    Next,
    /// Aall: every job booked at the resource, at once: the fewest lost,
    /// the most moved needlessly.
    All,
    /// An oracle that tells the downtime at the failure, times `factor`:
    /// 1 is Aoptimal (exactly the jobs inside the downtime, at once), 0.5
    /// the "broken oracle" that always halves it. Simulation only.
    Oracle {
        /// What the oracle's downtime is times the real one.
        factor: f64,
    },
    /// Load-based: the horizon ends where the grid's expected load (what is
    /// booked plus what usually arrives in one step) falls below `eta` for
    /// good; past that point a moved job is likely to find room later.
    Load {
        /// The load threshold, from 0 to 1.
        eta: f64,
    },
    /// Feedback-based: the horizon grows one step at a time while fewer
    /// than `success` of the jobs it reaches could be moved, and never
    /// shrinks.
    Feedback {
        /// The share of moves that stops the growth, from 0 to 1.
        success: f64,
    },
}

impl Strategy {
    /// Aoptimal.
    pub const OPTIMAL: Strategy = Strategy::Oracle { factor: 1.0 };
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Strategy::Next => write!(f, "a1"),
            Strategy::All => write!(f, "all"),
            Strategy::Oracle { factor } if *factor == 1.0 => write!(f, "optimal"),
            Strategy::Oracle { factor } => write!(f, "oracle:{factor}"),
            Strategy::Load { eta } => write!(f, "load:{eta}"),
            Strategy::Feedback { success } => write!(f, "feedback:{success}"),
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = String;

    /// `a1`, `all`, `optimal`, `oracle:F`, `load:ETA` or `feedback:P`.
    fn from_str(s: &str) -> Result<Strategy, String> {
        let known = "one of a1, all, optimal, oracle:FACTOR, load:ETA or feedback:SUCCESS";
        let share = |v: &str, what: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|x| (0.0..=1.0).contains(x))
                .ok_or_else(|| format!("rescue strategy `{s}`: {what} is a number from 0 to 1"))
        };
        match s.split_once(':') {
            None => match s {
                "a1" => Ok(Strategy::Next),
                "all" => Ok(Strategy::All),
                "optimal" => Ok(Strategy::OPTIMAL),
                _ => Err(format!("rescue strategy `{s}`: {known}")),
            },
            Some(("oracle", v)) => v
                .parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0 && x.is_finite())
                .map(|factor| Strategy::Oracle { factor })
                .ok_or_else(|| format!("rescue strategy `{s}`: the factor is a positive number")),
            Some(("load", v)) => share(v, "eta").map(|eta| Strategy::Load { eta }),
            Some(("feedback", v)) => share(v, "the success share").map(|success| Strategy::Feedback { success }),
            _ => Err(format!("rescue strategy `{s}`: {known}")),
        }
    }
}

impl TryFrom<String> for Strategy {
    type Error = String;
    fn try_from(s: String) -> Result<Strategy, String> {
        s.parse()
    }
}

impl From<Strategy> for String {
    fn from(s: Strategy) -> String {
        s.to_string()
    }
}

/// A job booked at the failed resource, as the rescue sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booked {
    /// The caller's id for it.
    pub id: u64,
    /// Its reservation's start.
    pub start: Time,
    /// Its reservation's end.
    pub end: Time,
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// The horizon's end after the step: jobs starting before it were
    /// tried, and the resource takes no new booking starting before it.
    pub horizon: Time,
    /// Moves tried.
    pub tried: usize,
    /// Of those, done.
    pub moved: usize,
}

/// Far enough to mean "every booking" without overflowing sums.
const EVERYTHING: Time = Time(i64::MAX / 4);

/// A strategy that cannot run as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RescueError {
    /// The step is not a positive duration.
    #[error("a rescue's step must be a positive duration")]
    Step,
    /// An oracle was asked for without the downtime it would tell.
    #[error("the oracle strategies need the downtime, which only a simulation knows")]
    NoOracle,
}

/// How a broker rescues: its strategy, how often it steps and how far the
/// load-based and feedback strategies may reach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RescueParams {
    /// The strategy.
    pub strategy: Strategy,
    /// The time between steps.
    pub step: Duration,
    /// The farthest ahead a horizon reaches.
    pub reach: Duration,
}

/// One failure of one resource, rescued step by step.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    strategy: Strategy,
    since: Time,
    step: Duration,
    reach: Duration,
    downtime: Option<Duration>,
    horizon: Time,
    /// When it last stepped.
    last: Option<Time>,
    /// The resource lost only a part (a node down or drained): only the
    /// reservations it can no longer hold move, and it takes work still.
    partial: bool,
}

impl Failure {
    /// A resource failed at `since`. The rescue steps every `step` and looks
    /// at most `reach` ahead for the load-based and feedback strategies (the
    /// longest book-ahead); `downtime` is what an oracle knows.
    pub fn new(
        strategy: Strategy,
        since: Time,
        step: Duration,
        reach: Duration,
        downtime: Option<Duration>,
    ) -> Result<Failure, RescueError> {
        if step.0 <= 0 {
            return Err(RescueError::Step);
        }
        if matches!(strategy, Strategy::Oracle { .. }) && downtime.is_none() {
            return Err(RescueError::NoOracle);
        }
        Ok(Failure {
            strategy,
            since,
            step,
            reach: Duration(reach.0.max(step.0)),
            downtime,
            horizon: since,
            last: None,
            partial: false,
        })
    }

    /// The same failure of a part of the resource only
    /// ([`Failure::is_partial`]).
    pub fn of_a_part(self) -> Failure {
        Failure { partial: true, ..self }
    }

    /// Whether the resource lost only a part: it answers and takes work,
    /// and what moves is what it says it can no longer hold.
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// Whether a step is due at `now`: the first at once, then one every step.
    pub fn due(&self, now: Time) -> bool {
        self.last.is_none_or(|l| now >= l + self.step)
    }

    /// When the resource failed.
    pub fn since(&self) -> Time {
        self.since
    }

    /// How many steps ahead a horizon may reach.
    pub fn steps_ahead(&self) -> usize {
        (self.reach.0 / self.step.0).max(1) as usize
    }

    /// The time between steps.
    pub fn every(&self) -> Duration {
        self.step
    }

    /// The horizon's end so far: no new booking at the resource starts
    /// before it.
    pub fn horizon(&self) -> Time {
        self.horizon
    }

    /// One step at `now`: moves, through `remap`, the jobs of `booked` (those
    /// still at the resource) that have not started and start before the
    /// horizon's end. A job whose move fails stays where it is and is
    /// tried again at the next step while it is inside the horizon: the
    /// resource may be back before it starts. `combined` gives the grid's
    /// expected load ([`combined_load`]) for the load-based strategy, which
    /// alone asks for it.
    pub fn step(
        &mut self,
        now: Time,
        booked: &[Booked],
        combined: impl FnOnce() -> Vec<f64>,
        mut remap: impl FnMut(&Booked) -> bool,
    ) -> Step {
        let floor = now + self.step;
        self.last = Some(now);
        let mut out = Step::default();
        let mut try_range = |from: Time, to: Time, out: &mut Step| -> (usize, usize) {
            let (mut tried, mut moved) = (0, 0);
            for b in booked.iter().filter(|b| b.start >= now.max(from) && b.start < to) {
                tried += 1;
                if remap(b) {
                    moved += 1;
                }
            }
            out.tried += tried;
            out.moved += moved;
            (tried, moved)
        };
        self.horizon = match self.strategy {
            Strategy::Next => floor,
            Strategy::All => EVERYTHING,
            Strategy::Oracle { factor } => {
                // What the oracle says at the failure, and nothing more.
                let told = self.downtime.map_or(0.0, |d| d.0 as f64 * factor).round() as i64;
                self.since + Duration(told)
            }
            Strategy::Load { eta } => now + Duration(self.step.0 * load_horizon(&combined(), eta) as i64),
            Strategy::Feedback { success } => {
                // The jobs inside the horizon so far (the next step's
                // included), then one step further each time while too few
                // of those reached could be moved.
                let mut h = self.horizon.max(floor);
                try_range(now, h, &mut out);
                let limit = now + self.reach;
                while h < limit {
                    let (tried, moved) = try_range(h, h + self.step, &mut out);
                    h += self.step;
                    if tried > 0 && moved as f64 >= success * tried as f64 {
                        break;
                    }
                }
                self.horizon = h;
                return Step { horizon: h, ..out };
            }
        };
        try_range(now, self.horizon, &mut out);
        Step {
            horizon: self.horizon,
            ..out
        }
    }
}

/// The load-based horizon in steps ([VRM] 6.3.3): the least `i` such that
/// the expected load of every later step is below `eta`, found from the far
/// end; `combined[k]` is the load `k + 1` steps ahead. At least one step,
/// so the jobs about to start are always tried.
pub fn load_horizon(combined: &[f64], eta: f64) -> usize {
    combined.iter().rposition(|&l| l >= eta).map_or(1, |k| k + 1)
}

/// How much of the grid's capacity is booked at the start of each of the
/// next `steps` steps after `now`, from the free capacity each resource
/// publishes with its capacity: 0 is idle, 1 full. A time a resource's
/// availability does not cover counts as free.
pub fn booked_load(now: Time, step: Duration, steps: usize, sites: &[(&Availability, u32)]) -> Vec<f64> {
    let total: f64 = sites.iter().map(|&(_, c)| f64::from(c)).sum();
    let mut load = vec![0.0; steps];
    if total <= 0.0 {
        return load;
    }
    for &(a, capacity) in sites {
        // One walk over the ranges per resource: the instants rise.
        let mut k = 0;
        for (i, l) in load.iter_mut().enumerate() {
            let t = now + Duration(step.0 * (i as i64 + 1));
            let free = if t < a.computed_at || t >= a.until {
                capacity
            } else {
                while k < a.ranges.len() && a.ranges[k].end <= t {
                    k += 1;
                }
                a.ranges
                    .get(k)
                    .filter(|r| r.start <= t)
                    .map_or(0, |r| r.free.min(capacity))
            };
            *l += f64::from(capacity - free) / total;
        }
    }
    load
}

/// What usually arrives in one step ([VRM] 6.3.3's average booking
/// profile): for each step ahead, the share of the grid's capacity that the
/// bookings made within one step hold then, averaged over every step since
/// the profile began.
#[derive(Debug, Clone, PartialEq)]
pub struct BookingProfile {
    began: Time,
    step: Duration,
    capacity: f64,
    /// Summed shares by steps ahead of the booking's own step.
    sum: Vec<f64>,
}

impl BookingProfile {
    /// A profile over `steps` steps ahead of a grid of `capacity` processors,
    /// counting from `began`.
    pub fn new(began: Time, step: Duration, steps: usize, capacity: u32) -> BookingProfile {
        BookingProfile {
            began,
            step: Duration(step.0.max(1)),
            capacity: f64::from(capacity.max(1)),
            sum: vec![0.0; steps],
        }
    }

    /// A booking of `amount` processors over `[start, end)` made at `now`.
    pub fn record(&mut self, now: Time, amount: u32, start: Time, end: Time) {
        let s = self.step.0;
        let at = (now.0 - self.began.0).div_euclid(s);
        // Steps ahead of the booking's own step, at their starts as the
        // load is sampled.
        let first = (start.0 - self.began.0 + s - 1).div_euclid(s) - at;
        let last = (end.0 - self.began.0 + s - 1).div_euclid(s) - at;
        let share = f64::from(amount) / self.capacity;
        for k in first.max(1)..last {
            match self.sum.get_mut(k as usize - 1) {
                Some(x) => *x += share,
                None => break,
            }
        }
    }

    /// The average profile at `now`: `[k]` is the share held `k + 1` steps ahead.
    pub fn average(&self, now: Time) -> Vec<f64> {
        let steps = ((now.0 - self.began.0).div_euclid(self.step.0) + 1).max(1) as f64;
        self.sum.iter().map(|x| x / steps).collect()
    }
}

/// The grid's expected load over the next steps: what is booked now plus
/// what usually arrives in a step ([VRM] 6.3.3's combined profile).
pub fn combined_load(booked: &[f64], usual: &[f64]) -> Vec<f64> {
    booked
        .iter()
        .enumerate()
        .map(|(k, b)| b + usual.get(k).copied().unwrap_or(0.0))
        .collect()
}

/// A failed resource as new bookings see it: nothing starts there before
/// `from` (the rescue horizon's end, or never while jobs are moved off it);
/// past that it is the resource itself, which may be back by then.
pub struct Fenced<'a> {
    /// The resource.
    pub site: &'a mut dyn Site,
    /// The first start it may take.
    pub from: Time,
}

impl Fenced<'_> {
    /// `req` cut to start no earlier than the fence; `None` when nothing is left.
    fn cut(&self, req: &Request) -> Option<Request> {
        let earliest = req.earliest.max(self.from);
        (earliest <= req.latest).then_some(Request { earliest, ..*req })
    }
}

impl Site for Fenced<'_> {
    fn endpoint(&self) -> &str {
        self.site.endpoint()
    }
    fn info(&self) -> Result<ResourceInfo, SiteError> {
        self.site.info()
    }
    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        match self.cut(req) {
            Some(r) => self.site.probe(&r, k),
            None => Ok(Vec::new()),
        }
    }
    fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError> {
        match self.cut(req) {
            Some(r) => self.site.reserve(owner, &r, hold),
            None => Ok(Reply::Rejected {
                next_start: Some(self.from),
            }),
        }
    }
    fn modify(&mut self, owner: &str, id: ReservationId, change: Change) -> Result<Time, SiteError> {
        self.site.modify(owner, id, change)
    }
    fn commit(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.site.commit(owner, id)
    }
    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.site.cancel(owner, id)
    }
    fn submit(&mut self, owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        self.site.submit(owner, job, reservation)
    }
    fn status(&self, job: &JobHandle) -> Result<JobState, SiteError> {
        self.site.status(job)
    }
    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), SiteError> {
        self.site.cancel_job(owner, job)
    }
}

/// The sites as a broker's algorithms take them, site `k` fenced from
/// `from` on (`Time(i64::MIN)` fences nothing, [`NEVER`] keeps it out);
/// `slot` holds the fence for as long as the list is used.
pub fn fenced<'a, S: Site>(
    sites: &'a mut [S],
    k: usize,
    from: Time,
    slot: &'a mut Option<Fenced<'a>>,
) -> Vec<&'a mut dyn Site> {
    let (head, rest) = sites.split_at_mut(k.min(sites.len()));
    let mut refs: Vec<&'a mut dyn Site> = head.iter_mut().map(|s| s as &mut dyn Site).collect();
    if let Some((at, tail)) = rest.split_first_mut() {
        refs.push(slot.insert(Fenced { site: at, from }));
        refs.extend(tail.iter_mut().map(|s| s as &mut dyn Site));
    }
    refs
}

/// A fence no booking passes: a failed resource's jobs are moved to the
/// others, never back to it.
pub const NEVER: Time = EVERYTHING;

#[cfg(test)]
mod tests;
