//! The broker core against in-memory site cores, its effects carried out
//! by a small synchronous driver as the simulator carries them out:
//! [ET-brokering]'s submission (the best site with the predicted wall
//! time, fallback past a refusal, holds on the best sites given back,
//! unreachable sites skipped, nothing left behind when every site fails)
//! and its queue adaptation (a waiting job moves when another site would
//! deliver it sooner by the margin, never once started), and
//! co-allocation ([ET-interop]: parts placed over the sites to start
//! together, or none anywhere).

use std::collections::HashMap;

use brokk_broker::broker::{BrokerCore, BrokerParams, CoAnswer, CoSearch, Effect, NewJob};
use brokk_broker::info::FetchFailure;
use brokk_broker::jobs::{BrokerJob, BrokerState, Entry, Member};
use brokk_broker::{JobHandle, JobState, MemorySite, Site, SiteError};
use brokk_core::{Reply, Request, ReservationId};
use brokk_model::{Benchmark, Duration, Job, JobPreferences, PublishedBenchmark, ResourceInfo, Time};

const NOW: Time = Time(1_000_000);

fn site(endpoint: &str, speed: f64) -> MemorySite {
    let info = ResourceInfo {
        endpoint: endpoint.into(),
        name: endpoint.into(),
        total_slots: 16,
        reservations: true,
        benchmarks: vec![PublishedBenchmark {
            name: "app".into(),
            value: speed,
        }],
        ..ResourceInfo::default()
    };
    MemorySite::new(info, NOW, NOW + Duration::hours(24 * 30))
}

/// 8 CPUs for 2 h where the `app` benchmark scores 100.
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

/// A broker core over in-memory sites, and the records and history lines
/// it gave out to be stored.
struct Grid {
    core: BrokerCore,
    sites: Vec<MemorySite>,
    records: HashMap<String, BrokerJob>,
    lines: Vec<(String, BrokerState, Option<String>)>,
}

impl Grid {
    fn new(sites: Vec<MemorySite>, params: BrokerParams) -> Grid {
        let names = sites.iter().map(|s| s.endpoint().to_string()).collect();
        Grid {
            core: BrokerCore::new(
                names,
                BrokerParams {
                    persist: true,
                    ..params
                },
            ),
            sites,
            records: HashMap::new(),
            lines: Vec::new(),
        }
    }

    /// Carries out every effect at `now`, and those the answers lead to.
    fn settle(&mut self, now: Time) {
        loop {
            let effects: Vec<Effect> = self.core.drain().collect();
            if effects.is_empty() {
                return;
            }
            for e in effects {
                self.carry_out(e, now);
            }
        }
    }

    fn carry_out(&mut self, e: Effect, now: Time) {
        let core = &mut self.core;
        match e {
            Effect::Fetch { site } => {
                let info = self.sites[site].info().map_err(FetchFailure::Error);
                core.informed(site, info, now);
            }
            Effect::Send {
                job, site, wall, claim, ..
            } => {
                let mut d = core.description(&job).expect("held").clone();
                d.wall_time = wall.or(d.wall_time);
                let owner = core.job(&job).expect("held").owner.clone();
                let into = claim.map(|c| ReservationId(c.reservation));
                let answer = self.sites[site].submit(&owner, &d, into).map(|h| h.0);
                core.sent(now, &job, site, answer);
            }
            Effect::Hold {
                job,
                site,
                owner,
                request,
                until,
            } => {
                let answer = self.sites[site].reserve(&owner, &request, Some(until));
                core.held(now, &job, site, answer);
            }
            Effect::Release {
                site,
                reservation,
                owner,
            } => {
                let _ = self.sites[site].cancel(&owner, ReservationId(reservation));
            }
            Effect::Status { job, site, site_job } => {
                let answer = self.sites[site].status(&JobHandle(site_job));
                core.status(now, &job, answer);
            }
            Effect::Withdraw { site, site_job, owner } => {
                let answer = self.sites[site].cancel_job(&owner, &JobHandle(site_job.clone()));
                let _ = core.withdrawn(now, site, &site_job, answer);
            }
            Effect::HoldAtSite {
                site,
                site_job,
                owner,
                hold,
            } => {
                let answer = self.sites[site].hold_job(&owner, &JobHandle(site_job.clone()), hold);
                let _ = core.held_at_site(now, site, &site_job, answer);
            }
            Effect::Find { job, .. } => core.found(now, &job, Ok(None)),
            Effect::Resolve { job, .. } => core.resolved(now, &job, Ok(None)),
            Effect::Persist { job, line } => {
                if let Some(l) = line {
                    self.lines.push((job.id.clone(), l.state, l.detail));
                }
                self.records.insert(job.id.clone(), *job);
            }
            Effect::CoAllocate {
                group, parts, search, ..
            } => {
                let jobs: Vec<Job> = parts
                    .iter()
                    .map(|id| core.description(id).expect("held").clone())
                    .collect();
                let infos: Vec<Option<ResourceInfo>> = self.sites.iter().map(|s| s.info().ok()).collect();
                let mut refs: Vec<&mut dyn Site> = self.sites.iter_mut().map(|s| s as &mut dyn Site).collect();
                let answer = match brokk_broker::coalloc::search(&jobs, &parts, &infos, search, &mut refs, "broker") {
                    Ok(placed) => CoAnswer::Placed(placed),
                    Err(e) => CoAnswer::Failed(e.to_string()),
                };
                core.coallocated(now, &group, answer);
            }
            Effect::Placed { .. } | Effect::Retired { .. } => {}
        }
    }

