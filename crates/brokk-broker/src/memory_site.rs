//! A site held in memory: the site core every live agent runs, driven on
//! virtual time by the core's virtual runner. It serves the broker's tests
//! and the simulator's grids.

use brokk_core::queue::Policy;
use brokk_core::SitePolicy;
use brokk_core::{
    Candidate, Change, CoreError, JobId, JobRecord, Reply, Request, ReservationId, SiteCore, SiteParams, Submission,
    VirtualRunner,
};
use brokk_model::{Duration, Job, ResourceInfo, Time};

use crate::site::{JobHandle, JobState, Shadows, Site, SiteError};

/// Wall time assumed for a job that states none.
const DEFAULT_WALL_TIME: Duration = Duration::hours(1);

/// What a site publishes of its free capacity over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publishing {
    /// How far ahead.
    pub span: Duration,
    /// In how many ranges at most.
    pub most: usize,
}

impl Publishing {
    /// What a live agent publishes: [`brokk_core::PUBLISHED_SPAN`] ahead in
    /// up to [`brokk_core::PUBLISHED_RANGES`] ranges.
    pub const LIVE: Publishing = Publishing {
        span: brokk_core::PUBLISHED_SPAN,
        most: brokk_core::PUBLISHED_RANGES,
    };
}

/// An in-memory site: `info.total_slots` slots described by `info`.
#[derive(Debug, Clone)]
pub struct MemorySite {
    info: ResourceInfo,
    core: SiteCore,
    runner: VirtualRunner,
    now: Time,
    available: bool,
    accepting: bool,
    /// What its information carries of its free capacity over time.
    publishes: Option<Publishing>,
}

impl MemorySite {
    /// A site with `info.total_slots` slots, planning up to `horizon`, at
    /// time `now`, backfilling conservatively as live agents do.
    pub fn new(info: ResourceInfo, now: Time, horizon: Time) -> Self {
        Self::with_policy(info, now, horizon, Policy::CONSERVATIVE)
    }

    /// [`MemorySite::new`] with the local queue run by `policy`.
    pub fn with_policy(info: ResourceInfo, now: Time, horizon: Time, policy: impl Into<SitePolicy>) -> Self {
        let core = SiteCore::new(SiteParams {
            capacity: info.total_slots,
            horizon,
            default_wall_time: DEFAULT_WALL_TIME,
            policy: policy.into(),
            lead: Duration(0),
        });
        MemorySite {
            info,
            core,
            runner: VirtualRunner::new(),
            now,
            available: true,
            accepting: true,
            publishes: None,
        }
    }

    /// Serves the site's waiting jobs in `order` ([`SiteCore::serve_in`]).
    pub fn serve_in(&mut self, order: Box<dyn brokk_core::order::QueueOrder>) {
        self.core.serve_in(order);
    }

    /// Makes the site's information carry its free capacity over time
    /// ([`SiteCore::availability`]) as `publishes` says; `None`, only the
    /// summary figures, as an ARC CE or a GRAM gatekeeper publishes. Gives
    /// back what it published before, for a caller that changes it for a
    /// while.
    pub fn publish_availability(&mut self, publishes: Option<Publishing>) -> Option<Publishing> {
        std::mem::replace(&mut self.publishes, publishes)
    }

    /// What occupies the site besides its own bookings, as a resource
    /// manager's mirror says ([`SiteCore::mirror`]): a simulated node down
    /// or drained is one occupant of its CPUs.
    pub fn mirror(&mut self, occupants: Vec<brokk_core::Occupant>) {
        self.core.mirror(self.now, occupants);
        self.settle();
    }

    /// Moves the site's clock to `now`: jobs start and end on the way, and
    /// holds that lapse by then are released.
    pub fn advance(&mut self, now: Time) {
        self.now = self.now.max(now);
        self.runner.advance(&mut self.core, self.now);
        self.core.tick(self.now);
        self.settle();
    }

    /// The next time something happens here on its own (a job starts or
    /// ends, or, while it has work, the site's policy acts), if anything
    /// will. An idle site's policy waits for its next job: a simulation
    /// ends when its work does.
    pub fn next_event(&self) -> Option<Time> {
        let work = self.runner.next_event()?;
        Some(
            self.core
                .next_policy_event()
                .map_or(work, |p| p.max(self.now).min(work)),
        )
    }

    /// A job of the site's own users (not placed by a broker), from `owner`.
    pub fn submit_local(&mut self, owner: &str, job: &Job) -> Result<JobHandle, SiteError> {
        self.accept(owner, job, None, None, false)
    }

    /// Job `job` will run for `d` rather than its whole wall time.
    pub fn set_run_time(&mut self, job: &JobHandle, d: Duration) -> Result<(), SiteError> {
        self.runner.set_run_time(handle_id(job)?, d);
        Ok(())
    }

