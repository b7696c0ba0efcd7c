//! `brokk bench submit --soak`: the broker service kept fed until it has
//! accepted, dispatched and finished a large number of jobs (a million by
//! the issue's measure) on the null backend, sampled at an interval for its
//! resident memory, its database's size and the latency of a job's status
//! read (`brokk status ID`) as the jobs pile up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use brokk_proto::wire::SubmitRequest;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// One sample of the soak run.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the start.
    pub seconds: f64,
    /// Jobs accepted so far.
    pub accepted: usize,
    /// Jobs finished so far.
    pub finished: i64,
    /// The process's resident memory, MiB (the broker and its embedded
    /// sites run in it).
    pub rss_mb: f64,
    /// The broker's database size, bytes.
    pub db_bytes: i64,
    /// Status reads of random stored jobs: median and 99th percentile, ms.
    pub status_p50_ms: f64,
    /// See `status_p50_ms`.
    pub status_p99_ms: f64,
}

/// What the soak run reports.
#[derive(Debug, Serialize)]
pub struct SoakFigures {
    /// Always true: tells a soak report from the short benchmark's.
    pub soak: bool,
    /// `sqlite` or `postgresql`.
    pub database: String,
    /// Seconds an ended job stayed in its site's memory.
    pub min_job_age_s: i64,
    /// Jobs accepted, dispatched and finished.
    pub jobs: usize,
    /// Seconds the run took.
    pub seconds: f64,
    /// Jobs accepted per second over the run.
    pub accepted_per_s: f64,
    /// Resident memory at the first sample after warm-up and at the end, MiB.
    pub rss_after_warmup_mb: f64,
    /// See `rss_after_warmup_mb`.
    pub rss_end_mb: f64,
    /// Least-squares slope of resident memory over jobs accepted after
    /// warm-up (the first fifth of the jobs, and at least twice the sites'
    /// job age, after which ended jobs retire), MiB per 100,000 jobs.
    pub rss_slope_mb_per_100k_jobs: f64,
    /// The database's size at the end over the jobs stored.
    pub db_bytes_per_job: f64,
    /// Status reads with every job stored, at the end: median, ms.
    pub status_p50_ms: f64,
    /// The same, 99th percentile, ms.
    pub status_p99_ms: f64,
    /// Listings of the newest 1,000 jobs (`brokk status`, the API's default
    /// page) with every job stored, at the end: median, ms.
    pub list_p50_ms: f64,
    /// The same, 99th percentile, ms.
    pub list_p99_ms: f64,
    /// The samples.
    pub samples: Vec<Sample>,
}