    /// Alice's job `id` accepted and decided at `now`: its record.
    fn submit(&mut self, id: &str, job: Job, prefs: JobPreferences, now: Time) -> BrokerJob {
        let new = NewJob {
            id: id.into(),
            format: "json".into(),
            job,
            prefs,
            hold: false,
            runs_as: None,
            delegated: None,
            warnings: Vec::new(),
        };
        self.core.accept(now, "alice", vec![new]).unwrap();
        self.core.stale(now);
        self.settle(now);
        self.core.decide(now, 1);
        self.settle(now);
        self.records[id].clone()
    }

    /// One adaptation round at `now`.
    fn adapt(&mut self, now: Time) {
        for s in &mut self.sites {
            s.advance(now);
        }
        self.core.stale(now);
        self.settle(now);
        self.core.adapt(now);
        self.settle(now);
    }

    /// Alice's reservations at site `k`.
    fn alices(&self, k: usize) -> usize {
        let r = self.sites[k].planner().reservations();
        r.iter().filter(|r| &*r.owner == "alice").count()
    }
}

fn reserving(k: usize) -> (JobPreferences, BrokerParams) {
    let prefs = JobPreferences {
        use_reservations: Some(true),
        ..JobPreferences::default()
    };
    let params = BrokerParams {
        reserve_top_k: k,
        ..BrokerParams::default()
    };
    (prefs, params)
}

#[test]
fn the_best_site_gets_the_job_with_the_predicted_wall_time() {
    let mut g = Grid::new(vec![site("a", 200.0), site("b", 100.0)], BrokerParams::default());
    let v = g.submit("j1", job(), JobPreferences::default(), NOW);
    assert_eq!((v.state(), v.site.as_deref()), (BrokerState::Dispatched, Some("a")));
    // 2 h where the benchmark scores 100, on a site scoring 200: 1 h,
    // asked for as the wall time.
    let r = g.sites[0].planner().reservations();
    assert_eq!((r.len(), r[0].end - r[0].start), (1, Duration::hours(1)));
    let handle = JobHandle(v.site_job.unwrap());
    let a = &mut g.sites[0];
    assert_eq!(
        a.status(&handle),
        Ok(JobState::Queued {
            expected_start: Some(NOW)
        })
    );
    a.advance(NOW);
    assert_eq!(a.status(&handle), Ok(JobState::Running { since: NOW }));
    assert!(g.sites[1].planner().is_empty());
}

