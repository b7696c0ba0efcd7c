//! The broker's own core: one synchronous state machine of a broker, which
//! the service and the simulator both drive, as `brokk_core::SiteCore` is
//! the one state machine of a site.
//!
//! It owns its jobs from acceptance to their end, the per-user limit and
//! its count, the users' turns, hold, release and cancel, the information
//! it holds of its sites with its age, and the dispatcher's decisions.
//! Inputs are calls with `now` (a submission, an owner's hold, a site's
//! information, a site's answer to a job sent, a site's report of a job);
//! outputs are [`Effect`]s in an outbox the driver drains and carries out
//! (fetch a site's information, send a job, withdraw one, store a record),
//! feeding what comes back in as further calls. Nothing here waits on a
//! site: a decision is made against the information at hand and the
//! core's own bookings since ([`crate::info::book`]), the job sent, and a
//! refusal decided again; so a driver decides as many jobs per turn as are
//! pending together, and a simulated broker decides exactly as a live one.
//!
//! A job that names a broker reservation is sent into it once the core
//! has the reservation in hand ([`Effect::Resolve`]) and found it the
//! owner's, committed and not ended ([`claimable`]); a job accepted before
//! the broker restarted is looked for at the sites under its key first
//! ([`Effect::Find`]), so a restart never sends a second copy.
//!
//! A job that asks for reservations holds one on each of its best
//! `reserve_top_k` sites first ([`Effect::Hold`], [ET-brokering]'s two
//! phases), is sent to the best candidate as the grants leave it, into its
//! hold there, and every other hold is given back ([`Effect::Release`]).
//! A job with a deadline reserves the earliest slot that ends by it, one
//! site at a time ([AB-avail]'s Algorithm 2): a refused slot is a
//! violation, and the site's next possible start is tried among the rest,
//! up to one attempt per site and one more.
//!
//! A workflow's task is taken once its parents ended ([`BrokerCore::ready`])
//! and sent into the reservation its workflow made for it.
//!
//! A co-allocation's parts are taken together ([`BrokerCore::coallocate`]):
//! the driver searches and places them over its sites
//! ([`Effect::CoAllocate`], [`crate::coalloc::search`]) and says how that
//! ended ([`BrokerCore::coallocated`]); the core records each part at its
//! site, or fails them all with the reason. Parts a restart caught
//! half-way are settled the same way.
//!
//! Not yet here (the drivers still call the rules themselves): standalone
//! reservations, workflows' admission (their course is
//! [`crate::workflow::course::Course`]) and the broker-as-a-site view.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

use brokk_core::{Reply, Request, ReservationId};
use brokk_model::{Duration, Job, JobPhase, JobPreferences, ResourceInfo, Time};

use crate::delegate::{self, Delegation, Reject, Relation, Target};
use crate::info::{booked_wall, Answer, FetchFailure};
use crate::jobs::{self, Applied, BrokerJob, BrokerState, Change, Entry, HistoryEntry, OverLimit, Refused};
use crate::predict::{Prediction, Predictor, STANDARD_PREDICTOR};
use crate::select::{assess, selector_for, validate_at, Mismatch, Ranked};
use crate::site::SiteError;
use crate::submit::hold_request;
use crate::submit::SubmitError;

mod check;
#[cfg(test)]
mod tests;

pub use check::{SiteAnswer, Verdict};

/// A broker reservation as a job that names it finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    /// Whose it is.
    pub owner: String,
    /// The site that holds it.
    pub site: String,
    /// The site's id for it.
    pub site_reservation: u64,
    /// When it starts.
    pub start: Time,
    /// When it ends.
    pub end: Time,
    /// Held (preliminary, until its maker commits it), committed, or
    /// given back.
    pub state: crate::reservations::BrokerReservationState,
    /// Made by a workflow for one of its tasks: it ends with the task's
    /// job, where a user's own outlives the jobs run in it.
    pub workflow: bool,
}

/// Whether a job of `owner`'s may run at `now` in reservation `rid` as
/// found: only in a committed one of the owner's that has not ended, or a
/// held one when the job leaves the commit to its sender
/// (`explicit_commit`, a broker above that made the hold). A reservation
/// of someone else's reads as one that does not exist, so a job cannot
/// learn of others' reservations by naming them.
pub fn claimable(
    owner: &str,
    rid: &str,
    found: Option<&Reserved>,
    now: Time,
    explicit_commit: bool,
) -> Result<(), String> {
    use crate::reservations::BrokerReservationState::{Committed, Held};
    let live = |r: &Reserved| r.state == Committed || (explicit_commit && r.state == Held);
    match found {
        Some(r) if r.owner == owner && live(r) && r.end > now => Ok(()),
        Some(r) if r.owner == owner && live(r) => Err(format!(
            "it cannot run in reservation {rid}: the reservation ended at {}",
            r.end
        )),
        _ => Err(format!(
            "it cannot run in reservation {rid}: you hold no committed reservation {rid}"
        )),
    }
}

/// What a broker allows and how it paces itself.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BrokerParams {
    /// Unfinished jobs one user may have ([`jobs::counts_toward_limit`]).
    pub limit: u64,
    /// Jobs one request may describe.
    pub per_request: u64,
    /// How long a site's information is used before it is asked again
    /// (zero: before every decision).
    pub info_ttl: Duration,
    /// How long a job that no site could take because one did not answer
    /// waits before it is decided again.
    pub retry_after: Duration,
    /// Whether every change of a job is given out to be stored
    /// ([`Effect::Persist`]); a simulation that reports from its sites
    /// turns this off.
    pub persist: bool,
    /// On how many of its best sites a job that asks for reservations
    /// (`use_reservations`) holds one before it is sent ([ET-brokering]'s
    /// two phases); 0: none.
    pub reserve_top_k: usize,
    /// How long after its earliest start such a hold may begin.
    pub reservation_window: Duration,
    /// The least sooner delivery a move by queue adaptation must gain.
    pub adapt_margin: Duration,
    /// Whether a site at which a job has ended is asked again before the
    /// next decision: the news of the end stands for the site pushing its
    /// change, as a startd tells its collector when a slot frees, so a job
    /// that ended early does not hold its processors in the broker's view
    /// until the time-to-live runs out. A simulation of information that
    /// sites publish only at an interval turns this off.
    pub ask_after_end: bool,
    /// Whether a job with a deadline is sent into a reservation made for
    /// it at its earliest predicted start ([AB-avail]'s Algorithm 2, see
    /// the module's documentation), where its best site takes reservations.
    pub reserve_deadlines: bool,
    /// How the work booked at a site that stops answering is moved to the
    /// others ([`crate::rescue`]); `None`: it stays, and what cannot run
    /// there when its time comes fails.
    pub rescue: Option<crate::rescue::RescueParams>,
}

impl Default for BrokerParams {
    fn default() -> Self {
        BrokerParams {
            limit: u64::MAX,
            per_request: u64::MAX,
            info_ttl: crate::info::DEFAULT_TTL,
            retry_after: Duration(5),
            persist: true,
            reserve_top_k: 1,
            reservation_window: Duration::hours(24),
            adapt_margin: Duration::minutes(10),
            ask_after_end: true,
            reserve_deadlines: true,
            rescue: None,
        }
    }
}

/// What the core asks its driver to do, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Fetch site `site`'s information and give it back with
    /// [`BrokerCore::informed`].
    Fetch {
        /// The site, by position.
        site: usize,
    },
    /// Send job `job` (its description: [`BrokerCore::description`]) to
    /// site `site`, asking for `wall` as its wall time when given, into a
    /// reservation there when given, under its owner's identity there,
    /// and give the answer back with [`BrokerCore::sent`].
    Send {
        /// The broker's id of the job.
        job: String,
        /// The site, by position.
        site: usize,
        /// The wall time to ask for.
        wall: Option<Duration>,
        /// The reservation it runs in.
        claim: Option<Claim>,
        /// When the site is a neighbouring broker the job is delegated
        /// to: its path and hops left ([`crate::delegate`]).
        delegation: Option<Delegation>,
    },
    /// Hold a reservation for job `job` at site `site` for `owner` (the
    /// user it runs as), lapsing at `until` unless a submission claims
    /// it, and give the answer back with [`BrokerCore::held`].
    Hold {
        /// The broker's id of the job.
        job: String,
        /// The site, by position.
        site: usize,
        /// Whom it is held for.
        owner: String,
        /// What is asked.
        request: Request,
        /// When the hold lapses.
        until: Time,
    },
    /// Give back `owner`'s reservation `reservation` at site `site`: held
    /// for a job that went elsewhere. Nothing is answered (a hold not
    /// given back lapses by itself).
    Release {
        /// The site, by position.
        site: usize,
        /// The site's id of the reservation.
        reservation: u64,
        /// Whom it was held for.
        owner: String,
    },
    /// Look for job `job` at every site under `key`, its current run's
    /// ([`BrokerJob::site_key`]): it was accepted before the broker
    /// restarted and may have reached one. Give the answer back with
    /// [`BrokerCore::found`].
    Find {
        /// The broker's id of the job.
        job: String,
        /// The key its current run is sent under.
        key: String,
    },
    /// Ask site `site` where its job `site_job` (job `job`) stands, and
    /// give the answer back with [`BrokerCore::status`].
    Status {
        /// The broker's id of the job.
        job: String,
        /// The site, by position.
        site: usize,
        /// The site's id for it.
        site_job: String,
    },
    /// Job `job`'s copy `site_job` at site `site` was let go for a move,
    /// or was its run before a requeue: what the site reports of it is no
    /// longer the job's.
    Retired {
        /// The broker's id of the job.
        job: String,
        /// The site, by position.
        site: usize,
        /// The site's id of the copy let go.
        site_job: String,
    },
    /// Read broker reservation `reservation`, which job `job` names, and
    /// give it back with [`BrokerCore::resolved`].
    Resolve {
        /// The broker's id of the job.
        job: String,
        /// The broker's id of the reservation.
        reservation: String,
    },
    /// Hold (`hold` true) or release job `site_job` at site `site`, where
    /// it runs as `owner`: its owner's hold of a job waiting there. Give
    /// the site's answer back with [`BrokerCore::held_at_site`].
    HoldAtSite {
        /// The site, by position.
        site: usize,
        /// The site's id for the job.
        site_job: String,
        /// Whom it runs as at the site.
        owner: String,
        /// Hold, or release.
        hold: bool,
    },
    /// Cancel job `site_job` at site `site`, where it runs as `owner`
    /// (its owner, or the user a broker above sent it for): the broker no
    /// longer wants it there.
    Withdraw {
        /// The site, by position.
        site: usize,
        /// The site's id for the job.
        site_job: String,
        /// Whom it runs as at the site.
        owner: String,
    },
    /// A site took job `job`, as predicted.
    Placed {
        /// The broker's id of the job.
        job: String,
        /// The site, by position.
        site: usize,
        /// The site's id for it.
        site_job: String,
        /// The prediction the choice was made on.
        prediction: Prediction,
        /// When the choice was made.
        decided: Time,
    },
    /// Search for a common start of co-allocation `group`'s parts (their
    /// ids in part order; their descriptions: [`BrokerCore::description`])
    /// over the sites and place each into its hold there, for `owner`;
    /// give the answer back with [`BrokerCore::coallocated`].
    CoAllocate {
        /// The group.
        group: String,
        /// Whose parts they are.
        owner: String,
        /// The parts' ids, in part order.
        parts: Vec<String>,
        /// What is searched for.
        search: CoSearch,
    },
    /// Store the job's record, with a line of its history when it entered
    /// a state (only with [`BrokerParams::persist`]).
    Persist {
        /// The record as it is now.
        job: Box<BrokerJob>,
        /// The state it entered, when it entered one.
        line: Option<HistoryEntry>,
    },
}

