//! Experiment files: the examples in the repository load, sweeps are
//! deterministic whatever the thread count, and mistakes are reported.

use std::path::{Path, PathBuf};

use brokk_sim::experiment::{load, prepare, run_points, Experiment, ExperimentError};
use brokk_sim::{export, report};

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/experiments")
}

fn parse(text: &str) -> Result<brokk_sim::experiment::Prepared, ExperimentError> {
    let spec: Experiment = toml::from_str(text).map_err(|e| ExperimentError::Invalid(e.to_string()))?;
    prepare(spec, Path::new("."))
}

/// Why `text` is refused, empty when it is not.
fn err(text: String) -> String {
    parse(&text).err().map(|e| e.to_string()).unwrap_or_default()
}

const SWEEP: &str = r#"
name = "small-sweep"
policies = ["fcfs", "easy"]
[workload]
lublin = { days = 7 }
estimates = "exact"
[platform]
clusters = [{ name = "a", procs = 64 }, { name = "b", procs = 64 }]
routing = "random"
[metrics]
horizon = "steady-state"
[sweep]
loads = [0.5, 0.8]
seeds = [1, 2]
"#;

#[test]
fn every_example_experiment_loads() {
    let mut n = 0;
    for entry in std::fs::read_dir(examples()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if brokk_sim::experiment::is_admission(&text) {
                let e = brokk_sim::admission::AdmissionExperiment::from_toml(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(!e.points().is_empty());
                let err = load(&path).unwrap_err().to_string();
                assert!(err.contains("brokk sim workflows"), "{err}");
            } else if brokk_sim::experiment::is_architectures(&text) {
                let e = brokk_sim::architectures::ArchitectureExperiment::from_toml(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(!e.settings().is_empty());
                let err = load(&path).unwrap_err().to_string();
                assert!(err.contains("brokk sim architectures"), "{err}");
            } else if brokk_sim::experiment::is_network(&text) {
                let e = brokk_sim::network::NetworkExperiment::from_toml(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(!e.points().is_empty());
                let err = load(&path).unwrap_err().to_string();
                assert!(err.contains("brokk sim network"), "{err}");
            } else {
                let p = load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                assert!(!p.points().is_empty());
            }
            n += 1;
        }
    }
    assert!(n >= 3);
}

#[test]
fn a_sweep_is_the_same_on_one_thread_or_four_and_meets_its_loads() {
    let p = parse(SWEEP).unwrap();
    let points = p.points();
    assert_eq!(points.len(), 2 * 2 * 2);
    let one = run_points(&p, &points, 1, &|| {}).unwrap();
    let four = run_points(&p, &points, 4, &|| {}).unwrap();
    let json = |r| serde_json::to_string(&report::report(&p, r, None)).unwrap();
    assert_eq!(json(&one), json(&four));
    let csv = |r| export::jobs_csv(&p, r, None);
    assert_eq!(csv(&one), csv(&four));
    for r in &one {
        let target = r.point.load.unwrap();
        assert!(
            (r.offered_load - target).abs() < 0.02 * target,
            "{} vs {target}",
            r.offered_load
        );
        // Random routing spread the jobs over both clusters.
        assert_eq!(r.clusters.len(), 2);
        assert!(r.clusters.iter().all(|(_, s)| s.submitted > 0));
        // The model sizes jobs for the largest cluster, so every job has one.
        assert_eq!(r.unrouted, 0);
        let routed: usize = r.clusters.iter().map(|(_, s)| s.submitted).sum();
        assert_eq!(routed + r.unrouted, r.overall.submitted);
        // The steady-state rule leaves the jobs still running at the last arrival unfinished.
        assert!(r.overall.finished_pct < 100.0 && r.overall.finished_pct > 50.0);
    }
    // Backfilling finishes at least as many jobs as FCFS at the higher load.
    let at = |policy: &str, seed: u64| {
        one.iter()
            .find(|r| r.policy == policy && r.point.seed == seed && r.point.load == Some(0.8))
            .unwrap()
            .overall
    };
    for seed in [1, 2] {
        assert!(at("easy", seed).mean_wait < at("fcfs", seed).mean_wait);
    }
}

#[test]
fn reports_are_written() {
    let p = parse(SWEEP).unwrap();
    let results = run_points(&p, &p.points(), 2, &|| {}).unwrap();
    let dir = std::env::temp_dir().join(format!("brokk-report-{}", std::process::id()));
    report::write_all(&dir, &p, &results, None).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["points"].as_array().unwrap().len(), 8);
    assert!(summary["points"][0]["overall"]["goodput"].as_f64().unwrap() > 0.0);
    assert_eq!(summary["horizon"], "steady-state");
    // Two policies at two loads, each over its two seeds.
    let aggregates = summary["aggregates"].as_array().unwrap();
    assert_eq!(aggregates.len(), 4);
    assert_eq!(aggregates[0]["seeds"], 2);
    assert!(aggregates[0]["metrics"]["mean_wait"]["ci95"].as_f64().is_some());
    // One pair at each load, easy against the first series (fcfs, no
    // base named), over the seeds both ran: the mean of the per-seed
    // differences the points hold.
    assert_eq!(summary["baseline"], "fcfs");
    let pairs = summary["comparisons"].as_array().unwrap();
    assert_eq!(pairs.len(), 2);
    let wait = |policy: &str, load: f64, seed: u64| {
        summary["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["policy"] == policy && p["load"] == load && p["seed"] == seed)
            .unwrap()["overall"]["mean_wait"]
            .as_f64()
            .unwrap()
    };
    for pair in pairs {
        assert_eq!(
            (&pair["policy"], &pair["against"], &pair["seeds"]),
            (&"easy".into(), &"fcfs".into(), &2.into())
        );
        let load = pair["load"].as_f64().unwrap();
        let by_hand = [1, 2]
            .iter()
            .map(|&s| wait("easy", load, s) - wait("fcfs", load, s))
            .sum::<f64>()
            / 2.0;
        let d = &pair["difference"]["mean_wait"];
        assert!((d["mean"].as_f64().unwrap() - by_hand).abs() < 1e-6, "{d}");
        assert!(d["ci95"].as_f64().is_some());
    }
    assert!(std::fs::read_to_string(dir.join("paired-mean_wait.svg"))
        .unwrap()
        .contains("easy - fcfs"));
    // Users are unknown in the model; sizes fall into classes.
    assert_eq!(summary["points"][0]["by_user"][0]["group"], "-1");
    assert!(!summary["points"][0]["by_size"].as_array().unwrap().is_empty());
    // Every job is a line; under the steady-state rule some do not count.
    let csv = std::fs::read(dir.join("jobs.csv")).unwrap();
    assert!(csv.starts_with(b"policy,load,seed,cluster,job,user,"));
    let rows = export::read_jobs_csv(&csv).unwrap();
    assert!(rows.iter().any(|r| r.counted) && rows.iter().any(|r| !r.counted));
    let counted = rows
        .iter()
        .filter(|r| r.policy == "fcfs" && r.seed == Some(1) && r.load == Some(0.5) && r.counted);
    assert_eq!(counted.count(), results[0].overall.finished);
    for svg in ["load-mean_wait.svg", "load-finished_pct.svg", "wait-cdf.svg"] {
        let text = std::fs::read_to_string(dir.join(svg)).unwrap();
        assert!(
            text.starts_with("<svg") && text.contains("easy") && text.contains("fcfs"),
            "{svg}"
        );
    }
    for policy in ["easy", "fcfs"] {
        for plot in ["utilization", "gantt"] {
            let text = std::fs::read_to_string(dir.join(format!("{plot}-{policy}.svg"))).unwrap();
            assert!(text.contains(&format!("{policy}, load 0.5, seed 1")), "{plot}-{policy}");
        }
        // Its state over time: the buckets' busy processor-seconds are
        // the point's work, whatever the bucket width.
        let csv = std::fs::read_to_string(dir.join(format!("timeseries-{policy}.csv"))).unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some("time_s,waiting,running,utilization"));
        let buckets: Vec<Vec<f64>> = lines
            .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
            .collect();
        let width = buckets[1][0] - buckets[0][0];
        let r = results.iter().find(|r| r.policy == policy).unwrap();
        let work: f64 = r
            .runs
            .iter()
            .flat_map(|c| &c.outcomes)
            .map(|o| (o.end - o.start).0 as f64 * f64::from(o.size))
            .sum();
        let busy: f64 = buckets.iter().map(|b| b[3] * width * 128.0).sum();
        assert!((busy - work).abs() / work < 1e-4, "{busy} against {work}");
        assert!(std::fs::read_to_string(dir.join(format!("queue-{policy}.svg")))
            .unwrap()
            .contains("waiting"));
        let swf = brokk_sim::swf::read_path(&dir.join(format!("schedule-{policy}.swf")), false).unwrap();
        assert_eq!(swf.jobs.len(), results[0].overall.submitted);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mistakes_are_reported_with_their_place() {
    let err = |text: &str| parse(text).err().map(|e| e.to_string()).unwrap_or_default();
    let e = err("name = \"x\"\n[workload]\nlubln = { days = 1 }\n[platform]\nclusters = []\n");
    assert!(e.contains("line 3") && e.contains("lubln"), "{e}");
    let base =
        "name = \"x\"\n[workload]\nlublin = { days = 1 }\n[platform]\nclusters = [{ name = \"a\", procs = 8 }]\n";
    assert!(err(&format!("policies = [\"sjf\"]\n{base}")).contains("unknown policy \"sjf\""));
    assert!(err(&format!("{base}[sweep]\nloads = [-1.0]\n")).contains("positive"));
    assert!(err(&base.replace("days = 1", "days = 0")).contains("lublin.days"));
    assert!(err(&base.replace("procs = 8", "procs = 0")).contains("at least one processor"));
    assert!(
        err(&base.replace("lublin = { days = 1 }", "lublin = { days = 1 }\nswf = \"x.swf\"")).contains("exactly one")
    );
    let missing = base.replace("lublin = { days = 1 }", "swf = \"no/such.swf\"");
    assert!(err(&missing).contains("no/such.swf"));
}

#[test]
fn a_trace_is_read_by_requested_or_allocated_processors() {
    // Job 1 asked for 8 processors and was given 4; job 2 asked for 2 and
    // was cancelled before it ran (no allocation); job 3 records only its
    // allocation, 2; job 4 asked for and got 16.
    let swf = "\
1 0 10 100 4 -1 -1 8 200 -1 1 1 1 -1 1 -1 -1 -1
2 10 -1 50 -1 -1 -1 2 100 -1 5 1 1 -1 1 -1 -1 -1
3 20 0 30 2 -1 -1 -1 60 -1 1 2 1 -1 1 -1 -1 -1
4 30 5 40 16 -1 -1 16 60 -1 1 2 1 -1 1 -1 -1 -1
";
    let dir = std::env::temp_dir().join(format!("brokk-processors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("excerpt.swf"), swf).unwrap();
    let sizes = |processors: &str| {
        let text = format!(
            "name = \"p\"\n[workload]\nswf = \"excerpt.swf\"\n{processors}\n[platform]\nclusters = [{{ name = \"m\", procs = 16 }}]\n"
        );
        let p = prepare(toml::from_str(&text).unwrap(), &dir).unwrap();
        let results = run_points(&p, &p.single_points(), 1, &|| {}).unwrap();
        let mut ran: Vec<(i64, u32)> = results[0].jobs.iter().map(|o| (o.id, o.size)).collect();
        ran.sort();
        ran
    };
    assert_eq!(sizes(""), [(1, 8), (2, 2), (3, 2), (4, 16)]);
    assert_eq!(sizes("processors = \"requested\""), sizes(""));
    assert_eq!(sizes("processors = \"allocated\""), [(1, 4), (3, 2), (4, 16)]);
    let bad = "name = \"p\"\n[workload]\nswf = \"excerpt.swf\"\nprocessors = \"used\"\n";
    assert!(toml::from_str::<Experiment>(bad)
        .unwrap_err()
        .to_string()
        .contains("requested"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn window_and_filter_shape_a_trace() {
    let text = r#"
name = "kth-window"
[workload]
swf = "../../data/traces/KTH-SP2-1996-2.1-cln.swf.gz"
window = [0, 2592000]
filter = { min_size = 2, statuses = [1] }
[platform]
clusters = [{ name = "kth", procs = 100 }]
"#;
    let spec: Experiment = toml::from_str(text).unwrap();
    let p = prepare(spec, &examples()).unwrap();
    assert!(!p.trace.is_empty());
    let first = p.trace.iter().map(|j| j.submit).min().unwrap();
    assert!(p
        .trace
        .iter()
        .all(|j| j.submit - first < 2_592_000 && j.procs >= 2 && j.status == 1));
    let bad = text.replace("min_size", "min_sise");
    assert!(toml::from_str::<Experiment>(&bad)
        .unwrap_err()
        .to_string()
        .contains("min_sise"));
}

#[test]
fn routings_become_series_and_broker_routings_run_on_site_cores() {
    let grid = r#"
name = "g"
policies = ["conservative"]
[workload]
lublin = { days = 2 }
[platform]
routings = ["round-robin", "broker-ttd", "broker-ttd-reserve:2"]
clusters = [{ name = "a", procs = 32, speed = 2.0 }, { name = "b", procs = 64 }]
"#;
    let p = parse(grid).unwrap();
    let labels: Vec<&str> = p.policies.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["round-robin", "broker-ttd", "broker-ttd-reserve:2"]);
    let results = run_points(&p, &p.single_points(), 2, &|| {}).unwrap();
    assert!(results[0].prediction.is_none());
    assert!(results[1].prediction.is_some_and(|e| e.jobs > 0));
    // The sites' local policy is a series of its own on the grid too.
    let two = grid.replace(r#"policies = ["conservative"]"#, r#"policies = ["fcfs", "easy"]"#);
    let p = parse(&two).unwrap();
    let labels: Vec<&str> = p.policies.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        labels,
        [
            "round-robin/fcfs",
            "round-robin/easy",
            "broker-ttd/fcfs",
            "broker-ttd/easy",
            "broker-ttd-reserve:2/fcfs",
            "broker-ttd-reserve:2/easy"
        ]
    );
    let results = run_points(&p, &p.single_points(), 2, &|| {}).unwrap();
    let wait = |k: usize| results[k].overall.mean_wait;
    assert!(
        wait(2) > wait(3),
        "EASY backfills what FCFS keeps waiting: {} vs {}",
        wait(2),
        wait(3)
    );
    // Speed needs a grid.
    let fixed = grid.replace(r#", "broker-ttd", "broker-ttd-reserve:2""#, "");
    let e = parse(&fixed).unwrap_err().to_string();
    assert!(e.contains("speed applies to grid runs"), "{e}");
    let bad = grid.replace("broker-ttd-reserve:2", "broker-ttx");
    assert!(parse(&bad).unwrap_err().to_string().contains("broker-ttx"));
}

/// A series' own information interval, the sites' own users and a base to
/// compare with: what they produce, and each mistake named.
#[test]
fn intervals_local_users_and_a_base_series_are_read_and_checked() {
    let grid = r#"
name = "g"
policies = ["conservative"]
[workload]
lublin = { days = 2 }
[platform]
routings = ["broker-tts@ask", "broker-tts@4h"]
local_load = 0.5
clusters = [{ name = "a", procs = 32 }, { name = "b", procs = 64 }]
[metrics]
base = "broker-tts@ask"
"#;
    let p = parse(grid).unwrap();
    let results = run_points(&p, &p.single_points(), 2, &|| {}).unwrap();
    let (ask, kept) = (&results[0], &results[1]);
    // Asking before each decision costs more information requests.
    let info = |r: &brokk_sim::experiment::PointResult| r.messages.unwrap().info;
    assert!(info(ask) > info(kept), "{} vs {}", info(ask), info(kept));
    // The sites' own users ran, apart from the grid's (two days of the
    // model at half the sites' size use a third to a half of them).
    let local = ask.local.unwrap();
    assert!((0.25..0.6).contains(&local.utilization), "{}", local.utilization);
    assert!(!ask.local_jobs.is_empty() && !ask.jobs.is_empty());
    assert!(err(grid.replace("@4h", "@soon")).contains("broker-tts@soon"));
    assert!(err(grid.replace("broker-tts@4h", "round-robin@4h")).contains("applies to broker routings"));
    assert!(err(grid.replace("local_load = 0.5", "local_load = 1.5")).contains("local_load"));
    assert!(err(grid.replace("base = \"broker-tts@ask\"", "base = \"nope\"")).contains("metrics.base"));
    assert!(
        err(grid.replace("local_load = 0.5", "published = \"summary\"\npublished_span = \"1d\""))
            .contains("published_span")
    );
}

/// [AB-avail]'s deadline-constrained requests: every grid job given a
/// deadline at five times its response time under the base policy
/// reserves its slot; asked before each job, the broker meets them all,
/// with information four hours old some slots are gone; and a deadline
/// as tight as the base run's own response time rejects jobs.
#[test]
fn deadlines_are_drawn_from_the_base_run_and_met_by_reserving_slots() {
    let grid = r#"
name = "d"
policies = ["conservative"]
[workload]
lublin = { days = 3 }
estimates = "exact"
deadlines = { share = 1.0 }
[platform]
routings = ["broker-tts@ask", "broker-tts@4h"]
local_load = 0.5
clusters = [{ name = "a", procs = 32 }, { name = "b", procs = 64 }]
[sweep]
loads = [0.3]
"#;
    let p = parse(grid).unwrap();
    let results = run_points(&p, &p.points(), 2, &|| {}).unwrap();
    let (ask, kept) = (&results[0], &results[1]);
    let reserve = |r: &brokk_sim::experiment::PointResult| r.messages.unwrap().reserve;
    // Every job that ran held a reservation; a few ask too late a
    // deadline of a site that backfills conservatively (its base ran
    // under EASY).
    assert!(
        reserve(ask) as usize >= ask.jobs.len(),
        "{} for {}",
        reserve(ask),
        ask.jobs.len()
    );
    assert!(
        ask.unrouted * 10 < ask.jobs.len(),
        "{} of {}",
        ask.unrouted,
        ask.jobs.len()
    );
    // Four-hour-old slots: more are gone, and asked for again.
    let violations = |r: &brokk_sim::experiment::PointResult| r.prediction.unwrap().violations;
    assert!(
        violations(kept) > violations(ask),
        "{} vs {}",
        violations(kept),
        violations(ask)
    );
    assert!(reserve(kept) > reserve(ask));
    // The same draw again gives the same run.
    let again = run_points(&p, &p.points(), 1, &|| {}).unwrap();
    assert_eq!(again[1].jobs, kept.jobs);
    // As tight as the base run itself: some jobs cannot be served.
    let tight = parse(&grid.replace("share = 1.0", "share = 1.0, stringency = 1.0")).unwrap();
    let results = run_points(&tight, &tight.points(), 2, &|| {}).unwrap();
    assert!(
        results[0].unrouted > ask.unrouted,
        "{} vs {}",
        results[0].unrouted,
        ask.unrouted
    );
    assert!(err(grid.replace("share = 1.0", "share = 0.0")).contains("workload.deadlines"));
    let fixed = grid
        .replace(r#"["broker-tts@ask", "broker-tts@4h"]"#, r#"["round-robin"]"#)
        .replace("local_load = 0.5\n", "");
    assert!(err(fixed).contains("workload.deadlines applies to broker routings"));
}

/// A warm-up leaves the jobs that arrived in it out of every figure.
#[test]
fn a_warm_up_leaves_the_first_days_out() {
    let with = |warmup: &str| {
        SWEEP.replace(
            "horizon = \"steady-state\"",
            &format!("horizon = \"steady-state\"\n{warmup}"),
        )
    };
    let p = parse(&with("")).unwrap();
    let all = run_points(&p, &p.single_points(), 2, &|| {}).unwrap();
    let p = parse(&with("warmup = \"2d\"")).unwrap();
    let warm = run_points(&p, &p.single_points(), 2, &|| {}).unwrap();
    let (a, w) = (&all[0], &warm[0]);
    // The same schedule, fewer jobs counted: those of the last five days.
    assert_eq!(a.jobs, w.jobs);
    assert!(w.overall.submitted < a.overall.submitted);
    assert!(
        w.overall.submitted > a.overall.submitted / 2,
        "{} of {}",
        w.overall.submitted,
        a.overall.submitted
    );
    let from = w.cut.from.unwrap();
    let first = a.jobs.iter().map(|o| o.submit).min().unwrap();
    assert_eq!(from, first + brokk_model::Duration(2 * 86_400));
    let counted = w.jobs.iter().filter(|o| w.cut.counts(o)).count();
    assert_eq!(w.overall.finished, counted);
    assert!(w.jobs.iter().filter(|o| w.cut.counts(o)).all(|o| o.submit >= from));
    assert!(err(with("warmup = \"0s\"")).contains("metrics.warmup"));
    assert!(err(with("warmup = \"soon\"")).contains("metrics.warmup"));
}
