//! The site's rules on virtual time: every test drives the core directly,
//! drains its outbox and checks what it asked for.

use super::*;
use crate::runner::VirtualRunner;

pub(super) const T0: Time = Time(1_000_000);

/// An empty conservative site of `capacity` processors at `T0`.
pub(super) fn site(capacity: u32) -> SiteCore {
    SiteCore::new(SiteParams {
        capacity,
        horizon: Time(T0.0 + 365 * 86_400),
        default_wall_time: Duration(3600),
        policy: crate::queue::Policy::CONSERVATIVE.into(),
        lead: Duration(0),
    })
}

fn job(cpus: u32, wall: i64) -> Job {
    Job {
        executable: Some("/bin/true".into()),
        cpus: Some(cpus),
        wall_time: Some(Duration(wall)),
        ..Job::default()
    }
}

fn at(amount: u32, duration: i64, start: Time) -> Request {
    Request {
        amount,
        duration: Duration(duration),
        earliest: start,
        latest: start,
        flexible: false,
    }
}

fn submit(s: &mut SiteCore, now: Time, who: &str, j: Job) -> JobId {
    let (id, new) = s.submit(now, who, Submission::of(j)).unwrap();
    assert!(new);
    id
}

fn claim(s: &mut SiteCore, now: Time, r: ReservationId, j: Job) -> JobId {
    let mut j = j;
    j.reservation = Some(r.0.to_string());
    let sub = Submission {
        explicit_commit: true,
        ..Submission::of(j)
    };
    s.submit(now, "ann", sub).unwrap().0
}

#[test]
fn a_lapsed_hold_ends_and_takes_its_uncommitted_job_with_it() {
    let mut s = site(8);
    let r = s.reserve(T0, "ann", &at(4, 600, T0), Some(Time(T0.0 + 30))).unwrap();
    let effects = s.drain();
    assert!(effects.contains(&Effect::SaveReservation(r.id)));
    assert!(effects.contains(&Effect::Manager(Manager::Reserve(r.id))));
    let id = claim(&mut s, T0, r.id, job(4, 600));
    assert!(
        !s.launch(id).unwrap().committed,
        "an explicit-commit claim leaves the hold a hold"
    );
    s.drain();
    s.tick(Time(T0.0 + 29));
    assert!(s.drain().is_empty(), "nothing lapses before its time");
    s.tick(Time(T0.0 + 30));
    let effects = s.drain();
    assert!(effects.contains(&Effect::EndReservations(vec![r.id], Ended::Expired)));
    assert!(effects.contains(&Effect::Manager(Manager::Release(vec![r.id]))));
    assert!(effects.contains(&Effect::Stop(id)));
    let rec = s.record(id).unwrap();
    assert_eq!(rec.state, JobPhase::Cancelled);
    assert_eq!(rec.ended, Some(Time(T0.0 + 30)));
    assert_eq!(s.published(Time(T0.0 + 31)).free_now, 8);
    s.check_invariants();
}

#[test]
fn committing_a_hold_frees_its_waiting_job() {
    let mut s = site(8);
    let r = s.reserve(T0, "ann", &at(2, 600, T0), Some(Time(T0.0 + 30))).unwrap();
    let id = claim(&mut s, T0, r.id, job(2, 600));
    s.drain();
    assert_eq!(
        s.commit(T0, "bob", r.id),
        Err(CoreError::Forbidden(format!("reservation {}", r.id.0)))
    );
    s.commit(Time(T0.0 + 10), "ann", r.id).unwrap();
    assert!(s.drain().contains(&Effect::Committed(id)));
    s.tick(Time(T0.0 + 60));
    assert!(
        !s.record(id).unwrap().state.is_terminal(),
        "a committed hold does not lapse"
    );
    s.check_invariants();
}

#[test]
fn queued_jobs_move_up_when_a_job_ends_early() {
    let mut s = site(4);
    let a = submit(&mut s, T0, "ann", job(4, 100));
    let b = submit(&mut s, T0, "bob", job(4, 100));
    let c = submit(&mut s, T0, "cat", job(2, 50));
    assert_eq!(s.record(b).unwrap().planned_start, Some(Time(T0.0 + 100)));
    assert_eq!(s.record(c).unwrap().planned_start, Some(Time(T0.0 + 200)));
    s.drain();
    assert!(s.mark_running(a, T0));
    s.drain();
    s.finish(Time(T0.0 + 30), a, JobPhase::Finished, Some(0), None);
    let effects = s.drain();
    assert!(effects.contains(&Effect::StartMoved {
        job: b,
        start: Time(T0.0 + 30)
    }));
    assert!(effects.contains(&Effect::StartMoved {
        job: c,
        start: Time(T0.0 + 130)
    }));
    assert_eq!(s.record(a).unwrap().state, JobPhase::Finished);
    // The queue order holds: b keeps its lead over c.
    let queue: Vec<JobId> = s.queued().map(|q| q.1).collect();
    assert_eq!(queue, vec![b, c]);
    s.check_invariants();
}

