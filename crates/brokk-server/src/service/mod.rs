//! The service's operations: accept (translate, validate, store), list, show,
//! cancel, files and resources; dispatch through the broker core to the
//! sites; and polling the sites for the jobs' progress.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use brokk_broker::coalloc::Found;
use brokk_broker::jobs::{self, Change, Entry, Member};
use brokk_broker::reservations::ReservationChange;
use brokk_broker::reserve::at_earliest;
use brokk_broker::{JobHandle, Site};
use brokk_jdl::{detect, read, Format, Parsed, ReadOptions};
use brokk_model::{Job, JobPreferences, ResourceInfo, Time};
use brokk_proto::wire::{
    Accepted, BrokerJob, BrokerReservation, BrokerReservationRequest, BrokerReservationState, BrokerState, Checked,
    CoallocRequest, Coallocated, JobCheck, SiteCheck, SubmitRequest,
};
use brokk_proto::RemoteSite;
use tokio::sync::Notify;

use crate::db::{Db, DbError, JobPage, StoredJob};

mod as_site;
mod broker;
mod coalloc;
mod dispatch;
mod files;
mod follow;
mod holds;
mod outputs;
pub mod parsing;
mod per_site;
mod pushed;
mod ready;
mod rescue;
mod reservations;
mod sites;
mod turns;
mod workflows;

pub use broker::Broker;
pub use files::{FileHead, FileStream};
pub use holds::HoldJournal;
pub use per_site::PerSite;
pub use ready::Readiness;
use sites::cached_sites;
pub use sites::{Cursor, SiteEntry, SiteInfo};
pub use workflows::network;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServiceError {
    /// Malformed request or description (with line and column).
    #[error("{0}")]
    BadRequest(String),
    /// Another user's job.
    #[error("{0} belongs to someone else")]
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

/// A new job id.
fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
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
    /// Pushes of their information the sites made.
    pub info_pushes: AtomicU64,
    /// How long submissions took to answer.
    pub submit_latency: std::sync::Mutex<brokk_site::metrics::Histogram>,
    /// How long the core took per decision (a batch's time over its jobs).
    pub decision_latency: std::sync::Mutex<brokk_site::metrics::Histogram>,
    /// Delegations between brokers, by kind.
    pub delegations: Delegations,
}

/// Delegations between brokers ([`brokk_broker::delegate`]), by kind: of
/// the jobs this broker delegated, those its neighbours accepted and
/// rejected; of those delegated to it, those it took and refused.
#[derive(Debug, Default)]
pub struct Delegations {
    counts: [AtomicU64; 4],
}

impl Delegations {
    /// The kinds, as `/metrics` names them.
    pub const KINDS: [&'static str; 4] = ["accepted", "rejected", "taken", "refused"];

    /// Counts one of `kind` (one of [`Delegations::KINDS`]).
    pub fn count(&self, kind: &str) {
        if let Some(i) = Self::KINDS.iter().position(|k| *k == kind) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Each kind and its count.
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Self::KINDS
            .iter()
            .zip(&self.counts)
            .map(|(k, n)| (*k, n.load(Ordering::Relaxed)))
    }
}

/// The service, shared by its handlers and tasks.
#[derive(Debug, Clone)]
pub struct Service {
    /// Records.
    pub db: Db,
    /// Sites, in configuration order, then as discovered (only ever
    /// appended: workflows and the network name sites by position).
    pub sites: Arc<std::sync::RwLock<Arc<Vec<SiteEntry>>>>,
    /// What the sites last published.
    pub info: Arc<SiteInfo>,
    /// Counters.
    pub counters: Arc<Counters>,
    /// Figures per site (information fetches, dispatches).
    pub per_site: Arc<PerSite>,
    /// Wakes the dispatcher.
    pub wake: Arc<Notify>,
    /// Jobs accepted, or being co-allocated, before this process started:
    /// they may have reached a site before a crash, so their dispatch first
    /// asks the sites. Each leaves once looked for.
    pub inherited: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// What one user may hold at once.
    pub limits: crate::config::Limits,
    /// Files users uploaded for their jobs' input.
    pub uploads: brokk_site::uploads::Uploads,
    /// The outputs kept of users' ended jobs ([`outputs`]), under their own quota.
    pub outputs: brokk_site::uploads::Uploads,
    /// Where accepted jobs and their ends are recorded for replay, if
    /// configured.
    pub record: Option<Arc<crate::record::Recorder>>,
    /// The bandwidth between the sites that workflow admission reserves.
    pub network: Arc<std::sync::Mutex<brokk_broker::workflow::Network>>,
    /// Workflow admission's settings.
    pub workflow_settings: crate::config::WorkflowSettings,
    /// Taken by each admission, round and cancel of workflows, so a task
    /// is never sent while its workflow is being cancelled.
    pub workflow_lock: Arc<tokio::sync::Mutex<()>>,
    /// Workflow admissions take turns per user before the decision turn.
    pub admissions: Arc<turns::UserTurns>,
    /// The holds of workflow admissions in progress, written down.
    pub holds: HoldJournal,
    /// Turns for reading descriptions off the async workers.
    pub parsing: Arc<parsing::Parsing>,
    /// The broker's own core and its driver.
    pub broker: Arc<Broker>,
    /// Endpoints discovery found and could not reach at its last reading:
    /// (the site name they would have, why).
    pub unreachable: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    /// The sites that are neighbouring brokers ([`brokk_broker::delegate`]),
    /// by name: what this broker publishes and reserves as a site is its
    /// own sites' alone (two neighbours folding each other's would ask
    /// each other without end).
    pub neighbours: Arc<std::collections::HashSet<String>>,
}

pub use brokk_proto::wall_clock as now;

impl Service {
    /// The sites as of now.
    pub fn sites(&self) -> Arc<Vec<SiteEntry>> {
        self.sites.read().map(|s| s.clone()).unwrap_or_default()
    }

