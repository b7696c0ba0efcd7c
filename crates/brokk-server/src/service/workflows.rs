//! Workflows: admission against a deadline over the sites and the broker's
//! network ([VRM] 4, `brokk_broker::workflow::admit`), then their course
//! (`brokk_broker::workflow::course`): each task sent into its reservation
//! once its parents succeeded, with their outputs, retried inside its slack,
//! and the rest cancelled when one fails for good.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use brokk_broker::share::{Share, Span, Within};
use brokk_broker::workflow::course::{Action, Course, Outcome, TaskRun, TaskStatus, Unplanned};
use brokk_broker::workflow::{admit, LinkSpec, Network, Offer, Options, RejectReason, Rejection, Scheduler};
use brokk_broker::workflow::{SiteSpec, TaskPlan, Topology};
use brokk_model::workflow::Workflow;
use brokk_proto::wire::{WorkflowEdge, WorkflowRequest, WorkflowState, WorkflowTask, WorkflowTransfer, WorkflowView};

use super::reservations::Live;
use super::*;
use crate::db::StoredWorkflow;

/// The network the broker reserves between its `sites` sites: every two
/// joined directly at `bandwidth` bytes per second, planned 400 days ahead.
pub fn network(sites: usize, bandwidth: u64, now: Time) -> Result<Network, String> {
    let mut links = Vec::new();
    for a in 0..sites {
        for b in a + 1..sites {
            links.push(LinkSpec { a, b, bandwidth });
        }
    }
    // Units of bandwidth small enough that a link is at most a million.
    let unit = bandwidth.div_ceil(1_000_000).max(1);
    Network::new(sites, links, unit, now + brokk_model::Duration(400 * 86_400)).map_err(|e| e.to_string())
}

/// Names of the files a job leaves for its children: its outputs kept at
/// the site and its standard streams.
fn made_by(job: &Job) -> BTreeSet<String> {
    job.output_files
        .iter()
        .filter(|f| f.target.is_none())
        .map(|f| f.name.clone())
        .chain(job.stdout.clone())
        .chain(job.stderr.clone())
        .collect()
}

/// The language a task's job was written in (its placeholders are that
/// language's), canonical JSON when not known.
fn format_of(name: Option<&str>) -> Format {
    name.and_then(|f| f.parse().ok()).unwrap_or(Format::Json)
}

/// Where a task stands, from its job's state.
fn status_of(v: &BrokerJob) -> TaskStatus {
    match v.state() {
        BrokerState::Planned => TaskStatus::Planned,
        BrokerState::Finished if v.exit_code == Some(0) => TaskStatus::Succeeded,
        BrokerState::Finished => TaskStatus::Failed(match v.exit_code {
            Some(c) => format!("exit status {c}"),
            None => "it ended without an exit status".into(),
        }),
        BrokerState::Failed => TaskStatus::Failed(v.reason.clone().unwrap_or_else(|| "it failed".into())),
        BrokerState::Cancelled => TaskStatus::Cancelled,
        _ => TaskStatus::Sent,
    }
}

/// Where task `t` stands, from its job among `jobs`.
pub(super) fn run_of(t: &WorkflowTask, jobs: &HashMap<String, StoredJob>) -> TaskRun {
    TaskRun {
        status: jobs.get(&t.job).map_or_else(
            || TaskStatus::Failed(format!("its job {} is missing from the records", t.job)),
            |j| status_of(&j.view),
        ),
        retried: t.retried,
    }
}

