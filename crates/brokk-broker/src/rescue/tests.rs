use super::*;
use brokk_model::FreeRange;

const STEP: Duration = Duration(60);

fn at(steps: i64) -> Time {
    Time(steps * 60)
}

/// One job starting `k` steps from 0, lasting two steps.
fn job(id: u64, k: i64) -> Booked {
    Booked {
        id,
        start: at(k),
        end: at(k + 2),
    }
}

/// The ids `remap` was asked for, in order, when each succeeds if `ok` says so.
fn run(f: &mut Failure, now: Time, booked: &[Booked], ok: impl Fn(&Booked) -> bool) -> (Step, Vec<u64>) {
    let mut asked = Vec::new();
    let step = f.step(
        now,
        booked,
        || vec![0.0; 10],
        |b| {
            asked.push(b.id);
            ok(b)
        },
    );
    (step, asked)
}

#[test]
fn strategies_read_and_print_as_written() {
    for s in ["a1", "all", "optimal", "oracle:0.5", "load:0.5", "feedback:0.9"] {
        let parsed: Strategy = s.parse().unwrap();
        assert_eq!(parsed.to_string(), s);
    }
    assert_eq!("oracle:1".parse::<Strategy>().unwrap(), Strategy::OPTIMAL);
    for bad in [
        "a2",
        "load:1.5",
        "load:x",
        "feedback:-0.1",
        "oracle:0",
        "oracle:-1",
        "next",
    ] {
        let e = bad.parse::<Strategy>().unwrap_err();
        assert!(e.contains(bad), "{e}");
    }
}

#[test]
fn an_oracle_needs_the_downtime_and_a_step_must_be_positive() {
    assert_eq!(
        Failure::new(Strategy::OPTIMAL, at(0), STEP, at(10) - at(0), None),
        Err(RescueError::NoOracle)
    );
    assert_eq!(
        Failure::new(Strategy::Next, at(0), Duration(0), STEP, None),
        Err(RescueError::Step)
    );
}

#[test]
fn a1_moves_only_what_starts_within_the_next_step() {
    let booked = [job(1, 2), job(2, 3), job(3, 4), job(4, 1)];
    let mut f = Failure::new(Strategy::Next, at(2), STEP, Duration(600), None).unwrap();
    // Job 4 started before the failure's step: it is not the rescue's.
    let (step, asked) = run(&mut f, at(2), &booked, |_| true);
    assert_eq!(asked, vec![1]);
    assert_eq!(step.horizon, at(3));
    let (_, asked) = run(&mut f, at(3), &booked[1..], |_| true);
    assert_eq!(asked, vec![2]);
}

#[test]
fn all_moves_every_job_not_started_and_retries_those_that_could_not_move() {
    let booked = [job(1, 2), job(2, 300), job(3, 1)];
    let mut f = Failure::new(Strategy::All, at(2), STEP, Duration(600), None).unwrap();
    let (step, asked) = run(&mut f, at(2), &booked, |b| b.id == 1);
    assert_eq!(asked, vec![1, 2]);
    assert_eq!((step.tried, step.moved), (2, 1));
    // Job 2 is still there a step later, and is tried again.
    let (_, asked) = run(&mut f, at(3), &booked[1..], |_| true);
    assert_eq!(asked, vec![2]);
}

#[test]
fn the_oracle_reaches_to_its_downtime_and_no_further() {
    let booked: Vec<Booked> = (1..=12).map(|k| job(k as u64, k)).collect();
    let down = Duration(10 * 60);
    let mut optimal = Failure::new(Strategy::OPTIMAL, at(1), STEP, Duration(6000), Some(down)).unwrap();
    let (step, asked) = run(&mut optimal, at(1), &booked, |_| true);
    assert_eq!(step.horizon, at(11));
    assert_eq!(asked, (1..=10).collect::<Vec<u64>>());
    // The broken oracle halves the downtime and never learns more.
    let broken = Strategy::Oracle { factor: 0.5 };
    let mut f = Failure::new(broken, at(1), STEP, Duration(6000), Some(down)).unwrap();
    let (step, asked) = run(&mut f, at(1), &booked, |_| true);
    assert_eq!((step.horizon, asked), (at(6), (1..=5).collect::<Vec<u64>>()));
    let (_, asked) = run(&mut f, at(6), &booked[5..], |_| true);
    assert!(asked.is_empty(), "{asked:?}");
}

