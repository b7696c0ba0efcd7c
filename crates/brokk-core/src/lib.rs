//! Brokk's scheduling core: one site's state and rules as plain synchronous
//! code, shared by the live site agent, the in-memory test site and the
//! simulator's sites.
//!
//! [`SiteCore`] owns the site's reservation schedule (the planner), its job
//! records and their phase machine, conservative backfilling of the local
//! queue (queued jobs move up when capacity frees), idempotency keys, the
//! change feed, the mirror of what a resource manager runs that the site did
//! not put there, and the information the site publishes. Every operation
//! takes `now` and leaves what the world must do in an outbox of
//! [`Effect`]s (persist this, stop that runner, make this reservation in the
//! resource manager) that the driver drains and carries out. The
//! [`VirtualRunner`] is the driver of simulated sites: it starts and ends
//! jobs on virtual time.
//!
//! Architecture invariant: nothing here awaits, sleeps, locks, spawns or
//! reads a clock; time is whatever the caller says. Among the agent, the
//! broker and the simulator only this crate depends on the planner.

mod effect;
mod error;
mod feed;
pub mod order;
pub mod partition;
pub mod queue;
mod record;
mod runner;
mod shortfall;
mod site;

pub use brokk_planner::{Candidate, Change, FreeSlot, NeverReason, Reply, Request, Reservation, ReservationId, State};
/// The schedule a site core keeps.
pub type Planner = brokk_planner::Planner<brokk_planner::BTree>;

/// A schedule of `capacity` units up to `horizon` (a site's processors, a
/// network link's bandwidth).
pub fn planner(capacity: u32, horizon: brokk_model::Time) -> Planner {
    Planner::new(capacity, horizon, brokk_planner::BTree::new())
}

pub use effect::{Effect, Ended, Manager};
pub use error::CoreError;
pub use partition::{Partitions, SitePolicy};
pub use record::{JobId, JobRecord, KeptJobs, Occupant, Submission};
pub use runner::VirtualRunner;
pub use shortfall::overflowing;
pub use site::{Launch, Published, SiteCore, SiteParams, PUBLISHED_RANGES, PUBLISHED_SPAN};
