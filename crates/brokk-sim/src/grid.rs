//! A grid of sites run by the site core, with arrivals routed by a fixed
//! rule or by the broker itself: the broker's submission (TTS or TTD
//! selection, optional reservations on the best few sites, fallback) runs
//! here exactly as it runs in `brokk serve`, against sites that are the
//! agent's own core driven by a virtual runner.
//!
//! Sites may differ in speed: a job's recorded run time and estimate are
//! times on a reference machine, and a site of speed `s` runs it in
//! `run / s` (rounded up). The broker learns speeds the way a live broker
//! does, from a published benchmark (`speed`) that each job names with its
//! reference time, and asks for the scaled estimate as the job's wall time;
//! a job that outlives its wall time is killed, as a live site kills it.
//!
//! What the broker knows of a site is a snapshot: taken at most every
//! `info_ttl` (and at the next decision after the broker itself sent the
//! site a job, as the live information cache does) and visible only
//! `info_delay` after it was taken, so how stale brokering information is
//! becomes an experiment parameter.

use std::collections::HashMap;
use std::ops::Range;

use brokk_broker::adapt::{adapt, AdaptOptions, Adapted, Tracked};
use brokk_broker::coalloc::{coallocate, place, CoRequest};
use brokk_broker::info::{book, booked_wall};
use brokk_broker::submit::{submit_informed, SubmitOptions};
use brokk_broker::{JobHandle, MemorySite, Site, SiteError};
use brokk_core::queue::Policy;
use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{
    Benchmark, Duration, Job, JobPhase, JobPreferences, Objective, PublishedBenchmark, ResourceInfo, Time,
};

use crate::cluster::{Outcome, SimJob};
use crate::platform::{ClusterRun, ClusterSpec, Router, Routing};

/// The benchmark that carries a site's relative speed.
const SPEED: &str = "speed";

/// The owner of every simulated job.
const OWNER: &str = "grid";

/// How arrivals reach a site of the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GridRouting {
    /// A fixed rule (random, round robin, by partition), as platform runs use.
    Fixed(Routing),
    /// The broker's submission with this objective, reserving on the best
    /// `reserve_top_k` sites first (0: no reservations).
    Broker {
        /// Earliest start (TTS) or earliest completion (TTD).
        objective: Objective,
        /// Sites to reserve on before choosing.
        reserve_top_k: usize,
    },
}

impl GridRouting {
    /// Parses `random`, `round-robin`, `partition`, `broker-tts`,
    /// `broker-ttd` and `broker-ttd-reserve[:K]` (K defaults to 3).
    pub fn parse(name: &str) -> Option<GridRouting> {
        let broker = |objective, reserve_top_k| GridRouting::Broker {
            objective,
            reserve_top_k,
        };
        Some(match name {
            "random" => GridRouting::Fixed(Routing::Random(0)),
            "round-robin" => GridRouting::Fixed(Routing::RoundRobin),
            "partition" => GridRouting::Fixed(Routing::Partition),
            "broker-tts" => broker(Objective::EarliestStart, 0),
            "broker-ttd" => broker(Objective::EarliestCompletion, 0),
            "broker-ttd-reserve" => broker(Objective::EarliestCompletion, 3),
            _ => {
                let k = name
                    .strip_prefix("broker-ttd-reserve:")?
                    .parse()
                    .ok()
                    .filter(|&k| k > 0)?;
                broker(Objective::EarliestCompletion, k)
            }
        })
    }

    /// Whether the broker decides (rather than a fixed rule).
    pub fn is_broker(self) -> bool {
        matches!(self, GridRouting::Broker { .. })
    }
}

/// How stale the broker's information is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Staleness {
    /// A site's snapshot is reused for this long (0: every decision reads
    /// the site's present state).
    pub info_ttl: Duration,
    /// A snapshot becomes visible this long after it was taken.
    pub info_delay: Duration,
}

