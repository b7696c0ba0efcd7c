//! Users apart at a site: two Unix accounts made by the test, a `brokk site`
//! (as root) mapping identities to them, jobs of each running as its own
//! account, neither able to read the other's sandbox or the agent's state;
//! and, on the Slurm testbed, Slurm's own record naming the right user.
//! It needs root (to create accounts and switch to them), so it is ignored
//! by a plain `cargo test`; `scripts/test.sh` runs it as root.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration as StdDuration, Instant};

use brokk_broker::{JobHandle, Site, SiteError};
use brokk_model::{Duration, Job};
use brokk_proto::wire::{JobPhase, JobView};
use brokk_proto::RemoteSite;

mod common;

const ANN: &str = "brokk-test-ann";
const BOB: &str = "brokk-test-bob";

/// Creates the test's accounts unless they exist.
fn accounts() {
    for name in [ANN, BOB] {
        let known = Command::new("id")
            .arg(name)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !known.is_ok_and(|s| s.success()) {
            let made = Command::new("useradd")
                .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
                .status()
                .expect("useradd");
            assert!(made.success(), "useradd {name}");
        }
    }
}

/// A scratch directory the job accounts can pass through (their sandboxes
/// are below it), holding a private configuration.
fn site_dir(name: &str, config: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::scratch("accounts", name);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    let path = dir.join("site.toml");
    std::fs::write(&path, config).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

fn start(dir: &Path) -> common::Server {
    common::spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["site", "--config"])
            .arg(dir.join("site.toml"))
            .stderr(Stdio::null()),
    )
}

fn shell(script: &str) -> Job {
    Job {
        executable: Some("/bin/sh".into()),
        arguments: vec!["-c".into(), script.into()],
        wall_time: Some(Duration(60)),
        stdout: Some("out.txt".into()),
        stderr: Some("err.txt".into()),
        ..Job::default()
    }
}

fn wait(site: &RemoteSite, job: &JobHandle) -> JobView {
    let t = Instant::now();
    loop {
        let v = site.job(job).unwrap();
        if v.state.is_terminal() || t.elapsed() > StdDuration::from_secs(60) {
            return v;
        }
        std::thread::sleep(StdDuration::from_millis(100));
    }
}

fn text(site: &RemoteSite, job: &JobHandle, name: &str) -> String {
    let mut out = String::new();
    std::io::Read::read_to_string(&mut site.file(job, name, None).unwrap(), &mut out).unwrap();
    out
}

fn owner_and_mode(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.uid(), m.mode() & 0o777)
}

