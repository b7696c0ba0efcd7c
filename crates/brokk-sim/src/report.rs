//! What an experiment writes: `jobs.csv` (every job at every point, and the
//! trace's recorded schedule), `summary.json` (every point, its groups, the
//! sweep's aggregates over seeds and the as-recorded baseline), each
//! series' simulated schedule as SWF and its state over time as CSV
//! ([`crate::timeseries`]), and the plots ([`crate::plots`]).

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use serde::Serialize;

use crate::experiment::{Baseline, PointResult, Prepared};
use crate::export::{jobs_csv, schedule_swf};
use crate::metrics::{improvement, Horizon, Summary};
use crate::stats::{paired, spread, Spread};

/// The summary of one point, as written to JSON.
#[derive(Debug, Serialize)]
pub struct PointSummary<'a> {
    /// Policy name.
    pub policy: &'a str,
    /// Asked offered load, if scaled.
    pub load: Option<f64>,
    /// Seed.
    pub seed: u64,
    /// Offered load of the jobs simulated.
    pub offered_load: f64,
    /// Jobs no cluster could take.
    pub unrouted: usize,
    /// Jobs killed at their wall time (grid runs).
    pub killed: usize,
    /// Moves made by queue adaptation (broker routings).
    pub moved: usize,
    /// Jobs co-allocated over several sites (broker routings).
    pub coallocated: usize,
    /// Jobs the broker placed whose completion is compared with its
    /// prediction, and the mean and mean absolute error in seconds
    /// (actual minus predicted; broker routings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prediction_error: Option<PredictionErrorSummary>,
    /// The requests the brokers made of the sites by kind, and the
    /// messages (requests and replies) in all (broker routings only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<MessagesSummary>,
    /// Jobs that ran under a broker other than their home's (series whose
    /// brokers delegate to each other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delegated: Option<usize>,
    /// The sites' own users' jobs (`platform.local_load`); `overall` is
    /// then the grid's jobs alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<Summary>,
    /// Against the base series at the same load and seed
    /// (`metrics.base`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub improvement: Option<Improvement<'a>>,
    /// All clusters together.
    pub overall: Summary,
    /// Per cluster.
    pub clusters: Vec<ClusterSummary<'a>>,
    /// All clusters together, per user.
    pub by_user: Vec<GroupSummary>,
    /// All clusters together, per size class (processors).
    pub by_size: Vec<GroupSummary>,
}

/// One group's summary (a user, a size class).
#[derive(Debug, Serialize)]
pub struct GroupSummary {
    /// The user's id, or the size class.
    pub group: String,
    /// Its figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// One sweep point over its seeds.
#[derive(Debug, Serialize)]
pub struct Aggregate<'a> {
    /// Policy name.
    pub policy: &'a str,
    /// Asked offered load, if scaled.
    pub load: Option<f64>,
    /// Seeds aggregated.
    pub seeds: usize,
    /// Each of [`AGGREGATED`]'s figures: mean, standard deviation and 95%
    /// confidence interval over the seeds.
    pub metrics: BTreeMap<&'static str, Spread>,
}

/// Two series at one load, seed by seed: each of [`AGGREGATED`]'s figures
/// as the mean of `policy`'s value minus `against`'s over the seeds both
/// ran, with the paired 95% interval ([`paired`]).
#[derive(Debug, Serialize)]
pub struct Comparison<'a> {
    /// The series compared.
    pub policy: &'a str,
    /// The series it is compared with: the experiment's baseline
    /// (`metrics.base`, else its first series) when the pair holds it,
    /// else the earlier of the two.
    pub against: &'a str,
    /// Asked offered load, if scaled.
    pub load: Option<f64>,
    /// Seeds both ran.
    pub seeds: usize,
    /// `policy - against` per figure.
    pub difference: BTreeMap<&'static str, Spread>,
}

