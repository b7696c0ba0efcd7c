//! The broker core's rules on virtual time: every effect checked as a
//! driver would see it, no site and no sleep.

use super::*;
use crate::jobs::ClaimTerms;
use crate::reservations::BrokerReservationState;

fn site(name: &str, slots: u32) -> ResourceInfo {
    ResourceInfo {
        endpoint: name.into(),
        name: name.into(),
        total_slots: slots,
        free_slots: slots,
        ..ResourceInfo::default()
    }
}

fn job(id: &str, cpus: u32) -> NewJob {
    NewJob {
        id: id.into(),
        format: "json".into(),
        job: Job {
            executable: Some("/bin/true".into()),
            cpus: Some(cpus),
            wall_time: Some(Duration(600)),
            ..Job::default()
        },
        prefs: JobPreferences::default(),
        hold: false,
        runs_as: None,
        delegated: None,
        warnings: Vec::new(),
    }
}

fn params() -> BrokerParams {
    BrokerParams {
        persist: false,
        ..BrokerParams::default()
    }
}

/// A broker over sites `a` (4 slots) and `b` (4 slots), both known at 0.
fn broker(p: BrokerParams) -> BrokerCore {
    let mut b = BrokerCore::new(vec!["a".into(), "b".into()], p);
    b.informed(0, Ok(site("a", 4)), Time(0));
    b.informed(1, Ok(site("b", 4)), Time(0));
    b
}

/// The jobs sent, as (job, site), in order; everything else drained too.
fn sends(b: &mut BrokerCore) -> Vec<(String, usize)> {
    b.drain()
        .filter_map(|e| match e {
            Effect::Send { job, site, .. } => Some((job, site)),
            _ => None,
        })
        .collect()
}

/// Carries out every send by having the site take the job as `site-N`.
fn land_all(b: &mut BrokerCore, t: Time) -> Vec<(String, usize)> {
    let s = sends(b);
    for (k, (id, site)) in s.iter().enumerate() {
        b.sent(t, id, *site, Ok(format!("{site}-{k}")));
    }
    s
}

#[test]
fn a_burst_spreads_over_the_sites_as_each_decision_counts_the_ones_before() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("j1", 4), job("j2", 4), job("j3", 4)])
        .unwrap();
    assert_eq!(b.decide(Time(1), usize::MAX), 3);
    let s = land_all(&mut b, Time(1));
    // The first fills a, so the second finds b free; the third queues
    // behind one of them (a, listed first, on a tie).
    assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), [0, 1, 0]);
    for id in ["j1", "j2", "j3"] {
        assert_eq!(b.job(id).unwrap().state(), BrokerState::Dispatched);
    }
    assert_eq!(b.job("j2").unwrap().site.as_deref(), Some("b"));
}

#[test]
fn a_refusal_sends_the_job_to_the_next_site_and_the_first_is_asked_again() {
    let mut b = broker(BrokerParams {
        info_ttl: Duration(3600),
        ..params()
    });
    b.accept(Time(1), "ann", vec![job("j1", 1)]).unwrap();
    b.decide(Time(1), 1);
    assert_eq!(sends(&mut b), [("j1".to_string(), 0)]);
    let refused = SiteError::Refused {
        site: "a".into(),
        reason: "full".into(),
    };
    b.sent(Time(2), "j1", 0, Err(refused));
    assert_eq!(sends(&mut b), [("j1".to_string(), 1)]);
    b.sent(Time(2), "j1", 1, Ok("7".into()));
    let j = b.job("j1").unwrap();
    assert_eq!((j.state(), j.site.as_deref()), (BrokerState::Dispatched, Some("b")));
    // Recorded at the second it was decided.
    assert_eq!(j.history.len(), 0);
    b.drain().for_each(drop);
    // Within the time-to-live only the site that refused is asked again.
    b.stale(Time(3));
    assert_eq!(b.drain().collect::<Vec<_>>(), [Effect::Fetch { site: 0 }]);
}

#[test]
fn no_site_that_answered_can_take_it_so_it_fails_with_every_reason() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("big", 64)]).unwrap();
    b.decide(Time(1), 1);
    assert!(sends(&mut b).is_empty());
    assert!(b.job("big").is_none(), "an ended job is let go");
    assert_eq!(b.unfinished("ann"), 0);
    assert_eq!(b.pending(), 0);
}

#[test]
fn a_site_that_did_not_answer_keeps_the_job_for_another_try() {
    let mut b = BrokerCore::new(vec!["a".into()], params());
    b.informed(0, Err(FetchFailure::Timeout(Duration(5))), Time(0));
    b.accept(Time(1), "ann", vec![job("j1", 1)]).unwrap();
    b.decide(Time(1), 1);
    assert!(sends(&mut b).is_empty());
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Accepted);
    // Not before retry_after (5 s)...
    b.informed(0, Ok(site("a", 4)), Time(2));
    assert_eq!(b.decide(Time(3), 10), 0);
    // ... then decided again.
    assert_eq!(b.decide(Time(6), 10), 1);
    assert_eq!(sends(&mut b), [("j1".to_string(), 0)]);
}

#[test]
fn the_limit_counts_unfinished_jobs_but_not_held_ones() {
    let mut b = broker(BrokerParams { limit: 2, ..params() });
    b.accept(Time(1), "ann", vec![job("j1", 1), job("j2", 1)]).unwrap();
    let over = b.accept(Time(1), "ann", vec![job("j3", 1)]).unwrap_err();
    assert_eq!(
        over,
        OverLimit::Unfinished {
            unfinished: 2,
            limit: 2
        }
    );
    // Another user is not held back by ann.
    b.accept(Time(1), "bob", vec![job("k1", 1)]).unwrap();
    b.hold(Time(2), "ann", "j2").unwrap();
    b.accept(Time(2), "ann", vec![job("j3", 1)]).unwrap();
    assert_eq!(b.unfinished("ann"), 2);
    // Releasing puts the held job back in the count, past the limit: the
    // limit bounds new work, not what the owner kept back.
    b.release(Time(3), "ann", "j2").unwrap();
    assert_eq!(b.unfinished("ann"), 3);
}

#[test]
fn the_per_request_limit_refuses_the_whole_request() {
    let mut b = broker(BrokerParams {
        per_request: 2,
        ..params()
    });
    let over = b.accept(Time(1), "ann", vec![job("j1", 1), job("j2", 1), job("j3", 1)]);
    assert_eq!(over, Err(OverLimit::PerRequest { n: 3, per_request: 2 }));
    assert!(b.is_empty());
}

#[test]
fn owners_take_turns_so_one_users_thousand_jobs_do_not_hold_up_another() {
    let mut b = broker(params());
    let many: Vec<NewJob> = (0..10).map(|k| job(&format!("a{k}"), 1)).collect();
    b.accept(Time(1), "ann", many).unwrap();
    b.accept(Time(1), "bob", vec![job("b0", 1), job("b1", 1)]).unwrap();
    b.decide(Time(1), 4);
    let order: Vec<String> = sends(&mut b).into_iter().map(|s| s.0).collect();
    assert_eq!(order, ["a0", "b0", "a1", "b1"]);
    assert_eq!(b.pending(), 8);
}

#[test]
fn a_held_job_is_not_decided_until_released() {
    let mut b = broker(params());
    let mut held = job("j1", 1);
    held.hold = true;
    b.accept(Time(1), "ann", vec![held]).unwrap();
    assert_eq!(b.decide(Time(1), 10), 0);
    assert_eq!(b.unfinished("ann"), 0);
    b.release(Time(2), "ann", "j1").unwrap();
    assert_eq!(b.decide(Time(2), 10), 1);
}

#[test]
fn only_the_owner_reaches_a_job() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("j1", 1)]).unwrap();
    assert_eq!(b.hold(Time(2), "bob", "j1"), Err(Denied::Unknown("j1".into())));
    assert_eq!(b.cancel(Time(2), "bob", "j1"), Err(Denied::Unknown("j1".into())));
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Accepted);
}

#[test]
fn a_job_held_or_cancelled_on_its_way_is_withdrawn_from_the_site_that_takes_it() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("j1", 1), job("j2", 1)]).unwrap();
    b.decide(Time(1), 2);
    let s = sends(&mut b);
    b.hold(Time(1), "ann", "j1").unwrap();
    b.cancel(Time(1), "ann", "j2").unwrap();
    b.sent(Time(2), "j1", s[0].1, Ok("41".into()));
    b.sent(Time(2), "j2", s[1].1, Ok("42".into()));
    let withdrawn: Vec<String> = b
        .drain()
        .filter_map(|e| match e {
            Effect::Withdraw { site_job, owner, .. } => Some(format!("{owner}:{site_job}")),
            _ => None,
        })
        .collect();
    assert_eq!(withdrawn, ["ann:41", "ann:42"]);
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Held);
    assert!(b.job("j2").is_none());
}