impl Service {
    /// Admits a workflow against its deadline: every task reserved at a
    /// site and every transfer on the network, committed together, its
    /// tasks stored to run in them; or why not, with the earliest finish
    /// on offer and nothing left reserved.
    pub async fn submit_workflow(
        &self,
        owner: &str,
        req: WorkflowRequest,
    ) -> Result<Result<WorkflowView, Rejection>, ServiceError> {
        let scheduler = match &req.scheduler {
            Some(s) => s.parse::<Scheduler>().map_err(ServiceError::BadRequest)?,
            None => Scheduler::HeftSync,
        };
        let t = now();
        let mut wf = req.workflow;
        self.within_job_limits(owner, wf.tasks.len(), self.limits.jobs_per_submission)
            .await?;
        let made: BTreeMap<String, BTreeSet<String>> = wf
            .tasks
            .iter()
            .filter_map(|t| Some((t.id.clone(), made_by(t.job.as_ref()?))))
            .collect();
        let mut from_parents: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for e in &wf.edges {
            if let Some(names) = made.get(&e.parent) {
                from_parents
                    .entry(e.child.clone())
                    .or_default()
                    .extend(names.iter().cloned());
            }
        }
        let id = format!("w{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut asked = 0i64;
        for (k, task) in wf.tasks.iter_mut().enumerate() {
            let Some(job) = task.job.as_mut() else {
                return Err(ServiceError::BadRequest(format!(
                    "task {}: it has no job to run; a workflow of run times only can be planned \
                     (`brokk workflow plan`) and simulated, not run",
                    task.id
                )));
            };
            brokk_jdl::absorb_script_headers(std::slice::from_mut(job))
                .map_err(|e| ServiceError::BadRequest(format!("task {}: {e}", task.id)))?;
            brokk_broker::select::validate_at(job, t)
                .map_err(|e| ServiceError::BadRequest(format!("task {}: {e}", task.id)))?;
            if job.reservation.is_some() {
                return Err(ServiceError::BadRequest(format!(
                    "task {}: it runs in the reservation its admission makes; remove `reservation`",
                    task.id
                )));
            }
            // The reservation is as long as the wall time (live sites count
            // as the reference resource), and the job is given all of it.
            let wall = job.wall_time.unwrap_or(task.runtime);
            if wall.0 <= 0 {
                return Err(ServiceError::BadRequest(format!(
                    "task {}: give its wall time; its reservation is made that long",
                    task.id
                )));
            }
            if wall.0 > self.limits.reservation_seconds {
                return Err(ServiceError::BadRequest(format!(
                    "task {}: a reservation may last at most {} s on this broker, not {} s",
                    task.id, self.limits.reservation_seconds, wall.0
                )));
            }
            task.runtime = wall;
            job.wall_time = Some(wall);
            // A node's own retries (HTCondor `max_retries`) count like DAGMan's RETRY.
            task.retries = task.retries.max(job.retries.unwrap_or(0));
            task.cores = task.cores.max(job.cpus.unwrap_or(1)).max(1);
            asked = asked.saturating_add(i64::from(task.cores).saturating_mul(wall.0));
            let parents = from_parents.remove(&task.id).unwrap_or_default();
            self.take_uploads(owner, job, &req.uploads, &parents)?;
            let job_id = format!("{id}-{k}");
            let ids = brokk_jdl::assign::Ids {
                job: &job_id,
                submission: &id,
                index: k,
                user: owner,
            };
            brokk_jdl::assign::assign(format_of(task.format.as_deref()), job, ids);
        }
        // Turns per user first: another user's admission waits for at most
        // one of this user's, however many they send at once; and the
        // limits below count what the user's earlier admissions stored.
        let _mine = self.admissions.take(owner).await;
        let t = now().max(t);
        self.within_reserved_limit(owner, asked, t).await?;
        // A workflow counts as one of the owner's reservations.
        let live = self.live_of(owner, t).await?;
        self.limits
            .share()
            .count(live.count, 1)
            .map_err(|e| ServiceError::Conflict(format!("the workflow: {e}")))?;

        let _course = self.workflow_lock.lock().await;
        let holds = self.start_holds(&id, owner)?;
        let offer = match self.admit_over_sites(owner, &wf, scheduler, t, holds.clone()).await? {
            Ok(offer) => offer,
            Err(r) if matches!(r.reason, RejectReason::Invalid { .. }) => {
                return Err(ServiceError::BadRequest(r.to_string()))
            }
            Err(r) => return Ok(Err(r)),
        };
        // On disk before the commit: a stop in between leaves tasks whose
        // holds lapse, and the workflow fails when the first is sent.
        let mut stored = match self.store_workflow(owner, &id, scheduler, &wf, &offer).await {
            Ok(s) => s,
            Err(e) => {
                // Let go at once rather than when they lapse.
                let _ = self.settle_offer(owner, offer, false).await?;
                return Err(e);
            }
        };
        if let Err(e) = self.settle_offer(owner, offer, true).await? {
            let why = format!("its reservations could not be committed: {e}");
            self.end_workflow(&mut stored, WorkflowState::Failed, why.clone())
                .await?;
            return Err(ServiceError::Unavailable(why));
        }
        self.wake.notify_one();
        Ok(Ok(stored.view))
    }

    /// Admits `wf` over the sites as they are now and the network, for
    /// `owner`, in a decision turn: an offer held preliminarily, or why not.
    async fn admit_over_sites(
        &self,
        owner: &str,
        wf: &Workflow,
        scheduler: Scheduler,
        t: Time,
        holds: Arc<super::holds::AdmissionHolds>,
    ) -> Result<Result<Offer, Rejection>, ServiceError> {
        let turn = self.decision_turn().await;
        let (sites, info, network) = (self.sites(), self.info.clone(), self.network.clone());
        let hold = brokk_model::Duration(self.workflow_settings.hold_seconds.max(1));
        let (user, wf) = (owner.to_string(), wf.clone());
        // Planned within the owner's share of each site: the sites are seen
        // as large as the share and through it (`share::Within`).
        let live = self.live_of(owner, t).await?;
        let held: Vec<Vec<Span>> = sites.iter().map(|s| live.at(&s.name)).collect();
        let share = self.limits.share();
        let bound = self.workflow_settings.admission_seconds;
        let admitted = tokio::task::spawn_blocking(move || {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(bound);
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            for c in &mut clients {
                c.write_holds_to(holds.clone());
                c.answer_until(until);
            }
            let mut views = within_share(&mut clients, share, held);
            let specs = views
                .iter()
                .map(|v| SiteSpec {
                    name: v.name().to_string(),
                    capacity: v.usable(),
                    speed: 1.0,
                })
                .collect();
            let mut net = network
                .lock()
                .map_err(|_| ServiceError::Unavailable("the network's lock".into()))?;
            net.advance(t);
            let topo = Topology::new(specs, &net);
            let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|c| c as &mut dyn Site).collect();
            let opts = Options {
                scheduler,
                now: t,
                hold,
                explain: true,
            };
            let mut answer = admit(&wf, &topo, &mut refs, &mut net, "broker", &opts);
            drop(refs);
            if let Err(r) = &mut answer {
                if std::time::Instant::now() >= until && !matches!(r.reason, RejectReason::Invalid { .. }) {
                    r.reason = RejectReason::TimeUp { seconds: bound };
                } else if let Some(reason) = brokk_broker::share::why_rejected(&r.reason, &views, t) {
                    r.reason = reason;
                }
            }
            Ok::<_, ServiceError>(answer)
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        admitted
    }

    /// Commits an offer's holds (`commit`), or lets them go; a commit the
    /// sites refuse releases the rest and says why.
    async fn settle_offer(
        &self,
        owner: &str,
        offer: Offer,
        commit: bool,
    ) -> Result<Result<(), brokk_broker::SiteError>, ServiceError> {
        let (sites, info, network) = (self.sites(), self.info.clone(), self.network.clone());
        let user = owner.to_string();
        tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            let Ok(mut net) = network.lock() else {
                return Err(brokk_broker::SiteError::Unavailable("the network's lock".into()));
            };
            if !commit {
                offer.release("broker", &mut refs, &mut net);
                return Ok(());
            }
            offer
                .commit("broker", &mut refs, &mut net)
                .inspect_err(|_| offer.release("broker", &mut refs, &mut net))
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))
    }

