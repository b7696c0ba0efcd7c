//! Brokk in front of a real ARC compute element: the fork CE that
//! `scripts/arc-testbed.sh` starts from Debian's packages, named by the
//! directory in `BROKK_TEST_ARC` (its `url`, the test-CA user's `user.pem`
//! and `user.key`, and the CA in `ca/`). They need that CE, so a plain
//! `cargo test` skips them (ignored); `scripts/test.sh` starts it and runs
//! them. A-REX changes a job's state at its own cycles, up to a minute
//! apart, so each test takes a minute or two.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

/// The testbed's directory.
fn bed() -> PathBuf {
    PathBuf::from(std::env::var_os("BROKK_TEST_ARC").expect("BROKK_TEST_ARC: scripts/test.sh starts the ARC CE"))
}

/// The `[arc]` table for the testbed's CE with certificate `cert` and key `key`.
fn arc_table(bed: &Path, cert: &Path, key: &Path) -> String {
    let url = std::fs::read_to_string(bed.join("url")).unwrap();
    format!(
        "url = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nca_dir = \"{}\"\npoll_ms = 1000\n",
        url.trim(),
        cert.display(),
        key.display(),
        bed.join("ca").display()
    )
}

/// A broker with one embedded site fronting the CE, as user `ann`.
fn broker(name: &str) -> (PathBuf, common::Server) {
    let bed = bed();
    let dir = common::scratch("arctest", name);
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n[[embedded]]\nname = \"arc1\"\n[embedded.arc]\n{}",
        arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key"))
    );
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    let server = common::serve(&dir);
    (dir, server)
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn xrsl_and_jsdl_jobs_run_on_the_ce_and_their_output_comes_back() {
    let (dir, server) = broker("langs");
    std::fs::write(dir.join("in.txt"), "data from the user\n").unwrap();
    let xrsl = r#"&(executable="/bin/sh")(arguments="-c" "echo xrsl on ARC; id -un; cat in.txt")
 (stdout="out.txt")(stderr="err.txt")(inputfiles=("in.txt" ""))(walltime="5")"#;
    let jsdl = r#"<?xml version="1.0" encoding="UTF-8"?>
<jsdl:JobDefinition xmlns:jsdl="http://schemas.ggf.org/jsdl/2005/11/jsdl" xmlns:jsdl-posix="http://schemas.ggf.org/jsdl/2005/11/jsdl-posix">
  <jsdl:JobDescription>
    <jsdl:Application>
      <jsdl-posix:POSIXApplication>
        <jsdl-posix:Executable>/bin/sh</jsdl-posix:Executable>
        <jsdl-posix:Argument>-c</jsdl-posix:Argument>
        <jsdl-posix:Argument>echo jsdl on ARC; exit 3</jsdl-posix:Argument>
        <jsdl-posix:Output>out.txt</jsdl-posix:Output>
        <jsdl-posix:WallTimeLimit>300</jsdl-posix:WallTimeLimit>
      </jsdl-posix:POSIXApplication>
    </jsdl:Application>
  </jsdl:JobDescription>
</jsdl:JobDefinition>"#;
    // Both at once: the CE's state cycles are shared.
    let url = server.url.clone();
    let d = dir.clone();
    let jsdl_run = std::thread::spawn(move || common::run_to_end(&url, "tok-ann", &d, "job.jsdl", jsdl));
    let (xid, xend) = common::run_to_end(&server.url, "tok-ann", &dir, "job.xrsl", xrsl);
    let (jid, jend) = jsdl_run.join().unwrap();
    assert_eq!(xend["state"], "finished", "{xend}");
    assert_eq!(xend["site"], "arc1", "{xend}");
    assert_eq!(xend["exit_code"], 0, "{xend}");
    // The input was uploaded to the CE, and the job ran as the account the
    // CE maps the certificate to.
    assert_eq!(
        common::output(&server.url, "tok-ann", &xid, "out.txt"),
        "xrsl on ARC\nnobody\ndata from the user\n"
    );
    assert_eq!(jend["exit_code"], 3, "{jend}");
    assert_eq!(common::output(&server.url, "tok-ann", &jid, "out.txt"), "jsdl on ARC\n");
}