    /// The sites but the neighbouring brokers.
    pub fn own_sites(&self) -> Arc<Vec<SiteEntry>> {
        let all = self.sites();
        match self.neighbours.is_empty() {
            true => all,
            false => Arc::new(
                all.iter()
                    .filter(|s| !self.neighbours.contains(&s.name))
                    .cloned()
                    .collect(),
            ),
        }
    }

    /// Adds sites found at run time after the others, and makes the
    /// network between all of them again with the workflows' bookings.
    pub async fn add_sites(&self, found: Vec<SiteEntry>) -> Result<(), ServiceError> {
        if found.is_empty() {
            return Ok(());
        }
        let _workflows = self.workflow_lock.lock().await;
        let names: Vec<String> = found.iter().map(|s| s.name.clone()).collect();
        self.core_sites(&names);
        let all = {
            let Ok(mut sites) = self.sites.write() else {
                return Err(ServiceError::Unavailable("the site list is poisoned".into()));
            };
            let mut all = (**sites).clone();
            all.extend(found);
            *sites = Arc::new(all);
            sites.len()
        };
        let network = network(all, self.workflow_settings.bandwidth_bytes_per_s, now())
            .map_err(|e| ServiceError::Unavailable(format!("[workflows]: {e}")))?;
        if let Ok(mut n) = self.network.lock() {
            *n = network;
        }
        self.restore_network().await
    }

    /// Notes the endpoints discovery could not reach at its last reading.
    pub fn set_unreachable(&self, now_unreachable: Vec<(String, String)>) {
        if let Ok(mut u) = self.unreachable.lock() {
            *u = now_unreachable;
        }
    }

    /// Records the latency of one submission.
    pub fn observe_submit(&self, seconds: f64) {
        if let Ok(mut h) = self.counters.submit_latency.lock() {
            h.observe(seconds);
        }
    }

    /// Reads a submission's description as `owner`'s, with the checks
    /// every job must pass before any site is asked: its language, the
    /// per-request and queued-job limits, the broker's own validation.
    async fn read_submission(&self, owner: &str, req: &SubmitRequest) -> Result<(Format, Parsed), ServiceError> {
        let (description, format) = (req.description.clone(), req.format.clone());
        let (format, parsed) = self
            .parsing
            .run(owner, move || parse_description(&description, format.as_deref()))
            .await??;
        if parsed.jobs.is_empty() {
            return Err(ServiceError::BadRequest("description: it describes no job".into()));
        }
        self.within_job_limits(owner, parsed.jobs.len(), self.limits.jobs_per_submission)
            .await?;
        if req.reservation.is_some() && parsed.jobs.len() != 1 {
            return Err(ServiceError::BadRequest(
                "reservation: one reservation holds one job".into(),
            ));
        }
        // One named inside the description (JSON `reservation`, `#SBATCH
        // --reservation=`) is checked like one given beside it.
        let named = parsed.jobs.iter().filter_map(|j| j.reservation.as_ref());
        for rid in req.reservation.iter().chain(named) {
            self.own_committed_reservation(owner, rid).await?;
        }
        Ok((format, parsed))
    }

