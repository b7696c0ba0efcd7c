//! The agent's figures for Prometheus (`GET /metrics`): each API call's
//! count by status and its latency, per route, beside the gauges read from
//! the site's state when scraped. Names follow Prometheus's advice: base
//! units in the name, `_total` for counters.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Writes a metric family's `# HELP` and `# TYPE` lines: every family
/// says what it counts, as Prometheus's own linter (`promtool check
/// metrics`) asks.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Upper bounds of the latency histograms, seconds.
pub const LATENCY_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];

/// Observations counted by the bucket they fall in, and their sum.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Per bucket of [`LATENCY_BUCKETS`], then above the last.
    counts: [u64; LATENCY_BUCKETS.len() + 1],
    sum: f64,
}

impl Histogram {
    /// Counts one observation of `seconds`.
    pub fn observe(&mut self, seconds: f64) {
        self.observe_n(seconds, 1);
    }

    /// Counts `n` observations of `seconds` each (a batch's mean for each
    /// of its members).
    pub fn observe_n(&mut self, seconds: f64, n: u64) {
        let b = LATENCY_BUCKETS
            .iter()
            .position(|&ub| seconds <= ub)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[b] += n;
        self.sum += seconds * n as f64;
    }

    /// Its lines in the text exposition, as `name` with `labels`
    /// (`k="v",...`, or none).
    pub fn write(&self, out: &mut String, name: &str, labels: &str) {
        let (with, own) = match labels {
            "" => (String::new(), String::new()),
            l => (format!("{l},"), format!("{{{l}}}")),
        };
        let mut cumulative = 0;
        for (ub, n) in LATENCY_BUCKETS.iter().zip(&self.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{{with}le=\"{ub}\"}} {cumulative}");
        }
        cumulative += self.counts[LATENCY_BUCKETS.len()];
        let _ = writeln!(out, "{name}_bucket{{{with}le=\"+Inf\"}} {cumulative}");
        let _ = writeln!(out, "{name}_sum{own} {}", self.sum);
        let _ = writeln!(out, "{name}_count{own} {cumulative}");
    }
}

/// One route's calls: how many ended with each status, and how long they took.
#[derive(Debug, Clone, Default)]
struct Calls {
    statuses: BTreeMap<u16, u64>,
    latency: Histogram,
}

/// The API's calls by (method, route), as the router matched them (an
/// unmatched path counts under `unmatched`, so a scan of random paths
/// cannot grow the table).
#[derive(Debug, Default)]
pub struct ApiMetrics {
    calls: Mutex<BTreeMap<(String, String), Calls>>,
}

impl ApiMetrics {
    /// Counts one call of `method` on `route` that answered `status` after `took`.
    pub fn observe(&self, method: &str, route: &str, status: u16, took: Duration) {
        let mut calls = self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = calls.entry((method.to_string(), route.to_string())).or_default();
        *c.statuses.entry(status).or_default() += 1;
        c.latency.observe(took.as_secs_f64());
    }

    /// Their lines in the text exposition.
    pub fn write(&self, out: &mut String) {
        let calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        family(
            out,
            "brokk_site_http_requests_total",
            "counter",
            "API calls answered, by method, route and status.",
        );
        for ((method, route), c) in &calls {
            for (status, n) in &c.statuses {
                let _ = writeln!(
                    out,
                    "brokk_site_http_requests_total{{method=\"{method}\",route=\"{route}\",code=\"{status}\"}} {n}"
                );
            }
        }
        family(
            out,
            "brokk_site_http_request_duration_seconds",
            "histogram",
            "Time to answer an API call's head, by method and route.",
        );
        for ((method, route), c) in &calls {
            let labels = format!("method=\"{method}\",route=\"{route}\"");
            c.latency
                .write(out, "brokk_site_http_request_duration_seconds", &labels);
        }
    }
}

/// The resource manager's commands (`sbatch`, `squeue`, `globusrun`, an
/// A-REX call) the agent ran, by backend and command: how long each took
/// and how many failed. One per process: an agent drives one backend.
pub static BACKEND_COMMANDS: CommandMetrics = CommandMetrics {
    calls: Mutex::new(BTreeMap::new()),
};

/// Commands by (backend, command): failures and latency.
#[derive(Debug)]
pub struct CommandMetrics {
    calls: Mutex<BTreeMap<(&'static str, String), Runs>>,
}

/// One command's runs: how many failed, and how long they all took.
#[derive(Debug, Clone, Default)]
struct Runs {
    failures: u64,
    latency: Histogram,
}

impl CommandMetrics {
    /// Counts one run of `command` at `backend` that took `took`.
    pub fn observe(&self, backend: &'static str, command: &str, ok: bool, took: Duration) {
        let mut calls = self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let runs = calls.entry((backend, command.to_string())).or_default();
        runs.failures += u64::from(!ok);
        runs.latency.observe(took.as_secs_f64());
    }

