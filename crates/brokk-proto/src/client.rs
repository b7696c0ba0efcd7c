//! A blocking client for a remote site agent. It must not be called from
//! inside an async runtime's worker thread (the broker drives sites from a
//! blocking pool).

use brokk_broker::{JobHandle, JobState, Site, SiteError};
use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{Job, ResourceInfo, Time};
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;

use crate::wire::{
    ChangeFeed, Created, ErrorBody, Granted, InfoView, JobView, Never, ProbeResponse, Rejected, ReservationRequest,
    ReservationView,
};

/// A site agent reached over HTTP with a bearer token.
#[derive(Debug, Clone)]
pub struct RemoteSite {
    endpoint: String,
    base: reqwest::Url,
    token: String,
    http: Client,
    idempotency_key: Option<String>,
    on_behalf_of: Option<String>,
    explicit_commit: bool,
    release_with_job: bool,
    delegation: Option<String>,
}

impl RemoteSite {
    /// A client for the agent at `endpoint` (`http://host:port`), acting as the
    /// identity `token` maps to there.
    pub fn new(endpoint: &str, token: &str) -> RemoteSite {
        RemoteSite {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            base: crate::base_url(endpoint),
            token: token.to_string(),
            http: Client::builder()
                .timeout(std::time::Duration::from_secs(30))
                .build()
                .unwrap_or_else(|_| Client::new()),
            idempotency_key: None,
            on_behalf_of: None,
            explicit_commit: false,
            release_with_job: false,
            delegation: None,
        }
    }

    /// Sends `delegation` (a neighbouring broker's `Brokk-Delegation`:
    /// its path and hops left) with the next submissions: the site is a
    /// broker this one delegates them to.
    pub fn set_delegation(&mut self, delegation: Option<String>) {
        self.delegation = delegation;
    }

    /// Makes the next submissions into a hold leave it a hold: the job
    /// waits until the hold is committed ([`Site::commit`]) and goes if it
    /// lapses first. A co-allocation submits every part so, then commits.
    pub fn set_explicit_commit(&mut self, explicit: bool) {
        self.explicit_commit = explicit;
    }

    /// Makes the reservations the next submissions claim end with their
    /// job: a broker made them for that job alone. Without it a claimed
    /// reservation is the owner's and is kept.
    pub fn set_release_with_job(&mut self, release: bool) {
        self.release_with_job = release;
    }

    /// Names `user` as the one the next submissions are for (the site must
    /// trust this client's identity as a delegate); their local account
    /// runs the job there.
    pub fn set_on_behalf_of(&mut self, user: Option<String>) {
        self.on_behalf_of = user;
    }

    /// Sends `key` as the `Idempotency-Key` of the next submissions, so that a
    /// submission repeated after a crash is the same job at the site.
    pub fn set_idempotency_key(&mut self, key: Option<String>) {
        self.idempotency_key = key;
    }

    /// The URL of the endpoint's path made of `segments` ([`crate::url_with`]).
    fn url(&self, segments: &[&str]) -> reqwest::Url {
        crate::url_with(&self.base, segments)
    }

    fn send(&self, req: RequestBuilder) -> Result<Response, SiteError> {
        req.bearer_auth(&self.token)
            .send()
            .map_err(|e| SiteError::Unavailable(format!("{} ({})", self.endpoint, transport_reason(&e))))
    }

