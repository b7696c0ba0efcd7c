//! Workflow admission against a deadline by advance reservation ([VRM] 4):
//! the broker probes sites for each task, holds preliminary reservations
//! for tasks and for the data moving between sites, and offers the whole
//! plan only if everything fits between the workflow's earliest start and
//! its deadline; otherwise every hold is released at once. The caller
//! then commits the offer or lets it go (the holds also lapse on their own
//! when the timeout passes, [VRM] 4.2).
//!
//! The schedulers are [VRM] 4.4's: single-job admission, HEFTSync,
//! HEFTSyncBT and HLST. They are written once against the [`Site`] seam and
//! the [`Network`], and run the same live and in the simulator.

mod booking;
pub mod course;
mod dag;
mod genetic;
mod heft;
mod hlst;
mod network;
mod single;
#[cfg(test)]
mod tests;

use std::fmt;

use brokk_core::ReservationId;
use brokk_model::workflow::Workflow;
use brokk_model::{Duration, Time};
use serde::{Deserialize, Serialize};

pub use network::{LinkBooking, LinkSpec, Network, NetworkError};

use crate::site::{Site, SiteError};
use booking::Booking;
use dag::Dag;

/// A window end far enough to mean "no deadline" without overflowing sums,
/// and still a time every site can read (9999-12-31T23:59:59Z, the last
/// second RFC 3339 prints).
const FAR: i64 = 253_402_300_799;

/// A site as the workflow schedulers see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteSpec {
    /// Its name, for plans and messages.
    pub name: String,
    /// Processors.
    pub capacity: u32,
    /// Speed against the reference resource: a task of run time `r` takes
    /// `ceil(r / speed)` here.
    pub speed: f64,
}

/// In-memory sites as `specs` describe them (for simulations, benchmarks
/// and tests), free from time 0 and planning until `horizon`.
pub fn memory_sites(specs: &[SiteSpec], horizon: Time) -> Vec<crate::MemorySite> {
    specs
        .iter()
        .map(|s| {
            let info = brokk_model::ResourceInfo {
                endpoint: s.name.clone(),
                name: s.name.clone(),
                total_slots: s.capacity,
                ..brokk_model::ResourceInfo::default()
            };
            let mut site = crate::MemorySite::new(info, Time(0), horizon);
            // Their free capacity over the whole horizon, as a live agent
            // publishes its next day's: the genetic search checks its
            // overlapping candidates against it.
            site.publish_availability(Some(crate::Publishing {
                span: horizon - Time(0),
                most: brokk_core::PUBLISHED_RANGES,
            }));
            site
        })
        .collect()
}

/// The sites and what the ranks need of the network.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// The sites, in the order of the site list given to [`admit`].
    pub sites: Vec<SiteSpec>,
    /// Mean link bandwidth in bytes per second (0 without links).
    mean_bandwidth: f64,
}

impl Topology {
    /// The topology of `sites` joined by `net`.
    pub fn new(sites: Vec<SiteSpec>, net: &Network) -> Topology {
        Topology {
            sites,
            mean_bandwidth: net.mean_bandwidth(),
        }
    }

    /// Mean speed of the sites with at least `cores` processors (1 when none).
    fn mean_speed(&self, cores: u32) -> f64 {
        let fit: Vec<f64> = self
            .sites
            .iter()
            .filter(|s| s.capacity >= cores && s.speed > 0.0)
            .map(|s| s.speed)
            .collect();
        if fit.is_empty() {
            1.0
        } else {
            fit.iter().sum::<f64>() / fit.len() as f64
        }
    }

    /// Seconds to move `bytes` at the mean link bandwidth.
    fn mean_transfer(&self, bytes: u64) -> f64 {
        if self.mean_bandwidth > 0.0 {
            bytes as f64 / self.mean_bandwidth
        } else {
            0.0
        }
    }
}

