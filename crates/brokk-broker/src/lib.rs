//! The brokering algorithms of seeds 000 and 003 as a library that runs the same
//! against real sites (through the service) and simulated ones (through the
//! simulator).
//!
//! Architecture invariant: nothing here sleeps, spawns threads, opens sockets or
//! reads the wall clock; time comes from a [`Clock`] or as an argument.
//!
//! This first slice holds the clock seam and the predictors of seed 003, 3.1:
//! benchmark-scaled execution time, file transfer time, queue wait and their sum,
//! the Total Time to Delivery. Selection, submission, co-allocation and queue
//! adaptation build on it.

mod clock;
pub mod predict;

pub use clock::{Clock, ManualClock};
