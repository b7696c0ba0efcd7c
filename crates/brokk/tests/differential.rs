//! One scheduling core, two worlds: a stream of jobs through a real
//! `brokk serve` with three embedded sites (real processes, wall clock),
//! and the same stream through the simulator with the same three sites
//! (virtual runner, virtual time), must land on the same site job for job
//! and start in the same order at each site. A third stream mixes in
//! jobs wider than every site, co-allocated over two (or refused, live
//! and simulated alike, where their parts never fit together), and a
//! workflow admitted in its midst: the same plan task by task, and its
//! tasks started within the slack, children moved up alike when their
//! parents end early.
//!
//! What differs between the worlds is only time. The live service decides
//! at the wall clock, in whole seconds as every site does, and a process
//! starts a fraction of a second after its planned second and ends a
//! fraction after its run; the simulator is exact. A second stream asks
//! for reservations (`--reserve`): each job holds one on its best site
//! before it is sent, live and simulated by the same core. So:
//! - each job's arrival in the simulator is the second the live broker
//!   dispatched it (from its history), and jobs are submitted one at a time,
//!   each once the previous one is dispatched, so decisions happen in the
//!   same order on both sides;
//! - every job is dispatched before the first one can end (run times of at
//!   least `MIN_RUN` s, dispatch of the whole stream in a few seconds: 4-5 s
//!   with the machine to itself, up to 10 s seen in a busy CI run), so where a
//!   job goes depends only on the decisions before it, never on when a
//!   process happened to exit: sites must agree exactly;
//! - a decision must see every site at one second, as the simulator does: a
//!   site answering a second later than the others predicts its waits from
//!   that later second and plans the job from it, which can tip a close
//!   choice (CI saw it twice). So each job is submitted early in a second
//!   (`SUBMIT_BEFORE_MS`), and a decision still seen to end in a later second
//!   than it began (a stalled machine) ends the exact comparison there: what
//!   follows it is a different stream;
//! - a live end can fall in the second after the simulated one (start
//!   fraction plus process overhead); that moves the plans of the jobs
//!   queued behind it, later or (when conservative backfilling then fits a
//!   different job into the gap) earlier, and it accumulates along a
//!   site's queue: starts may differ by up to `SLACK` seconds either way,
//!   and two jobs whose simulated starts are closer than that may start in
//!   either order live. Conservative backfilling is chaotic in this sense:
//!   one second can let a job into a gap or keep it out, and everything
//!   queued behind it then moves (15 s was seen once); so up to
//!   `ALLOWED_PERCENT` of the starts, and of the start orders, may fall
//!   outside the slack. Sites must agree for every job.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration as StdDuration, Instant, SystemTime, UNIX_EPOCH};

use brokk_broker::workflow::Scheduler;
use brokk_model::workflow::{Edge, Task, Workflow};
use brokk_model::{Duration, Objective, Time};
use brokk_proto::broker::BrokerClient;
use brokk_proto::wire::{
    BrokerJob, BrokerState, CoallocJob, CoallocRequest, SubmitRequest, WorkflowRequest, WorkflowView,
};
use brokk_sim::cluster::SimJob;
use brokk_sim::course::CourseConfig;
use brokk_sim::grid::{simulate_grid_with_workflows, GridOptions, GridRouting, GridWorkflow, WorkflowRun};
use brokk_sim::platform::ClusterSpec;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Jobs of the plain stream, and of the stream that reserves.
const JOBS: usize = 100;
const RESERVING_JOBS: usize = 40;
/// The shortest run: every job is dispatched before the first can end.
const MIN_RUN: i64 = 16;
/// Jobs are submitted only this early in a second, so that a decision (tens
/// of milliseconds) does not straddle two.
const SUBMIT_BEFORE_MS: u32 = 600;
const SITES: [(&str, u32); 3] = [("small", 16), ("medium", 32), ("large", 48)];
/// Seconds a live start may differ from the simulated one (see the module comment).
const SLACK: i64 = 6;
/// Percent of starts (and of start orders) allowed beyond the slack.
const ALLOWED_PERCENT: usize = 10;

/// A stream: `n` jobs of one to eight processors, every `wide_every`th
/// one wider than every site instead (a co-allocation), each holding a
/// reservation on its best site first when `reserving`; then, when
/// `workflow`, a workflow admitted behind them.
#[derive(Clone, Copy)]
struct Stream {
    n: usize,
    reserving: bool,
    wide_every: Option<usize>,
    workflow: bool,
}