/// The online schedulers of [VRM] 4.4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheduler {
    /// Tasks in dependency order, each at the site where it starts first;
    /// the deadline checked at the end (4.4.1).
    Single,
    /// HEFT's upward ranks, each task where it finishes first, co-allocated
    /// tasks in one window (4.4.3).
    HeftSync,
    /// HEFTSync with a backtracking search over the co-allocations' sites
    /// and start times (4.4.4).
    HeftSyncBt,
    /// HEFT backwards: exit tasks as close to the deadline as they fit,
    /// each task where it starts last (4.4.5).
    Hlst,
    /// A genetic search over every task's probed candidates for a string
    /// without violated constraints (4.5).
    Genetic,
}

impl Scheduler {
    /// Every scheduler, in the order of the thesis.
    pub const ALL: [Scheduler; 5] = [
        Scheduler::Single,
        Scheduler::HeftSync,
        Scheduler::HeftSyncBt,
        Scheduler::Hlst,
        Scheduler::Genetic,
    ];

    /// Its name on the command line and in experiment files.
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Single => "single",
            Scheduler::HeftSync => "heftsync",
            Scheduler::HeftSyncBt => "heftsyncbt",
            Scheduler::Hlst => "hlst",
            Scheduler::Genetic => "genetic",
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Scheduler {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scheduler::ALL
            .into_iter()
            .find(|x| x.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<&str> = Scheduler::ALL.iter().map(|x| x.name()).collect();
                format!("unknown scheduler `{s}` (known: {})", names.join(", "))
            })
    }
}

/// How to admit.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Which scheduler.
    pub scheduler: Scheduler,
    /// The time of the decision.
    pub now: Time,
    /// How long the preliminary reservations of an offer are held.
    pub hold: Duration,
    /// On a rejection for lack of room, also find the earliest finish the
    /// grid could offer without the deadline (one more scheduling run).
    pub explain: bool,
}

/// Where and when a task runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskPlan {
    /// The task's id.
    pub task: String,
    /// The site's index.
    pub site: usize,
    /// Its reservation's start.
    pub start: Time,
    /// Its reservation's end.
    pub end: Time,
    /// The reservation at the site.
    pub reservation: ReservationId,
}

/// What a booked transfer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TransferKind {
    /// A parent's output for its child.
    Data {
        /// Bytes moved.
        bytes: u64,
    },
    /// Bandwidth between co-allocated tasks while they run.
    Stream,
}

/// Bandwidth booked between two sites.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferPlan {
    /// The task whose data it is (for a stream, one of the pair).
    pub from_task: String,
    /// The task that receives it.
    pub to_task: String,
    /// Data or stream.
    #[serde(flatten)]
    pub kind: TransferKind,
    /// Source site.
    pub from_site: usize,
    /// Destination site.
    pub to_site: usize,
    /// Start of the booking.
    pub start: Time,
    /// End of the booking.
    pub end: Time,
    /// Bandwidth booked.
    pub bytes_per_s: u64,
    /// The link reservations.
    pub links: Vec<LinkBooking>,
}

/// A whole workflow's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Every task, in the workflow's order.
    pub tasks: Vec<TaskPlan>,
    /// Every transfer and stream between sites.
    pub transfers: Vec<TransferPlan>,
    /// The first task's start.
    pub start: Time,
    /// The last task's end.
    pub finish: Time,
}

/// Messages an admission sent ([VRM] 4.6.2 counts them per task).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Messages {
    /// Probe requests (sites and network).
    pub probes: u64,
    /// Preliminary reservation requests.
    pub reservations: u64,
    /// Of those, refused.
    pub refused: u64,
}

impl std::ops::AddAssign for Messages {
    fn add_assign(&mut self, o: Messages) {
        self.probes += o.probes;
        self.reservations += o.reservations;
        self.refused += o.refused;
    }
}

/// An admitted workflow: its plan, held preliminarily until `expires`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offer {
    /// The plan.
    pub plan: Plan,
    /// When the holds lapse unless committed.
    pub expires: Time,
    /// What the admission cost.
    pub messages: Messages,
}

