//! The broker's jobs: their records, their states and every change of a
//! state, decided here and nowhere else.
//!
//! A job's state moves only through [`apply`], which says whether a change
//! may happen from where the job is (a running job cannot be held, an ended
//! one does not change again) and what it records; the service and the
//! simulator carry out what follows. The field is private so that no driver
//! can set a state past these rules.

use brokk_model::{JobPhase, Time};
use serde::{Deserialize, Serialize};

/// Where a job is at the broker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum BrokerState {
    /// Recorded; waiting to be dispatched.
    #[default]
    Accepted,
    /// Recorded and kept back by its owner (`brokk hold`) until released.
    Held,
    /// A workflow's task waiting for its parents, its reservation made.
    Planned,
    /// Part of a co-allocation whose reservations are being made.
    Reserving,
    /// Being moved from one site to another by queue adaptation.
    Moving,
    /// At a site, not yet running.
    Dispatched,
    /// Running at its site.
    Running,
    /// Done; see the exit code.
    Finished,
    /// Could not run or complete; see the reason.
    Failed,
    /// Cancelled by its owner.
    Cancelled,
}

impl BrokerState {
    /// Every state, in the order of a job's life.
    pub const ALL: [BrokerState; 10] = [
        BrokerState::Accepted,
        BrokerState::Held,
        BrokerState::Planned,
        BrokerState::Reserving,
        BrokerState::Moving,
        BrokerState::Dispatched,
        BrokerState::Running,
        BrokerState::Finished,
        BrokerState::Failed,
        BrokerState::Cancelled,
    ];

    /// The state's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerState::Accepted => "accepted",
            BrokerState::Held => "held",
            BrokerState::Planned => "planned",
            BrokerState::Reserving => "reserving",
            BrokerState::Moving => "moving",
            BrokerState::Dispatched => "dispatched",
            BrokerState::Running => "running",
            BrokerState::Finished => "finished",
            BrokerState::Failed => "failed",
            BrokerState::Cancelled => "cancelled",
        }
    }

    /// Whether the job will not change any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            BrokerState::Finished | BrokerState::Failed | BrokerState::Cancelled
        )
    }

    /// The broker state a site's job phase maps to.
    pub fn of_phase(p: JobPhase) -> BrokerState {
        match p {
            JobPhase::Accepted | JobPhase::StagingIn | JobPhase::Queued => BrokerState::Dispatched,
            JobPhase::Held => BrokerState::Held,
            JobPhase::Running | JobPhase::StagingOut => BrokerState::Running,
            JobPhase::Finished => BrokerState::Finished,
            JobPhase::Failed => BrokerState::Failed,
            JobPhase::Cancelled => BrokerState::Cancelled,
        }
    }
}

impl std::fmt::Display for BrokerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BrokerState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        BrokerState::ALL.into_iter().find(|b| b.as_str() == s).ok_or_else(|| {
            let names: Vec<&str> = BrokerState::ALL.iter().map(|b| b.as_str()).collect();
            format!("unknown state `{s}`; one of {}", names.join(", "))
        })
    }
}

/// One entry of a broker job's state history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEntry {
    /// When.
    pub at: Time,
    /// The state entered.
    pub state: BrokerState,
    /// Details (the site chosen, a failure's reason).
    pub detail: Option<String>,
}

