//! The broker as a site of a broker above it ([VRM] 2.4, hierarchical
//! domains): an identity the configuration names in `delegates` calls the
//! site API under `/site/v1`, as a broker calls a site agent. Its jobs are
//! this broker's jobs owned by that identity and run for the user it names
//! (`On-Behalf-Of`), dispatched to this broker's sites like any other; the
//! change feed it follows numbers their writes ([`Db::changes`]).
//!
//! What it publishes is its sites' information folded into one site: the
//! largest site's slots (a job runs at one site, so that bounds what one job
//! may ask), the most free at one site, every site's running and waiting
//! jobs, the shortest wait and each benchmark's best value. Probes ask every
//! site and keep the soonest candidates; a reservation is made (held when
//! asked) at the site where it starts earliest, under an id of this
//! broker's, and commits, changes and cancels go to that site; a job that
//! claims one is the core's as any other, which sends it there on the terms
//! it came with ([`ClaimTerms`]).

use brokk_broker::jobs::ClaimTerms;
use brokk_broker::reserve::{as_one_site, at_earliest_held, soonest};
use brokk_broker::SiteError;
use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{Duration, JobPhase};
use brokk_proto::wire::{ChangeFeed, InfoView, JobView, ReservationRequest, ReservationView};

use super::*;

/// The most changes one feed read returns.
const FEED_PAGE: i64 = 1000;

/// A site's refusal as this broker's.
fn site_failure(site: &str, e: SiteError) -> ServiceError {
    match e {
        SiteError::Unknown => ServiceError::NotFound(format!("the reservation at {site}")),
        SiteError::Unavailable(m) => ServiceError::Unavailable(m),
        e => ServiceError::Conflict(format!("{site}: {e}")),
    }
}

/// Reservation `r` as its `site` has it, under this broker's `id` and
/// owner `who`.
async fn view_at(who: &str, id: u64, r: &BrokerReservation, site: SiteEntry) -> Result<ReservationView, ServiceError> {
    let sid = ReservationId(r.site_reservation);
    let v = tokio::task::spawn_blocking(move || site.client.reservation(sid))
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?
        .map_err(|e| site_failure(&r.site, e))?;
    Ok(ReservationView {
        id,
        owner: who.to_string(),
        ..v
    })
}

/// A new reservation id, as the site API numbers them (within JSON's exact
/// integers).
fn new_reservation_number() -> u64 {
    (uuid::Uuid::new_v4().as_u128() as u64 & ((1 << 53) - 1)).max(1)
}

/// Where a job is, as a site agent names it.
fn phase_of(s: BrokerState) -> JobPhase {
    match s {
        BrokerState::Accepted | BrokerState::Planned | BrokerState::Reserving => JobPhase::Accepted,
        BrokerState::Held => JobPhase::Held,
        BrokerState::Moving | BrokerState::Dispatched => JobPhase::Queued,
        BrokerState::Running => JobPhase::Running,
        BrokerState::Finished => JobPhase::Finished,
        BrokerState::Failed => JobPhase::Failed,
        BrokerState::Cancelled => JobPhase::Cancelled,
    }
}

/// A job as the site API shows it.
fn job_view(v: &BrokerJob) -> JobView {
    JobView {
        id: v.id.clone(),
        owner: v.owner.clone(),
        state: phase_of(v.state()),
        reason: v.reason.clone(),
        exit_code: v.exit_code,
        reservation: None,
        planned_start: v.predicted_tts.map(|s| v.submitted + Duration(s)),
        started: v.started,
        ended: v.ended,
    }
}

/// The sites' information folded into one site named `name`
/// ([`brokk_broker::info::fold`]), as the site API shows it.
fn folded(name: &str, sites: &[Result<ResourceInfo, String>]) -> InfoView {
    let (info, unavailable_reason) = brokk_broker::info::fold(name, sites);
    InfoView {
        name: name.to_string(),
        capacity: info.total_slots,
        free_now: info.free_slots,
        running: info.running_jobs,
        waiting: info.waiting_jobs,
        estimated_wait: info.estimated_wait.unwrap_or(Duration(0)),
        benchmarks: info.benchmarks,
        bandwidth_bytes_per_s: info.bandwidth_bytes_per_s,
        reservations: info.reservations,
        available: unavailable_reason.is_none(),
        unavailable_reason,
        cluster: None,
        shares: Vec::new(),
        health: None,
        // A broker moves what its own sites can no longer hold itself
        // (its rescue), so a broker above has nothing to move.
        endangered: 0,
        lag: info.lag.unwrap_or(Duration(0)),
        availability: info.availability,
        ancestors: Vec::new(),
        environment: info.environment,
    }
}

impl Service {
    /// `GET /site/v1/info`: the sites folded into one, with the chain of
    /// parents this broker knows
    /// ([`brokk_broker::broker::BrokerCore::ancestors`]).
    pub async fn site_info(&self, name: &str) -> InfoView {
        let mut info = folded(name, &self.reports(self.own_sites()).await);
        // As last read, never fetched here: a parent asked for its own
        // parent's information at each request would ask up a cycle.
        info.ancestors = self.broker.read(|core| core.ancestors());
        info
    }

