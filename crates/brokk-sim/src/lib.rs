//! Brokk's discrete-event simulator, which runs the same scheduling code as the
//! service against simulated grids.
//!
//! So far: the event engine ([`engine`]), the Standard Workload Format
//! ([`swf`]) and the Grid Workloads Archive format ([`gwf`]), a cluster under FCFS or backfilling ([`cluster`]) and the seeds'
//! metrics ([`metrics`]). Workload models, platforms and experiments come next.
//!
//! Architecture invariant: simulated time is an integer and the only clock;
//! the same input and seed give the same output, byte for byte.

pub mod cluster;
pub mod engine;
pub mod experiment;
pub mod grid;
pub mod gwf;
pub mod lublin;
pub mod metrics;
pub mod platform;
pub mod replay;
pub mod report;
pub mod swf;
pub mod transform;
