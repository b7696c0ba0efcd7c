//! Local policies on small hand-made workloads with hand-computed schedules.

use brokk_model::{Duration, Time};
use brokk_sim::cluster::{simulate, Policy, SimJob};

/// (submit, run, size), estimates exact.
fn jobs(spec: &[(i64, i64, u32)]) -> Vec<SimJob> {
    spec.iter()
        .enumerate()
        .map(|(i, &(s, r, n))| SimJob {
            id: i as i64 + 1,
            submit: Time(s),
            run: Duration(r),
            size: n,
            estimate: Duration(r),
            ..SimJob::default()
        })
        .collect()
}

fn schedule(procs: u32, js: &[SimJob], p: Policy) -> Vec<(i64, i64, i64)> {
    simulate(procs, js, p)
        .iter()
        .map(|o| (o.id, o.start.0, o.end.0))
        .collect()
}

/// 10 processors. J1 holds 6 until 10; J2 needs 8 and can start at 10 (its
/// reservation leaves 2 spare). J3 fits in the gap and ends by 7. J4 would run
/// past 10 on 4 processors, more than the 2 spare: backfilling it would delay J2.
/// J5 fits in the gap at 7 and ends by 10.
fn workload() -> Vec<SimJob> {
    jobs(&[(0, 10, 6), (1, 5, 8), (2, 5, 4), (3, 20, 4), (4, 3, 4)])
}

#[test]
fn fcfs_never_lets_a_job_pass_the_head() {
    assert_eq!(
        schedule(10, &workload(), Policy::Fcfs),
        vec![(1, 0, 10), (2, 10, 15), (3, 15, 20), (4, 15, 35), (5, 20, 23)]
    );
}

#[test]
fn easy_backfills_without_delaying_the_head() {
    assert_eq!(
        schedule(10, &workload(), Policy::Backfill { reservations: 1 }),
        vec![(1, 0, 10), (2, 10, 15), (3, 2, 7), (4, 15, 35), (5, 7, 10)]
    );
}

#[test]
fn conservative_protects_every_queued_job_where_easy_protects_only_the_head() {
    // 10 processors. J2 (6) is the head and starts at 10; J3 (7) is second. J4 (4
    // processors, 25 s) fits beside J2, so EASY starts it at once, which pushes J3
    // back to 28; conservative keeps J3's place at 20 and J4 waits until 30.
    let js = jobs(&[(0, 10, 6), (1, 10, 6), (2, 10, 7), (3, 25, 4)]);
    assert_eq!(
        schedule(10, &js, Policy::Backfill { reservations: 1 }),
        vec![(1, 0, 10), (2, 10, 20), (3, 28, 38), (4, 3, 28)]
    );
    assert_eq!(
        schedule(
            10,
            &js,
            Policy::Backfill {
                reservations: usize::MAX
            }
        ),
        vec![(1, 0, 10), (2, 10, 20), (3, 20, 30), (4, 30, 55)]
    );
}

#[test]
fn jobs_larger_than_the_machine_are_left_out() {
    let js = jobs(&[(0, 5, 12), (0, 5, 2)]);
    assert_eq!(schedule(10, &js, Policy::Fcfs), vec![(2, 0, 5)]);
}

mod fast_path {
    use super::*;
    use brokk_sim::cluster::{simulate_on_profile, simulate_with_flat_spans};
    use proptest::prelude::*;

    /// (gap to previous arrival, run, size, estimate) on a 16-processor machine;
    /// estimates may be shorter than run times, as users' requests often are.
    fn workload() -> impl Strategy<Value = Vec<SimJob>> {
        prop::collection::vec((0i64..20, 0i64..60, 1u32..=16, 0i64..80), 1..60).prop_map(|spec| {
            let mut t = 0;
            spec.into_iter()
                .enumerate()
                .map(|(i, (gap, run, size, est))| {
                    t += gap;
                    SimJob {
                        id: i as i64,
                        submit: Time(t),
                        run: Duration(run),
                        size,
                        estimate: Duration(est),
                        ..SimJob::default()
                    }
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases(300)))]

        /// The shadow-time walk gives exactly the schedule of a profile built
        /// afresh at every pass; the kept reservations (K protected jobs and
        /// conservative, whose reference is the site core, `grid.rs`) give
        /// the same schedule on a tree as on a flat profile, as they are
        /// kept for long queues.
        #[test]
        fn fast_paths_match_the_profile(js in workload()) {
            for policy in [Policy::EASY, Policy::Backfill { reservations: 0 }] {
                prop_assert_eq!(simulate(16, &js, policy), simulate_on_profile(16, &js, policy));
            }
            for policy in [Policy::Backfill { reservations: 2 }, Policy::CONSERVATIVE] {
                prop_assert_eq!(simulate_with_flat_spans(16, &js, policy, 0), simulate(16, &js, policy));
            }
        }
    }

    fn cases(default: u32) -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}