#[test]
fn claims_are_checked_for_owner_size_and_use() {
    let mut s = site(8);
    let r = s.reserve(T0, "ann", &at(2, 600, Time(T0.0 + 100)), None).unwrap();
    let mut j = job(2, 600);
    j.reservation = Some(r.id.0.to_string());
    assert!(matches!(
        s.submit(T0, "bob", Submission::of(j.clone())),
        Err(CoreError::Forbidden(_))
    ));
    let mut big = job(4, 600);
    big.reservation = j.reservation.clone();
    assert!(matches!(
        s.submit(T0, "ann", Submission::of(big)),
        Err(CoreError::BadRequest(_))
    ));
    let id = submit(&mut s, T0, "ann", j.clone());
    assert_eq!(s.record(id).unwrap().planned_start, Some(Time(T0.0 + 100)));
    assert!(matches!(
        s.submit(T0, "ann", Submission::of(j)),
        Err(CoreError::Conflict(_))
    ));
    assert!(matches!(s.cancel(T0, "ann", r.id), Err(CoreError::Conflict(_))));
    // The job ends: the owner's reservation stays.
    s.finish(Time(T0.0 + 10), id, JobPhase::Finished, Some(0), None);
    assert!(s.holds_reservation(r.id));
    s.cancel(Time(T0.0 + 11), "ann", r.id).unwrap();
    assert!(!s.holds_reservation(r.id));
    s.check_invariants();
}

#[test]
fn a_repeated_key_is_one_job_and_the_feed_shows_only_ones_own() {
    let mut s = site(8);
    let sub = Submission {
        key: Some("k1".into()),
        ..Submission::of(job(1, 60))
    };
    let (a, new) = s.submit(T0, "ann", sub.clone()).unwrap();
    assert!(new);
    assert_eq!(s.submit(T0, "ann", sub.clone()).unwrap(), (a, false));
    let (b, new) = s.submit(T0, "bob", sub).unwrap();
    assert!(new && b != a, "keys are per owner");
    assert_eq!(s.job_by_key("ann", "k1").unwrap().id, a);
    assert!(matches!(s.job("bob", a), Err(CoreError::Forbidden(_))));
    let (jobs, v) = s.changes("ann", 0, 10).unwrap();
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a]);
    s.set_phase(T0, a, JobPhase::StagingIn);
    let (jobs, _) = s.changes("ann", v, 10).unwrap();
    assert_eq!(jobs.len(), 1);
    let (jobs, _) = s.changes("bob", v, 10).unwrap();
    assert!(jobs.is_empty());
    s.check_invariants();
}

#[test]
fn ended_jobs_retire_after_their_age_and_the_feed_says_what_it_lost() {
    let mut s = site(8);
    let sub = Submission {
        key: Some("k".into()),
        ..Submission::of(job(1, 60))
    };
    let (early, _) = s.submit(T0, "ann", sub).unwrap();
    let late = submit(&mut s, T0, "ann", job(1, 60));
    let live = submit(&mut s, T0, "ann", job(1, 600));
    let (_, before) = s.changes("ann", 0, 10).unwrap();
    s.finish(T0 + Duration(10), early, JobPhase::Finished, Some(0), None);
    let early_version = s.version_of(early);
    s.finish(T0 + Duration(20), late, JobPhase::Finished, Some(0), None);
    let late_version = s.version_of(late);
    let (_, caught_up) = s.changes("ann", 0, 10).unwrap();
    // Not yet old enough: nothing goes.
    assert_eq!(s.retire(T0 + Duration(10)), 0);
    assert_eq!(s.retire(T0 + Duration(15)), 1);
    assert!(matches!(s.job("ann", early), Err(CoreError::NotFound(_))));
    assert!(matches!(s.job_by_key("ann", "k"), Err(CoreError::NotFound(_))));
    assert_eq!(s.job("ann", late).unwrap().state, JobPhase::Finished);
    // A follower that had not seen the retired job's end is told to ask
    // the store; one past it is answered here.
    assert!(s.changes("ann", before, 10).is_none());
    assert!(s.changes("ann", early_version - 1, 10).is_none());
    assert_eq!(s.changes("ann", early_version, 10).unwrap().0.len(), 1);
    assert!(s.changes("ann", caught_up, 10).unwrap().0.is_empty());
    // Live jobs never retire, however old.
    assert_eq!(s.retire(T0 + Duration(1_000_000)), 1);
    assert_eq!(s.job("ann", live).unwrap().state, JobPhase::Accepted);
    s.check_invariants();
    // A restart that keeps only the live job carries on the ids and the
    // versions.
    let kept = KeptJobs {
        records: vec![(s.record(live).unwrap().clone(), s.version_of(live))],
        next_job: late.0 + 1,
        retired_through: late_version,
    };
    let (back, resume) = SiteCore::restore(
        s.params(),
        T0 + Duration(30),
        &s.planner().reservations(),
        1,
        kept,
        |_| false,
    );
    assert_eq!(resume, vec![live]);
    assert!(back.changes("ann", before, 10).is_none());
    assert_eq!(back.feed_version(), s.feed_version());
    assert_eq!(back.version_of(live), s.version_of(live));
    back.check_invariants();
    // What the resource manager still lists is a leftover only under the
    // id recorded for an ended job, whatever it is named.
    s.record_submitted(live, 43);
    let other = submit(&mut s, T0, "ann", job(1, 60));
    s.record_submitted(other, 41);
    s.finish(T0 + Duration(30), other, JobPhase::Finished, Some(0), None);
    assert_eq!(s.ended_as([41, 42, 43]), vec![(other, 41)]);
    // A manager that lost its state gave 41 to another job: it is that
    // job's now, not a leftover of the ended one.
    let next = submit(&mut s, T0, "ann", job(1, 60));
    s.record_submitted(next, 41);
    assert_eq!(s.ended_as([41, 42, 43]), vec![]);
}

