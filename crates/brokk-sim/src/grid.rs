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
//! Each broker is a `brokk_broker::broker::BrokerCore`, the broker's own
//! core, driven on the event engine: it accepts each arrival, asks for
//! its sites' information, decides and sends, and this driver carries
//! out what it asks. What a broker knows of a site is a snapshot: taken at
//! most every `info_ttl` (and at the next decision after the broker itself
//! changed the site, as live) and visible only `info_delay` after it was
//! taken, so how stale brokering information is becomes an experiment
//! parameter. Jobs that reserve on their best sites first and queue
//! adaptation rounds go through the core too (holds and status questions
//! answered at once; only jobs travel with `latency`). Co-allocation still
//! calls the broker's rules from here, on the core's information.
//!
//! With several brokers and `delegation`, the brokers are each other's
//! siblings ([DMM]): each core knows the others as sites after its own,
//! reads each as the one site it publishes (`brokk_broker::info::fold` of
//! that broker's view of its own sites, as `/site/v1/info` gives live),
//! and sends it a job with the delegation that travels with it; the
//! receiving core's `admits` takes or refuses it exactly as `brokk serve`
//! does, and a job taken is accepted there and decided by that core. The
//! ends its sites report go back along the chain to the home broker.

use std::collections::HashMap;
use std::ops::Range;

use brokk_broker::broker::{BrokerCore, BrokerParams, Claim, Delegating, Effect, NewJob, Report, Requests};
use brokk_broker::broker::{CoAnswer, CoSearch};
use brokk_broker::coalloc::search as coalloc_search;
use brokk_broker::delegate::{Delegation, Relation};
use brokk_broker::info::FetchFailure;
use brokk_broker::jobs::{BrokerJob, Entry, Member};
use brokk_broker::{JobHandle, MemorySite, Publishing, Site, SiteError};
use brokk_core::queue::Policy;
use brokk_core::SitePolicy;
use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{
    Benchmark, Duration, Job, JobPhase, JobPreferences, Objective, PublishedBenchmark, ResourceInfo, Time,
};

use brokk_broker::workflow::{Network, Options, Plan, Scheduler, SiteSpec, Topology};
use brokk_model::workflow::Workflow;

use crate::cluster::{Outcome, SimJob};
use crate::course::{self, CourseConfig, Courses, TaskRan};
use crate::platform::{ClusterRun, ClusterSpec, Router, Routing};
use crate::routers::{GridRouter, SiteView};

/// The benchmark that carries a site's relative speed.
const SPEED: &str = "speed";

/// The owner of every job the grid routes.
const OWNER: &str = "grid";

/// Who a site's own users' jobs belong to.
const LOCAL: &str = "local";

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
    /// A program's own router ([`crate::routers`]), by its position among
    /// those the run is given ([`simulate_grid_routed`]).
    Own(usize),
}

impl GridRouting {
    /// Parses `random`, `round-robin`, `partition`, `broker-tts`,
    /// `broker-ttd`, `broker-least-load` and `broker-ttd-reserve[:K]` (K
    /// defaults to 3).
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
            "broker-least-load" => broker(Objective::LeastLoaded, 0),
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
    pub policy: SitePolicy,
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
    /// How long a message between a broker and a site takes (broker
    /// routings): a job the core sends reaches its site this long after
    /// the decision, and the site's answer the broker as long again;
    /// meanwhile the broker decides on (its information in
    /// `staleness`, itself aged by `info_delay`). Jobs that reserve,
    /// co-allocations and moves are carried at once.
    pub latency: Duration,
    /// What the sites' information carries of their free capacity over
    /// time ([AB-avail]); by default what live agents publish, `None` only
    /// the summary figures.
    pub published: Option<Publishing>,
    /// Whether the brokers delegate jobs to each other, all siblings
    /// ([DMM]; several brokers only).
    pub delegation: Option<Delegate>,
    /// The order each site serves its waiting jobs in (each its own, as
    /// live sites' `order`).
    pub order: Option<brokk_core::order::Named>,
}

/// How the brokers of a grid delegate to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delegate {
    /// A job no own site is predicted to start within this is delegated.
    pub threshold: Duration,
    /// Hops a delegated job may take.
    pub ttl: u32,
}