    /// What the broker would do with a submission's jobs now, each site's
    /// answer for each ([`brokk_broker::broker::BrokerCore::verdict`]);
    /// nothing is stored or sent. The same checks as [`Service::accept`]
    /// refuse what it would refuse, except that uploads are not looked for.
    pub async fn check(&self, owner: &str, req: SubmitRequest) -> Result<Checked, ServiceError> {
        let (_, parsed) = self.read_submission(owner, &req).await?;
        let prefs = req.preferences.clone().unwrap_or_default();
        let at = now();
        let verdicts: Vec<_> = self
            .broker
            .read(|c| parsed.jobs.iter().map(|j| c.verdict(j, &prefs, at)).collect());
        let jobs = parsed
            .jobs
            .iter()
            .zip(verdicts)
            .map(|(job, v)| JobCheck {
                name: job.name.clone(),
                site: v.chosen().map(str::to_string),
                sites: v
                    .sites
                    .into_iter()
                    .map(|(site, answer)| site_check(site, answer))
                    .collect(),
            })
            .collect();
        Ok(Checked {
            jobs,
            warnings: warnings_of(&parsed),
        })
    }

    /// A Slurm heterogeneous job's components, co-allocated for the same
    /// start (as Slurm starts them) within [`HETEROGENEOUS_WINDOW`], each
    /// in a reservation of its own: neither held nor put into another.
    async fn heterogeneous(
        &self,
        owner: &str,
        req: &SubmitRequest,
        format: Format,
        parsed: Parsed,
    ) -> Result<Accepted, ServiceError> {
        // What the description itself asks is refused by the co-allocation.
        if req.hold || req.reservation.is_some() {
            return Err(ServiceError::BadRequest(
                "a heterogeneous job's components start together in reservations the broker makes: \
                 it can be neither held nor run in another reservation"
                    .into(),
            ));
        }
        self.within_job_limits(owner, parsed.jobs.len(), self.limits.coallocation_jobs)
            .await?;
        let warnings = warnings_of(&parsed);
        let parts = parsed.jobs.into_iter().map(|j| (j, format, warnings.clone())).collect();
        let at = now();
        let done = self
            .coallocate_parts(owner, parts, (at, at + HETEROGENEOUS_WINDOW), brokk_model::Duration(0))
            .await?;
        Ok(Accepted {
            id: done.ids[0].clone(),
            ids: done.ids,
            warnings,
        })
    }

    /// Translates and stores a description's jobs; they are dispatched later.
    pub async fn accept(&self, owner: &str, req: SubmitRequest) -> Result<Accepted, ServiceError> {
        let (format, parsed) = self.read_submission(owner, &req).await?;
        if parsed.together {
            return self.heterogeneous(owner, &req, format, parsed).await;
        }
        // One no site could ever run is refused now, with each site's
        // reason: the core read once for the whole submission.
        if let Some(why) = self.broker.read(|c| parsed.jobs.iter().find_map(|j| c.runs_nowhere(j))) {
            return Err(ServiceError::BadRequest(why));
        }
        let warnings = warnings_of(&parsed);
        let mut jobs = parsed.jobs;
        if let Some(rid) = &req.reservation {
            jobs[0].reservation = Some(rid.clone());
        }
        let preferences = req.preferences.unwrap_or_default();
        let prefs = serde_json::to_string(&preferences).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        for job in &mut jobs {
            self.take_uploads(owner, job, &req.uploads, &Default::default())?;
        }
        let ids: Vec<String> = jobs.iter().map(|_| new_id()).collect();
        for (index, (job, id)) in jobs.iter_mut().zip(&ids).enumerate() {
            let assigned = brokk_jdl::assign::Ids {
                job: id,
                submission: &ids[0],
                index,
                user: owner,
            };
            brokk_jdl::assign::assign(format, job, assigned);
        }
        let mut new = Vec::with_capacity(jobs.len());
        for (job, id) in jobs.iter().zip(&ids) {
            // Held when the request says so, or the description (`hold = true`, `--hold`).
            let entry = Entry::submitted(req.hold || job.hold);
            let mut view = BrokerJob::new(id.clone(), owner.to_string(), format.name().to_string(), entry, now());
            view.warnings = warnings.clone();
            view.describe(job);
            let spec = serde_json::to_string(job).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
            new.push(StoredJob {
                view,
                spec,
                prefs: prefs.clone(),
                key: None,
            });
        }
        // The core's before they are stored, so no dispatch round that
        // reads them takes them again.
        let core_s: Vec<String> = new.iter().map(|s| s.view.id.clone()).collect();
        self.broker.claim(&core_s, true);
        // Stored with what other requests store meanwhile, in one commit.
        if let Err(e) = self.broker.insert(new.clone()).wait().await {
            self.broker.claim(&core_s, false);
            return Err(e);
        }
        for (stored, job) in new.into_iter().zip(jobs) {
            if let Some(r) = &self.record {
                r.accepted(&stored.view, &job, &stored.prefs);
            }
            self.counters.accepted.fetch_add(1, Ordering::Relaxed);
            self.broker.adopt(stored.view, job, preferences.clone());
        }
        self.wake.notify_one();
        Ok(Accepted {
            id: ids[0].clone(),
            ids,
            warnings,
        })
    }

