//! The broker's own core ([`broker::BrokerCore`]) and the brokering
//! algorithms of [ET-interop] and [ET-brokering] as a library that runs the
//! same against real sites (the service drives it) and simulated ones (the
//! simulator drives it).
//!
//! Architecture invariant: nothing here sleeps, spawns threads, opens sockets or
//! reads the wall clock; time comes from a [`Clock`] or as an argument.
//!
//! So far: the clock seam; the [`Site`] trait and [`MemorySite`], an in-memory
//! site on the planner; the predictors of [ET-brokering], 3.1 (benchmark-scaled
//! execution time, file transfer time, queue wait, TTD and TTS); selection
//! (validation, filtering with reasons, TTD and TTS selectors); the broker
//! core, whose submission falls back past refusals and gives back unused
//! holds ([ET-brokering] Algorithm 1) and whose rounds adapt queues
//! ([ET-brokering] 3.3, the rule in [`adapt`]); co-allocation
//! ([ET-interop] Algorithms 1 and 2); and the
//! information layer (index, fetch with timeouts, conversion, TTL cache); and
//! the broker's jobs, whose states change by the rules of [`jobs`] alone.

pub mod adapt;
pub mod broker;
mod clock;
pub mod coalloc;
pub mod delegate;
pub mod info;
pub mod jobs;
mod memory_site;
pub mod predict;
pub mod reoptimize;
pub mod reroute;
pub mod rescue;
pub mod reservations;
pub mod reserve;
pub mod select;
pub mod share;
mod site;
pub mod submit;
pub mod workflow;

pub use clock::{Clock, ManualClock};
pub use memory_site::{MemorySite, Publishing};
pub use site::{JobHandle, JobState, Shadows, Site, SiteError};
