//! Dispatch: every accepted job through the broker's submission, the users
//! taken in turn, jobs accepted before a restart looked for first.
//!
//! Two paths, chosen by the broker's rule ([`brokk_broker::jobs::route`]).
//! The pipelined one decides a batch of jobs in one turn
//! against the information cache, each counted where it goes
//! ([`brokk_broker::info::book`]) so the next sees it, and sends them after
//! the turn, several at once; a site that refuses one sends it to the next
//! of its plan. The careful one decides one job at a time and holds the
//! turn until it is at its site: for jobs that reserve (two phases at the
//! sites), for jobs accepted before a restart (looked for at the sites
//! first), and when the cache lives for no time at all (every decision
//! then sees every earlier one landed, as the simulator's exact mode does).

use std::collections::HashSet;

use brokk_broker::predict::Prediction;
use brokk_broker::submit::{send_in_order, Plan, Submission, SubmitError};

use super::*;

/// Dispatches in flight at once.
pub(super) const DISPATCH_CONCURRENCY: usize = 8;

/// Jobs decided in one turn.
const DECISION_BATCH: usize = 64;

/// Batches being sent while the next is decided.
const BATCHES_IN_FLIGHT: usize = 4;

/// Where a decided job went (the site's name and the submission), or why
/// it did not go.
type Outcome = Result<(String, Submission), SubmitError>;

/// A job to decide: its record, its description and its preferences.
pub(super) type Pending = (StoredJob, Job, JobPreferences);

/// A job decided in a batch, to be sent after the turn.
#[derive(Debug)]
pub(super) struct Decided {
    /// Its record.
    pub stored: StoredJob,
    /// Its description.
    pub job: Job,
    /// Where it may go, best first.
    pub plan: Result<Plan, SubmitError>,
    /// Sites the decision could not consider, and why.
    pub failed: Vec<(String, brokk_broker::SiteError)>,
    /// The second it was decided.
    pub t: Time,
}

/// Jobs decided and on their way to a site: the turn no longer covers
/// them, so a hold or a cancel of one waits until it has landed.
#[derive(Debug, Default)]
pub struct Sending {
    ids: std::sync::Mutex<HashSet<String>>,
    landed: Notify,
}

impl Sending {
    fn start(&self, ids: impl IntoIterator<Item = String>) {
        if let Ok(mut set) = self.ids.lock() {
            set.extend(ids);
        }
    }

    fn land(&self, id: &str) {
        if let Ok(mut set) = self.ids.lock() {
            set.remove(id);
        }
        self.landed.notify_waiters();
    }

    pub(super) fn is_sending(&self, id: &str) -> bool {
        self.ids.lock().is_ok_and(|set| set.contains(id))
    }

    /// Waits until job `id` is not on its way to a site.
    pub(super) async fn landed(&self, id: &str) {
        loop {
            let landed = self.landed.notified();
            tokio::pin!(landed);
            landed.as_mut().enable();
            if !self.is_sending(id) {
                return;
            }
            landed.await;
        }
    }
}

