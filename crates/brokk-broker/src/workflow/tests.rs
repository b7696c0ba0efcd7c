//! Hand-computed admissions on small grids of in-memory sites.

use brokk_core::Request;
use brokk_model::workflow::{CoAllocation, Edge, Task, Workflow};
use brokk_model::{Duration, Time};

use super::*;
use crate::memory_site::MemorySite;

const HORIZON: Time = Time(10_000_000);

/// Sites of the given (processors, speed), joined by `links` of 100 bytes/s.
pub(super) fn grid(specs: &[(u32, f64)], links: &[(usize, usize)]) -> (Vec<MemorySite>, Topology, Network) {
    let links = links.iter().map(|&(a, b)| LinkSpec { a, b, bandwidth: 100 }).collect();
    let net = Network::new(specs.len(), links, 1, HORIZON).unwrap();
    let specs: Vec<SiteSpec> = specs
        .iter()
        .enumerate()
        .map(|(i, &(capacity, speed))| SiteSpec {
            name: format!("site{i}"),
            capacity,
            speed,
        })
        .collect();
    let sites = memory_sites(&specs, HORIZON);
    (sites, Topology::new(specs, &net), net)
}

/// A local reservation of `amount` processors from 0 for `seconds`.
fn block(site: &mut MemorySite, amount: u32, seconds: i64) {
    let req = Request {
        amount,
        duration: Duration(seconds),
        earliest: Time(0),
        latest: Time(0),
        flexible: false,
    };
    assert!(matches!(
        site.reserve("local", &req, None),
        Ok(brokk_core::Reply::Granted { .. })
    ));
}

pub(super) fn task(id: &str, runtime: i64, cores: u32) -> Task {
    Task {
        id: id.into(),
        runtime: Duration(runtime),
        cores,
        ..Task::default()
    }
}

pub(super) fn edge(parent: &str, child: &str, bytes: u64) -> Edge {
    Edge {
        parent: parent.into(),
        child: child.into(),
        bytes,
    }
}

fn opts(scheduler: Scheduler) -> Options {
    Options {
        scheduler,
        now: Time(0),
        hold: Duration(600),
        explain: true,
    }
}

pub(super) fn admit_on(
    wf: &Workflow,
    sites: &mut [MemorySite],
    topo: &Topology,
    net: &mut Network,
    o: &Options,
) -> Result<Offer, Rejection> {
    admit(wf, topo, &mut refs(sites), net, "alice", o)
}

pub(super) fn refs(sites: &mut [MemorySite]) -> Vec<&mut dyn Site> {
    sites.iter_mut().map(|s| s as &mut dyn Site).collect()
}

fn held(sites: &[MemorySite], net: &Network) -> usize {
    sites.iter().map(|s| s.planner().len()).sum::<usize>()
        + (0..net.directed_links()).map(|l| net.planner(l).len()).sum::<usize>()
}

/// Two tasks that must run together, `bandwidth` bytes/s apart.
fn pair(a: Task, b: Task, bandwidth: u64, deadline: Option<i64>) -> Workflow {
    Workflow {
        coallocations: vec![CoAllocation {
            a: a.id.clone(),
            b: b.id.clone(),
            bandwidth,
        }],
        tasks: vec![a, b],
        deadline: deadline.map(Time),
        ..Workflow::default()
    }
}

/// a -> b, a -> c, b -> d, c -> d, each edge 1,000 bytes.
fn diamond(deadline: Option<i64>) -> Workflow {
    Workflow {
        name: "diamond".into(),
        tasks: vec![
            task("a", 100, 4),
            task("b", 100, 4),
            task("c", 100, 4),
            task("d", 100, 4),
        ],
        edges: vec![
            edge("a", "b", 1_000),
            edge("a", "c", 1_000),
            edge("b", "d", 1_000),
            edge("c", "d", 1_000),
        ],
        deadline: deadline.map(Time),
        ..Workflow::default()
    }
}

