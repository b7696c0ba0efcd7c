//! The broker service end to end: `brokk serve` with embedded sites runs as a
//! real process, and the user's commands (`brokk submit`, `status`, `cancel`,
//! `output`, `resources`) talk to it.

use brokk_proto::wire::BrokerState;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

mod common;

/// A `brokk serve` process, killed (SIGKILL) when dropped.
struct Service {
    server: common::Server,
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("service", name)
}

impl Service {
    fn start(dir: &Path) -> Service {
        Service::start_with(dir, "broker.db")
    }

    /// Starts a service on `database` (a SQLite file or a PostgreSQL URL).
    fn start_with(dir: &Path, database: &str) -> Service {
        let config = dir.join("broker.toml");
        if !config.exists() {
            std::fs::write(
                &config,
                format!("database = \"{database}\"\n") + "state_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
                 [[embedded]]\nname = \"small\"\ncapacity = 2\nbenchmarks = [{ name = \"specint2006\", value = 10.0 }]\n\
                 [[embedded]]\nname = \"large\"\ncapacity = 8\nbenchmarks = [{ name = \"specint2006\", value = 40.0 }]\n",
            )
            .unwrap();
        }
        Service {
            server: common::serve(dir),
        }
    }

    /// Runs a user command as `token`.
    fn brokk(&self, token: &str, args: &[&str]) -> Output {
        common::brokk(&self.server.url, token, args)
    }

    fn json(&self, token: &str, args: &[&str]) -> serde_json::Value {
        common::json(&self.server.url, token, args)
    }

    /// Kills the service (SIGKILL).
    fn kill(self) {
        drop(self);
    }
}

/// Writes `dir/broker.toml` for ann and bob with embedded sites of these names and
/// sizes, and `extra` lines before the sites.
fn broker_config(dir: &Path, extra: &str, sites: &[(&str, u32)]) {
    let mut text = format!("database = \"broker.db\"\nstate_dir = \"sites\"\n{extra}[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n");
    for (name, capacity) in sites {
        text += &format!("[[embedded]]\nname = \"{name}\"\ncapacity = {capacity}\n");
    }
    std::fs::write(dir.join("broker.toml"), text).unwrap();
}

