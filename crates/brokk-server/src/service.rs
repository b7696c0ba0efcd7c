//! The service's operations: accept (translate, validate, store), list, show,
//! cancel, files and resources; dispatch through the broker core to the
//! sites; and polling the sites for the jobs' progress.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brokk_broker::adapt::{adapt, AdaptOptions, Adapted, Tracked};
use brokk_broker::coalloc::{coallocate, CoJob, CoRequest};
use brokk_broker::submit::{submit, SubmitOptions};
use brokk_broker::{JobHandle, Site};
use brokk_jdl::{detect, read, Format, ReadOptions};
use brokk_model::{Job, JobPreferences, ResourceInfo, Time};
use brokk_proto::wire::{
    Accepted, BrokerJob, BrokerReservation, BrokerReservationRequest, CoallocRequest, Coallocated, JobPhase,
    SubmitRequest,
};
use brokk_proto::RemoteSite;
use tokio::sync::Notify;

use crate::db::{Db, DbError, StoredJob};

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServiceError {
    /// Malformed request or description (with line and column).
    #[error("{0}")]
    BadRequest(String),
    /// Another user's job.
    #[error("job {0} belongs to someone else")]
    Forbidden(String),
    /// No such job or file.
    #[error("{0} not found")]
    NotFound(String),
    /// The request conflicts with what the sites can do.
    #[error("{0}")]
    Conflict(String),
    /// A site or the database failed.
    #[error("{0}")]
    Unavailable(String),
}

impl From<DbError> for ServiceError {
    fn from(e: DbError) -> Self {
        ServiceError::Unavailable(e.to_string())
    }
}

/// A site the service dispatches to.
#[derive(Debug, Clone)]
pub struct SiteEntry {
    /// Its name.
    pub name: String,
    /// The client.
    pub client: RemoteSite,
    /// Its last information and when it was fetched: brokering decisions
    /// within [`INFO_TTL`] share it, as the seeds' information cache does.
    pub info: Arc<std::sync::Mutex<Option<(std::time::Instant, ResourceInfo)>>>,
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

/// How long a change for an unknown job may hold a feed back.
const STALL_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

impl SiteEntry {
    /// A site entry with an empty cache.
    pub fn new(name: String, client: RemoteSite) -> SiteEntry {
        SiteEntry {
            name,
            client,
            info: Arc::default(),
            cursor: Arc::default(),
        }
    }
}

/// Bytes read from a site per chunk of a proxied file.
const FILE_CHUNK: usize = 64 * 1024;
/// Chunks of one proxied file buffered between the site and the user.
const FILE_CHUNKS_IN_FLIGHT: usize = 4;

/// What a site answered for a file, before its bytes.
#[derive(Debug, Clone)]
pub struct FileHead {
    /// A range of the file (206), not all of it.
    pub partial: bool,
    /// Bytes that follow, when the site said.
    pub length: Option<u64>,
    /// The site's `Content-Range`, for a partial answer.
    pub content_range: Option<String>,
}

/// A file on its way from a site: its head, then its bytes in chunks.
#[derive(Debug)]
pub struct FileStream {
    /// Status and lengths.
    pub head: FileHead,
    /// The bytes, in order; an error ends the stream.
    pub chunks: tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
}

/// A new job id.
fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

/// The co-allocation a job id belongs to (`GROUP-k`), if it is a part of one.
fn coallocation_of(id: &str) -> Option<&str> {
    id.rsplit_once('-').map(|(g, _)| g).filter(|g| g.starts_with('c'))
}

/// Settles a co-allocation a stop interrupted, given where each part is
/// (site and its job there, `None` for a part that never got there): when
/// every part waits at its site, its hold is committed and the
/// co-allocation completes (`true`); otherwise whatever reached a site is
/// cancelled there (`false`).
fn settle(parts: &[Option<(SiteEntry, String)>]) -> bool {
    let waiting: Option<Vec<(&SiteEntry, u64)>> = parts
        .iter()
        .map(|p| {
            let (site, job) = p.as_ref()?;
            let v = site.client.job(&JobHandle(job.clone())).ok()?;
            (!v.state.is_terminal()).then_some((site, v.reservation?))
        })
        .collect();
    if let Some(waiting) = waiting {
        let commit = |(site, r): &(&SiteEntry, u64)| {
            site.client
                .clone()
                .commit("broker", brokk_core::ReservationId(*r))
                .is_ok()
        };
        if waiting.iter().all(commit) {
            return true;
        }
    }
    for (site, job) in parts.iter().flatten() {
        let _ = site.client.clone().cancel_job("broker", &JobHandle(job.clone()));
    }
    false
}

/// The state of co-allocated jobs while their reservations are made.
pub const RESERVING: &str = "reserving";

/// How long a co-allocation's reservations are held before its jobs claim
/// them: the search and the submissions must finish within it.
const COALLOC_HOLD: brokk_model::Duration = brokk_model::Duration(300);

/// How long a site's information is reused for brokering decisions.
pub const INFO_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// Dispatches in flight at once.
const DISPATCH_CONCURRENCY: usize = 8;

/// A site as one dispatch sees it: the client, with information from the cache.
struct CachedSite {
    entry: SiteEntry,
    client: RemoteSite,
    counters: Arc<Counters>,
}

/// The sites as one brokering decision sees them, submitting under `key`
/// for the user `owner`.
fn cached_sites(sites: &[SiteEntry], counters: &Arc<Counters>, key: Option<&str>, owner: &str) -> Vec<CachedSite> {
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
                if at.elapsed() < INFO_TTL {
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
    fn status(&self, job: &JobHandle) -> Result<brokk_broker::JobState, brokk_broker::SiteError> {
        self.client.status(job)
    }
    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), brokk_broker::SiteError> {
        self.client.cancel_job(owner, job)
    }
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    /// Jobs accepted.
    pub accepted: AtomicU64,
    /// Brokering decisions made.
    pub decisions: AtomicU64,
    /// Jobs no site took.
    pub undispatchable: AtomicU64,
    /// Calls to sites that failed.
    pub site_errors: AtomicU64,
    /// Brokering decisions that reused a site's cached information.
    pub cache_hits: AtomicU64,
    /// ... and that had to ask the site.
    pub cache_misses: AtomicU64,
    /// Submit latency histogram: counts per bucket of [`LATENCY_BUCKETS`], then the sum in microseconds.
    pub submit_latency: [AtomicU64; LATENCY_BUCKETS.len() + 2],
}

/// Upper bounds of the submit-latency histogram, seconds.
pub const LATENCY_BUCKETS: [f64; 8] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0];