#[test]
fn heftsync_spreads_a_diamond_and_books_its_transfers() {
    // Two 4-processor sites, 100 bytes/s between them: b and c run side by
    // side at t = 100 only if one of them gets a's data over the link
    // (10 s); that beats waiting for the other to end (t = 200).
    let (mut sites, topo, mut net) = grid(&[(4, 1.0), (4, 1.0)], &[(0, 1)]);
    let offer = admit_on(
        &diamond(Some(1_000)),
        &mut sites,
        &topo,
        &mut net,
        &opts(Scheduler::HeftSync),
    )
    .unwrap();
    let p = &offer.plan;
    let at = |id: &str| p.tasks.iter().find(|t| t.task == id).unwrap().clone();
    assert_eq!((at("a").site, at("a").start, at("a").end), (0, Time(0), Time(100)));
    let (b, c) = (at("b"), at("c"));
    assert_ne!(b.site, c.site);
    let far = if b.site == 1 { &b } else { &c };
    assert_eq!(far.start, Time(110), "after a's 1,000 bytes cross at 100 bytes/s");
    // d follows the later branch (c, ending at 210 on site 1) and b's data
    // crosses while it waits.
    assert_eq!((at("d").site, at("d").start), (1, Time(210)));
    assert_eq!(p.finish, Time(310));
    assert_eq!(p.transfers.len(), 2);
    assert!(p
        .transfers
        .iter()
        .all(|x| x.kind == TransferKind::Data { bytes: 1_000 } && x.end.0 - x.start.0 == 10));
    assert_eq!(offer.expires, Time(600));
    // Everything is held until committed.
    offer.commit("alice", &mut refs(&mut sites), &mut net).unwrap();
    // Four tasks, two transfers over one link each.
    assert_eq!(held(&sites, &net), 6);
}

#[test]
fn an_impossible_deadline_is_refused_with_the_earliest_finish_and_nothing_held() {
    let (mut sites, topo, mut net) = grid(&[(4, 1.0), (4, 1.0)], &[(0, 1)]);
    for s in Scheduler::ALL {
        let r = admit_on(&diamond(Some(250)), &mut sites, &topo, &mut net, &opts(s)).unwrap_err();
        assert_eq!(held(&sites, &net), 0, "{s} left holds");
        assert!(r.messages.probes > 0);
        let finish = r.earliest_finish.unwrap_or_else(|| panic!("{s} offered no finish"));
        assert!(finish.0 >= 300, "{s}: {finish}");
    }
}

#[test]
fn bad_workflows_are_refused_before_anything_is_asked() {
    let (mut sites, topo, mut net) = grid(&[(4, 1.0)], &[]);
    let big = Workflow {
        tasks: vec![task("x", 10, 8)],
        ..Workflow::default()
    };
    let r = admit_on(&big, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap_err();
    assert_eq!(
        r.reason,
        RejectReason::TooLarge {
            task: "x".into(),
            cores: 8,
            largest: 4
        }
    );
    let past = Workflow {
        tasks: vec![task("x", 10, 1)],
        earliest: Some(Time(100)),
        deadline: Some(Time(50)),
        ..Workflow::default()
    };
    let r = admit_on(&past, &mut sites, &topo, &mut net, &opts(Scheduler::Hlst)).unwrap_err();
    assert!(matches!(r.reason, RejectReason::PastDeadline { .. }));
    let cycle = Workflow {
        tasks: vec![task("x", 10, 1), task("y", 10, 1)],
        edges: vec![edge("x", "y", 0), edge("y", "x", 0)],
        ..Workflow::default()
    };
    let r = admit_on(&cycle, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap_err();
    assert!(r.to_string().contains("cycle"), "{r}");
    assert_eq!(r.messages, Messages::default());
}

#[test]
fn co_allocated_tasks_start_together_with_their_stream_booked() {
    // Two 4-processor tasks that must run together, 30 bytes/s apart: one
    // site holds only one of them.
    let (mut sites, topo, mut net) = grid(&[(4, 1.0), (4, 1.0)], &[(0, 1)]);
    let wf = pair(task("p", 100, 4), task("q", 60, 4), 30, Some(500));
    for s in [
        Scheduler::HeftSync,
        Scheduler::HeftSyncBt,
        Scheduler::Hlst,
        Scheduler::Single,
    ] {
        let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(s)).unwrap_or_else(|r| panic!("{s}: {r}"));
        let p = &offer.plan.tasks;
        assert_eq!(p[0].start, p[1].start, "{s}");
        assert_eq!(p[0].end, p[1].end, "{s}: the window is the longest member's");
        assert_ne!(p[0].site, p[1].site);
        let stream = &offer.plan.transfers[0];
        assert_eq!((stream.kind, stream.bytes_per_s), (TransferKind::Stream, 30));
        assert_eq!((stream.start, stream.end), (p[0].start, p[0].end));
        if s == Scheduler::Hlst {
            assert_eq!(p[0].end, Time(500), "HLST ends at the deadline");
        } else {
            assert_eq!(p[0].start, Time(0));
        }
        offer.release("alice", &mut refs(&mut sites), &mut net);
        assert_eq!(held(&sites, &net), 0);
    }
}

#[test]
fn a_slower_member_widens_the_window_and_backtracking_finds_a_later_start() {
    // Site 0 is fast but busy until 50; site 1 is half as fast.
    let (mut sites, topo, mut net) = grid(&[(2, 2.0), (2, 1.0)], &[(0, 1)]);
    block(&mut sites[0], 2, 50);
    let wf = pair(task("p", 100, 2), task("q", 100, 2), 0, None);
    // HEFTSync: p ends at 100 either way (site 0 from 50, or site 1 from
    // 0); the first such site sets the window [50, 100). q fits there only
    // at site 1, which needs 100 s: the window grows and both hold [50, 150).
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap();
    let p = &offer.plan.tasks;
    assert_eq!(
        (p[0].start, p[0].end, p[1].start, p[1].end),
        (Time(50), Time(150), Time(50), Time(150))
    );
    offer.release("alice", &mut refs(&mut sites), &mut net);
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSyncBt)).unwrap();
    let p = &offer.plan.tasks;
    assert_eq!(p[0].start, p[1].start);
    assert_eq!(p[0].end - p[0].start, Duration(100));
}

