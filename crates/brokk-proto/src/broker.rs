//! A blocking client for the broker service's client API.

use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::Method;

use crate::wire::{
    Accepted, BrokerJob, BrokerReservation, BrokerReservationRequest, Checked, CoallocRequest, Coallocated, ErrorBody,
    SubmitRequest, UploadView, WorkflowRefused, WorkflowRequest, WorkflowView,
};

/// A failed call: the HTTP status (0 when the service could not be reached)
/// and the service's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    /// HTTP status, 0 if unreachable.
    pub status: u16,
    /// What went wrong.
    pub message: String,
}

/// A failed answer as the service's message.
fn error_of(r: Response) -> CallError {
    let status = r.status().as_u16();
    let message = r
        .json::<ErrorBody>()
        .map(|e| e.error)
        .unwrap_or_else(|_| format!("HTTP {status}"));
    CallError { status, message }
}

/// What a user reads when the broker at `url` could not be asked: the
/// innermost cause (`Connection refused`), and for a refused or failed
/// connection where to look.
fn unreachable_message(url: &str, e: &reqwest::Error) -> String {
    let cause = crate::innermost(e);
    if e.is_connect() {
        return format!("cannot reach the broker at {url}: {cause} (is `brokk serve` running there? BROKK_SERVER or --server names it)");
    }
    if e.is_timeout() {
        return format!("the broker at {url} did not answer in time: {cause}");
    }
    let (outer, inner) = (e.to_string(), cause.to_string());
    if outer.contains(&inner) {
        return format!("{url}: {outer}");
    }
    format!("{url}: {outer}: {inner}")
}

/// `url` sent to the broker at `base` instead: its scheme, host and port.
fn rebase(url: &mut reqwest::Url, base: &reqwest::Url) {
    let _ = url.set_scheme(base.scheme());
    let _ = url.set_host(base.host_str());
    let _ = url.set_port(base.port());
}

/// Which of the caller's jobs [`BrokerClient::jobs`] returns.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobsQuery<'a> {
    /// Only jobs in this state (its name).
    pub state: Option<&'a str>,
    /// Only jobs submitted at or after this time.
    pub since: Option<brokk_model::Time>,
    /// Only jobs after this one (the last of the page before).
    pub before: Option<&'a str>,
    /// At most this many (the service's default: 1,000).
    pub limit: Option<usize>,
}

/// The broker service at `url`, acting as the identity of `token`.
#[derive(Debug, Clone)]
pub struct BrokerClient {
    url: String,
    /// Every broker the client may reach: an active one and its standby.
    bases: Vec<reqwest::Url>,
    /// The one asked first: the last that answered as the active broker.
    base: std::sync::Arc<std::sync::Mutex<reqwest::Url>>,
    token: String,
    http: Client,
}

impl BrokerClient {
    /// A client of the broker at `url`, or of the first of several
    /// separated by commas (an active broker and its standby): a broker
    /// that cannot be reached is passed over for the next, and a standby's
    /// answer names the active one, which is asked instead.
    pub fn new(url: &str, token: &str) -> BrokerClient {
        let bases: Vec<reqwest::Url> = url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(crate::base_url)
            .collect();
        let first = bases.first().cloned().unwrap_or_else(|| crate::base_url(url));
        BrokerClient {
            url: url.trim_end_matches('/').to_string(),
            bases,
            base: std::sync::Arc::new(std::sync::Mutex::new(first)),
            token: token.to_string(),
            http: Client::new(),
        }
    }

