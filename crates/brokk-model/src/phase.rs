//! Where a job is in its life on a site.

use serde::{Deserialize, Serialize};

/// A job's state on a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum JobPhase {
    /// Recorded, nothing done yet.
    Accepted,
    /// Input files are being fetched.
    StagingIn,
    /// Waiting for its planned start.
    Queued,
    /// Kept back by its owner (`brokk hold`): it holds no slot and does not
    /// start until released.
    Held,
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