/// Queue adaptation ([ET-brokering] 3.3) as the broker runs it: every
/// `every`, each job it placed that still waits moves to a site that would
/// deliver it at least `margin` sooner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adaptation {
    /// How often a round runs.
    pub every: Duration,
    /// The least gain worth a move.
    pub margin: Duration,
}

/// Everything of a grid run beyond its sites, jobs and routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridOptions {
    /// How stale the broker's information is.
    pub staleness: Staleness,
    /// The sites' local policy.
    pub policy: Policy,
    /// Queue adaptation rounds (broker routings only).
    pub adaptation: Option<Adaptation>,
    /// A job larger than every site is split into parts over several sites
    /// that start together ([ET-interop]'s co-allocation; broker routings
    /// only); otherwise it is unrouted.
    pub coallocate: bool,
    /// Brokers (broker routings only): the sites in this many groups of
    /// consecutive sites, each with a broker of its own that routes,
    /// co-allocates and adapts the jobs whose home is there (the cluster of
    /// their trace partition, else their user modulo the brokers) over its
    /// own sites, on its own view of them. 0 and 1 are one broker.
    pub brokers: usize,
}

impl Default for GridOptions {
    /// Fresh information, conservative sites (as live), no adaptation, one broker.
    fn default() -> Self {
        GridOptions {
            staleness: Staleness::default(),
            policy: Policy::CONSERVATIVE,
            adaptation: None,
            coallocate: false,
            brokers: 1,
        }
    }
}

/// Predicted against actual completion of the jobs the broker placed.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PredictionError {
    /// Jobs compared.
    pub jobs: usize,
    /// Mean of (actual - predicted) completion, seconds: positive when
    /// jobs finish later than predicted.
    pub mean: f64,
    /// Mean of its absolute value, seconds.
    pub mean_absolute: f64,
}

/// A grid run.
#[derive(Debug, Clone, PartialEq)]
pub struct GridRun {
    /// Per site, in the platform's order; each part of a co-allocated job
    /// counts at its own site with its own size.
    pub clusters: Vec<ClusterRun>,
    /// Every job that ran, once, in job order: a co-allocated job with its
    /// whole size, from its first part's start to its last part's end.
    pub jobs: Vec<Outcome>,
    /// Jobs co-allocated over several sites.
    pub coallocated: usize,
    /// Jobs no site took.
    pub unrouted: usize,
    /// Jobs killed at their wall time.
    pub killed: usize,
    /// Moves made by queue adaptation.
    pub moved: usize,
    /// How well the broker predicted (broker routings only).
    pub prediction: Option<PredictionError>,
}

/// A duration on a reference machine as taken on a site of `speed`.
fn scaled(d: Duration, speed: f64) -> Duration {
    Duration(((d.0 as f64 / speed).ceil() as i64).max(1))
}

/// The broker's picture of one site beyond what it sees now: the snapshot
/// on its way, when the last one was taken, and whether the broker has
/// changed the site since (then, as `brokk serve` does, it asks again at
/// its next decision).
#[derive(Debug, Clone)]
struct Snapshot {
    pending: Option<(ResourceInfo, Time)>,
    taken: Time,
    changed: bool,
}

/// A site as one brokering decision sees it: brought to the decision's
/// time when the broker acts on it, its information what the broker's
/// snapshot shows.
struct Viewed<'a> {
    site: &'a mut MemorySite,
    seen: &'a ResourceInfo,
    at: Time,
}

impl Viewed<'_> {
    fn now(&mut self) -> &mut MemorySite {
        self.site.advance(self.at);
        self.site
    }
}

