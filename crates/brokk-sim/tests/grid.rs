//! Grids of site cores with arrivals routed by fixed rules or by the broker.

use brokk_core::order::Named;
use brokk_model::{Duration, Time};
use brokk_sim::cluster::{Policy, SimJob};
use brokk_sim::grid::{
    simulate_grid, simulate_grid_with_local, Adaptation, Delegate, GridOptions, GridRouting, Staleness,
};
use brokk_sim::platform::{ClusterSpec, Routing};

fn site(name: &str, procs: u32, speed: f64) -> ClusterSpec {
    ClusterSpec {
        name: name.into(),
        procs,
        partitions: Vec::new(),
        speed,
    }
}

fn job(id: i64, submit: i64, size: u32, run: i64) -> SimJob {
    SimJob {
        id,
        submit: Time(submit),
        run: Duration(run),
        size,
        estimate: Duration(run),
        partition: -1,
        ..SimJob::default()
    }
}

/// Each job that ran, as (id, site, start), in id order.
fn starts(r: &brokk_sim::grid::GridRun) -> Vec<(i64, String, Time)> {
    let mut s: Vec<(i64, String, Time)> = r
        .clusters
        .iter()
        .flat_map(|c| c.outcomes.iter().map(move |o| (o.id, c.spec.name.clone(), o.start)))
        .collect();
    s.sort();
    s
}

const TTD: GridRouting = GridRouting::Broker {
    objective: brokk_model::Objective::EarliestCompletion,
    reserve_top_k: 0,
};

/// Options with this staleness, the rest as live.
fn with(staleness: Staleness) -> GridOptions {
    GridOptions {
        staleness,
        ..GridOptions::default()
    }
}

#[test]
fn the_broker_sends_a_job_to_the_site_that_finishes_it_first_and_predicts_it_exactly() {
    let sites = [site("slow", 8, 1.0), site("fast", 8, 2.0)];
    let run = simulate_grid(&sites, &[job(1, 100, 4, 1000)], TTD, GridOptions::default());
    assert_eq!(run.clusters[0].submitted, 0);
    let o = run.clusters[1].outcomes[0];
    assert_eq!(
        (o.start, o.end),
        (Time(100), Time(600)),
        "1000 s of work at twice the speed"
    );
    let p = run.prediction.unwrap();
    assert_eq!((p.jobs, p.mean_absolute), (1, 0.0));
}

#[test]
fn earliest_completion_waits_for_a_fast_site_where_earliest_start_does_not() {
    // The fast site is busy for 100 s; the slow one is idle but takes 4x as long.
    let sites = [site("fast", 4, 2.0), site("slow", 4, 0.5)];
    let jobs = [job(1, 0, 4, 200), job(2, 1, 4, 1000)];
    let tts = GridRouting::Broker {
        objective: brokk_model::Objective::EarliestStart,
        reserve_top_k: 0,
    };
    let by_ttd = simulate_grid(&sites, &jobs, TTD, GridOptions::default());
    let by_tts = simulate_grid(&sites, &jobs, tts, GridOptions::default());
    // TTD: job 2 waits until 100 on the fast site and ends at 600, not at 2001.
    let j2 = |r: &brokk_sim::grid::GridRun| {
        r.clusters
            .iter()
            .flat_map(|c| c.outcomes.iter().map(move |o| (c.spec.name.clone(), *o)))
            .find(|(_, o)| o.id == 2)
            .unwrap()
    };
    let (site_ttd, o) = j2(&by_ttd);
    assert_eq!((site_ttd.as_str(), o.start, o.end), ("fast", Time(100), Time(600)));
    let (site_tts, o) = j2(&by_tts);
    assert_eq!((site_tts.as_str(), o.start, o.end), ("slow", Time(1), Time(2001)));
}

