//! Wall-clock time the schedulers take, kept apart from the simulated
//! results: it differs from run to run and from machine to machine, where
//! everything in `summary.json` is the same byte for byte. The commands
//! write it to `timings.csv` beside the summary and print its means.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// A scheduler's calls in one run and the wall-clock time they took.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchedulerTime {
    /// Calls: workflows admitted or refused, or jobs simulated.
    pub calls: u64,
    /// Their time together.
    pub total: Duration,
}

impl SchedulerTime {
    /// Runs `f`, counting it as one call.
    pub fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.total += t.elapsed();
        self.calls += 1;
        r
    }

    /// Runs `f` as more of the call before it (a workflow tried again
    /// elsewhere): its time counts, not as a call of its own.
    pub fn more<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.total += t.elapsed();
        r
    }

    /// Mean microseconds per call (0 for none).
    pub fn micros_per_call(&self) -> f64 {
        self.total.as_secs_f64() * 1e6 / self.calls.max(1) as f64
    }
}

/// One run's scheduler time with what names the run.
#[derive(Debug, Clone)]
pub struct Timed {
    /// The series: a policy, or a scheduler with what else its setting varies.
    pub series: String,
    /// The point's x: the load, or the workflows' mean inter-arrival.
    pub at: String,
    /// The seed.
    pub seed: u64,
    /// What it took.
    pub time: SchedulerTime,
}

/// `timings.csv`: a line per run, `series,at,seed,calls,seconds,us_per_call`.
pub fn csv(runs: &[Timed]) -> String {
    let mut out = String::from("series,at,seed,calls,seconds,us_per_call\n");
    for r in runs {
        let _ = writeln!(
            out,
            "{},{},{},{},{:.6},{:.3}",
            quoted(&r.series),
            r.at,
            r.seed,
            r.time.calls,
            r.time.total.as_secs_f64(),
            r.time.micros_per_call()
        );
    }
    out
}

/// A CSV field, quoted when it holds a separator or a quote (RFC 4180).
fn quoted(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Each series' mean microseconds per call over its runs, with the least
/// and the most, in the order the series first appear.
pub fn per_series(runs: &[Timed]) -> Vec<(String, f64, f64, f64)> {
    let mut out: Vec<(String, Vec<f64>)> = Vec::new();
    for r in runs {
        let us = r.time.micros_per_call();
        match out.iter_mut().find(|(s, _)| *s == r.series) {
            Some((_, v)) => v.push(us),
            None => out.push((r.series.clone(), vec![us])),
        }
    }
    out.into_iter()
        .map(|(s, v)| {
            let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (s, mean, lo, hi)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(series: &str, calls: u64, micros: u64) -> Timed {
        Timed {
            series: series.into(),
            at: "0.5".into(),
            seed: 1,
            time: SchedulerTime {
                calls,
                total: Duration::from_micros(micros),
            },
        }
    }

    #[test]
    fn runs_are_written_one_a_line_and_summed_per_series() {
        let runs = [run("easy", 4, 10), run("a,b", 2, 10), run("easy", 2, 20)];
        let text = csv(&runs);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "easy,0.5,1,4,0.000010,2.500");
        assert_eq!(lines[2], "\"a,b\",0.5,1,2,0.000010,5.000");
        let s = per_series(&runs);
        assert_eq!(s[0], ("easy".to_string(), 6.25, 2.5, 10.0));
        assert_eq!(s[1].0, "a,b");
    }

    #[test]
    fn a_timed_call_is_counted_and_its_answer_passed_on() {
        let mut t = SchedulerTime::default();
        assert_eq!(t.time(|| 7), 7);
        assert_eq!(t.calls, 1);
        assert_eq!(SchedulerTime::default().micros_per_call(), 0.0);
    }
}
