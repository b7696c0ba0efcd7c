//! Hand-computed scenarios for the protocol's corners, on both profiles.

use brokk_model::{Duration, Time};
use brokk_planner::{
    BTree, Change, FreeList, FreeSlot, NeverReason, Planner, PlannerError, Profile, Reply, Request, Slotted, State,
    Steps,
};

fn req(amount: u32, d: i64, e: i64, l: i64, flexible: bool) -> Request {
    Request {
        amount,
        duration: Duration(d),
        earliest: Time(e),
        latest: Time(l),
        flexible,
    }
}

fn both(test: impl Fn(&mut dyn FnMut() -> Box<dyn Check>)) {
    test(&mut || Box::new(Planner::new(10, Time(1000), FreeList::new())));
    test(&mut || Box::new(Planner::new(10, Time(1000), Steps::new())));
    test(&mut || Box::new(Planner::new(10, Time(1000), BTree::with_fanout(2, 2))));
    test(&mut || Box::new(Planner::new(10, Time(1000), BTree::new())));
    test(&mut || Box::new(Planner::new(10, Time(1000), Slotted::new(0, 1, 1000))));
}

/// The planner operations the scenarios use, over either profile.
trait Check {
    fn reserve(&mut self, owner: &str, r: Request, hold: Option<Time>) -> Reply;
    fn planner_start(&self, id: u64) -> i64;
    fn commit(&mut self, id: u64);
    fn expire(&mut self, now: i64) -> Vec<u64>;
    fn state(&self, id: u64) -> State;
    fn free_slots(&self, from: i64, to: i64) -> Vec<FreeSlot>;
    fn utilization(&self, from: i64, to: i64) -> f64;
    fn modify(&mut self, id: u64, c: Change) -> Result<Time, PlannerError>;
}

impl<P: Profile> Check for Planner<P> {
    fn reserve(&mut self, owner: &str, r: Request, hold: Option<Time>) -> Reply {
        let reply = Planner::reserve(self, owner, &r, hold);
        self.check_invariants();
        reply
    }
    fn planner_start(&self, id: u64) -> i64 {
        self.get(brokk_planner::ReservationId(id)).unwrap().start.0
    }
    fn commit(&mut self, id: u64) {
        Planner::commit(self, brokk_planner::ReservationId(id)).unwrap();
    }
    fn expire(&mut self, now: i64) -> Vec<u64> {
        Planner::expire(self, Time(now)).into_iter().map(|r| r.0).collect()
    }
    fn state(&self, id: u64) -> State {
        self.get(brokk_planner::ReservationId(id)).unwrap().state
    }
    fn free_slots(&self, from: i64, to: i64) -> Vec<FreeSlot> {
        Planner::free_slots(self, Time(from), Time(to))
    }
    fn utilization(&self, from: i64, to: i64) -> f64 {
        Planner::utilization(self, Time(from), Time(to))
    }
    fn modify(&mut self, id: u64, c: Change) -> Result<Time, PlannerError> {
        Planner::modify(self, brokk_planner::ReservationId(id), c)
    }
}

fn granted(r: Reply) -> (u64, i64) {
    match r {
        Reply::Granted { id, start } => (id.0, start.0),
        other => panic!("expected a grant, got {other:?}"),
    }
}

#[test]
fn a_flexible_reservation_moves_inside_its_window_to_make_room() {
    both(|new| {
        let mut p = new();
        let (a, at) = granted(p.reserve("alice", req(10, 10, 0, 20, true), None));
        assert_eq!(at, 0);
        // Bob needs the whole machine in [0, 5]: Alice's flexible reservation moves to 10.
        let (_, bt) = granted(p.reserve("bob", req(10, 10, 0, 5, false), None));
        assert_eq!(bt, 0);
        assert_eq!(p.planner_start(a), 10);
    });
}

#[test]
fn a_fixed_reservation_does_not_move_and_the_reply_says_when_it_could_start() {
    both(|new| {
        let mut p = new();
        granted(p.reserve("alice", req(10, 10, 0, 20, false), None));
        assert_eq!(
            p.reserve("bob", req(10, 10, 0, 5, false), None),
            Reply::Rejected {
                next_start: Some(Time(10))
            }
        );
        // A flexible reservation that cannot move far enough stays where it is.
        let mut p = new();
        let (a, _) = granted(p.reserve("alice", req(10, 10, 0, 3, true), None));
        assert_eq!(
            p.reserve("bob", req(10, 10, 0, 5, false), None),
            Reply::Rejected {
                next_start: Some(Time(10))
            }
        );
        assert_eq!(p.planner_start(a), 0);
    });
}

