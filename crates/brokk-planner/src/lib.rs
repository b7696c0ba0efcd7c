//! The advance-reservation planner: the schedule of one multi-unit resource.
//!
//! [`Planner`] keeps reservations (owner, span, amount, preliminary or
//! committed, flexible window) and answers the reservation protocol: probe,
//! reserve with its three replies, commit, cancel, atomic modify, expiry of
//! preliminary holds, free slots, utilization and fragmentation. Underneath,
//! a [`Profile`] holds usage over time: [`FreeList`], the time-exclusive free
//! list on an augmented treap, [`Steps`], a flat vector of change points for
//! small profiles, or [`Slotted`], the slotted-time baseline of [VRM].
//!
//! Architecture invariant: no IO, no clock; time is whatever the caller says.

mod btree;
pub mod fragmentation;
mod planner;
mod profile;
mod slotted;
mod steps;
mod treap;
mod types;

pub use btree::BTree;
pub use planner::Planner;
pub use profile::Profile;
pub use slotted::Slotted;
pub use steps::Steps;
pub use treap::FreeList;
pub use types::{
    Candidate, Change, FreeSlot, NeverReason, PlannerError, Reply, Request, Reservation, ReservationId, State,
};
