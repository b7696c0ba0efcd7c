//! `brokk bench site`: a local agent over loopback: reservation operations per
//! second (async clients), and trivial jobs (`/bin/true`) per second run to
//! completion (submitted through `RemoteSite`, the client the broker uses),
//! with request latency percentiles. With `--slurm-conf`, the agent fronts
//! that Slurm cluster instead, and the same jobs are also given to `sbatch`
//! directly in the same run: the ratio of the two rates is what Brokk costs on
//! top of the resource manager.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use anyhow::{Context, Result};
use brokk_broker::Site;
use brokk_model::{Duration, Job, Time};
use brokk_planner::{Change, Request};
use brokk_proto::wire::{Granted, ReservationRequest};
use brokk_proto::RemoteSite;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Arguments of `brokk bench site`.
#[derive(clap::Args)]
pub struct SiteArgs {
    /// Client threads.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Seconds of reservation operations.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Trivial jobs to run to completion.
    #[arg(long, default_value_t = 1000)]
    jobs: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Front this Slurm cluster (its `slurm.conf`) and compare with plain `sbatch`.
    #[arg(long)]
    slurm_conf: Option<std::path::PathBuf>,
    /// With `--slurm-conf`: rounds of each, in the order plain, Brokk, Brokk,
    /// plain, ... so neither side always runs on the busier controller.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// With `--slurm-conf`: the agent's `slurm.poll_ms` (how often it reads the queue).
    #[arg(long, default_value_t = 250)]
    slurm_poll_ms: u64,
}

#[derive(Serialize)]
struct SiteFigures {
    reservation_ops_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    jobs_per_s: f64,
    submit_p50_ms: f64,
    submit_p99_ms: f64,
    reservation_ops: usize,
    /// Probes per second while as many clients reserve.
    probes_per_s: f64,
    probe_p99_ms: f64,
    /// Reservation operations per second beside the probing clients.
    mixed_reservation_ops_per_s: f64,
    mixed_p99_ms: f64,
    jobs: usize,
    concurrency: usize,
}

/// The figures of `brokk bench site --slurm-conf`.
#[derive(Serialize)]
struct SlurmFigures {
    /// Jobs per second through a Slurm-backed agent (mean over rounds).
    jobs_per_s: f64,
    /// Jobs per second through plain `sbatch` (mean over rounds).
    sbatch_jobs_per_s: f64,
    /// `jobs_per_s / sbatch_jobs_per_s`.
    slurm_ratio: f64,
    /// Each round's Brokk figure.
    brokk_rounds: Vec<f64>,
    /// Each round's plain figure.
    sbatch_rounds: Vec<f64>,
    submit_p50_ms: f64,
    submit_p99_ms: f64,
    jobs: usize,
    concurrency: usize,
}

/// Starts an agent on a loopback port in a background runtime; returns its URL.
fn start_agent(dir: &std::path::Path) -> Result<String> {
    let mut config: brokk_site::Config = toml::from_str(&format!(
        "name = \"bench\"\ncapacity = 1024\ndatabase = \"{}\"\nworkdir = \"{}\"\n[tokens]\n\"bench\" = \"bench\"\n",
        dir.join("bench.db").display(),
        dir.join("jobs").display()
    ))?;
    config.listen = "127.0.0.1:0".parse()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Runtime::new() {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(e.to_string()));
                return;
            }
        };
        rt.block_on(async move {
            match brokk_site::start(config).await {
                Ok(running) => {
                    let _ = tx.send(Ok(format!("http://{}", running.addr)));
                    let _ = running.server.await;
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                }
            }
        });
    });
    rx.recv()?.map_err(anyhow::Error::msg)
}

/// A request for 1-16 slots for 10 minutes to 2 hours, in a day's window
/// starting within a month of `base`.
fn random_request(rng: &mut ChaCha8Rng, base: i64) -> Request {
    let earliest = base + rng.gen_range(0..30 * 86_400);
    Request {
        amount: rng.gen_range(1..=16),
        duration: Duration(rng.gen_range(600..7200)),
        earliest: Time(earliest),
        latest: Time(earliest + 86_400),
        flexible: false,
    }
}

