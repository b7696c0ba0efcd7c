//! Delegation between brokers ([DMM]), live: three `brokk serve`, each
//! with an embedded site of its own and the other two as sibling
//! neighbours (or, in one test, under a parent). A job its own broker
//! cannot start at once runs at a neighbour's site and is followed (and
//! its output fetched) where it was submitted; a neighbour that cannot
//! take it rejects it; a job cannot come back along its own path; a
//! neighbour that is down is skipped; a job passes through a parent to the
//! child below it, and every broker of the chain follows it to its end.

use std::path::PathBuf;
use std::time::Duration;

mod common;

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

/// The three brokers, each on a port fixed before any starts.
struct Ring {
    dir: PathBuf,
    ports: [u16; 3],
    servers: Vec<Option<common::Server>>,
}

/// How broker `k` (the row) sees broker `o` (the column), if linked.
type Links = [[Option<&'static str>; 3]; 3];

/// Every broker the others' sibling.
const SIBLINGS: Links = [
    [None, Some("sibling"), Some("sibling")],
    [Some("sibling"), None, Some("sibling")],
    [Some("sibling"), Some("sibling"), None],
];

impl Ring {
    /// Brokers whose own sites have `cpus` slots each, with `extra` at the
    /// end of each configuration, all siblings.
    fn new(name: &str, cpus: [u32; 3], extra: &str) -> Ring {
        Ring::linked(name, cpus, extra, SIBLINGS)
    }

    /// As [`Ring::new`], linked as `links` says.
    fn linked(name: &str, cpus: [u32; 3], extra: &str, links: Links) -> Ring {
        let dir = common::scratch("delegation", name);
        let ports = [common::free_port(), common::free_port(), common::free_port()];
        for (k, me) in NAMES.iter().enumerate() {
            let d = dir.join(me);
            std::fs::create_dir_all(&d).unwrap();
            let others: Vec<usize> = (0..3).filter(|&o| o != k).collect();
            let mut config = format!(
                "name = \"{me}\"\nlisten = \"127.0.0.1:{}\"\ndatabase = \"broker.db\"\nstate_dir = \"sites\"\n\
                 info_ttl_ms = 0\ndelegates = [\"{}\", \"{}\"]\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n",
                ports[k], NAMES[others[0]], NAMES[others[1]]
            );
            for &o in &others {
                config += &format!("\"tok-{}\" = \"{}\"\n", NAMES[o], NAMES[o]);
            }
            for &o in &others {
                let Some(relation) = links[k][o] else { continue };
                config += &format!(
                    "[[sites]]\nname = \"{}\"\nurl = \"http://127.0.0.1:{}/site\"\ntoken = \"tok-{me}\"\nneighbour = \"{relation}\"\n",
                    NAMES[o], ports[o]
                );
            }
            config += &format!("[[embedded]]\nname = \"{me}-a\"\ncapacity = {}\n{extra}", cpus[k]);
            std::fs::write(d.join("broker.toml"), config).unwrap();
        }
        let servers = NAMES.iter().map(|n| Some(common::serve(&dir.join(n)))).collect();
        Ring { dir, ports, servers }
    }

    fn url(&self, k: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[k])
    }

    /// Submits `script` (one slot, up to a minute) at broker `k` for ann.
    fn submit(&self, k: usize, file: &str, script: &str) -> String {
        let text = format!(
            r#"{{"executable": "/bin/sh", "arguments": ["-c", "{script}"], "wall_time": 120, "stdout": "out.txt"}}"#
        );
        let path = self.dir.join(file);
        std::fs::write(&path, text).unwrap();
        let sub = common::json(&self.url(k), "tok-ann", &["submit", "--json", path.to_str().unwrap()]);
        sub["id"].as_str().unwrap_or_else(|| panic!("{sub}")).to_string()
    }

    fn status(&self, k: usize, id: &str) -> serde_json::Value {
        common::json(&self.url(k), "tok-ann", &["status", "--json", id])
    }

    /// Waits until `id` at broker `k` is running somewhere.
    fn running(&self, k: usize, id: &str) -> serde_json::Value {
        common::wait_for_state(&self.url(k), "tok-ann", id, "running", Duration::from_secs(60));
        self.status(k, id)
    }

    fn metric(&self, k: usize, name: &str) -> u64 {
        let text = reqwest::blocking::get(format!("{}/metrics", self.url(k)))
            .unwrap()
            .text()
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{text}"))
    }
}

fn delegations(kind: &str) -> String {
    format!("brokk_delegations_total{{kind=\"{kind}\"}}")
}

/// Waits until every broker answers.
fn all_up(ring: &Ring) {
    for (k, name) in NAMES.iter().enumerate() {
        let t = std::time::Instant::now();
        while !common::brokk(&ring.url(k), "tok-ann", &["resources"]).status.success() {
            assert!(t.elapsed() < Duration::from_secs(20), "{name} does not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn a_job_its_broker_cannot_start_runs_at_a_neighbour_and_comes_back() {
    let ring = Ring::new("through", [1, 2, 2], "");
    all_up(&ring);
    // alpha's one slot is taken; the next job would wait there.
    let holder = ring.submit(0, "holder.json", "sleep 60");
    assert_eq!(ring.running(0, &holder)["site"], "alpha-a");
    let id = ring.submit(0, "away.json", "echo delegated; id -un > /dev/null");
    let end = common::wait_ended(&ring.url(0), "tok-ann", &id, Duration::from_secs(60));
    assert_eq!(end["state"], "finished", "{end}");
    // Both siblings have two free slots: the tie goes by name.
    assert_eq!(end["site"], "beta", "{end}");
    assert_eq!(common::output(&ring.url(0), "tok-ann", &id, "out.txt"), "delegated\n");
    // At beta the job is alpha's, run for ann at beta's own site, with
    // the path it came by.
    let below = end["site_job"].as_str().unwrap();
    let there = common::json(&ring.url(1), "tok-alpha", &["status", "--json", below]);
    assert_eq!(
        (&there["owner"], &there["runs_as"], &there["site"]),
        (&"alpha".into(), &"ann".into(), &"beta-a".into()),
        "{there}"
    );
    assert_eq!(there["delegated"]["path"], serde_json::json!(["alpha"]), "{there}");
    // Each end says so.
    let said = |k: usize, token: &str, id: &str| {
        String::from_utf8_lossy(&common::brokk(&ring.url(k), token, &["status", id]).stdout).to_string()
    };
    let home = said(0, "tok-ann", &id);
    assert!(
        home.contains("delegated to beta, a neighbouring broker (path alpha → beta)"),
        "{home}"
    );
    let away = said(1, "tok-alpha", below);
    assert!(away.contains("delegated here along alpha"), "{away}");
    // Nobody else sees it: not bob at alpha, not ann herself at beta.
    assert!(!common::brokk(&ring.url(0), "tok-bob", &["status", &id])
        .status
        .success());
    assert!(!common::brokk(&ring.url(1), "tok-ann", &["status", below])
        .status
        .success());
    assert_eq!(ring.metric(0, &delegations("accepted")), 1);
    assert_eq!(ring.metric(1, &delegations("taken")), 1);
    let _ = common::brokk(&ring.url(0), "tok-ann", &["cancel", &holder]);
}

/// [DMM]'s hierarchy: gamma is the parent of alpha and beta, which are
/// not linked to each other. alpha's site is full and so is gamma's: the
/// job goes up to gamma, which cannot start it but passes it down to beta,
/// a chain of three; its output comes back along it, and each broker of
/// the chain sees its end. A job cancelled at alpha is cancelled along
/// the chain.
#[test]
fn a_job_passes_through_the_parent_to_a_child_with_room_and_ends_along_the_chain() {
    let tree: Links = [
        [None, None, Some("parent")],
        [None, None, Some("parent")],
        [Some("child"), Some("child"), None],
    ];
    let ring = Ring::linked("tree", [1, 2, 1], "", tree);
    all_up(&ring);
    let holders: Vec<(usize, String)> = [0, 2]
        .into_iter()
        .map(|k| (k, ring.submit(k, &format!("holder-{k}.json"), "sleep 60")))
        .collect();
    for (k, h) in &holders {
        ring.running(*k, h);
    }
    let id = ring.submit(0, "down.json", "echo two hops");
    let end = common::wait_ended(&ring.url(0), "tok-ann", &id, Duration::from_secs(60));
    assert_eq!(
        (&end["state"], &end["site"]),
        (&"finished".into(), &"gamma".into()),
        "{end}"
    );
    assert_eq!(common::output(&ring.url(0), "tok-ann", &id, "out.txt"), "two hops\n");
    // At gamma, alpha's job went on to beta with the path so far.
    let at_gamma = end["site_job"].as_str().unwrap();
    let mid = common::wait_ended(&ring.url(2), "tok-alpha", at_gamma, Duration::from_secs(30));
    assert_eq!(
        (&mid["state"], &mid["site"], &mid["delegated"]["path"]),
        (&"finished".into(), &"beta".into(), &serde_json::json!(["alpha"])),
        "{mid}"
    );
    // At beta it is gamma's, for ann, having come along alpha and gamma.
    let at_beta = mid["site_job"].as_str().unwrap();
    let low = common::wait_ended(&ring.url(1), "tok-gamma", at_beta, Duration::from_secs(30));
    assert_eq!(
        (&low["state"], &low["owner"], &low["runs_as"], &low["site"]),
        (&"finished".into(), &"gamma".into(), &"ann".into(), &"beta-a".into()),
        "{low}"
    );
    assert_eq!(low["delegated"]["path"], serde_json::json!(["alpha", "gamma"]), "{low}");
    assert_eq!(ring.metric(2, &delegations("taken")), 1);
    assert_eq!(ring.metric(2, &delegations("accepted")), 1);
    assert_eq!(ring.metric(1, &delegations("taken")), 1);
    // A job cancelled where it was submitted is let go all along the
    // chain: what it held at beta's site is free again.
    let long = ring.submit(0, "long.json", "sleep 60");
    let away = ring.running(0, &long);
    assert_eq!(away["site"], "gamma", "{away}");
    assert!(common::brokk(&ring.url(0), "tok-ann", &["cancel", &long])
        .status
        .success());
    let end = common::wait_ended(&ring.url(0), "tok-ann", &long, Duration::from_secs(30));
    assert_eq!(end["state"], "cancelled", "{end}");
    let at_gamma = away["site_job"].as_str().unwrap();
    let mid = common::wait_ended(&ring.url(2), "tok-alpha", at_gamma, Duration::from_secs(30));
    assert_eq!(mid["state"], "cancelled", "{mid}");
    let at_beta = mid["site_job"].as_str().unwrap();
    let low = common::wait_ended(&ring.url(1), "tok-gamma", at_beta, Duration::from_secs(30));
    assert_eq!(low["state"], "cancelled", "{low}");
    for (k, h) in &holders {
        let _ = common::brokk(&ring.url(*k), "tok-ann", &["cancel", h]);
    }
}

/// Parent links that form a cycle (alpha's parent gamma, gamma's beta,
/// beta's alpha; each configuration alone is valid) are found from the
/// chains of parents the brokers publish: each names the cycle in its log,
/// and no job goes up a parent link, so a job at a full alpha waits at
/// home.
#[test]
fn parent_links_that_form_a_cycle_are_named_and_not_used() {
    let cycle: Links = [
        [None, None, Some("parent")],
        [Some("parent"), None, None],
        [None, Some("parent"), None],
    ];
    let ring = Ring::linked("cycle", [1, 2, 2], "", cycle);
    all_up(&ring);
    let log = |k: usize| std::fs::read_to_string(ring.dir.join(NAMES[k]).join("service.log")).unwrap_or_default();
    let found = |k: usize| log(k).contains("parent links form a cycle");
    let t = std::time::Instant::now();
    while !(0..3).all(found) {
        let missing: Vec<&str> = (0..3).filter(|&k| !found(k)).map(|k| NAMES[k]).collect();
        assert!(t.elapsed() < Duration::from_secs(30), "no cycle found at {missing:?}");
        // Each request for resources makes the brokers read their parents.
        for k in 0..3 {
            let _ = common::brokk(&ring.url(k), "tok-ann", &["resources"]);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(log(0).contains("alpha → gamma → beta → alpha"), "{}", log(0));
    let holder = ring.submit(0, "holder.json", "sleep 5");
    ring.running(0, &holder);
    let id = ring.submit(0, "home.json", "echo home");
    let end = common::wait_ended(&ring.url(0), "tok-ann", &id, Duration::from_secs(60));
    assert_eq!(
        (&end["state"], &end["site"]),
        (&"finished".into(), &"alpha-a".into()),
        "{end}"
    );
    assert_eq!(ring.metric(0, &delegations("accepted")), 0);
    let _ = common::brokk(&ring.url(0), "tok-ann", &["cancel", &holder]);
}

#[test]
fn full_neighbours_reject_and_the_job_stays_home() {
    // One hop: a neighbour cannot pass the job on.
    let ring = Ring::new("full", [1, 1, 1], "[delegation]\nttl = 1\n");
    all_up(&ring);
    let holders: Vec<(usize, String)> = (0..3)
        .map(|k| (k, ring.submit(k, &format!("holder-{k}.json"), "sleep 60")))
        .collect();
    for (k, h) in &holders {
        assert_eq!(ring.running(*k, h)["site"], format!("{}-a", NAMES[*k]));
    }
    // Every broker is full: beta and gamma reject alpha's job (neither
    // can start it, nor pass it on), and it waits at alpha's own site.
    let id = ring.submit(0, "stays.json", "echo home");
    let t = std::time::Instant::now();
    while ring.metric(0, &delegations("rejected")) < 2 {
        assert!(t.elapsed() < Duration::from_secs(30), "not rejected twice");
        std::thread::sleep(Duration::from_millis(100));
    }
    let t = std::time::Instant::now();
    let v = loop {
        let v = ring.status(0, &id);
        if v["site"].is_string() || t.elapsed() > Duration::from_secs(30) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v["site"], "alpha-a", "{v}");
    assert_eq!(ring.metric(1, &delegations("refused")), 1);
    assert_eq!(ring.metric(2, &delegations("refused")), 1);
    for (k, h) in &holders {
        let _ = common::brokk(&ring.url(*k), "tok-ann", &["cancel", h]);
    }
}

#[test]
fn a_job_cannot_come_back_along_its_path_and_a_bad_delegation_is_refused() {
    let ring = Ring::new("loop", [2, 2, 2], "");
    all_up(&ring);
    let http = reqwest::blocking::Client::new();
    let post = |header: &str| {
        let r = http
            .post(format!("{}/site/v1/jobs", ring.url(1)))
            .bearer_auth("tok-alpha")
            .header("On-Behalf-Of", "ann")
            .header("Brokk-Delegation", header)
            .json(&serde_json::json!({"executable": "/bin/true", "wall_time": 60}))
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    // beta is on the path already: refused however free it is.
    let (status, body) = post("ttl=3; path=alpha,beta");
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("loop"), "{body}");
    for bad in ["ttl=x; path=alpha", "path=alpha", "ttl=1; path=al pha"] {
        let (status, body) = post(bad);
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains("Brokk-Delegation"), "{bad}: {body}");
    }
    // A proper one is taken.
    assert_eq!(post("ttl=3; path=alpha").0, 201);
    // The same delegation sent again (a sender that did not hear the
    // answer) is the job it made, not a second one.
    let replay = || {
        let r = http
            .post(format!("{}/site/v1/jobs", ring.url(1)))
            .bearer_auth("tok-alpha")
            .header("On-Behalf-Of", "ann")
            .header("Brokk-Delegation", "ttl=3; path=alpha")
            .header("Idempotency-Key", "alpha-job-7")
            .json(&serde_json::json!({"executable": "/bin/true", "wall_time": 60}))
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json::<serde_json::Value>().unwrap()["id"].clone())
    };
    let (first, id) = replay();
    let (again, same) = replay();
    assert_eq!((first, again), (201, 200));
    assert_eq!(id, same);
    // Only a delegate reaches the site API: ann's own token does not.
    let r = http
        .post(format!("{}/site/v1/jobs", ring.url(1)))
        .bearer_auth("tok-ann")
        .header("Brokk-Delegation", "ttl=3; path=alpha")
        .json(&serde_json::json!({"executable": "/bin/true"}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
}

#[test]
fn a_neighbour_that_is_down_is_skipped() {
    let mut ring = Ring::new("down", [1, 2, 2], "");
    all_up(&ring);
    // beta, first by name, is gone.
    ring.servers[1] = None;
    let holder = ring.submit(0, "holder.json", "sleep 60");
    ring.running(0, &holder);
    let id = ring.submit(0, "away.json", "echo around");
    let end = common::wait_ended(&ring.url(0), "tok-ann", &id, Duration::from_secs(60));
    assert_eq!(
        (&end["state"], &end["site"]),
        (&"finished".into(), &"gamma".into()),
        "{end}"
    );
    let _ = common::brokk(&ring.url(0), "tok-ann", &["cancel", &holder]);
}

#[test]
fn a_delegating_broker_killed_while_its_job_runs_away_loses_nothing_and_runs_nothing_twice() {
    let mut ring = Ring::new("restart", [1, 2, 2], "");
    all_up(&ring);
    let holder = ring.submit(0, "holder.json", "sleep 60");
    ring.running(0, &holder);
    let id = ring.submit(0, "away.json", "sleep 3; echo survived");
    let away = ring.running(0, &id);
    assert_eq!(away["site"], "beta", "{away}");
    // alpha dies (dropping its server is SIGKILL) while the job runs at
    // beta, and comes back.
    drop(ring.servers[0].take());
    ring.servers[0] = Some(common::serve(&ring.dir.join("alpha")));
    let end = common::wait_ended(&ring.url(0), "tok-ann", &id, Duration::from_secs(60));
    assert_eq!(
        (&end["state"], &end["site"]),
        (&"finished".into(), &"beta".into()),
        "{end}"
    );
    assert_eq!(common::output(&ring.url(0), "tok-ann", &id, "out.txt"), "survived\n");
    // At beta alpha has exactly that job: nothing was sent twice.
    let mine = common::json(&ring.url(1), "tok-alpha", &["status", "--json"]);
    let jobs = mine.as_array().unwrap_or_else(|| panic!("{mine}"));
    assert_eq!(jobs.len(), 1, "{mine}");
    // Nor does beta's own token read alpha's jobs at alpha.
    assert!(!common::brokk(&ring.url(0), "tok-beta", &["status", &id])
        .status
        .success());
    let _ = common::brokk(&ring.url(0), "tok-ann", &["cancel", &holder]);
}

#[test]
fn a_neighbourhood_that_cannot_be_is_refused_at_start_naming_why() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::scratch("delegation", "bad-config");
    let neighbour = |name: &str, relation: &str| {
        format!("[[sites]]\nname = \"{name}\"\nurl = \"http://127.0.0.1:9/site\"\ntoken = \"t\"\nneighbour = \"{relation}\"\n")
    };
    let base = "name = \"alpha\"\ndatabase = \"broker.db\"\n[tokens]\n\"tok-ann\" = \"ann\"\n";
    for (body, says) in [
        (
            neighbour("up1", "parent") + &neighbour("up2", "parent"),
            "one parent at most",
        ),
        (neighbour("alpha", "sibling"), "this broker's own name"),
        (neighbour("beta", "cousin"), "cousin"),
        (
            neighbour("beta", "sibling") + "[delegation]\nthreshold_s = -5\n",
            "threshold_s",
        ),
    ] {
        let path = dir.join("broker.toml");
        std::fs::write(&path, format!("{base}{body}")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["serve", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{says}: {err}");
    }
}