    fn current(&self) -> reqwest::Url {
        self.base
            .lock()
            .map(|b| b.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// A request to the path made of `segments` ([`crate::url_with`]) with
    /// the caller's token.
    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.http
            .request(method, crate::url_with(&self.current(), segments))
            .bearer_auth(&self.token)
    }

    /// Sends `rq`; a non-success status becomes the service's message. A
    /// standby's answer sends the request on to the active broker it names,
    /// and a broker that cannot be reached to the next of the client's
    /// (each at most once; a streamed body is not sent again).
    fn send(&self, rq: RequestBuilder) -> Result<Response, CallError> {
        let r = self.execute(rq)?;
        if r.status().is_success() {
            return Ok(r);
        }
        Err(error_of(r))
    }

    /// Sends `rq` to the active broker (see [`BrokerClient::send`]) and
    /// returns its answer, whatever the status.
    fn execute(&self, rq: RequestBuilder) -> Result<Response, CallError> {
        let unreachable = |e: reqwest::Error| CallError {
            status: 0,
            message: unreachable_message(&self.url, &e),
        };
        let mut req = rq.build().map_err(unreachable)?;
        let mut tried = vec![self.current()];
        loop {
            let again = req.try_clone();
            let (to, failure) = match self.http.execute(req) {
                Ok(r) if r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                    let body: serde_json::Value = r.json().unwrap_or_default();
                    let failure = CallError {
                        status: 503,
                        message: body["error"].as_str().unwrap_or("HTTP 503").to_string(),
                    };
                    let active = body["active"].as_str().filter(|a| !a.is_empty()).map(crate::base_url);
                    (active, failure)
                }
                Ok(r) => return Ok(r),
                Err(e) if e.is_connect() => {
                    let next = self.bases.iter().find(|b| !tried.contains(b)).cloned();
                    (next, unreachable(e))
                }
                Err(e) => return Err(unreachable(e)),
            };
            let (Some(to), Some(mut next)) = (to.filter(|t| !tried.contains(t)), again) else {
                return Err(failure);
            };
            rebase(next.url_mut(), &to);
            if let Ok(mut b) = self.base.lock() {
                *b = to.clone();
            }
            tried.push(to);
            req = next;
        }
    }

    /// Sends `rq` and reads the JSON answer.
    fn call<T: serde::de::DeserializeOwned>(&self, rq: RequestBuilder) -> Result<T, CallError> {
        self.send(rq)?.json().map_err(|e| CallError {
            status: 0,
            message: format!("bad answer: {e}"),
        })
    }

    /// Submits a description in any supported language (with its uploads
    /// named, optionally held or into a reservation made through the broker).
    pub fn submit(&self, req: &SubmitRequest) -> Result<Accepted, CallError> {
        self.call(self.request(Method::POST, &["v1", "jobs"]).json(req))
    }

    /// What the broker would do with a description's jobs if they were
    /// submitted now, each site's answer; nothing is stored.
    pub fn check(&self, req: &SubmitRequest) -> Result<Checked, CallError> {
        self.call(self.request(Method::POST, &["v1", "jobs", "check"]).json(req))
    }