#[test]
fn single_job_admission_misses_a_deadline_that_heftsync_meets() {
    // A slow idle site and a fast one: the earliest start is the slow
    // site, the earliest finish the fast one.
    let (mut sites, topo, mut net) = grid(&[(1, 0.5), (1, 4.0)], &[(0, 1)]);
    block(&mut sites[1], 1, 10);
    let wf = Workflow {
        tasks: vec![task("x", 400, 1)],
        deadline: Some(Time(200)),
        ..Workflow::default()
    };
    let r = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::Single)).unwrap_err();
    assert_eq!(r.reason, RejectReason::LateFinish { finish: Time(800) });
    assert_eq!(held(&sites, &net), 1, "only the local reservation");
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap();
    assert_eq!(offer.plan.tasks[0].site, 1);
    assert_eq!(offer.plan.finish, Time(110));
}

#[test]
fn hlst_packs_against_the_deadline_and_heftsync_against_now() {
    let (mut sites, topo, mut net) = grid(&[(4, 1.0)], &[]);
    let wf = Workflow {
        tasks: vec![task("a", 100, 2), task("b", 50, 2)],
        edges: vec![edge("a", "b", 0)],
        deadline: Some(Time(1_000)),
        ..Workflow::default()
    };
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::Hlst)).unwrap();
    let p = &offer.plan.tasks;
    assert_eq!((p[0].start, p[1].start, p[1].end), (Time(850), Time(950), Time(1_000)));
    offer.release("alice", &mut refs(&mut sites), &mut net);
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap();
    assert_eq!(offer.plan.tasks[1].end, Time(150));
}

#[test]
fn holds_not_committed_lapse_at_their_timeout() {
    let (mut sites, topo, mut net) = grid(&[(4, 1.0), (4, 1.0)], &[(0, 1)]);
    let offer = admit_on(&diamond(None), &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap();
    assert!(held(&sites, &net) > 0);
    for s in &mut sites {
        s.advance(offer.expires);
    }
    net.advance(offer.expires);
    assert_eq!(held(&sites, &net), 0);
    // And committing too late says so.
    let late = offer.commit("alice", &mut refs(&mut sites), &mut net);
    assert!(late.is_err());
}

#[test]
fn data_between_unconnected_sites_keeps_parent_and_child_together() {
    let (mut sites, topo, mut net) = grid(&[(4, 1.0), (4, 1.0)], &[]);
    let offer = admit_on(&diamond(None), &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap();
    assert!(offer.plan.tasks.iter().all(|t| t.site == offer.plan.tasks[0].site));
    assert!(offer.plan.transfers.is_empty());
}

#[test]
fn the_genetic_search_finds_the_schedule_heftsync_misses() {
    // [VRM] Fig. 4.4: a long one-processor task and a short two-processor
    // one; HEFTSync gives the long one the two-processor site because it is
    // free first, and the short one no longer fits before the deadline.
    let (mut sites, topo, mut net) = grid(&[(2, 1.0), (1, 1.0)], &[]);
    block(&mut sites[1], 1, 10);
    let wf = Workflow {
        tasks: vec![task("long", 100, 1), task("wide", 50, 2)],
        deadline: Some(Time(110)),
        ..Workflow::default()
    };
    let r = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSync)).unwrap_err();
    assert_eq!(r.reason, RejectReason::NoRoom { task: "wide".into() });
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::Genetic)).unwrap();
    let p = &offer.plan.tasks;
    assert_eq!(
        (p[0].site, p[0].start),
        (1, Time(10)),
        "the long task waits for the small site"
    );
    assert_eq!(p[1].site, 0);
    assert!(p[1].end <= Time(110));
}