/// Writes `text` to `dir/name` and returns the file's path, as a command
/// line names it.
fn written(dir: &Path, name: &str, text: &str) -> String {
    let f = dir.join(name);
    std::fs::write(&f, text).unwrap();
    f.to_str().unwrap().to_string()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_language_runs_through_the_broker() {
    let svc = Service::start(&scratch("languages"));
    for (file, expect) in [
        ("hello.jsdl", "Hello from JSDL\n"),
        ("hello.xrsl", "Hello from xRSL on Linux\n"),
        ("hello.rsl", "Hello from GRAM RSL\n"),
        ("hello.jdl", "Hello from gLite JDL\n"),
        ("hello.sub", "Hello from HTCondor\n"),
        ("hello.sh", "Hello from a Slurm batch script\n"),
        ("hello.json", "Hello from Brokk's JSON\n"),
    ] {
        let path = format!("examples/quickstart/{file}");
        let done = svc.json("tok-ann", &["submit", &path, "--watch", "--json"]);
        assert_eq!(done["state"], "finished", "{file}: {done}");
        assert_eq!(done["exit_code"], 0, "{file}");
        assert!(done["site"].is_string());
        let history: Vec<&str> = done["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["state"].as_str().unwrap())
            .collect();
        assert_eq!(history.first(), Some(&"accepted"), "{file}");
        assert_eq!(history.last(), Some(&"finished"), "{file}");
        let out = svc.brokk("tok-ann", &["output", done["id"].as_str().unwrap()]);
        assert_eq!(text(&out).0, expect, "{file}");
    }
    // --reserve runs the job in an advance reservation at the chosen site.
    let done = svc.json(
        "tok-ann",
        &[
            "submit",
            "examples/quickstart/reserved.json",
            "--reserve",
            "--watch",
            "--json",
        ],
    );
    assert_eq!(done["state"], "finished", "{done}");
    let dispatched = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["state"] == "dispatched")
        .unwrap();
    assert!(
        dispatched["detail"].as_str().unwrap().contains("in reservation"),
        "{done}"
    );
    // The open endpoints: the API's description and Prometheus metrics.
    let http = reqwest::blocking::Client::new();
    let doc: serde_json::Value = http
        .get(format!("{}/openapi.json", svc.server.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(doc["paths"]["/v1/coallocations"]["post"].is_object());
    // The dashboard's icon, which every browser asks for.
    let icon = http.get(format!("{}/favicon.ico", svc.server.url)).send().unwrap();
    assert_eq!(icon.status(), 200);
    assert_eq!(icon.headers()["content-type"], "image/svg+xml");
    let metrics = http
        .get(format!("{}/metrics", svc.server.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for line in [
        "brokk_jobs{state=\"finished\"} 8",
        "brokk_jobs_accepted_total 8",
        // Every job the core took has ended and left it.
        "brokk_core_jobs 0",
        "brokk_core_jobs_waiting 0",
        // Each sent once, on a decision's prediction that held.
        "brokk_site_requests_total{kind=\"submit\"} 8",
        "brokk_start_violations_total 0",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    // Each job decided at least once; again only when a site did not
    // answer in time (a loaded machine), never sent twice (above).
    let decisions: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("brokk_decisions_total "))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(decisions >= 8, "{metrics}");
    assert!(
        metrics.contains("brokk_info_cache_hits_total")
            && metrics.contains("brokk_submit_duration_seconds_bucket{le=\"+Inf\"} 8")
    );
    // Resources list both sites.
    let res = svc.json("tok-ann", &["resources", "--json"]);
    let names: Vec<&str> = res
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["small", "large"]);
}

#[test]
fn warnings_errors_and_other_users() {
    let dir = scratch("users");
    let svc = Service::start(&dir);
    // A translation warning is shown to the user and kept with the job.
    let desc = dir.join("w.xrsl");
    std::fs::write(&desc, "&(executable = /bin/echo)(gridtime = 10)(stdout = o.txt)\n").unwrap();
    let o = svc.brokk("tok-ann", &["submit", desc.to_str().unwrap()]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("1:27") && err.contains("gridtime"), "{err}");
    let id = out.trim().to_string();
    let job = svc.json("tok-ann", &["status", &id, "--json"]);
    assert!(job["warnings"][0].as_str().unwrap().contains("gridtime"));
    // A malformed description is refused with its line and column.
    let o = svc.brokk(
        "tok-ann",
        &[
            "submit",
            "crates/brokk-jdl/tests/corpus/xrsl/invalid/01-count-not-number.xrsl",
        ],
    );
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("2:11") && err.contains("count"), "{err}");
    // Bob sees none of Ann's jobs and cannot touch them.
    let mine = svc.json("tok-ann", &["status", "--json"]);
    assert_eq!(mine.as_array().unwrap().len(), 1);
    let his = svc.json("tok-bob", &["status", "--json"]);
    assert_eq!(his.as_array().unwrap().len(), 0);
    for args in [
        vec!["status", id.as_str()],
        vec!["cancel", id.as_str()],
        vec!["output", id.as_str(), "o.txt"],
    ] {
        let o = svc.brokk("tok-bob", &args);
        assert!(!o.status.success());
        assert!(
            text(&o).1.contains("belongs to someone else"),
            "{args:?}: {}",
            text(&o).1
        );
    }
    // No token, no service.
    let o = svc.brokk("", &["status"]);
    assert!(text(&o).1.contains("bearer token"));
    // Ann can cancel her own long job.
    let long = dir.join("long.json");
    std::fs::write(
        &long,
        r#"{"executable": "/bin/sleep", "arguments": ["30"], "wall_time": 60}"#,
    )
    .unwrap();
    let id = text(&svc.brokk("tok-ann", &["submit", long.to_str().unwrap()]))
        .0
        .trim()
        .to_string();
    let t = Instant::now();
    while svc.json("tok-ann", &["status", &id, "--json"])["state"] != "running" && t.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let c = svc.json("tok-ann", &["cancel", &id, "--json"]);
    assert_eq!(c["state"], "cancelled");
}

#[test]
fn a_killed_service_finishes_every_accepted_job_exactly_once() {
    crash_and_recover(&scratch("crash"), "broker.db");
}

/// The same on PostgreSQL, when the test script provides one
/// (`BROKK_TEST_POSTGRES`, a fresh database).
#[test]
#[ignore = "needs PostgreSQL; scripts/test.sh starts one and runs this"]
fn a_killed_service_on_postgresql_finishes_every_accepted_job_exactly_once() {
    let url = std::env::var("BROKK_TEST_POSTGRES").expect("BROKK_TEST_POSTGRES: scripts/test.sh starts PostgreSQL");
    crash_and_recover(&scratch("crash-pg"), &url);
}

fn crash_and_recover(dir: &Path, database: &str) {
    let log = dir.join("ran.log");
    let svc = Service::start_with(dir, database);
    let client = reqwest::blocking::Client::new();
    let mut accepted = Vec::new();
    let t = Instant::now();
    // Stream jobs in; each appends its number to a shared log when it runs.
    for n in 0..40 {
        let desc = format!(
            r#"{{"executable": "/bin/sh", "arguments": ["-c", "echo {n} >> {}"], "wall_time": 60}}"#,
            log.display()
        );
        let r = client
            .post(format!("{}/v1/jobs", svc.server.url))
            .bearer_auth("tok-ann")
            .json(&serde_json::json!({ "description": desc, "format": "json" }))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        let id = r.json::<serde_json::Value>().unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        accepted.push((n, id));
        if n == 25 {
            // Mid-stream, with some jobs dispatched and some not.
            break;
        }
    }
    svc.kill();
    let svc = Service::start_with(dir, database);
    for (_, id) in &accepted {
        let t = Instant::now();
        loop {
            let j = svc.json("tok-ann", &["status", id, "--json"]);
            let state = j["state"].as_str().unwrap().to_string();
            if ["finished", "failed", "cancelled"].contains(&state.as_str()) {
                let ends = j["history"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|h| ["finished", "failed", "cancelled"].contains(&h["state"].as_str().unwrap()))
                    .count();
                assert_eq!(ends, 1, "job {id} ended {ends} times: {j}");
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "job {id} stuck in {state}: {j}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // No job ran twice.
    let ran = std::fs::read_to_string(&log).unwrap_or_default();
    for (n, _) in &accepted {
        let times = ran.lines().filter(|l| l.trim() == n.to_string()).count();
        assert!(times <= 1, "job {n} ran {times} times");
    }
    assert!(t.elapsed() < Duration::from_secs(120));
}

#[test]
fn a_coallocation_starts_its_jobs_within_delta() {
    let dir = scratch("coalloc");
    let svc = Service::start(&dir);
    let mut files = Vec::new();
    // 2 + 6 slots: the small site (2) cannot hold the big part, so the parts
    // land on different sites and must still start together.
    for (k, n) in [2, 6, 2].iter().enumerate() {
        let f = dir.join(format!("part{k}.json"));
        std::fs::write(
            &f,
            format!(r#"{{"executable": "/bin/sh", "arguments": ["-c", "date +%s"], "cpus": {n}, "wall_time": 60, "stdout": "t.out"}}"#),
        )
        .unwrap();
        files.push(f.to_str().unwrap().to_string());
    }
    let mut args = vec!["coalloc", "--delta", "5", "--json"];
    args.extend(files.iter().map(String::as_str));
    let done = svc.json("tok-ann", &args);
    let ids = common::strings(&done["ids"]);
    assert_eq!(ids.len(), 3);
    let mut starts = Vec::new();
    for id in &ids {
        let t = Instant::now();
        let j = loop {
            let j = svc.json("tok-ann", &["status", id, "--json"]);
            if j["state"] == "finished" || t.elapsed() > Duration::from_secs(30) {
                break j;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(j["state"], "finished", "{j}");
        // The site's own recorded start.
        let started = j["started"].as_str().unwrap().to_string();
        starts.push(brokk_model::Time::parse(&started).unwrap().0);
    }
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(spread <= 5, "starts {starts:?}");
    let sites = common::strings(&done["sites"]);
    assert_eq!(sites[1], "large");
    // A Slurm heterogeneous job submitted alone is the same co-allocation:
    // its components start together, each at its site, each told which it is.
    let het = dir.join("het.sh");
    std::fs::write(
        &het,
        "#!/bin/sh\n#SBATCH --ntasks=2 --time=1\n#SBATCH hetjob\n#SBATCH --ntasks=6\necho \"$BROKK_HET_GROUP of $SLURM_HET_SIZE\"\n",
    )
    .unwrap();
    let accepted = svc.json("tok-ann", &["submit", het.to_str().unwrap(), "--json"]);
    let ids = common::strings(&accepted["ids"]);
    assert_eq!(ids.len(), 2, "{accepted}");
    let mut starts = Vec::new();
    for (k, id) in ids.iter().enumerate() {
        let j = common::wait_ended(&svc.server.url, "tok-ann", id, Duration::from_secs(30));
        assert_eq!(j["state"], "finished", "{j}");
        // The second component inherits the first's time limit.
        assert_eq!(j["wall_time"], 60, "{j}");
        starts.push(brokk_model::Time::parse(j["started"].as_str().unwrap()).unwrap().0);
        let out = svc.brokk("tok-ann", &["output", id]);
        assert_eq!(text(&out).0, format!("{k} of 2\n"));
    }
    assert!(starts[1].abs_diff(starts[0]) <= 5, "starts {starts:?}");
    // A part no site can hold: refused with each site's reason, as a usage
    // error, and nothing stored, reserved or running.
    let before = svc.json("tok-ann", &["status", "--json"]).as_array().unwrap().len();
    let big = dir.join("big.json");
    std::fs::write(&big, r#"{"executable": "/bin/true", "cpus": 100}"#).unwrap();
    let o = svc.brokk("tok-ann", &["coalloc", big.to_str().unwrap(), files[0].as_str()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o)
            .1
            .contains("part 0: no site can run it: small: it asks for 100 processors"),
        "{}",
        text(&o).1
    );
    let after = svc.json("tok-ann", &["status", "--json"]).as_array().unwrap().len();
    assert_eq!(before, after, "a refused co-allocation left jobs behind");
    // Parts that each fit a site but can never run together (only one site
    // holds eight): refused at once as a conflict (exit status 6), saying
    // why and the sites' sizes, whatever the window.
    let wide = dir.join("wide.json");
    std::fs::write(&wide, r#"{"executable": "/bin/true", "cpus": 8, "wall_time": 60}"#).unwrap();
    let w = wide.to_str().unwrap();
    let o = svc.brokk("tok-ann", &["coalloc", w, w, "--window", "0,30d", "--delta", "0"]);
    assert_eq!(o.status.code(), Some(6), "{} {}", text(&o).0, text(&o).1);
    assert!(
        text(&o)
            .1
            .contains("the parts (8, 8 processors) run at the same time and no choice of sites holds them all"),
        "{}",
        text(&o).1
    );
}

#[test]
fn reservations_are_made_and_claimed_on_behalf_of_their_owner() {
    let dir = scratch("reserve");
    let svc = Service::start(&dir);
    let soon = (brokk_proto::wall_clock() + brokk_model::Duration(3)).to_string();
    let r = svc.json(
        "tok-ann",
        &[
            "reserve",
            "--amount",
            "2",
            "--duration",
            "60",
            "--earliest",
            &soon,
            "--latest",
            &soon,
            "--json",
        ],
    );
    let (rid, start) = (
        r["id"].as_str().unwrap().to_string(),
        r["start"].as_str().unwrap().to_string(),
    );
    assert_eq!(start, soon);
    // Bob can neither use nor cancel Ann's reservation.
    let job = dir.join("job.json");
    std::fs::write(&job, r#"{"executable": "/bin/true", "cpus": 2, "wall_time": 30}"#).unwrap();
    let o = svc.brokk("tok-bob", &["submit", job.to_str().unwrap(), "--reservation", &rid]);
    assert!(text(&o).1.contains("belongs to someone else"), "{}", text(&o).1);
    // Listed for its owner only.
    let listed = svc.json("tok-ann", &["reserve", "--list", "--json"]);
    assert!(
        listed.as_array().unwrap().iter().any(|r| r["id"] == rid.as_str()),
        "{listed}"
    );
    assert_eq!(
        svc.json("tok-bob", &["reserve", "--list", "--json"]),
        serde_json::json!([])
    );
    let o = svc.brokk("tok-bob", &["reserve", "--cancel", &rid]);
    assert!(text(&o).1.contains("belongs to someone else"), "{}", text(&o).1);
    // Ann's job runs in it: at its site, from its start.
    let done = svc.json(
        "tok-ann",
        &[
            "submit",
            job.to_str().unwrap(),
            "--reservation",
            &rid,
            "--watch",
            "--json",
        ],
    );
    assert_eq!(done["state"], "finished", "{done}");
    assert_eq!(done["site"], r["site"]);
    let started = brokk_model::Time::parse(done["started"].as_str().unwrap()).unwrap().0;
    let at = brokk_model::Time::parse(&soon).unwrap().0;
    assert!((0..=1).contains(&(started - at)), "started {started}, reserved {at}");
    let c = svc.json("tok-ann", &["reserve", "--cancel", &rid, "--json"]);
    assert_eq!(c["state"], "cancelled");
    // Listed by state: cancelled now, no longer among the committed.
    let ids = |states: &str| -> Vec<String> {
        let v = svc.json("tok-ann", &["reserve", "--list", "--state", states, "--json"]);
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(ids("cancelled").contains(&rid));
    assert!(!ids("committed,held,ended").contains(&rid));
    let listed = text(&svc.brokk("tok-ann", &["reserve", "--list", "--state", "cancelled"])).0;
    assert!(listed.contains(&format!("{rid} cancelled at ")), "{listed}");
    let bad = svc.brokk("tok-ann", &["reserve", "--list", "--state", "lapsed"]);
    assert_eq!(bad.status.code(), Some(2));
    // A request larger than a user's share of any site is refused with the limit.
    let o = svc.brokk("tok-ann", &["reserve", "--amount", "100", "--duration", "60"]);
    assert!(
        text(&o).1.contains("at most 4 of the largest, of 8 slots") && text(&o).1.contains("reserved_share = 0.5"),
        "{}",
        text(&o).1
    );
    let far = (chrono::Utc::now() + chrono::Duration::days(400))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let o = svc.brokk(
        "tok-ann",
        &["reserve", "--amount", "1", "--duration", "60", "--earliest", &far],
    );
    assert!(
        text(&o)
            .1
            .contains("large: the reservation would end after the planning horizon"),
        "{}",
        text(&o).1
    );
}

#[test]
fn reservations_are_shared_by_share_not_by_first_come() {
    let dir = scratch("share");
    broker_config(&dir, "[limits]\nreservations = 3\n", &[("a", 4), ("b", 4)]);
    let svc = Service::start(&dir);
    let reserve = |amount: &str, days: &str| {
        svc.brokk(
            "tok-ann",
            &[
                "reserve",
                "--amount",
                amount,
                "--duration",
                &(86_400 * days.parse::<i64>().unwrap()).to_string(),
                "--json",
            ],
        )
    };
    // Half of each site at once, for a week: a and b each give two slots.
    let first: serde_json::Value = serde_json::from_slice(&reserve("2", "7").stdout).unwrap();
    let second: serde_json::Value = serde_json::from_slice(&reserve("2", "7").stdout).unwrap();
    assert_ne!(first["site"], second["site"], "{first} {second}");
    // A third week-long pair would make more than half of a site ann's.
    let (_, said) = text(&reserve("1", "7"));
    assert!(said.contains("reserved_share = 0.5"), "{said}");
    // A workflow is planned within the share too: with ann's half of both
    // sites held for a week, one due in two hours finds no room, and says why.
    let dag = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/workflows/pipeline/pipeline.dag"
    );
    let (_, said) = text(&svc.brokk("tok-ann", &["workflow", "submit", dag, "--deadline", "2h"]));
    assert!(
        said.contains("within your share of the sites") && said.contains("reserved_share = 0.5"),
        "{said}"
    );
    // A task wider than half of any site is refused by the share, named as such.
    std::fs::write(
        dir.join("wide.sub"),
        "executable = /bin/true\nrequest_cpus = 3\nallowed_job_duration = 60\nqueue\n",
    )
    .unwrap();
    std::fs::write(dir.join("wide.dag"), "JOB wide wide.sub\n").unwrap();
    let wide = dir.join("wide.dag");
    let (_, said) = text(&svc.brokk("tok-bob", &["workflow", "submit", wide.to_str().unwrap()]));
    assert!(
        said.contains("this would hold 3 of the 4 slots") && said.contains("at most 2 there"),
        "{said}"
    );
    // Bob's job still starts now, not in a week.
    let job = dir.join("job.json");
    std::fs::write(&job, r#"{"executable": "/bin/true", "cpus": 2, "wall_time": 30}"#).unwrap();
    let done = svc.json("tok-bob", &["submit", job.to_str().unwrap(), "--watch", "--json"]);
    assert_eq!(done["state"], "finished", "{done}");
    // At most three reservations that have not ended.
    let short = svc.json(
        "tok-ann",
        &[
            "reserve",
            "--amount",
            "1",
            "--duration",
            "60",
            "--earliest",
            &(brokk_proto::wall_clock() + brokk_model::Duration(8 * 86_400)).to_string(),
            "--json",
        ],
    );
    assert!(short["id"].is_string(), "{short}");
    let (_, said) = text(&reserve("1", "1"));
    assert!(said.contains("at most 3 ([limits] reservations)"), "{said}");
    // A workflow counts as one more.
    let (_, said) = text(&svc.brokk("tok-ann", &["workflow", "submit", dag, "--deadline", "2h"]));
    assert!(said.contains("the workflow: you have 3 reservations"), "{said}");
}

#[test]
fn a_waiting_job_moves_to_a_site_that_frees_up() {
    let dir = scratch("adapt");
    broker_config(
        &dir,
        "adapt_every = 1\nadapt_margin = 10\n[limits]\nreserved_share = 1.0\n",
        &[("a", 2), ("b", 2)],
    );
    let svc = Service::start(&dir);
    // Site a is held by a reservation for two minutes; site b runs a long job.
    let r = svc.json("tok-ann", &["reserve", "--amount", "2", "--duration", "120", "--json"]);
    assert_eq!(r["site"], "a");
    let long = dir.join("long.json");
    std::fs::write(
        &long,
        r#"{"executable": "/bin/sleep", "arguments": ["20"], "cpus": 2, "wall_time": 60}"#,
    )
    .unwrap();
    let l = svc.json("tok-ann", &["submit", long.to_str().unwrap(), "--json"]);
    // The adaptive job queues at b, behind the long one (a is blocked longer).
    let job = dir.join("job.json");
    std::fs::write(&job, r#"{"executable": "/bin/true", "cpus": 2, "wall_time": 30}"#).unwrap();
    let j = svc.json("tok-ann", &["submit", job.to_str().unwrap(), "--adapt", "--json"]);
    let id = j["id"].as_str().unwrap().to_string();
    let t = Instant::now();
    while svc.json("tok-ann", &["status", &id, "--json"])["state"] != "dispatched"
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(svc.json("tok-ann", &["status", &id, "--json"])["site"], "b");
    // Freeing a: the next adaptation round moves the job there and it runs at once.
    svc.json("tok-ann", &["reserve", "--cancel", r["id"].as_str().unwrap(), "--json"]);
    let t = Instant::now();
    let done = loop {
        let v = svc.json("tok-ann", &["status", &id, "--json"]);
        if v["state"] == "finished" || t.elapsed() > Duration::from_secs(15) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (done["state"].as_str(), done["site"].as_str()),
        (Some("finished"), Some("a")),
        "{done}"
    );
    let moved = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["detail"].as_str().is_some_and(|d| d.contains("moved from b to a")));
    assert!(moved, "{done}");
    // It finished well before the long job would have let it start at b.
    let long_id = l["id"].as_str().unwrap().to_string();
    assert_ne!(
        svc.json("tok-ann", &["status", &long_id, "--json"])["state"],
        "accepted"
    );
    assert!(t.elapsed() < Duration::from_secs(15));
}

#[test]
fn exit_codes_tell_what_went_wrong() {
    let dir = scratch("exit-codes");
    let svc = Service::start(&dir);
    let code = |token: &str, args: &[&str]| svc.brokk(token, args).status.code();
    // 1: the job ran and failed.
    let failing = dir.join("failing.json");
    std::fs::write(
        &failing,
        r#"{"executable": "/bin/sh", "arguments": ["-c", "exit 3"], "wall_time": 30}"#,
    )
    .unwrap();
    let done = svc.brokk("tok-ann", &["submit", failing.to_str().unwrap(), "--watch", "--json"]);
    assert_eq!(done.status.code(), Some(1));
    // Shown as failed, with its code, in JSON and in the table.
    let job = common::printed(&done.stdout);
    assert_eq!(
        (job["state"].as_str(), job["exit_code"].as_i64()),
        (Some("failed"), Some(3)),
        "{job}"
    );
    assert_eq!(job["reason"], "exited with code 3");
    let table = text(&svc.brokk("tok-ann", &["status", "--format", "id,state,exit"])).0;
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with(job["id"].as_str().unwrap()))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(row[1..3], ["failed", "3"], "{table}");
    // 2: a description that cannot be read.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"executable": 7}"#).unwrap();
    assert_eq!(code("tok-ann", &["submit", bad.to_str().unwrap()]), Some(2));
    // 3: no such job.
    assert_eq!(code("tok-ann", &["status", "0123456789abcdef"]), Some(3));
    // 4: not a known identity.
    assert_eq!(code("tok-nobody", &["status"]), Some(4));
    // 6: refused, as no site can hold it.
    assert_eq!(
        code("tok-ann", &["reserve", "--amount", "100", "--duration", "60"]),
        Some(6)
    );
    // A job wider than every site is refused at submission, as sbatch
    // refuses what no partition can hold, with each site's reason by name
    // (the default service's two sites); nothing is stored.
    let wide = dir.join("wide.json");
    std::fs::write(&wide, r#"{"executable": "/bin/true", "cpus": 100, "wall_time": 30}"#).unwrap();
    let count = || svc.json("tok-ann", &["status", "--json"]).as_array().unwrap().len();
    let before = count();
    let refused = svc.brokk("tok-ann", &["submit", wide.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused).1);
    assert!(
        text(&refused).1.contains(
            "no site can run it: small: it asks for 100 processors, the site has at most 2; \
             large: it asks for 100 processors, the site has at most 8"
        ),
        "{}",
        text(&refused).1
    );
    assert_eq!(count(), before);
    drop(svc);
    // 5: the service cannot be reached.
    let gone = common::brokk("http://127.0.0.1:9", "tok-ann", &["status"]);
    assert_eq!(gone.status.code(), Some(5));
}

#[test]
fn a_script_job_runs_when_the_service_was_started_with_a_relative_config() {
    // As README starts it: `brokk serve --config broker.toml` from the
    // configuration's directory; the sites' sandboxes must still be found
    // after the runner changes into one.
    let dir = scratch("relative-config");
    broker_config(&dir, "", &[("only", 2)]);
    let server = common::spawn_listening(
        std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["serve", "--config", "broker.toml"])
            .current_dir(&dir)
            .stderr(std::process::Stdio::null()),
    );
    let done = common::json(
        &server.url,
        "tok-ann",
        &["submit", "examples/quickstart/hello.sh", "--watch", "--json"],
    );
    assert_eq!(
        (done["state"].as_str(), done["exit_code"].as_i64()),
        (Some("finished"), Some(0)),
        "{done}"
    );
    let out = common::brokk(
        &server.url,
        "tok-ann",
        &["output", done["id"].as_str().unwrap(), "slurm.out"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hello from a Slurm batch script\n"
    );
}

#[test]
fn a_burst_spreads_over_idle_sites() {
    // Four 8-CPU jobs at once over two idle 8-CPU sites: two each, each
    // predicted where it will really start, not four queued at one site.
    let dir = scratch("burst");
    broker_config(&dir, "", &[("a", 8), ("b", 8)]);
    let svc = Service::start(&dir);
    let job = dir.join("wide.json");
    std::fs::write(
        &job,
        r#"{"executable": "/bin/sleep", "arguments": ["3"], "cpus": 8, "wall_time": 30}"#,
    )
    .unwrap();
    // All four accepted at the same moment, from four clients.
    let ids: Vec<String> = std::thread::scope(|scope| {
        let submits: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| svc.json("tok-ann", &["submit", job.to_str().unwrap(), "--json"])))
            .collect();
        submits
            .into_iter()
            .map(|h| h.join().unwrap()["id"].as_str().unwrap().to_string())
            .collect()
    });
    let t = Instant::now();
    let jobs: Vec<serde_json::Value> = loop {
        let all: Vec<serde_json::Value> = ids
            .iter()
            .map(|id| svc.json("tok-ann", &["status", id, "--json"]))
            .collect();
        if all.iter().all(|j| j["site"].is_string()) || t.elapsed() > Duration::from_secs(20) {
            break all;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let on = |site: &str| jobs.iter().filter(|j| j["site"] == site).count();
    assert_eq!((on("a"), on("b")), (2, 2), "{jobs:?}");
    // Two start at once and two a job's wall time later: what was predicted.
    let mut waits: Vec<i64> = jobs.iter().map(|j| j["predicted_tts"].as_i64().unwrap()).collect();
    waits.sort_unstable();
    assert!(waits[0] <= 1 && waits[1] <= 1, "{waits:?}");
    assert!(waits[2] >= 25 && waits[3] >= 25, "{waits:?}");
    // Filters: by site, and a state that does not exist is a usage error.
    let at_a = svc.json("tok-ann", &["status", "--site", "a", "--json"]);
    assert_eq!(at_a.as_array().unwrap().len(), 2, "{at_a}");
    let bad = svc.brokk("tok-ann", &["status", "--state", "finshed"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).1.contains("one of accepted"), "{}", text(&bad).1);
}

#[test]
fn a_wide_job_goes_where_its_own_shape_starts_first() {
    // Two 8-CPU sites, alpha twice as fast. A 2-CPU job takes alpha for up
    // to two minutes; then an 8-CPU job that runs 10 s at alpha and 20 s at
    // local: alpha's one-slot estimate is "at once", but eight slots are
    // not free there for two minutes, while local has all eight now. It
    // goes to local, predicted to start at once.
    let dir = scratch("wide-shape");
    std::fs::write(
        dir.join("broker.toml"),
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"alpha\"\ncapacity = 8\nbenchmarks = [{ name = \"specint2006\", value = 40.0 }]\n\
         [[embedded]]\nname = \"local\"\ncapacity = 8\nbenchmarks = [{ name = \"specint2006\", value = 20.0 }]\n",
    )
    .unwrap();
    let svc = Service::start(&dir);
    let prefs = dir.join("prefs.json");
    std::fs::write(
        &prefs,
        r#"{"benchmarks": [{"name": "specint2006", "result": 40, "time": 10}]}"#,
    )
    .unwrap();
    let submit = |name: &str, description: &str, prefs: &[&str]| {
        let f = written(&dir, name, description);
        let args = [&["submit", f.as_str(), "--json"], prefs].concat();
        svc.json("tok-ann", &args)["id"].as_str().unwrap().to_string()
    };
    // Without a benchmark both sites look alike: the first listed.
    let narrow = submit(
        "narrow.json",
        r#"{"executable": "/bin/sleep", "arguments": ["60"], "cpus": 2, "wall_time": 120}"#,
        &[],
    );
    common::wait_for_state(&svc.server.url, "tok-ann", &narrow, "running", Duration::from_secs(20));
    let placed = svc.json("tok-ann", &["status", &narrow, "--json"]);
    assert_eq!(placed["site"], "alpha", "{placed}");
    // What alpha publishes: six free now, eight only once the narrow job ends.
    let info = svc.json("tok-ann", &["resources", "--json"]);
    let alpha = info.as_array().unwrap().iter().find(|s| s["name"] == "alpha").unwrap();
    assert_eq!(alpha["free_slots"], 6, "{alpha}");
    let wide = submit(
        "wide.json",
        r#"{"executable": "/bin/true", "cpus": 8, "wall_time": 60}"#,
        &["--prefs", prefs.to_str().unwrap()],
    );
    let t = Instant::now();
    let job = loop {
        let j = svc.json("tok-ann", &["status", &wide, "--json"]);
        if j["site"].is_string() || t.elapsed() > Duration::from_secs(20) {
            break j;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(job["site"], "local", "{job}");
    assert!(job["predicted_tts"].as_i64().unwrap() <= 1, "{job}");
    svc.brokk("tok-ann", &["cancel", &narrow]);
}

#[test]
fn holds_a_stopped_broker_had_for_jobs_not_sent_are_given_back_when_it_starts_again() {
    // One 4-CPU site, held whole for an hour by what a stopped broker had
    // written down as a hold for a job it never sent (made here as a
    // reservation of ann's, then written down as such a hold).
    let dir = scratch("holds-given-back");
    broker_config(&dir, "[limits]\nreserved_share = 1.0\n", &[("a", 4)]);
    let job = dir.join("whole.json");
    std::fs::write(&job, r#"{"executable": "/bin/true", "cpus": 4, "wall_time": 600}"#).unwrap();
    let held = {
        let svc = Service::start(&dir);
        // The window runs a minute from now: its latest start must still be
        // ahead when the broker reads it, a second boundary later or not.
        let now = brokk_proto::wall_clock();
        let (earliest, latest) = (now.to_string(), (now + brokk_model::Duration(60)).to_string());
        let r = svc.json(
            "tok-ann",
            &[
                "reserve",
                "--amount",
                "4",
                "--duration",
                "3600",
                "--earliest",
                &earliest,
                "--latest",
                &latest,
                "--json",
            ],
        );
        r["site_reservation"].as_u64().unwrap()
    };
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let db = brokk_server::db::Db::open(dir.join("broker.db").to_str().unwrap())
            .await
            .unwrap();
        db.add_hold("a", held, "never-sent", "ann").await.unwrap();
    });
    // Started again: the hold is given back first, so a job as wide as the
    // site starts at once instead of an hour later.
    let svc = Service::start(&dir);
    let sent = svc.json("tok-ann", &["submit", job.to_str().unwrap(), "--json"]);
    let id = sent["id"].as_str().unwrap().to_string();
    let t = Instant::now();
    let placed = loop {
        let v = svc.json("tok-ann", &["status", &id, "--json"]);
        if v["predicted_tts"].is_i64() {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never dispatched: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(placed["predicted_tts"].as_i64().unwrap() <= 1, "{placed}");
}

#[test]
fn reservations_made_for_a_job_end_with_it() {
    // Two 4-CPU sites. Whatever the broker reserved for a job (`--reserve`,
    // the parts of a co-allocation) must not hold slots after the job has
    // ended or been cancelled: a full-width job submitted afterwards starts
    // at once.
    let dir = scratch("reservations-end");
    broker_config(&dir, "", &[("a", 4), ("b", 4)]);
    let svc = Service::start(&dir);
    let write = |name: &str, body: &str| written(&dir, name, body);
    let short = write(
        "short.json",
        r#"{"executable": "/bin/true", "cpus": 4, "wall_time": 600}"#,
    );
    let long = write(
        "long.json",
        r#"{"executable": "/bin/sleep", "arguments": ["60"], "cpus": 4, "wall_time": 600}"#,
    );
    let starts_at_once = || {
        let j = svc.json("tok-ann", &["submit", &short, "--watch", "--json"]);
        assert_eq!(j["state"], "finished", "{j}");
        assert!(j["predicted_tts"].as_i64().unwrap() <= 1, "{j}");
    };
    // A reservation-backed job that ends long before its wall time.
    let done = svc.json("tok-ann", &["submit", &short, "--reserve", "--watch", "--json"]);
    assert_eq!(done["state"], "finished", "{done}");
    for _ in 0..2 {
        starts_at_once();
    }
    // A co-allocation over both sites, cancelled while it runs.
    let co = svc.json("tok-ann", &["coalloc", &long, &long, "--delta", "5", "--json"]);
    for id in common::strings(&co["ids"]) {
        let t = Instant::now();
        while svc.json("tok-ann", &["status", &id, "--json"])["state"] != "running" {
            assert!(t.elapsed() < Duration::from_secs(30), "{id} never ran");
            std::thread::sleep(Duration::from_millis(100));
        }
        svc.json("tok-ann", &["cancel", &id, "--json"]);
    }
    for _ in 0..2 {
        starts_at_once();
    }
}

/// Writes `dir/broker.toml` for ann with an embedded site `up` (2 slots)
/// and a remote site `ghost` that nothing answers at; returns its path.
fn with_a_ghost(dir: &Path) -> PathBuf {
    let config = dir.join("broker.toml");
    common::write_private(
        &config,
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"up\"\ncapacity = 2\n\
         [[sites]]\nname = \"ghost\"\nurl = \"http://127.0.0.1:9\"\ntoken = \"t\"\n",
    );
    config
}

#[test]
fn a_site_that_does_not_answer_is_named_with_why() {
    let dir = scratch("down-site");
    with_a_ghost(&dir);
    let svc = Service::start(&dir);
    let (table, _) = text(&svc.brokk("tok-ann", &["resources"]));
    let ghost = table
        .lines()
        .find(|l| l.starts_with("ghost"))
        .unwrap_or_else(|| panic!("{table}"));
    // In the table's columns, down with why; the site that answers is up.
    assert!(
        ghost.contains(" down ") && ghost.contains("connection refused"),
        "{table}"
    );
    assert!(!ghost.contains("error sending request"), "{table}");
    let up = table
        .lines()
        .find(|l| l.starts_with("up "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(up.contains(" up "), "{table}");
    let all = svc.json("tok-ann", &["resources", "--json"]);
    let ghost = all.as_array().unwrap().iter().find(|r| r["name"] == "ghost").unwrap();
    assert_eq!(ghost["available"], false, "{ghost}");
    // Ready: the database answers and `up` can take work; `ghost` is named
    // with why it cannot.
    let ready = || {
        let r = reqwest::blocking::get(format!("{}/readyz", svc.server.url)).unwrap();
        (r.status().as_u16(), r.json::<serde_json::Value>().unwrap())
    };
    let t = std::time::Instant::now();
    let (status, body) = loop {
        let (status, body) = ready();
        if status == 200 || t.elapsed() > Duration::from_secs(20) {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["database"], "ok", "{body}");
    assert!(body["sites"]["up"].as_str().unwrap().starts_with("ok"), "{body}");
    assert!(
        body["sites"]["ghost"].as_str().unwrap().contains("unavailable"),
        "{body}"
    );
}

/// A broker none of whose sites answers is alive but not ready.
#[test]
fn a_broker_that_can_place_nothing_is_not_ready() {
    let dir = scratch("not-ready");
    common::write_private(
        &dir.join("broker.toml"),
        "database = \"broker.db\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[sites]]\nname = \"ghost\"\nurl = \"http://127.0.0.1:9\"\ntoken = \"t\"\n",
    );
    let svc = Service::start(&dir);
    let health = reqwest::blocking::get(format!("{}/healthz", svc.server.url)).unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let r = reqwest::blocking::get(format!("{}/readyz", svc.server.url)).unwrap();
    assert_eq!(r.status().as_u16(), 503);
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(
        (&body["ready"], &body["database"]),
        (&false.into(), &"ok".into()),
        "{body}"
    );
    assert!(body["sites"]["ghost"].is_string(), "{body}");
}

#[test]
fn cancel_takes_several_jobs_and_goes_on_past_one_it_cannot_cancel() {
    let dir = scratch("cancel-several");
    let svc = Service::start(&dir);
    let job = dir.join("long.json");
    std::fs::write(
        &job,
        r#"{"executable": "/bin/sleep", "arguments": ["60"], "wall_time": 120}"#,
    )
    .unwrap();
    let ids: Vec<String> = (0..2)
        .map(|_| {
            svc.json("tok-ann", &["submit", job.to_str().unwrap(), "--json"])["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let out = svc.brokk("tok-ann", &["cancel", &ids[0], "0123456789abcdef", &ids[1], "--json"]);
    // The unknown one sets the status (not found); both real ones are cancelled.
    assert_eq!(out.status.code(), Some(3), "{}", text(&out).1);
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done.as_array().unwrap().len(), 2, "{done}");
    assert!(
        text(&out).1.contains("1 of 3 jobs were not cancelled"),
        "{}",
        text(&out).1
    );
    for id in &ids {
        let t = Instant::now();
        while svc.json("tok-ann", &["status", id, "--json"])["state"] != "cancelled" {
            assert!(t.elapsed() < Duration::from_secs(20), "{id} not cancelled");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn local_inputs_are_uploaded_and_every_output_comes_back_under_brokk_ids() {
    // arcsub and condor_submit send the files a description names from the
    // submitting directory; the job reads them in its sandbox, and its
    // `$(Cluster)` file names carry the broker's ids.
    let dir = scratch("data-in-out");
    let svc = Service::start(&dir);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("data.txt"), "input from the submit directory\n").unwrap();
    let submit = work.join("job.sub");
    std::fs::write(
        &submit,
        "executable = /bin/sh\n\
         arguments = \"-c 'cat data.txt; echo complaint >&2; echo $(Process) > result.txt'\"\n\
         transfer_input_files = data.txt\n\
         transfer_output_files = result.txt\n\
         output = out.$(Cluster).$(Process)\n\
         error = err.$(Cluster).$(Process)\n\
         queue 2\n",
    )
    .unwrap();
    let out = svc.brokk("tok-ann", &["submit", submit.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(text(&out).1.contains("uploading data.txt (32 B)"), "{}", text(&out).1);
    let accepted: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = common::strings(&accepted["ids"]);
    // The same file again is not sent again: the broker keeps it by content.
    let again = svc.brokk("tok-ann", &["submit", submit.to_str().unwrap()]);
    assert!(again.status.success(), "{}", text(&again).1);
    assert!(!text(&again).1.contains("uploading"), "{}", text(&again).1);
    for (k, id) in ids.iter().enumerate() {
        let j = svc.json("tok-ann", &["watch", id, "--json"]);
        assert_eq!(j["state"], "finished", "{j}");
        assert_eq!(
            j["stdout"],
            format!("out.{}.{k}", ids[0]),
            "$(Cluster) is the submission's id"
        );
        let got = dir.join(format!("got-{k}"));
        let fetched = svc.brokk("tok-ann", &["get", id, "--dir", got.to_str().unwrap()]);
        assert!(fetched.status.success(), "{}", text(&fetched).1);
        assert_eq!(
            std::fs::read_to_string(got.join(format!("out.{}.{k}", ids[0]))).unwrap(),
            "input from the submit directory\n"
        );
        assert_eq!(
            std::fs::read_to_string(got.join(format!("err.{}.{k}", ids[0]))).unwrap(),
            "complaint\n"
        );
        assert_eq!(
            std::fs::read_to_string(got.join("result.txt")).unwrap(),
            format!("{k}\n")
        );
        // A file already there is not replaced without --force, and nothing is fetched.
        std::fs::write(got.join("result.txt"), "mine\n").unwrap();
        let again = svc.brokk("tok-ann", &["get", id, "--dir", got.to_str().unwrap()]);
        assert!(!again.status.success());
        assert!(text(&again).1.contains("--force"), "{}", text(&again).1);
        assert_eq!(std::fs::read_to_string(got.join("result.txt")).unwrap(), "mine\n");
        let forced = svc.brokk("tok-ann", &["get", id, "--dir", got.to_str().unwrap(), "--force"]);
        assert!(forced.status.success(), "{}", text(&forced).1);
        assert_eq!(
            std::fs::read_to_string(got.join("result.txt")).unwrap(),
            format!("{k}\n")
        );
        assert!(text(&forced).0.contains("result.txt (2 B)"), "{}", text(&forced).0);
        // As JSON, each file with its size; a script reads what it got.
        let json = svc.json(
            "tok-ann",
            &["get", id, "--dir", got.to_str().unwrap(), "--force", "--json"],
        );
        let result = json["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "result.txt");
        assert_eq!(result.map(|f| f["bytes"].as_u64()), Some(Some(2)), "{json}");
        assert_eq!(
            (&json["job"], &json["missing"]),
            (&id.clone().into(), &serde_json::json!([])),
            "{json}"
        );
    }
    // Several jobs at once, as arcget takes them: each into a directory of
    // its own; one that is not there is said and the others fetched.
    let both = dir.join("both");
    let mut args = vec![
        "get",
        ids[0].as_str(),
        "nosuchjob",
        ids[1].as_str(),
        "--dir",
        both.to_str().unwrap(),
    ];
    let partly = svc.brokk("tok-ann", &args);
    assert!(!partly.status.success());
    assert!(
        text(&partly).1.contains("1 of 3 jobs were not fetched"),
        "{}",
        text(&partly).1
    );
    for (k, id) in ids.iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(both.join(id).join("result.txt")).unwrap(),
            format!("{k}\n")
        );
    }
    args.remove(2);
    args.extend(["--force", "--json"]);
    let reports = svc.json("tok-ann", &args);
    let jobs: Vec<&str> = reports
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, [ids[0].as_str(), ids[1].as_str()], "{reports}");
    // A file that is not there is named before anything is sent.
    std::fs::remove_file(work.join("data.txt")).unwrap();
    let missing = svc.brokk("tok-ann", &["submit", submit.to_str().unwrap()]);
    assert!(!missing.status.success());
    assert!(text(&missing).1.contains("input file data.txt"), "{}", text(&missing).1);
}

#[test]
fn an_upload_is_its_owners_alone_and_is_checked_on_arrival() {
    let dir = scratch("uploads-private");
    let svc = Service::start(&dir);
    let http = reqwest::blocking::Client::new();
    let body = b"ann's data\n".to_vec();
    let sha = brokk_site::uploads::digest_file(&{
        let p = dir.join("d");
        std::fs::write(&p, &body).unwrap();
        p
    })
    .unwrap()
    .0;
    let url = format!("{}/v1/uploads/{sha}", svc.server.url);
    let wrong = http
        .put(&url)
        .bearer_auth("tok-ann")
        .body(b"other bytes".to_vec())
        .send()
        .unwrap();
    assert_eq!(wrong.status(), 400, "a body that is not its digest is refused");
    let put = http.put(&url).bearer_auth("tok-ann").body(body).send().unwrap();
    assert_eq!(put.status(), 201);
    assert_eq!(http.get(&url).bearer_auth("tok-ann").send().unwrap().status(), 200);
    assert_eq!(http.get(&url).bearer_auth("tok-bob").send().unwrap().status(), 404);
    // Bob names Ann's digest: his own store does not have it.
    let req = serde_json::json!({
        "description": r#"{"executable": "/bin/cat", "arguments": ["d"], "input_files": [{"name": "d"}]}"#,
        "format": "json",
        "uploads": { "d": sha },
    });
    let bob = http
        .post(format!("{}/v1/jobs", svc.server.url))
        .bearer_auth("tok-bob")
        .json(&req)
        .send()
        .unwrap();
    assert_eq!(bob.status(), 400);
    assert!(bob.text().unwrap().contains("not found"));
    let ann = http
        .post(format!("{}/v1/jobs", svc.server.url))
        .bearer_auth("tok-ann")
        .json(&req)
        .send()
        .unwrap();
    assert_eq!(ann.status(), 202);
}

#[test]
fn held_jobs_wait_and_filters_pick_jobs_by_name_and_state() {
    let dir = scratch("hold-filters");
    let svc = Service::start(&dir);
    let job = |name: &str| {
        let p = dir.join(format!("{name}.json"));
        std::fs::write(
            &p,
            format!(r#"{{"name": "{name}", "executable": "/bin/sleep", "arguments": ["60"], "wall_time": 120}}"#),
        )
        .unwrap();
        p
    };
    let (a, b) = (job("sweep-a"), job("plot"));
    let held = svc.json("tok-ann", &["submit", a.to_str().unwrap(), "--hold", "--json"]);
    let held = held["id"].as_str().unwrap().to_string();
    let other = svc.json("tok-ann", &["submit", b.to_str().unwrap(), "--json"]);
    let other = other["id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(1500));
    let j = svc.json("tok-ann", &["status", &held, "--json"]);
    assert_eq!((j["state"].as_str(), j["site"].as_str()), (Some("held"), None), "{j}");
    // A job that has started cannot be held: its site says so.
    let t = Instant::now();
    while svc.json("tok-ann", &["status", &other, "--json"])["state"] != "running" {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(100));
    }
    let refused = svc.brokk("tok-ann", &["hold", &other]);
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused).1);
    let said = text(&refused).1;
    assert!(
        said.contains("has started") && said.contains("cancel it instead"),
        "{said}"
    );
    // The table, filtered by name, in the columns asked for.
    let table = svc.brokk("tok-ann", &["status", "--name", "sweep-*", "--format", "id,name,state"]);
    let (stdout, _) = text(&table);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with("JOB") && lines[1].contains("sweep-a") && lines[1].contains("held"),
        "{stdout}"
    );
    // Sorted, without the heading, and as CSV for a script.
    let sorted = svc.brokk(
        "tok-ann",
        &["status", "--format", "name,state", "--sort", "-name", "--noheader"],
    );
    let (stdout, _) = text(&sorted);
    let names: Vec<&str> = stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, ["sweep-a", "plot"], "{stdout}");
    let csv = svc.brokk(
        "tok-ann",
        &["status", "--format", "id,name,state,started", "--sort", "name", "--csv"],
    );
    let (stdout, _) = text(&csv);
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows[0], "id,name,state,started", "{stdout}");
    assert_eq!(rows[2], format!("{held},sweep-a,held,"), "{stdout}");
    assert!(rows[1].starts_with(&format!("{other},plot,")), "{stdout}");
    let bad = svc.brokk("tok-ann", &["status", "--sort", "colour"]);
    assert!(!bad.status.success() && text(&bad).1.contains("--sort: unknown field `colour`"));
    // A description that says hold is held as well.
    let sub = dir.join("held.sub");
    std::fs::write(&sub, "executable = /bin/true\nhold = true\nqueue\n").unwrap();
    let from_file = svc.json("tok-ann", &["submit", sub.to_str().unwrap(), "--json"]);
    let j = svc.json("tok-ann", &["status", from_file["id"].as_str().unwrap(), "--json"]);
    assert_eq!(j["state"], "held", "{j}");
    let bad = svc.brokk("tok-ann", &["status", "--state", "sleeping"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).1.contains("one of accepted, held"), "{}", text(&bad).1);
    // Released, it runs; cancelled by name with everything else of that name.
    svc.json("tok-ann", &["release", &held, "--json"]);
    let t = Instant::now();
    while svc.json("tok-ann", &["status", &held, "--json"])["site"].is_null() {
        assert!(t.elapsed() < Duration::from_secs(20), "released but not dispatched");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cancelled = svc.json("tok-ann", &["cancel", "--name", "sweep-*,plot", "--json"]);
    assert_eq!(cancelled.as_array().map(Vec::len), Some(2), "{cancelled}");
    // Watching as a stream: one JSON line per state, the job last.
    let events = svc.brokk("tok-ann", &["watch", &held, "--json"]);
    let lines: Vec<serde_json::Value> = text(&events)
        .0
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let states: Vec<&str> = lines.iter().filter_map(|e| e["state"].as_str()).collect();
    assert_eq!(states.first(), Some(&"held"), "{states:?}");
    assert!(
        states.contains(&"accepted") && states.last() == Some(&"cancelled"),
        "{states:?}"
    );
    assert_eq!(lines.last().unwrap()["event"], "end");
}

#[test]
fn a_slurm_script_translated_to_every_language_runs_the_same() {
    // A multi-line batch script with shell functions, loops and arithmetic:
    // translated, each language's job must still run the whole script.
    let dir = scratch("script-everywhere");
    let svc = Service::start(&dir);
    let script = dir.join("multi.sh");
    std::fs::write(
        &script,
        "#!/bin/bash\n#SBATCH --job-name=multi\n#SBATCH --output=result.txt\n#SBATCH --time=00:01:00\n\
         greet() { echo \"hello $1\"; }\nfor i in 1 2 3; do greet \"n$i\"; done\necho \"done: $(( 6 * 7 ))\"\n",
    )
    .unwrap();
    let expected = "hello n1\nhello n2\nhello n3\ndone: 42\n";
    let run = |path: &Path| {
        let done = svc.json("tok-ann", &["submit", path.to_str().unwrap(), "--watch", "--json"]);
        assert_eq!(done["state"], "finished", "{}: {done}", path.display());
        let out = svc.brokk("tok-ann", &["output", done["id"].as_str().unwrap(), "result.txt"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(run(&script), expected, "as Slurm");
    for (to, ext) in [
        ("condor", "sub"),
        ("xrsl", "xrsl"),
        ("jsdl", "jsdl"),
        ("jdl", "jdl"),
        ("rsl", "rsl"),
    ] {
        let translated = dir.join(format!("multi.{ext}"));
        let o = svc.brokk("tok-ann", &["translate", script.to_str().unwrap(), "--to", to]);
        assert!(o.status.success(), "{to}: {}", text(&o).1);
        assert!(
            text(&o).1.contains("script:"),
            "{to}: the carrying is said: {}",
            text(&o).1
        );
        std::fs::write(&translated, &o.stdout).unwrap();
        assert_eq!(run(&translated), expected, "translated to {to}");
    }
}

#[test]
fn grams_standard_variables_are_filled_in_where_the_job_runs() {
    let dir = scratch("gram-variables");
    let svc = Service::start(&dir);
    let rsl = dir.join("job.rsl");
    std::fs::write(
        &rsl,
        "&(executable = /bin/echo)(arguments = $(HOME) $(LOGNAME) $(GLOBUS_HOST_OSNAME))(stdout = out.txt)\
         (directory = $(SCRATCH_DIRECTORY))",
    )
    .unwrap();
    let done = svc.json("tok-ann", &["submit", rsl.to_str().unwrap(), "--watch", "--json"]);
    assert_eq!(done["state"], "finished", "{done}");
    let out = svc.brokk("tok-ann", &["output", done["id"].as_str().unwrap(), "out.txt"]);
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let words: Vec<&str> = printed.split_whitespace().collect();
    let me = String::from_utf8(std::process::Command::new("id").arg("-un").output().unwrap().stdout).unwrap();
    assert_eq!(words.len(), 3, "{printed}");
    assert!(
        words[0].starts_with('/') && words[0].contains("/job-"),
        "HOME is the sandbox: {printed}"
    );
    assert_eq!((words[1], words[2]), (me.trim(), "linux"), "{printed}");
    // Only GRAM RSL defines them: a JSON job's `$(HOME)` is its own text.
    let json = dir.join("job.json");
    std::fs::write(
        &json,
        r#"{"executable": "/bin/echo", "arguments": ["$(HOME)"], "stdout": "out.txt"}"#,
    )
    .unwrap();
    let done = svc.json("tok-ann", &["submit", json.to_str().unwrap(), "--watch", "--json"]);
    assert_eq!(done["state"], "finished", "{done}");
    let out = svc.brokk("tok-ann", &["output", done["id"].as_str().unwrap(), "out.txt"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "$(HOME)\n");
}

#[test]
fn a_hold_never_crosses_a_dispatch_in_flight() {
    // Jobs are sent to their sites after the decision's turn: a hold that
    // arrives meanwhile waits for the send to be recorded, then holds the
    // job at its site (or is refused there: it has started or ended), or
    // holds a job that no site has.
    let dir = scratch("hold-in-flight");
    broker_config(&dir, "", &[("a", 64), ("b", 64)]);
    let svc = Service::start(&dir);
    let sub = dir.join("many.sub");
    std::fs::write(&sub, "executable = /bin/true\nqueue 300\n").unwrap();
    let accepted = svc.json("tok-ann", &["submit", sub.to_str().unwrap(), "--json"]);
    let ids: Vec<String> = accepted["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 300);
    let client = brokk_proto::broker::BrokerClient::new(&svc.server.url, "tok-ann");
    // From the last job back, four at once: the holds meet the dispatcher
    // somewhere in the queue, where jobs are being decided and sent.
    let answers: Vec<(String, Result<BrokerState, String>)> = std::thread::scope(|scope| {
        let hands: Vec<_> = (0..4)
            .map(|k| {
                let (client, ids) = (&client, &ids);
                scope.spawn(move || {
                    ids.iter()
                        .rev()
                        .skip(k)
                        .step_by(4)
                        .map(|id| {
                            (
                                id.clone(),
                                client.hold(id).map(|j| j.state()).map_err(|e| e.to_string()),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hands.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let (mut held, mut refused) = (Vec::new(), 0);
    for (id, answer) in answers {
        match answer {
            Ok(state) => {
                assert_eq!(state, BrokerState::Held, "{id}");
                held.push(id);
            }
            Err(e) => {
                assert!(e.contains("cancel it instead") || e.contains("has ended"), "{e}");
                refused += 1;
            }
        }
    }
    // Whatever was held stays held, never started, however long one waits.
    std::thread::sleep(Duration::from_secs(2));
    let mut at_site = 0;
    for id in &held {
        let j = client.job(id).unwrap();
        assert_eq!((j.state(), j.started), (BrokerState::Held, None), "{j:?}");
        at_site += usize::from(j.site.is_some());
    }
    eprintln!(
        "{} held before dispatch, {at_site} held at their site, {refused} started or ended at a site",
        held.len() - at_site
    );
}

#[test]
fn requeue_sends_an_ended_job_again_under_its_own_id() {
    let dir = scratch("requeue");
    let svc = Service::start(&dir);
    // Fails on its first run and succeeds on the next: the marker outlives the run.
    let marker = dir.join("ran-once");
    let job = dir.join("second-time.json");
    std::fs::write(
        &job,
        serde_json::json!({
            "executable": "/bin/sh",
            "arguments": ["-c", format!("if [ -e {0} ]; then exit 0; fi; touch {0}; exit 3", marker.display())],
            "name": "second-time",
        })
        .to_string(),
    )
    .unwrap();
    let id = svc.json("tok-ann", &["submit", job.to_str().unwrap(), "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let first = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(30));
    assert_eq!(
        (&first["state"], &first["exit_code"]),
        (&"failed".into(), &3.into()),
        "{first}"
    );
    // Another user may not requeue it (forbidden, as every other command on it is).
    assert_eq!(svc.brokk("tok-bob", &["requeue", &id]).status.code(), Some(4));
    let again = svc.json("tok-ann", &["requeue", &id, "--json"]);
    assert_eq!(again["id"], id.as_str(), "{again}");
    assert!(again["exit_code"].is_null() && again["ended"].is_null(), "{again}");
    let second = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(30));
    assert_eq!(
        (&second["state"], &second["exit_code"]),
        (&"finished".into(), &0.into()),
        "{second}"
    );
    // Both runs are in its history, the requeue between them.
    let states: Vec<&str> = second["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.iter().filter(|s| **s == "dispatched").count(), 2, "{states:?}");
    let requeued = second["history"]
        .as_array()
        .unwrap()
        .iter()
        .position(|h| h["detail"] == "requeued by its owner")
        .unwrap_or_else(|| panic!("{second}"));
    assert_eq!(states[requeued - 1], "failed", "{states:?}");
    // A job still running is not requeued; once cancelled, a filter picks it.
    let long = dir.join("long.json");
    std::fs::write(
        &long,
        r#"{"executable": "/bin/sleep", "arguments": ["60"], "name": "long"}"#,
    )
    .unwrap();
    let long_id = svc.json("tok-ann", &["submit", long.to_str().unwrap(), "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    common::wait_for_state(&svc.server.url, "tok-ann", &long_id, "running", Duration::from_secs(30));
    let refused = svc.brokk("tok-ann", &["requeue", &long_id]);
    assert_eq!(refused.status.code(), Some(6), "{}", text(&refused).1);
    assert!(
        text(&refused).1.contains("only an ended job can be requeued"),
        "{}",
        text(&refused).1
    );
    assert!(svc.brokk("tok-ann", &["cancel", &long_id]).status.success());
    common::wait_for_state(
        &svc.server.url,
        "tok-ann",
        &long_id,
        "cancelled",
        Duration::from_secs(30),
    );
    let picked = svc.json(
        "tok-ann",
        &["requeue", "--name", "long", "--state", "cancelled", "--json"],
    );
    let picked = picked.as_array().unwrap_or_else(|| panic!("{picked}"));
    assert_eq!(picked.len(), 1, "{picked:?}");
    assert_eq!(picked[0]["id"], long_id.as_str());
    common::wait_for_state(&svc.server.url, "tok-ann", &long_id, "running", Duration::from_secs(30));
    assert!(svc.brokk("tok-ann", &["cancel", &long_id]).status.success());
}

#[test]
fn submit_watch_follows_every_job_of_a_submission_and_says_why_one_failed() {
    let dir = scratch("watch-all");
    broker_config(&dir, "", &[("a", 4)]);
    let svc = Service::start(&dir);
    // Three jobs: the first exits 0, the others 1 and 2.
    let sub = dir.join("three.sub");
    std::fs::write(
        &sub,
        "executable = /bin/sh\narguments = \"-c 'sleep 1; exit $(Process)'\"\nqueue 3\n",
    )
    .unwrap();
    let out = svc.brokk("tok-ann", &["submit", sub.to_str().unwrap(), "--watch"]);
    let (_, said) = text(&out);
    assert_eq!(out.status.code(), Some(1), "two of three failed: {said}");
    let printed = String::from_utf8_lossy(&out.stdout);
    let ends: Vec<&str> = printed
        .lines()
        .filter(|l| l.contains(" finished at") || l.contains(" failed at"))
        .collect();
    assert_eq!(ends.len(), 3, "{printed}");
    assert!(
        ends.iter().any(|l| l.ends_with("failed at a: exited with code 1")),
        "{printed}"
    );
    assert!(
        ends.iter().any(|l| l.ends_with("failed at a: exited with code 2")),
        "{printed}"
    );
    // A token is never shown in help.
    let help = common::brokk(&svc.server.url, "the-secret-token", &["status", "--help"]);
    assert!(help.status.success());
    assert!(!String::from_utf8_lossy(&help.stdout).contains("the-secret-token"));
}

#[test]
fn a_missing_token_and_an_absent_broker_say_what_to_set() {
    let dir = scratch("messages");
    broker_config(&dir, "", &[("a", 1)]);
    let svc = Service::start(&dir);
    let no_token = svc.brokk("", &["status"]);
    assert_eq!(no_token.status.code(), Some(4));
    assert!(text(&no_token).1.contains("BROKK_TOKEN"), "{}", text(&no_token).1);
    let nobody = format!("http://127.0.0.1:{}", common::free_port());
    let absent = common::brokk(&nobody, "tok-ann", &["status"]);
    assert_eq!(absent.status.code(), Some(5));
    let said = text(&absent).1;
    assert!(said.contains(&format!("cannot reach the broker at {nobody}")), "{said}");
    assert!(said.contains("BROKK_SERVER"), "{said}");
    // A reservation's window takes a duration from now, as --since takes one back.
    let before = brokk_proto::wall_clock();
    let r = svc.json(
        "tok-ann",
        &[
            "reserve",
            "--amount",
            "1",
            "--duration",
            "60",
            "--earliest",
            "2h",
            "--json",
        ],
    );
    let start = brokk_model::Time::parse(r["start"].as_str().unwrap()).unwrap();
    assert!(start >= before + brokk_model::Duration(7200), "{r}");
    let bad = svc.brokk(
        "tok-ann",
        &["reserve", "--amount", "1", "--duration", "60", "--earliest", "soonish"],
    );
    assert!(!bad.status.success());
    assert!(text(&bad).1.contains("--earliest: `soonish`"), "{}", text(&bad).1);
}

/// [AB-avail]'s two ways to learn the sites' free capacity, live: a broker
/// that asks every site before each decision (`info_ttl_ms = 0`) and one
/// that uses what a site said for two seconds place the same stream of 100
/// jobs, submitted in ten bursts, over three sites. Both send each job
/// once, with no start later than predicted; the one that asks asks more.
#[test]
fn asking_before_every_decision_costs_more_requests_than_information_two_seconds_old() {
    let counts = |ttl_ms: u64| {
        let dir = scratch(&format!("publication-{ttl_ms}"));
        broker_config(
            &dir,
            &format!("info_ttl_ms = {ttl_ms}\n"),
            &[("a", 4), ("b", 4), ("c", 4)],
        );
        let svc = Service::start(&dir);
        let sub = dir.join("ten.sub");
        std::fs::write(&sub, "executable = /bin/true\nqueue 10\n").unwrap();
        let mut ids = Vec::new();
        for _ in 0..10 {
            let accepted = svc.json("tok-ann", &["submit", sub.to_str().unwrap(), "--json"]);
            ids.extend(common::strings(&accepted["ids"]));
            std::thread::sleep(Duration::from_millis(300));
        }
        assert_eq!(ids.len(), 100);
        for id in &ids {
            let j = common::wait_ended(&svc.server.url, "tok-ann", id, Duration::from_secs(60));
            assert_eq!(j["state"], "finished", "{j}");
        }
        let metrics = reqwest::blocking::get(format!("{}/metrics", svc.server.url))
            .unwrap()
            .text()
            .unwrap();
        let value = |name: &str| -> u64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} not in\n{metrics}"))
        };
        (
            value("brokk_site_requests_total{kind=\"info\"}"),
            value("brokk_site_requests_total{kind=\"submit\"}"),
            value("brokk_start_violations_total"),
        )
    };
    let (asked, sent, late) = counts(0);
    let (kept, sent_kept, late_kept) = counts(2000);
    assert_eq!((sent, sent_kept), (100, 100));
    assert_eq!((late, late_kept), (0, 0));
    // Every decision turn asks all three sites; with two seconds' reuse, a
    // turn within two seconds of the last asks none.
    assert!(asked >= 3 * 10, "{asked}");
    assert!(asked > kept, "asked {asked}, with reuse {kept}");
    eprintln!("information requests: asking {asked}, two seconds' reuse {kept}");
}

/// A `brokk site` "a" of 4 slots (tokens: the broker's, and its own user
/// lee's) under `dir/site`, and a broker over it alone that reuses what it
/// says for `info_ttl_ms`, its `[[sites]]` entry with the `extra` lines.
fn broker_over_an_agent(dir: &Path, info_ttl_ms: u64, extra: &str) -> (common::Server, Service) {
    let site_dir = dir.join("site");
    std::fs::create_dir_all(&site_dir).unwrap();
    common::write_private(
        &site_dir.join("site.toml"),
        "name = \"a\"\ncapacity = 4\ndatabase = \"site.db\"\nworkdir = \"jobs\"\nkill_grace = 1\n\
         [tokens]\n\"tok-broker\" = \"broker\"\n\"tok-lee\" = \"lee\"\n",
    );
    let site = common::spawn_listening(
        std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["site", "--config"])
            .arg(site_dir.join("site.toml"))
            .stderr(std::process::Stdio::null()),
    );
    common::write_private(
        &dir.join("broker.toml"),
        &format!(
            "database = \"broker.db\"\nstate_dir = \"sites\"\ninfo_ttl_ms = {info_ttl_ms}\n\
             [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
             [[sites]]\nname = \"a\"\nurl = \"{}\"\ntoken = \"tok-broker\"\n{extra}",
            site.url
        ),
    );
    let svc = Service::start(dir);
    (site, svc)
}

/// Metric `name` (with its labels) as the broker's `/metrics` says, 0 when absent.
fn metric(svc: &Service, name: &str) -> u64 {
    let m = reqwest::blocking::get(format!("{}/metrics", svc.server.url))
        .unwrap()
        .text()
        .unwrap();
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// The own user of the site at `url` takes all 4 of its slots for `secs`
/// seconds, straight at the site (its wall time 5 s longer).
fn taken_by_its_user(url: &str, secs: u32) {
    let local = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/jobs"))
        .bearer_auth("tok-lee")
        .json(&serde_json::json!({"executable": "/bin/sleep", "arguments": [secs.to_string()], "cpus": 4, "wall_time": secs + 5}))
        .send()
        .unwrap();
    assert!(local.status().is_success(), "{}", local.text().unwrap());
}

/// [AB-avail]'s violations, live: a broker that reuses what a site said for
/// a minute sends a 4-CPU job to a site that looked free, while the site's
/// own user has just taken all of it for 25 s. The job starts that much
/// later than predicted: counted as a violation, and still run. Then a
/// job with a deadline, in the same case, asks for its slot at once: the
/// site refuses it (counted), and the job reserves the site's next start,
/// which still ends by the deadline, and runs in that reservation.
#[test]
fn a_site_taken_by_its_own_user_after_it_reported_makes_a_violation_and_the_job_still_runs() {
    let dir = scratch("violation");
    let (site, svc) = broker_over_an_agent(&dir, 60_000, "");
    let write = |name: &str, text: &str| written(&dir, name, text);
    let info_requests = || metric(&svc, "brokk_site_requests_total{kind=\"info\"}");
    // A short job, then the broker reads the idle site again (it asks a
    // site where a job ended before its next decision): what it knows of
    // the site is then a minute fresh. Counted from while the job runs,
    // the next request for information is that one.
    let short = write(
        "short.json",
        r#"{"executable": "/bin/sleep", "arguments": ["2"], "cpus": 1, "wall_time": 5}"#,
    );
    let reads_the_idle_site = || {
        let id = svc.json("tok-ann", &["submit", &short, "--json"])["id"]
            .as_str()
            .unwrap()
            .to_string();
        let t = Instant::now();
        while svc.json("tok-ann", &["status", &id, "--json"])["state"] != "running" {
            assert!(t.elapsed() < Duration::from_secs(20), "{id} never ran");
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = info_requests();
        let done = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(20));
        assert_eq!(done["state"], "finished", "{done}");
        let t = Instant::now();
        while info_requests() <= before {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the site was not read again after the end"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    reads_the_idle_site();
    // Longer than the 20 s a start may slip before it is a violation.
    taken_by_its_user(&site.url, 25);
    // The broker, on what it read, predicts a start within seconds.
    let wide = write(
        "wide.json",
        r#"{"executable": "/bin/true", "cpus": 4, "wall_time": 10}"#,
    );
    let id = svc.json("tok-ann", &["submit", &wide, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(90));
    assert_eq!(done["state"], "finished", "{done}");
    assert!(done["predicted_tts"].as_i64().unwrap() <= 5, "{done}");
    assert_eq!(metric(&svc, "brokk_start_violations_total"), 1);
    assert_eq!(metric(&svc, "brokk_slot_refusals_total"), 0);
    // The same with a deadline five minutes away.
    reads_the_idle_site();
    taken_by_its_user(&site.url, 10);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let deadline = brokk_model::Time(now.as_secs() as i64 + 300);
    let due = write(
        "due.json",
        &format!(r#"{{"executable": "/bin/true", "cpus": 4, "wall_time": 10, "deadline": "{deadline}"}}"#),
    );
    let id = svc.json("tok-ann", &["submit", &due, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(90));
    assert_eq!(done["state"], "finished", "{done}");
    let sent = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["state"] == "dispatched")
        .expect("dispatched");
    assert!(sent["detail"].as_str().unwrap().contains("in reservation"), "{done}");
    // Promised after the local job, and started as promised.
    assert!(done["predicted_tts"].as_i64().unwrap() >= 10, "{done}");
    assert_eq!(metric(&svc, "brokk_slot_refusals_total"), 1);
    assert_eq!(metric(&svc, "brokk_start_violations_total"), 1);
    // Per site: four jobs taken (two short, the wide one, the one with a
    // deadline), and every request for information timed.
    assert_eq!(
        metric(&svc, "brokk_site_dispatches_total{site=\"a\",outcome=\"taken\"}"),
        4
    );
    let fetches = metric(&svc, "brokk_site_info_fetch_duration_seconds_count{site=\"a\"}");
    assert!(fetches >= 3, "{fetches}");
    assert_eq!(metric(&svc, "brokk_site_info_fetch_failures_total{site=\"a\"}"), 0);
}

/// [AB-avail]'s publication, live: a site the broker subscribes to pushes
/// its information on change, so the broker knows of what the site's own
/// user did without asking: a 4-CPU job submitted after the site's user
/// took the whole site is predicted to wait for it, and the site is never
/// asked while its stream is up.
#[test]
fn a_subscribed_site_pushes_its_changes_and_is_not_asked() {
    let dir = scratch("pushed");
    let (site, svc) = broker_over_an_agent(&dir, 1000, "push_every_s = 3600\n");
    let metric = |name: &str| metric(&svc, name);
    let pushes_after = |n: u64| {
        let t = Instant::now();
        while metric("brokk_info_pushes_total") <= n {
            assert!(t.elapsed() < Duration::from_secs(10), "no push after {n}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    pushes_after(0);
    let asked = metric("brokk_site_requests_total{kind=\"info\"}");
    let write = |name: &str, text: &str| written(&dir, name, text);
    let short = write(
        "short.json",
        r#"{"executable": "/bin/true", "cpus": 1, "wall_time": 5}"#,
    );
    let id = svc.json("tok-ann", &["submit", &short, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(20));
    assert_eq!(done["state"], "finished", "{done}");
    // The site's own user takes all of it; the site pushes the change.
    let pushed = metric("brokk_info_pushes_total");
    taken_by_its_user(&site.url, 8);
    pushes_after(pushed);
    let wide = write(
        "wide.json",
        r#"{"executable": "/bin/true", "cpus": 4, "wall_time": 10}"#,
    );
    let id = svc.json("tok-ann", &["submit", &wide, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = common::wait_ended(&svc.server.url, "tok-ann", &id, Duration::from_secs(60));
    assert_eq!(done["state"], "finished", "{done}");
    assert!(done["predicted_tts"].as_i64().unwrap() >= 5, "{done}");
    assert_eq!(metric("brokk_start_violations_total"), 0);
    // Never asked while it pushed.
    assert_eq!(metric("brokk_site_requests_total{kind=\"info\"}"), asked);
}

/// `--log-format json`: every log line is one JSON object with its level,
/// time and fields, the site named as a field, for a log shipper to read.
#[test]
fn logs_are_json_lines_with_their_fields_when_asked() {
    let dir = scratch("json-logs");
    let config = with_a_ghost(&dir);
    let log = dir.join("service.log");
    let _server = common::spawn_listening(
        std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["--log-format", "json", "serve", "--config"])
            .arg(&config)
            .stderr(std::fs::File::create(&log).unwrap())
            .env("BROKK_LOG", "brokk_server=warn"),
    );
    // The ghost's change feed cannot be read: warned about at every poll.
    let t = Instant::now();
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.lines().any(|l| l.contains("ghost")) {
            break text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no warning about the ghost: {text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string()),
        "{text}"
    );
    let ghost = lines
        .iter()
        .find(|l| l["fields"]["site"] == "ghost")
        .unwrap_or_else(|| panic!("no line with the site as a field: {text}"));
    assert_eq!(ghost["level"], "WARN", "{ghost}");
    assert!(ghost["fields"]["message"].is_string(), "{ghost}");
}

/// `status` takes several jobs (a table of them; one that cannot be read is
/// named and the rest shown), and `watch` follows several and waits for a
/// broker that restarts under it instead of giving up, as a user who left
/// a `watch` running in a terminal expects.
#[test]
fn watch_follows_several_jobs_across_a_broker_restart_and_status_takes_several() {
    let dir = scratch("watch-restart");
    // A fixed port, so the broker comes back where the watch looks.
    let port = common::free_port();
    broker_config(&dir, &format!("listen = \"127.0.0.1:{port}\"\n"), &[("a", 2)]);
    let svc = Service::start(&dir);
    let url = svc.server.url.clone();
    let long = written(
        &dir,
        "long.json",
        r#"{"executable": "/bin/sleep", "arguments": ["6"], "wall_time": 60}"#,
    );
    let short = written(&dir, "short.json", r#"{"executable": "/bin/true", "wall_time": 60}"#);
    let id = |file: &str| {
        svc.json("tok-ann", &["submit", file, "--json"])["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (a, b) = (id(&long), id(&short));
    let o = svc.brokk("tok-ann", &["status", &a, &b, "nope"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(out.contains(&a) && out.contains(&b), "{out}");
    assert!(err.contains("nope"), "{err}");
    let watch = std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(["watch", &a, &b])
        .env("BROKK_SERVER", &url)
        .env("BROKK_TOKEN", "tok-ann")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(800));
    svc.kill();
    std::thread::sleep(Duration::from_millis(1500));
    let svc = Service::start(&dir);
    assert_eq!(svc.server.url, url);
    let o = watch.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(
        err.contains("does not answer") && err.contains("answers again"),
        "{err}"
    );
    for id in [&a, &b] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(id.as_str()) && l.contains("finished")),
            "{out}"
        );
    }
}

/// The client configuration file names the server and a token file, so a
/// user types neither; a token file others can read is refused, and the
/// shell completions and manual pages come from the command definitions.
#[test]
fn the_client_reads_its_configuration_and_fits_the_shell() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("client-config");
    let svc = Service::start(&dir);
    let token = dir.join("token");
    std::fs::write(&token, "tok-ann\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.join("client.toml");
    std::fs::write(
        &config,
        format!(
            "server = \"{}\"\ntoken_file = \"{}\"\n",
            svc.server.url,
            token.display()
        ),
    )
    .unwrap();
    let bare = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(args)
            .env_remove("BROKK_SERVER")
            .env_remove("BROKK_TOKEN")
            .env("BROKK_CONFIG", &config)
            .output()
            .unwrap()
    };
    let o = bare(&["resources", "--json"]);
    assert!(o.status.success(), "{}", text(&o).1);
    assert!(text(&o).0.contains("large"), "{}", text(&o).0);
    // A token others could read stops the command, naming the file.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = bare(&["resources"]);
    assert!(
        !o.status.success() && text(&o).1.contains("chmod 600"),
        "{}",
        text(&o).1
    );
    // A mistake in the file is named with its place.
    std::fs::write(&config, "servr = \"x\"\n").unwrap();
    let o = bare(&["resources"]);
    assert!(!o.status.success() && text(&o).1.contains("servr"), "{}", text(&o).1);
    // Completions and manual pages.
    let o = bare(&["completions", "bash"]);
    assert!(o.status.success() && text(&o).0.contains("_brokk"), "{}", text(&o).1);
    let man = dir.join("man");
    let o = bare(&["man", "--out", man.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o).1);
    let page = std::fs::read_to_string(man.join("brokk-submit.1")).unwrap();
    assert!(page.contains("brokk\\-submit") && page.contains("hold"), "{page}");
}

/// A job finds what its batch system would have set: the id its user sees
/// at the broker (not the site's number), and for a Slurm script its
/// `SLURM_JOB_ID`, `SLURM_NTASKS` and `SLURM_CPUS_PER_TASK`.
#[test]
fn a_job_finds_its_broker_id_and_a_slurm_script_its_slurm_variables() {
    let dir = scratch("batch-variables");
    let svc = Service::start(&dir);
    let script = "#!/bin/sh\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=2\n#SBATCH --output=out.txt\n\
                  #SBATCH --time=1\necho \"$BROKK_JOB_ID $SLURM_JOB_ID $SLURM_NTASKS $SLURM_CPUS_PER_TASK\"\n";
    let (id, end) = common::run_to_end(&svc.server.url, "tok-ann", &dir, "job.sh", script);
    assert_eq!(end["state"], "finished", "{end}");
    let out = common::output(&svc.server.url, "tok-ann", &id, "out.txt");
    assert_eq!(out, format!("{id} {id} 2 2\n"));
}

/// An array task finds its array's id (the first task's) and its own
/// index, and a Slurm script its submission directory, its sandbox.
#[test]
fn slurm_array_tasks_find_their_array_and_where_they_were_submitted() {
    let dir = scratch("array-variables");
    let svc = Service::start(&dir);
    std::fs::write(
        dir.join("array.sh"),
        "#!/bin/sh\n#SBATCH --array=3-4\n#SBATCH --output=out-%a.txt\n#SBATCH --time=1\n\
         cd \"$SLURM_SUBMIT_DIR\" && test \"$SLURM_SUBMIT_DIR\" = \"$BROKK_SANDBOX\" && \
         echo \"$SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_JOB_ID\"\n",
    )
    .unwrap();
    let sub = svc.json("tok-ann", &["submit", "--json", dir.join("array.sh").to_str().unwrap()]);
    let ids: Vec<String> = common::strings(&sub["ids"]);
    assert_eq!(ids.len(), 2, "{sub}");
    for (id, task) in ids.iter().zip([3, 4]) {
        let end = common::wait_ended(&svc.server.url, "tok-ann", id, Duration::from_secs(60));
        assert_eq!(end["state"], "finished", "{end}");
        let out = common::output(&svc.server.url, "tok-ann", id, &format!("out-{task}.txt"));
        assert_eq!(out, format!("{} {task} {id}\n", ids[0]));
    }
}

/// Waits until the broker says what it kept of job `id`'s outputs; the
/// job as `status --json` shows it then.
fn kept(svc: &Service, id: &str) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let j = svc.json("tok-ann", &["status", id, "--json"]);
        if j["kept"].as_array().is_some_and(|k| !k.is_empty()) {
            return j;
        }
        assert!(std::time::Instant::now() < deadline, "nothing kept: {j}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Submits HTCondor description `description` as ann from `dir/work`, waits for
/// the job to finish and then for what the broker kept of it; the job's id
/// and its view then.
fn ended_and_kept(svc: &Service, dir: &Path, description: &str) -> (String, serde_json::Value) {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let submit = work.join("job.sub");
    std::fs::write(&submit, description).unwrap();
    let out = svc.brokk("tok-ann", &["submit", submit.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let id = serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["ids"][0]
        .as_str()
        .unwrap()
        .to_string();
    let j = common::wait_ended(&svc.server.url, "tok-ann", &id, std::time::Duration::from_secs(60));
    assert_eq!(j["state"], "finished", "{j}");
    let j = kept(svc, &id);
    (id, j)
}

#[test]
fn outputs_kept_by_the_broker_are_fetched_while_the_site_is_down() {
    // arcget users fetch a job's files from the CE's session directory;
    // here the broker keeps them as the job ends, so a site that is down
    // (or cleaned up) takes nothing from its owner.
    let dir = scratch("kept-outputs");
    let (site, svc) = broker_over_an_agent(&dir, 0, "");
    let (id, j) = ended_and_kept(
        &svc,
        &dir,
        "executable = /bin/sh\n\
         arguments = \"-c 'echo hello; echo complaint >&2; yes x | head -c 100000 > big.dat'\"\n\
         transfer_output_files = big.dat, never.dat\n\
         output = out.txt\n\
         error = err.txt\n\
         queue\n",
    );
    let sizes: Vec<(String, serde_json::Value)> = j["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["name"].as_str().unwrap().to_string(), k["bytes"].clone()))
        .collect();
    assert_eq!(
        sizes,
        [
            ("big.dat".to_string(), serde_json::json!(100_000)),
            ("err.txt".to_string(), serde_json::json!(10)),
            ("never.dat".to_string(), serde_json::Value::Null),
            ("out.txt".to_string(), serde_json::json!(6)),
        ],
        "{j}"
    );

    // The site goes away: everything it left is still there.
    drop(site);
    let got = dir.join("got");
    let fetched = svc.brokk("tok-ann", &["get", &id, "--dir", got.to_str().unwrap()]);
    // never.dat was never written: said, and the rest fetched.
    assert_eq!(fetched.status.code(), Some(1), "{}", text(&fetched).1);
    assert!(
        text(&fetched).1.contains("not fetched: never.dat"),
        "{}",
        text(&fetched).1
    );
    assert_eq!(std::fs::read_to_string(got.join("out.txt")).unwrap(), "hello\n");
    assert_eq!(std::fs::read_to_string(got.join("err.txt")).unwrap(), "complaint\n");
    assert_eq!(
        std::fs::read_to_string(got.join("big.dat")).unwrap(),
        "x\n".repeat(50_000)
    );
    let shown = svc.brokk("tok-ann", &["output", &id]);
    assert_eq!(text(&shown).0, "hello\n", "{}", text(&shown).1);
    // A range of a kept file, as a follower of a growing output asks.
    let part = reqwest::blocking::Client::new()
        .get(format!("{}/v1/jobs/{id}/files/big.dat", svc.server.url))
        .bearer_auth("tok-ann")
        .header("Range", "bytes=99990-")
        .send()
        .unwrap();
    assert_eq!(part.status().as_u16(), 206);
    assert_eq!(part.headers()["content-range"], "bytes 99990-99999/100000");
    assert_eq!(part.bytes().unwrap().len(), 10);
    let human = svc.brokk("tok-ann", &["status", &id]);
    assert!(
        text(&human).0.contains("output big.dat: kept by the broker (97.7 KiB)"),
        "{}",
        text(&human).0
    );
    // Nobody else's: another user sees no such job, kept or not.
    let other = reqwest::blocking::Client::new()
        .get(format!("{}/v1/jobs/{id}/files/out.txt", svc.server.url))
        .bearer_auth("tok-bob")
        .send()
        .unwrap();
    assert!(matches!(other.status().as_u16(), 403 | 404), "{}", other.status());
}

#[test]
fn an_output_over_the_owners_quota_is_not_kept_and_comes_from_the_site() {
    let dir = scratch("kept-quota");
    let (site, svc) = broker_over_an_agent(&dir, 0, "[limits]\noutput_quota_bytes = 50000\n");
    let (id, j) = ended_and_kept(
        &svc,
        &dir,
        "executable = /bin/sh\n\
         arguments = \"-c 'echo small; head -c 100000 /dev/zero > big.dat'\"\n\
         transfer_output_files = big.dat\n\
         output = out.txt\n\
         queue\n",
    );
    let big = j["kept"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "big.dat")
        .unwrap();
    assert!(big["bytes"].is_null(), "{j}");
    assert!(big["note"].as_str().unwrap().contains("over your quota"), "{j}");
    let small = j["kept"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "out.txt")
        .unwrap();
    assert_eq!(small["bytes"], 6, "{j}");
    // The site still has it: fetched from there.
    let got = dir.join("got");
    let fetched = svc.brokk("tok-ann", &["get", &id, "--dir", got.to_str().unwrap()]);
    assert!(fetched.status.success(), "{}", text(&fetched).1);
    assert_eq!(std::fs::read(got.join("big.dat")).unwrap().len(), 100_000);
    // With the site down, what was not kept is refused in words a user
    // reads, not the site's address and job number.
    drop(site);
    let shown = svc.brokk("tok-ann", &["output", &id, "big.dat"]);
    assert!(!shown.status.success());
    assert!(
        text(&shown)
            .1
            .contains("site a does not answer, and the broker keeps no copy of big.dat"),
        "{}",
        text(&shown).1
    );
    assert!(!text(&shown).1.contains("127.0.0.1"), "{}", text(&shown).1);
    assert_eq!(text(&svc.brokk("tok-ann", &["output", &id])).0, "small\n");
}

#[test]
fn a_job_waiting_at_its_site_is_held_there_and_released_there() {
    let dir = scratch("hold-at-site");
    broker_config(&dir, "", &[("a", 2)]);
    let svc = Service::start(&dir);
    let long_job = written(
        &dir,
        "long.json",
        r#"{"name": "long", "executable": "/bin/sleep", "arguments": ["60"], "cpus": 2, "wall_time": 90}"#,
    );
    let next = written(
        &dir,
        "next.json",
        r#"{"name": "next", "executable": "/bin/true", "cpus": 2, "wall_time": 30}"#,
    );
    let long = svc.json("tok-ann", &["submit", &long_job, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let id = svc.json("tok-ann", &["submit", &next, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let until =
        |id: &str, state: &str| common::wait_for_state(&svc.server.url, "tok-ann", id, state, Duration::from_secs(20));
    until(&long, "running");
    // Waiting at a behind the long job: held there, not taken back.
    until(&id, "dispatched");
    let held = svc.json("tok-ann", &["hold", &id, "--json"]);
    assert_eq!(
        (held["state"].as_str(), held["site"].as_str()),
        (Some("held"), Some("a")),
        "{held}"
    );
    let line = held["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (line["state"].as_str(), line["detail"].as_str()),
        (Some("held"), Some("held by its owner"))
    );
    // Its reason said once, in the column asked for (and in its history).
    let shown = text(&svc.brokk("tok-ann", &["status", &id, "--format", "id,state,site,reason"])).0;
    assert_eq!(shown.matches("held by its owner").count(), 2, "{shown}");
    assert!(!shown.contains("reason: held"), "{shown}");
    // Another user can neither hold nor release it.
    assert_eq!(svc.brokk("tok-bob", &["release", &id]).status.code(), Some(4));
    // Its site no longer plans a start for it: nothing starts it when the
    // long job ends.
    svc.json("tok-ann", &["cancel", &long, "--json"]);
    until(&long, "cancelled");
    std::thread::sleep(Duration::from_millis(1500));
    let j = svc.json("tok-ann", &["status", &id, "--json"]);
    assert_eq!(
        (j["state"].as_str(), j["started"].as_i64()),
        (Some("held"), None),
        "{j}"
    );
    // Released at its site, it runs there.
    let released = svc.json("tok-ann", &["release", &id, "--json"]);
    assert_eq!(released["site"], "a", "{released}");
    let done = until(&id, "finished");
    assert_eq!(done["site"], "a");
    let states: Vec<&str> = done["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["state"].as_str())
        .collect();
    assert!(states.windows(2).any(|w| w == ["held", "dispatched"]), "{states:?}");
    // Cancelled while held at its site: it ends there at once.
    let long = svc.json("tok-ann", &["submit", &long_job, "--json"]);
    until(long["id"].as_str().unwrap(), "running");
    let other = svc.json("tok-ann", &["submit", &next, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    until(&other, "dispatched");
    assert_eq!(svc.json("tok-ann", &["hold", &other, "--json"])["state"], "held");
    let gone = svc.json("tok-ann", &["cancel", &other, "--json"]);
    assert_eq!(
        (gone["state"].as_str(), gone["site"].as_str()),
        (Some("cancelled"), Some("a")),
        "{gone}"
    );
}

#[test]
fn a_job_goes_to_the_one_site_that_publishes_what_it_needs_or_is_refused_with_every_reason() {
    let dir = scratch("capabilities");
    std::fs::write(
        dir.join("broker.toml"),
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"a\"\ncapacity = 2\nbenchmarks = [{ name = \"specint2006\", value = 90.0 }]\n\
         [[embedded]]\nname = \"b\"\ncapacity = 2\nbenchmarks = [{ name = \"specint2006\", value = 80.0 }]\n\
         [[embedded]]\nname = \"c\"\ncapacity = 2\n\
         [embedded.capabilities]\nruntime_environments = [\"APPS/BIO/BLAST-2.14\"]\ngpus_per_node = 2\n\
         applications = { \"ECHO/1.0\" = \"/bin/echo\" }\n\
         [embedded.transfers]\nclients = {}\n",
    )
    .unwrap();
    let svc = Service::start(&dir);
    // The faster sites lack the software and the GPUs: only c takes it.
    let blast = written(
        &dir,
        "blast.json",
        r#"{"executable": "/bin/true", "runtime_environments": ["APPS/BIO/BLAST-2.14"], "gpus": 1, "wall_time": 60}"#,
    );
    // Asked first without submitting: c takes it, the others say why not,
    // and nothing is stored.
    let dry = svc.json("tok-ann", &["submit", &blast, "--dry-run", "--json"]);
    assert_eq!(dry["jobs"][0]["site"], "c", "{dry}");
    let answers: Vec<(&str, &str)> = dry["jobs"][0]["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["site"].as_str().unwrap(), s["answer"].as_str().unwrap()))
        .collect();
    assert_eq!(answers, [("c", "takes"), ("a", "cannot"), ("b", "cannot")], "{dry}");
    assert!(
        dry["jobs"][0]["sites"][1]["reasons"][0]
            .as_str()
            .unwrap()
            .contains("APPS/BIO/BLAST-2.14"),
        "{dry}"
    );
    assert_eq!(svc.json("tok-ann", &["status", "--json"]), serde_json::json!([]));
    let done = svc.json("tok-ann", &["submit", &blast, "--watch", "--json"]);
    assert_eq!(
        (done["state"].as_str(), done["site"].as_str()),
        (Some("finished"), Some("c")),
        "{done}"
    );
    // A container runs nowhere here: refused at submission, each site's reason said.
    let boxed = written(
        &dir,
        "boxed.json",
        r#"{"executable": "/bin/true", "container_image": "docker://python:3.12", "wall_time": 60}"#,
    );
    let refused = svc.brokk("tok-ann", &["submit", &boxed]);
    let said = text(&refused).1;
    assert!(!refused.status.success(), "{said}");
    for site in ["a", "b", "c"] {
        assert!(
            said.contains(&format!(
                "{site}: it runs in the container image docker://python:3.12; the site runs no containers"
            )),
            "{said}"
        );
    }
    // A UNICORE job names its application, which c resolves to its echo;
    // a version c does not have is refused with each site's reason.
    let unicore = |version: &str| {
        format!(
            r#"<jsdl:JobDefinition xmlns:jsdl="http://schemas.ggf.org/jsdl/2005/11/jsdl" xmlns:hpcpa="http://schemas.ggf.org/jsdl/2006/07/jsdl-hpcpa">
  <jsdl:JobDescription><jsdl:Application>
    <jsdl:ApplicationName>echo</jsdl:ApplicationName><jsdl:ApplicationVersion>{version}</jsdl:ApplicationVersion>
    <hpcpa:HPCProfileApplication><hpcpa:Argument>resolved</hpcpa:Argument><hpcpa:Argument>by c</hpcpa:Argument></hpcpa:HPCProfileApplication>
  </jsdl:Application></jsdl:JobDescription>
</jsdl:JobDefinition>"#
        )
    };
    let app = written(&dir, "app.jsdl", &unicore("1.0"));
    let done = svc.json("tok-ann", &["submit", &app, "--watch", "--json"]);
    assert_eq!(
        (done["state"].as_str(), done["site"].as_str()),
        (Some("finished"), Some("c")),
        "{done}"
    );
    let out = svc.brokk("tok-ann", &["output", done["id"].as_str().unwrap()]);
    assert_eq!(text(&out).0, "resolved by c\n");
    let newer = written(&dir, "newer.jsdl", &unicore("2.0"));
    let refused = svc.brokk("tok-ann", &["submit", &newer]);
    let said = text(&refused).1;
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("c: it runs the application echo 2.0, which the site does not publish"),
        "{said}"
    );
    // HTCondor-G naming a CE none of these sites fronts: refused, naming it.
    let grid = written(
        &dir,
        "grid.sub",
        "universe = grid\ngrid_resource = arc https://ce.example.org/arex\nexecutable = /bin/true\nqueue\n",
    );
    let refused = svc.brokk("tok-ann", &["submit", &grid]);
    let said = text(&refused).1;
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("c: it names the grid resource `arc https://ce.example.org/arex`, which the site does not front"),
        "{said}"
    );
    // `validate` answers both questions: correct in its language, and taken
    // by none of this broker's sites.
    let checked = svc.brokk("tok-ann", &["validate", "--broker", &boxed]);
    let (out, err) = text(&checked);
    assert_eq!(checked.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("boxed.json: ok (json, 1 job)"), "{out}");
    assert!(
        out.contains("boxed.json: no site of the broker would take it now"),
        "{out}"
    );
    assert!(out.contains("the site runs no containers"), "{out}");
    // The sites say what they offer.
    let c = svc.json("tok-ann", &["resources", "--json"]);
    let c = c.as_array().unwrap().iter().find(|s| s["name"] == "c").unwrap().clone();
    assert_eq!(
        c["environment"]["runtime_environments"][0], "APPS/BIO/BLAST-2.14",
        "{c}"
    );
    // Its own transfers (no grid client here, by its configuration).
    assert_eq!(
        c["environment"]["staging"],
        serde_json::json!(["file", "http", "https", "dav", "davs"]),
        "{c}"
    );
}

#[test]
fn an_rsl_job_reading_the_submitters_files_through_globusrun_uploads_them() {
    let dir = scratch("gass");
    let svc = Service::start(&dir);
    // The files live elsewhere on this machine, named by absolute paths
    // as globusrun -s serves them.
    let home = dir.join("home");
    std::fs::create_dir_all(home.join("bin")).unwrap();
    std::fs::write(
        home.join("bin/count"),
        "#!/bin/sh\nwc -l < events.dat > summary.txt\ncat\n",
    )
    .unwrap();
    std::fs::write(home.join("events.dat"), "a\nb\nc\n").unwrap();
    std::fs::write(home.join("params.txt"), "from stdin\n").unwrap();
    let h = home.display();
    let rsl = written(
        &dir,
        "job.rsl",
        &format!(
            "&(executable = $(GLOBUSRUN_GASS_URL) # \"{h}/bin/count\")\n\
             (stdin = $(GLOBUSRUN_GASS_URL) # \"{h}/params.txt\")\n\
             (stdout = $(GLOBUSRUN_GASS_URL) # \"{h}/count.out\")\n\
             (file_stage_in = ($(GLOBUSRUN_GASS_URL) # \"{h}/events.dat\" \"events.dat\"))\n\
             (file_stage_out = (\"summary.txt\" $(GLOBUSRUN_GASS_URL) # \"{h}/summary.txt\"))\n\
             (maxWallTime = 1)\n"
        ),
    );
    let done = svc.json("tok-ann", &["submit", &rsl, "--watch", "--json"]);
    assert_eq!(done["state"], "finished", "{done}");
    assert_eq!(done["exit_code"], 0, "{done}");
    let id = done["id"].as_str().unwrap();
    // What globusrun would have written back, kept with the job.
    assert_eq!(
        text(&svc.brokk("tok-ann", &["output", id, "count.out"])).0,
        "from stdin\n"
    );
    assert_eq!(text(&svc.brokk("tok-ann", &["output", id, "summary.txt"])).0, "3\n");
}