#[test]
fn a_refusing_site_is_passed_over_for_the_next() {
    let mut sites = vec![site("a", 400.0), site("b", 200.0), site("c", 100.0)];
    sites[0].set_accepting(false);
    let mut g = Grid::new(sites, BrokerParams::default());
    let v = g.submit("j1", job(), JobPreferences::default(), NOW);
    assert_eq!((v.state(), v.site.as_deref()), (BrokerState::Dispatched, Some("b")));
}

#[test]
fn holds_on_the_sites_not_used_are_given_back_and_the_one_used_committed() {
    let mut sites = vec![site("a", 400.0), site("b", 200.0), site("c", 100.0)];
    sites[0].set_accepting(false);
    let (prefs, params) = reserving(3);
    let mut g = Grid::new(sites, params);
    let v = g.submit("j1", job(), prefs, NOW);
    assert_eq!(v.site.as_deref(), Some("b"));
    let sent = g.lines.iter().find(|l| l.1 == BrokerState::Dispatched).unwrap();
    assert!(sent.2.as_deref().unwrap().contains("in reservation"), "{sent:?}");
    assert!(g.sites[0].planner().is_empty(), "the refusing site kept a hold");
    assert!(g.sites[2].planner().is_empty(), "an unused site kept a hold");
    let held = g.sites[1].planner().reservations();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].state, brokk_core::State::Committed);
}

#[test]
fn an_unreachable_site_is_skipped() {
    let mut sites = vec![site("a", 400.0), site("b", 100.0)];
    sites[0].set_available(false);
    let mut g = Grid::new(sites, BrokerParams::default());
    let v = g.submit("j1", job(), JobPreferences::default(), NOW);
    assert_eq!(v.site.as_deref(), Some("b"));
}

#[test]
fn when_every_site_refuses_nothing_stays_held_and_the_job_fails_with_every_reason() {
    let mut sites = vec![site("a", 400.0), site("b", 100.0)];
    sites[0].set_accepting(false);
    sites[1].set_accepting(false);
    let (prefs, params) = reserving(2);
    let mut g = Grid::new(sites, params);
    let v = g.submit("j1", job(), prefs, NOW);
    assert_eq!(v.state(), BrokerState::Failed);
    let why = v.reason.unwrap();
    assert!(why.contains("0 unsuitable, 2 failed"), "{why}");
    assert!(g.sites[0].planner().is_empty() && g.sites[1].planner().is_empty());
    // A job no site can run fails with the reasons.
    let big = Job {
        cpus: Some(64),
        ..job()
    };
    let v = g.submit("j2", big, JobPreferences::default(), NOW);
    assert_eq!(v.state(), BrokerState::Failed);
    let why = v.reason.unwrap();
    assert!(why.contains("2 unsuitable, 0 failed"), "{why}");
}

#[test]
fn only_the_owner_may_touch_a_hold_or_a_job() {
    let (prefs, params) = reserving(1);
    let mut g = Grid::new(vec![site("a", 100.0)], params);
    let v = g.submit("j1", job(), prefs, NOW);
    let handle = JobHandle(v.site_job.unwrap());
    let a = &mut g.sites[0];
    let id = a.planner().reservations()[0].id;
    assert_eq!(a.cancel("mallory", id), Err(SiteError::Forbidden));
    assert_eq!(a.cancel_job("mallory", &handle), Err(SiteError::Forbidden));
    assert_eq!(a.cancel_job("alice", &handle), Ok(()));
    assert_eq!(a.status(&handle), Ok(JobState::Cancelled));
}

/// Both sites' 16 CPUs taken by others for `hours` from now.
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

/// A 16-CPU hour-long job that asked for adaptation, queued at `a` (busy
/// 5 h) because `b` is busier (10 h); the reservation keeping `b` busy.
fn queued(margin: Duration) -> (Grid, ReservationId) {
    let (mut a, mut b) = (site("a", 100.0), site("b", 100.0));
    busy(&mut a, 5);
    let on_b = busy(&mut b, 10);
    // Every site read afresh at every decision and round.
    let params = BrokerParams {
        adapt_margin: margin,
        info_ttl: Duration(0),
        ..BrokerParams::default()
    };
    let mut g = Grid::new(vec![a, b], params);
    let prefs = JobPreferences {
        queue_adaptation: Some(true),
        ..JobPreferences::default()
    };
    let one = Job {
        executable: Some("sim".into()),
        cpus: Some(16),
        wall_time: Some(Duration::hours(1)),
        ..Job::default()
    };
    let v = g.submit("j1", one, prefs, NOW);
    assert_eq!(v.site.as_deref(), Some("a"));
    (g, on_b)
}

