//! Placing co-allocated jobs into their holds, settling an interrupted
//! co-allocation, and choosing the site of a reservation: the broker's
//! rules the service drives, run here on in-memory sites.

use brokk_broker::coalloc::{coallocate, place, settle, CoRequest, Found, PlaceError, Standing};
use brokk_broker::reserve::at_earliest;
use brokk_broker::{JobState, MemorySite, Site, SiteError};
use brokk_core::{Reply, Request, State};
use brokk_model::{Duration, Job, ResourceInfo, Time};

const NOW: Time = Time(1_800_000_000);

fn site(name: &str, slots: u32) -> MemorySite {
    let info = ResourceInfo {
        endpoint: name.into(),
        total_slots: slots,
        ..ResourceInfo::default()
    };
    MemorySite::new(info, NOW, NOW + Duration::hours(24 * 30))
}

fn job(cpus: u32) -> Job {
    Job {
        executable: Some("/bin/true".into()),
        cpus: Some(cpus),
        wall_time: Some(Duration(600)),
        ..Job::default()
    }
}

fn plan_two(a: &mut MemorySite, b: &mut MemorySite) -> (brokk_broker::coalloc::CoAllocation, Vec<Job>) {
    let jobs = vec![job(8), job(8)];
    let infos = [a.info().ok(), b.info().ok()];
    let req = CoRequest::of(
        &jobs,
        &infos,
        (NOW, NOW + Duration(3600)),
        Duration(0),
        Some(NOW + Duration(300)),
    );
    let plan = coallocate(&req, &mut [a, b], "broker").unwrap();
    (plan, jobs)
}

fn keys() -> Vec<String> {
    vec!["c1-0".into(), "c1-1".into()]
}

#[test]
fn placed_parts_wait_in_their_holds_until_all_are_committed() {
    let (mut a, mut b) = (site("a", 8), site("b", 8));
    let (plan, jobs) = plan_two(&mut a, &mut b);
    let handles = place(&plan, &jobs, &keys(), &mut [&mut a, &mut b], "broker").unwrap();
    assert_eq!(handles.len(), 2);
    for (s, (_, r, _)) in [&a, &b].into_iter().zip(&plan.assignments) {
        assert_eq!(s.planner().get(*r).unwrap().state, State::Committed);
    }
    a.advance(NOW);
    assert!(matches!(a.status(&handles[0]), Ok(JobState::Running { .. })));
}

