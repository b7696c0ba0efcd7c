//! The seam between the broker and a site: what a broker may ask of any resource,
//! real (the site agent over HTTP, driven from a blocking pool) or simulated.

use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{Job, JobPhase, ResourceInfo, Time};

/// A site's handle for a submitted job.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobHandle(pub String);

/// Where a job is in its life on a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Accepted, not yet started; the site's expected start when it knows one.
    Queued {
        /// When the job should start.
        expected_start: Option<Time>,
    },
    /// Running since the given time.
    Running {
        /// When it started.
        since: Time,
    },
    /// Finished with an exit code.
    Finished {
        /// Exit code.
        code: i32,
    },
    /// Failed on the site.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl JobState {
    /// The state of a job in site phase `phase`, with the times and exit
    /// code the site recorded (`now` stands for a running job's missing start).
    pub fn of_phase(
        phase: JobPhase,
        planned_start: Option<Time>,
        started: Option<Time>,
        exit_code: Option<i32>,
        now: Time,
    ) -> JobState {
        match phase {
            JobPhase::Accepted | JobPhase::StagingIn | JobPhase::Queued | JobPhase::Held => JobState::Queued {
                expected_start: planned_start,
            },
            JobPhase::Running | JobPhase::StagingOut => JobState::Running {
                since: started.unwrap_or(now),
            },
            JobPhase::Finished => JobState::Finished {
                code: exit_code.unwrap_or(0),
            },
            JobPhase::Failed => JobState::Failed,
            JobPhase::Cancelled => JobState::Cancelled,
        }
    }
}

/// A site that could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteError {
    /// The site did not answer (down, unreachable, timed out).
    #[error("site {0} is unavailable")]
    Unavailable(String),
    /// The site refused the job or the operation.
    #[error("site {site} refused: {reason}")]
    Refused {
        /// The site.
        site: String,
        /// Its reason.
        reason: String,
    },
    /// The reservation or job belongs to someone else.
    #[error("not yours")]
    Forbidden,
    /// No such reservation or job.
    #[error("unknown reservation or job")]
    Unknown,
    /// A modification that does not fit; the reservation is unchanged. Carries the
    /// protocol reply (`Rejected` with the next possible start, or `Never`).
    #[error("not granted: {0:?}")]
    NotGranted(Reply),
}

impl SiteError {
    /// Whether the site did not answer (it may answer later), rather than
    /// refusing.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, SiteError::Unavailable(_))
    }
}

/// What the broker may ask of a site.
pub trait Site {
    /// The site's endpoint, unique among sites.
    fn endpoint(&self) -> &str;
    /// Current resource information.
    fn info(&self) -> Result<ResourceInfo, SiteError>;
    /// Non-binding reservation candidates.
    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError>;
    /// Asks for a reservation, preliminary until `hold` when given.
    fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError>;
    /// Changes a reservation atomically.
    fn modify(&mut self, owner: &str, id: ReservationId, change: Change) -> Result<Time, SiteError>;
    /// Makes a preliminary reservation permanent.
    fn commit(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError>;
    /// Releases a reservation.
    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError>;
    /// Submits a job, into a reservation when given. The broker's
    /// algorithms reserve for one job at a time, so a site they drive lets
    /// that reservation end with the job (`MemorySite` does; the service's
    /// clients ask for it).
    fn submit(&mut self, owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError>;
    /// Submits a job into the hold `reservation`, where it waits: the hold
    /// stays preliminary until the caller commits it, and if it lapses the
    /// job goes with it. `key` makes a repeated submission the same job.
    /// A site that cannot keep a job in a hold refuses.
    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: ReservationId,
        key: &str,
    ) -> Result<JobHandle, SiteError> {
        let _ = (owner, job, reservation, key);
        Err(SiteError::Refused {
            site: self.endpoint().to_string(),
            reason: "this site cannot keep a job in a hold".into(),
        })
    }
    /// `owner`'s reservations the site can no longer hold, part of it
    /// being lost (a node down or drained): those the site's information
    /// counts in `endangered_reservations`. A site that loses nothing
    /// partly (the default) has none.
    fn endangered(&self, owner: &str) -> Result<Vec<ReservationId>, SiteError> {
        let _ = owner;
        Ok(Vec::new())
    }
    /// How fragmented the site's free capacity is over `window` ([VRM]
    /// 2.2.3: 0 for one free block, or none): the rating of its schedule
    /// there that the thesis's shadow schedules answer. A site that cannot
    /// say (the default) is read from its answer to a probe of one
    /// processor over the window's middle third.
    fn fragmentation(&self, window: (Time, Time)) -> f64 {
        crate::reoptimize::probed_fragmentation(self, window)
    }
    /// The site's shadow schedules, where it keeps them ([`Shadows`]); a
    /// site that keeps none (the default) is re-optimized directly.
    fn shadows(&self) -> Option<&dyn Shadows> {
        None
    }
    /// [`Site::shadows`], to change them.
    fn shadows_mut(&mut self) -> Option<&mut dyn Shadows> {
        None
    }
    /// A job's state.
    fn status(&self, job: &JobHandle) -> Result<JobState, SiteError>;
    /// Cancels a job.
    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), SiteError>;
}

/// Shadow schedules and the two-phase switch ([VRM] 5.4.1), as a site that
/// keeps them answers (`brokk_core::SiteCore`'s `shadow_*`): in its
/// shadow an owner takes its own reservations off and tries others, against
/// everything else the site holds but never the old ones, which stay
/// binding until every site it touched has agreed to switch.
pub trait Shadows {
    /// Opens `owner`'s shadow: a copy of the schedule now.
    fn open_shadow(&mut self, owner: &str) -> Result<(), SiteError>;
    /// Candidates for `req` in `owner`'s shadow.
    fn probe_shadow(&self, owner: &str, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError>;
    /// A trial reservation in `owner`'s shadow.
    fn reserve_in_shadow(&mut self, owner: &str, req: &Request) -> Result<Reply, SiteError>;
    /// Takes a reservation off `owner`'s shadow: a trial one, or one of the
    /// real schedule's, which stays binding until the switch.
    fn cancel_in_shadow(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError>;
    /// How fragmented `owner`'s shadow is over `window`.
    fn rate_shadow(&self, owner: &str, window: (Time, Time)) -> Result<f64, SiteError>;
    /// The first phase of the switch: books the shadow's new reservations
    /// beside the old ones and answers each one's id, by its id in the
    /// shadow; or refuses, changing nothing.
    fn prepare_switch(&mut self, owner: &str) -> Result<Vec<(ReservationId, ReservationId)>, SiteError>;
    /// The second phase: the old reservations end.
    fn switch(&mut self, owner: &str) -> Result<(), SiteError>;
    /// Closes `owner`'s shadow without switching; the old schedule is as
    /// it was.
    fn abandon_shadow(&mut self, owner: &str) -> Result<(), SiteError>;
}
