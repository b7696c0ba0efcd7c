//! `brokk bench submit`: the broker service with three embedded sites, fed by
//! concurrent clients: jobs accepted per second, jobs dispatched to a site per
//! second, and submit latency percentiles.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use brokk_model::JobPreferences;
use brokk_proto::wire::SubmitRequest;
use serde::Serialize;

/// Arguments of `brokk bench submit`.
#[derive(clap::Args)]
pub struct SubmitBenchArgs {
    /// Jobs to submit.
    #[arg(long, default_value_t = 2000)]
    jobs: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Ask for advance reservations ([ET-brokering]'s two phases) for every job.
    #[arg(long)]
    reserve: bool,
    /// Sites that plan and complete jobs without running anything (the
    /// benchmark-only null backend), so the broker's own path is measured.
    #[arg(long)]
    null_backend: bool,
    /// Keep the broker fed until `--jobs` jobs are accepted, dispatched and
    /// finished, sampling its memory, its database's size and status reads
    /// (use with `--null-backend` and a large `--jobs`).
    #[arg(long)]
    soak: bool,
    /// Seconds an ended job stays in its site agent's memory (the sites'
    /// `min_job_age_s`; their default when absent): with it the soak shows
    /// memory once ended jobs retire, in a run shorter than the default.
    #[arg(long)]
    min_job_age: Option<i64>,
    /// Seconds between two soak samples.
    #[arg(long, default_value_t = 10.0)]
    sample_seconds: f64,
    /// The broker's database: a `postgres://` URL, or a SQLite file in the
    /// benchmark's directory when absent.
    #[arg(long)]
    database: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct SubmitFigures {
    accepted_per_s: f64,
    dispatched_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    jobs: usize,
    concurrency: usize,
    reserve: bool,
    null_backend: bool,
}

/// Runs the benchmark.
pub fn run(a: SubmitBenchArgs) -> Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("brokk-bench-submit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let config_path = dir.join("broker.toml");
    let database = a.database.clone().unwrap_or_else(|| "broker.db".into());
    let mut text = format!("database = \"{database}\"\nstate_dir = \"sites\"\n[tokens]\n\"bench\" = \"bench\"\n");
    for name in ["a", "b", "c"] {
        text += &format!(
            "[[embedded]]\nname = \"{name}\"\ncapacity = 4096\nnull_backend_for_benchmarks = {}\n",
            a.null_backend
        );
        if let Some(age) = a.min_job_age {
            text += &format!("min_job_age_s = {age}\n");
        }
    }
    super::write_private(&config_path, &text)?;
    let config = brokk_server::Config::load(&config_path)?;
    let rt = super::runtime()?;
    if a.soak {
        let figures = rt.block_on(async {
            let running = brokk_server::start(config).await?;
            let every = Duration::from_secs_f64(a.sample_seconds.max(0.1));
            let json = a.json;
            let age = a.min_job_age.unwrap_or_else(brokk_site::config::default_min_job_age);
            super::bench_soak::run(&running, &database, a.jobs, a.concurrency, every, age, |s| {
                if !json {
                    say!(
                        "{:>8.0} s {:>9} accepted {:>9} finished {:>8.1} MiB rss {:>8.1} MiB db  status p50 {:.2} ms p99 {:.2} ms",
                        s.seconds,
                        s.accepted,
                        s.finished,
                        s.rss_mb,
                        s.db_bytes as f64 / (1024.0 * 1024.0),
                        s.status_p50_ms,
                        s.status_p99_ms
                    );
                }
            })
            .await
        });
        drop(rt);
        let _ = std::fs::remove_dir_all(&dir);
        let f = figures.context("running the soak")?;
        if a.json {
            say!("{}", serde_json::to_string(&f)?);
        } else {
            say!(
                "{} jobs on {} in {:.0} s ({:.0} accepted/s): resident memory {:.1} MiB after warm-up, {:.1} MiB at the end, slope {:.2} MiB per 100,000 jobs; {:.0} database bytes per job; status p50 {:.2} ms, p99 {:.2} ms with every job stored; the newest 1,000 listed in p50 {:.1} ms, p99 {:.1} ms",
                f.jobs,
                f.database,
                f.seconds,
                f.accepted_per_s,
                f.rss_after_warmup_mb,
                f.rss_end_mb,
                f.rss_slope_mb_per_100k_jobs,
                f.db_bytes_per_job,
                f.status_p50_ms,
                f.status_p99_ms,
                f.list_p50_ms,
                f.list_p99_ms
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let figures = rt.block_on(async {
        let running = brokk_server::start(config).await?;
        let url = format!("http://{}/v1/jobs", running.addr);
        let http = reqwest::Client::new();
        let body = SubmitRequest {
            preferences: a.reserve.then(|| JobPreferences {
                use_reservations: Some(true),
                ..JobPreferences::default()
            }),
            ..super::bench_soak::trivial_submission()
        };
        let start = Instant::now();
        let per = a.jobs.div_ceil(a.concurrency.max(1));
        let mut tasks = Vec::new();
        for i in 0..a.concurrency.max(1) {
            let n = per.min(a.jobs.saturating_sub(i * per));
            let (http, url, body) = (http.clone(), url.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    let r = http.post(&url).bearer_auth("bench").json(&body).send().await;
                    if matches!(&r, Ok(r) if r.status().as_u16() == 202) {
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                lat
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap_or_default());
        }
        let accepted_s = start.elapsed().as_secs_f64();
        lat.sort_by(f64::total_cmp);
        // Dispatched: no job is left in `accepted`.
        loop {
            if super::bench_soak::jobs_in(&running, "accepted") == 0 {
                break;
            }
            if start.elapsed() > Duration::from_secs(600) {
                anyhow::bail!("jobs were not dispatched within 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let dispatched_s = start.elapsed().as_secs_f64();
        Ok::<_, anyhow::Error>(SubmitFigures {
            accepted_per_s: lat.len() as f64 / accepted_s,
            dispatched_per_s: lat.len() as f64 / dispatched_s,
            p50_ms: super::bench::percentile(&lat, 0.5),
            p99_ms: super::bench::percentile(&lat, 0.99),
            jobs: lat.len(),
            concurrency: a.concurrency,
            reserve: a.reserve,
            null_backend: a.null_backend,
        })
    });
    let figures = figures.context("running the benchmark")?;
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
    if a.json {
        say!("{}", serde_json::to_string(&figures)?);
    } else {
        say!(
            "{} jobs, {} clients{}{}: {:.0} accepted/s, {:.0} dispatched/s, submit p50 {:.2} ms, p99 {:.2} ms",
            figures.jobs,
            figures.concurrency,
            if figures.reserve { ", with reservations" } else { "" },
            if figures.null_backend {
                ", null backend (no processes)"
            } else {
                ""
            },
            figures.accepted_per_s,
            figures.dispatched_per_s,
            figures.p50_ms,
            figures.p99_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}
