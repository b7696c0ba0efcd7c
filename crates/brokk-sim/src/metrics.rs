//! The seeds' metrics over simulated outcomes: wait, response, slowdown, bounded
//! slowdown (threshold 10 s by default, [AB-avail]), utilization, makespan,
//! goodput and the percentage of finished jobs ([DMM]), with or without
//! [DMM]'s steady-state cut at the last arrival.

use brokk_model::{Duration, Time};

use crate::cluster::Outcome;
use crate::stats::percentiles;

/// Bounded-slowdown threshold of [AB-avail].
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

/// [AB-avail]'s improvement ratio (Eq. 2, after Lawson and Smirni): per
/// job found in both runs (by id, ended by `cut` in both), `(s_base -
/// s_new) / min(s_base, s_new)` of its bounded slowdowns, averaged;
/// positive when `new` does better. `None` when no job is in both.
pub fn improvement(base: &[Outcome], new: &[Outcome], cut: Window, bound: Duration) -> Option<f64> {
    let ended = |o: &&Outcome| cut.counts(o);
    let before: std::collections::HashMap<i64, f64> = base
        .iter()
        .filter(ended)
        .map(|o| (o.id, job(o, bound).bounded_slowdown))
        .collect();
    let ratios: Vec<f64> = new
        .iter()
        .filter(ended)
        .filter_map(|o| {
            let b = *before.get(&o.id)?;
            let n = job(o, bound).bounded_slowdown;
            Some((b - n) / b.min(n))
        })
        .collect();
    (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64)
}

/// Where the measured period ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Horizon {
    /// Seed 001's steady-state rule: stop at the last arrival, so jobs still
    /// queued or running then do not finish.
    SteadyState,
    /// Run until every job has finished (the cool-down included).
    #[default]
    CoolDown,
}

/// Averages and totals over a set of outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Summary {
    /// Jobs submitted (routed here, whether or not they ran).
    pub submitted: usize,
    /// Jobs that finished within the horizon; the averages are over these.
    pub finished: usize,
    /// Finished jobs as a percentage of submitted ones ([DMM]'s JF%).
    pub finished_pct: f64,
    /// Mean wait in seconds.
    pub mean_wait: f64,
    /// Mean response in seconds.
    pub mean_response: f64,
    /// Mean slowdown.
    pub mean_slowdown: f64,
    /// Mean bounded slowdown.
    pub mean_bounded_slowdown: f64,
    /// Average weighted response time, seconds: each job's response
    /// weighted by its work (processors times run time), so a wide long
    /// job counts as much as the many small ones its work would make
    /// (Schwiegelshohn and Yahyapour's AWRT, as grid-scheduling studies
    /// report it beside the plain means).
    pub awrt: f64,
    /// Average weighted slowdown: each job's slowdown weighted by its work.
    pub awsd: f64,
    /// Median wait, seconds (percentiles by nearest rank).
    pub wait_p50: f64,
    /// 90th percentile of wait, seconds.
    pub wait_p90: f64,
    /// 99th percentile of wait, seconds.
    pub wait_p99: f64,
    /// Median response, seconds.
    pub response_p50: f64,
    /// 90th percentile of response, seconds.
    pub response_p90: f64,
    /// 99th percentile of response, seconds.
    pub response_p99: f64,
    /// Median bounded slowdown.
    pub bounded_slowdown_p50: f64,
    /// 90th percentile of bounded slowdown.
    pub bounded_slowdown_p90: f64,
    /// 99th percentile of bounded slowdown.
    pub bounded_slowdown_p99: f64,
    /// Processor-seconds of the finished jobs ([DMM]'s goodput).
    pub goodput: f64,
    /// First arrival to the end of the measured period, seconds.
    pub makespan: i64,
    /// Processor-seconds used within the measured period over processors
    /// times its length.
    pub utilization: f64,
}

