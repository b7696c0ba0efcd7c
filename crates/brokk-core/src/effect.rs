//! What an operation asks its driver to carry out.

use brokk_model::Time;
use brokk_planner::{Reservation, ReservationId};

use crate::record::JobId;

/// Why a reservation ended, as it is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Its job ended, or the site gave it up.
    Released,
    /// A preliminary hold lapsed uncommitted.
    Expired,
    /// Its owner cancelled it.
    Cancelled,
}

impl Ended {
    /// The word stored with the reservation.
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Released => "released",
            Ended::Expired => "expired",
            Ended::Cancelled => "cancelled",
        }
    }
}

/// A command for the resource manager behind the site, to be run after the
/// operation's lock is released.
#[derive(Debug, Clone, PartialEq)]
pub enum Manager {
    /// Make the resource manager's reservation for this new grant.
    Reserve(ReservationId),
    /// Change the resource manager's reservation from `old` to what the
    /// schedule now holds under the same id.
    Modify {
        /// The reservation as it was.
        old: Reservation,
    },
    /// Delete the resource manager's reservations of these ids.
    Release(Vec<ReservationId>),
    /// Hold this job in the resource manager, once it is there.
    HoldJob(JobId),
    /// Release this job, held in the resource manager.
    ReleaseJob(JobId),
}

/// One thing the driver must do, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Persist reservation `id` as the schedule now holds it.
    SaveReservation(ReservationId),
    /// Persist that these reservations ended.
    EndReservations(Vec<ReservationId>, Ended),
    /// Persist job `id`'s record as it now is.
    SaveJob(JobId),
    /// Job `job`'s planned start moved (earlier) to `start`.
    StartMoved {
        /// The job.
        job: JobId,
        /// Its new planned start.
        start: Time,
    },
    /// Stop job `job`'s runner: it was cancelled or its hold lapsed.
    Stop(JobId),
    /// The hold job `job` was submitted into is committed; it may start.
    Committed(JobId),
    /// A command for the resource manager.
    Manager(Manager),
}
