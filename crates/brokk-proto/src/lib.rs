//! The site API's wire types and [`RemoteSite`], a blocking HTTP client that
//! implements the broker's [`brokk_broker::Site`] trait, so the broker
//! drives a remote `brokk site` exactly like an in-memory site.
//!
//! Conventions: JSON bodies, times in RFC 3339 UTC, durations in whole
//! seconds, bearer tokens; errors are `{"error": "..."}` with a status code.

pub mod broker;
pub mod client;
pub mod wire;

pub use client::RemoteSite;

/// The wall clock in whole seconds: what the service, the agents and the CLI
/// read (the broker's algorithms and the simulator take time as an argument).
pub fn wall_clock() -> brokk_model::Time {
    let now = std::time::SystemTime::now().duration_since(std::time::SystemTime::UNIX_EPOCH);
    brokk_model::Time(now.map_or(0, |d| d.as_secs() as i64))
}
