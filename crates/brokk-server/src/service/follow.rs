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
            if prefs.queue_adaptation != Some(true) {
                continue;
            }
            let job: Job = serde_json::from_str(&stored.spec).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            let mut v = stored.view;
            let (Some(site), Some(handle)) = (v.site.clone().and_then(|s| self.site(&s)), v.site_job.clone()) else {
                continue;
            };
            // Held as `moving` while it may be cancelled at one site and
            // submitted at another, so the feed does not record the cancel.
            v.state = BrokerState::Moving;
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
            v.state = BrokerState::Dispatched;
            match outcome {
                (Ok(Adapted::Moved { .. }), Some(to), handle) => {
                    self.db.retire(&from, &old_job).await?;
                    v.site = Some(to.clone());
                    v.site_job = Some(handle.0);
                    let detail = format!("moved from {from} to {to}: predicted to deliver sooner");
                    self.db.update(&v, Some((now(), Some(detail)))).await?;
                }
                (Err(e), _, _) => {
                    tracing::warn!("adapting {}: {e}", v.id);
                    self.db.update(&v, None).await?;
                }
                _ => self.db.update(&v, None).await?,
            }
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
            for a in &feed.jobs {
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
                // A job being moved is the adaptation's to record.
                if v.state.is_terminal() || v.state == BrokerState::Moving {
                    continue;
                }
                let state = BrokerState::of_phase(a.state);
                let changed = state != v.state;
                if !changed && a.started == v.started {
                    continue;
                }
                v.state = state;
                v.started = a.started;
                v.ended = a.ended;
                v.exit_code = a.exit_code;
                v.reason = a.reason.clone();
                let entry = changed.then(|| (now(), a.reason.clone()));
                self.db.update(&v, entry).await?;
                if let (true, Some(r)) = (changed && v.state.is_terminal(), &self.record) {
                    r.ended(&v);
                }
                if changed && v.state.is_terminal() && super::workflows::workflow_of(&v.id).is_some() {
                    // Its children may go now.
                    self.wake.notify_one();
                }
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