    /// Maps a non-success status to the trait's errors.
    fn fail(&self, resp: Response) -> SiteError {
        let status = resp.status();
        let reason = resp
            .json::<ErrorBody>()
            .map(|e| e.error)
            .unwrap_or_else(|_| status.to_string());
        match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => SiteError::Forbidden,
            StatusCode::NOT_FOUND => SiteError::Unknown,
            s if s.is_server_error() => SiteError::Unavailable(format!("{}: {reason}", self.endpoint)),
            _ => SiteError::Refused {
                site: self.endpoint.clone(),
                reason,
            },
        }
    }

    fn json<T: DeserializeOwned>(&self, resp: Response) -> Result<T, SiteError> {
        resp.json::<T>()
            .map_err(|e| SiteError::Unavailable(format!("{}: bad answer: {e}", self.endpoint)))
    }

    /// The reply a 201, 409 or 422 carries.
    fn reply(&self, resp: Response) -> Result<Reply, SiteError> {
        match resp.status() {
            StatusCode::CREATED | StatusCode::OK => {
                let g: Granted = self.json(resp)?;
                Ok(Reply::Granted {
                    id: ReservationId(g.id),
                    start: g.start,
                })
            }
            StatusCode::CONFLICT => {
                let r: Rejected = self.json(resp)?;
                Ok(Reply::Rejected {
                    next_start: r.next_start,
                })
            }
            StatusCode::UNPROCESSABLE_ENTITY => {
                let n: Never = self.json(resp)?;
                Ok(Reply::Never { reason: n.reason })
            }
            _ => Err(self.fail(resp)),
        }
    }

    /// Whether this identity's upload store at the site holds `sha256`.
    pub fn has_upload(&self, sha256: &str) -> Result<bool, SiteError> {
        let resp = self.send(self.http.get(self.url(&["v1", "uploads", sha256])))?;
        match resp.status() {
            StatusCode::OK => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(self.fail(resp)),
        }
    }

    /// Sends the local file `path` to the site's upload store as `sha256`.
    pub fn put_upload(&self, sha256: &str, path: &std::path::Path) -> Result<(), SiteError> {
        let f = std::fs::File::open(path).map_err(|e| SiteError::Unavailable(format!("{}: {e}", path.display())))?;
        let resp = self.send(
            self.http
                .put(self.url(&["v1", "uploads", sha256]))
                .timeout(std::time::Duration::from_secs(3600))
                .body(f),
        )?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.fail(resp))
        }
    }

    /// `GET /v1/reservations/{id}`.
    pub fn reservation(&self, id: ReservationId) -> Result<ReservationView, SiteError> {
        let resp = self.send(self.http.get(self.url(&["v1", "reservations", &id.0.to_string()])))?;
        if resp.status().is_success() {
            self.json(resp)
        } else {
            Err(self.fail(resp))
        }
    }

    /// `GET /v1/jobs/{id}`.
    pub fn job(&self, job: &JobHandle) -> Result<JobView, SiteError> {
        let resp = self.send(self.http.get(self.url(&["v1", "jobs", &job.0])))?;
        if resp.status().is_success() {
            self.json(resp)
        } else {
            Err(self.fail(resp))
        }
    }

    /// `POST /v1/jobs/{id}/hold` (`hold`) or `.../release`: the job as the
    /// site now has it.
    pub fn hold_job(&self, job: &JobHandle, hold: bool) -> Result<JobView, SiteError> {
        let verb = if hold { "hold" } else { "release" };
        let resp = self.send(self.http.post(self.url(&["v1", "jobs", &job.0, verb])))?;
        if resp.status().is_success() {
            self.json(resp)
        } else {
            Err(self.fail(resp))
        }
    }

    /// `GET /v1/jobs/changes`: this client's jobs changed since a version.
    pub fn changes(&self, epoch: u64, after: u64) -> Result<ChangeFeed, SiteError> {
        let resp = self.send(
            self.http
                .get(self.url(&["v1", "jobs", "changes"]))
                .query(&[("epoch", epoch), ("after", after)]),
        )?;
        if resp.status().is_success() {
            self.json(resp)
        } else {
            Err(self.fail(resp))
        }
    }

    /// `GET /v1/jobs/by-key/{key}`: the job this client submitted with an
    /// idempotency key, if the site has it.
    pub fn job_by_key(&self, key: &str) -> Result<Option<JobView>, SiteError> {
        let resp = self.send(self.http.get(self.url(&["v1", "jobs", "by-key", key])))?;
        match resp.status() {
            s if s.is_success() => self.json(resp).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.fail(resp)),
        }
    }

    /// `GET /v1/jobs/{id}/files/{name}`: a file from the job's sandbox, as a
    /// response to read from (it is not held in memory), with the `Range`
    /// header passed on when given. `name` is a relative path; its
    /// components are sent encoded, each as one segment.
    pub fn file(&self, job: &JobHandle, name: &str, range: Option<&str>) -> Result<Response, SiteError> {
        let mut segments = vec!["v1", "jobs", job.0.as_str(), "files"];
        segments.extend(name.split('/'));
        let mut rq = self.http.get(self.url(&segments)).timeout(FILE_TIMEOUT);
        if let Some(r) = range {
            rq = rq.header(reqwest::header::RANGE, r);
        }
        let resp = self.send(rq)?;
        if resp.status().is_success() {
            Ok(resp)
        } else {
            Err(self.fail(resp))
        }
    }
}

/// Why a request got no answer, in the words of its deepest cause
/// (`connection refused`) rather than "error sending request for url
/// (...)", which repeats the URL.
fn transport_reason(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer in time".into();
    }
    let why = crate::innermost(e).to_string();
    // `Connection refused (os error 111)`: the number says nothing more.
    why.split(" (os error").next().unwrap_or(&why).to_lowercase()
}

/// What an agent's information (`/v1/info`'s body, or one event of
/// `/v1/info/stream`) says of the site at `endpoint`.
pub fn resource_info(endpoint: &str, v: InfoView) -> ResourceInfo {
    ResourceInfo {
        endpoint: endpoint.to_string(),
        name: v.name,
        benchmarks: v.benchmarks,
        total_slots: v.capacity,
        free_slots: v.free_now,
        used_slots: v.capacity.saturating_sub(v.free_now),
        running_jobs: v.running,
        waiting_jobs: v.waiting,
        estimated_wait: Some(v.estimated_wait),
        bandwidth_bytes_per_s: v.bandwidth_bytes_per_s,
        reservations: v.reservations,
        shares: v.shares,
        health: v.health,
        endangered_reservations: v.endangered,
        lag: (!v.lag.is_zero()).then_some(v.lag),
        availability: v.availability,
        ancestors: v.ancestors,
        environment: v.environment,
        ..ResourceInfo::default()
    }
}

