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
//! jobs, the shortest wait and each benchmark's best value. It offers no
//! reservations yet: probes and reservations are refused, and it says so.

use brokk_model::{Duration, JobPhase, PublishedBenchmark};
use brokk_proto::wire::{ChangeFeed, InfoView, JobView};

use super::*;

/// The most changes one feed read returns.
const FEED_PAGE: i64 = 1000;

/// The feed's run: versions are stored with the jobs and outlive restarts.
const FEED_EPOCH: u64 = 1;

/// Why a broker above gets no reservation here.
pub const NO_RESERVATIONS: &str = "this broker offers no reservations to a broker above it";

/// Where a job is, as a site agent names it.
fn phase_of(s: BrokerState) -> JobPhase {
    match s {
        BrokerState::Accepted | BrokerState::Held | BrokerState::Planned | BrokerState::Reserving => JobPhase::Accepted,
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
        state: phase_of(v.state),
        reason: v.reason.clone(),
        exit_code: v.exit_code,
        reservation: None,
        planned_start: v.predicted_tts.map(|s| v.submitted + Duration(s)),
        started: v.started,
        ended: v.ended,
    }
}

/// The sites' information folded into one site named `name`.
fn folded(name: &str, sites: &[Result<ResourceInfo, String>]) -> InfoView {
    let up: Vec<&ResourceInfo> = sites.iter().filter_map(|s| s.as_ref().ok()).collect();
    let mut benchmarks: Vec<PublishedBenchmark> = Vec::new();
    for b in up.iter().flat_map(|i| &i.benchmarks) {
        match benchmarks.iter_mut().find(|k| k.name == b.name) {
            Some(k) => k.value = k.value.max(b.value),
            None => benchmarks.push(b.clone()),
        }
    }
    let unavailable_reason = up.is_empty().then(|| {
        let why: Vec<&str> = sites
            .iter()
            .filter_map(|s| s.as_ref().err())
            .map(String::as_str)
            .collect();
        format!("none of its sites answers ({})", why.join("; "))
    });
    InfoView {
        name: name.to_string(),
        capacity: up.iter().map(|i| i.total_slots).max().unwrap_or(0),
        free_now: up.iter().map(|i| i.free_slots).max().unwrap_or(0),
        running: up.iter().map(|i| i.running_jobs).sum(),
        waiting: up.iter().map(|i| i.waiting_jobs).sum(),
        estimated_wait: up.iter().filter_map(|i| i.estimated_wait).min().unwrap_or(Duration(0)),
        benchmarks,
        bandwidth_bytes_per_s: up.iter().filter_map(|i| i.bandwidth_bytes_per_s).max(),
        reservations: false,
        available: !up.is_empty(),
        unavailable_reason,
        cluster: None,
        shares: Vec::new(),
        health: None,
        lag: up.iter().filter_map(|i| i.lag).min().unwrap_or(Duration(0)),
    }
}

impl Service {
    /// `GET /site/v1/info`: the sites folded into one.
    pub async fn site_info(&self, name: &str) -> InfoView {
        folded(name, &self.resources().await)
    }

    /// `POST /site/v1/jobs`: accepts `job` from the broker `who` for the
    /// user `on_behalf` (`who` itself when absent); a repeated `key` is the
    /// job it made before. Returns the job's id and whether it is new.
    pub async fn site_submit(
        &self,
        who: &str,
        mut job: Job,
        key: Option<String>,
        on_behalf: Option<String>,
    ) -> Result<(String, bool), ServiceError> {
        if let Some(k) = &key {
            if let Some(j) = self.db.by_key(who, k).await? {
                return Ok((j.view.id, false));
            }
        }
        if job.reservation.is_some() {
            return Err(ServiceError::Conflict(NO_RESERVATIONS.into()));
        }
        self.within_job_limits(who, 1, 1).await?;
        brokk_broker::select::validate_at(&job, now()).map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        self.take_uploads(who, &mut job, &Default::default(), &Default::default())?;
        let mut view = BrokerJob {
            id: new_id(),
            owner: who.to_string(),
            format: Format::Json.name().to_string(),
            state: BrokerState::Accepted,
            submitted: now(),
            warnings: brokk_broker::select::not_done_here(&job),
            runs_as: Some(on_behalf.unwrap_or_else(|| who.to_string())),
            ..BrokerJob::default()
        };
        view.describe(&job);
        let stored = StoredJob {
            view,
            spec: serde_json::to_string(&job).map_err(|e| ServiceError::BadRequest(e.to_string()))?,
            prefs: "{}".into(),
            key: key.clone(),
        };
        match self.store(&job, stored).await {
            Ok(v) => {
                self.wake.notify_one();
                Ok((v.id, true))
            }
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
        // Another run's position means nothing here: from the start.
        let after = if epoch == FEED_EPOCH { after } else { 0 };
        let (jobs, version) = self
            .db
            .changes(who, i64::try_from(after).unwrap_or(i64::MAX), FEED_PAGE)
            .await?;
        Ok(ChangeFeed {
            epoch: FEED_EPOCH,
            version: version.max(0) as u64,
            jobs: jobs.iter().map(|j| job_view(&j.view)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(name: &str, total: u32, free: u32, wait: i64, bench: f64) -> Result<ResourceInfo, String> {
        Ok(ResourceInfo {
            name: name.into(),
            total_slots: total,
            free_slots: free,
            running_jobs: 2,
            waiting_jobs: 1,
            estimated_wait: Some(Duration(wait)),
            benchmarks: vec![PublishedBenchmark {
                name: "specint2006".into(),
                value: bench,
            }],
            ..ResourceInfo::default()
        })
    }

    #[test]
    fn a_broker_publishes_its_sites_as_one_that_a_job_fits_at_one_of() {
        let sites = [
            site("a", 16, 4, 300, 20.0),
            site("b", 8, 6, 60, 30.0),
            Err("c: connection refused".to_string()),
        ];
        let v = folded("dept", &sites);
        assert_eq!(
            (v.capacity, v.free_now),
            (16, 6),
            "the largest site and the most free at one"
        );
        assert_eq!((v.running, v.waiting), (4, 2));
        assert_eq!(v.estimated_wait, Duration(60));
        assert_eq!(v.benchmarks[0].value, 30.0);
        assert!(v.available && !v.reservations);
        let down = folded("dept", &sites[2..]);
        assert!(!down.available);
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
