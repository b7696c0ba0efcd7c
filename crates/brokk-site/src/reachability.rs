//! Whether a resource manager the agent fronts through a network service
//! (an ARC CE, a GRAM gatekeeper) answers, as of the last periodic reading,
//! and the reading's cadence.

use std::sync::Mutex;
use std::time::Duration;

/// Why the manager does not answer, as of the last reading; `None` while it
/// does. Changes are logged once each.
#[derive(Debug, Default)]
pub struct Reachability {
    down: Mutex<Option<String>>,
}

impl Reachability {
    /// Why the manager does not answer; `None` while it does.
    pub fn down(&self) -> Option<String> {
        self.down.lock().map_or(None, |d| d.clone())
    }

    /// Records a reading of `what` (named `name`): `Some(why)` when it did
    /// not answer.
    pub fn record(&self, what: &str, name: &str, now_down: Option<String>) {
        if let Ok(mut d) = self.down.lock() {
            if *d != now_down {
                match &now_down {
                    Some(why) => tracing::warn!(%name, "{why}"),
                    None => tracing::info!(%name, "the {what} answers again"),
                }
            }
            *d = now_down;
        }
    }
}

/// A ticker every `period`, its first tick one period from now (the first
/// reading was the connection's), late ticks delayed rather than bunched.
pub fn every(period: Duration) -> tokio::time::Interval {
    let mut every = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every
}
