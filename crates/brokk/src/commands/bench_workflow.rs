//! `brokk bench workflow`: the time to admit one workflow over many sites,
//! for each scheduler, against single-job admission of the same workflow
//! on the same grid in the same run (the baseline: one probe round per
//! task, no ranking, no look at the finish). The workflows have dependencies
//! with data and no co-allocations (a greedy co-allocation may reject the
//! whole workflow; the simulation experiments measure those).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use brokk_broker::workflow::{admit, memory_sites, LinkSpec, Network, Options, Scheduler, SiteSpec, Topology};
use brokk_broker::{MemorySite, Site};
use brokk_model::{Duration, Time};
use brokk_planner::Request;
use brokk_sim::admission::critical_path;
use brokk_sim::workflows::{generate, WorkflowParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Arguments of `brokk bench workflow`.
#[derive(clap::Args)]
pub struct WorkflowBenchArgs {
    /// Workflow sizes (tasks) to measure.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    tasks: Vec<usize>,
    /// Sites in the grid.
    #[arg(long, default_value_t = 20)]
    sites: usize,
    /// Admissions timed per scheduler and size (the median is reported).
    #[arg(long, default_value_t = 15)]
    runs: usize,
    /// Seed of the grid, its background load and the workflows.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object per size.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Figures {
    tasks: usize,
    sites: usize,
    single_ms: f64,
    heftsync_ms: f64,
    heftsyncbt_ms: f64,
    hlst_ms: f64,
    heftsync_to_single: f64,
    heftsync_probes: u64,
    /// HEFTSync's reason when it did not admit.
    rejected: Option<String>,
}

/// A grid of `n` sites (64 to 512 processors, speeds 1 to 2) on a ring with
/// chords, each site a week of background reservations at about half load.
fn grid(n: usize, seed: u64) -> Result<(Vec<MemorySite>, Topology, Network)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let horizon = Time(60 * 86_400);
    let specs: Vec<SiteSpec> = (0..n)
        .map(|i| SiteSpec {
            name: format!("site{i}"),
            capacity: 64 << rng.gen_range(0..4),
            speed: rng.gen_range(1.0..2.0),
        })
        .collect();
    let mut links = Vec::new();
    for i in 0..n {
        for j in [i + 1, i + n / 3] {
            if n > 1
                && j % n != i
                && !links
                    .iter()
                    .any(|l: &LinkSpec| (l.a, l.b) == (i, j % n) || (l.b, l.a) == (i, j % n))
            {
                links.push(LinkSpec {
                    a: i,
                    b: j % n,
                    bandwidth: 125_000_000,
                });
            }
        }
    }
    let net = Network::new(n, links, 125_000, horizon).context("the benchmark's network")?;
    let mut sites = memory_sites(&specs, horizon);
    for (site, spec) in sites.iter_mut().zip(&specs) {
        for _ in 0..300 {
            let start = rng.gen_range(0..7 * 86_400);
            let req = Request {
                amount: rng.gen_range(1..=spec.capacity / 4),
                duration: Duration(rng.gen_range(600..14_400)),
                earliest: Time(start),
                latest: Time(start + 86_400),
                flexible: false,
            };
            let _ = site.reserve("local", &req, None);
        }
    }
    let topo = Topology::new(specs, &net);
    Ok((sites, topo, net))
}

/// Runs the benchmark.
pub fn run(a: WorkflowBenchArgs) -> Result<ExitCode> {
    anyhow::ensure!(a.sites > 0 && a.runs > 0, "--sites and --runs must be positive");
    let (sites, topo, net) = grid(a.sites, a.seed)?;
    if !a.json {
        say!(
            "{:>6} {:>6} {:>10} {:>11} {:>13} {:>9} {:>9} {:>8}",
            "tasks",
            "sites",
            "single ms",
            "heftsync ms",
            "heftsyncbt ms",
            "hlst ms",
            "ratio",
            "probes"
        );
    }
    for &n in &a.tasks {
        anyhow::ensure!(n > 0, "--tasks: positive sizes");
        let params = WorkflowParams {
            tasks: n,
            width: ((n as f64).sqrt().ceil() as usize).max(1),
            regularity: 0.5,
            density: 0.2,
            max_jump: 2,
            coallocation_density: 0.0,
            max_size: 64,
            bytes_per_cpu_second: 1e3,
            bandwidth_per_cpu: 1e4,
        };
        let mut wf = generate(&params, "bench", a.seed)?;
        wf.earliest = Some(Time(3_600));
        wf.deadline = Some(Time(3_600 + 10 * critical_path(&wf)));
        let timed = |scheduler: Scheduler| -> (f64, u64, Option<String>) {
            let mut times = Vec::with_capacity(a.runs);
            let (mut probes, mut no) = (0, None);
            for _ in 0..a.runs {
                let (mut s, mut nw) = (sites.clone(), net.clone());
                let mut refs: Vec<&mut dyn Site> = s.iter_mut().map(|x| x as &mut dyn Site).collect();
                let opts = Options {
                    scheduler,
                    now: Time(0),
                    hold: Duration(600),
                    explain: false,
                };
                let t0 = Instant::now();
                let answer = admit(&wf, &topo, &mut refs, &mut nw, "bench", &opts);
                times.push(t0.elapsed().as_secs_f64() * 1e3);
                (probes, no) = match &answer {
                    Ok(o) => (o.messages.probes, None),
                    Err(r) => (r.messages.probes, Some(r.to_string())),
                };
            }
            times.sort_by(f64::total_cmp);
            (times[times.len() / 2], probes, no)
        };
        let (single, ..) = timed(Scheduler::Single);
        let (heft, probes, rejected) = timed(Scheduler::HeftSync);
        let (bt, ..) = timed(Scheduler::HeftSyncBt);
        let (hlst, ..) = timed(Scheduler::Hlst);
        let f = Figures {
            tasks: n,
            sites: a.sites,
            single_ms: single,
            heftsync_ms: heft,
            heftsyncbt_ms: bt,
            hlst_ms: hlst,
            heftsync_to_single: heft / single.max(1e-9),
            heftsync_probes: probes,
            rejected,
        };
        if a.json {
            say!("{}", serde_json::to_string(&f)?);
        } else {
            say!(
                "{:>6} {:>6} {:>10.2} {:>11.2} {:>13.2} {:>9.2} {:>9.2} {:>8}",
                f.tasks,
                f.sites,
                f.single_ms,
                f.heftsync_ms,
                f.heftsyncbt_ms,
                f.hlst_ms,
                f.heftsync_to_single,
                f.heftsync_probes
            );
        }
    }
    if !a.json {
        say!(
            "median of {} admissions each; ratio: HEFTSync's time over single-job admission's, same grid, same run",
            a.runs
        );
    }
    Ok(ExitCode::SUCCESS)
}
