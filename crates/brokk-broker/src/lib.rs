//! The brokering algorithms of seeds 000 and 003 as a library that runs the same
//! against real sites (through the service) and simulated ones (through the
//! simulator).
//!
//! Architecture invariant: nothing here sleeps, spawns threads, opens sockets or
//! reads the wall clock; time comes from a [`Clock`] or as an argument.
//!
//! So far: the clock seam, the predictors of seed 003, 3.1 (benchmark-scaled
//! execution time, file transfer time, queue wait, TTD and TTS) and selection
//! (validation, filtering with reasons, TTD and TTS selectors). Submission,
//! co-allocation and queue adaptation build on these.

mod clock;
pub mod predict;
pub mod select;

pub use clock::{Clock, ManualClock};