impl Site for Viewed<'_> {
    fn endpoint(&self) -> &str {
        self.site.endpoint()
    }
    fn info(&self) -> Result<ResourceInfo, SiteError> {
        Ok(self.seen.clone())
    }
    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        self.site.probe(req, k)
    }
    fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError> {
        self.now().reserve(owner, req, hold)
    }
    fn modify(&mut self, owner: &str, id: ReservationId, change: Change) -> Result<Time, SiteError> {
        self.now().modify(owner, id, change)
    }
    fn commit(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.now().commit(owner, id)
    }
    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.now().cancel(owner, id)
    }
    fn submit(&mut self, owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        self.now().submit(owner, job, reservation)
    }
    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: ReservationId,
        key: &str,
    ) -> Result<JobHandle, SiteError> {
        self.now().submit_held(owner, job, reservation, key)
    }
    fn status(&self, job: &JobHandle) -> Result<brokk_broker::JobState, SiteError> {
        self.site.status(job)
    }
    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), SiteError> {
        self.now().cancel_job(owner, job)
    }
}

/// The sites as a decision at `at` sees them, through the broker's snapshots.
fn viewed<'a>(sites: &'a mut [MemorySite], visible: &'a [ResourceInfo], at: Time) -> Vec<Viewed<'a>> {
    sites
        .iter_mut()
        .zip(visible)
        .map(|(site, seen)| Viewed { site, seen, at })
        .collect()
}

/// The grid's state during a run.
struct Grid<'a> {
    specs: &'a [ClusterSpec],
    sites: Vec<MemorySite>,
    /// What the broker sees of each site, in site order.
    visible: Vec<ResourceInfo>,
    snapshots: Vec<Snapshot>,
    /// 0, 1, 2, ...: every site answers (from its snapshot).
    all: Vec<usize>,
    staleness: Staleness,
    by_name: HashMap<String, usize>,
    /// What the run reports of the jobs each site has forgotten, by job
    /// number there.
    ended: Vec<HashMap<u64, Ended>>,
    /// Each broker's sites.
    groups: Vec<Range<usize>>,
    /// The cluster of each trace partition.
    home: HashMap<i64, usize>,
}

/// `n` sites in `brokers` groups of consecutive sites, as even as can be
/// (at least one group).
fn groups(n: usize, brokers: usize) -> Vec<Range<usize>> {
    let b = brokers.clamp(1, n.max(1));
    (0..b).map(|k| k * n / b..(k + 1) * n / b).collect()
}

/// What a run reports of a job, kept when its site forgets the record.
#[derive(Debug, Clone, Copy)]
struct Ended {
    started: Option<Time>,
    ended: Option<Time>,
    failed: bool,
    cpus: u32,
}

impl Ended {
    fn of(r: &brokk_core::JobRecord) -> Ended {
        Ended {
            started: r.started,
            ended: r.ended,
            failed: r.state == JobPhase::Failed,
            cpus: r.spec.cpus.unwrap_or(1),
        }
    }
}

/// How often (simulated seconds) the sites forget the jobs that ended,
/// their figures kept: a site's records are the run's largest memory.
const HARVEST_EVERY: Duration = Duration(3600);

