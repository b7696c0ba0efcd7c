//! The plots an experiment writes, as SVG, for a paper: each figure against
//! load per series with 95% confidence intervals over seeds as error bars
//! (or, with a single load level, one bar per series titled with the
//! point), utilization over time per series, the wait-time CDF on log time
//! beside the trace's recorded schedule, and a Gantt chart of a window of
//! each series' schedule. Colours are Okabe and Ito's colour-blind-safe
//! palette; a value axis is logarithmic when its data spans a decade or
//! more, unless the experiment's `[plots] log_y` says otherwise.

use std::io;
use std::path::Path;

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::experiment::{Baseline, PointResult, Prepared};
use crate::report::{aggregates, baseline_series, comparisons, file_label, Comparison, AGGREGATED};
use crate::timeseries::{over_time, TimeSeries};

/// Okabe and Ito's palette without its yellow, which vanishes on white.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// The dash and gap lengths of the `k`-th series' line (pixels), none
/// for a solid one: with the markers, series stay apart printed in grey.
fn dashes(k: usize) -> Option<(u32, u32)> {
    match k % 4 {
        0 => None,
        1 => Some((8, 4)),
        2 => Some((2, 3)),
        _ => Some((14, 4)),
    }
}

/// The `k`-th series' marker, as a polygon around its point (pixels): an
/// octagon, a triangle, a square, a diamond.
fn marker(k: usize) -> Vec<(i32, i32)> {
    match k % 4 {
        0 => vec![(-2, -4), (2, -4), (4, -2), (4, 2), (2, 4), (-2, 4), (-4, 2), (-4, -2)],
        1 => vec![(0, -5), (5, 4), (-5, 4)],
        2 => vec![(-4, -4), (4, -4), (4, 4), (-4, 4)],
        _ => vec![(0, -5), (5, 0), (0, 5), (-5, 0)],
    }
}

/// The figures plotted, among [`AGGREGATED`]'s: (key, axis label).
const PLOTTED: [(&str, &str); 6] = [
    ("mean_wait", "mean wait (s)"),
    ("wait_p90", "90th percentile of wait (s)"),
    ("mean_bounded_slowdown", "mean bounded slowdown"),
    ("utilization", "utilization"),
    ("finished_pct", "finished jobs (%)"),
    ("goodput", "goodput (CPU-s)"),
];

/// One series of a chart: points, and error bars as (x, low, high).
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    bars: Vec<(f64, f64, f64)>,
    colour: RGBColor,
}

/// How an axis is drawn.
#[derive(Clone, Copy)]
struct Axis<'a> {
    label: &'a str,
    log: bool,
}

/// Whether values (positive ones only) are drawn on a log axis: when they
/// span a decade or more, where a linear axis squashes the smaller ones
/// into its bottom tenth.
fn spans_decades(values: impl Iterator<Item = f64>) -> bool {
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    hi > 0.0 && hi / lo >= 10.0
}

