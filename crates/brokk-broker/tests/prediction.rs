//! Seed 003's prediction examples recomputed by hand.

use brokk_broker::predict::{execution_time, predict, queue_wait, ExecutionEstimate, LoadModel};
use brokk_broker::{Clock, ManualClock};
use brokk_jdl::{read, Format, ReadOptions};
use brokk_model::{Benchmark, Duration, Job, PublishedBenchmark, ResourceInfo, Time, DEFAULT_PENALTY_FACTOR};

fn job(path_in_corpus: &str) -> Job {
    let path = format!(
        "{}/../brokk-jdl/tests/corpus/xrsl/valid/{path_in_corpus}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    read(Format::Xrsl, &text, &ReadOptions::default())
        .unwrap()
        .jobs
        .remove(0)
}

fn site(benchmarks: &[(&str, f64)]) -> ResourceInfo {
    ResourceInfo {
        benchmarks: benchmarks
            .iter()
            .map(|(n, v)| PublishedBenchmark {
                name: n.to_string(),
                value: *v,
            })
            .collect(),
        total_slots: 64,
        free_slots: 64,
        ..ResourceInfo::default()
    }
}

/// Figure 3: 65 min where NAS LU scores 250 and BT 200, 50 min where CG scores 90.
#[test]
fn figure_3_on_a_site_publishing_every_benchmark() {
    let j = job("01-fig3-benchmarks.xrsl");
    let s = site(&[("nas-lu-c", 500.0), ("nas-bt-c", 400.0), ("nas-cg-c", 180.0)]);
    // LU: 65 * 250 / 500 = 32.5 min; BT: 65 * 200 / 400 = 32.5 min; CG: 50 * 90 / 180 = 25 min.
    let e = execution_time(&j.benchmarks, &s.benchmarks, DEFAULT_PENALTY_FACTOR).unwrap();
    assert_eq!(
        e,
        ExecutionEstimate {
            ranking: Duration(1800),
            requested: Duration(1950)
        }
    );
}

#[test]
fn figure_3_on_a_site_publishing_some_benchmarks_applies_the_penalty() {
    let j = job("01-fig3-benchmarks.xrsl");
    let s = site(&[("nas-lu-c", 125.0), ("specint", 30.0)]);
    // LU: 65 * 250 / 125 = 130 min = 7800 s; BT and CG missing: 1.25 * 7800 = 9750 s each.
    let e = execution_time(&j.benchmarks, &s.benchmarks, DEFAULT_PENALTY_FACTOR).unwrap();
    assert_eq!(
        e,
        ExecutionEstimate {
            ranking: Duration((7800 + 2 * 9750) / 3),
            requested: Duration(9750)
        }
    );
    // The user may set another penalty factor.
    let e = execution_time(&j.benchmarks, &s.benchmarks, 1.5).unwrap();
    assert_eq!(e.requested, Duration(11_700));
}

#[test]
fn figure_3_on_a_site_publishing_none_falls_back_to_the_jobs_wall_time() {
    let mut j = job("01-fig3-benchmarks.xrsl");
    let s = site(&[("specint", 30.0)]);
    assert_eq!(
        execution_time(&j.benchmarks, &s.benchmarks, DEFAULT_PENALTY_FACTOR),
        None
    );
    let clock = ManualClock::new(Time(1_000));
    let p = predict(
        &j,
        &[],
        DEFAULT_PENALTY_FACTOR,
        &s,
        None,
        clock.now(),
        LoadModel::default(),
    );
    assert_eq!(p.execution, None);
    j.wall_time = Some(Duration::hours(2));
    let p = predict(
        &j,
        &[],
        DEFAULT_PENALTY_FACTOR,
        &s,
        None,
        clock.now(),
        LoadModel::default(),
    );
    assert_eq!(
        (p.execution, p.requested_wall_time),
        (Some(Duration(7200)), Some(Duration(7200)))
    );
}

/// Figure 4: output estimates of 230 MB and 5 GB (none for the log), known input sizes.
#[test]
fn figure_4_transfers_and_the_total_time_to_delivery() {
    let mut j = job("02-fig4-transfers.xrsl");
    j.input_files[0].size = Some(100 << 20);
    j.input_files[1].size = Some(50 << 20);
    j.benchmarks = vec![Benchmark {
        name: "hepspec".into(),
        result: 10.0,
        time: Duration::minutes(60),
    }];
    let mut s = site(&[("hepspec", 20.0)]);
    s.bandwidth_bytes_per_s = Some(10 << 20);
    s.estimated_wait = Some(Duration(5));
    let p = predict(&j, &[], DEFAULT_PENALTY_FACTOR, &s, None, Time(0), LoadModel::default());
    // Stage-in 150 MiB at 10 MiB/s = 15 s, longer than the 5 s queue wait.
    assert_eq!(p.stage_in, Some(Duration(15)));
    assert_eq!(p.tts(), Duration(15));
    // Stage-out (230 MiB + 5 GiB) at 10 MiB/s = 535 s; execution 60 min * 10 / 20 = 1800 s.
    assert_eq!(p.stage_out, Some(Duration(535)));
    assert_eq!(p.ttd(), Duration(15 + 1800 + 535));
    // Without any output size estimate stage-out is left out of the TTD.
    for f in &mut j.output_files {
        f.size_estimate = None;
    }
    let p = predict(&j, &[], DEFAULT_PENALTY_FACTOR, &s, None, Time(0), LoadModel::default());
    assert_eq!((p.stage_out, p.ttd()), (None, Duration(15 + 1800)));
}

#[test]
fn queue_wait_prefers_a_reservation_then_the_published_estimate_then_load() {
    let clock = ManualClock::new(Time(100));
    let mut s = site(&[]);
    let load = LoadModel::default();
    let hour = Duration(3600);
    assert_eq!(
        queue_wait(&s, 4, hour, Some(Time(400)), clock.now(), load),
        Duration(300)
    );
    s.estimated_wait = Some(Duration(42));
    assert_eq!(queue_wait(&s, 4, hour, None, clock.now(), load), Duration(42));
    s.estimated_wait = None;
    assert_eq!(queue_wait(&s, 4, hour, None, clock.now(), load), Duration::ZERO);
    s.free_slots = 0;
    s.waiting_jobs = 31;
    // (31 + 1) jobs of an hour each over 64 slots.
    assert_eq!(
        queue_wait(&s, 4, hour, None, clock.now(), load),
        Duration(32 * 3600 / 64)
    );
    clock.advance(Duration(500));
    assert_eq!(
        queue_wait(&s, 4, hour, Some(Time(400)), clock.now(), load),
        Duration::ZERO
    );
}

/// The estimate a site publishes is for a one-slot job: a job wider than
/// the slots free now never reads it as a start at once.
#[test]
fn a_job_wider_than_the_free_slots_does_not_start_at_once_by_the_summary() {
    let load = LoadModel::default();
    let s = ResourceInfo {
        total_slots: 8,
        free_slots: 6,
        estimated_wait: Some(Duration::ZERO),
        ..ResourceInfo::default()
    };
    let hour = Duration(3600);
    assert_eq!(queue_wait(&s, 6, hour, None, Time(0), load), Duration::ZERO);
    // One queue's worth of the mean job over the site's width.
    assert_eq!(queue_wait(&s, 8, hour, None, Time(0), load), Duration(3600 / 8));
}

/// Where the site publishes its free capacity over time, the wait is the
/// start of the job's own shape in it, read from now however old it is.
#[test]
fn a_published_availability_gives_the_start_of_the_jobs_own_shape() {
    use brokk_model::{Availability, FreeRange};
    let load = LoadModel::default();
    let range = |start: i64, end: i64, free: u32| FreeRange {
        start: Time(start),
        end: Time(end),
        free,
    };
    let s = ResourceInfo {
        total_slots: 8,
        free_slots: 6,
        estimated_wait: Some(Duration::ZERO),
        availability: Some(Availability {
            computed_at: Time(0),
            until: Time(3600),
            ranges: vec![range(0, 39, 6), range(39, 3600, 8)],
        }),
        ..ResourceInfo::default()
    };
    assert_eq!(queue_wait(&s, 8, Duration(600), None, Time(0), load), Duration(39));
    assert_eq!(queue_wait(&s, 2, Duration(600), None, Time(0), load), Duration::ZERO);
    // Read ten seconds later: 29 s to go.
    assert_eq!(queue_wait(&s, 8, Duration(600), None, Time(10), load), Duration(29));
}

/// A site whose middleware moves jobs along at its own cycle (an ARC CE)
/// starts a job that much later, and its end is known that much later
/// again: both predictions carry it, the execution does not.
#[test]
fn a_sites_middleware_lag_delays_the_start_and_the_known_end() {
    let mut j = job("01-fig3-benchmarks.xrsl");
    j.benchmarks.clear();
    j.wall_time = Some(Duration(600));
    let now = Time(1_000_000);
    let plain = site(&[]);
    let lagging = ResourceInfo {
        lag: Some(Duration(60)),
        ..site(&[])
    };
    let p = predict(&j, &[], DEFAULT_PENALTY_FACTOR, &plain, None, now, LoadModel::default());
    let q = predict(
        &j,
        &[],
        DEFAULT_PENALTY_FACTOR,
        &lagging,
        None,
        now,
        LoadModel::default(),
    );
    assert_eq!(q.tts(), p.tts() + Duration(60));
    assert_eq!(q.ttd(), p.ttd() + Duration(120));
    assert_eq!(q.execution, p.execution);
}
