//! Queue orders: the order a local queue serves its waiting jobs in. The head
//! is the first job in this order, and backfilling protects jobs in it, so an
//! order combines with every [`Policy`](crate::queue::Policy): FCFS with SJF
//! starts the shortest job when it fits, EASY with fair share protects the
//! lightest user's job.
//!
//! An order gives each waiting job a key at each scheduling pass; lower keys
//! go first, and equal keys keep arrival order, so every order is
//! deterministic. Orders that account for use (fair share) hear of starts and
//! ends. A user-defined order implements [`QueueOrder`]:
//!
//! ```
//! use brokk_core::order::QueueOrder;
//! use brokk_core::queue::QueueJob;
//! use brokk_model::Time;
//!
//! /// Narrowest job first: serial jobs before parallel ones.
//! struct Narrowest;
//!
//! impl QueueOrder for Narrowest {
//!     fn key(&self, job: &QueueJob, _now: Time) -> f64 {
//!         f64::from(job.size)
//!     }
//! }
//! ```

use std::collections::HashMap;

use brokk_model::{Duration, Time};

use crate::queue::QueueJob;

/// The order a queue serves waiting jobs in (see the module's documentation).
pub trait QueueOrder: Send {
    /// The job's key at `now`: lower goes first; ties keep arrival order.
    fn key(&self, job: &QueueJob, now: Time) -> f64;
    /// `job` started at `now`.
    fn started(&mut self, _job: &QueueJob, _now: Time) {}
    /// `job`, started at `start`, ended at `now`.
    fn ended(&mut self, _job: &QueueJob, _start: Time, _now: Time) {}
}

/// Shortest job first, by the scheduler's estimate.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShortestFirst;

impl QueueOrder for ShortestFirst {
    fn key(&self, job: &QueueJob, _now: Time) -> f64 {
        job.estimate.0 as f64
    }
}

/// Longest job first, by the scheduler's estimate.
#[derive(Debug, Clone, Copy, Default)]
pub struct LongestFirst;

impl QueueOrder for LongestFirst {
    fn key(&self, job: &QueueJob, _now: Time) -> f64 {
        -(job.estimate.0 as f64)
    }
}

/// WFP3 (Tang et al., as in CQSim and Cobalt): priority grows with the cube
/// of the wait over the estimate, times the size, so long-waiting wide jobs
/// rise and short ones are not starved.
#[derive(Debug, Clone, Copy, Default)]
pub struct Wfp;

impl QueueOrder for Wfp {
    fn key(&self, job: &QueueJob, now: Time) -> f64 {
        let wait = (now - job.submit).0.max(0) as f64;
        let estimate = job.estimate.0.max(1) as f64;
        -((wait / estimate).powi(3) * f64::from(job.size))
    }
}

/// Fair share with decay, as Slurm's and Maui's: a user's use is the
/// processor-seconds of their jobs, counted as each job ends and halved every
/// `half_life`; the user with the least use goes first.
#[derive(Debug, Clone)]
pub struct FairShare {
    half_life: Duration,
    /// Use per user as of a time.
    used: HashMap<i64, (f64, Time)>,
}

impl FairShare {
    /// Fair share whose use halves every `half_life` (at least one second).
    pub fn new(half_life: Duration) -> Self {
        FairShare {
            half_life: half_life.max(Duration(1)),
            used: HashMap::new(),
        }
    }

    fn decayed(&self, (value, at): (f64, Time), now: Time) -> f64 {
        let dt = (now - at).0.max(0) as f64;
        value * (-dt * std::f64::consts::LN_2 / self.half_life.0 as f64).exp()
    }

    /// `user`'s decayed use at `now`, in processor-seconds.
    pub fn usage(&self, user: i64, now: Time) -> f64 {
        self.used.get(&user).map_or(0.0, |&u| self.decayed(u, now))
    }
}

impl QueueOrder for FairShare {
    fn key(&self, job: &QueueJob, now: Time) -> f64 {
        self.usage(job.user, now)
    }

    fn ended(&mut self, job: &QueueJob, start: Time, now: Time) {
        let work = (now - start).0.max(0) as f64 * f64::from(job.size);
        let before = self.usage(job.user, now);
        self.used.insert(job.user, (before + work, now));
    }
}

/// Priority by queue: each job's priority is its queue's (SWF field 15) in a
/// table, 0 for queues not in it; higher priorities go first.
#[derive(Debug, Clone, Default)]
pub struct ByPriority {
    priorities: HashMap<i64, f64>,
}

