//! A job as a site remembers it, and what a resource manager runs beside it.

use brokk_model::{Job, JobPhase, Time};
use brokk_planner::ReservationId;

/// A job's id on its site: a type of its own, so it is never taken for a
/// reservation's id or the resource manager's job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct JobId(pub u64);

impl std::str::FromStr for JobId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(JobId)
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// What a site remembers of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Id on this site.
    pub id: JobId,
    /// Who submitted it.
    pub owner: String,
    /// The canonical description.
    pub spec: Job,
    /// The reservation it runs in.
    pub slot: Option<ReservationId>,
    /// Whether that reservation is the owner's own (kept after the job) rather
    /// than one the site made for it.
    pub claimed: bool,
    /// Whether that claimed reservation was made for this job alone (by a
    /// broker placing it), so it ends with the job rather than being kept.
    pub release_claim: bool,
    /// Where it is.
    pub state: JobPhase,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// Exit code once finished.
    pub exit_code: Option<i32>,
    /// Planned start.
    pub planned_start: Option<Time>,
    /// Actual start.
    pub started: Option<Time>,
    /// End.
    pub ended: Option<Time>,
    /// The submitter's idempotency key, if it gave one.
    pub key: Option<String>,
    /// Its id in the resource manager (Slurm's job id), once submitted there.
    pub backend_id: Option<u64>,
    /// The user the job runs for when a broker submitted it on their
    /// behalf (`None`: the owner itself); their local account runs it.
    pub user: Option<String>,
}

impl JobRecord {
    /// The user the job runs for: the one a broker named, or its owner.
    pub fn user(&self) -> &str {
        self.user.as_deref().unwrap_or(&self.owner)
    }

    /// Whether the job waits for its start (accepted, staging in, queued).
    pub fn is_waiting(&self) -> bool {
        matches!(self.state, JobPhase::Accepted | JobPhase::StagingIn | JobPhase::Queued)
    }
}

/// A job submission as the site core sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The description.
    pub spec: Job,
    /// The submitter's idempotency key.
    pub key: Option<String>,
    /// The user a delegate submits for (already checked by the driver).
    pub on_behalf: Option<String>,
    /// Keep a claimed hold preliminary until the caller commits it.
    pub explicit_commit: bool,
    /// The claimed reservation was made for this job: release it when the
    /// job ends.
    pub release_with_job: bool,
}

impl Submission {
    /// A plain submission of `spec`.
    pub fn of(spec: Job) -> Self {
        Submission {
            spec,
            key: None,
            on_behalf: None,
            explicit_commit: false,
            release_with_job: false,
        }
    }
}

/// What occupies a resource manager's cluster without the site having put
/// it there: a running job (until its time limit), a reservation someone
/// else made, or a node that takes no new work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Occupant {
    /// `job:ID`, `res:NAME` or `node:NAME`.
    pub key: String,
    /// From.
    pub start: Time,
    /// Until.
    pub end: Time,
    /// CPUs.
    pub cpus: u32,
}

impl Occupant {
    /// The end of an occupant whose end nobody knows (a job past or without
    /// a time limit, a node down or drained): it holds until it is seen
    /// gone, the schedule holding it to its own horizon. The same at every
    /// reading, so the occupant is not booked again at each.
    pub const UNTIL_GONE: Time = Time(i64::MAX / 4);
}

/// What a restart reloads of a site's jobs from its store: those not yet
/// ended and those ended too recently to retire, each with the feed version
/// of its latest change.
#[derive(Debug, Clone, Default)]
pub struct KeptJobs {
    /// The records, each with its version.
    pub records: Vec<(JobRecord, u64)>,
    /// One past the largest job id ever issued (retired jobs included).
    pub next_job: u64,
    /// The latest feed version among the jobs left in the store (0: none).
    pub retired_through: u64,
}

impl KeptJobs {
    /// Every job of `records`, none retired, versioned in their order.
    pub fn all(records: Vec<JobRecord>) -> KeptJobs {
        KeptJobs {
            records: records.into_iter().zip(1..).collect(),
            ..KeptJobs::default()
        }
    }
}
