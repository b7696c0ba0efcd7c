//! Why a site operation was refused.

use brokk_planner::Reply;

/// A refused operation; nothing changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CoreError {
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// Someone else's reservation or job.
    #[error("{0} belongs to someone else")]
    Forbidden(String),
    /// No such reservation or job.
    #[error("{0} not found")]
    NotFound(String),
    /// Not granted: the protocol reply (`Rejected` or `Never`).
    #[error("not granted")]
    NotGranted(Reply),
    /// The operation conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
}
