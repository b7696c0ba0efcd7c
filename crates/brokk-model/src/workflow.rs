//! Workflows: tasks with their run time on a reference resource, the data
//! each passes to its children, and when the whole may start and must end
//! ([VRM] 2.2). This is also Brokk's canonical workflow JSON; HTCondor
//! DAGMan files and WfCommons instances are read into it by `brokk-jdl`.

use serde::{Deserialize, Serialize};

use crate::job::Job;
use crate::time::{Duration, Time};

/// A workflow as submitted.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Workflow {
    /// Its name.
    pub name: String,
    /// The tasks; their ids are unique.
    pub tasks: Vec<Task>,
    /// Dependencies: a child starts after its parent ends and its data has
    /// arrived.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edges: Vec<Edge>,
    /// Pairs of tasks that must run at the same time, exchanging data over
    /// reserved bandwidth ([VRM] 2.3.4); pairs sharing a task form groups
    /// that all start together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub coallocations: Vec<CoAllocation>,
    /// Nothing starts before this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest: Option<Time>,
    /// Everything ends by this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
}

/// One task of a workflow.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// Unique within the workflow (a DAGMan node name, a WfFormat task id).
    pub id: String,
    /// What it runs, when the workflow says (DAGMan node files); a task of
    /// a researcher's workflow instance may have only a run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Job>,
    /// The language the job was written in (`condor`, `slurm`, ...), so
    /// the broker fills in that language's placeholders when it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Run time on the reference resource, scaled by a site's speed.
    pub runtime: Duration,
    /// Processors it needs.
    #[serde(default = "one")]
    pub cores: u32,
    /// Times it may be run again after failing (DAGMan's RETRY).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// A command run before the task, where it runs (DAGMan's SCRIPT PRE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre: Option<Vec<String>>,
    /// A command run after the task (DAGMan's SCRIPT POST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<Vec<String>>,
}

fn one() -> u32 {
    1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A dependency between two tasks and the data that crosses it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Edge {
    /// The task that runs first.
    pub parent: String,
    /// The task that waits for it.
    pub child: String,
    /// Bytes the parent's outputs hand to the child.
    #[serde(default, skip_serializing_if = "is_zero_bytes")]
    pub bytes: u64,
}

/// Two tasks that must run at the same time.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CoAllocation {
    /// One task.
    pub a: String,
    /// The other.
    pub b: String,
    /// Bytes per second reserved between them while they run.
    #[serde(default, skip_serializing_if = "is_zero_bytes")]
    pub bandwidth: u64,
}

fn is_zero_bytes(n: &u64) -> bool {
    *n == 0
}

impl Workflow {
    /// The index of the task with id `id`.
    pub fn task(&self, id: &str) -> Option<usize> {
        self.tasks.iter().position(|t| t.id == id)
    }
}
