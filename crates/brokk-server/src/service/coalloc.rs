//! Co-allocation: the parts stored and handed to the broker core, which
//! asks for the search and two-phase placement over the sites
//! ([`brokk_broker::coalloc::search`], carried out here) and records where
//! each part went; and the settling of co-allocations a stop interrupted.

use brokk_broker::broker::{CoAnswer, CoSearch, Effect};
use brokk_broker::coalloc::{SearchError, Standing};
use brokk_broker::jobs::BrokerJob;

use super::*;

/// Where each part of a co-allocation went (the core's site position,
/// the site's id, its start), or why none runs.
pub(super) type CoPlaced = Result<Vec<(usize, String, Time)>, ServiceError>;

/// Settles a co-allocation a stop interrupted, given where each part is
/// (site and its job there, `None` for a part that never got there): the
/// broker's rule ([`brokk_broker::coalloc::settle`]) on what the sites say
/// of each part now. Returns whether the co-allocation completed.
pub(super) fn settle(sites: &[SiteEntry], info: &Arc<SiteInfo>, parts: &[Option<(usize, String)>]) -> bool {
    let found: Vec<Option<Found>> = parts
        .iter()
        .map(|p| {
            let (site, job) = p.as_ref()?;
            let handle = JobHandle(job.clone());
            let view = sites[*site].client.job(&handle).ok();
            let standing = match view {
                Some(v) if !v.state.is_terminal() => v
                    .reservation
                    .map_or(Standing::Gone, |r| Standing::Waiting(brokk_core::ReservationId(r))),
                Some(v) if v.started.is_some() => Standing::Ran,
                _ => Standing::Gone,
            };
            Some(Found {
                site: *site,
                job: handle,
                standing,
            })
        })
        .collect();
    let mut clients = cached_sites(sites, info, None, None, "broker");
    let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
    brokk_broker::coalloc::settle(&found, &mut refs, "broker")
}

/// How long a co-allocation's reservations are held before its jobs claim
/// them: the search and the submissions must finish within it.
pub(super) const COALLOC_HOLD: brokk_model::Duration = brokk_model::Duration(300);

