//! The archive's traces in `../shared/data/traces` read completely and write back
//! unchanged.

use std::path::PathBuf;

use brokk_sim::swf::{read, read_path, write};

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/traces")
        .join(name)
}

#[test]
fn every_shared_trace_reads_with_its_documented_job_count() {
    for (name, jobs, procs) in [
        ("KTH-SP2-1996-2.1-cln.swf.gz", 27_992, Some(100)),
        ("NASA-iPSC-1993-3.1-cln.swf.gz", 18_239, Some(128)),
        ("LCG-2005-1.swf.gz", 188_041, None),
        ("lublin_256.swf", 10_000, Some(256)),
    ] {
        let swf = read_path(&trace(name), false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(swf.jobs.len(), jobs, "{name}");
        if procs.is_some() {
            assert_eq!(swf.max_procs(), procs, "{name}");
        }
        assert!(
            swf.jobs.windows(2).all(|w| w[0].submit <= w[1].submit),
            "{name}: submit times must not decrease"
        );
    }
}

#[test]
fn kth_round_trips_through_the_writer() {
    let swf = read_path(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    let mut out = Vec::new();
    write(&swf, &mut out).unwrap();
    assert_eq!(read(out.as_slice(), false).unwrap(), swf);
}

/// KTH-SP2 under EASY with the users' estimates: every job runs once, never before
/// it arrives, and the machine is never over-full.
#[test]
fn kth_under_easy_respects_arrival_and_capacity() {
    use brokk_sim::cluster::{from_swf, simulate, Estimates, Policy};
    let swf = read_path(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    let jobs = from_swf(&swf.jobs, Estimates::Requested);
    let procs = swf.max_procs().unwrap() as u32;
    let out = simulate(procs, &jobs, Policy::Backfill { reservations: 1 });
    let runnable = jobs.iter().filter(|j| j.size <= procs).count();
    assert_eq!(out.len(), runnable);
    let mut edges: Vec<(i64, i64)> = Vec::new();
    for (o, j) in out.iter().zip(jobs.iter().filter(|j| j.size <= procs)) {
        assert!(o.start >= o.submit, "job {} started before it arrived", o.id);
        assert_eq!(o.end - o.start, j.run, "job {} did not run for its run time", o.id);
        edges.push((o.start.0, i64::from(o.size)));
        edges.push((o.end.0, -i64::from(o.size)));
    }
    edges.sort();
    let mut used = 0;
    for (_, d) in edges {
        used += d;
        assert!(used <= i64::from(procs), "over capacity");
    }
}

/// On a real trace, with users' estimates (often far above the run time, and
/// sometimes below it), the fast EASY path gives exactly the schedule of a
/// profile built afresh at every pass, and the kept conservative profile the
/// same schedule as a tree as flat.
#[test]
fn kth_fast_paths_match_the_profile() {
    use brokk_sim::cluster::{from_swf, simulate, simulate_on_profile, simulate_with_flat_spans, Estimates, Policy};
    let swf = read_path(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    for estimates in [Estimates::Requested, Estimates::Exact] {
        let jobs = from_swf(&swf.jobs, estimates);
        assert_eq!(
            simulate(100, &jobs, Policy::EASY),
            simulate_on_profile(100, &jobs, Policy::EASY)
        );
        assert_eq!(
            simulate(100, &jobs, Policy::CONSERVATIVE),
            simulate_with_flat_spans(100, &jobs, Policy::CONSERVATIVE, 0)
        );
    }
}

#[test]
fn as_recorded_waits_on_kth_are_the_traces_own() {
    let exp = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/experiments/kth-sp2.toml");
    let prepared = brokk_sim::experiment::load(&exp).unwrap();
    let baseline = prepared.as_recorded().expect("a trace has a recorded schedule");
    // By hand: every record with a size, a run time and a recorded wait.
    let swf = read_path(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    let waits: Vec<f64> = swf
        .jobs
        .iter()
        .filter(|j| (j.req_procs > 0 || j.procs > 0) && j.run >= 0 && j.submit >= 0 && j.wait >= 0)
        .map(|j| j.wait as f64)
        .collect();
    let mean = waits.iter().sum::<f64>() / waits.len() as f64;
    assert_eq!(baseline.overall.finished, waits.len());
    assert!((baseline.overall.mean_wait - mean).abs() < 1e-6);
    // The figure the trace's users saw: 15,348 s over its 27,992 jobs.
    assert_eq!((waits.len(), mean.round()), (27_992, 15_348.0));
}
