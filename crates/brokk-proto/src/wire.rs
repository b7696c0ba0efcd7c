//! Request and response bodies of the site API (`/v1/...`).

use brokk_core::{Candidate, NeverReason, Request};
use brokk_model::{Duration, PublishedBenchmark, Time};
use serde::{Deserialize, Serialize};

/// Parses a JSON request body; the error names the field at fault
/// (`amount: invalid type: ...`), or `body` when the whole document is wrong.
pub fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." || path.is_empty() {
            "body".to_string()
        } else {
            path
        };
        format!("{at}: {}", e.into_inner())
    })
}

/// `POST /v1/reservations`: a planner request plus an optional hold. Spelled
/// out rather than flattened so that a bad field is named in the error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProbeResponse {
    /// Non-binding candidate starts, earliest first, with [VRM]'s rating.
    pub candidates: Vec<Candidate>,
}

/// A reservation's state on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    /// A hold that lapses at `expires` unless committed.
    Preliminary,
    /// Held until cancelled.
    Committed,
}

/// `201` answer to a reservation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Granted {
    /// The reservation.
    pub id: u64,
    /// When it starts.
    pub start: Time,
    /// Preliminary or committed.
    pub state: ReservationState,
}

/// `409` answer: the window is full; `next_start` is the earliest start after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Rejected {
    /// Always `"rejected"`.
    pub reply: String,
    /// The earliest possible start after the window, null when none.
    pub next_start: Option<Time>,
}

/// `422` answer: the request can never be granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Never {
    /// Always `"never"`.
    pub reply: String,
    /// Why.
    pub reason: NeverReason,
}

/// `GET /v1/reservations/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
    #[schema(value_type = Option<Vec<Time>>, min_items = 2, max_items = 2)]
    pub window: Option<(Time, Time)>,
}

/// `GET /v1/info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// False while the resource manager behind the agent cannot be reached;
    /// the agent then answers 503 to everything that needs it.
    #[serde(default = "yes")]
    pub available: bool,
    /// Why the site is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
    /// The cluster behind the agent, when it fronts a resource manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterView>,
    /// The queues the resource manager publishes, where it does (an ARC
    /// CE's GLUE 2 computing shares).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<brokk_model::Share>,
    /// The resource manager's own word on its health, where it publishes
    /// one (GLUE 2 `HealthState`: `ok`, `warning`, `critical`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// How many clients' reservations the site can no longer hold (part
    /// of it lost: a node down or drained); each client asks
    /// `GET /v1/reservations/endangered` for its own.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub endangered: u32,
    /// The delay the resource manager adds before a job starts, and again
    /// before its end is known, seconds (an ARC CE's state cycle).
    #[serde(default, skip_serializing_if = "Duration::is_zero")]
    pub lag: Duration,
    /// Its free capacity over the next day, as `GET /v1/slots` gives it
    /// unfiltered ([AB-avail]'s published slots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<brokk_model::Availability>,
    /// A broker with a parent: its chain of parents, nearest first
    /// ([`brokk_model::ResourceInfo::ancestors`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<String>,
    /// What jobs may ask of it: the URL schemes it stages, container
    /// runtimes, runtime environments, GPUs.
    #[serde(default)]
    pub environment: brokk_model::Environment,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn yes() -> bool {
    true
}

/// A resource manager's cluster as the agent last read it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ClusterView {
    /// Which resource manager (`slurm`).
    pub manager: String,
    /// Partitions.
    pub partitions: Vec<String>,
    /// Nodes.
    pub nodes: Vec<NodeView>,
    /// CPUs in total.
    pub cpus: u32,
    /// CPUs allocated to jobs now.
    pub cpus_allocated: u32,
    /// Jobs running now (anyone's).
    pub running_jobs: u32,
    /// Jobs pending (anyone's).
    pub pending_jobs: u32,
    /// Reservations the resource manager holds (Brokk's and others').
    pub reservations: u32,
}

/// One node of a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// The resource manager's state for it (`idle`, `mix`, `down*`, ...).
    pub state: String,
    /// CPUs.
    pub cpus: u32,
    /// CPUs allocated now.
    pub cpus_allocated: u32,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Partitions it is in.
    pub partitions: Vec<String>,
    /// One-minute load average, when reported.
    pub load: Option<f64>,
}

pub use brokk_broker::jobs::{BrokerJob, BrokerState, HistoryEntry};
pub use brokk_broker::reservations::{BrokerReservation, BrokerReservationState};
pub use brokk_model::JobPhase;

/// `201` answer to a job submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Created {
    /// The job's id on the site.
    pub id: String,
}

/// `GET /v1/jobs/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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

