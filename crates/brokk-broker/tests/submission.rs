//! Seed 003's Algorithm 1 against in-memory sites: fallback, reservation release,
//! unreachable sites, and nothing left behind on failure.

use brokk_broker::submit::{submit, SubmitError, SubmitOptions};
use brokk_broker::{JobState, MemorySite, Site, SiteError};
use brokk_model::{Benchmark, Duration, Job, JobPreferences, PublishedBenchmark, ResourceInfo, Time};

const NOW: Time = Time(1_000_000);

fn site(endpoint: &str, speed: f64) -> MemorySite {
    let info = ResourceInfo {
        endpoint: endpoint.into(),
        total_slots: 16,
        benchmarks: vec![PublishedBenchmark {
            name: "app".into(),
            value: speed,
        }],
        ..ResourceInfo::default()
    };
    MemorySite::new(info, NOW, NOW + Duration::hours(24 * 30))
}

fn job() -> Job {
    Job {
        executable: Some("sim".into()),
        cpus: Some(8),
        benchmarks: vec![Benchmark {
            name: "app".into(),
            result: 100.0,
            time: Duration::hours(2),
        }],
        ..Job::default()
    }
}

#[test]
fn the_best_site_gets_the_job_with_the_predicted_wall_time() {
    let (mut a, mut b) = (site("a", 200.0), site("b", 100.0));
    let s = submit(
        &job(),
        &JobPreferences::default(),
        "alice",
        &mut [&mut a, &mut b],
        NOW,
        SubmitOptions::default(),
    )
    .unwrap();
    assert_eq!(s.endpoint, "a");
    // 2 h where the benchmark scores 100, on a site scoring 200: 1 h, requested as the wall time.
    assert_eq!(s.prediction.requested_wall_time, Some(Duration::hours(1)));
    let r = a.planner().reservations();
    assert_eq!((r.len(), r[0].end - r[0].start), (1, Duration::hours(1)));
    // Accepted and planned now; it runs once the site's time moves.
    assert_eq!(
        a.status(&s.handle),
        Ok(JobState::Queued {
            expected_start: Some(NOW)
        })
    );
    a.advance(NOW);
    assert_eq!(a.status(&s.handle), Ok(JobState::Running { since: NOW }));
    assert!(b.planner().is_empty());
}

#[test]
fn a_refusing_site_is_discarded_and_the_next_one_tried() {
    let (mut a, mut b, mut c) = (site("a", 400.0), site("b", 200.0), site("c", 100.0));
    a.set_accepting(false);
    let s = submit(
        &job(),
        &JobPreferences::default(),
        "alice",
        &mut [&mut a, &mut b, &mut c],
        NOW,
        SubmitOptions::default(),
    )
    .unwrap();
    assert_eq!(s.endpoint, "b");
    assert!(matches!(s.failed.as_slice(), [(e, SiteError::Refused { .. })] if e == "a"));
}

#[test]
fn reservations_on_the_sites_not_used_are_released() {
    let (mut a, mut b, mut c) = (site("a", 400.0), site("b", 200.0), site("c", 100.0));
    a.set_accepting(false);
    let opts = SubmitOptions {
        reserve_top_k: 3,
        ..SubmitOptions::default()
    };
    let s = submit(
        &job(),
        &JobPreferences::default(),
        "alice",
        &mut [&mut a, &mut b, &mut c],
        NOW,
        opts,
    )
    .unwrap();
    assert_eq!(s.endpoint, "b");
    let used = s.reservation.expect("the job runs in its reservation");
    assert!(a.planner().is_empty(), "the refusing site kept a reservation");
    assert!(c.planner().is_empty(), "an unused site kept a reservation");
    let held = b.planner().reservations();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].id, used);
    assert_eq!(held[0].state, brokk_core::State::Committed);
}

#[test]
fn an_unreachable_site_is_reported_and_skipped() {
    let (mut a, mut b) = (site("a", 400.0), site("b", 100.0));
    a.set_available(false);
    let s = submit(
        &job(),
        &JobPreferences::default(),
        "alice",
        &mut [&mut a, &mut b],
        NOW,
        SubmitOptions::default(),
    )
    .unwrap();
    assert_eq!(s.endpoint, "b");
    assert_eq!(s.failed, vec![("a".to_string(), SiteError::Unavailable("a".into()))]);
}

#[test]
fn when_every_site_fails_nothing_stays_reserved() {
    let (mut a, mut b) = (site("a", 400.0), site("b", 100.0));
    a.set_accepting(false);
    b.set_accepting(false);
    let opts = SubmitOptions {
        reserve_top_k: 2,
        ..SubmitOptions::default()
    };
    let err = submit(
        &job(),
        &JobPreferences::default(),
        "alice",
        &mut [&mut a, &mut b],
        NOW,
        opts,
    )
    .unwrap_err();
    assert!(
        matches!(err, SubmitError::NoSite { ref failed, .. } if failed.len() == 2),
        "{err:?}"
    );
    assert!(a.planner().is_empty() && b.planner().is_empty());
    // A job no site can run is refused with the reasons.
    let big = Job {
        cpus: Some(64),
        ..job()
    };
    let err = submit(
        &big,
        &JobPreferences::default(),
        "alice",
        &mut [&mut a],
        NOW,
        SubmitOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, SubmitError::NoSite { ref excluded, .. } if excluded.len() == 1));
}

#[test]
fn only_the_owner_may_touch_a_reservation_or_job() {
    let mut a = site("a", 100.0);
    let s = submit(
        &job(),
        &JobPreferences::default(),
        "alice",
        &mut [&mut a],
        NOW,
        SubmitOptions {
            reserve_top_k: 1,
            ..SubmitOptions::default()
        },
    )
    .unwrap();
    let id = s.reservation.unwrap();
    assert_eq!(a.cancel("mallory", id), Err(SiteError::Forbidden));
    assert_eq!(a.cancel_job("mallory", &s.handle), Err(SiteError::Forbidden));
    assert_eq!(a.cancel_job("alice", &s.handle), Ok(()));
    assert_eq!(a.status(&s.handle), Ok(JobState::Cancelled));
}
