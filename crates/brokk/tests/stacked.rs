//! Brokers stacked as sites ([VRM] 2.4, hierarchical domains): a top
//! broker whose two sites are departmental brokers, each with an embedded
//! site of its own. Jobs go down through both levels, their progress and
//! output come back up, cancels reach through both, and each level keeps
//! its users apart.

use std::path::Path;
use std::time::Duration;

mod common;

/// A departmental broker `name` serving the top broker (identity `top`) as a
/// site, with one embedded site `{name}-a` of `cpus` slots, on a port of its
/// own (so it is found again when it restarts).
fn department(dir: &Path, name: &str, cpus: u32) -> common::Server {
    std::fs::create_dir_all(dir).unwrap();
    let port = common::free_port();
    let config = format!(
        "name = \"{name}\"\nlisten = \"127.0.0.1:{port}\"\ndatabase = \"broker.db\"\nstate_dir = \"sites\"\n\
         delegates = [\"top\"]\n[tokens]\n\"tok-top\" = \"top\"\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"{name}-a\"\ncapacity = {cpus}\n"
    );
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    common::serve(dir)
}

/// The top broker over the departments at `urls`.
fn top(dir: &Path, urls: &[(&str, &str)]) -> common::Server {
    std::fs::create_dir_all(dir).unwrap();
    let mut config = String::from(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\"tok-bob\" = \"bob\"\n",
    );
    for (name, url) in urls {
        config += &format!("[[sites]]\nname = \"{name}\"\nurl = \"{url}/site\"\ntoken = \"tok-top\"\n");
    }
    std::fs::write(dir.join("broker.toml"), config).unwrap();
    common::serve(dir)
}

struct Hierarchy {
    top: common::Server,
    depts: Vec<common::Server>,
    dir: std::path::PathBuf,
}

impl Hierarchy {
    fn new(name: &str) -> (std::path::PathBuf, Hierarchy) {
        let dir = common::scratch("stacked", name);
        let depts = vec![
            department(&dir.join("dept1"), "dept1", 4),
            department(&dir.join("dept2"), "dept2", 2),
        ];
        let top = top(&dir.join("top"), &[("dept1", &depts[0].url), ("dept2", &depts[1].url)]);
        (dir.clone(), Hierarchy { top, depts, dir })
    }

    /// Kills department `k` (SIGKILL) and starts it again on its port.
    fn restart(&mut self, k: usize) {
        let dir = self.dir.join(format!("dept{}", k + 1));
        let pid = self.depts[k].pid().to_string();
        assert!(std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success());
        std::thread::sleep(Duration::from_millis(200));
        self.depts[k] = common::serve(&dir);
    }

    /// The department server a top-level site name stands for.
    fn dept(&self, site: &str) -> &common::Server {
        &self.depts[if site == "dept1" { 0 } else { 1 }]
    }
}

#[test]
fn a_job_goes_down_through_two_brokers_and_its_output_comes_back() {
    let (dir, h) = Hierarchy::new("through");
    // The departments, as the top broker sees them: each its sites folded
    // into one.
    let sites = common::json(&h.top.url, "tok-ann", &["resources", "--json"]);
    let rows = sites.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{sites}");
    for (row, slots) in rows.iter().zip([4, 2]) {
        assert_eq!(row["total_slots"], slots, "{row}");
        assert_eq!(row["reservations"], true, "{row}");
    }
    // Three slots fit only in the first department.
    let text = r#"{"executable": "/bin/sh", "arguments": ["-c", "echo through two brokers"],
                   "cpus": 3, "wall_time": 60, "stdout": "out.txt"}"#;
    let (id, end) = common::run_to_end(&h.top.url, "tok-ann", &dir, "job.json", text);
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(end["site"], "dept1", "{end}");
    assert_eq!(
        common::output(&h.top.url, "tok-ann", &id, "out.txt"),
        "through two brokers\n"
    );
    // Below, the job is the top broker's, run for ann on the department's
    // own site.
    let below = end["site_job"].as_str().unwrap();
    let low = common::json(&h.dept("dept1").url, "tok-top", &["status", below, "--json"]);
    assert_eq!(low["owner"], "top", "{low}");
    assert_eq!(low["runs_as"], "ann", "{low}");
    assert_eq!(low["site"], "dept1-a", "{low}");
    assert_eq!(low["state"], "finished", "{low}");
    // Nobody else sees it: not bob at the top, not ann's own token below
    // (it is the top broker's job there), and only delegates reach the site
    // API.
    assert!(!common::brokk(&h.top.url, "tok-bob", &["status", &id]).status.success());
    assert!(!common::brokk(&h.dept("dept1").url, "tok-ann", &["status", below])
        .status
        .success());
    let http = reqwest::blocking::Client::new();
    let info = |token: &str| {
        http.get(format!("{}/site/v1/info", h.dept("dept1").url))
            .bearer_auth(token)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(info("tok-ann"), reqwest::StatusCode::FORBIDDEN);
    assert_eq!(info("tok-top"), reqwest::StatusCode::OK);
    assert_eq!(info("nonsense"), reqwest::StatusCode::UNAUTHORIZED);
}