/// The broker counts the jobs it sends in what it knows of a site until
/// the site's next snapshot ([`brokk_broker::info::book`]), as `brokk
/// serve` does: a burst spreads over idle sites however stale or late the
/// snapshots are, where a broker that saw only the snapshots would send
/// the whole burst to the one site that looked best.
#[test]
fn the_broker_spreads_its_own_burst_however_stale_its_information() {
    let sites = [site("a", 8, 1.0), site("b", 8, 1.0), site("c", 8, 1.0)];
    let burst: Vec<SimJob> = (0..6).map(|i| job(i, 10, 8, 600)).collect();
    let stale = |ttl: i64, delay: i64| Staleness {
        info_ttl: Duration(ttl),
        info_delay: Duration(delay),
    };
    let fresh = simulate_grid(&sites, &burst, TTD, GridOptions::default());
    let cached = simulate_grid(&sites, &burst, TTD, with(stale(3600, 0)));
    let late = simulate_grid(&sites, &burst, TTD, with(stale(0, 3600)));
    let per_site = |r: &brokk_sim::grid::GridRun| r.clusters.iter().map(|c| c.submitted).collect::<Vec<_>>();
    let last_end = |r: &brokk_sim::grid::GridRun| r.clusters.iter().flat_map(|c| &c.outcomes).map(|o| o.end).max();
    for run in [&fresh, &cached, &late] {
        assert_eq!(per_site(run), vec![2, 2, 2]);
        assert_eq!(last_end(run), Some(Time(1210)), "two rounds of 600 s after the arrival");
    }
    // What the broker booked is what happened: the second round's wait was
    // predicted from the first round's wall times.
    assert!(late.prediction.unwrap().mean_absolute < 60.0, "{:?}", late.prediction);
}

#[test]
fn a_job_that_outlives_its_wall_time_is_killed_there() {
    let sites = [site("a", 8, 1.0)];
    let mut j = job(1, 0, 2, 500);
    j.estimate = Duration(100);
    let run = simulate_grid(
        &sites,
        &[j],
        GridRouting::Fixed(Routing::RoundRobin),
        GridOptions::default(),
    );
    assert_eq!(run.killed, 1);
    assert_eq!(run.clusters[0].outcomes[0].end, Time(100));
}

#[test]
fn a_grid_run_is_the_same_every_time() {
    let sites = [site("a", 16, 1.0), site("b", 32, 0.5), site("c", 8, 3.0)];
    let jobs: Vec<SimJob> = (0..400)
        .map(|i| job(i, i * 7 % 900, 1 + (i as u32 * 5) % 16, 50 + (i * 37) % 700))
        .collect();
    for routing in [
        GridRouting::Fixed(Routing::Random(7)),
        GridRouting::Fixed(Routing::RoundRobin),
        TTD,
        GridRouting::Broker {
            objective: brokk_model::Objective::EarliestCompletion,
            reserve_top_k: 2,
        },
    ] {
        let a = simulate_grid(&sites, &jobs, routing, GridOptions::default());
        let b = simulate_grid(&sites, &jobs, routing, GridOptions::default());
        assert_eq!(a, b, "{routing:?}");
        let done: usize = a.clusters.iter().map(|c| c.outcomes.len()).sum();
        assert_eq!(done, 400, "{routing:?}");
        for c in &a.clusters {
            for o in &c.outcomes {
                assert!(o.start >= o.submit && o.end > o.start, "{routing:?} {o:?}");
            }
        }
    }
}

/// Each job's start, by job id.
type Starts = Vec<(i64, Time)>;

/// The starts on a one-site grid (the site core) and on the trace queue
/// that platform runs use, with the waiting jobs served in `order` (arrival
/// order when none), and whether any job arrived at the second another
/// arrived or ended on the trace queue.
fn starts_both(jobs: &[SimJob], policy: Policy, order: Option<Named>) -> (Starts, Starts, bool) {
    let grid = simulate_grid(
        &[site("a", 8, 1.0)],
        jobs,
        GridRouting::Fixed(Routing::RoundRobin),
        GridOptions {
            policy: policy.into(),
            order,
            ..GridOptions::default()
        },
    );
    let mut core: Starts = grid.clusters[0].outcomes.iter().map(|o| (o.id, o.start)).collect();
    let trace = match order {
        Some(o) => brokk_sim::cluster::simulate_in_order(8, jobs, policy, o.make()),
        None => brokk_sim::cluster::simulate(8, jobs, policy),
    };
    let mut seconds: Vec<Time> = jobs
        .iter()
        .map(|j| j.submit)
        .chain(trace.iter().map(|o| o.end))
        .collect();
    seconds.sort();
    let together = seconds.windows(2).any(|w| w[0] == w[1]);
    let mut queue: Starts = trace.iter().map(|o| (o.id, o.start)).collect();
    core.sort();
    queue.sort();
    (core, queue, together)
}

