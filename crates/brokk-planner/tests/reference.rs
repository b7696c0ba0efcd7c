//! Both profiles against a naive reference model (a plain list of reservations
//! checked by brute force), over random operation sequences.

use brokk_model::{Duration, Time};
use brokk_planner::{
    BTree, Change, FreeList, NeverReason, Planner, PlannerError, Profile, Reply, Request, ReservationId, Slotted, Steps,
};
use proptest::prelude::*;

const CAP: u32 = 10;
const HORIZON: i64 = 300;

#[derive(Debug, Clone)]
struct Naive {
    live: Vec<(u64, i64, i64, u32, Option<i64>)>, // id, start, end, amount, expiry of a hold
}

impl Naive {
    fn used(&self, t: i64) -> u32 {
        self.live.iter().filter(|r| r.1 <= t && t < r.2).map(|r| r.3).sum()
    }

    fn feasible(&self, a: u32, s: i64, d: i64) -> bool {
        s + d <= HORIZON && (s..s + d).all(|t| self.used(t) + a <= CAP)
    }

    fn earliest(&self, a: u32, d: i64, e: i64, l: i64) -> Option<i64> {
        (e..=l.min(HORIZON - d)).find(|&s| self.feasible(a, s, d))
    }

    fn never(a: u32, d: i64, e: i64, l: i64) -> Option<NeverReason> {
        if a == 0 || d <= 0 {
            Some(NeverReason::Empty)
        } else if a > CAP {
            Some(NeverReason::OverCapacity {
                amount: a,
                capacity: CAP,
            })
        } else if l < e {
            Some(NeverReason::EmptyWindow)
        } else if e + d > HORIZON {
            Some(NeverReason::BeyondHorizon)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Reserve {
        a: u32,
        d: i64,
        e: i64,
        w: i64,
        hold: Option<i64>,
    },
    Probe {
        a: u32,
        d: i64,
        e: i64,
        w: i64,
    },
    Cancel(usize),
    Commit(usize),
    Modify {
        pick: usize,
        a: Option<u32>,
        d: Option<i64>,
        window: Option<(i64, i64)>,
    },
    Expire(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u32..13, 0i64..60, 0i64..260, -5i64..80, prop::option::of(0i64..300))
            .prop_map(|(a, d, e, w, hold)| Op::Reserve { a, d, e, w, hold }),
        2 => (1u32..11, 1i64..60, 0i64..260, 0i64..80).prop_map(|(a, d, e, w)| Op::Probe { a, d, e, w }),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => any::<usize>().prop_map(Op::Commit),
        2 => (any::<usize>(), prop::option::of(1u32..11), prop::option::of(1i64..60), prop::option::of((0i64..250, 0i64..40)))
            .prop_map(|(pick, a, d, window)| Op::Modify { pick, a, d, window: window.map(|(s, w)| (s, s + w)) }),
        1 => (0i64..300).prop_map(Op::Expire),
    ]
}

fn request(a: u32, d: i64, e: i64, w: i64) -> Request {
    Request {
        amount: a,
        duration: Duration(d),
        earliest: Time(e),
        latest: Time(e + w),
        flexible: false,
    }
}

fn run<P: Profile>(mut p: Planner<P>, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut naive = Naive { live: Vec::new() };
    for op in ops {
        match *op {
            Op::Reserve { a, d, e, w, hold } => {
                let l = e + w;
                let reply = p.reserve("alice", &request(a, d, e, w), hold.map(Time));
                let expected = match Naive::never(a, d, e, l) {
                    Some(reason) => Reply::Never { reason },
                    None => match naive.earliest(a, d, e, l) {
                        Some(s) => {
                            let Reply::Granted { id, .. } = reply else {
                                return Err(TestCaseError::fail(format!("expected a grant at {s}, got {reply:?}")));
                            };
                            naive.live.push((id.0, s, s + d, a, hold));
                            Reply::Granted { id, start: Time(s) }
                        }
                        None => Reply::Rejected {
                            next_start: naive.earliest(a, d, l + 1, HORIZON).map(Time),
                        },
                    },
                };
                prop_assert_eq!(reply, expected);
            }
            Op::Probe { a, d, e, w } => {
                if let Some(reason) = Naive::never(a, d, e, e + w) {
                    prop_assert_eq!(p.probe(&request(a, d, e, w), 4), Err(reason));
                    continue;
                }
                let cands = p.probe(&request(a, d, e, w), 4).unwrap();
                let first = naive.earliest(a, d, e, e + w);
                prop_assert_eq!(cands.first().map(|c| c.start.0), first);
                for c in &cands {
                    prop_assert!(
                        naive.feasible(a, c.start.0, d),
                        "probe offered an infeasible start {}",
                        c.start.0
                    );
                    prop_assert!(c.start.0 >= e && c.start.0 <= e + w);
                    prop_assert!((0.0..=1.0).contains(&c.rating));
                }
                prop_assert!(cands.windows(2).all(|x| x[0].start < x[1].start));
            }
            Op::Cancel(pick) => {
                if naive.live.is_empty() {
                    prop_assert!(matches!(
                        p.cancel(ReservationId(u64::MAX)),
                        Err(PlannerError::Unknown(_))
                    ));
                    continue;
                }
                let r = naive.live.remove(pick % naive.live.len());
                let got = p.cancel(ReservationId(r.0)).unwrap();
                prop_assert_eq!((got.start.0, got.end.0, got.amount), (r.1, r.2, r.3));
            }
            Op::Commit(pick) => {
                let n = naive.live.len().max(1);
                if let Some(r) = naive.live.get_mut(pick % n) {
                    p.commit(ReservationId(r.0)).unwrap();
                    r.4 = None;
                }
            }
            Op::Modify { pick, a, d, window } => {
                if naive.live.is_empty() {
                    continue;
                }
                let i = pick % naive.live.len();
                let old = naive.live[i];
                let before = (p.reservations(), p.free_slots(Time(0), Time(HORIZON)));
                let res = p.modify(
                    ReservationId(old.0),
                    Change {
                        amount: a,
                        duration: d.map(Duration),
                        window: window.map(|(x, y)| (Time(x), Time(y))),
                    },
                );
                let (na, nd) = (a.unwrap_or(old.3), d.unwrap_or(old.2 - old.1));
                let (lo, hi) = window.unwrap_or((old.1, old.1));
                let mut without = naive.clone();
                without.live.remove(i);
                match Naive::never(na, nd, lo, hi) {
                    Some(reason) => prop_assert_eq!(res, Err(PlannerError::DoesNotFit(Reply::Never { reason }))),
                    None => match without.earliest(na, nd, lo, hi) {
                        Some(s) => {
                            prop_assert_eq!(res, Ok(Time(s)));
                            naive.live[i] = (old.0, s, s + nd, na, old.4);
                        }
                        None => {
                            let next_start = without.earliest(na, nd, hi + 1, HORIZON).map(Time);
                            prop_assert_eq!(res, Err(PlannerError::DoesNotFit(Reply::Rejected { next_start })));
                            prop_assert_eq!(
                                (p.reservations(), p.free_slots(Time(0), Time(HORIZON))),
                                before,
                                "a failed modify changed the schedule"
                            );
                        }
                    },
                }
            }
            Op::Expire(now) => {
                let mut gone: Vec<(i64, u64)> = naive
                    .live
                    .iter()
                    .filter_map(|r| r.4.filter(|&x| x <= now).map(|x| (x, r.0)))
                    .collect();
                gone.sort_unstable();
                naive.live.retain(|r| r.4.is_none_or(|x| x > now));
                let got: Vec<u64> = p.expire(Time(now)).into_iter().map(|r| r.0).collect();
                prop_assert_eq!(got, gone.into_iter().map(|g| g.1).collect::<Vec<_>>());
            }
        }
        p.check_invariants();
        let mut ids: Vec<u64> = naive.live.iter().map(|r| r.0).collect();
        ids.sort_unstable();
        prop_assert_eq!(p.reservations().iter().map(|r| r.id.0).collect::<Vec<_>>(), ids);
        for t in (0..HORIZON).step_by(7) {
            let free = p.free_slots(Time(t), Time(t + 1)).first().map_or(0, |s| s.free);
            prop_assert_eq!(free, CAP - naive.used(t), "free capacity at {}", t);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(400), ..ProptestConfig::default() })]

