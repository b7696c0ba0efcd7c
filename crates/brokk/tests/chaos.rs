//! Chaos: a stream of jobs from two users through `brokk serve` to two site
//! agents (one in front of a Slurm cluster, one running jobs itself), while
//! the broker, either agent and the cluster's slurmctld are killed with
//! SIGKILL at seeded random moments and restarted. At the end every accepted
//! job has ended exactly once with its true state (a job reported finished
//! ran once, no other job ran at all), and nothing of it is left running.
//!
//! The cluster is the test's own, started with `scripts/slurm-testbed.sh`
//! and stopped at the end: a controller killed with SIGKILL forgets the last
//! job ids it gave out and hands them out again, and the nodes it drains
//! for that would otherwise meet the next test. It needs Slurm and munge
//! (the script installs them), so a plain `cargo test` skips it;
//! `scripts/test.sh` runs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

mod common;

const TESTBED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/slurm-testbed.sh");

/// A one-cluster Slurm testbed of this test's own, stopped when dropped.
struct Cluster {
    dir: PathBuf,
    /// slurmctld's port; slurmd's and the two nodes' are the next three.
    port: u16,
}

impl Cluster {
    fn start(dir: PathBuf) -> Cluster {
        // Four consecutive free ports, away from the shared testbed's 17100-17113.
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        let port = (17200..17600)
            .step_by(10)
            .find(|&p| (p..p + 4).all(free))
            .expect("four free ports for the test's Slurm cluster");
        let cluster = Cluster { dir, port };
        assert!(cluster.up(), "starting the test's Slurm cluster");
        cluster
    }

    /// Starts what is down and waits for every node; false if it did not settle.
    fn up(&self) -> bool {
        Command::new(TESTBED)
            .args(["start", "--clusters", "1", "--nodes", "2", "--cpus", "8", "--port"])
            .arg(self.port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(TESTBED).args(["stop", "--dir"]).arg(&self.dir).status();
    }
}

/// A server process of the test, restartable on its fixed address.
struct Daemon {
    args: Vec<String>,
    dir: PathBuf,
    running: Option<common::Server>,
}

impl Daemon {
    fn new(dir: &Path, args: &[&str]) -> Daemon {
        let mut d = Daemon {
            args: args.iter().map(|a| a.to_string()).collect(),
            dir: dir.to_path_buf(),
            running: None,
        };
        d.start();
        d
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{}.log", self.args[2].replace('/', "_"))))
            .map(Stdio::from)
            .unwrap_or(Stdio::null());
        self.running = Some(common::spawn_listening(
            Command::new(env!("CARGO_BIN_EXE_brokk"))
                .args(&self.args)
                .current_dir(&self.dir)
                .stderr(log)
                .env("BROKK_LOG", "brokk_server=info,brokk_site=info"),
        ));
    }

    /// SIGKILL (the handle's drop), then a restart.
    fn kill(&mut self) {
        self.running = None;
    }
}

/// What an operator does after a controller crash: drained nodes resumed,
/// held jobs released.
fn operator(bed: &Path) {
    let conf = bed.join("c1/slurm.conf");
    let run = |args: &[&str]| {
        Command::new("scontrol")
            .args(args)
            .env("SLURM_CONF", &conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    };
    for node in ["c1n1", "c1n2"] {
        let _ = run(&["update", &format!("nodename={node}"), "state=resume"]);
    }
    let held = Command::new("squeue")
        .args(["-h", "-t", "PD", "-o", "%i %r"])
        .env("SLURM_CONF", &conf)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for line in held.lines().filter(|l| l.contains("held")) {
        if let Some(id) = line.split_whitespace().next() {
            let _ = run(&["release", id]);
        }
    }
}

#[test]
#[ignore = "starts a Slurm cluster of its own (root, Slurm and munge installed); scripts/test.sh runs it"]
fn jobs_end_exactly_once_while_broker_agents_and_slurmctld_are_killed() {
    let dir = common::scratch("chaos", "run");
    let cluster = Cluster::start(dir.join("slurm"));
    let bed = cluster.dir.clone();
    let ran = dir.join("ran.txt");
    let (p_broker, p_slurm, p_local) = (common::free_port(), common::free_port(), common::free_port());
    let site = format!("chaos{}", std::process::id());
    std::fs::create_dir_all(dir.join("hpc")).unwrap();
    std::fs::create_dir_all(dir.join("local")).unwrap();
    common::write_private(
        &dir.join("hpc/site.toml"),
        &format!(
            "name = \"{site}\"\nlisten = \"127.0.0.1:{p_slurm}\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n\
             [tokens]\n\"tok-broker\" = \"broker\"\n[slurm]\nconf = \"{}\"\n",
            bed.join("c1/slurm.conf").display()
        ),
    );
    common::write_private(
        &dir.join("local/site.toml"),
        &format!(
            "name = \"local\"\nlisten = \"127.0.0.1:{p_local}\"\ncapacity = 4\ndatabase = \"site.db\"\n\
             workdir = \"jobs\"\nkill_grace = 1\n[tokens]\n\"tok-broker\" = \"broker\"\n"
        ),
    );
    common::write_private(
        &dir.join("broker.toml"),
        &format!(
            "listen = \"127.0.0.1:{p_broker}\"\ndatabase = \"broker.db\"\nstate_dir = \"state\"\n\
             [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
             [[sites]]\nname = \"hpc\"\nurl = \"http://127.0.0.1:{p_slurm}\"\ntoken = \"tok-broker\"\n\
             [[sites]]\nname = \"local\"\nurl = \"http://127.0.0.1:{p_local}\"\ntoken = \"tok-broker\"\n"
        ),
    );
    let mut hpc = Daemon::new(&dir.join("hpc"), &["site", "--config", "site.toml"]);
    let mut local = Daemon::new(&dir.join("local"), &["site", "--config", "site.toml"]);
    let mut broker = Daemon::new(&dir, &["serve", "--config", "broker.toml"]);
    let url = format!("http://127.0.0.1:{p_broker}");

    // The users' stream: 40 jobs, each printing and recording its own tag.
    let submitter = {
        let (url, ran) = (url.clone(), ran.clone());
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
            let mut accepted = 0;
            for k in 0..40 {
                let user = if k % 2 == 0 { "ann" } else { "bob" };
                // A fresh tag per attempt: a retry after a lost answer is another job.
                for attempt in 0.. {
                    let tag = format!("{user}-{k}-{attempt}");
                    let job = json!({
                        "executable": "/bin/sh",
                        "arguments": ["-c", format!("echo {tag}; echo {tag} >> {}; sleep {}", ran.display(), rng.gen_range(0..3))],
                        "cpus": rng.gen_range(1..4), "wall_time": 60, "stdout": "tag.txt",
                    });
                    let r = http
                        .post(format!("{url}/v1/jobs"))
                        .bearer_auth(format!("tok-{user}"))
                        .json(&json!({ "description": job.to_string(), "format": "json" }))
                        .send();
                    if r.is_ok_and(|r| r.status().as_u16() == 202) {
                        accepted += 1;
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(300));
                }
                std::thread::sleep(Duration::from_millis(400));
            }
            accepted
        })
    };