/// Jobs of (submit, size, run, slack) in (time, id) order, each estimated
/// at its run time plus the slack, so no job is killed at its estimate.
fn stream(raw: &[(i64, u32, i64, i64)]) -> Vec<SimJob> {
    let mut jobs: Vec<SimJob> = raw
        .iter()
        .enumerate()
        .map(|(k, &(submit, size, run, slack))| SimJob {
            estimate: Duration(run + slack),
            ..job(k as i64, submit, size, run)
        })
        .collect();
    jobs.sort_by_key(|j| (j.submit, j.id));
    jobs
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// The site core schedules a stream exactly as the trace queue does
    /// (estimates at least the run times, so no job is killed), under every
    /// policy in arrival order: FCFS, backfilling without protection, EASY,
    /// K protected jobs and conservative backfilling (both keep a protected
    /// job's reservation and move it up after an early end, never later).
    #[test]
    fn the_site_core_and_the_trace_queue_agree_on_every_policy(
        raw in proptest::collection::vec((0i64..400, 1u32..=8, 1i64..200, 0i64..100), 1..40)
    ) {
        let jobs = stream(&raw);
        for policy in [
            Policy::Fcfs,
            Policy::Backfill { reservations: 0 },
            Policy::EASY,
            Policy::Backfill { reservations: 2 },
            Policy::Backfill { reservations: 3 },
            Policy::CONSERVATIVE,
        ] {
            let (core, queue, _) = starts_both(&jobs, policy, None);
            proptest::prop_assert_eq!(core, queue, "{:?}", policy);
        }
    }

    /// Under a queue order too, where no two events share a second: the
    /// trace queue decides once per second after all of its events, the
    /// site core at each, so a job arriving at the second another ends may
    /// find that one's successor already started.
    #[test]
    fn the_site_core_and_the_trace_queue_agree_on_every_policy_in_every_order(
        raw in proptest::collection::vec((0i64..4000, 1u32..=8, 1i64..2000, 0i64..1000), 1..30)
    ) {
        let jobs = stream(&raw);
        for policy in [Policy::Fcfs, Policy::EASY, Policy::Backfill { reservations: 2 }, Policy::CONSERVATIVE] {
            for order in [Named::ShortestFirst, Named::LongestFirst] {
                let (core, queue, together) = starts_both(&jobs, policy, Some(order));
                proptest::prop_assume!(!together);
                proptest::prop_assert_eq!(core, queue, "{:?} {:?}", policy, order);
            }
        }
    }
}

#[test]
fn adaptation_moves_a_waiting_job_to_a_site_that_freed_up() {
    // Two equal sites, each first given a job estimated at 1000 s; on b it
    // ends after 10 s. A third job queues behind a's (both predicted free
    // at 1000). Without adaptation it waits there; with rounds every 60 s
    // it moves to b once b's information shows it idle.
    let sites = [site("a", 4, 1.0), site("b", 4, 1.0)];
    let long = |id, run| SimJob {
        estimate: Duration(1000),
        ..job(id, 0, 4, run)
    };
    let jobs = [long(1, 1000), long(2, 10), long(3, 100)];
    let run = |adaptation| {
        simulate_grid(
            &sites,
            &jobs,
            TTD,
            GridOptions {
                adaptation,
                ..GridOptions::default()
            },
        )
    };
    let start_of = |r: &brokk_sim::grid::GridRun, id: i64| {
        r.clusters
            .iter()
            .flat_map(|c| c.outcomes.iter().map(move |o| (c.spec.name.clone(), o)))
            .find(|(_, o)| o.id == id)
            .map(|(name, o)| (name, o.start.0))
            .unwrap()
    };
    let still = run(None);
    assert_eq!(start_of(&still, 3), ("a".to_string(), 1000));
    assert_eq!(still.moved, 0);
    let adapted = run(Some(Adaptation {
        every: Duration(60),
        margin: Duration(60),
    }));
    assert_eq!(adapted.moved, 1);
    assert_eq!(start_of(&adapted, 3), ("b".to_string(), 60));
}

