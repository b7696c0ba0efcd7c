//! The agent's state and operations: the planner, the job records and their
//! controls, behind one async lock that is held until the change is durable,
//! so the database always holds what the API has answered, in order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use brokk_model::{Duration, Job, Time};
use brokk_planner::{Candidate, Change, FreeList, Planner, PlannerError, Reply, Request, ReservationId, State};
use brokk_proto::wire::{
    ChangeFeed, InfoView, JobPhase, JobView, ReservationRequest, ReservationState, ReservationView,
};
use tokio::sync::{watch, Mutex, MutexGuard};

use crate::accounts::{Account, Accounts};
use crate::config::Config;
use crate::slurm::cli::{ResSpec, SlurmError};
use crate::slurm::{Occupant, Slurm};
use crate::store::{JobRecord, Store, StoreError};

/// Why an operation failed, as the API reports it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// Someone else's reservation or job.
    #[error("{0} belongs to someone else")]
    Forbidden(String),
    /// No such reservation, job or file.
    #[error("{0} not found")]
    NotFound(String),
    /// Not granted: the protocol reply (Rejected or Never).
    #[error("not granted")]
    NotGranted(Reply),
    /// The operation conflicts with the current state.
    #[error("{0}")]
    Conflict(String),
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

/// What the runner of one job listens to.
#[derive(Debug, Clone)]
pub struct Controls {
    /// The planned start, which moves earlier when the queue compresses.
    pub start: watch::Receiver<Time>,
    /// Set when the owner cancels.
    pub cancel: watch::Receiver<bool>,
    /// Whether the reservation the job claimed is committed: a job
    /// submitted into a hold with an explicit commit waits for it.
    pub committed: watch::Receiver<bool>,
}

/// What a job's runner needs to run it.
#[derive(Debug)]
pub struct Launch {
    /// Job id on this site.
    pub id: u64,
    /// The description.
    pub job: Job,
    /// What it listens to.
    pub controls: Controls,
    /// Its id in the resource manager, once submitted there.
    pub backend_id: Option<u64>,
    /// The owner's reservation it runs in, if it claimed one.
    pub claimed: Option<ReservationId>,
    /// Its wall time, seconds (the site's default when it states none).
    pub wall: i64,
    /// Whether it has started.
    pub started: bool,
    /// Whether the agent restarted since the job was accepted.
    pub resumed: bool,
    /// The local account it runs as (`None`: the agent's own).
    pub account: Option<Account>,
}

#[derive(Debug)]
struct Control {
    start: watch::Sender<Time>,
    cancel: watch::Sender<bool>,
    committed: watch::Sender<bool>,
}

/// Everything behind the lock.
#[derive(Debug)]
pub(crate) struct Inner {
    planner: Planner<FreeList>,
    jobs: BTreeMap<u64, JobRecord>,
    /// Jobs not yet ended: every scan of live jobs goes over these only.
    active: BTreeSet<u64>,
    controls: HashMap<u64, Control>,
    /// (owner, idempotency key) -> job, so a repeated submission is one job.
    keys: HashMap<(String, String), u64>,
    /// The change feed: every job under the version of its latest change.
    changes: BTreeMap<u64, u64>,
    /// Each job's latest version.
    versions: HashMap<u64, u64>,
    /// The last version given out.
    version: u64,
    next_job: u64,
    /// What occupies the resource manager's cluster without Brokk having put
    /// it there, mirrored in the planner: key -> (occupant, its reservation).
    foreign: HashMap<String, (Occupant, Option<ReservationId>)>,
}

impl Inner {
    fn active(&self) -> impl Iterator<Item = &JobRecord> {
        self.active.iter().filter_map(|id| self.jobs.get(id))
    }

    /// Records that job `id` changed, for the change feed.
    fn touch(&mut self, id: u64) {
        self.version += 1;
        if let Some(old) = self.versions.insert(id, self.version) {
            self.changes.remove(&old);
        }
        self.changes.insert(self.version, id);
    }

    /// A conflict when a live job holds reservation `id`.
    fn free_of_jobs(&self, id: ReservationId, what: &str) -> Result<(), AgentError> {
        match self.active().find(|j| j.slot == Some(id)) {
            Some(job) => Err(AgentError::Conflict(format!(
                "reservation {} is {what} job {}",
                id.0, job.id
            ))),
            None => Ok(()),
        }
    }
}

/// The agent: share it by cloning.
#[derive(Debug, Clone)]
pub struct Agent {
    config: Arc<Config>,
    store: Store,
    /// Identifies this run of the agent: change-feed versions restart with it.
    epoch: u64,
    inner: Arc<Mutex<Inner>>,
    /// The Slurm backend; `None` runs jobs as local processes.
    slurm: Option<Arc<Slurm>>,
    /// Local accounts of the site's users.
    accounts: Accounts,
    /// Where `file://` staging may go.
    staging: Arc<crate::staging::Allowed>,
}

/// The owner of what the planner mirrors from the resource manager; no
/// token maps to it, so no caller can touch those reservations.
const FOREIGN: &str = "(resource manager)";

