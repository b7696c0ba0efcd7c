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