impl Service {
    /// Dispatches every accepted job, taking the users in turn (each
    /// user's oldest first), so one user's thousand jobs do not keep
    /// everyone else's waiting behind them.
    pub async fn dispatch_pending(&self) -> Result<(), ServiceError> {
        let pending = jobs::round_robin(self.db.in_states(&[BrokerState::Accepted]).await?, |j| &j.view.owner);
        let mut sends = tokio::task::JoinSet::new();
        // Every task is joined, whatever fails: a send dropped half-way
        // would leave its jobs marked as on their way for ever.
        let mut first_error = None;
        let mut joined = |r: Result<Result<(), ServiceError>, tokio::task::JoinError>| {
            if let Err(e) = r.map_err(|e| ServiceError::Unavailable(e.to_string())).and_then(|r| r) {
                first_error.get_or_insert(e);
            }
        };
        let mut pending = pending.into_iter().peekable();
        while pending.peek().is_some() {
            let (mut careful, mut quick) = (Vec::new(), Vec::new());
            for stored in pending.by_ref().take(DECISION_BATCH) {
                match self.pipelined(&stored) {
                    Some((job, prefs)) => quick.push((stored, job, prefs)),
                    None => careful.push(stored),
                }
            }
            let mut careful = careful.into_iter().peekable();
            while careful.peek().is_some() {
                let mut set = tokio::task::JoinSet::new();
                for j in careful.by_ref().take(DISPATCH_CONCURRENCY) {
                    let svc = self.clone();
                    set.spawn(async move { svc.dispatch(j).await });
                }
                while let Some(r) = set.join_next().await {
                    joined(r);
                }
            }
            if quick.is_empty() {
                continue;
            }
            let decided = match self.decide(quick).await {
                Ok(d) => d,
                Err(e) => {
                    joined(Ok(Err(e)));
                    break;
                }
            };
            while sends.len() >= BATCHES_IN_FLIGHT {
                if let Some(r) = sends.join_next().await {
                    joined(r);
                }
            }
            let svc = self.clone();
            sends.spawn(async move { svc.send(decided).await });
        }
        while let Some(r) = sends.join_next().await {
            joined(r);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The job's description and preferences when it takes the pipelined
    /// path (see the module's comment); nothing is read with exact
    /// information, where every job goes one by one.
    fn pipelined(&self, stored: &StoredJob) -> Option<(Job, JobPreferences)> {
        // Exact information sends every job one by one: nothing to read.
        if self.info.exact() {
            return None;
        }
        let job: Job = serde_json::from_str(&stored.spec).ok()?;
        let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
        let route = jobs::route(&job, &prefs, self.info.exact(), self.inherited(&stored.view.id));
        (route == jobs::Route::Batched).then_some((job, prefs))
    }

    /// Decides where each job still accepted goes, in one turn and without
    /// a call to a site beyond refreshing what is stale.
    async fn decide(&self, batch: Vec<Pending>) -> Result<Vec<Decided>, ServiceError> {
        let turn = self.turn().await;
        self.refresh_stale().await;
        // Its owner may have held or cancelled it since it was read.
        let ids: Vec<&str> = batch.iter().map(|p| p.0.view.id.as_str()).collect();
        let states = self.db.states(&ids).await?;
        let still: Vec<Pending> = batch
            .into_iter()
            .filter(|p| states.get(&p.0.view.id) == Some(&BrokerState::Accepted))
            .collect();
        let decided = self.info.plan_all(&self.sites(), still, now());
        self.sending.start(decided.iter().map(|d| d.stored.view.id.clone()));
        drop(turn);
        self.counters
            .decisions
            .fetch_add(decided.len() as u64, Ordering::Relaxed);
        Ok(decided)
    }

    /// Sends decided jobs, several at once, and records where each went in
    /// one write; a hold or cancel of one of them waits until then.
    async fn send(&self, decided: Vec<Decided>) -> Result<(), ServiceError> {
        use futures_util::StreamExt;
        let ids: Vec<String> = decided.iter().map(|d| d.stored.view.id.clone()).collect();
        let sent: Vec<Result<(BrokerJob, Outcome, Time), ServiceError>> = futures_util::stream::iter(decided)
            .map(|d| self.send_one(d))
            .buffer_unordered(DISPATCH_CONCURRENCY)
            .collect()
            .await;
        let recorded = self.record_all(sent).await;
        for id in &ids {
            self.sending.land(id);
        }
        recorded
    }

    /// Applies each outcome to its job and stores them all at once; the
    /// first error, if any, after storing the rest.
    async fn record_all(
        &self,
        sent: Vec<Result<(BrokerJob, Outcome, Time), ServiceError>>,
    ) -> Result<(), ServiceError> {
        let mut first_error = None;
        let mut writes = Vec::with_capacity(sent.len());
        for r in sent {
            let (mut v, outcome, t) = match r {
                Ok(x) => x,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            let Some((change, at, detail)) = self.consequence(outcome, t) else {
                continue;
            };
            match jobs::apply(&mut v, change, at) {
                Ok(Applied::Unchanged) => {}
                Ok(Applied::Updated) => writes.push((v, None)),
                Ok(Applied::Entered(_)) => writes.push((v, Some((at, detail)))),
                Err(e) => {
                    first_error.get_or_insert(ServiceError::Conflict(e.to_string()));
                }
            }
        }
        let refs: Vec<(&BrokerJob, Option<crate::db::HistoryLine>)> =
            writes.iter().map(|(v, h)| (v, h.clone())).collect();
        self.db.update_all(&refs).await?;
        first_error.map_or(Ok(()), Err)
    }

    /// Sends one decided job down its plan until a site takes it; returns
    /// the job with where it went, or why it did not, and when it was decided.
    async fn send_one(&self, d: Decided) -> Result<(BrokerJob, Outcome, Time), ServiceError> {
        let Decided {
            stored,
            job,
            plan,
            mut failed,
            t,
        } = d;
        let plan = match plan {
            Ok(p) => p,
            Err(e) => return Ok((stored.view, Err(e), t)),
        };
        let Some(&(first, _)) = plan.candidates.first() else {
            let e = SubmitError::NoSite {
                excluded: plan.excluded,
                failed,
            };
            return Ok((stored.view, Err(e), t));
        };
        let sites = self.sites();
        let (info, uploads) = (self.info.clone(), self.uploads.clone());
        let (key, user, runs_as) = (
            stored.view.id.clone(),
            stored.view.owner.clone(),
            stored.view.runs_as.clone(),
        );
        let order: Vec<(usize, Prediction, Option<brokk_core::ReservationId>)> =
            plan.candidates.iter().map(|&(k, p)| (k, p, None)).collect();
        let cpus = job.cpus.unwrap_or(1);
        let outcome = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, Some(&uploads), Some(&key), &user);
            for c in &mut clients {
                c.booked();
                if let Some(u) = &runs_as {
                    c.runs_for(u);
                }
            }
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            let chosen = send_in_order(&job, "broker", &mut refs, &order, &mut failed);
            if chosen.as_ref().is_none_or(|(i, _)| *i > 0) {
                // The site it was counted at did not take it: ask that
                // site again at the next decision, and count it where it went.
                info.forget(&sites[first].name);
            }
            match chosen {
                Some((i, handle)) => {
                    let (k, prediction, _) = order[i];
                    if i > 0 {
                        info.book(&sites[k].name, cpus, brokk_broker::info::booked_wall(&prediction));
                    }
                    Ok((
                        sites[k].name.clone(),
                        Submission {
                            endpoint: sites[k].client.endpoint().to_string(),
                            handle,
                            reservation: None,
                            prediction,
                            failed,
                        },
                    ))
                }
                None => Err(SubmitError::NoSite {
                    excluded: plan.excluded,
                    failed,
                }),
            }
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        Ok((stored.view, outcome, t))
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
