//! `brokk sim`: run experiments (TOML) on the simulator and write their
//! per-job CSV, summary JSON and plots.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use brokk_sim::experiment::{load_with, run_points, Point, PointResult};
use brokk_sim::metrics::Horizon;
use brokk_sim::report;

/// Arguments of `brokk sim`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Run each policy once, at the first load level and seed.
    Run(RunArgs),
    /// Run every load level x seed x policy, in parallel.
    Sweep(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The experiment file (TOML).
    file: PathBuf,
    /// Directory for jobs.csv, summary.json and the plots
    /// [default: sim-results/<experiment name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Threads for a sweep [default: all cores].
    #[arg(long)]
    threads: Option<usize>,
    /// Print the summary JSON on standard output instead of a table.
    #[arg(long)]
    json: bool,
    /// Where to look for a trace file, by its name, that is not where the
    /// experiment says.
    #[arg(long)]
    traces: Option<PathBuf>,
}

/// Runs `brokk sim`.
pub fn run(a: Args) -> Result<ExitCode> {
    let (args, sweep) = match a.what {
        What::Run(r) => (r, false),
        What::Sweep(r) => (r, true),
    };
    let prepared = load_with(&args.file, args.traces.as_deref())?;
    let points = if sweep {
        prepared.points()
    } else {
        prepared.single_points()
    };
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let bar = indicatif::ProgressBar::new(points.len() as u64);
    if args.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} simulations")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let results = run_points(&prepared, &points, threads, &|| bar.inc(1))?;
    bar.finish_and_clear();
    let baseline = prepared.as_recorded();
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("sim-results").join(&prepared.spec.name));
    report::write_all(&out, &prepared, &results, baseline.as_ref())
        .with_context(|| format!("writing {}", out.display()))?;
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&report::report(&prepared, &results, baseline.as_ref()))?
        );
    } else {
        let seeds = prepared.spec.sweep.seeds.len();
        if sweep && seeds > 1 {
            print_aggregates(&results);
        } else {
            print_table(&points, &results);
        }
        if let Some(b) = &baseline {
            let s = &b.overall;
            say!(
                "as recorded: {} jobs, mean wait {:.0} s, bsld {:.2}, util {:.3}, offered load {:.3} (the trace's own schedule)",
                s.finished,
                s.mean_wait,
                s.mean_bounded_slowdown,
                s.utilization,
                b.offered_load
            );
        }
        if prepared.spec.metrics.horizon == Horizon::SteadyState {
            say!("steady-state rule: means are over the jobs ended by the last arrival, the JF% of each row");
        }
        say!("wrote {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Each (policy, load) over its seeds: mean and 95% confidence interval.
fn print_aggregates(results: &[PointResult]) {
    let aggs = report::aggregates(results);
    let w = aggs.iter().map(|a| a.policy.len()).max().unwrap_or(0).max(20);
    say!(
        "{:<w$} {:>6} {:>5} {:>15} {:>17} {:>15} {:>15}",
        "policy",
        "load",
        "seeds",
        "JF%",
        "wait (s)",
        "bsld",
        "util"
    );
    for a in &aggs {
        let cell = |key: &str, digits: usize| {
            a.metrics.get(key).map_or(String::new(), |s| match s.ci95 {
                Some(ci) => format!("{:.digits$} ±{:.digits$}", s.mean, ci),
                None => format!("{:.digits$}", s.mean),
            })
        };
        say!(
            "{:<w$} {:>6} {:>5} {:>15} {:>17} {:>15} {:>15}",
            a.policy,
            a.load.map_or("-".into(), |l| format!("{l:.2}")),
            a.seeds,
            cell("finished_pct", 2),
            cell("mean_wait", 0),
            cell("mean_bounded_slowdown", 2),
            cell("utilization", 3),
        );
    }
    say!("± is the half-width of the 95% confidence interval over the seeds (Student's t)");
}

fn print_table(points: &[Point], results: &[PointResult]) {
    let w = results.iter().map(|r| r.policy.len()).max().unwrap_or(0).max(20);
    say!(
        "{:<w$} {:>6} {:>5} {:>8} {:>9} {:>11} {:>9} {:>7} {:>7} {:>12}",
        "policy",
        "load",
        "seed",
        "jobs",
        "JF%",
        "wait (s)",
        "bsld",
        "util",
        "offered",
        "pred err (s)"
    );
    for (p, r) in points.iter().zip(results) {
        let s = &r.overall;
        say!(
            "{:<w$} {:>6} {:>5} {:>8} {:>9.2} {:>11.0} {:>9.2} {:>7.3} {:>7.3} {:>12}",
            r.policy,
            p.load.map_or("-".into(), |l| format!("{l:.2}")),
            p.seed,
            s.submitted,
            s.finished_pct,
            s.mean_wait,
            s.mean_bounded_slowdown,
            s.utilization,
            r.offered_load,
            r.prediction.map_or("-".into(), |e| format!("{:.0}", e.mean_absolute)),
        );
    }
}