impl Default for GridOptions {
    /// Fresh information, conservative sites (as live), no adaptation, one broker.
    fn default() -> Self {
        GridOptions {
            staleness: Staleness::default(),
            policy: SitePolicy::from(Policy::CONSERVATIVE),
            adaptation: None,
            coallocate: false,
            brokers: 1,
            latency: Duration::ZERO,
            published: Some(Publishing::LIVE),
            delegation: None,
            order: None,
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
    /// Jobs that started more than
    /// [`brokk_broker::predict::VIOLATION_TOLERANCE`] later than the broker
    /// predicted when it placed them, and reservations of a slot it read
    /// as free that a site refused: [AB-avail]'s violations (the room the
    /// broker counted on was gone).
    pub violations: usize,
}

/// What the broker predicted of a job when it placed it: its start and
/// its completion.
type Predicted = (Time, Time);

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
    /// What the brokers asked of the sites (broker routings only).
    pub messages: Option<Requests>,
    /// The sites' own users' jobs that ran, in their order
    /// ([`simulate_grid_with_local`]).
    pub local: Vec<Outcome>,
    /// Jobs that ran at a site of a broker other than their home's
    /// (with delegation only).
    pub delegated: Option<usize>,
}

/// A duration on a reference machine as taken on a site of `speed`.
fn scaled(d: Duration, speed: f64) -> Duration {
    Duration(((d.0 as f64 / speed).ceil() as i64).max(1))
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

/// The sites as a decision at `at` sees them, through the broker's information.
fn viewed<'a>(sites: &'a mut [MemorySite], visible: &'a [ResourceInfo], at: Time) -> Vec<Viewed<'a>> {
    sites
        .iter_mut()
        .zip(visible)
        .map(|(site, seen)| Viewed { site, seen, at })
        .collect()
}

/// A message between a broker and a site on its way.
#[derive(Debug)]
enum Flight {
    /// Job `job` of broker `b` reaching its site `site` (by position in
    /// the broker's group), to run with `wall`, in reservation `claim`
    /// there when given; a neighbouring broker with its `delegation`.
    Arrive {
        b: usize,
        job: String,
        site: usize,
        wall: Option<Duration>,
        claim: Option<Claim>,
        delegation: Option<Delegation>,
    },
    /// The site's answer reaching broker `b`.
    Answer {
        b: usize,
        job: String,
        site: usize,
        answer: Result<String, SiteError>,
    },
}

/// The grid's state during a run.
struct Grid<'a> {
    specs: &'a [ClusterSpec],
    /// The trace.
    jobs: &'a [SimJob],
    /// The deadline of each job of the trace that has one, by index.
    deadlines: &'a [Option<Time>],
    /// Messages on their way, in the order they land (each leaves at the
    /// present and takes the same time, so they land in the order sent).
    flights: std::collections::VecDeque<(Time, Flight)>,
    latency: Duration,
    sites: Vec<MemorySite>,
    /// Each broker, over the sites of its group (by position in it).
    cores: Vec<BrokerCore>,
    /// Snapshots taken and not yet visible, per site, with when each was taken.
    arriving: Vec<Option<(ResourceInfo, Time)>>,
    /// The trace's index of each job a broker holds, by the broker's id.
    held: HashMap<String, usize>,
    /// Where the parts of the co-allocation last placed went (site, handle).
    coplaced: Option<Vec<(usize, JobHandle)>>,
    staleness: Staleness,
    /// What the run reports of the jobs each site has forgotten, by job
    /// number there.
    ended: Vec<HashMap<u64, Ended>>,
    /// Each broker's sites.
    groups: Vec<Range<usize>>,
    /// The cluster of each trace partition.
    home: HashMap<i64, usize>,
    /// Jobs delegated, by (broker that took it, id): the broker that
    /// sent it and the neighbour's position among that one's sites.
    came: HashMap<(usize, String), (usize, usize)>,
    /// Delegated jobs placed at a site, by (site, job number there): their
    /// id, so the end the site reports goes back along the chain.
    relay: HashMap<(usize, u64), String>,
    /// Jobs a neighbour placed while carrying out a delegation, for the
    /// caller that started it to collect.
    spill: Vec<(usize, usize, JobHandle, Predicted)>,
    /// The sites as a program's router sees them, kept between arrivals.
    views: Vec<SiteView>,
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
    /// The broker that site `c` belongs to.
    fn broker_of(&self, c: usize) -> usize {
        self.groups.iter().position(|g| g.contains(&c)).unwrap_or(0)
    }

    /// Job `j`'s home broker: the one of its partition's cluster, else its
    /// user's turn among the brokers.
    fn home_of(&self, j: &SimJob) -> usize {
        match self.home.get(&j.partition) {
            Some(&c) => self.broker_of(c),
            None => j.user.rem_euclid(self.groups.len() as i64) as usize,
        }
    }

    /// Keeps the figures of the jobs that ended before `t`, lets their
    /// sites forget them, and tells their brokers (a site's report of its
    /// ended jobs, once an hour).
    fn harvest(&mut self, t: Time) {
        let Grid {
            sites,
            ended,
            cores,
            groups,
            came,
            relay,
            ..
        } = self;
        for (c, (site, kept)) in sites.iter_mut().zip(ended.iter_mut()).enumerate() {
            let b = groups.iter().position(|g| g.contains(&c));
            let mut core = b.and_then(|b| cores.get_mut(b).map(|core| (core, c - groups[b].start)));
            let name = site.endpoint().to_string();
            let mut forward = Vec::new();
            site.retire(t, |r| {
                kept.insert(r.id.0, Ended::of(r));
                if let Some((core, k)) = core.as_mut() {
                    if !core.is_empty() {
                        let report = Report {
                            phase: r.state,
                            started: r.started,
                            ended: r.ended,
                            exit_code: r.exit_code,
                            reason: None,
                        };
                        if let Some(id) = relay.remove(&(c, r.id.0)) {
                            forward.push((id, report.clone()));
                        }
                        core.reported(t, *k, &format!("{name}/jobs/{}", r.id.0), report);
                    }
                }
            });
            // Each broker that delegated the job hears of its end from the
            // one it sent it to, as from a site.
            for (id, report) in forward {
                let mut at = b.unwrap_or(0);
                while let Some((from, k)) = came.remove(&(at, id.clone())) {
                    cores[from].reported(t, k, &id, report.clone());
                    at = from;
                }
            }
        }
    }

    /// How many of broker `b`'s sites are its own; those after are the
    /// other brokers, when it delegates.
    fn own(&self, b: usize) -> usize {
        self.groups[b].len()
    }

    /// The broker at position `k` among broker `b`'s sites, one of the
    /// others in order, when `k` is past its own.
    fn neighbour(&self, b: usize, k: usize) -> Option<usize> {
        let j = k.checked_sub(self.own(b))?;
        Some(if j < b { j } else { j + 1 })
    }

    /// Broker `n` as the one site it publishes to its neighbours at `t`:
    /// its view of its own sites, brought up to date as its time-to-live
    /// allows, folded into one.
    fn folded(&mut self, t: Time, n: usize) -> ResourceInfo {
        self.refresh(t, n);
        let own = self.own(n);
        let infos: Vec<Result<ResourceInfo, String>> =
            self.cores[n].information()[..own].iter().cloned().map(Ok).collect();
        brokk_broker::info::fold(&broker_name(n), &infos).0
    }

    /// Job `job` of broker `b` delegated at `t` with `d` to the broker at
    /// its position `k`: taken there as `brokk serve` takes it
    /// (`BrokerCore::admits`, then accepted without its owner's
    /// preferences, which a delegation does not carry) and decided at once,
    /// or refused with the reason. The answer is the id it has there.
    fn delegate_to(
        &mut self,
        t: Time,
        b: usize,
        job: &str,
        k: usize,
        d: Option<Delegation>,
    ) -> Result<String, SiteError> {
        let n = self.neighbour(b, k).ok_or(SiteError::Unknown)?;
        let (Some(d), Some(description)) = (d, self.cores[b].description(job).cloned()) else {
            return Err(SiteError::Unknown);
        };
        self.refresh(t, n);
        let refused = |reason: String| SiteError::Refused {
            site: broker_name(n),
            reason,
        };
        let prefs = JobPreferences::default();
        self.cores[n]
            .admits(&description, &prefs, &d, t)
            .map_err(|why| refused(why.to_string()))?;
        let new = NewJob {
            id: job.to_string(),
            format: "swf".into(),
            job: description,
            prefs,
            hold: false,
            runs_as: None,
            delegated: Some(d),
            warnings: Vec::new(),
        };
        self.cores[n]
            .accept(t, OWNER, vec![new])
            .map_err(|e| refused(e.to_string()))?;
        self.came.insert((n, job.to_string()), (b, k));
        self.cores[n].decide(t, usize::MAX);
        let placed = self.carry_out(t, n);
        self.spill.extend(placed);
        Ok(job.to_string())
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

    /// Job `job` of broker `b` reaching its site `k` at `t`, to run with
    /// `wall`: submitted there, given its run time there, and the site's
    /// answer.
    fn deliver(
        &mut self,
        t: Time,
        b: usize,
        job: &str,
        (k, wall, claim, delegation): (usize, Option<Duration>, Option<Claim>, Option<Delegation>),
    ) -> Result<String, SiteError> {
        if k >= self.own(b) {
            return self.delegate_to(t, b, job, k, delegation);
        }
        let c = self.groups[b].start + k;
        let site = &mut self.sites[c];
        site.advance(t);
        let handle = match self.cores[b].description(job) {
            Some(d) if wall.is_some() && d.wall_time != wall => {
                let mut d = d.clone();
                d.wall_time = wall;
                site.submit(OWNER, &d, claim.map(|c| ReservationId(c.reservation)))
            }
            Some(d) => site.submit(OWNER, d, claim.map(|c| ReservationId(c.reservation))),
            None => Err(SiteError::Unknown),
        }?;
        if let Some(i) = index_of(job) {
            let _ = site.set_run_time(&handle, scaled(self.jobs[i].run, self.specs[c].speed));
            site.advance(t);
        }
        Ok(handle.0)
    }

    /// The messages that land by `t`, each at its own time; returns the
    /// jobs placed as their answers land, as [`Grid::carry_out`] does.
    fn land(&mut self, t: Time) -> Vec<(usize, usize, JobHandle, Predicted)> {
        let mut placed = Vec::new();
        while self.flights.front().is_some_and(|f| f.0 <= t) {
            let Some((at, flight)) = self.flights.pop_front() else {
                break;
            };
            match flight {
                Flight::Arrive {
                    b,
                    job,
                    site,
                    wall,
                    claim,
                    delegation,
                } => {
                    let answer = self.deliver(at, b, &job, (site, wall, claim, delegation));
                    let f = Flight::Answer { b, job, site, answer };
                    self.flights.push_back((at + self.latency, f));
                }
                Flight::Answer { b, job, site, answer } => {
                    self.cores[b].sent(at, &job, site, answer);
                    placed.extend(self.carry_out(at, b));
                }
            }
        }
        placed.append(&mut self.spill);
        placed
    }

    /// Brings broker `b`'s information up to `t`: the snapshots due are
    /// shown to it, then it asks for what it needs.
    fn refresh(&mut self, t: Time, b: usize) {
        let g = self.groups[b].clone();
        let delay = self.staleness.info_delay;
        for (k, arriving) in self.arriving[g.clone()].iter_mut().enumerate() {
            if arriving.as_ref().is_some_and(|(_, at)| *at + delay <= t) {
                if let Some((info, at)) = arriving.take() {
                    self.cores[b].informed(k, Ok(info), at);
                }
            }
        }
        self.cores[b].stale(t);
        // Nothing is placed by asking; kept for whoever collects.
        let placed = self.carry_out(t, b);
        self.spill.extend(placed);
    }

    /// Carries out broker `b`'s effects at `t` until it has none: a fetch
    /// is answered at once (brought up to date in place) or, with a delay,
    /// when it is due; a job sent is answered at once. Returns the jobs
    /// placed: (trace index, site, handle, predicted start and completion).
    fn carry_out(&mut self, t: Time, b: usize) -> Vec<(usize, usize, JobHandle, Predicted)> {
        let start = self.groups[b].start;
        let mut placed = Vec::new();
        loop {
            let effects: Vec<Effect> = self.cores[b].drain().collect();
            if effects.is_empty() {
                placed.append(&mut self.spill);
                return placed;
            }
            let own = self.own(b);
            for e in effects {
                match e {
                    Effect::Fetch { site: k } if k >= own => {
                        let n = self.neighbour(b, k).unwrap_or(b);
                        let info = self.folded(t, n);
                        self.cores[b].informed(k, Ok(info), t);
                    }
                    // Reservations stay with a broker's own sites: a
                    // neighbour is asked for none, and answers none.
                    Effect::Hold { job, site: k, .. } if k >= own => {
                        let refused = SiteError::Refused {
                            site: self.cores[b].site_name(k).to_string(),
                            reason: "a neighbouring broker holds no reservations".into(),
                        };
                        self.cores[b].held(t, &job, k, Err(refused));
                    }
                    Effect::Release { site: k, .. } if k >= own => {}
                    Effect::Status { job, site: k, .. } if k >= own => {
                        let name = self.cores[b].site_name(k).to_string();
                        self.cores[b].status(t, &job, Err(SiteError::Unavailable(name)));
                    }
                    Effect::Withdraw { site: k, site_job, .. } if k >= own => {
                        let name = self.cores[b].site_name(k).to_string();
                        let _ = self.cores[b].withdrawn(t, k, &site_job, Err(SiteError::Unavailable(name)));
                    }
                    // The neighbour's own placement is the one recorded.
                    Effect::Placed { site: k, .. } if k >= own => {}
                    Effect::Fetch { site: k } => {
                        let site = &mut self.sites[start + k];
                        site.advance(t);
                        let core = &mut self.cores[b];
                        if self.staleness.info_delay.0 == 0 {
                            core.refresh(k, t, |info| site.refresh_info(info).is_ok());
                        } else {
                            match site.info() {
                                Ok(info) => self.arriving[start + k] = Some((info, t)),
                                Err(e) => core.informed(k, Err(FetchFailure::Error(e)), t),
                            }
                        }
                    }
                    Effect::Send {
                        job,
                        site: k,
                        wall,
                        claim,
                        delegation,
                    } if self.latency.0 > 0 => {
                        let f = Flight::Arrive {
                            b,
                            job,
                            site: k,
                            wall,
                            claim,
                            delegation,
                        };
                        self.flights.push_back((t + self.latency, f));
                    }
                    Effect::Send {
                        job,
                        site: k,
                        wall,
                        claim,
                        delegation,
                    } => {
                        let answer = self.deliver(t, b, &job, (k, wall, claim, delegation));
                        self.cores[b].sent(t, &job, k, answer);
                    }
                    // Holds are answered at once, latency or not: only
                    // jobs travel.
                    Effect::Hold {
                        job,
                        site: k,
                        owner,
                        request,
                        until,
                    } => {
                        let site = &mut self.sites[start + k];
                        site.advance(t);
                        let answer = site.reserve(&owner, &request, Some(until));
                        self.cores[b].held(t, &job, k, answer);
                    }
                    Effect::Release {
                        site: k,
                        reservation,
                        owner,
                    } => {
                        let site = &mut self.sites[start + k];
                        site.advance(t);
                        let _ = site.cancel(&owner, ReservationId(reservation));
                    }
                    // A simulated broker starts with no jobs behind it and
                    // holds no reservations of its users': neither is
                    // asked of it (nothing is found, nothing read).
                    Effect::Find { job, .. } => self.cores[b].found(t, &job, Ok(None)),
                    Effect::Status { job, site: k, site_job } => {
                        let site = &mut self.sites[start + k];
                        site.advance(t);
                        let answer = site.status(&JobHandle(site_job));
                        self.cores[b].status(t, &job, answer);
                    }
                    // The copy let go reports nothing the grid reads.
                    Effect::Retired { .. } => {}
                    Effect::Resolve { job, .. } => self.cores[b].resolved(t, &job, Ok(None)),
                    Effect::Placed {
                        job,
                        site: k,
                        site_job,
                        prediction,
                        decided,
                    } => {
                        // Placed for the first time, or moved.
                        self.held.remove(&job);
                        if self.came.contains_key(&(b, job.clone())) {
                            if let Some(n) = MemorySite::job_number(&JobHandle(site_job.clone())) {
                                self.relay.insert((start + k, n), job.clone());
                            }
                        }
                        if let Some(i) = index_of(&job) {
                            placed.push((
                                i,
                                start + k,
                                JobHandle(site_job),
                                (decided + prediction.tts(), decided + prediction.ttd()),
                            ));
                        }
                    }
                    Effect::Withdraw {
                        site: k,
                        site_job,
                        owner,
                    } => {
                        let answer = self.sites[start + k].cancel_job(&owner, &JobHandle(site_job.clone()));
                        let _ = self.cores[b].withdrawn(t, k, &site_job, answer);
                    }
                    Effect::CoAllocate {
                        group, parts, search, ..
                    } => self.search(t, b, &group, &parts, search),
                    // No simulated owner holds a job once it is sent.
                    Effect::HoldAtSite { site: k, site_job, .. } => {
                        let refused = SiteError::Refused {
                            site: self.cores[b].site_name(k).to_string(),
                            reason: "a simulated site holds no job".into(),
                        };
                        let _ = self.cores[b].held_at_site(t, k, &site_job, Err(refused));
                    }
                    Effect::Persist { .. } => {}
                }
            }
        }
    }
}

impl Grid<'_> {
    /// The local jobs that ran, each also counted at its cluster.
    fn collect_local(
        &self,
        local: &[SimJob],
        placed: &[Option<(usize, JobHandle)>],
        clusters: &mut [ClusterRun],
    ) -> Vec<Outcome> {
        let mut ran = Vec::new();
        for (j, p) in local.iter().zip(placed) {
            let Some((c, handle)) = p else { continue };
            clusters[*c].submitted += 1;
            let Some(r) = self.ended(*c, handle) else { continue };
            if let (Some(start), Some(end)) = (r.started, r.ended) {
                let o = Outcome {
                    id: j.id,
                    submit: j.submit,
                    start,
                    end,
                    size: j.size,
                    user: j.user,
                };
                clusters[*c].outcomes.push(o);
                ran.push(o);
            }
        }
        ran
    }
}

/// The trace index of the broker's job `id`: the simulator names each
/// job it hands a broker by its index.
fn index_of(id: &str) -> Option<usize> {
    id.parse().ok()
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
    simulate_grid_with_local(clusters, jobs, &[], &[], routing, options)
}

/// [`simulate_grid`] with the sites' own users beside the grid's
/// ([AB-avail]'s local jobs): each of `local` is submitted at its arrival
/// straight to the site of cluster `partition` (by position), never seen
/// by a broker but for what it takes of the site's free capacity. They
/// count in the clusters' figures and in [`GridRun::local`], not in
/// [`GridRun::jobs`]. Job `i` of `jobs` with a deadline `deadlines[i]`
/// (where the slice reaches) reserves its earliest slot that ends by it
/// ([AB-avail]'s Algorithm 2, broker routings); one that fits nowhere in
/// time is unrouted.
pub fn simulate_grid_with_local(
    clusters: &[ClusterSpec],
    jobs: &[SimJob],
    local: &[SimJob],
    deadlines: &[Option<Time>],
    routing: GridRouting,
    options: GridOptions,
) -> GridRun {
    run_grid(clusters, Arrivals::of(jobs, local, deadlines), routing, options).0
}

/// A workflow arriving at a grid: admitted at `at` by `scheduler` over
/// every site, as `brokk serve` admits one
/// ([`brokk_broker::workflow::admit`]), committed, and run beside the
/// trace's jobs ([`crate::course`]): each task starts in its reservation
/// once its parents succeeded, and what it leaves of it is given back.
#[derive(Debug, Clone)]
pub struct GridWorkflow {
    /// When it arrives.
    pub at: Time,
    /// The workflow.
    pub workflow: Workflow,
    /// The scheduler that admits it.
    pub scheduler: Scheduler,
}

/// What became of a grid's workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowRun {
    /// Its admitted plan (sites by position in the grid), or why it was refused.
    pub plan: Result<Plan, String>,
    /// Its tasks' runs, in the order they started.
    pub ran: Vec<TaskRan>,
}

