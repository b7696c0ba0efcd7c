//! What a broker knows about a computing resource: a subset of GLUE 2.0
//! (computing service, shares, execution environment, benchmarks, load), the
//! form every information source is converted into before brokering.

use serde::{Deserialize, Serialize};

use crate::time::Duration;

/// One computing resource (a GLUE 2 ComputingService with its manager).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct ResourceInfo {
    /// Endpoint the broker reaches the resource at; unique per resource.
    pub endpoint: String,
    /// Human-readable name.
    pub name: String,
    /// Queues (GLUE 2 ComputingShares).
    pub shares: Vec<Share>,
    /// What the jobs run on (GLUE 2 ExecutionEnvironment).
    pub environment: Environment,
    /// Benchmark results the resource publishes.
    pub benchmarks: Vec<PublishedBenchmark>,
    /// Processor slots in total, free now and in use.
    pub total_slots: u32,
    /// Slots free now.
    pub free_slots: u32,
    /// Slots in use.
    pub used_slots: u32,
    /// Jobs running.
    pub running_jobs: u32,
    /// Jobs waiting in the local queue.
    pub waiting_jobs: u32,
    /// The resource's own estimate of how long a new job waits, when it publishes one.
    pub estimated_wait: Option<Duration>,
    /// Measured or predicted bandwidth between the broker's data sources and the resource, bytes per second.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Whether the resource accepts advance reservations.
    pub reservations: bool,
    /// Projects / virtual organisations allowed to use it (GLUE 2 access policy);
    /// empty means open to all.
    pub access: Vec<String>,
    /// Its own word on its health, where it publishes one (GLUE 2
    /// `HealthState`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// The delay its middleware adds before a job starts, and again before
    /// the job's end is known (an ARC CE's state cycle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<Duration>,
    /// Its free capacity over time, where it publishes that ([AB-avail]):
    /// a job's wait is then read for the job's own shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability: Option<crate::Availability>,
    /// When it is a broker with a parent ([DMM]): its chain of parents as
    /// it last read them, nearest first, so a broker reading its own
    /// parent sees where that chain leads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<String>,
}

/// A queue / share of the resource.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Share {
    /// Queue name as jobs name it.
    pub name: String,
    /// Longest wall time the queue allows.
    pub max_wall_time: Option<Duration>,
    /// Most processors one job may use.
    pub max_slots_per_job: Option<u32>,
}

/// The hardware and software jobs run on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Environment {
    /// Processor architecture (`x86_64`, ...).
    pub architecture: Option<String>,
    /// Operating system (`linux`, ...).
    pub operating_system: Option<String>,
    /// Processors per node.
    pub cpus_per_node: Option<u32>,
    /// Memory per node in MiB.
    pub memory_mib_per_node: Option<u64>,
    /// Installed runtime environments / software.
    pub runtime_environments: Vec<String>,
}

/// A benchmark result a resource publishes (higher is faster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishedBenchmark {
    /// Benchmark name, matched against the job's benchmark names.
    pub name: String,
    /// The resource's result.
    pub value: f64,
}
