//! Dispatch: every accepted job through the broker core
//! ([`brokk_broker::broker::BrokerCore`]), the users taken in turn, jobs
//! accepted before a restart looked for at the sites first.
//!
//! The core holds every job (a co-allocation's parts from their search
//! on, `service::coalloc`) and decides waiting ones a batch at a time
//! against its information (one at a time when the information lives for
//! no time); this service carries out what it asks (`service::broker`).

use super::*;

/// Jobs the core decides in one turn.
pub(super) const DECISION_BATCH: usize = 64;

/// Batches being sent while the next is decided.
pub(super) const BATCHES_IN_FLIGHT: usize = 4;

impl Service {
    /// Dispatches every accepted job: the core's turn, after any accepted
    /// job the core has not taken is handed to it. (There should be none:
    /// every path that makes a job accepted hands it over. One that did
    /// not would otherwise wait for ever; one whose description cannot be
    /// read any more fails with the reason.)
    pub async fn dispatch_pending(&self) -> Result<(), ServiceError> {
        // The core's, by whether it took them, not whether it holds them
        // now: one it has just let go may still read as accepted here
        // until its end is stored, and would be taken again.
        let strays: Vec<StoredJob> = self
            .db
            .in_states(&[BrokerState::Accepted])
            .await?
            .into_iter()
            .filter(|j| !self.broker.took(&j.view.id))
            .collect();
        for stored in strays {
            tracing::warn!(
                "job {} was accepted but not handed to the core: handed now",
                stored.view.id
            );
            let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
            match serde_json::from_str::<Job>(&stored.spec) {
                Ok(job) => self.broker.adopt(stored.view, job, prefs),
                Err(e) => {
                    let why = format!("its description cannot be read back: {e}");
                    self.broker.refuse(stored.view, why).wait().await?;
                }
            }
        }
        self.dispatch_held().await
    }

    /// For a job accepted before this process started: the site that already
    /// has it under its idempotency key, if any, with the site's view of it.
    pub(super) async fn already_at(
        &self,
        key: &str,
    ) -> Result<Option<(String, brokk_proto::wire::JobView)>, ServiceError> {
        let sites = self.sites();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || {
            for s in sites.iter() {
                match s.client.job_by_key(&key) {
                    Ok(Some(v)) => return Ok(Some((s.name.clone(), v))),
                    Ok(None) => {}
                    // Unsure: do not risk a second copy; try again next round.
                    Err(e) => return Err(ServiceError::Unavailable(format!("asking {}: {e}", s.name))),
                }
            }
            Ok(None)
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?
    }
}