    /// Deletes every user's uploads older than `retention` that no job of
    /// theirs that has not ended names; returns how many went.
    pub async fn sweep_uploads(&self, retention: std::time::Duration) -> Result<usize, ServiceError> {
        let before = std::time::SystemTime::now() - retention;
        let mut gone = 0;
        for (owner, dir) in self.uploads.owners() {
            let needed: std::collections::HashSet<String> = self
                .db
                .unfinished_specs(&owner)
                .await?
                .iter()
                .flat_map(|spec| {
                    let scheme = brokk_site::uploads::SCHEME;
                    spec.match_indices(scheme)
                        .filter_map(|(i, _)| spec.get(i + scheme.len()..i + scheme.len() + 64))
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                })
                .collect();
            let uploads = self.uploads.clone();
            gone += tokio::task::spawn_blocking(move || uploads.sweep(&dir, before, &|sha| needed.contains(sha)))
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        }
        Ok(gone)
    }

    /// Points the job's local input files at the owner's uploads named in
    /// `uploads`, but for those its workflow parents make (`from_parents`,
    /// stored when they end); refuses one that names no upload, or an
    /// upload not stored.
    fn take_uploads(
        &self,
        owner: &str,
        job: &mut Job,
        uploads: &std::collections::BTreeMap<String, String>,
        from_parents: &std::collections::BTreeSet<String>,
    ) -> Result<(), ServiceError> {
        for f in &mut job.input_files {
            if let Some(sha) = f.source.as_deref().and_then(brokk_site::uploads::digest_of) {
                // Sites keep uploads by content for the broker, whoever sent
                // them: a digest written into a description must name one of
                // the owner's own, or it would reach another user's file.
                if self.uploads.size(owner, sha).is_none() {
                    return Err(ServiceError::BadRequest(format!(
                        "input file {}: upload {sha} is not one of your uploads",
                        f.name
                    )));
                }
                continue;
            }
            if f.source.is_some() || from_parents.contains(&f.name) {
                continue;
            }
            let Some(sha) = uploads.get(&f.name) else {
                return Err(ServiceError::BadRequest(format!(
                    "input file {}: it is a local file and was not uploaded; `brokk submit` uploads it \
                     (through the API: PUT it to /v1/uploads/{{sha256}} and name it in `uploads`)",
                    f.name
                )));
            };
            let size = self.uploads.size(owner, sha).ok_or_else(|| {
                ServiceError::BadRequest(format!(
                    "input file {}: upload {sha} not found; upload it first",
                    f.name
                ))
            })?;
            f.source = Some(format!("{}{sha}", brokk_site::uploads::SCHEME));
            f.size = Some(size);
        }
        Ok(())
    }

    /// Refuses `n` more jobs for `owner` beyond `per_request` at once or the
    /// queued-jobs limit.
    async fn within_job_limits(&self, owner: &str, n: usize, per_request: u64) -> Result<(), ServiceError> {
        let unfinished = self.db.unfinished_of(owner) as u64;
        jobs::within_limits(n as u64, per_request, unfinished, self.limits.queued_jobs).map_err(|e| match e {
            jobs::OverLimit::PerRequest { .. } => ServiceError::BadRequest(e.to_string()),
            jobs::OverLimit::Unfinished { .. } => ServiceError::Conflict(e.to_string()),
        })
    }

