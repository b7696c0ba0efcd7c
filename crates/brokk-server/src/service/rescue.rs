//! The rescue of workflow tasks booked at a site that stops answering, or
//! that lost a part (a node down or drained) and can no longer hold some
//! reservations ([VRM] 6). The core finds the site down and keeps its rescue
//! (`brokk_broker::rescue::Failure`, stepped as the strategy says); each
//! step this carries out: it gathers the tasks the courses say may move
//! (`Course::movable`), lets the rule choose which the horizon reaches,
//! reserves each at the site that starts it first within its slack and
//! its owner's share, and gives the old reservation back. A reservation
//! of a user's own (or of a broker above) at that site moves too, to
//! another site at the same time, keeping its id, so the jobs that claim
//! it go where it is.

use std::collections::{HashMap, HashSet};

use brokk_broker::rescue::{booked_load, fenced, Booked, NEVER};
use brokk_broker::reserve::at_earliest;
use brokk_broker::share::Span;
use brokk_broker::workflow::course::{Course, Movable};
use brokk_broker::workflow::TaskPlan;
use brokk_proto::wire::{TaskMove, WorkflowState};

use super::workflows::{run_of, within_share};
use super::*;

/// What a rescue step may move: a workflow's task (the workflow's index
/// in the round and where the course says it may go), or a reservation
/// that belongs to no workflow.
enum Moving {
    Task(usize, Movable),
    Reserved(BrokerReservation),
}

impl Service {
    /// One step of every rescue due: the tasks of running workflows booked
    /// at a site that does not answer, or that can no longer hold their
    /// reservations (part of it lost), moved as far as the horizon reaches.
    pub async fn rescue_round(&self) -> Result<(), ServiceError> {
        let t = now();
        let (due, _, _) = self.broker.run(|c| c.rescues_due(t));
        if due.is_empty() {
            return Ok(());
        }
        let _course = self.workflow_lock.lock().await;
        let mut running = self.db.workflows_in(WorkflowState::Running).await?;
        let mut courses = Vec::with_capacity(running.len());
        for w in &running {
            let jobs = self.jobs_of(&w.view.id).await?;
            let runs = w.view.tasks.iter().map(|task| run_of(task, &jobs)).collect();
            courses.push(Course::new(w.spec.clone(), w.plan.clone(), runs));
        }
        let (infos, _, _) = self.broker.run(|c| c.information().to_vec());
        // Workflows this round ended.
        let mut over = vec![false; running.len()];
        for (site, failure) in due {
            let name = self.site_name(site);
            // A site that lost a part says which of the broker's
            // reservations it can no longer hold: only those move.
            let endangered: Option<HashSet<u64>> = match (failure.is_partial(), self.site(&name)) {
                (false, _) => None,
                (true, Some(s)) => {
                    let client = s.client.clone();
                    match tokio::task::spawn_blocking(move || client.endangered("broker")).await {
                        Ok(Ok(ids)) => Some(ids.into_iter().map(|r| r.0).collect()),
                        Ok(Err(e)) => {
                            tracing::warn!(site = %name, "which reservations it can no longer hold: {e}");
                            continue;
                        }
                        Err(e) => return Err(ServiceError::Unavailable(e.to_string())),
                    }
                }
                (true, None) => continue,
            };
            let reached = |r: u64| endangered.as_ref().is_none_or(|e| e.contains(&r));
            let why = match failure.is_partial() {
                false => format!("{name} has not answered since {}", failure.since()),
                true => format!(
                    "{name} can no longer hold its reservation (part of it lost, a node down or drained, since {})",
                    failure.since()
                ),
            };
            // What is due there and cannot move ends its workflow, with why.
            for (i, c) in courses.iter().enumerate() {
                let stuck = c.stranded(site, t);
                let Some(&k) = stuck
                    .iter()
                    .find(|&&k| reached(c.plan().tasks[k].reservation.0))
                    .filter(|_| !over[i])
                else {
                    continue;
                };
                let w = &mut running[i];
                let cause = match failure.is_partial() {
                    false => format!("which has not answered since {}", failure.since()),
                    true => format!(
                        "which can no longer hold it (part of it lost since {})",
                        failure.since()
                    ),
                };
                let reason = format!(
                    "task {} is booked at {name}, {cause}, and no other site has room for it in time",
                    w.spec.tasks[k].id
                );
                tracing::warn!(workflow = %w.view.id, "{reason}");
                self.end_workflow(w, WorkflowState::Failed, reason).await?;
                over[i] = true;
            }
            let mut moving: Vec<Moving> = courses
                .iter()
                .enumerate()
                .filter(|(i, _)| !over[*i])
                .flat_map(|(i, c)| {
                    c.movable(site, t)
                        .into_iter()
                        .filter(|m| reached(c.plan().tasks[m.task].reservation.0))
                        .map(move |m| Moving::Task(i, m))
                })
                .collect();
            moving.extend(
                self.db
                    .reservations_at(&name, t)
                    .await?
                    .into_iter()
                    .filter(|r| reached(r.site_reservation))
                    .map(Moving::Reserved),
            );
            let sites = self.sites();
            // For each: its owner, what it asks of another site (a
            // reservation the very span it holds), and its span.
            let asks: Vec<(String, brokk_core::Request, Time, Time)> = moving
                .iter()
                .map(|m| match m {
                    Moving::Task(i, m) => (running[*i].view.owner.clone(), m.request, m.start, m.end),
                    Moving::Reserved(r) => (r.owner.clone(), r.elsewhere(), r.start, r.end),
                })
                .collect();
            // Each owner's reservations, read once for the step.
            let mut held: HashMap<String, Vec<Vec<Span>>> = HashMap::new();
            for (owner, ..) in &asks {
                if !held.contains_key(owner) {
                    let live = self.live_of(owner, t).await?;
                    held.insert(owner.clone(), sites.iter().map(|s| live.at(&s.name)).collect());
                }
            }
            let booked: Vec<Booked> = asks
                .iter()
                .enumerate()
                .map(|(id, &(_, _, start, end))| Booked {
                    id: id as u64,
                    start,
                    end,
                })
                .collect();
            // The grid's load as the sites publish it; a live broker keeps
            // no average of its bookings, so the load-based horizon reads
            // what is booked alone.
            let published: Vec<(brokk_model::Availability, u32)> = infos
                .iter()
                .filter_map(|i| i.availability.clone().map(|a| (a, i.total_slots)))
                .collect();
            let (info, share) = (self.info.clone(), self.limits.share());
            let turn = self.decision_turn().await;
            let (failure, grants) = tokio::task::spawn_blocking(move || {
                let mut failure = failure;
                let (every, ahead) = (failure.every(), failure.steps_ahead());
                let load = || {
                    let refs: Vec<(&brokk_model::Availability, u32)> = published.iter().map(|(a, c)| (a, *c)).collect();
                    booked_load(t, every, ahead, &refs)
                };
                let mut grants = Vec::new();
                failure.step(t, &booked, load, |b| {
                    let (owner, request, ..) = &asks[b.id as usize];
                    let mut clients = cached_sites(&sites, &info, None, None, owner);
                    let mut views = within_share(&mut clients, share, held.get(owner).cloned().unwrap_or_default());
                    let mut fence = None;
                    // Never back to the site that is down.
                    let mut refs = fenced(&mut views, site, NEVER, &mut fence);
                    match at_earliest(request, &mut refs, "broker") {
                        Ok(granted) => {
                            grants.push((b.id as usize, granted));
                            true
                        }
                        Err(_) => false,
                    }
                });
                (failure, grants)
            })
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            drop(turn);
            self.broker.run(|c| c.rescued(site, failure));
            for (id, (to, reservation, start)) in grants {
                let (i, m) = match &moving[id] {
                    Moving::Task(i, m) => (i, m),
                    Moving::Reserved(r) => {
                        self.moved_reservation(r, &name, to, reservation).await?;
                        continue;
                    }
                };
                let w = &mut running[*i];
                let k = m.task;
                let old = w.view.tasks[k].reservation.clone();
                let p = TaskPlan {
                    task: w.view.tasks[k].task.clone(),
                    site: to,
                    start,
                    end: start + (m.end - m.start),
                    reservation,
                };
                let cores = w.spec.tasks[k].cores;
                self.place_task(w, k, &p, cores, false, Entry::Planned).await?;
                courses[*i].relocated(k, to, reservation, start);
                w.plan = courses[*i].plan().clone();
                let to_name = self.site_name(to);
                // In its job's history too, for `brokk status` and the dashboard.
                if let Some(j) = self.db.get(&w.view.tasks[k].job).await? {
                    let line = format!("its reservation moved from {name} to {to_name}, starting {start}: {why}");
                    self.db.update(&j.view, Some((t, Some(line)))).await?;
                }
                w.view.tasks[k].moves.push(TaskMove {
                    at: t,
                    from: name.clone(),
                    to: to_name.clone(),
                    why: why.clone(),
                });
                self.let_go(&w.view.owner, &old).await?;
                self.db.save_workflow(w).await?;
                tracing::info!(workflow = %w.view.id, task = %p.task, from = %name, to = %to_name, start = %start, "task moved off its site: {why}");
            }
        }
        Ok(())
    }

