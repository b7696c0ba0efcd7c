//! Brokk in front of a real Globus GRAM5 gatekeeper: the fork job manager
//! that `scripts/gram-testbed.sh` starts from Debian's packages, named by
//! the directory in `BROKK_TEST_GRAM` (its `contact`, the test user's
//! `user.pem` and `user.key`, the CA in `ca/`). They need that gatekeeper
//! (and root, to stop it and to run jobs as a local account), so a plain
//! `cargo test` skips them (ignored); `scripts/test.sh` starts it and runs
//! them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

/// The local account `ann`'s jobs run as at the site.
const LOCAL_ACCOUNT: &str = "brokkgramjobs";
/// The local account `bob`'s jobs run as at the site.
const LOCAL_ACCOUNT2: &str = "brokkgramjobs2";

/// The testbed's directory.
fn bed() -> PathBuf {
    PathBuf::from(std::env::var_os("BROKK_TEST_GRAM").expect("BROKK_TEST_GRAM: scripts/test.sh starts the gatekeeper"))
}

/// The `[gram]` table for the testbed's gatekeeper with certificate `cert`
/// and key `key`.
fn gram_table(bed: &Path, cert: &Path, key: &Path) -> String {
    let contact = std::fs::read_to_string(bed.join("contact")).unwrap();
    format!(
        "contact = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nca_dir = \"{}\"\npoll_ms = 1000\ntimeout_s = 60\n",
        contact.trim(),
        cert.display(),
        key.display(),
        bed.join("ca").display()
    )
}

/// Creates the local accounts jobs run as, unless they exist.
fn local_account() {
    for name in [LOCAL_ACCOUNT, LOCAL_ACCOUNT2] {
        let known = Command::new("id").arg(name).output().unwrap();
        if !known.status.success() {
            let made = Command::new("useradd")
                .args(["-M", "-s", "/usr/sbin/nologin", name])
                .status()
                .unwrap();
            assert!(made.success(), "useradd {name}");
        }
    }
}

/// `[embedded.gram.users]` giving each `(user, cert, key)` its own credential.
fn users_table(users: &[(&str, &Path, &Path)]) -> String {
    let entries: Vec<String> = users
        .iter()
        .map(|(u, c, k)| format!("{u} = {{ cert = \"{}\", key = \"{}\" }}", c.display(), k.display()))
        .collect();
    format!("users = {{ {} }}\n", entries.join(", "))
}

/// A broker with one embedded site fronting the gatekeeper, as user `ann`,
/// whose jobs run as the local account.
fn broker(name: &str) -> (PathBuf, common::Server) {
    broker_for(name, &[("ann", LOCAL_ACCOUNT, "user")], "")
}

/// A broker with one embedded site fronting the gatekeeper, for `users`
/// (each a Brokk user, the local account their jobs run as, and the
/// testbed's credential file stem they reach the gatekeeper with), and
/// `accounts_only` users mapped to a local account with no credential.
fn broker_for(name: &str, users: &[(&str, &str, &str)], accounts_only: &str) -> (PathBuf, common::Server) {
    let bed = bed();
    local_account();
    let dir = common::scratch("gramtest", name);
    // The job account passes through to its sandbox and its proxy copy
    // (as an operator lets it, for local jobs too).
    std::fs::create_dir_all(dir.join("sites/gram1")).unwrap();
    let mut d = dir.join("sites/gram1");
    loop {
        let _ = Command::new("chmod").arg("o+x").arg(&d).status();
        if !d.pop() {
            break;
        }
    }
    let tokens: String = users
        .iter()
        .map(|(u, _, _)| format!("\"tok-{u}\" = \"{u}\"\n"))
        .chain((!accounts_only.is_empty()).then(|| format!("\"tok-{accounts_only}\" = \"{accounts_only}\"\n")))
        .collect();
    let accounts: Vec<String> = users
        .iter()
        .map(|(u, a, _)| format!("{u} = \"{a}\""))
        .chain((!accounts_only.is_empty()).then(|| format!("{accounts_only} = \"{LOCAL_ACCOUNT}\"")))
        .collect();
    let files: Vec<(PathBuf, PathBuf)> = users
        .iter()
        .map(|(_, _, stem)| (bed.join(format!("{stem}.pem")), bed.join(format!("{stem}.key"))))
        .collect();
    let credentials: Vec<(&str, &Path, &Path)> = users
        .iter()
        .zip(&files)
        .map(|((u, _, _), (c, k))| (*u, c.as_path(), k.as_path()))
        .collect();
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n{tokens}[[embedded]]\nname = \"gram1\"\ncapacity = 2\naccounts = {{ {} }}\nstage_in_dirs = [\"{}\"]\n[embedded.gram]\n{}{}",
        accounts.join(", "),
        dir.display(),
        gram_table(&bed, &bed.join("user.pem"), &bed.join("user.key")),
        users_table(&credentials)
    );
    common::write_private(&dir.join("broker.toml"), &config);
    let server = common::serve(&dir);
    (dir, server)
}