#[test]
fn a_restart_fails_only_what_nobody_can_follow() {
    let mut s = site(8);
    let hold = s.reserve(T0, "ann", &at(1, 600, T0), Some(Time(T0.0 + 5))).unwrap();
    let staging_out = submit(&mut s, T0, "ann", job(4, 600));
    let running = submit(&mut s, T0, "ann", job(3, 600));
    let queued = submit(&mut s, T0, "ann", job(5, 600));
    assert_eq!(s.record(queued).unwrap().planned_start, Some(Time(T0.0 + 600)));
    s.mark_running(staging_out, T0);
    s.set_phase(T0, staging_out, JobPhase::StagingOut);
    s.mark_running(running, T0);
    let reservations = s.planner().reservations();
    let records: Vec<JobRecord> = [staging_out, running, queued]
        .iter()
        .map(|id| s.record(*id).unwrap().clone())
        .collect();
    let later = Time(T0.0 + 10);
    let (mut back, resume) = SiteCore::restore(s.params(), later, &reservations, 100, KeptJobs::all(records), |j| {
        j.id == running
    });
    assert_eq!(resume, vec![running, queued]);
    assert_eq!(back.record(staging_out).unwrap().state, JobPhase::Failed);
    let effects = back.drain();
    assert!(effects.contains(&Effect::EndReservations(vec![hold.id], Ended::Expired)));
    // The 5-CPU job moves up into what the failed job held.
    assert_eq!(back.record(queued).unwrap().planned_start, Some(later));
    let next = back.reserve(later, "ann", &at(1, 10, Time(T0.0 + 5000)), None).unwrap();
    assert!(next.id.0 >= 100, "ids of the old run are not issued again");
    back.check_invariants();
}

#[test]
fn the_mirror_books_foreign_work_and_releases_it() {
    let mut s = site(8);
    s.mirror(
        T0,
        vec![Occupant {
            key: "job:7".into(),
            start: Time(T0.0 - 100),
            end: Time(T0.0 + 1000),
            cpus: 8,
        }],
    );
    match s.reserve(T0, "ann", &at(1, 60, T0), None) {
        Err(CoreError::NotGranted(Reply::Rejected { next_start })) => {
            assert_eq!(next_start, Some(Time(T0.0 + 1000)))
        }
        other => panic!("expected a rejection until the job's time limit, got {other:?}"),
    }
    let id = submit(&mut s, T0, "ann", job(1, 60));
    assert_eq!(s.record(id).unwrap().planned_start, Some(Time(T0.0 + 1000)));
    s.mirror(Time(T0.0 + 50), Vec::new());
    assert_eq!(s.record(id).unwrap().planned_start, Some(Time(T0.0 + 50)));
    s.check_invariants();
}

#[test]
fn the_mirror_books_only_what_fits_beside_the_sites_own() {
    let mut s = site(8);
    let granted = s.reserve(T0, "ann", &at(1, 600, T0), None).unwrap();
    // The cluster reports 8 CPUs busy where the site holds 1: 7 are mirrored.
    s.mirror(
        T0,
        vec![Occupant {
            key: "res:maint".into(),
            start: T0,
            end: Time(T0.0 + 600),
            cpus: 8,
        }],
    );
    assert!(matches!(
        s.reserve(T0, "ann", &at(1, 60, T0), None),
        Err(CoreError::NotGranted(Reply::Rejected { .. }))
    ));
    assert!(
        !s.holds_reservation(ReservationId(granted.id.0 + 1)),
        "the mirror is nobody's"
    );
    s.cancel(T0, "ann", granted.id).unwrap();
    assert!(s.reserve(T0, "ann", &at(1, 60, T0), None).is_ok());
    s.check_invariants();
}

#[test]
fn an_occupant_with_no_end_known_holds_to_the_horizon() {
    let mut s = site(16);
    let node = Occupant {
        key: "node:c1n2".into(),
        start: Time(T0.0 - 50),
        end: Occupant::UNTIL_GONE,
        cpus: 8,
    };
    s.mirror(T0, vec![node.clone()]);
    // Held whole to the horizon: nothing is short, and a whole-cluster
    // request finds no room anywhere, a half-cluster one does.
    assert!(s.endangered(T0).is_empty());
    assert!(matches!(
        s.reserve(T0, "ann", &at(16, 60, Time(T0.0 + 300 * 86_400)), None),
        Err(CoreError::NotGranted(_))
    ));
    assert!(s
        .reserve(T0, "ann", &at(8, 60, Time(T0.0 + 300 * 86_400)), None)
        .is_ok());
    // The next reading with the same occupant changes nothing.
    s.drain();
    s.mirror(Time(T0.0 + 5), vec![node]);
    assert!(s.drain().is_empty());
    s.check_invariants();
}