/// The recorded schedule's figures, as written to JSON.
#[derive(Debug, Serialize)]
pub struct BaselineSummary {
    /// Offered load of the trace as recorded.
    pub offered_load: f64,
    /// Its figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// Predicted against actual completion, as written to JSON.
#[derive(Debug, Serialize)]
pub struct PredictionErrorSummary {
    /// Jobs compared.
    pub jobs: usize,
    /// Mean of actual minus predicted completion, seconds.
    pub mean_s: f64,
    /// Mean absolute error, seconds.
    pub mean_absolute_s: f64,
    /// Jobs that started more than `violation_tolerance_s` later than
    /// predicted ([AB-avail]'s violations), and their share of `jobs`.
    pub violations: usize,
    /// The violations' percentage of the jobs compared.
    pub violations_pct: f64,
    /// The tolerance, seconds.
    pub violation_tolerance_s: i64,
}

/// [AB-avail]'s improvement ratio against a base series: the mean over the
/// jobs of both runs of `(s_base - s) / min(s_base, s)` of their bounded
/// slowdowns; positive is better than the base.
#[derive(Debug, Serialize)]
pub struct Improvement<'a> {
    /// The base series.
    pub base: &'a str,
    /// The grid's jobs.
    pub grid: Option<f64>,
    /// The sites' own users' jobs, when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<f64>,
}

/// The brokers' requests to the sites, as written to JSON.
#[derive(Debug, Serialize)]
pub struct MessagesSummary {
    /// By kind.
    #[serde(flatten)]
    pub requests: brokk_broker::broker::Requests,
    /// Requests and replies in all.
    pub total: u64,
}

/// One cluster's summary.
#[derive(Debug, Serialize)]
pub struct ClusterSummary<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// Its figures.
    #[serde(flatten)]
    pub summary: Summary,
}

/// The summary document of an experiment.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// Experiment name.
    pub experiment: &'a str,
    /// Which jobs the means are over: `cool-down` (every job) or
    /// `steady-state` (the jobs ended by the last arrival; each point's
    /// `finished_pct` is the share kept).
    pub horizon: Horizon,
    /// The warm-up left out of every figure (`metrics.warmup`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup: Option<&'a str>,
    /// Every point, in sweep order.
    pub points: Vec<PointSummary<'a>>,
    /// Each (policy, load) over its seeds, in sweep order.
    pub aggregates: Vec<Aggregate<'a>>,
    /// The series every other is compared with in `comparisons`.
    pub baseline: &'a str,
    /// Every pair of series at every load, seed by seed ([`comparisons`]).
    pub comparisons: Vec<Comparison<'a>>,
    /// What the trace's own system did, for a trace workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub as_recorded: Option<BaselineSummary>,
}

/// A figure of a summary: (key, value).
pub type Figure = (&'static str, fn(&Summary) -> f64);

/// The figures [`aggregates`] carries over seeds.
pub const AGGREGATED: [Figure; 13] = [
    ("mean_wait", |s| s.mean_wait),
    ("mean_response", |s| s.mean_response),
    ("mean_slowdown", |s| s.mean_slowdown),
    ("mean_bounded_slowdown", |s| s.mean_bounded_slowdown),
    ("awrt", |s| s.awrt),
    ("awsd", |s| s.awsd),
    ("wait_p50", |s| s.wait_p50),
    ("wait_p90", |s| s.wait_p90),
    ("wait_p99", |s| s.wait_p99),
    ("bounded_slowdown_p90", |s| s.bounded_slowdown_p90),
    ("utilization", |s| s.utilization),
    ("finished_pct", |s| s.finished_pct),
    ("goodput", |s| s.goodput),
];

/// Each (policy, load) of `results` over its seeds, in sweep order.
pub fn aggregates<'a>(results: &'a [PointResult]) -> Vec<Aggregate<'a>> {
    let mut groups: Vec<(usize, Option<f64>, Vec<&PointResult>)> = Vec::new();
    for r in results {
        match groups
            .iter_mut()
            .find(|(p, l, _)| *p == r.point.policy && *l == r.point.load)
        {
            Some(g) => g.2.push(r),
            None => groups.push((r.point.policy, r.point.load, vec![r])),
        }
    }
    groups
        .into_iter()
        .map(|(_, load, rs)| Aggregate {
            policy: &rs[0].policy,
            load,
            seeds: rs.len(),
            metrics: AGGREGATED
                .iter()
                .map(|(key, value)| {
                    let values: Vec<f64> = rs.iter().map(|r| value(&r.overall)).collect();
                    (*key, spread(&values))
                })
                .collect(),
        })
        .collect()
}