    /// `POST /site/v1/jobs`: accepts `job` from the broker `who` for the
    /// user `on_behalf` (`who` itself when absent); a repeated `key` is the
    /// job it made before. Every job waits for the core's decision; one
    /// that claims a reservation of `who`'s is sent into it on the terms
    /// of `claim`. A job a neighbouring broker
    /// delegates (`delegation`) is taken only as the core admits it
    /// ([`brokk_broker::broker::BrokerCore::admits`]), refused with the
    /// reason otherwise. Returns the job's id and whether it is new.
    pub async fn site_submit(
        &self,
        who: &str,
        mut job: Job,
        key: Option<String>,
        on_behalf: Option<String>,
        claim: ClaimTerms,
        delegation: Option<brokk_broker::delegate::Delegation>,
    ) -> Result<(String, bool), ServiceError> {
        if let Some(k) = &key {
            if let Some(j) = self.db.by_key(who, k).await? {
                return Ok((j.view.id, false));
            }
        }
        self.within_job_limits(who, 1, 1).await?;
        brokk_jdl::absorb_script_headers(std::slice::from_mut(&mut job))
            .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        brokk_broker::select::validate_at(&job, now()).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        if let Some(d) = &delegation {
            if job.reservation.is_some() {
                return Err(ServiceError::BadRequest(
                    "a delegated job cannot claim a reservation: reservations stay with their broker".into(),
                ));
            }
            let admitted = self
                .broker
                .read(|core| core.admits(&job, &brokk_model::JobPreferences::default(), d, now()));
            if let Err(why) = admitted {
                self.counters.delegations.count("refused");
                tracing::info!(from = who, path = %d.path.join(","), "delegation refused: {why}");
                return Err(ServiceError::Conflict(why.to_string()));
            }
            self.counters.delegations.count("taken");
        }
        self.take_uploads(who, &mut job, &Default::default(), &Default::default())?;
        let runs_as = on_behalf.unwrap_or_else(|| who.to_string());
        let mut view = BrokerJob::new(
            new_id(),
            who.to_string(),
            Format::Json.name().to_string(),
            Entry::Accepted,
            now(),
        );
        view.warnings = brokk_broker::select::not_done_here(&job);
        view.runs_as = Some(runs_as);
        view.delegated = delegation;
        view.claim_terms = job.reservation.is_some().then_some(claim);
        view.describe(&job);
        let stored = StoredJob {
            view,
            spec: serde_json::to_string(&job).map_err(|e| ServiceError::BadRequest(e.to_string()))?,
            prefs: "{}".into(),
            key: key.clone(),
        };
        match self.store(&job, stored).await {
            Ok(v) => Ok((v.id, true)),
            // The same key sent twice at once: the other one stored it.
            Err(e) => match &key {
                Some(k) => match self.db.by_key(who, k).await? {
                    Some(j) => Ok((j.view.id, false)),
                    None => Err(e),
                },
                None => Err(e),
            },
        }
    }

    /// `POST /site/v1/probe`: every site's soonest candidates, the `k`
    /// soonest of all.
    pub async fn site_probe(&self, req: Request, k: usize) -> Result<Vec<Candidate>, ServiceError> {
        let sites = self.own_sites();
        let k = k.clamp(1, 100);
        tokio::task::spawn_blocking(move || {
            // A site that cannot reserve, or does not answer, offers nothing.
            let all: Vec<Candidate> = sites
                .iter()
                .filter_map(|s| s.client.probe(&req, k).ok())
                .flatten()
                .collect();
            soonest(all, k)
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))
    }

    /// `POST /site/v1/reservations`: at the site where it starts earliest,
    /// preliminary until its hold ends when it has one; `Ok(Err(..))` is the
    /// refusal a site agent would give (rejected with the soonest next start
    /// any site named, or never).
    pub async fn site_reserve(
        &self,
        who: &str,
        body: ReservationRequest,
    ) -> Result<Result<BrokerReservation, Reply>, ServiceError> {
        if body.hold.is_some_and(|h| h <= 0) {
            return Err(ServiceError::BadRequest(
                "hold: must be a positive number of seconds".into(),
            ));
        }
        let request = body.request();
        if request.amount == 0 || request.duration.0 <= 0 || request.latest < request.earliest {
            return Err(ServiceError::BadRequest(
                "amount and duration must be positive, and earliest <= latest".into(),
            ));
        }
        let t = now();
        self.within_reserved_limit(who, i64::from(request.amount).saturating_mul(request.duration.0), t)
            .await?;
        let hold = body.hold.map(|h| t + Duration(h));
        let (sites, info, user) = (self.own_sites(), self.info.clone(), who.to_string());
        let turn = self.decision_turn().await;
        let got = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            at_earliest_held(&request, &mut refs, "broker", hold)
                .map(|(k, id, start)| (sites[k].name.clone(), id.0, start))
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        let (site, site_reservation, start) = match got {
            Ok(g) => g,
            Err(refused) => {
                return match as_one_site(&refused) {
                    Ok(reply) => Ok(Err(reply)),
                    Err(why) => Err(ServiceError::Unavailable(why)),
                };
            }
        };
        let id = new_reservation_number().to_string();
        let (amount, end) = (request.amount, start + request.duration);
        let mut r = BrokerReservation::new(id, who.to_string(), site, site_reservation, amount, start, end);
        if hold.is_some() {
            r = r.preliminary();
        }
        self.db.save_reservation(&r).await?;
        Ok(Ok(r))
    }

