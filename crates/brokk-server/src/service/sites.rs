//! The sites as the service sees them: their clients, change-feed cursors
//! and the broker core's information, which brokering decisions read
//! through.

use brokk_broker::info::{Answer, FetchFailure, FetchOptions};
use brokk_site::uploads::Uploads;

use super::*;

/// A site the service dispatches to.
#[derive(Debug, Clone)]
pub struct SiteEntry {
    /// Its name.
    pub name: String,
    /// The client.
    pub client: RemoteSite,
    /// Where the service is in the site's change feed: (epoch, version), and
    /// since when it has waited on a change it cannot place yet.
    pub cursor: Arc<std::sync::Mutex<Cursor>>,
}

/// A position in a site's change feed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cursor {
    /// The site's run.
    pub epoch: u64,
    /// The last version applied.
    pub version: u64,
    /// Since when a change for a job the service has not recorded yet holds
    /// the cursor back.
    pub stalled: Option<std::time::Instant>,
}

impl SiteEntry {
    /// A site entry at the start of its feed.
    pub fn new(name: String, client: RemoteSite) -> SiteEntry {
        SiteEntry {
            name,
            client,
            cursor: Arc::default(),
        }
    }
}

/// What the sites last published, as every brokering decision reads it:
/// the broker core's information (one answer per site, refreshed under the
/// core's rule: stale, changed by the broker or never asked, and not while
/// a site pushes its own), fetched under the fetch rules (all at once up to
/// a bound, each within a timeout).
#[derive(Debug)]
pub struct SiteInfo {
    /// The broker core, which keeps the answers for every decision, its
    /// own and those of the rules the service still holds, and is told of
    /// every change the service's own handlers make at a site.
    core: Arc<std::sync::Mutex<brokk_broker::broker::BrokerCore>>,
    fetch: FetchOptions,
    /// One brokering decision at a time, from its refresh to its last call
    /// to a site: each sees what the ones before it did (a burst spreads
    /// over the sites, and each prediction counts the jobs sent before it).
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Answers are fetched again at every decision (a time-to-live of
    /// zero): each decision must then see every earlier one landed, so it
    /// holds the turn until its job is at its site.
    exact: bool,
}

impl SiteInfo {
    /// The core's information, fetched under `fetch`; `exact` when it
    /// lives for no time at all.
    pub fn new(
        exact: bool,
        fetch: FetchOptions,
        core: Arc<std::sync::Mutex<brokk_broker::broker::BrokerCore>>,
    ) -> SiteInfo {
        SiteInfo {
            core,
            fetch,
            turn: Arc::default(),
            exact,
        }
    }

    /// Whether every decision reads the sites' present state (see `exact`).
    pub fn exact(&self) -> bool {
        self.exact
    }

    fn core(&self) -> std::sync::MutexGuard<'_, brokk_broker::broker::BrokerCore> {
        self.core.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Looks at the sites that found their information fresh, and those
    /// that asked again.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        self.core().lookups()
    }

    fn get(&self, site: &str) -> Option<Answer> {
        let core = self.core();
        core.answer(core.site_position(site)?)
    }

    pub(super) fn forget(&self, site: &str) {
        let mut core = self.core();
        if let Some(k) = core.site_position(site) {
            core.changed(k);
        }
    }

    /// Keeps what `site` pushed at `taken` (by the wall clock) as its
    /// answer, and tells the core it pushes (or, `answer` being `None`,
    /// that its stream is down: it is asked again).
    pub(super) fn pushed(&self, site: &str, answer: Option<&Answer>, taken: Time) {
        let mut core = self.core();
        if let Some(k) = core.site_position(site) {
            if let Some(answer) = answer {
                core.informed(k, answer.clone(), taken);
            }
            core.pushed(k, answer.is_some());
        }
    }

    /// Keeps what `site` answered when asked at `taken`.
    fn store(&self, site: &str, answer: &Answer, taken: Time) {
        let mut core = self.core();
        if let Some(k) = core.site_position(site) {
            core.informed(k, answer.clone(), taken);
        }
    }
}

impl CachedSite {
    /// The site's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Asks nothing more of the site for the decision after `until`: its
    /// probes and reservations then answer that the time is up.
    pub(super) fn answer_until(&mut self, until: std::time::Instant) {
        self.until = Some(until);
    }

