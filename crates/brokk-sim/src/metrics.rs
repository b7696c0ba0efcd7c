//! The seeds' metrics over simulated outcomes: wait, response, slowdown, bounded
//! slowdown (threshold 10 s by default, seed 002), utilization and makespan.

use brokk_model::{Duration, Time};

use crate::cluster::Outcome;

/// Bounded-slowdown threshold of seed 002.
pub const DEFAULT_BOUND: Duration = Duration(10);

/// Per-job figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobMetrics {
    /// Start minus arrival.
    pub wait: Duration,
    /// End minus arrival.
    pub response: Duration,
    /// Response over run time (jobs with zero run time count as 1).
    pub slowdown: f64,
    /// max(1, response / max(run, bound)).
    pub bounded_slowdown: f64,
}

/// Figures for one job.
pub fn job(o: &Outcome, bound: Duration) -> JobMetrics {
    let run = (o.end - o.start).0;
    let response = (o.end - o.submit).0;
    JobMetrics {
        wait: o.start - o.submit,
        response: Duration(response),
        slowdown: if run > 0 { response as f64 / run as f64 } else { 1.0 },
        bounded_slowdown: (response as f64 / run.max(bound.0).max(1) as f64).max(1.0),
    }
}

/// Averages and totals over a set of outcomes on `procs` processors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Jobs counted.
    pub jobs: usize,
    /// Mean wait in seconds.
    pub mean_wait: f64,
    /// Mean response in seconds.
    pub mean_response: f64,
    /// Mean slowdown.
    pub mean_slowdown: f64,
    /// Mean bounded slowdown.
    pub mean_bounded_slowdown: f64,
    /// First arrival to last end.
    pub makespan: Duration,
    /// Processor-seconds used over processors times makespan.
    pub utilization: f64,
}

/// Summarises `outcomes` run on `procs` processors.
pub fn summary(outcomes: &[Outcome], procs: u32, bound: Duration) -> Summary {
    let n = outcomes.len();
    if n == 0 || procs == 0 {
        return Summary {
            jobs: 0,
            mean_wait: 0.0,
            mean_response: 0.0,
            mean_slowdown: 0.0,
            mean_bounded_slowdown: 0.0,
            makespan: Duration::ZERO,
            utilization: 0.0,
        };
    }
    let per: Vec<JobMetrics> = outcomes.iter().map(|o| job(o, bound)).collect();
    let mean = |f: &dyn Fn(&JobMetrics) -> f64| per.iter().map(f).sum::<f64>() / n as f64;
    let first = outcomes.iter().map(|o| o.submit).min().unwrap_or(Time::EPOCH);
    let last = outcomes.iter().map(|o| o.end).max().unwrap_or(Time::EPOCH);
    let makespan = last - first;
    let work: f64 = outcomes
        .iter()
        .map(|o| (o.end - o.start).0 as f64 * f64::from(o.size))
        .sum();
    Summary {
        jobs: n,
        mean_wait: mean(&|m| m.wait.0 as f64),
        mean_response: mean(&|m| m.response.0 as f64),
        mean_slowdown: mean(&|m| m.slowdown),
        mean_bounded_slowdown: mean(&|m| m.bounded_slowdown),
        makespan,
        utilization: if makespan.0 > 0 {
            work / (makespan.0 as f64 * f64::from(procs))
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(submit: i64, start: i64, end: i64, size: u32) -> Outcome {
        Outcome {
            id: 0,
            submit: Time(submit),
            start: Time(start),
            end: Time(end),
            size,
        }
    }

    #[test]
    fn per_job_figures() {
        let m = job(&o(0, 20, 25, 1), DEFAULT_BOUND);
        assert_eq!((m.wait, m.response), (Duration(20), Duration(25)));
        assert_eq!(m.slowdown, 5.0);
        // A 5 s job counts as 10 s in the bounded slowdown: 25 / 10.
        assert_eq!(m.bounded_slowdown, 2.5);
        // Never below 1.
        assert_eq!(job(&o(0, 0, 3, 1), DEFAULT_BOUND).bounded_slowdown, 1.0);
    }

    #[test]
    fn summary_of_a_small_schedule() {
        // 10 processors: 6 busy for [0, 10) and 4 busy for [5, 20); makespan 20.
        let s = summary(&[o(0, 0, 10, 6), o(0, 5, 20, 4)], 10, DEFAULT_BOUND);
        assert_eq!(s.makespan, Duration(20));
        assert!((s.utilization - (60.0 + 60.0) / 200.0).abs() < 1e-12);
        assert_eq!(s.mean_wait, 2.5);
        assert_eq!(s.mean_response, 15.0);
    }
}
