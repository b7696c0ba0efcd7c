//! Shadow schedules and the two-phase switch on virtual time.

use super::super::tests::{site, T0};
use super::super::*;

fn at(amount: u32, from: i64, to: i64) -> Request {
    Request {
        amount,
        duration: Duration(to - from),
        earliest: Time(T0.0 + from),
        latest: Time(T0.0 + from),
        flexible: false,
    }
}

/// Whether `who` could reserve `amount` over `[from, to)` in the real
/// schedule now (asked by probe, so nothing is booked).
fn room(s: &SiteCore, amount: u32, from: i64, to: i64) -> bool {
    !s.probe(T0, &at(amount, from, to), 1).unwrap().is_empty()
}

/// A site of 8 where ann holds 6 over [100, 200) and has, in her shadow,
/// moved them to [300, 400).
fn moved() -> (SiteCore, ReservationId, ReservationId) {
    let mut s = site(8);
    let old = s.reserve(T0, "ann", &at(6, 100, 200), None).unwrap().id;
    s.shadow_open(T0, "ann").unwrap();
    s.shadow_cancel(T0, "ann", old).unwrap();
    let trial = s.shadow_reserve(T0, "ann", &at(6, 300, 400)).unwrap().id;
    s.drain();
    (s, old, trial)
}

#[test]
fn a_shadow_answers_without_the_old_reservations_while_they_stay_binding() {
    let (s, _, _) = moved();
    let whole = |s: &SiteCore, from| s.shadow_probe(T0, "ann", &at(8, from, from + 100), 1).unwrap();
    assert_eq!(whole(&s, 100).len(), 1, "the shadow has the old place free");
    assert!(whole(&s, 300).is_empty(), "and the trial place taken");
    assert!(!room(&s, 3, 100, 200), "the real schedule keeps the old place");
    assert!(room(&s, 8, 300, 400), "and knows nothing of the trial");
    assert_eq!(
        s.shadow_fragmentation("ann", (Time(T0.0 + 100), Time(T0.0 + 200)))
            .unwrap(),
        0.0
    );
    s.check_invariants();
}

#[test]
fn a_prepared_switch_holds_both_schedules_until_its_second_phase() {
    let (mut s, old, trial) = moved();
    let map = s.shadow_prepare(T0, "ann").unwrap();
    assert_eq!(map.len(), 1);
    let (shadow_id, new) = map[0];
    assert_eq!(shadow_id, trial);
    let effects = s.drain();
    assert!(effects.contains(&Effect::SaveReservation(new)));
    assert!(effects.contains(&Effect::Manager(Manager::Reserve(new))));
    assert!(!room(&s, 3, 100, 200), "the old place is held between the phases");
    assert!(!room(&s, 3, 300, 400), "and so is the new one");
    assert!(
        s.shadow_cancel(T0, "ann", trial).is_err(),
        "a prepared shadow takes no more changes"
    );
    s.shadow_switch(T0, "ann").unwrap();
    let effects = s.drain();
    assert!(effects.contains(&Effect::EndReservations(vec![old], Ended::Cancelled)));
    assert!(effects.contains(&Effect::Manager(Manager::Release(vec![old]))));
    assert!(room(&s, 8, 100, 200), "the old place is free after the switch");
    assert!(!room(&s, 3, 300, 400));
    let r = s.reservation(T0, "ann", new).unwrap();
    assert_eq!((r.start, r.end, r.amount), (Time(T0.0 + 300), Time(T0.0 + 400), 6));
    assert!(s.reservation(T0, "ann", old).is_err());
    assert!(s.shadow_switch(T0, "ann").is_err(), "the shadow is gone");
    s.check_invariants();
}

#[test]
fn a_switch_holds_only_what_the_two_schedules_do_not_share() {
    // 6 over [100, 200) moved to [150, 250): between the phases the site
    // holds 6 over [100, 250), not 12 over their overlap.
    let mut s = site(8);
    let old = s.reserve(T0, "ann", &at(6, 100, 200), None).unwrap().id;
    s.shadow_open(T0, "ann").unwrap();
    s.shadow_cancel(T0, "ann", old).unwrap();
    s.shadow_reserve(T0, "ann", &at(6, 150, 250)).unwrap();
    s.shadow_prepare(T0, "ann").unwrap();
    assert!(room(&s, 2, 100, 250), "two are free throughout");
    assert!(!room(&s, 3, 100, 150) && !room(&s, 3, 200, 250));
    s.check_invariants();
}

#[test]
fn abandoning_a_prepared_switch_leaves_the_old_schedule_as_it_was() {
    let (mut s, old, _) = moved();
    let new = s.shadow_prepare(T0, "ann").unwrap()[0].1;
    s.drain();
    s.shadow_abandon(T0, "ann").unwrap();
    let effects = s.drain();
    assert!(effects.contains(&Effect::EndReservations(vec![new], Ended::Cancelled)));
    assert!(!effects
        .iter()
        .any(|e| matches!(e, Effect::EndReservations(ids, _) if ids.contains(&old))));
    let r = s.reservation(T0, "ann", old).unwrap();
    assert_eq!((r.start, r.amount), (Time(T0.0 + 100), 6));
    assert!(room(&s, 8, 300, 400));
    assert!(!room(&s, 3, 100, 200));
    s.check_invariants();
}

