//! Workflows end to end: `brokk workflow submit` to a real `brokk serve`
//! with embedded sites, admitted against a deadline, every task run in its
//! reservation with its parents' outputs; refusals that leave nothing
//! reserved; DAGMan's RETRY; failures and cancels that give back what is
//! left.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

/// The example: a diamond and a fan-out of ten nodes in four languages.
const PIPELINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/workflows/pipeline/pipeline.dag"
);

/// A broker with two embedded sites, north (4 processors) and south (2),
/// where one user may reserve a whole site (the tests' workflows do).
fn broker(name: &str) -> (PathBuf, common::Server) {
    broker_with(name, "", "")
}

/// [`broker`] with `limits` added to its `[limits]` table and `workflows`
/// in its `[workflows]` table.
fn broker_with(name: &str, limits: &str, workflows: &str) -> (PathBuf, common::Server) {
    let dir = common::scratch("workflows", name);
    std::fs::write(
        dir.join("broker.toml"),
        format!(
            "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
             [limits]\nreserved_share = 1.0\n{limits}\n[workflows]\n{workflows}\n\
             [[embedded]]\nname = \"north\"\ncapacity = 4\n[[embedded]]\nname = \"south\"\ncapacity = 2\n"
        ),
    )
    .unwrap();
    let server = common::serve(&dir);
    (dir, server)
}

/// `brokk workflow ARGS... --json` as `token`: its exit status and what it printed.
fn workflow(url: &str, token: &str, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["workflow"];
    all.extend_from_slice(args);
    all.push("--json");
    let o = common::brokk(url, token, &all);
    let printed = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.code().unwrap_or(-1), printed)
}

/// Polls the workflow until it leaves `running` (at most two minutes).
fn until_ended(url: &str, id: &str) -> Value {
    let t = Instant::now();
    loop {
        let (_, w) = workflow(url, "tok-ann", &["status", id]);
        if w["state"] != "running" {
            return w;
        }
        assert!(t.elapsed() < Duration::from_secs(120), "still running: {w:#}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn secs(v: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}")))
        .unwrap()
        .timestamp()
}

/// Writes a DAGMan file and its HTCondor node files (`name -> (command, reads, writes)`).
fn write_dag(dir: &Path, text: &str, nodes: &[(&str, &str, &str, &str)]) -> PathBuf {
    for (name, command, reads, writes) in nodes {
        let mut sub = format!("executable = /bin/sh\narguments = \"-c '{command}'\"\nallowed_job_duration = 120\n");
        if !reads.is_empty() {
            sub += &format!("transfer_input_files = {reads}\n");
        }
        if !writes.is_empty() {
            sub += &format!("transfer_output_files = {writes}\n");
        }
        sub += "queue\n";
        std::fs::write(dir.join(format!("{name}.sub")), sub).unwrap();
    }
    let path = dir.join("flow.dag");
    std::fs::write(&path, text).unwrap();
    path
}

/// Gives each node's submit file of `nodes` its processors, and each a
/// booked length of `booked` seconds.
fn size(dir: &Path, nodes: &[(&str, u32)], booked: u32) {
    for (node, cpus) in nodes {
        let p = dir.join(format!("{node}.sub"));
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace(
                "allowed_job_duration = 120",
                &format!("allowed_job_duration = {booked}"),
            )
            .replace("queue", &format!("request_cpus = {cpus}\nqueue"));
        std::fs::write(&p, text).unwrap();
    }
}

/// Two tasks as wide as each site (north 4, south 2): a workflow of them
/// due in a few minutes fits only if both sites are wholly free now.
fn whole_sites(dir: &Path) -> PathBuf {
    let path = write_dag(
        dir,
        "JOB wide north.sub\nJOB narrow south.sub\n",
        &[("north", "true", "", ""), ("south", "true", "", "")],
    );
    size(dir, &[("north", 4), ("south", 2)], 120);
    path
}

/// Each task's reservation as the broker reports it, by task.
fn tasks(w: &Value) -> Vec<Value> {
    w["tasks"]
        .as_array()
        .unwrap_or_else(|| panic!("no tasks: {w:#}"))
        .clone()
}