impl Grid<'_> {
    /// The sites of the broker that site `c` belongs to.
    fn group(&self, c: usize) -> Range<usize> {
        self.groups.iter().find(|g| g.contains(&c)).cloned().unwrap_or(0..0)
    }

    /// The sites of job `j`'s home broker: the one of its partition's
    /// cluster, else its user's turn among the brokers.
    fn home_of(&self, j: &SimJob) -> Range<usize> {
        match self.home.get(&j.partition) {
            Some(&c) => self.group(c),
            None => self.groups[j.user.rem_euclid(self.groups.len() as i64) as usize].clone(),
        }
    }

    /// Keeps the figures of the jobs that ended before `t` and lets their
    /// sites forget them.
    fn harvest(&mut self, t: Time) {
        for (site, kept) in self.sites.iter_mut().zip(&mut self.ended) {
            site.retire(t, |r| {
                kept.insert(r.id.0, Ended::of(r));
            });
        }
    }

    /// What the run reports of job `handle` at site `c`.
    fn ended(&self, c: usize, handle: &JobHandle) -> Option<Ended> {
        let kept = MemorySite::job_number(handle).and_then(|n| self.ended[c].get(&n));
        kept.copied().or_else(|| self.sites[c].record(handle).map(Ended::of))
    }

    /// Moves every site with something due by `t` to `t`.
    fn advance(&mut self, t: Time) {
        for s in &mut self.sites {
            if s.next_event().is_some_and(|e| e <= t) {
                s.advance(t);
            }
        }
    }

    fn next_event(&self) -> Option<Time> {
        self.sites.iter().filter_map(MemorySite::next_event).min()
    }

    /// Brings the broker's snapshots up to `t`.
    fn refresh(&mut self, t: Time) {
        let st = self.staleness;
        for ((site, snap), visible) in self.sites.iter_mut().zip(&mut self.snapshots).zip(&mut self.visible) {
            if snap.pending.as_ref().is_some_and(|(_, at)| *at + st.info_delay <= t) {
                if let Some((info, _)) = snap.pending.take() {
                    *visible = info;
                }
            }
            if snap.pending.is_none() && (st.info_ttl.0 == 0 || snap.changed || t - snap.taken >= st.info_ttl) {
                site.advance(t);
                // Taken at once: the snapshot the broker sees is brought up
                // to date in place.
                let taken = if st.info_delay.0 == 0 {
                    site.refresh_info(visible).is_ok()
                } else {
                    site.info().map(|info| snap.pending = Some((info, t))).is_ok()
                };
                if taken {
                    snap.taken = t;
                    snap.changed = false;
                }
            }
        }
    }
}

/// The job a simulated arrival becomes: it names the speed benchmark with
/// its reference estimate, so the broker scales it per site.
fn job_of(j: &SimJob) -> Job {
    Job {
        name: Some(j.id.to_string()),
        executable: Some("(simulated)".into()),
        cpus: Some(j.size),
        wall_time: Some(j.estimate.max(Duration(1))),
        benchmarks: vec![Benchmark {
            name: SPEED.into(),
            result: 1.0,
            time: j.estimate.max(Duration(1)),
        }],
        ..Job::default()
    }
}

