//! `brokk bench attack`: a hostile user and an ordinary one at once against
//! one broker (a `brokk serve` child with two embedded sites). The ordinary
//! user's status and submit latencies are measured alone first (the
//! baseline) and then while the hostile user attacks; the broker's resident
//! memory before, at its highest during, and after. The attacks are those a
//! shared grid must survive: costly descriptions (20,000 chained HTCondor
//! macros), event streams and header-trickling connections by the
//! thousand, uploads past the quota, reservations of every slot for a week,
//! a 1,000-task workflow under the genetic scheduler, and jobs that fork
//! thousands of processes and leave `setsid` children behind.
//!
//! The figures are ratios against the baseline of the same run. The
//! command fails (exit 1) when the ordinary user was refused or not
//! answered within 10 s, or when an attack got more than its limits allow.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use brokk_model::workflow::{Task, Workflow};
use brokk_model::Job;
use serde::Serialize;
use serde_json::json;

/// Arguments of `brokk bench attack`.
#[derive(clap::Args)]
pub struct AttackArgs {
    /// Seconds of each phase: the ordinary user alone, then under attack.
    #[arg(long, default_value_t = 15.0)]
    seconds: f64,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// What the attacks got, counted by their answers.
#[derive(Default, Serialize)]
struct AttackCounts {
    macro_descriptions_read: u64,
    event_streams_open: u64,
    event_streams_refused: u64,
    trickling_connections: u64,
    trickling_closed_by_broker: u64,
    uploads_stored: u64,
    uploads_refused: u64,
    reservations_granted: u64,
    reservations_refused: u64,
    workflows_admitted: u64,
    workflows_refused: u64,
    /// What the first refused workflow was told.
    workflow_refusal: String,
    fork_jobs: u64,
}

#[derive(Serialize)]
struct Figures {
    seconds: f64,
    status_p50_ms_baseline: f64,
    status_p99_ms_baseline: f64,
    status_p50_ms_attack: f64,
    status_p99_ms_attack: f64,
    submit_p50_ms_baseline: f64,
    submit_p99_ms_baseline: f64,
    submit_p50_ms_attack: f64,
    submit_p99_ms_attack: f64,
    /// Attack p99 over baseline p99.
    status_p99_ratio: f64,
    submit_p99_ratio: f64,
    ordinary_failures: u64,
    rss_mb_before: f64,
    rss_mb_during_max: f64,
    rss_mb_after: f64,
    attacks: AttackCounts,
}

/// The broker as a child process, killed when dropped.
struct Broker {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn rss_mb(&self) -> f64 {
        rss_mb_of(self.child.id())
    }
}

/// Resident memory of process `pid`, MiB; 0 when it cannot be read.
fn rss_mb_of(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn start_broker(dir: &std::path::Path) -> Result<Broker> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    // A small upload quota, so the upload attack reaches it in seconds.
    let text = format!(
        "listen = \"{addr}\"\ndatabase = \"broker.db\"\nstate_dir = \"state\"\n\
         [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-eve\" = \"eve\"\n\
         [limits]\nupload_quota_bytes = 134217728\n\
         [[embedded]]\nname = \"north\"\ncapacity = 8\n[[embedded]]\nname = \"south\"\ncapacity = 4\n"
    );
    let config = dir.join("broker.toml");
    super::write_private(&config, &text)?;
    let log = std::fs::File::create(dir.join("broker.log"))?;
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["serve", "--config"])
        .arg(&config)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting the broker")?;
    let broker = Broker { child, addr };
    let http = reqwest::blocking::Client::new();
    let t = Instant::now();
    while !http
        .get(format!("{}/healthz", broker.url()))
        .send()
        .is_ok_and(|r| r.status().is_success())
    {
        if t.elapsed() > Duration::from_secs(30) {
            bail!(
                "the broker did not answer in 30 s (see {})",
                dir.join("broker.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(broker)
}

/// The ordinary user's latencies of one phase.
#[derive(Default)]
struct Samples {
    status_ms: Vec<f64>,
    submit_ms: Vec<f64>,
    failures: u64,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

/// Ann's week in miniature, for `seconds`: her job's status twenty times a
/// second, a submission four times a second.
fn ordinary(url: &str, seconds: f64, job_id: &str) -> Samples {
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client");
    let mut s = Samples::default();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut k = 0u64;
    while Instant::now() < end {
        let t = Instant::now();
        let ok = http
            .get(format!("{url}/v1/jobs/{job_id}"))
            .bearer_auth("tok-ann")
            .send()
            .is_ok_and(|r| r.status().is_success());
        if ok {
            s.status_ms.push(ms(t));
        } else {
            s.failures += 1;
        }
        if k.is_multiple_of(5) {
            let t = Instant::now();
            let job = json!({ "executable": "/bin/true", "wall_time": 60 });
            let ok = http
                .post(format!("{url}/v1/jobs"))
                .bearer_auth("tok-ann")
                .json(&json!({ "description": job.to_string(), "format": "json" }))
                .send()
                .is_ok_and(|r| r.status().as_u16() == 202);
            if ok {
                s.submit_ms.push(ms(t));
            } else {
                s.failures += 1;
            }
        }
        k += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    s.status_ms.sort_by(f64::total_cmp);
    s.submit_ms.sort_by(f64::total_cmp);
    s
}

/// Counts shared by the attacking threads.
#[derive(Default)]
struct Counters {
    macros: AtomicU64,
    streams_open: AtomicU64,
    streams_refused: AtomicU64,
    trickling: AtomicU64,
    trickling_closed: AtomicU64,
    uploads_stored: AtomicU64,
    uploads_refused: AtomicU64,
    reserved: AtomicU64,
    reserve_refused: AtomicU64,
    admitted: AtomicU64,
    wf_refused: AtomicU64,
    wf_refusal: Mutex<String>,
    fork_jobs: AtomicU64,
}

/// 20,000 chained macros: each reference once the budget allows.
fn macro_chain() -> String {
    let mut chain = String::from("executable = /bin/true\n");
    for i in 0..20_000 {
        chain.push_str(&format!("m{i} = $(m{})\n", i + 1));
    }
    chain.push_str("m20000 = x\nqueue\n");
    chain
}

/// A workflow of `n` independent one-slot tasks of ten minutes each.
fn wide_workflow(n: usize) -> Workflow {
    let tasks = (0..n)
        .map(|k| Task {
            id: format!("t{k}"),
            job: Some(Job {
                executable: Some("/bin/true".into()),
                wall_time: Some(brokk_model::Duration(600)),
                ..Job::default()
            }),
            runtime: brokk_model::Duration(600),
            cores: 1,
            ..Task::default()
        })
        .collect();
    Workflow {
        name: "hoard".into(),
        tasks,
        deadline: Some(brokk_proto::wall_clock() + brokk_model::Duration(7 * 86_400)),
        ..Workflow::default()
    }
}

/// Counts an answer as granted (2xx) or refused (any other status); a
/// request that got no answer counts as neither. Returns a refusal.
fn tally(
    sent: reqwest::Result<reqwest::blocking::Response>,
    granted: &AtomicU64,
    refused: &AtomicU64,
) -> Option<reqwest::blocking::Response> {
    let r = sent.ok()?;
    if r.status().is_success() {
        granted.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    refused.fetch_add(1, Ordering::Relaxed);
    Some(r)
}

/// Every attack, each on its own thread, until `stop`.
fn attack(
    url: &str,
    addr: SocketAddr,
    dir: &std::path::Path,
    stop: &Arc<AtomicBool>,
    c: &Arc<Counters>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    let http = || {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client")
    };
    // Four costly descriptions at a time.
    let chain = Arc::new(macro_chain());
    for _ in 0..4 {
        let (url, stop, c, chain) = (url.to_string(), stop.clone(), c.clone(), chain.clone());
        threads.push(std::thread::spawn(move || {
            let http = http();
            while !stop.load(Ordering::Relaxed) {
                let r = http
                    .post(format!("{url}/v1/jobs"))
                    .bearer_auth("tok-eve")
                    .json(&json!({ "description": chain.as_str(), "format": "condor", "hold": true }))
                    .send();
                if r.is_ok_and(|r| r.status().is_client_error() || r.status().is_success()) {
                    c.macros.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Event streams and header-trickling connections by the thousand,
    // from another address of the host (the hostile client's).
    {
        let (stop, c) = (stop.clone(), c.clone());
        threads.push(std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(connections(addr, stop, c));
        }));
    }
    // Uploads of 16 MiB each, past the quota.
    {
        let (url, stop, c, dir) = (url.to_string(), stop.clone(), c.clone(), dir.to_path_buf());
        threads.push(std::thread::spawn(move || {
            let http = http();
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let path = dir.join("blob");
                let mut blob = vec![0u8; 16 << 20];
                blob[..8].copy_from_slice(&k.to_le_bytes());
                k += 1;
                if std::fs::write(&path, &blob).is_err() {
                    return;
                }
                let Ok((sha, _)) = brokk_site::uploads::digest_file(&path) else {
                    return;
                };
                let sent = http
                    .put(format!("{url}/v1/uploads/{sha}"))
                    .bearer_auth("tok-eve")
                    .body(blob)
                    .send();
                tally(sent, &c.uploads_stored, &c.uploads_refused);
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    // Every slot of both sites for a week, asked again and again.
    {
        let (url, stop, c) = (url.to_string(), stop.clone(), c.clone());
        threads.push(std::thread::spawn(move || {
            let http = http();
            while !stop.load(Ordering::Relaxed) {
                let now = brokk_proto::wall_clock();
                for amount in [8, 4] {
                    let body = json!({
                        "amount": amount, "duration": 7 * 86_400,
                        "earliest": now.to_string(), "latest": (now + brokk_model::Duration(60)).to_string(),
                    });
                    let sent = http
                        .post(format!("{url}/v1/reservations"))
                        .bearer_auth("tok-eve")
                        .json(&body)
                        .send();
                    tally(sent, &c.reserved, &c.reserve_refused);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }));
    }
    // A 1,000-task workflow under the genetic scheduler, again and again.
    {
        let (url, stop, c) = (url.to_string(), stop.clone(), c.clone());
        threads.push(std::thread::spawn(move || {
            let http = http();
            while !stop.load(Ordering::Relaxed) {
                let body = json!({ "workflow": wide_workflow(1000), "scheduler": "genetic" });
                let sent = http
                    .post(format!("{url}/v1/workflows"))
                    .bearer_auth("tok-eve")
                    .json(&body)
                    .send();
                if let Some(r) = tally(sent, &c.admitted, &c.wf_refused) {
                    let why = format!("{}: {}", r.status(), r.text().unwrap_or_default());
                    if let Ok(mut first) = c.wf_refusal.lock() {
                        if first.is_empty() {
                            *first = why.chars().take(300).collect();
                        }
                    }
                }
            }
        }));
    }
    // Jobs that fork thousands of processes and leave setsid children.
    {
        let (url, stop, c) = (url.to_string(), stop.clone(), c.clone());
        threads.push(std::thread::spawn(move || {
            let http = http();
            let script = "i=0; while [ $i -lt 3000 ]; do setsid sleep 300 & i=$((i+1)); done; sleep 5";
            while !stop.load(Ordering::Relaxed) {
                let job = json!({ "executable": "/bin/sh", "arguments": ["-c", script], "wall_time": 20 });
                let r = http
                    .post(format!("{url}/v1/jobs"))
                    .bearer_auth("tok-eve")
                    .json(&json!({ "description": job.to_string(), "format": "json" }))
                    .send();
                if r.is_ok_and(|r| r.status().as_u16() == 202) {
                    c.fork_jobs.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_secs(2));
            }
        }));
    }
    threads
}

/// Opens event streams (a thousand at a time) and header-trickling
/// connections from 127.0.0.2 until `stop`, holding what stays open.
async fn connections(to: SocketAddr, stop: Arc<AtomicBool>, c: Arc<Counters>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let from: IpAddr = [127, 0, 0, 2].into();
    let connect = move || async move {
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind(SocketAddr::new(from, 0)).ok()?;
        socket.connect(to).await.ok()
    };
    let mut held = Vec::new();
    for _ in 0..5 {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let batch: Vec<_> = (0..1000)
            .map(|_| {
                tokio::spawn(async move {
                    let mut s = connect().await?;
                    s.write_all(b"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-eve\r\n\r\n")
                        .await
                        .ok()?;
                    let mut head = [0u8; 12];
                    tokio::time::timeout(Duration::from_secs(10), s.read_exact(&mut head))
                        .await
                        .ok()?
                        .ok()?;
                    Some((head[9..12] == *b"200", s))
                })
            })
            .collect();
        for b in batch {
            match b.await.ok().flatten() {
                Some((true, s)) => {
                    c.streams_open.fetch_add(1, Ordering::Relaxed);
                    held.push(s);
                }
                _ => {
                    c.streams_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
    let mut trickling = Vec::new();
    for _ in 0..2000 {
        if let Some(mut s) = connect().await {
            if s.write_all(b"GET /healthz HTTP/1.1\r\n").await.is_ok() {
                trickling.push(s);
            }
        }
    }
    c.trickling.store(trickling.len() as u64, Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) && !trickling.is_empty() {
        let mut still = Vec::new();
        for mut s in trickling {
            if s.write_all(b"X-Slow: 1\r\n").await.is_ok() {
                still.push(s);
            } else {
                c.trickling_closed.fetch_add(1, Ordering::Relaxed);
            }
        }
        trickling = still;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
}

fn percentile(v: &[f64], p: f64) -> f64 {
    super::bench::percentile(v, p)
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// Runs the benchmark.
pub fn run(a: AttackArgs) -> Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("brokk-bench-attack-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let broker = start_broker(&dir)?;
    let url = broker.url();
    // Ann's job whose status she reads.
    let http = reqwest::blocking::Client::new();
    let job = json!({ "executable": "/bin/true", "wall_time": 60 });
    let first: serde_json::Value = http
        .post(format!("{url}/v1/jobs"))
        .bearer_auth("tok-ann")
        .json(&json!({ "description": job.to_string(), "format": "json" }))
        .send()?
        .error_for_status()?
        .json()?;
    let job_id = first["id"].as_str().context("the first job's id")?.to_string();
    let rss_before = broker.rss_mb();
    let baseline = ordinary(&url, a.seconds, &job_id);

    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let during_max = Arc::new(Mutex::new(rss_before));
    let attackers = attack(&url, broker.addr, &dir, &stop, &counters);
    let sampler = {
        let (stop, during_max, pid) = (stop.clone(), during_max.clone(), broker.child.id());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mb = rss_mb_of(pid);
                if let Ok(mut m) = during_max.lock() {
                    *m = m.max(mb);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    // The attacks take a moment to open their connections: ann is measured
    // once they are under way.
    std::thread::sleep(Duration::from_secs(2));
    let under = ordinary(&url, a.seconds, &job_id);
    stop.store(true, Ordering::Relaxed);
    for t in attackers {
        let _ = t.join();
    }
    let _ = sampler.join();
    // Closed connections and ended requests give their memory back within
    // seconds; the allocator keeps some of it for the next ones.
    std::thread::sleep(Duration::from_secs(5));
    let rss_after = broker.rss_mb();
    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);

    let n = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let c = &counters;
    let figures = Figures {
        seconds: a.seconds,
        status_p50_ms_baseline: percentile(&baseline.status_ms, 0.5),
        status_p99_ms_baseline: percentile(&baseline.status_ms, 0.99),
        status_p50_ms_attack: percentile(&under.status_ms, 0.5),
        status_p99_ms_attack: percentile(&under.status_ms, 0.99),
        submit_p50_ms_baseline: percentile(&baseline.submit_ms, 0.5),
        submit_p99_ms_baseline: percentile(&baseline.submit_ms, 0.99),
        submit_p50_ms_attack: percentile(&under.submit_ms, 0.5),
        submit_p99_ms_attack: percentile(&under.submit_ms, 0.99),
        status_p99_ratio: ratio(
            percentile(&under.status_ms, 0.99),
            percentile(&baseline.status_ms, 0.99),
        ),
        submit_p99_ratio: ratio(
            percentile(&under.submit_ms, 0.99),
            percentile(&baseline.submit_ms, 0.99),
        ),
        ordinary_failures: baseline.failures + under.failures,
        rss_mb_before: rss_before,
        rss_mb_during_max: during_max.lock().map(|m| *m).unwrap_or(0.0),
        rss_mb_after: rss_after,
        attacks: AttackCounts {
            macro_descriptions_read: n(&c.macros),
            event_streams_open: n(&c.streams_open),
            event_streams_refused: n(&c.streams_refused),
            trickling_connections: n(&c.trickling),
            trickling_closed_by_broker: n(&c.trickling_closed),
            uploads_stored: n(&c.uploads_stored),
            uploads_refused: n(&c.uploads_refused),
            reservations_granted: n(&c.reserved),
            reservations_refused: n(&c.reserve_refused),
            workflows_admitted: n(&c.admitted),
            workflows_refused: n(&c.wf_refused),
            workflow_refusal: c.wf_refusal.lock().map(|s| s.clone()).unwrap_or_default(),
            fork_jobs: n(&c.fork_jobs),
        },
    };
    if a.json {
        say!("{}", serde_json::to_string(&figures)?);
    } else {
        let f = &figures;
        say!(
            "ordinary user, alone then under attack ({:.0} s each):\n  status p50 {:.1} -> {:.1} ms, p99 {:.1} -> {:.1} ms ({:.2}x)\n  submit p50 {:.1} -> {:.1} ms, p99 {:.1} -> {:.1} ms ({:.2}x)\n  failures: {}\nbroker memory: {:.1} MiB before, {:.1} MiB at most during, {:.1} MiB after\nattacks: {}",
            f.seconds,
            f.status_p50_ms_baseline,
            f.status_p50_ms_attack,
            f.status_p99_ms_baseline,
            f.status_p99_ms_attack,
            f.status_p99_ratio,
            f.submit_p50_ms_baseline,
            f.submit_p50_ms_attack,
            f.submit_p99_ms_baseline,
            f.submit_p99_ms_attack,
            f.submit_p99_ratio,
            f.ordinary_failures,
            f.rss_mb_before,
            f.rss_mb_during_max,
            f.rss_mb_after,
            serde_json::to_string(&f.attacks)?
        );
    }
    // What the limits promise, checked: the figures above are for reading.
    let a = &figures.attacks;
    let mut broken = Vec::new();
    if figures.ordinary_failures > 0 {
        broken.push(format!("the ordinary user failed {} times", figures.ordinary_failures));
    }
    if a.event_streams_open > 32 {
        broken.push(format!(
            "{} event streams open at once (limit 32)",
            a.event_streams_open
        ));
    }
    if a.uploads_stored > 8 {
        broken.push(format!("{} uploads of 16 MiB stored (quota 128 MiB)", a.uploads_stored));
    }
    if a.reservations_granted > 2 {
        broken.push(format!(
            "{} week-long reservations of whole sites granted",
            a.reservations_granted
        ));
    }
    if !broken.is_empty() {
        eprintln!("brokk bench attack: {}", broken.join("; "));
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
