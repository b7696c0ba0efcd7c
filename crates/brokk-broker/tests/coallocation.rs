//! Seed 000's co-allocation example (section 3.2.4) replayed on planner-backed
//! sites whose background load is set so that each iteration unfolds as the
//! paper describes, and properties of co-allocation under random load.

use brokk_broker::coalloc::{coallocate, never_together, CoJob, CoRequest, Event, PathStep};
use brokk_broker::{MemorySite, Site};
use brokk_core::{Reply, Request};
use brokk_model::{Duration, ResourceInfo, Time};
use proptest::prelude::*;

/// 09:00 on the day of the example; times below are minutes after it.
const T0: i64 = 1_795_338_000;

fn at(min: i64) -> Time {
    Time(T0 + min * 60)
}

fn site(name: &str, slots: u32, busy: &[(u32, i64, i64)]) -> MemorySite {
    let info = ResourceInfo {
        endpoint: name.into(),
        total_slots: slots,
        ..ResourceInfo::default()
    };
    let mut s = MemorySite::new(info, at(-60), at(60 * 24 * 30));
    for &(amount, from, to) in busy {
        let req = Request {
            amount,
            duration: Duration((to - from) * 60),
            earliest: at(from),
            latest: at(from),
            flexible: false,
        };
        assert!(
            matches!(s.reserve("others", &req, None), Ok(Reply::Granted { .. })),
            "background load must fit"
        );
    }
    s
}

const R1: usize = 0;
const R2: usize = 1;
const R3: usize = 2;
const R4: usize = 3;

#[test]
fn the_worked_example_of_section_3_2_4() {
    let mut r1 = site("R1", 2, &[(2, 2, 11)]);
    let mut r2 = site("R2", 1, &[(1, 8, 40)]);
    let mut r3 = site("R3", 2, &[(2, 0, 9), (1, 9, 30)]);
    let mut r4 = site("R4", 1, &[(1, -10, 8)]);
    let job = |amount: u32, minutes: i64, resources: Vec<usize>| CoJob {
        amount,
        duration: Duration(minutes * 60),
        memory_mib: 0,
        resources,
    };
    let req = CoRequest {
        jobs: vec![
            job(2, 2, vec![R1, R3]),
            job(1, 5, vec![R2, R4]),
            job(1, 5, vec![R3, R4]),
        ],
        earliest: at(0),
        latest: at(20),
        delta: Duration(5 * 60),
        hold: None,
    };
    let (j1, j2, j3) = (0, 1, 2);
    let mut sites: [&mut dyn Site; 4] = [&mut r1, &mut r2, &mut r3, &mut r4];
    let result = coallocate(&req, &mut sites, "alice").expect("the example succeeds");
    assert_eq!(
        result.events,
        vec![
            // (a) J1 at R1 and J2 at R2; J3 could start at R4 only a few minutes too late.
            Event::Window(at(0), at(5)),
            Event::Created {
                job: j1,
                site: R1,
                start: at(0)
            },
            Event::Created {
                job: j2,
                site: R2,
                start: at(0)
            },
            // (b) The window ends where J3 can start. J1 cannot move and loses its reservation.
            Event::Window(at(3), at(8)),
            Event::Cancelled { job: j1, site: R1 },
            Event::Moved {
                job: j2,
                site: R2,
                start: at(3)
            },
            Event::Created {
                job: j3,
                site: R4,
                start: at(8)
            },
            // (c) The window ends where J1 can start at R1. J2 cannot move; the path
            // {J2, R4, J3, R3} moves J3 to R3 and gives its R4 reservation to J2.
            Event::Window(at(6), at(11)),
            Event::Created {
                job: j1,
                site: R1,
                start: at(11)
            },
            Event::Cancelled { job: j2, site: R2 },
            Event::Path(vec![
                PathStep::Job(j2),
                PathStep::Site(R4),
                PathStep::Job(j3),
                PathStep::Site(R3)
            ]),
            Event::Created {
                job: j3,
                site: R3,
                start: at(9)
            },
            Event::HandedOver {
                from: j3,
                to: j2,
                site: R4
            },
        ]
    );
    let matching: Vec<(usize, Time)> = result
        .assignments
        .iter()
        .map(|&(site, _, start)| (site, start))
        .collect();
    assert_eq!(matching, vec![(R1, at(11)), (R4, at(8)), (R3, at(9))]);
    // Nothing else of Alice's stays reserved anywhere.
    let mine = |s: &MemorySite| {
        s.planner()
            .reservations()
            .iter()
            .filter(|r| &*r.owner == "alice")
            .count()
    };
    assert_eq!((mine(&r1), mine(&r2), mine(&r3), mine(&r4)), (1, 0, 1, 1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(200), ..ProptestConfig::default() })]

    /// Under random background load: a success starts every job within one delta
    /// window inside [Te, Tl] and holds exactly one reservation per job; a failure
    /// leaves no reservation of the owner anywhere.
    #[test]
    fn successes_start_together_and_failures_leave_nothing(
        load in prop::collection::vec((0usize..4, 1u32..4, 0i64..120, 5i64..60), 0..25),
        jobs in prop::collection::vec((1u32..4, 5i64..40, prop::collection::vec(0usize..4, 1..4)), 2..5),
        delta in 1i64..15,
        span in 0i64..120,
    ) {
        let mut owned: Vec<MemorySite> = (0..4).map(|i| site(&format!("S{i}"), 4, &[])).collect();
        for (s, amount, from, len) in load {
            let req = Request { amount, duration: Duration(len * 60), earliest: at(from), latest: at(from + 30), flexible: false };
            let _ = owned[s].reserve("others", &req, None);
        }
        let jobs: Vec<CoJob> = jobs
            .into_iter()
            .map(|(amount, minutes, mut resources)| {
                resources.dedup();
                CoJob { amount, duration: Duration(minutes * 60), memory_mib: 0, resources }
            })
            .collect();
        let req = CoRequest { jobs, earliest: at(0), latest: at(span), delta: Duration(delta * 60), hold: None };
        let result = {
            let mut sites: Vec<&mut dyn Site> = owned.iter_mut().map(|s| s as &mut dyn Site).collect();
            coallocate(&req, &mut sites, "alice")
        };
        let held: usize = owned.iter().map(|s| s.planner().reservations().iter().filter(|r| &*r.owner == "alice").count()).sum();
        match result {
            Ok(c) => {
                prop_assert_eq!(c.assignments.len(), req.jobs.len());
                prop_assert_eq!(held, req.jobs.len());
                let first = c.assignments.iter().map(|a| a.2).min().unwrap();
                let last = c.assignments.iter().map(|a| a.2).max().unwrap();
                prop_assert!(last - first <= req.delta, "starts {first} .. {last} further apart than delta");
                prop_assert!(first >= req.earliest && last <= Time(req.latest.0 + req.delta.0));
                for (j, a) in c.assignments.iter().enumerate() {
                    prop_assert!(req.jobs[j].resources.contains(&a.0), "job {j} placed on a site it cannot use");
                }
            }
            Err(_) => prop_assert_eq!(held, 0, "a failed co-allocation left reservations behind"),
        }
        for s in &owned {
            s.planner().check_invariants();
        }
    }
}