/// The process's resident memory in MiB.
fn rss_mb() -> f64 {
    let pages: f64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse().ok()))
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// Times a read of each of `paths`, one after another, as the benchmark's
/// user; (p50, p99) in ms.
async fn latency(http: &reqwest::Client, base: &str, paths: impl Iterator<Item = String>) -> (f64, f64) {
    let mut lat = Vec::new();
    for path in paths {
        let t = Instant::now();
        let r = http.get(format!("{base}{path}")).bearer_auth("bench").send().await;
        if let Ok(r) = r {
            // The whole answer, as a client reads it.
            if r.status().is_success() && r.bytes().await.is_ok() {
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    lat.sort_by(f64::total_cmp);
    (
        super::bench::percentile(&lat, 0.5),
        super::bench::percentile(&lat, 0.99),
    )
}

/// Reads the status of `n` random jobs among `ids`; (p50, p99) in ms.
async fn status_latency(http: &reqwest::Client, base: &str, ids: &[String], n: usize, seed: u64) -> (f64, f64) {
    if ids.is_empty() {
        return (0.0, 0.0);
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let paths = (0..n).map(|_| format!("/v1/jobs/{}", ids[rng.gen_range(0..ids.len())]));
    latency(http, base, paths).await
}

/// The benchmarks' job: `/bin/true` in Brokk's JSON.
pub fn trivial_submission() -> SubmitRequest {
    SubmitRequest {
        description: r#"{"executable": "/bin/true", "wall_time": 60}"#.into(),
        format: Some("json".into()),
        ..SubmitRequest::default()
    }
}

/// How many of the broker's jobs are in `state`.
pub fn jobs_in(running: &brokk_server::Running, state: &str) -> i64 {
    let counts = running.service.db.count_by_state();
    counts.iter().find(|(s, _)| s == state).map_or(0, |c| c.1)
}

/// Least-squares slope of `y` over `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

/// Feeds the running broker at `base` with `jobs` jobs from `concurrency`
/// clients, sampling every `every`; `progress` sees each sample.
pub async fn run(
    running: &brokk_server::Running,
    database: &str,
    jobs: usize,
    concurrency: usize,
    every: Duration,
    min_job_age_s: i64,
    progress: impl Fn(&Sample),
) -> Result<SoakFigures> {
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();
    let body = trivial_submission();
    let left = Arc::new(AtomicUsize::new(jobs));
    let accepted = Arc::new(AtomicUsize::new(0));
    // Every 100th accepted job's id, for the status reads.
    let kept: Arc<Mutex<Vec<String>>> = Arc::default();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (http, base, body) = (http.clone(), base.clone(), body.clone());
        let (left, accepted, kept) = (left.clone(), accepted.clone(), kept.clone());
        tasks.push(tokio::spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                // At the per-user limit of unfinished jobs (409) the client
                // waits for the broker to finish some, as a user would.
                let r = loop {
                    let r = http
                        .post(format!("{base}/v1/jobs"))
                        .bearer_auth("bench")
                        .json(&body)
                        .send()
                        .await;
                    match r {
                        Ok(r) if r.status().as_u16() == 409 => tokio::time::sleep(Duration::from_millis(20)).await,
                        r => break r,
                    }
                };
                let Ok(r) = r else { continue };
                if r.status().as_u16() != 202 {
                    continue;
                }
                let n = accepted.fetch_add(1, Ordering::Relaxed);
                if n % 100 == 0 {
                    if let Ok(v) = r.json::<serde_json::Value>().await {
                        if let (Some(id), Ok(mut k)) = (v["id"].as_str(), kept.lock()) {
                            k.push(id.to_string());
                        }
                    }
                }
            }
        }));
    }
    let mut samples = Vec::new();
    let sample = |round: u64| {
        let (running, http, base, kept, accepted) = (&running, &http, &base, &kept, &accepted);
        async move {
            let finished = jobs_in(running, "finished");
            let ids = kept.lock().map(|k| k.clone()).unwrap_or_default();
            let (p50, p99) = status_latency(http, base, &ids, 200, round).await;
            Ok::<_, anyhow::Error>(Sample {
                seconds: start.elapsed().as_secs_f64(),
                accepted: accepted.load(Ordering::Relaxed),
                finished,
                rss_mb: rss_mb(),
                db_bytes: running.service.db.size_bytes().await?,
                status_p50_ms: p50,
                status_p99_ms: p99,
            })
        }
    };
    let mut round = 0;
    loop {
        tokio::time::sleep(every).await;
        round += 1;
        let s = sample(round).await?;
        progress(&s);
        let done = s.accepted >= jobs && s.finished >= s.accepted as i64;
        samples.push(s);
        if done {
            break;
        }
        if tasks.iter().all(|t| t.is_finished()) && samples.len() > 2 {
            let last = &samples[samples.len() - 1];
            let before = &samples[samples.len() - 3];
            if last.finished == before.finished && last.accepted < jobs {
                anyhow::bail!("the broker stopped accepting jobs after {}", last.accepted);
            }
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let last = samples.last().cloned().ok_or_else(|| anyhow::anyhow!("no sample"))?;
    let ids = kept.lock().map(|k| k.clone()).unwrap_or_default();
    let (p50, p99) = status_latency(&http, &base, &ids, 2000, u64::MAX).await;
    // `brokk status` without a job: the newest page.
    let (list_p50, list_p99) = latency(&http, &base, (0..50).map(|_| "/v1/jobs".to_string())).await;
    // Memory fills until the first ended jobs retire from the sites, one
    // job age after they end: warm-up lasts that long twice over, and at
    // least the first fifth of the jobs.
    let warm: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.accepted >= jobs / 5 && s.seconds >= 2.0 * min_job_age_s as f64)
        .collect();
    let points: Vec<(f64, f64)> = warm.iter().map(|s| (s.accepted as f64 / 100_000.0, s.rss_mb)).collect();
    let database = if database.starts_with("postgres") {
        "postgresql"
    } else {
        "sqlite"
    };
    Ok(SoakFigures {
        soak: true,
        database: database.into(),
        min_job_age_s,
        jobs: last.accepted,
        seconds,
        accepted_per_s: last.accepted as f64 / seconds,
        rss_after_warmup_mb: warm.first().map_or(last.rss_mb, |s| s.rss_mb),
        rss_end_mb: last.rss_mb,
        rss_slope_mb_per_100k_jobs: slope(&points),
        db_bytes_per_job: last.db_bytes as f64 / last.accepted.max(1) as f64,
        status_p50_ms: p50,
        status_p99_ms: p99,
        list_p50_ms: list_p50,
        list_p99_ms: list_p99,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_of_a_line_is_its_gradient() {
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]), 2.0);
        assert_eq!(slope(&[(0.0, 4.0), (1.0, 4.0)]), 0.0);
        assert_eq!(slope(&[(1.0, 4.0)]), 0.0);
    }
}