impl ByPriority {
    /// Priorities of queues by number.
    pub fn new(priorities: impl IntoIterator<Item = (i64, f64)>) -> Self {
        ByPriority {
            priorities: priorities.into_iter().collect(),
        }
    }
}

impl QueueOrder for ByPriority {
    fn key(&self, job: &QueueJob, _now: Time) -> f64 {
        -self.priorities.get(&job.queue).copied().unwrap_or(0.0)
    }
}

/// A built-in order by name, as a value (what a site's configuration and a
/// grid experiment's sites are given; each site makes its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// `sjf`: [`ShortestFirst`].
    ShortestFirst,
    /// `ljf`: [`LongestFirst`].
    LongestFirst,
    /// `wfp`: [`Wfp`].
    Wfp,
    /// `fairshare[:HALF_LIFE_S]`: [`FairShare`], a week by default.
    FairShare {
        /// Use halves every this long.
        half_life: Duration,
    },
}

impl std::str::FromStr for Named {
    type Err = String;

    /// `sjf`, `ljf`, `wfp` or `fairshare[:HALF_LIFE_S]`; an error says what
    /// is wrong. The names a live site's `order` and an experiment's
    /// policies take alike (an experiment adds `priority`, over its
    /// trace's queues, and orders of the program's own).
    fn from_str(name: &str) -> Result<Named, String> {
        let (base, parameter) = match name.split_once(':') {
            Some((b, p)) => (b, Some(p)),
            None => (name, None),
        };
        let plain = |o: Named| match parameter {
            None => Ok(o),
            Some(_) => Err(format!("queue order {base:?} takes no parameter")),
        };
        match base {
            "sjf" => plain(Named::ShortestFirst),
            "ljf" => plain(Named::LongestFirst),
            "wfp" => plain(Named::Wfp),
            "fairshare" => match parameter.map(str::parse::<i64>) {
                None => Ok(Named::FairShare {
                    half_life: Duration(7 * 86_400),
                }),
                Some(Ok(s)) if s > 0 => Ok(Named::FairShare { half_life: Duration(s) }),
                Some(_) => Err(format!(
                    "fairshare:{}: the half-life is a positive number of seconds",
                    parameter.unwrap_or_default()
                )),
            },
            _ => Err(format!(
                "unknown queue order {name:?} (sjf, ljf, wfp, fairshare[:HALF_LIFE_S])"
            )),
        }
    }
}

impl Named {
    /// A fresh order of this kind (with no use counted yet).
    pub fn make(self) -> Box<dyn QueueOrder> {
        match self {
            Named::ShortestFirst => Box::new(ShortestFirst),
            Named::LongestFirst => Box::new(LongestFirst),
            Named::Wfp => Box::new(Wfp),
            Named::FairShare { half_life } => Box::new(FairShare::new(half_life)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(user: i64, size: u32, estimate: i64, submit: i64) -> QueueJob {
        QueueJob {
            user,
            size,
            estimate: Duration(estimate),
            submit: Time(submit),
            ..QueueJob::default()
        }
    }

    #[test]
    fn fair_share_use_halves_every_half_life() {
        let mut f = FairShare::new(Duration(100));
        // 4 processors for 50 s: 200 processor-seconds at t = 50.
        f.ended(&job(7, 4, 50, 0), Time(0), Time(50));
        assert_eq!(f.usage(7, Time(50)), 200.0);
        assert!((f.usage(7, Time(150)) - 100.0).abs() < 1e-9);
        assert!((f.usage(7, Time(250)) - 50.0).abs() < 1e-9);
        assert_eq!(f.usage(8, Time(250)), 0.0);
        // A light user's job goes before a heavy user's.
        assert!(f.key(&job(8, 1, 1, 0), Time(250)) < f.key(&job(7, 1, 1, 0), Time(250)));
    }

    #[test]
    fn wfp_raises_long_waiting_wide_jobs() {
        let now = Time(1000);
        // Same wait over estimate: the wider job first.
        assert!(Wfp.key(&job(0, 8, 100, 0), now) < Wfp.key(&job(0, 2, 100, 0), now));
        // Same size: the job that waited longer relative to its length first.
        assert!(Wfp.key(&job(0, 2, 100, 0), now) < Wfp.key(&job(0, 2, 1000, 0), now));
    }
}