    /// Their lines in the text exposition.
    pub fn write(&self, out: &mut String) {
        let calls = self
            .calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        family(
            out,
            "brokk_site_backend_command_duration_seconds",
            "histogram",
            "Time the resource manager's commands took, by backend and command.",
        );
        for ((backend, command), runs) in &calls {
            let labels = format!("backend=\"{backend}\",command=\"{command}\"");
            runs.latency
                .write(out, "brokk_site_backend_command_duration_seconds", &labels);
        }
        family(
            out,
            "brokk_site_backend_command_failures_total",
            "counter",
            "The resource manager's commands that failed, by backend and command.",
        );
        for ((backend, command), runs) in &calls {
            let _ = writeln!(
                out,
                "brokk_site_backend_command_failures_total{{backend=\"{backend}\",command=\"{command}\"}} {}",
                runs.failures
            );
        }
    }
}

/// Job supervisors the agent follows now.
pub static SUPERVISORS: AtomicU64 = AtomicU64::new(0);

/// One supervisor followed, counted in [`SUPERVISORS`] until dropped.
#[derive(Debug)]
pub struct Supervising(());

impl Supervising {
    /// Counts one more supervisor followed.
    pub fn start() -> Supervising {
        SUPERVISORS.fetch_add(1, Ordering::Relaxed);
        Supervising(())
    }
}

impl Drop for Supervising {
    fn drop(&mut self) {
        SUPERVISORS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_route_and_status_with_cumulative_buckets() {
        let m = ApiMetrics::default();
        m.observe("POST", "/v1/jobs", 201, Duration::from_millis(3));
        m.observe("POST", "/v1/jobs", 201, Duration::from_millis(30));
        m.observe("POST", "/v1/jobs", 400, Duration::from_secs(9));
        let mut out = String::new();
        m.write(&mut out);
        assert!(out.contains("brokk_site_http_requests_total{method=\"POST\",route=\"/v1/jobs\",code=\"201\"} 2\n"));
        assert!(out.contains("brokk_site_http_requests_total{method=\"POST\",route=\"/v1/jobs\",code=\"400\"} 1\n"));
        let bucket = |le: &str| {
            format!("brokk_site_http_request_duration_seconds_bucket{{method=\"POST\",route=\"/v1/jobs\",le=\"{le}\"}}")
        };
        assert!(out.contains(&format!("{} 0\n", bucket("0.0025"))), "{out}");
        assert!(out.contains(&format!("{} 1\n", bucket("0.005"))), "{out}");
        assert!(out.contains(&format!("{} 2\n", bucket("0.05"))), "{out}");
        assert!(out.contains(&format!("{} 2\n", bucket("5"))), "{out}");
        assert!(out.contains(&format!("{} 3\n", bucket("+Inf"))), "{out}");
        assert!(out.contains("brokk_site_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/jobs\"} 3\n"));
    }

    #[test]
    fn a_histogram_without_labels_writes_none() {
        let mut h = Histogram::default();
        h.observe(0.5);
        let mut out = String::new();
        h.write(&mut out, "x_seconds", "");
        assert!(
            out.contains("x_seconds_bucket{le=\"0.25\"} 0\nx_seconds_bucket{le=\"1\"} 1\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_sum 0.5\nx_seconds_count 1\n"), "{out}");
    }

    #[test]
    fn backend_commands_are_counted_with_their_failures() {
        let m = CommandMetrics {
            calls: Mutex::new(BTreeMap::new()),
        };
        m.observe("slurm", "sbatch", true, Duration::from_millis(20));
        m.observe("slurm", "sbatch", false, Duration::from_millis(20));
        m.observe("slurm", "squeue", true, Duration::from_millis(2));
        let mut out = String::new();
        m.write(&mut out);
        assert!(
            out.contains("# HELP brokk_site_backend_command_failures_total "),
            "{out}"
        );
        let failures = "brokk_site_backend_command_failures_total{backend=\"slurm\",command=";
        assert!(out.contains(&format!("{failures}\"sbatch\"}} 1\n")), "{out}");
        assert!(out.contains(&format!("{failures}\"squeue\"}} 0\n")), "{out}");
        assert!(
            out.contains("brokk_site_backend_command_duration_seconds_count{backend=\"slurm\",command=\"sbatch\"} 2\n")
        );
    }
}