    /// `who`'s live reservation `id` and its site.
    async fn own_site_reservation(&self, who: &str, id: &str) -> Result<(BrokerReservation, SiteEntry), ServiceError> {
        let r = self.reservation(who, id).await?;
        if r.state() == BrokerReservationState::Cancelled {
            return Err(ServiceError::Conflict(format!("reservation {id} has ended")));
        }
        let site = self
            .site(&r.site)
            .ok_or_else(|| ServiceError::Unavailable(format!("site {} is no longer configured", r.site)))?;
        Ok((r, site))
    }

    /// `GET /site/v1/reservations/{id}`: as its site has it, under this
    /// broker's id.
    pub async fn site_reservation(&self, who: &str, id: u64) -> Result<ReservationView, ServiceError> {
        let (r, site) = self.own_site_reservation(who, &id.to_string()).await?;
        view_at(who, id, &r, site).await
    }

    /// `POST /site/v1/reservations/{id}/commit`.
    pub async fn site_commit(&self, who: &str, id: u64) -> Result<ReservationView, ServiceError> {
        let (mut r, site) = self.own_site_reservation(who, &id.to_string()).await?;
        let (sid, at) = (ReservationId(r.site_reservation), site.clone());
        tokio::task::spawn_blocking(move || at.client.clone().commit("broker", sid))
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?
            .map_err(|e| site_failure(&r.site, e))?;
        r.apply(ReservationChange::Commit)
            .map_err(|e| ServiceError::Conflict(e.to_string()))?;
        self.db.save_reservation(&r).await?;
        view_at(who, id, &r, site).await
    }

    /// `PATCH /site/v1/reservations/{id}`: the reservation as changed, or
    /// the site's refusal.
    pub async fn site_modify(
        &self,
        who: &str,
        id: u64,
        change: Change,
    ) -> Result<Result<ReservationView, Reply>, ServiceError> {
        let (mut r, site) = self.own_site_reservation(who, &id.to_string()).await?;
        let (sid, at) = (ReservationId(r.site_reservation), site.clone());
        let answer = tokio::task::spawn_blocking(move || at.client.clone().modify("broker", sid, change))
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        match answer {
            Ok(_) => {
                let v = view_at(who, id, &r, site).await?;
                (r.start, r.end, r.amount) = (v.start, v.end, v.amount);
                self.db.save_reservation(&r).await?;
                Ok(Ok(v))
            }
            Err(SiteError::NotGranted(reply)) => Ok(Err(reply)),
            Err(e) => Err(site_failure(&r.site, e)),
        }
    }

    /// `GET /site/v1/jobs/{id}`.
    pub async fn site_job(&self, who: &str, id: &str) -> Result<JobView, ServiceError> {
        Ok(job_view(&self.owned(who, id).await?.view))
    }

    /// `GET /site/v1/jobs/by-key/{key}`.
    pub async fn site_job_by_key(&self, who: &str, key: &str) -> Result<JobView, ServiceError> {
        match self.db.by_key(who, key).await? {
            Some(j) => Ok(job_view(&j.view)),
            None => Err(ServiceError::NotFound(format!("a job with key {key}"))),
        }
    }

    /// `GET /site/v1/jobs/changes`: `who`'s jobs changed after `after`.
    pub async fn site_changes(&self, who: &str, epoch: u64, after: u64) -> Result<ChangeFeed, ServiceError> {
        // Another database's position means nothing here: from the start.
        let run = self.db.feed_epoch();
        let after = if epoch == run { after } else { 0 };
        let (jobs, version) = self
            .db
            .changes(who, i64::try_from(after).unwrap_or(i64::MAX), FEED_PAGE)
            .await?;
        Ok(ChangeFeed {
            epoch: run,
            version: version.max(0) as u64,
            jobs: jobs.iter().map(|j| job_view(&j.view)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_publishes_its_sites_as_one() {
        let sites = [Err("c: connection refused".to_string())];
        let down = folded("dept", &sites);
        assert!(!down.available && down.capacity == 0);
        assert!(down.unavailable_reason.unwrap().contains("connection refused"));
    }

    #[test]
    fn jobs_show_as_a_site_names_their_phases() {
        for s in BrokerState::ALL {
            let p = phase_of(s);
            assert_eq!(p.is_terminal(), s.is_terminal(), "{s}");
            // What the broker above makes of it again.
            if s.is_terminal() || matches!(s, BrokerState::Running | BrokerState::Dispatched) {
                assert_eq!(BrokerState::of_phase(p), s, "{s}");
            }
        }
    }
}