#[test]
fn the_load_based_horizon_ends_where_the_expected_load_falls_below_eta_for_good() {
    assert_eq!(load_horizon(&[0.9, 0.8, 0.3, 0.6, 0.2], 0.5), 4);
    assert_eq!(load_horizon(&[0.9, 0.8, 0.3, 0.6, 0.2], 0.1), 5);
    assert_eq!(load_horizon(&[0.4, 0.3], 0.5), 1, "at least the next step");
    assert_eq!(load_horizon(&[], 0.5), 1);
    let booked: Vec<Booked> = (0..8).map(|k| job(k as u64, k)).collect();
    let mut f = Failure::new(Strategy::Load { eta: 0.5 }, at(0), STEP, Duration(6000), None).unwrap();
    let mut asked = Vec::new();
    let step = f.step(
        at(0),
        &booked,
        || vec![0.9, 0.8, 0.3, 0.6, 0.2],
        |b| {
            asked.push(b.id);
            true
        },
    );
    assert_eq!(step.horizon, at(4));
    assert_eq!(asked, vec![0, 1, 2, 3]);
}

#[test]
fn the_feedback_horizon_grows_while_moves_fail_and_never_shrinks() {
    // One job per step from step 1 on; moves of jobs before step 4 fail.
    let booked: Vec<Booked> = (1..=12).map(|k| job(k as u64, k)).collect();
    let success = Strategy::Feedback { success: 0.9 };
    let mut f = Failure::new(success, at(1), STEP, Duration(6000), None).unwrap();
    let (step, asked) = run(&mut f, at(1), &booked, |b| b.start >= at(4));
    // Job 1 is inside the first step; 2 and 3 fail, so the horizon grows
    // to take 4, which moves.
    assert_eq!(asked, vec![1, 2, 3, 4]);
    assert_eq!(step.horizon, at(5));
    assert_eq!((step.tried, step.moved), (4, 1));
    // A step later everything moves: the horizon keeps its end and grows
    // by the one step that succeeded; jobs 2 and 3 are tried again.
    let (step, asked) = run(&mut f, at(2), &[booked[1], booked[2], booked[4], booked[5]], |_| true);
    assert_eq!(asked, vec![2, 3, 5]);
    assert_eq!(step.horizon, at(6));
    // Steps with no job do not stop the growth.
    let sparse = [job(20, 9)];
    let mut f = Failure::new(success, at(1), STEP, Duration(6000), None).unwrap();
    let (step, asked) = run(&mut f, at(1), &sparse, |_| true);
    assert_eq!((step.horizon, asked), (at(10), vec![20]));
    // Nor does a reach with no job at all run on forever.
    let mut f = Failure::new(success, at(1), STEP, Duration(600), None).unwrap();
    let (step, _) = run(&mut f, at(1), &[], |_| true);
    assert_eq!(step.horizon, at(11));
}

#[test]
fn the_booked_load_is_read_from_what_the_resources_publish() {
    // 10 processors, 4 free from step 1 to 3, all free from step 3 on,
    // published until step 5; another resource of 10 fully busy, published
    // until step 2 (free beyond).
    let a = Availability {
        computed_at: at(0),
        until: at(5),
        ranges: vec![
            FreeRange {
                start: at(1),
                end: at(3),
                free: 4,
            },
            FreeRange {
                start: at(3),
                end: at(5),
                free: 10,
            },
        ],
    };
    let b = Availability {
        computed_at: at(0),
        until: at(2),
        ranges: vec![],
    };
    let load = booked_load(at(0), STEP, 4, &[(&a, 10), (&b, 10)]);
    assert_eq!(load, vec![0.3 + 0.5, 0.3, 0.0, 0.0]);
}