#[test]
fn a_running_job_cancelled_is_withdrawn_and_its_reports_then_change_nothing() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("j1", 1)]).unwrap();
    b.decide(Time(1), 1);
    land_all(&mut b, Time(1));
    b.drain().for_each(drop);
    let running = Report {
        phase: JobPhase::Running,
        started: Some(Time(5)),
        ended: None,
        exit_code: None,
        reason: None,
    };
    b.reported(Time(5), 0, "0-0", running);
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Running);
    // Withdrawn from the site first; a site that cannot be reached leaves
    // it running there.
    assert_eq!(b.cancel(Time(6), "ann", "j1"), Ok(Applied::Unchanged));
    let e: Vec<Effect> = b.drain().collect();
    assert_eq!(
        e,
        [Effect::Withdraw {
            site: 0,
            site_job: "0-0".into(),
            owner: "ann".into()
        }]
    );
    let down = SiteError::Unavailable("a".into());
    assert_eq!(b.withdrawn(Time(6), 0, "0-0", Err(down.clone())), Err(down));
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Running);
    b.cancel(Time(6), "ann", "j1").unwrap();
    b.drain().for_each(drop);
    assert_eq!(
        b.withdrawn(Time(6), 0, "0-0", Ok(())),
        Ok(Applied::Entered(BrokerState::Cancelled))
    );
    assert!(b.is_empty());
    // Its slot is free again: the site is asked before the next decision.
    b.stale(Time(7));
    assert_eq!(b.drain().collect::<Vec<_>>(), [Effect::Fetch { site: 0 }]);
    // The site's own report of the end then changes nothing.
    let ended = Report {
        phase: JobPhase::Cancelled,
        started: Some(Time(5)),
        ended: Some(Time(7)),
        exit_code: None,
        reason: Some("cancelled".into()),
    };
    assert!(!b.reported(Time(7), 0, "0-0", ended));
    assert!(b.is_empty());
    assert_eq!(b.unfinished("ann"), 0);
}

#[test]
fn a_site_reporting_an_end_frees_the_owners_count_and_the_record_is_stored_with_its_history() {
    let mut b = broker(BrokerParams {
        limit: 1,
        ..BrokerParams::default()
    });
    b.accept(Time(1), "ann", vec![job("j1", 1)]).unwrap();
    b.decide(Time(1), 1);
    let mut effects: Vec<Effect> = b.drain().collect();
    b.sent(Time(2), "j1", 0, Ok("0-0".into()));
    let ended = Report {
        phase: JobPhase::Finished,
        started: Some(Time(3)),
        ended: Some(Time(9)),
        exit_code: Some(0),
        reason: None,
    };
    b.reported(Time(10), 0, "0-0", ended);
    effects.extend(b.drain());
    let lines: Vec<(BrokerState, Time, Option<String>)> = effects
        .into_iter()
        .filter_map(|e| match e {
            Effect::Persist { line: Some(l), .. } => Some((l.state, l.at, l.detail)),
            _ => None,
        })
        .collect();
    assert_eq!(
        lines,
        [
            (BrokerState::Accepted, Time(1), None),
            (BrokerState::Dispatched, Time(1), Some("to a".into())),
            (BrokerState::Finished, Time(10), None),
        ]
    );
    assert!(b.accept(Time(11), "ann", vec![job("j2", 1)]).is_ok());
}

#[test]
fn information_is_asked_for_when_missing_old_or_changed_and_never_twice_at_once() {
    let mut b = BrokerCore::new(
        vec!["a".into(), "b".into()],
        BrokerParams {
            info_ttl: Duration(60),
            ..params()
        },
    );
    b.stale(Time(0));
    assert_eq!(b.drain().count(), 2);
    // Asked already: not again while the answers are on their way.
    b.stale(Time(1));
    assert_eq!(b.drain().count(), 0);
    b.informed(0, Ok(site("a", 4)), Time(0));
    b.informed(1, Ok(site("b", 4)), Time(0));
    b.stale(Time(59));
    assert_eq!(b.drain().count(), 0);
    b.stale(Time(60));
    assert_eq!(b.drain().count(), 2);
    // A site that did not answer is not asked again, nor waited for, by
    // every look within the time-to-live; its failure is its answer.
    b.informed(0, Ok(site("a", 4)), Time(60));
    let down = FetchFailure::Error(SiteError::Unavailable("b".into()));
    b.informed(1, Err(down.clone()), Time(60));
    b.stale(Time(119));
    assert_eq!(b.drain().count(), 0);
    assert_eq!(b.answer(1), Some(Err(down)));
    assert_eq!(b.answer(0).unwrap().unwrap().total_slots, 4);
    b.stale(Time(120));
    assert_eq!(b.drain().count(), 2);
    // Looks that found a site fresh, and fetches.
    assert_eq!(b.lookups(), (6, 6));
    assert_eq!(b.answer(7), None);
}

#[test]
fn a_restored_broker_follows_its_dispatched_jobs_and_decides_its_accepted_ones() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("j1", 1), job("j2", 1)]).unwrap();
    b.decide(Time(1), 1);
    land_all(&mut b, Time(1));
    let mut again = broker(params());
    for id in ["j1", "j2"] {
        let view = b.job(id).unwrap().clone();
        again.adopt(view, b.description(id).unwrap().clone(), JobPreferences::default());
    }
    assert_eq!(again.unfinished("ann"), 2);
    assert_eq!(again.decide(Time(2), 10), 1);
    let done = Report {
        phase: JobPhase::Finished,
        started: Some(Time(2)),
        ended: Some(Time(3)),
        exit_code: Some(0),
        reason: None,
    };
    again.reported(Time(3), 0, "0-0", done);
    assert!(again.job("j1").is_none());
}

#[test]
fn a_job_a_broker_above_sent_for_a_user_is_withdrawn_as_that_user() {
    let mut b = broker(params());
    let mut sent = job("j1", 1);
    sent.runs_as = Some("carol".into());
    b.accept(Time(1), "north", vec![sent]).unwrap();
    b.decide(Time(1), 1);
    land_all(&mut b, Time(1));
    b.drain().for_each(drop);
    b.cancel(Time(2), "north", "j1").unwrap();
    let withdrawn: Vec<Effect> = b.drain().collect();
    assert_eq!(
        withdrawn,
        [Effect::Withdraw {
            site: 0,
            site_job: "0-0".into(),
            owner: "carol".into()
        }]
    );
    // carol herself does not own it here: the broker above does.
    assert_eq!(b.cancel(Time(2), "carol", "j1"), Err(Denied::Unknown("j1".into())));
}

#[test]
fn jobs_on_their_way_are_counted_again_in_information_taken_before_they_land() {
    let mut b = broker(BrokerParams {
        info_ttl: Duration(0),
        ..params()
    });
    b.accept(Time(1), "ann", vec![job("j1", 4)]).unwrap();
    b.decide(Time(1), 1);
    assert_eq!(sends(&mut b), [("j1".to_string(), 0)]);
    // Site a answers again before j1 reaches it: still 4 free slots.
    b.informed(0, Ok(site("a", 4)), Time(2));
    b.accept(Time(2), "ann", vec![job("j2", 4)]).unwrap();
    b.decide(Time(2), 1);
    assert_eq!(sends(&mut b), [("j2".to_string(), 1)], "a is full with j1 on its way");
    // Once a has answered for j1, its information is taken as it comes.
    b.sent(Time(3), "j1", 0, Ok("9".into()));
    b.informed(0, Ok(site("a", 4)), Time(4));
    assert_eq!(b.information()[0].free_slots, 4);
}

/// A job naming reservation `rid`.
fn in_reservation(id: &str, rid: &str) -> NewJob {
    let mut n = job(id, 2);
    n.job.reservation = Some(rid.into());
    n
}

/// Ann's committed reservation `r1` at site `b` (its id there 7), from
/// 100 to 700.
fn anns_r1() -> Reserved {
    Reserved {
        owner: "ann".into(),
        site: "b".into(),
        site_reservation: 7,
        start: Time(100),
        end: Time(700),
        state: BrokerReservationState::Committed,
        workflow: false,
    }
}