/// A job as the broker service reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrokerJob {
    /// Id at the broker.
    pub id: String,
    /// Its owner.
    pub owner: String,
    /// The language it was written in.
    pub format: String,
    /// Where it is: changed by [`apply`] alone.
    state: BrokerState,
    /// The site it was sent to.
    pub site: Option<String>,
    /// Its id there.
    pub site_job: Option<String>,
    /// Predicted seconds from submission to start (TTS).
    pub predicted_tts: Option<i64>,
    /// Predicted seconds from submission to delivery (TTD).
    pub predicted_ttd: Option<i64>,
    /// When it was accepted.
    pub submitted: Time,
    /// When it started on the site.
    pub started: Option<Time>,
    /// When it ended.
    pub ended: Option<Time>,
    /// Exit code.
    pub exit_code: Option<i32>,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// Translation warnings.
    pub warnings: Vec<String>,
    /// The job's name, if it has one.
    #[serde(default)]
    pub name: Option<String>,
    /// The job's standard output file.
    pub stdout: Option<String>,
    /// The job's standard error file.
    #[serde(default)]
    pub stderr: Option<String>,
    /// The other files it leaves for its owner (`brokk get` fetches them all).
    #[serde(default)]
    pub outputs: Vec<String>,
    /// The wall time it asked for, seconds.
    #[serde(default)]
    pub wall_time: Option<i64>,
    /// The user the job runs for at the sites, when its owner is a broker
    /// above this one that sent it on that user's behalf.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_as: Option<String>,
    /// What it is part of: a workflow's task or a co-allocation's part.
    #[serde(default, skip_serializing_if = "Member::is_alone")]
    pub member: Member,
    /// How it came when a neighbouring broker delegated it here: the
    /// brokers it passed through and the hops left ([`crate::delegate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated: Option<crate::delegate::Delegation>,
    /// How it claims the reservation it names when a broker above sent it
    /// through the site API with its own terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_terms: Option<ClaimTerms>,
    /// How many times its owner requeued it: each run goes to the sites
    /// under a key of its own ([`BrokerJob::site_key`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeued: u32,
    /// State history.
    pub history: Vec<HistoryEntry>,
    /// The outputs of its last run the broker keeps, so that they can be
    /// fetched while its site is down or after the site cleaned up (shown
    /// with one job, not in lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<KeptOutput>,
}

/// One output of an ended job as the broker kept it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeptOutput {
    /// Its name in the job's directory.
    pub name: String,
    /// Its size, when kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Why it was not kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// How a job sent by a broker above claims its reservation: the headers
/// the site API took it with, kept until the job reaches the site holding
/// the reservation, since a broker above may commit, or end, the
/// reservation itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClaimTerms {
    /// `Reservation-Commit: explicit`: the job may claim a reservation
    /// still held, and leaves it held until the broker above commits it.
    pub explicit_commit: bool,
    /// `Reservation-Release: with-job`: the reservation ends with the job.
    pub release_with_job: bool,
}

/// What a job is part of beyond its owner. A field of the job, so that no
/// rule reads it back out of the job's id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Member {
    /// A job of its own.
    #[default]
    Alone,
    /// A run of a workflow's task.
    Task {
        /// The workflow's id.
        workflow: String,
        /// The task's position in the workflow.
        task: usize,
        /// Runs of the task before this one.
        attempt: u32,
    },
    /// A part of a co-allocation.
    Part {
        /// The co-allocation's id.
        coallocation: String,
        /// The part's position in it.
        index: usize,
    },
}

impl Member {
    /// Whether the job is part of nothing.
    pub fn is_alone(&self) -> bool {
        *self == Member::Alone
    }

    /// The workflow the job is a task of.
    pub fn workflow(&self) -> Option<&str> {
        match self {
            Member::Task { workflow, .. } => Some(workflow),
            _ => None,
        }
    }

    /// The co-allocation the job is a part of.
    pub fn coallocation(&self) -> Option<&str> {
        match self {
            Member::Part { coallocation, .. } => Some(coallocation),
            _ => None,
        }
    }

    /// The workflow or co-allocation, whichever the job belongs to.
    pub fn group(&self) -> Option<&str> {
        self.workflow().or_else(|| self.coallocation())
    }
}

impl BrokerJob {
    /// A new job `id` of `owner`'s, written in `format`, entering the broker
    /// at `now` as `entry` says.
    pub fn new(id: String, owner: String, format: String, entry: Entry, now: Time) -> BrokerJob {
        BrokerJob {
            id,
            owner,
            format,
            state: entry.state(),
            submitted: now,
            ..BrokerJob::default()
        }
    }

    /// A job in the state it was recorded in: what the core decided, read
    /// back (a database row, a broker's answer), never a new decision.
    pub fn restored(mut self, state: BrokerState) -> BrokerJob {
        self.state = state;
        self
    }

    /// Where it is.
    pub fn state(&self) -> BrokerState {
        self.state
    }

    /// Takes what the view shows of the job's description: its name, its
    /// streams, its output files and its wall time.
    pub fn describe(&mut self, job: &brokk_model::Job) {
        self.name = job.name.clone();
        self.stdout = job.stdout.clone();
        self.stderr = job.stderr.clone();
        self.outputs = job.output_files.iter().map(|f| f.name.clone()).collect();
        self.wall_time = job.wall_time.map(|d| d.0);
    }
}

