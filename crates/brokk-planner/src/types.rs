//! The reservation protocol's vocabulary: requests, the three replies, reservations.

use std::sync::Arc;

use brokk_model::{Duration, Time};
use serde::{Deserialize, Serialize};

/// A reservation's identity within one planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct ReservationId(pub u64);

/// What a client asks for: `amount` units for `duration`, starting somewhere in
/// `[earliest, latest]`. A `flexible` reservation may later be moved within that
/// window to make room for others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Request {
    /// Units of the resource (processors, slots, bandwidth).
    pub amount: u32,
    /// How long the units are held.
    pub duration: Duration,
    /// Earliest acceptable start.
    pub earliest: Time,
    /// Latest acceptable start.
    pub latest: Time,
    /// Whether the planner may move the reservation inside its window later.
    #[serde(default)]
    pub flexible: bool,
}

/// The answer to a reservation request: exactly one of three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Reserved, starting at `start`.
    Granted {
        /// The new reservation.
        id: ReservationId,
        /// When it starts.
        start: Time,
    },
    /// Not in this window. A request starting at or after `next_start` may be
    /// granted; `None` when nothing fits within the planner's horizon.
    Rejected {
        /// The true earliest feasible start after the window.
        next_start: Option<Time>,
    },
    /// This resource can never grant the request.
    Never {
        /// Why not.
        reason: NeverReason,
    },
}

/// Why a request can never be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum NeverReason {
    /// More units than the resource has.
    #[error("asks for {amount} units but the resource has {capacity}")]
    OverCapacity {
        /// Units asked for.
        amount: u32,
        /// Units the resource has.
        capacity: u32,
    },
    /// Zero units or a duration that is not positive.
    #[error("amount and duration must be positive")]
    Empty,
    /// The latest start is before the earliest.
    #[error("the start window is empty (latest before earliest)")]
    EmptyWindow,
    /// The window cannot hold the duration before the planner's horizon ends.
    #[error("the reservation would end after the planning horizon")]
    BeyondHorizon,
}

/// A non-binding offer from a probe, rated by the fragmentation it would leave
/// around itself (0 = none; lower is better).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Candidate {
    /// Where the request would start.
    pub start: Time,
    /// Seed 004's two-dimensional fragmentation of the neighbourhood after placing it.
    pub rating: f64,
}

/// Whether a reservation is a preliminary hold or committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum State {
    /// Disappears at `expires` unless committed (two-phase, soft-state reservation).
    Preliminary {
        /// When the hold lapses.
        expires: Time,
    },
    /// Held until cancelled.
    Committed,
}

/// A reservation as the planner holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// Its identity.
    pub id: ReservationId,
    /// The identity that made it (shared, so reading a reservation does not copy it).
    pub owner: Arc<str>,
    /// First second it holds.
    pub start: Time,
    /// First second after it.
    pub end: Time,
    /// Units held.
    pub amount: u32,
    /// Preliminary or committed.
    pub state: State,
    /// The window it may move in, for flexible reservations.
    pub window: Option<(Time, Time)>,
}

/// A free rectangle of the schedule: `free` units from `start` to `end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FreeSlot {
    /// Start of the interval.
    pub start: Time,
    /// End of the interval (exclusive).
    pub end: Time,
    /// Units free throughout it.
    pub free: u32,
}

/// A change to an existing reservation; absent fields stay as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Change {
    /// New amount.
    pub amount: Option<u32>,
    /// New duration.
    pub duration: Option<Duration>,
    /// New start window; without one the start stays where it is (or, for a
    /// flexible reservation, within its window).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<Time>>, min_items = 2, max_items = 2))]
    pub window: Option<(Time, Time)>,
}

/// Operations on a reservation that cannot be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlannerError {
    /// No such reservation (never made, cancelled or expired).
    #[error("no reservation {0:?}")]
    Unknown(ReservationId),
    /// The modification does not fit; the reservation is unchanged.
    #[error("the modified reservation does not fit: {0:?}")]
    DoesNotFit(Reply),
}