/// The history lines given out to be stored: (job, state, detail).
fn lines(effects: &[Effect]) -> Vec<(String, BrokerState, Option<String>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Persist { job, line: Some(l) } => Some((job.id.clone(), l.state, l.detail.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_job_naming_a_reservation_is_sent_into_it_at_its_site_once_read() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    b.accept(Time(1), "ann", vec![in_reservation("j1", "r1")]).unwrap();
    b.drain();
    assert_eq!(b.decide(Time(2), 10), 1);
    let asked: Vec<Effect> = b.drain().filter(|e| !matches!(e, Effect::Persist { .. })).collect();
    assert_eq!(
        asked,
        [Effect::Resolve {
            job: "j1".into(),
            reservation: "r1".into()
        }]
    );
    // Not decided again while the reservation is being read.
    assert_eq!(b.decide(Time(3), 10), 0);
    b.resolved(Time(3), "j1", Ok(Some(anns_r1())));
    let send: Vec<Effect> = b.drain().collect();
    assert_eq!(
        send,
        [Effect::Send {
            job: "j1".into(),
            site: 1,
            wall: None,
            claim: Some(Claim {
                reservation: 7,
                release_with_job: false,
                explicit_commit: false
            }),
            delegation: None,
        }]
    );
    b.sent(Time(4), "j1", 1, Ok("b-1".into()));
    let v = b.job("j1").unwrap();
    assert_eq!((v.state(), v.site.as_deref()), (BrokerState::Dispatched, Some("b")));
    // Its start is the reservation's: 97 s after it was sent at 3.
    assert_eq!(v.predicted_tts, Some(97));
    let stored = lines(&b.drain().collect::<Vec<_>>());
    assert_eq!(
        stored,
        [(
            "j1".into(),
            BrokerState::Dispatched,
            Some("to b, in reservation r1".into())
        )]
    );
}

#[test]
fn only_the_owners_committed_reservation_before_its_end_takes_the_job() {
    let cases = [
        (
            Some(Reserved {
                owner: "bob".into(),
                ..anns_r1()
            }),
            Time(3),
            "you hold no committed reservation r1",
        ),
        (
            Some(Reserved {
                state: BrokerReservationState::Cancelled,
                ..anns_r1()
            }),
            Time(3),
            "you hold no committed reservation r1",
        ),
        // Only held: claimable only by a job whose sender commits it.
        (
            Some(Reserved {
                state: BrokerReservationState::Held,
                ..anns_r1()
            }),
            Time(3),
            "you hold no committed reservation r1",
        ),
        (None, Time(3), "you hold no committed reservation r1"),
        (Some(anns_r1()), Time(700), "the reservation ended at"),
        (
            Some(Reserved {
                site: "gone".into(),
                ..anns_r1()
            }),
            Time(3),
            "its site gone is not one of this broker's",
        ),
    ];
    for (found, at, why) in cases {
        let mut b = broker(params());
        b.accept(Time(1), "ann", vec![in_reservation("j1", "r1")]).unwrap();
        b.decide(Time(2), 10);
        b.drain();
        b.resolved(at, "j1", Ok(found.clone()));
        assert!(sends(&mut b).is_empty(), "{found:?}");
        assert!(b.job("j1").is_none(), "failed and let go: {found:?}");
        assert_eq!(b.unfinished("ann"), 0);
        let e = claimable("ann", "r1", found.as_ref(), at, false);
        assert!(e.as_ref().map_or(true, |()| why.contains("site")), "{e:?}");
        if let Err(e) = e {
            assert!(e.contains(why), "{e}");
        }
    }
}

#[test]
fn a_job_a_broker_above_sent_claims_its_hold_on_the_terms_it_came_with() {
    let mut b = broker(params());
    // Stored by the site API's handler, then handed to the core.
    let mut view = BrokerJob::new("j1".into(), "ann".into(), "json".into(), Entry::Accepted, Time(1));
    view.claim_terms = Some(ClaimTerms {
        explicit_commit: true,
        release_with_job: true,
    });
    b.adopt(view, in_reservation("j1", "r1").job, JobPreferences::default());
    b.decide(Time(2), 10);
    b.drain();
    // Still held: the broker above commits it once it has placed all it
    // asked for.
    let held = Reserved {
        state: BrokerReservationState::Held,
        ..anns_r1()
    };
    b.resolved(Time(3), "j1", Ok(Some(held.clone())));
    assert_eq!(
        b.drain().collect::<Vec<_>>(),
        [Effect::Send {
            job: "j1".into(),
            site: 1,
            wall: None,
            claim: Some(Claim {
                reservation: 7,
                release_with_job: true,
                explicit_commit: true
            }),
            delegation: None,
        }]
    );
    assert!(claimable("ann", "r1", Some(&held), Time(3), true).is_ok());
    // Given back meanwhile, it takes no job.
    let cancelled = Reserved {
        state: BrokerReservationState::Cancelled,
        ..held
    };
    assert!(claimable("ann", "r1", Some(&cancelled), Time(3), true).is_err());
}

#[test]
fn a_reservation_unread_or_its_site_unreachable_waits_and_a_refusal_fails() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    b.accept(Time(1), "ann", vec![in_reservation("j1", "r1")]).unwrap();
    b.decide(Time(1), 10);
    b.drain();
    // The store could not be read: read again after retry_after (5 s).
    b.resolved(Time(1), "j1", Err("database is locked".into()));
    assert_eq!(b.decide(Time(5), 10), 0);
    assert_eq!(b.decide(Time(6), 10), 1);
    b.resolved(Time(6), "j1", Ok(Some(anns_r1())));
    b.drain();
    // The site could not be reached: sent again later.
    b.sent(
        Time(6),
        "j1",
        1,
        Err(SiteError::Unavailable("connection refused".into())),
    );
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Accepted);
    assert_eq!(b.decide(Time(11), 10), 1);
    b.resolved(Time(11), "j1", Ok(Some(anns_r1())));
    b.drain();
    // The site refused it: no other site holds its reservation.
    b.sent(
        Time(11),
        "j1",
        1,
        Err(SiteError::Refused {
            site: "b".into(),
            reason: "reservation 7 has ended".into(),
        }),
    );
    assert!(b.job("j1").is_none());
    let stored = lines(&b.drain().collect::<Vec<_>>());
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].1, BrokerState::Failed);
    assert!(
        stored[0].2.as_deref().unwrap().contains("reservation 7 has ended"),
        "{stored:?}"
    );
}

#[test]
fn a_job_held_while_sent_into_its_reservation_is_withdrawn_from_the_site() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![in_reservation("j1", "r1")]).unwrap();
    b.decide(Time(1), 10);
    b.resolved(Time(1), "j1", Ok(Some(anns_r1())));
    b.drain();
    b.hold(Time(2), "ann", "j1").unwrap();
    b.sent(Time(3), "j1", 1, Ok("b-1".into()));
    let out: Vec<Effect> = b.drain().collect();
    assert_eq!(
        out,
        [Effect::Withdraw {
            site: 1,
            site_job: "b-1".into(),
            owner: "ann".into()
        }]
    );
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Held);
}

#[test]
fn a_job_inherited_from_before_a_restart_is_looked_for_before_it_is_sent() {
    let mut old = broker(params());
    old.accept(Time(1), "ann", vec![job("j1", 1), job("j2", 1), job("j3", 1)])
        .unwrap();
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    for id in ["j1", "j2", "j3"] {
        b.inherit(
            Time(2),
            old.job(id).unwrap().clone(),
            old.description(id).unwrap().clone(),
            JobPreferences::default(),
        );
    }
    assert_eq!(b.decide(Time(2), 10), 3);
    let asked: Vec<Effect> = b.drain().collect();
    assert!(
        asked
            .iter()
            .all(|e| matches!(e, Effect::Find { job, .. } if ["j1", "j2", "j3"].contains(&job.as_str()))),
        "{asked:?}"
    );
    assert_eq!(asked.len(), 3);
    // j1 reached b before the restart: followed there, never sent again.
    let queued = Report {
        phase: JobPhase::Queued,
        started: None,
        ended: None,
        exit_code: None,
        reason: None,
    };
    b.found(Time(3), "j1", Ok(Some((1, "b-9".into(), queued))));
    assert!(sends(&mut b).is_empty());
    let v = b.job("j1").unwrap();
    assert_eq!(
        (v.state(), v.site_job.as_deref()),
        (BrokerState::Dispatched, Some("b-9"))
    );
    // j2 is nowhere: decided as any other.
    b.found(Time(3), "j2", Ok(None));
    // j3: a site could not say; never sent while unsure.
    b.found(Time(3), "j3", Err("b: connection refused".into()));
    assert_eq!(b.decide(Time(3), 10), 1);
    assert_eq!(sends(&mut b), [("j2".to_string(), 0)]);
    assert_eq!(b.decide(Time(8), 10), 1);
    let again: Vec<Effect> = b.drain().collect();
    assert_eq!(
        again,
        [Effect::Find {
            job: "j3".into(),
            key: "j3".into()
        }]
    );
    // The one followed at b reports as any other.
    let done = Report {
        phase: JobPhase::Finished,
        started: Some(Time(3)),
        ended: Some(Time(4)),
        exit_code: Some(0),
        reason: None,
    };
    assert!(b.reported(Time(4), 1, "b-9", done.clone()));
    // j3 had already ended where it is found: ended at once, whatever the
    // site's feed still holds back, and never sent.
    b.found(Time(9), "j3", Ok(Some((1, "b-10".into(), done))));
    let out: Vec<Effect> = b.drain().collect();
    assert!(!out.iter().any(|e| matches!(e, Effect::Send { .. })), "{out:?}");
    let stored: Vec<(BrokerState, Option<String>, Option<i32>)> = out
        .into_iter()
        .filter_map(|e| match e {
            Effect::Persist { job, line: Some(l) } if job.id == "j3" => Some((l.state, job.site_job, job.exit_code)),
            _ => None,
        })
        .collect();
    assert_eq!(
        stored,
        [
            (BrokerState::Dispatched, Some("b-10".into()), None),
            (BrokerState::Finished, Some("b-10".into()), Some(0)),
        ]
    );
}

/// Co-allocation `c1`'s `n` parts of ann's, stored as reserving.
fn parts(n: usize) -> Vec<(BrokerJob, Job)> {
    (0..n)
        .map(|k| {
            let j = job(&format!("c1-{k}"), 4);
            let mut v = BrokerJob::new(j.id, "ann".into(), j.format, Entry::Reserving, Time(1));
            v.member = jobs::Member::Part {
                coallocation: "c1".into(),
                index: k,
            };
            (v, j.job)
        })
        .collect()
}

const SEARCH: CoSearch = CoSearch {
    window: (Time(1), Time(1000)),
    delta: Duration(0),
    hold: Time(300),
};

#[test]
fn a_coallocation_is_searched_for_and_each_part_recorded_where_it_went() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    b.coallocate("c1", parts(2), Some(SEARCH));
    let asked: Vec<Effect> = b.drain().collect();
    assert_eq!(
        asked,
        [Effect::CoAllocate {
            group: "c1".into(),
            owner: "ann".into(),
            parts: vec!["c1-0".into(), "c1-1".into()],
            search: SEARCH,
        }]
    );
    // Reserving parts count toward their owner's limit and are never decided.
    assert_eq!(b.unfinished("ann"), 2);
    assert_eq!(b.decide(Time(2), usize::MAX), 0);
    assert!(b.description("c1-1").is_some(), "the driver reads what it places");
    b.coallocated(
        Time(3),
        "c1",
        CoAnswer::Placed(vec![(0, "a-7".into(), Time(50)), (1, "b-9".into(), Time(50))]),
    );
    for (id, site) in [("c1-0", "a"), ("c1-1", "b")] {
        let v = b.job(id).unwrap();
        assert_eq!((v.state(), v.site.as_deref()), (BrokerState::Dispatched, Some(site)));
    }
    let stored = lines(&b.drain().collect::<Vec<_>>());
    let detail = |id: &str| stored.iter().find(|l| l.0 == id).and_then(|l| l.2.clone());
    assert_eq!(
        detail("c1-1").as_deref(),
        Some("to b, co-allocated to start at 1970-01-01T00:00:50Z")
    );
    // Both sites took a part: their information is asked for again.
    b.stale(Time(4));
    let fetched: Vec<Effect> = b.drain().collect();
    assert_eq!(fetched, [Effect::Fetch { site: 0 }, Effect::Fetch { site: 1 }]);
    // The sites' reports reach the parts.
    let ended = Report {
        phase: JobPhase::Finished,
        started: Some(Time(50)),
        ended: Some(Time(60)),
        exit_code: Some(0),
        reason: None,
    };
    assert!(b.reported(Time(60), 1, "b-9", ended));
    assert!(b.job("c1-1").is_none(), "ended: let go");
    assert_eq!(b.unfinished("ann"), 1);
}

