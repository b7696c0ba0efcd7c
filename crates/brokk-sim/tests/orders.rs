//! Queue orders on hand-made workloads with hand-computed schedules: the
//! built-in ones, and a user-defined order named by an experiment file.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use brokk_core::order::QueueOrder;
use brokk_core::queue::QueueJob;
use brokk_model::Time;
use brokk_sim::experiment::{prepare, prepare_with_orders, run_points, Experiment};
use brokk_sim::orders::Orders;

/// An SWF line: (id, submit, run, size, user, queue), estimates exact.
fn swf(jobs: &[(i64, i64, i64, u32, i64, i64)]) -> String {
    jobs.iter()
        .map(|&(id, submit, run, size, user, queue)| {
            format!("{id} {submit} -1 {run} {size} -1 -1 {size} {run} -1 1 {user} -1 -1 {queue} -1 -1 -1\n")
        })
        .collect()
}

/// Starts per job id, for each policy named, on one 10-processor cluster.
fn starts(trace: &str, policies: &[&str], extra: &str, orders: &Orders) -> Result<Vec<Vec<(i64, i64)>>, String> {
    // One directory per call: the tests run in parallel.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("brokk-orders-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("t.swf"), trace).map_err(|e| e.to_string())?;
    let text = format!(
        "name = \"orders\"\npolicies = {policies:?}\n{extra}\n[workload]\nswf = \"t.swf\"\nestimates = \"exact\"\n\
         [platform]\nclusters = [{{ name = \"c\", procs = 10 }}]\n"
    );
    let spec: Experiment = toml::from_str(&text).map_err(|e| e.to_string())?;
    let prepared = prepare_with_orders(spec, &dir, None, orders).map_err(|e| e.to_string())?;
    let results = run_points(&prepared, &prepared.points(), 1, &|| {}).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(starts_of(&results))
}

/// Each point's starts per job id, in id order.
fn starts_of(results: &[brokk_sim::experiment::PointResult]) -> Vec<Vec<(i64, i64)>> {
    results
        .iter()
        .map(|r| {
            let mut s: Vec<(i64, i64)> = r.runs[0].outcomes.iter().map(|o| (o.id, o.start.0)).collect();
            s.sort();
            s
        })
        .collect()
}

/// J1 holds the whole machine until 10; three jobs of 5 processors queue
/// behind it, the longest first.
fn three_behind_one() -> String {
    swf(&[
        (1, 0, 10, 10, 1, 1),
        (2, 1, 50, 5, 1, 1),
        (3, 2, 5, 5, 1, 1),
        (4, 3, 20, 5, 1, 1),
    ])
}

#[test]
fn shortest_and_longest_first_reorder_the_queue() {
    let s = starts(
        &three_behind_one(),
        &["fcfs", "fcfs+sjf", "fcfs+ljf"],
        "",
        &Orders::new(),
    )
    .unwrap();
    // Arrival order: J2 and J3 at 10, J4 when J3 ends at 15.
    assert_eq!(s[0], [(1, 0), (2, 10), (3, 10), (4, 15)]);
    // Shortest first: J3 (5 s) and J4 (20 s) at 10, J2 when J3 ends.
    assert_eq!(s[1], [(1, 0), (2, 15), (3, 10), (4, 10)]);
    // Longest first: J2 (50 s) and J4 (20 s) at 10, J3 when J4 ends at 30.
    assert_eq!(s[2], [(1, 0), (2, 10), (3, 30), (4, 10)]);
}

#[test]
fn fair_share_serves_the_user_who_used_least() {
    // User 7 ran the whole machine for 100 s; then user 7 and user 8 each
    // queue a full-machine job behind user 9's, user 7's first.
    let trace = swf(&[
        (1, 0, 100, 10, 7, 1),
        (2, 100, 10, 10, 9, 1),
        (3, 101, 10, 10, 7, 1),
        (4, 102, 10, 10, 8, 1),
    ]);
    let s = starts(&trace, &["fcfs", "fcfs+fairshare:3600"], "", &Orders::new()).unwrap();
    assert_eq!(s[0], [(1, 0), (2, 100), (3, 110), (4, 120)]);
    assert_eq!(s[1], [(1, 0), (2, 100), (3, 120), (4, 110)]);
}

#[test]
fn priorities_come_from_the_queue_table() {
    // As three_behind_one, with J4 in queue 2.
    let trace = swf(&[
        (1, 0, 10, 10, 1, 1),
        (2, 1, 50, 5, 1, 1),
        (3, 2, 5, 5, 1, 1),
        (4, 3, 20, 5, 1, 2),
    ]);
    let s = starts(&trace, &["fcfs+priority"], "[priorities]\n1 = 1\n2 = 5", &Orders::new()).unwrap();
    // Queue 2 first: J4 and J2 at 10, J3 when J4 ends at 30.
    assert_eq!(s[0], [(1, 0), (2, 10), (3, 30), (4, 10)]);
    let s = starts(&trace, &["fcfs+priority"], "[priorities]\n1 = 5", &Orders::new()).unwrap();
    // Queue 1 first (queue 2 is unlisted, so 0): arrival order within it.
    assert_eq!(s[0], [(1, 0), (2, 10), (3, 10), (4, 15)]);
}