#[test]
fn a_workflow_wider_than_the_genetic_searchs_candidates_is_admitted_from_heftsyncs_plan() {
    // Forty one-processor tasks on a 4-processor site: five candidate starts
    // per task hold at most twenty of them, though the site holds all forty
    // one after another. HEFTSync's plan, the first string, does: the
    // search admits the workflow with it.
    let (mut sites, topo, mut net) = grid(&[(4, 1.0)], &[]);
    let wf = Workflow {
        tasks: (0..40).map(|k| task(&format!("t{k}"), 10, 1)).collect(),
        deadline: Some(Time(100_000)),
        ..Workflow::default()
    };
    let offer = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::Genetic)).unwrap();
    let mut starts: Vec<i64> = offer.plan.tasks.iter().map(|t| t.start.0).collect();
    starts.sort_unstable();
    // Four at a time, ten seconds each: ten rounds.
    let rounds: Vec<i64> = starts.chunks(4).map(|c| c[0]).collect();
    assert!(starts.chunks(4).all(|c| c.iter().all(|&s| s == c[0])), "{starts:?}");
    assert_eq!(rounds.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>(), vec![10; 9]);
}

#[test]
fn every_kind_is_its_json_name() {
    let t = || "t".to_string();
    for r in [
        RejectReason::Invalid { message: t() },
        RejectReason::TooLarge {
            task: t(),
            cores: 1,
            largest: 0,
        },
        RejectReason::PastDeadline {
            deadline: Time(0),
            earliest: Time(0),
        },
        RejectReason::NoRoom { task: t() },
        RejectReason::CoAllocation { tasks: vec![t()] },
        RejectReason::Network { from: t(), to: t() },
        RejectReason::LateFinish { finish: Time(0) },
        RejectReason::SearchExhausted {
            candidates: 5,
            generations: 1,
            conflicts: 1,
        },
    ] {
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["reason"], r.kind());
    }
}

#[test]
fn a_broker_without_probes_guesses_from_what_it_knows_and_is_refused_where_others_booked() {
    // Two 4-processor tasks that start together; site 0 is booked by
    // someone else until 100, which the probing broker sees and the
    // non-probing one does not.
    let wf = pair(task("p", 100, 4), task("q", 100, 4), 0, Some(1000));
    let (mut sites, topo, mut net) = grid(&[(4, 1.0), (4, 1.0)], &[(0, 1)]);
    block(&mut sites[0], 4, 100);
    let probing = admit_on(&wf, &mut sites, &topo, &mut net, &opts(Scheduler::HeftSyncBt)).unwrap();
    assert!(probing.messages.probes > 0);
    assert_eq!(probing.messages.refused, 0, "the probes showed where there is room");
    probing.release("alice", &mut refs(&mut sites), &mut net);

    let knowledge: Vec<brokk_core::Planner> = (0..2).map(|_| brokk_core::planner(4, HORIZON)).collect();
    let blind = |sites: &mut [MemorySite], net: &mut Network, known: &[brokk_core::Planner]| {
        admit_without_probing(
            &wf,
            &topo,
            &mut refs(sites),
            net,
            "alice",
            &opts(Scheduler::HeftSyncBt),
            known,
        )
    };
    let guessed = blind(&mut sites, &mut net, &knowledge).unwrap();
    assert_eq!(guessed.messages.probes, 0, "no site was probed");
    assert!(
        guessed.messages.refused > 0,
        "it tried site 0 at 0 first: {:?}",
        guessed.messages
    );
    // It still found the plan the probing broker found.
    let (a, b) = (&probing.plan.tasks, &guessed.plan.tasks);
    assert_eq!((a[0].start, a[1].start), (b[0].start, b[1].start));
    // Where what it knows is right, it makes the probing broker's attempts.
    guessed.release("alice", &mut refs(&mut sites), &mut net);
    let mut known = knowledge.clone();
    let busy = Request {
        amount: 4,
        duration: Duration(100),
        earliest: Time(0),
        latest: Time(0),
        flexible: false,
    };
    assert!(matches!(
        known[0].reserve("local", &busy, None),
        brokk_core::Reply::Granted { .. }
    ));
    let told = blind(&mut sites, &mut net, &known).unwrap();
    assert_eq!(told.messages.refused, 0);
    assert_eq!(told.messages.reservations, probing.messages.reservations);
}