/// `GET /v1/jobs/changes?epoch=E&after=V`: jobs changed since version `V` of
/// the agent's run `E`, so a broker follows many jobs with one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChangeFeed {
    /// The agent's run; when it differs from the one asked about, the feed
    /// started again from the beginning.
    pub epoch: u64,
    /// The version to ask after next time.
    pub version: u64,
    /// The changed jobs, as they are now.
    pub jobs: Vec<JobView>,
}

/// `GET /readyz` at a site agent: whether it can take work, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Readiness {
    /// Whether the site can take work.
    pub ready: bool,
    /// Why not, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `GET /v1/me` at the broker: who the token is, and what its upload store holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Me {
    /// The identity the token maps to.
    pub identity: String,
    /// The identity's upload store.
    pub uploads: UploadUsage,
}

/// What an identity's upload store holds, and how much it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UploadUsage {
    /// Bytes held.
    pub bytes: u64,
    /// Files held.
    pub files: u64,
    /// The most bytes it may hold.
    pub quota_bytes: u64,
    /// The most files it may hold.
    pub quota_files: u64,
}

/// One entry of `GET /v1/resources`: a site's information, or why the
/// broker has none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Resource {
    /// The site answered.
    Site(Box<brokk_model::ResourceInfo>),
    /// The site did not answer, or discovery found it but cannot reach it.
    Unanswered(Unanswered),
}

/// A site the broker has no information from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Unanswered {
    /// The site's name.
    pub name: String,
    /// Always false.
    pub available: bool,
    /// Why there is no information.
    pub error: String,
}

/// An error body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// `POST /v1/jobs` on the broker service: a description in any supported
/// language.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// The job description text.
    pub description: String,
    /// Its language (`jsdl`, `xrsl`, `rsl`, `jdl`, `condor`, `slurm`, `json`);
    /// detected from the text when absent.
    #[serde(default)]
    pub format: Option<String>,
    /// Selection preferences (objective, start bounds, benchmarks, ...).
    #[serde(default)]
    pub preferences: Option<brokk_model::JobPreferences>,
    /// A reservation made through the broker (`POST /v1/reservations`) for the
    /// job to run in.
    #[serde(default)]
    pub reservation: Option<String>,
    /// The description's local input files, uploaded first
    /// (`PUT /v1/uploads/{sha256}`): input name -> SHA-256.
    #[serde(default)]
    pub uploads: std::collections::BTreeMap<String, String>,
    /// Keep the jobs held, not dispatched, until released.
    #[serde(default)]
    pub hold: bool,
}

/// `202` answer of the broker service: the job is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Accepted {
    /// The job's id at the broker (the first, when the description has several).
    pub id: String,
    /// Every job the description made (HTCondor `queue N`, JDL collections).
    pub ids: Vec<String>,
    /// Translation warnings, `line:column: message`.
    pub warnings: Vec<String>,
}

/// `200` answer of `POST /v1/jobs/check`: what the broker would do with a
/// description's jobs if they were submitted now; nothing is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Checked {
    /// One entry per job the description makes, in order.
    pub jobs: Vec<JobCheck>,
    /// Translation warnings, `line:column: message`.
    pub warnings: Vec<String>,
}

/// Every site's answer for one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobCheck {
    /// The job's name in its description, if it has one.
    pub name: Option<String>,
    /// The site a decision now would send it to; none when no site takes it.
    pub site: Option<String>,
    /// Every site, those that take it best first, then those that cannot,
    /// then those the broker cannot ask now.
    pub sites: Vec<SiteCheck>,
}

/// One site's answer for a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SiteCheck {
    /// The site's name.
    pub site: String,
    /// `takes`, `cannot` or `unavailable`.
    pub answer: String,
    /// Predicted seconds until it would start there (`takes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tts: Option<i64>,
    /// Predicted seconds until its results would be back (`takes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttd: Option<i64>,
    /// Why it cannot, or why the broker cannot ask it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// A file uploaded for jobs' input, as a store holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UploadView {
    /// Its SHA-256, lowercase hexadecimal: its name.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
}

/// `POST /v1/coallocations` on the broker service: jobs that must start
/// together, within `delta` seconds of each other, somewhere in
/// `[earliest, latest]` ([ET-interop], 3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CoallocRequest {
    /// One description per job, each in any supported language.
    pub jobs: Vec<CoallocJob>,
    /// Earliest acceptable start.
    pub earliest: Time,
    /// Latest acceptable start.
    pub latest: Time,
    /// Largest difference between the jobs' starts, seconds.
    pub delta: Duration,
}

