//! `brokk bench site`: a local agent over loopback: reservation operations per
//! second (async clients), and trivial jobs (`/bin/true`) per second run to
//! completion (submitted through `RemoteSite`, the client the broker uses),
//! with request latency percentiles.

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

/// One client's reservation stream: reserve, then commit, modify or cancel,
/// each timed in milliseconds. The load generator is an async reqwest client
/// on the bench's own runtime, so that the client side costs as little CPU as
/// possible on the machine the agent shares.
async fn reservation_client(http: reqwest::Client, url: String, seed: u64, stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut lat = Vec::new();
    let base = brokk_proto::wall_clock().0 + 3600;
    while !stop.load(Ordering::Relaxed) {
        let earliest = base + rng.gen_range(0..30 * 86_400);
        let req = Request {
            amount: rng.gen_range(1..=16),
            duration: Duration(rng.gen_range(600..7200)),
            earliest: Time(earliest),
            latest: Time(earliest + 86_400),
            flexible: false,
        };
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

/// Runs the benchmark.
pub fn run(a: SiteArgs) -> Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("brokk-bench-site-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let url = start_agent(&dir).context("starting the agent")?;
    let c = a.concurrency.max(1);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let http = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut lat: Vec<f64> = rt.block_on(async {
        let tasks: Vec<_> = (0..c)
            .map(|i| {
                tokio::spawn(reservation_client(
                    http.clone(),
                    url.clone(),
                    i as u64 + 1,
                    stop.clone(),
                ))
            })
            .collect();
        tokio::time::sleep(StdDuration::from_secs_f64(a.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap_or_default());
        }
        all
    });
    let res_elapsed = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);

    let job = Job {
        executable: Some("/bin/true".into()),
        wall_time: Some(Duration(60)),
        ..Job::default()
    };
    let start = Instant::now();
    let per = a.jobs.div_ceil(c);
    let handles: Vec<_> = (0..c)
        .map(|i| {
            let (url, job) = (url.clone(), job.clone());
            let n = per.min(a.jobs.saturating_sub(i * per));
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
    let mut submit_lat: Vec<f64> = handles.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect();
    submit_lat.sort_by(f64::total_cmp);
    // Done when the agent has nothing waiting or running.
    let site = RemoteSite::new(&url, "bench");
    loop {
        let info = site.info().context("asking the agent")?;
        if info.running_jobs == 0 && info.waiting_jobs == 0 {
            break;
        }
        if start.elapsed() > StdDuration::from_secs(600) {
            anyhow::bail!("jobs did not finish within 10 minutes");
        }
        std::thread::sleep(StdDuration::from_millis(5));
    }
    let jobs_elapsed = start.elapsed().as_secs_f64();
    let figures = SiteFigures {
        reservation_ops_per_s: lat.len() as f64 / res_elapsed,
        p50_ms: super::bench::percentile(&lat, 0.5),
        p99_ms: super::bench::percentile(&lat, 0.99),
        jobs_per_s: submit_lat.len() as f64 / jobs_elapsed,
        submit_p50_ms: super::bench::percentile(&submit_lat, 0.5),
        submit_p99_ms: super::bench::percentile(&submit_lat, 0.99),
        reservation_ops: lat.len(),
        jobs: submit_lat.len(),
        concurrency: c,
    };
    let _ = std::fs::remove_dir_all(&dir);
    if a.json {
        println!("{}", serde_json::to_string(&figures)?);
    } else {
        println!(
            "reservations: {:.0} ops/s (p50 {:.2} ms, p99 {:.2} ms, {} ops, {c} clients)\n\
             jobs: {:.0} /bin/true jobs/s run to completion (submit p50 {:.2} ms, p99 {:.2} ms, {} jobs)",
            figures.reservation_ops_per_s,
            figures.p50_ms,
            figures.p99_ms,
            figures.reservation_ops,
            figures.jobs_per_s,
            figures.submit_p50_ms,
            figures.submit_p99_ms,
            figures.jobs
        );
    }
    Ok(ExitCode::SUCCESS)
}