/// (cpus, wall time, run time) of each job of `s`, from a seed.
fn jobs_of(s: Stream) -> Vec<(u32, i64, i64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    (0..s.n)
        .map(|k| {
            let mut cpus = rng.gen_range(1..=8);
            let run = rng.gen_range(MIN_RUN..=MIN_RUN + 4);
            if s.wide_every.is_some_and(|w| k % w == w - 1) {
                cpus = rng.gen_range(WIDEST + 1..=WIDEST + 32);
            }
            (cpus, run + 2, run)
        })
        .collect()
}

/// The largest site's processors: a wider job is co-allocated.
const WIDEST: u32 = 48;

/// The parts of a job of `cpus` over sites of at most [`WIDEST`]: as few
/// as can be, as even as can be (what the simulator splits it into).
fn parts(cpus: u32) -> Vec<u32> {
    let k = cpus.div_ceil(WIDEST);
    (0..k).map(|p| cpus / k + u32::from(p < cpus % k)).collect()
}

/// A description of `cpus` processors running `run` seconds with `wall`.
fn described(name: &str, cpus: u32, wall: i64, run: i64) -> String {
    format!(
        r#"{{"name": "{name}", "executable": "/bin/sleep", "arguments": ["{run}"], "cpus": {cpus}, "wall_time": {wall}}}"#
    )
}

/// The workflow admitted behind a stream: a diamond (`a` before `b` and
/// `c`, both before `d`) and a task on its own, each booked for
/// [`TASK_WALL`] s and running half of it, so children move up.
fn workflow() -> Workflow {
    let sizes = [("a", 8), ("b", 24), ("c", 16), ("d", 8), ("e", 4)];
    let tasks = sizes
        .iter()
        .map(|&(id, cpus)| Task {
            id: id.into(),
            job: Some(serde_json::from_str(&described(id, cpus, TASK_WALL, TASK_WALL / 2)).unwrap()),
            runtime: Duration(TASK_WALL),
            cores: cpus,
            ..Task::default()
        })
        .collect();
    let edge = |parent: &str, child: &str| Edge {
        parent: parent.into(),
        child: child.into(),
        bytes: 0,
    };
    Workflow {
        name: "diamond".into(),
        tasks,
        edges: vec![edge("a", "b"), edge("a", "c"), edge("b", "d"), edge("c", "d")],
        ..Workflow::default()
    }
}

/// Each workflow task's booking.
const TASK_WALL: i64 = 20;

/// The wall clock, as the broker and its sites read it.
fn wall_clock() -> StdDuration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// The second the broker decided where the job goes.
fn dispatched_at(j: &BrokerJob) -> Time {
    j.history
        .iter()
        .find(|h| h.state == BrokerState::Dispatched)
        .map(|h| h.at)
        .unwrap()
}

fn wait_dispatched(client: &BrokerClient, id: &str) -> BrokerJob {
    let deadline = Instant::now() + StdDuration::from_secs(30);
    loop {
        let j = client.job(id).unwrap();
        if j.state() != BrokerState::Accepted {
            return j;
        }
        assert!(Instant::now() < deadline, "job {id} was not dispatched");
        // Not faster: each look is a request the service's dispatcher shares the cores with.
        std::thread::sleep(StdDuration::from_millis(10));
    }
}

/// Waits for job `id` to end, and requires it finished.
fn finished(client: &BrokerClient, id: &str, deadline: Instant) -> BrokerJob {
    loop {
        let v = client.job(id).unwrap();
        if v.state().is_terminal() {
            assert_eq!(v.state(), BrokerState::Finished, "{v:?}");
            return v;
        }
        assert!(Instant::now() < deadline, "the stream did not finish");
        std::thread::sleep(StdDuration::from_millis(200));
    }
}

/// Sleeps into the next second when the present one is too far gone for a
/// decision to end within it.
fn early_in_a_second() {
    let into_second = wall_clock().subsec_millis();
    if into_second >= SUBMIT_BEFORE_MS {
        std::thread::sleep(StdDuration::from_millis(u64::from(1_005 - into_second)));
    }
}

#[test]
fn the_live_broker_and_the_simulated_one_place_and_start_a_stream_alike() {
    let plain = Stream {
        n: JOBS,
        reserving: false,
        wide_every: None,
        workflow: false,
    };
    alike("stream", plain);
}