/// One job of a co-allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CoallocJob {
    /// The description.
    pub description: String,
    /// Its language, detected when absent.
    #[serde(default)]
    pub format: Option<String>,
}

/// `201` answer to a co-allocation: the jobs, their sites and starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Coallocated {
    /// Broker job ids, in request order.
    pub ids: Vec<String>,
    /// The site of each.
    pub sites: Vec<String>,
    /// The reserved start of each.
    pub starts: Vec<Time>,
}

/// `POST /v1/reservations` on the broker service: a reservation made at the
/// site where it starts earliest, on the caller's behalf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BrokerReservationRequest {
    /// Slots.
    pub amount: u32,
    /// Seconds.
    pub duration: Duration,
    /// Earliest acceptable start.
    pub earliest: Time,
    /// Latest acceptable start.
    pub latest: Time,
}

/// `POST /v1/workflows` on the broker service: a workflow to admit against
/// its deadline and run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkflowRequest {
    /// The workflow in Brokk's canonical form (`brokk workflow validate
    /// --json`), every task with its job; its `deadline` is the one admitted
    /// against.
    pub workflow: brokk_model::workflow::Workflow,
    /// The scheduler: single, heftsync (the default), heftsyncbt, hlst or genetic.
    #[serde(default)]
    pub scheduler: Option<String>,
    /// Input name -> SHA-256 of the owner's uploads, for local inputs no
    /// parent task makes.
    #[serde(default)]
    pub uploads: std::collections::BTreeMap<String, String>,
}

/// Where a workflow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorkflowState {
    /// Admitted; its tasks run in their reservations.
    Running,
    /// Every task ended successfully.
    Finished,
    /// A task failed beyond its retries; what was left was cancelled.
    Failed,
    /// Cancelled by its owner.
    Cancelled,
}

impl WorkflowState {
    /// The state's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkflowState::Running => "running",
            WorkflowState::Finished => "finished",
            WorkflowState::Failed => "failed",
            WorkflowState::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for WorkflowState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task of an admitted workflow: where and when it is reserved and the
/// broker job that runs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowTask {
    /// The task's id in the workflow.
    pub task: String,
    /// The broker job running it now (a retry runs as a new job).
    pub job: String,
    /// The site.
    pub site: String,
    /// The broker reservation it runs in.
    pub reservation: String,
    /// The reservation's start.
    pub start: Time,
    /// The reservation's end.
    pub end: Time,
    /// Runs started again after a failure.
    pub retried: u32,
    /// The job's state (filled in when shown).
    pub state: BrokerState,
    /// The job's exit code, once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Moves of its reservation away from sites that stopped answering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub moves: Vec<TaskMove>,
}

/// A task's reservation moved by a rescue ([VRM] 6) from a site that
/// stopped answering to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaskMove {
    /// When.
    pub at: Time,
    /// The site it left.
    pub from: String,
    /// The site it went to.
    pub to: String,
    /// Why, in words.
    pub why: String,
}

/// A dependency between two tasks of a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowEdge {
    /// The task that runs first.
    pub parent: String,
    /// The task that waits for it.
    pub child: String,
}

/// Bandwidth the broker booked between two sites for a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowTransfer {
    /// The task whose data it carries.
    pub from_task: String,
    /// The task that receives it.
    pub to_task: String,
    /// Source site.
    pub from_site: String,
    /// Destination site.
    pub to_site: String,
    /// Start of the booking.
    pub start: Time,
    /// End of the booking.
    pub end: Time,
    /// Bytes per second booked.
    pub bytes_per_s: u64,
}

/// A workflow at the broker service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowView {
    /// Its id.
    pub id: String,
    /// Its owner.
    pub owner: String,
    /// Its name.
    pub name: String,
    /// The scheduler that placed it.
    pub scheduler: String,
    /// Where it is.
    pub state: WorkflowState,
    /// When it was admitted.
    pub submitted: Time,
    /// Its deadline, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
    /// The first reservation's start.
    pub start: Time,
    /// The last reservation's end.
    pub finish: Time,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<Time>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Its tasks, in the workflow's order.
    pub tasks: Vec<WorkflowTask>,
    /// Bandwidth booked between sites.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transfers: Vec<WorkflowTransfer>,
    /// Which task waits for which (filled in when shown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<WorkflowEdge>,
    /// What the broker does not carry out of what the workflow asks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The answer to a workflow the broker could not admit (409): why, and
/// the earliest finish the grid could offer instead, when one was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowRefused {
    /// Why, in words (with the earliest finish).
    pub error: String,
    /// Why, as the admission said it (`reason` names its kind).
    pub rejection: brokk_broker::workflow::Rejection,
}