#[test]
fn a_cancel_reaches_through_both_levels() {
    let (dir, h) = Hierarchy::new("cancel");
    std::fs::write(
        dir.join("long.json"),
        r#"{"executable": "/bin/sleep", "arguments": ["291"], "wall_time": 600}"#,
    )
    .unwrap();
    let long = dir.join("long.json").display().to_string();
    let sub = common::json(&h.top.url, "tok-ann", &["submit", "--json", &long]);
    let id = sub["id"].as_str().unwrap().to_string();
    common::wait_for_state(&h.top.url, "tok-ann", &id, "running", Duration::from_secs(60));
    let job = common::json(&h.top.url, "tok-ann", &["status", "--json", &id]);
    let site = job["site"].as_str().unwrap().to_string();
    let below = job["site_job"].as_str().unwrap().to_string();
    assert_eq!(
        common::json(&h.dept(&site).url, "tok-top", &["status", &below, "--json"])["state"],
        "running"
    );
    let o = common::brokk(&h.top.url, "tok-ann", &["cancel", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        common::json(&h.top.url, "tok-ann", &["status", "--json", &id])["state"],
        "cancelled"
    );
    // Below: the department's job, and its site's, are cancelled, and the
    // process is gone.
    let low = common::json(&h.dept(&site).url, "tok-top", &["status", &below, "--json"]);
    assert_eq!(low["state"], "cancelled", "{low}");
    let gone = (0..50).any(|_| {
        let ps = std::process::Command::new("pgrep")
            .args(["-f", "sleep 291"])
            .output()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        !ps.status.success()
    });
    assert!(gone, "the job's process still runs");
}

#[test]
fn reservations_and_a_coallocation_go_through_both_levels() {
    let (dir, h) = Hierarchy::new("reserve");
    // A reservation at the top is one at a department, under the
    // department's own id, and one at its site below that.
    let r = common::json(
        &h.top.url,
        "tok-ann",
        &["reserve", "--amount", "2", "--duration", "10m", "--json"],
    );
    let site = r["site"].as_str().unwrap().to_string();
    let below = r["site_reservation"].as_u64().unwrap().to_string();
    let listed = common::json(&h.dept(&site).url, "tok-top", &["reserve", "--list", "--json"]);
    let held = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"].as_str() == Some(below.as_str()))
        .unwrap_or_else(|| panic!("{below} not in {listed}"))
        .clone();
    assert_eq!(held["owner"], "top", "{held}");
    assert_eq!(held["state"], "committed", "{held}");
    assert_eq!(held["site"], format!("{site}-a"), "{held}");
    // A job in it runs at that department's site.
    std::fs::write(
        dir.join("in.json"),
        r#"{"executable": "/bin/sh", "arguments": ["-c", "echo reserved"], "cpus": 2, "wall_time": 60}"#,
    )
    .unwrap();
    let file = dir.join("in.json").display().to_string();
    let rid = r["id"].as_str().unwrap();
    let sub = common::json(
        &h.top.url,
        "tok-ann",
        &["submit", "--json", "--reservation", rid, &file],
    );
    let id = sub["id"].as_str().unwrap().to_string();
    let end = common::watch_end(&h.top.url, "tok-ann", &id);
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(end["site"], site.as_str(), "{end}");
    let low = common::json(
        &h.dept(&site).url,
        "tok-top",
        &["status", end["site_job"].as_str().unwrap(), "--json"],
    );
    assert_eq!(low["site"], format!("{site}-a"), "{low}");
    assert_eq!(low["state"], "finished", "{low}");
    // Nobody else's: ann's own token below cannot cancel the top broker's
    // reservation; the top cancels it through both levels.
    assert!(
        !common::brokk(&h.dept(&site).url, "tok-ann", &["reserve", "--cancel", &below])
            .status
            .success()
    );
    common::json(&h.top.url, "tok-ann", &["reserve", "--cancel", rid, "--json"]);
    let listed = common::json(&h.dept(&site).url, "tok-top", &["reserve", "--list", "--json"]);
    let gone = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"].as_str() == Some(below.as_str()))
        .unwrap();
    assert_eq!(gone["state"], "cancelled", "{gone}");

    // Three slots fit only the first department, and two beside them only
    // the second: a co-allocation spans both, held, committed and started
    // together through both levels.
    let mut parts = Vec::new();
    for (k, cpus) in [3, 2].iter().enumerate() {
        let f = dir.join(format!("part{k}.json"));
        std::fs::write(
            &f,
            format!(r#"{{"executable": "/bin/sleep", "arguments": ["1"], "cpus": {cpus}, "wall_time": 60}}"#),
        )
        .unwrap();
        parts.push(f.display().to_string());
    }
    let mut args = vec!["coalloc", "--delta", "5", "--json"];
    args.extend(parts.iter().map(String::as_str));
    let done = common::json(&h.top.url, "tok-ann", &args);
    assert_eq!(common::strings(&done["sites"]), ["dept1", "dept2"], "{done}");
    let mut starts = Vec::new();
    for id in common::strings(&done["ids"]) {
        let end = common::watch_end(&h.top.url, "tok-ann", &id);
        assert_eq!(end["state"], "finished", "{end}");
        starts.push(
            chrono::DateTime::parse_from_rfc3339(end["started"].as_str().unwrap())
                .unwrap()
                .timestamp(),
        );
    }
    assert!((starts[0] - starts[1]).abs() <= 5, "{starts:?}");
}

#[test]
fn a_department_killed_and_restarted_loses_nothing_the_top_sent_it() {
    let (dir, mut h) = Hierarchy::new("restart");
    std::fs::write(
        dir.join("job.json"),
        r#"{"executable": "/bin/sh", "arguments": ["-c", "sleep 2; echo after the restart"],
            "cpus": 3, "wall_time": 60, "stdout": "out.txt"}"#,
    )
    .unwrap();
    let file = dir.join("job.json").display().to_string();
    let sub = common::json(&h.top.url, "tok-ann", &["submit", "--json", &file]);
    let id = sub["id"].as_str().unwrap().to_string();
    common::wait_for_state(&h.top.url, "tok-ann", &id, "running", Duration::from_secs(60));
    // Three slots: the first department. Killed while the job runs.
    h.restart(0);
    let end = common::watch_end(&h.top.url, "tok-ann", &id);
    assert_eq!(end["state"], "finished", "{end}");
    assert_eq!(
        common::output(&h.top.url, "tok-ann", &id, "out.txt"),
        "after the restart\n"
    );
    // And the department takes new work after it.
    let (_, again) = common::run_to_end(
        &h.top.url,
        "tok-ann",
        &dir,
        "again.json",
        r#"{"executable": "/bin/true", "cpus": 3, "wall_time": 60}"#,
    );
    assert_eq!(again["state"], "finished", "{again}");
}

#[test]
fn a_hold_reaches_through_both_levels_to_the_site_where_the_job_waits() {
    let (dir, h) = Hierarchy::new("hold");
    let job = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text).unwrap();
        dir.join(name).display().to_string()
    };
    // Both departments taken (4 and 2 slots), then a job that waits below.
    let wide = job(
        "wide.json",
        r#"{"executable": "/bin/sleep", "arguments": ["292"], "cpus": 4, "wall_time": 600}"#,
    );
    let narrow = job(
        "narrow.json",
        r#"{"executable": "/bin/sleep", "arguments": ["292"], "cpus": 2, "wall_time": 600}"#,
    );
    let next = job(
        "next.json",
        r#"{"executable": "/bin/true", "cpus": 2, "wall_time": 60}"#,
    );
    let submit = |f: &str| {
        common::json(&h.top.url, "tok-ann", &["submit", "--json", f])["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let busy = [submit(&wide), submit(&narrow)];
    for id in &busy {
        common::wait_for_state(&h.top.url, "tok-ann", id, "running", Duration::from_secs(60));
    }
    let id = submit(&next);
    common::wait_for_state(&h.top.url, "tok-ann", &id, "dispatched", Duration::from_secs(60));
    let status = |url: &str, token: &str, id: &str| common::json(url, token, &["status", id, "--json"]);
    let below = status(&h.top.url, "tok-ann", &id);
    let (site, below) = (
        below["site"].as_str().unwrap().to_string(),
        below["site_job"].as_str().unwrap().to_string(),
    );
    common::wait_for_state(
        &h.dept(&site).url,
        "tok-top",
        &below,
        "dispatched",
        Duration::from_secs(60),
    );
    // Held from the top: the department holds it at its own site.
    let held = common::json(&h.top.url, "tok-ann", &["hold", &id, "--json"]);
    assert_eq!(
        (held["state"].as_str(), held["site"].as_str()),
        (Some("held"), Some(site.as_str())),
        "{held}"
    );
    let low = status(&h.dept(&site).url, "tok-top", &below);
    assert_eq!(
        (low["state"].as_str(), low["site"].as_str()),
        (Some("held"), Some(format!("{site}-a").as_str())),
        "{low}"
    );
    // Released from the top, released below.
    let released = common::json(&h.top.url, "tok-ann", &["release", &id, "--json"]);
    assert_eq!(released["state"], "dispatched", "{released}");
    assert_eq!(status(&h.dept(&site).url, "tok-top", &below)["state"], "dispatched");
    for job in busy.iter().chain([&id]) {
        common::brokk(&h.top.url, "tok-ann", &["cancel", job]);
    }
}
