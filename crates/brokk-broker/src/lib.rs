//! The brokering algorithms of seeds 000 and 003 as a library that runs the same
//! against real sites (through the service) and simulated ones (through the
//! simulator).
//!
//! Architecture invariant: nothing here sleeps, spawns threads, opens sockets or
//! reads the wall clock; time comes from a [`Clock`] or as an argument.
//!
//! So far: the clock seam; the [`Site`] trait and [`MemorySite`], an in-memory
//! site on the planner; the predictors of seed 003, 3.1 (benchmark-scaled
//! execution time, file transfer time, queue wait, TTD and TTS); selection
//! (validation, filtering with reasons, TTD and TTS selectors); and submission
//! with fallback and reservation release (seed 003, Algorithm 1); co-allocation
//! (seed 000, Algorithms 1 and 2); queue adaptation (seed 003, 3.3); and the
//! information layer (index, fetch with timeouts, conversion, TTL cache); and
//! the broker's jobs, whose states change by the rules of [`jobs`] alone.

pub mod adapt;
pub mod broker;
mod clock;
pub mod coalloc;
pub mod info;
pub mod jobs;
mod memory_site;
pub mod predict;
pub mod reserve;
pub mod select;
pub mod share;
mod site;
pub mod submit;
pub mod workflow;

pub use clock::{Clock, ManualClock};
pub use memory_site::MemorySite;
pub use site::{JobHandle, JobState, Site, SiteError};