#[test]
fn the_booking_profile_averages_what_each_step_booked_ahead() {
    let mut p = BookingProfile::new(at(0), STEP, 5, 10);
    // During step 0, 5 processors from step 2 to 4.
    p.record(at(0), 5, at(2), at(4));
    // During step 1, 10 processors from step 2 to 3: one step ahead.
    p.record(at(1) + Duration(30), 10, at(2), at(3));
    assert_eq!(p.average(at(1)), vec![0.5, 0.25, 0.25, 0.0, 0.0]);
    assert_eq!(combined_load(&[0.1, 0.2], &[0.5, 0.25, 0.25]), vec![0.6, 0.45]);
}

#[test]
fn a_fenced_resource_takes_nothing_that_starts_before_the_fence() {
    let info = ResourceInfo {
        endpoint: "x".into(),
        name: "x".into(),
        total_slots: 4,
        ..ResourceInfo::default()
    };
    let mut site = crate::MemorySite::new(info, Time(0), Time(1_000_000));
    let req = Request {
        amount: 2,
        duration: Duration(100),
        earliest: Time(0),
        latest: Time(10_000),
        flexible: false,
    };
    let mut fenced = Fenced {
        site: &mut site,
        from: Time(500),
    };
    let found = fenced.probe(&req, 3).unwrap();
    assert!(
        !found.is_empty() && found.iter().all(|c| c.start >= Time(500)),
        "{found:?}"
    );
    match fenced.reserve("broker", &req, None).unwrap() {
        Reply::Granted { start, .. } => assert_eq!(start, Time(500)),
        other => panic!("{other:?}"),
    }
    let early = Request {
        latest: Time(400),
        ..req
    };
    assert!(fenced.probe(&early, 3).unwrap().is_empty());
    assert!(matches!(
        fenced.reserve("broker", &early, None).unwrap(),
        Reply::Rejected {
            next_start: Some(Time(500))
        }
    ));
}

mod property {
    use super::super::Strategy as Rescue;
    use super::*;
    use crate::MemorySite;
    use proptest::prelude::{prop, prop_assert, prop_assert_eq, prop_oneof, proptest, Just, ProptestConfig};
    use proptest::strategy::Strategy as _;

    fn strategy() -> impl proptest::strategy::Strategy<Value = Rescue> {
        prop_oneof![
            Just(Rescue::Next),
            Just(Rescue::All),
            (0.0f64..=1.0).prop_map(|eta| Rescue::Load { eta }),
            (0.0f64..=1.0).prop_map(|success| Rescue::Feedback { success }),
            (0.1f64..2.0).prop_map(|factor| Rescue::Oracle { factor }),
        ]
    }

    fn site(name: &str) -> MemorySite {
        let info = ResourceInfo {
            endpoint: name.into(),
            name: name.into(),
            total_slots: 8,
            ..ResourceInfo::default()
        };
        MemorySite::new(info, Time(0), at(10_000))
    }