/// The service, shared by its handlers and tasks.
#[derive(Debug, Clone)]
pub struct Service {
    /// Records.
    pub db: Db,
    /// Sites, in configuration order.
    pub sites: Arc<Vec<SiteEntry>>,
    /// Counters.
    pub counters: Arc<Counters>,
    /// Wakes the dispatcher.
    pub wake: Arc<Notify>,
    /// When this process started: jobs accepted before it may have reached a
    /// site before a crash, so their dispatch first asks the sites.
    pub started: Time,
    /// Queue adaptation's margin.
    pub adapt_margin: brokk_model::Duration,
    /// What one user may hold at once.
    pub limits: crate::config::Limits,
}

pub use brokk_proto::wall_clock as now;

/// The broker states a site's job phase maps to.
fn broker_state(p: JobPhase) -> &'static str {
    match p {
        JobPhase::Accepted | JobPhase::StagingIn | JobPhase::Queued => "dispatched",
        JobPhase::Running | JobPhase::StagingOut => "running",
        JobPhase::Finished => "finished",
        JobPhase::Failed => "failed",
        JobPhase::Cancelled => "cancelled",
    }
}

/// `jobs` (oldest first) reordered to take their owners in turn: the
/// oldest job of each owner, then the second oldest of each, and so on, the
/// owners in the order of their oldest job.
fn round_robin_by_owner(jobs: Vec<StoredJob>) -> Vec<StoredJob> {
    let mut queues: Vec<(String, std::collections::VecDeque<StoredJob>)> = Vec::new();
    for j in jobs {
        match queues.iter_mut().find(|(o, _)| *o == j.view.owner) {
            Some((_, q)) => q.push_back(j),
            None => queues.push((j.view.owner.clone(), [j].into())),
        }
    }
    let mut out = Vec::new();
    while queues.iter().any(|(_, q)| !q.is_empty()) {
        for (_, q) in &mut queues {
            out.extend(q.pop_front());
        }
    }
    out
}

fn terminal(state: &str) -> bool {
    matches!(state, "finished" | "failed" | "cancelled")
}