#[test]
fn a_job_larger_than_every_site_is_coallocated_to_start_together() {
    // Two 8-processor sites; the first job goes to the faster b and holds
    // it until 50. A 12-processor job is two parts of 6 that start
    // together when b frees, not a's part at once.
    let sites = [site("a", 8, 1.0), site("b", 8, 2.0)];
    let jobs = [job(1, 0, 8, 100), job(2, 10, 12, 50)];
    let options = |coallocate| GridOptions {
        coallocate,
        ..GridOptions::default()
    };
    let alone = simulate_grid(&sites, &jobs, TTD, options(false));
    assert_eq!((alone.unrouted, alone.coallocated, alone.jobs.len()), (1, 0, 1));
    let co = simulate_grid(&sites, &jobs, TTD, options(true));
    assert_eq!((co.unrouted, co.coallocated), (0, 1));
    let parts: Vec<(String, u32, i64, i64)> = co
        .clusters
        .iter()
        .flat_map(|c| {
            c.outcomes
                .iter()
                .filter(|o| o.id == 2)
                .map(move |o| (c.spec.name.clone(), o.size, o.start.0, o.end.0))
        })
        .collect();
    // Each part runs the job's 50 s at its site's speed.
    assert_eq!(parts, [("a".to_string(), 6, 50, 100), ("b".to_string(), 6, 50, 75)]);
    // Counted once overall, whole, until its last part ends.
    let whole = co.jobs.iter().find(|o| o.id == 2).unwrap();
    assert_eq!((whole.size, whole.start.0, whole.end.0), (12, 50, 100));
}

#[test]
fn two_brokers_each_route_their_own_jobs_over_their_own_sites() {
    // a and b are one broker's, c and d the other's; partition 1 is a's,
    // partition 4 d's. The fast sites are b and c.
    let mut sites = [
        site("a", 4, 1.0),
        site("b", 4, 2.0),
        site("c", 4, 4.0),
        site("d", 4, 1.0),
    ];
    sites[0].partitions = vec![1];
    sites[3].partitions = vec![4];
    let jobs: Vec<SimJob> = (0..8)
        .map(|k| SimJob {
            partition: if k % 2 == 0 { 1 } else { 4 },
            ..job(k, k * 10, 4, 400)
        })
        .collect();
    let ran_at = |r: &brokk_sim::grid::GridRun| -> Vec<(i64, usize)> {
        let mut at: Vec<(i64, usize)> = r
            .clusters
            .iter()
            .enumerate()
            .flat_map(|(c, run)| run.outcomes.iter().map(move |o| (o.id, c)))
            .collect();
        at.sort_unstable();
        at
    };
    let two = simulate_grid(
        &sites,
        &jobs,
        TTD,
        GridOptions {
            brokers: 2,
            ..GridOptions::default()
        },
    );
    let at = ran_at(&two);
    assert_eq!(at.len(), 8, "every job ran");
    for (id, c) in at {
        let home = if id % 2 == 0 { 0..2 } else { 2..4 };
        assert!(home.contains(&c), "job {id} of broker {home:?} ran at site {c}");
    }
    // One broker over all four sends both partitions' jobs to the fastest.
    let one = ran_at(&simulate_grid(&sites, &jobs, TTD, GridOptions::default()));
    assert!(one.iter().any(|&(id, c)| id % 2 == 0 && c >= 2), "{one:?}");
}

