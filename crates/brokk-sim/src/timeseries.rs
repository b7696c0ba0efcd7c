//! A run's state over time, bucket by bucket: the jobs waiting and running
//! and the busy share of the processors, each averaged over the bucket (a
//! job waiting for half of it counts half), so the series sums to the run's
//! totals whatever the bucket width. Written as `timeseries-<series>.csv`
//! and drawn as the utilization and queue plots.

use std::fmt::Write;

use crate::cluster::Outcome;

/// One bucket of a run's state.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bucket {
    /// Its start, seconds from the first arrival.
    pub start: i64,
    /// Jobs waiting, on average over the bucket.
    pub waiting: f64,
    /// Jobs running, on average over the bucket.
    pub running: f64,
    /// Busy processor-seconds over the processors times the width.
    pub utilization: f64,
}

/// A run's state in buckets of `width` seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeSeries {
    /// Bucket width, seconds: whole hours, at most about 400 buckets.
    pub width: i64,
    /// The buckets from the first arrival to the last end.
    pub buckets: Vec<Bucket>,
}

/// The state over time of the jobs `outcomes` on `procs` processors.
pub fn over_time<'a>(outcomes: impl Iterator<Item = &'a Outcome> + Clone, procs: f64) -> TimeSeries {
    let t0 = outcomes.clone().map(|o| o.submit.0).min().unwrap_or(0);
    let t1 = outcomes.clone().map(|o| o.end.0).max().unwrap_or(t0);
    // At most ~400 buckets of whole hours: a year is a bucket per day.
    let width = ((t1 - t0) / 400 / 3600 + 1) * 3600;
    let n = ((t1 - t0) / width + 1) as usize;
    let (mut waiting, mut running, mut busy) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    // Adds `weight` times the part of [from, to) in each bucket.
    let spread = |into: &mut Vec<f64>, from: i64, to: i64, weight: f64| {
        let mut t = from;
        while t < to {
            let b = ((t - t0) / width) as usize;
            let until = (t0 + (b as i64 + 1) * width).min(to);
            into[b] += (until - t) as f64 * weight;
            t = until;
        }
    };
    for o in outcomes {
        spread(&mut waiting, o.submit.0, o.start.0, 1.0);
        spread(&mut running, o.start.0, o.end.0, 1.0);
        spread(&mut busy, o.start.0, o.end.0, f64::from(o.size));
    }
    let w = width as f64;
    TimeSeries {
        width,
        buckets: (0..n)
            .map(|b| Bucket {
                start: b as i64 * width,
                waiting: waiting[b] / w,
                running: running[b] / w,
                utilization: if procs > 0.0 { busy[b] / (w * procs) } else { 0.0 },
            })
            .collect(),
    }
}

impl TimeSeries {
    /// As CSV: `time_s,waiting,running,utilization`, a bucket a line.
    pub fn csv(&self) -> String {
        let mut out = String::from("time_s,waiting,running,utilization\n");
        for b in &self.buckets {
            let _ = writeln!(
                out,
                "{},{:.4},{:.4},{:.6}",
                b.start, b.waiting, b.running, b.utilization
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use brokk_model::Time;

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

    #[test]
    fn each_bucket_averages_what_happened_in_it() {
        // 4 processors, hour buckets. A 2-processor job runs the first
        // hour; a 4-processor one arrives with it, waits an hour and a
        // half and runs an hour and a half.
        let jobs = [o(0, 0, 3600, 2), o(0, 3600 + 1800, 3 * 3600, 4)];
        let s = over_time(jobs.iter(), 4.0);
        assert_eq!(s.width, 3600);
        let got: Vec<(i64, f64, f64, f64)> = s
            .buckets
            .iter()
            .map(|b| (b.start, b.waiting, b.running, b.utilization))
            .collect();
        assert_eq!(
            got,
            [
                (0, 1.0, 1.0, 0.5),
                (3600, 0.5, 0.5, 0.5),
                (7200, 0.0, 1.0, 1.0),
                (10800, 0.0, 0.0, 0.0),
            ]
        );
        assert!(s
            .csv()
            .starts_with("time_s,waiting,running,utilization\n0,1.0000,1.0000,0.500000\n"));
    }

    #[test]
    fn the_buckets_sum_to_the_runs_work() {
        let jobs = [o(0, 100, 9000, 3), o(500, 700, 20_000, 1), o(4000, 4000, 4001, 8)];
        let s = over_time(jobs.iter(), 16.0);
        let work: f64 = s.buckets.iter().map(|b| b.utilization * s.width as f64 * 16.0).sum();
        assert!((work - (8900.0 * 3.0 + 19_300.0 + 8.0)).abs() < 1e-6, "{work}");
        let waited: f64 = s.buckets.iter().map(|b| b.waiting * s.width as f64).sum();
        assert!((waited - 300.0).abs() < 1e-9);
    }
}