impl Service {
    /// Records the latency of one submission.
    pub fn observe_submit(&self, seconds: f64) {
        let b = LATENCY_BUCKETS
            .iter()
            .position(|&ub| seconds <= ub)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counters.submit_latency[b].fetch_add(1, Ordering::Relaxed);
        self.counters.submit_latency[LATENCY_BUCKETS.len() + 1].fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    /// Translates and stores a description's jobs; they are dispatched later.
    pub async fn accept(&self, owner: &str, req: SubmitRequest) -> Result<Accepted, ServiceError> {
        let format = match &req.format {
            Some(f) => f
                .parse::<Format>()
                .map_err(|e| ServiceError::BadRequest(e.to_string()))?,
            None => detect(&req.description, None).ok_or_else(|| {
                ServiceError::BadRequest("format: cannot tell the description's language; give `format`".into())
            })?,
        };
        let parsed = read(format, &req.description, &ReadOptions::default())
            .map_err(|e| ServiceError::BadRequest(format!("description ({format}): {e}")))?;
        if parsed.jobs.is_empty() {
            return Err(ServiceError::BadRequest("description: it describes no job".into()));
        }
        self.within_job_limits(owner, parsed.jobs.len(), self.limits.jobs_per_submission)
            .await?;
        for job in &parsed.jobs {
            brokk_broker::select::validate_at(job, now()).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        }
        let warnings: Vec<String> = parsed.warnings.iter().map(|d| d.to_string()).collect();
        let mut jobs = parsed.jobs;
        if let Some(rid) = &req.reservation {
            if jobs.len() != 1 {
                return Err(ServiceError::BadRequest(
                    "reservation: one reservation holds one job".into(),
                ));
            }
            jobs[0].reservation = Some(rid.clone());
        }
        // A reservation named inside the description (JSON `reservation`,
        // `#SBATCH --reservation=`) is checked like one given beside it.
        for job in &jobs {
            if let Some(rid) = &job.reservation {
                self.own_committed_reservation(owner, rid).await?;
            }
        }
        let prefs = serde_json::to_string(&req.preferences.unwrap_or_default())
            .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        let mut ids = Vec::new();
        for job in &jobs {
            ids.push(
                self.store_new(
                    owner,
                    job,
                    format,
                    warnings.clone(),
                    prefs.clone(),
                    "accepted",
                    new_id(),
                )
                .await?
                .id,
            );
        }
        self.wake.notify_one();
        Ok(Accepted {
            id: ids[0].clone(),
            ids,
            warnings,
        })
    }

    /// Refuses `n` more jobs for `owner` beyond `per_request` at once or the
    /// queued-jobs limit.
    async fn within_job_limits(&self, owner: &str, n: usize, per_request: u64) -> Result<(), ServiceError> {
        if n as u64 > per_request {
            return Err(ServiceError::BadRequest(format!(
                "the request describes {n} jobs; this broker takes at most {per_request} at once"
            )));
        }
        let queued = self.db.unfinished_of(owner).await?.max(0) as u64;
        if queued + n as u64 > self.limits.queued_jobs {
            return Err(ServiceError::Conflict(format!(
                "you have {queued} unfinished jobs; this broker holds at most {} per user",
                self.limits.queued_jobs
            )));
        }
        Ok(())
    }

    /// Checks that `rid` is a committed broker reservation of `owner`'s.
    async fn own_committed_reservation(&self, owner: &str, rid: &str) -> Result<BrokerReservation, ServiceError> {
        let r = self
            .db
            .reservation(rid)
            .await?
            .filter(|r| r.state == "committed")
            .ok_or_else(|| ServiceError::NotFound(format!("reservation {rid}")))?;
        if r.owner != owner {
            return Err(ServiceError::Forbidden(format!("reservation {rid}")));
        }
        Ok(r)
    }

    /// Stores a new job `id` in `state` (`accepted`, or [`RESERVING`]).
    #[allow(clippy::too_many_arguments)] // one record's fields
    async fn store_new(
        &self,
        owner: &str,
        job: &Job,
        format: Format,
        warnings: Vec<String>,
        prefs: String,
        state: &str,
        id: String,
    ) -> Result<BrokerJob, ServiceError> {
        let stored = StoredJob {
            view: BrokerJob {
                id,
                owner: owner.to_string(),
                format: format.name().to_string(),
                state: state.into(),
                site: None,
                site_job: None,
                predicted_tts: None,
                predicted_ttd: None,
                submitted: now(),
                started: None,
                ended: None,
                exit_code: None,
                reason: None,
                warnings,
                stdout: job.stdout.clone(),
                history: Vec::new(),
            },
            spec: serde_json::to_string(job).map_err(|e| ServiceError::BadRequest(e.to_string()))?,
            prefs,
        };
        self.db.insert(&stored).await?;
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        Ok(stored.view)
    }

    async fn owned(&self, owner: &str, id: &str) -> Result<StoredJob, ServiceError> {
        let j = self
            .db
            .get(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("job {id}")))?;
        if j.view.owner != owner {
            return Err(ServiceError::Forbidden(id.to_string()));
        }
        Ok(j)
    }

    /// A job with its history.
    pub async fn job(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        Ok(self.owned(owner, id).await?.view)
    }

    /// The owner's jobs.
    pub async fn jobs(&self, owner: &str, state: Option<&str>) -> Result<Vec<BrokerJob>, ServiceError> {
        Ok(self.db.list(owner, state).await?)
    }