/// The sites of `grid` seen through alice's share of half of each.
fn within_half(sites: &mut [MemorySite]) -> Vec<crate::share::Within<'_>> {
    let half = crate::share::Share {
        of_capacity: 0.5,
        live: 100,
    };
    sites
        .iter_mut()
        .map(|s| {
            let info = s.info().unwrap();
            crate::share::Within::new(s as &mut dyn Site, &info.name, half, info.total_slots, Vec::new())
        })
        .collect()
}

#[test]
fn a_workflow_is_planned_within_its_owners_share() {
    // Two independent 4-processor tasks on one site of 8: side by side
    // without a share; one after the other within half the site.
    let wf = Workflow {
        tasks: vec![task("a", 100, 4), task("b", 100, 4)],
        ..Workflow::default()
    };
    for scheduler in [Scheduler::HeftSync, Scheduler::Genetic] {
        let (mut sites, topo, mut net) = grid(&[(8, 1.0)], &[]);
        let free = admit_on(&wf, &mut sites, &topo, &mut net, &opts(scheduler)).unwrap();
        assert_eq!(free.plan.tasks[0].start, free.plan.tasks[1].start, "{scheduler:?}");
        free.release("alice", &mut refs(&mut sites), &mut net);

        // As the service asks: the sites as large as the share lets alice use.
        let mut shared = within_half(&mut sites);
        let mut halved = topo.clone();
        halved.sites[0].capacity = shared[0].usable();
        assert_eq!(halved.sites[0].capacity, 4);
        let mut views: Vec<&mut dyn Site> = shared.iter_mut().map(|s| s as &mut dyn Site).collect();
        let offer = admit(&wf, &halved, &mut views, &mut net, "alice", &opts(scheduler)).unwrap();
        let (a, b) = (&offer.plan.tasks[0], &offer.plan.tasks[1]);
        assert!(a.end <= b.start || b.end <= a.start, "{scheduler:?}: {a:?} {b:?}");
    }
    // Beyond a deadline that only side by side would meet, it is refused,
    // and the share is what stood in the way.
    let (mut sites, topo, mut net) = grid(&[(8, 1.0)], &[]);
    let tight = Workflow {
        deadline: Some(Time(150)),
        ..wf
    };
    let mut shared = within_half(&mut sites);
    let mut views: Vec<&mut dyn Site> = shared.iter_mut().map(|s| s as &mut dyn Site).collect();
    let mut o = opts(Scheduler::HeftSync);
    o.explain = false;
    assert!(admit(&tight, &topo, &mut views, &mut net, "alice", &o).is_err());
    drop(views);
    let why = shared[0].over().expect("the share stood in the way");
    assert!(why.to_string().contains("8 of the 8 slots of site0"), "{why}");
    let said = crate::share::why_rejected(&RejectReason::NoRoom { task: "b".into() }, &shared, Time(0));
    assert!(
        matches!(&said, Some(RejectReason::Share { task, .. }) if task == "b"),
        "{said:?}"
    );
    // A task wider than the share of the site is the share's doing too.
    let wide = RejectReason::TooLarge {
        task: "w".into(),
        cores: 6,
        largest: 4,
    };
    let said = crate::share::why_rejected(&wide, &shared, Time(0)).unwrap().to_string();
    assert!(
        said.contains("6 of the 8 slots of site0") && said.contains("at most 4"),
        "{said}"
    );
    let wider = RejectReason::TooLarge {
        task: "w".into(),
        cores: 9,
        largest: 4,
    };
    assert_eq!(
        crate::share::why_rejected(&wider, &shared, Time(0)),
        None,
        "wider than the site itself"
    );
    drop(shared);
    assert_eq!(held(&sites, &net), 0, "nothing left reserved");
}