    /// Starts writing down the holds admission `key` of `owner` is granted,
    /// so a broker killed before its end lets them go when it starts again
    /// ([`Service::release_stray_holds`]); the record goes with the guard.
    fn start_holds(&self, key: &str, owner: &str) -> Result<Arc<super::holds::AdmissionHolds>, ServiceError> {
        self.holds
            .start(key, owner)
            .map(Arc::new)
            .map_err(|e| ServiceError::Unavailable(format!("writing down the admission's holds: {e}")))
    }

    /// Lets go of the holds of admissions a stop interrupted (see
    /// `service::holds`), before the service answers anyone. A hold the
    /// broker recorded as a reservation of its owner is left to its
    /// workflow's course. Returns how many holds the sites gave back.
    pub async fn release_stray_holds(&self) -> Result<usize, ServiceError> {
        let mut released = 0;
        for left in self.holds.leftovers() {
            let known: BTreeSet<(String, u64)> = self
                .db
                .reservations_of(&left.owner)
                .await?
                .into_iter()
                .map(|r| (r.site, r.site_reservation))
                .collect();
            let stray: Vec<(String, brokk_core::ReservationId)> = left
                .holds
                .iter()
                .filter(|(site, id)| !known.contains(&(site.clone(), id.0)))
                .cloned()
                .collect();
            let (sites, info, owner) = (self.sites(), self.info.clone(), left.owner.clone());
            released += tokio::task::spawn_blocking(move || {
                let mut clients = cached_sites(&sites, &info, None, None, &owner);
                let mut n = 0;
                for (site, id) in &stray {
                    let Some(c) = clients.iter_mut().find(|c| c.name() == site) else {
                        continue;
                    };
                    // As the admission would have let them go (`Offer::release`).
                    match c.cancel("broker", *id) {
                        Ok(()) => n += 1,
                        Err(e) => tracing::warn!("letting go of hold {} at {site}: {e}", id.0),
                    }
                }
                n
            })
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            self.holds.forget(&left.admission);
        }
        Ok(released)
    }

