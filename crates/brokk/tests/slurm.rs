//! Brokk in front of real Slurm clusters: the two local clusters that
//! `scripts/slurm-testbed.sh` starts (two nodes of 8 CPUs each), named by the
//! directory in `BROKK_TEST_SLURM` (`DIR/c1/slurm.conf`, `DIR/c2/slurm.conf`).
//! They need that testbed, so a plain `cargo test` skips them (ignored);
//! `scripts/test.sh` starts it and runs them. The clusters are shared, so the
//! tests take turns.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use brokk_broker::Site;
use brokk_model::Time;
use brokk_planner::{Change, Reply, Request, ReservationId};

mod common;

static CLUSTERS: Mutex<()> = Mutex::new(());

/// One test's turn on the testbed: its directory, a scratch directory, and
/// the clusters to itself while it lives.
struct Turn {
    bed: PathBuf,
    dir: PathBuf,
    _clusters: MutexGuard<'static, ()>,
}

/// The turn of test `name` on the testbed that `BROKK_TEST_SLURM` names.
fn turn(name: &str) -> Turn {
    let bed = std::env::var_os("BROKK_TEST_SLURM").expect("BROKK_TEST_SLURM: scripts/test.sh starts the Slurm testbed");
    Turn {
        bed: PathBuf::from(bed),
        _clusters: CLUSTERS.lock().unwrap_or_else(|e| e.into_inner()),
        dir: common::scratch("slurmtest", name),
    }
}

impl Drop for Turn {
    /// Whatever a test left queued, running or reserved is cancelled, so
    /// the next test finds the clusters empty rather than waiting behind it.
    fn drop(&mut self) {
        for c in [1, 2] {
            let ids = slurm(&self.bed, c, "squeue", &["-h", "-o", "%i"]);
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                slurm(&self.bed, c, "scancel", &ids);
            }
            drop_reservations(&self.bed, c, "");
        }
    }
}

/// Slurm's completion record of broker job `j`, which ran at the site
/// `{prefix}N` on cluster N.
fn completed(bed: &Path, prefix: &str, j: &serde_json::Value) -> String {
    let site = j["site"].as_str().unwrap();
    let c: u32 = site.trim_start_matches(prefix).parse().unwrap();
    let name = format!("brokk-{site}-{}", j["site_job"].as_str().unwrap());
    let log = std::fs::read_to_string(bed.join(format!("c{c}/log/jobcomp.log"))).unwrap();
    log.lines()
        .rfind(|l| l.contains(&format!(" Name={name} ")) && l.contains("JobState=COMPLETED"))
        .unwrap_or_else(|| panic!("no completed Slurm job {name}"))
        .to_string()
}

/// What both clusters say of their jobs and nodes, for a failure's message.
fn slurm_view(bed: &Path) -> String {
    [1, 2]
        .iter()
        .map(|&c| {
            format!(
                "cluster {c}:\n{}{}",
                slurm(bed, c, "squeue", &["-a", "-o", "%i %j %T %r"]),
                slurm(bed, c, "sinfo", &["-N", "-h", "-o", "%N %T %E"])
            )
        })
        .collect()
}

fn conf(bed: &Path, c: u32) -> PathBuf {
    bed.join(format!("c{c}/slurm.conf"))
}

/// A Slurm command on cluster `c`, with its output.
fn slurm(bed: &Path, c: u32, program: &str, args: &[&str]) -> String {
    common::slurm_command(&conf(bed, c), program, args)
}

/// One `scontrol show res -o` line for `name`, or `None`.
fn slurm_reservation(bed: &Path, c: u32, name: &str) -> Option<String> {
    slurm(bed, c, "scontrol", &["show", "res", "-o"])
        .lines()
        .find(|l| l.starts_with(&format!("ReservationName={name} ")))
        .map(str::to_string)
}

/// Deletes cluster `c`'s reservations whose names start with `prefix`.
fn drop_reservations(bed: &Path, c: u32, prefix: &str) {
    common::drop_slurm_reservations(&conf(bed, c), prefix);
}

