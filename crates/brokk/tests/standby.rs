//! Two `brokk serve` on one database: one active, one standby. The active
//! one is killed (SIGKILL) again and again while two users submit (every
//! third job holding a reservation on its site before it is sent), one
//! admits a workflow and the other makes a reservation and runs a job in
//! it, each round; each time the standby takes over, clients that know
//! both find it, and the killed one comes back as the new standby. At the
//! end every job the broker accepted ended exactly once and none ran
//! twice, and every workflow it admitted finished.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use brokk_proto::broker::BrokerClient;
use brokk_proto::wire::{BrokerState, SubmitRequest};

/// Seconds a silent active broker keeps the lease.
const LEASE_S: u64 = 2;
/// Kills of the active broker.
const KILLS: usize = 4;

/// One of the two brokers: its configuration and, while it runs, its process.
struct Broker {
    config: PathBuf,
    url: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Broker {
    fn new(dir: &Path, name: &str, database: &str) -> Broker {
        let port = common::free_port();
        let url = format!("http://127.0.0.1:{port}");
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:{port}\"\ndatabase = \"{database}\"\nstate_dir = \"{}\"\n\
                 [standby]\nurl = \"{url}\"\nlease_s = {LEASE_S}\n\
                 [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
                 [[embedded]]\nname = \"local\"\ncapacity = 8\n",
                dir.join("sites").display()
            ),
        )
        .unwrap();
        Broker {
            config,
            url,
            log: dir.join(format!("{name}.log")),
            child: None,
        }
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_brokk"))
                .args(["serve", "--config"])
                .arg(&self.config)
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .env("BROKK_LOG", "brokk_server=info")
                .spawn()
                .unwrap(),
        );
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether it answers as the active broker (a standby is alive too,
    /// and says so).
    fn active(&self) -> bool {
        reqwest::blocking::Client::new()
            .get(format!("{}/healthz", self.url))
            .timeout(Duration::from_millis(500))
            .send()
            .is_ok_and(|r| r.status().is_success() && r.text().is_ok_and(|t| !t.contains("standby")))
    }

    /// What it answers as the standby: the active broker's URL.
    fn names_active(&self) -> Option<String> {
        let r = reqwest::blocking::Client::new()
            .get(format!("{}/v1/jobs", self.url))
            .bearer_auth("tok-ann")
            .timeout(Duration::from_millis(500))
            .send()
            .ok()?;
        (r.status().as_u16() == 503).then_some(())?;
        r.json::<serde_json::Value>().ok()?["active"]
            .as_str()
            .map(str::to_string)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

#[test]
fn the_standby_takes_over_each_time_the_active_broker_is_killed() {
    let dir = common::scratch("standby", "sqlite");
    takeovers(&dir, &dir.join("broker.db").display().to_string());
}

/// The same on PostgreSQL, when the test script provides one: in its
/// database `brokk_test_standby`, since the crash test uses the other at
/// the same time.
#[test]
#[ignore = "needs PostgreSQL; scripts/test.sh starts one and runs this"]
fn the_standby_takes_over_on_postgresql() {
    let url = std::env::var("BROKK_TEST_POSTGRES").expect("BROKK_TEST_POSTGRES: scripts/test.sh starts PostgreSQL");
    let url = format!("{}_standby", url.trim_end_matches('/'));
    takeovers(&common::scratch("standby", "postgresql"), &url);
}

fn takeovers(dir: &Path, database: &str) {
    let runs = dir.join("ran.log");
    let mut brokers = [Broker::new(dir, "a", database), Broker::new(dir, "b", database)];
    brokers[0].start();
    wait_until("the first broker is active", Duration::from_secs(30), || {
        brokers[0].active()
    });
    brokers[1].start();
    wait_until(
        "the second broker answers as the standby",
        Duration::from_secs(30),
        || brokers[1].names_active().as_deref() == Some(brokers[0].url.as_str()),
    );
    // The standby is alive, as a liveness probe asks, but not ready for work.
    let probe = |url: &str, path: &str| {
        let r = reqwest::blocking::get(format!("{url}{path}")).unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let (alive, said) = probe(&brokers[1].url, "/healthz");
    assert_eq!(alive, 200, "{said}");
    assert!(said.contains("standby"), "{said}");
    assert_eq!(probe(&brokers[1].url, "/readyz").0, 503);
    let both = format!("{},{}", brokers[1].url, brokers[0].url);
    let users = [BrokerClient::new(&both, "tok-ann"), BrokerClient::new(&both, "tok-bob")];
    let mut accepted = Vec::new();
    let mut n = 0;
    let mut submit_some = |count: usize, accepted: &mut Vec<(usize, String, usize)>| {
        for _ in 0..count {
            let who = n % 2;
            let description = format!(
                r#"{{"executable": "/bin/sh", "arguments": ["-c", "echo {n} >> {}"], "wall_time": 60}}"#,
                runs.display()
            );
            // Every third job holds a reservation first (`--reserve`): a
            // kill may fall between its hold and its send.
            let preferences = (n % 3 == 0).then(|| brokk_model::JobPreferences {
                use_reservations: Some(true),
                ..Default::default()
            });
            let rq = SubmitRequest {
                description,
                format: Some("json".into()),
                preferences,
                ..Default::default()
            };
            // Refused while no broker is active: the user tries again.
            let t = Instant::now();
            loop {
                match users[who].submit(&rq) {
                    Ok(a) => {
                        accepted.push((n, a.id, who));
                        break;
                    }
                    Err(e) => {
                        assert!(t.elapsed() < Duration::from_secs(60), "no broker took job {n}: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
            n += 1;
        }
    };
    // Each round ann's workflow of two tasks, one after the other, and a
    // reservation of bob's with a job in it; each retried until a broker
    // answers (a repeat after a lost answer is a workflow or reservation of
    // its own, run under its own marks, and not followed here).
    let mut workflows: Vec<(String, String)> = Vec::new();
    let mut in_reservations: Vec<(String, String)> = Vec::new();
    let extras = |round: usize, workflows: &mut Vec<(String, String)>, in_reservations: &mut Vec<(String, String)>| {
        let t = Instant::now();
        for attempt in 0.. {
            let task = |k: usize| brokk_model::workflow::Task {
                id: format!("t{k}"),
                job: Some(brokk_model::Job {
                    executable: Some("/bin/sh".into()),
                    arguments: vec![
                        "-c".into(),
                        format!("echo w{round}.{attempt}.{k} >> {}", runs.display()),
                    ],
                    wall_time: Some(brokk_model::Duration(60)),
                    ..Default::default()
                }),
                runtime: brokk_model::Duration(60),
                cores: 1,
                ..Default::default()
            };
            let wf = brokk_model::workflow::Workflow {
                name: format!("w{round}"),
                tasks: vec![task(0), task(1)],
                edges: vec![brokk_model::workflow::Edge {
                    parent: "t0".into(),
                    child: "t1".into(),
                    bytes: 0,
                }],
                deadline: Some(brokk_proto::wall_clock() + brokk_model::Duration(3600)),
                ..Default::default()
            };
            let rq = brokk_proto::wire::WorkflowRequest {
                workflow: wf,
                scheduler: None,
                uploads: Default::default(),
            };
            match users[0].submit_workflow(&rq) {
                Ok(Ok(v)) => {
                    workflows.push((v.id, format!("w{round}.{attempt}")));
                    break;
                }
                Ok(Err(refused)) => panic!("workflow {round} refused: {refused:?}"),
                Err(e) => {
                    assert!(
                        t.elapsed() < Duration::from_secs(60),
                        "no broker took workflow {round}: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        let t = Instant::now();
        let r = loop {
            let now = brokk_proto::wall_clock();
            let rq = brokk_proto::wire::BrokerReservationRequest {
                amount: 1,
                duration: brokk_model::Duration(60),
                earliest: now,
                latest: now + brokk_model::Duration(600),
            };
            match users[1].reserve(&rq) {
                Ok(r) => break r,
                Err(e) => {
                    assert!(
                        t.elapsed() < Duration::from_secs(60),
                        "no broker took reservation {round}: {e}"
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        };
        let mark = format!("r{round}");
        let rq = SubmitRequest {
            description: format!(
                r#"{{"executable": "/bin/sh", "arguments": ["-c", "echo {mark} >> {}"], "wall_time": 50, "reservation": "{}"}}"#,
                runs.display(),
                r.id
            ),
            format: Some("json".into()),
            ..Default::default()
        };
        let t = Instant::now();
        loop {
            match users[1].submit(&rq) {
                Ok(a) => {
                    in_reservations.push((mark, a.id));
                    break;
                }
                Err(e) => {
                    assert!(t.elapsed() < Duration::from_secs(60), "no broker took {mark}: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    };
    let mut active = 0;
    let mut takeover = Vec::new();
    for round in 0..KILLS {
        submit_some(10, &mut accepted);
        extras(round, &mut workflows, &mut in_reservations);
        brokers[active].kill();
        let killed = Instant::now();
        let next = 1 - active;
        // Users keep submitting while the standby waits for the lease.
        submit_some(3, &mut accepted);
        wait_until("the standby takes over", Duration::from_secs(60), || {
            brokers[next].active()
        });
        takeover.push(killed.elapsed());
        brokers[active].start();
        let new_active = brokers[next].url.clone();
        wait_until(
            "the killed broker comes back as the standby",
            Duration::from_secs(30),
            || brokers[active].names_active().as_deref() == Some(new_active.as_str()),
        );
        active = next;
    }
    submit_some(10, &mut accepted);

    // Every accepted job ends exactly once, wherever it was when a broker died.
    let mut in_holds = 0;
    for (n, id, who) in &accepted {
        let t = Instant::now();
        loop {
            let j = users[*who].job(id).unwrap_or_else(|e| panic!("job {n} ({id}): {e}"));
            if j.state().is_terminal() {
                assert_eq!(j.state(), BrokerState::Finished, "job {n}: {j:?}");
                let ends = j.history.iter().filter(|h| h.state.is_terminal()).count();
                assert_eq!(ends, 1, "job {n} ended {ends} times: {j:?}");
                let sent = j.history.iter().find(|h| h.state == BrokerState::Dispatched);
                in_holds += usize::from(
                    sent.and_then(|h| h.detail.as_deref())
                        .is_some_and(|d| d.contains("in reservation")),
                );
                break;
            }
            // Generous: a job whose hold the site could only place after
            // the jobs before it (their 60 s wall times) runs when its hold
            // starts, a minute later (a reservation does not move up; seen
            // on PostgreSQL, where the jobs arrive closer together); holds a
            // kill leaves are given back by the broker that takes over. The
            // exactly-once checks below are what matter.
            assert!(t.elapsed() < Duration::from_secs(180), "job {n} stuck: {j:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Every admitted workflow finished, each task's job ending once; every
    // job in a reservation ended once.
    let ends_once = |user: &BrokerClient, id: &str| {
        let t = Instant::now();
        loop {
            let j = user.job(id).unwrap_or_else(|e| panic!("{id}: {e}"));
            if j.state().is_terminal() {
                assert_eq!(j.state(), BrokerState::Finished, "{j:?}");
                let ends = j.history.iter().filter(|h| h.state.is_terminal()).count();
                assert_eq!(ends, 1, "{id} ended {ends} times: {j:?}");
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(180), "{id} stuck: {j:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    for (id, _) in &workflows {
        let t = Instant::now();
        let w = loop {
            let w = users[0].workflow(id).unwrap_or_else(|e| panic!("workflow {id}: {e}"));
            if w.state != brokk_proto::wire::WorkflowState::Running {
                break w;
            }
            assert!(t.elapsed() < Duration::from_secs(180), "workflow {id} stuck: {w:?}");
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(w.state, brokk_proto::wire::WorkflowState::Finished, "{w:?}");
        for task in &w.tasks {
            ends_once(&users[0], &task.job);
        }
    }
    for (_, id) in &in_reservations {
        ends_once(&users[1], id);
    }
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    for (n, _, _) in &accepted {
        let times = ran.lines().filter(|l| l.trim() == n.to_string()).count();
        assert_eq!(times, 1, "job {n} ran {times} times");
    }
    for (mark, _) in &in_reservations {
        let times = ran.lines().filter(|l| l.trim() == mark).count();
        assert_eq!(times, 1, "{mark} ran {times} times");
    }
    // Each task of an admitted workflow ran once, under the marks of the
    // attempt that was admitted (w{round}.{attempt}.{task}).
    for (_, marks) in &workflows {
        for k in 0..2 {
            let mark = format!("{marks}.{k}");
            let times = ran.lines().filter(|l| l.trim() == mark).count();
            assert_eq!(times, 1, "{mark} ran {times} times");
        }
    }
    assert!(in_holds > 0, "no job ran in the reservation it held");
    let secs: Vec<String> = takeover.iter().map(|d| format!("{:.1}", d.as_secs_f64())).collect();
    eprintln!(
        "{} jobs accepted over {KILLS} kills of the active broker ({in_holds} ran in the holds they took), \
         {} workflows and {} jobs in reservations; takeovers after {} s (lease {LEASE_S} s)",
        accepted.len(),
        workflows.len(),
        in_reservations.len(),
        secs.join(", ")
    );
    drop(brokers);
    let _ = std::fs::remove_dir_all(dir);
}