/// What a co-allocation searches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoSearch {
    /// The window the common start must fall in.
    pub window: (Time, Time),
    /// How far apart the parts' starts may be.
    pub delta: Duration,
    /// When the holds made while searching lapse unless the parts claim
    /// them: a driver that stops half-way leaves nothing booked.
    pub hold: Time,
}

/// How a co-allocation ended, as its driver found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CoAnswer {
    /// Every part placed, in part order: its site (by position), the
    /// site's id for it, and its start.
    Placed(Vec<(usize, String, Time)>),
    /// Caught half-way by a restart and completed: every part was at its
    /// site, none ended, and their holds were committed.
    Completed(Vec<(usize, String)>),
    /// No part runs, and why.
    Failed(String),
}

/// A reservation a job is sent into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The site's id of the reservation.
    pub reservation: u64,
    /// Whether it ends with the job: held by the broker for this job
    /// alone, where a user's own reservation outlives it.
    pub release_with_job: bool,
    /// Whether the site leaves a held reservation held when the job claims
    /// it, for the broker above that made it to commit.
    pub explicit_commit: bool,
}

/// A job being accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Its id at the broker (the driver's choice, unique).
    pub id: String,
    /// The language it was written in.
    pub format: String,
    /// Its description.
    pub job: Job,
    /// Its owner's preferences.
    pub prefs: JobPreferences,
    /// Kept back until released.
    pub hold: bool,
    /// The user it runs for at the sites, when its owner is a broker above.
    pub runs_as: Option<String>,
    /// How it came, when a neighbouring broker delegated it here.
    pub delegated: Option<Delegation>,
    /// Translation warnings.
    pub warnings: Vec<String>,
}

/// Why an owner's request about a job is not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No such job of the asker's (another user's job is not shown to exist).
    #[error("no job {0}")]
    Unknown(String),
    /// The job's state rules it out.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The owner has as many unfinished jobs as it may.
    #[error(transparent)]
    OverLimit(#[from] OverLimit),
}

/// What the broker knows of one site.
#[derive(Debug, Clone)]
struct SiteSlot {
    name: String,
    /// Whether its last answer was its information (kept in
    /// [`BrokerCore::infos`]) or a failure; `None` before the first.
    answer: Option<Result<(), FetchFailure>>,
    /// When the information in hand was asked for.
    taken: Option<Time>,
    /// A fetch is on its way.
    asked: bool,
    /// The broker changed the site since (a job went elsewhere than
    /// counted, or it refused one): asked again before the next decision.
    changed: bool,
    /// The site pushes its information as it changes ([`BrokerCore::pushed`]):
    /// it is not asked.
    pushed: bool,
    /// Since when it has not answered, when its last answer was no answer
    /// ([`BrokerCore::down`]).
    down_since: Option<Time>,
    /// It has said its health is other than critical: a critical health
    /// after that is a failure (an ARC CE says critical until its first
    /// information cycle, which is no failure).
    healthy: bool,
}

impl SiteSlot {
    /// Whether decisions may send it work: it answered, and its health has
    /// not turned critical since (a cluster with every node down or
    /// drained, an ARC CE failing, would start nothing).
    fn usable(&self) -> bool {
        matches!(self.answer, Some(Ok(_))) && self.down_since.is_none()
    }

    fn new(name: String) -> SiteSlot {
        SiteSlot {
            name,
            answer: None,
            taken: None,
            asked: false,
            changed: false,
            pushed: false,
            down_since: None,
            healthy: false,
        }
    }
}

/// A job the core holds: its record, its description and preferences.
#[derive(Debug, Clone)]
struct Record {
    view: BrokerJob,
    job: Job,
    prefs: JobPreferences,
    /// When the core, sending it, predicted it would start.
    predicted_start: Option<Time>,
    /// Accepted before the broker restarted and not looked for at the
    /// sites since.
    inherited: bool,
}

/// A job the driver is asked about before it is sent: whom it runs as,
/// and what is asked.
#[derive(Debug, Clone)]
struct Lookup {
    owner: String,
    asked: Asked,
}

/// What a [`Lookup`] asks.
#[derive(Debug, Clone, PartialEq)]
enum Asked {
    /// Whether a site has it already ([`Effect::Find`]).
    Find,
    /// The reservation it names ([`Effect::Resolve`]).
    Resolve(String),
    /// Whether the site took it into the reservation: its id, start and
    /// site, and when it was sent.
    Claim {
        reservation: String,
        start: Time,
        site: usize,
        decided: Time,
    },
}

/// Where a job queue adaptation moves is in its move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Move {
    /// Its site is asked whether it still waits there.
    Asking,
    /// Its site is asked to let it go.
    Withdrawing,
    /// Let go at site `from`, and decided again.
    Resending {
        /// The site it left.
        from: usize,
    },
}

/// A decided job on its way down its candidates.
#[derive(Debug, Clone)]
struct Attempt {
    /// Whom it runs as at the sites.
    owner: String,
    /// The sites able to run it (indexes into `site_of`), the best first,
    /// the rest put in order only if the best refuses.
    candidates: Vec<Ranked>,
    /// Site positions of the information the decision read.
    site_of: Vec<usize>,
    /// The candidate being asked.
    next: usize,
    /// The site it was counted at.
    first: usize,
    excluded: Vec<(String, Vec<Mismatch>)>,
    failed: Vec<(String, SiteError)>,
    /// When it was decided (its dispatch is recorded at that second).
    decided: Time,
    /// Its place among the decisions, for counting jobs on their way in
    /// the order they were decided.
    seq: u64,
    /// Its processors.
    cpus: u32,
    /// Whether it holds reservations on its best sites before it is sent
    /// (then nothing is counted where it goes: the site is asked again).
    reserving: bool,
    /// The reservation held for each candidate (empty unless reserving).
    held: Vec<Option<ReservationId>>,
    /// Holds asked for and not answered yet.
    holding: usize,
    /// The deadline of a job that reserves its earliest slot, one site
    /// after another ([`BrokerParams::reserve_deadlines`]).
    deadline: Option<Time>,
    /// Reservations such a job may still ask for.
    trials: usize,
    /// The sites that refused it a slot.
    refused: Vec<usize>,
    /// What goes with it to a neighbouring broker, when it is delegated:
    /// then `candidates` are in the order to ask (its first `neighbours`
    /// the neighbouring brokers, then the own sites), not sorted on a
    /// refusal.
    onward: Option<Delegation>,
    /// How many of the first candidates are neighbouring brokers.
    neighbours: usize,
}

impl Attempt {
    fn site(&self) -> usize {
        self.site_of[self.candidates[self.next].index]
    }

    /// What goes with it to the candidate being asked: the delegation when
    /// that is a neighbouring broker.
    fn delegation(&self) -> Option<&Delegation> {
        self.onward.as_ref().filter(|_| self.next < self.neighbours)
    }

    /// The send of candidate `next`, into its reservation when one is held.
    fn send(&self, job: &str) -> Effect {
        let c = &self.candidates[self.next];
        let site = self.site_of[c.index];
        Effect::Send {
            job: job.to_string(),
            site,
            wall: c.prediction.requested_wall_time,
            claim: self.held.get(self.next).copied().flatten().map(|r| Claim {
                reservation: r.0,
                release_with_job: true,
                explicit_commit: false,
            }),
            delegation: self.delegation().cloned(),
        }
    }

    /// Gives back every reservation held but candidate `used`'s.
    fn release(&self, used: Option<usize>, outbox: &mut Vec<Effect>) {
        for (i, h) in self.held.iter().enumerate() {
            if let (Some(r), false) = (h, used == Some(i)) {
                outbox.push(Effect::Release {
                    site: self.site_of[self.candidates[i].index],
                    reservation: r.0,
                    owner: self.owner.clone(),
                });
            }
        }
    }
}

/// The broker's own state and rules: see the module's documentation.
#[derive(Debug, Clone)]
pub struct BrokerCore {
    params: BrokerParams,
    /// The rescue of each site that is down, when the broker rescues.
    failures: std::collections::BTreeMap<usize, crate::rescue::Failure>,
    sites: Vec<SiteSlot>,
    /// Every site's information, in site order (empty where none is known),
    /// read by decisions without copies.
    infos: Vec<ResourceInfo>,
    /// 0, 1, 2, ...: the site of each entry of `infos` when all are known.
    all: Vec<usize>,
    jobs: HashMap<String, Record>,
    /// Accepted jobs waiting for a decision, per owner in the order they
    /// came, the owners in turn (the front owner's front job goes next).
    queues: VecDeque<(String, VecDeque<String>)>,
    /// Jobs no site could take because one did not answer, until when.
    waiting: Vec<(Time, String)>,
    /// Unfinished jobs per owner that count toward the limit.
    unfinished: HashMap<String, u64>,
    sending: HashMap<String, Attempt>,
    /// Jobs the driver was asked about, or sent into a reservation.
    looking: HashMap<String, Lookup>,
    /// Jobs whose owners asked for queue adaptation, in id order.
    adapting: std::collections::BTreeSet<String>,
    /// Jobs in a move.
    moves: HashMap<String, Move>,
    /// Moves made, to another site.
    moved: u64,
    /// The broker's job of each site's id, per site (looked up by a
    /// site's id without making a key of it).
    at_site: Vec<HashMap<String, String>>,
    /// The owner and the parts of each co-allocation being placed, in
    /// part order.
    groups: HashMap<String, (String, Vec<String>)>,
    /// Decisions made so far.
    decisions: u64,
    /// What the core has asked of its sites so far, by kind.
    requests: Requests,
    /// Its jobs that started later than it predicted
    /// ([`crate::predict::violated`]).
    violations: u64,
    /// Reservations of a slot it read as free that a site refused
    /// ([AB-avail] counts them as violations too).
    refused_slots: u64,
    /// Sites whose information a look at the sites ([`BrokerCore::stale`])
    /// found fresh, and those it asked again.
    lookups: (u64, u64),
    /// How it delegates to neighbouring brokers and takes their jobs.
    delegating: Delegating,
    outbox: Vec<Effect>,
}

/// A broker's delegation ([`crate::delegate`]): its name on paths, when it
/// delegates, how many hops a job it delegates may take, and which of its
/// sites are neighbouring brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegating {
    /// Its name, as its neighbours name it.
    pub name: String,
    /// A job no own site is predicted to start within this is delegated.
    pub threshold: Duration,
    /// Hops a job it delegates may take.
    pub ttl: u32,
    /// Its neighbours: site positions and how each is linked.
    pub neighbours: HashMap<usize, Relation>,
}

impl Default for Delegating {
    fn default() -> Self {
        Delegating {
            name: "brokk".into(),
            threshold: Duration::ZERO,
            ttl: delegate::DEFAULT_TTL,
            neighbours: HashMap::new(),
        }
    }
}

/// The requests a broker makes of its sites, by kind ([AB-avail]'s
/// message overhead: each has a reply, so the messages are twice their
/// sum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Requests {
    /// Information asked for (a site's figures, with its free capacity
    /// over time where it publishes it).
    pub info: u64,
    /// Jobs sent.
    pub submit: u64,
    /// Reservations held, and co-allocation searches.
    pub reserve: u64,
    /// Reservations given back.
    pub release: u64,
    /// Jobs withdrawn, looked for or asked about.
    pub other: u64,
}

impl Requests {
    /// Counts what effect `e` asks of a site, if anything.
    pub fn count(&mut self, e: &Effect) {
        match e {
            Effect::Fetch { .. } => self.info += 1,
            Effect::Send { .. } => self.submit += 1,
            Effect::Hold { .. } | Effect::CoAllocate { .. } => self.reserve += 1,
            Effect::Release { .. } => self.release += 1,
            Effect::Withdraw { .. }
            | Effect::HoldAtSite { .. }
            | Effect::Status { .. }
            | Effect::Find { .. }
            | Effect::Resolve { .. } => self.other += 1,
            Effect::Placed { .. } | Effect::Persist { .. } | Effect::Retired { .. } => {}
        }
    }