/// The health the CE's REST endpoint publishes in its GLUE 2 document, read
/// with curl and the test user's certificate.
fn ce_health() -> String {
    let bed = bed();
    let url = std::fs::read_to_string(bed.join("url")).unwrap();
    let ca = std::fs::read_dir(bed.join("ca"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "pem"))
        .expect("the test CA's certificate");
    let o = Command::new("curl")
        .args(["-sf", "-H", "Accept: application/json", "--cert"])
        .arg(bed.join("user.pem"))
        .arg("--key")
        .arg(bed.join("user.key"))
        .arg("--cacert")
        .arg(ca)
        .arg(format!("{}/rest/1.0/info", url.trim()))
        .output()
        .unwrap();
    assert!(o.status.success(), "curl: {}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    fn endpoints<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("InterfaceName").and_then(|n| n.as_str()) == Some("org.nordugrid.arcrest") {
                    out.push(v);
                }
                m.values().for_each(|x| endpoints(x, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| endpoints(x, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    endpoints(&doc, &mut found);
    found
        .first()
        .and_then(|e| e["HealthState"].as_str())
        .expect("the CE publishes its REST endpoint's health")
        .to_string()
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn the_site_shows_the_ce_slots_and_does_not_reserve() {
    let (_dir, server) = broker("resources");
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let site = sites
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "arc1"))
        .unwrap_or_else(|| panic!("{sites}"))
        .clone();
    let text = site.to_string();
    // The fork CE publishes one slot per CPU of this machine.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert_eq!(site["total_slots"].as_u64(), Some(cpus), "{text}");
    assert_eq!(site["reservations"], false, "{text}");
    // Its benchmark, queue and health come from the CE's GLUE 2 document.
    assert_eq!(site["benchmarks"][0]["name"], "HEPSPEC", "{text}");
    assert_eq!(site["shares"][0]["name"], "fork", "{text}");
    // A-REX's state cycle, which the broker's predictions add.
    assert_eq!(site["lag"], 60, "{text}");
    // The health is the CE's own, as its REST endpoint publishes it (a new
    // CE says `critical` until its first information cycle): read from the
    // CE before and after Brokk's table, until the two readings agree.
    let mut shown = None;
    for _ in 0..5 {
        let before = ce_health();
        std::thread::sleep(Duration::from_millis(1500));
        let table = common::brokk(&server.url, "tok-ann", &["resources"]);
        let row = String::from_utf8_lossy(&table.stdout)
            .lines()
            .find(|l| l.starts_with("arc1"))
            .unwrap_or_default()
            .to_string();
        if ce_health() == before {
            shown = Some((before, row));
            break;
        }
    }
    let (health, row) = shown.expect("the CE's health kept changing");
    assert!(
        row.contains(&format!(" {health} ")) && row.ends_with("fork"),
        "{health}: {row}"
    );
    // A reservation is refused with the reason rather than promised.
    let o = common::brokk(
        &server.url,
        "tok-ann",
        &["reserve", "--amount", "1", "--duration", "10m"],
    );
    assert!(!o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn cancel_reaches_the_ce() {
    let (dir, server) = broker("cancel");
    // A sleep no other test runs, to find on this host (the fork CE runs
    // jobs here).
    let marker = format!("sleep {}", 1000 + std::process::id() % 5000);
    std::fs::write(
        dir.join("long.xrsl"),
        format!(r#"&(executable="/bin/sh")(arguments="-c" "{marker}")(walltime="120")"#),
    )
    .unwrap();
    let path = dir.join("long.xrsl").display().to_string();
    let sub = common::json(&server.url, "tok-ann", &["submit", "--json", &path]);
    let id = sub["id"].as_str().unwrap().to_string();
    // Running, as the CE reports it (a minute's lag or so).
    common::wait_for_state(&server.url, "tok-ann", &id, "running", Duration::from_secs(240));
    let o = common::brokk(&server.url, "tok-ann", &["cancel", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let end = common::watch_end(&server.url, "tok-ann", &id);
    assert_eq!(end["state"], "cancelled", "{end}");
    // The CE's own log records the kill Brokk asked for (ARC 6.17's fork
    // LRMS then leaves the process itself running: seen here).
    let arc_id = std::fs::read_dir(dir.join("sites/arc1/jobs"))
        .unwrap()
        .flatten()
        .find_map(|e| std::fs::read_to_string(e.path().join(".brokk-arc-id")).ok())
        .expect("the CE's job id kept in the sandbox");
    let log = std::fs::read_to_string("/var/log/arc/arex.log").unwrap_or_default();
    let _ = Command::new("pkill").args(["-f", &marker]).status();
    assert!(
        log.contains(&format!("{}: Canceling job because of user request", arc_id.trim())),
        "A-REX's log has no cancel of {arc_id}"
    );
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn a_certificate_the_ce_does_not_trust_is_a_clear_error() {
    let bed = bed();
    let dir = common::scratch("arctest", "wrongcert");
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=stranger",
        ])
        .arg("-keyout")
        .arg(dir.join("stranger.key"))
        .arg("-out")
        .arg(dir.join("stranger.pem"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let config = format!(
        "name = \"arc1\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"t\" = \"broker\"\n[arc]\n{}timeout_s = 20\n",
        arc_table(&bed, &dir.join("stranger.pem"), &dir.join("stranger.key"))
    );
    std::fs::write(dir.join("site.toml"), config).unwrap();
    let err = common::site_refuses(&dir.join("site.toml"));
    assert!(err.contains("refused the certificate"), "{err}");
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn a_ce_that_stops_answering_is_reported_and_its_job_kept() {
    let (dir, server) = broker("outage");
    std::fs::write(
        dir.join("slow.xrsl"),
        r#"&(executable="/bin/sh")(arguments="-c" "sleep 5; echo survived")(stdout="out.txt")(walltime="10")"#,
    )
    .unwrap();
    let path = dir.join("slow.xrsl").display().to_string();
    let sub = common::json(&server.url, "tok-ann", &["submit", "--json", &path]);
    let id = sub["id"].as_str().unwrap().to_string();
    // Given to the CE (dispatched), then the CE's REST service stops.
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::json(&server.url, "tok-ann", &["status", "--json", &id])["state"] == "accepted" {
        assert!(Instant::now() < deadline, "never dispatched");
        std::thread::sleep(Duration::from_millis(200));
    }
    common::init_script("arc-arex-ws", "stop");
    let deadline = Instant::now() + Duration::from_secs(90);
    while common::site_available(&server.url, "tok-ann", "arc1") {
        if Instant::now() > deadline {
            common::init_script("arc-arex-ws", "start");
            panic!("the site never said the CE was down");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // Nothing is lost while it is down.
    std::thread::sleep(Duration::from_secs(5));
    let job = common::json(&server.url, "tok-ann", &["status", "--json", &id]);
    common::init_script("arc-arex-ws", "start");
    assert!(
        ["dispatched", "running"].contains(&job["state"].as_str().unwrap_or("")),
        "{job}"
    );
    // Back: the site answers again and the job is followed to its end.
    let end = common::watch_end(&server.url, "tok-ann", &id);
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(common::output(&server.url, "tok-ann", &id, "out.txt"), "survived\n");
    assert!(common::site_available(&server.url, "tok-ann", "arc1"));
}

/// A computing endpoint as ARC's LDAP information system renders it.
fn ldif_endpoint(url: &str) -> String {
    format!(
        "dn: GLUE2EndpointID=urn:ogf:ComputingEndpoint:{url},o=glue\nobjectClass: GLUE2Endpoint\n\
         objectClass: GLUE2ComputingEndpoint\nGLUE2EndpointURL: {url}\n\
         GLUE2EndpointInterfaceName: org.nordugrid.arcrest\n\n"
    )
}

/// The `brokk resources` row of site `name`, if there is one.
fn resource_row(url: &str, name: &str) -> Option<serde_json::Value> {
    let sites = common::json(url, "tok-ann", &["resources", "--json"]);
    sites.as_array()?.iter().find(|s| s["name"] == name).cloned()
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn ces_listed_in_glue2_become_sites_and_an_unreachable_one_is_reported() {
    let bed = bed();
    let dir = common::scratch("arctest", "discovery");
    let ce = std::fs::read_to_string(bed.join("url")).unwrap().trim().to_string();
    // The testbed's CE, and one nobody listens for.
    let listing = dir.join("ces.ldif");
    std::fs::write(
        &listing,
        ldif_endpoint(&ce) + &ldif_endpoint("https://127.0.0.1:9/arex"),
    )
    .unwrap();
    let arc = arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key")).replace(&format!("url = \"{ce}\"\n"), "");
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [discovery]\nendpoints = \"ces.ldif\"\ninterval_s = 2\ntimeout_s = 10\n[discovery.arc]\n{arc}"
    );
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    let server = common::serve(&dir);
    let host = ce.split("://").nth(1).and_then(|r| r.split(':').next()).unwrap();
    let name = format!("arc-{host}-443");
    // Found before the service answered: its slots from the CE.
    let row = resource_row(&server.url, &name).unwrap_or_else(|| panic!("no {name}"));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert_eq!(row["total_slots"].as_u64(), Some(cpus), "{row}");
    let bad = resource_row(&server.url, "arc-127-0-0-1-9").expect("the unreachable endpoint is reported");
    assert_eq!(bad["available"], false, "{bad}");
    assert!(
        bad["error"].as_str().unwrap().contains("https://127.0.0.1:9/arex"),
        "{bad}"
    );
    // A job runs there.
    let (id, end) = common::run_to_end(
        &server.url,
        "tok-ann",
        &dir,
        "job.xrsl",
        r#"&(executable="/bin/echo")(arguments="found")(stdout="out.txt")(walltime="5")"#,
    );
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(end["site"], name.as_str(), "{end}");
    assert_eq!(common::output(&server.url, "tok-ann", &id, "out.txt"), "found\n");
    // A CE listed later is added at a later reading (the CE on Slurm, when
    // the testbed has it).
    if let Ok(second) = std::fs::read_to_string(bed.join("slurm-url")) {
        let second = second.trim();
        std::fs::write(&listing, ldif_endpoint(&ce) + &ldif_endpoint(second)).unwrap();
        let name = format!("arc-{host}-8443");
        let deadline = Instant::now() + Duration::from_secs(60);
        while resource_row(&server.url, &name).is_none() {
            assert!(Instant::now() < deadline, "{second} was never added");
            std::thread::sleep(Duration::from_millis(500));
        }
        // No longer listed as unreachable: the listing dropped it.
        assert!(resource_row(&server.url, "arc-127-0-0-1-9").is_none());
    }
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn ces_published_in_an_arc_ldap_information_system_become_sites() {
    let bed = bed();
    let ldap =
        std::fs::read_to_string(bed.join("ldap")).expect("the testbed's LDAP information system (its `ldap` file)");
    let dir = common::scratch("arctest", "ldap");
    let ce = std::fs::read_to_string(bed.join("url")).unwrap().trim().to_string();
    let arc = arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key")).replace(&format!("url = \"{ce}\"\n"), "");
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [discovery]\nldap = \"{}\"\ninterval_s = 5\ntimeout_s = 10\n[discovery.arc]\n{arc}",
        ldap.trim()
    );
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    let server = common::serve(&dir);
    // ARC's information system holds its first data about two minutes after
    // it starts: until then the listing is empty.
    let host = ce.split("://").nth(1).and_then(|r| r.split(':').next()).unwrap();
    let name = format!("arc-{host}-443");
    let deadline = Instant::now() + Duration::from_secs(300);
    let row = loop {
        if let Some(row) = resource_row(&server.url, &name) {
            break row;
        }
        assert!(Instant::now() < deadline, "{name} never appeared from {}", ldap.trim());
        std::thread::sleep(Duration::from_secs(2));
    };
    assert_eq!(row["reservations"], false, "{row}");
    assert_eq!(row["shares"][0]["name"], "fork", "{row}");
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn the_ces_information_can_come_from_its_ldap_information_system() {
    let bed = bed();
    let ldap =
        std::fs::read_to_string(bed.join("ldap")).expect("the testbed's LDAP information system (its `ldap` file)");
    let arc = arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key"));
    // Read from a server that is not there, the site cannot start.
    let dir = common::scratch("arctest", "ldapinfo");
    let site = |ldap: &str| {
        format!(
            "name = \"arc1\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"t\" = \"broker\"\n[arc]\n{arc}ldap = \"{ldap}\"\n"
        )
    };
    std::fs::write(dir.join("site.toml"), site("ldap://127.0.0.1:9")).unwrap();
    let err = common::site_refuses(&dir.join("site.toml"));
    assert!(err.contains("ldap://127.0.0.1:9"), "{err}");
    // From the CE's own, it publishes the CE's slots, queue and health.
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"arc1\"\n[embedded.arc]\n{arc}ldap = \"{}\"\n",
        ldap.trim()
    );
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    let server = common::serve(&dir);
    let row = resource_row(&server.url, "arc1").expect("the site");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert_eq!(row["total_slots"].as_u64(), Some(cpus), "{row}");
    assert_eq!(row["shares"][0]["name"], "fork", "{row}");
    assert!(row["health"].is_string(), "{row}");
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn a_job_the_ce_refuses_fails_with_the_ces_reason() {
    use brokk_broker::Site;
    let bed = bed();
    let dir = common::scratch("arctest", "refused");
    std::fs::write(
        dir.join("site.toml"),
        format!(
            "name = \"arcrefuse\"\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n[tokens]\n\"tok-ann\" = \"ann\"\n[arc]\n{}",
            arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key"))
        ),
    )
    .unwrap();
    let server = common::spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["site", "--config"])
            .arg(dir.join("site.toml"))
            .stderr(std::process::Stdio::null()),
    );
    let mut site = brokk_proto::RemoteSite::new(&server.url, "tok-ann");
    // A-REX reads the description at submission and refuses a queue it
    // does not have (a broker would not send it there; a site's own client may).
    let job = brokk_model::Job {
        executable: Some("/bin/true".into()),
        queue: Some("nosuchqueue".into()),
        wall_time: Some(brokk_model::Duration(300)),
        ..Default::default()
    };
    let h = site.submit("ann", &job, None).unwrap();
    let t = Instant::now();
    let v = loop {
        let v = site.job(&h).unwrap();
        if v.state.is_terminal() {
            break v;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "still {v:?}: the refusal is retried forever"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let reason = v.reason.clone().unwrap_or_default();
    assert!(
        reason.contains("refused the job") && reason.contains("asked 3 times"),
        "{v:?}"
    );
}

/// Creates local account `name` unless it exists.
fn local_account(name: &str) {
    if !Command::new("id").arg(name).output().unwrap().status.success() {
        let made = Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", name])
            .status()
            .unwrap();
        assert!(made.success(), "useradd {name}");
    }
}

#[test]
#[ignore = "needs a local ARC CE and root: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn two_users_at_one_ce_run_as_their_own_accounts_there() {
    let bed = bed();
    for name in ["brokkarcjobs", "brokkarcjobs2"] {
        local_account(name);
    }
    let dir = common::scratch("arctest", "twousers");
    // The job accounts pass through to their sandboxes below it.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let cred = |stem: &str| {
        format!(
            "{{ cert = \"{}\", key = \"{}\" }}",
            bed.join(format!("{stem}.pem")).display(),
            bed.join(format!("{stem}.key")).display()
        )
    };
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n\
         \"tok-carl\" = \"carl\"\n[[embedded]]\nname = \"arc1\"\n\
         accounts = {{ ann = \"brokkarcjobs\", bob = \"brokkarcjobs2\", carl = \"brokkarcjobs2\" }}\n\
         [embedded.arc]\n{}users = {{ ann = {}, bob = {} }}\n",
        arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key")),
        cred("user"),
        cred("user2")
    );
    common::write_private(&dir.join("broker.toml"), &config);
    let server = common::serve(&dir);
    // Ann's job leaves a file in its session directory at the CE and stays.
    let tag = format!("brokk-secret-{}", std::process::id());
    std::fs::write(
        dir.join("ann.xrsl"),
        format!(r#"&(executable="/bin/sh")(arguments="-c" "echo secret > {tag}; sleep 300")(walltime="10")"#),
    )
    .unwrap();
    let path = dir.join("ann.xrsl").display().to_string();
    let sub = common::json(&server.url, "tok-ann", &["submit", "--json", &path]);
    let ann = sub["id"].as_str().unwrap().to_string();
    common::wait_for_state(&server.url, "tok-ann", &ann, "running", Duration::from_secs(240));
    // Bob's job reaches the CE as bob (its own account there) and cannot
    // read hers, which it could as the same account.
    let (bob, end) = common::run_to_end(
        &server.url,
        "tok-bob",
        &dir,
        "bob.xrsl",
        &format!(
            r#"&(executable="/bin/sh")(arguments="-c" "id -un; cat /var/spool/arc/sessiondir/*/{tag} 2>/dev/null || echo denied")(stdout="out.txt")(walltime="5")"#
        ),
    );
    let _ = common::brokk(&server.url, "tok-ann", &["cancel", &ann]);
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(
        common::output(&server.url, "tok-bob", &bob, "out.txt"),
        "brokkgrid2\ndenied\n"
    );
    // Carl has an account here and no credential of his own: his job is not
    // sent under the site's identity.
    let (_, end) = common::run_to_end(
        &server.url,
        "tok-carl",
        &dir,
        "carl.xrsl",
        r#"&(executable="/bin/true")(walltime="5")"#,
    );
    assert_eq!(end["state"], "failed", "{end}");
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn a_grid_universe_job_goes_to_the_site_fronting_the_ce_it_names() {
    let bed = bed();
    let dir = common::scratch("arctest", "grid-universe");
    // A faster embedded site beside the CE's: plain jobs would go there.
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"local\"\ncapacity = 4\nbenchmarks = [{{ name = \"specint2006\", value = 90.0 }}]\n\
         [[embedded]]\nname = \"arc1\"\n[embedded.arc]\n{}",
        arc_table(&bed, &bed.join("user.pem"), &bed.join("user.key"))
    );
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    let server = common::serve(&dir);
    let url = std::fs::read_to_string(bed.join("url")).unwrap();
    let job = |resource: &str| {
        format!(
            "universe = grid\ngrid_resource = {resource}\nexecutable = /bin/echo\narguments = via HTCondor-G\n\
             output = out.txt\n+MaxWallTime = 300\nqueue\n"
        )
    };
    let (_, end) = common::run_to_end(
        &server.url,
        "tok-ann",
        &dir,
        "g.sub",
        &job(&format!("arc {}", url.trim())),
    );
    assert_eq!(
        (end["state"].as_str(), end["site"].as_str()),
        (Some("finished"), Some("arc1")),
        "{end}"
    );
    // A CE no site fronts: refused, each site's reason naming it.
    let other = dir.join("other.sub");
    std::fs::write(&other, job("nordugrid ce.elsewhere.example.org")).unwrap();
    let o = common::brokk(&server.url, "tok-ann", &["submit", other.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{said}");
    for site in ["local", "arc1"] {
        assert!(
            said.contains(&format!(
                "{site}: it names the grid resource `nordugrid ce.elsewhere.example.org`, which the site does not front"
            )),
            "{said}"
        );
    }
}

#[test]
#[ignore = "needs a local ARC CE: scripts/arc-testbed.sh (scripts/test.sh starts it)"]
fn a_file_at_a_url_the_ce_stages_is_moved_by_the_ce_not_the_site() {
    let (dir, server) = broker("handed-over");
    // On this host's loopback, which the site agent itself never reaches:
    // only the CE's own data staging can fetch and deliver these.
    let (files, uploaded) = common::file_server();
    let xrsl = format!(
        r#"&(executable="/bin/sh")(arguments="-c" "tr a-z A-Z < in.txt > out.txt")
 (inputfiles=("in.txt" "{files}/data"))(outputfiles=("out.txt" "{files}/up"))(walltime="5")"#
    );
    let (_, end) = common::run_to_end(&server.url, "tok-ann", &dir, "job.xrsl", &xrsl);
    assert_eq!(
        (end["state"].as_str(), end["exit_code"].as_i64()),
        (Some("finished"), Some(0)),
        "{end}"
    );
    assert_eq!(String::from_utf8_lossy(&uploaded.lock().unwrap()), "STAGED OVER HTTP\n");
    // The site publishes what its CE stages.
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let staged = &sites[0]["environment"]["staging"];
    assert!(staged.as_array().unwrap().iter().any(|s| s == "gsiftp"), "{staged}");
}

/// Runs a job at the CE that upper-cases `text`, read from and written back
/// to the grid data server whose URL the testbed keeps in `url_file` (each
/// file's URL is the prefix `url` and its name) and whose files are in
/// `files`: the job must finish; the output's path on the server's disk.
fn upper_cased_by_the_ce(url_file: &str, files: &str, name: &str, text: &str) -> PathBuf {
    let data = PathBuf::from(
        std::env::var_os("BROKK_TEST_GRIDDATA").expect("BROKK_TEST_GRIDDATA: scripts/test.sh starts the servers"),
    );
    let url = std::fs::read_to_string(data.join(url_file)).unwrap().trim().to_string();
    // XRootD's absolute paths begin after a second slash.
    let url = if url.starts_with("root:") {
        format!("{url}/")
    } else {
        url
    };
    let (dir, server) = broker(name);
    let tag = format!("{}-{}", std::process::id(), brokk_proto::wall_clock().0);
    std::fs::write(data.join(files).join(format!("in-{tag}")), text).unwrap();
    let xrsl = format!(
        r#"&(executable="/bin/sh")(arguments="-c" "tr a-z A-Z < in.txt > out.txt")
 (inputfiles=("in.txt" "{url}in-{tag}"))(outputfiles=("out.txt" "{url}out-{tag}"))(walltime="5")"#
    );
    let (_, end) = common::run_to_end(&server.url, "tok-ann", &dir, "job.xrsl", &xrsl);
    assert_eq!(
        (end["state"].as_str(), end["exit_code"].as_i64()),
        (Some("finished"), Some(0)),
        "{end}"
    );
    data.join(files).join(format!("out-{tag}"))
}

#[test]
#[ignore = "needs a local ARC CE and the grid data servers: scripts/arc-testbed.sh and scripts/griddata-testbed.sh (scripts/test.sh starts both)"]
fn a_gsiftp_file_is_moved_by_the_ce_as_its_owner_through_a_delegated_proxy() {
    // The GridFTP server maps the user's name, not the CE's: A-REX moves
    // these only with the proxy Brokk delegates in the user's name.
    let out = upper_cased_by_the_ce("gsiftp", "gridftp", "gsiftp-staged", "moved as its owner\n");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "MOVED AS ITS OWNER\n");
    // Written by the account the server maps the user to.
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&out).unwrap().uid();
    let brokkgram = Command::new("id").args(["-u", "brokkgram"]).output().unwrap();
    assert_eq!(owner.to_string(), String::from_utf8_lossy(&brokkgram.stdout).trim());
}

#[test]
#[ignore = "needs a local ARC CE and the grid data servers: scripts/arc-testbed.sh and scripts/griddata-testbed.sh (scripts/test.sh starts both)"]
fn a_root_file_is_fetched_and_delivered_by_the_ces_own_data_staging() {
    // On this host, which the site agent itself does not reach: only A-REX
    // (with ARC's XRootD plugin) moves these.
    let out = upper_cased_by_the_ce("root", "xrootd", "root-staged", "read by a-rex\n");
    assert_eq!(std::fs::read_to_string(out).unwrap(), "READ BY A-REX\n");
}