    fn site(&self, name: &str) -> Option<SiteEntry> {
        self.sites.iter().find(|s| s.name == name).cloned()
    }

    /// Parses one description that must hold exactly one job.
    fn one_job(description: &str, format: Option<&str>) -> Result<(Job, Format, Vec<String>), ServiceError> {
        let format = match format {
            Some(f) => f
                .parse::<Format>()
                .map_err(|e| ServiceError::BadRequest(e.to_string()))?,
            None => detect(description, None)
                .ok_or_else(|| ServiceError::BadRequest("format: cannot tell the description's language".into()))?,
        };
        let parsed = read(format, description, &ReadOptions::default())
            .map_err(|e| ServiceError::BadRequest(format!("description ({format}): {e}")))?;
        let [job] = <[Job; 1]>::try_from(parsed.jobs).map_err(|v| {
            ServiceError::BadRequest(format!("a co-allocated description must hold one job, not {}", v.len()))
        })?;
        brokk_broker::select::validate_at(&job, now()).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        if job.reservation.is_some() {
            return Err(ServiceError::BadRequest(
                "reservation: a co-allocated job runs in the reservation the co-allocation makes; remove it".into(),
            ));
        }
        Ok((job, format, parsed.warnings.iter().map(|d| d.to_string()).collect()))
    }

    /// Co-allocates jobs that must start together (seed 000's Algorithms 1
    /// and 2 over the sites), then submits each into its reservation.
    pub async fn coallocate(&self, owner: &str, req: CoallocRequest) -> Result<Coallocated, ServiceError> {
        if req.jobs.is_empty() || req.latest < req.earliest || req.delta.0 < 0 {
            return Err(ServiceError::BadRequest(
                "jobs: give at least one, with earliest <= latest and delta >= 0".into(),
            ));
        }
        self.within_job_limits(owner, req.jobs.len(), self.limits.coallocation_jobs)
            .await?;
        let mut parsed = Vec::new();
        for j in &req.jobs {
            parsed.push(Self::one_job(&j.description, j.format.as_deref())?);
        }
        // Durable before anything is reserved, in a state of their own that
        // the ordinary dispatcher never takes.
        let group = format!("c{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut stored = Vec::new();
        for (k, (job, format, warnings)) in parsed.iter().enumerate() {
            let id = format!("{group}-{k}");
            let v = self
                .store_new(owner, job, *format, warnings.clone(), "{}".into(), RESERVING, id)
                .await?;
            stored.push(v);
        }
        let sites = self.sites.clone();
        let counters = self.counters.clone();
        let jobs: Vec<Job> = parsed.iter().map(|p| p.0.clone()).collect();
        let keys: Vec<String> = stored.iter().map(|v| v.id.clone()).collect();
        let (earliest, latest, delta) = (req.earliest, req.latest, req.delta);
        let user = owner.to_string();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &counters, None, &user);
            let infos: Vec<Option<ResourceInfo>> = clients.iter().map(|c| c.info().ok()).collect();
            let co = CoRequest {
                jobs: jobs
                    .iter()
                    .map(|j| CoJob {
                        amount: j.cpus.unwrap_or(1).max(1),
                        duration: j.wall_time.unwrap_or(brokk_model::Duration::hours(1)),
                        memory_mib: 0,
                        resources: (0..infos.len())
                            .filter(|&k| infos[k].as_ref().is_some_and(|i| i.total_slots >= j.cpus.unwrap_or(1)))
                            .collect(),
                    })
                    .collect(),
                earliest,
                latest,
                delta,
                // Holds until every part is submitted: a broker that stops
                // mid-way leaves nothing booked once they lapse.
                hold: Some(now() + COALLOC_HOLD),
            };
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            let plan = coallocate(&co, &mut refs, "broker")
                .map_err(|_| ServiceError::BadRequest("no co-allocation fits the window on these sites".into()))?;
            // Two phases: every part is submitted into its hold, where it
            // waits; only then are the holds committed and the parts free to
            // start. Until the last commit, a failure (or a stop: the holds
            // lapse and take their parts with them) leaves nothing running.
            let mut placed = Vec::new();
            let undo = |placed: &[(usize, JobHandle, Time)], clients: &[CachedSite]| {
                for (s2, h2, _) in placed {
                    let _ = clients[*s2].client.clone().cancel_job("broker", h2);
                }
                for &(s2, r2, _) in &plan.assignments {
                    let _ = clients[s2].client.clone().cancel("broker", r2);
                }
            };
            for (k, &(site, rid, start)) in plan.assignments.iter().enumerate() {
                let mut c = clients[site].client.clone();
                c.set_idempotency_key(Some(keys[k].clone()));
                c.set_explicit_commit(true);
                match c.submit("broker", &jobs[k], Some(rid)) {
                    Ok(h) => placed.push((site, h, start)),
                    Err(e) => {
                        undo(&placed, &clients);
                        return Err(ServiceError::Unavailable(format!(
                            "submitting into the co-allocation: {e}"
                        )));
                    }
                }
            }
            for &(site, rid, _) in &plan.assignments {
                if let Err(e) = clients[site].client.clone().commit("broker", rid) {
                    undo(&placed, &clients);
                    return Err(ServiceError::Unavailable(format!("committing the co-allocation: {e}")));
                }
            }
            Ok(placed
                .into_iter()
                .map(|(site, h, start)| (sites[site].name.clone(), h.0, start))
                .collect::<Vec<_>>())
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        match outcome {
            Ok(placed) => {
                let mut out = Coallocated {
                    ids: Vec::new(),
                    sites: Vec::new(),
                    starts: Vec::new(),
                };
                for (mut v, (site, handle, start)) in stored.into_iter().zip(placed) {
                    v.state = "dispatched".into();
                    v.site = Some(site.clone());
                    v.site_job = Some(handle);
                    let detail = format!("to {site}, co-allocated to start at {start}");
                    self.db.update(&v, Some((now(), Some(detail)))).await?;
                    out.ids.push(v.id);
                    out.sites.push(site);
                    out.starts.push(start);
                }
                Ok(out)
            }
            Err(e) => {
                for mut v in stored {
                    v.state = "failed".into();
                    v.reason = Some(e.to_string());
                    v.ended = Some(now());
                    self.db.update(&v, Some((now(), Some(e.to_string())))).await?;
                }
                Err(e)
            }
        }
    }

