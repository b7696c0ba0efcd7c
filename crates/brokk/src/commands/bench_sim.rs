//! `brokk bench sim`: simulated jobs per second on KTH-SP2 under EASY and on
//! LCG-2005-1 as 170 independent clusters, and the ratio to AccaSim (an
//! independent Python simulator) run on KTH-SP2 in the same invocation.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use brokk_model::{Duration, Objective};
use brokk_sim::cluster::{from_swf, simulate, Estimates, Policy, SimJob};
use brokk_sim::grid::{simulate_grid, GridOptions, GridRouting, Staleness};
use brokk_sim::platform::{clusters_from_partitions, simulate_platform, Routing};
use brokk_sim::swf::{self, Swf};
use serde::Serialize;

/// Arguments of `brokk bench sim`.
#[derive(clap::Args)]
pub struct SimArgs {
    /// Directory holding the Parallel Workloads Archive traces.
    #[arg(long, default_value = "data/traces")]
    traces: PathBuf,
    /// Least seconds of repeated simulation per workload.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Python with AccaSim installed (scripts/accasim-crosscheck.sh makes one);
    /// without it the ratio is null.
    #[arg(long, default_value = ".venv/accasim/bin/python")]
    accasim_python: PathBuf,
    /// Skip the AccaSim run.
    #[arg(long)]
    no_accasim: bool,
    /// The sweep whose statistics and reports are timed against its
    /// simulations.
    #[arg(long, default_value = "examples/experiments/lublin-sweep.toml")]
    sweep: PathBuf,
    /// Print one JSON object per workload.
    #[arg(long)]
    json: bool,
}

/// What a sweep's statistics and reports cost beside its simulations.
#[derive(Serialize)]
struct ReportFigures {
    workload: String,
    points: usize,
    /// Seconds to run every point (statistics inside included).
    sweep_seconds: f64,
    /// Seconds of that spent on percentiles and per-user and per-size
    /// groups, measured by computing them again.
    statistics_seconds: f64,
    /// Seconds to aggregate over seeds and write jobs.csv, summary.json,
    /// schedules and plots.
    reports_seconds: f64,
    /// (statistics + reports) / (sweep - statistics): what they add.
    reports_overhead: f64,
}

/// Times `sweep`'s simulations, statistics and reports.
fn time_reports(sweep: &Path) -> Result<ReportFigures> {
    use brokk_sim::experiment::{load, run_points};
    use brokk_sim::metrics::{by_size, by_user, summary};
    let prepared = load(sweep)?;
    let points = prepared.points();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let start = Instant::now();
    let results = run_points(&prepared, &points, threads, &|| {})?;
    let sweep_seconds = start.elapsed().as_secs_f64();
    let bound = Duration(prepared.spec.metrics.bound);
    let procs: u32 = prepared.clusters.iter().map(|c| c.procs).sum();
    let start = Instant::now();
    for r in &results {
        let all: Vec<_> = r.runs.iter().flat_map(|c| c.outcomes.iter().copied()).collect();
        std::hint::black_box(summary(&all, all.len(), procs, r.cut, bound));
        std::hint::black_box(by_user(&all, procs, r.cut, bound));
        std::hint::black_box(by_size(&all, procs, r.cut, bound));
    }
    // The threads ran the points in parallel; so would these.
    let statistics_seconds = start.elapsed().as_secs_f64() / threads.min(points.len()).max(1) as f64;
    let dir = std::env::temp_dir().join(format!("brokk-bench-reports-{}", std::process::id()));
    let start = Instant::now();
    let baseline = prepared.as_recorded();
    brokk_sim::report::write_all(&dir, &prepared, &results, baseline.as_ref())?;
    let reports_seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ReportFigures {
        workload: format!("{} ({} points on {threads} threads)", prepared.spec.name, points.len()),
        points: points.len(),
        sweep_seconds,
        statistics_seconds,
        reports_seconds,
        reports_overhead: (statistics_seconds + reports_seconds) / (sweep_seconds - statistics_seconds).max(1e-9),
    })
}

#[derive(Serialize)]
struct SimFigures {
    workload: String,
    jobs: usize,
    seconds: f64,
    jobs_per_s: f64,
    peak_rss_mb: f64,
    accasim_ratio: Option<f64>,
    /// AccaSim's jobs/s on the same trace and policy, requested-time estimates.
    accasim_jobs_per_s: Option<f64>,
    /// Brokk's jobs/s with AccaSim's estimate rule, the ratio's numerator.
    same_rule_jobs_per_s: Option<f64>,
    /// This row's jobs/s over EASY's on the same workload in the same run
    /// (conservative backfilling's rows).
    easy_ratio: Option<f64>,
}

