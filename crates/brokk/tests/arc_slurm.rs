//! Brokk in front of an ARC compute element that runs its jobs on Slurm:
//! the second CE `scripts/arc-testbed.sh start --slurm` starts (its URL in
//! `slurm-url` under `BROKK_TEST_ARC`), on the second cluster of the Slurm
//! testbed (`BROKK_TEST_SLURM`). The site reserves in that cluster and binds
//! its jobs to the reservations through the CE's runtime environment;
//! everything is checked against Slurm's own records. They need both
//! testbeds, so a plain `cargo test` skips them (ignored); `scripts/test.sh`
//! starts them and runs these one at a time with the Slurm tests.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;

/// A-REX's state lag as the sites are told it: short, so the tests do not
/// wait a minute per step; the CE hands a job to Slurm within seconds here.
const LAG_S: i64 = 15;

struct Beds {
    arc: PathBuf,
    slurm: PathBuf,
}

fn beds() -> Beds {
    let var = |name: &str| {
        PathBuf::from(std::env::var_os(name).unwrap_or_else(|| panic!("{name}: scripts/test.sh starts the testbeds")))
    };
    Beds {
        arc: var("BROKK_TEST_ARC"),
        slurm: var("BROKK_TEST_SLURM"),
    }
}

fn conf(b: &Beds, c: u32) -> PathBuf {
    b.slurm.join(format!("c{c}/slurm.conf"))
}

/// A Slurm command on cluster `c`, with its output.
fn slurm(b: &Beds, c: u32, program: &str, args: &[&str]) -> String {
    common::slurm_command(&conf(b, c), program, args)
}

/// The completed job in cluster `c`'s completion log that was submitted at
/// or after `since` and ran in a reservation whose name starts with
/// `reservation` (names repeat across runs: ids start again in a new state).
fn completed_in(b: &Beds, c: u32, reservation: &str, since: i64) -> String {
    let log = std::fs::read_to_string(b.slurm.join(format!("c{c}/log/jobcomp.log"))).unwrap();
    log.lines()
        .rfind(|l| {
            l.contains(&format!(" ReservationName={reservation}"))
                && l.contains("JobState=COMPLETED")
                && common::slurm_time(common::field(l, "SubmitTime")) >= since
        })
        .unwrap_or_else(|| panic!("no completed Slurm job in {reservation} since {since}"))
        .to_string()
}

/// The `[embedded]` table of an ARC site `name` on the Slurm CE.
fn arc_site(b: &Beds, name: &str) -> String {
    let url =
        std::fs::read_to_string(b.arc.join("slurm-url")).expect("the testbed's CE on Slurm (arc-testbed.sh --slurm)");
    format!(
        "[[embedded]]\nname = \"{name}\"\n[embedded.arc]\nurl = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\nca_dir = \"{}\"\n\
         poll_ms = 1000\nstate_lag_s = {LAG_S}\n[embedded.arc.slurm]\nconf = \"{}\"\nuser = \"nobody\"\n",
        url.trim(),
        b.arc.join("user.pem").display(),
        b.arc.join("user.key").display(),
        b.arc.join("ca").display(),
        conf(b, 2).display()
    )
}

fn broker(dir: &Path, sites: &str) -> common::Server {
    let config = format!("database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n{sites}");
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    common::serve(dir)
}

