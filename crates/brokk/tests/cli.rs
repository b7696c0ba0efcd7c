//! The `brokk` binary end to end: exit codes, diagnostics on stderr, JSON shapes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn brokk(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

const INVALID: &str = "crates/brokk-jdl/tests/corpus/xrsl/invalid/01-count-not-number.xrsl";
const FIG3: &str = "examples/jobs/fig3-benchmarks.xrsl";

#[test]
fn translate_writes_the_target_and_warns_about_what_it_drops() {
    let out = brokk(&["translate", "--to", "slurm", FIG3], None);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.starts_with("#!/bin/bash\n#SBATCH --input=my_app.in\n"),
        "{stdout}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("not translated to slurm: benchmarks"), "{stderr}");
}

#[test]
fn translate_reads_standard_input_and_prints_json() {
    let out = brokk(
        &["translate", "--to", "jdl", "--json", "-"],
        Some("executable = a\nqueue 2\n"),
    );
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["from"], "condor");
    assert_eq!(v["jobs"], 2);
    assert!(v["text"].as_str().unwrap().contains("Type = \"Collection\""));
}

#[test]
fn translate_of_an_invalid_file_fails_with_a_caret() {
    let out = brokk(&["translate", "--to", "json", INVALID], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("01-count-not-number.xrsl:2:11: error: `count` expects a non-negative integer"),
        "{stderr}"
    );
    assert!(stderr.contains("2 |  (count = four)\n  |           ^"), "{stderr}");
}

#[test]
fn validate_exits_one_when_any_file_is_invalid() {
    assert!(brokk(&["validate", FIG3], None).status.success());
    let out = brokk(&["validate", "--json", FIG3, INVALID, "no/such/file.jdl"], None);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["ok"], true);
    assert_eq!(lines[0]["format"], "xrsl");
    assert_eq!(lines[1]["ok"], false);
    assert_eq!(lines[1]["errors"][0]["line"], 2);
    assert_eq!(lines[1]["errors"][0]["column"], 11);
    assert_eq!(lines[2]["ok"], false);
    assert!(lines[2]["errors"][0]["message"]
        .as_str()
        .unwrap()
        .contains("no/such/file.jdl"));
}

#[test]
fn an_unknown_format_is_a_usage_error() {
    let out = brokk(&["translate", "--to", "pbs", FIG3], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("unknown format `pbs`"));
}