#[test]
fn the_live_broker_and_the_simulated_one_place_and_start_a_reserving_stream_alike() {
    let reserving = Stream {
        n: RESERVING_JOBS,
        reserving: true,
        wide_every: None,
        workflow: false,
    };
    alike("reserving", reserving);
}

#[test]
fn the_live_broker_and_the_simulated_one_coallocate_and_run_a_workflow_alike() {
    let mixed = Stream {
        n: MIXED_JOBS,
        reserving: false,
        wide_every: Some(WIDE_EVERY),
        workflow: true,
    };
    alike("mixed", mixed);
}

/// Jobs of the stream with co-allocations, how often one is wide, and
/// after how many of them the workflow comes.
const MIXED_JOBS: usize = 40;
const WIDE_EVERY: usize = 8;
const WORKFLOW_AFTER: usize = 10;

/// Submits the workflow early in a second and waits for the next one:
/// the simulator takes a second's jobs before its workflows, so no job may
/// share the workflow's second.
fn admit_workflow(client: &BrokerClient) -> WorkflowView {
    early_in_a_second();
    let w = client
        .submit_workflow(&WorkflowRequest {
            workflow: workflow(),
            scheduler: None,
            uploads: Default::default(),
        })
        .unwrap()
        .expect("the workflow is admitted");
    let into_second = wall_clock().subsec_millis();
    std::thread::sleep(StdDuration::from_millis(u64::from(1_005 - into_second)));
    w
}