#[test]
fn a_waiting_job_moves_when_another_site_would_deliver_it_sooner() {
    let (mut g, on_b) = queued(Duration::minutes(10));
    g.sites[1].cancel("others", on_b).unwrap();
    g.adapt(NOW + Duration(1));
    let v = g.records["j1"].clone();
    assert_eq!((v.state(), v.site.as_deref()), (BrokerState::Dispatched, Some("b")));
    assert_eq!(g.core.moved(), 1);
    assert_eq!(
        (g.alices(0), g.alices(1)),
        (0, 1),
        "the job must be in exactly one queue"
    );
}

#[test]
fn a_gain_under_the_margin_is_not_worth_a_move() {
    let (mut g, on_b) = queued(Duration::hours(6));
    g.sites[1].cancel("others", on_b).unwrap();
    g.adapt(NOW + Duration(1));
    assert_eq!(g.records["j1"].site.as_deref(), Some("a"));
    assert_eq!((g.alices(0), g.alices(1)), (1, 0));
}

#[test]
fn a_started_job_is_never_moved() {
    let (mut g, on_b) = queued(Duration::minutes(10));
    g.sites[1].cancel("others", on_b).unwrap();
    g.adapt(NOW + Duration::hours(5) + Duration::minutes(1));
    assert_eq!(g.records["j1"].site.as_deref(), Some("a"));
    assert_eq!(g.core.moved(), 0);
}

/// Alice's co-allocation `c1` of `n` parts of 16 CPUs for an hour, to
/// start together within a day.
fn coallocate(g: &mut Grid, n: usize) -> Vec<BrokerJob> {
    let parts: Vec<(BrokerJob, Job)> = (0..n)
        .map(|k| {
            let mut v = BrokerJob::new(format!("c1-{k}"), "alice".into(), "json".into(), Entry::Reserving, NOW);
            v.member = Member::Part {
                coallocation: "c1".into(),
                index: k,
            };
            let j = Job {
                cpus: Some(16),
                wall_time: Some(Duration::hours(1)),
                ..job()
            };
            (v, j)
        })
        .collect();
    let search = CoSearch {
        window: (NOW, NOW + Duration::hours(24)),
        delta: Duration::ZERO,
        hold: NOW + Duration::minutes(5),
    };
    g.core.coallocate("c1", parts, Some(search));
    g.settle(NOW);
    (0..n).map(|k| g.records[&format!("c1-{k}")].clone()).collect()
}

#[test]
fn a_coallocations_parts_start_together_at_different_sites() {
    let mut sites = vec![site("a", 100.0), site("b", 100.0)];
    // a is busy for two hours: both parts wait for it.
    busy(&mut sites[0], 2);
    let mut g = Grid::new(sites, BrokerParams::default());
    let parts = coallocate(&mut g, 2);
    let at: Vec<&str> = parts.iter().map(|v| v.site.as_deref().unwrap()).collect();
    assert_eq!(at.iter().collect::<std::collections::BTreeSet<_>>().len(), 2, "{at:?}");
    for v in &parts {
        assert_eq!(v.state(), BrokerState::Dispatched);
        let k = if v.site.as_deref() == Some("a") { 0 } else { 1 };
        let status = g.sites[k].status(&JobHandle(v.site_job.clone().unwrap()));
        assert_eq!(
            status,
            Ok(JobState::Queued {
                expected_start: Some(NOW + Duration::hours(2))
            }),
            "{v:?}"
        );
    }
    let placed = g.lines.iter().filter(|l| l.1 == BrokerState::Dispatched);
    assert!(placed.clone().count() == 2);
    assert!(placed
        .clone()
        .all(|l| l.2.as_deref().unwrap().contains("co-allocated to start at")));
}