impl Service {
    /// Co-allocates jobs that must start together ([ET-interop]'s Algorithms 1
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
            let (description, format) = (j.description.clone(), j.format.clone());
            let part = self
                .parsing
                .run(owner, move || Self::one_job(&description, format.as_deref()))
                .await??;
            parsed.push(part);
        }
        self.coallocate_parts(owner, parsed, (req.earliest, req.latest), req.delta)
            .await
    }

    /// Co-allocates `parsed` jobs (each with its language and warnings),
    /// read and validated, for a common start within `delta` inside
    /// `window`: the part of [`Service::coallocate`] after the reading,
    /// which a Slurm heterogeneous job submitted alone takes too.
    pub(super) async fn coallocate_parts(
        &self,
        owner: &str,
        mut parsed: Vec<(Job, Format, Vec<String>)>,
        window: (Time, Time),
        delta: brokk_model::Duration,
    ) -> Result<Coallocated, ServiceError> {
        for (job, ..) in &mut parsed {
            // A part starts in the reservation the co-allocation makes for
            // it, when its partners start.
            if job.reservation.is_some() || job.hold {
                return Err(ServiceError::BadRequest(
                    "a co-allocated job runs in the reservation the co-allocation makes, when its partners \
                     start: remove its own reservation or hold"
                        .into(),
                ));
            }
            // Co-allocated jobs take no uploads: a local input is refused, not lost.
            self.take_uploads(owner, job, &Default::default(), &Default::default())?;
        }
        // A part no site could ever run (each runs at one site) is refused
        // now with each site's reason, before anything is stored.
        let nowhere = self.broker.read(|c| {
            let mut parts = parsed.iter().enumerate();
            parts.find_map(|(k, (job, ..))| c.runs_nowhere(job).map(|why| format!("part {k}: {why}")))
        });
        if let Some(why) = nowhere {
            return Err(ServiceError::BadRequest(why));
        }
        // Durable before anything is reserved, in a state of their own that
        // the ordinary dispatcher never takes.
        let group = format!("c{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let mut stored = Vec::new();
        for (k, (job, format, warnings)) in parsed.iter_mut().enumerate() {
            let id = format!("{group}-{k}");
            let ids = brokk_jdl::assign::Ids {
                job: &id,
                submission: &group,
                index: k,
                user: owner,
            };
            brokk_jdl::assign::assign(*format, job, ids);
            let v = self
                .store_new(
                    owner,
                    job,
                    *format,
                    warnings.clone(),
                    "{}".into(),
                    Entry::Reserving,
                    id,
                    Member::Part {
                        coallocation: group.clone(),
                        index: k,
                    },
                )
                .await?;
            stored.push(v);
        }
        // The core's from now on: it asks for the search, and records
        // where each part went or why none runs.
        let search = CoSearch {
            window,
            delta,
            hold: now() + COALLOC_HOLD,
        };
        let ids: Vec<String> = stored.iter().map(|v| v.id.clone()).collect();
        let parts: Vec<(BrokerJob, Job)> = stored.into_iter().zip(parsed.into_iter().map(|p| p.0)).collect();
        let turn = self.decision_turn().await;
        self.broker.claim(&ids, true);
        let (_, effects, stored) = self.broker.run(|c| c.coallocate(&group, parts, Some(search)));
        stored.wait().await?;
        let mut outcome = None;
        for e in effects {
            match e {
                Effect::CoAllocate {
                    group,
                    owner,
                    parts,
                    search,
                } => {
                    let (found, more) = self.coallocation(&group, &owner, &parts, search).await?;
                    self.carry_out(more).await?;
                    outcome = Some(found);
                }
                other => self.carry_out(vec![other]).await?,
            }
        }
        drop(turn);
        let placed = outcome.unwrap_or_else(|| {
            Err(ServiceError::Unavailable(
                "the co-allocation was not searched for".into(),
            ))
        })?;
        let names: Vec<String> = placed.iter().map(|p| self.site_name_of(p.0)).collect();
        Ok(Coallocated {
            ids,
            sites: names,
            starts: placed.into_iter().map(|p| p.2).collect(),
        })
    }

    /// Carries out the core's [`Effect::CoAllocate`]: the search over the
    /// sites and the placement of every part into its hold
    /// ([`brokk_broker::coalloc::search`]), told to the core. Returns where
    /// each part went (the core's site position, the site's id, its start)
    /// or why none runs, and what the core asks next.
    pub(super) async fn coallocation(
        &self,
        group: &str,
        owner: &str,
        parts: &[String],
        search: CoSearch,
    ) -> Result<(CoPlaced, Vec<Effect>), ServiceError> {
        let jobs: Vec<Job> = self
            .broker
            .read(|c| parts.iter().filter_map(|id| c.outgoing(id, None)).collect());
        let found = if jobs.len() < parts.len() {
            Err(ServiceError::Unavailable("a part of the co-allocation is gone".into()))
        } else {
            let (sites, info) = (self.sites(), self.info.clone());
            let (user, keys) = (owner.to_string(), parts.to_vec());
            let found = tokio::task::spawn_blocking(move || {
                let mut clients = cached_sites(&sites, &info, None, None, &user);
                let infos: Vec<Option<ResourceInfo>> = clients.iter().map(|c| c.info().ok()).collect();
                let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
                brokk_broker::coalloc::search(&jobs, &keys, &infos, search, &mut refs, "broker")
                    .map(|placed| {
                        placed
                            .into_iter()
                            .map(|(k, job, start)| (sites[k].name.clone(), job, start))
                            .collect::<Vec<_>>()
                    })
                    .map_err(|e| match e {
                        // The sites' schedules leave no common start: a
                        // refusal, as a reservation no site can give is.
                        SearchError::NoFit | SearchError::NeverTogether(_) => ServiceError::Conflict(e.to_string()),
                        SearchError::Place(e) => ServiceError::Unavailable(e.to_string()),
                    })
            })
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            // Sites by the core's positions.
            found.map(|placed| {
                self.broker.read(|c| {
                    placed
                        .into_iter()
                        .map(|(name, job, start)| (c.site_position(&name).unwrap_or(usize::MAX), job, start))
                        .collect::<Vec<_>>()
                })
            })
        };
        let answer = match &found {
            Ok(placed) => CoAnswer::Placed(placed.clone()),
            Err(e) => CoAnswer::Failed(e.to_string()),
        };
        let (_, more, stored) = self.broker.run(|c| c.coallocated(now(), group, answer));
        stored.wait().await?;
        Ok((found, more))
    }

    /// After a restart: co-allocations caught half-way are settled. One whose
    /// parts had all reached their sites, none of them ended, is completed
    /// (its remaining holds committed) and its parts recorded as dispatched;
    /// any other is undone: the parts found are cancelled where they are and
    /// the jobs fail with the reason (their holds lapse at the sites).
    pub async fn recover_coallocations(&self) -> Result<(), ServiceError> {
        let mut groups: std::collections::BTreeMap<String, Vec<StoredJob>> = Default::default();
        for stored in self.db.in_states(&[BrokerState::Reserving]).await? {
            // This process's own are in progress.
            if self.inherited(&stored.view.id) {
                let g = stored.view.member.coallocation().unwrap_or(&stored.view.id).to_string();
                groups.entry(g).or_default().push(stored);
            }
        }
        for (g, parts) in groups {
            let mut found = Vec::new();
            for p in &parts {
                found.push(self.already_at(&p.view.id).await?);
            }
            let targets: Vec<Option<(usize, String)>> = found
                .iter()
                .map(|f| {
                    let (name, job) = f.as_ref()?;
                    Some((self.sites().iter().position(|s| &s.name == name)?, job.id.clone()))
                })
                .collect();
            let (sites, info) = (self.sites(), self.info.clone());
            let completed = tokio::task::spawn_blocking(move || settle(&sites, &info, &targets))
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            let ids: Vec<String> = parts.iter().map(|p| p.view.id.clone()).collect();
            let held: Vec<(BrokerJob, Job)> = parts
                .into_iter()
                .map(|p| (p.view, serde_json::from_str(&p.spec).unwrap_or_default()))
                .collect();
            self.broker.claim(&ids, true);
            let (_, more, stored) = self.broker.run(|c| {
                let answer = match found.into_iter().collect::<Option<Vec<_>>>() {
                    Some(all) if completed => CoAnswer::Completed(
                        all.into_iter()
                            .map(|(name, job)| (c.site_position(&name).unwrap_or(usize::MAX), job.id))
                            .collect(),
                    ),
                    _ => {
                        CoAnswer::Failed("the broker stopped while co-allocating it; it was undone at its sites".into())
                    }
                };
                c.coallocate(&g, held, None);
                c.coallocated(now(), &g, answer);
            });
            self.carry_out(more).await?;
            stored.wait().await?;
            for id in &ids {
                self.looked_for(id);
            }
        }
        Ok(())
    }
}