/// Summarises `outcomes` of `submitted` jobs run on `procs` processors,
/// over the measured period `cut` ([`Window`]): only the jobs it counts are
/// finished, and utilization counts the work done inside it.
pub fn summary(outcomes: &[Outcome], submitted: usize, procs: u32, cut: Window, bound: Duration) -> Summary {
    let finished: Vec<&Outcome> = outcomes.iter().filter(|o| cut.counts(o)).collect();
    let n = finished.len();
    let first = match cut.from {
        Some(f) => f,
        None => outcomes.iter().map(|o| o.submit).min().unwrap_or(Time::EPOCH),
    };
    let last = match cut.to {
        Some(c) => c,
        None => outcomes.iter().map(|o| o.end).max().unwrap_or(first),
    };
    let per: Vec<JobMetrics> = finished.iter().map(|o| job(o, bound)).collect();
    let mean = |f: &dyn Fn(&JobMetrics) -> f64| {
        if n == 0 {
            0.0
        } else {
            per.iter().map(f).sum::<f64>() / n as f64
        }
    };
    const PS: [f64; 3] = [50.0, 90.0, 99.0];
    let column = |f: &dyn Fn(&JobMetrics) -> f64| percentiles(&mut per.iter().map(f).collect::<Vec<_>>(), PS);
    let [wait_p50, wait_p90, wait_p99] = column(&|m| m.wait.0 as f64);
    let [response_p50, response_p90, response_p99] = column(&|m| m.response.0 as f64);
    let [bounded_slowdown_p50, bounded_slowdown_p90, bounded_slowdown_p99] = column(&|m| m.bounded_slowdown);
    // Weights are each job's work; a job that ran no time weighs nothing.
    let work = |o: &Outcome| (o.end - o.start).0.max(0) as f64 * f64::from(o.size);
    let total_work: f64 = finished.iter().map(|o| work(o)).sum();
    let weighted = |f: &dyn Fn(&JobMetrics) -> f64| {
        if total_work > 0.0 {
            finished.iter().zip(&per).map(|(o, m)| work(o) * f(m)).sum::<f64>() / total_work
        } else {
            0.0
        }
    };
    let work_until = |o: &Outcome, end: Time| (o.end.min(end) - o.start.max(first)).0.max(0) as f64 * f64::from(o.size);
    let used: f64 = outcomes.iter().map(|o| work_until(o, last)).sum();
    let makespan = (last - first).0.max(0);
    Summary {
        submitted,
        finished: n,
        finished_pct: if submitted > 0 {
            100.0 * n as f64 / submitted as f64
        } else {
            0.0
        },
        mean_wait: mean(&|m| m.wait.0 as f64),
        mean_response: mean(&|m| m.response.0 as f64),
        mean_slowdown: mean(&|m| m.slowdown),
        mean_bounded_slowdown: mean(&|m| m.bounded_slowdown),
        awrt: weighted(&|m| m.response.0 as f64),
        awsd: weighted(&|m| m.slowdown),
        wait_p50,
        wait_p90,
        wait_p99,
        response_p50,
        response_p90,
        response_p99,
        bounded_slowdown_p50,
        bounded_slowdown_p90,
        bounded_slowdown_p99,
        goodput: total_work,
        makespan,
        utilization: if makespan > 0 && procs > 0 {
            used / (makespan as f64 * f64::from(procs))
        } else {
            0.0
        },
    }
}

/// The size classes of [`by_size`]: processors up to each bound.
pub const SIZE_CLASSES: [(u32, &str); 6] = [
    (1, "1"),
    (4, "2-4"),
    (16, "5-16"),
    (64, "17-64"),
    (256, "65-256"),
    (u32::MAX, ">256"),
];

/// The measured period of a run: the jobs that arrived at or after `from`
/// (a warm-up before it is left out, as [AB-avail] leaves out its first
/// two weeks) and ended by `to` (the steady-state rule's last arrival);
/// utilization is measured between the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Window {
    /// The first arrival that counts; `None`: the first of all.
    pub from: Option<Time>,
    /// The last end that counts; `None`: every end.
    pub to: Option<Time>,
}

