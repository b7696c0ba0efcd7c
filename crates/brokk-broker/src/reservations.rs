//! A reservation the broker holds for a user, and the one set of rules by
//! which its state changes (as `jobs` is for a job's): made held (a broker
//! above commits it later) or committed, committed once, given back once.
//! The state field is private here, so no driver sets it.

use brokk_model::Time;
use serde::{Deserialize, Serialize};

/// Whether a broker reservation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum BrokerReservationState {
    /// Preliminary at its site, until a broker above commits it or its hold
    /// lapses.
    Held,
    /// Held at its site.
    Committed,
    /// Given back.
    Cancelled,
}

impl BrokerReservationState {
    /// The state's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerReservationState::Held => "held",
            BrokerReservationState::Committed => "committed",
            BrokerReservationState::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for BrokerReservationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reservation held by the broker service for a user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BrokerReservation {
    /// Id at the broker; jobs claim it with `reservation` in the submission.
    pub id: String,
    /// Its owner.
    pub owner: String,
    /// The site holding it.
    pub site: String,
    /// The site's id for it.
    pub site_reservation: u64,
    /// Slots.
    pub amount: u32,
    /// Start.
    pub start: Time,
    /// End.
    pub end: Time,
    /// Held, committed or given back: changed only by [`BrokerReservation::apply`].
    state: BrokerReservationState,
    /// The workflow whose task it was made for, if any (a workflow's
    /// reservations count as one toward the per-user limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
}

/// A change to a broker reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReservationChange {
    /// Its site committed it.
    Commit,
    /// It was given back at its site (or ended with the job it was made for).
    Cancel,
}

/// A change a reservation's state rules out: it has ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reservation {id} has ended")]
pub struct Ended {
    /// The reservation.
    pub id: String,
}

impl BrokerReservation {
    /// What moving it to another site asks ([`crate::rescue`]): the very
    /// span it holds, since its owner and the jobs that claim it count on
    /// that time, not on the site.
    pub fn elsewhere(&self) -> brokk_core::Request {
        brokk_core::Request {
            amount: self.amount,
            duration: self.end - self.start,
            earliest: self.start,
            latest: self.start,
            flexible: false,
        }
    }

    /// `owner`'s reservation `id`, just granted and committed: `amount`
    /// slots over `[start, end)` at `site`, which knows it as
    /// `site_reservation`.
    pub fn new(
        id: String,
        owner: String,
        site: String,
        site_reservation: u64,
        amount: u32,
        start: Time,
        end: Time,
    ) -> BrokerReservation {
        BrokerReservation {
            id,
            owner,
            site,
            site_reservation,
            amount,
            start,
            end,
            state: BrokerReservationState::Committed,
            workflow: None,
        }
    }

    /// Granted preliminary instead: held at its site until a broker above
    /// commits it ([`ReservationChange::Commit`]) or the hold lapses.
    pub fn preliminary(mut self) -> BrokerReservation {
        self.state = BrokerReservationState::Held;
        self
    }

    /// Where it is.
    pub fn state(&self) -> BrokerReservationState {
        self.state
    }

    /// As stored: for the store that reads it back, and no one else.
    pub fn restored(mut self, state: BrokerReservationState) -> BrokerReservation {
        self.state = state;
        self
    }

    /// Applies `change`; whether it changed anything. A commit of one
    /// given back is refused; a second commit or cancel changes nothing.
    pub fn apply(&mut self, change: ReservationChange) -> Result<bool, Ended> {
        use BrokerReservationState as S;
        let to = match (self.state, change) {
            (S::Cancelled, ReservationChange::Commit) => return Err(Ended { id: self.id.clone() }),
            (_, ReservationChange::Commit) => S::Committed,
            (_, ReservationChange::Cancel) => S::Cancelled,
        };
        let changed = to != self.state;
        self.state = to;
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted() -> BrokerReservation {
        BrokerReservation::new("r1".into(), "ann".into(), "a".into(), 7, 2, Time(10), Time(20))
    }

    #[test]
    fn a_reservation_is_committed_once_and_given_back_once() {
        let mut held = granted().preliminary();
        assert_eq!(held.state(), BrokerReservationState::Held);
        assert_eq!(held.apply(ReservationChange::Commit), Ok(true));
        assert_eq!(held.apply(ReservationChange::Commit), Ok(false));
        assert_eq!(held.state(), BrokerReservationState::Committed);
        assert_eq!(held.apply(ReservationChange::Cancel), Ok(true));
        assert_eq!(held.apply(ReservationChange::Cancel), Ok(false));
        assert_eq!(held.apply(ReservationChange::Commit), Err(Ended { id: "r1".into() }));
        let direct = granted();
        assert_eq!(direct.state(), BrokerReservationState::Committed);
        // Its state is stored and read back as a name.
        let json = serde_json::to_value(&direct).unwrap();
        assert_eq!(json["state"], "committed");
        let back: BrokerReservation = serde_json::from_value(json).unwrap();
        assert_eq!(back, direct);
    }
}