/// How a job enters the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// To be dispatched.
    Accepted,
    /// Kept back by its owner until released.
    Held,
    /// A workflow's task, its reservation made, waiting for its parents.
    Planned,
    /// Part of a co-allocation whose reservations are being made.
    Reserving,
}

impl Entry {
    /// The state a job entering this way is in.
    pub fn state(self) -> BrokerState {
        match self {
            Entry::Accepted => BrokerState::Accepted,
            Entry::Held => BrokerState::Held,
            Entry::Planned => BrokerState::Planned,
            Entry::Reserving => BrokerState::Reserving,
        }
    }

    /// Held when its owner asked for it (`--hold`, `hold = true`), else accepted.
    pub fn submitted(hold: bool) -> Entry {
        if hold {
            Entry::Held
        } else {
            Entry::Accepted
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl BrokerJob {
    /// The key its current run goes to a site under (the site's
    /// idempotency key, which a restarted broker looks for): its id, then
    /// `ID.N` after its Nth requeue, so that a site holding its last run
    /// takes the next as a new job rather than answering the old one.
    pub fn site_key(&self) -> String {
        match self.requeued {
            0 => self.id.clone(),
            n => format!("{}.{n}", self.id),
        }
    }
}

/// What happens to a job: every change of its state is one of these.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Its owner keeps it back (`brokk hold`).
    Hold,
    /// Its owner lets it go (`brokk release`).
    Release,
    /// Its owner cancels it (cancelled at its site first, if it has one).
    Cancel,
    /// Its owner sends it again once it has ended (`brokk requeue`, as
    /// Slurm's `scontrol requeue`): the same id, decided afresh.
    Requeue,
    /// A site took it.
    Dispatch {
        /// The site's name.
        site: String,
        /// The site's id for it.
        site_job: String,
        /// Predicted seconds to its start, when predicted.
        tts: Option<i64>,
        /// Predicted seconds to its delivery, when predicted.
        ttd: Option<i64>,
    },
    /// It cannot run, for this reason.
    Fail(String),
    /// A workflow task's parents have ended: it may be dispatched.
    Ready,
    /// Queue adaptation may move it: cancelled at one site, submitted at
    /// another, so the first site's cancel is not its end.
    StartMove,
    /// Adaptation is over: it moved to this site and job, or it stays.
    EndMove(Option<(String, String)>),
    /// Its site reports it.
    Report {
        /// Its phase there.
        phase: JobPhase,
        /// When it started.
        started: Option<Time>,
        /// When it ended.
        ended: Option<Time>,
        /// Its exit code.
        exit_code: Option<i32>,
        /// Why it failed or was cancelled.
        reason: Option<String>,
    },
}

/// What a change did to the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Nothing: the job was already where the change leads, or the change
    /// is not the job's to take (a report about a job being moved).
    Unchanged,
    /// Fields changed, its state did not: to be stored without a history line.
    Updated,
    /// It entered a new state: to be stored with a history line.
    Entered(BrokerState),
}

/// A change that cannot happen from the job's state, with the reason in
/// words for its owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {id} is {state}: {why}")]
pub struct Refused {
    /// The job.
    pub id: String,
    /// Where it is.
    pub state: BrokerState,
    /// Why that rules the change out.
    pub why: &'static str,
}

/// Whether `change` may be made to `job` at `now`, and why not: the rules
/// of [`apply`], with nothing changed (what a driver answers for a job no
/// core holds).
pub fn check(job: &BrokerJob, change: Change, now: Time) -> Result<(), Refused> {
    apply(&mut job.clone(), change, now).map(|_| ())
}

/// Applies `change` to `job` at `now`: the one place a broker job's state
/// changes.
pub fn apply(job: &mut BrokerJob, change: Change, now: Time) -> Result<Applied, Refused> {
    use BrokerState as S;
    let from = job.state;
    let refuse = |why| {
        Err(Refused {
            id: job.id.clone(),
            state: from,
            why,
        })
    };
    let to = match change {
        Change::Hold => match from {
            S::Held => return Ok(Applied::Unchanged),
            S::Accepted => S::Held,
            S::Running => return refuse("a job that has started cannot be held; cancel it instead"),
            S::Dispatched => return refuse("its site holds it, when asked (`BrokerCore::hold`)"),
            _ => return refuse("only a job that waits can be held; cancel it instead"),
        },
        Change::Release => match from {
            S::Accepted => return Ok(Applied::Unchanged),
            S::Held if job.site.is_some() => return refuse("its site releases it, when asked (`BrokerCore::release`)"),
            S::Held => S::Accepted,
            _ => return refuse("only a held job can be released"),
        },
        Change::Cancel => {
            if from.is_terminal() {
                return Ok(Applied::Unchanged);
            }
            job.reason = Some("cancelled by its owner".into());
            job.ended = Some(now);
            S::Cancelled
        }
        Change::Requeue => match from {
            // A workflow's retries and a co-allocation's all-or-nothing
            // decide whether their members run again, never one alone.
            _ if !job.member.is_alone() => {
                return refuse("a workflow's task or a co-allocation's part runs again only with its whole")
            }
            S::Finished | S::Failed | S::Cancelled => {
                // What its last run was is in its history; the next is planned from nothing.
                job.site = None;
                job.site_job = None;
                job.predicted_tts = None;
                job.predicted_ttd = None;
                job.started = None;
                job.ended = None;
                job.exit_code = None;
                job.reason = None;
                job.wall_time = None;
                job.requeued += 1;
                S::Accepted
            }
            _ => return refuse("only an ended job can be requeued; it is still on its way"),
        },
        Change::Dispatch {
            site,
            site_job,
            tts,
            ttd,
        } => {
            // Held or cancelled meanwhile: its owner's word stands (the
            // service decides under the turn that holds and cancels wait for).
            if !matches!(from, S::Accepted | S::Reserving) {
                return refuse("only an accepted job can be dispatched");
            }
            job.site = Some(site);
            job.site_job = Some(site_job);
            job.predicted_tts = tts.or(job.predicted_tts);
            job.predicted_ttd = ttd.or(job.predicted_ttd);
            S::Dispatched
        }
        Change::Fail(reason) => {
            // Its first end stands (a cancel that came first, say).
            if from.is_terminal() {
                return Ok(Applied::Unchanged);
            }
            job.reason = Some(reason);
            job.ended = Some(now);
            S::Failed
        }
        Change::Ready => match from {
            S::Planned => S::Accepted,
            _ => return refuse("only a planned task waits for its parents"),
        },
        Change::StartMove => match from {
            S::Dispatched => S::Moving,
            _ => return refuse("only a job waiting at a site can be moved"),
        },
        Change::EndMove(to) => {
            if from != S::Moving {
                return refuse("it is not being moved");
            }
            if let Some((site, site_job)) = to {
                job.site = Some(site);
                job.site_job = Some(site_job);
                job.state = S::Dispatched;
                return Ok(Applied::Entered(S::Dispatched));
            }
            job.state = S::Dispatched;
            return Ok(Applied::Updated);
        }
        Change::Report {
            phase,
            started,
            ended,
            exit_code,
            reason,
        } => {
            // An ended job's record is final; a job being moved is the
            // adaptation's to record (the cancel at its old site is no end).
            if !matches!(from, S::Dispatched | S::Running) && !at_its_site(job) {
                return Ok(Applied::Unchanged);
            }
            let to = BrokerState::of_phase(phase);
            if to == from && started == job.started {
                return Ok(Applied::Unchanged);
            }
            job.started = started;
            job.ended = ended;
            job.exit_code = exit_code;
            job.reason = reason;
            if to == from {
                return Ok(Applied::Updated);
            }
            to
        }
    };
    job.state = to;
    Ok(Applied::Entered(to))
}

/// Whether `job` is held at its site (rather than kept back by the
/// broker): what its site reports of it is its state.
pub fn at_its_site(job: &BrokerJob) -> bool {
    job.state == BrokerState::Held && job.site.is_some()
}

/// Whether its owner's hold (`hold` true) or release of `job` is its
/// site's to carry out: a job that waits at a site is held there, where it
/// gives its slot back (as `scontrol uhold` does), and released there; a
/// workflow's task and a co-allocation's part wait in reservations made
/// for their whole, so they are not held alone.
pub fn hold_goes_to_site(job: &BrokerJob, hold: bool) -> Result<bool, Refused> {
    let goes = match hold {
        true => job.state == BrokerState::Dispatched && job.site.is_some(),
        false => at_its_site(job),
    };
    if goes && hold && !job.member.is_alone() {
        return Err(Refused {
            id: job.id.clone(),
            state: job.state,
            why: "a workflow's task or a co-allocation's part waits in a reservation made for its whole; it is not held alone",
        });
    }
    Ok(goes)
}

/// Whether a job in `state` counts toward its owner's limit of unfinished
/// jobs: every job that has not ended, but a held one (its owner keeps it
/// back; it takes nothing from anyone).
pub fn counts_toward_limit(state: BrokerState) -> bool {
    !state.is_terminal() && state != BrokerState::Held
}

/// Why a request for more jobs is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    /// One request describes more jobs than the broker takes at once.
    #[error("the request describes {n} jobs; this broker takes at most {per_request} at once")]
    PerRequest {
        /// Jobs described.
        n: u64,
        /// Jobs a request may describe.
        per_request: u64,
    },
    /// The owner would hold more unfinished jobs than allowed.
    #[error("you have {unfinished} unfinished jobs; this broker holds at most {limit} per user")]
    Unfinished {
        /// The owner's unfinished jobs now.
        unfinished: u64,
        /// What one user may hold.
        limit: u64,
    },
}