/// The range drawn for `values`: from zero (linear) or below the least
/// positive value (log), with a margin above.
fn range(values: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in values.filter(|v| v.is_finite()) {
        if !log || v > 0.0 {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    if lo > hi {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else {
        let lo = lo.min(0.0);
        (lo, if hi > lo { hi + (hi - lo) * 0.05 } else { lo + 1.0 })
    }
}

/// A tick label: whole numbers without decimals, others with as few as
/// tell ticks apart.
fn tick(v: &f64) -> String {
    let v = *v;
    if v.fract() == 0.0 || v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// A chart of `series` with the x and y axes as given.
fn chart(title: &str, x: Axis, y: Axis, series: &[Series]) -> Result<String, String> {
    let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = || {
        series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.bars.iter().flat_map(|b| [b.1, b.2]))
        })
    };
    let (x0, x1) = range(xs(), x.log);
    let (x0, x1) = if x.log {
        (x0, x1)
    } else {
        (xs().fold(f64::MAX, f64::min).min(x1), x1)
    };
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (x0 - 0.5, x0 + 0.5) };
    let (y0, y1) = range(ys(), y.log);
    // An interval reaching zero or below ends at the bottom of a log axis,
    // and the figure says so.
    let cut = y.log && series.iter().any(|s| s.bars.iter().any(|b| b.1 < y0));
    let clipped: Vec<Series>;
    let series = if y.log {
        clipped = series
            .iter()
            .map(|s| Series {
                name: s.name.clone(),
                points: s.points.clone(),
                bars: s.bars.iter().map(|&(x, lo, hi)| (x, lo.max(y0), hi)).collect(),
                colour: s.colour,
            })
            .collect();
        &clipped[..]
    } else {
        series
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(75);
        match (x.log, y.log) {
            (false, false) => draw(b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?, x, y, series)?,
            (true, false) => draw(
                b.build_cartesian_2d((x0..x1).log_scale(), y0..y1).map_err(err)?,
                x,
                y,
                series,
            )?,
            (false, true) => draw(
                b.build_cartesian_2d(x0..x1, (y0..y1).log_scale()).map_err(err)?,
                x,
                y,
                series,
            )?,
            (true, true) => draw(
                b.build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
                    .map_err(err)?,
                x,
                y,
                series,
            )?,
        }
        if cut {
            root.draw(&Text::new(
                "whiskers reaching zero or below end at the axis",
                (12, 424),
                ("sans-serif", 11).into_font().color(&RGBColor(90, 90, 90)),
            ))
            .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn draw<'a, X, Y>(
    mut c: ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    x: Axis,
    y: Axis,
    series: &[Series],
) -> Result<(), String>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let suffix = |a: Axis| if a.log { " (log)" } else { "" };
    c.configure_mesh()
        .x_label_formatter(&tick)
        .y_label_formatter(&tick)
        .x_desc(format!("{}{}", x.label, suffix(x)))
        .y_desc(format!("{}{}", y.label, suffix(y)))
        .draw()
        .map_err(err)?;
    for s in series {
        let style = s.colour.stroke_width(2);
        let colour = s.colour;
        // Told apart in print too: the k-th colour's dashes and marker.
        let k = PALETTE.iter().position(|p| *p == colour).unwrap_or(0);
        let shape = marker(k);
        let (left, right) = match dashes(k) {
            Some(_) => (7, 13),
            None => (10, 10),
        };
        let legend = move |(x, y): (i32, i32)| {
            EmptyElement::at((x, y))
                + PathElement::new(vec![(0, 0), (left, 0)], style)
                + PathElement::new(vec![(right, 0), (20, 0)], style)
                + Polygon::new(
                    shape.iter().map(|&(a, b)| (a + 10, b)).collect::<Vec<_>>(),
                    colour.filled(),
                )
        };
        let points = s.points.iter().copied();
        match dashes(k) {
            Some((dash, gap)) => c
                .draw_series(DashedLineSeries::new(points, dash, gap, style))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(legend),
            None => c
                .draw_series(LineSeries::new(points, style))
                .map_err(err)?
                .label(s.name.as_str())
                .legend(legend),
        };
        // Markers keep a series of one point visible.
        if s.points.len() <= 40 {
            let shape = marker(k);
            c.draw_series(
                s.points
                    .iter()
                    .map(|&p| EmptyElement::at(p) + Polygon::new(shape.clone(), colour.filled())),
            )
            .map_err(err)?;
        }
        c.draw_series(
            s.bars
                .iter()
                .map(|&(x, lo, hi)| ErrorBar::new_vertical(x, lo, (lo + hi) / 2.0, hi, colour.stroke_width(1), 8)),
        )
        .map_err(err)?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// A bar per series at one point, with its confidence interval.
fn bars(title: &str, y: Axis, values: &[(String, f64, Option<f64>)]) -> Result<String, String> {
    let (y0, y1) = range(
        values
            .iter()
            .flat_map(|(_, v, ci)| [*v, v + ci.unwrap_or(0.0), v - ci.unwrap_or(0.0)]),
        false,
    );
    let n = values.len().max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c: ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, RangedCoordf64>> =
            ChartBuilder::on(&root)
                .caption(title, ("sans-serif", 17))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(75)
                .build_cartesian_2d(-0.5..n - 0.5, y0..y1)
                .map_err(err)?;
        let names: Vec<&str> = values.iter().map(|v| v.0.as_str()).collect();
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(values.len().max(1))
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).map_or(String::new(), |s| s.to_string())
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&tick)
            .y_desc(y.label)
            .draw()
            .map_err(err)?;
        for (i, (_, v, ci)) in values.iter().enumerate() {
            let x = i as f64;
            c.draw_series([Rectangle::new([(x - 0.3, 0.0), (x + 0.3, *v)], colour(i).filled())])
                .map_err(err)?;
            if let Some(ci) = ci {
                c.draw_series([ErrorBar::new_vertical(x, v - ci, *v, v + ci, BLACK.stroke_width(1), 12)])
                    .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The first result of each series.
pub fn firsts<'a>(prepared: &Prepared, results: &'a [PointResult]) -> Vec<&'a PointResult> {
    (0..prepared.policies.len())
        .filter_map(|p| results.iter().find(|r| r.point.policy == p))
        .collect()
}

/// "series, load L, seed S": which point a per-point plot shows.
fn point_title(r: &PointResult) -> String {
    match r.point.load {
        Some(l) => format!("{}, load {l}, seed {}", r.policy, r.point.seed),
        None => format!("{}, seed {}", r.policy, r.point.seed),
    }
}

/// Writes every plot of `results` into `dir`.
pub fn write_all(
    dir: &Path,
    prepared: &Prepared,
    results: &[PointResult],
    baseline: Option<&Baseline>,
) -> io::Result<()> {
    let formats = &prepared.spec.plots.formats;
    let plot = |name: &str, svg: Result<String, String>| match svg {
        Ok(svg) => crate::figures::save(dir, name, &svg, formats),
        Err(e) => Err(io::Error::other(format!("{name}: {e}"))),
    };
    let name = &prepared.spec.name;
    let log_y = prepared.spec.plots.log_y;
    let aggs = aggregates(results);
    let mut loads: Vec<f64> = aggs.iter().filter_map(|a| a.load).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    for (key, label) in PLOTTED {
        let Some(&(_, value)) = AGGREGATED.iter().find(|(k, _)| *k == key) else {
            continue;
        };
        if loads.len() >= 2 {
            let series: Vec<Series> = prepared
                .policies
                .iter()
                .enumerate()
                .map(|(i, (policy, _))| {
                    let mine = aggs.iter().filter(|a| a.policy == policy && a.load.is_some());
                    let mut points = Vec::new();
                    let mut bars = Vec::new();
                    for a in mine {
                        let (Some(load), Some(s)) = (a.load, a.metrics.get(key)) else {
                            continue;
                        };
                        points.push((load, s.mean));
                        if let Some(ci) = s.ci95 {
                            bars.push((load, s.mean - ci, s.mean + ci));
                        }
                    }
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series {
                        name: policy.clone(),
                        points,
                        bars,
                        colour: colour(i),
                    }
                })
                .collect();
            let mut series = series;
            // The trace's own schedule, at the load it had.
            if let Some(b) = baseline {
                series.push(Series {
                    name: "as recorded".into(),
                    points: vec![(b.offered_load, value(&b.overall))],
                    bars: Vec::new(),
                    colour: RGBColor(120, 120, 120),
                });
            }
            let log = log_y.unwrap_or_else(|| spans_decades(series.iter().flat_map(|s| s.points.iter().map(|p| p.1))));
            let seeds = aggs.iter().map(|a| a.seeds).max().unwrap_or(1);
            let title = format!("{name}: {label} (mean of {seeds} seeds, 95% CI)");
            plot(
                &format!("load-{key}.svg"),
                chart(
                    &title,
                    Axis {
                        label: "offered load",
                        log: false,
                    },
                    Axis { label, log },
                    &series,
                ),
            )?;
        } else {
            // One load level: a bar per series, titled with the point.
            let mut values: Vec<(String, f64, Option<f64>)> = aggs
                .iter()
                .filter_map(|a| a.metrics.get(key).map(|s| (a.policy.to_string(), s.mean, s.ci95)))
                .collect();
            if let Some(b) = baseline {
                values.push(("as recorded".into(), value(&b.overall), None));
            }
            let seeds = aggs.first().map_or(1, |a| a.seeds);
            let at = match aggs.first().and_then(|a| a.load) {
                Some(l) => format!("load {l}, "),
                None => String::new(),
            };
            let what = if seeds > 1 {
                format!("{at}mean of {seeds} seeds, 95% CI")
            } else {
                format!("{at}one seed")
            };
            plot(
                &format!("point-{key}.svg"),
                bars(
                    &format!("{name}: {label} ({what})"),
                    Axis { label, log: false },
                    &values,
                ),
            )?;
        }
    }
    for (i, r) in firsts(prepared, results).into_iter().enumerate() {
        let label = file_label(&r.policy);
        let s = series_of(prepared, r);
        plot(
            &format!("utilization-{label}.svg"),
            utilization_over_time(prepared, r, &s, i),
        )?;
        plot(&format!("queue-{label}.svg"), queue_over_time(prepared, r, &s, i))?;
        plot(&format!("gantt-{label}.svg"), gantt(prepared, r))?;
        plot(&format!("processors-{label}.svg"), processor_gantt(prepared, r))?;
    }
    plot("wait-cdf.svg", wait_cdf(prepared, results, baseline))?;
    let paired = comparisons(prepared, results);
    if paired.iter().any(|c| c.seeds > 1) {
        for (key, label) in PLOTTED {
            plot(
                &format!("paired-{key}.svg"),
                paired_chart(prepared, &paired, key, label),
            )?;
        }
    }
    Ok(())
}

/// Each series minus the baseline in figure `key`, seed by seed, with the
/// paired 95% intervals: against load over a sweep (a grey line at zero,
/// no difference), else a bar per series.
fn paired_chart(prepared: &Prepared, paired: &[Comparison], key: &str, label: &str) -> Result<String, String> {
    let base = baseline_series(prepared);
    let rows: Vec<&Comparison> = paired.iter().filter(|c| c.against == base).collect();
    let seeds = rows.iter().map(|c| c.seeds).max().unwrap_or(1);
    let title = format!(
        "{}: {label}, minus {base}'s (paired over {seeds} seeds, 95% CI)",
        prepared.spec.name
    );
    let difference = format!("{label}, difference");
    let axis = Axis {
        label: &difference,
        log: false,
    };
    let mut loads: Vec<f64> = rows.iter().filter_map(|c| c.load).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    if loads.len() < 2 {
        let values: Vec<(String, f64, Option<f64>)> = rows
            .iter()
            .filter_map(|c| {
                let s = c.difference.get(key)?;
                Some((format!("{} - {}", c.policy, c.against), s.mean, s.ci95))
            })
            .collect();
        return bars(&title, axis, &values);
    }
    let mut series: Vec<Series> = Vec::new();
    for (i, (policy, _)) in prepared.policies.iter().enumerate() {
        let mut points = Vec::new();
        let mut whiskers = Vec::new();
        for c in rows.iter().filter(|c| c.policy == policy) {
            let (Some(load), Some(s)) = (c.load, c.difference.get(key)) else {
                continue;
            };
            points.push((load, s.mean));
            if let Some(ci) = s.ci95 {
                whiskers.push((load, s.mean - ci, s.mean + ci));
            }
        }
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push(Series {
            name: format!("{policy} - {base}"),
            points,
            bars: whiskers,
            colour: colour(i),
        });
    }
    series.push(Series {
        name: "no difference".into(),
        points: vec![(loads[0], 0.0), (loads[loads.len() - 1], 0.0)],
        bars: Vec::new(),
        colour: RGBColor(150, 150, 150),
    });
    chart(
        &title,
        Axis {
            label: "offered load",
            log: false,
        },
        axis,
        &series,
    )
}

/// One point's state over time ([`crate::timeseries`]).
pub fn series_of(prepared: &Prepared, r: &PointResult) -> TimeSeries {
    over_time(
        r.runs.iter().flat_map(|c| c.outcomes.iter()),
        f64::from(prepared.total_procs()),
    )
}

/// A figure of a bucket of a point's state over time.
type Reading = fn(&crate::timeseries::Bucket) -> f64;

/// One point's state over time ([`TimeSeries`]) as a chart titled with
/// `what`, the value axis `unit` per bucket, a line per (name, reading,
/// colour).
fn over_time_chart(
    prepared: &Prepared,
    r: &PointResult,
    s: &TimeSeries,
    what: &str,
    unit: &str,
    lines: &[(String, Reading, RGBColor)],
) -> Result<String, String> {
    let day = |b: &crate::timeseries::Bucket| b.start as f64 / 86_400.0;
    let series: Vec<Series> = lines
        .iter()
        .map(|(name, read, colour)| Series {
            name: name.clone(),
            points: s.buckets.iter().map(|b| (day(b), read(b))).collect(),
            bars: Vec::new(),
            colour: *colour,
        })
        .collect();
    chart(
        &format!("{}: {what} ({})", prepared.spec.name, point_title(r)),
        Axis {
            label: "days from the first arrival",
            log: false,
        },
        Axis {
            label: &format!("{unit} per {} h", s.width / 3600),
            log: false,
        },
        &series,
    )
}

/// Busy fraction of the platform per time bucket for one point.
fn utilization_over_time(prepared: &Prepared, r: &PointResult, s: &TimeSeries, i: usize) -> Result<String, String> {
    let busy: Reading = |b| b.utilization;
    over_time_chart(
        prepared,
        r,
        s,
        "utilization over time",
        "busy fraction",
        &[(r.policy.clone(), busy, colour(i))],
    )
}

/// Jobs waiting and running per time bucket for one point, averaged over
/// each bucket.
fn queue_over_time(prepared: &Prepared, r: &PointResult, s: &TimeSeries, i: usize) -> Result<String, String> {
    let (waiting, running): (Reading, Reading) = (|b| b.waiting, |b| b.running);
    over_time_chart(
        prepared,
        r,
        s,
        "jobs waiting and running",
        "jobs, mean",
        &[
            ("waiting".into(), waiting, colour(i)),
            ("running".into(), running, RGBColor(120, 120, 120)),
        ],
    )
}

/// The empirical CDF of wait times on log time, for each series' first point
/// and the recorded schedule. Waits under a second are drawn at one second.
fn wait_cdf(prepared: &Prepared, results: &[PointResult], baseline: Option<&Baseline>) -> Result<String, String> {
    let curve = |waits: &mut Vec<f64>| {
        waits.sort_by(f64::total_cmp);
        let n = waits.len().max(1) as f64;
        // At most ~500 points along the curve.
        let step = (waits.len() / 500).max(1);
        waits
            .iter()
            .enumerate()
            .filter(|(i, _)| i % step == 0 || *i + 1 == waits.len())
            .map(|(i, &w)| (w.max(1.0), (i + 1) as f64 / n))
            .collect()
    };
    let mut series: Vec<Series> = firsts(prepared, results)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let mut waits: Vec<f64> = r
                .runs
                .iter()
                .flat_map(|c| c.outcomes.iter())
                .map(|o| (o.start - o.submit).0 as f64)
                .collect();
            Series {
                name: r.policy.clone(),
                points: curve(&mut waits),
                bars: Vec::new(),
                colour: colour(i),
            }
        })
        .collect();
    if let Some(b) = baseline {
        let mut waits: Vec<f64> = b.outcomes.iter().map(|o| (o.start - o.submit).0 as f64).collect();
        series.push(Series {
            name: "as recorded".into(),
            points: curve(&mut waits),
            bars: Vec::new(),
            colour: RGBColor(120, 120, 120),
        });
    }
    chart(
        &format!("{}: wait-time distribution", prepared.spec.name),
        Axis {
            label: "wait (s; under 1 s drawn at 1 s)",
            log: true,
        },
        Axis {
            label: "fraction of jobs",
            log: false,
        },
        &series,
    )
}