#[test]
fn a_drained_nodes_share_endangers_the_later_reservations_until_they_move() {
    let mut s = site(16);
    let node = || Occupant {
        key: "node:c1n2".into(),
        start: T0,
        end: Time(T0.0 + 86_400),
        cpus: 8,
    };
    let half = s.reserve(T0, "ann", &at(8, 60, Time(T0.0 + 100)), None).unwrap();
    let whole = s.reserve(T0, "bob", &at(16, 600, Time(T0.0 + 200)), None).unwrap();
    assert!(s.endangered(T0).is_empty());
    // A node of 8 drained: it fits nowhere beside both, so it is mirrored
    // short, and the later, whole-cluster reservation can no longer be held.
    s.mirror(T0, vec![node()]);
    assert_eq!(s.endangered(T0), [whole.id]);
    assert_eq!(s.published(T0).endangered, 1);
    // Short only where the whole-cluster reservation is: elsewhere the
    // lost half is held, and nothing new is granted into it.
    assert!(matches!(
        s.reserve(T0, "cy", &at(16, 60, Time(T0.0 + 5000)), None),
        Err(CoreError::NotGranted(_))
    ));
    // Once it has moved away, the node's share is booked whole at the next
    // reading, and nothing new is granted into it.
    s.cancel(T0, "bob", whole.id).unwrap();
    s.mirror(Time(T0.0 + 5), vec![node()]);
    assert!(s.endangered(Time(T0.0 + 5)).is_empty());
    assert_eq!(s.published(Time(T0.0 + 5)).endangered, 0);
    assert!(matches!(
        s.reserve(Time(T0.0 + 5), "bob", &at(16, 600, Time(T0.0 + 200)), None),
        Err(CoreError::NotGranted(_))
    ));
    assert!(s
        .reserve(Time(T0.0 + 5), "bob", &at(8, 60, Time(T0.0 + 1000)), None)
        .is_ok());
    // The reservation that fitted beside it was never touched.
    assert!(s.holds_reservation(half.id));
    // A job the cluster starts on its own while ann's reservation is under
    // way is mirrored short, but a reservation under way stays, and the
    // later one fits once that job has ended.
    let job = Occupant {
        key: "job:9".into(),
        start: Time(T0.0 + 150),
        end: Time(T0.0 + 900),
        cpus: 8,
    };
    s.mirror(Time(T0.0 + 150), vec![node(), job]);
    assert!(s.endangered(Time(T0.0 + 150)).is_empty());
    s.check_invariants();
}

#[test]
fn the_virtual_runner_runs_jobs_for_their_run_time_and_moves_the_queue_up() {
    let mut s = site(4);
    let mut run = VirtualRunner::new();
    let a = submit(&mut s, T0, "ann", job(4, 100));
    let b = submit(&mut s, T0, "bob", job(4, 100));
    run.set_run_time(a, Duration(40));
    let e = s.drain();
    run.apply(&mut s, T0, e);
    assert_eq!(run.next_event(), Some(T0));
    run.advance(&mut s, T0);
    assert_eq!(s.record(a).unwrap().state, JobPhase::Running);
    assert_eq!(run.next_event(), Some(Time(T0.0 + 40)));
    run.advance(&mut s, Time(T0.0 + 40));
    assert_eq!(s.record(a).unwrap().state, JobPhase::Finished);
    let rb = s.record(b).unwrap();
    assert_eq!((rb.state, rb.started), (JobPhase::Running, Some(Time(T0.0 + 40))));
    run.advance(&mut s, Time(T0.0 + 1000));
    assert_eq!(s.record(b).unwrap().ended, Some(Time(T0.0 + 140)));
    assert_eq!(run.next_event(), None);
    s.check_invariants();
}

#[test]
fn the_virtual_runner_kills_at_wall_time_and_cancels_running_jobs() {
    let mut s = site(4);
    let mut run = VirtualRunner::new();
    let a = submit(&mut s, T0, "ann", job(2, 100));
    let b = submit(&mut s, T0, "ann", job(2, 100));
    run.set_run_time(a, Duration(500));
    let e = s.drain();
    run.apply(&mut s, T0, e);
    run.advance(&mut s, T0);
    s.cancel_job(Time(T0.0 + 10), "ann", b).unwrap();
    let e = s.drain();
    run.apply(&mut s, Time(T0.0 + 10), e);
    assert_eq!(s.record(b).unwrap().state, JobPhase::Cancelled);
    run.advance(&mut s, Time(T0.0 + 1000));
    let ra = s.record(a).unwrap();
    assert_eq!((ra.state, ra.ended), (JobPhase::Failed, Some(Time(T0.0 + 100))));
    assert_eq!(ra.reason.as_deref(), Some("wall time exceeded"));
    s.check_invariants();
}

/// Jobs of (cpus, wall) all arriving at T0 on a 4-processor site run by
/// `policy`, each running its whole wall time; their starts, seconds after T0.
fn starts_under(policy: crate::queue::Policy, jobs: &[(u32, i64)]) -> Vec<i64> {
    let local: Vec<Shaped> = jobs.iter().map(|&(c, w)| (c, w, false)).collect();
    starts_with(policy.into(), 4, &local)
}