#[test]
fn a_site_votes_no_when_others_booked_where_the_shadow_moved_to() {
    let (mut s, old, _) = moved();
    // Bob books against the real schedule, where ann's trial lies.
    let bob = s.reserve(T0, "bob", &at(4, 300, 400), None).unwrap().id;
    assert!(
        s.shadow_probe(T0, "ann", &at(6, 300, 400), 1).unwrap().is_empty(),
        "the shadow follows what others book"
    );
    let vote = s.shadow_prepare(T0, "ann");
    assert!(
        matches!(vote, Err(CoreError::Conflict(ref m)) if m.contains("no longer fits")),
        "{vote:?}"
    );
    s.drain();
    assert_eq!(s.reservation(T0, "ann", old).unwrap().start, Time(T0.0 + 100));
    assert_eq!(s.reservation(T0, "bob", bob).unwrap().start, Time(T0.0 + 300));
    assert!(room(&s, 2, 100, 200) && !room(&s, 3, 100, 200));
    s.shadow_abandon(T0, "ann").unwrap();
    assert!(s.drain().is_empty(), "nothing was booked, so nothing ends");
    s.check_invariants();
}

#[test]
fn a_trial_that_no_longer_fits_leaves_the_shadow_at_its_next_change() {
    let (mut s, _, trial) = moved();
    s.reserve(T0, "bob", &at(4, 300, 400), None).unwrap();
    s.shadow_reserve(T0, "ann", &at(1, 500, 600)).unwrap();
    assert!(s.shadow_cancel(T0, "ann", trial).is_err(), "the trial is gone");
    let map = s.shadow_prepare(T0, "ann").unwrap();
    assert_eq!(map.len(), 1, "only the trial that fits is booked");
    s.check_invariants();
}

#[test]
fn a_client_takes_off_only_its_own_reservations_and_only_unused_ones() {
    let mut s = site(8);
    let ann = s.reserve(T0, "ann", &at(2, 100, 200), None).unwrap().id;
    s.shadow_open(T0, "bob").unwrap();
    assert!(matches!(s.shadow_cancel(T0, "bob", ann), Err(CoreError::Forbidden(_))));
    assert!(matches!(
        s.shadow_probe(T0, "cid", &at(1, 0, 10), 1),
        Err(CoreError::NotFound(_))
    ));
    let mut j = Job {
        executable: Some("/bin/true".into()),
        cpus: Some(2),
        wall_time: Some(Duration(100)),
        ..Job::default()
    };
    j.reservation = Some(ann.0.to_string());
    s.submit(T0, "ann", Submission::of(j)).unwrap();
    s.shadow_open(T0, "ann").unwrap();
    assert!(matches!(s.shadow_cancel(T0, "ann", ann), Err(CoreError::Conflict(_))));
    s.check_invariants();
}

#[test]
fn two_clients_switch_at_one_site_each_in_its_own_shadow() {
    let mut s = site(8);
    let ann = s.reserve(T0, "ann", &at(4, 100, 200), None).unwrap().id;
    let bob = s.reserve(T0, "bob", &at(4, 100, 200), None).unwrap().id;
    for (who, id, to) in [("ann", ann, 300), ("bob", bob, 500)] {
        s.shadow_open(T0, who).unwrap();
        s.shadow_cancel(T0, who, id).unwrap();
        s.shadow_reserve(T0, who, &at(4, to, to + 100)).unwrap();
    }
    // Ann's shadow still has bob's old reservation in it, and bob's ann's.
    assert!(s.shadow_probe(T0, "ann", &at(5, 100, 200), 1).unwrap().is_empty());
    s.shadow_prepare(T0, "ann").unwrap();
    s.shadow_prepare(T0, "bob").unwrap();
    s.shadow_switch(T0, "bob").unwrap();
    s.shadow_switch(T0, "ann").unwrap();
    assert!(room(&s, 8, 100, 200));
    assert!(room(&s, 4, 300, 400) && !room(&s, 5, 300, 400));
    assert!(room(&s, 4, 500, 600) && !room(&s, 5, 500, 600));
    s.check_invariants();
}

#[test]
fn a_switch_that_would_move_a_reservation_begun_meanwhile_is_refused() {
    // Ann's old reservation starts at 100; by 150 it has begun, and the
    // site refuses to move it.
    let (mut s, old, _) = moved();
    let vote = s.shadow_prepare(Time(T0.0 + 150), "ann");
    assert!(
        matches!(vote, Err(CoreError::Conflict(ref m)) if m.contains("passed")),
        "{vote:?}"
    );
    assert_eq!(
        s.reservation(Time(T0.0 + 150), "ann", old).unwrap().start,
        Time(T0.0 + 100)
    );
    s.check_invariants();
}