    /// Stores a new job `id`, entering as `entry` says, part of what
    /// `member` says.
    #[allow(clippy::too_many_arguments)] // one record's fields
    async fn store_new(
        &self,
        owner: &str,
        job: &Job,
        format: Format,
        warnings: Vec<String>,
        prefs: String,
        entry: Entry,
        id: String,
        member: Member,
    ) -> Result<BrokerJob, ServiceError> {
        let mut view = BrokerJob::new(id, owner.to_string(), format.name().to_string(), entry, now());
        view.warnings = warnings;
        view.member = member;
        view.describe(job);
        let stored = StoredJob {
            view,
            spec: serde_json::to_string(job).map_err(|e| ServiceError::BadRequest(e.to_string()))?,
            prefs,
            key: None,
        };
        self.store(job, stored).await
    }

    /// Hands the core, at start, the unfinished jobs it takes: accepted
    /// ones are looked for at the sites before they are decided, held ones
    /// wait for release, those at sites are followed there.
    pub async fn adopt_unfinished(&self) -> Result<usize, ServiceError> {
        use BrokerState as S;
        let mut n = 0;
        for stored in self
            .db
            .in_states(&[S::Accepted, S::Held, S::Planned, S::Dispatched, S::Moving, S::Running])
            .await?
        {
            let prefs = serde_json::from_str::<JobPreferences>(&stored.prefs).unwrap_or_default();
            match serde_json::from_str::<Job>(&stored.spec) {
                Ok(job) => self.broker.inherit(stored.view, job, prefs),
                // One at a site is followed there all the same; one not
                // sent yet cannot be.
                Err(_) if stored.view.site_job.is_some() => self.broker.inherit(stored.view, Job::default(), prefs),
                Err(e) => {
                    let why = format!("its description cannot be read back: {e}");
                    self.broker.refuse(stored.view, why).wait().await?;
                }
            }
            n += 1;
        }
        Ok(n)
    }

    /// Stores a new job as described by `job` and hands it to the core:
    /// marked the core's before its row is stored (see `Service::accept`),
    /// and its dispatcher woken. A co-allocation's part is handed over
    /// with its group (`service::coalloc`).
    async fn store(&self, job: &Job, stored: StoredJob) -> Result<BrokerJob, ServiceError> {
        let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
        // Every job is the core's (a co-allocation's parts once their search
        // is asked for, `service::coalloc`).
        let core_s = match stored.view.state() != BrokerState::Reserving {
            true => vec![stored.view.id.clone()],
            false => Vec::new(),
        };
        self.broker.claim(&core_s, true);
        if let Err(e) = self.db.insert(&stored).await {
            self.broker.claim(&core_s, false);
            return Err(e.into());
        }
        if let Some(r) = &self.record {
            r.accepted(&stored.view, job, &stored.prefs);
        }
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        if !core_s.is_empty() {
            self.broker.adopt(stored.view.clone(), job.clone(), prefs);
            self.wake.notify_one();
        }
        Ok(stored.view)
    }

    async fn owned(&self, owner: &str, id: &str) -> Result<StoredJob, ServiceError> {
        let j = self
            .db
            .get(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("job {id}")))?;
        if j.view.owner != owner {
            return Err(ServiceError::Forbidden(format!("job {id}")));
        }
        Ok(j)
    }

    /// A job with its history.
    pub async fn job(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        let mut v = self.owned(owner, id).await?.view;
        v.kept = self.kept_of(&v).await?;
        Ok(v)
    }

    /// A page of the owner's jobs, newest first, and whether more follow.
    pub async fn jobs(&self, owner: &str, page: &JobPage) -> Result<(Vec<BrokerJob>, bool), ServiceError> {
        // One more than asked for tells whether another page follows.
        let ask = JobPage {
            limit: page.limit + 1,
            ..page.clone()
        };
        let mut jobs = self.db.list(owner, &ask).await?.ok_or_else(|| {
            ServiceError::BadRequest(format!(
                "before: {} is not one of your jobs",
                page.before.as_deref().unwrap_or_default()
            ))
        })?;
        let more = jobs.len() > page.limit;
        jobs.truncate(page.limit);
        Ok((jobs, more))
    }

    fn site(&self, name: &str) -> Option<SiteEntry> {
        self.sites().iter().find(|s| s.name == name).cloned()
    }

    /// Parses one description that must hold exactly one job.
    fn one_job(description: &str, format: Option<&str>) -> Result<(Job, Format, Vec<String>), ServiceError> {
        let (format, parsed) = parse_description(description, format)?;
        let warnings = warnings_of(&parsed);
        let [job] = <[Job; 1]>::try_from(parsed.jobs).map_err(|v| {
            ServiceError::BadRequest(format!("a co-allocated description must hold one job, not {}", v.len()))
        })?;
        Ok((job, format, warnings))
    }