#[test]
fn fcfs_never_lets_a_later_job_start_first() {
    // 3 of 4 processors busy; a 2-processor job must wait for them, and a
    // 1-processor job that would fit in the gap now waits behind it.
    let jobs = [(3, 100), (2, 100), (1, 50)];
    assert_eq!(starts_under(crate::queue::Policy::CONSERVATIVE, &jobs), [0, 100, 0]);
    assert_eq!(starts_under(crate::queue::Policy::Fcfs, &jobs), [0, 100, 100]);
}

/// What a broker reads of an FCFS site is what a new job could have: the
/// processor left beside a 3-wide job is free to a conservative site's
/// next job, but under FCFS a new job waits behind the queued 2-wide one,
/// so the site offers nothing before that one starts.
#[test]
fn an_fcfs_site_publishes_nothing_before_its_last_queued_start() {
    let published = |policy: crate::queue::Policy| {
        let mut s = SiteCore::new(SiteParams {
            policy: policy.into(),
            ..site(4).params()
        });
        let mut run = VirtualRunner::new();
        for (c, w) in [(3, 100), (2, 100)] {
            s.submit(T0, "ann", Submission::of(job(c, w))).unwrap();
        }
        let e = s.drain();
        run.apply(&mut s, T0, e);
        let a = s.availability(T0, Time(T0.0 + 1000), 100);
        a.ranges
            .iter()
            .map(|r| (r.start.0 - T0.0, r.end.0 - T0.0, r.free))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        published(crate::queue::Policy::CONSERVATIVE),
        [(0, 100, 1), (100, 200, 2), (200, 1000, 4)]
    );
    assert_eq!(published(crate::queue::Policy::Fcfs), [(100, 200, 2), (200, 1000, 4)]);
}

#[test]
fn easy_protects_only_the_head_so_a_backfilled_job_may_delay_the_next() {
    // The 2-processor job heads the queue (at 100); the 4-processor job
    // behind it holds a slot at 200 only under conservative backfilling, so
    // under EASY the long 1-processor job backfills at once and delays it.
    let jobs = [(3, 100), (2, 100), (4, 100), (1, 250)];
    assert_eq!(
        starts_under(crate::queue::Policy::CONSERVATIVE, &jobs),
        [0, 100, 200, 300]
    );
    assert_eq!(starts_under(crate::queue::Policy::EASY, &jobs), [0, 100, 250, 0]);
    // No protection at all: whatever fits starts, the rest wait their turn.
    assert_eq!(
        starts_under(crate::queue::Policy::Backfill { reservations: 0 }, &jobs),
        [0, 100, 250, 0]
    );
}

/// A job of (cpus, wall, whether a broker placed it for a user).
type Shaped = (u32, i64, bool);

/// The site policy named `name`.
fn named(name: &str) -> SitePolicy {
    name.parse().unwrap()
}

/// Jobs of `jobs` all arriving at T0, in order, on a `capacity`-processor
/// site run by `policy`, each running its whole wall time; their starts,
/// seconds after T0.
fn starts_with(policy: SitePolicy, capacity: u32, jobs: &[Shaped]) -> Vec<i64> {
    starts_in_order(policy, None, capacity, jobs)
}

/// [`starts_with`], the waiting jobs served in `order` when one is given.
fn starts_in_order(
    policy: SitePolicy,
    order: Option<Box<dyn crate::order::QueueOrder>>,
    capacity: u32,
    jobs: &[Shaped],
) -> Vec<i64> {
    let mut s = SiteCore::new(SiteParams {
        policy,
        ..site(capacity).params()
    });
    if let Some(o) = order {
        s.serve_in(o);
    }
    let mut run = VirtualRunner::new();
    let ids: Vec<JobId> = jobs
        .iter()
        .map(|&(c, w, grid)| {
            let sub = Submission {
                on_behalf: grid.then(|| "ann".to_string()),
                ..Submission::of(job(c, w))
            };
            s.submit(T0, "broker", sub).unwrap().0
        })
        .collect();
    let e = s.drain();
    run.apply(&mut s, T0, e);
    while let Some(t) = run.next_event() {
        run.advance(&mut s, t);
        s.check_invariants();
    }
    ids.iter()
        .map(|&id| s.record(id).unwrap().started.unwrap().0 - T0.0)
        .collect()
}