    /// Another's counts added to these.
    pub fn add(&mut self, o: &Requests) {
        self.info += o.info;
        self.submit += o.submit;
        self.reserve += o.reserve;
        self.release += o.release;
        self.other += o.other;
    }

    /// Requests and replies together.
    pub fn messages(&self) -> u64 {
        2 * (self.info + self.submit + self.reserve + self.release + self.other)
    }
}

impl BrokerCore {
    /// A broker over the sites named `sites`, in the order that breaks ties.
    pub fn new(sites: Vec<String>, params: BrokerParams) -> BrokerCore {
        let n = sites.len();
        BrokerCore {
            params,
            sites: sites.into_iter().map(SiteSlot::new).collect(),
            infos: vec![ResourceInfo::default(); n],
            all: (0..n).collect(),
            jobs: HashMap::new(),
            queues: VecDeque::new(),
            waiting: Vec::new(),
            unfinished: HashMap::new(),
            sending: HashMap::new(),
            looking: HashMap::new(),
            adapting: std::collections::BTreeSet::new(),
            moves: HashMap::new(),
            moved: 0,
            at_site: vec![HashMap::new(); n],
            groups: HashMap::new(),
            decisions: 0,
            requests: Requests::default(),
            violations: 0,
            lookups: (0, 0),
            refused_slots: 0,
            delegating: Delegating::default(),
            failures: std::collections::BTreeMap::new(),
            outbox: Vec::new(),
        }
    }

    /// Sets how the broker delegates and which of its sites are
    /// neighbouring brokers.
    pub fn delegate(&mut self, delegating: Delegating) {
        self.delegating = delegating;
    }

    /// Whether a job `job` delegated here with `d` is taken at `now`
    /// ([`delegate::admit`]): not when it passed through here; yes when an
    /// own site is predicted to start it within the threshold, or when it
    /// may go on to a neighbour not on its path that publishes room for it.
    pub fn admits(&self, job: &Job, prefs: &JobPreferences, d: &Delegation, now: Time) -> Result<(), Reject> {
        let AtHand { infos, site_of, .. } = self.at_hand();
        let ranking = assess(job, prefs, &infos, now, &STANDARD_PREDICTOR);
        let own = |c: &&Ranked| !self.delegating.neighbours.contains_key(&site_of[c.index]);
        let local_wait = ranking.ranked.iter().filter(own).map(|c| c.prediction.tts()).min();
        let cpus = job.cpus.unwrap_or(1);
        let onward = |path: &[String]| {
            ranking.ranked.iter().any(|c| {
                let site = site_of[c.index];
                self.delegating.neighbours.contains_key(&site)
                    && !path.contains(&self.sites[site].name)
                    && infos[c.index].free_slots >= cpus
            })
        };
        delegate::admit(&self.delegating.name, d, local_wait, self.delegating.threshold, onward)
    }

