//! One site's state and rules: the reservation protocol, job records and
//! their phases, conservative backfilling of the local queue, idempotency
//! keys, the change feed and the mirror of foreign occupancy.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use brokk_model::{Availability, Duration, FreeRange, Job, JobPhase, Time};
use brokk_planner::{
    BTree, Candidate, Change, Planner, PlannerError, Reply, Request, Reservation, ReservationId, State,
};

use crate::effect::{Effect, Ended, Manager};
use crate::error::CoreError;
use crate::feed::Feed;
use crate::order::QueueOrder;
use crate::partition::{offered, ForecastState, Partitions, SitePolicy};
use crate::queue::{Policy, QueueJob};
use crate::record::{JobId, JobRecord, KeptJobs, Occupant, Submission};

/// The owner of what the schedule mirrors from a resource manager; no
/// identity maps to it, so no caller can touch those reservations.
const FOREIGN: &str = "(resource manager)";

/// The latest start any request may name: far beyond every horizon, and far
/// from overflow when a duration is added.
const OPEN_END: Time = Time(i64::MAX / 4);

/// A foreign occupant as the schedule holds it: booked where the schedule
/// has room for it, in as many pieces as the free capacity changes over
/// its span (up to the horizon), and whether that is short of its size
/// somewhere (the site had booked that share already).
#[derive(Debug, Clone)]
struct Mirrored {
    occupant: Occupant,
    pieces: Vec<ReservationId>,
    short: bool,
}

/// A site's fixed parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteParams {
    /// Processors (slots) the site schedules.
    pub capacity: u32,
    /// Nothing is planned beyond this time.
    pub horizon: Time,
    /// Wall time of a job that states none.
    pub default_wall_time: Duration,
    /// How the local queue backfills: conservatively (every waiting job
    /// holds a slot; what live agents run), first come first served (starts
    /// never overtake), or protecting only the first few waiting jobs (EASY
    /// protects one) while later ones start only where they fit at once;
    /// and how the processors are partitioned ([`crate::partition`]).
    pub policy: SitePolicy,
    /// The least time from now to a reservation's start: what the resource
    /// manager takes to have a job in place (an ARC CE hands a job to the
    /// Slurm behind it at its own cycle, so a reservation starting sooner
    /// would start empty). Zero where jobs are in place at once.
    pub lead: Duration,
}

/// What a site publishes about itself now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Processors free at this moment.
    pub free_now: u32,
    /// Jobs running (or delivering output).
    pub running: u32,
    /// Jobs accepted and not yet running.
    pub waiting: u32,
    /// The wait a one-processor, one-hour job would see; `None` when it
    /// cannot be placed within the horizon.
    pub estimated_wait: Option<Duration>,
    /// How many clients' reservations it can no longer hold
    /// ([`SiteCore::endangered`]): a count, so that no client learns of
    /// another's; each asks after its own.
    pub endangered: u32,
}

/// How far ahead a site's information carries its free capacity over
/// time ([`SiteCore::availability`]): a day, enough to place the jobs a
/// broker is deciding now.
pub const PUBLISHED_SPAN: Duration = Duration::hours(24);

/// The most free ranges a site's information carries: a site with many
/// reservations publishes the nearest ones, and a broker reads the rest of
/// the span as unknown.
pub const PUBLISHED_RANGES: usize = 1000;

/// What a job's runner needs to know when it takes the job up.
#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    /// The record.
    pub record: JobRecord,
    /// Its wall time (the site's default when it states none).
    pub wall: Duration,
    /// Whether its reservation is committed: a job submitted into a hold
    /// with an explicit commit waits for it.
    pub committed: bool,
}

/// One site's state; see the crate documentation.
#[derive(Debug, Clone)]
pub struct SiteCore {
    params: SiteParams,
    planner: Planner<BTree>,
    jobs: BTreeMap<JobId, JobRecord>,
    /// Jobs not yet ended: every scan of live jobs goes over these only.
    active: BTreeSet<JobId>,
    /// How many of them run (or deliver output).
    running: u32,
    /// Waiting jobs in their own slots, by (planned start, id): the queue
    /// that moves up when capacity frees.
    queue: BTreeSet<(Time, JobId)>,
    /// Waiting jobs without a slot yet, in arrival order: a policy that
    /// protects only the first few waiting jobs keeps the rest here until
    /// they fit at once or their turn to be protected comes.
    waiting: VecDeque<JobId>,
    /// (owner, idempotency key) -> job, so a repeated submission is one job.
    keys: HashMap<(String, String), JobId>,
    feed: Feed,
    /// Ended jobs in the order they ended, for retiring them.
    ended: VecDeque<(Time, JobId)>,
    /// The latest feed version among retired jobs: a follower behind it
    /// has missed changes the core no longer holds.
    retired: u64,
    next_job: u64,
    /// Foreign occupants mirrored in the schedule, by key.
    foreign: HashMap<String, Mirrored>,
    /// How many waiting jobs each partition protects now: the policy's
    /// number, or every one while the forecast policy schedules
    /// conservatively.
    pivots: Vec<usize>,
    /// The forecast policy's state, when the site runs it, from its first
    /// submission or tick on.
    forecast: Option<ForecastState>,
    /// Grows whenever the forecast policy changes what the site offers.
    offers: u64,
    /// The order waiting jobs without a slot are served in, when not
    /// arrival order ([`SiteCore::serve_in`]).
    order: Option<Ordering>,
    /// Clients' shadow schedules, by client ([`shadow`]).
    shadows: HashMap<String, shadow::Shadow>,
    out: Vec<Effect>,
}

/// A queue order a site serves its waiting jobs in, with what it needs to
/// know of them: when each arrived, and a number per user (an order such
/// as fair share tells users apart by number).
#[derive(Clone)]
struct Ordering {
    /// Shared by a site's copies: a copy is a view of the same site.
    order: std::sync::Arc<std::sync::Mutex<Box<dyn QueueOrder>>>,
    arrived: HashMap<JobId, Time>,
    users: HashMap<String, i64>,
}

impl std::fmt::Debug for Ordering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a queue order over {} waiting jobs", self.arrived.len())
    }
}

impl Ordering {
    /// Job `j` as the order sees it: arrival, size, wall time and user.
    fn queue_job(&mut self, j: &JobRecord, wall: Duration, now: Time) -> QueueJob {
        let next = self.users.len() as i64;
        let user = *self.users.entry(j.user().to_string()).or_insert(next);
        QueueJob {
            id: j.id.0 as i64,
            // A job restored after a restart waits from the first time
            // the order sees it.
            submit: *self.arrived.entry(j.id).or_insert(now),
            run: Duration(0),
            size: j.spec.cpus.unwrap_or(1).max(1),
            estimate: wall,
            partition: -1,
            user,
            queue: -1,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut dyn QueueOrder) -> T) -> T {
        let mut order = self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(order.as_mut())
    }
}

/// A job's own slot: `amount` for `wall`, starting in `[earliest, latest]`,
/// fixed once booked.
fn slot_request(amount: u32, wall: Duration, earliest: Time, latest: Time) -> Request {
    Request {
        amount,
        duration: wall,
        earliest,
        latest,
        flexible: false,
    }
}

fn runs(p: JobPhase) -> bool {
    matches!(p, JobPhase::Running | JobPhase::StagingOut)
}

fn not_found(id: ReservationId) -> CoreError {
    CoreError::NotFound(format!("reservation {}", id.0))
}

impl SiteCore {
    /// An empty site.
    pub fn new(params: SiteParams) -> Self {
        SiteCore {
            planner: Planner::new(params.capacity, params.horizon, BTree::new()),
            params,
            jobs: BTreeMap::new(),
            active: BTreeSet::new(),
            running: 0,
            queue: BTreeSet::new(),
            waiting: VecDeque::new(),
            keys: HashMap::new(),
            feed: Feed::default(),
            ended: VecDeque::new(),
            retired: 0,
            next_job: 1,
            foreign: HashMap::new(),
            pivots: vec![Self::protects(params.policy.queue); params.policy.partitions.count()],
            forecast: None,
            offers: 0,
            order: None,
            shadows: HashMap::new(),
            out: Vec::new(),
        }
    }