    /// A job's record, for inspection.
    pub fn record(&self, job: &JobHandle) -> Option<&JobRecord> {
        self.core.record(handle_id(job).ok()?)
    }

    /// Brings `info`, an earlier answer of this site's [`Site::info`], up to
    /// date in place: what changes is figures, the names stay (a simulation
    /// refreshing every site every minute copies no strings).
    pub fn refresh_info(&self, info: &mut ResourceInfo) -> Result<(), SiteError> {
        self.up()?;
        let p = self.core.published(self.now);
        info.free_slots = p.free_now;
        info.used_slots = info.total_slots.saturating_sub(p.free_now);
        info.running_jobs = p.running;
        info.waiting_jobs = p.waiting;
        info.estimated_wait = p.estimated_wait;
        info.endangered_reservations = p.endangered;
        info.reservations = true;
        info.availability = self
            .publishes
            .map(|p| self.core.availability(self.now, self.now + p.span, p.most));
        Ok(())
    }

    /// Forgets the jobs that ended before `before`, showing each record to
    /// `each` first ([`SiteCore::retire_each`]).
    pub fn retire(&mut self, before: Time, each: impl FnMut(&JobRecord)) -> usize {
        self.core.retire_each(before, each)
    }

    /// The number of the job `job` names here (what [`JobRecord::id`] holds).
    pub fn job_number(job: &JobHandle) -> Option<u64> {
        handle_id(job).ok().map(|id| id.0)
    }

    /// Takes the site down (every call fails as unreachable) or brings it back.
    pub fn set_available(&mut self, up: bool) {
        self.available = up;
    }

    /// Closes the site to new jobs (draining) or opens it again.
    pub fn set_accepting(&mut self, accepting: bool) {
        self.accepting = accepting;
    }

    /// The site core, for inspection.
    pub fn core(&self) -> &SiteCore {
        &self.core
    }

    /// The schedule, for inspection.
    pub fn planner(&self) -> &brokk_core::Planner {
        self.core.planner()
    }

    /// Hands what the core did to the runner.
    fn settle(&mut self) {
        let effects = self.core.drain();
        self.runner.apply(&mut self.core, self.now, effects);
    }

    fn up(&self) -> Result<(), SiteError> {
        if self.available {
            Ok(())
        } else {
            Err(SiteError::Unavailable(self.info.endpoint.clone()))
        }
    }

    fn error(&self, e: CoreError) -> SiteError {
        match e {
            CoreError::NotFound(_) => SiteError::Unknown,
            CoreError::Forbidden(_) => SiteError::Forbidden,
            CoreError::NotGranted(reply) => SiteError::NotGranted(reply),
            CoreError::BadRequest(reason) | CoreError::Conflict(reason) => SiteError::Refused {
                site: self.info.endpoint.clone(),
                reason,
            },
        }
    }

    /// Runs `op` on the core at the site's time and settles its effects.
    fn op<T>(&mut self, op: impl FnOnce(&mut SiteCore, Time) -> Result<T, CoreError>) -> Result<T, SiteError> {
        self.up()?;
        let answer = op(&mut self.core, self.now);
        self.settle();
        answer.map_err(|e| self.error(e))
    }
}

impl MemorySite {
    /// Holds (`hold` true) or releases `owner`'s job, as a site agent's
    /// `POST /v1/jobs/{id}/hold` and `.../release` do: the job as the site
    /// now has it.
    pub fn hold_job(&mut self, owner: &str, job: &JobHandle, hold: bool) -> Result<crate::broker::Report, SiteError> {
        let id = handle_id(job)?;
        self.op(|core, now| {
            let j = match hold {
                true => core.hold_job(now, owner, id)?,
                false => core.release_job(now, owner, id)?,
            };
            Ok(crate::broker::Report::of(j))
        })
    }

    /// A submission into `reservation` when given; with `held_under`, the
    /// claimed hold stays a hold until committed, the key naming it.
    fn accept(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: Option<ReservationId>,
        held_under: Option<&str>,
        grid: bool,
    ) -> Result<JobHandle, SiteError> {
        self.up()?;
        if !self.accepting {
            return Err(SiteError::Refused {
                site: self.info.endpoint.clone(),
                reason: "not accepting jobs".into(),
            });
        }
        let mut spec = job.clone();
        if let Some(id) = reservation {
            spec.reservation = Some(id.0.to_string());
        }
        // The broker's jobs need not name a program to be placed here.
        if spec.executable.is_none() && spec.script.is_none() {
            spec.executable = Some("(simulated)".into());
        }
        // The broker's algorithms reserve for one job: its reservation
        // ends with it.
        // A broker's job is the grid's: it names the user it is placed for.
        let sub = Submission {
            key: held_under.map(str::to_string),
            on_behalf: grid.then(|| owner.to_string()),
            explicit_commit: held_under.is_some(),
            release_with_job: true,
            ..Submission::of(spec)
        };
        // It starts at the next `advance`, after the driver has said how
        // long it runs.
        let (id, _) = self.op(|core, now| core.submit(now, owner, sub))?;
        Ok(JobHandle(format!("{}/jobs/{id}", self.info.endpoint)))
    }
}

