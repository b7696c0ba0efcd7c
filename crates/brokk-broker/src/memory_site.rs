//! A site held in memory: admission by the planner, a simple local queue placed
//! into the same schedule. It serves the broker's tests and the simulator.

use std::collections::BTreeMap;

use brokk_model::{Duration, Job, ResourceInfo, Time};
use brokk_planner::{Candidate, Change, FreeList, Planner, PlannerError, Reply, Request, ReservationId};

use crate::site::{JobHandle, JobState, Site, SiteError};

/// Wall time assumed for a job that states none.
const DEFAULT_WALL_TIME: Duration = Duration::hours(1);

#[derive(Debug, Clone)]
struct LocalJob {
    owner: String,
    /// The span the job holds in the schedule.
    slot: ReservationId,
    /// Whether that span is the user's own reservation (kept after the job).
    claimed: bool,
    cancelled: bool,
}

/// An in-memory site: `capacity` slots described by `info`.
#[derive(Debug, Clone)]
pub struct MemorySite {
    info: ResourceInfo,
    planner: Planner<FreeList>,
    jobs: BTreeMap<u64, LocalJob>,
    next_job: u64,
    now: Time,
    available: bool,
    accepting: bool,
}

impl MemorySite {
    /// A site with `info.total_slots` slots, planning up to `horizon`, at time `now`.
    pub fn new(info: ResourceInfo, now: Time, horizon: Time) -> Self {
        let planner = Planner::new(info.total_slots, horizon, FreeList::new());
        MemorySite {
            info,
            planner,
            jobs: BTreeMap::new(),
            next_job: 1,
            now,
            available: true,
            accepting: true,
        }
    }

    /// Moves the site's clock; holds that lapse by then are released.
    pub fn advance(&mut self, now: Time) {
        self.now = now;
        self.planner.expire(now);
    }

    /// Takes the site down (every call fails as unreachable) or brings it back.
    pub fn set_available(&mut self, up: bool) {
        self.available = up;
    }

    /// Closes the site to new jobs (draining) or opens it again.
    pub fn set_accepting(&mut self, accepting: bool) {
        self.accepting = accepting;
    }

    /// The schedule, for inspection.
    pub fn planner(&self) -> &Planner<FreeList> {
        &self.planner
    }

    fn up(&self) -> Result<(), SiteError> {
        if self.available {
            Ok(())
        } else {
            Err(SiteError::Unavailable(self.info.endpoint.clone()))
        }
    }

    fn owned(&self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        match self.planner.get(id) {
            None => Err(SiteError::Unknown),
            Some(r) if &*r.owner != owner => Err(SiteError::Forbidden),
            Some(_) => Ok(()),
        }
    }

    fn handle_id(job: &JobHandle) -> Result<u64, SiteError> {
        job.0
            .rsplit('/')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or(SiteError::Unknown)
    }
}

fn planner_error(e: PlannerError) -> SiteError {
    match e {
        PlannerError::Unknown(_) => SiteError::Unknown,
        PlannerError::DoesNotFit(reply) => SiteError::Refused {
            site: String::new(),
            reason: format!("{reply:?}"),
        },
    }
}

impl Site for MemorySite {
    fn endpoint(&self) -> &str {
        &self.info.endpoint
    }

    fn info(&self) -> Result<ResourceInfo, SiteError> {
        self.up()?;
        let mut info = self.info.clone();
        let free = self
            .planner
            .free_slots(self.now, self.now + Duration(1))
            .first()
            .filter(|s| s.start == self.now)
            .map_or(0, |s| s.free);
        info.free_slots = free;
        info.used_slots = info.total_slots - free;
        let (mut running, mut waiting) = (0, 0);
        for j in self.jobs.values().filter(|j| !j.cancelled) {
            if let Some(r) = self.planner.get(j.slot) {
                if r.start <= self.now && self.now < r.end {
                    running += 1;
                } else if self.now < r.start {
                    waiting += 1;
                }
            }
        }
        info.running_jobs = running;
        info.waiting_jobs = waiting;
        // The wait a one-slot job of the default length would see now.
        let probe = Request {
            amount: 1,
            duration: DEFAULT_WALL_TIME,
            earliest: self.now,
            latest: Time(i64::MAX / 4),
            flexible: false,
        };
        info.estimated_wait = self
            .planner
            .earliest_start(&probe)
            .ok()
            .flatten()
            .map(|start| start - self.now);
        info.reservations = true;
        Ok(info)
    }

    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        self.up()?;
        Ok(self.planner.probe(req, k).unwrap_or_default())
    }

    fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError> {
        self.up()?;
        Ok(self.planner.reserve(owner, req, hold))
    }

    fn modify(&mut self, owner: &str, id: ReservationId, change: Change) -> Result<Time, SiteError> {
        self.up()?;
        self.owned(owner, id)?;
        self.planner.modify(id, change).map_err(planner_error)
    }

    fn commit(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.up()?;
        self.owned(owner, id)?;
        self.planner.commit(id).map_err(planner_error)
    }

    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.up()?;
        self.owned(owner, id)?;
        self.planner.cancel(id).map(|_| ()).map_err(planner_error)
    }

    fn submit(&mut self, owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        self.up()?;
        if !self.accepting {
            return Err(SiteError::Refused {
                site: self.info.endpoint.clone(),
                reason: "not accepting jobs".into(),
            });
        }
        let (slot, claimed) = match reservation {
            Some(id) => {
                self.owned(owner, id)?;
                self.planner.commit(id).map_err(planner_error)?;
                (id, true)
            }
            None => {
                let req = Request {
                    amount: job.cpus.unwrap_or(1),
                    duration: job.wall_time.unwrap_or(DEFAULT_WALL_TIME),
                    earliest: self.now,
                    latest: Time(i64::MAX / 4),
                    flexible: false,
                };
                match self.planner.reserve(owner, &req, None) {
                    Reply::Granted { id, .. } => (id, false),
                    other => {
                        return Err(SiteError::Refused {
                            site: self.info.endpoint.clone(),
                            reason: format!("cannot queue the job: {other:?}"),
                        })
                    }
                }
            }
        };
        let n = self.next_job;
        self.next_job += 1;
        self.jobs.insert(
            n,
            LocalJob {
                owner: owner.to_string(),
                slot,
                claimed,
                cancelled: false,
            },
        );
        Ok(JobHandle(format!("{}/jobs/{n}", self.info.endpoint)))
    }

    fn status(&self, job: &JobHandle) -> Result<JobState, SiteError> {
        self.up()?;
        let j = self.jobs.get(&Self::handle_id(job)?).ok_or(SiteError::Unknown)?;
        if j.cancelled {
            return Ok(JobState::Cancelled);
        }
        let r = self.planner.get(j.slot).ok_or(SiteError::Unknown)?;
        Ok(if self.now < r.start {
            JobState::Queued {
                expected_start: Some(r.start),
            }
        } else if self.now < r.end {
            JobState::Running { since: r.start }
        } else {
            JobState::Finished { code: 0 }
        })
    }

    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), SiteError> {
        self.up()?;
        let id = Self::handle_id(job)?;
        let j = self.jobs.get(&id).ok_or(SiteError::Unknown)?.clone();
        if j.owner != owner {
            return Err(SiteError::Forbidden);
        }
        if !j.claimed {
            self.planner.cancel(j.slot).map_err(planner_error)?;
        }
        if let Some(x) = self.jobs.get_mut(&id) {
            x.cancelled = true;
        }
        Ok(())
    }
}