/// Routes `jobs` over `clusters` (each run by a site core whose local
/// queue follows the options' policy) and runs them to the end. Jobs larger
/// than every site are unrouted.
pub fn simulate_grid(clusters: &[ClusterSpec], jobs: &[SimJob], routing: GridRouting, options: GridOptions) -> GridRun {
    let GridOptions {
        staleness,
        policy,
        adaptation,
        coallocate,
        brokers,
    } = options;
    let mut order: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].size > 0).collect();
    order.sort_by_key(|&i| (jobs[i].submit, i));
    let start = order.first().map_or(Time::EPOCH, |&i| jobs[i].submit);
    // Far beyond any trace, far from overflow.
    let horizon = Time(start.0.saturating_add(1 << 40));
    let sites: Vec<MemorySite> = clusters
        .iter()
        .map(|c| {
            let info = ResourceInfo {
                endpoint: c.name.clone(),
                name: c.name.clone(),
                total_slots: c.procs,
                benchmarks: vec![PublishedBenchmark {
                    name: SPEED.into(),
                    value: c.speed,
                }],
                reservations: true,
                ..ResourceInfo::default()
            };
            MemorySite::with_policy(info, start, horizon, policy)
        })
        .collect();
    let visible = sites.iter().map(|s| s.info().unwrap_or_default()).collect();
    let snapshots = vec![
        Snapshot {
            pending: None,
            taken: start,
            changed: false,
        };
        sites.len()
    ];
    let mut grid = Grid {
        groups: groups(sites.len(), brokers),
        home: clusters
            .iter()
            .enumerate()
            .flat_map(|(k, c)| c.partitions.iter().map(move |&p| (p, k)))
            .collect(),
        ended: vec![HashMap::new(); sites.len()],
        visible,
        all: (0..sites.len()).collect(),
        specs: clusters,
        by_name: clusters.iter().enumerate().map(|(k, c)| (c.name.clone(), k)).collect(),
        sites,
        snapshots,
        staleness,
    };
    let mut router = match routing {
        GridRouting::Fixed(r) => Some(Router::new(clusters, r)),
        GridRouting::Broker { .. } => None,
    };
    // Per job: (site, handle, predicted completion).
    let mut placed: Vec<Option<(usize, JobHandle, Option<Time>)>> = vec![None; jobs.len()];
    let mut unrouted = jobs.len() - order.len();
    let mut next = 0;
    // Adaptation: the next round, and the broker's placed jobs that may
    // still move, in placement order.
    let adaptation = adaptation.filter(|a| routing.is_broker() && a.every.0 > 0);
    let mut next_round = adaptation.map(|a| start + a.every);
    let mut watched: Vec<usize> = Vec::new();
    let mut moved = 0;
    // Co-allocated jobs: their parts' sites and handles.
    let mut parts: HashMap<usize, Vec<(usize, JobHandle)>> = HashMap::new();
    let mut next_harvest = start + HARVEST_EVERY;
    loop {
        let arrival = order.get(next).map(|&i| jobs[i].submit);
        let due = [arrival, grid.next_event(), next_round.filter(|_| !watched.is_empty())];
        let Some(t) = due.into_iter().flatten().min() else {
            break;
        };
        grid.advance(t);
        if t >= next_harvest {
            grid.harvest(t);
            next_harvest = t + HARVEST_EVERY;
        }
        if let (Some(a), Some(round)) = (adaptation, next_round.filter(|r| *r == t)) {
            next_round = Some(round + a.every);
            moved += grid.adapt(jobs, &mut placed, &mut watched, t, a);
        }
        while let Some(&i) = order.get(next).filter(|&&i| jobs[i].submit == t) {
            next += 1;
            let j = &jobs[i];
            let home = grid.home_of(j);
            let wider = || clusters[home.clone()].iter().all(|c| j.size > c.procs);
            if coallocate && routing.is_broker() && wider() {
                match grid.coallocate(j, t, home) {
                    Some(placed_parts) => {
                        for (c, handle) in &placed_parts {
                            let site = &mut grid.sites[*c];
                            let _ = site.set_run_time(handle, scaled(j.run, clusters[*c].speed));
                            site.advance(t);
                        }
                        parts.insert(i, placed_parts);
                    }
                    None => unrouted += 1,
                }
                continue;
            }
            let outcome = match (&mut router, routing) {
                (Some(router), _) => router.route(j).and_then(|c| {
                    let mut job = job_of(j);
                    job.wall_time = Some(scaled(j.estimate, clusters[c].speed));
                    grid.sites[c].advance(t);
                    let handle = grid.sites[c].submit(OWNER, &job, None).ok()?;
                    Some((c, handle, None))
                }),
                (
                    None,
                    GridRouting::Broker {
                        objective,
                        reserve_top_k,
                    },
                ) => grid.broker(j, t, home, objective, reserve_top_k),
                (None, GridRouting::Fixed(_)) => None,
            };
            match outcome {
                Some((c, handle, predicted)) => {
                    let site = &mut grid.sites[c];
                    let _ = site.set_run_time(&handle, scaled(j.run, clusters[c].speed));
                    site.advance(t);
                    placed[i] = Some((c, handle, predicted));
                    if adaptation.is_some() {
                        watched.push(i);
                    }
                }
                None => unrouted += 1,
            }
        }
    }
    let mut run = grid.collect(jobs, &placed, &parts, unrouted, routing);
    run.moved = moved;
    run
}