    /// Refuses `asked` more slot-seconds of reservations beyond `owner`'s limit.
    pub(super) async fn within_reserved_limit(&self, owner: &str, asked: i64, t: Time) -> Result<(), ServiceError> {
        let held = self.db.reserved_slot_seconds(owner, t).await?;
        let limit = (self.limits.reserved_slot_hours as i64).saturating_mul(3600);
        if held.saturating_add(asked) > limit {
            return Err(ServiceError::Conflict(format!(
                "you hold {:.1} slot-hours in reservations and ask for {:.1} more; the limit is {} per user",
                held as f64 / 3600.0,
                asked as f64 / 3600.0,
                self.limits.reserved_slot_hours
            )));
        }
        Ok(())
    }

    /// Stores an admitted workflow: its reservations, its tasks' jobs
    /// (planned, each naming its reservation) and the workflow itself.
    async fn store_workflow(
        &self,
        owner: &str,
        id: &str,
        scheduler: Scheduler,
        wf: &Workflow,
        offer: &Offer,
    ) -> Result<StoredWorkflow, ServiceError> {
        let mut tasks = Vec::new();
        for (k, (task, p)) in wf.tasks.iter().zip(&offer.plan.tasks).enumerate() {
            let r = self
                .save_reservation_of((id, format!("r{id}-{k}")), owner, p, task.cores)
                .await?;
            let mut job = task.job.clone().unwrap_or_default();
            job.reservation = Some(r.id.clone());
            // Named after its node unless its description names it, as
            // DAGMan's jobs are; a rerun keeps the name.
            job.name.get_or_insert_with(|| task.id.clone());
            let format = format_of(task.format.as_deref());
            let job_id = format!("{id}-{k}");
            self.store_new(
                owner,
                &job,
                format,
                Vec::new(),
                "{}".into(),
                Entry::Planned,
                job_id.clone(),
                Member::Task {
                    workflow: id.to_string(),
                    task: k,
                    attempt: 0,
                },
            )
            .await?;
            tasks.push(WorkflowTask {
                task: task.id.clone(),
                job: job_id,
                site: r.site,
                reservation: r.id,
                start: p.start,
                end: p.end,
                retried: 0,
                state: BrokerState::Planned,
                exit_code: None,
                moves: Vec::new(),
            });
        }
        let transfers = offer
            .plan
            .transfers
            .iter()
            .map(|x| WorkflowTransfer {
                from_task: x.from_task.clone(),
                to_task: x.to_task.clone(),
                from_site: self.site_name(x.from_site),
                to_site: self.site_name(x.to_site),
                start: x.start,
                end: x.end,
                bytes_per_s: x.bytes_per_s,
            })
            .collect();
        let stored = StoredWorkflow {
            view: WorkflowView {
                id: id.to_string(),
                owner: owner.to_string(),
                name: wf.name.clone(),
                scheduler: scheduler.name().to_string(),
                state: WorkflowState::Running,
                submitted: now(),
                deadline: wf.deadline,
                start: offer.plan.start,
                finish: offer.plan.finish,
                ended: None,
                reason: None,
                tasks,
                transfers,
                edges: Vec::new(),
                warnings: wf
                    .tasks
                    .iter()
                    .filter(|t| t.pre.is_some() || t.post.is_some())
                    .map(|t| format!("task {}: its SCRIPT PRE/POST is not run by the broker", t.id))
                    .collect(),
            },
            spec: wf.clone(),
            plan: offer.plan.clone(),
        };
        self.db.save_workflow(&stored).await?;
        Ok(stored)
    }