    /// Keeps an accepted job from being dispatched until it is released.
    pub async fn hold(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        self.hold_or_release(owner, id, Change::Hold).await
    }

    /// Lets a held job be dispatched.
    pub async fn release(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        let j = self.hold_or_release(owner, id, Change::Release).await?;
        self.wake.notify_one();
        Ok(j)
    }

    async fn hold_or_release(&self, owner: &str, id: &str, change: Change) -> Result<BrokerJob, ServiceError> {
        if let Some(answer) = self.owner_request(owner, id, change.clone()).await {
            return answer;
        }
        // Not the core's: ended (its rules say why nothing changes), or a
        // co-allocation's part not handed over yet.
        let j = self.owned(owner, id).await?.view;
        Err(not_held(&j, change))
    }

    /// Whether job `id` was accepted before this process started and has
    /// not been looked for at the sites yet.
    pub(super) fn inherited(&self, id: &str) -> bool {
        self.inherited.lock().is_ok_and(|set| set.contains(id))
    }

    /// Job `id` has been looked for at the sites.
    pub(super) fn looked_for(&self, id: &str) {
        if let Ok(mut set) = self.inherited.lock() {
            set.remove(id);
        }
    }

    /// Cancels a job wherever it is.
    pub async fn cancel(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        if let Some(answer) = self.owner_request(owner, id, Change::Cancel).await {
            return answer;
        }
        // Not the core's: ended already, or a co-allocation's part not
        // handed over yet.
        let j = self.owned(owner, id).await?.view;
        if j.state().is_terminal() {
            return Ok(j);
        }
        Err(not_held(&j, Change::Cancel))
    }
}

/// Why `change` is not made to job `j`, which the core does not hold: its
/// state's rules (an ended job), or its co-allocation still being placed.
fn not_held(j: &BrokerJob, change: Change) -> ServiceError {
    match jobs::check(j, change, now()) {
        Err(refused) => ServiceError::Conflict(refused.to_string()),
        Ok(()) => ServiceError::Conflict(format!("job {}: its co-allocation is being placed; try again", j.id)),
    }
}

/// Reads a description in `format` (detected when absent), every job it
/// makes checked by the broker's own validation.
fn parse_description(description: &str, format: Option<&str>) -> Result<(Format, Parsed), ServiceError> {
    let format = match format {
        Some(f) => f
            .parse::<Format>()
            .map_err(|e| ServiceError::BadRequest(e.to_string()))?,
        None => detect(description, None).ok_or_else(|| {
            ServiceError::BadRequest("format: cannot tell the description's language; give `format`".into())
        })?,
    };
    let parsed = read(format, description, &ReadOptions::default())
        .map_err(|e| ServiceError::BadRequest(format!("description ({format}): {e}")))?;
    for job in &parsed.jobs {
        brokk_broker::select::validate_at(job, now()).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
    }
    Ok((format, parsed))
}

/// How far ahead a heterogeneous job's common start is looked for: a day,
/// where Slurm would keep it queued until its components fit together.
pub const HETEROGENEOUS_WINDOW: brokk_model::Duration = brokk_model::Duration(24 * 3600);

/// The warnings a submission answers: its translation's, then what no
/// site does (each once).
fn warnings_of(parsed: &Parsed) -> Vec<String> {
    let mut warnings: Vec<String> = parsed.warnings.iter().map(|d| d.to_string()).collect();
    for job in &parsed.jobs {
        for w in brokk_broker::select::not_done_here(job) {
            if !warnings.contains(&w) {
                warnings.push(w);
            }
        }
    }
    warnings
}

/// A site's answer in the API's words.
fn site_check(site: String, answer: brokk_broker::broker::SiteAnswer) -> SiteCheck {
    use brokk_broker::broker::SiteAnswer;
    let (word, tts, ttd, reasons) = match answer {
        SiteAnswer::Takes { tts, ttd } => ("takes", Some(tts.0), Some(ttd.0), Vec::new()),
        SiteAnswer::Cannot(why) => ("cannot", None, None, why),
        SiteAnswer::Unavailable(why) => ("unavailable", None, None, vec![why]),
    };
    SiteCheck {
        site,
        answer: word.into(),
        tts,
        ttd,
        reasons,
    }
}
