//! Following jobs at their sites (the change feeds) and moving waiting
//! jobs by queue adaptation.

use super::*;

/// How long a change for an unknown job may hold a feed back.
pub(super) const STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

impl Service {
    /// One round of queue adaptation (seed 003, 3.3) over the waiting jobs
    /// that asked for it: each moves if another site would deliver it at
    /// least the margin sooner, counting restaging and a restart.
    pub async fn adapt_round(&self) -> Result<(), ServiceError> {
        for stored in self.db.in_states(&[BrokerState::Dispatched]).await? {
            let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
            if !jobs::adapts(stored.view.state(), &prefs) {
                continue;
            }
            let job: Job = serde_json::from_str(&stored.spec).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            let mut v = stored.view;
            let (Some(site), Some(handle)) = (v.site.clone().and_then(|s| self.site(&s)), v.site_job.clone()) else {
                continue;
            };
            // Held as `moving` while it may be cancelled at one site and
            // submitted at another, so the feed does not record the cancel.
            // Not a state its history shows: it stays or moves.
            if jobs::apply(&mut v, Change::StartMove, now()).is_err() {
                continue;
            }
            self.db.update(&v, None).await?;
            let sites = self.sites();
            let turn = self.decision_turn().await;
            let info = self.info.clone();
            let margin = self.adapt_margin;
            let key = format!("{}-{}", v.id, uuid::Uuid::new_v4().simple());
            let owner = v.owner.clone();
            let uploads = self.uploads.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                let mut clients = cached_sites(&sites, &info, Some(&uploads), Some(&key), &owner);
                let mut tracked = Tracked {
                    job,
                    prefs,
                    owner,
                    endpoint: site.client.endpoint().to_string(),
                    handle: JobHandle(handle),
                };
                let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
                let opts = AdaptOptions {
                    margin,
                    ..AdaptOptions::default()
                };
                let r = adapt(&mut tracked, &mut refs, now(), opts);
                let to = sites
                    .iter()
                    .find(|s| s.client.endpoint() == tracked.endpoint)
                    .map(|s| s.name.clone());
                (r, to, tracked.handle)
            })
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            drop(turn);
            let from = v.site.clone().unwrap_or_default();
            let old_job = v.site_job.clone().unwrap_or_default();
            let moved = match outcome {
                (Ok(Adapted::Moved { .. }), Some(to), handle) => {
                    self.db.retire(&from, &old_job).await?;
                    Some((to, handle.0))
                }
                (Err(e), _, _) => {
                    tracing::warn!("adapting {}: {e}", v.id);
                    None
                }
                _ => None,
            };
            let detail = moved
                .as_ref()
                .map(|(to, _)| format!("moved from {from} to {to}: predicted to deliver sooner"));
            self.change(&mut v, Change::EndMove(moved), now(), detail).await?;
        }
        Ok(())
    }

    /// Jobs a stop caught in the middle of a move stay where they were
    /// last recorded; the feed then tells where they are.
    pub async fn end_interrupted_moves(&self) -> Result<(), ServiceError> {
        for stored in self.db.in_states(&[BrokerState::Moving]).await? {
            let mut v = stored.view;
            self.change(&mut v, Change::EndMove(None), now(), None).await?;
        }
        Ok(())
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
            for a in &feed.jobs {
                let report = brokk_broker::broker::Report {
                    phase: a.state,
                    started: a.started,
                    ended: a.ended,
                    exit_code: a.exit_code,
                    reason: a.reason.clone(),
                };
                if let Some(stored) = self.report_held(&site.name, &a.id, report) {
                    held = Some(stored);
                    continue;
                }
                let Some(stored) = self.db.by_site_job(&site.name, &a.id).await? else {
                    if self.db.is_retired(&site.name, &a.id).await? {
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
                    continue;
                };
                let mut v = stored.view;
                let report = Change::Report {
                    phase: a.state,
                    started: a.started,
                    ended: a.ended,
                    exit_code: a.exit_code,
                    reason: a.reason.clone(),
                };
                let applied = self.change(&mut v, report, now(), a.reason.clone()).await?;
                let ended = matches!(applied, Applied::Entered(s) if s.is_terminal());
                if let (true, Some(r)) = (ended, &self.record) {
                    r.ended(&v);
                }
                if ended && v.member.workflow().is_some() {
                    // Its children may go now.
                    self.wake.notify_one();
                }
            }
            if let Some(stored) = held {
                stored.wait().await?;
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