#[test]
fn a_coallocation_that_fits_nowhere_leaves_nothing_and_fails_every_part() {
    let sites = vec![site("a", 100.0), site("b", 100.0)];
    let mut g = Grid::new(sites, BrokerParams::default());
    let parts = coallocate(&mut g, 3);
    // Three parts as wide as each of two sites never run together: each
    // part fails with why, before any site is asked.
    for v in &parts {
        assert_eq!(v.state(), BrokerState::Failed);
        assert_eq!(
            v.reason.as_deref(),
            Some(
                "the parts (16, 16, 16 processors) run at the same time and no choice of sites holds them all \
                 at once (sites of 16, 16 processors): no window can change that"
            )
        );
    }
    assert!(g.sites.iter().all(|s| s.planner().is_empty()), "nothing stays held");
    assert_eq!(g.core.unfinished("alice"), 0);
}

#[test]
fn a_job_waiting_at_its_site_is_held_there_and_the_queue_moves_up_into_its_slot() {
    // One site, busy for an hour: j1 and j2 (16 CPUs, an hour each) wait
    // there, j1 first.
    let mut a = site("a", 100.0);
    busy(&mut a, 1);
    let mut g = Grid::new(vec![a], BrokerParams::default());
    let whole = Job {
        cpus: Some(16),
        benchmarks: vec![Benchmark {
            name: "app".into(),
            result: 100.0,
            time: Duration::hours(1),
        }],
        ..job()
    };
    let v1 = g.submit("j1", whole.clone(), JobPreferences::default(), NOW);
    let v2 = g.submit("j2", whole, JobPreferences::default(), NOW);
    let (h1, h2) = (JobHandle(v1.site_job.unwrap()), JobHandle(v2.site_job.unwrap()));
    let start = |g: &Grid, h: &JobHandle| match g.sites[0].status(h) {
        Ok(JobState::Queued { expected_start }) => expected_start,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (start(&g, &h1), start(&g, &h2)),
        (Some(NOW + Duration::hours(1)), Some(NOW + Duration::hours(2)))
    );

    // Another user cannot hold it.
    assert!(g.core.hold(NOW, "mallory", "j1").is_err());
    // Held: recorded held once its site says so, its slot given to j2.
    let t = NOW + Duration::minutes(10);
    assert_eq!(
        g.core.hold(t, "alice", "j1"),
        Ok(brokk_broker::jobs::Applied::Unchanged)
    );
    g.settle(t);
    let held = &g.records["j1"];
    assert_eq!((held.state(), held.site.as_deref()), (BrokerState::Held, Some("a")));
    let line = g.lines.iter().rev().find(|l| l.0 == "j1").unwrap();
    assert_eq!(
        (line.1, line.2.as_deref()),
        (BrokerState::Held, Some("held by its owner"))
    );
    assert_eq!(start(&g, &h1), None);
    assert_eq!(start(&g, &h2), Some(NOW + Duration::hours(1)));
    // It holds no slot, so it does not count toward alice's limit, and
    // nothing starts it while the site's time passes.
    g.sites[0].advance(NOW + Duration::hours(3));
    assert_eq!(g.sites[0].record(&h1).unwrap().state, brokk_model::JobPhase::Held);

    // Released: placed again as an arrival is, after j2.
    let t = NOW + Duration::hours(3);
    assert_eq!(
        g.core.release(t, "alice", "j1"),
        Ok(brokk_broker::jobs::Applied::Unchanged)
    );
    g.settle(t);
    assert_eq!(g.records["j1"].state(), BrokerState::Dispatched);
    g.sites[0].advance(t);
    assert_eq!(g.sites[0].status(&h1), Ok(JobState::Running { since: t }));
    // Once it runs, its site refuses to hold it, and it runs on.
    g.core.hold(t, "alice", "j1").unwrap();
    g.settle(t);
    assert_eq!(g.records["j1"].state(), BrokerState::Dispatched);
    assert_eq!(g.sites[0].status(&h1), Ok(JobState::Running { since: t }));
    let answer = g.sites[0].hold_job("alice", &h1, true).unwrap_err();
    assert!(answer.to_string().contains("has started"), "{answer}");
}
