//! Brokk's discrete-event simulator, which runs the same scheduling code as the
//! service against simulated grids.
//!
//! So far: the event engine ([`engine`]) and the Standard Workload Format
//! ([`swf`]). Workload models, site policies, platforms, metrics and
//! experiments build on them.
//!
//! Architecture invariant: simulated time is an integer and the only clock;
//! the same input and seed give the same output, byte for byte.

pub mod cluster;
pub mod engine;
pub mod swf;