impl SimFigures {
    /// A row without an AccaSim comparison, its memory read now.
    fn plain(workload: String, jobs: usize, seconds: f64) -> Self {
        SimFigures {
            workload,
            jobs,
            seconds,
            jobs_per_s: jobs as f64 / seconds,
            peak_rss_mb: peak_rss_mb(),
            accasim_ratio: None,
            accasim_jobs_per_s: None,
            same_rule_jobs_per_s: None,
            easy_ratio: None,
        }
    }

    /// A conservative backfilling row set against EASY's jobs/s on the same
    /// workload.
    fn against_easy(workload: String, jobs: usize, seconds: f64, easy_jobs_per_s: f64) -> Self {
        let mut row = SimFigures::plain(workload, jobs, seconds);
        row.easy_ratio = Some(row.jobs_per_s / easy_jobs_per_s);
        row
    }
}

/// Repeats `f` until `seconds` have passed; returns (jobs per run, seconds per run).
fn time_runs(seconds: f64, mut f: impl FnMut() -> usize) -> (usize, f64) {
    let start = Instant::now();
    let mut runs = 0u32;
    let mut jobs = 0;
    while runs == 0 || start.elapsed().as_secs_f64() < seconds {
        jobs = f();
        runs += 1;
    }
    (jobs, start.elapsed().as_secs_f64() / f64::from(runs))
}

fn read(dir: &Path, name: &str) -> Result<Swf> {
    let path = dir.join(name);
    swf::read_path(&path, false).with_context(|| format!("reading {}", path.display()))
}