fn uid_of(name: &str) -> u32 {
    let o = Command::new("id").args(["-u", name]).output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

#[test]
#[ignore = "creates Unix accounts and runs jobs as them: needs root; scripts/test.sh runs it"]
fn a_brokers_embedded_site_with_accounts_runs_jobs_out_of_the_box() {
    assert!(nix::unistd::geteuid().is_root(), "run as root (scripts/test.sh does)");
    accounts();
    // The broker makes its state directories private; its embedded site's
    // job accounts must still reach their sandboxes below them.
    let dir = common::scratch("accounts", "embedded-broker");
    // A directory of the operator's own, which the broker leaves as it is,
    // refuses the start with what to change.
    let config = |dir: &Path| {
        std::fs::write(
            dir.join("broker.toml"),
            format!(
                "database = \"broker.db\"\nstate_dir = \"state\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
             [[embedded]]\nname = \"apart\"\ncapacity = 2\naccounts = {{ ann = \"{ANN}\" }}\n"
            ),
        )
        .unwrap()
    };
    config(&dir);
    let refused = Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(["serve", "--config"])
        .arg(dir.join("broker.toml"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("chmod o+x"), "{said}");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).unwrap();
        std::fs::set_permissions(dir.join("broker.toml"), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let broker = common::serve(&dir);
    let http = reqwest::blocking::Client::new();
    let job = serde_json::json!({
        "executable": "/bin/sh", "arguments": ["-c", "id -un"], "stdout": "who.txt", "wall_time": 60,
    });
    let r: serde_json::Value = http
        .post(format!("{}/v1/jobs", broker.url))
        .bearer_auth("tok-ann")
        .json(&serde_json::json!({ "description": job.to_string(), "format": "json" }))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let id = r["id"].as_str().unwrap_or_else(|| panic!("{r}")).to_string();
    let t = Instant::now();
    let v = loop {
        let v: serde_json::Value = http
            .get(format!("{}/v1/jobs/{id}", broker.url))
            .bearer_auth("tok-ann")
            .send()
            .unwrap()
            .json()
            .unwrap();
        if ["finished", "failed", "cancelled"].contains(&v["state"].as_str().unwrap_or("")) {
            break v;
        }
        assert!(t.elapsed() < StdDuration::from_secs(60), "{v}");
        std::thread::sleep(StdDuration::from_millis(100));
    };
    assert_eq!(v["state"], "finished", "{v}");
    let who = http
        .get(format!("{}/v1/jobs/{id}/files/who.txt", broker.url))
        .bearer_auth("tok-ann")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(who.trim(), ANN);
}

#[test]
#[ignore = "creates Unix accounts and runs jobs as them: needs root; scripts/test.sh runs it"]
fn each_users_jobs_run_as_their_own_account_and_stay_apart() {
    assert!(nix::unistd::geteuid().is_root(), "run as root (scripts/test.sh does)");
    accounts();
    let dir = site_dir(
        "embedded",
        &format!(
            "name = \"apart\"\ncapacity = 4\ndatabase = \"site.db\"\nworkdir = \"jobs\"\nkill_grace = 1\n\
             delegates = [\"broker\"]\nstage_in_dirs = [\"inputs\"]\nstage_out_dirs = [\"results\"]\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\"tok-carol\" = \"carol\"\n\
             \"tok-broker\" = \"broker\"\n[accounts]\nann = \"{ANN}\"\nbob = \"{BOB}\"\n"
        ),
    );
    // Inputs the agent may stage in: one any account may read, one only root may.
    {
        use std::os::unix::fs::PermissionsExt;
        let inputs = dir.join("inputs");
        std::fs::create_dir_all(&inputs).unwrap();
        std::fs::set_permissions(&inputs, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (name, mode) in [("public.txt", 0o644), ("root-only.txt", 0o600)] {
            std::fs::write(inputs.join(name), format!("{name}\n")).unwrap();
            std::fs::set_permissions(inputs.join(name), std::fs::Permissions::from_mode(mode)).unwrap();
        }
    }
    let server = start(&dir);
    let mut ann = RemoteSite::new(&server.url, "tok-ann");
    let mut bob = RemoteSite::new(&server.url, "tok-bob");
    // Stage-in reads for the job only what its account could read itself.
    let staged = |name: &str| {
        let mut job = shell("cat in.txt");
        job.input_files = vec![brokk_model::InputFile {
            name: "in.txt".into(),
            source: Some(format!("file://{}", dir.join("inputs").join(name).display())),
            size: None,
            local: None,
        }];
        job
    };
    let h = ann.submit("ann", &staged("public.txt"), None).unwrap();
    assert_eq!(wait(&ann, &h).state, JobPhase::Finished);
    assert_eq!(text(&ann, &h, "out.txt"), "public.txt\n");
    let h = ann.submit("ann", &staged("root-only.txt"), None).unwrap();
    let v = wait(&ann, &h);
    assert_eq!(v.state, JobPhase::Failed, "{v:?}");
    assert!(v.reason.unwrap_or_default().contains("may not read"));
    // Stage-out writes only where the job's account may, and leaves the file its own.
    let results = dir.join("results");
    std::fs::create_dir_all(results.join("ann")).unwrap();
    let chown = |p: &Path, who: &str| {
        assert!(Command::new("chown").arg(who).arg(p).status().unwrap().success());
    };
    chown(&results.join("ann"), ANN);
    let output = |target: &Path| {
        let mut job = shell("echo result > r.txt");
        job.output_files = vec![brokk_model::OutputFile {
            name: "r.txt".into(),
            target: Some(format!("file://{}", target.display())),
            size_estimate: None,
        }];
        job
    };
    let h = ann
        .submit("ann", &output(&results.join("ann/new/r.txt")), None)
        .unwrap();
    assert_eq!(wait(&ann, &h).state, JobPhase::Finished);
    assert_eq!(owner_and_mode(&results.join("ann/new/r.txt")).0, uid_of(ANN));
    assert_eq!(owner_and_mode(&results.join("ann/new")).0, uid_of(ANN));
    for target in [results.join("r.txt"), results.join("ann/new/r.txt")] {
        let h = bob.submit("bob", &output(&target), None).unwrap();
        let v = wait(&bob, &h);
        assert_eq!(v.state, JobPhase::Failed, "{target:?}: {v:?}");
        assert!(v.reason.unwrap_or_default().contains("may not write"));
    }
    assert_eq!(owner_and_mode(&results.join("ann/new/r.txt")).0, uid_of(ANN));
    let a = ann
        .submit("ann", &shell("id -un; echo ann-secret > secret.txt"), None)
        .unwrap();
    let va = wait(&ann, &a);
    assert_eq!((va.state, va.exit_code), (JobPhase::Finished, Some(0)), "{va:?}");
    assert_eq!(text(&ann, &a, "out.txt"), format!("{ANN}\n"));
    let sandbox = dir.join(format!("jobs/job-{}", a.0));
    assert_eq!(owner_and_mode(&sandbox), (uid_of(ANN), 0o700));
    assert_eq!(owner_and_mode(&sandbox.join("secret.txt")).0, uid_of(ANN));
    // Bob's job can read neither Ann's sandbox nor the agent's state.
    let probe = format!(
        "id -un; cat {s}/secret.txt && echo READ-SANDBOX; cat {d}/site.db > /dev/null && echo READ-DB; \
         cat {d}/site.toml && echo READ-CONFIG; ls {d}/jobs && echo LISTED-JOBS; true",
        s = sandbox.display(),
        d = dir.display()
    );
    let b = bob.submit("bob", &shell(&probe), None).unwrap();
    let vb = wait(&bob, &b);
    assert_eq!(vb.state, JobPhase::Finished, "{vb:?}");
    let out = text(&bob, &b, "out.txt");
    assert!(out.starts_with(&format!("{BOB}\n")), "{out}");
    for leak in [
        "ann-secret",
        "READ-SANDBOX",
        "READ-DB",
        "READ-CONFIG",
        "tok-ann",
        "LISTED-JOBS",
    ] {
        assert!(!out.contains(leak), "bob's job got {leak}: {out}");
    }
    assert!(text(&bob, &b, "err.txt").contains("Permission denied"));
    // An identity without an account is refused; a delegate names the user.
    match RemoteSite::new(&server.url, "tok-carol").submit("carol", &shell("true"), None) {
        Err(SiteError::Forbidden) => {}
        other => panic!("carol: {other:?}"),
    }
    let mut broker = RemoteSite::new(&server.url, "tok-broker");
    broker.set_on_behalf_of(Some("bob".into()));
    let c = broker.submit("broker", &shell("id -un"), None).unwrap();
    assert_eq!(wait(&broker, &c).state, JobPhase::Finished);
    assert_eq!(text(&broker, &c, "out.txt"), format!("{BOB}\n"));
    // Only a delegate may speak for someone else.
    bob.set_on_behalf_of(Some("ann".into()));
    match bob.submit("bob", &shell("true"), None) {
        Err(SiteError::Forbidden) => {}
        other => panic!("bob for ann: {other:?}"),
    }
}

#[test]
#[ignore = "creates Unix accounts and runs jobs as them: needs root; scripts/test.sh runs it"]
fn two_users_on_one_account_see_only_their_own_sandboxes() {
    assert!(nix::unistd::geteuid().is_root(), "run as root (scripts/test.sh does)");
    accounts();
    // Ann and Dave are both the one account (a grid-mapfile's pool account).
    let dir = site_dir(
        "pooled",
        &format!(
            "name = \"pooled\"\ncapacity = 4\ndatabase = \"site.db\"\nworkdir = \"jobs\"\nkill_grace = 1\n\
             [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-dave\" = \"dave\"\n[accounts]\nann = \"{ANN}\"\ndave = \"{ANN}\"\n"
        ),
    );
    let server = start(&dir);
    let mut ann = RemoteSite::new(&server.url, "tok-ann");
    let mut dave = RemoteSite::new(&server.url, "tok-dave");
    let a = ann
        .submit("ann", &shell("echo ann-secret > secret.txt; cat secret.txt"), None)
        .unwrap();
    assert_eq!(wait(&ann, &a).state, JobPhase::Finished);
    assert_eq!(text(&ann, &a, "out.txt"), "ann-secret\n", "her own sandbox is hers");
    let sandbox = dir.join(format!("jobs/job-{}", a.0));
    let probe = format!(
        "id -un; cat {s}/secret.txt && echo READ-SANDBOX; echo own > mine.txt; cat mine.txt; true",
        s = sandbox.display(),
    );
    let d = dave.submit("dave", &shell(&probe), None).unwrap();
    let vd = wait(&dave, &d);
    assert_eq!(vd.state, JobPhase::Finished, "{vd:?}");
    let out = text(&dave, &d, "out.txt");
    assert!(
        out.starts_with(&format!("{ANN}\n")),
        "dave runs as the pooled account: {out}"
    );
    assert!(
        !out.contains("ann-secret") && !out.contains("READ-SANDBOX"),
        "dave's job read ann's sandbox: {out}"
    );
    assert!(out.contains("own\n"), "dave's job works in its own sandbox: {out}");
    // Ann's file is where it was, for her.
    assert_eq!(text(&ann, &a, "secret.txt"), "ann-secret\n");
}

#[test]
#[ignore = "creates Unix accounts and submits to Slurm as them: needs root and the Slurm testbed; scripts/test.sh runs it"]
fn slurm_records_the_mapped_user_as_the_jobs_owner() {
    assert!(nix::unistd::geteuid().is_root(), "run as root (scripts/test.sh does)");
    let bed = std::env::var("BROKK_TEST_SLURM").expect("BROKK_TEST_SLURM: scripts/test.sh starts the Slurm testbed");
    accounts();
    let conf = Path::new(&bed).join("c2/slurm.conf");
    let name = format!("apart{}", std::process::id());
    let dir = site_dir(
        "slurm",
        &format!(
            "name = \"{name}\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
             [accounts]\nann = \"{ANN}\"\n[slurm]\nconf = \"{}\"\n",
            conf.display()
        ),
    );
    let server = start(&dir);
    let mut ann = RemoteSite::new(&server.url, "tok-ann");
    let h = ann.submit("ann", &shell("id -un"), None).unwrap();
    let v = wait(&ann, &h);
    assert_eq!((v.state, v.exit_code), (JobPhase::Finished, Some(0)), "{v:?}");
    assert_eq!(text(&ann, &h, "out.txt"), format!("{ANN}\n"));
    // Slurm's own completion record names the account.
    let log = std::fs::read_to_string(Path::new(&bed).join("c2/log/jobcomp.log")).unwrap_or_default();
    let record = log
        .lines()
        .rfind(|l| l.contains(&format!("Name=brokk-{name}-{}", h.0)))
        .unwrap_or_else(|| panic!("no completion record for the job in {log}"));
    assert!(record.contains(&format!("UserId={ANN}(")), "{record}");
}

/// Runs a Slurm command against the testbed's second cluster.
fn slurm_cmd(bed: &Path, program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env("SLURM_CONF", bed.join("c2/slurm.conf"))
        .output()
        .unwrap()
}

/// The Slurm ids of the jobs `squeue` lists (any state) that work below
/// `dir` (a site's directory: its jobs', whatever their names).
fn slurm_jobs_in(bed: &Path, dir: &Path) -> Vec<String> {
    let o = slurm_cmd(bed, "squeue", &["-h", "--states=all", "-o", "%i|%Z"]);
    let dir = dir.display().to_string();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_once('|'))
        .filter(|(_, wd)| wd.starts_with(&dir))
        .map(|(id, _)| id.trim().to_string())
        .collect()
}

/// `scontrol show job -o ID`'s `Key=` value.
fn slurm_field(bed: &Path, id: &str, key: &str) -> String {
    let o = slurm_cmd(bed, "scontrol", &["show", "job", "-o", id]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .to_string()
}

fn wait_state(site: &RemoteSite, job: &JobHandle, state: JobPhase) {
    let t = Instant::now();
    while site.job(job).unwrap().state != state {
        assert!(t.elapsed() < StdDuration::from_secs(60), "{:?}", site.job(job).unwrap());
        std::thread::sleep(StdDuration::from_millis(100));
    }
}

/// A `brokk site` as root in front of the testbed's second Slurm cluster,
/// with ann mapped to her account: the testbed, the site, ann's client and
/// the site's name.
fn hostile_site(
    tag: &str,
) -> (
    std::path::PathBuf,
    std::path::PathBuf,
    common::Server,
    RemoteSite,
    String,
) {
    assert!(nix::unistd::geteuid().is_root(), "run as root (scripts/test.sh does)");
    let bed = std::env::var("BROKK_TEST_SLURM").expect("BROKK_TEST_SLURM: scripts/test.sh starts the Slurm testbed");
    let bed = std::path::PathBuf::from(bed);
    accounts();
    let name = format!("{tag}{}", std::process::id());
    let dir = site_dir(
        &format!("slurm-{tag}"),
        &format!(
            "name = \"{name}\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
             [accounts]\nann = \"{ANN}\"\n[slurm]\nconf = \"{}\"\npoll_ms = 300\n",
            bed.join("c2/slurm.conf").display()
        ),
    );
    let server = start(&dir);
    let ann = RemoteSite::new(&server.url, "tok-ann");
    (bed, dir, server, ann, name)
}

/// A one-CPU, one-minute job of `script`, its output in `out.txt`.
fn scripted(script: &str) -> Job {
    Job {
        script: Some(script.into()),
        cpus: Some(1),
        wall_time: Some(Duration(60)),
        stdout: Some("out.txt".into()),
        ..Job::default()
    }
}

#[test]
#[ignore = "creates Unix accounts and submits to Slurm as them: needs root and the Slurm testbed; scripts/test.sh runs it"]
fn a_scripts_own_sbatch_header_is_refused_or_without_effect() {
    let (bed, dir, _server, mut ann, _) = hostile_site("header");
    let bed = bed.as_path();
    // Refused where no user may say it.
    for (header, says) in [
        ("#SBATCH --uid=0", "--uid=0"),
        ("#SBATCH --gid=0", "--gid=0"),
        ("#SBATCH --array=0-3", "an array"),
    ] {
        match ann.submit("ann", &scripted(&format!("#!/bin/sh\n{header}\ntrue\n")), None) {
            Err(SiteError::Refused { reason, .. }) => assert!(reason.contains(says), "{header}: {reason}"),
            other => panic!("{header} was not refused: {other:?}"),
        }
    }
    // Without effect where the description says otherwise: Slurm's own
    // record has the description's wall time and processors.
    let long = ann
        .submit(
            "ann",
            &scripted("#!/bin/sh\n#SBATCH --time=07:00:00\n#SBATCH --ntasks=6\nsleep 8\necho done\n"),
            None,
        )
        .unwrap();
    wait_state(&ann, &long, JobPhase::Running);
    let made = slurm_jobs_in(bed, &dir);
    assert_eq!(made.len(), 1, "one Slurm job for one Brokk job: {made:?}");
    assert_eq!(slurm_field(bed, &made[0], "TimeLimit"), "00:01:00");
    assert_eq!(slurm_field(bed, &made[0], "NumCPUs"), "1");
    let v = wait(&ann, &long);
    assert_eq!((v.state, v.exit_code), (JobPhase::Finished, Some(0)), "{v:?}");
}

#[test]
#[ignore = "creates Unix accounts and submits to Slurm as them: needs root and the Slurm testbed; scripts/test.sh runs it"]
fn a_job_named_to_forge_another_jobs_end_does_not_end_it() {
    let (bed, dir, _server, mut ann, name) = hostile_site("forge");
    let bed = bed.as_path();
    let (ann_uid, bob_uid) = (uid_of(ANN), uid_of(BOB));
    let long = ann
        .submit("ann", &scripted("#!/bin/sh\nsleep 10\necho done\n"), None)
        .unwrap();
    wait_state(&ann, &long, JobPhase::Running);
    let made = slurm_jobs_in(bed, &dir);
    let long_id = &made[0];
    // Bob, with plain sbatch, names a job so that the completion log holds
    // a line that reads as the end of ann's job.
    let forged = format!(
        "x\nJobId={long_id} UserId={ANN}({ann_uid}) GroupId={ANN}({ann_uid}) Name=brokk-{name}-{} JobState=COMPLETED \
         Partition=batch TimeLimit=1 StartTime=2026-01-01T00:00:00 ExitCode=0:0",
        long.0
    );
    let o = slurm_cmd(
        bed,
        "sbatch",
        &[
            "--uid",
            &bob_uid.to_string(),
            "--job-name",
            &forged,
            "--chdir",
            "/tmp",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::thread::sleep(StdDuration::from_secs(3));
    assert_eq!(
        ann.job(&long).unwrap().state,
        JobPhase::Running,
        "the forged record ended ann's job"
    );
    assert_eq!(slurm_field(bed, long_id, "JobState"), "RUNNING");
    let v = wait(&ann, &long);
    assert_eq!((v.state, v.exit_code), (JobPhase::Finished, Some(0)), "{v:?}");
    assert_eq!(text(&ann, &long, "out.txt"), "done\n");
}

#[test]
#[ignore = "creates Unix accounts and submits to Slurm as them: needs root and the Slurm testbed; scripts/test.sh runs it"]
fn a_job_that_renames_itself_and_deletes_its_marks_runs_once() {
    let (bed, dir, _server, mut ann, _) = hostile_site("rename");
    let bed = bed.as_path();
    // Followed by its id, it is never taken for lost, whatever its name.
    let renamer = ann
        .submit(
            "ann",
            &scripted(
                "#!/bin/sh\nscontrol update JobId=$SLURM_JOB_ID JobName=renamed\n\
                 rm -rf .brokk-ran \"$BROKK_SANDBOX/.brokk-ran\"\necho run >> runs.txt\nsleep 3\n",
            ),
            None,
        )
        .unwrap();
    let v = wait(&ann, &renamer);
    assert_eq!((v.state, v.exit_code), (JobPhase::Finished, Some(0)), "{v:?}");
    std::thread::sleep(StdDuration::from_secs(2));
    assert_eq!(text(&ann, &renamer, "runs.txt"), "run\n");
    let made = slurm_jobs_in(bed, &dir);
    assert_eq!(made.len(), 1, "one Slurm job for the renamer: {made:?}");
}

#[test]
#[ignore = "creates Unix accounts and submits to Slurm as them: needs root and the Slurm testbed; scripts/test.sh runs it"]
fn anns_reservation_on_slurm_admits_anns_own_job() {
    let (bed, _dir, _server, mut ann, name) = hostile_site("resv");
    let start = brokk_proto::wall_clock().0 + 10;
    let req = brokk_planner::Request {
        amount: 2,
        duration: Duration(300),
        earliest: brokk_model::Time(start),
        latest: brokk_model::Time(start + 600),
        flexible: false,
    };
    let brokk_planner::Reply::Granted { id, .. } = brokk_broker::Site::reserve(&mut ann, "ann", &req, None).unwrap()
    else {
        panic!("no reservation for ann");
    };
    let slurm_name = format!("brokk-{name}-r{}", id.0);
    let o = slurm_cmd(&bed, "scontrol", &["show", "res", "-o", &slurm_name]);
    let res = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(res.contains(&format!("Users={ANN}")), "{res}");
    // Her job runs as her account, in her reservation.
    let inside =
        brokk_broker::Site::submit(&mut ann, "ann", &shell("id -un; echo $SLURM_JOB_RESERVATION"), Some(id)).unwrap();
    let v = wait(&ann, &inside);
    assert_eq!((v.state, v.exit_code), (JobPhase::Finished, Some(0)), "{v:?}");
    assert_eq!(text(&ann, &inside, "out.txt"), format!("{ANN}\n{slurm_name}\n"));
}