#[test]
#[ignore = "needs a local GRAM gatekeeper and root: scripts/gram-testbed.sh (scripts/test.sh starts it)"]
fn rsl_jsdl_and_script_jobs_run_through_the_gatekeeper_and_their_output_comes_back() {
    let (dir, server) = broker("langs");
    std::fs::write(dir.join("in.txt"), "data from the user\n").unwrap();
    // Staged in by the site from a directory it may read, then to the job
    // manager over GASS.
    let rsl = format!(
        r#"& (executable = /bin/sh)(arguments = -c "echo rsl on GRAM; id -un; cat in.txt")
  (stdout = out.txt)(stderr = err.txt)(maxWallTime = 5)
  (file_stage_in = (file://{}/in.txt in.txt))"#,
        dir.display()
    );
    let jsdl = r#"<?xml version="1.0" encoding="UTF-8"?>
<jsdl:JobDefinition xmlns:jsdl="http://schemas.ggf.org/jsdl/2005/11/jsdl" xmlns:jsdl-posix="http://schemas.ggf.org/jsdl/2005/11/jsdl-posix">
  <jsdl:JobDescription>
    <jsdl:Application>
      <jsdl-posix:POSIXApplication>
        <jsdl-posix:Executable>/bin/sh</jsdl-posix:Executable>
        <jsdl-posix:Argument>-c</jsdl-posix:Argument>
        <jsdl-posix:Argument>echo jsdl on GRAM; echo oops >&amp;2; exit 3</jsdl-posix:Argument>
        <jsdl-posix:Output>out.txt</jsdl-posix:Output>
        <jsdl-posix:Error>err.txt</jsdl-posix:Error>
        <jsdl-posix:WallTimeLimit>300</jsdl-posix:WallTimeLimit>
      </jsdl-posix:POSIXApplication>
    </jsdl:Application>
  </jsdl:JobDescription>
</jsdl:JobDefinition>"#;
    let script = "#!/bin/bash\n#SBATCH --time=5\n#SBATCH --output=out.txt\nfor i in 1 2 3; do echo \"line $i\"; done\necho made > made.txt\n";
    let url = server.url.clone();
    let d = dir.clone();
    let jsdl_run = std::thread::spawn(move || common::run_to_end(&url, "tok-ann", &d, "job.jsdl", jsdl));
    let url = server.url.clone();
    let d = dir.clone();
    let script_run = std::thread::spawn(move || common::run_to_end(&url, "tok-ann", &d, "job.sbatch", script));
    let (rid, rend) = common::run_to_end(&server.url, "tok-ann", &dir, "job.rsl", &rsl);
    let (jid, jend) = jsdl_run.join().unwrap();
    let (sid, send) = script_run.join().unwrap();
    assert_eq!(rend["state"], "finished", "{rend}");
    assert_eq!(rend["site"], "gram1", "{rend}");
    assert_eq!(rend["exit_code"], 0, "{rend}");
    // The input was staged to the job manager, and the job ran as the
    // account the gatekeeper's grid-mapfile maps the certificate to.
    assert_eq!(
        common::output(&server.url, "tok-ann", &rid, "out.txt"),
        "rsl on GRAM\nbrokkgram\ndata from the user\n"
    );
    // The exit status crossed GRAM, which does not carry it.
    assert_eq!(jend["state"], "failed", "{jend}");
    assert_eq!(jend["exit_code"], 3, "{jend}");
    assert_eq!(
        common::output(&server.url, "tok-ann", &jid, "out.txt"),
        "jsdl on GRAM\n"
    );
    assert_eq!(common::output(&server.url, "tok-ann", &jid, "err.txt"), "oops\n");
    // A script job ran its script with its own interpreter, and a file it
    // made came back.
    assert_eq!(send["exit_code"], 0, "{send}");
    assert_eq!(
        common::output(&server.url, "tok-ann", &sid, "out.txt"),
        "line 1\nline 2\nline 3\n"
    );
    assert_eq!(common::output(&server.url, "tok-ann", &sid, "made.txt"), "made\n");
    // The returned files belong to the local account the owner maps to.
    let sandbox = std::fs::read_dir(dir.join("sites/gram1/jobs"))
        .unwrap()
        .flatten()
        .find(|e| e.path().join("made.txt").exists())
        .expect("a sandbox with made.txt")
        .path();
    let owner = Command::new("stat")
        .args(["-c", "%U"])
        .arg(sandbox.join("made.txt"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&owner.stdout).trim(), LOCAL_ACCOUNT);
}

#[test]
#[ignore = "needs a local GRAM gatekeeper and root: scripts/gram-testbed.sh (scripts/test.sh starts it)"]
fn the_site_does_not_reserve_and_cancel_kills_the_job() {
    let (dir, server) = broker("cancel");
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let site = sites
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "gram1"))
        .unwrap_or_else(|| panic!("{sites}"))
        .clone();
    assert_eq!(site["total_slots"].as_u64(), Some(2), "{site}");
    assert_eq!(site["reservations"], false, "{site}");
    let o = common::brokk(
        &server.url,
        "tok-ann",
        &["reserve", "--amount", "1", "--duration", "10m"],
    );
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    // A sleep no other test runs, to find on this host (the fork job
    // manager runs jobs here).
    let marker = format!("sleep {}", 1000 + std::process::id() % 5000);
    std::fs::write(
        dir.join("long.rsl"),
        format!("&(executable = /bin/sh)(arguments = -c \"{marker}\")(maxWallTime = 5)"),
    )
    .unwrap();
    let path = dir.join("long.rsl").display().to_string();
    let sub = common::json(&server.url, "tok-ann", &["submit", "--json", &path]);
    let id = sub["id"].as_str().unwrap().to_string();
    common::wait_for_state(&server.url, "tok-ann", &id, "running", Duration::from_secs(60));
    let alive = || {
        Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .unwrap()
            .status
            .success()
    };
    assert!(alive(), "the job's process is not running here");
    let o = common::brokk(&server.url, "tok-ann", &["cancel", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let end = common::watch_end(&server.url, "tok-ann", &id);
    assert_eq!(end["state"], "cancelled", "{end}");
    // The job manager killed the process itself.
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive() {
        assert!(
            Instant::now() < deadline,
            "the job's process still runs after the cancel"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs a local GRAM gatekeeper and root: scripts/gram-testbed.sh (scripts/test.sh starts it)"]
fn a_certificate_the_gatekeeper_does_not_trust_is_a_clear_error() {
    let bed = bed();
    let dir = common::scratch("gramtest", "wrongcert");
    // A user certificate from a CA the site does not trust.
    let openssl = |args: &[&str]| {
        let o = Command::new("openssl").args(args).current_dir(&dir).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/O=Elsewhere/CN=their CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/O=Elsewhere/CN=stranger",
        "-keyout",
        "stranger.key",
        "-out",
        "stranger.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "stranger.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        "stranger.pem",
    ]);
    let config = format!(
        "name = \"gram1\"\ncapacity = 1\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"t\" = \"broker\"\n[gram]\n{}",
        gram_table(&bed, &dir.join("stranger.pem"), &dir.join("stranger.key"))
    );
    std::fs::write(dir.join("site.toml"), config).unwrap();
    let err = common::site_refuses(&dir.join("site.toml"));
    assert!(err.contains("GRAM credentials"), "{err}");
    assert!(err.contains("trusted CA"), "{err}");
}

#[test]
#[ignore = "needs a local GRAM gatekeeper and root: scripts/gram-testbed.sh (scripts/test.sh starts it)"]
fn a_gatekeeper_that_stops_answering_is_reported_and_its_job_kept() {
    let (dir, server) = broker("outage");
    std::fs::write(
        dir.join("slow.rsl"),
        "&(executable = /bin/sh)(arguments = -c \"sleep 6; echo survived\")(stdout = out.txt)(maxWallTime = 5)",
    )
    .unwrap();
    let path = dir.join("slow.rsl").display().to_string();
    let sub = common::json(&server.url, "tok-ann", &["submit", "--json", &path]);
    let id = sub["id"].as_str().unwrap().to_string();
    common::wait_for_state(&server.url, "tok-ann", &id, "running", Duration::from_secs(60));
    common::init_script("globus-gatekeeper", "stop");
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::site_available(&server.url, "tok-ann", "gram1") {
        if Instant::now() > deadline {
            common::init_script("globus-gatekeeper", "start");
            panic!("the site never said the gatekeeper was down");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    // The job ends meanwhile; its outputs cannot come back yet, and nothing
    // is lost.
    std::thread::sleep(Duration::from_secs(8));
    let job = common::json(&server.url, "tok-ann", &["status", "--json", &id]);
    common::init_script("globus-gatekeeper", "start");
    assert_eq!(job["state"], "running", "{job}");
    let end = common::watch_end(&server.url, "tok-ann", &id);
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(common::output(&server.url, "tok-ann", &id, "out.txt"), "survived\n");
    assert!(common::site_available(&server.url, "tok-ann", "gram1"));
}

#[test]
#[ignore = "needs a local GRAM gatekeeper and root: scripts/gram-testbed.sh (scripts/test.sh starts it)"]
fn two_users_at_one_gatekeeper_run_as_their_own_accounts_there() {
    let (dir, server) = broker_for(
        "twousers",
        &[("ann", LOCAL_ACCOUNT, "user"), ("bob", LOCAL_ACCOUNT2, "user2")],
        "carl",
    );
    let tag = std::process::id();
    // Ann's job leaves a file in her account's home at the gatekeeper.
    let (_, end) = common::run_to_end(
        &server.url,
        "tok-ann",
        &dir,
        "ann.json",
        &format!(
            r#"{{"executable": "/bin/sh", "arguments": ["-c", "id -un; echo secret > $HOME/brokk-secret-{tag}; chmod 600 $HOME/brokk-secret-{tag}"], "stdout": "out.txt", "wall_time": 60}}"#
        ),
    );
    assert_eq!(end["state"], "finished", "{end}");
    let id = end["id"].as_str().unwrap();
    assert_eq!(common::output(&server.url, "tok-ann", id, "out.txt"), "brokkgram\n");
    // Bob's reaches the gatekeeper as bob, runs as his own account there,
    // and cannot read hers.
    let (_, end) = common::run_to_end(
        &server.url,
        "tok-bob",
        &dir,
        "bob.json",
        &format!(
            r#"{{"executable": "/bin/sh", "arguments": ["-c", "id -un; cat ~brokkgram/brokk-secret-{tag} 2>/dev/null || echo denied"], "stdout": "out.txt", "wall_time": 60}}"#
        ),
    );
    assert_eq!(end["state"], "finished", "{end}");
    let id = end["id"].as_str().unwrap();
    assert_eq!(
        common::output(&server.url, "tok-bob", id, "out.txt"),
        "brokkgram2\ndenied\n"
    );
    let _ = std::fs::remove_file(format!("/home/brokkgram/brokk-secret-{tag}"));
    // Carl has an account here and no credential of his own: his job is not
    // sent under the site's identity (nor is its proxy given to his account).
    let (_, end) = common::run_to_end(
        &server.url,
        "tok-carl",
        &dir,
        "carl.json",
        r#"{"executable": "/bin/true", "wall_time": 60}"#,
    );
    assert_eq!(end["state"], "failed", "{end}");
}