/// [DMM]'s delegation on the brokers' own cores: three brokers, one
/// 4-processor site each, every job's home the first broker. Without
/// delegation its burst of 4-wide jobs queues at its own site; with it,
/// a job its site cannot start at once goes to a sibling with room (the
/// most free first, then by name), and one that finds every sibling full
/// stays home; with a threshold of an hour a job goes only from a wait
/// beyond an hour, and only to a sibling that starts it within one.
#[test]
fn brokers_delegate_a_job_their_sites_cannot_start_to_a_sibling_with_room() {
    let mut sites = [site("a", 4, 1.0), site("b", 4, 1.0), site("c", 4, 1.0)];
    sites[0].partitions = vec![1];
    let jobs: Vec<SimJob> = (0..5)
        .map(|k| SimJob {
            partition: 1,
            ..job(k, 100 + k, 4, 3000)
        })
        .collect();
    let run = |delegation| {
        simulate_grid(
            &sites,
            &jobs,
            TTD,
            GridOptions {
                brokers: 3,
                delegation,
                ..GridOptions::default()
            },
        )
    };
    let a = |name: &str| name.to_string();
    let home = run(None);
    assert_eq!(home.delegated, None);
    assert_eq!(
        starts(&home),
        [
            (0, a("a"), Time(100)),
            (1, a("a"), Time(3100)),
            (2, a("a"), Time(6100)),
            (3, a("a"), Time(9100)),
            (4, a("a"), Time(12100))
        ]
    );
    let at_once = run(Some(Delegate {
        threshold: Duration::ZERO,
        ttl: 4,
    }));
    // Job 1 to b, job 2 to c; 3 and 4 find both siblings full and queue
    // at home, where each is predicted to start soonest.
    assert_eq!(
        starts(&at_once),
        [
            (0, a("a"), Time(100)),
            (1, a("b"), Time(101)),
            (2, a("c"), Time(102)),
            (3, a("a"), Time(3100)),
            (4, a("a"), Time(6100))
        ]
    );
    assert_eq!((at_once.delegated, at_once.unrouted), (Some(2), 0));
    // Asking the siblings is counted: their information and the jobs sent.
    let m = at_once.messages.unwrap();
    assert!(m.info > home.messages.unwrap().info, "{m:?}");
    // With an hour's threshold, job 1's wait of 50 minutes keeps it home;
    // jobs 2 and 3 would wait 100 and 150 minutes there and go; job 4
    // would wait 200 minutes at home, and b takes it since its own site
    // starts it within the hour.
    let patient = run(Some(Delegate {
        threshold: Duration::hours(1),
        ttl: 4,
    }));
    assert_eq!(
        starts(&patient),
        [
            (0, a("a"), Time(100)),
            (1, a("a"), Time(3100)),
            (2, a("b"), Time(102)),
            (3, a("c"), Time(103)),
            (4, a("b"), Time(3102))
        ]
    );
    assert_eq!(patient.delegated, Some(3));
}

#[test]
fn with_latency_a_job_starts_when_it_reaches_its_site_and_the_broker_decides_meanwhile_on_its_bookings() {
    let sites = [site("a", 4, 1.0), site("b", 4, 1.0)];
    // Three 4-wide jobs in one second: the second is decided while the
    // first is still on its way, and goes to the other site all the same.
    let jobs = [job(1, 100, 4, 1000), job(2, 100, 4, 1000), job(3, 101, 4, 1000)];
    let options = |latency| GridOptions {
        latency: Duration(latency),
        ..GridOptions::default()
    };
    let at_once = simulate_grid(&sites, &jobs, TTD, options(0));
    let far = simulate_grid(&sites, &jobs, TTD, options(30));
    let a = |name: &str| name.to_string();
    assert_eq!(
        starts(&at_once),
        [(1, a("a"), Time(100)), (2, a("b"), Time(100)), (3, a("a"), Time(1100))]
    );
    // 30 s to reach the site; the third queues behind the first wherever it lands.
    assert_eq!(
        starts(&far),
        [(1, a("a"), Time(130)), (2, a("b"), Time(130)), (3, a("a"), Time(1130))]
    );
    assert_eq!((far.unrouted, far.jobs.len()), (0, 3));
    // Predicted from the decision, which did not know the latency: the
    // first two end 30 s later than predicted, the third 29 s (decided at
    // 101 behind the first's booking, which ends at 1100 as seen from 100).
    let p = far.prediction.unwrap();
    assert_eq!((p.jobs, p.mean), (3, (30.0 + 30.0 + 29.0) / 3.0));
}

