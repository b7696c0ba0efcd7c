//! Brokk's domain model: the vocabulary every other crate speaks.
//!
//! Architecture invariant: this crate does no IO and reads no clock. Time is
//! integer seconds ([`Time`], [`Duration`]); quantities are integers with the
//! unit in the name.

mod availability;
mod job;
mod phase;
mod prefs;
mod resource;
mod time;
pub mod workflow;

pub use availability::{Availability, FreeRange};
pub use job::{
    Application, Attribute, Benchmark, EnvVar, InputFile, Job, Memory, MemoryScope, Notify, NotifyOn, OutputFile,
};
pub use phase::JobPhase;
pub use prefs::{JobPreferences, Objective, StartBound, DEFAULT_PENALTY_FACTOR};
pub use resource::{
    grid_kind, image_held, image_name, url_scheme, Environment, PublishedBenchmark, ResourceInfo, Share,
};
pub use time::{Duration, Time, TimeParseError};