fn spawn(dir: &Path, args: &[&str]) -> common::Server {
    common::spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(args)
            .current_dir(dir)
            .stderr(
                std::fs::File::create(dir.join(format!("{}.log", args[0])))
                    .map(Stdio::from)
                    .unwrap_or(Stdio::null()),
            )
            .env("BROKK_LOG", "brokk_server=debug,brokk_site=debug"),
    )
}

/// `brokk serve` with one embedded Slurm-backed site per cluster, named
/// `{prefix}1` and `{prefix}2`; the first publishes the faster benchmark, so
/// work goes there first.
fn serve(dir: &Path, bed: &Path, prefix: &str) -> common::Server {
    serve_with(dir, bed, prefix, "")
}

/// [`serve`] with `settings` (top-level keys, then tables) before its own.
fn serve_with(dir: &Path, bed: &Path, prefix: &str, settings: &str) -> common::Server {
    let mut config =
        format!("database = \"broker.db\"\nstate_dir = \"sites\"\n{settings}[tokens]\n\"tok-ann\" = \"ann\"\n");
    for c in [1, 2] {
        config += &format!(
            "[[embedded]]\nname = \"{prefix}{c}\"\nbenchmarks = [{{ name = \"specint2006\", value = {}.0 }}]\n\
             slurm = {{ conf = \"{}\" }}\n",
            60 / c,
            conf(bed, c).display()
        );
    }
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    spawn(dir, &["serve", "--config", "broker.toml"])
}

fn brokk(url: &str, args: &[&str]) -> Output {
    common::brokk(url, "tok-ann", args)
}

fn json(url: &str, args: &[&str]) -> serde_json::Value {
    common::json(url, "tok-ann", args)
}