/// How long a file download may take as a whole: outputs can be large.
const FILE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

impl Site for RemoteSite {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn info(&self) -> Result<ResourceInfo, SiteError> {
        let resp = self.send(self.http.get(self.url(&["v1", "info"])))?;
        if resp.status() == StatusCode::SERVICE_UNAVAILABLE {
            // The agent is up but its resource manager is not: its body says why.
            let why = resp
                .json::<InfoView>()
                .ok()
                .and_then(|v| v.unavailable_reason)
                .unwrap_or_else(|| "unavailable".to_string());
            return Err(SiteError::Unavailable(format!("{}: {why}", self.endpoint)));
        }
        if !resp.status().is_success() {
            return Err(self.fail(resp));
        }
        let v: InfoView = self.json(resp)?;
        Ok(resource_info(&self.endpoint, v))
    }

    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        let resp = self.send(self.http.post(self.url(&["v1", "probe"])).query(&[("k", k)]).json(req))?;
        if !resp.status().is_success() {
            return Err(self.fail(resp));
        }
        Ok(self.json::<ProbeResponse>(resp)?.candidates)
    }

    fn reserve(&mut self, _owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError> {
        let body = ReservationRequest::new(req, hold.map(|t| (t.0 - crate::wall_clock().0).max(1)));
        let resp = self.send(self.http.post(self.url(&["v1", "reservations"])).json(&body))?;
        self.reply(resp)
    }

    fn modify(&mut self, _owner: &str, id: ReservationId, change: Change) -> Result<Time, SiteError> {
        let resp = self.send(
            self.http
                .patch(self.url(&["v1", "reservations", &id.0.to_string()]))
                .json(&change),
        )?;
        if resp.status().is_success() {
            return Ok(self.json::<ReservationView>(resp)?.start);
        }
        match resp.status() {
            StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY => Err(SiteError::NotGranted(self.reply(resp)?)),
            _ => Err(self.fail(resp)),
        }
    }

    fn commit(&mut self, _owner: &str, id: ReservationId) -> Result<(), SiteError> {
        let resp = self.send(
            self.http
                .post(self.url(&["v1", "reservations", &id.0.to_string(), "commit"])),
        )?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.fail(resp))
        }
    }

    fn endangered(&self, _owner: &str) -> Result<Vec<ReservationId>, SiteError> {
        let resp = self.send(self.http.get(self.url(&["v1", "reservations", "endangered"])))?;
        if !resp.status().is_success() {
            return Err(self.fail(resp));
        }
        let views = self.json::<Vec<crate::wire::ReservationView>>(resp)?;
        Ok(views.into_iter().map(|v| ReservationId(v.id)).collect())
    }

    fn cancel(&mut self, _owner: &str, id: ReservationId) -> Result<(), SiteError> {
        let resp = self.send(self.http.delete(self.url(&["v1", "reservations", &id.0.to_string()])))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.fail(resp))
        }
    }

    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: ReservationId,
        key: &str,
    ) -> Result<JobHandle, SiteError> {
        let mut c = self.clone();
        c.set_idempotency_key(Some(key.to_string()));
        c.set_explicit_commit(true);
        c.submit(owner, job, Some(reservation))
    }

    fn submit(&mut self, _owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        let mut job = job.clone();
        if let Some(r) = reservation {
            job.reservation = Some(r.0.to_string());
        }
        let mut rq = self.http.post(self.url(&["v1", "jobs"])).json(&job);
        if let Some(k) = &self.idempotency_key {
            rq = rq.header("Idempotency-Key", k);
        }
        if let Some(u) = &self.on_behalf_of {
            rq = rq.header("On-Behalf-Of", u);
        }
        if self.explicit_commit {
            rq = rq.header("Reservation-Commit", "explicit");
        }
        if self.release_with_job && reservation.is_some() {
            rq = rq.header("Reservation-Release", "with-job");
        }
        if let Some(d) = &self.delegation {
            rq = rq.header("Brokk-Delegation", d);
        }
        let resp = self.send(rq)?;
        if resp.status().is_success() {
            Ok(JobHandle(self.json::<Created>(resp)?.id))
        } else {
            Err(self.fail(resp))
        }
    }

    fn status(&self, job: &JobHandle) -> Result<JobState, SiteError> {
        let v = self.job(job)?;
        Ok(JobState::of_phase(
            v.state,
            v.planned_start,
            v.started,
            v.exit_code,
            Time::EPOCH,
        ))
    }

    fn cancel_job(&mut self, _owner: &str, job: &JobHandle) -> Result<(), SiteError> {
        let resp = self.send(self.http.delete(self.url(&["v1", "jobs", &job.0])))?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(self.fail(resp))
        }
    }
}
