//! What leaves the simulator reads back: a schedule written as SWF reads and
//! writes again byte for byte, `jobs.csv` reads back into the rows it was
//! written from, and a workload exported from the model is the one simulated.

use std::path::Path;

use brokk_sim::experiment::{prepare, run_points, Experiment};
use brokk_sim::export::{job_rows, jobs_csv, read_jobs_csv, schedule_swf, workload_swf, write_jobs_csv};
use brokk_sim::swf::{read, write};

const MODEL: &str = r#"
name = "export"
policies = ["fcfs", "easy+sjf"]
[workload]
lublin = { days = 3 }
[platform]
clusters = [{ name = "a", procs = 64 }]
[metrics]
horizon = "steady-state"
[sweep]
loads = [0.9]
seeds = [4]
"#;

fn prepared() -> brokk_sim::experiment::Prepared {
    let spec: Experiment = toml::from_str(MODEL).unwrap();
    prepare(spec, Path::new(".")).unwrap()
}

#[test]
fn a_schedule_as_swf_round_trips_and_carries_the_simulated_waits() {
    let p = prepared();
    let results = run_points(&p, &p.points(), 1, &|| {}).unwrap();
    for r in &results {
        let swf = schedule_swf(&p, r).unwrap();
        let mut bytes = Vec::new();
        write(&swf, &mut bytes).unwrap();
        let back = read(bytes.as_slice(), false).unwrap();
        let mut again = Vec::new();
        write(&back, &mut again).unwrap();
        assert_eq!(bytes, again, "{}", r.policy);
        // Each job's wait is the simulator's.
        let outcomes = &r.runs[0].outcomes;
        assert!(!outcomes.is_empty());
        for o in outcomes {
            let j = back.jobs.iter().find(|j| j.id == o.id).unwrap();
            assert_eq!(
                (j.submit, j.wait, j.run),
                (o.submit.0, (o.start - o.submit).0, (o.end - o.start).0)
            );
        }
        assert!(back.header.iter().any(|h| h.contains(&r.policy)));
    }
}

#[test]
fn an_exported_workload_is_the_one_simulated() {
    let p = prepared();
    let point = p.points()[0];
    let swf = workload_swf(&p, point).unwrap();
    let mut bytes = Vec::new();
    write(&swf, &mut bytes).unwrap();
    let back = read(bytes.as_slice(), false).unwrap();
    assert_eq!(back.max_procs(), Some(64));
    let (jobs, _) = p.workload(point.load, point.seed).unwrap();
    assert_eq!(back.jobs, jobs);
}

#[test]
fn jobs_csv_reads_back_into_its_rows() {
    let p = prepared();
    let results = run_points(&p, &p.points(), 1, &|| {}).unwrap();
    let rows = job_rows(&p, &results, None);
    let text = write_jobs_csv(&rows);
    assert_eq!(text, jobs_csv(&p, &results, None));
    let back = read_jobs_csv(text.as_bytes()).unwrap();
    assert_eq!(back, rows);
    assert_eq!(write_jobs_csv(&back), text);
    // Names with commas and quotes are quoted and read back.
    let mut odd = rows[0].clone();
    odd.policy = "a,\"b\"".into();
    odd.cluster = "site, east".into();
    assert_eq!(read_jobs_csv(write_jobs_csv(&[odd.clone()]).as_bytes()).unwrap(), [odd]);
    let bytes = text.into_bytes();
    // A damaged line is an error naming where.
    let mut bad = bytes.clone();
    let second_line = bad.iter().position(|&b| b == b'\n').unwrap() + 1;
    bad[second_line..second_line + 4].copy_from_slice(b"x,y,");
    let e = read_jobs_csv(&bad).unwrap_err().to_string();
    assert!(e.contains("line 2") || e.contains("record 1"), "{e}");
}