    /// The same site serving its waiting jobs in `order` rather than in
    /// arrival order, under any policy: the jobs not started are planned
    /// again in the order's order at every arrival and release
    /// ([`SiteCore::replan`]), so a job the order puts first may take a
    /// later one's start. Partitioned policies keep their own protections
    /// and serve only their unprotected jobs in the order.
    pub fn serve_in(&mut self, order: Box<dyn QueueOrder>) {
        self.order = Some(Ordering {
            order: std::sync::Arc::new(std::sync::Mutex::new(order)),
            arrived: HashMap::new(),
            users: HashMap::new(),
        });
    }

    /// How many waiting jobs a queue policy protects in each partition.
    fn protects(policy: Policy) -> usize {
        match policy {
            Policy::Backfill { reservations } => reservations,
            Policy::Fcfs => usize::MAX,
        }
    }

    /// Job `j`'s partition: by its wall time, or by whether a broker
    /// placed it for one of its users (a grid job).
    fn part_of(&self, j: &JobRecord) -> usize {
        self.params
            .policy
            .partitions
            .of(self.wall_time(&j.spec), j.user.is_some())
    }

    /// The forecast policy's state, begun at `now` the first time it is
    /// needed; `None` under other policies.
    fn forecasting(&mut self, now: Time) -> Option<&mut ForecastState> {
        if let (Partitions::Forecast(f), None) = (self.params.policy.partitions, &self.forecast) {
            self.forecast = Some(ForecastState::new(f, now));
        }
        self.forecast.as_mut()
    }

    /// When the site's policy next acts on its own (the forecast policy's
    /// publication or reallocation check), if it does.
    pub fn next_policy_event(&self) -> Option<Time> {
        self.forecast.as_ref().map(ForecastState::next_event)
    }

    /// The share of its free capacity the site offers the grid now (all of
    /// it but under the forecast policy).
    pub fn offered_share(&self) -> f64 {
        self.forecast.as_ref().map_or(1.0, |f| f.share)
    }

    /// Runs the forecast policy's publication or reallocation check when
    /// one is due by `now` ([AB-avail]'s Algorithm 1).
    fn run_policy(&mut self, now: Time) {
        let capacity = self.params.capacity;
        let Some(f) = self.forecasting(now) else {
            return;
        };
        if f.next_event() > now {
            return;
        }
        if f.next_publication <= now {
            // getFreeTimeSlots: every waiting job gets its slot (as under
            // conservative backfilling), then each partition protects the
            // policy's number again, and the forecast sets the offer.
            let base = Self::protects(self.params.policy.queue);
            self.pivots.fill(usize::MAX);
            self.promote(now);
            self.pivots.fill(base);
            if let Some(f) = self.forecast.as_mut() {
                f.publish(now, capacity);
            }
            self.offers += 1;
        } else if f.check(now, capacity) {
            // reallocationEvent: the forecast proved low. Conservative
            // until the next publication, the local partition first.
            self.pivots[0] = usize::MAX;
            self.promote(now);
            self.pivots.fill(usize::MAX);
            self.promote(now);
            self.offers += 1;
        }
    }

    /// A site reloaded from its records after a restart at `now`: holds that
    /// lapsed meanwhile expire, reservations that no longer fit are dropped,
    /// and a job caught delivering output whose end nobody recorded
    /// (`followable` says whether a supervisor or resource manager still
    /// knows it) fails. Jobs come back under the feed versions they had, so
    /// a follower's place stays good. Returns the site and the ids of the
    /// jobs whose runner must (re)start.
    pub fn restore(
        params: SiteParams,
        now: Time,
        reservations: &[Reservation],
        next_reservation: u64,
        kept: KeptJobs,
        followable: impl Fn(&JobRecord) -> bool,
    ) -> (Self, Vec<JobId>) {
        let mut core = SiteCore::new(params);
        let dropped: Vec<ReservationId> = reservations
            .iter()
            .filter(|r| r.end <= now || core.planner.restore(r).is_err())
            .map(|r| r.id)
            .collect();
        core.end(dropped, Ended::Released);
        core.planner.issue_ids_from(next_reservation);
        let expired = core.planner.expire(now);
        core.end(expired, Ended::Expired);
        core.next_job = core.next_job.max(kept.next_job);
        core.retired = kept.retired_through;
        core.feed.continue_after(kept.retired_through);
        let mut resume = Vec::new();
        let mut changed = Vec::new();
        for (mut j, version) in kept.records {
            core.next_job = core.next_job.max(j.id.0 + 1);
            core.feed.restore(j.id, version);
            if j.state == JobPhase::StagingOut && !followable(&j) {
                j.state = JobPhase::Failed;
                j.reason = Some("the site agent stopped while the job was running".into());
                j.ended = Some(now);
                core.release_slot(&j);
                changed.push(j.id);
            } else if !j.state.is_terminal() {
                resume.push(j.id);
                core.active.insert(j.id);
                core.running += u32::from(runs(j.state));
                match (j.is_waiting(), j.claimed, j.planned_start) {
                    (true, false, Some(s)) => {
                        core.queue.insert((s, j.id));
                    }
                    (true, _, None) if j.slot.is_none() => core.waiting.push_back(j.id),
                    _ => {}
                }
            }
            if j.state.is_terminal() {
                core.ended.push_back((j.ended.unwrap_or(now), j.id));
            }
            if let Some(k) = &j.key {
                core.keys.insert((j.owner.clone(), k.clone()), j.id);
            }
            core.jobs.insert(j.id, j);
        }
        core.ended.make_contiguous().sort_unstable();
        let local: i64 = core
            .active()
            .filter(|j| j.user.is_none())
            .map(|j| i64::from(j.spec.cpus.unwrap_or(1).max(1)))
            .sum();
        if let Some(f) = core.forecasting(now) {
            f.demand_changes(now, local);
        }
        for id in changed {
            core.touch(id);
            core.out.push(Effect::SaveJob(id));
        }
        // Queued jobs move up into what the jobs that died with the agent held.
        core.compress(now);
        (core, resume)
    }

    /// Forgets the jobs that ended before `before`: their records stay in
    /// the driver's store, which answers for them from then on (as Slurm
    /// purges a finished job after `MinJobAge` and its accounting answers).
    /// Keeps a long-lived site's memory to its live and recent jobs.
    /// Returns how many were retired.
    pub fn retire(&mut self, before: Time) -> usize {
        self.retire_each(before, |_| {})
    }

    /// [`SiteCore::retire`], showing each record to `each` as it goes (a
    /// simulation keeps the few figures it reports, not the records).
    pub fn retire_each(&mut self, before: Time, mut each: impl FnMut(&JobRecord)) -> usize {
        let mut n = 0;
        while let Some(&(t, id)) = self.ended.front() {
            if t >= before {
                break;
            }
            self.ended.pop_front();
            // Only ended jobs enter `ended`, and an end is never undone.
            let Some(j) = self.jobs.remove(&id) else { continue };
            each(&j);
            if let Some(k) = j.key {
                self.keys.remove(&(j.owner, k));
            }
            if let Some(v) = self.feed.forget(id) {
                self.retired = self.retired.max(v);
            }
            n += 1;
        }
        n
    }

    /// The version of job `id`'s latest change in the feed, which the
    /// driver stores beside the record.
    pub fn version_of(&self, id: JobId) -> u64 {
        self.feed.version_of(id)
    }

    /// The feed's latest version.
    pub fn feed_version(&self) -> u64 {
        self.feed.version()
    }

    /// A number that grows with every change of what the site publishes
    /// (a job's change, a reservation made, moved or given back): equal
    /// twice, the site's information differs only by the time passed.
    pub fn published_version(&self) -> u64 {
        self.feed.version() + self.planner.changes() + self.offers
    }