    /// Where a job of `amount` from `start` for `steps` fits exactly.
    fn exact(amount: u32, start: Time, steps: i64) -> Request {
        Request {
            amount,
            duration: Duration(steps * 60),
            earliest: start,
            latest: start,
            flexible: false,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Whatever the strategy, the bookings and the moves that succeed:
        /// only jobs of the failed resource that have not started are moved,
        /// only inside the horizon the step reports; every reservation not
        /// moved stays as it was, at the failed resource and elsewhere; and
        /// no resource is ever booked beyond its capacity.
        #[test]
        fn a_rescue_moves_only_what_it_must_and_overbooks_nothing(
            jobs in prop::collection::vec((0usize..3, 1u32..=8, 0i64..40, 1i64..8), 1..40),
            strategy in strategy(),
            fail_at in 0i64..20,
            down in 1i64..30,
            load in prop::collection::vec(0.0f64..1.0, 0..50),
            slack in 0i64..12,
        ) {
            let mut sites = vec![site("failed"), site("b"), site("c")];
            // (site, reservation, start, end, amount) of every booking.
            let mut booked: Vec<(usize, ReservationId, Time, Time, u32)> = Vec::new();
            for (k, amount, start, steps) in jobs {
                if let Ok(Reply::Granted { id, start }) = sites[k].reserve("broker", &exact(amount, at(start), steps), None) {
                    booked.push((k, id, start, start + Duration(steps * 60), amount));
                }
            }
            let mut failure = Failure::new(strategy, at(fail_at), STEP, Duration(50 * 60), Some(Duration(down * 60))).unwrap();
            // The failed resource's jobs that have not started, by index in `booked`.
            let mut held: Vec<usize> = (0..booked.len())
                .filter(|&i| booked[i].0 == 0 && booked[i].2 >= at(fail_at))
                .collect();
            let mut moved: Vec<usize> = Vec::new();
            for t in fail_at..fail_at + down {
                let now = at(t);
                for s in &mut sites {
                    s.advance(now);
                }
                // Those whose start came are lost, not the rescue's.
                held.retain(|&i| booked[i].2 >= now);
                let view: Vec<Booked> = held
                    .iter()
                    .map(|&i| Booked { id: i as u64, start: booked[i].2, end: booked[i].3 })
                    .collect();
                let mut asked = Vec::new();
                let step = failure.step(now, &view, || load.clone(), |b| {
                    asked.push(*b);
                    let (_, id, start, end, amount) = booked[b.id as usize];
                    let req = Request {
                        amount,
                        duration: end - start,
                        earliest: start.max(now),
                        latest: start.max(now) + Duration(slack * 60),
                        flexible: false,
                    };
                    let (head, rest) = sites.split_at_mut(1);
                    for other in rest.iter_mut() {
                        if let Ok(Reply::Granted { .. }) = other.reserve("broker", &req, None) {
                            head[0].cancel("broker", id).unwrap();
                            return true;
                        }
                    }
                    false
                });
                prop_assert_eq!(step.tried, asked.len());
                let mut seen = std::collections::BTreeSet::new();
                for b in &asked {
                    prop_assert!(held.contains(&(b.id as usize)), "{b:?} is not a job of the failed resource");
                    prop_assert!(b.start >= now, "{b:?} had started at {now}");
                    prop_assert!(b.start < step.horizon, "{b:?} is beyond the horizon {}", step.horizon);
                    prop_assert!(seen.insert(b.id), "{b:?} asked twice in one step");
                }
                for b in &asked {
                    let i = b.id as usize;
                    if sites[0].core().reservation_now(booked[i].1).is_none() {
                        moved.push(i);
                    }
                }
                held.retain(|i| !moved.contains(i));
                for s in &sites {
                    s.core().check_invariants();
                }
                // Every booking not moved is as it was while it lasts.
                for (i, &(k, id, start, end, amount)) in booked.iter().enumerate() {
                    if moved.contains(&i) || end <= now {
                        continue;
                    }
                    let r = sites[k].core().reservation_now(id);
                    prop_assert_eq!(r.map(|r| (r.start, r.end, r.amount)), Some((start, end, amount)));
                }
            }
        }
    }
}

#[test]
fn a_step_is_due_at_once_and_then_once_a_step() {
    let mut f = Failure::new(Strategy::Next, at(1), STEP, Duration(600), None).unwrap();
    assert!(f.due(at(1)));
    run(&mut f, at(1), &[], |_| true);
    assert!(!f.due(at(1) + Duration(59)));
    assert!(f.due(at(2)));
}