/// A Gantt chart of a window of one point's schedule: one row per job (by
/// start), its wait in grey and its run in its cluster's colour.
/// The first arrival of point `r` and the Gantt charts' window
/// (`[plots] gantt_window`, the first day by default) from it, in seconds.
fn gantt_window(prepared: &Prepared, r: &PointResult) -> (i64, i64, i64) {
    let t0 = r
        .runs
        .iter()
        .flat_map(|c| c.outcomes.iter().map(|o| o.submit.0))
        .min()
        .unwrap_or(0);
    let [from, to] = prepared.spec.plots.gantt_window.unwrap_or([0, 86_400]);
    (t0, t0 + from, t0 + to.max(from + 1))
}

fn gantt(prepared: &Prepared, r: &PointResult) -> Result<String, String> {
    let spec = &prepared.spec.plots;
    let mut jobs: Vec<(usize, &crate::cluster::Outcome)> = r
        .runs
        .iter()
        .enumerate()
        .flat_map(|(c, run)| run.outcomes.iter().map(move |o| (c, o)))
        .collect();
    let (t0, from, to) = gantt_window(prepared, r);
    jobs.retain(|(_, o)| o.end.0 > from && o.submit.0 < to);
    jobs.sort_by_key(|(_, o)| (o.start, o.id));
    jobs.truncate(spec.gantt_jobs.max(1));
    // Up to the last end among the jobs shown, if that is sooner.
    let to = jobs.iter().map(|(_, o)| o.end.0).max().map_or(to, |e| e.min(to));
    let hours = |t: i64| (t.clamp(from, to) - from) as f64 / 3600.0;
    let rows = jobs.len().max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: schedule, {} jobs from hour {} ({})",
                    prepared.spec.name,
                    jobs.len(),
                    (from - t0) / 3600,
                    point_title(r)
                ),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..hours(to).max(1e-9), rows..0.0)
            .map_err(err)?;
        c.configure_mesh()
            .disable_y_mesh()
            .x_desc("hours from the window's start")
            .y_desc("jobs, by start")
            .draw()
            .map_err(err)?;
        let grey = RGBColor(210, 210, 210);
        c.draw_series(jobs.iter().enumerate().flat_map(|(row, (cluster, o))| {
            let (y0, y1) = (row as f64 + 0.15, row as f64 + 0.85);
            [
                Rectangle::new([(hours(o.submit.0), y0), (hours(o.start.0), y1)], grey.filled()),
                Rectangle::new(
                    [(hours(o.start.0), y0), (hours(o.end.0), y1)],
                    colour(*cluster).filled(),
                ),
            ]
        }))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Processor ranks for the jobs `outcomes` of one cluster of `procs`:
/// each job takes the lowest ranks free at its start and gives them back
/// at its end (ends before starts at one instant), as a resource manager
/// without topology would. The simulators do not place jobs on processors,
/// so any assignment that never gives one rank to two jobs at once draws
/// the same schedule; this one is deterministic. Each job's ranks come as
/// runs `(first, count)`; a job that finds too few free (none should) gets
/// none.
pub fn ranks(outcomes: &[crate::cluster::Outcome], procs: u32) -> Vec<Vec<(u32, u32)>> {
    let mut events: Vec<(i64, bool, usize)> = Vec::with_capacity(outcomes.len() * 2);
    for (k, o) in outcomes.iter().enumerate() {
        events.push((o.start.0, true, k));
        events.push((o.end.0, false, k));
    }
    events.sort_unstable();
    let mut free: std::collections::BTreeSet<u32> = (0..procs).collect();
    let mut held: Vec<Vec<u32>> = vec![Vec::new(); outcomes.len()];
    for (_, starts, k) in events {
        if !starts {
            free.extend(held[k].iter().copied());
            continue;
        }
        let size = outcomes[k].size as usize;
        if free.len() < size {
            continue;
        }
        let taken: Vec<u32> = free.iter().copied().take(size).collect();
        for r in &taken {
            free.remove(r);
        }
        held[k] = taken;
    }
    held.into_iter()
        .map(|rs| {
            let mut runs: Vec<(u32, u32)> = Vec::new();
            for r in rs {
                match runs.last_mut() {
                    Some((first, n)) if *first + *n == r => *n += 1,
                    _ => runs.push((r, 1)),
                }
            }
            runs
        })
        .collect()
}

