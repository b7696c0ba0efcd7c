//! What an experiment writes: per-job CSV, a summary JSON and SVG plots
//! (metric against load level per policy, utilization over time, the wait-time
//! distribution).

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use plotters::prelude::*;
use serde::Serialize;

use crate::experiment::{PointResult, Prepared};
use crate::metrics::{job, Summary};

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
    /// All clusters together.
    pub overall: Summary,
    /// Per cluster.
    pub clusters: Vec<ClusterSummary<'a>>,
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
    /// Every point, in sweep order.
    pub points: Vec<PointSummary<'a>>,
}

/// The summary document of `results`.
pub fn report<'a>(prepared: &'a Prepared, results: &'a [PointResult]) -> Report<'a> {
    Report {
        experiment: &prepared.spec.name,
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
            })
            .collect(),
    }
}

/// Per-job CSV: one line per job and point.
pub fn jobs_csv(prepared: &Prepared, results: &[PointResult]) -> String {
    let bound = brokk_model::Duration(prepared.spec.metrics.bound);
    let mut out = String::from("policy,load,seed,cluster,job,submit,start,end,size,wait,bounded_slowdown\n");
    for r in results {
        let load = r.point.load.map_or(String::new(), |l| l.to_string());
        for c in &r.runs {
            for o in &c.outcomes {
                let m = job(o, bound);
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{:.4}",
                    r.policy,
                    load,
                    r.point.seed,
                    c.spec.name,
                    o.id,
                    o.submit.0,
                    o.start.0,
                    o.end.0,
                    o.size,
                    m.wait.0,
                    m.bounded_slowdown
                );
            }
        }
    }
    out
}

/// Writes `jobs.csv`, `summary.json` and the plots into `dir`.
pub fn write_all(dir: &Path, prepared: &Prepared, results: &[PointResult]) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("jobs.csv"), jobs_csv(prepared, results))?;
    let json = serde_json::to_string_pretty(&report(prepared, results)).map_err(io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json + "\n")?;
    let plot = |name: &str, svg: Result<String, String>| match svg {
        Ok(svg) => std::fs::write(dir.join(name), svg),
        Err(e) => Err(io::Error::other(format!("{name}: {e}"))),
    };
    if results.iter().any(|r| r.point.load.is_some()) {
        for (key, label, value) in METRICS {
            plot(
                &format!("load-{key}.svg"),
                metric_by_load(prepared, results, value, label),
            )?;
        }
    }
    plot("utilization.svg", utilization_over_time(prepared, results))?;
    plot("wait-cdf.svg", wait_cdf(prepared, results))?;
    Ok(())
}

/// The metrics plotted against load: (file key, axis label, value).
type Metric = (&'static str, &'static str, fn(&Summary) -> f64);
const METRICS: [Metric; 5] = [
    ("mean_wait", "mean wait (s)", |s| s.mean_wait),
    ("mean_bounded_slowdown", "mean bounded slowdown", |s| {
        s.mean_bounded_slowdown
    }),
    ("utilization", "utilization", |s| s.utilization),
    ("finished_pct", "finished jobs (%)", |s| s.finished_pct),
    ("goodput", "goodput (CPU-s)", |s| s.goodput),
];

/// A line chart with one series per policy.
fn chart(title: &str, x_label: &str, y_label: &str, series: &[(String, Vec<(f64, f64)>)]) -> Result<String, String> {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, 0.0..y1)
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, (name, points)) in series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            c.draw_series(LineSeries::new(points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// An overall metric against load per policy, averaged over seeds.
fn metric_by_load(
    prepared: &Prepared,
    results: &[PointResult],
    value: fn(&Summary) -> f64,
    label: &str,
) -> Result<String, String> {
    let series: Vec<(String, Vec<(f64, f64)>)> = prepared
        .policies
        .iter()
        .enumerate()
        .map(|(p, (name, _))| {
            let mut by_load: Vec<(f64, f64, usize)> = Vec::new();
            for r in results.iter().filter(|r| r.point.policy == p) {
                let Some(load) = r.point.load else { continue };
                let v = value(&r.overall);
                match by_load.iter_mut().find(|(l, _, _)| *l == load) {
                    Some(e) => {
                        e.1 += v;
                        e.2 += 1;
                    }
                    None => by_load.push((load, v, 1)),
                }
            }
            by_load.sort_by(|a, b| a.0.total_cmp(&b.0));
            (
                name.clone(),
                by_load.into_iter().map(|(l, v, n)| (l, v / n as f64)).collect(),
            )
        })
        .collect();
    chart(
        &format!("{}: {label}", prepared.spec.name),
        "offered load",
        label,
        &series,
    )
}

/// The first result of each policy.
fn firsts<'a>(prepared: &Prepared, results: &'a [PointResult]) -> Vec<&'a PointResult> {
    (0..prepared.policies.len())
        .filter_map(|p| results.iter().find(|r| r.point.policy == p))
        .collect()
}

/// Busy fraction of the platform per hour, for each policy's first point.
fn utilization_over_time(prepared: &Prepared, results: &[PointResult]) -> Result<String, String> {
    let procs: f64 = prepared.clusters.iter().map(|c| f64::from(c.procs)).sum();
    let series = firsts(prepared, results)
        .into_iter()
        .map(|r| {
            let outcomes = r.runs.iter().flat_map(|c| c.outcomes.iter());
            let t0 = outcomes.clone().map(|o| o.submit.0).min().unwrap_or(0);
            let t1 = outcomes.clone().map(|o| o.end.0).max().unwrap_or(t0);
            // At most ~2000 buckets of whole hours.
            let width = ((t1 - t0) / 2000 / 3600 + 1) * 3600;
            let mut busy = vec![0.0; ((t1 - t0) / width + 1) as usize];
            for o in outcomes {
                let mut t = o.start.0;
                while t < o.end.0 {
                    let b = ((t - t0) / width) as usize;
                    let edge = t0 + (b as i64 + 1) * width;
                    let until = edge.min(o.end.0);
                    busy[b] += (until - t) as f64 * f64::from(o.size);
                    t = until;
                }
            }
            let pts = busy
                .iter()
                .enumerate()
                .map(|(b, w)| (b as f64 * width as f64 / 86_400.0, w / (width as f64 * procs)))
                .collect();
            (r.policy.clone(), pts)
        })
        .collect::<Vec<_>>();
    chart(
        &format!("{}: utilization over time", prepared.spec.name),
        "days from the first arrival",
        "busy fraction",
        &series,
    )
}

/// The empirical CDF of wait times, for each policy's first point.
fn wait_cdf(prepared: &Prepared, results: &[PointResult]) -> Result<String, String> {
    let series = firsts(prepared, results)
        .into_iter()
        .map(|r| {
            let mut waits: Vec<f64> = r
                .runs
                .iter()
                .flat_map(|c| c.outcomes.iter())
                .map(|o| (o.start - o.submit).0 as f64 / 3600.0)
                .collect();
            waits.sort_by(f64::total_cmp);
            let n = waits.len().max(1) as f64;
            // At most ~500 points along the curve.
            let step = (waits.len() / 500).max(1);
            let pts = waits
                .iter()
                .enumerate()
                .filter(|(i, _)| i % step == 0 || *i + 1 == waits.len())
                .map(|(i, &w)| (w, (i + 1) as f64 / n))
                .collect();
            (r.policy.clone(), pts)
        })
        .collect::<Vec<_>>();
    chart(
        &format!("{}: wait-time distribution", prepared.spec.name),
        "wait (hours)",
        "fraction of jobs",
        &series,
    )
}