    /// Refuses to ask the site once the decision's time is up.
    fn in_time(&self) -> Result<(), brokk_broker::SiteError> {
        match self.until {
            Some(until) if std::time::Instant::now() >= until => Err(brokk_broker::SiteError::Unavailable(format!(
                "{}: the decision's time is up",
                self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Writes every reservation this site grants down in `holds`.
    pub(super) fn write_holds_to(&mut self, holds: Arc<super::holds::AdmissionHolds>) {
        self.holds = Some(holds);
    }

    /// `result` of a call that changed the site: what the cache holds of
    /// it is out of date once the call went through.
    fn changed<T>(&self, result: Result<T, brokk_broker::SiteError>) -> Result<T, brokk_broker::SiteError> {
        if result.is_ok() {
            self.info.forget(&self.name);
        }
        result
    }
}

/// A site as one brokering decision sees it: the client, with the
/// information the last refresh left in the cache.
pub(super) struct CachedSite {
    name: String,
    client: RemoteSite,
    info: Arc<SiteInfo>,
    /// The broker's uploads, sent ahead of a job that names one.
    uploads: Option<Uploads>,
    /// The user the decision is for: the uploads are this user's.
    owner: String,
    /// Where an admission writes down the holds it is granted.
    holds: Option<Arc<super::holds::AdmissionHolds>>,
    /// After this, probes and reservations are not sent: the decision's
    /// time is up (a workflow admission's bound).
    until: Option<std::time::Instant>,
}

/// The sites as one brokering decision sees them, submitting under `key`
/// for the user `owner`, with that user's `uploads` where it submits jobs.
pub(super) fn cached_sites(
    sites: &[SiteEntry],
    info: &Arc<SiteInfo>,
    uploads: Option<&Uploads>,
    key: Option<&str>,
    owner: &str,
) -> Vec<CachedSite> {
    sites
        .iter()
        .map(|s| {
            let mut client = s.client.clone();
            client.set_idempotency_key(key.map(str::to_string));
            client.set_on_behalf_of(Some(owner.to_string()));
            // What the broker reserves for a job (`--reserve`, a
            // co-allocation's part) ends with that job.
            client.set_release_with_job(true);
            CachedSite {
                name: s.name.clone(),
                client,
                info: info.clone(),
                uploads: uploads.cloned(),
                owner: owner.to_string(),
                holds: None,
                until: None,
            }
        })
        .collect()
}

/// Sends the site the uploads of `user` that `job` names and the site does
/// not hold yet (the site keeps them by content, so each goes once).
pub(super) fn send_uploads(
    client: &RemoteSite,
    uploads: &Uploads,
    user: &str,
    job: &Job,
) -> Result<(), brokk_broker::SiteError> {
    for f in &job.input_files {
        let Some(sha) = f.source.as_deref().and_then(brokk_site::uploads::digest_of) else {
            continue;
        };
        if client.has_upload(sha)? {
            continue;
        }
        let path = uploads
            .path(user, sha)
            .map_err(|e| brokk_broker::SiteError::Unavailable(format!("input file {}: {e}", f.name)))?;
        client.put_upload(sha, &path)?;
    }
    Ok(())
}

/// What a cached answer says of a site, as a site's own answer would;
/// `None` when there is none.
fn known(answer: Option<&Answer>) -> Option<Result<ResourceInfo, brokk_broker::SiteError>> {
    Some(match answer? {
        Ok(info) => Ok(info.clone()),
        Err(FetchFailure::Error(e)) => Err(e.clone()),
        Err(f @ FetchFailure::Timeout(_)) => Err(brokk_broker::SiteError::Unavailable(f.to_string())),
    })
}

impl Site for CachedSite {
    fn endpoint(&self) -> &str {
        self.client.endpoint()
    }
    fn info(&self) -> Result<ResourceInfo, brokk_broker::SiteError> {
        // A decision that did not refresh first asks the site itself.
        known(self.info.get(&self.name).as_ref()).unwrap_or_else(|| self.client.info())
    }
    fn probe(
        &self,
        req: &brokk_core::Request,
        k: usize,
    ) -> Result<Vec<brokk_core::Candidate>, brokk_broker::SiteError> {
        self.in_time()?;
        self.client.probe(req, k)
    }
    fn reserve(
        &mut self,
        owner: &str,
        req: &brokk_core::Request,
        hold: Option<Time>,
    ) -> Result<brokk_core::Reply, brokk_broker::SiteError> {
        self.in_time()?;
        let r = self.client.reserve(owner, req, hold);
        if let (Some(holds), Ok(brokk_core::Reply::Granted { id, .. })) = (&self.holds, &r) {
            holds.granted(&self.name, *id);
        }
        self.changed(r)
    }
    fn modify(
        &mut self,
        owner: &str,
        id: brokk_core::ReservationId,
        change: brokk_core::Change,
    ) -> Result<Time, brokk_broker::SiteError> {
        let r = self.client.modify(owner, id, change);
        self.changed(r)
    }
    fn commit(&mut self, owner: &str, id: brokk_core::ReservationId) -> Result<(), brokk_broker::SiteError> {
        let r = self.client.commit(owner, id);
        self.changed(r)
    }
    fn cancel(&mut self, owner: &str, id: brokk_core::ReservationId) -> Result<(), brokk_broker::SiteError> {
        let r = self.client.cancel(owner, id);
        self.changed(r)
    }
    fn submit(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: Option<brokk_core::ReservationId>,
    ) -> Result<JobHandle, brokk_broker::SiteError> {
        if let Some(u) = &self.uploads {
            send_uploads(&self.client, u, &self.owner, job)?;
        }
        let r = self.client.submit(owner, job, reservation);
        self.changed(r)
    }
    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: brokk_core::ReservationId,
        key: &str,
    ) -> Result<JobHandle, brokk_broker::SiteError> {
        if let Some(u) = &self.uploads {
            send_uploads(&self.client, u, &self.owner, job)?;
        }
        let r = self.client.submit_held(owner, job, reservation, key);
        self.changed(r)
    }
    fn status(&self, job: &JobHandle) -> Result<brokk_broker::JobState, brokk_broker::SiteError> {
        self.client.status(job)
    }
    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), brokk_broker::SiteError> {
        let r = self.client.cancel_job(owner, job);
        self.changed(r)
    }
}

impl Service {
    /// A brokering decision's turn: waits for the one before it to finish,
    /// then fetches, all at once, the information of every site whose
    /// cached answer is stale. The decision holds the guard until its last
    /// call to a site.
    pub(super) async fn decision_turn(&self) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = self.turn().await;
        self.refresh_stale().await;
        turn
    }

    /// The turn alone, for a change that decides nothing but must not cross
    /// a decision about the same job (hold, release, cancel before dispatch).
    pub(super) async fn turn(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.info.turn.clone().lock_owned().await
    }

    /// Fetches, all at once, the information of every site the core finds
    /// stale; called with the turn held.
    pub(super) async fn refresh_stale(&self) {
        let (_, effects, _) = self.broker.run(|c| c.stale(now()));
        if let Err(e) = self.carry_out(effects).await {
            tracing::warn!("refreshing the sites' information: {e}");
        }
    }

    /// Asks `names` for their information concurrently, within the fetch
    /// rules' bound and timeout, and keeps the answers.
    pub(super) async fn fetch_info(&self, names: Vec<String>) -> Vec<(String, Answer)> {
        use futures_util::StreamExt;
        let rules = self.info.fetch;
        let timeout = std::time::Duration::from_secs(rules.timeout.0.max(1).unsigned_abs());
        let sites: Vec<SiteEntry> = names.iter().filter_map(|n| self.site(n)).collect();
        let taken = now();
        let answers: Vec<(String, Answer)> = futures_util::stream::iter(sites)
            .map(|s| async move {
                let client = s.client.clone();
                let started = std::time::Instant::now();
                let asked = tokio::time::timeout(timeout, tokio::task::spawn_blocking(move || client.info())).await;
                let ok = matches!(asked, Ok(Ok(Ok(_))));
                self.per_site.fetched(&s.name, started.elapsed(), ok);
                let answer = match asked {
                    Ok(Ok(Ok(info))) => Ok(info),
                    Ok(Ok(Err(e))) => Err(FetchFailure::Error(e)),
                    Ok(Err(e)) => Err(FetchFailure::Error(brokk_broker::SiteError::Unavailable(e.to_string()))),
                    Err(_) => Err(FetchFailure::Timeout(rules.timeout)),
                };
                (s.name, answer)
            })
            .buffer_unordered(rules.concurrency.max(1))
            .collect()
            .await;
        for (name, answer) in &answers {
            self.info.store(name, answer, taken);
        }
        if let Some(record) = &self.record {
            let at = now();
            for (name, answer) in &answers {
                record.site(name, at, answer.as_ref().map_err(ToString::to_string));
            }
        }
        answers
    }

    /// What every site reports now, in configuration order.
    pub async fn resources(&self) -> Vec<Result<ResourceInfo, String>> {
        self.reports(self.sites()).await
    }

    /// What `sites` report now, in their order.
    pub async fn reports(&self, sites: Arc<Vec<SiteEntry>>) -> Vec<Result<ResourceInfo, String>> {
        let names: Vec<String> = sites.iter().map(|s| s.name.clone()).collect();
        let mut answers = self.fetch_info(names).await;
        sites
            .iter()
            .map(|s| {
                let at = answers.iter().position(|(n, _)| *n == s.name);
                match at.map(|k| answers.swap_remove(k).1) {
                    Some(Ok(mut info)) => {
                        info.name = s.name.clone();
                        Ok(info)
                    }
                    Some(Err(f)) => Err(f.to_string()),
                    None => Err("not asked".to_string()),
                }
            })
            .collect()
    }
}