/// The schedule of one point on the processors, in the Gantt window: each
/// job a rectangle over its ranks ([`ranks`]) from start to end, the
/// clusters stacked, coloured by job.
fn processor_gantt(prepared: &Prepared, r: &PointResult) -> Result<String, String> {
    let (t0, from, to) = gantt_window(prepared, r);
    let hours = |t: i64| (t.clamp(from, to) - from) as f64 / 3600.0;
    let total: u32 = r.runs.iter().map(|c| c.spec.procs).sum();
    let mut boxes: Vec<(f64, f64, f64, f64, usize)> = Vec::new();
    let mut base = 0u32;
    for run in &r.runs {
        for (o, runs) in run.outcomes.iter().zip(ranks(&run.outcomes, run.spec.procs)) {
            if o.end.0 <= from || o.start.0 >= to {
                continue;
            }
            for (first, n) in runs {
                let y0 = f64::from(base + first);
                boxes.push((hours(o.start.0), y0, hours(o.end.0), y0 + f64::from(n), o.id as usize));
            }
        }
        base += run.spec.procs;
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (860, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: processors from hour {} to {} ({})",
                    prepared.spec.name,
                    (from - t0) / 3600,
                    (to - t0) / 3600,
                    point_title(r)
                ),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..hours(to).max(1e-9), f64::from(total.max(1))..0.0)
            .map_err(err)?;
        c.configure_mesh()
            .disable_y_mesh()
            .y_label_formatter(&tick)
            .x_desc("hours from the window's start")
            .y_desc(if r.runs.len() > 1 {
                "processor rank (clusters stacked)"
            } else {
                "processor rank"
            })
            .draw()
            .map_err(err)?;
        c.draw_series(boxes.iter().flat_map(|&(x0, y0, x1, y1, id)| {
            [
                Rectangle::new([(x0, y0), (x1, y1)], colour(id).mix(0.75).filled()),
                Rectangle::new([(x0, y0), (x1, y1)], WHITE.stroke_width(1)),
            ]
        }))
        .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The figures of a workflow admission sweep, a series per scheduler (and
/// rejecter share, where several) with 95% confidence bars, against the
/// hold time when the experiment sweeps it, else against the workflows'
/// mean inter-arrival time: (file name, SVG) for the rejection rates,
/// utilization and messages per task.
pub fn admission(report: &crate::admission::AdmissionReport) -> Result<Vec<(String, String)>, String> {
    use crate::admission::AdmissionAggregate;
    use crate::stats::Spread;
    type Pick = fn(&AdmissionAggregate) -> Spread;
    let figures: [(&str, &str, Pick); 5] = [
        ("rejection-rate", "rejected workflows (share)", |a| a.rejection_rate),
        (
            "accepter-rejection-rate",
            "rejected accepters' workflows (share)",
            |a| a.accepter_rejection_rate,
        ),
        ("utilization", "utilization", |a| a.utilization),
        ("probes-per-task", "probes per task", |a| a.probes_per_task),
        ("reservations-per-task", "reservation requests per task", |a| {
            a.reservations_per_task
        }),
    ];
    let distinct = |f: fn(&AdmissionAggregate) -> f64| {
        let mut v: Vec<f64> = report.aggregates.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v.len()
    };
    if distinct(|a| a.setting.share) > 1 {
        return probe_phase(report);
    }
    if report.aggregates.iter().any(|a| a.setting.strategy.is_some()) {
        return rescue(report);
    }
    if report.aggregates.iter().any(|a| a.setting.window.is_some()) {
        return reoptimization(report);
    }
    let by_hold = distinct(|a| a.setting.hold as f64) > 1;
    let several_arrivals = distinct(|a| a.setting.inter_arrival) > 1;
    let several_rejecters = distinct(|a| a.setting.rejecters) > 1;
    let x_of = |a: &AdmissionAggregate| {
        if by_hold {
            a.setting.hold as f64
        } else {
            a.setting.inter_arrival
        }
    };
    let series_of = |a: &AdmissionAggregate| {
        let mut name = a.setting.scheduler.to_string();
        if several_rejecters {
            name += &format!(" 1:{}", a.setting.rejecters);
        }
        if by_hold && several_arrivals {
            name += &format!(" a={}", a.setting.inter_arrival);
        }
        name
    };
    let names = series_names(&report.aggregates, series_of);
    let x = Axis {
        label: if by_hold {
            "hold of a preliminary reservation (slots)"
        } else {
            "mean inter-arrival of workflows (slots)"
        },
        // Holds are swept over decades (1 to 500 slots in [VRM] 4.6.2).
        log: spans_decades(report.aggregates.iter().map(x_of)),
    };
    let mut out = Vec::new();
    for (file, label, pick) in figures {
        let series = spread_series(&names, &report.aggregates, series_of, x_of, pick);
        let y = Axis { label, log: false };
        let svg = chart(&format!("{}: {label}", report.name), x, y, &series)?;
        out.push((format!("{file}.svg"), svg));
    }
    Ok(out)
}

/// [VRM] Fig. 4.7: the monitored broker's reservation attempts and
/// messages per task against its share of the workflows, probing or not,
/// for its admitted and its rejected workflows.
fn probe_phase(report: &crate::admission::AdmissionReport) -> Result<Vec<(String, String)>, String> {
    use crate::admission::AdmissionAggregate;
    use crate::stats::Spread;
    type Pick = fn(&AdmissionAggregate) -> Spread;
    let figures: [(&str, &str, [Pick; 2]); 2] = [
        (
            "attempts-per-task",
            "reservation attempts per task",
            [|a| a.attempts_admitted, |a| a.attempts_rejected],
        ),
        (
            "messages-per-task",
            "messages per task",
            [|a| a.messages_admitted, |a| a.messages_rejected],
        ),
    ];
    let x = Axis {
        label: "share of the workflows at the monitored broker (%)",
        log: false,
    };
    let mut out = Vec::new();
    for (file, label, picks) in figures {
        let mut series = Vec::new();
        for (i, probing) in [true, false].into_iter().enumerate() {
            for (j, (pick, outcome)) in picks.iter().zip(["admitted", "rejected"]).enumerate() {
                let mine: Vec<&AdmissionAggregate> = report
                    .aggregates
                    .iter()
                    .filter(|a| a.setting.probing == probing)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let name = format!("{} {outcome}", if probing { "probing" } else { "not probing" });
                series.push(Series {
                    name,
                    points: mine.iter().map(|a| (a.setting.share * 100.0, pick(a).mean)).collect(),
                    bars: mine
                        .iter()
                        .filter_map(|a| {
                            let v = pick(a);
                            v.ci95.map(|ci| (a.setting.share * 100.0, v.mean - ci, v.mean + ci))
                        })
                        .collect(),
                    colour: colour(2 * i + j),
                });
            }
        }
        let y = Axis { label, log: false };
        let svg = chart(&format!("{}: {label}", report.name), x, y, &series)?;
        out.push((format!("{file}.svg"), svg));
    }
    Ok(out)
}

/// [VRM] Figs. 6.5-6.7: the termination ratio and the overhead of each
/// rescue strategy. Where the load-based strategy is swept over eta, a
/// line against eta for it, and the other strategies as flat references
/// (Figs. 6.5 and 6.6); otherwise a bar per strategy (Fig. 6.7). One chart
/// per downtime, load, view and imbalance.
fn rescue(report: &crate::admission::AdmissionReport) -> Result<Vec<(String, String)>, String> {
    use crate::admission::AdmissionAggregate;
    use brokk_broker::rescue::Strategy;
    type Pick = fn(&AdmissionAggregate) -> Option<crate::stats::Spread>;
    let figures: [(&str, &str, Pick); 2] = [
        ("termination", "terminated over affected jobs", |a| a.termination),
        ("overhead", "jobs moved needlessly over affected jobs", |a| a.overhead),
    ];
    type Case = (i64, f64, Option<crate::rescue::View>, Option<f64>);
    let mut cases: Vec<Case> = Vec::new();
    for a in &report.aggregates {
        let c = (
            a.setting.downtime,
            a.setting.inter_arrival,
            a.setting.view,
            a.setting.imbalance,
        );
        if !cases.contains(&c) {
            cases.push(c);
        }
    }
    let eta = |a: &AdmissionAggregate| match a.setting.strategy {
        Some(Strategy::Load { eta }) => Some(eta),
        _ => None,
    };
    let mut out = Vec::new();
    for (downtime, arrival, view, imbalance) in cases {
        let mine: Vec<&AdmissionAggregate> = report
            .aggregates
            .iter()
            .filter(|a| {
                (
                    a.setting.downtime,
                    a.setting.inter_arrival,
                    a.setting.view,
                    a.setting.imbalance,
                ) == (downtime, arrival, view, imbalance)
            })
            .collect();
        let etas: Vec<f64> = mine.iter().filter_map(|a| eta(a)).collect();
        let local = view == Some(crate::rescue::View::Local);
        let suffix = format!(
            "d{downtime}-a{arrival}{}{}",
            if local { "-local" } else { "" },
            imbalance.map_or_else(String::new, |x| format!("-i{x}"))
        );
        for (file, label, pick) in figures {
            let known = if local {
                ", the failed site's broker knowing it alone"
            } else {
                ""
            };
            let loaded = imbalance.map_or_else(String::new, |x| {
                format!(", its load {:+.0}% against the grid's", x * 100.0)
            });
            let title = format!(
                "{}: {label}, down {downtime} slots, inter-arrival {arrival}{known}{loaded}",
                report.name
            );
            let svg = if etas.len() > 1 {
                let (lo, hi) = etas
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(l, h), &e| (l.min(e), h.max(e)));
                let swept: Vec<&&AdmissionAggregate> = mine.iter().filter(|a| eta(a).is_some()).collect();
                let mut series = vec![Series {
                    name: "load-based".into(),
                    points: swept.iter().filter_map(|a| Some((eta(a)?, pick(a)?.mean))).collect(),
                    bars: swept
                        .iter()
                        .filter_map(|a| {
                            let v = pick(a)?;
                            Some((eta(a)?, v.mean - v.ci95?, v.mean + v.ci95?))
                        })
                        .collect(),
                    colour: colour(0),
                }];
                for (i, a) in mine.iter().filter(|a| eta(a).is_none()).enumerate() {
                    let (Some(s), Some(v)) = (a.setting.strategy, pick(a)) else {
                        continue;
                    };
                    series.push(Series {
                        name: s.to_string(),
                        points: vec![(lo, v.mean), (hi, v.mean)],
                        bars: Vec::new(),
                        colour: colour(i + 1),
                    });
                }
                let x = Axis {
                    label: "load threshold eta",
                    log: false,
                };
                chart(&title, x, Axis { label, log: false }, &series)?
            } else {
                let values: Vec<(String, f64, Option<f64>)> = mine
                    .iter()
                    .filter_map(|a| {
                        let v = pick(a)?;
                        Some((a.setting.strategy?.to_string(), v.mean, v.ci95))
                    })
                    .collect();
                bars(&title, Axis { label, log: false }, &values)?
            };
            out.push((format!("{file}-{suffix}.svg"), svg));
        }
    }
    Ok(out)
}

/// [VRM] Fig. 5.5: the gain in later admissions against the size of the
/// optimization windows, a series per scheduler, load, search and delay.
fn reoptimization(report: &crate::admission::AdmissionReport) -> Result<Vec<(String, String)>, String> {
    use crate::admission::AdmissionAggregate;
    let optimized: Vec<AdmissionAggregate> = report
        .aggregates
        .iter()
        .filter(|a| a.setting.window.is_some_and(|w| w > 0) && a.gain.is_some())
        .cloned()
        .collect();
    let series_of = |a: &AdmissionAggregate| {
        let mut name = format!("{} a={}", a.setting.scheduler, a.setting.inter_arrival);
        if !a.setting.search.is_each() {
            name.push_str(" full");
        }
        if a.setting.delay > 0 {
            name.push_str(&format!(" delay={}", a.setting.delay));
        }
        name
    };
    let names = series_names(&optimized, series_of);
    let x_of = |a: &AdmissionAggregate| a.setting.window.unwrap_or(0) as f64;
    let series = spread_series(&names, &optimized, series_of, x_of, |a| a.gain.unwrap_or_default());
    let x = Axis {
        label: "optimization window (slots)",
        log: spans_decades(optimized.iter().map(x_of)),
    };
    let y = Axis {
        label: "gain in later admissions (share)",
        log: false,
    };
    let svg = chart(&format!("{}: gain in later admissions", report.name), x, y, &series)?;
    Ok(vec![("gain.svg".into(), svg)])
}

/// [VRM] Fig. 5.6: the share of requests each network manager accepts
/// against the offered load, the rerouting one with and without the
/// requests it saved; a figure per number of candidate paths.
pub fn network(report: &crate::network::NetworkReport) -> Result<Vec<(String, String)>, String> {
    use crate::network::NetworkAggregate;
    type Pick = fn(&NetworkAggregate) -> crate::stats::Spread;
    let picks: [(&str, Pick); 3] = [
        ("fewest hops", |a| a.min_hop),
        ("rerouting", |a| a.rerouting),
        ("rerouting, saved left out", |a| a.rerouting_unsaved),
    ];
    let mut ks: Vec<usize> = report.aggregates.iter().map(|a| a.paths).collect();
    ks.dedup();
    let x_of = |a: &NetworkAggregate| a.offered_load.mean;
    let mut figures = Vec::new();
    for &k in &ks {
        let mine: Vec<NetworkAggregate> = report.aggregates.iter().filter(|a| a.paths == k).cloned().collect();
        let series: Vec<Series> = picks
            .iter()
            .enumerate()
            .map(|(i, &(name, pick))| {
                let names = [name.to_string()];
                let mut s = spread_series(&names, &mine, |_| name.to_string(), x_of, pick).remove(0);
                s.colour = colour(i);
                s
            })
            .collect();
        let x = Axis {
            label: "offered load (fewest-hop bandwidth over capacity)",
            log: false,
        };
        let y = Axis {
            label: "accepted requests (share)",
            log: false,
        };
        let title = format!("{}: acceptance, {k} paths per pair", report.name);
        let file = match ks.len() {
            1 => "acceptance.svg".to_string(),
            _ => format!("acceptance-k{k}.svg"),
        };
        figures.push((file, chart(&title, x, y, &series)?));
    }
    Ok(figures)
}

/// The names `series_of` gives `all`, each once, in the order first met.
fn series_names<A>(all: &[A], series_of: impl Fn(&A) -> String) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for a in all {
        let n = series_of(a);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// One series per name of `names`, from the aggregates `series_of` files
/// under it: each at `x_of`, its mean and confidence interval as `pick`
/// reads them.
fn spread_series<A>(
    names: &[String],
    all: &[A],
    series_of: impl Fn(&A) -> String,
    x_of: impl Fn(&A) -> f64,
    pick: impl Fn(&A) -> crate::stats::Spread,
) -> Vec<Series> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mine: Vec<&A> = all.iter().filter(|a| &series_of(a) == name).collect();
            Series {
                name: name.clone(),
                points: mine.iter().map(|a| (x_of(a), pick(a).mean)).collect(),
                bars: mine
                    .iter()
                    .filter_map(|a| {
                        let v = pick(a);
                        v.ci95.map(|ci| (x_of(a), v.mean - ci, v.mean + ci))
                    })
                    .collect(),
                colour: colour(i),
            }
        })
        .collect()
}