#[test]
fn under_easy_a_queue_order_picks_the_next_protected_job() {
    // A runs. In arrival order B is protected behind it and C and D wait
    // without a slot, each protected in its turn. Under shortest-job-first
    // the protection goes to the order's first at every arrival and end:
    // D (the shortest) takes B's, then C, then B.
    let jobs: [Shaped; 4] = [(4, 100, false), (4, 50, false), (4, 30, false), (4, 10, false)];
    assert_eq!(starts_with(named("easy"), 4, &jobs), [0, 100, 150, 180]);
    let sjf = Box::new(crate::order::ShortestFirst);
    assert_eq!(starts_in_order(named("easy"), Some(sjf), 4, &jobs), [0, 140, 110, 100]);
    let ljf = Box::new(crate::order::LongestFirst);
    assert_eq!(starts_in_order(named("easy"), Some(ljf), 4, &jobs), [0, 100, 150, 180]);
    // Fair share: the site's own user's last job goes before ann's second
    // one, since ann's first has used the site and theirs has not ended.
    let mixed = [(4, 100, true), (4, 50, false), (4, 30, true), (4, 10, false)];
    let fair = Box::new(crate::order::FairShare::new(Duration(86_400)));
    let starts = starts_in_order(named("easy"), Some(fair), 4, &mixed);
    assert_eq!(starts[..2], [0, 100]);
    assert!(starts[3] < starts[2], "{starts:?}");
}

#[test]
fn an_order_plans_the_queue_again_under_fcfs_and_conservative_backfilling() {
    // The first job fills the site until 100; in arrival order the 50 s
    // job goes first, under SJF the 10 s one takes its place, and the
    // 50 s job's start moves later.
    let jobs = [(4, 100, false), (4, 50, false), (4, 10, false)];
    for p in ["conservative", "fcfs"] {
        assert_eq!(starts_with(named(p), 4, &jobs), [0, 100, 150], "{p}");
        let sjf = Box::new(crate::order::ShortestFirst);
        assert_eq!(starts_in_order(named(p), Some(sjf), 4, &jobs), [0, 110, 100], "{p}");
    }
}

#[test]
fn each_run_time_partition_protects_its_own_first_job() {
    // 4 processors. The first job holds 3 until 1000; the second (a
    // medium job) is the queue's head, at 1000. The 4-wide short job
    // behind it is the short partition's first: partitioned, it is
    // protected at 2000, so the long 1-processor job cannot backfill past
    // it and waits for its end; under plain EASY nothing protects it, the
    // long job backfills at once and it waits until 2500.
    let jobs = [(3, 1000, false), (2, 1000, false), (4, 100, false), (1, 2500, false)];
    assert_eq!(starts_with(named("easy"), 4, &jobs), [0, 1000, 2500, 0]);
    assert_eq!(starts_with(named("easy-m"), 4, &jobs), [0, 1000, 2000, 2100]);
    assert_eq!(starts_with(named("conservative"), 4, &jobs), [0, 1000, 2000, 2100]);
}

#[test]
fn a_partition_borrows_what_the_others_leave_idle_without_delaying_their_first_jobs() {
    // 6 processors, nominally 2 per partition. A long 5-wide job borrows
    // and starts at once; the short partition's first job (2 wide) is
    // protected at its end, 20000; a 1-wide short job fits beside both and
    // starts at once; a long 1-wide job that would overlap the protected
    // one's start with no room left waits until the short one ends.
    let jobs = [(5, 20_000, false), (2, 500, false), (1, 600, false), (1, 30_000, false)];
    assert_eq!(starts_with(named("easy-m"), 6, &jobs), [0, 20_000, 0, 600]);
}

#[test]
fn under_priorities_a_local_job_takes_a_grid_jobs_protection() {
    // 4 processors; the first grid job holds them all until 500. The
    // second (short, 2 wide) is the short partition's first, protected at
    // 500; a local 4-wide short job arrives next. With Lawson and Smirni's
    // priorities it takes that protection and runs at 500, the grid job
    // after it; without priorities (ArCbM, plain EASY), arrival order.
    let jobs = [(4, 500, true), (2, 500, true), (4, 500, false)];
    assert_eq!(starts_with(named("easy-m"), 4, &jobs), [0, 1000, 500]);
    assert_eq!(starts_with(named("conservative-m"), 4, &jobs), [0, 500, 1000]);
    assert_eq!(starts_with(named("easy"), 4, &jobs), [0, 500, 1000]);
}