impl Grid<'_> {
    /// The broker's submission of `j` at `t`.
    fn broker(
        &mut self,
        j: &SimJob,
        t: Time,
        home: Range<usize>,
        objective: Objective,
        reserve_top_k: usize,
    ) -> Option<(usize, JobHandle, Option<Time>)> {
        self.refresh(t);
        let job = job_of(j);
        let prefs = JobPreferences {
            objective: Some(objective),
            use_reservations: Some(reserve_top_k > 0),
            ..JobPreferences::default()
        };
        let mut views = viewed(&mut self.sites[home.clone()], &self.visible[home.clone()], t);
        let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|v| v as &mut dyn Site).collect();
        let opts = SubmitOptions {
            reserve_top_k,
            ..SubmitOptions::default()
        };
        let seen = (&self.visible[home.clone()], &self.all[..home.len()]);
        let s = submit_informed(&job, &prefs, OWNER, &mut refs, seen, Vec::new(), t, opts).ok()?;
        let c = *self.by_name.get(&s.endpoint)?;
        if reserve_top_k == 0 {
            // As `brokk serve` dispatches: the job counts in what the broker
            // knows of the site until the site's next snapshot.
            book(&mut self.visible[c], job.cpus.unwrap_or(1), booked_wall(&s.prediction));
        } else {
            // Reservations were made and given back: asked again.
            self.snapshots[c].changed = true;
        }
        Some((c, s.handle, Some(t + s.prediction.ttd())))
    }

    /// Co-allocates `j` at `t` in as few equal parts as the largest site
    /// (`largest` processors) allows, each for the job's estimate on the slowest site, starting
    /// together within 30 days ([ET-interop]'s Algorithms 1 and 2, then the
    /// broker's two-phase placement, as `brokk serve` co-allocates).
    fn coallocate(&mut self, j: &SimJob, t: Time, home: Range<usize>) -> Option<Vec<(usize, JobHandle)>> {
        let specs = &self.specs[home.clone()];
        let largest = specs.iter().map(|c| c.procs).max().unwrap_or(0);
        if largest == 0 {
            return None;
        }
        self.refresh(t);
        let k = j.size.div_ceil(largest);
        let slowest = specs.iter().map(|c| c.speed).fold(f64::INFINITY, f64::min);
        let wall = scaled(j.estimate.max(Duration(1)), slowest);
        let jobs: Vec<Job> = (0..k)
            .map(|p| Job {
                name: Some(format!("{}.{p}", j.id)),
                executable: Some("(simulated)".into()),
                cpus: Some(j.size / k + u32::from(p < j.size % k)),
                wall_time: Some(wall),
                ..Job::default()
            })
            .collect();
        let keys: Vec<String> = (0..k).map(|p| format!("co-{}-{p}", j.id)).collect();
        let infos: Vec<Option<ResourceInfo>> = self.visible[home.clone()].iter().cloned().map(Some).collect();
        let request = CoRequest::of(
            &jobs,
            &infos,
            (t, t + Duration::hours(24 * 30)),
            Duration::ZERO,
            Some(t + Duration::minutes(10)),
        );
        let mut views = viewed(&mut self.sites[home.clone()], &self.visible[home.clone()], t);
        let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|v| v as &mut dyn Site).collect();
        let plan = coallocate(&request, &mut refs, OWNER).ok()?;
        let handles = place(&plan, &jobs, &keys, &mut refs, OWNER).ok()?;
        for &(c, _, _) in &plan.assignments {
            self.snapshots[home.start + c].changed = true;
        }
        Some(plan.assignments.iter().map(|a| home.start + a.0).zip(handles).collect())
    }

    /// One adaptation round at `t` over the watched jobs: those that have
    /// started leave the watch, those a site would deliver sooner by the
    /// margin move there (the broker's own rule, as `brokk serve` runs
    /// it). Returns the moves.
    fn adapt(
        &mut self,
        jobs: &[SimJob],
        placed: &mut [Option<(usize, JobHandle, Option<Time>)>],
        watched: &mut Vec<usize>,
        t: Time,
        a: Adaptation,
    ) -> usize {
        self.refresh(t);
        let opts = AdaptOptions {
            margin: a.margin,
            ..AdaptOptions::default()
        };
        let mut moved = 0;
        watched.retain(|&i| {
            let Some((c, handle, predicted)) = placed[i].clone() else {
                return false;
            };
            let mut tracked = Tracked {
                job: job_of(&jobs[i]),
                prefs: JobPreferences {
                    objective: Some(Objective::EarliestCompletion),
                    ..JobPreferences::default()
                },
                owner: OWNER.into(),
                endpoint: self.specs[c].name.clone(),
                handle,
            };
            // Among the sites of the broker that placed it.
            let mine = self.group(c);
            let mut views = viewed(&mut self.sites[mine.clone()], &self.visible[mine], t);
            let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|v| v as &mut dyn Site).collect();
            match adapt(&mut tracked, &mut refs, t, opts) {
                Ok(Adapted::Moved { to, .. }) => {
                    let Some(&to) = self.by_name.get(&to) else { return false };
                    let site = &mut self.sites[to];
                    let _ = site.set_run_time(&tracked.handle, scaled(jobs[i].run, self.specs[to].speed));
                    site.advance(t);
                    self.snapshots[c].changed = true;
                    self.snapshots[to].changed = true;
                    placed[i] = Some((to, tracked.handle, predicted));
                    moved += 1;
                    true
                }
                Ok(Adapted::Stayed) => true,
                Ok(Adapted::Started) | Err(_) => false,
            }
        });
        moved
    }

    /// Every site's outcomes in job order, and the prediction error.
    fn collect(
        &self,
        jobs: &[SimJob],
        placed: &[Option<(usize, JobHandle, Option<Time>)>],
        parts: &HashMap<usize, Vec<(usize, JobHandle)>>,
        unrouted: usize,
        routing: GridRouting,
    ) -> GridRun {
        let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(); self.specs.len()];
        let mut whole = Vec::new();
        let mut submitted = vec![0usize; self.specs.len()];
        let (mut killed, mut n, mut sum, mut abs) = (0, 0usize, 0.0, 0.0);
        for (i, (j, p)) in jobs.iter().zip(placed).enumerate() {
            if let Some(parts) = parts.get(&i) {
                let mut ran = Vec::new();
                for (c, handle) in parts {
                    submitted[*c] += 1;
                    let Some(r) = self.ended(*c, handle) else {
                        continue;
                    };
                    if let (Some(s), Some(e)) = (r.started, r.ended) {
                        outcomes[*c].push(Outcome {
                            id: j.id,
                            submit: j.submit,
                            start: s,
                            end: e,
                            size: r.cpus,
                            user: j.user,
                        });
                        ran.push((s, e, r.failed));
                    }
                }
                if ran.len() == parts.len() {
                    killed += usize::from(ran.iter().any(|r| r.2));
                    whole.push(Outcome {
                        id: j.id,
                        submit: j.submit,
                        start: ran.iter().map(|r| r.0).min().unwrap_or(j.submit),
                        end: ran.iter().map(|r| r.1).max().unwrap_or(j.submit),
                        size: j.size,
                        user: j.user,
                    });
                }
                continue;
            }
            let Some((c, handle, predicted)) = p else { continue };
            submitted[*c] += 1;
            let Some(r) = self.ended(*c, handle) else {
                continue;
            };
            let (Some(s), Some(e)) = (r.started, r.ended) else {
                continue;
            };
            if r.failed {
                killed += 1;
            }
            let outcome = Outcome {
                id: j.id,
                submit: j.submit,
                start: s,
                end: e,
                size: j.size,
                user: j.user,
            };
            outcomes[*c].push(outcome);
            whole.push(outcome);
            if let Some(p) = predicted {
                let err = (e - *p).0 as f64;
                n += 1;
                sum += err;
                abs += err.abs();
            }
        }
        GridRun {
            clusters: self
                .specs
                .iter()
                .zip(outcomes)
                .zip(submitted)
                .map(|((spec, outcomes), submitted)| ClusterRun {
                    spec: spec.clone(),
                    submitted,
                    outcomes,
                })
                .collect(),
            jobs: whole,
            coallocated: parts.len(),
            unrouted,
            killed,
            moved: 0,
            prediction: routing.is_broker().then(|| PredictionError {
                jobs: n,
                mean: if n > 0 { sum / n as f64 } else { 0.0 },
                mean_absolute: if n > 0 { abs / n as f64 } else { 0.0 },
            }),
        }
    }
}