    /// The effects given out since the last drain, in order.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Effect> {
        for e in &self.outbox {
            self.requests.count(e);
        }
        self.outbox.drain(..)
    }

    /// What the core has asked of its sites so far, by kind.
    pub fn requests(&self) -> Requests {
        self.requests
    }

    /// Its jobs that started more than [`crate::predict::VIOLATION_TOLERANCE`]
    /// later than it predicted when it sent them ([AB-avail]'s violations).
    pub fn violations(&self) -> u64 {
        self.violations
    }

    /// Reservations of a job's earliest slot, read in a site's published
    /// free capacity, that the site refused: the slot was gone
    /// ([`BrokerParams::reserve_deadlines`]).
    pub fn refused_slots(&self) -> u64 {
        self.refused_slots
    }

    /// Site `site`'s name.
    pub fn site_name(&self, site: usize) -> &str {
        &self.sites[site].name
    }

    /// Job `id`'s record, while the core holds it (until it ends).
    pub fn job(&self, id: &str) -> Option<&BrokerJob> {
        self.jobs.get(id).map(|r| &r.view)
    }

    /// Job `id`'s description, while the core holds it.
    pub fn description(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id).map(|r| &r.job)
    }

    /// Job `id` as it goes to a site: its description asking for `wall`
    /// when given, with the batch variables the broker sets
    /// ([`crate::submit::with_batch_variables`]).
    pub fn outgoing(&self, id: &str, wall: Option<Duration>) -> Option<Job> {
        let r = self.jobs.get(id)?;
        let mut job = r.job.clone();
        if wall.is_some() {
            job.wall_time = wall;
        }
        crate::submit::with_batch_variables(&mut job, id, &r.view.format);
        Some(job)
    }

    /// What the broker knows of each site, in site order (empty where
    /// nothing is known), with its own bookings since: what a rule the
    /// core does not hold yet (co-allocation, adaptation, reservations)
    /// reads.
    pub fn information(&self) -> &[ResourceInfo] {
        &self.infos
    }

    /// Site `site`'s last answer, with the broker's own bookings there
    /// since: its information, or why there is none; `None` before its
    /// first. What a rule the core does not hold yet reads a site by.
    pub fn answer(&self, site: usize) -> Option<Answer> {
        Some(match self.sites.get(site)?.answer.as_ref()? {
            Ok(()) => Ok(self.infos[site].clone()),
            Err(e) => Err(e.clone()),
        })
    }

    /// How many times a look at the sites found a site's information
    /// fresh, and how many times it asked again.
    pub fn lookups(&self) -> (u64, u64) {
        self.lookups
    }

    /// Site `site` was changed by the broker outside a decision (a
    /// reservation made or given back, a job moved): asked again before
    /// the next decision.
    pub fn changed(&mut self, site: usize) {
        self.sites[site].changed = true;
    }

    /// Jobs the core holds (not yet ended).
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether the core holds no job.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Jobs waiting for a decision (those waiting to be tried again included).
    pub fn pending(&self) -> usize {
        self.queues.iter().map(|(_, q)| q.len()).sum::<usize>() + self.waiting.len()
    }

    /// `owner`'s unfinished jobs that count toward the limit.
    pub fn unfinished(&self, owner: &str) -> u64 {
        self.unfinished.get(owner).copied().unwrap_or(0)
    }

    /// Accepts `jobs` of `owner`'s at `now`, all or none: refused when they
    /// are more than a request may describe or would take the owner past
    /// the limit.
    pub fn accept(&mut self, now: Time, owner: &str, jobs: Vec<NewJob>) -> Result<(), OverLimit> {
        let p = self.params;
        jobs::within_limits(jobs.len() as u64, p.per_request, self.unfinished(owner), p.limit)?;
        for n in jobs {
            let mut view = BrokerJob::new(n.id, owner.to_string(), n.format, Entry::submitted(n.hold), now);
            view.runs_as = n.runs_as;
            view.delegated = n.delegated;
            view.warnings = n.warnings;
            view.describe(&n.job);
            let line = HistoryEntry {
                at: now,
                state: view.state(),
                detail: None,
            };
            self.take_new(view, n.job, n.prefs, Some(line));
        }
        Ok(())
    }

    /// Why no site could ever run `job`, when every site has answered and
    /// each has a reason it cannot (too few processors, another
    /// architecture, a queue it lacks: [`crate::select::mismatches`], none
    /// of which a wait changes), to refuse it at submission as `sbatch`
    /// does rather than accept it to fail at its first decision; `None`
    /// when a site can, or one has not answered yet.
    pub fn runs_nowhere(&self, job: &Job) -> Option<String> {
        let answered = |s: &SiteSlot| matches!(s.answer, Some(Ok(())));
        if self.sites.is_empty() || !self.sites.iter().all(answered) {
            return None;
        }
        let mut why = Vec::new();
        for (k, info) in self.infos.iter().enumerate() {
            let m = crate::select::mismatches(job, info);
            if m.is_empty() {
                return None;
            }
            let reasons: Vec<String> = m.iter().map(ToString::to_string).collect();
            why.push(format!("{}: {}", self.sites[k].name, reasons.join(", ")));
        }
        Some(format!("no site can run it: {}", why.join("; ")))
    }

    /// Takes a job already recorded (a driver that stored it itself, or
    /// one restarting from its store): an accepted job waits for a
    /// decision, a dispatched or running one is followed at its site; an
    /// ended one is not held.
    pub fn adopt(&mut self, view: BrokerJob, job: Job, prefs: JobPreferences) {
        self.hold_unended(view, job, prefs, false);
    }

    /// Takes a job recorded before the broker restarted at `now`: as
    /// [`adopt`] does, but an accepted one is looked for at the sites
    /// before it is decided ([`Effect::Find`]), since it may have reached
    /// one before its dispatch was stored; and one a stop caught in the
    /// middle of a move stays where it was last recorded (its site's
    /// reports then say where it is).
    ///
    /// [`adopt`]: BrokerCore::adopt
    pub fn inherit(&mut self, now: Time, mut view: BrokerJob, job: Job, prefs: JobPreferences) {
        if view.state() == BrokerState::Moving {
            if let Ok(applied) = jobs::apply(&mut view, Change::EndMove(None), now) {
                if applied != Applied::Unchanged {
                    persist(self.params.persist, &mut self.outbox, &view, None);
                }
            }
        }
        let inherited = view.state() == BrokerState::Accepted;
        self.hold_unended(view, job, prefs, inherited);
    }

    /// A stored job that cannot be taken (its description no longer reads
    /// back, `why`) fails at `now` with the reason, and is not held.
    pub fn refuse(&mut self, now: Time, mut view: BrokerJob, why: String) {
        let counted = jobs::counts_toward_limit(view.state());
        if let Ok(Applied::Entered(state)) = jobs::apply(&mut view, Change::Fail(why.clone()), now) {
            let line = HistoryEntry {
                at: now,
                state,
                detail: Some(why),
            };
            persist(self.params.persist, &mut self.outbox, &view, Some(line));
            if counted && self.jobs.remove(&view.id).is_some() {
                let n = self.unfinished.entry(view.owner.clone()).or_default();
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Holds a recorded job unless it has ended.
    fn hold_unended(&mut self, view: BrokerJob, job: Job, prefs: JobPreferences, inherited: bool) {
        if !view.state().is_terminal() {
            self.hold_record(Record {
                view,
                job,
                prefs,
                inherited,
                predicted_start: None,
            });
        }
    }

    /// Records job `id` taken by site `site` as `site_job` (`change` at
    /// `at`, its history saying `detail`), so that the site's reports of
    /// it reach it.
    fn landed(&mut self, id: &str, site: usize, site_job: String, (change, at, detail): (Change, Time, String)) {
        let predicted = match &change {
            Change::Dispatch { tts: Some(s), .. } => Some(at + Duration(*s)),
            _ => None,
        };
        let _ = self.change(id, change, at, Some(detail));
        if let Some(r) = self.jobs.get_mut(id) {
            r.predicted_start = predicted.or(r.predicted_start);
        }
        if let Some(m) = self.at_site.get_mut(site) {
            m.insert(site_job, id.to_string());
        }
    }

    /// Takes a planned job whose turn has come (a workflow's task whose
    /// parents ended, `detail` saying so), already stored as planned, as
    /// `job` now reads (its parents' outputs named as its inputs): it is
    /// accepted now and decided as any other. One the core holds already
    /// (planned when adopted) is taken from its own record.
    pub fn ready(
        &mut self,
        now: Time,
        view: BrokerJob,
        job: Job,
        prefs: JobPreferences,
        detail: String,
    ) -> Result<(), Refused> {
        if let Some(held) = self
            .jobs
            .get(&view.id)
            .filter(|h| h.view.state() != BrokerState::Planned)
        {
            // Only a planned one is taken from its record: any other
            // answers as its state rules (changing nothing).
            return jobs::apply(&mut held.view.clone(), Change::Ready, now).map(|_| ());
        }
        let mut view = match self.jobs.remove(&view.id) {
            Some(held) => {
                if jobs::counts_toward_limit(held.view.state()) {
                    let n = self.unfinished.entry(held.view.owner.clone()).or_default();
                    *n = n.saturating_sub(1);
                }
                held.view
            }
            None => view,
        };
        let applied = jobs::apply(&mut view, Change::Ready, now)?;
        let line = match applied {
            Applied::Entered(state) => Some(HistoryEntry {
                at: now,
                state,
                detail: Some(detail),
            }),
            _ => None,
        };
        self.take_new(view, job, prefs, line);
        Ok(())
    }

    /// Takes the parts of co-allocation `group`, stored as reserving with
    /// their descriptions, in part order. With `search` the driver is
    /// asked to search for a common start and place them
    /// ([`Effect::CoAllocate`]); without, a restart caught them half-way
    /// and the driver settles them ([`crate::coalloc::settle`]). Either
    /// way [`BrokerCore::coallocated`] says how it ended.
    pub fn coallocate(&mut self, group: &str, parts: Vec<(BrokerJob, Job)>, search: Option<CoSearch>) {
        let Some(owner) = parts.first().map(|(v, _)| v.owner.clone()) else {
            return;
        };
        let ids: Vec<String> = parts.iter().map(|(v, _)| v.id.clone()).collect();
        for (view, job) in parts {
            self.hold_unended(view, job, JobPreferences::default(), false);
        }
        self.groups.insert(group.to_string(), (owner.clone(), ids.clone()));
        if let Some(search) = search {
            self.outbox.push(Effect::CoAllocate {
                group: group.to_string(),
                owner,
                parts: ids,
                search,
            });
        }
    }

    /// How co-allocation `group` ended, at `now`: each part recorded at
    /// its site, or every part failed with the reason (an answer that
    /// does not cover every part fails those it leaves out). A site that
    /// took a part is asked for its information again.
    pub fn coallocated(&mut self, now: Time, group: &str, answer: CoAnswer) {
        let Some((owner, ids)) = self.groups.remove(group) else {
            return;
        };
        let placed: Vec<Option<(usize, String, String)>> = match answer {
            CoAnswer::Placed(parts) => parts
                .into_iter()
                .map(|(k, job, start)| {
                    let why = format!("co-allocated to start at {start}");
                    Some((k, job, why))
                })
                .collect(),
            CoAnswer::Completed(parts) => parts
                .into_iter()
                .map(|(k, job)| Some((k, job, "co-allocated (completed after a restart)".to_string())))
                .collect(),
            CoAnswer::Failed(why) => {
                for id in &ids {
                    let _ = self.change(id, Change::Fail(why.clone()), now, Some(why.clone()));
                }
                return;
            }
        };
        for (k, id) in ids.iter().enumerate() {
            match placed.get(k).cloned().flatten().filter(|p| p.0 < self.sites.len()) {
                Some((site, site_job, why)) => {
                    let name = self.sites[site].name.clone();
                    self.sites[site].changed = true;
                    if !self.jobs.contains_key(id) {
                        // Cancelled while it was placed: the site lets it go.
                        let owner = owner.clone();
                        self.outbox.push(Effect::Withdraw { site, site_job, owner });
                        continue;
                    }
                    let sent = Change::Dispatch {
                        site: name.clone(),
                        site_job: site_job.clone(),
                        tts: None,
                        ttd: None,
                    };
                    self.landed(id, site, site_job, (sent, now, format!("to {name}, {why}")));
                }
                None => {
                    let why = "the co-allocation placed no such part".to_string();
                    let _ = self.change(id, Change::Fail(why.clone()), now, Some(why));
                }
            }
        }
    }

    /// Sites named by their endpoints in what selection left out, named
    /// as this broker names them (what its users see), for a refusal.
    fn by_name(&self, excluded: Vec<(String, Vec<Mismatch>)>) -> Vec<(String, Vec<Mismatch>)> {
        excluded
            .into_iter()
            .map(|(endpoint, m)| {
                let k = self.infos.iter().position(|i| i.endpoint == endpoint);
                (k.map_or(endpoint, |k| self.sites[k].name.clone()), m)
            })
            .collect()
    }

    /// Whether job `id` is on its way somewhere: decided and being sent,
    /// or asked about.
    fn in_flight(&self, id: &str) -> bool {
        self.sending.contains_key(id) || self.looking.contains_key(id)
    }

    /// Writes the record of a job new to the core, or new again (a
    /// requeue), with its history `line`, and holds it.
    fn take_new(&mut self, view: BrokerJob, job: Job, prefs: JobPreferences, line: Option<HistoryEntry>) {
        persist(self.params.persist, &mut self.outbox, &view, line);
        self.hold_record(Record {
            view,
            job,
            prefs,
            inherited: false,
            predicted_start: None,
        });
    }

    fn hold_record(&mut self, r: Record) {
        let id = r.view.id.clone();
        let state = r.view.state();
        if r.prefs.queue_adaptation == Some(true) {
            self.adapting.insert(id.clone());
        }
        if jobs::counts_toward_limit(state) {
            *self.unfinished.entry(r.view.owner.clone()).or_default() += 1;
        }
        if state == BrokerState::Accepted {
            self.enqueue(&r.view.owner, id.clone(), false);
        }
        if let (Some(site), Some(site_job)) = (&r.view.site, &r.view.site_job) {
            if let Some(k) = self.site_position(site) {
                self.at_site[k].insert(site_job.clone(), id.clone());
            }
        }
        self.jobs.insert(id, r);
    }

    /// Puts job `id` in `owner`'s queue: at the back, or at the front for
    /// one that was there before (it keeps its age).
    fn enqueue(&mut self, owner: &str, id: String, front: bool) {
        match self.queues.iter_mut().find(|(o, _)| o == owner) {
            Some((_, q)) if front => q.push_front(id),
            Some((_, q)) => q.push_back(id),
            None => self.queues.push_back((owner.to_string(), VecDeque::from([id]))),
        }
    }

    /// `owner`'s job `id`, for a request of theirs.
    fn owned(&self, owner: &str, id: &str) -> Result<&Record, Denied> {
        match self.jobs.get(id) {
            Some(r) if r.view.owner == owner => Ok(r),
            _ => Err(Denied::Unknown(id.to_string())),
        }
    }

    /// Keeps `owner`'s job `id` back (`brokk hold`). A job already decided
    /// and on its way is held all the same: a site that takes it is asked
    /// to give it back. One waiting at a site is held there
    /// ([`Effect::HoldAtSite`]), and recorded held once the site says so.
    pub fn hold(&mut self, now: Time, owner: &str, id: &str) -> Result<Applied, Denied> {
        if self.ask_its_site(owner, id, true)? {
            return Ok(Applied::Unchanged);
        }
        Ok(self.change(id, Change::Hold, now, None)?)
    }

    /// Lets `owner`'s held job `id` go (`brokk release`): one the broker
    /// kept back is decided again from the start; one held at its site is
    /// released there.
    pub fn release(&mut self, now: Time, owner: &str, id: &str) -> Result<Applied, Denied> {
        if self.ask_its_site(owner, id, false)? {
            return Ok(Applied::Unchanged);
        }
        let applied = self.change(id, Change::Release, now, None)?;
        if applied == Applied::Entered(BrokerState::Accepted) && !self.in_flight(id) {
            self.enqueue(owner, id.to_string(), false);
        }
        Ok(applied)
    }

    /// Asks `owner`'s job `id`'s site to hold (or release) it when that is
    /// the site's to do ([`jobs::hold_goes_to_site`]); whether it was.
    fn ask_its_site(&mut self, owner: &str, id: &str, hold: bool) -> Result<bool, Denied> {
        let r = self.owned(owner, id)?;
        if !jobs::hold_goes_to_site(&r.view, hold)? {
            return Ok(false);
        }
        let site = r.view.site.as_deref().and_then(|s| self.site_position(s));
        let (Some(site), Some(site_job)) = (site, r.view.site_job.clone()) else {
            return Ok(false);
        };
        let owner = r.view.runs_as.clone().unwrap_or_else(|| owner.to_string());
        self.outbox.push(Effect::HoldAtSite {
            site,
            site_job,
            owner,
            hold,
        });
        Ok(true)
    }

    /// What site `site` answered at `now` when asked to hold or release its
    /// job `site_job`: the job as the site now has it, recorded as any
    /// report of it is; a refusal is its owner's answer.
    pub fn held_at_site(
        &mut self,
        now: Time,
        site: usize,
        site_job: &str,
        answer: Result<Report, SiteError>,
    ) -> Result<(), SiteError> {
        self.reported(now, site, site_job, answer?);
        Ok(())
    }

    /// Sends `owner`'s ended job again at `now` (`brokk requeue`, as
    /// Slurm's `scontrol requeue`): the same id, decided afresh from the
    /// start, within the owner's limit on unfinished jobs; its earlier run
    /// stays in its history. `view`, `job` and `prefs` are its stored
    /// record, since the core lets a job go when it ends; one the core
    /// still holds has not ended.
    pub fn requeue(
        &mut self,
        now: Time,
        owner: &str,
        mut view: BrokerJob,
        job: Job,
        prefs: JobPreferences,
    ) -> Result<Applied, Denied> {
        if view.owner != owner {
            return Err(Denied::Unknown(view.id));
        }
        // Its state's rules first, then the owner's limit. One the core
        // still holds has not ended: its live state says why not.
        if let Some(r) = self.jobs.get(&view.id) {
            jobs::check(&r.view, Change::Requeue, now)?;
        }
        let last_run = view
            .site
            .as_deref()
            .and_then(|s| self.site_position(s))
            .zip(view.site_job.clone());
        let applied = jobs::apply(&mut view, Change::Requeue, now)?;
        let p = self.params;
        jobs::within_limits(1, p.per_request, self.unfinished(owner), p.limit)?;
        // What its site reports of its last run is no longer the job's.
        if let Some((site, site_job)) = last_run {
            self.outbox.push(Effect::Retired {
                job: view.id.clone(),
                site,
                site_job,
            });
        }
        let line = HistoryEntry {
            at: now,
            state: view.state(),
            detail: Some("requeued by its owner".into()),
        };
        self.take_new(view, job, prefs, Some(line));
        Ok(applied)
    }

    /// Cancels `owner`'s job `id`. One at a site is withdrawn from it
    /// first ([`Effect::Withdraw`]) and recorded cancelled once the site
    /// lets it go ([`BrokerCore::withdrawn`]), so a site that cannot be
    /// reached leaves it as it is, running there; one on its way is
    /// cancelled now and withdrawn from the site that takes it.
    pub fn cancel(&mut self, now: Time, owner: &str, id: &str) -> Result<Applied, Denied> {
        let r = self.owned(owner, id)?;
        if let (Some(site), Some(site_job), BrokerState::Dispatched | BrokerState::Running | BrokerState::Held) =
            (&r.view.site, &r.view.site_job, r.view.state())
        {
            if let Some(k) = self.site_position(site) {
                self.outbox.push(Effect::Withdraw {
                    site: k,
                    site_job: site_job.clone(),
                    owner: r.view.runs_as.clone().unwrap_or_else(|| owner.to_string()),
                });
                return Ok(Applied::Unchanged);
            }
        }
        Ok(self.change(id, Change::Cancel, now, Some("cancelled by its owner".into()))?)
    }

    /// What site `site` answered at `now` when asked to let its job
    /// `site_job` go: a job of the broker's there is then cancelled, and
    /// the site asked for its information again; one the site could not
    /// let go stays as it is (the error is its owner's answer).
    pub fn withdrawn(
        &mut self,
        now: Time,
        site: usize,
        site_job: &str,
        answer: Result<(), SiteError>,
    ) -> Result<Applied, SiteError> {
        let id = self.at_site.get(site).and_then(|m| m.get(site_job)).cloned();
        if let Some(id) = id.as_ref().filter(|id| self.moves.get(*id) == Some(&Move::Withdrawing)) {
            return self.let_go_for_move(now, id, site, site_job, answer);
        }
        answer?;
        // What it held there is free again: the site is asked anew before
        // the next decision.
        if let Some(s) = self.sites.get_mut(site) {
            s.changed = true;
        }
        let Some(id) = id else {
            return Ok(Applied::Unchanged);
        };
        Ok(self
            .change(&id, Change::Cancel, now, Some("cancelled by its owner".into()))
            .unwrap_or(Applied::Unchanged))
    }

    /// Jobs that queue adaptation may move (those whose owners asked for
    /// it, until they end).
    pub fn adapting(&self) -> usize {
        self.adapting.len()
    }

    /// Moves queue adaptation made to another site so far.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// One round of queue adaptation ([ET-brokering] 3.3) at `now`: the
    /// site of every job that asked for it and waits at one is asked where
    /// it stands ([`Effect::Status`]); the answers decide the moves
    /// ([`BrokerCore::status`]).
    pub fn adapt(&mut self, now: Time) {
        let _ = now;
        for id in &self.adapting {
            let Some(r) = self.jobs.get(id) else { continue };
            if !jobs::adapts(r.view.state(), &r.prefs) || self.moves.contains_key(id) {
                continue;
            }
            let (Some(site), Some(site_job)) = (&r.view.site, &r.view.site_job) else {
                continue;
            };
            let Some(k) = self.sites.iter().position(|s| &s.name == site) else {
                continue;
            };
            self.outbox.push(Effect::Status {
                job: id.clone(),
                site: k,
                site_job: site_job.clone(),
            });
            self.moves.insert(id.clone(), Move::Asking);
        }
    }

    /// Where job `id` stands at its site, as asked at `now`: one still
    /// waiting there that another site would deliver at least
    /// `adapt_margin` sooner ([`crate::adapt::worth_moving`], on the
    /// information at hand) is moved. Its site is asked to let it go first
    /// ([`Effect::Withdraw`]), so it can never run twice; it is then
    /// decided again over every site, its old one included.
    pub fn status(&mut self, now: Time, id: &str, answer: Result<crate::site::JobState, SiteError>) {
        if self.moves.get(id) != Some(&Move::Asking) {
            return;
        }
        self.moves.remove(id);
        let Ok(crate::site::JobState::Queued { expected_start }) = answer else {
            return;
        };
        let Some(r) = self.jobs.get(id).filter(|r| r.view.state() == BrokerState::Dispatched) else {
            return;
        };
        let (Some(from), Some(site_job)) = (
            r.view.site.as_deref().and_then(|s| self.site_position(s)),
            r.view.site_job.clone(),
        ) else {
            return;
        };
        let AtHand { infos, site_of, .. } = self.at_hand();
        let Some(here) = site_of.iter().position(|&k| k == from) else {
            return;
        };
        let margin = self.params.adapt_margin;
        let worth = crate::adapt::worth_moving(
            &r.job,
            &r.prefs,
            &infos,
            here,
            expected_start,
            now,
            margin,
            &STANDARD_PREDICTOR,
        );
        drop(infos);
        if worth.is_none() {
            return;
        }
        let owner = r.view.runs_as.clone().unwrap_or_else(|| r.view.owner.clone());
        let Some(r) = self.jobs.get_mut(id) else { return };
        // Not a state its history shows: it stays or moves.
        if jobs::apply(&mut r.view, Change::StartMove, now).is_err() {
            return;
        }
        persist(self.params.persist, &mut self.outbox, &r.view, None);
        self.moves.insert(id.to_string(), Move::Withdrawing);
        self.outbox.push(Effect::Withdraw {
            site: from,
            site_job,
            owner,
        });
    }

    /// Site `site`'s answer when asked to let job `id`'s copy `site_job`
    /// go for a move: let go, the job is decided again; kept, it stays
    /// where it is.
    fn let_go_for_move(
        &mut self,
        now: Time,
        id: &str,
        site: usize,
        site_job: &str,
        answer: Result<(), SiteError>,
    ) -> Result<Applied, SiteError> {
        if let Err(e) = answer {
            self.moves.remove(id);
            if let Some(r) = self.jobs.get_mut(id) {
                if jobs::apply(&mut r.view, Change::EndMove(None), now).is_ok() {
                    persist(self.params.persist, &mut self.outbox, &r.view, None);
                }
            }
            return Err(e);
        }
        if let Some(m) = self.at_site.get_mut(site) {
            m.remove(site_job);
        }
        self.outbox.push(Effect::Retired {
            job: id.to_string(),
            site,
            site_job: site_job.to_string(),
        });
        self.moves.insert(id.to_string(), Move::Resending { from: site });
        self.decide_one(id.to_string(), now);
        Ok(Applied::Unchanged)
    }

    /// The position of the site named `name`.
    pub fn site_position(&self, name: &str) -> Option<usize> {
        self.sites.iter().position(|s| s.name == name)
    }

    /// Adds a site after the others (found at run time); returns its position.
    pub fn add_site(&mut self, name: String) -> usize {
        if let Some(k) = self.site_position(&name) {
            return k;
        }
        self.sites.push(SiteSlot::new(name));
        self.infos.push(ResourceInfo::default());
        self.at_site.push(HashMap::new());
        self.all.push(self.all.len());
        self.sites.len() - 1
    }

    /// Applies `change` to job `id` at `now`: the count toward its owner's
    /// limit follows its state, the record is given out to be stored, and
    /// an ended job is let go.
    fn change(&mut self, id: &str, change: Change, now: Time, detail: Option<String>) -> Result<Applied, Refused> {
        let Some(r) = self.jobs.get_mut(id) else {
            return Ok(Applied::Unchanged);
        };
        let counted = jobs::counts_toward_limit(r.view.state());
        let applied = jobs::apply(&mut r.view, change, now)?;
        let state = r.view.state();
        if counted != jobs::counts_toward_limit(state) {
            let n = self.unfinished.entry(r.view.owner.clone()).or_default();
            if counted {
                *n = n.saturating_sub(1);
            } else {
                *n += 1;
            }
        }
        let line = match applied {
            Applied::Unchanged => return Ok(applied),
            Applied::Updated => None,
            Applied::Entered(s) => Some(HistoryEntry {
                at: now,
                state: s,
                detail,
            }),
        };
        persist(self.params.persist, &mut self.outbox, &r.view, line);
        if state.is_terminal() {
            self.adapting.remove(id);
            self.moves.remove(id);
            if let Some(r) = self.jobs.remove(id) {
                if let (Some(site), Some(job)) = (r.view.site, r.view.site_job) {
                    if let Some(k) = self.site_position(&site) {
                        self.at_site[k].remove(&job);
                        self.sites[k].changed |= self.params.ask_after_end;
                    }
                }
            }
        }
        Ok(applied)
    }

    /// Asks for the information of every site that needs it at `now`
    /// ([`Effect::Fetch`]): never asked, changed by the broker, or older
    /// than the time-to-live; a site already being asked is not asked
    /// twice, and one that pushes its information is not asked.
    pub fn stale(&mut self, now: Time) {
        let ttl = self.params.info_ttl;
        for (k, s) in self.sites.iter_mut().enumerate() {
            if s.pushed && s.answer.is_some() {
                continue;
            }
            let old = s.taken.is_none_or(|t| ttl.0 == 0 || now - t >= ttl);
            if !s.asked && (s.answer.is_none() || s.changed || old) {
                s.asked = true;
                s.changed = false;
                s.taken = Some(now);
                self.lookups.1 += 1;
                self.outbox.push(Effect::Fetch { site: k });
            } else {
                self.lookups.0 += 1;
            }
        }
    }

    /// How each site's information stands at `now`, for a readiness
    /// probe: `Ok(age)` when its last answer was its information, asked
    /// for at most three times-to-live ago (and at most a minute, where
    /// the time-to-live is shorter), or pushed; otherwise why not (never
    /// answered, its failure, or too old).
    pub fn freshness(&self, now: Time) -> Vec<(String, Result<Duration, String>)> {
        let max_age = Duration((3 * self.params.info_ttl.0).max(60));
        self.sites
            .iter()
            .map(|s| {
                let age = s.taken.map(|t| now - t);
                let state = match (&s.answer, age) {
                    (None, _) | (_, None) => Err("not answered yet".to_string()),
                    (Some(Err(e)), _) => Err(e.to_string()),
                    (Some(Ok(())), Some(a)) if a <= max_age || s.pushed => Ok(a),
                    (Some(Ok(())), Some(a)) => Err(format!("its information is {} old", a.human())),
                };
                (s.name.clone(), state)
            })
            .collect()
    }

    /// The sites that are down, each with the time it was first found not
    /// answering: what a rescue of the work booked there starts from
    /// ([`crate::rescue`]). A site is up again at its first answer.
    pub fn down(&self) -> Vec<(usize, Time)> {
        self.sites
            .iter()
            .enumerate()
            .filter_map(|(k, s)| s.down_since.map(|t| (k, t)))
            .collect()
    }

    /// The rescues due at `now` ([`crate::rescue::Failure::due`]): each
    /// site that is down with its rescue as it stands, for the driver to
    /// step (moving the work booked there) and give back
    /// ([`BrokerCore::rescued`]).
    pub fn rescues_due(&self, now: Time) -> Vec<(usize, crate::rescue::Failure)> {
        self.failures
            .iter()
            .filter(|(_, f)| f.due(now))
            .map(|(&k, f)| (k, f.clone()))
            .collect()
    }

    /// The sites being rescued: down, with a rescue under way. Work booked
    /// there is held back rather than sent where nothing answers (a site
    /// that lost only a part still takes what it holds).
    pub fn rescuing(&self) -> Vec<usize> {
        self.failures
            .iter()
            .filter(|(_, f)| !f.is_partial())
            .map(|(&k, _)| k)
            .collect()
    }

    /// Site `site`'s rescue after a step; dropped if the site answered
    /// again meanwhile.
    pub fn rescued(&mut self, site: usize, failure: crate::rescue::Failure) {
        if let Some(f) = self.failures.get_mut(&site) {
            *f = failure;
        }
    }

    /// Whether site `site` pushes its information to the broker as it
    /// changes and at an interval ([AB-avail]'s publication): while it
    /// does, its pushes come in as [`BrokerCore::informed`] and it is
    /// never asked; once its stream is down it is asked again as any site.
    pub fn pushed(&mut self, site: usize, on: bool) {
        if let Some(s) = self.sites.get_mut(site) {
            s.pushed = on;
        }
    }

    /// What site `site` answered when asked for its information at `taken`.
    /// A parent whose published chain of parents leads back here is
    /// answered as a failure ([`delegate::cycle`]): the links are
    /// misconfigured, and no job goes up them.
    pub fn informed(&mut self, site: usize, answer: Answer, taken: Time) {
        let answer = answer.and_then(|info| match self.parent_cycle(site, &info) {
            Some(reason) => {
                // Said once, not at every reading.
                let said = matches!(&self.sites[site].answer,
                    Some(Err(FetchFailure::Error(SiteError::Refused { reason: r, .. }))) if *r == reason);
                if !said {
                    tracing::error!(parent = %self.sites[site].name, "{reason}");
                }
                // The chain still goes on through here, so that every
                // broker of the cycle finds it, not only the first.
                self.infos[site].ancestors = info.ancestors;
                let name = self.sites[site].name.clone();
                Err(FetchFailure::Error(SiteError::Refused { site: name, reason }))
            }
            None => Ok(info),
        });
        let s = &mut self.sites[site];
        s.asked = false;
        s.taken = Some(taken);
        // A site that does not answer is down from the first time it did
        // not ([VRM] 6.2: a failure is detected by a missed heartbeat or a
        // timeout); one that refuses is up. Its information still counts
        // for decisions while it answers.
        let critical = |info: &ResourceInfo| {
            info.health
                .as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case("critical"))
        };
        let silent = match &answer {
            Err(FetchFailure::Timeout(_)) => true,
            Err(FetchFailure::Error(e)) => e.is_unavailable(),
            // A site whose own endpoint turns critical (GLUE 2
            // `HealthState`, as an ARC CE publishes it) is failing.
            Ok(info) if critical(info) => s.healthy,
            Ok(_) => {
                s.healthy = true;
                false
            }
        };
        let was = s.down_since;
        s.down_since = if silent {
            Some(s.down_since.unwrap_or(taken))
        } else {
            None
        };
        match (was, s.down_since, self.params.rescue) {
            (None, Some(since), Some(p)) => {
                tracing::warn!(site = %s.name, "site does not answer; its booked work is rescued ({})", p.strategy);
                match crate::rescue::Failure::new(p.strategy, since, p.step, p.reach, None) {
                    Ok(f) => {
                        self.failures.insert(site, f);
                    }
                    Err(e) => tracing::error!(site = %s.name, "no rescue: {e}"),
                }
            }
            (Some(_), None, _) if self.failures.remove(&site).is_some() => {
                tracing::info!(site = %s.name, "site answers again; its rescue ends");
            }
            _ => {}
        }
        // A site that answers but has lost a part (a node down or drained)
        // and says it can no longer hold some reservations: those are
        // rescued, the rest of it still takes work.
        let endangered = matches!(&answer, Ok(info) if info.endangered_reservations > 0);
        if s.down_since.is_none() {
            let partial = self.failures.get(&site).map(crate::rescue::Failure::is_partial);
            match (endangered, partial, self.params.rescue) {
                (true, None, Some(p)) => {
                    tracing::warn!(site = %s.name, "site can no longer hold some reservations; they are rescued ({})", p.strategy);
                    match crate::rescue::Failure::new(p.strategy, taken, p.step, p.reach, None) {
                        Ok(f) => {
                            self.failures.insert(site, f.of_a_part());
                        }
                        Err(e) => tracing::error!(site = %s.name, "no rescue: {e}"),
                    }
                }
                (false, Some(true), _) => {
                    self.failures.remove(&site);
                    tracing::info!(site = %s.name, "site holds every reservation again; its rescue ends");
                }
                _ => {}
            }
        }
        s.answer = Some(match answer {
            Ok(info) => {
                self.infos[site] = info;
                Ok(())
            }
            Err(e) => Err(e),
        });
        self.rebook(site);
    }

    /// Why site `site`, answering `info`, cannot be this broker's parent:
    /// it is its parent, and the chain it publishes comes back here.
    fn parent_cycle(&self, site: usize, info: &ResourceInfo) -> Option<String> {
        let d = &self.delegating;
        (d.neighbours.get(&site) == Some(&Relation::Parent))
            .then(|| delegate::cycle(&d.name, &self.sites[site].name, &info.ancestors))
            .flatten()
    }

    /// The chain of parents this broker publishes as a site
    /// ([`delegate::ancestors`]): empty without a parent; its parent and
    /// what that parent last published otherwise.
    pub fn ancestors(&self) -> Vec<String> {
        let d = &self.delegating;
        let parent = d.neighbours.iter().find(|(_, r)| **r == Relation::Parent);
        match parent {
            Some((&p, _)) => delegate::ancestors(&d.name, &self.sites[p].name, &self.infos[p].ancestors),
            None => Vec::new(),
        }
    }

    /// Counts again, in the information just taken of `site`, the jobs on
    /// their way to it: the site may have answered before they reached it,
    /// and a burst must not pile onto a site because its answer came first.
    fn rebook(&mut self, site: usize) {
        if self.sending.is_empty() {
            return;
        }
        let mut on_way: Vec<(u64, u32, Duration, Time)> = self
            .sending
            .values()
            .filter(|a| !a.reserving && a.site() == site)
            .map(|a| (a.seq, a.cpus, booked_wall(&a.candidates[a.next].prediction), a.decided))
            .collect();
        on_way.sort_unstable_by_key(|w| w.0);
        for (_, cpus, wall, decided) in on_way {
            crate::info::book(&mut self.infos[site], cpus, wall, decided);
        }
    }

    /// Site `site`'s information brought up to date in place by `fetch`
    /// (a driver that can, the simulator, saves a copy), asked at `taken`;
    /// `fetch` says whether it succeeded.
    pub fn refresh(&mut self, site: usize, taken: Time, fetch: impl FnOnce(&mut ResourceInfo) -> bool) {
        let s = &mut self.sites[site];
        s.asked = false;
        if fetch(&mut self.infos[site]) {
            s.taken = Some(taken);
            s.answer = Some(Ok(()));
            self.rebook(site);
        }
    }

    /// The information a decision reads: every site known, in site order
    /// (without a copy when all are), and the sites that cannot be read.
    fn at_hand(&self) -> AtHand<'_> {
        if self.sites.iter().all(SiteSlot::usable) {
            return AtHand {
                infos: self.infos[..].into(),
                site_of: self.all[..].into(),
                failed: Vec::new(),
            };
        }
        let (mut infos, mut site_of, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for (k, s) in self.sites.iter().enumerate() {
            match &s.answer {
                Some(Ok(_)) if s.usable() => {
                    infos.push(self.infos[k].clone());
                    site_of.push(k);
                }
                // Answering, but left out as one that does not answer is.
                Some(Ok(_)) => failed.push((
                    s.name.clone(),
                    SiteError::Unavailable(format!("{}: its health is critical", s.name)),
                )),
                Some(Err(e)) => failed.push((s.name.clone(), SiteError::Unavailable(e.to_string()))),
                None => failed.push((s.name.clone(), SiteError::Unavailable("no information yet".into()))),
            }
        }
        AtHand {
            infos: infos.into(),
            site_of: site_of.into(),
            failed,
        }
    }

    /// Decides up to `max` pending jobs at `now`, the owners in turn, each
    /// against the information at hand and the jobs decided before it,
    /// and sends each to its best site ([`Effect::Send`]). Returns how
    /// many were decided.
    pub fn decide(&mut self, now: Time, max: usize) -> usize {
        if !self.waiting.is_empty() {
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
                .into_iter()
                .partition(|(t, _)| *t <= now);
            self.waiting = later;
            for (_, id) in due.into_iter().rev() {
                if let Some(owner) = self.jobs.get(&id).map(|r| r.view.owner.clone()) {
                    self.enqueue(&owner, id, true);
                }
            }
        }
        let mut n = 0;
        while n < max {
            let Some((owner, mut q)) = self.queues.pop_front() else {
                break;
            };
            let id = q.pop_front();
            if !q.is_empty() {
                self.queues.push_back((owner, q));
            }
            let Some(id) = id else { continue };
            // Held, cancelled or already on its way since it was queued.
            let ready = self
                .jobs
                .get(&id)
                .is_some_and(|r| r.view.state() == BrokerState::Accepted);
            if ready && !self.in_flight(&id) {
                self.take_up(id, now);
                n += 1;
            }
        }
        n
    }

    /// Takes up job `id` at `now`: one inherited from before a restart is
    /// looked for first, one naming a reservation waits for it to be read,
    /// the rest are decided.
    fn take_up(&mut self, id: String, now: Time) {
        let Some(r) = self.jobs.get(&id) else { return };
        let owner = r.view.runs_as.clone().unwrap_or_else(|| r.view.owner.clone());
        let asked = match (&r.job.reservation, r.inherited) {
            (_, true) => Asked::Find,
            (Some(rid), false) => Asked::Resolve(rid.clone()),
            (None, false) => return self.decide_one(id, now),
        };
        self.outbox.push(match &asked {
            Asked::Resolve(rid) => Effect::Resolve {
                job: id.clone(),
                reservation: rid.clone(),
            },
            _ => Effect::Find {
                job: id.clone(),
                key: r.view.site_key(),
            },
        });
        self.looking.insert(id, Lookup { owner, asked });
    }

    /// What the sites answered at `now` when job `id` was looked for:
    /// the site that has it, its id there and what the site reports of it,
    /// none, or why they could not say (then it is looked for again after
    /// `retry_after`, never sent while unsure). One found is dispatched
    /// there and takes the site's report at once, as a change from its feed
    /// (a job that ended there around a restart is known ended whatever the
    /// feed holds back); one not found is decided as any other.
    pub fn found(&mut self, now: Time, id: &str, answer: Result<Option<(usize, String, Report)>, String>) {
        let Some(look) = self.looking.remove(id) else { return };
        if look.asked != Asked::Find {
            self.looking.insert(id.to_string(), look);
            return;
        }
        let wanted = self.waits_here(id);
        match answer {
            Err(why) => {
                tracing::warn!("not dispatching {id} yet: looking for it at the sites: {why}");
                if wanted {
                    self.waiting.push((now + self.params.retry_after, id.to_string()));
                }
            }
            Ok(None) => {
                if let Some(r) = self.jobs.get_mut(id) {
                    r.inherited = false;
                }
                if wanted {
                    self.enqueue(&self.jobs[id].view.owner.clone(), id.to_string(), true);
                }
            }
            Ok(Some((site, site_job, report))) => {
                if let Some(r) = self.jobs.get_mut(id) {
                    r.inherited = false;
                }
                if !wanted {
                    self.outbox.push(Effect::Withdraw {
                        site,
                        site_job,
                        owner: look.owner,
                    });
                    return;
                }
                let name = self.sites[site].name.clone();
                let detail = format!("to {name} (found there after a restart)");
                let found = Change::Dispatch {
                    site: name,
                    site_job: site_job.clone(),
                    tts: None,
                    ttd: None,
                };
                self.landed(id, site, site_job.clone(), (found, now, detail));
                self.sites[site].changed = true;
                self.reported(now, site, &site_job, report);
            }
        }
    }

    /// The reservation job `id` names, as the driver read it at `now`
    /// (`Err`: it could not be read; the job is taken up again after
    /// `retry_after`). A job that may claim it ([`claimable`]) is sent
    /// into it at its site; one that may not fails with the reason.
    pub fn resolved(&mut self, now: Time, id: &str, answer: Result<Option<Reserved>, String>) {
        let Some(look) = self.looking.remove(id) else { return };
        let Asked::Resolve(rid) = &look.asked else {
            self.looking.insert(id.to_string(), look);
            return;
        };
        if !self.waits_here(id) {
            return;
        }
        let found = match answer {
            Ok(found) => found,
            Err(why) => {
                tracing::warn!("not dispatching {id} yet: reading reservation {rid}: {why}");
                self.waiting.push((now + self.params.retry_after, id.to_string()));
                return;
            }
        };
        let view = &self.jobs[id].view;
        let terms = view.claim_terms.unwrap_or_default();
        let verdict = claimable(&view.owner, rid, found.as_ref(), now, terms.explicit_commit).and_then(|()| {
            let r = found.as_ref().ok_or_else(|| format!("no reservation {rid}"))?;
            match self.site_position(&r.site) {
                Some(k) => Ok((k, r.site_reservation, r.start, r.workflow)),
                None => Err(format!(
                    "it cannot run in reservation {rid}: its site {} is not one of this broker's",
                    r.site
                )),
            }
        });
        match verdict {
            Ok((site, site_reservation, start, workflow)) => {
                // A user's own reservation outlives the job; a task's ends
                // with it, and so does one a broker above asked to end so.
                let claim = Claim {
                    reservation: site_reservation,
                    release_with_job: workflow || terms.release_with_job,
                    explicit_commit: terms.explicit_commit,
                };
                self.outbox.push(Effect::Send {
                    job: id.to_string(),
                    site,
                    wall: None,
                    claim: Some(claim),
                    delegation: None,
                });
                let asked = Asked::Claim {
                    reservation: rid.clone(),
                    start,
                    site,
                    decided: now,
                };
                self.looking.insert(
                    id.to_string(),
                    Lookup {
                        owner: look.owner,
                        asked,
                    },
                );
            }
            Err(why) => {
                let _ = self.change(id, Change::Fail(why.clone()), now, Some(why));
            }
        }
    }

    /// What site `site` answered at `now` when sent job `id` into a
    /// reservation: one taken is dispatched; one the site could not be
    /// asked about waits for another try; one it refused fails, since no
    /// other site holds its reservation.
    fn claimed(&mut self, now: Time, id: &str, look: Lookup, answer: Result<String, SiteError>) {
        let Asked::Claim {
            reservation,
            start,
            site,
            decided,
        } = look.asked
        else {
            return;
        };
        let wanted = self.waits_here(id);
        match answer {
            Ok(site_job) if !wanted => {
                self.outbox.push(Effect::Withdraw {
                    site,
                    site_job,
                    owner: look.owner,
                });
            }
            Ok(site_job) => {
                let name = self.sites[site].name.clone();
                let detail = format!("to {name}, in reservation {reservation}");
                let sent = Change::Dispatch {
                    site: name,
                    site_job: site_job.clone(),
                    tts: Some((start - decided).0.max(0)),
                    ttd: None,
                };
                self.landed(id, site, site_job, (sent, decided, detail));
            }
            Err(SiteError::Unavailable(why)) if wanted => {
                tracing::warn!("dispatching {id} into {reservation}: {why}");
                self.waiting.push((now + self.params.retry_after, id.to_string()));
            }
            Err(_) if !wanted => {}
            Err(e) => {
                let why = format!("the site refused the job: {e}");
                let _ = self.change(id, Change::Fail(why.clone()), now, Some(why));
            }
        }
    }

    /// Whether job `id` is held here and still waits to be dispatched
    /// (not held, cancelled or failed meanwhile).
    fn waits_here(&self, id: &str) -> bool {
        self.jobs.get(id).is_some_and(|r| match r.view.state() {
            BrokerState::Accepted => true,
            BrokerState::Moving => matches!(self.moves.get(id), Some(Move::Resending { .. })),
            _ => false,
        })
    }

    /// Decides job `id` at `now`: its candidates from the information at
    /// hand, the best sent for and counted there at once.
    fn decide_one(&mut self, id: String, now: Time) {
        let Some(r) = self.jobs.get(&id) else { return };
        if let Err(e) = validate_at(&r.job, now) {
            let why = SubmitError::Invalid(e).to_string();
            let _ = self.change(&id, Change::Fail(why.clone()), now, Some(why));
            return;
        }
        let AtHand { infos, site_of, failed } = self.at_hand();
        let ranking = assess(&r.job, &r.prefs, &infos, now, &STANDARD_PREDICTOR);
        let site_of = site_of.into_owned();
        let mut candidates = ranking.ranked;
        let mut failed = failed;
        // Neighbouring brokers are candidates only for a job delegated.
        let mut onward = None;
        let mut asked = 0;
        if !self.delegating.neighbours.is_empty() {
            let d = &self.delegating;
            let is_neighbour = |c: &Ranked| d.neighbours.contains_key(&site_of[c.index]);
            // Reservations and deadlines stay with the own sites.
            let plain =
                r.job.deadline.is_none() && !(self.params.reserve_top_k > 0 && r.prefs.use_reservations == Some(true));
            let local_wait = candidates
                .iter()
                .filter(|c| !is_neighbour(c))
                .map(|c| c.prediction.tts())
                .min();
            let hop = Delegation::onward(r.view.delegated.as_ref(), &d.name, d.ttl)
                .filter(|_| plain && delegate::should_delegate(local_wait, d.threshold));
            let (neighbours, mut own): (Vec<Ranked>, Vec<Ranked>) = candidates.into_iter().partition(is_neighbour);
            candidates = match hop {
                Some(hop) => {
                    let targets: Vec<Target<'_>> = neighbours
                        .iter()
                        .map(|c| Target {
                            name: &self.sites[site_of[c.index]].name,
                            relation: d.neighbours[&site_of[c.index]],
                            free: infos[c.index].free_slots,
                        })
                        .collect();
                    let ask = delegate::order(&targets, &hop.path);
                    asked = ask.len();
                    own.sort_by_key(|c| (c.score, c.index));
                    onward = Some(hop);
                    ask.into_iter().map(|i| neighbours[i].clone()).chain(own).collect()
                }
                None => own,
            };
        }
        let ordered = onward.is_some();
        let deadline = r.job.deadline.filter(|_| self.params.reserve_deadlines);
        if let Some(d) = deadline {
            // Sites where it would not end in time are no candidates.
            candidates.retain(|c| match slot_ends_by(&c.prediction, now, d) {
                Ok(()) => true,
                Err(reason) => {
                    let site = self.sites[site_of[c.index]].name.clone();
                    failed.push((site.clone(), SiteError::Refused { site, reason }));
                    false
                }
            });
        }
        if let (Some(d), true) = (deadline, candidates.is_empty()) {
            if !failed.iter().any(|(_, e)| e.is_unavailable()) {
                let why = late_everywhere(d, &failed);
                let _ = self.change(&id, Change::Fail(why.clone()), now, Some(why));
                return;
            }
        }
        // A job with a deadline reserves its slot where the best candidate
        // takes reservations; elsewhere it is sent as any other job.
        let slot = deadline.is_some()
            && candidates
                .iter()
                .min_by_key(|c| (c.score, c.index))
                .is_some_and(|c| infos[c.index].reservations);
        let deadline = deadline.filter(|_| slot);
        let reserving = slot || (self.params.reserve_top_k > 0 && r.prefs.use_reservations == Some(true));
        let holds: Vec<(usize, Request)> = match reserving && !slot {
            true => self.holds(&r.job, &candidates, &infos, &site_of, now),
            false => Vec::new(),
        };
        drop(infos);
        // Most jobs go to the best: the rest are put in order only when it
        // refuses. Ties go to the site listed first.
        let best = match ordered {
            true => (!candidates.is_empty()).then_some(0),
            false => (0..candidates.len()).min_by_key(|&k| (candidates[k].score, candidates[k].index)),
        };
        let Some(best) = best else {
            let e = SubmitError::NoSite {
                excluded: self.by_name(ranking.excluded),
                failed,
            };
            self.undecided(id, e, now);
            return;
        };
        candidates.swap(0, best);
        if reserving {
            candidates.sort_by_key(|c| (c.score, c.index));
        }
        let holds = match slot {
            true => vec![(
                site_of[candidates[0].index],
                slot_request(&r.job, &candidates[0].prediction, now, now),
            )],
            false => holds,
        };
        let first = site_of[candidates[0].index];
        let cpus = r.job.cpus.unwrap_or(1);
        let n = candidates.len();
        let a = Attempt {
            owner: r.view.runs_as.clone().unwrap_or_else(|| r.view.owner.clone()),
            candidates,
            site_of,
            next: 0,
            first,
            excluded: ranking.excluded,
            failed,
            decided: now,
            seq: self.decisions,
            cpus,
            reserving,
            held: if reserving { vec![None; n] } else { Vec::new() },
            holding: holds.len(),
            deadline,
            trials: slot_attempts(self.sites.len()),
            refused: Vec::new(),
            onward,
            neighbours: asked,
        };
        self.decisions += 1;
        if !reserving {
            crate::info::book(
                &mut self.infos[first],
                cpus,
                booked_wall(&a.candidates[0].prediction),
                now,
            );
        }
        for (site, request) in holds {
            self.outbox.push(Effect::Hold {
                job: id.clone(),
                site,
                owner: a.owner.clone(),
                request,
                until: now + crate::submit::HOLD_FOR,
            });
        }
        if a.holding == 0 {
            self.outbox.push(a.send(&id));
        }
        // Otherwise sent once every hold is answered, to the best as it
        // then stands.
        self.sending.insert(id, a);
    }

    /// The holds a job that reserves asks for: one on each of its best
    /// `reserve_top_k` candidates (by score, ties to the site listed
    /// first) whose site takes reservations, as (site, request).
    fn holds(
        &self,
        job: &Job,
        ranked: &[Ranked],
        infos: &[ResourceInfo],
        site_of: &[usize],
        now: Time,
    ) -> Vec<(usize, Request)> {
        let mut best: Vec<&Ranked> = ranked.iter().collect();
        best.sort_by_key(|c| (c.score, c.index));
        best.into_iter()
            .take(self.params.reserve_top_k)
            .filter(|c| infos[c.index].reservations)
            .map(|c| {
                let req = hold_request(job, &c.prediction, now, self.params.reservation_window);
                (site_of[c.index], req)
            })
            .collect()
    }

    /// What site `site` answered when asked to hold a reservation for job
    /// `id`: a grant re-predicts the job there from the reservation's
    /// start. Once every hold is answered the job is sent to the best
    /// candidate as it then stands, into its reservation when it holds
    /// one; a job held or cancelled meanwhile gives every hold back.
    pub fn held(&mut self, now: Time, id: &str, site: usize, answer: Result<Reply, SiteError>) {
        let wanted = self.waits_here(id);
        let Some(a) = self.sending.get_mut(id) else {
            return;
        };
        let Some(i) = (0..a.candidates.len()).find(|&i| a.site_of[a.candidates[i].index] == site) else {
            return;
        };
        if a.holding == 0 || a.held[i].is_some() {
            return;
        }
        if a.deadline.is_some() {
            self.slot_answered(now, id, i, answer);
            return;
        }
        a.holding -= 1;
        if let Ok(Reply::Granted { id: rid, start }) = answer {
            a.held[i] = Some(rid);
            if let Some(r) = self.jobs.get(id) {
                let c = &mut a.candidates[i];
                c.prediction = STANDARD_PREDICTOR.predict(&r.job, &r.prefs, &self.infos[site], Some(start), a.decided);
                c.score = selector_for(r.prefs.objective()).score(&c.prediction, &self.infos[site]);
            }
        }
        if a.holding > 0 {
            return;
        }
        if !wanted {
            let a = self.sending.remove(id).expect("looked up above");
            a.release(None, &mut self.outbox);
            return;
        }
        let site_of = a.site_of.clone();
        let mut both: Vec<(Ranked, Option<ReservationId>)> = std::mem::take(&mut a.candidates)
            .into_iter()
            .zip(std::mem::take(&mut a.held))
            .collect();
        both.sort_by_key(|(c, _)| (c.score, site_of[c.index]));
        (a.candidates, a.held) = both.into_iter().unzip();
        a.next = 0;
        let send = a.send(id);
        self.outbox.push(send);
    }

    /// What a site answered at `now` when asked to reserve the earliest
    /// slot of job `id`, which has a deadline, for candidate `i`
    /// ([AB-avail]'s Algorithm 2). A grant sends the job into it. A
    /// refusal is a violation (the slot the broker read is gone,
    /// [`BrokerCore::refused_slots`]): the site's next possible start
    /// becomes its candidate's, the site is asked for its information
    /// again before the next decision (the refusal's options), and the
    /// earliest slot that still ends by the deadline is reserved next;
    /// after [`slot_attempts`], or with no candidate left, the job fails
    /// with every site's reason.
    fn slot_answered(&mut self, now: Time, id: &str, i: usize, answer: Result<Reply, SiteError>) {
        let wanted = self.waits_here(id);
        let Some(mut a) = self.sending.remove(id) else { return };
        let Some(deadline) = a.deadline else { return };
        a.holding = 0;
        a.trials = a.trials.saturating_sub(1);
        let site = a.site_of[a.candidates[i].index];
        let name = self.sites[site].name.clone();
        let refused = |reason: String| SiteError::Refused {
            site: name.clone(),
            reason,
        };
        match answer {
            Ok(Reply::Granted { id: rid, start }) => {
                a.held[i] = Some(rid);
                if !wanted {
                    a.release(None, &mut self.outbox);
                    return;
                }
                if let Some(r) = self.jobs.get(id) {
                    let c = &mut a.candidates[i];
                    c.prediction =
                        STANDARD_PREDICTOR.predict(&r.job, &r.prefs, &self.infos[site], Some(start), a.decided);
                }
                a.next = i;
                self.outbox.push(a.send(id));
                self.sending.insert(id.to_string(), a);
                return;
            }
            Ok(Reply::Rejected { next_start }) => {
                self.refused_slots += 1;
                a.refused.push(site);
                self.sites[site].changed = true;
                let again = next_start.and_then(|t| {
                    let r = self.jobs.get(id)?;
                    let p = STANDARD_PREDICTOR.predict(&r.job, &r.prefs, &self.infos[site], Some(t), a.decided);
                    Some(p).filter(|p| slot_ends_by(p, a.decided, deadline).is_ok())
                });
                match (again, self.jobs.get(id)) {
                    (Some(p), Some(r)) => {
                        let c = &mut a.candidates[i];
                        c.prediction = p;
                        c.score = selector_for(r.prefs.objective()).score(&p, &self.infos[site]);
                    }
                    _ => {
                        a.failed.push((
                            name.clone(),
                            refused("its slot was gone, and no later one ends in time".into()),
                        ));
                        a.candidates.remove(i);
                        a.held.remove(i);
                    }
                }
            }
            Ok(Reply::Never { reason }) => {
                a.failed.push((name.clone(), refused(reason.to_string())));
                a.candidates.remove(i);
                a.held.remove(i);
            }
            Err(e) => {
                a.failed.push((name.clone(), e));
                a.candidates.remove(i);
                a.held.remove(i);
            }
        }
        if !wanted {
            return;
        }
        if a.trials > 0 && !a.candidates.is_empty() {
            a.candidates.sort_by_key(|c| (c.score, c.index));
            a.next = 0;
            a.holding = 1;
            let at = a.site();
            if let Some(r) = self.jobs.get(id) {
                let request = slot_request(&r.job, &a.candidates[0].prediction, a.decided, now);
                self.outbox.push(Effect::Hold {
                    job: id.to_string(),
                    site: at,
                    owner: a.owner.clone(),
                    request,
                    until: now + crate::submit::HOLD_FOR,
                });
            }
            self.sending.insert(id.to_string(), a);
            return;
        }
        if a.failed.iter().any(|(_, e)| e.is_unavailable()) {
            let e = SubmitError::NoSite {
                excluded: self.by_name(a.excluded),
                failed: a.failed,
            };
            self.undecided(id.to_string(), e, now);
            return;
        }
        let n = slot_attempts(self.sites.len());
        for c in &a.candidates {
            let at = a.site_of[c.index];
            let why = match a.refused.contains(&at) {
                true => format!("its slot was gone, and no attempt was left for the next ({n} made)"),
                false => format!("not asked: {n} attempts were made first"),
            };
            let site = self.sites[at].name.clone();
            a.failed.push((site.clone(), SiteError::Refused { site, reason: why }));
        }
        let why = late_everywhere(deadline, &a.failed);
        let _ = self.change(id, Change::Fail(why.clone()), now, Some(why));
    }

    /// Job `id`, which no site took: kept for another try when a site that
    /// did not answer may be the one able to run it, else failed.
    fn undecided(&mut self, id: String, e: SubmitError, now: Time) {
        if let Some(Move::Resending { from }) = self.moves.remove(&id) {
            // Let go where it waited and taken nowhere since.
            let why = format!("moved off {} and then taken by no site: {e}", self.sites[from].name);
            let _ = self.change(&id, Change::Fail(why.clone()), now, Some(why));
            return;
        }
        if e.worth_retrying() {
            if self
                .jobs
                .get(&id)
                .is_some_and(|r| r.view.state() == BrokerState::Accepted)
            {
                self.waiting.push((now + self.params.retry_after, id));
            }
            return;
        }
        let why = e.to_string();
        let _ = self.change(&id, Change::Fail(why.clone()), now, Some(why));
    }

    /// What site `site` answered at `now` when sent job `id`: its id for
    /// the job, or why it did not take it (then the next candidate is sent
    /// for).
    pub fn sent(&mut self, now: Time, id: &str, site: usize, answer: Result<String, SiteError>) {
        if let Some(look) = self.looking.remove(id) {
            match look.asked {
                Asked::Claim { site: at, .. } if at == site => self.claimed(now, id, look, answer),
                // Not the answer awaited: keep waiting for that one.
                _ => {
                    self.looking.insert(id.to_string(), look);
                }
            }
            return;
        }
        let Some(mut a) = self.sending.remove(id) else { return };
        if a.holding > 0 || a.site() != site {
            // Not the answer awaited: keep waiting for that one.
            self.sending.insert(id.to_string(), a);
            return;
        }
        match answer {
            Ok(site_job) => {
                let prediction = a.candidates[a.next].prediction;
                // Every hold but the one the job claimed goes back.
                a.release(Some(a.next), &mut self.outbox);
                if a.deadline.is_some() {
                    // Counted where it went, as a gateway adds the job to
                    // its copy of the site's free slots.
                    crate::info::book(&mut self.infos[site], a.cpus, booked_wall(&prediction), now);
                } else if a.reserving {
                    // Nothing was counted there: asked again.
                    self.sites[site].changed = true;
                } else if a.next > 0 {
                    // Counted where it did not go: asked again; counted
                    // where it went.
                    self.sites[a.first].changed = true;
                    let cpus = a.cpus;
                    crate::info::book(&mut self.infos[site], cpus, booked_wall(&prediction), now);
                }
                let wanted = self.waits_here(id);
                if !wanted {
                    // Held or cancelled on its way: its owner's word stands.
                    self.outbox.push(Effect::Withdraw {
                        site,
                        site_job,
                        owner: a.owner,
                    });
                    return;
                }
                let name = self.sites[site].name.clone();
                let (sent, detail) = match self.moves.remove(id) {
                    Some(Move::Resending { from }) => {
                        self.moved += u64::from(from != site);
                        self.sites[from].changed = true;
                        let detail = match from == site {
                            true => format!("sent again to {name}: no site would deliver it sooner"),
                            false => format!(
                                "moved from {} to {name}: predicted to deliver sooner",
                                self.sites[from].name
                            ),
                        };
                        (Change::EndMove(Some((name, site_job.clone()))), detail)
                    }
                    _ => {
                        let delegated = a.delegation();
                        let detail = match (a.held.get(a.next).copied().flatten(), delegated) {
                            (Some(r), _) => format!("to {name}, in reservation {}", r.0),
                            (None, Some(d)) => format!(
                                "delegated to {name}, a neighbouring broker (path {} → {name})",
                                d.path.join(" → ")
                            ),
                            (None, None) => format!("to {name}"),
                        };
                        let sent = Change::Dispatch {
                            site: name,
                            site_job: site_job.clone(),
                            tts: Some(prediction.tts().0),
                            ttd: Some(prediction.ttd().0),
                        };
                        (sent, detail)
                    }
                };
                self.landed(id, site, site_job.clone(), (sent, a.decided, detail));
                self.outbox.push(Effect::Placed {
                    job: id.to_string(),
                    site,
                    site_job,
                    prediction,
                    decided: a.decided,
                });
            }
            Err(e) => {
                a.failed.push((self.sites[site].name.clone(), e));
                a.next += 1;
                if a.next == 1 && !a.reserving && a.onward.is_none() {
                    a.candidates[1..].sort_by_key(|r| (r.score, r.index));
                }
                if a.next < a.candidates.len() && self.waits_here(id) {
                    self.outbox.push(a.send(id));
                    self.sending.insert(id.to_string(), a);
                    return;
                }
                a.release(None, &mut self.outbox);
                self.sites[a.first].changed = true;
                let e = SubmitError::NoSite {
                    excluded: self.by_name(a.excluded),
                    failed: a.failed,
                };
                self.undecided(id.to_string(), e, now);
            }
        }
    }

    /// What site `site` reports at `now` of its job `site_job`; whether
    /// the job is one the core holds.
    pub fn reported(&mut self, now: Time, site: usize, site_job: &str, report: Report) -> bool {
        let Some(id) = self.at_site.get(site).and_then(|m| m.get(site_job)).cloned() else {
            return false;
        };
        // A start learnt for the first time is judged against the
        // prediction the job was sent with.
        if let Some(r) = self.jobs.get(&id).filter(|r| r.view.started.is_none()) {
            if let (Some(predicted), Some(started)) = (r.predicted_start, report.started) {
                self.violations += u64::from(crate::predict::violated(predicted, started));
            }
        }
        let detail = report.reason.clone();
        let change = Change::Report {
            phase: report.phase,
            started: report.started,
            ended: report.ended,
            exit_code: report.exit_code,
            reason: report.reason,
        };
        let _ = self.change(&id, change, now, detail);
        true
    }
}

/// Whether a job predicted as `p` when decided at `decided` ends by
/// `deadline` when it starts at its predicted start and runs its whole
/// wall time (what a reservation for it would hold), or why not.
fn slot_ends_by(p: &Prediction, decided: Time, deadline: Time) -> Result<(), String> {
    let end = decided + p.tts() + booked_wall(p);
    match end <= deadline {
        true => Ok(()),
        false => Err(format!("it would end at {end}, after its deadline ({deadline})")),
    }
}

/// How many slots a job with a deadline may try to reserve over `sites`
/// sites: one per site, as [AB-avail]'s Algorithm 2, and one more, so that
/// the next start the last refusal offers is not thrown away (with one
/// site, the paper's count would never take the start its site offers).
fn slot_attempts(sites: usize) -> usize {
    sites + 1
}

/// Why a job with deadline `deadline` runs nowhere: each site's reason.
fn late_everywhere(deadline: Time, failed: &[(String, SiteError)]) -> String {
    let each: Vec<String> = failed
        .iter()
        .map(|(site, e)| match e {
            SiteError::Refused { reason, .. } => format!("{site}: {reason}"),
            e => format!("{site}: {e}"),
        })
        .collect();
    format!("no site can end it by its deadline ({deadline}): {}", each.join("; "))
}

/// The reservation of the slot a job predicted as `p` when decided at
/// `decided` takes at `now`: its processors for its wall time from
/// exactly its predicted start (not before `now`), as [AB-avail]'s
/// gateway asks (a slot that has moved is refused, not taken later).
fn slot_request(job: &Job, p: &Prediction, decided: Time, now: Time) -> Request {
    let start = (decided + p.tts()).max(now);
    Request {
        amount: job.cpus.unwrap_or(1),
        duration: booked_wall(p),
        earliest: start,
        latest: start,
        flexible: false,
    }
}

/// Gives `view` out to be stored with `line`, when the broker stores
/// (`on`, [`BrokerParams::persist`]).
fn persist(on: bool, outbox: &mut Vec<Effect>, view: &BrokerJob, line: Option<HistoryEntry>) {
    if on {
        outbox.push(Effect::Persist {
            job: Box::new(view.clone()),
            line,
        });
    }
}

/// What one decision reads: the information of the sites known, the
/// site of each entry, and the sites that cannot be read, with why.
struct AtHand<'a> {
    infos: Cow<'a, [ResourceInfo]>,
    site_of: Cow<'a, [usize]>,
    failed: Vec<(String, SiteError)>,
}

/// A site's report of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Its phase there.
    pub phase: JobPhase,
    /// When it started.
    pub started: Option<Time>,
    /// When it ended.
    pub ended: Option<Time>,
    /// Its exit code.
    pub exit_code: Option<i32>,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
}

impl Report {
    /// What a site's record of a job reports.
    pub fn of(j: &brokk_core::JobRecord) -> Report {
        Report {
            phase: j.state,
            started: j.started,
            ended: j.ended,
            exit_code: j.exit_code,
            reason: j.reason.clone(),
        }
    }
}
