//! Two `brokk serve` on one database: one active, one standby. The active
//! one is killed (SIGKILL) again and again while two users submit (every
//! third job holding a reservation on its site before it is sent); each
//! time the standby takes over, clients that know both find it, and the
//! killed one comes back as the new standby. At the end every job the
//! broker accepted ended exactly once, and none ran twice.

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

    /// Whether it answers as the active broker.
    fn active(&self) -> bool {
        reqwest::blocking::Client::new()
            .get(format!("{}/healthz", self.url))
            .timeout(Duration::from_millis(500))
            .send()
            .is_ok_and(|r| r.status().is_success())
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
    let mut active = 0;
    let mut takeover = Vec::new();
    for _ in 0..KILLS {
        submit_some(10, &mut accepted);
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
            // Generous: one run in thirteen once saw a job end more than
            // 60 s after the last kill, behind holds a kill left at the site
            // (now written down and given back by the broker that takes
            // over); the exactly-once checks below are what matter.
            assert!(t.elapsed() < Duration::from_secs(180), "job {n} stuck: {j:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    for (n, _, _) in &accepted {
        let times = ran.lines().filter(|l| l.trim() == n.to_string()).count();
        assert_eq!(times, 1, "job {n} ran {times} times");
    }
    assert!(in_holds > 0, "no job ran in the reservation it held");
    let secs: Vec<String> = takeover.iter().map(|d| format!("{:.1}", d.as_secs_f64())).collect();
    eprintln!(
        "{} jobs accepted over {KILLS} kills of the active broker ({in_holds} ran in the holds they took); \
         takeovers after {} s (lease {LEASE_S} s)",
        accepted.len(),
        secs.join(", ")
    );
    drop(brokers);
    let _ = std::fs::remove_dir_all(dir);
}
