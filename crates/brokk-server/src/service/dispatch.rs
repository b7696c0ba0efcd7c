//! Dispatch: every accepted job through the broker's submission, the users
//! taken in turn, jobs accepted before a restart looked for first.
//!
//! Two paths, chosen by the broker's rules ([`brokk_broker::jobs::route`],
//! [`brokk_broker::broker::takes`]). The broker core decides the jobs it
//! holds, a batch at a time against its information (one at a time when
//! the information lives for no time), and this service carries out what
//! it asks (`service::broker`): every job of its own, those naming a
//! reservation and those accepted before a restart included. The careful
//! path decides one job at a time and holds the turn until it is at its
//! site, for what the core does not hold yet: jobs that reserve on their
//! best sites first (two phases at the sites), jobs queue adaptation may
//! move, and workflows' tasks, sent into their reservations.

use brokk_broker::submit::{Submission, SubmitError};

use super::*;

/// Dispatches in flight at once.
pub(super) const DISPATCH_CONCURRENCY: usize = 8;

/// Jobs the core decides in one turn.
pub(super) const DECISION_BATCH: usize = 64;

/// Batches being sent while the next is decided.
pub(super) const BATCHES_IN_FLIGHT: usize = 4;

/// Where a decided job went (the site's name and the submission), or why
/// it did not go.
type Outcome = Result<(String, Submission), SubmitError>;

