//! The optional job preferences document ([ET-interop], 2.4): brokering objective,
//! acceptable start window, benchmarks and switches. Every field is optional.

use serde::{Deserialize, Serialize};

use crate::job::Benchmark;
use crate::time::{Duration, Time};

/// Penalty factor c for benchmarks a resource does not publish ([ET-brokering], 3.1.1).
pub const DEFAULT_PENALTY_FACTOR: f64 = 1.25;

/// What the broker optimizes for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Earliest completion: minimize Total Time to Delivery (TTD).
    EarliestCompletion,
    /// Earliest start: minimize Time To Start (TTS).
    EarliestStart,
    /// The least loaded site: the smallest share of its processors in use
    /// as it last reported ([AB-avail]'s base gateway policy).
    LeastLoaded,
}

/// A bound on the job's start: an absolute instant (RFC 3339 string in JSON) or
/// an offset in seconds from submission (an integer in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum StartBound {
    /// An absolute instant.
    Absolute(Time),
    /// Seconds after the job is submitted.
    Relative(Duration),
}

impl StartBound {
    /// The bound as an instant, for a job submitted at `submitted`.
    pub fn resolve(self, submitted: Time) -> Time {
        match self {
            StartBound::Absolute(t) => t,
            StartBound::Relative(d) => submitted + d,
        }
    }
}

/// The job preferences document.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct JobPreferences {
    /// Brokering objective; earliest completion when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objective: Option<Objective>,
    /// Earliest acceptable start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earliest_start: Option<StartBound>,
    /// Latest acceptable start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latest_start: Option<StartBound>,
    /// Benchmarks relevant for the application, added to the job's own.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub benchmarks: Vec<Benchmark>,
    /// Penalty factor c for missing benchmarks; 1.25 when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub penalty_factor: Option<f64>,
    /// Whether to reserve resources in advance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_reservations: Option<bool>,
    /// Whether to keep looking for a better site while the job waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_adaptation: Option<bool>,
}

impl JobPreferences {
    /// The objective in force.
    pub fn objective(&self) -> Objective {
        self.objective.unwrap_or(Objective::EarliestCompletion)
    }

    /// The penalty factor in force.
    pub fn penalty_factor(&self) -> f64 {
        self.penalty_factor.unwrap_or(DEFAULT_PENALTY_FACTOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_bounds_are_absolute_strings_or_relative_seconds() {
        let p: JobPreferences = serde_json::from_str(
            r#"{"objective":"earliest_start","earliest_start":600,"latest_start":"2026-11-22T10:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!(p.objective(), Objective::EarliestStart);
        assert_eq!(p.earliest_start.unwrap().resolve(Time(1000)), Time(1600));
        assert_eq!(p.latest_start.unwrap().resolve(Time(1000)), Time(1_795_341_600));
        assert_eq!(JobPreferences::default().penalty_factor(), 1.25);
    }
}