/// The number of cases: the default, or `PROPTEST_CASES` for longer runs.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Parts of `amounts` processors each lasting an hour, usable at every
/// site big enough, started within `delta` seconds.
fn parts(amounts: &[u32], capacities: &[u32], delta: i64) -> CoRequest {
    CoRequest {
        jobs: amounts
            .iter()
            .map(|&amount| CoJob {
                amount,
                duration: Duration::hours(1),
                memory_mib: 0,
                resources: (0..capacities.len()).filter(|&k| capacities[k] >= amount).collect(),
            })
            .collect(),
        earliest: at(0),
        latest: at(60 * 24 * 30),
        delta: Duration(delta),
        hold: None,
    }
}

#[test]
fn parts_that_cannot_run_together_anywhere_are_refused_before_any_site_is_asked() {
    let sites = [16, 32, 48];
    // Two parts of 40: only the 48 holds one, and it cannot hold both.
    let why = never_together(&parts(&[40, 40], &sites, 0), &sites).expect("never together");
    assert!(why.contains("40, 40") && why.contains("16, 32, 48"), "{why}");
    // 32 and 32 go to the 32 and the 48.
    assert_eq!(never_together(&parts(&[32, 32], &sites, 0), &sites), None);
    // Two of 10 share the 20 beside one 10 each elsewhere.
    assert_eq!(
        never_together(&parts(&[10, 10, 10, 10], &[10, 10, 20], 0), &[10, 10, 20]),
        None
    );
    // 15 and 15 take both 20s; the 10 is left without room.
    assert!(never_together(&parts(&[15, 15, 10], &[20, 20], 0), &[20, 20]).is_some());
    // Starts an hour apart may run one after the other on the one site.
    assert_eq!(never_together(&parts(&[40, 40], &sites, 3600), &sites), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

    /// The refusal before asking is sound: whenever it says the parts never
    /// run together, the search itself over the same empty sites and a
    /// month's window finds nothing either.
    #[test]
    fn a_refusal_before_asking_is_never_wrong(
        amounts in prop::collection::vec(1u32..24, 1..5),
        capacities in prop::collection::vec(1u32..32, 1..4),
        delta in 0i64..7200,
    ) {
        let req = parts(&amounts, &capacities, delta);
        prop_assume!(req.jobs.iter().all(|j| !j.resources.is_empty()));
        if never_together(&req, &capacities).is_some() {
            let mut owned: Vec<MemorySite> =
                capacities.iter().enumerate().map(|(i, &c)| site(&format!("S{i}"), c, &[])).collect();
            let mut sites: Vec<&mut dyn Site> = owned.iter_mut().map(|s| s as &mut dyn Site).collect();
            prop_assert!(coallocate(&req, &mut sites, "alice").is_err(), "{amounts:?} fit {capacities:?}");
        }
    }
}