impl Offer {
    /// Commits every hold (phase 5a). A site that refuses (the hold
    /// lapsed) is reported; the caller then releases the rest.
    pub fn commit(&self, owner: &str, sites: &mut [&mut dyn Site], net: &mut Network) -> Result<(), SiteError> {
        for t in &self.plan.tasks {
            sites[t.site].commit(owner, t.reservation)?;
        }
        for x in &self.plan.transfers {
            net.commit(&x.links);
        }
        Ok(())
    }

    /// Releases every hold (phase 5b); ones already gone are skipped.
    pub fn release(&self, owner: &str, sites: &mut [&mut dyn Site], net: &mut Network) {
        for t in &self.plan.tasks {
            let _ = sites[t.site].cancel(owner, t.reservation);
        }
        for x in &self.plan.transfers {
            net.release(&x.links);
        }
    }
}

/// Why a workflow was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RejectReason {
    /// The workflow itself is wrong.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// A task is larger than every site.
    #[error("task `{task}` asks for {cores} processors; the largest site has {largest}")]
    TooLarge {
        /// The task.
        task: String,
        /// Its processors.
        cores: u32,
        /// The largest site's.
        largest: u32,
    },
    /// The deadline is not after the earliest start.
    #[error("the deadline {deadline} is not after the earliest start {earliest}")]
    PastDeadline {
        /// The deadline.
        deadline: Time,
        /// The earliest start (or now).
        earliest: Time,
    },
    /// A task found no room before the deadline.
    #[error("no site has room for task `{task}` before the deadline")]
    NoRoom {
        /// The task.
        task: String,
    },
    /// A task found no room before the deadline within the share of the
    /// sites its owner may hold reserved (the sites had room beyond it).
    #[error("no site has room for task `{task}` before the deadline within your share of the sites: {limit}")]
    Share {
        /// The task.
        task: String,
        /// The share's limit where it stood in the way.
        limit: String,
    },
    /// The admission's time to ask the sites ran out before it found a plan.
    #[error("no plan was found within the {seconds} s an admission may ask the sites ([workflows] admission_seconds); a smaller workflow or a list scheduler (heftsync) asks fewer")]
    TimeUp {
        /// The bound.
        seconds: u64,
    },
    /// Co-allocated tasks found no common window.
    #[error("the co-allocated tasks {} found no common window", tasks.join(", "))]
    CoAllocation {
        /// The tasks.
        tasks: Vec<String>,
    },
    /// Data or a stream between two tasks found no bandwidth in time.
    #[error("no bandwidth in time from task `{from}` to task `{to}`")]
    Network {
        /// Where the data comes from.
        from: String,
        /// Where it goes.
        to: String,
    },
    /// The plan ends after the deadline (single-job admission checks at the end).
    #[error("the plan would end at {finish}, after the deadline")]
    LateFinish {
        /// When it would end.
        finish: Time,
    },
    /// The genetic search found no string without conflicts: HEFTSync,
    /// its first string, found no plan either, and its few candidate
    /// starts per task and site hold none.
    #[error(
        "the genetic search found no plan without conflicts among HEFTSync's and its {candidates} candidate starts \
         per task and site in {generations} generations (the best still had {conflicts})"
    )]
    SearchExhausted {
        /// Candidate starts per task and site.
        candidates: usize,
        /// Generations searched.
        generations: usize,
        /// Violated constraints of the best string.
        conflicts: usize,
    },
}

/// A rejection: why, the earliest finish the grid could have offered when
/// asked to find it, and what the attempt cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rejection {
    /// Why.
    #[serde(flatten)]
    pub reason: RejectReason,
    /// The earliest finish without the deadline, when [`Options::explain`] asked.
    pub earliest_finish: Option<Time>,
    /// Messages sent before giving up.
    pub messages: Messages,
}