fn wait_finished(url: &str, id: &str, within: Duration) -> serde_json::Value {
    common::wait_ended(url, "tok-ann", id, within)
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_job_runs_on_slurm_and_its_output_comes_back() {
    let turn = turn("run");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve(dir, bed, "run");
    // A Slurm batch script, as a user would hand it to sbatch.
    let done = json(
        &svc.url,
        &["submit", "examples/quickstart/hello.sh", "--watch", "--json"],
    );
    assert_eq!(done["state"], "finished", "{done}");
    let out = brokk(&svc.url, &["output", done["id"].as_str().unwrap()]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Hello from a Slurm batch script\n"
    );
    let job = dir.join("job.json");
    std::fs::write(
        &job,
        r#"{"executable": "/bin/sh", "arguments": ["-c", "echo from $SLURM_JOB_NAME on $SLURM_CLUSTER_NAME; exit 3"],
            "cpus": 4, "wall_time": 60, "stdout": "out.txt"}"#,
    )
    .unwrap();
    let submitted = json(&svc.url, &["submit", job.to_str().unwrap(), "--json"]);
    let id = submitted["id"].as_str().unwrap();
    let done = wait_finished(&svc.url, id, Duration::from_secs(60));
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(done["exit_code"], 3, "{done}");
    // Slurm's start, even for a job that ran between two readings of the queue.
    assert!(done["started"].is_string(), "{done}");
    let site = done["site"].as_str().unwrap();
    let out = brokk(&svc.url, &["output", id, "out.txt"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Slurm ran it: the batch environment names the job and the cluster.
    let c = site.trim_start_matches("run");
    assert!(text.starts_with(&format!("from brokk-{site}-")), "{text}");
    assert!(text.trim_end().ends_with(&format!("on brokk{c}")), "{text}");
    // And Slurm's own record agrees about the job.
    let job_name = text.split_whitespace().nth(1).unwrap();
    let rows = slurm(
        bed,
        c.parse().unwrap(),
        "squeue",
        &["-h", "--states=all", "--name", job_name, "-o", "%T|%C"],
    );
    assert!(rows.contains("FAILED|4"), "squeue: {rows}");
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn reservations_on_slurm_follow_the_protocol() {
    let turn = turn("reserve");
    let (bed, dir) = (&turn.bed, &turn.dir);
    // Left by an earlier, failed run of this test.
    drop_reservations(bed, 1, "maint-brokk-test");
    drop_reservations(bed, 1, "brokk-resv");
    // A name of its own: reservations of an earlier run's agent are not ours.
    let site_name = format!("resv{}", std::process::id());
    std::fs::write(
        dir.join("site.toml"),
        format!(
            "name = \"{site_name}\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"tok\" = \"ann\"\n\
             [slurm]\nconf = \"{}\"\n",
            conf(bed, 1).display()
        ),
    )
    .unwrap();
    let agent = spawn(dir, &["site", "--config", "site.toml"]);
    let mut site = brokk_proto::RemoteSite::new(&agent.url, "tok");
    let info = site.info().unwrap();
    assert_eq!(info.total_slots, 16, "two nodes of 8 CPUs");
    let now = brokk_proto::wall_clock().0;
    let at = |s: i64| Time(now + s);
    let req = |amount: u32, start: i64, duration: i64| Request {
        amount,
        duration: brokk_model::Duration(duration),
        earliest: at(start),
        latest: at(start),
        flexible: false,
    };
    // Granted: a core-based Slurm reservation with exactly that shape.
    let Reply::Granted { id, start } = site.reserve("ann", &req(10, 600, 600), None).unwrap() else {
        panic!("10 of 16 free CPUs must be granted");
    };
    assert_eq!(start, at(600));
    let name = format!("brokk-{site_name}-r{}", id.0);
    let line = slurm_reservation(bed, 1, &name).expect("the grant is a Slurm reservation");
    assert_eq!(common::field(&line, "CoreCnt"), "10");
    assert_eq!(common::slurm_time(common::field(&line, "StartTime")), now + 600);
    assert_eq!(common::slurm_time(common::field(&line, "EndTime")), now + 1200);
    // Rejected, with the next start Slurm itself cannot give: when ours ends.
    let reply = site.reserve("ann", &req(8, 700, 300), None).unwrap();
    assert_eq!(
        reply,
        Reply::Rejected {
            next_start: Some(at(1200))
        }
    );
    // Someone else's reservation is respected and never touched.
    let maint_start = brokk_proto::wall_clock().0 + 1800;
    let out = slurm(
        bed,
        1,
        "scontrol",
        &[
            "create",
            "reservation",
            "ReservationName=maint-brokk-test",
            &format!(
                "StartTime={}",
                chrono::DateTime::from_timestamp(maint_start, 0)
                    .unwrap()
                    .format("%Y-%m-%dT%H:%M:%S")
            ),
            "Duration=10",
            "CoreCnt=16",
            "Users=root",
        ],
    );
    assert!(out.contains("created"), "{out}");
    // Once the agent has read it (reservations are read once a second), a
    // request inside it is rejected with the start after it.
    let inside = Request {
        earliest: Time(maint_start + 60),
        latest: Time(maint_start + 60),
        ..req(1, 0, 60)
    };
    let expected = Reply::Rejected {
        next_start: Some(Time(maint_start + 600)),
    };
    let t = Instant::now();
    let reply = loop {
        let reply = site.reserve("ann", &inside, None).unwrap();
        // The agent reads Slurm's reservations once a second; a loaded
        // machine (CI) has been seen to take more than 5 s.
        if reply == expected || t.elapsed() > Duration::from_secs(20) {
            break reply;
        }
        // Granted before the agent read it (or refused by Slurm with the
        // planner's guess): try again.
        if let Reply::Granted { id, .. } = reply {
            site.cancel("ann", id).unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(reply, expected);
    // Modify: the core count (Slurm remakes it) and the start (Slurm moves it).
    site.modify(
        "ann",
        id,
        Change {
            amount: Some(12),
            ..Change::default()
        },
    )
    .unwrap();
    let line = slurm_reservation(bed, 1, &name).unwrap();
    assert_eq!(common::field(&line, "CoreCnt"), "12");
    let moved = site
        .modify(
            "ann",
            id,
            Change {
                window: Some((at(900), at(900))),
                ..Change::default()
            },
        )
        .unwrap();
    assert_eq!(moved, at(900));
    let line = slurm_reservation(bed, 1, &name).unwrap();
    assert_eq!(common::slurm_time(common::field(&line, "StartTime")), now + 900);
    // A move into the maintenance window is refused and changes nothing.
    let refused = site.modify(
        "ann",
        id,
        Change {
            window: Some((Time(maint_start), Time(maint_start))),
            ..Change::default()
        },
    );
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(slurm_reservation(bed, 1, &name).unwrap(), line);
    // A hold lapses, and its Slurm reservation goes with it.
    let Reply::Granted { id: held, .. } = site.reserve("ann", &req(2, 60, 60), Some(at(2))).unwrap() else {
        panic!("hold");
    };
    let held_name = format!("brokk-{site_name}-r{}", held.0);
    assert!(slurm_reservation(bed, 1, &held_name).is_some());
    std::thread::sleep(Duration::from_secs(4));
    assert!(
        slurm_reservation(bed, 1, &held_name).is_none(),
        "the lapsed hold is gone from Slurm"
    );
    // Cancel deletes it; the foreign one stays as it was.
    site.cancel("ann", id).unwrap();
    assert!(slurm_reservation(bed, 1, &name).is_none());
    let maint = slurm_reservation(bed, 1, "maint-brokk-test").expect("never touched");
    assert_eq!(common::field(&maint, "CoreCnt"), "16");
    slurm(bed, 1, "scontrol", &["delete", "ReservationName=maint-brokk-test"]);
    assert!(site.cancel("ann", ReservationId(held.0)).is_err());
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_coallocation_across_two_slurm_clusters_starts_together() {
    let turn = turn("coalloc");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve(dir, bed, "co");
    // 12 + 12 + 4 CPUs over two clusters of 16: the two large parts must be
    // on different clusters.
    let mut files = Vec::new();
    for (k, n) in [12, 12, 4].iter().enumerate() {
        let f = dir.join(format!("part{k}.json"));
        std::fs::write(
            &f,
            format!(r#"{{"executable": "/bin/sleep", "arguments": ["2"], "cpus": {n}, "wall_time": 60}}"#),
        )
        .unwrap();
        files.push(f.to_str().unwrap().to_string());
    }
    let mut args = vec!["coalloc", "--delta", "5", "--json"];
    args.extend(files.iter().map(String::as_str));
    let done = json(&svc.url, &args);
    let ids = common::strings(&done["ids"]);
    let sites = common::strings(&done["sites"]);
    assert_eq!(ids.len(), 3);
    assert_ne!(sites[0], sites[1], "{sites:?}");
    let mut starts = Vec::new();
    for id in &ids {
        let j = wait_finished(&svc.url, id, Duration::from_secs(90));
        assert_eq!(j["state"], "finished", "{j}");
        let site = j["site"].as_str().unwrap();
        // Slurm's own record of the job as it completed (the reservation
        // has gone since, and with it the name squeue would show).
        let row = completed(bed, "co", &j);
        assert!(
            row.contains(&format!("ReservationName=brokk-{site}-r")),
            "ran in its reservation: {row}"
        );
        starts.push(common::slurm_time(common::field(&row, "StartTime")));
    }
    let spread = starts.iter().max().unwrap() - starts.iter().min().unwrap();
    assert!(spread <= 5, "Slurm's starts {starts:?}");
    eprintln!("co-allocated parts started {spread} s apart on Slurm");
    // The parts' reservations end with them, in Slurm too.
    let t = Instant::now();
    for c in [1, 2] {
        while slurm(bed, c, "scontrol", &["show", "res", "-o"]).contains(&format!("brokk-co{c}-r")) {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "cluster {c} still holds the part's reservation"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_heterogeneous_job_is_coallocated_across_the_two_clusters() {
    let turn = turn("hetjob");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve(dir, bed, "het");
    // Two components of 12 CPUs: no cluster of 16 holds both.
    let het = dir.join("het.sh");
    std::fs::write(
        &het,
        "#!/bin/sh\n#SBATCH --ntasks=12 --time=1\n#SBATCH hetjob\n#SBATCH --ntasks=12\nsleep 2\n",
    )
    .unwrap();
    let ids = common::strings(&json(&svc.url, &["submit", het.to_str().unwrap(), "--json"])["ids"]);
    assert_eq!(ids.len(), 2);
    let mut sites = Vec::new();
    for id in &ids {
        let j = wait_finished(&svc.url, id, Duration::from_secs(90));
        assert_eq!(j["state"], "finished", "{j}");
        let row = completed(bed, "het", &j);
        assert!(row.contains("ReservationName=brokk-"), "ran in its reservation: {row}");
        sites.push(j["site"].as_str().unwrap().to_string());
    }
    assert_ne!(sites[0], sites[1]);
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn killing_slurmctld_loses_no_accepted_job() {
    let turn = turn("failover");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve(dir, bed, "fo");
    let marks = dir.join("marks");
    // A reference benchmark makes the faster cluster 1 the first choice.
    let prefs = dir.join("prefs.json");
    std::fs::write(
        &prefs,
        r#"{"benchmarks": [{"name": "specint2006", "result": 20, "time": 120}]}"#,
    )
    .unwrap();
    let submit = |k: u32| {
        let f = dir.join(format!("job{k}.json"));
        std::fs::write(
            &f,
            format!(
                r#"{{"executable": "/bin/sh", "arguments": ["-c", "sleep 2; echo {k} >> {}"], "cpus": 4, "wall_time": 120}}"#,
                marks.display()
            ),
        )
        .unwrap();
        json(
            &svc.url,
            &[
                "submit",
                f.to_str().unwrap(),
                "--prefs",
                prefs.to_str().unwrap(),
                "--json",
            ],
        )["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut ids: Vec<String> = (0..10).map(submit).collect();
    // Wait until cluster 1 runs some of them, then stop its controller.
    let t = Instant::now();
    while !slurm(bed, 1, "squeue", &["-h", "-t", "RUNNING", "-o", "%j"]).contains("brokk-fo1-") {
        assert!(t.elapsed() < Duration::from_secs(60), "nothing ran on cluster 1");
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = std::fs::read_to_string(bed.join("c1/run/slurmctld.pid")).unwrap();
    assert!(Command::new("kill").arg(pid.trim()).status().unwrap().success());
    // The site reports itself unavailable; new jobs are still accepted.
    let t = Instant::now();
    loop {
        let r = json(&svc.url, &["resources", "--json"]);
        let down = r.to_string().contains("unavailable");
        if down {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "fo1 never reported unavailable: {r}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    ids.extend((10..16).map(submit));
    std::thread::sleep(Duration::from_secs(3));
    // Back up: the testbed restarts only what is down.
    let up = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/slurm-testbed.sh"))
        .args(["start", "--dir"])
        .arg(bed)
        .status()
        .unwrap();
    assert!(up.success());
    for id in &ids {
        let j = wait_finished(&svc.url, id, Duration::from_secs(120));
        assert_eq!(j["state"], "finished", "{j}");
    }
    let mut ran: Vec<u32> = std::fs::read_to_string(&marks)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, (0..16).collect::<Vec<_>>(), "every job ran exactly once");
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_sweep_run_as_a_slurm_job_array_equals_the_local_run_byte_for_byte() {
    let turn = turn("array");
    let exp = turn.dir.join("small.toml");
    std::fs::write(
        &exp,
        "name = \"small\"\narchitectures = [\"sep-c\", \"dmm\"]\ndays = 0.25\nloads = [0.5, 0.9]\nseeds = [1, 2, 3]\n",
    )
    .unwrap();
    let brokk = |args: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(args)
            .env("SLURM_CONF", conf(&turn.bed, 1))
            .output()
            .unwrap()
    };
    let (local, array) = (turn.dir.join("local"), turn.dir.join("array"));
    let o = brokk(&[
        "sim",
        "architectures",
        exp.to_str().unwrap(),
        "--out",
        local.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Three array tasks, each a share of the six workloads, then the merge.
    let o = brokk(&[
        "sim",
        "architectures",
        exp.to_str().unwrap(),
        "--slurm",
        "3",
        "--submit",
        "--out",
        array.to_str().unwrap(),
    ]);
    let said = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && said.contains("submitted array"), "{said}");
    let merged = array.join("summary.json");
    let t = Instant::now();
    while !merged.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "no merged result; {}",
            slurm(&turn.bed, 1, "squeue", &[])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Written once complete: the merge writes it last but one (then plots).
    std::thread::sleep(Duration::from_millis(500));
    for k in 0..3 {
        assert!(array.join(format!("shard-{k}/points.json")).exists());
    }
    assert_eq!(
        std::fs::read(&merged).unwrap(),
        std::fs::read(local.join("summary.json")).unwrap(),
        "the merged sweep differs from the local one"
    );
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_job_pending_in_slurm_is_held_there_and_released() {
    let turn = turn("hold");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve(dir, bed, "hold");
    let write = |name: &str, text: &str| {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        f.to_str().unwrap().to_string()
    };
    // Both clusters taken for a minute, then a job of the same size waits.
    let long = write(
        "long.json",
        r#"{"executable": "/bin/sleep", "arguments": ["60"], "cpus": 16, "wall_time": 120}"#,
    );
    let next = write(
        "next.json",
        r#"{"executable": "/bin/true", "cpus": 16, "wall_time": 60}"#,
    );
    let until = |id: &str, state: &str| {
        let t = Instant::now();
        loop {
            let job = json(&svc.url, &["status", "--json", id]);
            if job["state"] == state {
                return job;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "never {state}: {job}\n{}",
                slurm_view(bed)
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    };
    let longs: Vec<String> = (0..2)
        .map(|_| {
            json(&svc.url, &["submit", &long, "--json"])["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    for id in &longs {
        until(id, "running");
    }
    let id = json(&svc.url, &["submit", &next, "--json"])["id"]
        .as_str()
        .unwrap()
        .to_string();
    let site = until(&id, "dispatched")["site"].as_str().unwrap().to_string();
    let c: u32 = site.trim_start_matches("hold").parse().unwrap();
    // Pending in Slurm, behind the long job.
    let pending = || slurm(bed, c, "squeue", &["-h", "-t", "PENDING", "-o", "%j|%r"]);
    let t = Instant::now();
    while !pending().contains(&format!("brokk-{site}-")) {
        assert!(t.elapsed() < Duration::from_secs(30), "not in Slurm: {}", pending());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Held: Slurm holds it as its owner would (`scontrol uhold`).
    let held = json(&svc.url, &["hold", &id, "--json"]);
    assert_eq!(
        (held["state"].as_str(), held["site"].as_str()),
        (Some("held"), Some(site.as_str())),
        "{held}"
    );
    let rows = pending();
    assert!(rows.contains("|JobHeldUser"), "squeue: {rows}");
    // Released: Slurm may start it again.
    let released = json(&svc.url, &["release", &id, "--json"]);
    assert_eq!(released["state"], "dispatched", "{released}");
    let rows = pending();
    assert!(
        rows.contains(&format!("brokk-{site}-")) && !rows.contains("JobHeldUser"),
        "squeue: {rows}"
    );
    for job in longs.iter().chain([&id]) {
        brokk(&svc.url, &["cancel", job]);
    }
    for job in longs.iter().chain([&id]) {
        assert_eq!(
            wait_finished(&svc.url, job, Duration::from_secs(60))["state"],
            "cancelled"
        );
    }
}

/// Resumes cluster `c`'s nodes when dropped, so a failing test leaves the
/// shared testbed as it found it, and waits (up to 20 s) until slurmctld
/// hears from them again: a resumed node is not responding (`idle*`) for
/// a second or two, and a reservation asking for it fails meanwhile.
struct Drained<'a>(&'a Path, u32);

impl Drop for Drained<'_> {
    fn drop(&mut self) {
        let nodes = format!("c{}n[1-2]", self.1);
        slurm(
            self.0,
            self.1,
            "scontrol",
            &["update", &format!("nodename={nodes}"), "state=resume"],
        );
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            let states = slurm(self.0, self.1, "sinfo", &["-N", "-h", "-o", "%T"]);
            if states
                .split_whitespace()
                .all(|s| !s.ends_with('*') && !s.starts_with("drain"))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_cluster_whose_nodes_are_all_drained_is_published_critical() {
    let turn = turn("drain");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve(dir, bed, "drain");
    let health = |site: &str| {
        let all = json(&svc.url, &["resources", "--json"]);
        all.as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == site)
            .map(|s| s["health"].clone())
    };
    let until = |site: &str, want: &str| {
        let t = Instant::now();
        while health(site) != Some(serde_json::json!(want)) {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{site} is not {want}: {:?}",
                health(site)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    };
    until("drain2", "ok");
    // One node drained: the cluster still runs work.
    let _resumed = Drained(bed, 2);
    slurm(
        bed,
        2,
        "scontrol",
        &["update", "nodename=c2n1", "state=drain", "reason=brokk-test"],
    );
    until("drain2", "warning");
    // Both: nothing starts there, which a broker reads as a failure.
    slurm(
        bed,
        2,
        "scontrol",
        &["update", "nodename=c2n2", "state=drain", "reason=brokk-test"],
    );
    until("drain2", "critical");
    assert_eq!(health("drain1"), Some(serde_json::json!("ok")));
    slurm(bed, 2, "scontrol", &["update", "nodename=c2n[1-2]", "state=resume"]);
    until("drain2", "ok");
}

/// [`serve`]'s sites, with a rescue that looks every second, fresh
/// information, and one user allowed to reserve a whole cluster.
fn serve_rescuing(dir: &Path, bed: &Path, prefix: &str) -> common::Server {
    let settings = "info_ttl_ms = 500\n[limits]\nreserved_share = 1.0\n[rescue]\nstrategy = \"all\"\nstep_s = 1\n";
    serve_with(dir, bed, prefix, settings)
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_workflows_later_task_moves_off_a_cluster_drained_before_it_starts() {
    let turn = turn("rescue");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve_rescuing(dir, bed, "rescue");
    // a then b, each a whole cluster (16 CPUs) wide: both are booked at
    // the faster first cluster, b after a's booked end.
    for (node, command) in [("a", "sleep 8"), ("b", "echo b ran")] {
        std::fs::write(
            dir.join(format!("{node}.sub")),
            format!(
                "executable = /bin/sh\narguments = \"-c '{command}'\"\nallowed_job_duration = 60\n\
                 request_cpus = 16\nqueue\n"
            ),
        )
        .unwrap();
    }
    std::fs::write(dir.join("flow.dag"), "JOB a a.sub\nJOB b b.sub\nPARENT a CHILD b\n").unwrap();
    let o = common::brokk(
        &svc.url,
        "tok-ann",
        &[
            "workflow",
            "submit",
            dir.join("flow.dag").to_str().unwrap(),
            "--deadline",
            "10m",
            "--json",
        ],
    );
    let w = common::printed(&o.stdout);
    assert!(o.status.success(), "{w:#}");
    let planned: Vec<&str> = w["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["site"].as_str().unwrap())
        .collect();
    assert_eq!(planned, ["rescue1", "rescue1"], "{w:#}");
    let id = w["id"].as_str().unwrap().to_string();
    let a = w["tasks"][0]["job"].as_str().unwrap().to_string();
    common::wait_for_state(&svc.url, "tok-ann", &a, "running", Duration::from_secs(60));
    // Both of cluster 1's nodes drained while a runs there: a ends, but
    // nothing new would start, so b's reservation is useless.
    let _resumed = Drained(bed, 1);
    slurm(
        bed,
        1,
        "scontrol",
        &["update", "nodename=c1n[1-2]", "state=drain", "reason=brokk-test"],
    );
    let t = Instant::now();
    let ended = loop {
        let o = common::brokk(&svc.url, "tok-ann", &["workflow", "status", &id, "--json"]);
        let w = common::printed(&o.stdout);
        if w["state"] != "running" {
            break w;
        }
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "still running: {w:#}\n{}",
            slurm_view(bed)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(ended["state"], "finished", "{ended:#}\n{}", slurm_view(bed));
    let (ta, tb) = (&ended["tasks"][0], &ended["tasks"][1]);
    assert_eq!(ta["site"], "rescue1", "a ran where it was: {ended:#}");
    assert_eq!(tb["site"], "rescue2", "{ended:#}");
    assert_eq!(tb["retried"], 0, "moved before it was sent, not run again: {ended:#}");
    let moves = tb["moves"].as_array().unwrap_or_else(|| panic!("no moves: {ended:#}"));
    assert_eq!(
        (moves.len(), moves[0]["from"].as_str(), moves[0]["to"].as_str()),
        (1, Some("rescue1"), Some("rescue2")),
        "{ended:#}"
    );
    let b = tb["job"].as_str().unwrap();
    assert_eq!(common::output(&svc.url, "tok-ann", b, "stdout").trim(), "b ran");
    // Slurm itself ran b on the second cluster, in the reservation it moved to.
    let job = json(&svc.url, &["status", b, "--json"]);
    let record = completed(bed, "rescue", &job);
    assert!(record.contains("ReservationName=brokk-rescue2-r"), "{record}");
}

#[test]
#[ignore = "needs the Slurm testbed; scripts/test.sh starts it and runs this"]
fn a_reservation_a_cluster_can_no_longer_hold_after_one_node_drains_moves_under_its_id() {
    let turn = turn("shrunk");
    let (bed, dir) = (&turn.bed, &turn.dir);
    let svc = serve_rescuing(dir, bed, "shrunk");
    let reserve = |amount: &str| {
        json(
            &svc.url,
            &[
                "reserve",
                "--amount",
                amount,
                "--duration",
                "5m",
                "--earliest",
                "3m",
                "--latest",
                "3m",
                "--json",
            ],
        )
    };
    // The whole first cluster, 3 minutes from now.
    let r = reserve("16");
    assert_eq!(r["site"], "shrunk1", "the faster cluster: {r:#}");
    let id = r["id"].as_str().unwrap().to_string();
    let site_name = |r: &serde_json::Value| format!("brokk-{}-r{}", r["site"].as_str().unwrap(), r["site_reservation"]);
    assert!(
        slurm_reservation(bed, 1, &site_name(&r)).is_some(),
        "{}",
        slurm_view(bed)
    );
    // One of its two nodes drained: half the cluster is lost, and the
    // reservation no longer fits there.
    let _resumed = Drained(bed, 1);
    slurm(
        bed,
        1,
        "scontrol",
        &["update", "nodename=c1n2", "state=drain", "reason=brokk-test"],
    );
    let t = Instant::now();
    let moved = loop {
        let mine = common::listed_reservation(&svc.url, "tok-ann", &id);
        if mine["site"] == "shrunk2" {
            break mine;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "not moved: {mine:#}\n{}",
            slurm_view(bed)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // The same span under the same id, held by Slurm on the second cluster
    // and given back on the first.
    assert_eq!(moved["state"], "committed", "{moved:#}");
    assert_eq!((&moved["start"], &moved["end"]), (&r["start"], &r["end"]), "{moved:#}");
    assert!(
        slurm_reservation(bed, 2, &site_name(&moved)).is_some(),
        "{}",
        slurm_view(bed)
    );
    assert!(
        slurm_reservation(bed, 1, &site_name(&r)).is_none(),
        "{}",
        slurm_view(bed)
    );
    // The first cluster still takes what fits on its other node, and no
    // longer what needs both.
    let half = reserve("8");
    assert_eq!(half["site"], "shrunk1", "{half:#}");
    for r in [id.as_str(), half["id"].as_str().unwrap()] {
        assert!(brokk(&svc.url, &["reserve", "--cancel", r]).status.success());
    }
    let whole = reserve("16");
    assert_eq!(whole["site"], "shrunk2", "{whole:#}");
}
