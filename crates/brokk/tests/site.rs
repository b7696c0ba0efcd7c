//! The site agent end to end: `brokk site` runs as a real process on an
//! ephemeral port with its own SQLite file and sandboxes, and the tests drive
//! it through the Rust client (the broker's `Site` trait) and raw HTTP.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration as StdDuration, Instant};

use brokk_broker::{JobHandle, Site, SiteError};
use brokk_model::{Duration, EnvVar, InputFile, Job, OutputFile, Time};
use brokk_planner::{Change, NeverReason, Reply, Request, ReservationId};
use brokk_proto::wire::{JobPhase, JobView, ReservationState};
use brokk_proto::RemoteSite;

mod common;

/// A `brokk site` process; killed (SIGKILL) when dropped.
struct Agent {
    server: common::Server,
    dir: PathBuf,
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("site", name)
}

impl Agent {
    /// An agent whose jobs may stage from the tests' file servers on 127.0.0.1.
    fn start(dir: &Path) -> Agent {
        Agent::start_with(dir, "stage_hosts = [\"127.0.0.1\"]")
    }

    /// An agent whose configuration has `settings` (top-level keys) too.
    fn start_with(dir: &Path, settings: &str) -> Agent {
        let config = dir.join("site.toml");
        if !config.exists() {
            std::fs::write(
                &config,
                format!(
                    "name = \"test-site\"\ncapacity = 4\ndatabase = \"site.db\"\nworkdir = \"jobs\"\nkill_grace = 1\n\
                     bandwidth_bytes_per_s = 1000000\nstage_in_dirs = [\".\"]\nstage_out_dirs = [\".\"]\n{settings}\n\
                     [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\"tok-broker\" = \"broker\"\n"
                ),
            )
            .unwrap();
        }
        let server = common::spawn_listening(
            Command::new(env!("CARGO_BIN_EXE_brokk"))
                .args(["site", "--config"])
                .arg(&config)
                .env("BROKK_TEST_SECRET", "agent-only-secret")
                .stderr(Stdio::null()),
        );
        Agent {
            server,
            dir: dir.to_path_buf(),
        }
    }

    fn client(&self, token: &str) -> RemoteSite {
        RemoteSite::new(&self.server.url, token)
    }

    /// Kills the agent (SIGKILL) and returns its directory.
    fn kill(self) -> PathBuf {
        let Agent { server, dir } = self;
        drop(server);
        dir
    }
}

/// A whole file of a job's sandbox.
fn read_file(site: &RemoteSite, job: &JobHandle, name: &str) -> Result<Vec<u8>, SiteError> {
    let mut out = Vec::new();
    site.file(job, name, None)?.read_to_end(&mut out).unwrap();
    Ok(out)
}

fn now() -> i64 {
    brokk_proto::wall_clock().0
}

fn req(amount: u32, duration: i64, earliest: i64, latest: i64) -> Request {
    Request {
        amount,
        duration: Duration(duration),
        earliest: Time(earliest),
        latest: Time(latest),
        flexible: false,
    }
}