fn handle_id(job: &JobHandle) -> Result<JobId, SiteError> {
    job.0
        .rsplit('/')
        .next()
        .and_then(|n| n.parse().ok())
        .map(JobId)
        .ok_or(SiteError::Unknown)
}

impl Site for MemorySite {
    fn endpoint(&self) -> &str {
        &self.info.endpoint
    }

    fn fragmentation(&self, window: (Time, Time)) -> f64 {
        self.planner().fragmentation(window.0, window.1)
    }

    fn info(&self) -> Result<ResourceInfo, SiteError> {
        let mut info = self.info.clone();
        self.refresh_info(&mut info)?;
        Ok(info)
    }

    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        self.up()?;
        Ok(self.core.probe(self.now, req, k).unwrap_or_default())
    }

    fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError> {
        match self.op(|core, now| core.reserve(now, owner, req, hold)) {
            Ok(r) => Ok(Reply::Granted {
                id: r.id,
                start: r.start,
            }),
            Err(SiteError::NotGranted(reply)) => Ok(reply),
            Err(e) => Err(e),
        }
    }

    fn modify(&mut self, owner: &str, id: ReservationId, change: Change) -> Result<Time, SiteError> {
        self.op(|core, now| core.modify(now, owner, id, change))
            .map(|r| r.start)
    }

    fn commit(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.op(|core, now| core.commit(now, owner, id)).map(|_| ())
    }

    fn endangered(&self, owner: &str) -> Result<Vec<ReservationId>, SiteError> {
        self.up()?;
        Ok(self.core.endangered_of(self.now, owner).iter().map(|r| r.id).collect())
    }

    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.op(|core, now| core.cancel(now, owner, id))
    }

    fn submit(&mut self, owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        self.accept(owner, job, reservation, None, true)
    }

    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: ReservationId,
        key: &str,
    ) -> Result<JobHandle, SiteError> {
        self.accept(owner, job, Some(reservation), Some(key), true)
    }

    fn shadows(&self) -> Option<&dyn Shadows> {
        Some(self)
    }

    fn shadows_mut(&mut self) -> Option<&mut dyn Shadows> {
        Some(self)
    }

    fn status(&self, job: &JobHandle) -> Result<JobState, SiteError> {
        self.up()?;
        let j = self.core.record(handle_id(job)?).ok_or(SiteError::Unknown)?;
        Ok(JobState::of_phase(
            j.state,
            j.planned_start,
            j.started,
            j.exit_code,
            self.now,
        ))
    }

    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), SiteError> {
        let id = handle_id(job)?;
        self.op(|core, now| core.cancel_job(now, owner, id).map(|_| ()))
    }
}

impl Shadows for MemorySite {
    fn open_shadow(&mut self, owner: &str) -> Result<(), SiteError> {
        self.op(|core, now| core.shadow_open(now, owner))
    }

    fn probe_shadow(&self, owner: &str, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        self.up()?;
        match self.core.shadow_probe(self.now, owner, req, k) {
            Err(CoreError::NotGranted(_)) => Ok(Vec::new()),
            other => other.map_err(|e| self.error(e)),
        }
    }

    fn reserve_in_shadow(&mut self, owner: &str, req: &Request) -> Result<Reply, SiteError> {
        match self.op(|core, now| core.shadow_reserve(now, owner, req)) {
            Ok(r) => Ok(Reply::Granted {
                id: r.id,
                start: r.start,
            }),
            Err(SiteError::NotGranted(reply)) => Ok(reply),
            Err(e) => Err(e),
        }
    }

    fn cancel_in_shadow(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.op(|core, now| core.shadow_cancel(now, owner, id))
    }

    fn rate_shadow(&self, owner: &str, window: (Time, Time)) -> Result<f64, SiteError> {
        self.up()?;
        self.core.shadow_fragmentation(owner, window).map_err(|e| self.error(e))
    }

    fn prepare_switch(&mut self, owner: &str) -> Result<Vec<(ReservationId, ReservationId)>, SiteError> {
        self.op(|core, now| core.shadow_prepare(now, owner))
    }

    fn switch(&mut self, owner: &str) -> Result<(), SiteError> {
        self.op(|core, now| core.shadow_switch(now, owner))
    }

    fn abandon_shadow(&mut self, owner: &str) -> Result<(), SiteError> {
        self.op(|core, now| core.shadow_abandon(now, owner))
    }
}