impl RejectReason {
    /// Its name in JSON (`no_room`, `network`, ...), for counting by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            RejectReason::Invalid { .. } => "invalid",
            RejectReason::TooLarge { .. } => "too_large",
            RejectReason::PastDeadline { .. } => "past_deadline",
            RejectReason::NoRoom { .. } => "no_room",
            RejectReason::Share { .. } => "share",
            RejectReason::TimeUp { .. } => "time_up",
            RejectReason::CoAllocation { .. } => "co_allocation",
            RejectReason::Network { .. } => "network",
            RejectReason::LateFinish { .. } => "late_finish",
            RejectReason::SearchExhausted { .. } => "search_exhausted",
        }
    }
}

impl Rejection {
    /// A rejection before anything was asked of a site.
    fn before_asking(reason: RejectReason) -> Rejection {
        Rejection {
            reason,
            earliest_finish: None,
            messages: Messages::default(),
        }
    }

    fn invalid(message: impl Into<String>) -> Rejection {
        Rejection::before_asking(RejectReason::Invalid {
            message: message.into(),
        })
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.reason)?;
        if let Some(t) = self.earliest_finish {
            write!(f, "; the earliest finish on offer is {t}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejection {}

/// Records in `known` (what a broker that does not probe knows of one
/// site) a reservation of `amount` from `start` to `end` it holds there;
/// its id in `known`, or `None` where `known` has no room for it.
pub fn remember(known: &mut brokk_core::Planner, amount: u32, start: Time, end: Time) -> Option<ReservationId> {
    let at = brokk_core::Request {
        amount,
        duration: end - start,
        earliest: start,
        latest: start,
        flexible: false,
    };
    match known.reserve("broker", &at, None) {
        brokk_core::Reply::Granted { id, .. } => Some(id),
        _ => None,
    }
}

/// Admits `wf` over `sites` (described in the same order by `topo`) and
/// `net`: an [`Offer`] whose reservations are all held preliminarily, or a
/// [`Rejection`] with nothing left held.
pub fn admit(
    wf: &Workflow,
    topo: &Topology,
    sites: &mut [&mut dyn Site],
    net: &mut Network,
    owner: &str,
    opts: &Options,
) -> Result<Offer, Rejection> {
    admit_knowing(wf, topo, sites, net, owner, opts, None)
}

/// [`admit`] by a broker that does not probe ([VRM] 4.6.2, the probe
/// phase's benefit): where a scheduler would probe, it reads `knowledge`
/// (one planner per site, holding what the broker knows of it, such as its
/// own earlier reservations) and tries its reservations on that guess.
pub fn admit_without_probing(
    wf: &Workflow,
    topo: &Topology,
    sites: &mut [&mut dyn Site],
    net: &mut Network,
    owner: &str,
    opts: &Options,
    knowledge: &[brokk_core::Planner],
) -> Result<Offer, Rejection> {
    admit_knowing(wf, topo, sites, net, owner, opts, Some(knowledge))
}

fn admit_knowing(
    wf: &Workflow,
    topo: &Topology,
    sites: &mut [&mut dyn Site],
    net: &mut Network,
    owner: &str,
    opts: &Options,
    knowledge: Option<&[brokk_core::Planner]>,
) -> Result<Offer, Rejection> {
    let dag = Dag::new(wf)?;
    let largest = topo.sites.iter().map(|s| s.capacity).max().unwrap_or(0);
    if let Some(n) = dag.nodes.iter().find(|n| n.cores > largest) {
        return Err(Rejection::before_asking(RejectReason::TooLarge {
            task: n.id.clone(),
            cores: n.cores,
            largest,
        }));
    }
    let earliest = wf.earliest.map_or(opts.now, |e| e.max(opts.now));
    if let Some(deadline) = wf.deadline {
        if deadline <= earliest {
            return Err(Rejection::before_asking(RejectReason::PastDeadline {
                deadline,
                earliest,
            }));
        }
    }
    let expires = opts.now + opts.hold;
    match run(
        &dag,
        topo,
        sites,
        net,
        owner,
        expires,
        earliest,
        wf.deadline,
        opts.scheduler,
        knowledge,
    ) {
        Ok((plan, messages)) => Ok(Offer {
            plan,
            expires,
            messages,
        }),
        Err(mut rejection) => {
            if opts.explain && wf.deadline.is_some() && !matches!(rejection.reason, RejectReason::Invalid { .. }) {
                // The genetic search draws its candidates from the window up
                // to the deadline; without one they spread too far apart
                // to chain, so HEFTSync finds the earliest finish for it.
                let finder = match opts.scheduler {
                    Scheduler::Genetic => Scheduler::HeftSync,
                    s => s,
                };
                if let Ok((plan, m)) = run(
                    &dag, topo, sites, net, owner, expires, earliest, None, finder, knowledge,
                ) {
                    rejection.earliest_finish = Some(plan.finish);
                    rejection.messages += m;
                    let offer = Offer {
                        plan,
                        expires,
                        messages: m,
                    };
                    offer.release(owner, sites, net);
                }
            }
            Err(rejection)
        }
    }
}

/// Generations the genetic search may take per workflow.
const GENERATIONS: usize = 200;

/// The genetic search's seed: from the workflow's tasks and start, so the
/// same admission repeats exactly.
fn seed_of(dag: &Dag, earliest: Time) -> u64 {
    // FNV-1a over the task ids.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in dag
        .nodes
        .iter()
        .flat_map(|n| n.id.bytes())
        .chain(earliest.0.to_le_bytes())
    {
        h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// One scheduling run; on failure nothing stays held.
#[allow(clippy::too_many_arguments)]
fn run(
    dag: &Dag,
    topo: &Topology,
    sites: &mut [&mut dyn Site],
    net: &mut Network,
    owner: &str,
    hold: Time,
    earliest: Time,
    deadline: Option<Time>,
    scheduler: Scheduler,
    knowledge: Option<&[brokk_core::Planner]>,
) -> Result<(Plan, Messages), Rejection> {
    let mut b = Booking::new(dag, topo, sites, net, owner, hold, earliest, deadline);
    if let Some(known) = knowledge {
        b = b.without_probing(known);
    }
    let placed = match scheduler {
        Scheduler::Single => single::schedule(&mut b),
        Scheduler::HeftSync => heft::schedule(&mut b, false),
        Scheduler::HeftSyncBt => heft::schedule(&mut b, true),
        // Without a deadline there is nothing to schedule backwards from.
        Scheduler::Hlst if deadline.is_none() => heft::schedule(&mut b, false),
        Scheduler::Hlst => hlst::schedule(&mut b),
        Scheduler::Genetic => genetic::schedule(&mut b, GENERATIONS, seed_of(dag, earliest)),
    };
    let late = match (placed, deadline) {
        (true, Some(dl)) if b.complete() => {
            let finish = b.tasks.iter().flatten().map(|t| t.end).max().unwrap_or(earliest);
            (finish > dl).then_some(RejectReason::LateFinish { finish })
        }
        _ => None,
    };
    if !placed || !b.complete() || late.is_some() {
        let reason = late.or(b.failure.take()).unwrap_or_else(|| RejectReason::Invalid {
            message: "the scheduler left tasks unplaced".into(),
        });
        b.rollback(0);
        return Err(Rejection {
            reason,
            earliest_finish: None,
            messages: b.messages,
        });
    }
    let (tasks, transfers, messages) = b.into_plan();
    let start = tasks.iter().map(|t| t.start).min().unwrap_or(earliest);
    let finish = tasks.iter().map(|t| t.end).max().unwrap_or(earliest);
    Ok((
        Plan {
            tasks,
            transfers,
            start,
            finish,
        },
        messages,
    ))
}