#[test]
fn a_part_that_cannot_be_placed_leaves_nothing_anywhere() {
    let (mut a, mut b) = (site("a", 8), site("b", 8));
    let (plan, jobs) = plan_two(&mut a, &mut b);
    let second = plan.assignments[1].0;
    if second == 1 {
        b.set_available(false);
    } else {
        a.set_available(false);
    }
    let err = place(&plan, &jobs, &keys(), &mut [&mut a, &mut b], "broker").unwrap_err();
    assert!(matches!(err, PlaceError::Submit(SiteError::Unavailable(_))));
    let (up, down) = if second == 1 {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    // The first part was cancelled and its hold released; the site that did
    // not answer keeps its hold until it lapses.
    assert!(up.planner().is_empty(), "{:?}", up.planner().reservations());
    assert!(up.core().active().next().is_none());
    down.set_available(true);
    assert_eq!(down.planner().len(), 1);
    down.advance(NOW + Duration(300));
    assert!(down.planner().is_empty());
}

#[test]
fn settling_commits_when_every_part_waits_and_cancels_otherwise() {
    for missing in [false, true] {
        let (mut a, mut b) = (site("a", 8), site("b", 8));
        let (plan, jobs) = plan_two(&mut a, &mut b);
        let mut found = Vec::new();
        {
            let sites: [&mut dyn Site; 2] = [&mut a, &mut b];
            for (k, &(s, r, _)) in plan.assignments.iter().enumerate() {
                let h = sites[s].submit_held("broker", &jobs[k], r, &keys()[k]).unwrap();
                found.push(Some(Found {
                    site: s,
                    job: h,
                    standing: Standing::Waiting(r),
                }));
            }
        }
        if missing {
            found[1] = None;
        }
        let done = settle(&found, &mut [&mut a, &mut b], "broker");
        assert_eq!(done, !missing);
        let first = found[0].as_ref().unwrap();
        let s: &MemorySite = if first.site == 0 { &a } else { &b };
        let state = s.status(&first.job).unwrap();
        if missing {
            assert_eq!(state, JobState::Cancelled);
        } else {
            assert!(matches!(state, JobState::Queued { .. }));
            assert_eq!(s.planner().get(plan.assignments[0].1).unwrap().state, State::Committed);
        }
    }
}

/// A stop between the commits: the first part's hold was committed and the
/// part has started and ended, the second still waits in its hold. Cancelling
/// would leave the first run alone; the second's hold is committed instead.
/// A part that ended without starting (cancelled) undoes the co-allocation.
#[test]
fn settling_after_a_stop_between_the_commits_completes_the_co_allocation() {
    for second_gone in [false, true] {
        let mut sites = [site("a", 8), site("b", 8)];
        let [a, b] = &mut sites;
        let (plan, jobs) = plan_two(a, b);
        let ((s0, r0, _), (s1, r1, _)) = (plan.assignments[0], plan.assignments[1]);
        let h0 = sites[s0].submit_held("broker", &jobs[0], r0, &keys()[0]).unwrap();
        let h1 = sites[s1].submit_held("broker", &jobs[1], r1, &keys()[1]).unwrap();
        sites[s0].commit("broker", r0).unwrap();
        if second_gone {
            sites[s1].cancel_job("broker", &h1).unwrap();
        }
        // The first starts and ends (here cancelled) within the holds' 300 s.
        for s in &mut sites {
            s.advance(NOW);
        }
        assert!(matches!(sites[s0].status(&h0).unwrap(), JobState::Running { .. }));
        sites[s0].advance(NOW + Duration(100));
        sites[s0].cancel_job("broker", &h0).unwrap();
        let found = [
            Some(Found {
                site: s0,
                job: h0,
                standing: Standing::Ran,
            }),
            Some(Found {
                site: s1,
                job: h1.clone(),
                standing: if second_gone {
                    Standing::Gone
                } else {
                    Standing::Waiting(r1)
                },
            }),
        ];
        let [a, b] = &mut sites;
        let done = settle(&found, &mut [a, b], "broker");
        assert_eq!(done, !second_gone);
        if second_gone {
            assert_eq!(sites[s1].status(&h1).unwrap(), JobState::Cancelled);
        } else {
            assert_eq!(sites[s1].planner().get(r1).unwrap().state, State::Committed);
            assert!(matches!(sites[s1].status(&h1).unwrap(), JobState::Queued { .. }));
        }
    }
}

#[test]
fn a_reservation_goes_where_it_starts_earliest() {
    let (mut busy, mut free) = (site("busy", 8), site("free", 8));
    let full = Request {
        amount: 8,
        duration: Duration(3600),
        earliest: NOW,
        latest: NOW,
        flexible: false,
    };
    assert!(matches!(busy.reserve("other", &full, None), Ok(Reply::Granted { .. })));
    let want = Request {
        amount: 4,
        latest: NOW + Duration(7200),
        ..full
    };
    let (k, _, start) = at_earliest(&want, &mut [&mut busy, &mut free], "broker").unwrap();
    assert_eq!((k, start), (1, NOW));
    // Every site's own reason when none can: too large for both.
    let too_big = Request { amount: 9, ..want };
    let refused = at_earliest(&too_big, &mut [&mut busy, &mut free], "broker").unwrap_err();
    let words: Vec<String> = refused.iter().map(|(k, r)| format!("{k}: {r}")).collect();
    assert_eq!(
        words,
        [
            "0: asks for 9 units but the resource has 8",
            "1: asks for 9 units but the resource has 8"
        ]
    );
    // Busy in the window, with the start it could give.
    let now_only = Request {
        amount: 8,
        latest: NOW,
        ..want
    };
    let refused = at_earliest(&now_only, &mut [&mut busy], "broker").unwrap_err();
    assert_eq!(
        refused[0].1.to_string(),
        format!(
            "busy in that window; the earliest start it can give is {}",
            NOW + Duration(3600)
        )
    );
}