/// [AB-avail]'s violations: a job that starts more than 20 s later than the
/// broker predicted from what the site published. One 4-processor site,
/// four 4-wide jobs of 100 s a second apart, fresh information before each
/// decision. A conservative site plans every waiting job, so what it
/// publishes holds: starts 0, 100, 200, 300 as predicted. An EASY site
/// plans only the head of its queue: the third job waits unplanned, so the
/// fourth is predicted to start at 200 and starts at 300.
#[test]
fn a_start_later_than_predicted_counts_as_a_violation_and_every_request_as_two_messages() {
    let sites = [site("only", 4, 1.0)];
    let jobs: Vec<SimJob> = (0..4).map(|k| job(k + 1, k, 4, 100)).collect();
    let tts = GridRouting::Broker {
        objective: brokk_model::Objective::EarliestStart,
        reserve_top_k: 0,
    };
    for (policy, violations) in [(Policy::CONSERVATIVE, 0), (Policy::EASY, 1)] {
        let run = simulate_grid(
            &sites,
            &jobs,
            tts,
            GridOptions {
                policy: policy.into(),
                ..GridOptions::default()
            },
        );
        let mut starts: Vec<i64> = run.clusters[0].outcomes.iter().map(|o| o.start.0).collect();
        starts.sort_unstable();
        assert_eq!(starts, [0, 100, 200, 300], "{policy:?}");
        let p = run.prediction.unwrap();
        assert_eq!((p.jobs, p.violations), (4, violations), "{policy:?}");
        // Asked before each decision, each job sent: a request and a reply each.
        let m = run.messages.unwrap();
        assert_eq!((m.info, m.submit, m.messages()), (4, 4, 16), "{policy:?}: {m:?}");
    }
}

/// A site's own users' jobs go straight to it; the broker sees them only
/// in what the site publishes. Two 4-processor sites; local jobs fill `a`
/// until 100 and `b` until 300; a grid job at 1 goes to `a`, predicted and
/// started at 100. With only the summary figures (both sites full, a
/// one-slot wait that says nothing of four slots) the broker cannot tell
/// them apart and takes the first.
#[test]
fn local_jobs_take_their_site_and_the_broker_reads_them_in_what_it_publishes() {
    let sites = [site("b", 4, 1.0), site("a", 4, 1.0)];
    let local = [
        SimJob {
            partition: 1,
            ..job(100, 0, 4, 100)
        },
        SimJob {
            partition: 0,
            ..job(101, 0, 4, 300)
        },
    ];
    let tts = GridRouting::Broker {
        objective: brokk_model::Objective::EarliestStart,
        reserve_top_k: 0,
    };
    let run = simulate_grid_with_local(&sites, &[job(1, 1, 4, 50)], &local, &[], tts, GridOptions::default());
    assert_eq!(run.local.len(), 2);
    assert_eq!((run.clusters[0].submitted, run.clusters[1].submitted), (1, 2));
    let o = run.jobs[0];
    assert_eq!((o.start, o.end), (Time(100), Time(150)));
    let p = run.prediction.unwrap();
    assert_eq!((p.jobs, p.mean_absolute, p.violations), (1, 0.0, 0));
    let summary = GridOptions {
        published: None,
        ..GridOptions::default()
    };
    let run = simulate_grid_with_local(&sites, &[job(1, 1, 4, 50)], &local, &[], tts, summary);
    assert_eq!(run.jobs[0].start, Time(300), "{:?}", run.jobs);
    // Predicted from the coarse estimate: 900 s to wait, ends at 951.
    let p = run.prediction.unwrap();
    assert_eq!((p.mean_absolute, p.violations), (601.0, 0));
}