/// [DMM]'s Figs. 7, 8 and 10: each figure against the clusters' load, a
/// series per architecture; against the delegation threshold, a series per
/// load, when `dmm` alone is swept over thresholds.
pub fn architectures(report: &crate::architectures::ArchitectureReport) -> Result<Vec<(String, String)>, String> {
    use crate::architectures::SettingAggregate;
    use crate::stats::Spread;
    type Pick = fn(&SettingAggregate) -> Spread;
    let figures: [(&str, &str, Pick); 6] = [
        ("finished", "finished jobs (JF%)", |a| a.finished_pct),
        ("awt", "average wait AWT (s)", |a| a.awt),
        ("asd", "average slowdown ASD", |a| a.asd),
        ("goodput", "goodput (CPU-years)", |a| a.goodput),
        ("delegations", "delegations per job", |a| a.delegations_per_job),
        ("messages", "delegation messages per job", |a| a.messages_per_job),
    ];
    let mut thresholds: Vec<f64> = report.aggregates.iter().map(|a| a.setting.threshold).collect();
    thresholds.sort_by(f64::total_cmp);
    thresholds.dedup();
    let by_threshold = thresholds.len() > 1;
    let x_of = |a: &SettingAggregate| {
        if by_threshold {
            a.setting.threshold
        } else {
            a.setting.load
        }
    };
    let series_of = |a: &SettingAggregate| match by_threshold {
        true => format!("{} at load {}", a.setting.architecture.name(), a.setting.load),
        false => a.setting.architecture.name().to_string(),
    };
    let names = series_names(&report.aggregates, series_of);
    let x = Axis {
        label: if by_threshold {
            "delegation threshold"
        } else {
            "load of the clusters"
        },
        log: false,
    };
    let mut out = Vec::new();
    for (file, label, pick) in figures {
        let series = spread_series(&names, &report.aggregates, series_of, x_of, pick);
        // Waits and slowdowns span decades between the architectures.
        let log =
            matches!(file, "awt" | "asd") && spans_decades(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let y = Axis { label, log };
        let svg = chart(&format!("{}: {label}", report.experiment), x, y, &series)?;
        out.push((format!("{file}.svg"), svg));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_never_give_one_processor_to_two_jobs_at_once() {
        use crate::cluster::Outcome;
        use brokk_model::Time;
        let o = |start: i64, end: i64, size: u32| Outcome {
            id: 0,
            submit: Time(0),
            start: Time(start),
            end: Time(end),
            size,
            user: -1,
        };
        // 4 ranks: a takes 0, b 1, c 2; when a and c end, d takes the
        // three free, 0, 2 and 3: two runs. e, starting as b ends, takes 1.
        let jobs = [o(0, 10, 1), o(0, 20, 1), o(0, 10, 1), o(10, 30, 3), o(20, 40, 1)];
        let got = ranks(&jobs, 4);
        assert_eq!(
            got,
            [
                vec![(0, 1)],
                vec![(1, 1)],
                vec![(2, 1)],
                vec![(0, 1), (2, 2)],
                vec![(1, 1)]
            ]
        );
        // Over a random schedule that respects the capacity, no two jobs
        // share a rank while both run.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let runs = crate::cluster::simulate(
            16,
            &(0..200)
                .map(|k| crate::cluster::SimJob {
                    id: k,
                    submit: Time(rng.gen_range(0..5000)),
                    run: brokk_model::Duration(rng.gen_range(1..600)),
                    estimate: brokk_model::Duration(600),
                    size: rng.gen_range(1..=16),
                    ..Default::default()
                })
                .collect::<Vec<_>>(),
            crate::cluster::Policy::EASY,
        );
        let given = ranks(&runs, 16);
        for (a, ra) in runs.iter().zip(&given) {
            let n: u32 = ra.iter().map(|r| r.1).sum();
            assert_eq!(n, a.size);
            for (b, rb) in runs.iter().zip(&given) {
                if std::ptr::eq(a, b) || a.end <= b.start || b.end <= a.start {
                    continue;
                }
                let overlap = ra.iter().any(|x| rb.iter().any(|y| x.0 < y.0 + y.1 && y.0 < x.0 + x.1));
                assert!(!overlap, "{a:?} and {b:?} share a rank");
            }
        }
    }

    #[test]
    fn every_plotted_figure_is_aggregated() {
        for (key, _) in PLOTTED {
            assert!(AGGREGATED.iter().any(|(k, _)| *k == key), "{key}");
        }
    }

    #[test]
    fn two_decades_make_an_axis_logarithmic() {
        assert!(spans_decades([5.0, 80.0].into_iter()));
        assert!(!spans_decades([5.0, 40.0].into_iter()));
        // Zeros cannot be drawn on a log axis and do not count.
        assert!(!spans_decades([0.0, 3.0, 25.0].into_iter()));
        assert!(!spans_decades(std::iter::empty()));
    }
}