    #[test]
    fn free_list_matches_the_reference(ops in prop::collection::vec(op(), 1..60)) {
        run(Planner::new(CAP, Time(HORIZON), FreeList::new()), &ops)?;
    }

    /// With flexible reservations in the mix the planner may grant more than the
    /// reference, but never over capacity and never outside a reservation's window.
    #[test]
    fn flexible_moves_stay_inside_windows(reqs in prop::collection::vec((1u32..11, 1i64..60, 0i64..200, 0i64..80, any::<bool>()), 1..40)) {
        let mut p = Planner::new(CAP, Time(HORIZON), FreeList::new());
        let mut naive = Naive { live: Vec::new() };
        for (a, d, e, w, flexible) in reqs {
            let req = Request { amount: a, duration: Duration(d), earliest: Time(e), latest: Time(e + w), flexible };
            let fits_without_moving = naive.earliest(a, d, e, e + w).is_some();
            let reply = p.reserve("alice", &req, None);
            if fits_without_moving {
                prop_assert!(matches!(reply, Reply::Granted { .. }), "a request that fits was refused: {reply:?}");
            }
            p.check_invariants();
            naive.live = p.reservations().iter().map(|r| (r.id.0, r.start.0, r.end.0, r.amount, None)).collect();
            for r in p.reservations() {
                if let Some((lo, hi)) = r.window {
                    prop_assert!(r.start >= lo && r.start <= hi, "{r:?} left its window");
                }
            }
        }
    }

    #[test]
    fn the_b_tree_matches_the_reference(ops in prop::collection::vec(op(), 1..60), leaf in 2usize..6, inner in 2usize..5) {
        run(Planner::new(CAP, Time(HORIZON), BTree::with_fanout(leaf, inner)), &ops)?;
    }

    #[test]
    fn steps_match_the_reference(ops in prop::collection::vec(op(), 1..60)) {
        run(Planner::new(CAP, Time(HORIZON), Steps::new()), &ops)?;
    }

    #[test]
    fn slotted_matches_the_reference_with_one_second_slots(ops in prop::collection::vec(op(), 1..60)) {
        run(Planner::new(CAP, Time(HORIZON), Slotted::new(0, 1, HORIZON as usize)), &ops)?;
    }
}

/// The number of cases: the default, or `PROPTEST_CASES` for longer runs.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