#[test]
fn the_forecast_policy_offers_the_grid_its_share_and_throws_the_towel_when_local_load_grows() {
    let mut s = SiteCore::new(SiteParams {
        policy: "easy-mf@400s".parse().unwrap(),
        ..site(4).params()
    });
    let grid = |c, w| Submission {
        on_behalf: Some("ann".into()),
        ..Submission::of(job(c, w))
    };
    let offered = |s: &SiteCore, t: i64| -> Vec<u32> {
        let at = Time(T0.0 + t);
        s.availability(at, Time(at.0 + 100), 10)
            .ranges
            .iter()
            .map(|r| r.free)
            .collect()
    };
    // Half the site's processors taken by local work from the start.
    submit(&mut s, T0, "local", job(2, 10_000));
    s.tick(T0);
    assert_eq!(s.next_policy_event(), Some(Time(T0.0 + 400)));
    assert_eq!(offered(&s, 0), [2], "everything is offered before the first forecast");
    // The first publication: the forecast is the observed 0.5, and the
    // grid is offered half of the 2 free processors.
    let v = s.published_version();
    s.tick(Time(T0.0 + 400));
    assert!((s.offered_share() - 0.5).abs() < 1e-9);
    assert_eq!(offered(&s, 400), [1]);
    // The forecast covers the interval to the next publication only.
    let a = s.availability(Time(T0.0 + 400), Time(T0.0 + 1000), 10);
    let ranges: Vec<(i64, i64, u32)> = a
        .ranges
        .iter()
        .map(|r| (r.start.0 - T0.0, r.end.0 - T0.0, r.free))
        .collect();
    assert_eq!(ranges, [(400, 800, 1), (800, 1000, 2)]);
    assert!(s.published_version() > v, "a new offer is a change subscribers hear of");
    assert_eq!(s.next_policy_event(), Some(Time(T0.0 + 500)));
    // As forecast at the first check.
    s.tick(Time(T0.0 + 500));
    assert!((s.offered_share() - 0.5).abs() < 1e-9);
    // Local load doubles: by the next check it averages 0.75 > 0.5.
    submit(&mut s, Time(T0.0 + 500), "local", job(2, 10_000));
    s.tick(Time(T0.0 + 600));
    assert!((s.offered_share() - 0.25).abs() < 1e-9);
    // Conservative until the next publication: both waiting grid jobs
    // get a slot, at the local jobs' ends.
    let (g1, _) = s.submit(Time(T0.0 + 600), "broker", grid(1, 100)).unwrap();
    let (g2, _) = s.submit(Time(T0.0 + 600), "broker", grid(4, 100)).unwrap();
    assert_eq!(s.record(g1).unwrap().planned_start, Some(Time(T0.0 + 10_000)));
    assert_eq!(s.record(g2).unwrap().planned_start, Some(Time(T0.0 + 10_500)));
    // At the next publication EASY again: a third waiting grid job gets
    // no slot while the grid partition protects others.
    s.tick(Time(T0.0 + 800));
    let (g3, _) = s.submit(Time(T0.0 + 800), "broker", grid(4, 100)).unwrap();
    assert_eq!(s.record(g3).unwrap().planned_start, None);
    s.check_invariants();
}

#[test]
fn reservations_start_no_sooner_than_the_sites_lead() {
    let mut s = SiteCore::new(SiteParams {
        lead: Duration(60),
        ..site(8).params()
    });
    // A window that closes within the lead is refused, naming the first
    // start the site can give; the probe has nothing in it.
    let soon = Request {
        latest: Time(T0.0 + 30),
        ..at(4, 600, T0)
    };
    assert!(s.probe(T0, &soon, 3).unwrap().is_empty());
    match s.reserve(T0, "ann", &soon, None) {
        Err(CoreError::NotGranted(Reply::Rejected { next_start })) => assert_eq!(next_start, Some(Time(T0.0 + 60))),
        other => panic!("{other:?}"),
    }
    assert!(s.drain().is_empty(), "a refusal changes nothing");
    // A window that reaches past the lead starts where the lead ends.
    let open = Request {
        latest: Time(T0.0 + 3600),
        ..at(4, 600, T0)
    };
    let c = s.probe(T0, &open, 3).unwrap();
    assert!(!c.is_empty() && c.iter().all(|c| c.start >= Time(T0.0 + 60)), "{c:?}");
    assert_eq!(s.reserve(T0, "ann", &open, None).unwrap().start, Time(T0.0 + 60));
    // Later, the lead counts from the new now; a window after it is as asked.
    let later = at(4, 600, Time(T0.0 + 200));
    assert_eq!(
        s.reserve(Time(T0.0 + 100), "ann", &later, None).unwrap().start,
        Time(T0.0 + 200)
    );
}

proptest::proptest! {
    /// What a site publishes agrees with what its schedule would grant: for
    /// any job shape, the earliest start read from the published ranges is
    /// the planner's own earliest start, and a span cut to fewer ranges is
    /// never read as later than the planner (the rest counts as unknown).
    #[test]
    fn published_availability_gives_the_planners_earliest_starts(
        booked in proptest::collection::vec((0i64..20_000, 1i64..5_000, 1u32..=16), 0..40),
        shapes in proptest::collection::vec((1u32..=16, 1i64..8_000, 0i64..5_000), 1..20),
        most in 1usize..30,
    ) {
        let mut s = site(16);
        for (offset, duration, amount) in booked {
            let _ = s.reserve(T0, "ann", &at(amount, duration, Time(T0.0 + offset)), None);
        }
        let whole = s.availability(T0, Time(T0.0 + 86_400), usize::MAX);
        let cut = s.availability(T0, Time(T0.0 + 86_400), most);
        for (cpus, wall, after) in shapes {
            let from = Time(T0.0 + after);
            let req = Request {
                amount: cpus,
                duration: Duration(wall),
                earliest: from,
                latest: OPEN_END,
                flexible: false,
            };
            let planned = s.planner().earliest_start(&req).unwrap();
            proptest::prop_assert_eq!(whole.earliest_start(cpus, Duration(wall), from, 16), planned);
            let guessed = cut.earliest_start(cpus, Duration(wall), from, 16).unwrap();
            proptest::prop_assert!(guessed <= planned.unwrap());
        }
    }
}