#[test]
fn a_ten_node_workflow_in_four_languages_runs_in_its_reservations() {
    let (_dir, svc) = broker("pipeline");
    let url = &svc.url;
    let dag = PIPELINE;
    let (code, admitted) = workflow(url, "tok-ann", &["submit", dag, "--deadline", "2h"]);
    assert_eq!(code, 0, "{admitted:#}");
    let id = admitted["id"].as_str().unwrap().to_string();
    assert_eq!(tasks(&admitted).len(), 10);
    let deadline = secs(&admitted["deadline"]);
    assert!(secs(&admitted["finish"]) <= deadline, "{admitted:#}");
    // Someone else sees nothing of it.
    let o = common::brokk(url, "tok-bob", &["workflow", "status", &id]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("belongs to someone else"));

    let done = until_ended(url, &id);
    assert_eq!(done["state"], "finished", "{done:#}");
    for t in tasks(&done) {
        assert_eq!(t["state"], "finished", "{t:#}");
        assert_eq!(t["exit_code"], 0, "{t:#}");
        // It started inside its reservation, which ended by the deadline.
        let job = common::json(url, "tok-ann", &["status", t["job"].as_str().unwrap(), "--json"]);
        // Named after its node where its description names it nothing.
        assert!(job["name"].is_string(), "{job:#}");
        let started = secs(&job["started"]);
        assert!(
            secs(&t["start"]) <= started && started < secs(&t["end"]),
            "{} started at {started} outside its reservation {t:#}",
            t["task"]
        );
        assert!(secs(&t["end"]) <= deadline);
    }
    // Each child read what its parents wrote: the parts counted the joined
    // numbers 1..1000, and collect gathered the counts.
    let collect = &tasks(&done)[9];
    assert_eq!(collect["task"], "collect");
    let job = common::json(url, "tok-ann", &["status", collect["job"].as_str().unwrap(), "--json"]);
    assert_eq!(job["name"], "collect", "{job:#}");
    let o = common::brokk(
        url,
        "tok-ann",
        &["output", collect["job"].as_str().unwrap(), "collected.txt"],
    );
    let counts: Vec<String> = String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect();
    let expect: Vec<String> = (1..=5)
        .map(|d| {
            (1..=1000)
                .filter(|n: &i32| n.to_string().contains(&d.to_string()))
                .count()
                .to_string()
        })
        .collect();
    assert_eq!(counts, expect);
    // The reservations ended with their tasks.
    let rs = common::json(url, "tok-ann", &["reserve", "--list", "--json"]);
    let rs = rs.as_array().unwrap();
    assert_eq!(rs.len(), 10);
    assert!(rs.iter().all(|r| r["state"] == "cancelled"), "{rs:#?}");
}

#[test]
fn a_glite_dag_is_admitted_and_its_nodes_run_on_their_parents_outputs() {
    let (_dir, svc) = broker("glite");
    let url = &svc.url;
    let dag = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/workflows/glite/count.jdl");
    let (code, admitted) = workflow(url, "tok-ann", &["submit", dag, "--deadline", "2h"]);
    assert_eq!(code, 0, "{admitted:#}");
    let done = until_ended(url, admitted["id"].as_str().unwrap());
    assert_eq!(done["state"], "finished", "{done:#}");
    let gather = tasks(&done)
        .into_iter()
        .find(|t| t["task"] == "gather")
        .expect("a gather task");
    // Of 1..100, 20 numbers hold a 1 and 19 a 2: each side read what
    // `numbers` wrote, and `gather` both counts.
    let o = common::brokk(
        url,
        "tok-ann",
        &["output", gather["job"].as_str().unwrap(), "counts.txt"],
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "20\n19\n");
}