#[test]
#[ignore = "needs the ARC CE on Slurm and the Slurm testbed; scripts/test.sh starts them and runs this"]
fn an_arc_site_on_slurm_reserves_there_and_runs_its_job_in_the_reservation() {
    let b = beds();
    let dir = common::scratch("arcslurm", "reserve");
    let svc = broker(&dir, &arc_site(&b, "asr"));
    let sites = common::json(&svc.url, "tok-ann", &["resources", "--json"]);
    let site = sites
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == "asr"))
        .unwrap_or_else(|| panic!("{sites}"))
        .clone();
    // It reserves, on the cores of the Slurm cluster behind the CE.
    assert_eq!(site["reservations"], true, "{site}");
    assert_eq!(site["total_slots"], 16, "{site}");
    assert_eq!(site["lag"], LAG_S, "{site}");

    let asked = brokk_proto::wall_clock();
    let r = common::json(
        &svc.url,
        "tok-ann",
        &["reserve", "--amount", "2", "--duration", "10m", "--json"],
    );
    let start = r["start"]
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .unwrap_or_else(|| panic!("{r}"))
        .timestamp();
    // No sooner than the CE can have a job in Slurm.
    assert!(start >= asked.0 + LAG_S - 1, "starts at {start}, asked at {}", asked.0);
    let name = format!("brokk-asr-r{}", r["site_reservation"]);
    let row = slurm(&b, 2, "scontrol", &["show", "res", "-o"])
        .lines()
        .find(|l| l.starts_with(&format!("ReservationName={name} ")))
        .unwrap_or_else(|| panic!("Slurm has no {name}"))
        .to_string();
    assert_eq!(common::slurm_time(common::field(&row, "StartTime")), start, "{row}");
    assert_eq!(common::field(&row, "CoreCnt"), "2", "{row}");
    assert_eq!(common::field(&row, "Users"), "nobody", "{row}");

    // A job in the reservation reaches Slurm through the CE, bound to it.
    let job = dir.join("job.json");
    std::fs::write(
        &job,
        r#"{"executable": "/bin/sh", "arguments": ["-c", "echo in $SLURM_JOB_RESERVATION"],
            "cpus": 2, "wall_time": 300, "stdout": "out.txt"}"#,
    )
    .unwrap();
    let rid = r["id"].as_str().unwrap();
    let sub = common::json(
        &svc.url,
        "tok-ann",
        &["submit", job.to_str().unwrap(), "--reservation", rid, "--json"],
    );
    let id = sub["id"].as_str().unwrap_or_else(|| panic!("{sub}")).to_string();
    let end = common::wait_ended(&svc.url, "tok-ann", &id, Duration::from_secs(240));
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(end["site"], "asr", "{end}");
    assert_eq!(
        common::output(&svc.url, "tok-ann", &id, "out.txt"),
        format!("in {name}\n")
    );
    // Slurm's own record: the CE's mapped user, in the reservation, not
    // before it began.
    let done = completed_in(&b, 2, &name, asked.0);
    assert!(done.contains("UserId=nobody("), "{done}");
    // Its wall time reached Slurm as five minutes (xRSL says the unit: a
    // bare `5` was taken as seconds).
    assert_eq!(common::field(&done, "TimeLimit"), "5", "{done}");
    assert!(common::slurm_time(common::field(&done, "StartTime")) >= start, "{done}");
    drop(svc);
    common::drop_slurm_reservations(&conf(&b, 2), "brokk-asr-");
}

#[test]
#[ignore = "needs the ARC CE on Slurm and the Slurm testbed; scripts/test.sh starts them and runs this"]
fn a_coallocation_across_a_slurm_site_and_an_arc_site_on_slurm_starts_together() {
    let b = beds();
    let dir = common::scratch("arcslurm", "coalloc");
    let slurm_site = format!(
        "[[embedded]]\nname = \"cos\"\nslurm = {{ conf = \"{}\" }}\n",
        conf(&b, 1).display()
    );
    let svc = broker(&dir, &(slurm_site + &arc_site(&b, "coa")));
    let asked = brokk_proto::wall_clock();
    // Two parts of 12 cores on two clusters of 16: one on each site.
    let mut files = Vec::new();
    for k in 0..2 {
        let f = dir.join(format!("part{k}.json"));
        std::fs::write(
            &f,
            r#"{"executable": "/bin/sleep", "arguments": ["2"], "cpus": 12, "wall_time": 60}"#,
        )
        .unwrap();
        files.push(f.to_str().unwrap().to_string());
    }
    let mut args = vec!["coalloc", "--delta", "5", "--json"];
    args.extend(files.iter().map(String::as_str));
    let done = common::json(&svc.url, "tok-ann", &args);
    let ids = common::strings(&done["ids"]);
    let mut sites = common::strings(&done["sites"]);
    sites.sort();
    assert_eq!(sites, ["coa", "cos"], "{done}");
    for id in &ids {
        let j = common::wait_ended(&svc.url, "tok-ann", id, Duration::from_secs(240));
        assert_eq!(j["state"], "finished", "{j}");
    }
    // Slurm's records of both parts: each in its site's reservation, the
    // ARC part as the CE's mapped user; their starts within delta.
    let on_slurm = completed_in(&b, 1, "brokk-cos-r", asked.0);
    let through_arc = completed_in(&b, 2, "brokk-coa-r", asked.0);
    assert!(through_arc.contains("UserId=nobody("), "{through_arc}");
    let starts =
        [on_slurm.as_str(), through_arc.as_str()].map(|row| common::slurm_time(common::field(row, "StartTime")));
    let spread = (starts[0] - starts[1]).abs();
    assert!(spread <= 5, "Slurm's starts {starts:?}:\n{on_slurm}\n{through_arc}");
    eprintln!("co-allocated parts started {spread} s apart on Slurm, one through ARC");
    drop(svc);
    common::drop_slurm_reservations(&conf(&b, 1), "brokk-cos-");
    common::drop_slurm_reservations(&conf(&b, 2), "brokk-coa-");
}
