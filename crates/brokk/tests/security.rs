//! A hostile user against a broker with embedded sites shared by two users:
//! each finding of the security review, as a test that failed before its fix.
//! `brokk serve` runs as a real process; requests are raw HTTP so that what a
//! client library would refuse to send still reaches the service.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;

struct Broker {
    server: common::Server,
    http: reqwest::blocking::Client,
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("security", name)
}

impl Broker {
    fn start(dir: &Path) -> Broker {
        Broker::start_with(dir, "")
    }

    /// A broker whose configuration has `extra` before its sites.
    fn start_with(dir: &Path, extra: &str) -> Broker {
        let config = dir.join("broker.toml");
        std::fs::write(
            &config,
            format!(
                "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
                 {extra}\n[[embedded]]\nname = \"only\"\ncapacity = 4\n"
            ),
        )
        .unwrap();
        Broker {
            server: common::serve(dir),
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
        }
    }

    /// `GET` a raw path (sent as written, escapes included) as `token`.
    fn get(&self, token: &str, path: &str) -> reqwest::blocking::Response {
        self.http
            .get(format!("{}{path}", self.server.url))
            .bearer_auth(token)
            .send()
            .unwrap()
    }

    fn submit(&self, token: &str, body: Value) -> reqwest::blocking::Response {
        self.http
            .post(format!("{}/v1/jobs", self.server.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .unwrap()
    }

    /// Submits a JSON job and waits for it to end; returns its view.
    fn run(&self, token: &str, job: Value) -> Value {
        let r = self.submit(token, json!({ "description": job.to_string(), "format": "json" }));
        assert_eq!(r.status(), 202, "{}", r.text().unwrap());
        let id = r.json::<Value>().unwrap()["id"].as_str().unwrap().to_string();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v: Value = self.get(token, &format!("/v1/jobs/{id}")).json().unwrap();
            if ["finished", "failed", "cancelled"].contains(&v["state"].as_str().unwrap_or("")) {
                return v;
            }
            assert!(Instant::now() < deadline, "job never ended: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn alive(&self) -> bool {
        self.http
            .get(format!("{}/healthz", self.server.url))
            .send()
            .is_ok_and(|r| r.status().is_success())
    }
}

fn shell(script: &str) -> Value {
    json!({ "executable": "/bin/sh", "arguments": ["-c", script], "wall_time": 60 })
}

#[test]
fn no_user_reaches_another_users_files_through_the_proxy() {
    let b = Broker::start(&scratch("proxy"));
    let ann = b.run("tok-ann", shell("echo ann-secret > secret.txt"));
    assert_eq!(ann["state"], "finished", "{ann}");
    let ann_site_job = ann["site_job"].as_str().unwrap().to_string();
    // Bob's job plants links to Ann's sandbox and out of its own.
    let bob = b.run(
        "tok-bob",
        shell(&format!(
            "ln -s ../job-{ann_site_job}/secret.txt link; ln -s .. up; ln -s /etc/passwd pw; mkdir d; echo mine > d/f.txt"
        )),
    );
    assert_eq!(bob["state"], "finished", "{bob}");
    let bob_id = bob["id"].as_str().unwrap();
    // The owner reads a file by a relative path.
    let r = b.get("tok-bob", &format!("/v1/jobs/{bob_id}/files/d/f.txt"));
    assert_eq!((r.status().as_u16(), r.text().unwrap()), (200, "mine\n".to_string()));
    for attack in [
        format!("..%2F..%2F{ann_site_job}%2Ffiles%2Fsecret.txt"),
        format!("..%2F..%2Fjob-{ann_site_job}%2Fsecret.txt"),
        "..%2F..%2Fchanges%3Fafter%3D0".to_string(),
        "..%2F..%2Fchanges".to_string(),
        "%2Fetc%2Fpasswd".to_string(),
        "link".to_string(),
        "up/secret.txt".to_string(),
        "pw".to_string(),
        "d".to_string(),
    ] {
        let r = b.get("tok-bob", &format!("/v1/jobs/{bob_id}/files/{attack}"));
        let status = r.status().as_u16();
        let body = r.text().unwrap();
        assert!(matches!(status, 400 | 404), "{attack}: {status} {body}");
        assert!(
            !body.contains("ann-secret") && !body.contains("root:"),
            "{attack}: {body}"
        );
        assert!(!body.contains("\"jobs\""), "{attack} listed the site's jobs: {body}");
    }
    // Ann's file is still hers, through her own job only.
    let ann_id = ann["id"].as_str().unwrap();
    let r = b.get("tok-ann", &format!("/v1/jobs/{ann_id}/files/secret.txt"));
    assert_eq!(r.text().unwrap(), "ann-secret\n");
    let r = b.get("tok-bob", &format!("/v1/jobs/{ann_id}/files/secret.txt"));
    assert_eq!(r.status(), 403);
}

#[test]
fn a_large_file_streams_through_the_broker_in_bounded_memory() {
    let b = Broker::start(&scratch("stream"));
    let big = 1u64 << 30;
    let v = b.run("tok-ann", shell(&format!("truncate -s {big} big; echo tail >> big")));
    assert_eq!(v["state"], "finished", "{v}");
    let id = v["id"].as_str().unwrap();
    let before = peak_rss_kib(b.server.pid());
    let mut r = b.get("tok-ann", &format!("/v1/jobs/{id}/files/big"));
    assert_eq!(r.status(), 200);
    let mut buf = vec![0u8; 1 << 20];
    let (mut total, mut last) = (0u64, Vec::new());
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        total += n as u64;
        last = buf[..n].to_vec();
    }
    assert_eq!(total, big + 5);
    assert!(last.ends_with(b"tail\n"));
    let grew = peak_rss_kib(b.server.pid()).saturating_sub(before);
    assert!(
        grew < 64 * 1024,
        "the broker's peak memory grew by {grew} KiB for a 1 GiB file"
    );
    // A range is served as one.
    let r = b
        .http
        .get(format!("{}/v1/jobs/{id}/files/big", b.server.url))
        .bearer_auth("tok-ann")
        .header("Range", "bytes=-5")
        .send()
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(
        r.headers()["content-range"].to_str().unwrap(),
        format!("bytes {big}-{}/{}", big + 4, big + 5)
    );
    assert_eq!(r.text().unwrap(), "tail\n");
}

/// The process's peak resident set, KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_reservation_named_in_a_description_is_checked_like_any_other() {
    let b = Broker::start(&scratch("reservation"));
    let soon = (brokk_proto::wall_clock() + brokk_model::Duration(30)).to_string();
    let r: Value = b
        .http
        .post(format!("{}/v1/reservations", b.server.url))
        .bearer_auth("tok-ann")
        .json(&json!({ "amount": 2, "duration": 600, "earliest": soon, "latest": soon }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let rid = r["id"].as_str().expect("a reservation");
    let job = json!({ "executable": "/bin/true", "wall_time": 30, "reservation": rid });
    let o = b.submit("tok-bob", json!({ "description": job.to_string(), "format": "json" }));
    assert_eq!(o.status(), 403, "{}", o.text().unwrap());
    let script = format!("#!/bin/sh\n#SBATCH --reservation={rid}\n#SBATCH --time=1\ntrue\n");
    let o = b.submit("tok-bob", json!({ "description": script, "format": "slurm" }));
    assert_eq!(o.status(), 403, "{}", o.text().unwrap());
    // Bob's jobs list holds nothing of it.
    let mine: Value = b.get("tok-bob", "/v1/jobs").json().unwrap();
    assert_eq!(mine.as_array().unwrap().len(), 0, "{mine}");
    // Ann's own description may name it.
    let o = b.submit("tok-ann", json!({ "description": job.to_string(), "format": "json" }));
    assert_eq!(o.status(), 202, "{}", o.text().unwrap());
}

#[test]
fn an_upload_named_in_a_description_is_one_of_its_owners_own() {
    let dir = scratch("upload-by-digest");
    let b = Broker::start(&dir);
    // Ann uploads a file, and a job of hers takes it to the site.
    let secret = b"ann's data\n";
    std::fs::write(dir.join("secret"), secret).unwrap();
    let (sha, _) = brokk_site::uploads::digest_file(&dir.join("secret")).unwrap();
    let put = b
        .http
        .put(format!("{}/v1/uploads/{sha}", b.server.url))
        .bearer_auth("tok-ann")
        .body(secret.to_vec())
        .send()
        .unwrap();
    assert_eq!(put.status(), 201);
    let mut job = shell("cat data.txt");
    job["input_files"] = json!([{ "name": "data.txt" }]);
    let r = b.submit(
        "tok-ann",
        json!({ "description": job.to_string(), "format": "json", "uploads": { "data.txt": sha } }),
    );
    assert_eq!(r.status(), 202, "{}", r.text().unwrap());
    // Bob names her digest as his input's source: refused, at any time.
    let mut theft = shell("cat data.txt");
    theft["input_files"] = json!([{ "name": "data.txt", "source": format!("upload:{sha}") }]);
    let o = b.submit("tok-bob", json!({ "description": theft.to_string(), "format": "json" }));
    assert_eq!(o.status(), 400, "{}", o.text().unwrap());
    assert!(o.text().unwrap().contains("not one of your uploads"));
    // Ann may name her own.
    let o = b.submit("tok-ann", json!({ "description": theft.to_string(), "format": "json" }));
    assert_eq!(o.status(), 202, "{}", o.text().unwrap());
}

/// Deeply nested descriptions, one per language, each far deeper than any
/// real one.
fn deep_inputs() -> Vec<(&'static str, String)> {
    let n = 5_000;
    vec![
        (
            "xrsl",
            format!("&{}(executable=/bin/true){}", "(|".repeat(n), ")".repeat(n)),
        ),
        (
            "rsl",
            format!("&{}(executable=/bin/true){}", "(|".repeat(n), ")".repeat(n)),
        ),
        (
            "jdl",
            format!(
                "[ Executable = \"/bin/true\"; Requirements = {}true{}; ]",
                "(".repeat(n * 20),
                ")".repeat(n * 20)
            ),
        ),
        (
            "jdl",
            format!(
                "[ Executable = \"/bin/true\"; Requirements = true{}; ]",
                " && true".repeat(n * 20)
            ),
        ),
        (
            "classad",
            format!("{}Executable = \"/bin/true\"{}", "[ A = ".repeat(n), "]".repeat(n)),
        ),
        (
            "condor",
            format!(
                "executable = /bin/true\nrequirements = {}\nqueue\n",
                "!".repeat(n * 20) + "true"
            ),
        ),
        (
            "condor",
            format!(
                "executable = /bin/true\nrequirements = 1{}\nqueue\n",
                " + 1".repeat(n * 20)
            ),
        ),
        (
            "jsdl",
            format!(
                "<JobDefinition xmlns=\"http://schemas.ggf.org/jsdl/2005/11/jsdl\">{}{}</JobDefinition>",
                "<x>".repeat(n * 20),
                "</x>".repeat(n * 20)
            ),
        ),
    ]
}

/// Whether a message points at a place, as `LINE:COLUMN:` does.
fn has_position(message: &str) -> bool {
    message.split(' ').any(|w| {
        let mut parts = w.trim_end_matches(':').split(':');
        matches!((parts.next(), parts.next(), parts.next()), (Some(l), Some(c), None)
            if !l.is_empty() && !c.is_empty() && l.chars().chain(c.chars()).all(|ch| ch.is_ascii_digit()))
    })
}

#[test]
fn deeply_nested_descriptions_are_refused_and_the_broker_lives() {
    let b = Broker::start(&scratch("deep"));
    for (format, text) in deep_inputs() {
        let format = if format == "classad" { "jdl" } else { format };
        let r = b.submit("tok-ann", json!({ "description": text, "format": format }));
        let status = r.status().as_u16();
        let body = r.text().unwrap_or_default();
        assert!(b.alive(), "{format} took the broker down");
        assert_eq!(status, 400, "{format}: {body}");
        assert!(has_position(&body), "{format}: the error has no position: {body}");
    }
    // Ann's jobs list holds nothing, and the service still works.
    let v = b.run("tok-ann", shell("true"));
    assert_eq!(v["state"], "finished");
}

/// The ids of a listing's page and the path its `Link` header names next.
fn page(r: reqwest::blocking::Response) -> (Vec<String>, Option<String>) {
    assert_eq!(r.status(), 200);
    let next = r.headers().get("link").map(|l| {
        let l = l.to_str().unwrap();
        assert!(l.ends_with(r#">; rel="next""#), "{l}");
        l[1..l.find('>').unwrap()].to_string()
    });
    let ids = r
        .json::<Vec<Value>>()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    (ids, next)
}

#[test]
fn a_long_listing_comes_in_pages_of_the_callers_own_jobs() {
    let b = Broker::start(&scratch("pages"));
    let held = json!({ "description": shell("true").to_string(), "format": "json", "hold": true });
    for _ in 0..5 {
        assert_eq!(b.submit("tok-ann", held.clone()).status(), 202);
    }
    let bobs = b.submit("tok-bob", held.clone()).json::<Value>().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (all, none) = page(b.get("tok-ann", "/v1/jobs"));
    assert_eq!((all.len(), none), (5, None), "every job fits the default page");
    // Followed link by link, the pages are the whole listing, in its order.
    let (mut seen, mut next) = page(b.get("tok-ann", "/v1/jobs?limit=2"));
    let mut pages = 1;
    while let Some(path) = next {
        let (ids, more) = page(b.get("tok-ann", &path));
        seen.extend(ids);
        (next, pages) = (more, pages + 1);
    }
    assert_eq!((seen, pages), (all.clone(), 3));
    let (two, _) = page(b.get("tok-ann", &format!("/v1/jobs?before={}&limit=2", all[2])));
    assert_eq!(two, all[3..5]);
    // Another user's job is no place to start from, and says nothing of it.
    let r = b.get("tok-ann", &format!("/v1/jobs?before={bobs}"));
    assert_eq!(r.status(), 400);
    assert!(r.text().unwrap().contains("not one of your jobs"));
    assert_eq!(page(b.get("tok-bob", "/v1/jobs")).0, vec![bobs]);
    for bad in ["limit=0", "limit=10001", "since=yesterday", "state=sleeping"] {
        assert_eq!(b.get("tok-ann", &format!("/v1/jobs?{bad}")).status(), 400, "{bad}");
    }
    assert!(page(b.get("tok-ann", "/v1/jobs?since=2999-01-01T00:00:00Z"))
        .0
        .is_empty());
    assert_eq!(page(b.get("tok-ann", "/v1/jobs?since=0&state=held")).0, all);
    // The command line shows the newest and says that more match.
    let out = common::brokk(&b.server.url, "tok-ann", &["status", "--limit", "3", "--format", "id"]);
    let shown: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(shown, all[..3]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("more match"));
    let out = common::brokk(
        &b.server.url,
        "tok-ann",
        &["status", "--limit", "0", "--format", "id", "--state", "held,running"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        6,
        "a header and every job"
    );
}

#[test]
fn per_user_limits_and_clear_refusals() {
    let b = Broker::start_with(
        &scratch("limits"),
        "[limits]\nqueued_jobs = 3\njobs_per_submission = 2\nreservation_seconds = 3600\nreserved_slot_hours = 2\n",
    );
    let refused = |r: reqwest::blocking::Response, status: u16, words: &str| {
        let (got, body) = (r.status().as_u16(), r.text().unwrap());
        assert_eq!(got, status, "{body}");
        assert!(body.contains(words), "{body}");
    };
    let condor = |n: u32| json!({ "description": format!("executable = /bin/sleep\narguments = 30\nqueue {n}\n"), "format": "condor" });
    refused(b.submit("tok-ann", condor(3)), 400, "at most 2 at once");
    assert_eq!(b.submit("tok-ann", condor(2)).status(), 202);
    assert_eq!(b.submit("tok-ann", condor(1)).status(), 202);
    refused(b.submit("tok-ann", condor(1)), 409, "at most 3 per user");
    // Bob is not held back by Ann's queue.
    assert_eq!(b.submit("tok-bob", condor(1)).status(), 202);
    // Impossible jobs are refused at once, in a sentence.
    for (job, words) in [
        (
            json!({ "executable": "/bin/true", "wall_time": 0 }),
            "wall time must be positive",
        ),
        (json!({ "executable": "/bin/true", "cpus": 0 }), "zero processors"),
        (json!({ "arguments": ["x"] }), "nothing to run"),
        (
            json!({ "executable": "/bin/true", "deadline": "2001-01-01T00:00:00Z" }),
            "has already passed",
        ),
    ] {
        refused(
            b.submit("tok-bob", json!({ "description": job.to_string(), "format": "json" })),
            400,
            words,
        );
    }
    // Reservations: bounded length, no window in the past, bounded slot-hours.
    let reserve = |amount: u32, duration: i64, earliest: String, latest: String| {
        b.http
            .post(format!("{}/v1/reservations", b.server.url))
            .bearer_auth("tok-bob")
            .json(&json!({ "amount": amount, "duration": duration, "earliest": earliest, "latest": latest }))
            .send()
            .unwrap()
    };
    let at = |s: i64| (brokk_proto::wall_clock() + brokk_model::Duration(s)).to_string();
    refused(reserve(1, 7200, at(60), at(86_400)), 400, "at most 3600 s");
    let past = "2001-01-01T00:00:00Z".to_string();
    refused(reserve(1, 60, past.clone(), past), 400, "has passed");
    let r = reserve(2, 3600, at(60), at(86_400));
    assert_eq!(r.status(), 201, "{}", r.text().unwrap());
    refused(reserve(1, 600, at(60), at(86_400)), 409, "the limit is 2 per user");
}

#[test]
fn a_coallocation_is_all_or_nothing_across_a_broker_kill() {
    let dir = scratch("coalloc-kill");
    let ran = dir.join("ran.txt");
    let part = |request: usize, cpus: u32| {
        json!({
            "description": json!({
                "executable": "/bin/sh",
                "arguments": ["-c", format!("echo {request} >> {}", ran.display())],
                "cpus": cpus, "wall_time": 10,
            }).to_string(),
            "format": "json",
        })
    };
    let mut requests = 0;
    for round in 0..6u64 {
        let b = Broker::start(&dir);
        let url = b.server.url.clone();
        // A request in flight when the broker is killed, a few ms in, but
        // for the last round.
        let body = json!({
            "jobs": [part(round as usize, 2), part(round as usize, 2)],
            "earliest": brokk_proto::wall_clock().to_string(),
            "latest": (brokk_proto::wall_clock() + brokk_model::Duration(600)).to_string(),
            "delta": 5,
        });
        let sender = std::thread::spawn(move || {
            reqwest::blocking::Client::new()
                .post(format!("{url}/v1/coallocations"))
                .bearer_auth("tok-ann")
                .json(&body)
                .send()
                .map(|r| r.status().as_u16())
        });
        if round == 5 {
            // The last kill comes after the answer, so that at least one
            // request reached the broker however slow this machine is.
            let status = sender.join().unwrap().unwrap();
            assert!((200..300).contains(&status), "the last request got {status}");
            drop(b);
        } else {
            std::thread::sleep(Duration::from_millis(round * 4));
            drop(b);
            let _ = sender.join();
        }
        requests += 1;
    }
    // Back up: every job ends, none is left reserving or running.
    let b = Broker::start(&dir);
    // Holds of the requests a kill cut short lapse only after their 300 s,
    // so a completed request may be planned well after the others' slots.
    let deadline = Instant::now() + Duration::from_secs(240);
    let jobs = loop {
        let all: Value = b.get("tok-ann", "/v1/jobs").json().unwrap();
        let all = all.as_array().unwrap().clone();
        if all
            .iter()
            .all(|j| ["finished", "failed", "cancelled"].contains(&j["state"].as_str().unwrap()))
        {
            break all;
        }
        assert!(Instant::now() < deadline, "jobs never ended: {all:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for j in &jobs {
        let history = j["history"].as_array().map(Vec::len);
        let v: Value = b
            .get("tok-ann", &format!("/v1/jobs/{}", j["id"].as_str().unwrap()))
            .json()
            .unwrap();
        let dispatches: Vec<&str> = v["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| h["state"] == "dispatched")
            .filter_map(|h| h["detail"].as_str())
            .collect();
        // Only the co-allocation itself ever sends a part to a site.
        assert!(dispatches.iter().all(|d| d.contains("co-allocated")), "{v} {history:?}");
        assert!(dispatches.len() <= 1, "{v}");
    }
    // Each request ran completely or not at all.
    let text = std::fs::read_to_string(&ran).unwrap_or_default();
    let states: Vec<&str> = jobs.iter().map(|j| j["state"].as_str().unwrap()).collect();
    eprintln!("after the kills: {states:?}; ran:\n{text}");
    assert!(!jobs.is_empty(), "no request reached the broker before its kill");
    for r in 0..requests {
        let n = text.lines().filter(|l| *l == r.to_string()).count();
        assert!(n == 0 || n == 2, "request {r} ran {n} of its 2 parts:\n{text}");
    }
}

/// What an ordinary user does while another attacks: `/healthz`, `status`
/// and a submission as ann, each answered as it should be; how long the
/// three took.
fn ordinary_user(quick: &reqwest::blocking::Client, url: &str) -> Duration {
    let t = Instant::now();
    assert!(quick
        .get(format!("{url}/healthz"))
        .send()
        .unwrap()
        .status()
        .is_success());
    let status = quick
        .get(format!("{url}/v1/jobs"))
        .bearer_auth("tok-ann")
        .send()
        .unwrap();
    assert_eq!(status.status(), 200);
    let submitted = quick
        .post(format!("{url}/v1/jobs"))
        .bearer_auth("tok-ann")
        .json(&json!({ "description": shell("true").to_string(), "format": "json", "hold": true }))
        .send()
        .unwrap();
    assert_eq!(submitted.status(), 202);
    t.elapsed()
}

#[test]
fn a_costly_description_does_not_stall_other_users() {
    let broker = Broker::start(&scratch("macros"));
    // 20,000 chained macros, about 360 KB: 25 s of the broker's CPU each
    // once, read on its async workers.
    let mut chain = String::from("executable = /bin/true\n");
    for i in 0..20_000 {
        chain.push_str(&format!("m{i} = $(m{})\n", i + 1));
    }
    chain.push_str("m20000 = x\nqueue\n");
    let url = broker.server.url.clone();
    let hostile: Vec<_> = (0..4)
        .map(|_| {
            let (url, chain) = (url.clone(), chain.clone());
            std::thread::spawn(move || {
                reqwest::blocking::Client::new()
                    .post(format!("{url}/v1/jobs"))
                    .bearer_auth("tok-bob")
                    .json(&json!({ "description": chain, "format": "condor", "hold": true }))
                    .timeout(Duration::from_secs(120))
                    .send()
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    // Meanwhile another user is answered at once.
    let quick = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    for round in 0..5 {
        let took = ordinary_user(&quick, &url);
        assert!(
            took < Duration::from_secs(1),
            "round {round}: /healthz, status and submit took {took:?}"
        );
    }
    for h in hostile {
        assert_eq!(h.join().unwrap().unwrap(), 202, "the chained description is still read");
    }
}

/// How a hostile connection fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fate {
    /// Answered with this status, and still open.
    Status(u16),
    /// Closed by the broker before any answer.
    Closed,
}

/// Opens a connection from `from` to `to` and sends `head`; returns the
/// status it was answered with (the stream kept open) or that it was closed.
async fn attempt(
    from: std::net::IpAddr,
    to: std::net::SocketAddr,
    head: String,
) -> (Fate, Option<tokio::net::TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(from, 0)).unwrap();
    let Ok(mut s) = socket.connect(to).await else {
        return (Fate::Closed, None);
    };
    if s.write_all(head.as_bytes()).await.is_err() {
        return (Fate::Closed, None);
    }
    let mut buf = [0u8; 12];
    match tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut buf)).await {
        Ok(Ok(_)) => {
            let code = std::str::from_utf8(&buf[9..12])
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (Fate::Status(code), Some(s))
        }
        Ok(Err(_)) => (Fate::Closed, None),
        Err(_) => panic!("the broker neither answered nor closed a connection in 20 s"),
    }
}

#[test]
fn a_flood_of_connections_from_one_client_leaves_room_for_others() {
    use std::collections::HashMap;
    let broker = Broker::start(&scratch("flood"));
    let pid = broker.server.pid();
    let to: std::net::SocketAddr = broker.server.url.trim_start_matches("http://").parse().unwrap();
    let hostile: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let before = status_kib(pid, "VmRSS:");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // 25,000 event streams of bob's, a thousand at a time, each held open
    // while it lasts.
    let streams = rt.block_on(async {
        let mut held = Vec::new();
        let mut fates: HashMap<Fate, usize> = HashMap::new();
        for _ in 0..25 {
            let batch: Vec<_> = (0..1000)
                .map(|_| {
                    tokio::spawn(attempt(
                        hostile,
                        to,
                        "GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-bob\r\n\r\n".to_string(),
                    ))
                })
                .collect();
            for b in batch {
                let (fate, stream) = b.await.unwrap();
                *fates.entry(fate).or_default() += 1;
                if fate == Fate::Status(200) {
                    held.extend(stream);
                }
            }
        }
        (held, fates)
    });
    let (held, fates) = streams;
    // At most 32 streams a user; the rest refused by name or closed.
    assert_eq!(fates.get(&Fate::Status(200)), Some(&32), "{fates:?}");
    assert!(fates.get(&Fate::Status(429)).is_some_and(|n| *n > 0), "{fates:?}");
    // 5,000 connections that send their headers a line at a time, from the
    // same address, and ann served meanwhile from another.
    let (opened, all_open) = std::sync::mpsc::channel();
    let trickle = rt.spawn(async move {
        use tokio::io::AsyncWriteExt;
        let mut open = Vec::new();
        for _ in 0..5000 {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(std::net::SocketAddr::new(hostile, 0)).unwrap();
            if let Ok(mut s) = socket.connect(to).await {
                if s.write_all(b"GET /healthz HTTP/1.1\r\n").await.is_ok() {
                    open.push(s);
                }
            }
        }
        let _ = opened.send(open.len());
        // A header line a second to each: none may keep its connection
        // past the header timeout.
        let t = Instant::now();
        while !open.is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{} trickling connections still open",
                open.len()
            );
            let mut still = Vec::new();
            for mut s in open {
                if s.write_all(b"X-Slow: 1\r\n").await.is_ok() {
                    still.push(s);
                }
            }
            open = still;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        t.elapsed()
    });
    let quick = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let url = &broker.server.url;
    // Once they are all open (opening them takes this test's own CPU), ann
    // is served while they trickle.
    all_open.recv_timeout(Duration::from_secs(60)).unwrap();
    for round in 0..10 {
        let took = ordinary_user(&quick, url);
        assert!(took < Duration::from_secs(1), "round {round}: {took:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
    let during = status_kib(pid, "VmRSS:");
    let closed_in = rt.block_on(trickle).unwrap();
    drop(held);
    std::thread::sleep(Duration::from_secs(2));
    let after = status_kib(pid, "VmRSS:");
    eprintln!(
        "broker memory: {before} KiB before, {during} KiB during, {after} KiB after; trickling closed in {closed_in:?}"
    );
    assert!(
        after < before + 64 * 1024,
        "memory {before} KiB before, {after} KiB after the streams closed"
    );
}

#[test]
fn uploads_are_held_to_a_quota_and_deleted_once_no_job_needs_them() {
    let dir = scratch("quota");
    let broker = Broker::start_with(
        &dir,
        "[limits]\nupload_quota_bytes = 200000\nupload_quota_files = 2\nupload_retention_s = 2\n",
    );
    let put = |content: &[u8]| {
        let file = dir.join("upload");
        std::fs::write(&file, content).unwrap();
        let (sha, _) = brokk_site::uploads::digest_file(&file).unwrap();
        let r = broker
            .http
            .put(format!("{}/v1/uploads/{sha}", broker.server.url))
            .bearer_auth("tok-bob")
            .body(content.to_vec())
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let usage = || -> Value { broker.get("tok-bob", "/v1/me").json::<Value>().unwrap()["uploads"].clone() };
    // Bytes: one file of more than the quota is refused, and leaves nothing.
    let (status, said) = put(&vec![7u8; 300_000]);
    assert_eq!(status, 413, "{said}");
    assert!(said.contains("the quota is 200000 bytes"), "{said}");
    assert_eq!(usage()["files"], 0);
    // Files: two fit, a third does not.
    assert_eq!(put(b"one").0, 201);
    assert_eq!(put(b"two").0, 201);
    let (status, said) = put(b"three");
    assert_eq!(status, 413, "{said}");
    assert!(said.contains("2 files per user"), "{said}");
    let u = usage();
    assert_eq!(
        (u["files"].as_u64(), u["quota_files"].as_u64()),
        (Some(2), Some(2)),
        "{u}"
    );
    // Nothing needs them: gone after their retention, and room again.
    let t = Instant::now();
    while usage()["files"] != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "uploads kept past their retention: {}",
            usage()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(put(b"three").0, 201);
}