/// [`simulate_grid`] with `workflows` beside the jobs, run as `course`
/// says (how long a run lasts of its reservation, failures, retries; its
/// draws seeded with 0). A workflow arriving at the same second as jobs
/// comes after them.
pub fn simulate_grid_with_workflows(
    clusters: &[ClusterSpec],
    jobs: &[SimJob],
    workflows: &[GridWorkflow],
    course: CourseConfig,
    routing: GridRouting,
    options: GridOptions,
) -> (GridRun, Vec<WorkflowRun>) {
    let arrivals = Arrivals {
        workflows,
        course,
        ..Arrivals::of(jobs, &[], &[])
    };
    run_grid(clusters, arrivals, routing, options)
}

/// Everything that arrives at a grid during a run, and the program's own
/// router when the routing is [`GridRouting::Own`].
struct Arrivals<'a> {
    jobs: &'a [SimJob],
    local: &'a [SimJob],
    deadlines: &'a [Option<Time>],
    workflows: &'a [GridWorkflow],
    course: CourseConfig,
    own: Option<&'a mut dyn GridRouter>,
}

impl<'a> Arrivals<'a> {
    /// The trace's jobs, the sites' own users' jobs and the deadlines,
    /// without workflows or a router of the program's.
    fn of(jobs: &'a [SimJob], local: &'a [SimJob], deadlines: &'a [Option<Time>]) -> Self {
        Arrivals {
            jobs,
            local,
            deadlines,
            workflows: &[],
            course: CourseConfig::default(),
            own: None,
        }
    }
}