/// The series an experiment compares the others with: `metrics.base`, or
/// its first series.
pub fn baseline_series(prepared: &Prepared) -> &str {
    prepared
        .spec
        .metrics
        .base
        .as_deref()
        .or_else(|| prepared.policies.first().map(|(name, _)| name.as_str()))
        .unwrap_or("")
}

/// Every pair of series at every load of `results`, in sweep order, each
/// over the seeds both ran: a series against the baseline, and two others
/// the later against the earlier. Empty with one series.
pub fn comparisons<'a>(prepared: &'a Prepared, results: &'a [PointResult]) -> Vec<Comparison<'a>> {
    let base = baseline_series(prepared);
    let mut loads: Vec<Option<f64>> = Vec::new();
    for r in results {
        if !loads.contains(&r.point.load) {
            loads.push(r.point.load);
        }
    }
    let names: Vec<&str> = prepared.policies.iter().map(|(n, _)| n.as_str()).collect();
    let mut out = Vec::new();
    for load in loads {
        let runs = |k: usize| -> BTreeMap<u64, &PointResult> {
            results
                .iter()
                .filter(|r| r.point.policy == k && r.point.load == load)
                .map(|r| (r.point.seed, r))
                .collect()
        };
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                let (a, b) = if names[i] == base {
                    (j, i)
                } else if names[j] == base {
                    (i, j)
                } else {
                    (j, i)
                };
                let (ra, rb) = (runs(a), runs(b));
                let both: Vec<(&PointResult, &PointResult)> =
                    ra.iter().filter_map(|(seed, x)| Some((*x, *rb.get(seed)?))).collect();
                if both.is_empty() {
                    continue;
                }
                out.push(Comparison {
                    policy: names[a],
                    against: names[b],
                    load,
                    seeds: both.len(),
                    difference: AGGREGATED
                        .iter()
                        .map(|(key, value)| {
                            let x: Vec<f64> = both.iter().map(|(x, _)| value(&x.overall)).collect();
                            let y: Vec<f64> = both.iter().map(|(_, y)| value(&y.overall)).collect();
                            (*key, paired(&x, &y))
                        })
                        .collect(),
                });
            }
        }
    }
    out
}