#[test]
fn a_coallocation_that_fits_nowhere_fails_every_part_with_the_reason() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    b.coallocate("c1", parts(3), Some(SEARCH));
    b.drain().for_each(drop);
    b.coallocated(Time(3), "c1", CoAnswer::Failed("no co-allocation fits".into()));
    let stored = lines(&b.drain().collect::<Vec<_>>());
    assert_eq!(stored.len(), 3);
    for (k, (id, state, detail)) in stored.into_iter().enumerate() {
        assert_eq!(id, format!("c1-{k}"));
        assert_eq!(
            (state, detail.as_deref()),
            (BrokerState::Failed, Some("no co-allocation fits"))
        );
    }
    assert_eq!(b.unfinished("ann"), 0);
    // Answered twice: nothing more happens.
    b.coallocated(Time(4), "c1", CoAnswer::Failed("again".into()));
    assert_eq!(b.drain().count(), 0);
}

#[test]
fn a_part_cancelled_while_placed_is_withdrawn_and_a_restart_completes_or_undoes_the_rest() {
    let mut b = broker(params());
    b.coallocate("c1", parts(2), Some(SEARCH));
    b.drain().for_each(drop);
    b.cancel(Time(2), "ann", "c1-0").unwrap();
    b.coallocated(
        Time(3),
        "c1",
        CoAnswer::Placed(vec![(0, "a-7".into(), Time(50)), (1, "b-9".into(), Time(50))]),
    );
    let effects: Vec<Effect> = b.drain().collect();
    assert!(effects.contains(&Effect::Withdraw {
        site: 0,
        site_job: "a-7".into(),
        owner: "ann".into()
    }));
    assert_eq!(b.job("c1-1").unwrap().state(), BrokerState::Dispatched);

    // After a restart: settled by the driver, no search asked for.
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    b.coallocate("c1", parts(2), None);
    assert_eq!(b.drain().count(), 0);
    b.coallocated(
        Time(9),
        "c1",
        CoAnswer::Completed(vec![(1, "b-1".into()), (0, "a-2".into())]),
    );
    let v = b.job("c1-0").unwrap();
    assert_eq!(
        (v.state(), v.site_job.as_deref()),
        (BrokerState::Dispatched, Some("b-1"))
    );
    let stored = lines(&b.drain().collect::<Vec<_>>());
    assert_eq!(
        stored[0].2.as_deref(),
        Some("to b, co-allocated (completed after a restart)")
    );
    // An answer that leaves a part out fails that part.
    let mut b = broker(params());
    b.coallocate("c1", parts(2), None);
    b.coallocated(Time(9), "c1", CoAnswer::Completed(vec![(1, "b-1".into())]));
    assert_eq!(b.job("c1-0").unwrap().state(), BrokerState::Dispatched);
    assert!(b.job("c1-1").is_none(), "failed and let go");
}

#[test]
fn a_planned_task_held_waits_is_cancelled_by_its_owner_or_goes_as_it_reads_when_ready() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    let planned = |id: &str| {
        let mut v = BrokerJob::new(id.into(), "ann".into(), "json".into(), Entry::Planned, Time(1));
        v.member = jobs::Member::Task {
            workflow: "w1".into(),
            task: 0,
            attempt: 0,
        };
        v
    };
    b.adopt(planned("t0"), job("t0", 2).job, JobPreferences::default());
    b.adopt(planned("t1"), job("t1", 2).job, JobPreferences::default());
    assert_eq!(b.decide(Time(2), 10), 0, "planned tasks wait for their parents");
    // Its owner cancels one before its turn: the core's rules, no site asked.
    assert_eq!(
        b.cancel(Time(3), "ann", "t1"),
        Ok(Applied::Entered(BrokerState::Cancelled))
    );
    assert!(b.job("t1").is_none());
    // The other's turn: taken from the record the core holds, as the job
    // now reads (an input named), and decided.
    let mut now_reads = job("t0", 2).job;
    now_reads.arguments = vec!["in.txt".into()];
    b.ready(
        Time(4),
        planned("t0"),
        now_reads,
        JobPreferences::default(),
        "parents ended".into(),
    )
    .unwrap();
    assert_eq!(b.description("t0").unwrap().arguments, ["in.txt"]);
    assert_eq!(b.unfinished("ann"), 1);
    // Ready twice: refused, nothing changes.
    b.drain().for_each(drop);
    assert!(b
        .ready(
            Time(4),
            planned("t0"),
            job("t0", 2).job,
            JobPreferences::default(),
            "again".into()
        )
        .is_err());
    assert_eq!(b.drain().count(), 0);
    assert_eq!(b.decide(Time(5), 10), 1);
}

#[test]
fn a_move_a_restart_interrupted_ends_where_it_was_and_an_unreadable_job_fails() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    let mut moving = BrokerJob::new("j1".into(), "ann".into(), "json".into(), Entry::Accepted, Time(1));
    for change in [
        Change::Dispatch {
            site: "a".into(),
            site_job: "a-1".into(),
            tts: None,
            ttd: None,
        },
        Change::StartMove,
    ] {
        jobs::apply(&mut moving, change, Time(1)).unwrap();
    }
    b.inherit(Time(9), moving, job("j1", 1).job, JobPreferences::default());
    let v = b.job("j1").unwrap();
    assert_eq!(
        (v.state(), v.site_job.as_deref()),
        (BrokerState::Dispatched, Some("a-1"))
    );
    assert_eq!(b.drain().count(), 1, "stored as it now is");
    // Its site's reports reach it there.
    let running = Report {
        phase: JobPhase::Running,
        started: Some(Time(10)),
        ended: None,
        exit_code: None,
        reason: None,
    };
    assert!(b.reported(Time(10), 0, "a-1", running));
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Running);
    b.drain().for_each(drop);
    // A stored job whose description no longer reads fails with why.
    let lost = BrokerJob::new("j2".into(), "ann".into(), "json".into(), Entry::Accepted, Time(1));
    b.refuse(Time(11), lost, "its description cannot be read back".into());
    assert_eq!(
        lines(&b.drain().collect::<Vec<_>>()),
        [(
            "j2".into(),
            BrokerState::Failed,
            Some("its description cannot be read back".into())
        )]
    );
    assert!(b.job("j2").is_none());
}

/// A job of `cpus` that asks for reservations.
fn reserving(id: &str, cpus: u32) -> NewJob {
    let mut n = job(id, cpus);
    n.prefs.use_reservations = Some(true);
    n
}

/// A broker over `a` and `b` that take reservations, holding on `k` sites.
fn reserving_broker(k: usize) -> BrokerCore {
    let mut b = BrokerCore::new(
        vec!["a".into(), "b".into()],
        BrokerParams {
            reserve_top_k: k,
            persist: true,
            ..params()
        },
    );
    for (s, name) in ["a", "b"].into_iter().enumerate() {
        let info = ResourceInfo {
            reservations: true,
            ..site(name, 4)
        };
        b.informed(s, Ok(info), Time(0));
    }
    b
}