    /// The effects of the operations so far, in order; the driver carries
    /// them out and the outbox starts empty again.
    pub fn drain(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.out)
    }

    /// The site's parameters.
    pub fn params(&self) -> SiteParams {
        self.params
    }

    /// The schedule, for inspection.
    pub fn planner(&self) -> &crate::Planner {
        &self.planner
    }

    /// A job's record.
    pub fn record(&self, id: JobId) -> Option<&JobRecord> {
        self.jobs.get(&id)
    }

    /// A reservation as the schedule holds it.
    pub fn reservation_now(&self, id: ReservationId) -> Option<Reservation> {
        self.planner.get(id)
    }

    /// Jobs not yet ended, by id.
    pub fn active(&self) -> impl Iterator<Item = &JobRecord> {
        self.active.iter().filter_map(|id| self.jobs.get(id))
    }

    /// A job's wall time: its own, or the site's default.
    pub fn wall_time(&self, job: &Job) -> Duration {
        job.wall_time.unwrap_or(self.params.default_wall_time)
    }

    fn end(&mut self, ids: Vec<ReservationId>, why: Ended) {
        if !ids.is_empty() {
            self.out.push(Effect::EndReservations(ids, why));
        }
    }

    fn touch(&mut self, id: JobId) {
        self.feed.touch(id);
    }

    fn owned(&self, who: &str, id: ReservationId) -> Result<Reservation, CoreError> {
        let r = self.planner.get(id).ok_or_else(|| not_found(id))?;
        if r.owner.as_ref() != who {
            return Err(CoreError::Forbidden(format!("reservation {}", id.0)));
        }
        Ok(r)
    }

    /// A conflict when a live job holds reservation `id`.
    fn free_of_jobs(&self, id: ReservationId, what: &str) -> Result<(), CoreError> {
        match self.active().find(|j| j.slot == Some(id)) {
            Some(job) => Err(CoreError::Conflict(format!(
                "reservation {} is {what} job {}",
                id.0, job.id
            ))),
            None => Ok(()),
        }
    }

    /// What the site publishes at `now`.
    pub fn published(&self, now: Time) -> Published {
        // The free ranges leave out what is wholly taken: none at `now`
        // is none free.
        let free_now = self
            .planner
            .free_slots(now, Time(now.0 + 1))
            .first()
            .filter(|s| s.start <= now)
            .map_or(0, |s| s.free);
        let running = self.running;
        let probe = Request {
            amount: 1,
            duration: Duration::hours(1),
            earliest: now,
            latest: OPEN_END,
            flexible: false,
        };
        Published {
            free_now,
            running,
            waiting: self.active.len() as u32 - running,
            estimated_wait: self.planner.earliest_start(&probe).ok().flatten().map(|s| s - now),
            endangered: self.endangered(now).len() as u32,
        }
    }

    /// The free capacity over `[now, until)` ([AB-avail]'s published
    /// slots), from the schedule as it stands at `now`: at most `most`
    /// ranges, the span ending where the last one kept ends when there are
    /// more (a consumer then reads the rest as unknown, not as taken).
    /// `until` is clipped to the site's horizon. Under the forecast policy
    /// the ranges up to the next publication offer the grid its share
    /// ([`SiteCore::offered_share`]): the forecast is of the local load
    /// over that interval, and beyond it the schedule stands as it is.
    /// Under FCFS nothing is free before the last queued job's start,
    /// since no new job may start sooner.
    pub fn availability(&self, now: Time, until: Time, most: usize) -> Availability {
        let until = until.min(self.params.horizon).max(now);
        // Under FCFS a new job starts no sooner than the last queued one
        // (`place_new`): a hole before that is not free for it.
        let floor = match self.params.policy.queue {
            Policy::Fcfs => self.queue.last().map_or(now, |&(t, _)| t.max(now)),
            Policy::Backfill { .. } => now,
        };
        let mut ranges: Vec<FreeRange> = Vec::new();
        for f in self.planner.free_slots(now, until) {
            if f.end <= floor {
                continue;
            }
            let whole = FreeRange {
                start: f.start.max(floor),
                end: f.end,
                free: f.free,
            };
            match &self.forecast {
                Some(fc) if f.start < fc.next_publication => {
                    let cut = f.end.min(fc.next_publication);
                    let free = offered(f.free, fc.share);
                    if free > 0 {
                        ranges.push(FreeRange {
                            end: cut,
                            free,
                            ..whole
                        });
                    }
                    if cut < f.end {
                        ranges.push(FreeRange { start: cut, ..whole });
                    }
                }
                _ => ranges.push(whole),
            }
        }
        let until = match ranges.get(most) {
            Some(cut) => {
                let end = cut.start;
                ranges.truncate(most);
                end
            }
            None => until,
        };
        Availability {
            computed_at: now,
            until,
            ranges,
        }
    }

    /// `GET /v1/slots`: the free capacity over `[from, to)` (from no
    /// sooner than `now`) in runs of at least `min_amount` processors
    /// lasting at least `min_duration` ([`Availability::filtered`]),
    /// computed at `now`. A query that cannot be answered is refused
    /// naming its field: an inverted or empty range, a span past the
    /// site's horizon, a minimum amount below one or a negative duration.
    pub fn slots(
        &self,
        now: Time,
        from: Time,
        to: Time,
        min_amount: i64,
        min_duration: Duration,
    ) -> Result<Availability, CoreError> {
        let bad = |m: String| Err(CoreError::BadRequest(m));
        if to <= from {
            return bad(format!("to: {to} is not after from ({from})"));
        }
        if to > self.params.horizon {
            return bad(format!(
                "to: {to} is beyond the site's planning horizon ({})",
                self.params.horizon
            ));
        }
        if min_amount < 1 {
            return bad(format!("min_amount: {min_amount} is not at least 1"));
        }
        let min_amount = u32::try_from(min_amount).unwrap_or(u32::MAX);
        if min_duration.0 < 0 {
            return bad(format!("min_duration: {} s is negative", min_duration.0));
        }
        let from = from.max(now);
        let to = to.max(from);
        let whole = self.availability(now, to, usize::MAX);
        Ok(Availability {
            computed_at: now,
            until: to,
            ranges: whole.filtered(from, to, min_amount, min_duration),
        })
    }

    /// Non-binding candidates for `req` at `now` (at most `k`, clamped to
    /// 1..=100); none when its window closes within the site's lead.
    pub fn probe(&self, now: Time, req: &Request, k: usize) -> Result<Vec<Candidate>, CoreError> {
        let req = match self.after_lead(now, req) {
            Ok(req) => req,
            Err(_) => return Ok(Vec::new()),
        };
        self.planner
            .probe(&req, k.clamp(1, 100))
            .map_err(|reason| CoreError::NotGranted(Reply::Never { reason }))
    }

    /// `req` with its window begun no sooner than the site's lead after
    /// `now`; when the whole window is sooner, the refusal names the first
    /// start the site could give.
    fn after_lead(&self, now: Time, req: &Request) -> Result<Request, Reply> {
        let first = Time(now.0.saturating_add(self.params.lead.0));
        if req.earliest >= first {
            return Ok(*req);
        }
        if req.latest < first {
            let next_start = self.next_start_after(&Request {
                latest: Time(first.0 - 1),
                ..*req
            });
            return Err(Reply::Rejected { next_start });
        }
        Ok(Request {
            earliest: first,
            ..*req
        })
    }

    /// Lets holds lapse at `now`: their reservations end, and jobs submitted
    /// into a hold that was never committed are cancelled with it. Returns
    /// whether anything lapsed.
    pub fn expire(&mut self, now: Time) -> bool {
        let gone = self.planner.expire(now);
        if gone.is_empty() {
            return false;
        }
        self.out.push(Effect::Manager(Manager::Release(gone.clone())));
        let waiting: Vec<JobId> = self
            .active()
            .filter(|j| j.slot.is_some_and(|s| gone.contains(&s)))
            .map(|j| j.id)
            .collect();
        self.end(gone, Ended::Expired);
        for id in waiting {
            self.out.push(Effect::Stop(id));
            self.close(
                now,
                id,
                JobPhase::Cancelled,
                None,
                Some("its reservation lapsed before it was committed".into()),
            );
        }
        true
    }

    /// Lets holds lapse at `now` and moves queued jobs up into what lapsed:
    /// the periodic tick of a live site.
    pub fn tick(&mut self, now: Time) {
        if self.expire(now) {
            self.compress(now);
        }
        self.run_policy(now);
    }

    /// A reservation for `who`, preliminary until `hold` when given.
    pub fn reserve(
        &mut self,
        now: Time,
        who: &str,
        req: &Request,
        hold: Option<Time>,
    ) -> Result<Reservation, CoreError> {
        self.expire(now);
        let req = &self.after_lead(now, req).map_err(CoreError::NotGranted)?;
        match self.planner.reserve(who, req, hold) {
            Reply::Granted { id, .. } => {
                self.out.push(Effect::SaveReservation(id));
                // A grant may have moved flexible reservations.
                for r in self.planner.flexible_reservations() {
                    if r.id != id {
                        self.out.push(Effect::SaveReservation(r.id));
                    }
                }
                self.out.push(Effect::Manager(Manager::Reserve(id)));
                self.planner.get(id).ok_or_else(|| not_found(id))
            }
            other => Err(CoreError::NotGranted(other)),
        }
    }

    /// Takes back a grant or change the resource manager could not carry
    /// out: the reservation is put back as `old` was, or released when it
    /// is new (`old` is `None`).
    pub fn revert(&mut self, id: ReservationId, old: Option<&Reservation>) {
        let _ = self.planner.cancel(id);
        match old {
            Some(old) => {
                let _ = self.planner.restore(old);
                self.out.push(Effect::SaveReservation(id));
            }
            None => self.end(vec![id], Ended::Released),
        }
    }

    /// The next start after `req`'s window, for a rejection the resource
    /// manager made where the schedule had granted.
    pub fn next_start_after(&self, req: &Request) -> Option<Time> {
        let later = Request {
            earliest: Time(req.latest.0.saturating_add(1)),
            latest: OPEN_END,
            ..*req
        };
        self.planner.earliest_start(&later).ok().flatten()
    }

    /// `who`'s reservation `id`.
    pub fn reservation(&mut self, now: Time, who: &str, id: ReservationId) -> Result<Reservation, CoreError> {
        self.expire(now);
        self.owned(who, id)
    }

    /// Changes `who`'s reservation `id` atomically; on failure nothing
    /// changes. A reservation a live job runs in cannot change.
    pub fn modify(
        &mut self,
        now: Time,
        who: &str,
        id: ReservationId,
        change: Change,
    ) -> Result<Reservation, CoreError> {
        self.expire(now);
        let old = self.owned(who, id)?;
        self.free_of_jobs(id, "in use by")?;
        match self.planner.modify(id, change) {
            Ok(_) => {
                self.out.push(Effect::SaveReservation(id));
                self.out.push(Effect::Manager(Manager::Modify { old }));
                self.planner.get(id).ok_or_else(|| not_found(id))
            }
            Err(PlannerError::DoesNotFit(reply)) => Err(CoreError::NotGranted(reply)),
            Err(PlannerError::Unknown(_)) => Err(not_found(id)),
        }
    }

    /// Makes `who`'s hold `id` permanent; a job waiting for it may start.
    pub fn commit(&mut self, now: Time, who: &str, id: ReservationId) -> Result<Reservation, CoreError> {
        self.expire(now);
        self.owned(who, id)?;
        self.planner.commit(id).map_err(|_| not_found(id))?;
        self.out.push(Effect::SaveReservation(id));
        let waiting: Vec<JobId> = self.active().filter(|j| j.slot == Some(id)).map(|j| j.id).collect();
        self.out.extend(waiting.into_iter().map(Effect::Committed));
        self.planner.get(id).ok_or_else(|| not_found(id))
    }

    /// Releases `who`'s reservation `id`; one a live job runs in cannot go.
    pub fn cancel(&mut self, now: Time, who: &str, id: ReservationId) -> Result<(), CoreError> {
        self.expire(now);
        self.owned(who, id)?;
        self.free_of_jobs(id, "in use by (cancel it first)")?;
        self.planner.cancel(id).map_err(|_| not_found(id))?;
        self.end(vec![id], Ended::Cancelled);
        self.out.push(Effect::Manager(Manager::Release(vec![id])));
        self.compress(now);
        Ok(())
    }

    /// Accepts a job from `who` (into its claimed reservation, or at its
    /// earliest fit) and returns its id and whether it is new: a submission
    /// repeating an earlier one's idempotency key returns that job.
    pub fn submit(&mut self, now: Time, who: &str, sub: Submission) -> Result<(JobId, bool), CoreError> {
        if let Some(k) = &sub.key {
            if let Some(&id) = self.keys.get(&(who.to_string(), k.clone())) {
                return Ok((id, false));
            }
        }
        let spec = sub.spec;
        let amount = spec.cpus.unwrap_or(1).max(1);
        let wall = self.wall_time(&spec);
        let grid = sub.on_behalf.is_some();
        if wall.0 <= 0 {
            return Err(CoreError::BadRequest("wall_time: must be positive".into()));
        }
        if spec.executable.is_none() && spec.script.is_none() {
            return Err(CoreError::BadRequest(
                "executable: a job needs an executable or a script".into(),
            ));
        }
        self.expire(now);
        let (slot, claimed, start) = match &spec.reservation {
            Some(text) => {
                let id = text
                    .parse::<u64>()
                    .map(ReservationId)
                    .map_err(|_| CoreError::BadRequest(format!("reservation: `{text}` is not a reservation id")))?;
                let r = self.owned(who, id)?;
                self.free_of_jobs(id, "already claimed by")?;
                if amount > r.amount || r.end - r.start < wall {
                    return Err(CoreError::BadRequest(format!(
                        "reservation: {} slots for {} s cannot hold {amount} slots for {} s",
                        r.amount,
                        (r.end - r.start).0,
                        wall.0
                    )));
                }
                if r.end <= now {
                    return Err(CoreError::Conflict(format!("reservation {} has ended", id.0)));
                }
                // Claiming a hold makes it permanent, unless the caller
                // commits it itself.
                if !sub.explicit_commit && self.planner.commit(id).is_ok() {
                    self.out.push(Effect::SaveReservation(id));
                }
                (Some(id), true, Some(r.start.max(now)))
            }
            None => match self.place_new(now, who, amount, wall, self.params.policy.partitions.of(wall, grid))? {
                Some((id, start)) => (Some(id), false, Some(start)),
                None => (None, false, None),
            },
        };
        let id = JobId(self.next_job);
        self.next_job += 1;
        let record = JobRecord {
            id,
            owner: who.to_string(),
            spec,
            slot,
            claimed,
            release_claim: claimed && sub.release_with_job,
            state: JobPhase::Accepted,
            reason: None,
            exit_code: None,
            planned_start: start,
            started: None,
            ended: None,
            key: sub.key.clone(),
            backend_id: None,
            user: sub.on_behalf,
        };
        self.out.push(Effect::SaveJob(id));
        if let Some(o) = self.order.as_mut() {
            o.arrived.insert(id, now);
        }
        self.jobs.insert(id, record);
        self.active.insert(id);
        match (start, claimed) {
            (Some(start), false) => {
                self.queue.insert((start, id));
            }
            (None, _) => self.waiting.push_back(id),
            (Some(_), true) => {}
        }
        self.touch(id);
        if let Some(k) = sub.key {
            self.keys.insert((who.to_string(), k), id);
        }
        if !grid {
            if let Some(f) = self.forecasting(now) {
                f.demand_changes(now, i64::from(amount));
            }
        }
        // Partitioned, a job that waits is protected in its turn: its
        // partition's and, under priorities, its kind's.
        if start.is_none() && self.params.policy.is_partitioned() {
            self.promote(now);
        }
        if self.replans() && !claimed {
            self.replan(now);
        }
        Ok((id, true))
    }

    /// `who`'s job `id`.
    pub fn job(&self, who: &str, id: JobId) -> Result<&JobRecord, CoreError> {
        let j = self
            .jobs
            .get(&id)
            .ok_or_else(|| CoreError::NotFound(format!("job {id}")))?;
        if j.owner != who {
            return Err(CoreError::Forbidden(format!("job {id}")));
        }
        Ok(j)
    }

    /// `who`'s job submitted with idempotency key `key`.
    pub fn job_by_key(&self, who: &str, key: &str) -> Result<&JobRecord, CoreError> {
        let id = self
            .keys
            .get(&(who.to_string(), key.to_string()))
            .copied()
            .ok_or_else(|| CoreError::NotFound(format!("job with key {key}")))?;
        self.job(who, id)
    }

    /// `who`'s jobs changed after version `after`, at most `limit`, and
    /// the version to ask after next; `None` when `after` is older than
    /// jobs the core has retired (the driver's store answers then).
    pub fn changes(&self, who: &str, after: u64, limit: usize) -> Option<(Vec<&JobRecord>, u64)> {
        if after < self.retired {
            return None;
        }
        let page = self
            .feed
            .page(after, limit, |id| self.jobs.get(&id).is_some_and(|j| j.owner == who));
        Some((
            page.jobs.iter().filter_map(|id| self.jobs.get(id)).collect(),
            page.version,
        ))
    }

    /// Cancels `who`'s job `id` in any state. A job that has not started
    /// ends here; a running one is stopped by its runner, which records the
    /// end.
    pub fn cancel_job(&mut self, now: Time, who: &str, id: JobId) -> Result<&JobRecord, CoreError> {
        let j = self.job(who, id)?;
        if !j.state.is_terminal() {
            let waiting = j.is_waiting() || j.state == JobPhase::Held;
            self.out.push(Effect::Stop(id));
            if waiting {
                self.close(
                    now,
                    id,
                    JobPhase::Cancelled,
                    None,
                    Some("cancelled by its owner".into()),
                );
            }
        }
        self.job(who, id)
    }

    /// Holds `who`'s job `id` (`brokk hold`, Slurm's `scontrol uhold`): a
    /// job that has not started gives its slot back, so the queue moves up
    /// into it, and waits without a start until released. A job in a
    /// reservation it claimed keeps it for its owner; one that has started
    /// or ended cannot be held.
    pub fn hold_job(&mut self, now: Time, who: &str, id: JobId) -> Result<&JobRecord, CoreError> {
        let j = self.job(who, id)?;
        match j.state {
            JobPhase::Held => return self.job(who, id),
            s if s.is_terminal() => return Err(CoreError::Conflict(format!("job {id} has ended"))),
            _ if runs(j.state) || j.started.is_some() => {
                return Err(CoreError::Conflict(format!(
                    "job {id} has started: only a job that waits can be held; cancel it instead"
                )))
            }
            _ if j.claimed => {
                return Err(CoreError::Conflict(format!(
                    "job {id} runs in a reservation of its own: held, it would leave the reservation idle; \
                     cancel it or modify the reservation instead"
                )))
            }
            _ => {}
        }
        self.give_up_slot(id);
        self.waiting.retain(|&w| w != id);
        let j = self.jobs.get_mut(&id).expect("checked above");
        j.state = JobPhase::Held;
        j.reason = Some("held by its owner".into());
        self.touch(id);
        self.out.push(Effect::SaveJob(id));
        self.out.push(Effect::Manager(Manager::HoldJob(id)));
        // What it held is free for the jobs behind it.
        self.compress(now);
        self.job(who, id)
    }

    /// Releases `who`'s held job `id` (`brokk release`): it is placed again
    /// as an arrival at `now` is, keeping its place in a queue order. A job
    /// not held is left as it is.
    pub fn release_job(&mut self, now: Time, who: &str, id: JobId) -> Result<&JobRecord, CoreError> {
        let j = self.job(who, id)?;
        if j.state.is_terminal() {
            return Err(CoreError::Conflict(format!("job {id} has ended")));
        }
        if j.state != JobPhase::Held {
            return self.job(who, id);
        }
        self.unhold(now, id)?;
        self.out.push(Effect::Manager(Manager::ReleaseJob(id)));
        self.job(who, id)
    }

    /// Places held job `id` again from `now`, queued (or waiting for a
    /// slot, as a new arrival may).
    fn unhold(&mut self, now: Time, id: JobId) -> Result<(), CoreError> {
        let j = &self.jobs[&id];
        let (owner, amount, wall, part) = (
            j.owner.clone(),
            j.spec.cpus.unwrap_or(1).max(1),
            self.wall_time(&j.spec),
            self.part_of(j),
        );
        let placed = self.place_new(now, &owner, amount, wall, part)?;
        let j = self.jobs.get_mut(&id).expect("checked above");
        j.state = JobPhase::Queued;
        j.reason = None;
        match placed {
            Some((slot, start)) => {
                j.slot = Some(slot);
                j.planned_start = Some(start);
                self.queue.insert((start, id));
                self.out.push(Effect::StartMoved { job: id, start });
            }
            // In its arrival place, as a job that lost its slot waits.
            None => {
                self.wait_in_arrival_place(id);
            }
        }
        self.touch(id);
        self.out.push(Effect::SaveJob(id));
        if self.replans() {
            self.replan(now);
        } else if placed.is_none() {
            self.promote(now);
        }
        Ok(())
    }

    /// Takes job `id` up for running, or `None` when it has ended.
    pub fn launch(&self, id: JobId) -> Option<Launch> {
        let j = self.jobs.get(&id).filter(|j| !j.state.is_terminal())?;
        let held = j
            .slot
            .and_then(|s| self.planner.get(s))
            .is_some_and(|r| matches!(r.state, State::Preliminary { .. }));
        Some(Launch {
            wall: self.wall_time(&j.spec),
            record: j.clone(),
            committed: !held,
        })
    }

    /// Records that job `id` is in the resource manager as `backend_id`,
    /// queued there.
    pub fn record_submitted(&mut self, id: JobId, backend_id: u64) {
        let Some(j) = self.jobs.get_mut(&id) else { return };
        if j.state.is_terminal() || j.backend_id == Some(backend_id) {
            return;
        }
        j.backend_id = Some(backend_id);
        if j.state == JobPhase::Held {
            // Held while it was being handed over: the manager holds it too.
            self.out.push(Effect::Manager(Manager::HoldJob(id)));
        } else if j.state != JobPhase::Running {
            if runs(j.state) {
                self.running -= 1;
            }
            j.state = JobPhase::Queued;
        }
        self.touch(id);
        self.out.push(Effect::SaveJob(id));
    }

    /// Moves job `id` to `phase` (not a terminal one); false if it has
    /// ended. Only `running` is persisted: after a restart a job recorded in
    /// an earlier phase is simply staged and queued again.
    pub fn set_phase(&mut self, now: Time, id: JobId, phase: JobPhase) -> bool {
        let held = self.jobs.get(&id).is_some_and(|j| j.state == JobPhase::Held);
        if phase == JobPhase::Running {
            // A held job's runner waits for its release to start it.
            return !held && self.mark_running(id, now);
        }
        let Some(j) = self.jobs.get_mut(&id).filter(|j| !j.state.is_terminal()) else {
            return false;
        };
        if held {
            // Its staging goes on; it stays held.
            return true;
        }
        self.running = self.running + u32::from(runs(phase)) - u32::from(runs(j.state));
        j.state = phase;
        self.touch(id);
        true
    }

    /// Records that job `id` started running at `start` (the resource
    /// manager's own start, or now); its slot moves there so predictions
    /// follow what happened. False if it has ended.
    pub fn mark_running(&mut self, id: JobId, start: Time) -> bool {
        // The resource manager started it before a hold reached it: it runs,
        // in a slot of its own again.
        if self.jobs.get(&id).is_some_and(|j| j.state == JobPhase::Held) && self.unhold(start, id).is_err() {
            tracing::warn!(job = %id, "a held job started and no slot is left for it");
        }
        let Some(j) = self.jobs.get_mut(&id).filter(|j| !j.state.is_terminal()) else {
            return false;
        };
        let first = !runs(j.state) && j.started.is_none();
        self.running += u32::from(!runs(j.state));
        j.state = JobPhase::Running;
        j.started = Some(start);
        let (slot, claimed, planned) = (j.slot, j.claimed, j.planned_start);
        if let (true, Some(o)) = (first, self.order.as_mut()) {
            let wall = j.spec.wall_time.unwrap_or(self.params.default_wall_time);
            let q = o.queue_job(j, wall, start);
            o.with(|order| order.started(&q, start));
        }
        if let Some(p) = planned {
            self.queue.remove(&(p, id));
        }
        self.touch(id);
        if let (Some(slot), false) = (slot, claimed) {
            let moved = self.planner.get(slot).is_some_and(|r| r.start != start)
                && self
                    .planner
                    .modify(
                        slot,
                        Change {
                            window: Some((start, start)),
                            ..Change::default()
                        },
                    )
                    .is_ok();
            if moved {
                self.out.push(Effect::SaveReservation(slot));
            }
        }
        self.out.push(Effect::SaveJob(id));
        true
    }

    /// Records how job `id` ended at `now`, frees what it held and moves
    /// queued jobs up into it.
    pub fn finish(&mut self, now: Time, id: JobId, phase: JobPhase, exit_code: Option<i32>, reason: Option<String>) {
        self.close(now, id, phase, exit_code, reason);
    }

    /// Frees what an ended job held: its own slot, or the reservation it
    /// claimed when that was made for it alone (the resource manager's
    /// reservation goes too); an owner's reservation is kept.
    fn release_slot(&mut self, j: &JobRecord) {
        self.release_slot_of(j.slot, j.claimed, j.release_claim);
    }

    /// [`SiteCore::release_slot`] from what it reads of the job: its slot,
    /// whether it claimed it and whether that ends with the job.
    fn release_slot_of(&mut self, slot: Option<ReservationId>, claimed: bool, release_claim: bool) {
        let Some(slot) = slot.filter(|_| !claimed || release_claim) else {
            return;
        };
        if self.planner.cancel(slot).is_ok() {
            self.end(vec![slot], Ended::Released);
            if claimed {
                self.out.push(Effect::Manager(Manager::Release(vec![slot])));
            }
        }
    }

    /// Records the ends of jobs that ended together at `now`, then moves
    /// the queue up once: what they free is free at once, as a trace
    /// scheduler sees it.
    pub fn finish_together(&mut self, now: Time, ends: Vec<(JobId, JobPhase, Option<i32>, Option<String>)>) {
        for (id, phase, exit_code, reason) in ends {
            self.record_end(now, id, phase, exit_code, reason);
        }
        self.compress(now);
    }

    fn close(&mut self, now: Time, id: JobId, phase: JobPhase, exit_code: Option<i32>, reason: Option<String>) {
        self.record_end(now, id, phase, exit_code, reason);
        self.compress(now);
    }

    /// Records job `id`'s end, unless it has ended already.
    fn record_end(&mut self, now: Time, id: JobId, phase: JobPhase, exit_code: Option<i32>, reason: Option<String>) {
        // Changed where it is: a record is large, and moving it out and
        // back cost more than the rest of an end.
        let Some(j) = self.jobs.get_mut(&id).filter(|j| !j.state.is_terminal()) else {
            return;
        };
        let was_running = runs(j.state);
        j.state = phase;
        j.exit_code = exit_code;
        j.reason = reason;
        j.ended = Some(now);
        if let Some(o) = self.order.as_mut() {
            if let Some(start) = j.started {
                let wall = j.spec.wall_time.unwrap_or(self.params.default_wall_time);
                let q = o.queue_job(j, wall, start);
                o.with(|order| order.ended(&q, start, now));
            }
            o.arrived.remove(&id);
        }
        let (planned, slot, claimed, release_claim) = (j.planned_start, j.slot, j.claimed, j.release_claim);
        let local_demand = (j.user.is_none()).then(|| i64::from(j.spec.cpus.unwrap_or(1).max(1)));
        if was_running && self.active.contains(&id) {
            self.running -= 1;
        }
        if let (true, Some(d), Some(f)) = (self.active.remove(&id), local_demand, self.forecast.as_mut()) {
            f.demand_changes(now, -d);
        }
        if let Some(p) = planned {
            self.queue.remove(&(p, id));
        }
        self.release_slot_of(slot, claimed, release_claim);
        self.ended.push_back((now, id));
        self.touch(id);
        self.out.push(Effect::SaveJob(id));
    }

    /// Where a new job's own slot goes under the site's policy, or `None`
    /// when it waits without one.
    fn place_new(
        &mut self,
        now: Time,
        who: &str,
        amount: u32,
        wall: Duration,
        part: usize,
    ) -> Result<Option<(ReservationId, Time)>, CoreError> {
        let protects = self.pivots[part];
        let earliest = match self.params.policy.queue {
            // Starts never overtake: not before the last queued job's.
            Policy::Fcfs => self.queue.last().map_or(now, |&(t, _)| t.max(now)),
            Policy::Backfill { .. } if protects != usize::MAX => {
                match self.book(who, amount, wall, now, now) {
                    Ok(placed) => return Ok(Some(placed)),
                    // A job that can never run here is refused, as always.
                    Err(never @ Reply::Never { .. }) => return Err(CoreError::NotGranted(never)),
                    // Partitioned, `promote` protects it in its turn.
                    Err(_) if self.params.policy.is_partitioned() => return Ok(None),
                    Err(_) if !self.waiting.is_empty() || self.protected(now) >= protects => return Ok(None),
                    Err(_) => now,
                }
            }
            Policy::Backfill { .. } => now,
        };
        self.book(who, amount, wall, earliest, OPEN_END)
            .map(Some)
            .map_err(CoreError::NotGranted)
    }

    /// A slot of `amount` for `wall` from `earliest` to no later than
    /// `latest`, or the planner's reply why not.
    fn book(
        &mut self,
        who: &str,
        amount: u32,
        wall: Duration,
        earliest: Time,
        latest: Time,
    ) -> Result<(ReservationId, Time), Reply> {
        match self
            .planner
            .reserve(who, &slot_request(amount, wall, earliest, latest), None)
        {
            Reply::Granted { id, start } => {
                self.out.push(Effect::SaveReservation(id));
                Ok((id, start))
            }
            other => Err(other),
        }
    }

    /// Queued jobs protected by a slot that starts later than `now`.
    fn protected(&self, now: Time) -> usize {
        self.queue.range((Time(now.0 + 1), JobId(0))..).count()
    }

    /// Moves queued jobs' own slots as early as they now fit, in planned
    /// start order (conservative backfilling; under FCFS never before the
    /// job ahead), then gives waiting jobs without a slot one where the
    /// policy allows.
    fn compress(&mut self, now: Time) {
        if self.replans() {
            self.replan(now);
            return;
        }
        let fcfs = self.params.policy.queue == Policy::Fcfs;
        let mut floor = now;
        let queued: Vec<(Time, JobId)> = self.queue.range((Time(now.0 + 1), JobId(0))..).copied().collect();
        for (old, id) in queued {
            let Some(slot) = self.jobs.get(&id).and_then(|j| j.slot) else {
                continue;
            };
            let change = Change {
                window: Some((if fcfs { floor } else { now }, old)),
                ..Change::default()
            };
            let moved = self.planner.modify(slot, change);
            floor = match moved {
                Ok(start) => start.min(old),
                Err(_) => old,
            };
            match moved {
                Ok(start) if start < old => {
                    self.queue.remove(&(old, id));
                    self.queue.insert((start, id));
                    if let Some(j) = self.jobs.get_mut(&id) {
                        j.planned_start = Some(start);
                    }
                    self.touch(id);
                    self.out.push(Effect::SaveReservation(slot));
                    self.out.push(Effect::SaveJob(id));
                    self.out.push(Effect::StartMoved { job: id, start });
                }
                _ => {}
            }
        }
        self.promote(now);
    }

    /// Queued jobs protected by a slot later than `now`, per partition.
    fn protected_by_partition(&self, now: Time) -> Vec<usize> {
        let mut n = vec![0; self.pivots.len()];
        if let [one] = n.as_mut_slice() {
            *one = self.protected(now);
            return n;
        }
        for (_, id) in self.queue.range((Time(now.0 + 1), JobId(0))..) {
            if let Some(j) = self.jobs.get(id) {
                n[self.part_of(j)] += 1;
            }
        }
        n
    }

    /// The grid job protected latest in partition `part`, if any: the one
    /// a local job displaces at least cost.
    fn latest_protected_grid(&self, now: Time, part: usize) -> Option<JobId> {
        self.queue
            .range((Time(now.0 + 1), JobId(0))..)
            .rev()
            .map(|&(_, id)| id)
            .find(|id| {
                self.jobs
                    .get(id)
                    .is_some_and(|j| j.user.is_some() && self.part_of(j) == part)
            })
    }

    /// Takes queued job `id`'s slot away: it waits without one again, in
    /// its arrival place, whose index it returns.
    fn unprotect(&mut self, id: JobId) -> usize {
        self.give_up_slot(id);
        let at = self.wait_in_arrival_place(id);
        self.touch(id);
        self.out.push(Effect::SaveJob(id));
        at
    }

    /// Takes waiting job `id` out of the queue and gives its own slot back
    /// (what it frees is the queue's at the next compression); its runner's
    /// start moves away until it has a slot again.
    fn give_up_slot(&mut self, id: JobId) {
        let (slot, planned) = self
            .jobs
            .get_mut(&id)
            .map_or((None, None), |j| (j.slot.take(), j.planned_start.take()));
        if let Some(p) = planned {
            self.queue.remove(&(p, id));
        }
        if let Some(slot) = slot.filter(|&s| self.planner.cancel(s).is_ok()) {
            self.end(vec![slot], Ended::Released);
        }
        self.out.push(Effect::StartMoved {
            job: id,
            start: OPEN_END,
        });
    }

    /// Puts job `id` among the jobs waiting without a slot, in arrival
    /// order (ids are issued in that order); returns its index.
    fn wait_in_arrival_place(&mut self, id: JobId) -> usize {
        let at = self.waiting.partition_point(|&w| w < id);
        self.waiting.insert(at, id);
        at
    }

    /// Gives waiting jobs without a slot one, in arrival order (under
    /// priorities, local jobs before the grid's): a job that fits at once
    /// starts now (backfilling around the protected ones); one that does
    /// not is protected at its earliest start while its partition protects
    /// fewer than the policy's number. Under priorities a local job that
    /// cannot start takes the protection of its partition's latest grid
    /// job when none is left to it.
    fn promote(&mut self, now: Time) {
        if !matches!(self.params.policy.queue, Policy::Backfill { .. }) || self.waiting.is_empty() {
            return;
        }
        self.sort_waiting(now);
        let local_first = self.params.policy.partitions.local_first();
        let mut protected = self.protected_by_partition(now);
        let passes: &[Option<bool>] = if local_first {
            &[Some(false), Some(true)]
        } else {
            &[None]
        };
        for &pass in passes {
            let mut k = 0;
            while k < self.waiting.len() {
                let id = self.waiting[k];
                let Some(j) = self.jobs.get(&id).filter(|j| j.is_waiting() && j.slot.is_none()) else {
                    self.waiting.remove(k);
                    continue;
                };
                let grid = j.user.is_some();
                if pass.is_some_and(|g| g != grid) {
                    k += 1;
                    continue;
                }
                let part = self.part_of(j);
                let (who, amount, wall) = (
                    j.owner.clone(),
                    j.spec.cpus.unwrap_or(1).max(1),
                    self.wall_time(&j.spec),
                );
                let may_protect = protected[part] < self.pivots[part];
                let latest = if may_protect { OPEN_END } else { now };
                let mut booked = self.book(&who, amount, wall, now, latest);
                if booked.is_err() && !may_protect && local_first && !grid {
                    if let Some(grid_job) = self.latest_protected_grid(now, part) {
                        if self.unprotect(grid_job) <= k {
                            k += 1;
                        }
                        protected[part] -= 1;
                        booked = self.book(&who, amount, wall, now, OPEN_END);
                    }
                }
                let Ok((slot, start)) = booked else {
                    k += 1;
                    continue;
                };
                protected[part] += usize::from(start > now);
                self.waiting.remove(k);
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.slot = Some(slot);
                    j.planned_start = Some(start);
                }
                self.queue.insert((start, id));
                self.touch(id);
                self.out.push(Effect::SaveJob(id));
                self.out.push(Effect::StartMoved { job: id, start });
            }
        }
    }

    /// Whether the jobs not started are planned again at every arrival and
    /// release: under a queue order, unless the policy partitions the
    /// processors (its partitions keep their own protections).
    fn replans(&self) -> bool {
        self.order.is_some() && !self.params.policy.is_partitioned()
    }

    /// Plans the jobs not started again in the order's order (ties in
    /// arrival order), the trace queue's rule under an order: under FCFS
    /// each no earlier than the one before it; under backfilling each
    /// starts now where it fits, and is given its earliest start while
    /// fewer than the policy's number hold a later one (conservative: all),
    /// else waits without a slot. A job keeps its slot's id wherever the
    /// slot moves, earlier or later.
    fn replan(&mut self, now: Time) {
        let later: Vec<(Time, JobId)> = self.queue.range((Time(now.0 + 1), JobId(0))..).copied().collect();
        let mut ids: Vec<JobId> = later.iter().map(|&(_, id)| id).collect();
        ids.extend(self.waiting.drain(..));
        let mut slots: HashMap<JobId, Reservation> = HashMap::with_capacity(later.len());
        for (start, id) in later {
            self.queue.remove(&(start, id));
            let slot = self.jobs.get(&id).and_then(|j| j.slot);
            if let Some(r) = slot.and_then(|slot| self.planner.cancel(slot).ok()) {
                slots.insert(id, r);
            }
        }
        ids.retain(|id| self.jobs.get(id).is_some_and(JobRecord::is_waiting));
        let ids = self.in_order(ids, now);
        let fcfs = self.params.policy.queue == Policy::Fcfs;
        let protects = self.pivots[0];
        let (mut floor, mut protected) = (now, 0);
        for id in ids {
            let j = &self.jobs[&id];
            let (amount, wall) = (j.spec.cpus.unwrap_or(1).max(1), self.wall_time(&j.spec));
            let (earliest, latest) = match fcfs {
                true => (floor, OPEN_END),
                false if protected < protects => (now, OPEN_END),
                false => (now, now),
            };
            let start = self
                .planner
                .earliest_start(&slot_request(amount, wall, earliest, latest))
                .ok()
                .flatten();
            let old = j.planned_start;
            let slot = match (start, slots.remove(&id)) {
                (Some(start), Some(mut r)) => {
                    (r.start, r.end) = (start, start + wall);
                    match self.planner.restore(&r) {
                        Ok(()) => Some(r.id),
                        Err(_) => {
                            self.end(vec![r.id], Ended::Released);
                            None
                        }
                    }
                }
                (Some(start), None) => {
                    let owner = j.owner.clone();
                    self.book(&owner, amount, wall, start, start).ok().map(|(id, _)| id)
                }
                (None, Some(r)) => {
                    self.end(vec![r.id], Ended::Released);
                    None
                }
                (None, None) => None,
            };
            let start = start.filter(|_| slot.is_some());
            if let Some(s) = start {
                floor = s;
                protected += usize::from(s > now);
                self.queue.insert((s, id));
            } else {
                self.waiting.push_back(id);
            }
            let j = self.jobs.get_mut(&id).expect("listed above");
            j.slot = slot;
            j.planned_start = start;
            if start != old {
                if let Some(slot) = slot {
                    self.out.push(Effect::SaveReservation(slot));
                }
                self.touch(id);
                self.out.push(Effect::SaveJob(id));
                self.out.push(Effect::StartMoved {
                    job: id,
                    start: start.unwrap_or(OPEN_END),
                });
            }
        }
    }

    /// Puts the waiting jobs without a slot in the order's order at `now`
    /// (lower keys first, ties in arrival order); without an order they
    /// stay in arrival order.
    fn sort_waiting(&mut self, now: Time) {
        let waiting: Vec<JobId> = self.waiting.drain(..).collect();
        self.waiting = self.in_order(waiting, now).into();
    }

    /// `ids` in the order's order at `now` (lower keys first, ties in
    /// arrival order), leaving out jobs the site no longer has; as they
    /// are without an order.
    fn in_order(&mut self, mut ids: Vec<JobId>, now: Time) -> Vec<JobId> {
        let Some(o) = self.order.as_mut() else { return ids };
        let mut keyed: Vec<(f64, JobId)> = Vec::with_capacity(ids.len());
        for id in ids.drain(..) {
            let Some(j) = self.jobs.get(&id) else { continue };
            let q = o.queue_job(j, j.spec.wall_time.unwrap_or(self.params.default_wall_time), now);
            keyed.push((o.with(|order| order.key(&q, now)), id));
        }
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        ids.extend(keyed.into_iter().map(|(_, id)| id));
        ids
    }

    /// Brings the mirror of what occupies the resource manager without the
    /// site up to date: new occupants are booked (as much of them as fits
    /// beside the site's own bookings, at each moment of their span), gone
    /// or changed ones released, and queued jobs move up into what was
    /// released.
    pub fn mirror(&mut self, now: Time, occupants: Vec<Occupant>) {
        let wanted: HashMap<String, Occupant> = occupants.into_iter().map(|o| (o.key.clone(), o)).collect();
        // One mirrored short (the site had booked that share already) is
        // booked again, so that it grows as what it overlapped moves away.
        let stale: Vec<String> = self
            .foreign
            .iter()
            .filter(|(k, m)| wanted.get(*k) != Some(&m.occupant) || m.short)
            .map(|(k, _)| k.clone())
            .collect();
        let released = !stale.is_empty();
        // Those booked again as they were: said once, when first seen.
        let mut again = HashSet::new();
        for k in stale {
            if let Some(m) = self.foreign.remove(&k) {
                if wanted.get(&k) == Some(&m.occupant) {
                    again.insert(k);
                }
                for id in m.pieces {
                    let _ = self.planner.cancel(id);
                }
            }
        }
        for (k, o) in wanted {
            if self.foreign.contains_key(&k) {
                continue;
            }
            // Piece by piece where the free capacity changes, so the part
            // that fits is held everywhere it fits; nothing is planned past
            // the horizon, where an occupant with no end known stops too.
            let end = o.end.min(self.params.horizon);
            let (mut pieces, mut held) = (Vec::new(), 0i64);
            for f in self.planner.free_slots(o.start, end) {
                let req = Request {
                    amount: o.cpus.min(f.free),
                    duration: f.end - f.start,
                    earliest: f.start,
                    latest: f.start,
                    flexible: false,
                };
                if let Reply::Granted { id, .. } = self.planner.reserve(FOREIGN, &req, None) {
                    pieces.push(id);
                    held += i64::from(req.amount) * req.duration.0;
                }
            }
            let short = held < i64::from(o.cpus) * (end - o.start).0.max(0);
            if short && !again.contains(&k) {
                tracing::warn!(
                    occupant = %k,
                    "the cluster holds {} CPUs the site did not book where it planned; mirrored where they fit",
                    o.cpus
                );
            }
            self.foreign.insert(
                k,
                Mirrored {
                    occupant: o,
                    pieces,
                    short,
                },
            );
        }
        if released {
            self.compress(now);
        }
    }

    /// The clients' reservations that start after `now` and that the site
    /// can no longer hold: where a foreign occupant (a node down or drained,
    /// a job the resource manager started on its own) is mirrored short of
    /// its size, the reservations that do not fit beside it at its full
    /// size and what has started ([`crate::overflowing`]: the earliest
    /// stay). A broker holding one moves it ([VRM] 6); none while every
    /// occupant is mirrored whole.
    pub fn endangered(&self, now: Time) -> Vec<ReservationId> {
        if !self.foreign.values().any(|m| m.short) {
            return Vec::new();
        }
        // Jobs' own slots not yet started are the queue's, which plans
        // them again itself; the foreign ones count at their full size.
        let slots: HashSet<ReservationId> = self
            .active
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter(|j| !j.claimed)
            .filter_map(|j| j.slot)
            .collect();
        let mut fixed: Vec<(Time, Time, u32)> = self
            .foreign
            .values()
            .map(|m| (m.occupant.start.max(now), m.occupant.end, m.occupant.cpus))
            .collect();
        let mut movable = Vec::new();
        for r in self.planner.reservations() {
            match (r.owner.as_ref() == FOREIGN, r.start > now, slots.contains(&r.id)) {
                (true, ..) => {}
                (false, false, _) => fixed.push((now, r.end, r.amount)),
                (false, true, true) => {}
                (false, true, false) => movable.push((r.id, r.start, r.end, r.amount)),
            }
        }
        crate::overflowing(self.params.capacity, &fixed, &movable)
    }

    /// `who`'s reservations among those the site can no longer hold
    /// ([`SiteCore::endangered`]), by start.
    pub fn endangered_of(&self, now: Time, who: &str) -> Vec<Reservation> {
        let mut mine: Vec<Reservation> = self
            .endangered(now)
            .into_iter()
            .filter_map(|id| self.planner.get(id))
            .filter(|r| r.owner.as_ref() == who)
            .collect();
        mine.sort_by_key(|r| (r.start, r.id));
        mine
    }

    /// Of resource-manager job ids, those this site submitted for a job
    /// that has since ended, each with that job. A resource manager's job
    /// names are hints any job there can take; the id recorded at
    /// submission is not. An id an unfinished job holds is that job's: a
    /// manager that lost its state hands the ids out again. (A job retired
    /// from here is not found: its leftover is stopped by its own run-once
    /// guard.)
    pub fn ended_as(&self, backend_ids: impl IntoIterator<Item = u64>) -> Vec<(JobId, u64)> {
        let mut ended = std::collections::HashMap::new();
        let mut live = std::collections::HashSet::new();
        for j in self.jobs.values() {
            let Some(b) = j.backend_id else { continue };
            if j.state.is_terminal() {
                ended.insert(b, j.id);
            } else {
                live.insert(b);
            }
        }
        backend_ids
            .into_iter()
            .filter(|b| !live.contains(b))
            .filter_map(|b| Some((*ended.get(&b)?, b)))
            .collect()
    }

    /// Whether reservation `id` is live and the site's own (not mirrored).
    pub fn holds_reservation(&self, id: ReservationId) -> bool {
        self.planner.get(id).is_some_and(|r| r.owner.as_ref() != FOREIGN)
    }

    /// Panics unless the site's books agree with themselves: the running
    /// count, the queue and the live set match the records, and the
    /// schedule is sound. For tests, after every step.
    pub fn check_invariants(&self) {
        let running = self.active().filter(|j| runs(j.state)).count() as u32;
        assert_eq!(self.running, running, "running count");
        for &(t, id) in &self.queue {
            let j = &self.jobs[&id];
            assert!(
                j.is_waiting() && !j.claimed && j.planned_start == Some(t),
                "queue entry {id}"
            );
        }
        for id in &self.waiting {
            let j = &self.jobs[id];
            assert!(
                j.state.is_terminal() || (j.is_waiting() && j.slot.is_none()),
                "waiting entry {id}"
            );
        }
        for j in self.jobs.values() {
            assert_eq!(
                self.active.contains(&j.id),
                !j.state.is_terminal(),
                "live set, job {}",
                j.id
            );
        }
        self.planner.check_invariants();
    }

    /// Waiting jobs in their own slots, by planned start.
    pub fn queued(&self) -> impl Iterator<Item = (Time, JobId)> + '_ {
        self.queue.iter().copied()
    }
}

mod shadow;

#[cfg(test)]
mod tests;