#[test]
fn sim_run_writes_its_reports_and_prints_json() {
    let out = std::env::temp_dir().join(format!("brokk-cli-sim-{}", std::process::id()));
    let o = brokk(
        &[
            "sim",
            "run",
            "examples/experiments/kth-sp2.toml",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // --json prints nothing but the document.
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    assert_eq!(points[0]["policy"], "fcfs");
    assert_eq!(points[1]["overall"]["submitted"], 27_992);
    // EASY waits far less than FCFS on KTH-SP2.
    let wait = |i: usize| points[i]["overall"]["mean_wait"].as_f64().unwrap();
    assert!(wait(1) * 10.0 < wait(0));
    // EASY against what KTH's own scheduler did.
    assert_eq!(v["as_recorded"]["mean_wait"].as_f64().unwrap().round(), 15_348.0);
    for f in [
        "jobs.csv",
        "summary.json",
        "utilization-easy.svg",
        "gantt-fcfs.svg",
        "point-mean_wait.svg",
        "wait-cdf.svg",
        "schedule-conservative.swf",
    ] {
        assert!(out.join(f).exists(), "{f}");
    }
    // The recorded schedule stands beside the policies in the plots.
    for f in ["point-mean_wait.svg", "wait-cdf.svg"] {
        assert!(
            std::fs::read_to_string(out.join(f)).unwrap().contains("as recorded"),
            "{f}"
        );
    }
    // Each run's wall-clock time apart from the summary: a line per point,
    // its calls the jobs simulated.
    let timings = std::fs::read_to_string(out.join("timings.csv")).unwrap();
    let lines: Vec<&str> = timings.lines().collect();
    assert_eq!(lines[0], "series,at,seed,calls,seconds,us_per_call");
    assert_eq!(lines.len(), 1 + points.len(), "{timings}");
    assert!(lines[1].starts_with("fcfs,-,"), "{timings}");
    let calls: u64 = lines[1].split(',').nth(3).unwrap().parse().unwrap();
    assert!(calls >= 27_000, "{timings}");
    std::fs::remove_dir_all(&out).unwrap();
    // The workload of a point leaves as SWF.
    let o = brokk(
        &[
            "sim",
            "workload",
            "examples/experiments/lublin-sweep.toml",
            "--seed",
            "2",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let swf = brokk_sim::swf::read(o.stdout.as_slice(), false).unwrap();
    // Not on a terminal (a batch job's log), progress is plain lines, one
    // at each tenth of the runs.
    let o = brokk(
        &[
            "sim",
            "run",
            "examples/experiments/kth-sp2.toml",
            "--out",
            out.to_str().unwrap(),
        ],
        None,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l.split(" in ").next().unwrap())
            .collect::<Vec<_>>(),
        [
            "1/3 simulations (33%)",
            "2/3 simulations (66%)",
            "3/3 simulations (100%)"
        ],
        "{err}"
    );
    std::fs::remove_dir_all(&out).unwrap();
    assert_eq!(swf.max_procs(), Some(128));
    assert!(swf.jobs.len() > 100);
    // A broken experiment is an error naming the file and the line.
    let bad = std::env::temp_dir().join(format!("brokk-cli-bad-{}.toml", std::process::id()));
    std::fs::write(&bad, "name = \"x\"\npolicies = 3\n").unwrap();
    let o = brokk(&["sim", "run", bad.to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("line 2"), "{err}");
    std::fs::remove_file(&bad).unwrap();
}

#[test]
fn sim_network_compares_the_two_managers_and_writes_a_figure_per_path_count() {
    let dir = std::env::temp_dir().join(format!("brokk-cli-network-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("net.toml");
    std::fs::write(
        &file,
        "name = \"net\"\nseeds = [1, 2]\nrequests = 150\nmax_bandwidth = 50\ninter_arrival = [0.25]\npaths = [2, 3]\n\n[grid]\npreset = \"ediscom\"\nbandwidth = 50\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = brokk(
        &["sim", "network", file.to_str().unwrap(), "--out", out.to_str().unwrap()],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("fewest hops") && table.contains("gain, saved out"),
        "{table}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let aggregates = summary["aggregates"].as_array().unwrap();
    assert_eq!(aggregates.len(), 2, "{summary}");
    for a in aggregates {
        for key in ["min_hop", "rerouting", "rerouting_unsaved", "gain", "gain_unsaved"] {
            assert_eq!(a[key]["n"], 2, "{key}: {a}");
        }
    }
    assert!(out.join("acceptance-k2.svg").exists() && out.join("acceptance-k3.svg").exists());
    let timings = std::fs::read_to_string(out.join("timings.csv")).unwrap();
    assert_eq!(timings.lines().count(), 1 + 4, "{timings}");
    // An admission experiment is not one, and says which command runs it.
    let o = brokk(
        &["sim", "network", "examples/experiments/reoptimize-windows.toml"],
        None,
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("brokk sim workflows"), "{err}");
    let o = brokk(&["sim", "workflows", file.to_str().unwrap()], None);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("brokk sim network"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_reader_that_closes_the_pipe_ends_the_command_quietly() {
    // `brokk ... | head -1`: the reader is gone before the command writes.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(["translate", "--to", "slurm", FIG3])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn validate_refuses_what_the_broker_would_refuse() {
    // Readable, but with nothing to run: `submit` would be refused.
    let out = brokk(
        &["validate", "--from", "json", "-"],
        Some(r#"{"arguments": ["x"], "wall_time": 60}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the broker would refuse it: the job has nothing to run"),
        "{stderr}"
    );
}

#[test]
fn sim_finds_a_trace_by_name_in_the_traces_directory() {
    let dir = std::env::temp_dir().join(format!("brokk-cli-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exp = dir.join("kth.toml");
    std::fs::write(
        &exp,
        "name = \"kth\"\npolicies = [\"easy\"]\n[workload]\nswf = \"KTH-SP2-1996-2.1-cln.swf.gz\"\n\
         [platform]\nclusters = [{ name = \"kth\", procs = 100 }]\n",
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["sim", "run", "--json", "--out"];
        let out = dir.join("out");
        args.push(out.to_str().unwrap());
        args.extend_from_slice(extra);
        args.push(exp.to_str().unwrap());
        brokk(&args, None)
    };
    let missing = run(&[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("KTH-SP2-1996-2.1-cln.swf.gz"));
    let found = run(&["--traces", "data/traces"]);
    assert!(found.status.success(), "{}", String::from_utf8_lossy(&found.stderr));
    let report: serde_json::Value = serde_json::from_slice(&found.stdout).unwrap();
    assert!(
        report["points"][0]["overall"]["submitted"].as_u64().unwrap() > 0,
        "{report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn workflow_validate_reads_a_dag_with_its_node_files_or_names_each_mistake() {
    let o = brokk(
        &[
            "workflow",
            "validate",
            "examples/workflows/pipeline/pipeline.dag",
            "--json",
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let w: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(w["tasks"].as_array().unwrap().len(), 10);
    assert_eq!(w["tasks"][2]["job"]["cpus"], 2);
    let dir = std::env::temp_dir().join(format!("brokk-cli-dag-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a.dag"),
        "JOB A a.sub\nJOB B b.sub\nPARENT A CHILD B\nPARENT B CHILD A\n",
    )
    .unwrap();
    std::fs::write(dir.join("a.sub"), "executable = /bin/true\nqueue\n").unwrap();
    std::fs::write(dir.join("b.sub"), "executable = /bin/true\nqueue\n").unwrap();
    let o = brokk(&["workflow", "validate", dir.join("a.dag").to_str().unwrap()], None);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a.dag:1:5: error: the dependencies form a cycle: A -> B -> A"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_wfcommons_instance_is_read_admitted_and_simulated() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let dir = std::env::temp_dir().join(format!("brokk-cli-montage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(root.join("examples/experiments/workflow-montage.toml")).unwrap();
    let montage = root.join("examples/workflows/montage-4.json");
    let small = example
        .replace("workflows = 500", "workflows = 120")
        .replace("seeds = [1, 2, 3]", "seeds = [1]")
        .replace("inter_arrival = [2, 3, 5, 10]", "inter_arrival = [1, 10]")
        .replace(
            "\"../workflows/montage-4.json\"",
            &format!("{:?}", montage.display().to_string()),
        );
    let file = dir.join("montage.toml");
    std::fs::write(&file, small).unwrap();
    let out_dir = dir.join("out");
    let out = brokk(
        &[
            "sim",
            "workflows",
            file.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let aggregates = report["aggregates"].as_array().unwrap();
    assert_eq!(aggregates.len(), 8, "four schedulers at two loads");
    let rejected = |s: &str, a: f64| {
        aggregates
            .iter()
            .find(|g| g["scheduler"] == s && g["inter_arrival"] == a)
            .unwrap()["rejection_rate"]["mean"]
            .as_f64()
            .unwrap()
    };
    for s in ["single", "heftsync", "heftsyncbt", "hlst"] {
        assert!(rejected(s, 1.0) > rejected(s, 10.0), "{s}: overload rejects more");
    }
    for p in report["points"].as_array().unwrap() {
        assert_eq!(p["submitted"], 120);
    }
    // Each scheduler's own time, a line per run: one call per workflow.
    let timings = std::fs::read_to_string(out_dir.join("timings.csv")).unwrap();
    let runs: Vec<&str> = timings.lines().skip(1).collect();
    assert_eq!(runs.len(), report["points"].as_array().unwrap().len(), "{timings}");
    assert!(runs.iter().all(|l| l.split(',').nth(3) == Some("120")), "{timings}");
    for f in [
        "summary.json",
        "rejection-rate.svg",
        "utilization.svg",
        "probes-per-task.svg",
    ] {
        assert!(out_dir.join(f).exists(), "{f} written");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn workflow_plan_admits_or_says_why_with_the_earliest_finish() {
    let plan = |more: &[&str]| {
        let mut args = vec![
            "workflow",
            "plan",
            "examples/workflows/montage-4.json",
            "--grid",
            "examples/workflows/grid.toml",
        ];
        args.extend_from_slice(more);
        brokk(&args, None)
    };
    let ok = plan(&["--deadline", "6h"]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let out = String::from_utf8(ok.stdout).unwrap();
    assert!(out.starts_with("admitted by heftsync: 19 tasks from +0s"), "{out}");
    assert!(out.contains("mAdd_1"), "{out}");
    let no = plan(&["--deadline", "10m", "--scheduler", "hlst"]);
    assert_eq!(no.status.code(), Some(6), "refused");
    let err = String::from_utf8(no.stderr).unwrap();
    assert!(
        err.contains("rejected by hlst") && err.contains("earliest finish on offer is +"),
        "{err}"
    );
    let json = plan(&["--json"]);
    let offer: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(offer["plan"]["tasks"].as_array().unwrap().len(), 19);
}

/// The soak mode end to end, small: every job is accepted, dispatched and
/// followed to its end while the sites retire ended jobs after a second,
/// so the broker reads some ends from the sites' databases.
#[test]
fn a_short_soak_follows_every_job_while_sites_retire_them() {
    let out = brokk(
        &[
            "bench",
            "submit",
            "--soak",
            "--null-backend",
            "--jobs",
            "400",
            "--min-job-age",
            "1",
            "--sample-seconds",
            "0.5",
            "--json",
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let f: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["soak"], true);
    assert_eq!(f["jobs"], 400);
    assert_eq!(f["min_job_age_s"], 1);
    let last = f["samples"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["accepted"].as_i64(), last["finished"].as_i64()),
        (Some(400), Some(400)),
        "{f}"
    );
    assert!(f["db_bytes_per_job"].as_f64().unwrap() > 0.0, "{f}");
    assert!(f["status_p99_ms"].as_f64().unwrap() > 0.0, "{f}");
}