#[test]
fn an_impossible_deadline_is_refused_with_the_earliest_finish_and_leaves_nothing_reserved() {
    let (_dir, svc) = broker("refused");
    let url = &svc.url;
    let dag = PIPELINE;
    let before = Instant::now();
    for scheduler in ["heftsync", "heftsyncbt", "hlst", "single", "genetic"] {
        let (code, refused) = workflow(
            url,
            "tok-ann",
            &["submit", dag, "--deadline", "10m", "--scheduler", scheduler],
        );
        assert_eq!(code, 6, "{refused:#}");
        let r = &refused["rejection"];
        assert!(r["reason"].is_string(), "{refused:#}");
        let earliest = secs(&r["earliest_finish"]);
        // The chain prepare, left, join, part, collect takes 35 minutes.
        let now = chrono::Utc::now().timestamp();
        assert!(earliest >= now + 35 * 60 - 5, "{scheduler}: {refused:#}");
        assert!(
            refused["error"].as_str().unwrap().contains("earliest finish"),
            "{refused:#}"
        );
    }
    assert!(before.elapsed() < Duration::from_secs(60));
    // Nothing stays held: two tasks as wide as each site, due in 3 minutes,
    // fit only if both sites are wholly free now.
    let dir = common::scratch("workflows", "refused-then");
    let path = whole_sites(&dir);
    let (code, wide) = workflow(url, "tok-ann", &["submit", path.to_str().unwrap(), "--deadline", "3m"]);
    assert_eq!(code, 0, "{wide:#}");
    assert!(common::json(url, "tok-ann", &["reserve", "--list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["id"].as_str().unwrap().contains(wide["id"].as_str().unwrap())));
}

#[test]
fn a_failed_task_is_retried_before_the_deadline_and_a_lasting_failure_cancels_the_rest() {
    let (dir, svc) = broker("retry");
    let url = &svc.url;
    // Fails on its first run, succeeds on its second.
    let marker = dir.join("ran-once");
    let flaky = format!(
        "if [ -e {m} ]; then echo fixed > fixed.txt; else touch {m}; exit 3; fi",
        m = marker.display()
    );
    let path = write_dag(
        &dir,
        "JOB flaky flaky.sub\nJOB after after.sub\nPARENT flaky CHILD after\nRETRY flaky 1\n",
        &[
            ("flaky", &flaky, "", "fixed.txt"),
            ("after", "cat fixed.txt > seen.txt", "fixed.txt", "seen.txt"),
        ],
    );
    let (code, w) = workflow(url, "tok-ann", &["submit", path.to_str().unwrap(), "--deadline", "1h"]);
    assert_eq!(code, 0, "{w:#}");
    let done = until_ended(url, w["id"].as_str().unwrap());
    assert_eq!(done["state"], "finished", "{done:#}");
    let t = tasks(&done);
    assert_eq!(t[0]["retried"], 1);
    assert!(
        t[0]["job"].as_str().unwrap().ends_with(".1"),
        "a retry runs as a job of its own: {done:#}"
    );
    // The child ran after the retry ended (its reservation planned again
    // after the retry's, then moved up when the retry ended early).
    let job = |k: usize| common::json(url, "tok-ann", &["status", t[k]["job"].as_str().unwrap(), "--json"]);
    assert!(secs(&job(0)["ended"]) <= secs(&job(1)["started"]), "{done:#}");
    let o = common::brokk(url, "tok-ann", &["output", t[1]["job"].as_str().unwrap(), "seen.txt"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "fixed\n");

    // Without retries, a failure fails the workflow and cancels the rest.
    let dir2 = common::scratch("workflows", "retry-broken");
    let path = write_dag(
        &dir2,
        "JOB broken broken.sub\nJOB never never.sub\nJOB also also.sub\nPARENT broken CHILD never\nPARENT never CHILD also\n",
        &[("broken", "exit 7", "", ""), ("never", "true", "", ""), ("also", "true", "", "")],
    );
    let (code, w) = workflow(url, "tok-ann", &["submit", path.to_str().unwrap(), "--deadline", "1h"]);
    assert_eq!(code, 0, "{w:#}");
    let id = w["id"].as_str().unwrap().to_string();
    let failed = until_ended(url, &id);
    assert_eq!(failed["state"], "failed", "{failed:#}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("task broken failed") && reason.contains('7'),
        "{failed:#}"
    );
    let t = tasks(&failed);
    assert_eq!(t[1]["state"], "cancelled");
    assert_eq!(t[2]["state"], "cancelled");
    let rs = common::json(url, "tok-ann", &["reserve", "--list", "--json"]);
    for r in rs
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["id"].as_str().unwrap().contains(&id))
    {
        assert_eq!(r["state"], "cancelled", "{r:#}");
    }
}

#[test]
fn cancelling_a_workflow_stops_its_tasks_and_gives_back_its_reservations() {
    let (dir, svc) = broker("cancel");
    let url = &svc.url;
    let path = write_dag(
        &dir,
        "JOB slow slow.sub\nJOB next next.sub\nPARENT slow CHILD next\n",
        &[("slow", "sleep 60", "", ""), ("next", "true", "", "")],
    );
    let (code, w) = workflow(url, "tok-ann", &["submit", path.to_str().unwrap(), "--deadline", "1h"]);
    assert_eq!(code, 0, "{w:#}");
    let id = w["id"].as_str().unwrap().to_string();
    let t = Instant::now();
    loop {
        let (_, w) = workflow(url, "tok-ann", &["status", &id]);
        if tasks(&w)[0]["state"] == "running" {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{w:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Not someone else's to cancel.
    assert!(!common::brokk(url, "tok-bob", &["workflow", "cancel", &id])
        .status
        .success());
    let (code, cancelled) = workflow(url, "tok-ann", &["cancel", &id]);
    assert_eq!(code, 0);
    assert_eq!(cancelled["state"], "cancelled", "{cancelled:#}");
    for t in tasks(&cancelled) {
        assert_eq!(t["state"], "cancelled", "{t:#}");
    }
    let rs = common::json(url, "tok-ann", &["reserve", "--list", "--json"]);
    assert!(
        rs.as_array().unwrap().iter().all(|r| r["state"] == "cancelled"),
        "{rs:#}"
    );
}

#[test]
fn the_holds_of_an_admission_a_kill_cut_short_are_let_go_at_restart() {
    let (dir, svc) = broker("killed-admission");
    // Many one-slot tasks, each a reservation asked of the sites in turn:
    // the broker is killed once the first are granted.
    let nodes: String = (0..400).map(|k| format!("JOB n{k} n.sub\n")).collect();
    let many = write_dag(&dir, &nodes, &[("n", "true", "", "")]);
    let journal = dir.join("sites/admissions");
    let mut caught = false;
    let mut svc = Some(svc);
    for _ in 0..5 {
        let url = svc.as_ref().unwrap().url.clone();
        let many = many.clone();
        let submit = std::thread::spawn(move || {
            common::brokk(
                &url,
                "tok-ann",
                &["workflow", "submit", many.to_str().unwrap(), "--deadline", "2d"],
            )
        });
        let t = Instant::now();
        while !submit.is_finished() && t.elapsed() < Duration::from_secs(60) {
            let grants = std::fs::read_dir(&journal)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default().lines().count())
                .max()
                .unwrap_or(0);
            if grants > 3 {
                svc = None; // SIGKILL
                caught = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = submit.join();
        if caught {
            break;
        }
        // The admission ended before the kill: its reservations are stored
        // and planned, so begin again on a fresh broker.
        drop(svc.take());
        std::fs::remove_file(dir.join("broker.db")).unwrap();
        let _ = std::fs::remove_dir_all(dir.join("sites"));
        svc = Some(common::serve(&dir));
    }
    assert!(caught, "no admission was caught in the middle");
    // Back up, well within the holds' 120 s: both sites are wholly free.
    let killed = Instant::now();
    let svc = common::serve(&dir);
    let url = &svc.url;
    let wide = whole_sites(&dir);
    let (code, w) = workflow(url, "tok-ann", &["submit", wide.to_str().unwrap(), "--deadline", "3m"]);
    assert_eq!(code, 0, "the killed admission's holds still block the sites: {w:#}");
    assert!(killed.elapsed() < Duration::from_secs(60));
    assert!(
        std::fs::read_dir(&journal).unwrap().next().is_none(),
        "the record is gone"
    );
    let log = std::fs::read_to_string(dir.join("service.log")).unwrap_or_default();
    assert!(log.contains("holds of workflow admissions a stop interrupted"), "{log}");
}

#[test]
fn an_admission_past_its_time_is_answered_and_holds_up_no_one_else() {
    let (dir, svc) = broker_with("time-up", "jobs_per_submission = 3000", "admission_seconds = 1");
    let url = svc.url.clone();
    // Thousands of one-slot tasks, each probed and reserved in turn: more
    // than a second of asking the sites.
    let nodes: String = (0..3000).map(|k| format!("JOB n{k} n.sub\n")).collect();
    let many = write_dag(&dir, &nodes, &[("n", "true", "", "")]);
    let large = {
        let url = url.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let o = common::brokk(
                &url,
                "tok-ann",
                &["workflow", "submit", many.to_str().unwrap(), "--deadline", "7d"],
            );
            (o, t.elapsed())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // Bob's small workflow waits for the decision turn at most the bound.
    let t = Instant::now();
    let (code, small) = workflow(&url, "tok-bob", &["submit", PIPELINE, "--deadline", "2h"]);
    let waited = t.elapsed();
    assert_eq!(code, 0, "{small:#}");
    let (o, took) = large.join().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "admitted in {took:?}");
    assert!(said.contains("admission_seconds"), "{said}");
    // Answered soon after the bound: the explain run asks nothing more and
    // the holds are let go.
    assert!(took < Duration::from_secs(8), "ann waited {took:?}");
    assert!(waited < Duration::from_secs(8), "bob waited {waited:?}");
    eprintln!("ann's answer after {took:?}, bob's admission after {waited:?}");
    // Nothing of ann's is left reserved.
    let rs = common::json(&url, "tok-ann", &["reserve", "--list", "--json"]);
    assert_eq!(rs, serde_json::json!([]), "{rs:#}");
}

/// A `brokk site` named `name` of `cpus` processors under `dir/name`, whose
/// broker identity is `broker`; killed (SIGKILL) when dropped.
fn agent(dir: &Path, name: &str, cpus: u32) -> common::Server {
    let site = dir.join(name);
    std::fs::create_dir_all(&site).unwrap();
    common::write_private(
        &site.join("site.toml"),
        &format!(
            "name = \"{name}\"\ncapacity = {cpus}\ndatabase = \"site.db\"\nworkdir = \"jobs\"\nkill_grace = 1\n\
             [tokens]\n\"tok-broker\" = \"broker\"\n"
        ),
    );
    common::spawn_listening(
        std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["site", "--config"])
            .arg(site.join("site.toml"))
            .stderr(std::process::Stdio::null()),
    )
}

/// A broker over two agents, north (2 processors, listed first) and south
/// (4), that rescues with `strategy` every second.
fn broker_over_agents(name: &str, strategy: &str) -> (PathBuf, [common::Server; 2], common::Server) {
    let dir = common::scratch("workflows", name);
    let (north, south) = (agent(&dir, "north", 2), agent(&dir, "south", 4));
    std::fs::write(
        dir.join("broker.toml"),
        format!(
            "database = \"broker.db\"\nstate_dir = \"sites\"\ninfo_ttl_ms = 500\n\
             [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n[limits]\nreserved_share = 1.0\n\
             [rescue]\nstrategy = \"{strategy}\"\nstep_s = 1\n\
             [[sites]]\nname = \"north\"\nurl = \"{}\"\ntoken = \"tok-broker\"\n\
             [[sites]]\nname = \"south\"\nurl = \"{}\"\ntoken = \"tok-broker\"\n",
            north.url, south.url
        ),
    )
    .unwrap();
    let server = common::serve(&dir);
    (dir, [north, south], server)
}

/// a (4 processors, `sleep 3`) then b (2), each booked for `booked`
/// seconds: a fits only at south, and b is booked at north, the
/// first-listed site, after a's booked end.
fn a_then_b(dir: &Path, booked: u32) -> PathBuf {
    let path = write_dag(
        dir,
        "JOB a a.sub\nJOB b b.sub\nPARENT a CHILD b\n",
        &[("a", "sleep 3", "", ""), ("b", "echo b ran", "", "")],
    );
    size(dir, &[("a", 4), ("b", 2)], booked);
    path
}

/// Admits a_then_b with `deadline` at a broker rescuing with `strategy`,
/// checks the plan, kills north, and returns the broker and south (kept
/// running) and the workflow as it ended; `before_kill` runs first.
fn north_dies(
    name: &str,
    strategy: &str,
    booked: u32,
    deadline: &str,
    before_kill: impl Fn(&str),
) -> ([common::Server; 2], Value) {
    let (dir, [north, south], svc) = broker_over_agents(name, strategy);
    let dag = a_then_b(&dir, booked);
    let (code, w) = workflow(
        &svc.url,
        "tok-ann",
        &["submit", dag.to_str().unwrap(), "--deadline", deadline],
    );
    assert_eq!(code, 0, "{w:#}");
    let planned = tasks(&w);
    assert_eq!(
        (planned[0]["site"].as_str(), planned[1]["site"].as_str()),
        (Some("south"), Some("north")),
        "{w:#}"
    );
    before_kill(&svc.url);
    // North dies while a runs at south: b's reservation there is useless.
    drop(north);
    let id = w["id"].as_str().unwrap().to_string();
    let w = until_ended(&svc.url, &id);
    ([svc, south], w)
}

/// The workflow finished inside its deadline with b moved once from north
/// to south before it was sent, run once there.
fn moved_and_ran(url: &str, w: &Value) {
    assert_eq!(w["state"], "finished", "{w:#}");
    let b = &tasks(w)[1];
    assert_eq!(b["site"], "south", "{w:#}");
    assert_eq!(b["retried"], 0, "moved before it was sent, not run again: {w:#}");
    let moves = b["moves"].as_array().unwrap_or_else(|| panic!("no moves: {w:#}"));
    assert_eq!(moves.len(), 1, "{w:#}");
    assert_eq!(
        (moves[0]["from"].as_str(), moves[0]["to"].as_str()),
        (Some("north"), Some("south"))
    );
    assert!(
        moves[0]["why"]
            .as_str()
            .unwrap()
            .contains("north has not answered since"),
        "{w:#}"
    );
    assert!(secs(&w["ended"]) <= secs(&w["deadline"]), "{w:#}");
    let job = b["job"].as_str().unwrap();
    assert_eq!(common::output(url, "tok-ann", job, "stdout").trim(), "b ran");
    let status = common::json(url, "tok-ann", &["status", job, "--json"]);
    assert_eq!(status["site"], "south", "{status:#}");
    let said: Vec<&str> = status["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["detail"].as_str())
        .collect();
    assert!(
        said.iter()
            .any(|d| d.starts_with("its reservation moved from north to south")),
        "{status:#}"
    );
    // Its reservation at north is given back.
    let reservations = common::json(url, "tok-ann", &["reserve", "--list", "--json"]);
    let at_north: Vec<&Value> = reservations
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["site"] == "north")
        .collect();
    assert_eq!(at_north.len(), 1, "{reservations:#}");
    assert_eq!(at_north[0]["state"], "cancelled", "{reservations:#}");
}

#[test]
fn a_task_booked_at_a_site_that_dies_is_moved_at_once_with_aall() {
    let ([svc, _south], w) = north_dies("rescued-all", "all", 120, "10m", |_| {});
    moved_and_ran(&svc.url, &w);
}

#[test]
fn a_task_booked_at_a_site_that_dies_is_moved_when_due_with_a1() {
    // a1 looks one step ahead: b moves once a has ended and b would go.
    let ([svc, _south], w) = north_dies("rescued-a1", "a1", 120, "10m", |_| {});
    moved_and_ran(&svc.url, &w);
}

#[test]
fn a_task_that_no_other_site_can_take_in_time_fails_its_workflow_with_the_reason() {
    // Bob holds south from the end of a's booking: b (10 s, due by 30 s)
    // has nowhere to go once north is down.
    let (_servers, w) = north_dies("stranded", "feedback:0.9", 10, "30s", |url| {
        let r = common::json(
            url,
            "tok-bob",
            &[
                "reserve",
                "--amount",
                "4",
                "--duration",
                "10m",
                "--earliest",
                "10s",
                "--latest",
                "20s",
                "--json",
            ],
        );
        assert_eq!(r["site"], "south", "{r:#}");
    });
    assert_eq!(w["state"], "failed", "{w:#}");
    let reason = w["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("task b is booked at north, which has not answered since")
            && reason.contains("no other site has room"),
        "{w:#}"
    );
    let b = &tasks(&w)[1];
    assert!(b["moves"].as_array().is_none_or(|m| m.is_empty()), "{w:#}");
    assert_ne!(b["state"], "finished", "{w:#}");
}

#[test]
fn a_users_reservation_at_a_site_that_dies_moves_to_another_at_the_same_time_under_its_id() {
    let (_dir, [north, _south], svc) = broker_over_agents("reservation-moved", "all");
    let url = &svc.url;
    let r = common::json(
        url,
        "tok-bob",
        &[
            "reserve",
            "--amount",
            "2",
            "--duration",
            "5m",
            "--earliest",
            "2m",
            "--latest",
            "2m",
            "--json",
        ],
    );
    assert_eq!(r["site"], "north", "the first-listed of two free sites: {r:#}");
    let id = r["id"].as_str().unwrap().to_string();
    drop(north);
    let t = Instant::now();
    let moved = loop {
        let mine = common::listed_reservation(url, "tok-bob", &id);
        if mine["site"] == "south" {
            break mine;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "not moved: {mine:#}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(moved["state"], "committed", "{moved:#}");
    assert_eq!((&moved["start"], &moved["end"]), (&r["start"], &r["end"]), "{moved:#}");
    // Only bob sees it, wherever it is.
    let ann = common::json(url, "tok-ann", &["reserve", "--list", "--json"]);
    assert!(
        ann.as_array().unwrap().iter().all(|x| x["id"] != id.as_str()),
        "{ann:#}"
    );
}