impl Window {
    /// Every job, however late it ends.
    pub const ALL: Window = Window { from: None, to: None };

    /// Whether job `o` counts in the figures.
    pub fn counts(&self, o: &Outcome) -> bool {
        self.from.is_none_or(|f| o.submit >= f) && self.to.is_none_or(|t| o.end <= t)
    }

    /// How many of `outcomes` arrived in the measured period.
    pub fn arrived(&self, outcomes: &[Outcome]) -> usize {
        match self.from {
            None => outcomes.len(),
            Some(f) => outcomes.iter().filter(|o| o.submit >= f).count(),
        }
    }
}

/// [`summary`] per user (ascending ids; -1 for unknown), each over the
/// user's jobs; utilization is the user's share of the whole platform.
pub fn by_user(outcomes: &[Outcome], procs: u32, cut: Window, bound: Duration) -> Vec<(i64, Summary)> {
    let mut sorted: Vec<Outcome> = outcomes.to_vec();
    sorted.sort_by_key(|o| o.user);
    sorted
        .chunk_by(|a, b| a.user == b.user)
        .map(|group| (group[0].user, summary(group, cut.arrived(group), procs, cut, bound)))
        .collect()
}

/// [`summary`] per size class of [`SIZE_CLASSES`] that has jobs.
pub fn by_size(outcomes: &[Outcome], procs: u32, cut: Window, bound: Duration) -> Vec<(&'static str, Summary)> {
    let class = |size: u32| SIZE_CLASSES.iter().position(|&(max, _)| size <= max).unwrap_or(0);
    let mut sorted: Vec<(usize, Outcome)> = outcomes.iter().map(|o| (class(o.size), *o)).collect();
    sorted.sort_by_key(|(c, _)| *c);
    sorted
        .chunk_by(|a, b| a.0 == b.0)
        .map(|group| {
            let jobs: Vec<Outcome> = group.iter().map(|(_, o)| *o).collect();
            (
                SIZE_CLASSES[group[0].0].1,
                summary(&jobs, cut.arrived(&jobs), procs, cut, bound),
            )
        })
        .collect()
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
            user: -1,
        }
    }

    /// Eq. 2 of [AB-avail] by hand: job 1 goes from a bounded slowdown of
    /// 4 to 2 (+1), job 2 from 1 to 3 (-2), job 3 is in one run only and
    /// job 4 ends after the cut; the mean is -0.5.
    #[test]
    fn the_improvement_ratio_compares_each_job_with_itself() {
        let with = |id: i64, wait: i64| Outcome {
            id,
            ..o(0, wait, wait + 100, 1)
        };
        let base = [with(1, 300), with(2, 0), with(4, 0)];
        let new = [with(1, 100), with(2, 200), with(3, 0), with(4, 10_000)];
        let cut = Window {
            from: None,
            to: Some(Time(1000)),
        };
        assert_eq!(improvement(&base, &new, cut, DEFAULT_BOUND), Some(-0.5));
        assert_eq!(improvement(&base, &base, cut, DEFAULT_BOUND), Some(0.0));
        assert_eq!(improvement(&base, &[with(9, 0)], cut, DEFAULT_BOUND), None);
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
        let s = summary(&[o(0, 0, 10, 6), o(0, 5, 20, 4)], 3, 10, Window::ALL, DEFAULT_BOUND);
        assert_eq!(s.makespan, 20);
        assert!((s.utilization - (60.0 + 60.0) / 200.0).abs() < 1e-12);
        assert_eq!(s.mean_wait, 2.5);
        assert_eq!(s.mean_response, 15.0);
        // Waits 0 and 5: the median is the first by nearest rank.
        assert_eq!((s.wait_p50, s.wait_p90, s.wait_p99), (0.0, 5.0, 5.0));
        assert_eq!((s.response_p50, s.response_p99), (10.0, 20.0));
        assert_eq!(s.goodput, 120.0);
        // One of three submitted jobs never ran.
        assert_eq!((s.finished, s.submitted), (2, 3));
        assert!((s.finished_pct - 200.0 / 3.0).abs() < 1e-9);
        // Each job weighs its work, 60 processor-seconds each: responses
        // 10 and 20, slowdowns 1 and 20/15.
        assert_eq!(s.awrt, 15.0);
        assert!((s.awsd - (1.0 + 20.0 / 15.0) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn weighted_means_count_a_jobs_work() {
        // A 1-processor job waits 90 s for a 10 s run (response 100,
        // slowdown 10, work 10); a 9-processor job starts at once and runs
        // 10 s (response 10, slowdown 1, work 90). Plain means: response
        // 55, slowdown 5.5; weighted by work: (10 * 100 + 90 * 10) / 100
        // = 19 and (10 * 10 + 90 * 1) / 100 = 1.9.
        let jobs = [o(0, 90, 100, 1), o(0, 0, 10, 9)];
        let s = summary(&jobs, 2, 10, Window::ALL, DEFAULT_BOUND);
        assert_eq!((s.mean_response, s.mean_slowdown), (55.0, 5.5));
        assert_eq!(s.awrt, 19.0);
        assert!((s.awsd - 1.9).abs() < 1e-12, "{}", s.awsd);
        // No work done: no weights, zero.
        let s = summary(&[o(0, 5, 5, 1)], 1, 10, Window::ALL, DEFAULT_BOUND);
        assert_eq!((s.awrt, s.awsd), (0.0, 0.0));
    }

    #[test]
    fn the_steady_state_rule_stops_at_the_last_arrival() {
        // Last arrival at 12: the second job (ending at 20) has not finished.
        let s = summary(
            &[o(0, 0, 10, 6), o(12, 12, 20, 4)],
            2,
            10,
            Window {
                from: None,
                to: Some(Time(12)),
            },
            DEFAULT_BOUND,
        );
        assert_eq!((s.finished, s.finished_pct), (1, 50.0));
        assert_eq!(s.goodput, 60.0);
        assert_eq!(s.makespan, 12);
        // 60 processor-seconds by the first job, none yet by the second.
        assert!((s.utilization - 60.0 / 120.0).abs() < 1e-12);
        assert_eq!(s.mean_wait, 0.0);
    }

    #[test]
    fn a_warm_up_leaves_out_the_jobs_that_arrived_in_it_and_the_time_before_its_end() {
        // Warm-up until 10: the first job (arrived at 0, busy 6 of 10
        // processors until 20) counts only in utilization, from 10 on.
        let window = Window {
            from: Some(Time(10)),
            to: None,
        };
        let s = summary(&[o(0, 0, 20, 6), o(10, 15, 30, 4)], 1, 10, window, DEFAULT_BOUND);
        assert_eq!((s.finished, s.submitted, s.mean_wait), (1, 1, 5.0));
        assert_eq!(s.makespan, 20);
        // 6 x 10 by the first, 4 x 15 by the second, over 10 x 20.
        assert!((s.utilization - 120.0 / 200.0).abs() < 1e-12, "{}", s.utilization);
    }

    #[test]
    fn groups_by_user_and_size_class() {
        let mut jobs = [o(0, 0, 10, 1), o(0, 10, 20, 4), o(0, 20, 30, 300)];
        jobs[1].user = 5;
        jobs[2].user = 5;
        let users = by_user(&jobs, 400, Window::ALL, DEFAULT_BOUND);
        let waits: Vec<(i64, usize, f64)> = users.iter().map(|(u, s)| (*u, s.finished, s.mean_wait)).collect();
        assert_eq!(waits, [(-1, 1, 0.0), (5, 2, 15.0)]);
        let sizes: Vec<(&str, usize)> = by_size(&jobs, 400, Window::ALL, DEFAULT_BOUND)
            .iter()
            .map(|(c, s)| (*c, s.finished))
            .collect();
        assert_eq!(sizes, [("1", 1), ("2-4", 1), (">256", 1)]);
    }
}
