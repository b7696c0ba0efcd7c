//! The services' contracts, checked by the ecosystem's own tools rather
//! than by our reading of them: every served OpenAPI document by
//! `openapi-spec-validator`, a Python client generated from the broker's
//! document by `openapi-python-client` submitting a job and reading it
//! back, and every daemon's `/metrics` by `promtool check metrics`.
//!
//! `scripts/contracts-tools.sh` installs the tools (a virtual environment
//! from PyPI, Debian's `prometheus` for promtool) and `scripts/test.sh`
//! names their directory in `BROKK_TEST_CONTRACTS`; a plain `cargo test`
//! shows these tests as ignored.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The tools' directory: `bin/` of the virtual environment, and promtool
/// on the PATH.
fn tools() -> PathBuf {
    PathBuf::from(std::env::var("BROKK_TEST_CONTRACTS").expect("BROKK_TEST_CONTRACTS: run scripts/contracts-tools.sh"))
}

/// A broker with an embedded site and a site agent beside it, the agent
/// one of the broker's sites and the broker a delegate of the agent.
struct Daemons {
    dir: PathBuf,
    broker: common::Server,
    agent: common::Server,
}

fn start(name: &str) -> Daemons {
    let dir = common::scratch("contracts", name);
    let site_dir = dir.join("agent");
    std::fs::create_dir_all(&site_dir).unwrap();
    common::write_private(
        &site_dir.join("site.toml"),
        "name = \"agent\"\ncapacity = 2\ndatabase = \"site.db\"\nworkdir = \"jobs\"\n\
         [tokens]\n\"tok-ann\" = \"ann\"\n\"tok-broker\" = \"broker\"\n[delegates]\nbroker = [\"*\"]\n",
    );
    let agent = common::spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["site", "--config", "site.toml"])
            .current_dir(&site_dir)
            .stderr(Stdio::null()),
    );
    common::write_private(
        &dir.join("broker.toml"),
        &format!(
            "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
             [[embedded]]\nname = \"small\"\ncapacity = 2\n\
             [[sites]]\nname = \"agent\"\nurl = \"{}\"\ntoken = \"tok-broker\"\n",
            agent.url
        ),
    );
    let broker = common::serve(&dir);
    Daemons { dir, broker, agent }
}

/// The body of `GET url`, kept at `dir/file`.
fn fetch(url: &str, dir: &Path, file: &str) -> PathBuf {
    let body = reqwest::blocking::get(url)
        .unwrap()
        .error_for_status()
        .unwrap()
        .text()
        .unwrap();
    let path = dir.join(file);
    std::fs::write(&path, body).unwrap();
    path
}

/// Runs a tool; a failure shows everything it printed.
fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Submits a Slurm script through the generated client and reads the job
/// back until it ends: what a user's own tooling would do with the
/// document. Prints `ID NAME STATE EXIT SITE`.
const ROUNDTRIP: &str = r##"
import sys, time
from brokk_client import AuthenticatedClient
from brokk_client.api.jobs import submit, show
from brokk_client.models import Accepted, BrokerJob, SubmitRequest

client = AuthenticatedClient(base_url=sys.argv[1], token=sys.argv[2], raise_on_unexpected_status=True)
script = "#!/bin/sh\n#SBATCH --job-name=generated\necho from a generated client\n"
accepted = submit.sync(client=client, body=SubmitRequest(description=script, format_="slurm"))
assert isinstance(accepted, Accepted), accepted
for _ in range(300):
    job = show.sync(client=client, id=accepted.id)
    assert isinstance(job, BrokerJob), job
    if job.state.value in ("finished", "failed", "cancelled"):
        break
    time.sleep(0.1)
print(job.id, job.name, job.state.value, job.exit_code, job.site)
"##;