impl Service {
    /// Dispatches every accepted job, taking the users in turn (each
    /// user's oldest first), so one user's thousand jobs do not keep
    /// everyone else's waiting behind them: the core's own first, then the
    /// rest one at a time, several at once.
    pub async fn dispatch_pending(&self) -> Result<(), ServiceError> {
        let held = self.dispatch_held().await;
        // The core's, by whether it took them, not whether it holds them
        // now: one it has just let go may still read as accepted here
        // until its end is stored, and would be sent again.
        let rest: Vec<StoredJob> = self
            .db
            .in_states(&[BrokerState::Accepted])
            .await?
            .into_iter()
            .filter(|j| !self.broker.took(&j.view.id))
            .collect();
        let pending = jobs::round_robin(rest, |j| &j.view.owner);
        let mut careful = pending.into_iter().peekable();
        let mut first_error = held.err();
        while careful.peek().is_some() {
            let mut set = tokio::task::JoinSet::new();
            for j in careful.by_ref().take(DISPATCH_CONCURRENCY) {
                let svc = self.clone();
                set.spawn(async move { svc.dispatch(j).await });
            }
            while let Some(r) = set.join_next().await {
                if let Err(e) = r.map_err(|e| ServiceError::Unavailable(e.to_string())).and_then(|r| r) {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// For a job accepted before this process started: the site that already
    /// has it under its idempotency key, if any, with the site's id for it.
    pub(super) async fn already_at(&self, key: &str) -> Result<Option<(String, String)>, ServiceError> {
        let sites = self.sites();
        let key = key.to_string();
        tokio::task::spawn_blocking(move || {
            for s in sites.iter() {
                match s.client.job_by_key(&key) {
                    Ok(Some(v)) => return Ok(Some((s.name.clone(), v.id))),
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

    pub(super) async fn dispatch(&self, stored: StoredJob) -> Result<(), ServiceError> {
        if self.inherited(&stored.view.id) {
            match self.already_at(&stored.view.id).await {
                Ok(Some((name, site_job))) => {
                    self.looked_for(&stored.view.id);
                    let mut v = stored.view;
                    let detail = format!("to {name} (found there after a restart)");
                    let found = Change::Dispatch {
                        site: name,
                        site_job,
                        tts: None,
                        ttd: None,
                    };
                    self.change(&mut v, found, now(), Some(detail)).await?;
                    return Ok(());
                }
                Ok(None) => self.looked_for(&stored.view.id),
                Err(e) => {
                    self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("not dispatching {} yet: {e}", stored.view.id);
                    return Ok(());
                }
            }
        }
        let job: Job = serde_json::from_str(&stored.spec).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        let turn = self.turn().await;
        // Its owner may have held or cancelled it since it was read.
        if self.db.state(&stored.view.id).await? != Some(BrokerState::Accepted) {
            return Ok(());
        }
        let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
        let route = jobs::route(&job, &prefs, self.info.exact(), self.inherited(&stored.view.id));
        let reserve_top_k = match route {
            jobs::Route::Reservation(rid) => return self.dispatch_into(stored, job, &rid).await,
            jobs::Route::OneByOne { reserve_top_k } => reserve_top_k,
            // Looked for at the sites just now: sent here all the same.
            jobs::Route::Batched => 0,
        };
        self.refresh_stale().await;
        let sites = self.sites();
        let info = self.info.clone();
        let key = stored.view.id.clone();
        let user = stored.view.owner.clone();
        let runs_as = stored.view.runs_as.clone();
        let t = now();
        let uploads = self.uploads.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, Some(&uploads), Some(&key), &user);
            if let Some(u) = &runs_as {
                clients.iter_mut().for_each(|c| c.runs_for(u));
            }
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            // Reservation-backed when the user asks for it: a hold on the best
            // site, committed by the submission (seed 003's two phases).
            let opts = SubmitOptions {
                reserve_top_k,
                ..SubmitOptions::default()
            };
            submit(&job, &prefs, "broker", &mut refs, t, opts).map(|s| {
                let name = sites
                    .iter()
                    .find(|e| e.client.endpoint() == s.endpoint)
                    .map_or(s.endpoint.clone(), |e| e.name.clone());
                (name, s)
            })
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        self.counters.decisions.fetch_add(1, Ordering::Relaxed);
        self.settle(stored.view, outcome, t).await
    }

    /// Records where job `v`, decided at `t`, went, or why it did not go
    /// ([`Service::consequence`]).
    async fn settle(&self, mut v: BrokerJob, outcome: Outcome, t: Time) -> Result<(), ServiceError> {
        if let Some((change, at, detail)) = self.consequence(outcome, t) {
            self.change(&mut v, change, at, detail).await?;
        }
        Ok(())
    }

    /// What a decision's outcome does to its job, counted: dispatched at
    /// the second it was decided (a replay decides it at that second);
    /// nothing when a site that did not answer may be the one able to run
    /// it (the job waits for the next round); failed otherwise.
    fn consequence(&self, outcome: Outcome, t: Time) -> Option<(Change, Time, Option<String>)> {
        match outcome {
            Ok((name, s)) => {
                self.counters
                    .site_errors
                    .fetch_add(s.failed.len() as u64, Ordering::Relaxed);
                let detail = match s.reservation {
                    Some(r) => format!("to {name}, in reservation {}", r.0),
                    None => format!("to {name}"),
                };
                let sent = Change::Dispatch {
                    site: name,
                    site_job: s.handle.0,
                    tts: Some(s.prediction.tts().0),
                    ttd: Some(s.prediction.ttd().0),
                };
                Some((sent, t, Some(detail)))
            }
            Err(e) if e.worth_retrying() => {
                if let SubmitError::NoSite { failed, .. } = &e {
                    self.counters
                        .site_errors
                        .fetch_add(failed.len() as u64, Ordering::Relaxed);
                }
                None
            }
            Err(e) => {
                self.counters.undispatchable.fetch_add(1, Ordering::Relaxed);
                Some((Change::Fail(e.to_string()), now(), Some(e.to_string())))
            }
        }
    }

    /// Sends a job into the broker reservation `rid` at its site.
    pub(super) async fn dispatch_into(&self, stored: StoredJob, job: Job, rid: &str) -> Result<(), ServiceError> {
        let mut v = stored.view;
        // Checked again here: the job may have been stored before the check
        // existed, and the reservation may have been cancelled since.
        let r = match self.own_committed_reservation(&v.owner, rid).await {
            Ok(r) => r,
            Err(ServiceError::Unavailable(e)) => return Err(ServiceError::Unavailable(e)),
            Err(e) => {
                let why = format!("it cannot run in reservation {rid}: {e}");
                self.change(&mut v, Change::Fail(why.clone()), now(), Some(why)).await?;
                return Ok(());
            }
        };
        let Some(site) = self.site(&r.site) else {
            return Err(ServiceError::Unavailable(format!(
                "site {} is no longer configured",
                r.site
            )));
        };
        let key = v.id.clone();
        let user = v.owner.clone();
        let uploads = self.uploads.clone();
        let in_workflow = v.member.workflow().is_some();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut c = site.client.clone();
            super::sites::send_uploads(&c, &uploads, &user, &job)?;
            // A workflow's reservation was made for its task: it ends with it.
            c.set_release_with_job(in_workflow);
            c.set_idempotency_key(Some(key));
            c.set_on_behalf_of(Some(user));
            c.submit("broker", &job, Some(brokk_core::ReservationId(r.site_reservation)))
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        self.counters.decisions.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok(h) => {
                let detail = format!("to {}, in reservation {}", r.site, r.id);
                let sent = Change::Dispatch {
                    site: r.site.clone(),
                    site_job: h.0,
                    tts: Some((r.start - now()).0.max(0)),
                    ttd: None,
                };
                self.change(&mut v, sent, now(), Some(detail)).await?;
            }
            Err(brokk_broker::SiteError::Unavailable(e)) => {
                // The site is down: the job waits for the next round.
                self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("dispatching {} into {rid}: {e}", v.id);
            }
            Err(e) => {
                let why = format!("the site refused the job: {e}");
                self.change(&mut v, Change::Fail(why.clone()), now(), Some(why)).await?;
            }
        }
        Ok(())
    }
}