    async fn owned_workflow(&self, owner: &str, id: &str) -> Result<StoredWorkflow, ServiceError> {
        let w = self
            .db
            .workflow(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("workflow {id}")))?;
        if w.view.owner != owner {
            return Err(ServiceError::Forbidden(format!("workflow {id}")));
        }
        Ok(w)
    }

    /// Every job of workflow `id` (its tasks and their reruns), by id, in
    /// one query.
    pub(super) async fn jobs_of(&self, id: &str) -> Result<HashMap<String, StoredJob>, ServiceError> {
        let jobs = self.db.members_of(id).await?;
        Ok(jobs.into_iter().map(|j| (j.view.id.clone(), j)).collect())
    }

    /// What its owner is shown of `w`: its view as it is now, with the
    /// dependencies between its tasks.
    async fn shown(&self, w: StoredWorkflow) -> Result<WorkflowView, ServiceError> {
        let mut view = self.current(w.view).await?;
        view.edges = w
            .spec
            .edges
            .iter()
            .map(|e| WorkflowEdge {
                parent: e.parent.clone(),
                child: e.child.clone(),
            })
            .collect();
        Ok(view)
    }

    /// The view with each task's state as its job's is now.
    async fn current(&self, mut view: WorkflowView) -> Result<WorkflowView, ServiceError> {
        let jobs = self.jobs_of(&view.id).await?;
        for t in &mut view.tasks {
            if let Some(j) = jobs.get(&t.job) {
                t.state = j.view.state();
                t.exit_code = j.view.exit_code;
            }
        }
        Ok(view)
    }

    /// A workflow of `owner`'s, with its tasks as they are.
    pub async fn workflow(&self, owner: &str, id: &str) -> Result<WorkflowView, ServiceError> {
        let w = self.owned_workflow(owner, id).await?;
        self.shown(w).await
    }

    /// `owner`'s workflows, oldest first.
    pub async fn workflows(&self, owner: &str) -> Result<Vec<WorkflowView>, ServiceError> {
        let mut out = Vec::new();
        for w in self.db.workflows_of(owner).await? {
            out.push(self.shown(w).await?);
        }
        Ok(out)
    }

    /// Cancels a workflow: its tasks wherever they are, every reservation
    /// left and its bandwidth.
    pub async fn cancel_workflow(&self, owner: &str, id: &str) -> Result<WorkflowView, ServiceError> {
        let _course = self.workflow_lock.lock().await;
        let mut w = self.owned_workflow(owner, id).await?;
        if w.view.state == WorkflowState::Running {
            self.end_workflow(&mut w, WorkflowState::Cancelled, "cancelled by its owner".into())
                .await?;
        }
        self.shown(w).await
    }

    /// Records task reservation `id` as ended: the site gives it back with
    /// its job (it was sent release-with-job), so the site is not asked.
    async fn given_back_with_job(&self, id: &str) -> Result<(), ServiceError> {
        if let Some(mut r) = self.db.reservation(id).await? {
            let _ = r.apply(ReservationChange::Cancel);
            self.db.save_reservation(&r).await?;
        }
        Ok(())
    }

    /// Ends a workflow in `state`: what has not ended is cancelled, the
    /// reservations not used are given back and its bandwidth released.
    pub(super) async fn end_workflow(
        &self,
        w: &mut StoredWorkflow,
        state: WorkflowState,
        reason: String,
    ) -> Result<(), ServiceError> {
        let owner = w.view.owner.clone();
        let mut first_error = None;
        let jobs = self.jobs_of(&w.view.id).await?;
        for t in &w.view.tasks {
            let Some(j) = jobs.get(&t.job) else { continue };
            if !j.view.state().is_terminal() {
                match self.cancel(&owner, &t.job).await {
                    // A task's job at a site holds its reservation until its
                    // processes are gone, and the site gives it back then
                    // (it was sent release-with-job): asked now, the site
                    // would still find it in use.
                    Ok(_) if j.view.site_job.is_some() => {
                        self.given_back_with_job(&t.reservation).await?;
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            match self.cancel_reservation(&owner, &t.reservation).await {
                Ok(_) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if state != WorkflowState::Finished {
            if let Ok(mut net) = self.network.lock() {
                for x in &w.plan.transfers {
                    net.release(&x.links);
                }
            }
        }
        w.view = self.current(w.view.clone()).await?;
        w.view.state = state;
        w.view.reason = (state != WorkflowState::Finished).then_some(reason);
        w.view.ended = Some(now());
        self.db.save_workflow(w).await?;
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One round over the running workflows: the course's steps for each
    /// (`brokk_broker::workflow::course`), carried out.
    pub async fn advance_workflows(&self) -> Result<(), ServiceError> {
        let _course = self.workflow_lock.lock().await;
        // A task booked at a site being rescued waits for the rescue to
        // move it (or to end its workflow) rather than go where nothing
        // answers.
        let (rescuing, _, _) = self.broker.run(|c| c.rescuing());
        for mut w in self.db.workflows_in(WorkflowState::Running).await? {
            let jobs = self.jobs_of(&w.view.id).await?;
            // A parent's file fetched once for all the children released with it.
            let mut kept = HashMap::new();
            let mut runs = Vec::new();
            let mut changed = false;
            for t in &mut w.view.tasks {
                runs.push(run_of(t, &jobs));
                let Some(j) = jobs.get(&t.job) else {
                    continue;
                };
                if j.view.state() != t.state {
                    changed = true;
                    if j.view.state().is_terminal() {
                        self.given_back_with_job(&t.reservation).await?;
                    }
                    t.state = j.view.state();
                    t.exit_code = j.view.exit_code;
                }
            }
            if changed {
                self.db.save_workflow(&w).await?;
            }
            // The course decides (`brokk_broker::workflow::course::Course`);
            // this carries out its actions and tells it the answers.
            let mut course = Course::new(w.spec.clone(), w.plan.clone(), runs);
            let mut actions: std::collections::VecDeque<Action> = course.advance_holding(now(), &rescuing).into();
            // The owner's reservations, read once for the round's moves.
            let mut live = None;
            let mut moved = false;
            while let Some(action) = actions.pop_front() {
                match action {
                    Action::Release { task, early } => {
                        if let Some(from) = early {
                            let live = match &mut live {
                                Some(live) => live,
                                None => live.insert(self.live_of(&w.view.owner, now()).await?),
                            };
                            if let Some(start) = self.move_up(&mut w, task, live, from).await? {
                                course.moved(task, start);
                                moved = true;
                            }
                        }
                        self.release_task(&w, task, &jobs, &mut kept).await?;
                    }
                    Action::Reserve { task, request } => {
                        let granted = self.retry_task(&mut w, task, &request).await?;
                        actions.extend(course.retried(now(), task, granted));
                        w.plan = course.plan().clone();
                        self.db.save_workflow(&w).await?;
                    }
                    Action::Replan {
                        task,
                        part,
                        map,
                        transfers,
                    } => {
                        let answer = self.rescue(&mut w, task, &part, &map, &transfers).await?;
                        actions.extend(course.replanned(task, answer));
                        w.plan = course.plan().clone();
                        self.db.save_workflow(&w).await?;
                    }
                    Action::End(outcome) => {
                        w.plan = course.plan().clone();
                        let (state, reason) = match outcome {
                            Outcome::Finished => (WorkflowState::Finished, String::new()),
                            Outcome::Failed(why) => (WorkflowState::Failed, why),
                        };
                        self.end_workflow(&mut w, state, reason).await?;
                        moved = false;
                    }
                }
            }
            if moved {
                w.plan = course.plan().clone();
                self.db.save_workflow(&w).await?;
            }
        }
        Ok(())
    }

    /// Moves task `k`'s reservation to start as early as its site can
    /// between `from` and its planned start (never later, so the deadline
    /// holds) and where its owner, who holds `live`, stays within their
    /// share of the site; where the site cannot, it stays. Its new start
    /// if it moved: the caller tells the course and saves the workflow
    /// (once for all its moves).
    async fn move_up(
        &self,
        w: &mut StoredWorkflow,
        k: usize,
        live: &mut Live,
        from: Time,
    ) -> Result<Option<Time>, ServiceError> {
        let task = &w.view.tasks[k];
        let Some(mut r) = self.db.reservation(&task.reservation).await? else {
            return Ok(None);
        };
        let Some(site) = self.site(&r.site) else {
            return Ok(None);
        };
        let owner = w.view.owner.clone();
        let held = live.at_but(&r.site, &r.id);
        let (share, info, planned) = (self.limits.share(), self.info.clone(), r.clone());
        let id = brokk_core::ReservationId(r.site_reservation);
        let moved = tokio::task::spawn_blocking(move || {
            let mut c = cached_sites(std::slice::from_ref(&site), &info, None, None, &owner).remove(0);
            let capacity = c.info().map_or(0, |i| i.total_slots);
            let span = (planned.start, planned.end);
            let window = share.move_up_window(capacity, &held, planned.amount, span, from)?;
            let change = brokk_core::Change {
                amount: None,
                duration: None,
                window: Some(window),
            };
            c.modify("broker", id, change).ok()
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        let Some(start) = moved else { return Ok(None) };
        if start >= r.start {
            return Ok(None);
        }
        let length = r.end - r.start;
        r.start = start;
        r.end = start + length;
        self.db.save_reservation(&r).await?;
        live.moved(&r);
        let task = &mut w.view.tasks[k];
        (task.start, task.end) = (r.start, r.end);
        Ok(Some(start))
    }

    /// Sends task `k` on its way: its parents' outputs stored as its
    /// inputs, then the job handed to the dispatcher, which sends it into
    /// its reservation.
    /// `jobs` are the workflow's as the round read them; `kept` the parents'
    /// files this round already fetched, by (job, name).
    async fn release_task(
        &self,
        w: &StoredWorkflow,
        k: usize,
        jobs: &HashMap<String, StoredJob>,
        kept: &mut HashMap<(String, String), (String, u64)>,
    ) -> Result<(), ServiceError> {
        let t = &w.view.tasks[k];
        let Some(stored) = jobs.get(&t.job).cloned() else {
            return Ok(());
        };
        let mut job: Job = serde_json::from_str(&stored.spec).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        // The last parent that makes a name is the one its file comes from.
        let parents: Vec<(usize, BTreeSet<String>)> = w
            .spec
            .edges
            .iter()
            .filter(|e| e.child == w.spec.tasks[k].id)
            .filter_map(|e| w.spec.task(&e.parent))
            .filter_map(|p| Some((p, made_by(w.spec.tasks[p].job.as_ref()?))))
            .collect();
        for f in job.input_files.iter_mut().filter(|f| f.source.is_none()) {
            let Some(&(p, _)) = parents.iter().rev().find(|(_, made)| made.contains(&f.name)) else {
                continue;
            };
            let parent = jobs
                .get(&w.view.tasks[p].job)
                .ok_or_else(|| ServiceError::Unavailable("a parent's job is missing".into()))?;
            let key = (parent.view.id.clone(), f.name.clone());
            let (sha, size) = match kept.get(&key) {
                Some(got) => got.clone(),
                None => {
                    let got = self.keep_output(&parent.view, &f.name).await?;
                    kept.insert(key, got.clone());
                    got
                }
            };
            f.source = Some(format!("{}{sha}", brokk_site::uploads::SCHEME));
            f.size = Some(size);
        }
        let spec = serde_json::to_string(&job).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        self.db.set_spec(&t.job, &spec).await?;
        let prefs: JobPreferences = serde_json::from_str(&stored.prefs).unwrap_or_default();
        // The core's from now on: it sends the task into its reservation.
        self.broker
            .ready(stored.view, job, prefs, "its parents ended".into())?
            .wait()
            .await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Fetches the output `name` of the ended job `v` from its site into
    /// its owner's uploads; returns the digest and the size.
    async fn keep_output(&self, v: &BrokerJob, name: &str) -> Result<(String, u64), ServiceError> {
        let (Some(site), Some(handle)) = (v.site.as_deref().and_then(|s| self.site(s)), v.site_job.clone()) else {
            return Err(ServiceError::Unavailable(format!(
                "job {} has no site to fetch {name} from",
                v.id
            )));
        };
        let (uploads, owner, name) = (self.uploads.clone(), v.owner.clone(), name.to_string());
        tokio::task::spawn_blocking(move || {
            let body = site
                .client
                .file(&JobHandle(handle), &name, None)
                .map_err(|e| ServiceError::Unavailable(format!("fetching {name} from {}: {e}", site.name)))?;
            uploads
                .keep(&owner, body)
                .map_err(|e| ServiceError::Unavailable(format!("storing {name}: {e}")))
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?
    }

    /// Reserves `request` for a retry of task `k` at the site that can
    /// start it first, within its owner's share, and puts the task's new
    /// job into it; the reservation (site, id, start), or `None` when no
    /// site has room for it in time.
    async fn retry_task(
        &self,
        w: &mut StoredWorkflow,
        k: usize,
        request: &brokk_core::Request,
    ) -> Result<Option<(usize, brokk_core::ReservationId, Time)>, ServiceError> {
        let turn = self.decision_turn().await;
        let (sites, info) = (self.sites(), self.info.clone());
        let user = w.view.owner.clone();
        let live = self.live_of(&user, now()).await?;
        let held: Vec<Vec<Span>> = sites.iter().map(|s| live.at(&s.name)).collect();
        let share = self.limits.share();
        let asked = *request;
        let got = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            let mut views = within_share(&mut clients, share, held);
            let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|c| c as &mut dyn Site).collect();
            at_earliest(&asked, &mut refs, "broker")
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        let Ok((site, reservation, start)) = got else {
            return Ok(None);
        };
        let p = TaskPlan {
            task: w.view.tasks[k].task.clone(),
            site,
            start,
            end: start + request.duration,
            reservation,
        };
        self.place_task(w, k, &p, request.amount, true, Entry::Accepted).await?;
        self.wake.notify_one();
        Ok(Some((site, reservation, start)))
    }

    /// The name of site `k` of the configuration.
    pub(super) fn site_name(&self, k: usize) -> String {
        self.sites().get(k).map_or_else(String::new, |s| s.name.clone())
    }

    /// Records the reservation a task of `workflow` holds at its site as
    /// one of `owner`'s broker reservations, under `id`.
    async fn save_reservation_of(
        &self,
        (workflow, id): (&str, String),
        owner: &str,
        p: &TaskPlan,
        cores: u32,
    ) -> Result<BrokerReservation, ServiceError> {
        let site = self.site_name(p.site);
        let mut r = BrokerReservation::new(id, owner.to_string(), site, p.reservation.0, cores, p.start, p.end);
        r.workflow = Some(workflow.to_string());
        self.db.save_reservation(&r).await?;
        Ok(r)
    }

    /// Puts task `k` into the reservation `p` made for it (recorded as one
    /// of the owner's), under a new job when it runs again (`rerun`, its
    /// retries counted) or else its own, in `state`. The plan is the
    /// course's to change.
    pub(super) async fn place_task(
        &self,
        w: &mut StoredWorkflow,
        k: usize,
        p: &TaskPlan,
        cores: u32,
        rerun: bool,
        entry: Entry,
    ) -> Result<(), ServiceError> {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
        let owner = w.view.owner.clone();
        let r = self
            .save_reservation_of((&w.view.id, format!("r{}-{k}.{suffix}", w.view.id)), &owner, p, cores)
            .await?;
        let task = &mut w.view.tasks[k];
        let old = self
            .db
            .get(&task.job)
            .await?
            .ok_or_else(|| ServiceError::Unavailable(format!("job {} is missing", task.job)))?;
        let mut job: Job = serde_json::from_str(&old.spec).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        job.reservation = Some(r.id.clone());
        if rerun {
            task.retried += 1;
            task.job = format!("{}-{k}.{}", w.view.id, task.retried);
            let format = format_of(Some(&old.view.format));
            self.store_new(
                &w.view.owner,
                &job,
                format,
                Vec::new(),
                "{}".into(),
                entry,
                task.job.clone(),
                Member::Task {
                    workflow: w.view.id.clone(),
                    task: k,
                    attempt: task.retried,
                },
            )
            .await?;
        } else {
            let spec = serde_json::to_string(&job).map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            self.db.set_spec(&task.job, &spec).await?;
        }
        task.site = r.site;
        task.reservation = r.id;
        (task.start, task.end) = (p.start, p.end);
        task.state = entry.state();
        task.exit_code = None;
        Ok(())
    }

    /// Plans the rest of a workflow again after task `failed` failed with
    /// no room left for its retry before its children (the course's
    /// [`Action::Replan`]): the rest's reservations (tasks `map`) and the
    /// bandwidth of `transfers` given back, then `part` admitted anew
    /// against the deadline, committed and its tasks put into their new
    /// reservations; the new plan, or why there is none.
    async fn rescue(
        &self,
        w: &mut StoredWorkflow,
        failed: usize,
        part: &Workflow,
        map: &[usize],
        transfers: &[brokk_broker::workflow::TransferPlan],
    ) -> Result<Result<brokk_broker::workflow::Plan, Unplanned>, ServiceError> {
        let owner = w.view.owner.clone();
        for &k in map {
            match self.cancel_reservation(&owner, &w.view.tasks[k].reservation).await {
                Ok(_) | Err(ServiceError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if let Ok(mut net) = self.network.lock() {
            for x in transfers {
                net.release(&x.links);
            }
        }
        let scheduler = w.view.scheduler.parse::<Scheduler>().unwrap_or(Scheduler::HeftSync);
        let key = format!(
            "{}-rescue-{}",
            w.view.id,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let holds = self.start_holds(&key, &owner)?;
        let offer = match self
            .admit_over_sites(&owner, part, scheduler, now(), holds.clone())
            .await?
        {
            Ok(offer) => offer,
            Err(r) => return Ok(Err(Unplanned::NoFit(r.to_string()))),
        };
        if let Err(e) = self.settle_offer(&owner, offer.clone(), true).await? {
            return Ok(Err(Unplanned::NotCommitted(e.to_string())));
        }
        for (p, &k) in offer.plan.tasks.iter().zip(map) {
            let cores = w.spec.tasks[k].cores;
            self.place_task(w, k, p, cores, k == failed, Entry::Planned).await?;
        }
        Ok(Ok(offer.plan))
    }

    /// After a restart: the bandwidth of the running workflows booked again
    /// on the network, as it was.
    pub async fn restore_network(&self) -> Result<(), ServiceError> {
        let running = self.db.workflows_in(WorkflowState::Running).await?;
        let mut net = self
            .network
            .lock()
            .map_err(|_| ServiceError::Unavailable("the network's lock".into()))?;
        for w in running {
            for x in &w.plan.transfers {
                if !net.restore("broker", x) {
                    tracing::warn!(
                        "workflow {}: the transfer {} -> {} no longer fits",
                        w.view.id,
                        x.from_task,
                        x.to_task
                    );
                }
            }
        }
        Ok(())
    }
}

/// The sites as their owner may use them within `share` ([`Within`]),
/// holding `held` at each.
pub(super) fn within_share(
    clients: &mut [super::sites::CachedSite],
    share: Share,
    held: Vec<Vec<Span>>,
) -> Vec<Within<'_>> {
    clients
        .iter_mut()
        .zip(held)
        .map(|(c, held)| {
            let capacity = c.info().map_or(0, |i| i.total_slots);
            let name = c.name().to_string();
            Within::new(c as &mut dyn Site, &name, share, capacity, held)
        })
        .collect()
}