/// A site whose every processor is taken publishes none free (the free
/// ranges leave out what is wholly taken; the site once read that as all
/// of them free), and its one-slot wait runs to the first end.
#[test]
fn a_full_site_publishes_none_free() {
    let mut s = site(4);
    submit(&mut s, T0, "ann", job(4, 100));
    assert_eq!(s.published(T0).free_now, 0);
    assert_eq!(s.published(T0).estimated_wait, Some(Duration(100)));
    submit(&mut s, T0, "ann", job(2, 100));
    let p = s.published(Time(T0.0 + 1));
    assert_eq!((p.free_now, p.estimated_wait), (0, Some(Duration(99))));
    assert_eq!(s.published(Time(T0.0 + 100)).free_now, 2);
}

#[test]
fn a_held_job_gives_its_slot_to_the_queue_and_is_placed_again_when_released() {
    let mut s = site(4);
    let a = submit(&mut s, T0, "ann", job(4, 100));
    let b = submit(&mut s, T0, "ann", job(4, 100));
    let c = submit(&mut s, T0, "bob", job(4, 100));
    assert!(s.mark_running(a, T0));
    s.drain();
    // Only its owner holds it; a running job cannot be held.
    assert!(matches!(s.hold_job(T0, "bob", b), Err(CoreError::Forbidden(_))));
    assert!(matches!(s.hold_job(T0, "ann", a), Err(CoreError::Conflict(m)) if m.contains("has started")));
    let t = Time(T0.0 + 10);
    let held = s.hold_job(t, "ann", b).unwrap();
    assert_eq!(
        (held.state, held.slot, held.planned_start),
        (JobPhase::Held, None, None)
    );
    let effects = s.drain();
    assert!(effects.contains(&Effect::Manager(Manager::HoldJob(b))));
    assert!(effects.contains(&Effect::StartMoved {
        job: b,
        start: OPEN_END
    }));
    // Bob's job moves up into the slot b gave back.
    assert!(effects.contains(&Effect::StartMoved {
        job: c,
        start: Time(T0.0 + 100)
    }));
    s.check_invariants();
    // Held, it waits: its runner's start is not recorded, its staging goes on.
    assert!(!s.set_phase(t, b, JobPhase::Running));
    assert!(s.set_phase(t, b, JobPhase::Queued));
    assert_eq!(s.record(b).unwrap().state, JobPhase::Held);
    assert_eq!(s.launch(b).map(|l| l.record.planned_start), Some(None));
    // Holding it again changes nothing.
    s.hold_job(t, "ann", b).unwrap();
    assert!(s.drain().is_empty());

    // Released, it is placed as an arrival would be: behind bob's job.
    let released = s.release_job(Time(T0.0 + 20), "ann", b).unwrap();
    assert_eq!(
        (released.state, released.planned_start),
        (JobPhase::Queued, Some(Time(T0.0 + 200)))
    );
    let effects = s.drain();
    assert!(effects.contains(&Effect::Manager(Manager::ReleaseJob(b))));
    assert!(effects.contains(&Effect::StartMoved {
        job: b,
        start: Time(T0.0 + 200)
    }));
    let queue: Vec<JobId> = s.queued().map(|q| q.1).collect();
    assert_eq!(queue, vec![c, b]);
    s.check_invariants();
}

#[test]
fn a_held_job_survives_a_restart_held_and_ends_at_once_when_cancelled() {
    let mut s = site(4);
    let a = submit(&mut s, T0, "ann", job(4, 100));
    let b = submit(&mut s, T0, "ann", job(4, 100));
    s.mark_running(a, T0);
    s.hold_job(T0, "ann", b).unwrap();
    // Handed to the resource manager while held: held there too.
    s.drain();
    s.record_submitted(b, 77);
    assert!(s.drain().contains(&Effect::Manager(Manager::HoldJob(b))));
    assert_eq!(s.record(b).unwrap().state, JobPhase::Held);
    let records: Vec<JobRecord> = [a, b].iter().map(|id| s.record(*id).unwrap().clone()).collect();
    let reservations = s.planner().reservations();
    let later = Time(T0.0 + 10);
    let (mut back, resume) = SiteCore::restore(s.params(), later, &reservations, 100, KeptJobs::all(records), |_| true);
    assert_eq!(resume, vec![a, b]);
    assert_eq!(back.record(b).unwrap().state, JobPhase::Held);
    assert_eq!(back.queued().count(), 0, "a held job has no place in the queue");
    back.check_invariants();
    // Cancelled while held: it has no process, so it ends at once.
    let cancelled = back.cancel_job(later, "ann", b).unwrap();
    assert_eq!(cancelled.state, JobPhase::Cancelled);
    back.check_invariants();
}

#[test]
fn a_held_job_the_resource_manager_started_anyway_runs_in_a_slot_of_its_own() {
    let mut s = site(4);
    let a = submit(&mut s, T0, "ann", job(2, 100));
    s.hold_job(T0, "ann", a).unwrap();
    assert_eq!(s.published(T0).free_now, 4);
    // Slurm started it before its hold reached it: its start is the truth.
    assert!(s.mark_running(a, Time(T0.0 + 5)));
    let j = s.record(a).unwrap();
    assert_eq!((j.state, j.started), (JobPhase::Running, Some(Time(T0.0 + 5))));
    assert!(j.slot.is_some());
    assert_eq!(s.published(Time(T0.0 + 6)).free_now, 2);
    s.check_invariants();
}
