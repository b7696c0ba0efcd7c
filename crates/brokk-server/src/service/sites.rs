//! The sites as the service sees them: their clients, change-feed cursors
//! and the information cache brokering decisions read through.

use super::*;

/// A site the service dispatches to.
#[derive(Debug, Clone)]
pub struct SiteEntry {
    /// Its name.
    pub name: String,
    /// The client.
    pub client: RemoteSite,
    /// Its last information and when it was fetched: brokering decisions
    /// within `info_ttl` share it, as the seeds' information cache does.
    pub info: Arc<std::sync::Mutex<Option<(std::time::Instant, ResourceInfo)>>>,
    /// How long its information is reused ([`INFO_TTL`] unless configured).
    pub info_ttl: std::time::Duration,
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
    /// A site entry with an empty cache.
    pub fn new(name: String, client: RemoteSite) -> SiteEntry {
        SiteEntry {
            name,
            client,
            info: Arc::default(),
            info_ttl: INFO_TTL,
            cursor: Arc::default(),
        }
    }
}

/// How long a site's information is reused for brokering decisions, by
/// default.
pub const INFO_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// A site as one dispatch sees it: the client, with information from the cache.
pub(super) struct CachedSite {
    entry: SiteEntry,
    client: RemoteSite,
    counters: Arc<Counters>,
}

/// The sites as one brokering decision sees them, submitting under `key`
/// for the user `owner`.
pub(super) fn cached_sites(
    sites: &[SiteEntry],
    counters: &Arc<Counters>,
    key: Option<&str>,
    owner: &str,
) -> Vec<CachedSite> {
    sites
        .iter()
        .map(|s| {
            let mut client = s.client.clone();
            client.set_idempotency_key(key.map(str::to_string));
            client.set_on_behalf_of(Some(owner.to_string()));
            CachedSite {
                entry: s.clone(),
                client,
                counters: counters.clone(),
            }
        })
        .collect()
}

impl Site for CachedSite {
    fn endpoint(&self) -> &str {
        self.client.endpoint()
    }
    fn info(&self) -> Result<ResourceInfo, brokk_broker::SiteError> {
        if let Ok(cache) = self.entry.info.lock() {
            if let Some((at, info)) = cache.as_ref() {
                if at.elapsed() < self.entry.info_ttl {
                    self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                    return Ok(info.clone());
                }
            }
        }
        self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        let info = self.client.info()?;
        if let Ok(mut cache) = self.entry.info.lock() {
            *cache = Some((std::time::Instant::now(), info.clone()));
        }
        Ok(info)
    }
    fn probe(
        &self,
        req: &brokk_core::Request,
        k: usize,
    ) -> Result<Vec<brokk_core::Candidate>, brokk_broker::SiteError> {
        self.client.probe(req, k)
    }
    fn reserve(
        &mut self,
        owner: &str,
        req: &brokk_core::Request,
        hold: Option<Time>,
    ) -> Result<brokk_core::Reply, brokk_broker::SiteError> {
        self.client.reserve(owner, req, hold)
    }
    fn modify(
        &mut self,
        owner: &str,
        id: brokk_core::ReservationId,
        change: brokk_core::Change,
    ) -> Result<Time, brokk_broker::SiteError> {
        self.client.modify(owner, id, change)
    }
    fn commit(&mut self, owner: &str, id: brokk_core::ReservationId) -> Result<(), brokk_broker::SiteError> {
        self.client.commit(owner, id)
    }
    fn cancel(&mut self, owner: &str, id: brokk_core::ReservationId) -> Result<(), brokk_broker::SiteError> {
        self.client.cancel(owner, id)
    }
    fn submit(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: Option<brokk_core::ReservationId>,
    ) -> Result<JobHandle, brokk_broker::SiteError> {
        self.client.submit(owner, job, reservation)
    }
    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: brokk_core::ReservationId,
        key: &str,
    ) -> Result<JobHandle, brokk_broker::SiteError> {
        self.client.submit_held(owner, job, reservation, key)
    }
    fn status(&self, job: &JobHandle) -> Result<brokk_broker::JobState, brokk_broker::SiteError> {
        self.client.status(job)
    }
    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), brokk_broker::SiteError> {
        self.client.cancel_job(owner, job)
    }
}

impl Service {
    /// What every site reports now.
    pub async fn resources(&self) -> Vec<Result<ResourceInfo, String>> {
        let sites = self.sites.clone();
        tokio::task::spawn_blocking(move || {
            sites
                .iter()
                .map(|s| {
                    s.client.info().map(|mut i| {
                        i.name = s.name.clone();
                        i
                    })
                })
                .map(|r| r.map_err(|e| e.to_string()))
                .collect()
        })
        .await
        .unwrap_or_default()
    }
}