#[test]
fn a_job_that_reserves_holds_on_its_best_sites_and_goes_where_its_hold_starts_first() {
    let mut b = reserving_broker(2);
    b.accept(Time(1), "ann", vec![reserving("j1", 2)]).unwrap();
    b.drain();
    b.decide(Time(1), 10);
    let asked: Vec<Effect> = b.drain().collect();
    let holds: Vec<(usize, Time)> = asked
        .iter()
        .map(|e| match e {
            Effect::Hold {
                site,
                owner,
                request,
                until,
                ..
            } => {
                assert_eq!((owner.as_str(), request.amount, *until), ("ann", 2, Time(601)));
                (*site, request.earliest)
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(holds, [(0, Time(1)), (1, Time(1))], "both sites, nothing sent yet");
    // a can hold it only later; b at once: b is best now.
    b.held(
        Time(2),
        "j1",
        0,
        Ok(Reply::Granted {
            id: ReservationId(5),
            start: Time(3000),
        }),
    );
    assert!(b.drain().next().is_none(), "sent once every hold is answered");
    b.held(
        Time(2),
        "j1",
        1,
        Ok(Reply::Granted {
            id: ReservationId(9),
            start: Time(1),
        }),
    );
    let out: Vec<Effect> = b.drain().collect();
    assert_eq!(
        out,
        [Effect::Send {
            job: "j1".into(),
            site: 1,
            wall: Some(Duration(600)),
            claim: Some(Claim {
                reservation: 9,
                release_with_job: true,
                explicit_commit: false
            }),
            delegation: None,
        }]
    );
    b.sent(Time(3), "j1", 1, Ok("b-1".into()));
    let out: Vec<Effect> = b.drain().collect();
    // The hold at a goes back; the dispatch names the reservation used.
    assert!(out.contains(&Effect::Release {
        site: 0,
        reservation: 5,
        owner: "ann".into()
    }));
    let stored = lines(&out);
    assert_eq!(
        stored,
        [(
            "j1".into(),
            BrokerState::Dispatched,
            Some("to b, in reservation 9".into())
        )]
    );
    // b was not counted at the decision: it is asked again.
    b.stale(Time(3));
    assert_eq!(b.drain().collect::<Vec<_>>(), [Effect::Fetch { site: 1 }]);
}

#[test]
fn a_refused_hold_still_sends_the_job_and_a_refused_send_gives_its_hold_back() {
    let mut b = reserving_broker(1);
    b.accept(Time(1), "ann", vec![reserving("j1", 2)]).unwrap();
    b.decide(Time(1), 10);
    b.drain();
    // Only the best (a, listed first) is asked; it refuses the hold.
    b.held(Time(1), "j1", 0, Err(SiteError::Unavailable("down".into())));
    let out: Vec<Effect> = b.drain().collect();
    assert!(
        matches!(
            &out[..],
            [Effect::Send {
                site: 0,
                claim: None,
                ..
            }]
        ),
        "{out:?}"
    );
    // Again, granted this time, but the send is refused: the hold goes
    // back and the next candidate is sent without one.
    let mut b = reserving_broker(1);
    b.accept(Time(1), "ann", vec![reserving("j1", 2)]).unwrap();
    b.decide(Time(1), 10);
    b.drain();
    let granted = Reply::Granted {
        id: ReservationId(5),
        start: Time(1),
    };
    b.held(Time(1), "j1", 0, Ok(granted));
    b.drain();
    let refused = SiteError::Refused {
        site: "a".into(),
        reason: "full".into(),
    };
    b.sent(Time(2), "j1", 0, Err(refused));
    let out: Vec<Effect> = b.drain().collect();
    assert!(
        matches!(
            &out[..],
            [Effect::Send {
                site: 1,
                claim: None,
                ..
            }]
        ),
        "{out:?}"
    );
    b.sent(Time(2), "j1", 1, Ok("b-1".into()));
    let out: Vec<Effect> = b.drain().collect();
    assert!(out.contains(&Effect::Release {
        site: 0,
        reservation: 5,
        owner: "ann".into()
    }));
}

#[test]
fn a_job_cancelled_while_its_holds_are_asked_gives_them_all_back_and_is_not_sent() {
    let mut b = reserving_broker(2);
    b.accept(Time(1), "ann", vec![reserving("j1", 2)]).unwrap();
    b.decide(Time(1), 10);
    b.drain();
    b.cancel(Time(1), "ann", "j1").unwrap();
    for (site, rid) in [(0, 5), (1, 9)] {
        let granted = Reply::Granted {
            id: ReservationId(rid),
            start: Time(1),
        };
        b.held(Time(2), "j1", site, Ok(granted));
    }
    let out: Vec<Effect> = b.drain().filter(|e| !matches!(e, Effect::Persist { .. })).collect();
    assert_eq!(
        out,
        [
            Effect::Release {
                site: 0,
                reservation: 5,
                owner: "ann".into()
            },
            Effect::Release {
                site: 1,
                reservation: 9,
                owner: "ann".into()
            }
        ]
    );
}

#[test]
fn a_workflows_task_is_taken_when_ready_and_sent_into_its_reservation_which_ends_with_it() {
    let mut b = broker(BrokerParams {
        persist: true,
        ..params()
    });
    let mut task = BrokerJob::new("w1-t0".into(), "ann".into(), "json".into(), Entry::Planned, Time(1));
    task.member = jobs::Member::Task {
        workflow: "w1".into(),
        task: 0,
        attempt: 0,
    };
    let mut spec = job("w1-t0", 2).job;
    spec.reservation = Some("r1".into());
    // Not before its parents ended: a planned job is not decided.
    b.ready(
        Time(5),
        task,
        spec,
        JobPreferences::default(),
        "its parents ended".into(),
    )
    .unwrap();
    let stored = lines(&b.drain().collect::<Vec<_>>());
    assert_eq!(
        stored,
        [("w1-t0".into(), BrokerState::Accepted, Some("its parents ended".into()))]
    );
    assert_eq!(b.decide(Time(5), 10), 1);
    b.drain();
    let r1 = Reserved {
        workflow: true,
        ..anns_r1()
    };
    b.resolved(Time(5), "w1-t0", Ok(Some(r1)));
    let out: Vec<Effect> = b.drain().collect();
    assert!(
        matches!(
            &out[..],
            [Effect::Send {
                site: 1,
                claim: Some(Claim {
                    reservation: 7,
                    release_with_job: true,
                    explicit_commit: false
                }),
                ..
            }]
        ),
        "{out:?}"
    );
}

/// A job of `cpus` whose owner asked for queue adaptation.
fn adapting(id: &str, cpus: u32) -> NewJob {
    let mut n = job(id, cpus);
    n.prefs.queue_adaptation = Some(true);
    n
}

#[test]
fn adaptation_moves_a_waiting_job_to_a_site_that_delivers_it_sooner_after_its_site_lets_it_go() {
    let mut b = broker(BrokerParams {
        persist: true,
        adapt_margin: Duration(60),
        ..params()
    });
    b.accept(Time(1), "ann", vec![adapting("j1", 4)]).unwrap();
    b.decide(Time(1), 10);
    land_all(&mut b, Time(1));
    assert_eq!(b.job("j1").unwrap().site.as_deref(), Some("a"));
    b.drain();
    // A round: a is asked where the job stands.
    b.adapt(Time(100));
    let asked: Vec<Effect> = b.drain().collect();
    assert_eq!(
        asked,
        [Effect::Status {
            job: "j1".into(),
            site: 0,
            site_job: "0-0".into()
        }]
    );
    // It waits at a until 5000; b is free: moved, a asked to let it go first.
    b.status(
        Time(100),
        "j1",
        Ok(crate::site::JobState::Queued {
            expected_start: Some(Time(5000)),
        }),
    );
    let out: Vec<Effect> = b.drain().collect();
    assert!(
        out.contains(&Effect::Withdraw {
            site: 0,
            site_job: "0-0".into(),
            owner: "ann".into()
        }),
        "{out:?}"
    );
    assert!(
        lines(&out).is_empty(),
        "a move is no state of its history until it lands"
    );
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Moving);
    // A report of the copy being let go changes nothing.
    let gone = Report {
        phase: JobPhase::Cancelled,
        started: None,
        ended: Some(Time(100)),
        exit_code: None,
        reason: None,
    };
    b.reported(Time(100), 0, "0-0", gone);
    assert_eq!(b.job("j1").unwrap().state(), BrokerState::Moving);
    b.withdrawn(Time(101), 0, "0-0", Ok(())).unwrap();
    let out: Vec<Effect> = b.drain().collect();
    assert!(out.contains(&Effect::Retired {
        job: "j1".into(),
        site: 0,
        site_job: "0-0".into()
    }));
    let sent: Vec<usize> = out
        .iter()
        .filter_map(|e| match e {
            Effect::Send { site, .. } => Some(*site),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [1]);
    b.sent(Time(101), "j1", 1, Ok("b-7".into()));
    let v = b.job("j1").unwrap();
    assert_eq!(
        (v.state(), v.site.as_deref(), v.site_job.as_deref()),
        (BrokerState::Dispatched, Some("b"), Some("b-7"))
    );
    assert_eq!(b.moved(), 1);
    let stored = lines(&b.drain().collect::<Vec<_>>());
    assert_eq!(
        stored,
        [(
            "j1".into(),
            BrokerState::Dispatched,
            Some("moved from a to b: predicted to deliver sooner".into())
        )]
    );
}

#[test]
fn adaptation_leaves_a_job_that_started_gains_too_little_or_whose_site_keeps_it() {
    let mut b = broker(BrokerParams {
        adapt_margin: Duration(600),
        ..params()
    });
    b.accept(Time(1), "ann", vec![adapting("j1", 4), job("plain", 1)])
        .unwrap();
    b.decide(Time(1), 10);
    land_all(&mut b, Time(1));
    b.drain();
    b.adapt(Time(100));
    // Only the job that asked for it is looked at.
    let asked: Vec<Effect> = b.drain().collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    // Started: stays.
    b.status(Time(100), "j1", Ok(crate::site::JobState::Running { since: Time(50) }));
    assert!(b.drain().next().is_none());
    // A round at `t` where a says j1 waits until `start`.
    let waits_until = |b: &mut BrokerCore, t: i64, start: i64| {
        b.adapt(Time(t));
        b.drain();
        let queued = crate::site::JobState::Queued {
            expected_start: Some(Time(start)),
        };
        b.status(Time(t), "j1", Ok(queued));
        b.drain().collect::<Vec<_>>()
    };
    // Waits 500 s more at a: b would gain less than the margin (600 s).
    assert!(waits_until(&mut b, 200, 700).is_empty());
    // Waits long: a is asked to let it go, but cannot; it stays at a.
    assert_eq!(waits_until(&mut b, 300, 9000).len(), 1);
    let kept = b.withdrawn(Time(301), 0, "0-0", Err(SiteError::Unavailable("down".into())));
    assert!(kept.is_err());
    let v = b.job("j1").unwrap();
    assert_eq!((v.state(), v.site.as_deref()), (BrokerState::Dispatched, Some("a")));
    assert_eq!(b.moved(), 0);
}

/// [AB-avail]'s violations, judged when a job's start is first reported:
/// two jobs predicted to start at once (both sites idle), one starting
/// 20 s after its decision (within the tolerance), one 21 s after; the
/// first report of a start counts, a repeat does not. Every request to a
/// site is counted by kind as the driver drains it.
#[test]
fn a_start_later_than_predicted_by_more_than_the_tolerance_is_a_violation() {
    let mut b = broker(params());
    b.accept(Time(1), "ann", vec![job("j1", 4), job("j2", 4)]).unwrap();
    b.decide(Time(1), usize::MAX);
    assert_eq!(land_all(&mut b, Time(1)).len(), 2);
    let started = |t: i64| Report {
        phase: JobPhase::Running,
        started: Some(Time(t)),
        ended: None,
        exit_code: None,
        reason: None,
    };
    b.reported(Time(21), 0, "0-0", started(21));
    assert_eq!(b.violations(), 0, "20 s late is within the tolerance");
    b.reported(Time(22), 1, "1-1", started(22));
    assert_eq!(b.violations(), 1);
    b.reported(Time(30), 1, "1-1", started(22));
    assert_eq!(b.violations(), 1, "a start is judged once");
    let r = b.requests();
    assert_eq!((r.info, r.submit, r.messages()), (0, 2, 4));
}

#[test]
fn a_job_that_ends_early_frees_its_site_in_the_brokers_view_at_the_next_decision() {
    // Within an hour's time-to-live the broker would read site a as full
    // for the whole ten minutes the job may run; told of its end, it asks
    // a again first, unless its sites publish only at an interval.
    for ask_after_end in [true, false] {
        let mut b = broker(BrokerParams {
            info_ttl: Duration(3600),
            ask_after_end,
            ..params()
        });
        b.accept(Time(1), "ann", vec![job("j1", 4)]).unwrap();
        b.decide(Time(1), 1);
        assert_eq!(land_all(&mut b, Time(1)), [("j1".to_string(), 0)]);
        // The site's answer shows the job running.
        b.informed(
            0,
            Ok(ResourceInfo {
                free_slots: 0,
                ..site("a", 4)
            }),
            Time(2),
        );
        let ended = Report {
            phase: JobPhase::Finished,
            started: Some(Time(2)),
            ended: Some(Time(3)),
            exit_code: Some(0),
            reason: None,
        };
        b.stale(Time(3));
        assert_eq!(b.drain().filter(|e| matches!(e, Effect::Fetch { .. })).count(), 0);
        assert!(b.reported(Time(3), 0, "0-0", ended));
        b.stale(Time(4));
        let asked: Vec<Effect> = b.drain().filter(|e| matches!(e, Effect::Fetch { .. })).collect();
        let expected = if ask_after_end {
            vec![Effect::Fetch { site: 0 }]
        } else {
            Vec::new()
        };
        assert_eq!(asked, expected, "ask_after_end = {ask_after_end}");
    }
}

/// Job `id` of `cpus` processors for 600 s that must end by `deadline`.
fn due(id: &str, cpus: u32, deadline: i64) -> NewJob {
    let mut j = job(id, cpus);
    j.job.deadline = Some(Time(deadline));
    j
}

/// The holds asked for, as (job, site, earliest, latest, duration); the
/// rest drained too.
fn holds(b: &mut BrokerCore) -> Vec<(String, usize, i64, i64, i64)> {
    b.drain()
        .filter_map(|e| match e {
            Effect::Hold { job, site, request, .. } => {
                Some((job, site, request.earliest.0, request.latest.0, request.duration.0))
            }
            _ => None,
        })
        .collect()
}

/// Why job `id` failed, from the last record given out to be stored.
fn failure(effects: &[Effect], id: &str) -> Option<String> {
    effects.iter().rev().find_map(|e| match e {
        Effect::Persist { job, .. } if job.id == id => job.reason.clone(),
        _ => None,
    })
}

#[test]
fn a_job_with_a_deadline_reserves_its_earliest_slot_and_tries_the_next_when_it_is_gone() {
    let mut b = reserving_broker(0);
    b.accept(Time(10), "ann", vec![due("j1", 4, 2000)]).unwrap();
    b.decide(Time(10), 1);
    // Both sites are idle: the slot at once on a (listed first), exactly.
    assert_eq!(holds(&mut b), [("j1".to_string(), 0, 10, 10, 600)]);
    // a's slot is gone (a local job took it): a violation; a's next start
    // (500) is later than b's, so b's slot is asked for next.
    b.held(
        Time(10),
        "j1",
        0,
        Ok(Reply::Rejected {
            next_start: Some(Time(500)),
        }),
    );
    assert_eq!(b.refused_slots(), 1);
    assert_eq!(holds(&mut b), [("j1".to_string(), 1, 10, 10, 600)]);
    b.held(
        Time(10),
        "j1",
        1,
        Ok(Reply::Granted {
            id: ReservationId(7),
            start: Time(10),
        }),
    );
    let sent: Vec<Effect> = b.drain().filter(|e| matches!(e, Effect::Send { .. })).collect();
    assert_eq!(
        sent,
        [Effect::Send {
            job: "j1".into(),
            site: 1,
            wall: Some(Duration(600)),
            claim: Some(Claim {
                reservation: 7,
                release_with_job: true,
                explicit_commit: false
            }),
            delegation: None,
        }]
    );
    b.sent(Time(10), "j1", 1, Ok("b-1".into()));
    let j = b.job("j1").unwrap();
    assert_eq!((j.state(), j.site.as_deref()), (BrokerState::Dispatched, Some("b")));
    // a, whose slot was gone, is asked for its information again.
    b.stale(Time(11));
    assert_eq!(
        b.drain()
            .filter(|e| matches!(e, Effect::Fetch { .. }))
            .collect::<Vec<_>>(),
        [Effect::Fetch { site: 0 }]
    );
}

#[test]
fn a_refused_slot_may_be_taken_again_at_the_sites_next_start_while_it_ends_by_the_deadline() {
    let mut b = reserving_broker(0);
    // b is busy for 300 s in the broker's view; a's slot at once is gone
    // and its next start (100) still ends by 1000, before b's.
    b.informed(
        1,
        Ok(ResourceInfo {
            free_slots: 0,
            estimated_wait: Some(Duration(300)),
            reservations: true,
            ..site("b", 4)
        }),
        Time(0),
    );
    b.accept(Time(0), "ann", vec![due("j1", 4, 1000)]).unwrap();
    b.decide(Time(0), 1);
    assert_eq!(holds(&mut b), [("j1".to_string(), 0, 0, 0, 600)]);
    b.held(
        Time(0),
        "j1",
        0,
        Ok(Reply::Rejected {
            next_start: Some(Time(100)),
        }),
    );
    assert_eq!(holds(&mut b), [("j1".to_string(), 0, 100, 100, 600)]);
}

#[test]
fn a_job_that_cannot_end_by_its_deadline_fails_with_every_sites_reason() {
    // Nowhere in time from the start: nothing is reserved.
    let mut b = reserving_broker(0);
    b.accept(Time(0), "ann", vec![due("late", 4, 300)]).unwrap();
    b.decide(Time(0), 1);
    let effects: Vec<Effect> = b.drain().collect();
    assert!(!effects
        .iter()
        .any(|e| matches!(e, Effect::Hold { .. } | Effect::Send { .. })));
    let why = failure(&effects, "late").expect("failed");
    assert!(why.starts_with("no site can end it by its deadline"), "{why}");
    assert!(
        why.contains("a: it would end at") && why.contains("b: it would end at"),
        "{why}"
    );
    // Both slots gone, and neither site's next start ends in time: two
    // violations, then failed.
    b.accept(Time(0), "ann", vec![due("j2", 4, 1000)]).unwrap();
    b.decide(Time(0), 1);
    let asked = holds(&mut b);
    assert_eq!(asked.len(), 1);
    b.held(
        Time(0),
        "j2",
        asked[0].1,
        Ok(Reply::Rejected {
            next_start: Some(Time(900)),
        }),
    );
    let asked = holds(&mut b);
    assert_eq!(asked.len(), 1);
    b.held(Time(0), "j2", asked[0].1, Ok(Reply::Rejected { next_start: None }));
    let effects: Vec<Effect> = b.drain().collect();
    assert!(!effects
        .iter()
        .any(|e| matches!(e, Effect::Hold { .. } | Effect::Send { .. })));
    assert_eq!(b.refused_slots(), 2);
    let why = failure(&effects, "j2").expect("failed");
    assert!(why.starts_with("no site can end it by its deadline"), "{why}");
    assert!(why.contains("its slot was gone"), "{why}");
    assert!(b.job("j2").is_none());
}

#[test]
fn a_site_that_pushes_its_information_is_not_asked_until_its_stream_is_down() {
    let mut b = broker(BrokerParams {
        info_ttl: Duration(60),
        ..params()
    });
    b.pushed(0, true);
    // Long after the time-to-live, only b is asked.
    b.stale(Time(1000));
    assert_eq!(b.drain().collect::<Vec<_>>(), [Effect::Fetch { site: 1 }]);
    // A push is the site's answer: the job is decided on it.
    b.informed(
        0,
        Ok(ResourceInfo {
            free_slots: 0,
            ..site("a", 4)
        }),
        Time(1000),
    );
    b.informed(1, Ok(site("b", 4)), Time(1000));
    b.accept(Time(1000), "ann", vec![job("j1", 4)]).unwrap();
    b.decide(Time(1000), 1);
    assert_eq!(sends(&mut b), [("j1".to_string(), 1)]);
    // The stream is down: asked again.
    b.pushed(0, false);
    b.stale(Time(2000));
    let asked: Vec<Effect> = b.drain().filter(|e| matches!(e, Effect::Fetch { .. })).collect();
    assert_eq!(asked, [Effect::Fetch { site: 0 }, Effect::Fetch { site: 1 }]);
}

#[test]
fn a_job_no_site_could_ever_run_is_named_before_it_is_taken() {
    let b = broker(params());
    let why = b.runs_nowhere(&job("big", 64).job).expect("too wide for both");
    assert_eq!(
        why,
        "no site can run it: a: it asks for 64 processors, the site has at most 4; \
         b: it asks for 64 processors, the site has at most 4"
    );
    assert_eq!(b.runs_nowhere(&job("fits", 4).job), None);
    // A site that has not answered may be the one.
    let mut c = BrokerCore::new(vec!["a".into(), "b".into()], params());
    c.informed(0, Ok(site("a", 4)), Time(0));
    assert_eq!(c.runs_nowhere(&job("big", 64).job), None);
}

/// A broker `home` over its own site `own` (2 slots) and two sibling
/// brokers, `n1` (4 slots, 1 free) and `n2` (4 slots, 3 free), all known at 0.
fn delegating(threshold: i64) -> BrokerCore {
    let mut b = BrokerCore::new(vec!["n1".into(), "n2".into(), "own".into()], params());
    b.delegate(Delegating {
        name: "home".into(),
        threshold: Duration(threshold),
        ttl: 2,
        neighbours: [(0, Relation::Sibling), (1, Relation::Sibling)].into(),
    });
    b.informed(
        0,
        Ok(ResourceInfo {
            free_slots: 1,
            ..site("n1", 4)
        }),
        Time(0),
    );
    b.informed(
        1,
        Ok(ResourceInfo {
            free_slots: 3,
            ..site("n2", 4)
        }),
        Time(0),
    );
    b.informed(2, Ok(site("own", 2)), Time(0));
    b
}

#[test]
fn a_job_the_own_sites_cannot_start_goes_to_the_freest_neighbour_then_the_next_then_home() {
    let mut b = delegating(0);
    // The first job fits the own site at once: no neighbour is asked.
    b.accept(Time(1), "ann", vec![job("j1", 2)]).unwrap();
    b.decide(Time(1), 1);
    let out: Vec<Effect> = b.drain().collect();
    let sent: Vec<_> = out.iter().filter(|e| matches!(e, Effect::Send { .. })).collect();
    assert!(
        matches!(
            sent[..],
            [Effect::Send {
                site: 2,
                delegation: None,
                ..
            }]
        ),
        "{sent:?}"
    );
    b.sent(Time(1), "j1", 2, Ok("own-1".into()));
    // The second would wait at home: it goes to n2 (3 free) first, with
    // the path and one hop less.
    b.accept(Time(2), "ann", vec![job("j2", 1)]).unwrap();
    b.decide(Time(2), 1);
    let hop = Delegation {
        ttl: 1,
        path: vec!["home".into()],
    };
    let first: Vec<Effect> = b.drain().filter(|e| matches!(e, Effect::Send { .. })).collect();
    assert_eq!(
        first,
        [Effect::Send {
            job: "j2".into(),
            site: 1,
            wall: Some(Duration(600)),
            claim: None,
            delegation: Some(hop.clone()),
        }]
    );
    // n2 rejects: n1 is asked next, then, rejected again, the own site.
    let reject = |site: &str| {
        Err(SiteError::Refused {
            site: site.into(),
            reason: "delegation loop".into(),
        })
    };
    b.sent(Time(2), "j2", 1, reject("n2"));
    let next: Vec<(usize, Option<Delegation>)> = b
        .drain()
        .filter_map(|e| match e {
            Effect::Send { site, delegation, .. } => Some((site, delegation)),
            _ => None,
        })
        .collect();
    assert_eq!(next, [(0, Some(hop))]);
    b.sent(Time(2), "j2", 0, reject("n1"));
    let home: Vec<(usize, Option<Delegation>)> = b
        .drain()
        .filter_map(|e| match e {
            Effect::Send { site, delegation, .. } => Some((site, delegation)),
            _ => None,
        })
        .collect();
    assert_eq!(home, [(2, None)], "the job stays home, never starving");
    b.sent(Time(2), "j2", 2, Ok("own-2".into()));
    assert_eq!(b.job("j2").unwrap().site.as_deref(), Some("own"));
}

#[test]
fn a_threshold_keeps_short_waits_home_and_a_job_without_hops_is_never_delegated() {
    // A wait of up to an hour is taken at home.
    let mut b = delegating(3600);
    b.accept(Time(1), "ann", vec![job("j1", 2), job("j2", 2)]).unwrap();
    b.decide(Time(1), 2);
    assert_eq!(sends(&mut b).iter().map(|s| s.1).collect::<Vec<_>>(), [2, 2]);
    // A job that came with no hop left stays with the own sites.
    let mut b = delegating(0);
    b.accept(Time(1), "ann", vec![job("j1", 2)]).unwrap();
    b.decide(Time(1), 1);
    land_all(&mut b, Time(1));
    let mut view = BrokerJob::new("j2".into(), "alpha".into(), "json".into(), Entry::Accepted, Time(2));
    view.delegated = Some(Delegation {
        ttl: 0,
        path: vec!["alpha".into()],
    });
    view.runs_as = Some("ann".into());
    b.adopt(view, job("j2", 1).job, JobPreferences::default());
    b.decide(Time(2), 1);
    assert_eq!(sends(&mut b).iter().map(|s| s.1).collect::<Vec<_>>(), [2]);
}

#[test]
fn a_delegated_job_is_admitted_with_room_at_home_or_onward_and_never_back_along_its_path() {
    let mut b = delegating(0);
    let d = |ttl, path: &[&str]| Delegation {
        ttl,
        path: path.iter().map(|s| s.to_string()).collect(),
    };
    let j = job("x", 2).job;
    let prefs = JobPreferences::default();
    // Room at home (2 free).
    assert_eq!(b.admits(&j, &prefs, &d(1, &["alpha"]), Time(1)), Ok(()));
    assert_eq!(
        b.admits(&j, &prefs, &d(1, &["alpha", "home"]), Time(1)),
        Err(Reject::Loop("home".into()))
    );
    // Home full: n2 (3 free) could take it, if a hop is left and n2 is not
    // on the path.
    b.accept(Time(1), "ann", vec![job("j1", 2)]).unwrap();
    b.decide(Time(1), 1);
    land_all(&mut b, Time(1));
    assert_eq!(b.admits(&j, &prefs, &d(1, &["alpha"]), Time(2)), Ok(()));
    let no_room = Err(Reject::NoRoom("home".into()));
    assert_eq!(b.admits(&j, &prefs, &d(0, &["alpha"]), Time(2)), no_room);
    assert_eq!(
        b.admits(&j, &prefs, &d(1, &["n2"]), Time(2)),
        no_room,
        "n1 has 1 free, n2 is on the path"
    );
}

/// A parent whose published chain of parents comes back here is a
/// misconfigured link: its answer counts as a failure, so no job goes up
/// it, and the chain this broker publishes goes on through it (cut where
/// it comes back), so every broker of the cycle finds it.
#[test]
fn a_parent_whose_chain_of_parents_comes_back_here_is_not_used() {
    let mut b = BrokerCore::new(vec!["up".into(), "own".into()], params());
    b.delegate(Delegating {
        name: "home".into(),
        threshold: Duration(0),
        ttl: 2,
        neighbours: [(0, Relation::Parent)].into(),
    });
    assert!(b.ancestors() == ["up"], "the parent alone before it answers");
    let parent = |chain: &[&str]| ResourceInfo {
        ancestors: chain.iter().map(|s| s.to_string()).collect(),
        ..site("up", 4)
    };
    b.informed(0, Ok(parent(&["root"])), Time(0));
    b.informed(1, Ok(site("own", 2)), Time(0));
    assert_eq!(b.ancestors(), ["up", "root"]);
    // Home full: the job goes up.
    b.accept(Time(1), "ann", vec![job("j1", 2), job("j2", 2)]).unwrap();
    b.decide(Time(1), 2);
    let sent: Vec<usize> = b
        .drain()
        .filter_map(|e| match e {
            Effect::Send { site, .. } => Some(site),
            _ => None,
        })
        .collect();
    assert_eq!(sent, [1, 0]);
    // Now up's chain leads back here.
    b.informed(0, Ok(parent(&["mid", "home", "up"])), Time(2));
    assert_eq!(b.ancestors(), ["up", "mid", "home"]);
    b.accept(Time(3), "ann", vec![job("j3", 2)]).unwrap();
    b.decide(Time(3), 1);
    let to_parent = b.drain().any(|e| matches!(e, Effect::Send { site: 0, .. }));
    assert!(!to_parent, "a job went up a cycle");
}

#[test]
fn a_site_is_down_from_the_first_answer_it_did_not_give_until_it_answers() {
    let mut b = broker(params());
    assert_eq!(b.down(), []);
    let silent = || Err(FetchFailure::Error(SiteError::Unavailable("a".into())));
    b.informed(0, silent(), Time(10));
    b.informed(0, Err(FetchFailure::Timeout(Duration(5))), Time(20));
    // Still down since the first time it was not heard.
    assert_eq!(b.down(), [(0, Time(10))]);
    // A refusal is an answer: the site is up, whatever it refused.
    b.informed(
        1,
        Err(FetchFailure::Error(SiteError::Refused {
            site: "b".into(),
            reason: "no".into(),
        })),
        Time(20),
    );
    assert_eq!(b.down(), [(0, Time(10))]);
    b.informed(0, Ok(site("a", 4)), Time(30));
    assert_eq!(b.down(), []);
    // Down again later: from then.
    b.informed(0, silent(), Time(40));
    assert_eq!(b.down(), [(0, Time(40))]);
    // A site whose health turns critical (an ARC CE's GLUE 2 HealthState)
    // is failing; one that has said nothing else yet (a CE before its
    // first information cycle) is not.
    let critical = |name: &str| {
        Ok(ResourceInfo {
            health: Some("critical".into()),
            ..site(name, 4)
        })
    };
    let mut c = BrokerCore::new(vec!["a".into(), "b".into()], params());
    c.informed(0, critical("a"), Time(0));
    c.informed(1, Ok(site("b", 4)), Time(0));
    assert_eq!(c.down(), []);
    c.informed(0, Ok(site("a", 4)), Time(10));
    c.informed(1, critical("b"), Time(10));
    c.informed(0, critical("a"), Time(20));
    assert_eq!(c.down(), [(0, Time(20)), (1, Time(10))]);
    // A site that turned critical gets no new work; one that is well again does.
    c.informed(0, Ok(site("a", 4)), Time(30));
    c.accept(Time(30), "ann", vec![job("j1", 1), job("j2", 1)]).unwrap();
    c.decide(Time(30), usize::MAX);
    assert_eq!(sends(&mut c), [("j1".to_string(), 0), ("j2".to_string(), 0)]);
}

#[test]
fn a_broker_that_rescues_steps_each_site_that_is_down_until_it_answers() {
    let rescue = crate::rescue::RescueParams {
        strategy: crate::rescue::Strategy::Next,
        step: Duration(60),
        reach: Duration(3600),
    };
    let mut b = broker(BrokerParams {
        rescue: Some(rescue),
        ..params()
    });
    assert!(b.rescues_due(Time(0)).is_empty());
    b.informed(1, Err(FetchFailure::Timeout(Duration(5))), Time(10));
    let due = b.rescues_due(Time(10));
    assert_eq!(due.len(), 1);
    let (k, mut failure) = due.into_iter().next().unwrap();
    assert_eq!((k, failure.since()), (1, Time(10)));
    failure.step(Time(10), &[], Vec::new, |_| true);
    b.rescued(k, failure);
    assert!(b.rescues_due(Time(69)).is_empty(), "stepped a minute ago");
    assert_eq!(b.rescues_due(Time(70)).len(), 1);
    // Not heard again: the same failure, not a new one.
    b.informed(1, Err(FetchFailure::Timeout(Duration(5))), Time(80));
    assert_eq!(b.rescues_due(Time(80))[0].1.since(), Time(10));
    // It answers: its rescue is over, and a step given back late is dropped.
    let (_, late) = b.rescues_due(Time(90)).remove(0);
    b.informed(1, Ok(site("b", 4)), Time(90));
    b.rescued(1, late);
    assert!(b.rescues_due(Time(1000)).is_empty());
    // Without a strategy nothing is rescued, though the site is down.
    let mut plain = broker(params());
    plain.informed(0, Err(FetchFailure::Timeout(Duration(5))), Time(10));
    assert!(plain.rescues_due(Time(10)).is_empty());
    assert_eq!(plain.down(), [(0, Time(10))]);
}

#[test]
fn a_site_that_can_no_longer_hold_some_reservations_is_rescued_for_those_and_still_takes_work() {
    let rescue = crate::rescue::RescueParams {
        strategy: crate::rescue::Strategy::All,
        step: Duration(60),
        reach: Duration(3600),
    };
    let mut b = broker(BrokerParams {
        rescue: Some(rescue),
        ..params()
    });
    let shrunk = |n: u32| {
        Ok(ResourceInfo {
            endangered_reservations: n,
            health: Some("warning".into()),
            ..site("a", 4)
        })
    };
    b.informed(0, Ok(site("a", 4)), Time(0));
    b.informed(1, Ok(site("b", 4)), Time(0));
    assert!(b.rescues_due(Time(0)).is_empty());
    // A node drained at a: it says two reservations no longer fit.
    b.informed(0, shrunk(2), Time(10));
    let due = b.rescues_due(Time(10));
    assert_eq!(due.len(), 1);
    assert!(due[0].1.is_partial() && due[0].0 == 0 && due[0].1.since() == Time(10));
    // Not down: work still goes there, and nothing booked there waits.
    assert_eq!(b.down(), []);
    assert!(b.rescuing().is_empty());
    b.accept(Time(10), "ann", vec![job("j1", 1)]).unwrap();
    b.decide(Time(10), usize::MAX);
    assert_eq!(sends(&mut b), [("j1".to_string(), 0)]);
    // Still endangered: the same rescue goes on.
    b.informed(0, shrunk(1), Time(20));
    assert_eq!(b.rescues_due(Time(20))[0].1.since(), Time(10));
    // Down altogether: the rescue is of the whole site from then.
    b.informed(0, Err(FetchFailure::Timeout(Duration(5))), Time(30));
    let (k, whole) = b.rescues_due(Time(30)).remove(0);
    assert!(k == 0 && !whole.is_partial() && whole.since() == Time(30));
    assert_eq!(b.rescuing(), [0]);
    // Back, with every reservation held: no rescue at all.
    b.informed(0, shrunk(0), Time(40));
    assert!(b.rescues_due(Time(40)).is_empty());
    // Back from being down with some endangered: rescued for those.
    b.informed(0, Err(FetchFailure::Timeout(Duration(5))), Time(50));
    b.informed(0, shrunk(1), Time(60));
    let due = b.rescues_due(Time(60));
    assert!(due.len() == 1 && due[0].1.is_partial() && due[0].1.since() == Time(60));
}

#[test]
fn an_ended_job_requeued_runs_again_under_its_id_with_a_key_of_its_own() {
    let mut b = broker(BrokerParams {
        limit: 1,
        ..BrokerParams::default()
    });
    b.accept(Time(1), "ann", vec![job("j1", 1)]).unwrap();
    b.decide(Time(1), 1);
    land_all(&mut b, Time(1));
    // Not ended yet: the core still holds it, and says why not.
    let (view, spec, prefs) = {
        let r = &b.jobs["j1"];
        (r.view.clone(), r.job.clone(), r.prefs.clone())
    };
    assert!(matches!(
        b.requeue(Time(2), "ann", view, spec.clone(), prefs.clone()),
        Err(Denied::Refused(_))
    ));
    let failed = Report {
        phase: JobPhase::Failed,
        started: Some(Time(3)),
        ended: Some(Time(4)),
        exit_code: Some(3),
        reason: Some("exited with code 3".into()),
    };
    b.reported(Time(5), 0, "0-0", failed);
    // The record as the driver stored it: the core let it go.
    let stored = b
        .drain()
        .filter_map(|e| match e {
            Effect::Persist { job, .. } => Some(*job),
            _ => None,
        })
        .collect::<Vec<_>>()
        .pop()
        .unwrap();
    assert_eq!(
        (stored.state(), stored.site_key()),
        (BrokerState::Failed, "j1".to_string())
    );
    assert!(b.is_empty());
    // Only its owner reaches it; the owner's limit counts it again.
    assert_eq!(
        b.requeue(Time(6), "bob", stored.clone(), spec.clone(), prefs.clone()),
        Err(Denied::Unknown("j1".into()))
    );
    b.accept(Time(6), "ann", vec![job("j2", 1)]).unwrap();
    assert!(matches!(
        b.requeue(Time(6), "ann", stored.clone(), spec.clone(), prefs.clone()),
        Err(Denied::OverLimit(_))
    ));
    b.cancel(Time(6), "ann", "j2").unwrap();
    b.drain().for_each(drop);
    assert_eq!(
        b.requeue(Time(7), "ann", stored.clone(), spec.clone(), prefs.clone()),
        Ok(Applied::Entered(BrokerState::Accepted))
    );
    let effects: Vec<Effect> = b.drain().collect();
    // Its last run's copy is no longer the job's; its next run starts clean.
    assert!(effects.contains(&Effect::Retired {
        job: "j1".into(),
        site: 0,
        site_job: "0-0".into()
    }));
    let line = effects.iter().find_map(|e| match e {
        Effect::Persist { job, line: Some(l) } => Some((job.clone(), l.clone())),
        _ => None,
    });
    let (again, line) = line.unwrap();
    assert_eq!(
        (line.state, line.detail.as_deref()),
        (BrokerState::Accepted, Some("requeued by its owner"))
    );
    assert_eq!(
        (again.site.as_deref(), again.exit_code, again.ended),
        (None, None, None)
    );
    assert_eq!(again.site_key(), "j1.1");
    b.decide(Time(7), 1);
    assert_eq!(sends(&mut b).len(), 1);
    // A workflow's task runs again only with its workflow.
    let mut task = stored;
    task.id = "t1".into();
    task.member = crate::jobs::Member::Task {
        workflow: "w1".into(),
        task: 0,
        attempt: 0,
    };
    assert!(matches!(
        b.requeue(Time(8), "ann", task, spec, prefs),
        Err(Denied::Refused(_))
    ));
}

#[test]
fn a_dry_run_answers_as_a_decision_would_and_changes_nothing() {
    let mut b = BrokerCore::new(vec!["a".into(), "b".into(), "c".into()], params());
    b.informed(0, Ok(site("a", 4)), Time(0));
    b.informed(1, Ok(site("b", 8)), Time(0));
    b.drain().for_each(drop);
    // j1 fills a (first listed of two equally good sites).
    b.accept(Time(0), "ann", vec![job("j1", 4)]).unwrap();
    b.decide(Time(0), 1);
    assert_eq!(sends(&mut b), [("j1".to_string(), 0)]);
    let v = b.verdict(&job("j2", 4).job, &JobPreferences::default(), Time(1));
    assert_eq!(v.chosen(), Some("b"));
    let names: Vec<&str> = v.sites.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["b", "a", "c"], "{v:?}");
    assert_eq!(
        v.sites[0].1,
        SiteAnswer::Takes {
            tts: Duration(0),
            ttd: Duration(600)
        }
    );
    // a takes it once j1 has ended there.
    let SiteAnswer::Takes { tts, .. } = v.sites[1].1 else {
        panic!("{v:?}")
    };
    assert!(tts > Duration(500), "{v:?}");
    assert!(
        matches!(&v.sites[2].1, SiteAnswer::Unavailable(why) if why.contains("no information")),
        "{v:?}"
    );
    // Too wide for a: its reason, and b alone takes it.
    let wide = b.verdict(&job("wide", 6).job, &JobPreferences::default(), Time(1));
    assert_eq!(
        wide.sites[1],
        (
            "a".to_string(),
            SiteAnswer::Cannot(vec!["it asks for 6 processors, the site has at most 4".into()])
        )
    );
    // Nothing was recorded or sent, and a decision goes where it said.
    assert_eq!(b.drain().count(), 0);
    b.accept(Time(1), "ann", vec![job("j2", 4)]).unwrap();
    b.decide(Time(1), 1);
    assert_eq!(sends(&mut b), [("j2".to_string(), 1)]);
}
