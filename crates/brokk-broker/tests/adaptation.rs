//! Queue adaptation on in-memory sites: a waiting job moves when another site
//! frees up, stays when the gain is under the margin, and never moves once started.

use brokk_broker::adapt::{adapt, AdaptOptions, Adapted, Tracked};
use brokk_broker::submit::{submit, SubmitOptions};
use brokk_broker::{MemorySite, Site};
use brokk_core::{Reply, Request, ReservationId};
use brokk_model::{Duration, Job, JobPreferences, ResourceInfo, Time};

const NOW: Time = Time(1_795_338_000);

fn site(name: &str) -> MemorySite {
    let info = ResourceInfo {
        endpoint: name.into(),
        total_slots: 16,
        ..ResourceInfo::default()
    };
    MemorySite::new(info, NOW, NOW + Duration::hours(24 * 30))
}

fn busy(s: &mut MemorySite, hours: i64) -> ReservationId {
    let req = Request {
        amount: 16,
        duration: Duration::hours(hours),
        earliest: NOW,
        latest: NOW,
        flexible: false,
    };
    match s.reserve("others", &req, None) {
        Ok(Reply::Granted { id, .. }) => id,
        other => panic!("{other:?}"),
    }
}

fn job() -> Job {
    Job {
        executable: Some("sim".into()),
        cpus: Some(16),
        wall_time: Some(Duration::hours(1)),
        ..Job::default()
    }
}

/// A job queued on `a` (busy 5 h) because `b` is busier (10 h).
fn queued() -> (MemorySite, MemorySite, ReservationId, Tracked) {
    let (mut a, mut b) = (site("a"), site("b"));
    busy(&mut a, 5);
    let on_b = busy(&mut b, 10);
    let prefs = JobPreferences::default();
    let s = submit(
        &job(),
        &prefs,
        "alice",
        &mut [&mut a, &mut b],
        NOW,
        SubmitOptions::default(),
    )
    .unwrap();
    assert_eq!(s.endpoint, "a");
    let t = Tracked {
        job: job(),
        prefs,
        owner: "alice".into(),
        endpoint: s.endpoint,
        handle: s.handle,
    };
    (a, b, on_b, t)
}

#[test]
fn a_waiting_job_moves_when_another_site_would_deliver_it_sooner() {
    let (mut a, mut b, on_b, mut t) = queued();
    b.cancel("others", on_b).unwrap();
    let r = adapt(&mut t, &mut [&mut a, &mut b], NOW, AdaptOptions::default()).unwrap();
    assert_eq!(
        r,
        Adapted::Moved {
            from: "a".into(),
            to: "b".into()
        }
    );
    assert_eq!(t.endpoint, "b");
    let alice = |s: &MemorySite| {
        s.planner()
            .reservations()
            .iter()
            .filter(|r| &*r.owner == "alice")
            .count()
    };
    assert_eq!((alice(&a), alice(&b)), (0, 1), "the job must be in exactly one queue");
}

#[test]
fn a_gain_under_the_margin_is_not_worth_a_move() {
    let (mut a, mut b, on_b, mut t) = queued();
    b.cancel("others", on_b).unwrap();
    let opts = AdaptOptions {
        margin: Duration::hours(6),
        ..AdaptOptions::default()
    };
    assert_eq!(
        adapt(&mut t, &mut [&mut a, &mut b], NOW, opts).unwrap(),
        Adapted::Stayed
    );
    assert_eq!(t.endpoint, "a");
}

#[test]
fn a_started_job_is_never_moved() {
    let (mut a, mut b, on_b, mut t) = queued();
    b.cancel("others", on_b).unwrap();
    let later = NOW + Duration::hours(5) + Duration::minutes(1);
    a.advance(later);
    b.advance(later);
    assert_eq!(
        adapt(&mut t, &mut [&mut a, &mut b], later, AdaptOptions::default()).unwrap(),
        Adapted::Started
    );
    assert_eq!(t.endpoint, "a");
}