/// The peak resident set of this process, from /proc (Linux); 0 elsewhere.
fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// AccaSim's EASY run on the trace: (jobs, seconds), timed inside Python.
fn accasim(python: &Path, trace: &Swf) -> Result<(usize, f64)> {
    if !python.exists() {
        bail!(
            "{} not found; run scripts/accasim-crosscheck.sh once to install AccaSim",
            python.display()
        );
    }
    let dir = std::env::temp_dir().join(format!("brokk-bench-accasim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let swf_path = dir.join("trace.swf");
    swf::write(trace, std::io::BufWriter::new(std::fs::File::create(&swf_path)?))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/accasim_run.py");
    let procs = trace.max_procs().unwrap_or(100).to_string();
    let out = Command::new(python)
        .arg(&script)
        .args([
            "--swf",
            &swf_path.to_string_lossy(),
            "--procs",
            &procs,
            "--policy",
            "easy",
        ])
        .arg("--out")
        .arg(dir.join("schedule.csv"))
        .output()
        .context("running AccaSim")?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        bail!("AccaSim failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    #[derive(serde::Deserialize)]
    struct Timing {
        jobs: usize,
        seconds: f64,
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let t: Timing = serde_json::from_str(stdout.lines().last().unwrap_or("")).context("reading AccaSim's timing")?;
    Ok((t.jobs, t.seconds))
}

/// Runs the benchmark.
pub fn run(a: SimArgs) -> Result<ExitCode> {
    let kth = read(&a.traces, "KTH-SP2-1996-2.1-cln.swf.gz")?;
    let procs = u32::try_from(kth.max_procs().unwrap_or(100))?;
    let exact = from_swf(&kth.jobs, Estimates::Exact);
    let requested = from_swf(&kth.jobs, Estimates::Requested);
    let easy = |jobs: &[SimJob]| simulate(procs, jobs, Policy::EASY).len();
    let (jobs, seconds) = time_runs(a.seconds, || easy(&exact));
    let (same_jobs, same_seconds) = time_runs(a.seconds, || easy(&requested));
    let same_rule = same_jobs as f64 / same_seconds;
    let acc = if a.no_accasim {
        None
    } else {
        match accasim(&a.accasim_python, &kth) {
            Ok((n, s)) => Some(n as f64 / s),
            Err(e) => {
                eprintln!("note: no AccaSim figure: {e:#}");
                None
            }
        }
    };
    let mut rows = vec![SimFigures {
        workload: "KTH-SP2, 100 processors, EASY, exact estimates".into(),
        jobs,
        seconds,
        jobs_per_s: jobs as f64 / seconds,
        peak_rss_mb: peak_rss_mb(),
        accasim_ratio: acc.map(|x| same_rule / x),
        accasim_jobs_per_s: acc,
        same_rule_jobs_per_s: Some(same_rule),
        easy_ratio: None,
    }];
    let conservative = |jobs: &[SimJob]| simulate(procs, jobs, Policy::CONSERVATIVE).len();
    let easy_exact = rows[0].jobs_per_s;
    for (rule, jobs, easy) in [("exact", &exact, easy_exact), ("requested", &requested, same_rule)] {
        let (n, seconds) = time_runs(a.seconds, || conservative(jobs));
        rows.push(SimFigures::against_easy(
            format!("KTH-SP2, 100 processors, conservative, {rule} estimates"),
            n,
            seconds,
            easy,
        ));
    }

    let lcg = read(&a.traces, "LCG-2005-1.swf.gz")?;
    let clusters = clusters_from_partitions(&lcg.partitions(), &lcg.jobs, lcg.max_procs());
    let lcg_jobs = from_swf(&lcg.jobs, Estimates::Requested);
    let partition = |policy: Policy| {
        time_runs(a.seconds, || {
            simulate_platform(&clusters, &lcg_jobs, Routing::Partition, policy, None)
                .clusters
                .iter()
                .map(|c| c.outcomes.len())
                .sum()
        })
    };
    let (jobs, seconds) = partition(Policy::EASY);
    rows.push(SimFigures::plain(
        format!("LCG-2005-1, {} independent clusters, EASY", clusters.len()),
        jobs,
        seconds,
    ));
    // EASY's rate is the baseline of conservative backfilling and of the
    // broker's routing below.
    let partition_rate = jobs as f64 / seconds;
    let (jobs, seconds) = partition(Policy::CONSERVATIVE);
    rows.push(SimFigures::against_easy(
        format!("LCG-2005-1, {} independent clusters, conservative", clusters.len()),
        jobs,
        seconds,
        partition_rate,
    ));
    // The broker itself routing every arrival over the same clusters, each a
    // site core, with information a minute stale.
    let routing = GridRouting::Broker {
        objective: Objective::EarliestCompletion,
        reserve_top_k: 0,
    };
    let staleness = Staleness {
        info_ttl: Duration(60),
        info_delay: Duration(0),
    };
    // One broker over all the clusters, then two in one simulation, each
    // over half the clusters with the jobs of its half's partitions.
    for (brokers, who) in [(1, "broker TTD routing"), (2, "two brokers over half each, TTD")] {
        let (jobs, seconds) = time_runs(a.seconds, || {
            simulate_grid(
                &clusters,
                &lcg_jobs,
                routing,
                GridOptions {
                    staleness,
                    brokers,
                    ..GridOptions::default()
                },
            )
            .clusters
            .iter()
            .map(|c| c.outcomes.len())
            .sum()
        });
        rows.push(SimFigures::plain(
            format!(
                "LCG-2005-1, {} clusters as site cores, {who} (ratio to partition routing above: {:.3})",
                clusters.len(),
                (jobs as f64 / seconds) / partition_rate
            ),
            jobs,
            seconds,
        ));
    }
    for r in &rows {
        if a.json {
            say!("{}", serde_json::to_string(r)?);
        } else {
            say!(
                "{}: {} jobs in {:.4} s = {:.0} jobs/s, peak RSS {:.0} MB{}{}",
                r.workload,
                r.jobs,
                r.seconds,
                r.jobs_per_s,
                r.peak_rss_mb,
                match (r.accasim_ratio, r.accasim_jobs_per_s) {
                    (Some(ratio), Some(acc)) => format!(
                        "; same estimates as AccaSim {:.0} jobs/s vs AccaSim {acc:.0} jobs/s = {ratio:.0}x",
                        r.same_rule_jobs_per_s.unwrap_or(0.0)
                    ),
                    _ => String::new(),
                },
                r.easy_ratio
                    .map_or(String::new(), |x| format!("; {x:.3} of EASY's jobs/s"))
            );
        }
    }
    let r = time_reports(&a.sweep)?;
    if a.json {
        say!("{}", serde_json::to_string(&r)?);
    } else {
        say!(
            "{}: simulations {:.2} s, of which statistics {:.3} s; reports and plots {:.3} s: +{:.1}%",
            r.workload,
            r.sweep_seconds,
            r.statistics_seconds,
            r.reports_seconds,
            r.reports_overhead * 100.0
        );
    }
    Ok(ExitCode::SUCCESS)
}