    /// Reservation `r`, at site `from` that does not answer or cannot hold
    /// it, now held at site `to` as `reservation` for the same span: the
    /// same id, so the jobs that claim it go there; the old one given back
    /// if the site can be told.
    async fn moved_reservation(
        &self,
        r: &BrokerReservation,
        from: &str,
        to: usize,
        reservation: brokk_core::ReservationId,
    ) -> Result<(), ServiceError> {
        let mut moved = r.clone();
        moved.site = self.site_name(to);
        moved.site_reservation = reservation.0;
        self.db.save_reservation(&moved).await?;
        tracing::info!(reservation = %r.id, owner = %r.owner, from = %from, to = %moved.site, "reservation moved to another site");
        if let Some(old) = self.site(from) {
            let sid = brokk_core::ReservationId(r.site_reservation);
            let _ = tokio::task::spawn_blocking(move || old.client.clone().cancel("broker", sid)).await;
        }
        Ok(())
    }

    /// Gives back reservation `id` of `owner`'s at a site that may not
    /// answer: cancelled there if it does, else recorded as given back
    /// here (the site lets it lapse at its end).
    async fn let_go(&self, owner: &str, id: &str) -> Result<(), ServiceError> {
        match self.cancel_reservation(owner, id).await {
            Ok(_) | Err(ServiceError::NotFound(_)) => Ok(()),
            Err(e) => {
                tracing::warn!(reservation = %id, "giving back a reservation at a site that does not answer: {e}");
                if let Some(mut r) = self.db.reservation(id).await? {
                    let _ = r.apply(ReservationChange::Cancel);
                    self.db.save_reservation(&r).await?;
                }
                Ok(())
            }
        }
    }
}