#[test]
#[ignore = "needs openapi-spec-validator and openapi-python-client: scripts/contracts-tools.sh (BROKK_TEST_CONTRACTS)"]
fn every_served_document_is_valid_openapi_and_a_client_generated_from_it_runs_a_job() {
    let d = start("openapi");
    let bin = tools().join("bin");
    let broker = fetch(&format!("{}/openapi.json", d.broker.url), &d.dir, "broker.json");
    let agent = fetch(&format!("{}/openapi.json", d.agent.url), &d.dir, "agent.json");
    for doc in [&broker, &agent] {
        let out = run(Command::new(bin.join("openapi-spec-validator")).arg(doc));
        assert!(String::from_utf8_lossy(&out.stdout).contains(": OK"), "{out:?}");
    }
    // Every path the routers serve is in the documents, the broker's site
    // API under /site/v1 included.
    let paths = |doc: &Path| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(doc).unwrap()).unwrap();
        v["paths"].as_object().unwrap().keys().cloned().collect()
    };
    let (broker_paths, agent_paths) = (paths(&broker), paths(&agent));
    for p in [
        "/v1/jobs",
        "/v1/workflows/{id}",
        "/site/v1/jobs/{id}/files/{name}",
        "/metrics",
        "/readyz",
    ] {
        assert!(broker_paths.iter().any(|q| q == p), "{p} not in {broker_paths:?}");
    }
    for p in [
        "/v1/slots",
        "/v1/reservations/{id}/commit",
        "/v1/jobs/by-key/{key}",
        "/healthz",
    ] {
        assert!(agent_paths.iter().any(|q| q == p), "{p} not in {agent_paths:?}");
    }
    run(Command::new(bin.join("openapi-python-client"))
        .args(["generate", "--meta", "none", "--output-path"])
        .arg(d.dir.join("brokk_client"))
        .arg("--path")
        .arg(&broker));
    let out = run(Command::new(bin.join("python"))
        .args(["-c", ROUNDTRIP, &d.broker.url, "tok-ann"])
        .env("PYTHONPATH", &d.dir));
    let printed = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<&str> = printed.split_whitespace().collect();
    assert_eq!(fields.get(1..4), Some(&["generated", "finished", "0"][..]), "{printed}");
    // The id it printed is the broker's, and the broker shows the same job.
    let job = common::json(&d.broker.url, "tok-ann", &["status", fields[0], "--json"]);
    assert_eq!(job["name"], "generated", "{job}");
}

#[test]
#[ignore = "needs promtool (Debian's prometheus): scripts/contracts-tools.sh (BROKK_TEST_CONTRACTS)"]
fn every_daemons_metrics_pass_promtool() {
    let d = start("metrics");
    // A job at each, so that the per-site and per-route families have members.
    let script = d.dir.join("job.sh");
    std::fs::write(&script, "#!/bin/sh\n#SBATCH --job-name=counted\ntrue\n").unwrap();
    let accepted = common::json(
        &d.broker.url,
        "tok-ann",
        &["submit", script.to_str().unwrap(), "--json"],
    );
    let id = accepted["id"].as_str().unwrap().to_string();
    common::wait_ended(&d.broker.url, "tok-ann", &id, std::time::Duration::from_secs(60));
    for (name, url) in [("broker", &d.broker.url), ("agent", &d.agent.url)] {
        let text = fetch(&format!("{url}/metrics"), &d.dir, &format!("{name}.prom"));
        let out = run(Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&text).unwrap()));
        // promtool prints its lint findings and exits 3 on any; clean, it says nothing.
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{name}: {out:?}");
    }
    let broker = std::fs::read_to_string(d.dir.join("broker.prom")).unwrap();
    for family in [
        "# HELP brokk_decision_duration_seconds ",
        "brokk_site_info_fetch_duration_seconds_count{site=\"agent\"}",
        "brokk_jobs{state=\"finished\"} 1",
    ] {
        assert!(broker.contains(family), "{family} not in:\n{broker}");
    }
    let agent = std::fs::read_to_string(d.dir.join("agent.prom")).unwrap();
    for family in [
        "# TYPE brokk_site_supervisors gauge",
        "brokk_site_http_requests_total{method=\"GET\",route=\"/v1/info\"",
    ] {
        assert!(agent.contains(family), "{family} not in:\n{agent}");
    }
}