    // The kills: seeded moments and targets, each restarted after a pause.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut kills: BTreeMap<&str, u32> = BTreeMap::new();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(rng.gen_range(800..3000)));
        let target = ["broker", "hpc agent", "local agent", "slurmctld"][rng.gen_range(0..4)];
        *kills.entry(target).or_default() += 1;
        match target {
            "broker" => broker.kill(),
            "hpc agent" => hpc.kill(),
            "local agent" => local.kill(),
            _ => {
                let pid = std::fs::read_to_string(bed.join("c1/run/slurmctld.pid")).unwrap();
                let _ = Command::new("kill").args(["-9", pid.trim()]).status();
            }
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(300..1500)));
        match target {
            "broker" => broker.start(),
            "hpc agent" => hpc.start(),
            "local agent" => local.start(),
            _ => {
                // The testbed's start waits for every node to settle and
                // resumes drained ones. A launch the kill interrupted also
                // holds its job, as on a real cluster; the operator's part
                // (resume, release) follows when a start does not settle.
                let up = (0..5).any(|_| {
                    let ok = cluster.up();
                    if !ok {
                        operator(&bed);
                    }
                    ok
                });
                assert!(up, "restarting slurmctld");
            }
        }
    }
    let accepted = submitter.join().unwrap();
    operator(&bed);

    // Every accepted job ends.
    let http = reqwest::blocking::Client::new();
    let list = |user: &str| -> Vec<Value> {
        http.get(format!("{url}/v1/jobs"))
            .bearer_auth(format!("tok-{user}"))
            .send()
            .and_then(|r| r.json::<Vec<Value>>())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    let jobs = loop {
        let all: Vec<Value> = list("ann").into_iter().chain(list("bob")).collect();
        let open: Vec<&Value> = all
            .iter()
            .filter(|j| !["finished", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or("")))
            .collect();
        if all.len() >= accepted && open.is_empty() {
            break all;
        }
        assert!(Instant::now() < deadline, "jobs never ended: {open:?}");
        std::thread::sleep(Duration::from_millis(500));
    };

    // Exactly once, with the true state.
    let lines: Vec<String> = std::fs::read_to_string(&ran)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    for l in &lines {
        assert!(seen.insert(l.clone()), "{l} ran twice");
    }
    let mut finished = 0;
    for j in &jobs {
        if j["state"] == "finished" {
            finished += 1;
            assert_eq!(j["exit_code"], 0, "{j}");
            let id = j["id"].as_str().unwrap();
            let owner = j["owner"].as_str().unwrap();
            let tag = http
                .get(format!("{url}/v1/jobs/{id}/files/tag.txt"))
                .bearer_auth(format!("tok-{owner}"))
                .send()
                .and_then(|r| r.text())
                .unwrap();
            assert!(
                seen.contains(tag.trim()),
                "{j} finished but its run was not recorded ({tag})"
            );
        }
    }
    let failed: Vec<&Value> = jobs.iter().filter(|j| j["state"] != "finished").collect();
    assert_eq!(
        lines.len(),
        finished,
        "{} runs recorded, {finished} jobs reported finished; the others: {failed:?}",
        lines.len()
    );
    // Nothing is left running: no supervisor, no Slurm job of the test's site.
    std::thread::sleep(Duration::from_secs(1));
    let leftovers = Command::new("pgrep")
        .args(["-f", &format!("supervise {}", dir.display())])
        .output()
        .unwrap();
    assert!(
        !leftovers.status.success(),
        "supervisors left: {}",
        String::from_utf8_lossy(&leftovers.stdout)
    );
    let queue = Command::new("squeue")
        .args(["-h", "-o", "%j"])
        .env("SLURM_CONF", bed.join("c1/slurm.conf"))
        .output()
        .unwrap();
    let queue = String::from_utf8_lossy(&queue.stdout);
    assert!(!queue.contains(&format!("brokk-{site}-")), "Slurm still holds: {queue}");
    eprintln!(
        "chaos: kills {kills:?}; {accepted} jobs accepted, {} listed, {finished} finished, {} failed or cancelled",
        jobs.len(),
        failed.len()
    );
    drop((broker, hpc, local, cluster));
}