/// [AB-avail]'s Algorithm 2 in simulation: two 4-processor sites whose
/// information the broker reuses for 1000 s. A local job takes all of `a`
/// at 5, after the broker last read it; the grid job at 10 with a deadline
/// reserves its slot at once on `a` (listed first), is refused (a
/// violation), and reserves `b`'s instead, where it starts at 10. A job
/// that cannot end by its deadline anywhere is unrouted.
#[test]
fn a_job_with_a_deadline_reserves_its_slot_and_a_gone_slot_is_a_violation() {
    let sites = [site("a", 4, 1.0), site("b", 4, 1.0)];
    let local = [SimJob {
        partition: 0,
        ..job(100, 5, 4, 100)
    }];
    let jobs = [job(1, 10, 4, 50), job(2, 20, 4, 50)];
    let deadlines = [Some(Time(1000)), Some(Time(60))];
    let tts = GridRouting::Broker {
        objective: brokk_model::Objective::EarliestStart,
        reserve_top_k: 0,
    };
    let options = GridOptions {
        staleness: Staleness {
            info_ttl: Duration(1000),
            info_delay: Duration::ZERO,
        },
        ..GridOptions::default()
    };
    let run = simulate_grid_with_local(&sites, &jobs, &local, &deadlines, tts, options);
    assert_eq!(run.jobs.len(), 1, "{:?}", run.jobs);
    assert_eq!((run.jobs[0].id, run.jobs[0].start), (1, Time(10)));
    assert_eq!((run.clusters[0].submitted, run.clusters[1].submitted), (1, 1));
    assert_eq!(run.unrouted, 1);
    let p = run.prediction.unwrap();
    assert_eq!((p.jobs, p.violations), (1, 1));
    // Two holds asked (a refused, b granted); none for the late job.
    assert_eq!(run.messages.unwrap().reserve, 2);
    // Without deadlines, the same job goes to a and waits there.
    let run = simulate_grid_with_local(&sites, &jobs, &local, &[], tts, options);
    assert_eq!(run.jobs[0].start, Time(105), "{:?}", run.jobs);
}

/// A workflow task of `cores` processors booked for `runtime` seconds.
fn task(id: &str, cores: u32, runtime: i64) -> brokk_model::workflow::Task {
    brokk_model::workflow::Task {
        id: id.into(),
        runtime: Duration(runtime),
        cores,
        ..Default::default()
    }
}

#[test]
fn a_workflow_runs_its_course_beside_the_jobs_and_gives_back_what_its_tasks_leave() {
    use brokk_broker::workflow::Scheduler;
    use brokk_model::workflow::{Edge, Workflow};
    use brokk_sim::course::CourseConfig;
    use brokk_sim::grid::{simulate_grid_with_workflows, GridWorkflow};

    let sites = [site("a", 4, 1.0), site("b", 4, 1.0)];
    // x and y side by side, z after x; every run lasts half its booking.
    let wf = Workflow {
        name: "w".into(),
        tasks: vec![task("x", 4, 100), task("y", 4, 100), task("z", 4, 100)],
        edges: vec![Edge {
            parent: "x".into(),
            child: "z".into(),
            bytes: 0,
        }],
        ..Default::default()
    };
    let workflows = [GridWorkflow {
        at: Time(100),
        workflow: wf,
        scheduler: Scheduler::HeftSync,
    }];
    let course = CourseConfig {
        runtime: [0.5, 0.5],
        ..CourseConfig::default()
    };
    // A whole-site job arrives while both sites are booked.
    let jobs = [job(1, 120, 4, 50)];
    let (run, wfs) = simulate_grid_with_workflows(&sites, &jobs, &workflows, course, TTD, GridOptions::default());
    let plan = wfs[0].plan.as_ref().expect("admitted");
    let at = |t: &str| {
        let p = plan.tasks.iter().find(|p| p.task == t).unwrap();
        (sites[p.site].name.as_str(), p.start.0)
    };
    assert_eq!([at("x"), at("y"), at("z")], [("a", 100), ("b", 100), ("a", 200)]);
    // x ended at 150, so z moved up to it; each run took half its booking.
    let ran: Vec<(usize, i64, i64)> = wfs[0].ran.iter().map(|r| (r.task, r.start.0, r.end.0)).collect();
    assert_eq!(ran, [(0, 100, 150), (1, 100, 150), (2, 150, 200)]);
    assert!(wfs[0].ran.iter().all(|r| r.ok));
    // The job was planned after y's booking (200) on b, and moved up when
    // y gave back the rest of it.
    assert_eq!(starts(&run), [(1, "b".to_string(), Time(150))]);
}