fn granted(r: Reply) -> (ReservationId, Time) {
    match r {
        Reply::Granted { id, start } => (id, start),
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Polls a job until `done` holds or 20 s pass.
fn wait_for(site: &RemoteSite, job: &JobHandle, done: impl Fn(&JobView) -> bool) -> JobView {
    let t = Instant::now();
    loop {
        let v = site.job(job).unwrap();
        if done(&v) || t.elapsed() > StdDuration::from_secs(20) {
            return v;
        }
        std::thread::sleep(StdDuration::from_millis(50));
    }
}

fn terminal(v: &JobView) -> bool {
    v.state.is_terminal()
}

fn shell(script: &str) -> Job {
    Job {
        executable: Some("/bin/sh".into()),
        arguments: vec!["-c".into(), script.into()],
        wall_time: Some(Duration(60)),
        ..Job::default()
    }
}

#[test]
fn reservations_answer_with_all_three_replies() {
    let agent = Agent::start(&scratch("replies"));
    let mut ann = agent.client("tok-ann");
    let t = now() + 3600;
    let (full, start) = granted(ann.reserve("ann", &req(4, 100, t, t), None).unwrap());
    assert_eq!(start, Time(t));
    // The window is full: rejected, with the true next start (when `full` ends).
    assert_eq!(
        ann.reserve("ann", &req(1, 50, t, t + 50), None).unwrap(),
        Reply::Rejected {
            next_start: Some(Time(t + 100))
        }
    );
    // More than the site has: never.
    assert_eq!(
        ann.reserve("ann", &req(5, 10, t, t), None).unwrap(),
        Reply::Never {
            reason: NeverReason::OverCapacity { amount: 5, capacity: 4 }
        }
    );
    let probe = ann.probe(&req(2, 50, t, t + 500), 3).unwrap();
    assert_eq!(probe[0].start, Time(t + 100));
    let info = ann.info().unwrap();
    assert_eq!(
        (info.name.as_str(), info.total_slots, info.reservations),
        ("test-site", 4, true)
    );
    assert_eq!(info.bandwidth_bytes_per_s, Some(1_000_000));
    let v = ann.reservation(full).unwrap();
    assert_eq!(
        (v.owner.as_str(), v.amount, v.state),
        ("ann", 4, ReservationState::Committed)
    );
    ann.cancel("ann", full).unwrap();
    assert_eq!(ann.reservation(full).unwrap_err(), SiteError::Unknown);
    // Cancelled capacity is free again.
    granted(ann.reserve("ann", &req(4, 100, t, t), None).unwrap());
}

#[test]
fn preliminary_holds_lapse_unless_committed() {
    let agent = Agent::start(&scratch("holds"));
    let mut ann = agent.client("tok-ann");
    let t = now() + 3600;
    let hold = Some(Time(now() + 2));
    let (lapsing, _) = granted(ann.reserve("ann", &req(2, 100, t, t), hold).unwrap());
    let (kept, _) = granted(ann.reserve("ann", &req(2, 100, t, t), hold).unwrap());
    assert_eq!(ann.reservation(lapsing).unwrap().state, ReservationState::Preliminary);
    ann.commit("ann", kept).unwrap();
    std::thread::sleep(StdDuration::from_millis(3500));
    assert_eq!(ann.reservation(lapsing).unwrap_err(), SiteError::Unknown);
    assert_eq!(ann.reservation(kept).unwrap().state, ReservationState::Committed);
    // The lapsed hold's two units are free again, the committed ones are not.
    granted(ann.reserve("ann", &req(2, 100, t, t), None).unwrap());
    assert!(matches!(
        ann.reserve("ann", &req(1, 100, t, t), None).unwrap(),
        Reply::Rejected { .. }
    ));
}

#[test]
fn modify_is_atomic() {
    let agent = Agent::start(&scratch("modify"));
    let mut ann = agent.client("tok-ann");
    let t = now() + 3600;
    let (a, _) = granted(ann.reserve("ann", &req(3, 100, t, t), None).unwrap());
    let (b, _) = granted(ann.reserve("ann", &req(2, 100, t + 200, t + 200), None).unwrap());
    let before = ann.reservation(b).unwrap();
    // Into `a`'s span with 2 units: only 1 is free there; nothing changes.
    let into_a = Change {
        window: Some((Time(t), Time(t))),
        ..Change::default()
    };
    match ann.modify("ann", b, into_a) {
        Err(SiteError::NotGranted(Reply::Rejected { .. })) => {}
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(ann.reservation(b).unwrap(), before);
    // One unit fits beside `a`.
    let one = Change {
        amount: Some(1),
        window: Some((Time(t), Time(t))),
        ..Change::default()
    };
    assert_eq!(ann.modify("ann", b, one).unwrap(), Time(t));
    assert_eq!(ann.reservation(b).unwrap().amount, 1);
    ann.cancel("ann", a).unwrap();
}

#[test]
fn identities_are_checked() {
    let agent = Agent::start(&scratch("auth"));
    let mut ann = agent.client("tok-ann");
    let mut bob = agent.client("tok-bob");
    let t = now() + 3600;
    let (r, _) = granted(ann.reserve("ann", &req(1, 100, t, t), None).unwrap());
    assert_eq!(bob.reservation(r).unwrap_err(), SiteError::Forbidden);
    assert_eq!(bob.cancel("bob", r).unwrap_err(), SiteError::Forbidden);
    assert_eq!(bob.commit("bob", r).unwrap_err(), SiteError::Forbidden);
    let job = ann.submit("ann", &shell("true"), None).unwrap();
    assert_eq!(bob.job(&job).unwrap_err(), SiteError::Forbidden);
    assert_eq!(bob.cancel_job("bob", &job).unwrap_err(), SiteError::Forbidden);
    // Claiming someone else's reservation is refused too.
    assert_eq!(
        bob.submit("bob", &shell("true"), Some(r)).unwrap_err(),
        SiteError::Forbidden
    );
    let http = reqwest::blocking::Client::new();
    let get = |path: &str, token: Option<&str>| {
        let mut rq = http.get(format!("{}{path}", agent.server.url));
        if let Some(t) = token {
            rq = rq.bearer_auth(t);
        }
        rq.send().unwrap().status().as_u16()
    };
    assert_eq!(get("/v1/info", None), 401);
    assert_eq!(get("/v1/info", Some("wrong")), 401);
    assert_eq!(get("/healthz", None), 200);
    // Its runner answers: ready to take work, open as `/healthz` is.
    assert_eq!(get("/readyz", None), 200);
    let doc: serde_json::Value = http
        .get(format!("{}/openapi.json", agent.server.url))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["paths"]["/v1/reservations/{id}/commit"].is_object());
}

#[test]
fn a_delegate_speaks_only_for_the_users_it_is_given() {
    let agent = Agent::start_with(&scratch("delegates"), "[delegates]\nbroker = [\"ann\", \"grid-*\"]");
    let http = reqwest::blocking::Client::new();
    let submit = |token: &str, user: &str| {
        let r = http
            .post(format!("{}/v1/jobs", agent.server.url))
            .bearer_auth(token)
            .header("On-Behalf-Of", user)
            .body(serde_json::to_string(&shell("true")).unwrap())
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    assert_eq!(submit("tok-broker", "ann").0, 201);
    assert_eq!(submit("tok-broker", "grid-7").0, 201);
    for other in ["bob", "root", "eve", "ANN", "", "grid"] {
        let (status, why) = submit("tok-broker", other);
        assert_eq!(status, 403, "{other:?}: {why}");
        assert!(
            why.contains("may not speak for") || why.contains("names no user"),
            "{why}"
        );
    }
}

#[test]
fn bad_requests_get_clear_errors() {
    let agent = Agent::start(&scratch("errors"));
    let http = reqwest::blocking::Client::new();
    let post = |path: &str, body: String| {
        let r = http
            .post(format!("{}{path}", agent.server.url))
            .bearer_auth("tok-ann")
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.text().unwrap())
    };
    let (s, b) = post("/v1/reservations", "{not json".into());
    assert_eq!(s, 400, "{b}");
    let (s, b) = post(
        "/v1/reservations",
        r#"{"duration": 10, "earliest": "2030-01-01T00:00:00Z", "latest": "2030-01-01T00:00:00Z"}"#.into(),
    );
    assert!(s == 400 && b.contains("amount"), "{s} {b}");
    let (s, b) = post(
        "/v1/reservations",
        r#"{"amount": "four", "duration": 10, "earliest": "2030-01-01T00:00:00Z", "latest": "2030-01-01T00:00:00Z"}"#
            .into(),
    );
    assert!(s == 400 && b.contains("amount"), "{s} {b}");
    let (s, b) = post(
        "/v1/reservations",
        r#"{"amount": 1, "duration": 10, "earliest": "yesterday", "latest": "2030-01-01T00:00:00Z"}"#.into(),
    );
    assert!(s == 400 && b.contains("earliest"), "{s} {b}");
    let (s, b) = post("/v1/jobs", r#"{"arguments": ["x"]}"#.into());
    assert!(s == 400 && b.contains("executable"), "{s} {b}");
    // On its own connection: the agent closes it without reading the body.
    let big = reqwest::blocking::Client::new()
        .post(format!("{}/v1/probe", agent.server.url))
        .bearer_auth("tok-ann")
        .body(format!("{{\"pad\": \"{}\"}}", "x".repeat(2 << 20)))
        .send()
        .unwrap();
    assert_eq!(big.status().as_u16(), 413);
    for path in [
        "/v1/reservations/999",
        "/v1/reservations/abc",
        "/v1/jobs/12345",
        "/v1/nowhere",
    ] {
        let s = http
            .get(format!("{}{path}", agent.server.url))
            .bearer_auth("tok-ann")
            .send()
            .unwrap()
            .status();
        assert_eq!(s.as_u16(), 404, "{path}");
    }
    // The agent still answers after all that.
    let ok = http
        .get(format!("{}/v1/info", agent.server.url))
        .bearer_auth("tok-ann")
        .send()
        .unwrap();
    assert!(ok.status().is_success());
}

#[test]
fn jobs_run_as_real_processes_with_staging() {
    let dir = scratch("run");
    let agent = Agent::start(&dir);
    let (server, uploaded) = common::file_server();
    let local = dir.join("local-input.txt");
    std::fs::write(&local, "staged from a file\n").unwrap();
    let delivered = dir.join("delivered/result.txt");
    let mut ann = agent.client("tok-ann");
    let mut job = shell("echo \"hello $WHO $1\"; cat local.txt remote.txt; echo oops >&2; cat > echo.txt; cp echo.txt result.txt; exit 3");
    job.arguments.push("arg0".into());
    job.arguments.push("first-arg".into());
    job.environment = vec![EnvVar {
        name: "WHO".into(),
        value: "brokk".into(),
    }];
    job.stdin = Some("in.txt".into());
    job.stdout = Some("out.txt".into());
    job.stderr = Some("err.txt".into());
    job.input_files = vec![
        InputFile {
            name: "local.txt".into(),
            source: Some(format!("file://{}", local.display())),
            size: None,
            local: None,
        },
        // WebDAV's URL is HTTP's.
        InputFile {
            name: "remote.txt".into(),
            source: Some(format!("dav{}/data", server.trim_start_matches("http"))),
            size: None,
            local: None,
        },
        InputFile {
            name: "in.txt".into(),
            source: Some(format!("file://{}", local.display())),
            size: None,
            local: None,
        },
    ];
    job.output_files = vec![
        OutputFile {
            name: "result.txt".into(),
            target: Some(format!("file://{}", delivered.display())),
            size_estimate: None,
        },
        OutputFile {
            name: "out.txt".into(),
            target: Some(format!("{server}/up")),
            size_estimate: None,
        },
    ];
    let h = ann.submit("ann", &job, None).unwrap();
    let v = wait_for(&ann, &h, terminal);
    assert_eq!((v.state, v.exit_code), (JobPhase::Failed, Some(3)), "{v:?}");
    assert_eq!(v.reason.as_deref(), Some("exited with code 3"));
    assert!(v.started.is_some() && v.ended.is_some());
    let out = String::from_utf8(read_file(&ann, &h, "out.txt").unwrap()).unwrap();
    assert_eq!(out, "hello brokk first-arg\nstaged from a file\nstaged over http\n");
    assert_eq!(read_file(&ann, &h, "err.txt").unwrap(), b"oops\n");
    assert_eq!(std::fs::read_to_string(&delivered).unwrap(), "staged from a file\n");
    assert_eq!(*uploaded.lock().unwrap(), out.as_bytes());
    assert_eq!(read_file(&ann, &h, "missing.txt").unwrap_err(), SiteError::Unknown);
    // A failed stage-in fails the job with the reason.
    let mut bad = shell("true");
    bad.input_files = vec![InputFile {
        name: "x".into(),
        source: Some(format!("file://{}/does-not-exist", dir.display())),
        size: None,
        local: None,
    }];
    let h = ann.submit("ann", &bad, None).unwrap();
    let v = wait_for(&ann, &h, terminal);
    assert_eq!(v.state, JobPhase::Failed);
    assert!(v.reason.unwrap().contains("staging in x"));
}

#[test]
fn jobs_stay_inside_their_sandbox_and_the_sites_staging_rules() {
    let dir = scratch("confined");
    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    let mut bob = agent.client("tok-bob");
    // Ann's job leaves a file in her sandbox.
    let h = ann
        .submit("ann", &shell("echo ann-private > private.txt"), None)
        .unwrap();
    assert_eq!(wait_for(&ann, &h, terminal).state, JobPhase::Finished);
    let ann_file = dir.join(format!("jobs/job-{}/private.txt", h.0));
    assert!(ann_file.exists());
    let fails_with = |site: &mut RemoteSite, job: Job, words: &str| {
        let h = site.submit("x", &job, None).unwrap();
        let v = wait_for(site, &h, terminal);
        assert_eq!(v.state, JobPhase::Failed, "{v:?}");
        let reason = v.reason.unwrap_or_default();
        assert!(reason.contains(words), "{reason}");
    };
    // Stage-in reads neither system files nor another job's sandbox.
    for source in [
        "file:///etc/passwd".to_string(),
        format!("file://{}", ann_file.display()),
    ] {
        let mut job = shell("cat in.txt");
        job.input_files = vec![InputFile {
            name: "in.txt".into(),
            source: Some(source),
            size: None,
            local: None,
        }];
        fails_with(&mut bob, job, "only in the directories its configuration allows");
    }
    // A file URL names a path with no host, and a refusal reads the same
    // whether the file is there or not.
    for (source, words) in [
        ("file://localhost/etc/passwd", "no host: file:///PATH"),
        ("file://in.txt", "no host: file:///PATH"),
        (
            "file:///etc/shadow",
            "/etc/shadow: this site reads local files only in the directories",
        ),
        (
            "file:///etc/no-such-file",
            "/etc/no-such-file: this site reads local files only in the directories",
        ),
    ] {
        let mut job = shell("cat in.txt");
        job.input_files = vec![InputFile {
            name: "in.txt".into(),
            source: Some(source.into()),
            size: None,
            local: None,
        }];
        fails_with(&mut bob, job, words);
    }
    // Stage-out writes nowhere outside the allowed directories, and never
    // follows a link the job planted.
    let outside = std::env::temp_dir().join(format!("brokk-outside-{}", std::process::id()));
    let mut job = shell("echo x > r.txt");
    job.output_files = vec![OutputFile {
        name: "r.txt".into(),
        target: Some(format!("file://{}/r.txt", outside.display())),
        size_estimate: None,
    }];
    fails_with(&mut bob, job, "only in the directories its configuration allows");
    assert!(!outside.exists());
    let mut job = shell("ln -s /etc/passwd leak");
    job.output_files = vec![OutputFile {
        name: "leak".into(),
        target: Some(format!("file://{}/leaked.txt", dir.display())),
        size_estimate: None,
    }];
    fails_with(&mut bob, job, "staging out leak");
    assert!(!dir.join("leaked.txt").exists());
    // The job's environment holds nothing of the agent's.
    let h = bob.submit("bob", &shell("env > env.txt"), None).unwrap();
    assert_eq!(wait_for(&bob, &h, terminal).state, JobPhase::Finished);
    let env = String::from_utf8(read_file(&bob, &h, "env.txt").unwrap()).unwrap();
    assert!(!env.contains("agent-only-secret"), "{env}");
    assert!(env.contains(&format!("BROKK_JOB_ID={}", h.0)), "{env}");
    // An absolute or escaping working directory is refused at submission.
    for wd in ["/etc", "../..", "a/../../b"] {
        let mut job = shell("true");
        job.working_directory = Some(wd.into());
        match bob.submit("bob", &job, None) {
            Err(SiteError::Refused { reason, .. }) => assert!(reason.contains("working_directory"), "{reason}"),
            other => panic!("{wd}: {other:?}"),
        }
    }
    // A relative one is made inside the sandbox.
    let mut job = shell("pwd > ../where.txt");
    job.working_directory = Some("sub/dir".into());
    let h = bob.submit("bob", &job, None).unwrap();
    assert_eq!(wait_for(&bob, &h, terminal).state, JobPhase::Finished);
    let wd = String::from_utf8(read_file(&bob, &h, "sub/where.txt").unwrap()).unwrap();
    assert!(wd.trim().ends_with(&format!("job-{}/sub/dir", h.0)), "{wd}");
    // Sandboxes and the database are private to the agent's account.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.join(format!("jobs/job-{}", h.0))), 0o700);
    assert_eq!(mode(dir.join("site.db")), 0o600);
}

#[test]
fn wall_time_is_enforced() {
    let agent = Agent::start(&scratch("walltime"));
    let mut ann = agent.client("tok-ann");
    let mut job = shell("trap '' TERM; sleep 30");
    job.wall_time = Some(Duration(1));
    let t = Instant::now();
    let h = ann.submit("ann", &job, None).unwrap();
    let v = wait_for(&ann, &h, terminal);
    assert_eq!(v.state, JobPhase::Failed, "{v:?}");
    assert!(v.reason.unwrap().contains("wall time"));
    // SIGTERM is ignored, so SIGKILL after the 1 s grace: about 2 s in all.
    assert!(t.elapsed() < StdDuration::from_secs(10), "{:?}", t.elapsed());
}

/// A job whose program does not exist fails with a reason that names it,
/// not the bare `No such file or directory`.
#[test]
fn a_job_whose_program_is_missing_fails_naming_it() {
    let agent = Agent::start(&scratch("missing-program"));
    let mut ann = agent.client("tok-ann");
    let job = Job {
        executable: Some("/opt/nowhere/simulate".into()),
        wall_time: Some(Duration(60)),
        ..Job::default()
    };
    let h = ann.submit("ann", &job, None).unwrap();
    let v = wait_for(&ann, &h, terminal);
    assert_eq!(v.state, JobPhase::Failed, "{v:?}");
    let why = v.reason.unwrap();
    assert!(why.contains("no program /opt/nowhere/simulate"), "{why}");
}

/// Whether process `pid` is still running (a zombie counts as ended).
fn running_pid(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// A job that leaves its process group and its parent (a `setsid` child
/// and a grandchild whose parent exits at once) before `tail`.
fn escaping(tail: &str) -> Job {
    shell(&format!(
        "setsid sleep 300 & echo $! > child.pid; (setsid sleep 300 & echo $! > grandchild.pid); {tail}"
    ))
}

/// The pids an [`escaping`] job wrote, once both are there.
fn escaped_pids(site: &RemoteSite, job: &JobHandle) -> Vec<i32> {
    let t = Instant::now();
    loop {
        let pids: Vec<i32> = ["child.pid", "grandchild.pid"]
            .iter()
            .filter_map(|f| read_file(site, job, f).ok())
            .filter_map(|b| String::from_utf8_lossy(&b).trim().parse().ok())
            .collect();
        if pids.len() == 2 {
            return pids;
        }
        assert!(t.elapsed() < StdDuration::from_secs(20), "the job wrote no pids");
        std::thread::sleep(StdDuration::from_millis(50));
    }
}

/// Asserts that none of `pids` is running within a few seconds.
fn all_gone(pids: &[i32], after: &str) {
    let t = Instant::now();
    while pids.iter().any(|p| running_pid(*p)) && t.elapsed() < StdDuration::from_secs(10) {
        std::thread::sleep(StdDuration::from_millis(50));
    }
    let left: Vec<&i32> = pids.iter().filter(|p| running_pid(**p)).collect();
    assert!(left.is_empty(), "processes {left:?} outlived their job after {after}");
}

#[test]
fn nothing_outlives_its_job() {
    let agent = Agent::start(&scratch("contained"));
    let mut ann = agent.client("tok-ann");
    // Cancelled.
    let cancelled = ann.submit("ann", &escaping("sleep 300"), None).unwrap();
    let pids = escaped_pids(&ann, &cancelled);
    assert!(pids.iter().all(|p| running_pid(*p)));
    ann.cancel_job("ann", &cancelled).unwrap();
    assert_eq!(wait_for(&ann, &cancelled, terminal).state, JobPhase::Cancelled);
    all_gone(&pids, "a cancel");
    // Out of wall time.
    let mut over = escaping("sleep 300");
    over.wall_time = Some(Duration(2));
    let over = ann.submit("ann", &over, None).unwrap();
    let pids = escaped_pids(&ann, &over);
    let v = wait_for(&ann, &over, terminal);
    assert!(v.reason.as_deref().is_some_and(|r| r.contains("wall time")), "{v:?}");
    all_gone(&pids, "its wall time");
    // Ended by itself, its daemons left behind.
    let done = ann.submit("ann", &escaping("true"), None).unwrap();
    assert_eq!(wait_for(&ann, &done, terminal).state, JobPhase::Finished);
    all_gone(&escaped_pids(&ann, &done), "its own end");
}

#[test]
fn staging_reaches_no_service_of_the_sites_own_host_unless_allowed() {
    let agent = Agent::start_with(&scratch("egress"), "");
    let (server, _) = common::file_server();
    let mut ann = agent.client("tok-ann");
    let port = agent.server.url.rsplit(':').next().unwrap().to_string();
    for source in [
        format!("{server}/data"),
        format!("http://localhost:{port}/healthz"),
        format!("http://[::1]:{port}/healthz"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        format!("http://0.0.0.0:{port}/healthz"),
    ] {
        let mut job = shell("cat in.txt");
        job.input_files = vec![InputFile {
            name: "in.txt".into(),
            source: Some(source.clone()),
            size: None,
            local: None,
        }];
        let h = ann.submit("ann", &job, None).unwrap();
        let v = wait_for(&ann, &h, terminal);
        assert_eq!(v.state, JobPhase::Failed, "{source}: {v:?}");
        let reason = v.reason.unwrap_or_default();
        assert!(
            reason.contains("own host's services") || reason.contains("stage_hosts"),
            "{source}: {reason}"
        );
    }
}

#[test]
fn a_fork_loop_stops_at_the_jobs_process_limit() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: a job's process limit is its cgroup's, which only root makes here");
        return;
    }
    let agent = Agent::start_with(&scratch("forks"), "job_processes = 40");
    let mut ann = agent.client("tok-ann");
    let mut bob = agent.client("tok-bob");
    // Each round starts a process and counts it; dash gives up at the first
    // fork refused.
    let greedy = ann
        .submit(
            "ann",
            &shell("i=0; while [ $i -lt 400 ]; do sleep 300 & i=$((i+1)); echo $i > count; done"),
            None,
        )
        .unwrap();
    let v = wait_for(&ann, &greedy, terminal);
    assert_eq!((v.state, v.exit_code), (JobPhase::Failed, Some(2)), "{v:?}");
    let count: u32 = String::from_utf8(read_file(&ann, &greedy, "count").unwrap())
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(count < 40, "{count} processes started past a limit of 40");
    // Another user's job is served meanwhile and after.
    let other = bob.submit("bob", &shell("echo fine > out"), None).unwrap();
    assert_eq!(wait_for(&bob, &other, terminal).state, JobPhase::Finished);
    assert_eq!(read_file(&bob, &other, "out").unwrap(), b"fine\n");
}

#[test]
fn jobs_cancel_in_every_state() {
    let agent = Agent::start(&scratch("cancel"));
    let (server, _) = common::file_server();
    let mut ann = agent.client("tok-ann");
    // Running.
    let running = ann.submit("ann", &shell("sleep 30"), None).unwrap();
    wait_for(&ann, &running, |v| v.state == JobPhase::Running);
    // Queued: in a reservation an hour ahead.
    let t = now() + 3600;
    let (r, _) = granted(ann.reserve("ann", &req(1, 600, t, t), None).unwrap());
    let queued = ann.submit("ann", &shell("true"), Some(r)).unwrap();
    let v = wait_for(&ann, &queued, |v| v.state == JobPhase::Queued);
    assert_eq!(v.planned_start, Some(Time(t)));
    // Staging in from a server that never answers.
    let mut stuck_in = shell("true");
    stuck_in.input_files = vec![InputFile {
        name: "x".into(),
        source: Some(format!("{server}/hang")),
        size: None,
        local: None,
    }];
    let staging_in = ann.submit("ann", &stuck_in, None).unwrap();
    wait_for(&ann, &staging_in, |v| v.state == JobPhase::StagingIn);
    // Staging out to a server that never answers.
    let mut stuck_out = shell("echo x > y");
    stuck_out.output_files = vec![OutputFile {
        name: "y".into(),
        target: Some(format!("{server}/hang")),
        size_estimate: None,
    }];
    let staging_out = ann.submit("ann", &stuck_out, None).unwrap();
    wait_for(&ann, &staging_out, |v| v.state == JobPhase::StagingOut);
    // Accepted: cancelled right after submission.
    let accepted = ann.submit("ann", &shell("sleep 5"), None).unwrap();
    for h in [&accepted, &running, &queued, &staging_in, &staging_out] {
        ann.cancel_job("ann", h).unwrap();
    }
    for h in [&accepted, &running, &queued, &staging_in, &staging_out] {
        let v = wait_for(&ann, h, terminal);
        assert_eq!(v.state, JobPhase::Cancelled, "{v:?}");
    }
    // The claimed reservation stays with its owner; a finished job cancels as a no-op.
    assert_eq!(ann.reservation(r).unwrap().amount, 1);
    let done = ann.submit("ann", &shell("true"), None).unwrap();
    wait_for(&ann, &done, terminal);
    ann.cancel_job("ann", &done).unwrap();
    assert_eq!(ann.job(&done).unwrap().state, JobPhase::Finished);
}

#[test]
fn a_killed_agent_restarts_with_its_state() {
    let dir = scratch("restart");
    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    let t = now() + 3600;
    let (committed, _) = granted(ann.reserve("ann", &req(1, 600, t, t), None).unwrap());
    let hold_until = now() + 4;
    let (held, _) = granted(ann.reserve("ann", &req(1, 600, t, t), Some(Time(hold_until))).unwrap());
    let queued = ann.submit("ann", &shell("true"), Some(committed)).unwrap();
    wait_for(&ann, &queued, |v| v.state == JobPhase::Queued);
    let done = ann.submit("ann", &shell("echo done"), None).unwrap();
    wait_for(&ann, &done, terminal);
    let mut wide = shell("sleep 3; echo survived > s.txt");
    wide.cpus = Some(3);
    let running = ann.submit("ann", &wide, None).unwrap();
    wait_for(&ann, &running, |v| v.state == JobPhase::Running);
    let dir = agent.kill();

    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    assert_eq!(ann.reservation(committed).unwrap().state, ReservationState::Committed);
    assert_eq!(ann.reservation(held).unwrap().state, ReservationState::Preliminary);
    assert_eq!(ann.job(&queued).unwrap().state, JobPhase::Queued);
    assert_eq!(ann.job(&done).unwrap().state, JobPhase::Finished);
    // The running job outlived the agent under its supervisor, still holds
    // its slots, and ends with its true state.
    assert_eq!(ann.job(&running).unwrap().state, JobPhase::Running);
    let mut next = shell("true");
    next.cpus = Some(2);
    let after = ann.submit("ann", &next, None).unwrap();
    let v = wait_for(&ann, &running, terminal);
    assert_eq!((v.state, v.exit_code), (JobPhase::Finished, Some(0)), "{v:?}");
    assert_eq!(read_file(&ann, &running, "s.txt").unwrap(), b"survived\n");
    let w = wait_for(&ann, &after, terminal);
    assert!(
        w.started.unwrap() >= v.ended.unwrap(),
        "{w:?} started while {v:?} held its slots"
    );
    // The hold still lapses on time after the restart.
    while now() <= hold_until + 1 {
        std::thread::sleep(StdDuration::from_millis(200));
    }
    assert_eq!(ann.reservation(held).unwrap_err(), SiteError::Unknown);
    // New ids do not reuse old ones.
    let (fresh, _) = granted(ann.reserve("ann", &req(1, 10, t, t), None).unwrap());
    assert!(fresh.0 > held.0);
    let new_job = ann.submit("ann", &shell("true"), None).unwrap();
    assert!(new_job.0.parse::<u64>().unwrap() > running.0.parse::<u64>().unwrap());
}

#[test]
fn a_killed_agent_still_enforces_wall_time_and_cancel() {
    let dir = scratch("supervised");
    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    let marker = format!("brokk-overrun-{}", std::process::id());
    let mut stubborn = shell(&format!("trap '' TERM; sleep 60; : {marker}"));
    stubborn.wall_time = Some(Duration(3));
    let over = ann.submit("ann", &stubborn, None).unwrap();
    let cancelled = ann.submit("ann", &shell("sleep 60"), None).unwrap();
    wait_for(&ann, &over, |v| v.state == JobPhase::Running);
    wait_for(&ann, &cancelled, |v| v.state == JobPhase::Running);
    let dir = agent.kill();
    // No agent while the wall time runs out: the supervisor ends the job.
    std::thread::sleep(StdDuration::from_secs(6));
    let running = |m: &str| {
        Command::new("pgrep")
            .args(["-f", m])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    assert!(!running(&marker), "the job outlived its wall time without its agent");
    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    let v = wait_for(&ann, &over, terminal);
    assert_eq!(v.state, JobPhase::Failed);
    assert!(v.reason.unwrap().contains("wall time of 3 s exceeded"));
    // The other one is still running under its supervisor, and cancel reaches it.
    assert_eq!(ann.job(&cancelled).unwrap().state, JobPhase::Running);
    ann.cancel_job("ann", &cancelled).unwrap();
    assert_eq!(wait_for(&ann, &cancelled, terminal).state, JobPhase::Cancelled);
}

#[test]
fn jobs_start_at_their_planned_place_and_move_up_when_capacity_frees() {
    let agent = Agent::start(&scratch("queue"));
    let mut ann = agent.client("tok-ann");
    // A claimed reservation starts its job at the reservation's start.
    let at = now() + 3;
    let (r, _) = granted(ann.reserve("ann", &req(1, 60, at, at), None).unwrap());
    let claimed = ann.submit("ann", &shell("true"), Some(r)).unwrap();
    // Two jobs as wide as what the reservation leaves: the second is placed
    // after the first's wall time...
    let mut first = shell("sleep 1");
    first.cpus = Some(3);
    first.wall_time = Some(Duration(30));
    let mut second = shell("true");
    second.cpus = Some(3);
    second.wall_time = Some(Duration(5));
    let a = ann.submit("ann", &first, None).unwrap();
    let b = ann.submit("ann", &second, None).unwrap();
    let (va, vb) = (ann.job(&a).unwrap(), ann.job(&b).unwrap());
    assert_eq!(vb.planned_start.unwrap().0 - va.planned_start.unwrap().0, 30);
    // ...and moves up when the first ends early.
    let va = wait_for(&ann, &a, terminal);
    let vb = wait_for(&ann, &b, terminal);
    assert_eq!((va.state, vb.state), (JobPhase::Finished, JobPhase::Finished));
    let gap = vb.started.unwrap().0 - va.ended.unwrap().0;
    assert!((0..=1).contains(&gap), "second started {gap} s after the first ended");
    let vc = wait_for(&ann, &claimed, terminal);
    assert_eq!(vc.state, JobPhase::Finished);
    let late = vc.started.unwrap().0 - at;
    assert!(
        (0..=1).contains(&late),
        "claimed job started {late} s after its reservation"
    );
}

#[test]
fn a_flexible_reservation_moves_inside_its_window_to_make_room() {
    let agent = Agent::start(&scratch("flexible"));
    let mut ann = agent.client("tok-ann");
    let t = now() + 3600;
    let mut flexible = req(4, 100, t, t + 500);
    flexible.flexible = true;
    let (a, start) = granted(ann.reserve("ann", &flexible, None).unwrap());
    assert_eq!(start, Time(t));
    // A rigid request for the same span fits only if `a` moves; it does, within its window.
    let (b, start) = granted(ann.reserve("ann", &req(4, 100, t, t), None).unwrap());
    assert_eq!(start, Time(t));
    let moved = ann.reservation(a).unwrap();
    assert_eq!(moved.start, Time(t + 100));
    assert_eq!(moved.window, Some((Time(t), Time(t + 500))));
    assert_eq!(ann.reservation(b).unwrap().start, Time(t));
}

#[test]
fn retired_jobs_are_answered_from_the_database() {
    let dir = scratch("retired");
    std::fs::create_dir_all(&dir).unwrap();
    // Ended jobs leave the agent's memory at its next tick.
    std::fs::write(
        dir.join("site.toml"),
        "name = \"test-site\"\ncapacity = 4\ndatabase = \"site.db\"\nworkdir = \"jobs\"\nmin_job_age_s = 0\n\
         [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n",
    )
    .unwrap();
    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    ann.set_idempotency_key(Some("once".into()));
    let done = ann.submit("ann", &shell("echo kept > k.txt; exit 4"), None).unwrap();
    ann.set_idempotency_key(None);
    let ended = wait_for(&ann, &done, terminal);
    assert_eq!((ended.state, ended.exit_code), (JobPhase::Failed, Some(4)), "{ended:?}");
    let live = ann.submit("ann", &shell("sleep 30"), None).unwrap();
    wait_for(&ann, &live, |v| v.state == JobPhase::Running);
    std::thread::sleep(StdDuration::from_secs(2));
    let check = |ann: &mut RemoteSite| {
        assert_eq!(ann.job(&done).unwrap(), ended);
        assert_eq!(ann.job_by_key("once").unwrap(), Some(ended.clone()));
        assert_eq!(read_file(ann, &done, "k.txt").unwrap(), b"kept\n");
        // Cancelling what ended long ago changes nothing.
        ann.cancel_job("ann", &done).unwrap();
        assert_eq!(ann.job(&done).unwrap(), ended);
        // The same key is still the same job, not a second run.
        ann.set_idempotency_key(Some("once".into()));
        assert_eq!(ann.submit("ann", &shell("exit 9"), None).unwrap(), done);
        ann.set_idempotency_key(None);
        // A follower from the beginning sees the retired job's end, then
        // the live one, and nothing more once caught up.
        let feed = ann.changes(0, 0).unwrap();
        let seen: Vec<_> = feed.jobs.iter().map(|j| (j.id.clone(), j.state)).collect();
        assert_eq!(
            seen,
            vec![(done.0.clone(), JobPhase::Failed), (live.0.clone(), JobPhase::Running)]
        );
        assert!(ann.changes(feed.epoch, feed.version).unwrap().jobs.is_empty());
        // Another user is still kept out of it.
        let bob = agent_client(ann, "tok-bob");
        assert_eq!(bob.job(&done).unwrap_err(), SiteError::Forbidden);
        assert!(bob.job_by_key("once").unwrap().is_none());
        assert!(bob.changes(0, 0).unwrap().jobs.is_empty());
    };
    check(&mut ann);
    // The same after a restart, which loads only the live job.
    let dir = agent.kill();
    let agent = Agent::start(&dir);
    let mut ann = agent.client("tok-ann");
    check(&mut ann);
    let v = wait_for(&ann, &live, |v| v.state == JobPhase::Running);
    assert_eq!(v.state, JobPhase::Running);
    ann.cancel_job("ann", &live).unwrap();
}

/// A client of the same agent as `site` with another token.
fn agent_client(site: &RemoteSite, token: &str) -> RemoteSite {
    RemoteSite::new(site.endpoint(), token)
}

#[test]
fn an_agents_uploads_are_held_to_a_quota_and_go_once_no_job_needs_them() {
    let dir = scratch("upload-quota");
    let agent = Agent::start_with(
        &dir,
        "upload_quota_bytes = 200000\nupload_quota_files = 2\nupload_retention_s = 2",
    );
    let bob = agent.client("tok-bob");
    let ann = agent.client("tok-ann");
    let put = |site: &RemoteSite, content: &[u8]| {
        let file = dir.join("upload");
        std::fs::write(&file, content).unwrap();
        let (sha, _) = brokk_site::uploads::digest_file(&file).unwrap();
        (sha.clone(), site.put_upload(&sha, &file))
    };
    // More bytes than the quota in one file: refused, 413, read as such
    // though the client is still sending most of it when the agent refuses.
    match put(&bob, &vec![7u8; 8_000_000]).1 {
        Err(SiteError::Refused { reason, .. }) => assert!(reason.contains("200000 bytes"), "{reason}"),
        other => panic!("an upload over the quota: {other:?}"),
    }
    // Two files fit, a third does not; ann's store is her own.
    let (one, r) = put(&bob, b"one");
    r.unwrap();
    put(&bob, b"two").1.unwrap();
    assert!(put(&bob, b"three").1.is_err(), "a third file past a quota of two");
    put(&ann, b"three").1.unwrap();
    // Nothing needs them: gone after their retention, and room again.
    let t = Instant::now();
    while bob.has_upload(&one).unwrap() {
        assert!(
            t.elapsed() < StdDuration::from_secs(20),
            "uploads kept past their retention"
        );
        std::thread::sleep(StdDuration::from_millis(200));
    }
    put(&bob, b"three").1.unwrap();
}

#[test]
fn a_partitioned_site_serves_its_own_users_first() {
    // 4 slots, all held by a local job. A grid job (a delegate's, for ann:
    // short, 2 wide) is the short partition's first waiting job; a local
    // 4-wide short job arrives next. Under easy-m (Lawson and Smirni's
    // priorities) the local job takes the grid job's slot and runs first
    // once the slots free; under plain EASY the grid job keeps its turn.
    let first_to_run = |policy: &str| {
        let agent = Agent::start_with(
            &scratch(&format!("partitioned-{policy}")),
            &format!("policy = \"{policy}\"\n[delegates]\nbroker = [\"ann\"]"),
        );
        let mut ann = agent.client("tok-ann");
        let mut broker = agent.client("tok-broker");
        broker.set_on_behalf_of(Some("ann".into()));
        let job = |cpus: u32| Job {
            cpus: Some(cpus),
            wall_time: Some(Duration(300)),
            ..shell("sleep 30")
        };
        let holder = ann.submit("ann", &job(4), None).unwrap();
        wait_for(&ann, &holder, |v| v.state == JobPhase::Running);
        let grid = broker.submit("broker", &job(2), None).unwrap();
        let local = ann.submit("ann", &job(4), None).unwrap();
        let planned = |site: &RemoteSite, j| site.job(j).unwrap().planned_start;
        let (g, l) = (planned(&broker, &grid), planned(&ann, &local));
        ann.cancel_job("ann", &holder).unwrap();
        let t = Instant::now();
        let first = loop {
            if ann.job(&local).unwrap().state == JobPhase::Running {
                break "local";
            }
            if broker.job(&grid).unwrap().state == JobPhase::Running {
                break "grid";
            }
            assert!(
                t.elapsed() < StdDuration::from_secs(20),
                "{policy}: neither job started"
            );
            std::thread::sleep(StdDuration::from_millis(50));
        };
        for (site, j) in [(&mut ann, &local), (&mut broker, &grid)] {
            let _ = site.cancel_job("ann", j);
        }
        (first, g.is_some(), l.is_some())
    };
    // The local job holds the slot and the grid job none, then the local runs.
    assert_eq!(first_to_run("easy-m"), ("local", false, true));
    assert_eq!(first_to_run("easy"), ("grid", true, false));
}

#[test]
fn the_site_serves_its_queue_by_its_policy() {
    // 4 slots: 3 held by a first job for up to a minute, a 4-slot job
    // waits for them, and a 1-slot job of 10 s that ends before the wide
    // one could start (whichever second it arrives in): under conservative
    // backfilling (the default) it starts at once, under FCFS it waits
    // behind the wide one.
    let starts_at_once = |policy: &str| {
        let agent = Agent::start_with(&scratch(&format!("policy-{policy}")), &format!("policy = \"{policy}\""));
        let mut site = agent.client("tok-ann");
        let wide = |cpus: u32, wall: i64| Job {
            cpus: Some(cpus),
            wall_time: Some(Duration(wall)),
            ..shell("sleep 5")
        };
        let first = site.submit("ann", &wide(3, 60), None).unwrap();
        wait_for(&site, &first, |v| v.state == JobPhase::Running);
        site.submit("ann", &wide(4, 60), None).unwrap();
        let small = site.submit("ann", &wide(1, 10), None).unwrap();
        // Running within 3 s, or not: a job started at once passes through
        // `queued` on its way, so that state alone says nothing yet.
        let t = Instant::now();
        let running = loop {
            if site.job(&small).unwrap().state == JobPhase::Running {
                break true;
            }
            if t.elapsed() > StdDuration::from_secs(3) {
                break false;
            }
            std::thread::sleep(StdDuration::from_millis(50));
        };
        for j in [first, small] {
            let _ = site.cancel_job("ann", &j);
        }
        running
    };
    assert!(starts_at_once("conservative"));
    assert!(starts_at_once("easy"));
    assert!(!starts_at_once("fcfs"));
    // A policy the site does not know stops it with the key named.
    let dir = scratch("policy-bad");
    std::fs::write(
        dir.join("site.toml"),
        "name = \"s\"\ncapacity = 4\ndatabase = \"site.db\"\nworkdir = \"jobs\"\npolicy = \"sjf\"\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(["site", "--config"])
        .arg(dir.join("site.toml"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("policy \"sjf\": one of fcfs, easy, conservative"), "{err}");
}