/// [`simulate_grid_with_local`] with each arrival sent where `router`
/// says ([`crate::routers`]), reading what every site publishes at that
/// moment.
pub fn simulate_grid_routed(
    clusters: &[ClusterSpec],
    jobs: &[SimJob],
    local: &[SimJob],
    deadlines: &[Option<Time>],
    router: &mut dyn GridRouter,
    options: GridOptions,
) -> GridRun {
    let arrivals = Arrivals {
        own: Some(router),
        ..Arrivals::of(jobs, local, deadlines)
    };
    run_grid(clusters, arrivals, GridRouting::Own(0), options).0
}

fn run_grid(
    clusters: &[ClusterSpec],
    arrivals: Arrivals<'_>,
    routing: GridRouting,
    options: GridOptions,
) -> (GridRun, Vec<WorkflowRun>) {
    let Arrivals {
        jobs,
        local,
        deadlines,
        workflows,
        course,
        mut own,
    } = arrivals;
    let GridOptions {
        staleness,
        policy,
        adaptation,
        coallocate,
        brokers,
        latency,
        published,
        delegation,
        order: queue_order,
    } = options;
    let mut order: Vec<usize> = (0..jobs.len()).filter(|&i| jobs[i].size > 0).collect();
    order.sort_by_key(|&i| (jobs[i].submit, i));
    // Local jobs that fit their own cluster, in arrival order.
    let fits = |j: &SimJob| {
        usize::try_from(j.partition)
            .ok()
            .and_then(|c| clusters.get(c))
            .is_some_and(|c| j.size > 0 && j.size <= c.procs)
    };
    let mut local_order: Vec<usize> = (0..local.len()).filter(|&i| fits(&local[i])).collect();
    local_order.sort_by_key(|&i| (local[i].submit, i));
    let first = |o: &[usize], js: &[SimJob]| o.first().map(|&i| js[i].submit);
    let mut workflow_order: Vec<usize> = (0..workflows.len()).collect();
    workflow_order.sort_by_key(|&w| (workflows[w].at, w));
    let first_workflow = workflow_order.first().map(|&w| workflows[w].at);
    let start = [first(&order, jobs), first(&local_order, local), first_workflow]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(Time::EPOCH);
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
            let mut site = MemorySite::with_policy(info, start, horizon, policy);
            site.publish_availability(published);
            if let Some(o) = queue_order {
                site.serve_in(o.make());
            }
            site
        })
        .collect();
    let groups = groups(sites.len(), brokers);
    let delegation = delegation.filter(|_| routing.is_broker() && groups.len() > 1);
    // Each broker knows its sites as they are at the start (and the other
    // brokers, when it delegates, once it first asks them).
    let cores = if routing.is_broker() {
        groups
            .iter()
            .enumerate()
            .map(|(b, g)| {
                let reserve_top_k = match routing {
                    GridRouting::Broker { reserve_top_k, .. } => reserve_top_k,
                    GridRouting::Fixed(_) | GridRouting::Own(_) => 0,
                };
                let params = BrokerParams {
                    info_ttl: staleness.info_ttl,
                    persist: false,
                    // The simulated sites publish at the time-to-live only.
                    ask_after_end: false,
                    reserve_top_k,
                    adapt_margin: adaptation.map_or(BrokerParams::default().adapt_margin, |a| a.margin),
                    ..BrokerParams::default()
                };
                let mut names: Vec<String> = clusters[g.clone()].iter().map(|c| c.name.clone()).collect();
                let own = names.len();
                if delegation.is_some() {
                    names.extend((0..groups.len()).filter(|&o| o != b).map(broker_name));
                }
                let all = names.len();
                let mut core = BrokerCore::new(names, params);
                if let Some(d) = delegation {
                    core.delegate(Delegating {
                        name: broker_name(b),
                        threshold: d.threshold,
                        ttl: d.ttl,
                        neighbours: (own..all).map(|k| (k, Relation::Sibling)).collect(),
                    });
                }
                for (k, site) in sites[g.clone()].iter().enumerate() {
                    core.informed(k, site.info().map_err(FetchFailure::Error), start);
                }
                core
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut grid = Grid {
        jobs,
        deadlines,
        flights: std::collections::VecDeque::new(),
        latency,
        arriving: vec![None; sites.len()],
        cores,
        held: HashMap::new(),
        coplaced: None,
        groups,
        home: clusters
            .iter()
            .enumerate()
            .flat_map(|(k, c)| c.partitions.iter().map(move |&p| (p, k)))
            .collect(),
        ended: vec![HashMap::new(); sites.len()],
        specs: clusters,
        sites,
        staleness,
        came: HashMap::new(),
        relay: HashMap::new(),
        spill: Vec::new(),
        views: Vec::new(),
    };
    let mut router = match routing {
        GridRouting::Fixed(r) => Some(Router::new(clusters, r)),
        GridRouting::Broker { .. } | GridRouting::Own(_) => None,
    };
    // Per job: (site, handle, predicted start and completion).
    let mut placed: Vec<Option<(usize, JobHandle, Option<Predicted>)>> = vec![None; jobs.len()];
    let mut unrouted = jobs.len() - order.len();
    let mut next = 0;
    // Adaptation: the next round, while a broker holds jobs it may move.
    let adaptation = adaptation.filter(|a| routing.is_broker() && a.every.0 > 0);
    let mut next_round = adaptation.map(|a| start + a.every);
    // Co-allocated jobs: their parts' sites and handles.
    let mut parts: HashMap<usize, Vec<(usize, JobHandle)>> = HashMap::new();
    let mut next_harvest = start + HARVEST_EVERY;
    // Local jobs: where each went, and the next to arrive.
    let mut local_placed: Vec<Option<(usize, JobHandle)>> = vec![None; local.len()];
    let mut next_local = 0;
    // Workflows: their network (no links: data stays where it is made),
    // the sites as admission sees them, their courses and what became of
    // each (its plan and its course's number).
    let mut net = Network::new(clusters.len(), Vec::new(), 1, horizon).expect("a network without links");
    let topo = Topology::new(
        clusters
            .iter()
            .map(|c| SiteSpec {
                name: c.name.clone(),
                capacity: c.procs,
                speed: c.speed,
            })
            .collect(),
        &net,
    );
    let course_opts = Options {
        scheduler: Scheduler::HeftSync,
        now: start,
        hold: Duration::minutes(5),
        explain: false,
    };
    let mut courses = Courses::new(course, 0);
    let mut admitted: Vec<Result<(usize, Plan), String>> = Vec::new();
    let mut next_workflow = 0;
    loop {
        let arrival = [
            order.get(next).map(|&i| jobs[i].submit),
            local_order.get(next_local).map(|&i| local[i].submit),
            workflow_order.get(next_workflow).map(|&w| workflows[w].at),
            courses.next_end(),
        ]
        .into_iter()
        .flatten()
        .min();
        let landing = grid.flights.front().map(|f| f.0);
        let due = [
            arrival,
            grid.next_event(),
            next_round.filter(|_| grid.cores.iter().any(|c| c.adapting() > 0)),
            landing,
        ];
        let Some(t) = due.into_iter().flatten().min() else {
            break;
        };
        grid.advance(t);
        if courses.next_end().is_some_and(|e| e <= t) {
            let mut over = course::Grid {
                sites: &mut grid.sites,
                net: &mut net,
                topo: &topo,
                opts: course_opts.clone(),
            };
            courses.until(t, &mut over);
        }
        if t >= next_harvest {
            grid.harvest(t);
            next_harvest = t + HARVEST_EVERY;
        }
        // Answers that place jobs: their run times were set as they reached their sites.
        for (k, c, handle, predicted) in grid.land(t) {
            // A job moved keeps its first prediction, which is what is judged.
            let first = placed[k].as_ref().and_then(|p| p.2);
            placed[k] = Some((c, handle, first.or(Some(predicted))));
        }
        if let (Some(a), Some(round)) = (adaptation, next_round.filter(|r| *r == t)) {
            next_round = Some(round + a.every);
            for (k, c, handle, _) in grid.adapt(t) {
                let first = placed[k].as_ref().and_then(|p| p.2);
                placed[k] = Some((c, handle, first));
            }
        }
        while let Some(&i) = local_order.get(next_local).filter(|&&i| local[i].submit == t) {
            next_local += 1;
            let (j, c) = (&local[i], local[i].partition as usize);
            let mut job = job_of(j);
            job.wall_time = Some(scaled(j.estimate.max(Duration(1)), clusters[c].speed));
            let site = &mut grid.sites[c];
            site.advance(t);
            if let Ok(handle) = site.submit_local(LOCAL, &job) {
                let _ = site.set_run_time(&handle, scaled(j.run, clusters[c].speed));
                site.advance(t);
                local_placed[i] = Some((c, handle));
            }
        }
        while let Some(&i) = order.get(next).filter(|&&i| jobs[i].submit == t) {
            next += 1;
            let j = &jobs[i];
            let home = grid.home_of(j);
            let wider = || clusters[grid.groups[home].clone()].iter().all(|c| j.size > c.procs);
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
            // The jobs placed now, (trace index, site, handle, predicted
            // completion): this one, or with a broker, any it decided;
            // and whether their run times are set (a broker's core sets
            // them as its jobs reach their sites).
            let (now_placed, waits, timed) = match (&mut router, routing) {
                (Some(router), _) => {
                    let one = router.route(j).and_then(|c| grid.submit_at(i, j, c, t));
                    (one.into_iter().collect(), false, false)
                }
                (None, GridRouting::Own(_)) => {
                    let one = own.as_deref_mut().and_then(|r| {
                        let c = r.route(j, grid.views(t), t)?;
                        clusters.get(c).filter(|s| s.procs >= j.size)?;
                        grid.submit_at(i, j, c, t)
                    });
                    (one.into_iter().collect(), false, false)
                }
                (
                    None,
                    GridRouting::Broker {
                        objective,
                        reserve_top_k,
                    },
                ) => {
                    let how = (objective, reserve_top_k > 0, adaptation.is_some());
                    let (placed, waits) = grid.dispatch(i, j, t, home, how);
                    (placed, waits, true)
                }
                (None, GridRouting::Fixed(_)) => (Vec::new(), false, false),
            };
            if !waits && !now_placed.iter().any(|p| p.0 == i) {
                unrouted += 1;
            }
            for (k, c, handle, predicted) in now_placed {
                if !timed {
                    let site = &mut grid.sites[c];
                    let _ = site.set_run_time(&handle, scaled(jobs[k].run, clusters[c].speed));
                    site.advance(t);
                }
                placed[k] = Some((c, handle, predicted));
            }
        }
        while let Some(&w) = workflow_order.get(next_workflow).filter(|&&w| workflows[w].at == t) {
            next_workflow += 1;
            let mut over = course::Grid {
                sites: &mut grid.sites,
                net: &mut net,
                topo: &topo,
                opts: course_opts.clone(),
            };
            let w = &workflows[w];
            admitted.push(courses.admit(t, &w.workflow, w.scheduler, &mut over));
        }
    }
    // Jobs a broker still held for another try at the end never ran.
    unrouted += grid.held.len();
    let mut run = grid.collect(jobs, &placed, &parts, unrouted, routing);
    run.local = grid.collect_local(local, &local_placed, &mut run.clusters);
    run.moved = grid.cores.iter().map(|c| c.moved() as usize).sum();
    run.delegated = delegation.map(|_| {
        let away = |i: usize| {
            placed[i]
                .as_ref()
                .is_some_and(|p| grid.broker_of(p.0) != grid.home_of(&jobs[i]))
        };
        (0..jobs.len()).filter(|&i| away(i)).count()
    });
    let workflows = admitted
        .into_iter()
        .map(|a| match a {
            Ok((c, plan)) => WorkflowRun {
                plan: Ok(plan),
                ran: courses.ran(c).to_vec(),
            },
            Err(why) => WorkflowRun {
                plan: Err(why),
                ran: Vec::new(),
            },
        })
        .collect();
    (run, workflows)
}

/// Broker `b`'s name on delegation paths.
fn broker_name(b: usize) -> String {
    format!("broker{b}")
}

impl Grid<'_> {
    /// Job `i` (`j`) submitted at `t` to site `c`, which a fixed rule or
    /// the program's router chose: (trace index, site, handle, no prediction).
    fn submit_at(
        &mut self,
        i: usize,
        j: &SimJob,
        c: usize,
        t: Time,
    ) -> Option<(usize, usize, JobHandle, Option<Predicted>)> {
        let mut job = job_of(j);
        job.wall_time = Some(scaled(j.estimate, self.specs[c].speed));
        self.sites[c].advance(t);
        let handle = self.sites[c].submit(OWNER, &job, None).ok()?;
        Some((i, c, handle, None))
    }

    /// What every site publishes at `t`, as a program's router reads it:
    /// the sites' fixed figures are set once, the rest at each arrival.
    fn views(&mut self, t: Time) -> &[SiteView] {
        if self.views.is_empty() {
            self.views = self
                .specs
                .iter()
                .map(|spec| SiteView {
                    name: spec.name.clone(),
                    procs: spec.procs,
                    speed: spec.speed,
                    free: 0,
                    running: 0,
                    waiting: 0,
                    estimated_wait: None,
                })
                .collect();
        }
        for (site, view) in self.sites.iter_mut().zip(&mut self.views) {
            site.advance(t);
            let p = site.core().published(t);
            view.free = p.free_now;
            view.running = p.running;
            view.waiting = p.waiting;
            view.estimated_wait = p.estimated_wait.map(|d| d.0);
        }
        &self.views
    }

    /// Job `i` (`j`) arriving at `t` at its home broker `b`, which accepts
    /// it, decides and sends it as `brokk serve` does, by `objective`,
    /// holding reservations on its best sites first when it `reserves`.
    /// Returns every job the broker placed meanwhile (trace index, site,
    /// handle, predicted start and completion), and whether job `i` waits at the
    /// broker for another try.
    #[allow(clippy::type_complexity)]
    fn dispatch(
        &mut self,
        i: usize,
        j: &SimJob,
        t: Time,
        b: usize,
        (objective, reserves, adapts): (Objective, bool, bool),
    ) -> (Vec<(usize, usize, JobHandle, Option<Predicted>)>, bool) {
        self.refresh(t, b);
        let id = i.to_string();
        let new = NewJob {
            id: id.clone(),
            format: "swf".into(),
            job: Job {
                deadline: self.deadlines.get(i).copied().flatten(),
                ..job_of(j)
            },
            prefs: JobPreferences {
                objective: Some(objective),
                use_reservations: Some(reserves),
                queue_adaptation: Some(adapts),
                ..JobPreferences::default()
            },
            hold: false,
            runs_as: None,
            delegated: None,
            warnings: Vec::new(),
        };
        if self.cores[b].accept(t, OWNER, vec![new]).is_err() {
            return (Vec::new(), false);
        }
        self.held.insert(id.clone(), i);
        self.cores[b].decide(t, usize::MAX);
        let placed = self.carry_out(t, b);
        // Failed at the broker: taken nowhere.
        let waits = self.cores[b].job(&id).is_some() && self.held.contains_key(&id);
        if !waits {
            self.held.remove(&id);
        }
        let placed = placed.into_iter().map(|(k, c, h, at)| (k, c, h, Some(at))).collect();
        (placed, waits)
    }

    /// Co-allocates `j` at `t` in as few equal parts as the largest site
    /// (`largest` processors) allows, each for the job's estimate on the slowest site, starting
    /// together within 30 days ([ET-interop]'s Algorithms 1 and 2, then the
    /// broker's two-phase placement, as `brokk serve` co-allocates).
    fn coallocate(&mut self, j: &SimJob, t: Time, b: usize) -> Option<Vec<(usize, JobHandle)>> {
        let home = self.groups[b].clone();
        let specs = &self.specs[home.clone()];
        let largest = specs.iter().map(|c| c.procs).max().unwrap_or(0);
        if largest == 0 {
            return None;
        }
        self.refresh(t, b);
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
        // The parts are the broker core's: it asks for the search, records
        // each part where it went, and follows it there.
        let group = format!("co-{}", j.id);
        let parts: Vec<(BrokerJob, Job)> = jobs
            .into_iter()
            .enumerate()
            .map(|(p, job)| {
                let mut v = BrokerJob::new(format!("{group}-{p}"), OWNER.into(), "swf".into(), Entry::Reserving, t);
                v.member = Member::Part {
                    coallocation: group.clone(),
                    index: p,
                };
                (v, job)
            })
            .collect();
        let search = CoSearch {
            window: (t, t + Duration::hours(24 * 30)),
            delta: Duration::ZERO,
            hold: t + Duration::minutes(10),
        };
        self.cores[b].coallocate(&group, parts, Some(search));
        self.carry_out(t, b);
        self.coplaced.take()
    }

    /// Carries out broker `b`'s [`Effect::CoAllocate`] at `t` over its
    /// sites ([`brokk_broker::coalloc::search`], as `brokk serve` does)
    /// and tells the core; where each part went, when placed, is kept in
    /// `coplaced`.
    fn search(&mut self, t: Time, b: usize, group: &str, parts: &[String], search: CoSearch) {
        let home = self.groups[b].clone();
        let core = &self.cores[b];
        let jobs: Vec<Job> = parts.iter().filter_map(|id| core.description(id).cloned()).collect();
        let infos: Vec<Option<ResourceInfo>> = core.information().iter().cloned().map(Some).collect();
        let mut views = viewed(&mut self.sites[home.clone()], core.information(), t);
        let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|v| v as &mut dyn Site).collect();
        let found = coalloc_search(&jobs, parts, &infos, search, &mut refs, OWNER);
        drop(refs);
        drop(views);
        let (answer, placed) = match found {
            Ok(p) => {
                let placed = p
                    .iter()
                    .map(|(k, h, _)| (home.start + k, JobHandle(h.clone())))
                    .collect();
                (CoAnswer::Placed(p), Some(placed))
            }
            Err(e) => (CoAnswer::Failed(e.to_string()), None),
        };
        self.cores[b].coallocated(t, group, answer);
        self.coplaced = placed;
    }

    /// One adaptation round at `t` at every broker ([ET-brokering] 3.3, the
    /// broker core's own rule, as `brokk serve` runs it): the jobs moved,
    /// (trace index, site, handle, predicted start and completion).
    fn adapt(&mut self, t: Time) -> Vec<(usize, usize, JobHandle, Predicted)> {
        let mut moved = Vec::new();
        for b in 0..self.cores.len() {
            self.refresh(t, b);
            self.cores[b].adapt(t);
            moved.extend(self.carry_out(t, b));
        }
        moved
    }

    /// Every site's outcomes in job order, and the prediction error.
    fn collect(
        &self,
        jobs: &[SimJob],
        placed: &[Option<(usize, JobHandle, Option<Predicted>)>],
        parts: &HashMap<usize, Vec<(usize, JobHandle)>>,
        unrouted: usize,
        routing: GridRouting,
    ) -> GridRun {
        let mut outcomes: Vec<Vec<Outcome>> = vec![Vec::new(); self.specs.len()];
        let mut whole = Vec::new();
        let mut submitted = vec![0usize; self.specs.len()];
        let (mut killed, mut n, mut sum, mut abs, mut violations) = (0, 0usize, 0.0, 0.0, 0usize);
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
            if let Some((start, end)) = predicted {
                let err = (e - *end).0 as f64;
                n += 1;
                sum += err;
                abs += err.abs();
                violations += usize::from(brokk_broker::predict::violated(*start, s));
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
                violations: violations + self.cores.iter().map(|c| c.refused_slots() as usize).sum::<usize>(),
            }),
            messages: routing.is_broker().then(|| {
                let mut all = Requests::default();
                for c in &self.cores {
                    all.add(&c.requests());
                }
                all
            }),
            local: Vec::new(),
            delegated: None,
        }
    }
}
