//! A reservation the broker holds for a user, and the one set of rules by
//! which its state changes (as `jobs` is for a job's): made held (a broker
//! above commits it later) or committed, committed once, given back once.
//! The state field is private here, so no driver sets it.

use brokk_model::Time;
use serde::{Deserialize, Serialize};

/// Whether a broker reservation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

/// What a new reservation is for: its place at its site and its span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    /// Its id at the broker.
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
    /// The workflow whose task it was made for.
    pub workflow: Option<String>,
}

impl BrokerReservation {
    /// A reservation just granted: preliminary at its site until committed
    /// (`held`), or committed.
    pub fn new(made: Made, held: bool) -> BrokerReservation {
        BrokerReservation {
            id: made.id,
            owner: made.owner,
            site: made.site,
            site_reservation: made.site_reservation,
            amount: made.amount,
            start: made.start,
            end: made.end,
            state: if held {
                BrokerReservationState::Held
            } else {
                BrokerReservationState::Committed
            },
            workflow: made.workflow,
        }
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

    fn made() -> Made {
        Made {
            id: "r1".into(),
            owner: "ann".into(),
            site: "a".into(),
            site_reservation: 7,
            amount: 2,
            start: Time(10),
            end: Time(20),
            workflow: None,
        }
    }

    #[test]
    fn a_reservation_is_committed_once_and_given_back_once() {
        let mut held = BrokerReservation::new(made(), true);
        assert_eq!(held.state(), BrokerReservationState::Held);
        assert_eq!(held.apply(ReservationChange::Commit), Ok(true));
        assert_eq!(held.apply(ReservationChange::Commit), Ok(false));
        assert_eq!(held.state(), BrokerReservationState::Committed);
        assert_eq!(held.apply(ReservationChange::Cancel), Ok(true));
        assert_eq!(held.apply(ReservationChange::Cancel), Ok(false));
        assert_eq!(held.apply(ReservationChange::Commit), Err(Ended { id: "r1".into() }));
        let direct = BrokerReservation::new(made(), false);
        assert_eq!(direct.state(), BrokerReservationState::Committed);
        // Its state is stored and read back as a name.
        let json = serde_json::to_value(&direct).unwrap();
        assert_eq!(json["state"], "committed");
        let back: BrokerReservation = serde_json::from_value(json).unwrap();
        assert_eq!(back, direct);
    }
}
