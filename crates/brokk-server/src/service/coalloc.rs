//! Co-allocation: the broker's search and two-phase placement driven over
//! the sites, and the settling of co-allocations a stop interrupted.

use super::*;

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
            let waiting_in = sites[*site]
                .client
                .job(&handle)
                .ok()
                .filter(|v| !v.state.is_terminal())
                .and_then(|v| v.reservation)
                .map(brokk_core::ReservationId);
            Some(Found {
                site: *site,
                job: handle,
                waiting_in,
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
            let (mut job, format, warnings) = self
                .parsing
                .run(owner, move || Self::one_job(&description, format.as_deref()))
                .await??;
            // Co-allocated jobs take no uploads: a local input is refused, not lost.
            self.take_uploads(owner, &mut job, &Default::default(), &Default::default())?;
            parsed.push((job, format, warnings));
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
        let sites = self.sites();
        let turn = self.decision_turn().await;
        let info = self.info.clone();
        let jobs: Vec<Job> = parsed.iter().map(|p| p.0.clone()).collect();
        let keys: Vec<String> = stored.iter().map(|v| v.id.clone()).collect();
        let (earliest, latest, delta) = (req.earliest, req.latest, req.delta);
        let user = owner.to_string();
        let outcome = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            let infos: Vec<Option<ResourceInfo>> = clients.iter().map(|c| c.info().ok()).collect();
            // Holds until every part is submitted: a broker that stops
            // mid-way leaves nothing booked once they lapse.
            let co = CoRequest::of(&jobs, &infos, (earliest, latest), delta, Some(now() + COALLOC_HOLD));
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            let plan = coallocate(&co, &mut refs, "broker")
                .map_err(|_| ServiceError::BadRequest("no co-allocation fits the window on these sites".into()))?;
            let handles = place(&plan, &jobs, &keys, &mut refs, "broker")
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            Ok::<_, ServiceError>(
                plan.assignments
                    .iter()
                    .zip(handles)
                    .map(|(&(site, _, start), h)| (sites[site].name.clone(), h.0, start))
                    .collect::<Vec<_>>(),
            )
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        match outcome {
            Ok(placed) => {
                let mut out = Coallocated {
                    ids: Vec::new(),
                    sites: Vec::new(),
                    starts: Vec::new(),
                };
                for (mut v, (site, handle, start)) in stored.into_iter().zip(placed) {
                    let detail = format!("to {site}, co-allocated to start at {start}");
                    let sent = Change::Dispatch {
                        site: site.clone(),
                        site_job: handle,
                        tts: None,
                        ttd: None,
                    };
                    self.change(&mut v, sent, now(), Some(detail)).await?;
                    out.ids.push(v.id);
                    out.sites.push(site);
                    out.starts.push(start);
                }
                Ok(out)
            }
            Err(e) => {
                for mut v in stored {
                    self.change(&mut v, Change::Fail(e.to_string()), now(), Some(e.to_string()))
                        .await?;
                }
                Err(e)
            }
        }
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
        for (_, parts) in groups {
            let mut found = Vec::new();
            for p in &parts {
                found.push(self.already_at(&p.view.id).await?);
            }
            let targets: Vec<Option<(usize, String)>> = found
                .iter()
                .map(|f| {
                    let (name, job) = f.as_ref()?;
                    Some((self.sites().iter().position(|s| &s.name == name)?, job.clone()))
                })
                .collect();
            let (sites, info) = (self.sites(), self.info.clone());
            let completed = tokio::task::spawn_blocking(move || settle(&sites, &info, &targets))
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            for (p, f) in parts.into_iter().zip(found) {
                let mut v = p.view;
                let id = v.id.clone();
                match (completed, f) {
                    (true, Some((site, site_job))) => {
                        let detail = format!("to {site}, co-allocated (completed after a restart)");
                        let found = Change::Dispatch {
                            site,
                            site_job,
                            tts: None,
                            ttd: None,
                        };
                        self.change(&mut v, found, now(), Some(detail)).await?;
                    }
                    _ => {
                        let why = "the broker stopped while co-allocating it; no part of it runs";
                        self.change(&mut v, Change::Fail(why.into()), now(), Some(why.into()))
                            .await?;
                    }
                }
                self.looked_for(&id);
            }
        }
        Ok(())
    }
}