/// Whether `n` more jobs fit a user who has `unfinished` jobs that count
/// ([`counts_toward_limit`]), at most `per_request` per request and
/// `limit` in all.
pub fn within_limits(n: u64, per_request: u64, unfinished: u64, limit: u64) -> Result<(), OverLimit> {
    if n > per_request {
        return Err(OverLimit::PerRequest { n, per_request });
    }
    if unfinished.checked_add(n).is_none_or(|all| all > limit) {
        return Err(OverLimit::Unfinished { unfinished, limit });
    }
    Ok(())
}

/// Whether an adaptation round looks at a job ([ET-brokering] 3.3): one
/// waiting at a site whose owner asked for it; a running job stays where
/// it runs, and one being moved is the round's already.
pub fn adapts(state: BrokerState, prefs: &brokk_model::JobPreferences) -> bool {
    state == BrokerState::Dispatched && prefs.queue_adaptation == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(entry: Entry) -> BrokerJob {
        BrokerJob::new("j1".into(), "ann".into(), "json".into(), entry, Time(100))
    }

    fn dispatch() -> Change {
        Change::Dispatch {
            site: "alpha".into(),
            site_job: "7".into(),
            tts: Some(3),
            ttd: Some(60),
        }
    }

    fn report(phase: JobPhase, started: Option<i64>) -> Change {
        Change::Report {
            phase,
            started: started.map(Time),
            ended: None,
            exit_code: None,
            reason: None,
        }
    }

    #[test]
    fn a_job_enters_as_its_owner_asked() {
        assert_eq!(job(Entry::submitted(false)).state(), BrokerState::Accepted);
        assert_eq!(job(Entry::submitted(true)).state(), BrokerState::Held);
        assert_eq!(job(Entry::Planned).submitted, Time(100));
    }

    #[test]
    fn a_job_is_held_by_the_broker_before_it_reaches_a_site_and_by_its_site_after() {
        let mut j = job(Entry::Accepted);
        assert_eq!(
            apply(&mut j, Change::Hold, Time(101)),
            Ok(Applied::Entered(BrokerState::Held))
        );
        // Twice is once: the second asks for where the job is.
        assert_eq!(apply(&mut j, Change::Hold, Time(102)), Ok(Applied::Unchanged));
        // A held job is not dispatched.
        assert!(apply(&mut j, dispatch(), Time(103)).is_err());
        assert_eq!(
            apply(&mut j, Change::Release, Time(104)),
            Ok(Applied::Entered(BrokerState::Accepted))
        );
        apply(&mut j, dispatch(), Time(105)).unwrap();
        // At a site, its site holds it: the broker records what the site says.
        assert_eq!(hold_goes_to_site(&j, true), Ok(true));
        assert_eq!(hold_goes_to_site(&j, false), Ok(false));
        assert!(apply(&mut j, Change::Hold, Time(106)).is_err());
        assert_eq!(
            apply(&mut j, report(JobPhase::Held, None), Time(106)),
            Ok(Applied::Entered(BrokerState::Held))
        );
        assert!(at_its_site(&j) && !counts_toward_limit(j.state()));
        assert_eq!(hold_goes_to_site(&j, false), Ok(true));
        assert!(
            apply(&mut j, Change::Release, Time(107)).is_err(),
            "released by its site"
        );
        assert_eq!(
            apply(&mut j, report(JobPhase::Queued, None), Time(107)),
            Ok(Applied::Entered(BrokerState::Dispatched))
        );
        // Once it runs, nothing holds it.
        apply(&mut j, report(JobPhase::Running, Some(108)), Time(108)).unwrap();
        assert_eq!(hold_goes_to_site(&j, true), Ok(false));
        let e = apply(&mut j, Change::Hold, Time(109)).unwrap_err();
        assert_eq!(e.state, BrokerState::Running);
        assert!(e.to_string().contains("cancel it instead"), "{e}");
        // A co-allocation's part waits in a reservation made for all parts.
        let mut part = job(Entry::Reserving);
        part.member = Member::Part {
            coallocation: "c".into(),
            index: 0,
        };
        apply(&mut part, dispatch(), Time(110)).unwrap();
        assert!(hold_goes_to_site(&part, true).is_err());
    }

    #[test]
    fn a_dispatch_records_the_site_and_keeps_earlier_predictions_it_lacks() {
        let mut j = job(Entry::Accepted);
        apply(&mut j, dispatch(), Time(101)).unwrap();
        assert_eq!((j.site.as_deref(), j.site_job.as_deref()), (Some("alpha"), Some("7")));
        assert_eq!((j.predicted_tts, j.predicted_ttd), (Some(3), Some(60)));
        // A co-allocation's part is dispatched from `reserving`.
        let mut part = job(Entry::Reserving);
        let found = Change::Dispatch {
            site: "beta".into(),
            site_job: "9".into(),
            tts: None,
            ttd: None,
        };
        assert_eq!(
            apply(&mut part, found, Time(101)),
            Ok(Applied::Entered(BrokerState::Dispatched))
        );
        assert_eq!(part.predicted_tts, None);
    }

    #[test]
    fn cancel_ends_any_unended_job_once() {
        for entry in [Entry::Accepted, Entry::Held, Entry::Planned, Entry::Reserving] {
            let mut j = job(entry);
            assert_eq!(
                apply(&mut j, Change::Cancel, Time(150)),
                Ok(Applied::Entered(BrokerState::Cancelled))
            );
            assert_eq!(j.ended, Some(Time(150)));
            assert_eq!(apply(&mut j, Change::Cancel, Time(160)), Ok(Applied::Unchanged));
            assert_eq!(j.ended, Some(Time(150)), "the first end stands");
            // Nor does it fail or start after.
            assert_eq!(
                apply(&mut j, Change::Fail("late".into()), Time(170)),
                Ok(Applied::Unchanged)
            );
            assert_eq!(j.state(), BrokerState::Cancelled);
            assert_eq!(
                apply(&mut j, report(JobPhase::Running, Some(170)), Time(170)),
                Ok(Applied::Unchanged)
            );
        }
    }

    #[test]
    fn reports_follow_the_site_and_stop_at_the_end() {
        let mut j = job(Entry::Accepted);
        apply(&mut j, dispatch(), Time(101)).unwrap();
        assert_eq!(
            apply(&mut j, report(JobPhase::Queued, None), Time(102)),
            Ok(Applied::Unchanged)
        );
        assert_eq!(
            apply(&mut j, report(JobPhase::Running, Some(110)), Time(110)),
            Ok(Applied::Entered(BrokerState::Running))
        );
        // Staging out is still running; a new start time is stored without a history line.
        assert_eq!(
            apply(&mut j, report(JobPhase::StagingOut, Some(110)), Time(120)),
            Ok(Applied::Unchanged)
        );
        assert_eq!(
            apply(&mut j, report(JobPhase::Running, Some(111)), Time(120)),
            Ok(Applied::Updated)
        );
        let end = Change::Report {
            phase: JobPhase::Finished,
            started: Some(Time(111)),
            ended: Some(Time(130)),
            exit_code: Some(0),
            reason: None,
        };
        assert_eq!(
            apply(&mut j, end, Time(131)),
            Ok(Applied::Entered(BrokerState::Finished))
        );
        assert_eq!((j.ended, j.exit_code), (Some(Time(130)), Some(0)));
        assert_eq!(
            apply(&mut j, report(JobPhase::Cancelled, None), Time(140)),
            Ok(Applied::Unchanged)
        );
        assert_eq!(j.state(), BrokerState::Finished);
    }

    #[test]
    fn a_job_being_moved_ignores_its_old_sites_cancel() {
        let mut j = job(Entry::Accepted);
        apply(&mut j, dispatch(), Time(101)).unwrap();
        assert!(
            apply(&mut j, Change::EndMove(None), Time(102)).is_err(),
            "not being moved"
        );
        assert_eq!(
            apply(&mut j, Change::StartMove, Time(102)),
            Ok(Applied::Entered(BrokerState::Moving))
        );
        assert_eq!(
            apply(&mut j, report(JobPhase::Cancelled, None), Time(103)),
            Ok(Applied::Unchanged)
        );
        assert_eq!(
            apply(&mut j, Change::EndMove(Some(("beta".into(), "4".into()))), Time(104)),
            Ok(Applied::Entered(BrokerState::Dispatched))
        );
        assert_eq!(j.site.as_deref(), Some("beta"));
        // Staying where it was is no new state for its history.
        apply(&mut j, Change::StartMove, Time(105)).unwrap();
        assert_eq!(apply(&mut j, Change::EndMove(None), Time(106)), Ok(Applied::Updated));
        assert_eq!(j.state(), BrokerState::Dispatched);
        // A running job stays where it runs.
        apply(&mut j, report(JobPhase::Running, Some(107)), Time(107)).unwrap();
        assert!(apply(&mut j, Change::StartMove, Time(108)).is_err());
    }

    #[test]
    fn a_planned_task_goes_when_ready_and_only_then() {
        let mut t = job(Entry::Planned);
        assert!(
            apply(&mut t, dispatch(), Time(101)).is_err(),
            "not before its parents end"
        );
        assert_eq!(
            apply(&mut t, Change::Ready, Time(102)),
            Ok(Applied::Entered(BrokerState::Accepted))
        );
        assert!(apply(&mut t, Change::Ready, Time(103)).is_err());
        assert_eq!(
            apply(&mut t, Change::Fail("no site".into()), Time(104)),
            Ok(Applied::Entered(BrokerState::Failed))
        );
        assert_eq!(t.reason.as_deref(), Some("no site"));
    }

    #[test]
    fn a_user_holds_a_bounded_number_of_unfinished_jobs_and_held_ones_are_free() {
        assert_eq!(within_limits(3, 10, 7, 10), Ok(()));
        assert_eq!(
            within_limits(4, 10, 7, 10),
            Err(OverLimit::Unfinished {
                unfinished: 7,
                limit: 10
            })
        );
        assert_eq!(
            within_limits(11, 10, 0, 100),
            Err(OverLimit::PerRequest { n: 11, per_request: 10 })
        );
        assert!(within_limits(1, 1, u64::MAX, u64::MAX).is_err(), "no overflow");
        let counted: Vec<BrokerState> = BrokerState::ALL
            .into_iter()
            .filter(|s| counts_toward_limit(*s))
            .collect();
        use BrokerState as S;
        assert_eq!(
            counted,
            [
                S::Accepted,
                S::Planned,
                S::Reserving,
                S::Moving,
                S::Dispatched,
                S::Running
            ]
        );
    }

    #[test]
    fn adaptation_looks_only_at_waiting_jobs_that_asked_for_it() {
        let asked = brokk_model::JobPreferences {
            queue_adaptation: Some(true),
            ..Default::default()
        };
        let looked: Vec<BrokerState> = BrokerState::ALL.into_iter().filter(|s| adapts(*s, &asked)).collect();
        assert_eq!(looked, [BrokerState::Dispatched]);
        assert!(!adapts(BrokerState::Dispatched, &Default::default()));
    }
}
