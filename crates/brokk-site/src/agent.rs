//! The agent: the site core behind one async read-write lock, its effects
//! carried out here. A change queues its writes in lock order before it
//! releases the lock and answers once they are durable, so the database
//! always holds what the API has answered, in order; reads share the lock;
//! commands to the resource manager run after it is released.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use brokk_core::{
    Candidate, Change, CoreError, Effect, JobId, JobRecord, Manager, Occupant, Request, Reservation, ReservationId,
    SiteCore, SiteParams, State, Submission,
};
use brokk_model::{Duration, Job, JobPhase, PublishedBenchmark, Time};
use brokk_proto::wire::{ChangeFeed, InfoView, JobView, ReservationRequest, ReservationState, ReservationView};
use tokio::sync::{watch, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::accounts::Accounts;
use crate::backend::Backend;
use crate::config::Config;
use crate::launch::Progress;
use crate::slurm::cli::SlurmError;
use crate::slurm::Slurm;
use crate::store::{GroupCommit, Store, StoreError, Write};

/// Why an operation failed, as the API reports it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    /// The site's rules refused it (bad request, someone else's, not
    /// found, not granted, conflict).
    #[error(transparent)]
    Refused(#[from] CoreError),
    /// The database failed; nothing was answered as done.
    #[error("{0}")]
    Internal(String),
    /// The resource manager behind the agent does not answer.
    #[error("the resource manager is unavailable: {0}")]
    Unavailable(String),
}

impl From<StoreError> for AgentError {
    fn from(e: StoreError) -> Self {
        AgentError::Internal(e.to_string())
    }
}

pub use brokk_proto::wall_clock as now;

use crate::launch::{Controls, Launch};

#[derive(Debug)]
struct Control {
    start: watch::Sender<Time>,
    cancel: watch::Sender<bool>,
    committed: watch::Sender<bool>,
}

/// Everything behind the lock: the core and the runners' controls.
#[derive(Debug)]
pub(crate) struct Inner {
    core: SiteCore,
    controls: HashMap<JobId, Control>,
}

/// A resource-manager command with what it needs, taken from the core
/// under the lock and run after it is released.
#[derive(Debug)]
enum Command {
    Create(Reservation),
    Modify {
        old: Reservation,
        new: Reservation,
    },
    Delete(Vec<ReservationId>),
    /// Hold (true) or release the resource manager's job of this id.
    Hold(u64, bool),
}

/// The agent: share it by cloning.
#[derive(Debug, Clone)]
pub struct Agent {
    config: Arc<Config>,
    /// Every write goes through it, in the order the operations happened.
    commits: GroupCommit,
    /// The database, read for jobs the core has retired.
    store: Store,
    /// Identifies this run of the agent: change-feed versions restart with it.
    epoch: u64,
    inner: Arc<RwLock<Inner>>,
    /// How jobs run.
    backend: Backend,
    /// Local accounts of the site's users.
    accounts: Accounts,
    /// Where `file://` staging may go.
    staging: Arc<crate::staging::Allowed>,
    /// The container images the site holds or pulls, and its Slurm
    /// cluster's bundles, as it publishes them (read at its start); `None`
    /// where it runs no containers.
    images: Option<Vec<String>>,
    /// What runs them: `podman` (`[containers]`), `slurm-oci` (the
    /// cluster's own OCI support, `[slurm] oci_bundles`).
    runtimes: Vec<String>,
    /// Files uploaded for jobs' input.
    uploads: crate::uploads::Uploads,
    /// Room for brokers' subscriptions to the site's information
    /// ([`Agent::subscription`]): each holds a connection open.
    subscriptions: Arc<tokio::sync::Semaphore>,
    /// The API's calls, for `/metrics`.
    api_metrics: Arc<crate::metrics::ApiMetrics>,
}

/// Subscriptions to a site's information that may be open at once.
pub const MAX_SUBSCRIPTIONS: usize = 32;

/// A stored job record if `who` owns it: someone else's job is forbidden,
/// none is not found (`missing` says what).
fn owned_by(who: &str, found: Option<JobRecord>, missing: String) -> Result<JobRecord, AgentError> {
    match found {
        Some(j) if j.owner == who => Ok(j),
        Some(j) => Err(CoreError::Forbidden(format!("job {}", j.id)).into()),
        None => Err(CoreError::NotFound(missing).into()),
    }
}

fn view(r: &Reservation) -> ReservationView {
    let (state, expires) = match r.state {
        State::Committed => (ReservationState::Committed, None),
        State::Preliminary { expires } => (ReservationState::Preliminary, Some(expires)),
    };
    ReservationView {
        id: r.id.0,
        owner: r.owner.to_string(),
        start: r.start,
        end: r.end,
        amount: r.amount,
        state,
        expires,
        window: r.window,
    }
}

fn job_view(j: &JobRecord) -> JobView {
    JobView {
        id: j.id.to_string(),
        owner: j.owner.clone(),
        state: j.state,
        reason: j.reason.clone(),
        exit_code: j.exit_code,
        reservation: j.slot.map(|s| s.0),
        planned_start: j.planned_start,
        started: j.started,
        ended: j.ended,
    }
}

impl Agent {
    /// Opens the database and reloads the schedule and the jobs (see
    /// [`SiteCore::restore`]). Returns the agent and the ids of jobs whose
    /// runner must (re)start.
    pub async fn open(mut config: Config) -> Result<(Agent, Vec<JobId>), AgentError> {
        let backend = match config.slurm.clone() {
            Some(sc) => {
                let (slurm, cpus) = Slurm::connect(&config.name, sc)
                    .await
                    .map_err(|e| AgentError::Unavailable(format!("reading the Slurm cluster: {e}")))?;
                if config.capacity == 0 {
                    config.capacity = cpus;
                }
                if config.capacity == 0 {
                    return Err(AgentError::Unavailable("the Slurm cluster has no CPUs".into()));
                }
                Backend::Slurm(Arc::new(
                    slurm.with_accounts(config.accounts.clone(), config.delegates.clone()),
                ))
            }
            None => match config.arc.clone() {
                Some(ac) => {
                    // The Slurm cluster behind the CE, where the site may
                    // reserve: its cores are what the site plans.
                    let slurm = match ac.slurm.clone() {
                        Some(sc) => {
                            let (slurm, cpus) = Slurm::connect(&config.name, sc).await.map_err(|e| {
                                AgentError::Unavailable(format!("reading the Slurm cluster behind the ARC CE: {e}"))
                            })?;
                            if config.capacity == 0 {
                                config.capacity = cpus;
                            }
                            Some(Arc::new(slurm.reservations_only()))
                        }
                        None => None,
                    };
                    let (ce, glue2) = crate::arc::ArcCe::connect(ac, slurm)
                        .await
                        .map_err(|e| AgentError::Unavailable(format!("reading the ARC CE: {e}")))?;
                    if config.capacity == 0 {
                        config.capacity = glue2.total_slots.unwrap_or(0);
                    }
                    if config.benchmarks.is_empty() {
                        config.benchmarks = glue2
                            .benchmarks
                            .iter()
                            .map(|(name, value)| PublishedBenchmark {
                                name: name.clone(),
                                value: *value,
                            })
                            .collect();
                    }
                    if config.capacity == 0 {
                        return Err(AgentError::Unavailable("the ARC CE publishes no slots".into()));
                    }
                    Backend::Arc(Arc::new(ce))
                }
                None => match config.gram.clone() {
                    Some(gc) => {
                        std::fs::create_dir_all(&config.workdir).map_err(|e| AgentError::Internal(e.to_string()))?;
                        let g = crate::gram::GramCe::connect(gc, &config.workdir)
                            .await
                            .map_err(|e| AgentError::Unavailable(format!("reaching the GRAM gatekeeper: {e}")))?;
                        Backend::Gram(Arc::new(g))
                    }
                    None if config.null_backend_for_benchmarks => Backend::NullForBenchmarks,
                    None => Backend::Processes,
                },
            },
        };
        if let Some(dir) = config.database.parent() {
            std::fs::create_dir_all(dir).map_err(|e| AgentError::Internal(e.to_string()))?;
        }
        std::fs::create_dir_all(&config.workdir).map_err(|e| AgentError::Internal(e.to_string()))?;
        // Job accounts pass through to their own sandbox; nobody lists the jobs.
        std::fs::set_permissions(&config.workdir, std::os::unix::fs::PermissionsExt::from_mode(0o711))
            .map_err(|e| AgentError::Internal(format!("{}: {e}", config.workdir.display())))?;
        let accounts = Accounts::resolve(&config).map_err(AgentError::Internal)?;
        if !config.accounts.is_empty() {
            crate::accounts::traversable(&config.workdir).map_err(AgentError::Internal)?;
        }
        let as_root = config.accounts.is_empty() && nix::unistd::geteuid().is_root();
        let held = match &config.containers {
            Some(c) => Some(c.published(as_root).map_err(AgentError::Internal)?),
            None => None,
        };
        let bundles = config.slurm.as_ref().map(|s| s.bundle_images()).unwrap_or_default();
        if !bundles.is_empty() && as_root {
            return Err(AgentError::Internal(crate::container::refused_as_root(
                "[slurm] oci_bundles",
            )));
        }
        let runtimes: Vec<String> = [(held.is_some(), "podman"), (!bundles.is_empty(), "slurm-oci")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, r)| r.to_string())
            .collect();
        let images = (!runtimes.is_empty()).then(|| held.into_iter().flatten().chain(bundles).collect());
        let store = Store::open(&config.database).await?;
        let t = now();
        let params = SiteParams {
            capacity: config.capacity,
            horizon: Time(t.0 + config.horizon_days * 86_400),
            default_wall_time: Duration(config.default_wall_time),
            // Checked when the configuration was read.
            policy: config
                .policy
                .parse()
                .unwrap_or(brokk_core::queue::Policy::CONSERVATIVE.into()),
            lead: backend.lead(),
        };
        let reservations = store.live_reservations().await?;
        let next_reservation = store.max_reservation_id().await? + 1;
        let kept = store.kept_jobs(Time(t.0 - config.min_job_age_s)).await?;
        // A running local job is followed through its supervisor; a job a
        // resource manager was given is followed there.
        let followable = |j: &JobRecord| match backend {
            Backend::Processes => crate::supervisor::started(&crate::supervisor::file(&config.workdir, j.id)),
            Backend::Slurm(_) | Backend::Arc(_) | Backend::Gram(_) => j.backend_id.is_some(),
            Backend::NullForBenchmarks => false,
        };
        let (mut core, resume) = SiteCore::restore(params, t, &reservations, next_reservation, kept, followable);
        if let Some(o) = &config.order {
            let order: brokk_core::order::Named = o.parse().map_err(AgentError::Internal)?;
            core.serve_in(order.make());
        }
        let agent = Agent {
            commits: GroupCommit::start(store.clone()),
            store,
            epoch: t.0 as u64 ^ (std::process::id() as u64) << 32,
            inner: Arc::new(RwLock::new(Inner {
                core,
                controls: HashMap::new(),
            })),
            backend,
            accounts,
            images,
            runtimes,
            staging: Arc::new(crate::staging::Allowed {
                read: config.stage_in_dirs.clone(),
                write: config.stage_out_dirs.clone(),
                workdir: config.workdir.clone(),
                hosts: config.stage_hosts.clone(),
                own: Some(config.listen.ip()).filter(|ip| !ip.is_unspecified()),
                grid: crate::gridcopy::GridCopy::new(&config.transfers).map_err(AgentError::Internal)?,
            }),
            // One identity's uploads cannot fill the disk the others share.
            uploads: crate::uploads::Uploads::new(config.workdir.join(".uploads"), config.max_upload_bytes).with_quota(
                crate::uploads::Quota {
                    bytes: config.upload_quota_bytes,
                    files: config.upload_quota_files,
                },
            ),
            config: Arc::new(config),
            subscriptions: Arc::new(tokio::sync::Semaphore::new(MAX_SUBSCRIPTIONS)),
            api_metrics: Arc::default(),
        };
        let commands = {
            let mut g = agent.lock().await;
            agent.apply(&mut g).await?
        };
        agent.run(commands).await;
        Ok((agent, resume))
    }

    /// Where `file://` staging may go, from the configuration.
    pub fn staging(&self) -> &Arc<crate::staging::Allowed> {
        &self.staging
    }

    /// The files uploaded for jobs' input, per identity.
    pub fn uploads(&self) -> &crate::uploads::Uploads {
        &self.uploads
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The Slurm backend, when the agent fronts a Slurm cluster.
    pub fn slurm(&self) -> Option<&Arc<Slurm>> {
        self.backend.slurm()
    }

    /// How the site runs its jobs.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// An error while the resource manager does not answer.
    /// Why the site cannot take work now (its resource manager does not
    /// answer), for `/readyz`; `None` when it can.
    pub fn not_ready(&self) -> Option<String> {
        self.check_available().err().map(|e| e.to_string())
    }

    fn check_available(&self) -> Result<(), AgentError> {
        match self.backend.down() {
            Some(why) => Err(AgentError::Unavailable(why)),
            None => Ok(()),
        }
    }

    /// The state for a change: one writer at a time, no readers meanwhile.
    async fn lock(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().await
    }

    /// The state for reading: readers share it, and wait only for a change
    /// in progress, never for another read.
    async fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().await
    }

    /// Answers a user's read of the state: the state may be ahead of the
    /// disk by writes still in the group commit, so the answer waits until
    /// everything it could have seen is durable. What a user was shown
    /// survives a crash, as what an operation answered does.
    async fn seen<T>(&self, read: impl FnOnce(&Inner) -> T) -> Result<T, AgentError> {
        self.seen_if(read, |_| true).await
    }

    /// [`Agent::seen`] for an answer that `shows` something: one that shows
    /// nothing (a job not found) waits for no write. A state the disk does
    /// not have (a write failed) is not shown: the answer is an error.
    async fn seen_if<T>(&self, read: impl FnOnce(&Inner) -> T, shows: impl Fn(&T) -> bool) -> Result<T, AgentError> {
        let (answer, through) = {
            let g = self.read().await;
            (read(&g), self.commits.queued())
        };
        if shows(&answer) {
            self.commits
                .durable_through(through)
                .await
                .map_err(AgentError::Internal)?;
        }
        Ok(answer)
    }

    /// Carries out the core's effects under the lock: writes (durable on
    /// return), then signals to runners. Returns the resource-manager
    /// commands, to run once the lock is released.
    async fn apply(&self, g: &mut Inner) -> Result<Vec<Command>, AgentError> {
        let (durable, commands) = self.queue_effects(g);
        Self::durable(durable).await?;
        Ok(commands)
    }

    /// Waits until queued writes are on disk.
    async fn durable(rx: tokio::sync::oneshot::Receiver<Result<(), String>>) -> Result<(), AgentError> {
        match rx.await {
            Ok(r) => r.map_err(AgentError::Internal),
            Err(_) => Err(AgentError::Internal("the database writer has stopped".into())),
        }
    }

    /// The core's effects under the lock: writes queued for the group
    /// commit (in the lock's order), signals sent to runners; returns what
    /// resolves once the writes are durable and the resource-manager
    /// commands.
    fn queue_effects(&self, g: &mut Inner) -> (tokio::sync::oneshot::Receiver<Result<(), String>>, Vec<Command>) {
        let mut commands = Vec::new();
        let mut writes: Vec<Write> = Vec::new();
        for e in g.core.drain() {
            match e {
                Effect::SaveReservation(id) => {
                    if let Some(r) = g.core.reservation_now(id) {
                        match writes.last_mut() {
                            Some(Write::Reservations(rs)) => rs.push(r),
                            _ => writes.push(Write::Reservations(vec![r])),
                        }
                    }
                }
                Effect::EndReservations(ids, why) => writes.push(Write::Ended(ids, why.as_str())),
                Effect::SaveJob(id) => {
                    if let Some(j) = g.core.record(id) {
                        writes.push(Write::Job(Box::new(j.clone()), g.core.version_of(id)));
                    }
                    if g.core.record(id).is_none_or(|j| j.state.is_terminal()) {
                        g.controls.remove(&id);
                    }
                }
                Effect::StartMoved { job, start } => {
                    if let Some(c) = g.controls.get(&job) {
                        let _ = c.start.send(start);
                    }
                }
                Effect::Stop(job) => {
                    if let Some(c) = g.controls.get(&job) {
                        let _ = c.cancel.send(true);
                    }
                }
                Effect::Committed(job) => {
                    if let Some(c) = g.controls.get(&job) {
                        let _ = c.committed.send(true);
                    }
                }
                // A job not yet in the resource manager is held there once
                // it is (`SiteCore::record_submitted`).
                Effect::Manager(Manager::HoldJob(id) | Manager::ReleaseJob(id)) => {
                    let hold = matches!(e, Effect::Manager(Manager::HoldJob(_)));
                    if let Some(b) = g.core.record(id).and_then(|j| j.backend_id) {
                        commands.push(Command::Hold(b, hold));
                    }
                }
                Effect::Manager(b) if self.backend.reserves() => commands.push(match b {
                    Manager::Reserve(id) => match g.core.reservation_now(id) {
                        Some(r) => Command::Create(r),
                        None => continue,
                    },
                    Manager::Modify { old } => match g.core.reservation_now(old.id) {
                        Some(new) => Command::Modify { old, new },
                        None => continue,
                    },
                    Manager::Release(ids) => Command::Delete(ids),
                    Manager::HoldJob(_) | Manager::ReleaseJob(_) => continue,
                }),
                Effect::Manager(_) => {}
            }
        }
        // One transaction for everything the operation changed, shared
        // with the operations queued beside it.
        (self.commits.enqueue(writes), commands)
    }

    /// Runs `op` on the core at the wall clock's now, carries out its
    /// effects, and returns its answer with the resource-manager commands.
    async fn op<T>(
        &self,
        op: impl FnOnce(&mut SiteCore, Time) -> Result<T, CoreError>,
    ) -> Result<(T, Vec<Command>), AgentError> {
        let mut g = self.lock().await;
        let answer = op(&mut g.core, now());
        let (durable, commands) = self.queue_effects(&mut g);
        // The next operation may start while this one's writes go to disk
        // (with its own, in one transaction); none is answered before its
        // writes, and all queued before them, are durable.
        drop(g);
        Self::durable(durable).await?;
        Ok((answer?, commands))
    }

    /// Like [`Agent::op`] for operations whose commands are only deletions,
    /// which run at once and whose failures the poller mends.
    async fn op_now<T>(&self, op: impl FnOnce(&mut SiteCore, Time) -> Result<T, CoreError>) -> Result<T, AgentError> {
        let (answer, commands) = self.op(op).await?;
        self.run(commands).await;
        Ok(answer)
    }

    /// Runs deletions and other commands whose failure nothing waits for.
    async fn run(&self, commands: Vec<Command>) {
        for c in commands {
            if let Err(e) = self.command(&c).await {
                tracing::warn!("the resource manager did not carry out {c:?}: {e}");
            }
        }
    }

    async fn command(&self, c: &Command) -> Result<(), SlurmError> {
        match c {
            Command::Create(r) => self.backend.reserve(r).await,
            Command::Modify { old, new } => self.backend.modify(old, new).await,
            Command::Delete(ids) => {
                self.backend.release(ids).await;
                Ok(())
            }
            Command::Hold(id, hold) => self.backend.hold_job(*id, *hold).await,
        }
    }

    /// `GET /v1/info`.
    pub async fn info(&self) -> InfoView {
        // A resource manager that publishes its load also counts others'
        // jobs: its figures bound the agent's own. It frees and takes slots
        // the agent's schedule mirrors only roughly, so the summary figures
        // stand alone there: the free capacity over time is published only
        // where the schedule is the agent's own.
        let glue = self.backend.published().unwrap_or_default();
        let t = now();
        let (p, availability) = {
            let g = self.read().await;
            let a = glue.free_slots.is_none().then(|| {
                g.core
                    .availability(t, t + brokk_core::PUBLISHED_SPAN, brokk_core::PUBLISHED_RANGES)
            });
            (g.core.published(t), a)
        };
        let unavailable = self.check_available().err();
        InfoView {
            name: self.config.name.clone(),
            capacity: self.config.capacity,
            free_now: glue.free_slots.map_or(p.free_now, |f| f.min(p.free_now)),
            running: glue.running.map_or(p.running, |r| r.max(p.running)),
            waiting: glue.waiting.map_or(p.waiting, |w| w.max(p.waiting)),
            estimated_wait: p.estimated_wait.unwrap_or(Duration(0)),
            benchmarks: self.config.benchmarks.clone(),
            bandwidth_bytes_per_s: self.config.bandwidth_bytes_per_s,
            reservations: self.backend.cannot_reserve().is_none(),
            available: unavailable.is_none(),
            unavailable_reason: unavailable.map(|e| e.to_string()),
            cluster: self.backend.cluster(),
            shares: glue
                .shares
                .iter()
                .map(|s| brokk_model::Share {
                    name: s.name.clone(),
                    max_wall_time: s.max_wall_time.map(|w| Duration(w as i64)),
                    max_slots_per_job: None,
                })
                .collect(),
            health: glue.health.or_else(|| self.backend.health()),
            endangered: p.endangered,
            lag: self.backend.lag(),
            availability,
            ancestors: Vec::new(),
            environment: brokk_model::Environment {
                endpoints: self.backend.endpoints(),
                staging: self.backend.staging(&self.staging.grid.schemes()),
                containers: self.runtimes.clone(),
                images: self.images.clone().unwrap_or_default(),
                ..self.config.capabilities.environment()
            },
        }
    }

    /// A number that changes whenever what [`Agent::info`] publishes does
    /// but for the time passed ([`brokk_core::SiteCore::published_version`]).
    pub async fn published_version(&self) -> u64 {
        self.read().await.core.published_version()
    }

    /// The API's calls so far.
    pub fn api_metrics(&self) -> &crate::metrics::ApiMetrics {
        &self.api_metrics
    }

    /// The site's figures in Prometheus's text exposition: its jobs not
    /// yet ended by state, its reservations (jobs' own slots included),
    /// its free processors, the subscriptions open, and the API's calls.
    pub async fn metrics(&self) -> String {
        use std::fmt::Write as _;
        let t = now();
        let (by_state, reservations, free) = {
            let g = self.read().await;
            let mut by_state: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
            for j in g.core.active() {
                let state = serde_json::to_value(j.state)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string));
                *by_state.entry(state.unwrap_or_default()).or_default() += 1;
            }
            (by_state, g.core.planner().len(), g.core.published(t).free_now)
        };
        use crate::metrics::family;
        let mut out = String::new();
        family(
            &mut out,
            "brokk_site_jobs",
            "gauge",
            "Jobs at the site not yet ended, by state.",
        );
        for state in ["accepted", "staging-in", "queued", "running", "staging-out"] {
            let n = by_state.get(state).copied().unwrap_or(0);
            let _ = writeln!(out, "brokk_site_jobs{{state=\"{state}\"}} {n}");
        }
        let open = MAX_SUBSCRIPTIONS - self.subscriptions.available_permits();
        let supervisors = crate::metrics::SUPERVISORS.load(std::sync::atomic::Ordering::Relaxed);
        for (name, help, v) in [
            (
                "brokk_site_reservations",
                "Reservations the site's planner holds.",
                reservations as u64,
            ),
            ("brokk_site_free_slots", "Processors free now.", u64::from(free)),
            (
                "brokk_site_subscriptions",
                "Subscriptions to the site's information open now.",
                open as u64,
            ),
            (
                "brokk_site_supervisors",
                "Job supervisors the agent follows now.",
                supervisors,
            ),
        ] {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {v}");
        }
        self.api_metrics.write(&mut out);
        crate::metrics::BACKEND_COMMANDS.write(&mut out);
        out
    }

    /// Room for one more subscription to the site's information, held
    /// while it is open; `None` when [`MAX_SUBSCRIPTIONS`] are.
    pub fn subscription(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.subscriptions.clone().try_acquire_owned().ok()
    }

    /// `GET /v1/slots`: the site's free capacity over a span, computed now
    /// ([`brokk_core::SiteCore::slots`]).
    pub async fn slots(
        &self,
        from: Option<Time>,
        to: Option<Time>,
        min_amount: i64,
        min_duration: Duration,
    ) -> Result<brokk_model::Availability, AgentError> {
        let t = now();
        let from = from.unwrap_or(t);
        let to = to.unwrap_or(from.max(t) + brokk_core::PUBLISHED_SPAN);
        let g = self.read().await;
        Ok(g.core.slots(t, from, to, min_amount, min_duration)?)
    }

    /// `POST /v1/probe`.
    pub async fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, AgentError> {
        self.check_available()?;
        let g = self.read().await;
        Ok(g.core.probe(now(), req, k)?)
    }

    /// `POST /v1/reservations`. Behind Slurm the grant is made there too,
    /// outside the lock; if Slurm cannot, the grant is taken back.
    pub async fn reserve(&self, who: &str, body: &ReservationRequest) -> Result<ReservationView, AgentError> {
        if let Some(why) = self.backend.cannot_reserve() {
            return Err(CoreError::Conflict(why.into()).into());
        }
        if let Some(h) = body.hold {
            if h <= 0 {
                return Err(CoreError::BadRequest("hold: must be a positive number of seconds".into()).into());
            }
        }
        self.check_available()?;
        let req = body.request();
        let (r, commands) = self
            .op(|core, t| {
                let hold = body.hold.map(|h| Time(t.0.saturating_add(h)));
                core.reserve(t, who, &req, hold)
            })
            .await?;
        for c in commands {
            if let Err(e) = self.command(&c).await {
                return Err(self.undo(r.id, None, &req, e).await);
            }
        }
        Ok(view(&r))
    }

    /// Takes back a grant or change Slurm did not carry out and returns the
    /// error to answer: unavailable, or a rejection whose next start is the
    /// schedule's next one after `req`'s window (Slurm itself cannot say).
    async fn undo(&self, id: ReservationId, old: Option<&Reservation>, req: &Request, e: SlurmError) -> AgentError {
        let mut g = self.lock().await;
        g.core.revert(id, old);
        if let Err(e) = self.apply(&mut g).await {
            return e;
        }
        match e {
            SlurmError::Unavailable(m) => {
                self.backend.note(&SlurmError::Unavailable(m.clone()));
                AgentError::Unavailable(m)
            }
            SlurmError::Refused(m) => {
                tracing::warn!("Slurm refused a reservation the planner granted: {m}");
                CoreError::NotGranted(brokk_core::Reply::Rejected {
                    next_start: g.core.next_start_after(req),
                })
                .into()
            }
        }
    }

    /// `GET /v1/reservations/{id}`.
    pub async fn reservation(&self, who: &str, id: ReservationId) -> Result<ReservationView, AgentError> {
        self.op_now(|core, t| core.reservation(t, who, id))
            .await
            .map(|r| view(&r))
    }

    /// `GET /v1/reservations/endangered`: `who`'s reservations the site
    /// can no longer hold, part of it being lost.
    pub async fn endangered(&self, who: &str) -> Vec<ReservationView> {
        let t = now();
        self.read().await.core.endangered_of(t, who).iter().map(view).collect()
    }

    /// `PATCH /v1/reservations/{id}`: atomic; on failure nothing changes.
    pub async fn modify(&self, who: &str, id: ReservationId, change: Change) -> Result<ReservationView, AgentError> {
        self.check_available()?;
        let (r, commands) = self.op(|core, t| core.modify(t, who, id, change)).await?;
        for c in commands {
            if let Err(e) = self.command(&c).await {
                let Command::Modify { old, .. } = &c else { continue };
                let req = Request {
                    amount: r.amount,
                    duration: r.end - r.start,
                    earliest: change.window.map_or(old.start, |w| w.0),
                    latest: change.window.map_or(old.start, |w| w.1),
                    flexible: false,
                };
                return Err(self.undo(id, Some(old), &req, e).await);
            }
        }
        Ok(view(&r))
    }

    /// `POST /v1/reservations/{id}/commit`.
    pub async fn commit(&self, who: &str, id: ReservationId) -> Result<ReservationView, AgentError> {
        self.op_now(|core, t| core.commit(t, who, id)).await.map(|r| view(&r))
    }

    /// `DELETE /v1/reservations/{id}`.
    pub async fn cancel(&self, who: &str, id: ReservationId) -> Result<(), AgentError> {
        self.op_now(|core, t| core.cancel(t, who, id)).await
    }

    /// Deletes every identity's uploads older than the configured retention
    /// that no unfinished job of theirs names; returns how many went.
    pub async fn sweep_uploads(&self) -> usize {
        let before = std::time::SystemTime::now() - std::time::Duration::from_secs(self.config.upload_retention_s);
        let needed: std::collections::HashSet<(String, String)> = {
            let g = self.read().await;
            g.core
                .active()
                .flat_map(|j| {
                    j.spec
                        .input_files
                        .iter()
                        .filter_map(|f| crate::uploads::digest_of(f.source.as_deref()?))
                        .map(|sha| (j.owner.clone(), sha.to_string()))
                        .collect::<Vec<_>>()
                })
                .collect()
        };
        let uploads = self.uploads.clone();
        tokio::task::spawn_blocking(move || {
            uploads
                .owners()
                .into_iter()
                .map(|(owner, dir)| {
                    uploads.sweep(&dir, before, &|sha| needed.contains(&(owner.clone(), sha.to_string())))
                })
                .sum()
        })
        .await
        .unwrap_or(0)
    }

    /// Lets holds lapse on time, moves queued jobs up into what lapsed and
    /// retires jobs ended longer than `min_job_age_s` ago; the agent calls
    /// it twice a second.
    pub async fn expire(&self) -> Result<(), AgentError> {
        let age = self.config.min_job_age_s;
        self.op_now(|core, t| {
            core.tick(t);
            core.retire(Time(t.0 - age));
            Ok(())
        })
        .await
    }

    /// `POST /v1/jobs`: records the job durably and places it (into its
    /// claimed reservation, or at its earliest fit); returns its id and whether
    /// it is new. A submission repeating an earlier one's idempotency key
    /// returns that job instead of making another.
    ///
    /// A delegate (a broker) may name the user it submits for in
    /// `on_behalf`; that user's local account runs the job.
    ///
    /// With `explicit_commit`, a job claiming a hold leaves it a hold and
    /// does not start until the hold is committed; if the hold lapses first,
    /// the job is cancelled (a broker's two-phase co-allocation). With
    /// `release_with_job`, the claimed reservation was made for this job
    /// alone and ends with it.
    pub async fn submit(
        &self,
        who: &str,
        mut spec: Job,
        key: Option<String>,
        on_behalf: Option<String>,
        (explicit_commit, release_with_job): (bool, bool),
    ) -> Result<(JobId, bool), AgentError> {
        // A script's own #SBATCH header says what the job is, here as at the
        // broker: Slurm would read it otherwise, after the agent's options.
        brokk_jdl::absorb_script_headers(std::slice::from_mut(&mut spec))
            .map_err(|e| CoreError::BadRequest(e.to_string()))?;
        // Only a delegate speaks for another user. Where no accounts are
        // configured the name changes nothing, so a broker that sends it to
        // an agent that does not know it as a delegate still works there.
        let on_behalf = match on_behalf {
            Some(user) if self.config.delegates.contains(who) => {
                self.config
                    .delegates
                    .may_speak_for(who, &user)
                    .map_err(CoreError::Forbidden)?;
                Some(user)
            }
            Some(_) if !self.config.accounts.is_empty() => {
                return Err(CoreError::Forbidden(format!(
                    "submitting on behalf of another user: {who} is not a delegate here, so it"
                ))
                .into())
            }
            _ => None,
        };
        let user = on_behalf.as_deref().unwrap_or(who);
        self.accounts
            .of(user)
            .map_err(|m| CoreError::Forbidden(format!("{m}; the job")))?;
        if let Some(why) = self
            .backend()
            .shared_identity_refusal(user, !self.config.accounts.is_empty())
        {
            return Err(CoreError::Forbidden(why).into());
        }
        // A container job runs only in an image the site holds or pulls:
        // anywhere else it would run on the host, outside its image.
        if let Some(image) = &spec.container_image {
            match &self.images {
                None => {
                    return Err(CoreError::BadRequest(format!(
                        "the container image {image}: this site runs no containers"
                    ))
                    .into())
                }
                Some(images) if !brokk_model::image_held(images, image) => {
                    return Err(CoreError::BadRequest(format!(
                        "the container image {image}: this site neither holds nor pulls it"
                    ))
                    .into())
                }
                Some(_) => {}
            }
        }
        // An application named without an executable is the site's to
        // resolve, from its own list, before anything else reads the job.
        if let (None, None, Some(app)) = (&spec.executable, &spec.script, &spec.application) {
            let exe =
                self.config.capabilities.resolve(app).ok_or_else(|| {
                    CoreError::BadRequest(format!("the application {app}: this site does not have it"))
                })?;
            spec.executable = Some(exe.to_string());
        }
        // Every backend gets these names as they are (sbatch would take an
        // absolute or `..` one at its word): each stays inside the sandbox.
        for (what, name) in [
            ("working_directory", &spec.working_directory),
            ("stdin", &spec.stdin),
            ("stdout", &spec.stdout),
            ("stderr", &spec.stderr),
        ] {
            if let Some(name) = name {
                crate::sandbox::components(name)
                    .map_err(|m| CoreError::BadRequest(format!("{what}: {m}; jobs run in their sandbox")))?;
            }
        }
        // An uploaded input must be here, in the submitter's own store.
        for f in &spec.input_files {
            let Some(source) = f.source.as_deref() else {
                return Err(CoreError::BadRequest(format!(
                    "input file {}: it names no source; upload it (PUT /v1/uploads/SHA256) and name it upload:SHA256",
                    f.name
                ))
                .into());
            };
            let Some(sha) = crate::uploads::digest_of(source) else {
                continue;
            };
            if self.uploads.size(who, sha).is_none() {
                return Err(CoreError::BadRequest(format!(
                    "input file {}: upload {sha} is not here; PUT it to /v1/uploads/{sha} first",
                    f.name
                ))
                .into());
            }
        }
        let sub = Submission {
            spec,
            key,
            on_behalf,
            explicit_commit,
            release_with_job,
        };
        // A repeated key answers even while the resource manager is down.
        let repeat = match sub.key.as_deref() {
            Some(k) => self.read_job_by_key(who, k, |j| j.id).await.ok(),
            None => None,
        };
        if let Some(id) = repeat {
            return Ok((id, false));
        }
        self.check_available()?;
        self.op_now(|core, t| core.submit(t, who, sub)).await
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn job(&self, who: &str, id: JobId) -> Result<JobView, AgentError> {
        self.read_job(who, id, job_view).await
    }

    /// `GET /v1/jobs/by-key/{key}`: the caller's job submitted with this
    /// idempotency key, so a client that crashed mid-submission can tell
    /// whether the site already has the job.
    pub async fn job_by_key(&self, who: &str, key: &str) -> Result<JobView, AgentError> {
        self.read_job_by_key(who, key, job_view).await
    }

    /// `GET /v1/jobs/changes?after=V`: the caller's jobs changed after version
    /// `after` of this run (`epoch`), oldest change first, at most `limit`.
    pub async fn changes(&self, who: &str, epoch: u64, after: u64, limit: usize) -> Result<ChangeFeed, AgentError> {
        // Another run's versions mean nothing here: start from the beginning.
        let after = if epoch == self.epoch { after } else { 0 };
        let page = self
            .seen(|g| match g.core.changes(who, after, limit) {
                Some((jobs, version)) => Ok((jobs.into_iter().map(job_view).collect(), version)),
                None => Err(g.core.feed_version()),
            })
            .await?;
        let (jobs, version) = match page {
            Ok(page) => page,
            // Behind what the core retired: the store has every change up
            // to `latest` durable, and perhaps later ones, in version order.
            Err(latest) => {
                let rows = self.store.changes(who, after, limit).await?;
                let last = rows.last().map_or(after, |r| r.1);
                let version = if rows.len() >= limit { last } else { last.max(latest) };
                (rows.iter().map(|(j, _)| job_view(j)).collect(), version)
            }
        };
        Ok(ChangeFeed {
            epoch: self.epoch,
            version,
            jobs,
        })
    }

    /// `who`'s job `id` read through `f`: from the core, or from the store
    /// once the core has retired it.
    async fn read_job<T>(&self, who: &str, id: JobId, f: impl Fn(&JobRecord) -> T) -> Result<T, AgentError> {
        match self.seen_if(|g| g.core.job(who, id).map(&f), Result::is_ok).await? {
            Err(CoreError::NotFound(m)) => Ok(f(&owned_by(who, self.store.job(id).await?, m)?)),
            r => Ok(r?),
        }
    }

    /// `who`'s job submitted with idempotency key `key`, read through `f`
    /// (see [`Agent::read_job`]).
    async fn read_job_by_key<T>(&self, who: &str, key: &str, f: impl Fn(&JobRecord) -> T) -> Result<T, AgentError> {
        match self
            .seen_if(|g| g.core.job_by_key(who, key).map(&f), Result::is_ok)
            .await?
        {
            Err(CoreError::NotFound(m)) => Ok(f(&owned_by(who, self.store.job_by_key(who, key).await?, m)?)),
            r => Ok(r?),
        }
    }

    /// `DELETE /v1/jobs/{id}`: any state; a running process is terminated by
    /// its runner, which records the end.
    pub async fn cancel_job(&self, who: &str, id: JobId) -> Result<JobView, AgentError> {
        match self.op_now(|core, t| core.cancel_job(t, who, id).map(job_view)).await {
            // A retired job ended long ago: there is nothing to cancel.
            Err(AgentError::Refused(CoreError::NotFound(_))) => self.read_job(who, id, job_view).await,
            r => r,
        }
    }

    /// `POST /v1/jobs/{id}/hold`: a job that waits gives its slot back and
    /// does not start until released; held in the resource manager too,
    /// where that refuses (the job started meanwhile) the hold is undone
    /// and refused.
    pub async fn hold_job(&self, who: &str, id: JobId) -> Result<JobView, AgentError> {
        if let Some(why) = self.backend.cannot_hold() {
            return Err(CoreError::Conflict(format!("job {id}: {why}; cancel it instead")).into());
        }
        let (view, commands) = self.op(|core, t| core.hold_job(t, who, id).map(job_view)).await?;
        for c in &commands {
            if let Err(e) = self.command(c).await {
                self.op_now(|core, t| core.release_job(t, who, id).map(drop)).await?;
                return Err(CoreError::Conflict(format!("job {id} could not be held: {e}")).into());
            }
        }
        Ok(view)
    }

    /// `POST /v1/jobs/{id}/release`: a held job is placed again as an
    /// arrival is; one not held is left as it is.
    pub async fn release_job(&self, who: &str, id: JobId) -> Result<JobView, AgentError> {
        let (view, commands) = self.op(|core, t| core.release_job(t, who, id).map(job_view)).await?;
        for c in &commands {
            self.command(c)
                .await
                .map_err(|e| AgentError::Unavailable(format!("releasing job {id}: {e}")))?;
        }
        Ok(view)
    }

    /// The sandbox of job `id`.
    pub fn sandbox(&self, id: JobId) -> PathBuf {
        self.config.workdir.join(format!("job-{id}"))
    }

    /// `GET /v1/jobs/{id}/files/{name}`: the regular file `name` (a relative
    /// path) of the caller's job, opened inside its sandbox without following
    /// a link out of it.
    pub async fn file(&self, who: &str, id: JobId, name: &str) -> Result<std::fs::File, AgentError> {
        let user = self.read_job(who, id, |j| j.user().to_string()).await?;
        let owner = self.accounts.of(&user).ok().flatten().map(|a| a.uid);
        crate::sandbox::components(name).map_err(|m| CoreError::BadRequest(format!("name: {m}")))?;
        let (root, rel) = (self.sandbox(id), name.to_string());
        tokio::task::spawn_blocking(move || crate::sandbox::open_read_owned(&root, &rel, owner))
            .await
            .map_err(|e| AgentError::Internal(e.to_string()))?
            .map_err(|_| CoreError::NotFound(format!("file {name} of job {id}")).into())
    }

    /// Registers the runner of job `id` and returns what it needs, or
    /// `None` when the job has already ended.
    pub async fn launch(&self, id: JobId, resumed: bool) -> Option<Launch> {
        let mut g = self.lock().await;
        let l = g.core.launch(id)?;
        // Checked at submission; a mapping removed since runs nothing.
        let account = match self.accounts.of(l.record.user()) {
            Ok(a) => a,
            Err(why) => {
                g.core.finish(now(), id, JobPhase::Failed, None, Some(why));
                if let Err(e) = self.apply(&mut g).await {
                    tracing::error!(job = %id, "recording the end of a job failed: {e}");
                }
                return None;
            }
        };
        let j = l.record;
        // A waiting job without a slot (a backfilling policy protects only
        // the first few) has no start until the site gives it one.
        let never = Time(i64::MAX / 4);
        let start = match j.planned_start {
            Some(s) => s,
            None if (j.is_waiting() || j.state == JobPhase::Held) && j.slot.is_none() => never,
            None => now(),
        };
        let (start_tx, start_rx) = watch::channel(start);
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let (committed_tx, committed_rx) = watch::channel(l.committed);
        g.controls.insert(
            id,
            Control {
                start: start_tx,
                cancel: cancel_tx,
                committed: committed_tx,
            },
        );
        Some(Launch {
            id,
            owner: j.owner.clone(),
            user: j.user().to_string(),
            wall: l.wall.0,
            job: j.spec,
            controls: Controls {
                start: start_rx,
                cancel: cancel_rx,
                committed: committed_rx,
            },
            backend_id: j.backend_id,
            claimed: j.slot.filter(|_| j.claimed),
            started: j.started.is_some(),
            resumed,
            account,
        })
    }

    /// Records that job `id` is in the resource manager as `backend_id`,
    /// queued there.
    pub async fn record_submitted(&self, id: JobId, backend_id: u64) -> Result<(), AgentError> {
        self.op_now(|core, _| {
            core.record_submitted(id, backend_id);
            Ok(())
        })
        .await
    }

    /// Records that job `id` started running at the resource manager's `start`;
    /// its slot in the planner moves there so predictions follow what happened.
    pub async fn mark_running(&self, id: JobId, start: Time) -> Result<(), AgentError> {
        self.op_now(|core, _| {
            core.mark_running(id, start);
            Ok(())
        })
        .await
    }

    /// Brings the planner's mirror of what occupies the cluster without
    /// Brokk up to date (see [`SiteCore::mirror`]).
    pub async fn mirror(&self, occupants: Vec<Occupant>) {
        let done = self
            .op_now(|core, t| {
                core.mirror(t, occupants);
                Ok(())
            })
            .await;
        if let Err(e) = done {
            tracing::error!("moving queued jobs up: {e}");
        }
    }

    /// Of resource-manager job ids, those submitted for a job that has since
    /// ended, each with that job (for the backend's tidying), under one lock.
    pub async fn ended_as(&self, backend_ids: impl IntoIterator<Item = u64>) -> Vec<(JobId, u64)> {
        self.read().await.core.ended_as(backend_ids)
    }

    /// Whether reservation `id` is live (for the backend's tidying).
    pub async fn holds_reservation(&self, id: u64) -> bool {
        self.read().await.core.holds_reservation(ReservationId(id))
    }

    /// Moves a job to `phase` (not a terminal one); false if it has ended.
    pub async fn set_phase(&self, id: JobId, phase: JobPhase) -> Result<bool, AgentError> {
        self.op_now(|core, t| Ok(core.set_phase(t, id, phase))).await
    }

    /// Records how a job ended and frees what it held.
    pub async fn finish(
        &self,
        id: JobId,
        phase: JobPhase,
        exit_code: Option<i32>,
        reason: Option<String>,
    ) -> Result<(), AgentError> {
        self.op_now(|core, t| {
            core.finish(t, id, phase, exit_code, reason);
            Ok(())
        })
        .await
    }
}

impl Progress for Agent {
    async fn set_phase(&self, id: JobId, phase: JobPhase) -> bool {
        matches!(Agent::set_phase(self, id, phase).await, Ok(true))
    }

    async fn record_submitted(&self, id: JobId, backend_id: u64) {
        if let Err(e) = Agent::record_submitted(self, id, backend_id).await {
            tracing::error!(job = %id, "recording resource manager job {backend_id}: {e}");
        }
    }

    async fn mark_running(&self, id: JobId, start: Time) {
        if let Err(e) = Agent::mark_running(self, id, start).await {
            tracing::error!(job = %id, "recording the start: {e}");
        }
    }

    async fn mirror(&self, occupants: Vec<Occupant>) {
        Agent::mirror(self, occupants).await
    }

    async fn ended_as(&self, backend_ids: Vec<u64>) -> Vec<(JobId, u64)> {
        Agent::ended_as(self, backend_ids).await
    }

    async fn holds_reservation(&self, id: u64) -> bool {
        Agent::holds_reservation(self, id).await
    }
}
