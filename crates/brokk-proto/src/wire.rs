//! Request and response bodies of the site API (`/v1/...`).

use brokk_model::{Duration, PublishedBenchmark, Time};
use brokk_planner::{Candidate, NeverReason, Request};
use serde::{Deserialize, Serialize};

/// `POST /v1/reservations`: a planner request plus an optional hold. Spelled
/// out rather than flattened so that a bad field is named in the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReservationRequest {
    /// Units.
    pub amount: u32,
    /// Seconds.
    pub duration: Duration,
    /// Earliest acceptable start.
    pub earliest: Time,
    /// Latest acceptable start.
    pub latest: Time,
    /// Whether the site may move it inside the window later.
    #[serde(default)]
    pub flexible: bool,
    /// Seconds the reservation stays preliminary before it lapses unless
    /// committed; absent means committed at once.
    #[serde(default)]
    pub hold: Option<i64>,
}

impl ReservationRequest {
    /// The planner request.
    pub fn request(&self) -> Request {
        Request {
            amount: self.amount,
            duration: self.duration,
            earliest: self.earliest,
            latest: self.latest,
            flexible: self.flexible,
        }
    }

    /// A request with an optional hold.
    pub fn new(r: &Request, hold: Option<i64>) -> ReservationRequest {
        ReservationRequest {
            amount: r.amount,
            duration: r.duration,
            earliest: r.earliest,
            latest: r.latest,
            flexible: r.flexible,
            hold,
        }
    }
}

/// `POST /v1/probe` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeResponse {
    /// Non-binding candidate starts, earliest first, with seed 004's rating.
    pub candidates: Vec<Candidate>,
}

/// A reservation's state on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    /// A hold that lapses at `expires` unless committed.
    Preliminary,
    /// Held until cancelled.
    Committed,
}

/// `201` answer to a reservation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The reservation.
    pub id: u64,
    /// When it starts.
    pub start: Time,
    /// Preliminary or committed.
    pub state: ReservationState,
}

/// `409` answer: the window is full; `next_start` is the earliest start after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// Always `"rejected"`.
    pub reply: String,
    /// The earliest possible start after the window, null when none.
    pub next_start: Option<Time>,
}

/// `422` answer: the request can never be granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Never {
    /// Always `"never"`.
    pub reply: String,
    /// Why.
    pub reason: NeverReason,
}

/// `GET /v1/reservations/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationView {
    /// The reservation.
    pub id: u64,
    /// Who made it.
    pub owner: String,
    /// First second held.
    pub start: Time,
    /// First second after it.
    pub end: Time,
    /// Units.
    pub amount: u32,
    /// Preliminary or committed.
    pub state: ReservationState,
    /// When a preliminary hold lapses.
    pub expires: Option<Time>,
    /// The window a flexible reservation may move in.
    pub window: Option<(Time, Time)>,
}

/// `GET /v1/info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InfoView {
    /// Site name.
    pub name: String,
    /// Slots in total.
    pub capacity: u32,
    /// Slots free now.
    pub free_now: u32,
    /// Jobs running.
    pub running: u32,
    /// Jobs accepted and not yet running.
    pub waiting: u32,
    /// When a one-slot, one-hour job submitted now would start, from now.
    pub estimated_wait: Duration,
    /// Published benchmark results.
    pub benchmarks: Vec<PublishedBenchmark>,
    /// Network bandwidth to the site, bytes per second.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Whether the site takes advance reservations.
    pub reservations: bool,
}

/// A job's state on a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobPhase {
    /// Recorded, nothing done yet.
    Accepted,
    /// Input files are being fetched.
    StagingIn,
    /// Waiting for its planned start.
    Queued,
    /// Its process runs.
    Running,
    /// Output files are being delivered.
    StagingOut,
    /// Done; see the exit code.
    Finished,
    /// Could not run or complete; see the reason.
    Failed,
    /// Cancelled by its owner.
    Cancelled,
}

impl JobPhase {
    /// Whether the job will not change any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobPhase::Finished | JobPhase::Failed | JobPhase::Cancelled)
    }
}

/// `201` answer to a job submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    /// The job's id on the site.
    pub id: String,
}

/// `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    /// The job's id.
    pub id: String,
    /// Who submitted it.
    pub owner: String,
    /// Where it is.
    pub state: JobPhase,
    /// Why it failed or was cancelled.
    pub reason: Option<String>,
    /// The process's exit code, once finished.
    pub exit_code: Option<i32>,
    /// The reservation it runs in (its own or the one it claimed).
    pub reservation: Option<u64>,
    /// When it is planned to start.
    pub planned_start: Option<Time>,
    /// When it started.
    pub started: Option<Time>,
    /// When it ended.
    pub ended: Option<Time>,
}

/// An error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}