fn view(r: &brokk_planner::Reservation) -> ReservationView {
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

/// Jobs that cannot be taken up again after an agent restart: a stage-out
/// whose job's end nobody recorded (neither a supervisor nor a resource
/// manager). A running local job is followed through its supervisor, or
/// started if it never got one (it was recorded as running just before its
/// start, so it never ran); a job a resource manager was given is followed
/// there, its stage-out done again.
fn died_with_agent(p: JobPhase, followable: bool) -> bool {
    p == JobPhase::StagingOut && !followable
}

impl Agent {
    /// Opens the database and reloads the schedule and the jobs: holds that
    /// lapsed while the agent was down expire now, and a job whose process died
    /// with the agent is recorded as failed with that reason. Returns the agent
    /// and the ids of jobs whose runner must (re)start.
    pub async fn open(mut config: Config) -> Result<(Agent, Vec<u64>), AgentError> {
        let slurm = match config.slurm.clone() {
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
                Some(Arc::new(slurm))
            }
            None => None,
        };
        if let Some(dir) = config.database.parent() {
            std::fs::create_dir_all(dir).map_err(|e| AgentError::Internal(e.to_string()))?;
        }
        std::fs::create_dir_all(&config.workdir).map_err(|e| AgentError::Internal(e.to_string()))?;
        // Job accounts pass through to their own sandbox; nobody lists the jobs.
        std::fs::set_permissions(&config.workdir, std::os::unix::fs::PermissionsExt::from_mode(0o711))
            .map_err(|e| AgentError::Internal(format!("{}: {e}", config.workdir.display())))?;
        let accounts = Accounts::resolve(&config).map_err(AgentError::Internal)?;
        let store = Store::open(&config.database).await?;
        let t = now();
        let horizon = Time(t.0 + config.horizon_days * 86_400);
        let mut planner = Planner::new(config.capacity, horizon, FreeList::new());
        let mut dropped = Vec::new();
        for r in store.live_reservations().await? {
            if r.end <= t || planner.restore(&r).is_err() {
                dropped.push(r.id);
            }
        }
        store.end_reservations(&dropped, "released").await?;
        planner.issue_ids_from(store.max_reservation_id().await? + 1);
        let expired = planner.expire(t);
        store.end_reservations(&expired, "expired").await?;
        let mut jobs = BTreeMap::new();
        let mut resume = Vec::new();
        let mut active = BTreeSet::new();
        let mut keys = HashMap::new();
        let mut next_job = 1;
        for mut j in store.jobs().await? {
            next_job = next_job.max(j.id + 1);
            let followable = match slurm {
                None => crate::supervisor::started(&crate::supervisor::dir(&config.workdir, j.id)),
                Some(_) => j.backend_id.is_some(),
            };
            if died_with_agent(j.state, followable) {
                j.state = JobPhase::Failed;
                j.reason = Some("the site agent stopped while the job was running".into());
                j.ended = Some(t);
                if let (Some(slot), false) = (j.slot, j.claimed) {
                    if planner.cancel(slot).is_ok() {
                        store.end_reservations(&[slot], "released").await?;
                    }
                }
                store.save_job(&j).await?;
            } else if !j.state.is_terminal() {
                resume.push(j.id);
            }
            if !j.state.is_terminal() {
                active.insert(j.id);
            }
            if let Some(k) = &j.key {
                keys.insert((j.owner.clone(), k.clone()), j.id);
            }
            jobs.insert(j.id, j);
        }
        let mut inner = Inner {
            planner,
            jobs,
            active,
            controls: HashMap::new(),
            keys,
            changes: BTreeMap::new(),
            versions: HashMap::new(),
            version: 0,
            next_job,
            foreign: HashMap::new(),
        };
        let ids: Vec<u64> = inner.jobs.keys().copied().collect();
        for id in ids {
            inner.touch(id);
        }
        let agent = Agent {
            store,
            epoch: t.0 as u64 ^ (std::process::id() as u64) << 32,
            inner: Arc::new(Mutex::new(inner)),
            slurm,
            accounts,
            staging: Arc::new(crate::staging::Allowed {
                read: config.stage_in_dirs.clone(),
                write: config.stage_out_dirs.clone(),
                workdir: config.workdir.clone(),
            }),
            config: Arc::new(config),
        };
        // Queued jobs move up into what the jobs that died with the agent held.
        {
            let mut g = agent.lock().await;
            agent.compress_locked(&mut g).await?;
        }
        Ok((agent, resume))
    }

    /// Where `file://` staging may go, from the configuration.
    pub fn staging(&self) -> &Arc<crate::staging::Allowed> {
        &self.staging
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A job's wall time, seconds: its own, or the site's default.
    fn wall_time(&self, job: &Job) -> i64 {
        job.wall_time.map_or(self.config.default_wall_time, |d| d.0)
    }

    /// The Slurm backend, when the agent fronts a Slurm cluster.
    pub fn slurm(&self) -> Option<&Arc<Slurm>> {
        self.slurm.as_ref()
    }

    /// An error while the resource manager does not answer.
    fn check_available(&self) -> Result<(), AgentError> {
        match self.slurm.as_ref().and_then(|s| s.down()) {
            Some(why) => Err(AgentError::Unavailable(why)),
            None => Ok(()),
        }
    }

    async fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().await
    }

    /// `GET /v1/info`.
    pub async fn info(&self) -> InfoView {
        let t = now();
        let g = self.lock().await;
        let free_now = g
            .planner
            .free_slots(t, Time(t.0 + 1))
            .first()
            .map_or(self.config.capacity, |s| s.free);
        let running = g
            .active()
            .filter(|j| matches!(j.state, JobPhase::Running | JobPhase::StagingOut))
            .count() as u32;
        let waiting = g.active().count() as u32 - running;
        let probe = Request {
            amount: 1,
            duration: Duration(3600),
            earliest: t,
            latest: Time(i64::MAX / 2),
            flexible: false,
        };
        let unavailable = self.check_available().err();
        let estimated_wait = match g.planner.earliest_start(&probe) {
            Ok(Some(s)) => s - t,
            _ => Duration(0),
        };
        InfoView {
            name: self.config.name.clone(),
            capacity: self.config.capacity,
            free_now,
            running,
            waiting,
            estimated_wait,
            benchmarks: self.config.benchmarks.clone(),
            bandwidth_bytes_per_s: self.config.bandwidth_bytes_per_s,
            reservations: true,
            available: unavailable.is_none(),
            unavailable_reason: unavailable.map(|e| e.to_string()),
            cluster: self.slurm.as_ref().and_then(|s| s.cluster()),
        }
    }

    /// `POST /v1/probe`.
    pub async fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, AgentError> {
        self.check_available()?;
        let g = self.lock().await;
        g.planner
            .probe(req, k.clamp(1, 100))
            .map_err(|reason| AgentError::NotGranted(Reply::Never { reason }))
    }

    /// Persists the live flexible reservations, which a grant may have moved.
    async fn save_flexible(&self, g: &Inner) -> Result<(), AgentError> {
        let moved = g.planner.flexible_reservations();
        if !moved.is_empty() {
            self.store.save_reservations(&moved).await?;
        }
        Ok(())
    }

    /// `POST /v1/reservations`.
    pub async fn reserve(&self, who: &str, body: &ReservationRequest) -> Result<ReservationView, AgentError> {
        if let Some(h) = body.hold {
            if h <= 0 {
                return Err(AgentError::BadRequest(
                    "hold: must be a positive number of seconds".into(),
                ));
            }
        }
        self.check_available()?;
        let mut g = self.lock().await;
        self.expire_locked(&mut g).await?;
        let hold = body.hold.map(|h| Time(now().0.saturating_add(h)));
        let req = body.request();
        match g.planner.reserve(who, &req, hold) {
            Reply::Granted { id, .. } => {
                if let Err(e) = self.slurm_create(&g, id).await {
                    let _ = g.planner.cancel(id);
                    return Err(self.slurm_refusal(&g, &req, e));
                }
                let v = self.save_view(&g, id).await?;
                self.save_flexible(&g).await?;
                Ok(v)
            }
            other => Err(AgentError::NotGranted(other)),
        }
    }

    fn owned(g: &Inner, who: &str, id: ReservationId) -> Result<brokk_planner::Reservation, AgentError> {
        let r = g
            .planner
            .get(id)
            .ok_or_else(|| AgentError::NotFound(format!("reservation {}", id.0)))?;
        if r.owner.as_ref() != who {
            return Err(AgentError::Forbidden(format!("reservation {}", id.0)));
        }
        Ok(r)
    }

    /// `GET /v1/reservations/{id}`.
    pub async fn reservation(&self, who: &str, id: ReservationId) -> Result<ReservationView, AgentError> {
        let mut g = self.lock().await;
        self.expire_locked(&mut g).await?;
        Ok(view(&Self::owned(&g, who, id)?))
    }

    /// Writes reservation `id` as it now is and returns its view.
    async fn save_view(&self, g: &Inner, id: ReservationId) -> Result<ReservationView, AgentError> {
        let r = g
            .planner
            .get(id)
            .ok_or_else(|| AgentError::Internal("lost a reservation".into()))?;
        self.store.save_reservations(std::slice::from_ref(&r)).await?;
        Ok(view(&r))
    }

    /// `PATCH /v1/reservations/{id}`: atomic; on failure nothing changes.
    pub async fn modify(&self, who: &str, id: ReservationId, change: Change) -> Result<ReservationView, AgentError> {
        self.check_available()?;
        let mut g = self.lock().await;
        self.expire_locked(&mut g).await?;
        let old = Self::owned(&g, who, id)?;
        g.free_of_jobs(id, "in use by")?;
        match g.planner.modify(id, change) {
            Ok(_) => {
                if let Err(e) = self.slurm_modify(&g, &old).await {
                    // Back to exactly what it was, as Slurm kept it.
                    let _ = g.planner.cancel(id);
                    let _ = g.planner.restore(&old);
                    let req = Request {
                        amount: change.amount.unwrap_or(old.amount),
                        duration: change.duration.unwrap_or(old.end - old.start),
                        earliest: change.window.map_or(old.start, |w| w.0),
                        latest: change.window.map_or(old.start, |w| w.1),
                        flexible: false,
                    };
                    return Err(self.slurm_refusal(&g, &req, e));
                }
                self.save_view(&g, id).await
            }
            Err(PlannerError::DoesNotFit(reply)) => Err(AgentError::NotGranted(reply)),
            Err(PlannerError::Unknown(_)) => Err(AgentError::NotFound(format!("reservation {}", id.0))),
        }
    }

    /// `POST /v1/reservations/{id}/commit`.
    pub async fn commit(&self, who: &str, id: ReservationId) -> Result<ReservationView, AgentError> {
        let mut g = self.lock().await;
        self.expire_locked(&mut g).await?;
        Self::owned(&g, who, id)?;
        g.planner
            .commit(id)
            .map_err(|_| AgentError::NotFound(format!("reservation {}", id.0)))?;
        let view = self.save_view(&g, id).await?;
        // A job waiting for this commit may start now.
        for j in g
            .active
            .iter()
            .filter_map(|j| g.jobs.get(j))
            .filter(|j| j.slot == Some(id))
        {
            if let Some(c) = g.controls.get(&j.id) {
                let _ = c.committed.send(true);
            }
        }
        Ok(view)
    }

    /// `DELETE /v1/reservations/{id}`.
    pub async fn cancel(&self, who: &str, id: ReservationId) -> Result<(), AgentError> {
        let mut g = self.lock().await;
        self.expire_locked(&mut g).await?;
        Self::owned(&g, who, id)?;
        g.free_of_jobs(id, "in use by (cancel it first)")?;
        g.planner
            .cancel(id)
            .map_err(|_| AgentError::NotFound(format!("reservation {}", id.0)))?;
        self.store.end_reservations(&[id], "cancelled").await?;
        self.slurm_delete(&[id]).await;
        Ok(())
    }

    async fn expire_locked(&self, g: &mut Inner) -> Result<(), AgentError> {
        let gone = g.planner.expire(now());
        if !gone.is_empty() {
            self.store.end_reservations(&gone, "expired").await?;
            self.slurm_delete(&gone).await;
            // Jobs submitted into a hold that was never committed go with it.
            let waiting: Vec<JobRecord> = g
                .active()
                .filter(|j| j.slot.is_some_and(|s| gone.contains(&s)))
                .cloned()
                .collect();
            for mut r in waiting {
                if let Some(c) = g.controls.get(&r.id) {
                    let _ = c.cancel.send(true);
                }
                r.state = JobPhase::Cancelled;
                r.reason = Some("its reservation lapsed before it was committed".into());
                r.ended = Some(now());
                self.finish_locked(g, r).await?;
            }
        }
        Ok(())
    }

    /// Lets holds lapse on time and moves queued jobs up into what lapsed; the
    /// agent calls it twice a second.
    pub async fn expire(&self) -> Result<(), AgentError> {
        let mut g = self.lock().await;
        let before = g.planner.len();
        self.expire_locked(&mut g).await?;
        if g.planner.len() < before {
            self.compress_locked(&mut g).await?;
        }
        Ok(())
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
    /// the job is cancelled (a broker's two-phase co-allocation).
    pub async fn submit(
        &self,
        who: &str,
        spec: Job,
        key: Option<String>,
        on_behalf: Option<String>,
        explicit_commit: bool,
    ) -> Result<(u64, bool), AgentError> {
        // Only a delegate speaks for another user. Where no accounts are
        // configured the name changes nothing, so a broker that sends it to
        // an agent that does not know it as a delegate still works there.
        let on_behalf = match on_behalf {
            Some(_) if self.config.delegates.iter().any(|d| d == who) => on_behalf,
            Some(_) if !self.config.accounts.is_empty() => {
                return Err(AgentError::Forbidden(format!(
                    "submitting on behalf of another user: {who} is not a delegate here, so it"
                )))
            }
            _ => None,
        };
        let user = on_behalf.as_deref().unwrap_or(who);
        self.accounts
            .of(user)
            .map_err(|m| AgentError::Forbidden(format!("{m}; the job")))?;
        let amount = spec.cpus.unwrap_or(1).max(1);
        let wall = self.wall_time(&spec);
        if wall <= 0 {
            return Err(AgentError::BadRequest("wall_time: must be positive".into()));
        }
        if spec.executable.is_none() && spec.script.is_none() {
            return Err(AgentError::BadRequest(
                "executable: a job needs an executable or a script".into(),
            ));
        }
        if let Some(dir) = &spec.working_directory {
            crate::sandbox::components(dir)
                .map_err(|m| AgentError::BadRequest(format!("working_directory: {m}; jobs run in their sandbox")))?;
        }
        let mut g = self.lock().await;
        if let Some(k) = &key {
            if let Some(&id) = g.keys.get(&(who.to_string(), k.clone())) {
                return Ok((id, false));
            }
        }
        self.check_available()?;
        self.expire_locked(&mut g).await?;
        let t = now();
        let (slot, claimed, start) = match &spec.reservation {
            Some(text) => {
                let id = text
                    .parse::<u64>()
                    .map(ReservationId)
                    .map_err(|_| AgentError::BadRequest(format!("reservation: `{text}` is not a reservation id")))?;
                let r = Self::owned(&g, who, id)?;
                g.free_of_jobs(id, "already claimed by")?;
                if amount > r.amount || r.end.0 - r.start.0 < wall {
                    return Err(AgentError::BadRequest(format!(
                        "reservation: {} slots for {} s cannot hold {amount} slots for {wall} s",
                        r.amount,
                        r.end.0 - r.start.0
                    )));
                }
                if r.end <= t {
                    return Err(AgentError::Conflict(format!("reservation {} has ended", id.0)));
                }
                // Claiming a hold makes it permanent, unless the caller
                // commits it itself.
                if !explicit_commit {
                    let _ = g.planner.commit(id);
                }
                (id, true, r.start.max(t))
            }
            None => {
                let req = Request {
                    amount,
                    duration: Duration(wall),
                    earliest: t,
                    latest: Time(i64::MAX / 2),
                    flexible: false,
                };
                match g.planner.reserve(who, &req, None) {
                    Reply::Granted { id, start } => (id, false, start),
                    other => return Err(AgentError::NotGranted(other)),
                }
            }
        };
        let id = g.next_job;
        g.next_job += 1;
        let record = JobRecord {
            id,
            owner: who.to_string(),
            spec,
            slot: Some(slot),
            claimed,
            state: JobPhase::Accepted,
            reason: None,
            exit_code: None,
            planned_start: Some(start),
            started: None,
            ended: None,
            key: key.clone(),
            backend_id: None,
            user: on_behalf,
        };
        if let Some(r) = g.planner.get(slot) {
            self.store.save_reservations(&[r]).await?;
        }
        self.store.save_job(&record).await?;
        g.jobs.insert(id, record);
        g.active.insert(id);
        g.touch(id);
        if let Some(k) = key {
            g.keys.insert((who.to_string(), k), id);
        }
        Ok((id, true))
    }

    fn job_of<'a>(g: &'a Inner, who: &str, id: u64) -> Result<&'a JobRecord, AgentError> {
        let j = g
            .jobs
            .get(&id)
            .ok_or_else(|| AgentError::NotFound(format!("job {id}")))?;
        if j.owner != who {
            return Err(AgentError::Forbidden(format!("job {id}")));
        }
        Ok(j)
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn job(&self, who: &str, id: u64) -> Result<JobView, AgentError> {
        let g = self.lock().await;
        Self::job_of(&g, who, id).map(job_view)
    }

    /// `GET /v1/jobs/by-key/{key}`: the caller's job submitted with this
    /// idempotency key, so a client that crashed mid-submission can tell
    /// whether the site already has the job.
    pub async fn job_by_key(&self, who: &str, key: &str) -> Result<JobView, AgentError> {
        let g = self.lock().await;
        let id = g
            .keys
            .get(&(who.to_string(), key.to_string()))
            .copied()
            .ok_or_else(|| AgentError::NotFound(format!("job with key {key}")))?;
        Self::job_of(&g, who, id).map(job_view)
    }

    /// `GET /v1/jobs/changes?after=V`: the caller's jobs changed after version
    /// `after` of this run (`epoch`), oldest change first, at most `limit`.
    pub async fn changes(&self, who: &str, epoch: u64, after: u64, limit: usize) -> ChangeFeed {
        let g = self.lock().await;
        // Another run's versions mean nothing here: start from the beginning.
        let after = if epoch == self.epoch { after } else { 0 };
        let mut jobs = Vec::new();
        let mut version = after;
        for (&v, id) in g.changes.range(after + 1..) {
            if jobs.len() >= limit {
                break;
            }
            version = v;
            if let Some(j) = g.jobs.get(id).filter(|j| j.owner == who) {
                jobs.push(job_view(j));
            }
        }
        ChangeFeed {
            epoch: self.epoch,
            version: if jobs.len() < limit {
                g.version.max(version)
            } else {
                version
            },
            jobs,
        }
    }

    /// `DELETE /v1/jobs/{id}`: any state; a running process is terminated by
    /// its runner, which records the end.
    pub async fn cancel_job(&self, who: &str, id: u64) -> Result<JobView, AgentError> {
        let mut g = self.lock().await;
        let j = Self::job_of(&g, who, id)?.clone();
        if j.state.is_terminal() {
            return Ok(job_view(&j));
        }
        if let Some(c) = g.controls.get(&id) {
            let _ = c.cancel.send(true);
        }
        // A job whose runner has not started yet (or is queued) ends here.
        if matches!(j.state, JobPhase::Accepted | JobPhase::StagingIn | JobPhase::Queued) {
            let mut r = j;
            r.state = JobPhase::Cancelled;
            r.reason = Some("cancelled by its owner".into());
            r.ended = Some(now());
            self.finish_locked(&mut g, r.clone()).await?;
            return Ok(job_view(&r));
        }
        Ok(job_view(&j))
    }

    /// The sandbox of job `id`.
    pub fn sandbox(&self, id: u64) -> PathBuf {
        self.config.workdir.join(format!("job-{id}"))
    }

    /// `GET /v1/jobs/{id}/files/{name}`: the regular file `name` (a relative
    /// path) of the caller's job, opened inside its sandbox without following
    /// a link out of it.
    pub async fn file(&self, who: &str, id: u64, name: &str) -> Result<std::fs::File, AgentError> {
        let owner = {
            let g = self.lock().await;
            let j = Self::job_of(&g, who, id)?;
            self.accounts.of(j.user()).ok().flatten().map(|a| a.uid)
        };
        crate::sandbox::components(name).map_err(|m| AgentError::BadRequest(format!("name: {m}")))?;
        let (root, rel) = (self.sandbox(id), name.to_string());
        tokio::task::spawn_blocking(move || crate::sandbox::open_read_owned(&root, &rel, owner))
            .await
            .map_err(|e| AgentError::Internal(e.to_string()))?
            .map_err(|_| AgentError::NotFound(format!("file {name} of job {id}")))
    }

    /// Registers the runner of job `id` and returns what it needs, or
    /// `None` when the job has already ended.
    pub async fn launch(&self, id: u64, resumed: bool) -> Option<Launch> {
        let mut g = self.lock().await;
        let j = g.jobs.get(&id)?.clone();
        if j.state.is_terminal() {
            return None;
        }
        // Checked at submission; a mapping removed since runs nothing.
        let account = match self.accounts.of(j.user()) {
            Ok(a) => a,
            Err(why) => {
                let mut r = j;
                r.state = JobPhase::Failed;
                r.reason = Some(why);
                r.ended = Some(now());
                if let Err(e) = self.finish_locked(&mut g, r).await {
                    tracing::error!(job = id, "recording the end of a job failed: {e}");
                }
                return None;
            }
        };
        let (start_tx, start_rx) = watch::channel(j.planned_start.unwrap_or_else(now));
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let held = j
            .slot
            .and_then(|s| g.planner.get(s))
            .is_some_and(|r| matches!(r.state, State::Preliminary { .. }));
        let (committed_tx, committed_rx) = watch::channel(!held);
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
            wall: self.wall_time(&j.spec),
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
    pub async fn record_submitted(&self, id: u64, backend_id: u64) -> Result<(), AgentError> {
        let mut g = self.lock().await;
        let Some(j) = g.jobs.get_mut(&id) else { return Ok(()) };
        if j.state.is_terminal() || j.backend_id == Some(backend_id) {
            return Ok(());
        }
        j.backend_id = Some(backend_id);
        if j.state != JobPhase::Running {
            j.state = JobPhase::Queued;
        }
        let rec = j.clone();
        g.touch(id);
        self.store.save_job(&rec).await?;
        Ok(())
    }

    /// Records that the resource manager started job `id` at `start`; its
    /// slot in the planner moves there so predictions follow what happened.
    pub async fn mark_running(&self, id: u64, start: Time) -> Result<(), AgentError> {
        let mut g = self.lock().await;
        let Some(j) = g.jobs.get_mut(&id) else { return Ok(()) };
        if j.state.is_terminal() {
            return Ok(());
        }
        j.state = JobPhase::Running;
        j.started = Some(start);
        let rec = j.clone();
        g.touch(id);
        if let (Some(slot), false) = (rec.slot, rec.claimed) {
            let window = Some((start, start));
            let moved = g.planner.get(slot).filter(|r| r.start != start).is_some()
                && g.planner
                    .modify(
                        slot,
                        Change {
                            window,
                            ..Change::default()
                        },
                    )
                    .is_ok();
            if let Some(r) = g.planner.get(slot).filter(|_| moved) {
                self.store.save_reservations(&[r]).await?;
            }
        }
        self.store.save_job(&rec).await?;
        Ok(())
    }

    /// Brings the planner's mirror of what occupies the cluster without
    /// Brokk up to date: new occupants are booked (as much of them as fits
    /// beside Brokk's own bookings), gone or changed ones released; queued
    /// jobs move up into what was released.
    pub async fn mirror(&self, occupants: Vec<Occupant>) {
        let mut g = self.lock().await;
        let wanted: HashMap<String, Occupant> = occupants.into_iter().map(|o| (o.key.clone(), o)).collect();
        let stale: Vec<String> = g
            .foreign
            .iter()
            .filter(|(k, (o, _))| wanted.get(*k) != Some(o))
            .map(|(k, _)| k.clone())
            .collect();
        let released = !stale.is_empty();
        for k in stale {
            if let Some((_, Some(id))) = g.foreign.remove(&k) {
                let _ = g.planner.cancel(id);
            }
        }
        for (k, o) in wanted {
            if g.foreign.contains_key(&k) {
                continue;
            }
            let span = Duration(o.end.0 - o.start.0);
            let free = g
                .planner
                .free_slots(o.start, o.end)
                .iter()
                .map(|f| f.free)
                .min()
                .unwrap_or(0);
            let amount = o.cpus.min(free);
            if amount < o.cpus {
                tracing::warn!(
                    occupant = %k,
                    "the cluster holds {} CPUs Brokk did not book where Brokk planned; mirrored {amount}",
                    o.cpus
                );
            }
            let id = (amount > 0 && span.0 > 0)
                .then(|| {
                    let req = Request {
                        amount,
                        duration: span,
                        earliest: o.start,
                        latest: o.start,
                        flexible: false,
                    };
                    match g.planner.reserve(FOREIGN, &req, None) {
                        Reply::Granted { id, .. } => Some(id),
                        _ => None,
                    }
                })
                .flatten();
            g.foreign.insert(k, (o, id));
        }
        if released {
            if let Err(e) = self.compress_locked(&mut g).await {
                tracing::error!("moving queued jobs up: {e}");
            }
        }
    }

    /// Those of `ids` whose job has ended or is unknown here (for the
    /// backend's tidying), under one lock.
    pub async fn ended_jobs(&self, ids: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let g = self.lock().await;
        ids.into_iter()
            .filter(|id| g.jobs.get(id).is_none_or(|j| j.state.is_terminal()))
            .collect()
    }

    /// Whether reservation `id` is live (for the backend's tidying).
    pub async fn holds_reservation(&self, id: u64) -> bool {
        let g = self.lock().await;
        g.planner
            .get(ReservationId(id))
            .is_some_and(|r| r.owner.as_ref() != FOREIGN)
    }

    fn res_spec(slurm: &Slurm, r: &brokk_planner::Reservation) -> ResSpec {
        ResSpec {
            name: slurm.reservation_name(r.id.0),
            start: r.start,
            end: r.end,
            cpus: r.amount,
            user: slurm.user.clone(),
            partition: slurm.config.partition.clone(),
        }
    }

    /// Makes reservation `id` in Slurm and reads it back: Slurm has been seen
    /// to grant fewer nodes than asked without an error, so a grant that is
    /// not what was asked is undone and refused.
    async fn slurm_create(&self, g: &Inner, id: ReservationId) -> Result<(), SlurmError> {
        let Some(slurm) = &self.slurm else { return Ok(()) };
        let Some(r) = g.planner.get(id) else { return Ok(()) };
        let spec = Self::res_spec(slurm, &r);
        slurm.cli.create_reservation(&spec).await?;
        let back = slurm.cli.reservation(&spec.name).await;
        let problem = match &back {
            Ok(Some(row)) if row.cpus >= spec.cpus && row.end == Some(spec.end) => None,
            Ok(Some(row)) => Some(format!(
                "Slurm made {} with {} cores until {:?} instead of {} until {}",
                spec.name, row.cpus, row.end, spec.cpus, spec.end.0
            )),
            Ok(None) => Some(format!("Slurm does not show {} after creating it", spec.name)),
            Err(e) => Some(e.to_string()),
        };
        match problem {
            None => Ok(()),
            Some(why) => {
                if let Err(e) = slurm.cli.delete_reservation(&spec.name).await {
                    tracing::warn!(reservation = %spec.name, "undoing a short grant: {e}");
                }
                match back {
                    Err(e @ SlurmError::Unavailable(_)) => Err(e),
                    _ => Err(SlurmError::Refused(why)),
                }
            }
        }
    }

    /// Changes the Slurm reservation of `old` to what the planner now holds
    /// for it. Slurm moves core-based reservations in time but cannot change
    /// their core count: then it is made again, and the old one put back if
    /// the new one does not fit.
    async fn slurm_modify(&self, g: &Inner, old: &brokk_planner::Reservation) -> Result<(), SlurmError> {
        let Some(slurm) = &self.slurm else { return Ok(()) };
        let Some(new) = g.planner.get(old.id) else {
            return Ok(());
        };
        if new.amount == old.amount {
            return slurm
                .cli
                .move_reservation(&slurm.reservation_name(old.id.0), new.start, new.end)
                .await;
        }
        let name = slurm.reservation_name(old.id.0);
        slurm.cli.delete_reservation(&name).await?;
        match self.slurm_create(g, new.id).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Err(back) = slurm.cli.create_reservation(&Self::res_spec(slurm, old)).await {
                    tracing::error!(reservation = %name, "putting back the old reservation failed: {back}");
                }
                Err(e)
            }
        }
    }

    /// Deletes the Slurm reservations of `ids`; what fails now, the poller
    /// deletes later.
    async fn slurm_delete(&self, ids: &[ReservationId]) {
        let Some(slurm) = &self.slurm else { return };
        for id in ids {
            if let Err(e) = slurm.cli.delete_reservation(&slurm.reservation_name(id.0)).await {
                slurm.note(&e);
                tracing::warn!(reservation = id.0, "deleting the Slurm reservation: {e}");
            }
        }
    }

    /// The error for a grant Slurm did not carry out: unavailable, or a
    /// rejection whose next start is the planner's next one after `req`'s
    /// window (Slurm itself cannot say).
    fn slurm_refusal(&self, g: &Inner, req: &Request, e: SlurmError) -> AgentError {
        match e {
            SlurmError::Unavailable(m) => {
                if let Some(s) = &self.slurm {
                    s.note(&SlurmError::Unavailable(m.clone()));
                }
                AgentError::Unavailable(m)
            }
            SlurmError::Refused(m) => {
                tracing::warn!("Slurm refused a reservation the planner granted: {m}");
                let later = Request {
                    earliest: Time(req.latest.0.saturating_add(1)),
                    latest: Time(i64::MAX / 2),
                    ..*req
                };
                let next_start = g.planner.earliest_start(&later).ok().flatten();
                AgentError::NotGranted(Reply::Rejected { next_start })
            }
        }
    }

    /// Moves a job to `phase` (not a terminal one); false if it has ended.
    /// Only `running` is written at once: after a restart a job recorded as
    /// running has lost its process and fails, while one recorded in an
    /// earlier phase is simply staged and queued again.
    pub async fn set_phase(&self, id: u64, phase: JobPhase) -> Result<bool, AgentError> {
        let mut g = self.lock().await;
        let Some(j) = g.jobs.get_mut(&id) else { return Ok(false) };
        if j.state.is_terminal() {
            return Ok(false);
        }
        j.state = phase;
        let record = (phase == JobPhase::Running).then(|| {
            j.started = Some(now());
            j.clone()
        });
        g.touch(id);
        if let Some(r) = record {
            self.store.save_job(&r).await?;
        }
        Ok(true)
    }

    /// Records how a job ended and frees what it held.
    pub async fn finish(
        &self,
        id: u64,
        phase: JobPhase,
        exit_code: Option<i32>,
        reason: Option<String>,
    ) -> Result<(), AgentError> {
        let mut g = self.lock().await;
        let Some(j) = g.jobs.get(&id) else { return Ok(()) };
        if j.state.is_terminal() {
            return Ok(());
        }
        let mut r = j.clone();
        r.state = phase;
        r.exit_code = exit_code;
        r.reason = reason;
        r.ended = Some(now());
        self.finish_locked(&mut g, r).await
    }

    async fn finish_locked(&self, g: &mut Inner, r: JobRecord) -> Result<(), AgentError> {
        g.controls.remove(&r.id);
        g.active.remove(&r.id);
        if let (Some(slot), false) = (r.slot, r.claimed) {
            if g.planner.cancel(slot).is_ok() {
                self.store.end_reservations(&[slot], "released").await?;
            }
        }
        self.store.save_job(&r).await?;
        let id = r.id;
        g.jobs.insert(id, r);
        g.touch(id);
        self.compress_locked(g).await
    }

    /// After capacity frees up, moves queued jobs' own slots as early as they
    /// now fit, in planned-start order (conservative backfilling).
    async fn compress_locked(&self, g: &mut Inner) -> Result<(), AgentError> {
        let t = now();
        let mut queued: Vec<(Time, u64, ReservationId)> = g
            .jobs
            .values()
            .filter(|j| !j.claimed && matches!(j.state, JobPhase::Accepted | JobPhase::StagingIn | JobPhase::Queued))
            .filter_map(|j| Some((j.planned_start?, j.id, j.slot?)))
            .filter(|(s, _, _)| *s > t)
            .collect();
        queued.sort();
        for (old, id, slot) in queued {
            let change = Change {
                window: Some((t, old)),
                ..Change::default()
            };
            if let Ok(start) = g.planner.modify(slot, change) {
                if start < old {
                    if let Some(r) = g.planner.get(slot) {
                        self.store.save_reservations(&[r]).await?;
                    }
                    if let Some(j) = g.jobs.get_mut(&id) {
                        j.planned_start = Some(start);
                        let rec = j.clone();
                        g.touch(id);
                        self.store.save_job(&rec).await?;
                    }
                    if let Some(c) = g.controls.get(&id) {
                        let _ = c.start.send(start);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn agent(name: &str, capacity: u32) -> Agent {
        let dir = std::env::temp_dir().join(format!("brokk-agent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config: Config = toml::from_str(&format!(
            "name = \"{name}\"\ncapacity = {capacity}\ndatabase = \"{}\"\nworkdir = \"{}\"\n",
            dir.join("a.db").display(),
            dir.join("jobs").display()
        ))
        .unwrap();
        Agent::open(config).await.unwrap().0
    }

    fn one_slot_now(duration: i64) -> ReservationRequest {
        let t = now();
        ReservationRequest::new(
            &Request {
                amount: 1,
                duration: Duration(duration),
                earliest: t,
                latest: t,
                flexible: false,
            },
            None,
        )
    }

    #[tokio::test]
    async fn the_mirror_books_what_others_run_and_releases_it() {
        let a = agent("mirror", 8).await;
        let t = now();
        // Someone else's job started before now and holds every CPU until t + 1000.
        let running = Occupant {
            key: "job:7".into(),
            start: Time(t.0 - 100),
            end: Time(t.0 + 1000),
            cpus: 8,
        };
        a.mirror(vec![running.clone()]).await;
        match a.reserve("ann", &one_slot_now(60)).await {
            Err(AgentError::NotGranted(Reply::Rejected { next_start })) => {
                assert_eq!(next_start, Some(Time(t.0 + 1000)))
            }
            other => panic!("expected a rejection until the job's time limit, got {other:?}"),
        }
        // The mirrored booking belongs to nobody who can call the API.
        assert!(!a.holds_reservation(1).await);
        // Gone from the queue: released.
        a.mirror(Vec::new()).await;
        assert!(a.reserve("ann", &one_slot_now(60)).await.is_ok());
    }

    #[tokio::test]
    async fn the_mirror_books_only_what_fits_beside_brokks_own() {
        let a = agent("overlap", 8).await;
        let granted = a.reserve("ann", &one_slot_now(600)).await.unwrap();
        let t = now();
        // Slurm reports 8 CPUs busy where Brokk holds 1: 7 are mirrored.
        a.mirror(vec![Occupant {
            key: "res:maint".into(),
            start: t,
            end: Time(t.0 + 600),
            cpus: 8,
        }])
        .await;
        assert!(matches!(
            a.reserve("ann", &one_slot_now(60)).await,
            Err(AgentError::NotGranted(Reply::Rejected { .. }))
        ));
        a.cancel("ann", ReservationId(granted.id)).await.unwrap();
        assert!(a.reserve("ann", &one_slot_now(60)).await.is_ok());
    }
}
