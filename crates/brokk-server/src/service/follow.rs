//! Following jobs at their sites (the change feeds) and moving waiting
//! jobs by queue adaptation.

use super::*;

/// How long a change for an unknown job may hold a feed back.
pub(super) const STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Service {
    /// One round of queue adaptation ([ET-brokering] 3.3) over the
    /// waiting jobs that asked for it, by the core's rule
    /// ([`brokk_broker::broker::BrokerCore::adapt`]) on information
    /// brought up to date first.
    pub async fn adapt_round(&self) -> Result<(), ServiceError> {
        let (_, fetches, _) = self.broker.run(|c| c.stale(now()));
        self.carry_out(fetches).await?;
        let (_, asked, _) = self.broker.run(|c| c.adapt(now()));
        self.carry_out(asked).await
    }

    /// Follows every site's change feed and records the jobs' progress.
    pub async fn poll(&self) -> Result<(), ServiceError> {
        let sites = self.sites();
        let feeds = tokio::task::spawn_blocking(move || {
            sites
                .iter()
                .map(|s| {
                    let c = s.cursor.lock().map(|c| *c).unwrap_or_default();
                    (s.clone(), c, s.client.changes(c.epoch, c.version))
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        for (site, mut cursor, feed) in feeds {
            let feed = match feed {
                Ok(f) => f,
                Err(e) => {
                    self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(site = %site.name, "reading the change feed: {e}");
                    continue;
                }
            };
            if feed.epoch != cursor.epoch {
                cursor = Cursor {
                    epoch: feed.epoch,
                    ..Cursor::default()
                };
            }
            let mut complete = true;
            // The jobs the core has let go are read back as they left it.
            self.broker.flush().wait().await?;
            // The core's changes, stored in order: waiting for the last
            // waits for them all.
            let mut held = None;
            // A job of the core's ended: a workflow's next tasks may go
            // once that is stored.
            let mut held_ended = false;
            for a in &feed.jobs {
                let report = report_of(a);
                let ends = a.state.is_terminal();
                if let Some(stored) = self.report_held(&site.name, &a.id, report) {
                    held = Some(stored);
                    held_ended |= ends;
                    continue;
                }
                if self.db.by_site_job(&site.name, &a.id).await?.is_some()
                    || self.db.is_retired(&site.name, &a.id).await?
                {
                    // Recorded, and not the core's: it ended (the core let
                    // it go), or it was moved away from here.
                    continue;
                }
                // Not recorded yet (a dispatch in flight, or one a restart
                // has still to reconcile): wait for it, within reason.
                let since = *cursor.stalled.get_or_insert_with(std::time::Instant::now);
                tracing::debug!(site = %site.name, job = %a.id, "change for a job not recorded yet");
                if since.elapsed() < STALL_LIMIT {
                    complete = false;
                    break;
                }
            }
            if let Some(stored) = held {
                stored.wait().await?;
            }
            if held_ended {
                self.wake.notify_one();
            }
            if complete {
                cursor.version = feed.version;
                cursor.stalled = None;
            }
            if let Ok(mut c) = site.cursor.lock() {
                *c = cursor;
            }
        }
        Ok(())
    }
}

/// What a site's view of a job reports to the broker's core.
pub(super) fn report_of(a: &brokk_proto::wire::JobView) -> brokk_broker::broker::Report {
    brokk_broker::broker::Report {
        phase: a.state,
        started: a.started,
        ended: a.ended,
        exit_code: a.exit_code,
        reason: a.reason.clone(),
    }
}