/// A user's order: narrowest job first.
struct Narrowest;

impl QueueOrder for Narrowest {
    fn key(&self, job: &QueueJob, _now: Time) -> f64 {
        f64::from(job.size)
    }
}

#[test]
fn a_user_defined_order_is_named_by_the_experiment() {
    // Behind J1: J2 wants 6, J3 4, J4 2 processors, 5 s each.
    let trace = swf(&[
        (1, 0, 10, 10, 1, 1),
        (2, 1, 5, 6, 1, 1),
        (3, 2, 5, 4, 1, 1),
        (4, 3, 5, 2, 1, 1),
    ]);
    let orders = Orders::new().with("narrowest", || Box::new(Narrowest));
    let s = starts(&trace, &["fcfs", "fcfs+narrowest"], "", &orders).unwrap();
    // Arrival order: J2 and J3 fill the machine at 10; J4 at 15.
    assert_eq!(s[0], [(1, 0), (2, 10), (3, 10), (4, 15)]);
    // Narrowest first: J4 and J3 at 10 leave 4 free, too few for J2.
    assert_eq!(s[1], [(1, 0), (2, 15), (3, 10), (4, 10)]);
    // Without the registration the name is unknown, and the error lists it
    // among the known ones only when registered.
    let e = starts(&trace, &["fcfs+narrowest"], "", &Orders::new()).unwrap_err();
    assert!(e.contains("unknown queue order \"narrowest\""), "{e}");
}

#[test]
fn mistakes_in_orders_are_named() {
    let parse = |policies: &str, extra: &str| {
        let text = format!(
            "name = \"x\"\npolicies = {policies}\n{extra}\n[workload]\nlublin = {{ days = 1 }}\n\
             [platform]\nclusters = [{{ name = \"c\", procs = 8 }}]\n"
        );
        let spec: Experiment = toml::from_str(&text).unwrap();
        prepare(spec, Path::new(".")).map(|_| ()).map_err(|e| e.to_string())
    };
    assert!(parse("[\"easy+sjf\", \"conservative+fairshare:60\", \"fcfs+wfp\"]", "").is_ok());
    let e = parse("[\"easy+priority\"]", "").unwrap_err();
    assert!(e.contains("needs a [priorities] table"), "{e}");
    let e = parse("[\"easy+fairshare:-5\"]", "").unwrap_err();
    assert!(e.contains("half-life"), "{e}");
    let e = parse("[\"easy+sjf:3\"]", "").unwrap_err();
    assert!(e.contains("takes no parameter"), "{e}");
    let e = parse("[\"easy+priority\"]", "[priorities]\nbatch = 3").unwrap_err();
    assert!(e.contains("not a queue number"), "{e}");
}

/// Starts per job id for each policy, on one 10-processor grid site that a
/// broker routes to (the site is a site core, as live).
fn grid_starts(trace: &str, policies: &[&str]) -> Result<Vec<Vec<(i64, i64)>>, String> {
    let dir = std::env::temp_dir().join(format!(
        "brokk-orders-grid-{}-{}",
        std::process::id(),
        policies.join("-")
    ));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("t.swf"), trace).map_err(|e| e.to_string())?;
    let text = format!(
        "name = \"orders\"\npolicies = {policies:?}\n[workload]\nswf = \"t.swf\"\nestimates = \"exact\"\n\
         [platform]\nclusters = [{{ name = \"c\", procs = 10 }}]\nroutings = [\"broker-ttd\"]\n"
    );
    let spec: Experiment = toml::from_str(&text).map_err(|e| e.to_string())?;
    let prepared = prepare(spec, &dir).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    let prepared = prepared?;
    let results = run_points(&prepared, &prepared.points(), 1, &|| {}).map_err(|e| e.to_string())?;
    Ok(starts_of(&results))
}

#[test]
fn a_grid_site_serves_its_waiting_jobs_in_the_order_it_is_given() {
    let s = grid_starts(&three_behind_one(), &["easy", "easy+ljf"]).unwrap();
    // EASY in arrival order: J2 protected behind J1, J3 backfills beside it
    // at 10, J4 goes when J3 ends.
    assert_eq!(s[0], [(1, 0), (2, 10), (3, 10), (4, 15)]);
    // Longest first: J4 (20 s) before J3 (5 s) beside J2.
    assert_eq!(s[1], [(1, 0), (2, 10), (3, 30), (4, 10)]);
    // Conservative backfilling plans every job's start as it arrives; under
    // SJF the queue is planned again, so J3 and J4 (the shortest) take the
    // starts J2 and J3 had, and J2's start moves later.
    let s = grid_starts(&three_behind_one(), &["conservative", "conservative+sjf"]).unwrap();
    assert_eq!(s[0], [(1, 0), (2, 10), (3, 10), (4, 15)]);
    assert_eq!(s[1], [(1, 0), (2, 15), (3, 10), (4, 10)]);
}