    /// Cancels a job wherever it is.
    pub async fn cancel(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        let mut j = self.owned(owner, id).await?.view;
        if terminal(&j.state) {
            return Ok(j);
        }
        if let (Some(site), Some(handle)) = (j.site.clone().and_then(|s| self.site(&s)), j.site_job.clone()) {
            let r = tokio::task::spawn_blocking(move || {
                let mut c = site.client;
                c.cancel_job("broker", &JobHandle(handle))
            })
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            if let Err(e) = r {
                self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                return Err(ServiceError::Unavailable(format!("cancelling at the site: {e}")));
            }
        }
        j.state = "cancelled".into();
        j.reason = Some("cancelled by its owner".into());
        j.ended = Some(now());
        self.db.update(&j, Some((now(), None))).await?;
        Ok(j)
    }

    /// A file from the job's sandbox at its site, streamed: the site's answer
    /// is read in chunks on a blocking thread and handed over through a small
    /// channel, so the broker holds at most a few chunks of it at a time.
    /// `range` is a `Range` header passed on to the site.
    pub async fn file(
        &self,
        owner: &str,
        id: &str,
        name: &str,
        range: Option<String>,
    ) -> Result<FileStream, ServiceError> {
        brokk_site::sandbox::components(name).map_err(|m| ServiceError::BadRequest(format!("name: {m}")))?;
        let j = self.owned(owner, id).await?.view;
        let (Some(site), Some(handle)) = (j.site.and_then(|s| self.site(&s)), j.site_job) else {
            return Err(ServiceError::NotFound(format!(
                "file {name} of job {id} (not dispatched yet)"
            )));
        };
        let (head_tx, head_rx) = tokio::sync::oneshot::channel();
        let (tx, chunks) = tokio::sync::mpsc::channel(FILE_CHUNKS_IN_FLIGHT);
        let fname = name.to_string();
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            let mut resp = match site.client.file(&JobHandle(handle), &fname, range.as_deref()) {
                Ok(r) => r,
                Err(e) => {
                    let _ = head_tx.send(Err(e));
                    return;
                }
            };
            let header = |h| resp.headers().get(h).and_then(|v| v.to_str().ok()).map(str::to_string);
            let head = FileHead {
                partial: resp.status() == reqwest::StatusCode::PARTIAL_CONTENT,
                length: resp.content_length(),
                content_range: header(reqwest::header::CONTENT_RANGE),
            };
            if head_tx.send(Ok(head)).is_err() {
                return;
            }
            loop {
                let mut buf = vec![0u8; FILE_CHUNK];
                match resp.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        buf.truncate(n);
                        if tx.blocking_send(Ok(buf)).is_err() {
                            return; // the client went away
                        }
                    }
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                }
            }
        });
        let head = head_rx
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?
            .map_err(|e| match e {
                brokk_broker::SiteError::Unavailable(m) => ServiceError::Unavailable(m),
                brokk_broker::SiteError::Refused { reason, .. } => ServiceError::BadRequest(reason),
                _ => ServiceError::NotFound(format!("file {name} of job {id}")),
            })?;
        Ok(FileStream { head, chunks })
    }

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

    /// After a restart: co-allocations caught half-way are settled. One whose
    /// parts had all reached their sites, none of them ended, is completed
    /// (its remaining holds committed) and its parts recorded as dispatched;
    /// any other is undone: the parts found are cancelled where they are and
    /// the jobs fail with the reason (their holds lapse at the sites).
    pub async fn recover_coallocations(&self) -> Result<(), ServiceError> {
        let mut groups: std::collections::BTreeMap<String, Vec<StoredJob>> = Default::default();
        for stored in self.db.in_states(&[RESERVING]).await? {
            // This process's own are in progress.
            if stored.view.submitted <= self.started {
                let g = coallocation_of(&stored.view.id).unwrap_or(&stored.view.id).to_string();
                groups.entry(g).or_default().push(stored);
            }
        }
        for (_, parts) in groups {
            let mut found = Vec::new();
            for p in &parts {
                found.push(self.already_at(&p.view.id).await?);
            }
            let targets: Vec<Option<(SiteEntry, String)>> = found
                .iter()
                .map(|f| f.as_ref().and_then(|(name, job)| Some((self.site(name)?, job.clone()))))
                .collect();
            let completed = tokio::task::spawn_blocking(move || settle(&targets))
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            for (p, f) in parts.into_iter().zip(found) {
                let mut v = p.view;
                match (completed, f) {
                    (true, Some((site, site_job))) => {
                        v.state = "dispatched".into();
                        v.site = Some(site.clone());
                        v.site_job = Some(site_job);
                        let detail = format!("to {site}, co-allocated (completed after a restart)");
                        self.db.update(&v, Some((now(), Some(detail)))).await?;
                    }
                    _ => {
                        let why = "the broker stopped while co-allocating it; no part of it runs";
                        v.state = "failed".into();
                        v.reason = Some(why.into());
                        v.ended = Some(now());
                        self.db.update(&v, Some((now(), Some(why.into())))).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Dispatches every accepted job, a few at a time, taking the users in
    /// turn (each user's oldest first), so one user's thousand jobs do not
    /// keep everyone else's waiting behind them.
    pub async fn dispatch_pending(&self) -> Result<(), ServiceError> {
        let pending = round_robin_by_owner(self.db.in_states(&["accepted"]).await?);
        for chunk in pending.chunks(DISPATCH_CONCURRENCY) {
            let mut set = tokio::task::JoinSet::new();
            for j in chunk {
                let (svc, j) = (self.clone(), j.clone());
                set.spawn(async move { svc.dispatch(j).await });
            }
            while let Some(r) = set.join_next().await {
                r.map_err(|e| ServiceError::Unavailable(e.to_string()))??;
            }
        }
        Ok(())
    }

    /// For a job accepted before this process started: the site that already
    /// has it under its idempotency key, if any, with the site's id for it.
    async fn already_at(&self, key: &str) -> Result<Option<(String, String)>, ServiceError> {
        let sites = self.sites.clone();
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

    async fn dispatch(&self, stored: StoredJob) -> Result<(), ServiceError> {
        if stored.view.submitted <= self.started {
            match self.already_at(&stored.view.id).await {
                Ok(Some((name, site_job))) => {
                    let mut v = stored.view;
                    v.state = "dispatched".into();
                    v.site = Some(name.clone());
                    v.site_job = Some(site_job);
                    let detail = format!("to {name} (found there after a restart)");
                    self.db.update(&v, Some((now(), Some(detail)))).await?;
                    return Ok(());
                }
                Ok(None) => {}
                Err(e) => {
                    self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!("not dispatching {} yet: {e}", stored.view.id);
                    return Ok(());
                }
            }
        }
        let job: Job = serde_json::from_str(&stored.spec).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        if let Some(rid) = job.reservation.clone() {
            return self.dispatch_into(stored, job, &rid).await;
        }
        let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
        let sites = self.sites.clone();
        let counters = self.counters.clone();
        let key = stored.view.id.clone();
        let user = stored.view.owner.clone();
        let t = now();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &counters, Some(&key), &user);
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            // Reservation-backed when the user asks for it: a hold on the best
            // site, committed by the submission (seed 003's two phases).
            let opts = SubmitOptions {
                reserve_top_k: usize::from(prefs.use_reservations == Some(true)),
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
        self.counters.decisions.fetch_add(1, Ordering::Relaxed);
        let mut v = stored.view;
        match outcome {
            Ok((name, s)) => {
                self.counters
                    .site_errors
                    .fetch_add(s.failed.len() as u64, Ordering::Relaxed);
                v.state = "dispatched".into();
                v.site = Some(name.clone());
                v.site_job = Some(s.handle.0.clone());
                v.predicted_tts = Some(s.prediction.tts().0);
                v.predicted_ttd = Some(s.prediction.ttd().0);
                let detail = match s.reservation {
                    Some(r) => format!("to {name}, in reservation {}", r.0),
                    None => format!("to {name}"),
                };
                self.db.update(&v, Some((now(), Some(detail)))).await?;
            }
            Err(brokk_broker::submit::SubmitError::NoSite { failed, .. })
                if failed
                    .iter()
                    .any(|(_, e)| matches!(e, brokk_broker::SiteError::Unavailable(_))) =>
            {
                // A site that did not answer may be the one able to run it:
                // keep the job for the next round.
                self.counters
                    .site_errors
                    .fetch_add(failed.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.counters.undispatchable.fetch_add(1, Ordering::Relaxed);
                v.state = "failed".into();
                v.reason = Some(e.to_string());
                v.ended = Some(now());
                self.db.update(&v, Some((now(), Some(e.to_string())))).await?;
            }
        }
        Ok(())
    }

    /// Sends a job into the broker reservation `rid` at its site.
    async fn dispatch_into(&self, stored: StoredJob, job: Job, rid: &str) -> Result<(), ServiceError> {
        let mut v = stored.view;
        // Checked again here: the job may have been stored before the check
        // existed, and the reservation may have been cancelled since.
        let r = match self.own_committed_reservation(&v.owner, rid).await {
            Ok(r) => r,
            Err(ServiceError::Unavailable(e)) => return Err(ServiceError::Unavailable(e)),
            Err(e) => {
                v.state = "failed".into();
                v.reason = Some(format!("it cannot run in reservation {rid}: {e}"));
                v.ended = Some(now());
                return Ok(self.db.update(&v, Some((now(), v.reason.clone()))).await?);
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
        let outcome = tokio::task::spawn_blocking(move || {
            let mut c = site.client.clone();
            c.set_idempotency_key(Some(key));
            c.set_on_behalf_of(Some(user));
            c.submit("broker", &job, Some(brokk_core::ReservationId(r.site_reservation)))
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        self.counters.decisions.fetch_add(1, Ordering::Relaxed);
        match outcome {
            Ok(h) => {
                v.state = "dispatched".into();
                v.site = Some(r.site.clone());
                v.site_job = Some(h.0);
                v.predicted_tts = Some((r.start - now()).0.max(0));
                let detail = format!("to {}, in reservation {}", r.site, r.id);
                self.db.update(&v, Some((now(), Some(detail)))).await?;
            }
            Err(brokk_broker::SiteError::Unavailable(e)) => {
                // The site is down: the job waits for the next round.
                self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("dispatching {} into {rid}: {e}", v.id);
            }
            Err(e) => {
                v.state = "failed".into();
                v.reason = Some(format!("the site refused the job: {e}"));
                v.ended = Some(now());
                self.db.update(&v, Some((now(), v.reason.clone()))).await?;
            }
        }
        Ok(())
    }

    /// Reserves at the site where the request starts earliest, for `owner`.
    pub async fn reserve(&self, owner: &str, req: BrokerReservationRequest) -> Result<BrokerReservation, ServiceError> {
        if req.amount == 0 || req.duration.0 <= 0 || req.latest < req.earliest {
            return Err(ServiceError::BadRequest(
                "amount and duration must be positive, and earliest <= latest".into(),
            ));
        }
        let t = now();
        if req.latest < t {
            return Err(ServiceError::BadRequest(format!(
                "the window ends at {}, which has passed; give a window in the future",
                req.latest
            )));
        }
        if req.duration.0 > self.limits.reservation_seconds {
            return Err(ServiceError::BadRequest(format!(
                "a reservation may last at most {} s on this broker, not {} s",
                self.limits.reservation_seconds, req.duration.0
            )));
        }
        let held = self.db.reserved_slot_seconds(owner, t).await?;
        let asked = i64::from(req.amount).saturating_mul(req.duration.0);
        let limit = (self.limits.reserved_slot_hours as i64).saturating_mul(3600);
        if held.saturating_add(asked) > limit {
            return Err(ServiceError::Conflict(format!(
                "you hold {:.1} slot-hours in reservations and ask for {:.1} more; the limit is {} per user",
                held as f64 / 3600.0,
                asked as f64 / 3600.0,
                self.limits.reserved_slot_hours
            )));
        }
        let sites = self.sites.clone();
        let request = brokk_core::Request {
            amount: req.amount,
            duration: req.duration,
            earliest: req.earliest,
            latest: req.latest,
            flexible: false,
        };
        let got = tokio::task::spawn_blocking(move || {
            // Earliest candidate start per site, then reserve in that order.
            let mut order: Vec<(Time, usize)> = sites
                .iter()
                .enumerate()
                .filter_map(|(k, s)| s.client.probe(&request, 1).ok()?.first().map(|c| (c.start, k)))
                .collect();
            order.sort();
            for (_, k) in order {
                let mut c = sites[k].client.clone();
                if let Ok(brokk_core::Reply::Granted { id, start }) = c.reserve("broker", &request, None) {
                    return Some((sites[k].name.clone(), id.0, start));
                }
            }
            None
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        let (site, site_reservation, start) =
            got.ok_or_else(|| ServiceError::Conflict("no site can hold the reservation in that window".into()))?;
        let r = BrokerReservation {
            id: format!("r{}", &uuid::Uuid::new_v4().simple().to_string()[..15]),
            owner: owner.to_string(),
            site,
            site_reservation,
            amount: req.amount,
            start,
            end: start + req.duration,
            state: "committed".into(),
        };
        self.db.save_reservation(&r).await?;
        Ok(r)
    }

    /// A reservation of `owner`'s.
    pub async fn reservation(&self, owner: &str, id: &str) -> Result<BrokerReservation, ServiceError> {
        let r = self
            .db
            .reservation(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("reservation {id}")))?;
        if r.owner != owner {
            return Err(ServiceError::Forbidden(format!("reservation {id}")));
        }
        Ok(r)
    }

    /// Cancels a reservation at its site.
    pub async fn cancel_reservation(&self, owner: &str, id: &str) -> Result<BrokerReservation, ServiceError> {
        let mut r = self.reservation(owner, id).await?;
        if r.state == "cancelled" {
            return Ok(r);
        }
        let site = self
            .site(&r.site)
            .ok_or_else(|| ServiceError::Unavailable(format!("site {} is no longer configured", r.site)))?;
        let sid = r.site_reservation;
        let res =
            tokio::task::spawn_blocking(move || site.client.clone().cancel("broker", brokk_core::ReservationId(sid)))
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        match res {
            Ok(()) | Err(brokk_broker::SiteError::Unknown) => {}
            Err(e) => return Err(ServiceError::Unavailable(format!("cancelling at {}: {e}", r.site))),
        }
        r.state = "cancelled".into();
        self.db.save_reservation(&r).await?;
        Ok(r)
    }

    /// One round of queue adaptation (seed 003, 3.3) over the waiting jobs
    /// that asked for it: each moves if another site would deliver it at
    /// least the margin sooner, counting restaging and a restart.
    pub async fn adapt_round(&self) -> Result<(), ServiceError> {
        for stored in self.db.in_states(&["dispatched"]).await? {
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
            v.state = "moving".into();
            self.db.update(&v, None).await?;
            let sites = self.sites.clone();
            let counters = self.counters.clone();
            let margin = self.adapt_margin;
            let key = format!("{}-{}", v.id, uuid::Uuid::new_v4().simple());
            let owner = v.owner.clone();
            let outcome = tokio::task::spawn_blocking(move || {
                let mut clients = cached_sites(&sites, &counters, Some(&key), &owner);
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
            let from = v.site.clone().unwrap_or_default();
            let old_job = v.site_job.clone().unwrap_or_default();
            v.state = "dispatched".into();
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
        let sites = self.sites.clone();
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
                if terminal(&v.state) || v.state == "moving" {
                    continue;
                }
                let state = broker_state(a.state);
                let changed = state != v.state;
                if !changed && a.started == v.started {
                    continue;
                }
                v.state = state.to_string();
                v.started = a.started;
                v.ended = a.ended;
                v.exit_code = a.exit_code;
                v.reason = a.reason.clone();
                let entry = changed.then(|| (now(), a.reason.clone()));
                self.db.update(&v, entry).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(owner: &str, n: u32) -> StoredJob {
        StoredJob {
            view: BrokerJob {
                id: format!("{owner}{n}"),
                owner: owner.into(),
                format: "json".into(),
                state: "accepted".into(),
                site: None,
                site_job: None,
                predicted_tts: None,
                predicted_ttd: None,
                submitted: Time(i64::from(n)),
                started: None,
                ended: None,
                exit_code: None,
                reason: None,
                warnings: Vec::new(),
                stdout: None,
                history: Vec::new(),
            },
            spec: String::new(),
            prefs: String::new(),
        }
    }

    #[test]
    fn dispatch_takes_the_users_in_turn() {
        let jobs = vec![
            job("a", 1),
            job("a", 2),
            job("a", 3),
            job("b", 4),
            job("a", 5),
            job("c", 6),
            job("b", 7),
        ];
        let order: Vec<String> = round_robin_by_owner(jobs).into_iter().map(|j| j.view.id).collect();
        assert_eq!(order, ["a1", "b4", "c6", "a2", "b7", "a3", "a5"]);
    }
}