/// The summary document of `results`, with the trace's recorded schedule.
pub fn report<'a>(prepared: &'a Prepared, results: &'a [PointResult], baseline: Option<&Baseline>) -> Report<'a> {
    let groups = |g: &[(String, Summary)]| {
        g.iter()
            .map(|(group, summary)| GroupSummary {
                group: group.clone(),
                summary: *summary,
            })
            .collect()
    };
    Report {
        experiment: &prepared.spec.name,
        horizon: prepared.spec.metrics.horizon,
        warmup: prepared.spec.metrics.warmup.as_deref(),
        aggregates: aggregates(results),
        baseline: baseline_series(prepared),
        comparisons: comparisons(prepared, results),
        as_recorded: baseline.map(|b| BaselineSummary {
            offered_load: b.offered_load,
            summary: b.overall,
        }),
        points: results
            .iter()
            .map(|r| PointSummary {
                policy: &r.policy,
                load: r.point.load,
                seed: r.point.seed,
                offered_load: r.offered_load,
                unrouted: r.unrouted,
                killed: r.killed,
                moved: r.moved,
                coallocated: r.coallocated,
                prediction_error: r.prediction.map(|p| PredictionErrorSummary {
                    jobs: p.jobs,
                    mean_s: p.mean,
                    mean_absolute_s: p.mean_absolute,
                    violations: p.violations,
                    violations_pct: 100.0 * p.violations as f64 / p.jobs.max(1) as f64,
                    violation_tolerance_s: brokk_broker::predict::VIOLATION_TOLERANCE.0,
                }),
                delegated: r.delegated,
                local: r.local,
                improvement: prepared.spec.metrics.base.as_deref().and_then(|base| {
                    let b = results
                        .iter()
                        .find(|b| b.policy == base && b.point.load == r.point.load && b.point.seed == r.point.seed)?;
                    let bound = brokk_model::Duration(prepared.spec.metrics.bound);
                    Some(Improvement {
                        base,
                        grid: improvement(&b.jobs, &r.jobs, r.cut, bound),
                        local: improvement(&b.local_jobs, &r.local_jobs, r.cut, bound),
                    })
                }),
                messages: r.messages.map(|m| MessagesSummary {
                    requests: m,
                    total: m.messages(),
                }),
                overall: r.overall,
                clusters: r
                    .clusters
                    .iter()
                    .map(|(name, summary)| ClusterSummary {
                        name,
                        summary: *summary,
                    })
                    .collect(),
                by_user: groups(&r.by_user.iter().map(|(u, s)| (u.to_string(), *s)).collect::<Vec<_>>()),
                by_size: groups(&r.by_size.iter().map(|(c, s)| (c.to_string(), *s)).collect::<Vec<_>>()),
            })
            .collect(),
    }
}

/// A series label as part of a file name.
pub fn file_label(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_+.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Each run's wall-clock time, named by its series, load and seed
/// (`timings.csv`; not in the report, which is the same from run to run).
pub fn timed(results: &[PointResult]) -> Vec<crate::timing::Timed> {
    results
        .iter()
        .map(|r| crate::timing::Timed {
            series: r.policy.clone(),
            at: r.point.load.map_or_else(|| "-".into(), |l| l.to_string()),
            seed: r.point.seed,
            time: r.time,
        })
        .collect()
}

/// Writes `jobs.csv`, `summary.json`, `timings.csv`, each series' first
/// schedule as `schedule-<series>.swf`, and the plots into `dir`, each file
/// on a thread of its own.
pub fn write_all(
    dir: &Path,
    prepared: &Prepared,
    results: &[PointResult],
    baseline: Option<&Baseline>,
) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let csv = || std::fs::write(dir.join("jobs.csv"), jobs_csv(prepared, results, baseline));
    let json = || {
        let json = serde_json::to_string_pretty(&report(prepared, results, baseline)).map_err(io::Error::other)?;
        std::fs::write(dir.join("summary.json"), json + "\n")
    };
    let schedule = |r: &PointResult| {
        let swf = schedule_swf(prepared, r).map_err(io::Error::other)?;
        let mut out = Vec::new();
        crate::swf::write(&swf, &mut out)?;
        std::fs::write(dir.join(format!("schedule-{}.swf", file_label(&r.policy))), out)?;
        let series = crate::plots::series_of(prepared, r);
        std::fs::write(
            dir.join(format!("timeseries-{}.csv", file_label(&r.policy))),
            series.csv(),
        )
    };
    let plots = || crate::plots::write_all(dir, prepared, results, baseline);
    let timings = || std::fs::write(dir.join("timings.csv"), crate::timing::csv(&timed(results)));
    std::thread::scope(|s| {
        let mut writers = vec![s.spawn(csv), s.spawn(json), s.spawn(plots), s.spawn(timings)];
        for r in crate::plots::firsts(prepared, results) {
            writers.push(s.spawn(move || schedule(r)));
        }
        writers.into_iter().try_for_each(|w| {
            w.join()
                .unwrap_or_else(|_| Err(io::Error::other("a report writer failed")))
        })
    })
}
