//! Brokk's discrete-event simulator, which runs the same scheduling code as the
//! service against simulated grids.
//!
//! The event engine ([`engine`]); workloads from the Standard Workload Format
//! ([`swf`]), the Grid Workloads Archive format ([`gwf`]), the service's own
//! record ([`replay`]) and the Lublin-Feitelson model ([`lublin`]), reshaped
//! by [`transform`]; a cluster under FCFS or backfilling ([`cluster`]) with
//! a queue order ([`orders`]); platforms of clusters ([`platform`]) and grids
//! of site cores under the broker ([`grid`]); the seeds' metrics
//! ([`metrics`]) with statistics over seeds ([`stats`]); experiments
//! ([`experiment`]) and what they write ([`report`]).
//!
//! Architecture invariant: simulated time is an integer and the only clock;
//! the same input and seed give the same output, byte for byte.

pub mod admission;
pub mod architectures;
pub mod cluster;
pub mod course;
pub mod engine;
pub mod experiment;
pub mod export;
pub mod figures;
pub mod grid;
pub mod gwf;
pub mod lublin;
pub mod metrics;
pub mod network;
pub mod orders;
pub mod parallel;
pub mod platform;
pub mod plots;
pub mod reoptimize;
pub mod replay;
pub mod report;
pub mod rescue;
pub mod routers;
pub mod stats;
pub mod swf;
pub mod timeseries;
pub mod timing;
pub mod transform;
pub mod workflows;