/// One client's reservation stream: reserve, then commit, modify or cancel,
/// each timed in milliseconds. The load generator is an async reqwest client
/// on the bench's own runtime, so that the client side costs as little CPU as
/// possible on the machine the agent shares.
async fn reservation_client(http: reqwest::Client, url: String, seed: u64, stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut lat = Vec::new();
    let base = brokk_proto::wall_clock().0 + 3600;
    while !stop.load(Ordering::Relaxed) {
        let req = random_request(&mut rng, base);
        let body = ReservationRequest::new(&req, rng.gen_bool(0.5).then_some(600));
        let t = Instant::now();
        let resp = http
            .post(format!("{url}/v1/reservations"))
            .bearer_auth("bench")
            .json(&body)
            .send()
            .await;
        let granted = match resp {
            Ok(r) if r.status() == reqwest::StatusCode::CREATED => r.json::<Granted>().await.ok(),
            Ok(r) => {
                let _ = r.bytes().await;
                None
            }
            Err(_) => None,
        };
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        let Some(g) = granted else { continue };
        let path = format!("{url}/v1/reservations/{}", g.id);
        let next = match rng.gen_range(0..3) {
            0 => http.post(format!("{path}/commit")),
            1 => http.patch(&path).json(&Change {
                duration: Some(Duration(rng.gen_range(600..7200))),
                ..Change::default()
            }),
            _ => http.delete(&path),
        };
        let t = Instant::now();
        if let Ok(r) = next.bearer_auth("bench").send().await {
            let _ = r.bytes().await;
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat
}

/// One client's probe stream: a probe for three candidates over the next
/// month, timed in milliseconds.
async fn probe_client(http: reqwest::Client, url: String, seed: u64, stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut lat = Vec::new();
    let base = brokk_proto::wall_clock().0 + 3600;
    while !stop.load(Ordering::Relaxed) {
        let req = random_request(&mut rng, base);
        let t = Instant::now();
        if let Ok(r) = http
            .post(format!("{url}/v1/probe?k=3"))
            .bearer_auth("bench")
            .json(&req)
            .send()
            .await
        {
            let _ = r.bytes().await;
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    lat
}

/// `reserving` reservation clients beside `probing` probe clients for
/// `seconds`: (reservation latencies, probe latencies, elapsed seconds).
async fn phase(
    http: &reqwest::Client,
    url: &str,
    reserving: usize,
    probing: usize,
    seconds: f64,
) -> (Vec<f64>, Vec<f64>, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let writers: Vec<_> = (0..reserving)
        .map(|i| {
            tokio::spawn(reservation_client(
                http.clone(),
                url.to_string(),
                i as u64 + 1,
                stop.clone(),
            ))
        })
        .collect();
    let readers: Vec<_> = (0..probing)
        .map(|i| {
            tokio::spawn(probe_client(
                http.clone(),
                url.to_string(),
                1000 + i as u64,
                stop.clone(),
            ))
        })
        .collect();
    tokio::time::sleep(StdDuration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut res, mut probes) = (Vec::new(), Vec::new());
    for t in writers {
        res.extend(t.await.unwrap_or_default());
    }
    for t in readers {
        probes.extend(t.await.unwrap_or_default());
    }
    (res, probes, start.elapsed().as_secs_f64())
}

/// Runs the benchmark.
pub fn run(a: SiteArgs) -> Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("brokk-bench-site-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let c = a.concurrency.max(1);
    if let Some(conf) = &a.slurm_conf {
        return run_slurm(&a, conf, &dir, c);
    }
    let url = start_agent(&dir).context("starting the agent")?;

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let http = reqwest::Client::new();
    let (mut lat, _, res_elapsed) = rt.block_on(phase(&http, &url, c, 0, a.seconds));
    lat.sort_by(f64::total_cmp);
    // Probes beside as many reserving clients, on the profile the first
    // phase filled: reads that wait only for writes in progress.
    let (mut mixed, mut probes, mixed_elapsed) = rt.block_on(phase(&http, &url, c, c, a.seconds));
    mixed.sort_by(f64::total_cmp);
    probes.sort_by(f64::total_cmp);

    let (submit_lat, jobs_elapsed) = run_jobs(&url, a.jobs, c)?;
    let jobs_per_s = submit_lat.len() as f64 / jobs_elapsed;
    let figures = SiteFigures {
        reservation_ops_per_s: lat.len() as f64 / res_elapsed,
        p50_ms: super::bench::percentile(&lat, 0.5),
        p99_ms: super::bench::percentile(&lat, 0.99),
        jobs_per_s,
        submit_p50_ms: super::bench::percentile(&submit_lat, 0.5),
        submit_p99_ms: super::bench::percentile(&submit_lat, 0.99),
        reservation_ops: lat.len(),
        probes_per_s: probes.len() as f64 / mixed_elapsed,
        probe_p99_ms: super::bench::percentile(&probes, 0.99),
        mixed_reservation_ops_per_s: mixed.len() as f64 / mixed_elapsed,
        mixed_p99_ms: super::bench::percentile(&mixed, 0.99),
        jobs: submit_lat.len(),
        concurrency: c,
    };
    let _ = std::fs::remove_dir_all(&dir);
    if a.json {
        say!("{}", serde_json::to_string(&figures)?);
    } else {
        say!(
            "reservations: {:.0} ops/s (p50 {:.2} ms, p99 {:.2} ms, {} ops, {c} clients)",
            figures.reservation_ops_per_s,
            figures.p50_ms,
            figures.p99_ms,
            figures.reservation_ops,
        );
        say!(
            "beside {c} probing clients: {:.0} reservation ops/s (p99 {:.2} ms), {:.0} probes/s (p99 {:.2} ms)",
            figures.mixed_reservation_ops_per_s,
            figures.mixed_p99_ms,
            figures.probes_per_s,
            figures.probe_p99_ms,
        );
        say!(
            "jobs: {:.0} /bin/true jobs/s run to completion (submit p50 {:.2} ms, p99 {:.2} ms, {} jobs)",
            figures.jobs_per_s,
            figures.submit_p50_ms,
            figures.submit_p99_ms,
            figures.jobs
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The same trivial jobs given straight to `sbatch` by `c` threads, run to
/// completion (until `squeue` lists none of them): jobs per second.
fn plain_sbatch(conf: &std::path::Path, dir: &std::path::Path, jobs: usize, c: usize) -> Result<f64> {
    let name = format!("brokk-bench-plain-{}", std::process::id());
    let work = std::path::absolute(dir.join("plain"))?;
    std::fs::create_dir_all(&work)?;
    // The very script the agent would write for the same job, so that the
    // two sides differ only by Brokk.
    let job = Job {
        name: Some(name.clone()),
        working_directory: Some(work.display().to_string()),
        ..trivial_job()
    };
    let script = work.join("job.sbatch");
    std::fs::write(&script, brokk_jdl::write(brokk_jdl::Format::Slurm, &[job])?.text)?;
    let script = script.display().to_string();
    let args = ["--parsable", script.as_str()];
    let start = Instant::now();
    let per = jobs.div_ceil(c);
    let submitted: usize = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..c)
            .map(|i| {
                let n = per.min(jobs.saturating_sub(i * per));
                scope.spawn(move || {
                    (0..n)
                        .filter(|_| {
                            std::process::Command::new("sbatch")
                                .args(args)
                                .env("SLURM_CONF", conf)
                                .output()
                                .is_ok_and(|o| o.status.success())
                        })
                        .count()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap_or(0)).sum()
    });
    loop {
        let out = std::process::Command::new("squeue")
            .args(["-h", "--name", &name, "-o", "%i"])
            .env("SLURM_CONF", conf)
            .output()
            .context("running squeue")?;
        anyhow::ensure!(out.status.success(), "squeue: {}", String::from_utf8_lossy(&out.stderr));
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            break;
        }
        if start.elapsed() > StdDuration::from_secs(600) {
            anyhow::bail!("plain sbatch jobs did not finish within 10 minutes");
        }
        // As often as the agent reads the queue.
        std::thread::sleep(StdDuration::from_millis(250));
    }
    anyhow::ensure!(submitted == jobs, "sbatch took {submitted} of {jobs} jobs");
    Ok(submitted as f64 / start.elapsed().as_secs_f64())
}

/// Submits `jobs` trivial jobs through `c` client threads with the broker's
/// client and waits until the agent has nothing waiting or running: the
/// sorted submission latencies (ms) and the seconds it all took.
fn run_jobs(url: &str, jobs: usize, c: usize) -> Result<(Vec<f64>, f64)> {
    let job = trivial_job();
    let start = Instant::now();
    let per = jobs.div_ceil(c);
    let handles: Vec<_> = (0..c)
        .map(|i| {
            let (url, job) = (url.to_string(), job.clone());
            let n = per.min(jobs.saturating_sub(i * per));
            std::thread::spawn(move || {
                let mut site = RemoteSite::new(&url, "bench");
                let mut lat = Vec::new();
                for _ in 0..n {
                    let t = Instant::now();
                    if site.submit("bench", &job, None).is_ok() {
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                lat
            })
        })
        .collect();
    let mut lat: Vec<f64> = handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect();
    lat.sort_by(f64::total_cmp);
    let site = RemoteSite::new(url, "bench");
    loop {
        let info = site.info().context("asking the agent")?;
        if info.running_jobs == 0 && info.waiting_jobs == 0 {
            break;
        }
        if start.elapsed() > StdDuration::from_secs(600) {
            anyhow::bail!("jobs did not finish within 10 minutes");
        }
        std::thread::sleep(StdDuration::from_millis(20));
    }
    Ok((lat, start.elapsed().as_secs_f64()))
}

/// A `brokk site` process fronting a Slurm cluster, killed when dropped: a
/// separate process, as in production, so that nothing of it runs while
/// plain `sbatch` is measured.
struct AgentProcess {
    child: std::process::Child,
    url: String,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_slurm_agent(dir: &std::path::Path, conf: &std::path::Path, poll_ms: u64) -> Result<AgentProcess> {
    use std::io::BufRead;
    std::fs::create_dir_all(dir)?;
    let config = dir.join("site.toml");
    super::write_private(
        &config,
        &format!(
            "name = \"bench\"\ndatabase = \"bench.db\"\nworkdir = \"jobs\"\n[tokens]\n\"bench\" = \"bench\"\n\
             [slurm]\nconf = \"{}\"\npoll_ms = {poll_ms}\n",
            std::path::absolute(conf)?.display()
        ),
    )?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["site", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line)?;
    }
    let Some(url) = line.trim().strip_prefix("listening on ").map(str::to_string) else {
        let _ = child.kill();
        anyhow::bail!("the Slurm-backed agent did not start (is slurmctld up?)");
    };
    Ok(AgentProcess { child, url })
}

/// `brokk bench site --slurm-conf`: the same trivial jobs through a
/// Slurm-backed agent and through plain `sbatch`, in alternating rounds.
fn run_slurm(a: &SiteArgs, conf: &std::path::Path, dir: &std::path::Path, c: usize) -> Result<ExitCode> {
    let rounds = a.rounds.max(1);
    let (mut brokk, mut plain, mut lat) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..2 * rounds {
        // plain, Brokk, Brokk, plain, plain, Brokk, ...
        let brokk_turn = matches!(r % 4, 1 | 2);
        if brokk_turn {
            let agent = spawn_slurm_agent(&dir.join(format!("round-{r}")), conf, a.slurm_poll_ms)?;
            let (l, secs) = run_jobs(&agent.url, a.jobs, c)?;
            anyhow::ensure!(l.len() == a.jobs, "the agent took {} of {} jobs", l.len(), a.jobs);
            brokk.push(a.jobs as f64 / secs);
            lat.extend(l);
        } else {
            plain.push(plain_sbatch(conf, dir, a.jobs, c)?);
        }
    }
    lat.sort_by(f64::total_cmp);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let figures = SlurmFigures {
        jobs_per_s: mean(&brokk),
        sbatch_jobs_per_s: mean(&plain),
        slurm_ratio: mean(&brokk) / mean(&plain),
        brokk_rounds: brokk,
        sbatch_rounds: plain,
        submit_p50_ms: super::bench::percentile(&lat, 0.5),
        submit_p99_ms: super::bench::percentile(&lat, 0.99),
        jobs: a.jobs,
        concurrency: c,
    };
    let _ = std::fs::remove_dir_all(dir);
    if a.json {
        say!("{}", serde_json::to_string(&figures)?);
    } else {
        say!(
            "through Brokk: {:.1} /bin/true jobs/s run to completion (submit p50 {:.2} ms, p99 {:.2} ms)\n\
             plain sbatch:  {:.1} jobs/s\nratio: {:.2} ({} jobs, {c} clients, {rounds} rounds each)",
            figures.jobs_per_s,
            figures.submit_p50_ms,
            figures.submit_p99_ms,
            figures.sbatch_jobs_per_s,
            figures.slurm_ratio,
            a.jobs
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The job both benches run: `/bin/true` with a one-minute wall time.
fn trivial_job() -> Job {
    Job {
        executable: Some("/bin/true".into()),
        wall_time: Some(Duration(60)),
        ..Job::default()
    }
}