/// Runs stream `s` live and simulated, and compares them.
fn alike(name: &str, s: Stream) {
    let dir = common::scratch("differential", name);
    // Reservations may take whole sites, as the simulated broker's do.
    let mut config = String::from(
        "database = \"broker.db\"\nstate_dir = \"sites\"\ninfo_ttl_ms = 0\n[tokens]\n\"t\" = \"ann\"\n\
         [limits]\nreserved_share = 1.0\n",
    );
    for (name, cpus) in SITES {
        config += &format!("[[embedded]]\nname = \"{name}\"\ncapacity = {cpus}\n");
    }
    std::fs::write(dir.join("broker.toml"), &config).unwrap();
    let server = common::serve(&dir);
    let client = BrokerClient::new(&server.url, "t");

    // Live: one job (or co-allocation) at a time, each once the one before
    // is dispatched.
    let jobs = jobs_of(s);
    let preferences = s.reserving.then(|| brokk_model::JobPreferences {
        use_reservations: Some(true),
        ..Default::default()
    });
    // Per stream job, its broker jobs (a co-allocation's parts in order)
    // and the second it was decided.
    let mut live: Vec<(Vec<BrokerJob>, Time)> = Vec::new();
    let began = Instant::now();
    let mut straddled = None;
    let mut refused = 0;
    let mut admitted = None;
    for (k, &(cpus, wall, run)) in jobs.iter().enumerate() {
        early_in_a_second();
        let sent = Time(wall_clock().as_secs() as i64);
        let (js, at) = if cpus > WIDEST {
            let req = CoallocRequest {
                jobs: parts(cpus)
                    .iter()
                    .enumerate()
                    .map(|(p, &c)| CoallocJob {
                        description: described(&format!("j{k}.{p}"), c, wall, run),
                        format: Some("json".into()),
                    })
                    .collect(),
                earliest: sent,
                latest: sent + Duration::hours(24 * 30),
                delta: Duration::ZERO,
            };
            // Refused (409) where its parts never fit the sites together:
            // the simulated broker must leave it unrouted too.
            let js: Vec<BrokerJob> = match client.coallocate(&req) {
                Ok(placed) => placed.ids.iter().map(|id| client.job(id).unwrap()).collect(),
                Err(e) if e.status == 409 => {
                    refused += 1;
                    Vec::new()
                }
                Err(e) => panic!("co-allocation {k}: {e:?}"),
            };
            // Decided in the second it was asked for, unless it straddled.
            (js, sent)
        } else {
            let id = client
                .submit(&SubmitRequest {
                    description: described(&format!("j{k}"), cpus, wall, run),
                    format: Some("json".into()),
                    preferences: preferences.clone(),
                    ..Default::default()
                })
                .unwrap()
                .id;
            let j = wait_dispatched(&client, &id);
            let at = dispatched_at(&j);
            (vec![j], at)
        };
        if straddled.is_none() && wall_clock().as_secs() as i64 > at.0 {
            straddled = Some(k);
        }
        live.push((js, at));
        if s.workflow && k + 1 == WORKFLOW_AFTER {
            admitted = Some(admit_workflow(&client));
        }
    }
    // Jobs that went into the hold they took (one whose hold started later
    // than another site could start it went there instead, hold given back).
    let held = live
        .iter()
        .zip(&jobs)
        .filter(|(_, job)| job.0 <= WIDEST)
        .flat_map(|((js, _), _)| js)
        .filter(|j| {
            let sent = j.history.iter().find(|h| h.state == BrokerState::Dispatched);
            sent.and_then(|h| h.detail.as_deref())
                .is_some_and(|d| d.contains("in reservation"))
        })
        .count();
    let coallocated = live.iter().filter(|(js, _)| js.len() > 1).count();
    assert_eq!(
        coallocated > 0 && refused > 0,
        s.wide_every.is_some(),
        "{coallocated} co-allocations placed, {refused} refused"
    );
    assert_eq!(held > 0, s.reserving, "{held} jobs ran in a hold");
    // Jobs decided after a straddling decision are compared by site only up to it.
    let exact = straddled.unwrap_or(s.n);
    assert!(
        exact >= s.n / 2,
        "job {exact}'s decision spanned two seconds: the machine is too busy for an exact comparison"
    );
    let dispatching = began.elapsed();
    eprintln!("dispatching {} jobs took {dispatching:?}", jobs.len());
    assert!(
        (dispatching.as_secs() as i64) + 1 < MIN_RUN,
        "dispatching took {dispatching:?}; jobs may have ended meanwhile, and the comparison would not hold"
    );
    let deadline = Instant::now() + StdDuration::from_secs(240);
    let live: Vec<(Vec<BrokerJob>, Time)> = live
        .iter()
        .map(|(js, at)| (js.iter().map(|j| finished(&client, &j.id, deadline)).collect(), *at))
        .collect();

    // Simulated: the same jobs arriving at the seconds they were decided.
    let sim_jobs: Vec<SimJob> = jobs
        .iter()
        .zip(&live)
        .enumerate()
        .map(|(k, (&(cpus, wall, run), (_, at)))| SimJob {
            id: k as i64,
            submit: *at,
            run: Duration(run),
            size: cpus,
            estimate: Duration(wall),
            partition: -1,
            ..SimJob::default()
        })
        .collect();
    let specs: Vec<ClusterSpec> = SITES
        .iter()
        .map(|&(name, procs)| ClusterSpec {
            name: name.into(),
            procs,
            partitions: Vec::new(),
            speed: 1.0,
        })
        .collect();
    let routing = GridRouting::Broker {
        objective: Objective::EarliestCompletion,
        // The live broker holds on its best site (`--reserve`).
        reserve_top_k: usize::from(s.reserving),
    };
    let options = GridOptions {
        coallocate: true,
        ..GridOptions::default()
    };
    let arriving: Vec<GridWorkflow> = admitted
        .iter()
        .map(|w| GridWorkflow {
            at: w.submitted,
            workflow: workflow(),
            scheduler: Scheduler::HeftSync,
        })
        .collect();
    // Every task runs half its booking, as the live ones sleep.
    let course = CourseConfig {
        runtime: [0.5, 0.5],
        ..CourseConfig::default()
    };
    let (sim, sim_workflows) = simulate_grid_with_workflows(&specs, &sim_jobs, &arriving, course, routing, options);

    // Per stream job, where each of its parts ran and when, sites in order.
    let mut sim_runs: BTreeMap<usize, Vec<(String, Time)>> = BTreeMap::new();
    for c in &sim.clusters {
        for o in &c.outcomes {
            sim_runs
                .entry(o.id as usize)
                .or_default()
                .push((c.spec.name.clone(), o.start));
        }
    }
    let live_runs: BTreeMap<usize, Vec<(String, Time)>> = live
        .iter()
        .enumerate()
        .map(|(k, (js, _))| {
            let mut r: Vec<(String, Time)> = js
                .iter()
                .map(|j| (j.site.clone().unwrap(), j.started.unwrap()))
                .collect();
            r.sort();
            (k, r)
        })
        .collect();
    for v in sim_runs.values_mut() {
        v.sort();
    }
    // Same sites for every job and every part.
    for k in 0..exact {
        let sites = |r: &BTreeMap<usize, Vec<(String, Time)>>| -> Vec<String> {
            r.get(&k).into_iter().flatten().map(|p| p.0.clone()).collect()
        };
        assert_eq!(sites(&live_runs), sites(&sim_runs), "job {k}");
    }
    // A co-allocation's parts start together, live as simulated.
    for (k, r) in live_runs.iter().filter(|(_, r)| r.len() > 1) {
        let (first, last) = (
            r.iter().map(|p| p.1).min().unwrap(),
            r.iter().map(|p| p.1).max().unwrap(),
        );
        assert!((last - first).0 <= 1, "co-allocation {k} started apart: {r:?}");
    }
    // Starts (every part's) within the slack, in the same order per site
    // beyond it, for all but a few: see the module comment on why one
    // second can cascade.
    let runs = |r: &BTreeMap<usize, Vec<(String, Time)>>| -> Vec<(usize, String, Time)> {
        r.range(..exact)
            .flat_map(|(k, v)| v.iter().map(move |(s, t)| (*k, s.clone(), *t)))
            .collect()
    };
    let (live_all, sim_all) = (runs(&live_runs), runs(&sim_runs));
    assert_eq!(live_all.len(), sim_all.len());
    let (mut worst, mut late) = (0, Vec::new());
    for ((k, site, lived), (_, _, simulated)) in live_all.iter().zip(&sim_all) {
        let lag = (*lived - *simulated).0;
        worst = worst.max(lag.abs());
        if !(-SLACK..=SLACK).contains(&lag) {
            late.push(format!("job {k} on {site}: simulated {simulated}, live {lived}"));
        }
    }
    let (mut pairs, mut swapped) = (0, Vec::new());
    for (name, _) in SITES {
        let at: Vec<(Time, Time, usize)> = live_all
            .iter()
            .zip(&sim_all)
            .filter(|((_, site, _), _)| site == name)
            .map(|((k, _, lived), (_, _, simulated))| (*simulated, *lived, *k))
            .collect();
        for a in &at {
            for b in &at {
                if (b.0 - a.0).0 > SLACK {
                    pairs += 1;
                    if a.1 > b.1 {
                        swapped.push(format!("{name}: job {} before job {}", b.2, a.2));
                    }
                }
            }
        }
    }
    assert!(
        late.len() * 100 <= live_all.len() * ALLOWED_PERCENT,
        "{} of {} starts beyond {SLACK} s: {late:?}",
        late.len(),
        live_all.len()
    );
    assert!(
        swapped.len() * 100 <= pairs * ALLOWED_PERCENT,
        "{} of {pairs} start orders differ: {swapped:?}",
        swapped.len()
    );
    eprintln!(
        "{} jobs ({coallocated} co-allocated, {refused} refused) dispatched in {dispatching:?} ({held} in holds), {exact} compared \
         exactly; largest start difference {worst} s; {} starts beyond {SLACK} s, {} of {pairs} orders differ",
        s.n,
        late.len(),
        swapped.len()
    );
    if let Some(w) = admitted {
        same_workflow(&client, &w, &sim_workflows[0], deadline);
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The workflow admitted live (`w`) and simulated (`sim`): the same plan,
/// task by task (site and reserved start), and runs that start within the
/// slack of each other, children moved up alike when their parents ended
/// early.
fn same_workflow(client: &BrokerClient, w: &WorkflowView, sim: &WorkflowRun, deadline: Instant) {
    let plan = sim.plan.as_ref().expect("the simulated broker admits the workflow too");
    let names: Vec<&str> = SITES.iter().map(|s| s.0).collect();
    let simulated: Vec<(String, String, Time)> = plan
        .tasks
        .iter()
        .map(|p| (p.task.clone(), names[p.site].to_string(), p.start))
        .collect();
    let lived: Vec<(String, String, Time)> = w
        .tasks
        .iter()
        .map(|t| (t.task.clone(), t.site.clone(), t.start))
        .collect();
    assert_eq!(lived, simulated, "the workflow's plan");
    // Its runs.
    let started: Vec<Time> = w
        .tasks
        .iter()
        .map(|t| finished(client, &t.job, deadline).started.unwrap())
        .collect();
    let mut moved = 0;
    for (k, t) in w.tasks.iter().enumerate() {
        let r = sim.ran.iter().find(|r| r.task == k).expect("every task ran");
        moved += usize::from(r.start < t.start);
        let lag = (started[k] - r.start).0;
        assert!(
            (-SLACK..=SLACK).contains(&lag),
            "task {}: simulated start {}, live {}",
            t.task,
            r.start,
            started[k]
        );
    }
    assert!(moved > 0, "no child moved up in the simulation: {:?}", sim.ran);
    eprintln!("workflow: {} tasks planned alike, {moved} moved up", w.tasks.len());
}