    /// Whether the caller's upload store holds the file with this SHA-256.
    pub fn has_upload(&self, sha256: &str) -> Result<bool, CallError> {
        match self.send(self.request(Method::GET, &["v1", "uploads", sha256])) {
            Ok(_) => Ok(true),
            Err(e) if e.status == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Uploads the local file `path` under its SHA-256 `sha256` (streamed).
    pub fn upload(&self, sha256: &str, path: &std::path::Path) -> Result<UploadView, CallError> {
        let f = std::fs::File::open(path).map_err(|e| CallError {
            status: 0,
            message: format!("{}: {e}", path.display()),
        })?;
        self.upload_from(sha256, reqwest::blocking::Body::from(f))
    }

    /// Uploads `body` under its SHA-256 `sha256`, streamed: a file's
    /// content read through whatever the caller wraps it in (a progress
    /// bar), sized so the service can check it against the quota first.
    pub fn upload_from(&self, sha256: &str, body: reqwest::blocking::Body) -> Result<UploadView, CallError> {
        self.call(
            self.request(Method::PUT, &["v1", "uploads", sha256])
                .timeout(std::time::Duration::from_secs(3600))
                .body(body),
        )
    }

    /// Reserves slots at the site where they start earliest.
    pub fn reserve(&self, req: &BrokerReservationRequest) -> Result<BrokerReservation, CallError> {
        self.call(self.request(Method::POST, &["v1", "reservations"]).json(req))
    }

    /// The caller's reservations made through the broker, by start.
    pub fn reservations(&self) -> Result<Vec<BrokerReservation>, CallError> {
        self.call(self.request(Method::GET, &["v1", "reservations"]))
    }

    /// Cancels a reservation made through the broker.
    pub fn cancel_reservation(&self, id: &str) -> Result<BrokerReservation, CallError> {
        self.call(self.request(Method::DELETE, &["v1", "reservations", id]))
    }

    /// Co-allocates jobs that must start together.
    pub fn coallocate(&self, req: &CoallocRequest) -> Result<Coallocated, CallError> {
        self.call(self.request(Method::POST, &["v1", "coallocations"]).json(req))
    }

    /// Admits a workflow against its deadline: its plan, or (409) why not
    /// with the earliest finish on offer.
    pub fn submit_workflow(&self, req: &WorkflowRequest) -> Result<Result<WorkflowView, WorkflowRefused>, CallError> {
        let r = self.execute(self.request(Method::POST, &["v1", "workflows"]).json(req))?;
        let status = r.status().as_u16();
        let bad = |e: reqwest::Error| CallError {
            status,
            message: format!("bad answer: {e}"),
        };
        match status {
            200..=299 => r.json().map(Ok).map_err(bad),
            // Admission's refusal, or a limit's (an error body).
            409 => {
                let text = r.text().map_err(bad)?;
                match serde_json::from_str::<WorkflowRefused>(&text) {
                    Ok(refused) => Ok(Err(refused)),
                    Err(_) => Err(CallError {
                        status,
                        message: serde_json::from_str::<ErrorBody>(&text).map_or(text, |e| e.error),
                    }),
                }
            }
            _ => Err(error_of(r)),
        }
    }

    /// One workflow with its tasks' states.
    pub fn workflow(&self, id: &str) -> Result<WorkflowView, CallError> {
        self.call(self.request(Method::GET, &["v1", "workflows", id]))
    }

    /// The caller's workflows, newest last.
    pub fn workflows(&self) -> Result<Vec<WorkflowView>, CallError> {
        self.call(self.request(Method::GET, &["v1", "workflows"]))
    }

    /// Cancels a workflow: its running tasks and every reservation left.
    pub fn cancel_workflow(&self, id: &str) -> Result<WorkflowView, CallError> {
        self.call(self.request(Method::DELETE, &["v1", "workflows", id]))
    }

    /// One job.
    pub fn job(&self, id: &str) -> Result<BrokerJob, CallError> {
        self.call(self.request(Method::GET, &["v1", "jobs", id]))
    }

    /// A page of the caller's jobs, newest first (the service's
    /// `GET /v1/jobs`; a page is at most 10,000 jobs).
    pub fn jobs(&self, q: &JobsQuery<'_>) -> Result<Vec<BrokerJob>, CallError> {
        let mut rq = self.request(Method::GET, &["v1", "jobs"]);
        if let Some(s) = q.state {
            rq = rq.query(&[("state", s)]);
        }
        if let Some(t) = q.since {
            rq = rq.query(&[("since", t.0)]);
        }
        if let Some(b) = q.before {
            rq = rq.query(&[("before", b)]);
        }
        if let Some(n) = q.limit {
            rq = rq.query(&[("limit", n)]);
        }
        self.call(rq)
    }

    /// Holds a job that has not started: at the broker, or at its site.
    pub fn hold(&self, id: &str) -> Result<BrokerJob, CallError> {
        self.call(self.request(Method::POST, &["v1", "jobs", id, "hold"]))
    }

    /// Sends an ended job again, with the same id.
    pub fn requeue(&self, id: &str) -> Result<BrokerJob, CallError> {
        self.call(self.request(Method::POST, &["v1", "jobs", id, "requeue"]))
    }

    /// Releases a held job.
    pub fn release(&self, id: &str) -> Result<BrokerJob, CallError> {
        self.call(self.request(Method::POST, &["v1", "jobs", id, "release"]))
    }

    /// Cancels a job.
    pub fn cancel(&self, id: &str) -> Result<BrokerJob, CallError> {
        self.call(self.request(Method::DELETE, &["v1", "jobs", id]))
    }

    /// A file from the job's sandbox (`name` may be a relative path), as a
    /// response to read or copy from: it is not held in memory.
    pub fn file(&self, id: &str, name: &str) -> Result<Response, CallError> {
        let mut segments = vec!["v1", "jobs", id, "files"];
        segments.extend(name.split('/'));
        self.send(
            self.request(Method::GET, &segments)
                .timeout(std::time::Duration::from_secs(3600)),
        )
    }

    /// Who the caller is, and what their uploads hold against their quota.
    pub fn me(&self) -> Result<serde_json::Value, CallError> {
        self.call(self.request(Method::GET, &["v1", "me"]))
    }

    /// What the sites report (an `{"error": ...}` object for a site that failed).
    pub fn resources(&self) -> Result<Vec<serde_json::Value>, CallError> {
        self.call(self.request(Method::GET, &["v1", "resources"]))
    }
}