#[test]
fn never_is_only_for_the_impossible() {
    both(|new| {
        let mut p = new();
        assert_eq!(
            p.reserve("a", req(11, 10, 0, 5, false), None),
            Reply::Never {
                reason: NeverReason::OverCapacity {
                    amount: 11,
                    capacity: 10
                }
            }
        );
        assert_eq!(
            p.reserve("a", req(1, 10, 5, 4, false), None),
            Reply::Never {
                reason: NeverReason::EmptyWindow
            }
        );
        assert_eq!(
            p.reserve("a", req(1, 10, 995, 999, false), None),
            Reply::Never {
                reason: NeverReason::BeyondHorizon
            }
        );
        assert_eq!(
            p.reserve("a", req(0, 10, 0, 5, false), None),
            Reply::Never {
                reason: NeverReason::Empty
            }
        );
        // Full to the horizon: rejected, with no next start.
        granted(p.reserve("a", req(10, 1000, 0, 0, false), None));
        assert_eq!(
            p.reserve("b", req(1, 1, 0, 10, false), None),
            Reply::Rejected { next_start: None }
        );
    });
}

#[test]
fn preliminary_holds_lapse_unless_committed() {
    both(|new| {
        let mut p = new();
        let (a, _) = granted(p.reserve("alice", req(4, 10, 0, 0, false), Some(Time(50))));
        let (b, _) = granted(p.reserve("bob", req(4, 10, 0, 0, false), Some(Time(50))));
        assert_eq!(p.state(a), State::Preliminary { expires: Time(50) });
        p.commit(b);
        assert_eq!(p.state(b), State::Committed);
        assert!(p.expire(49).is_empty());
        assert_eq!(p.expire(50), vec![a]);
        assert_eq!(
            p.free_slots(0, 20),
            vec![
                FreeSlot {
                    start: Time(0),
                    end: Time(10),
                    free: 6
                },
                FreeSlot {
                    start: Time(10),
                    end: Time(20),
                    free: 10
                },
            ]
        );
    });
}

#[test]
fn free_slots_and_utilization_describe_the_schedule() {
    both(|new| {
        let mut p = new();
        granted(p.reserve("a", req(4, 10, 0, 0, false), None));
        granted(p.reserve("a", req(10, 10, 10, 10, false), None));
        granted(p.reserve("a", req(2, 5, 5, 5, false), None));
        assert_eq!(
            p.free_slots(0, 30),
            vec![
                FreeSlot {
                    start: Time(0),
                    end: Time(5),
                    free: 6
                },
                FreeSlot {
                    start: Time(5),
                    end: Time(10),
                    free: 4
                },
                FreeSlot {
                    start: Time(20),
                    end: Time(30),
                    free: 10
                },
            ]
        );
        // (4*10 + 10*10 + 2*5) / (10 * 30)
        assert!((p.utilization(0, 30) - 150.0 / 300.0).abs() < 1e-12);
    });
}

#[test]
fn a_failed_modify_leaves_the_reservation_as_it_was() {
    both(|new| {
        let mut p = new();
        let (a, _) = granted(p.reserve("a", req(5, 10, 0, 0, false), None));
        granted(p.reserve("b", req(5, 10, 10, 10, false), None));
        // Growing to 6 units would overlap b's 5 at [10, 20) if extended; longer duration fails.
        let err = p
            .modify(
                a,
                Change {
                    duration: Some(Duration(20)),
                    amount: Some(6),
                    window: None,
                },
            )
            .unwrap_err();
        assert_eq!(
            err,
            PlannerError::DoesNotFit(Reply::Rejected {
                next_start: Some(Time(20))
            })
        );
        assert_eq!(p.planner_start(a), 0);
        assert_eq!(
            p.free_slots(0, 10),
            vec![FreeSlot {
                start: Time(0),
                end: Time(10),
                free: 5
            }]
        );
        // Moving it into a new window works and frees the old place.
        assert_eq!(
            p.modify(
                a,
                Change {
                    window: Some((Time(20), Time(40))),
                    ..Change::default()
                }
            ),
            Ok(Time(20))
        );
        assert_eq!(
            p.free_slots(0, 10),
            vec![FreeSlot {
                start: Time(0),
                end: Time(10),
                free: 10
            }]
        );
    });
}

#[test]
fn a_schedule_restored_from_its_reservations_is_the_same_schedule() {
    use brokk_model::{Duration, Time};
    use brokk_planner::{FreeList, Planner, Reply, Request};
    let mut p = Planner::new(10, Time(10_000), FreeList::new());
    let req = |amount, earliest, latest, flexible| Request {
        amount,
        duration: Duration(100),
        earliest: Time(earliest),
        latest: Time(latest),
        flexible,
    };
    p.reserve("ann", &req(6, 0, 0, false), None);
    p.reserve("bob", &req(4, 0, 500, true), Some(Time(50)));
    p.reserve("ann", &req(8, 0, 1000, false), None);
    let mut q = Planner::new(10, Time(10_000), FreeList::new());
    for r in p.reservations() {
        q.restore(&r).unwrap();
    }
    assert_eq!(q.reservations(), p.reservations());
    assert_eq!(q.free_slots(Time(0), Time(2000)), p.free_slots(Time(0), Time(2000)));
    // New ids continue after the restored ones, and holds still lapse.
    let Reply::Granted { id, .. } = q.reserve("cy", &req(1, 0, 0, false), None) else {
        panic!()
    };
    assert_eq!(id.0, 4);
    assert_eq!(q.expire(Time(50)).len(), 1);
    // A clash or a taken id is refused without change.
    let first = p.reservations()[0].clone();
    assert!(q.restore(&first).is_err());
    assert_eq!(q.len(), 3);
}
