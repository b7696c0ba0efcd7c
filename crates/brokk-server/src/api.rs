//! The client API over HTTP (axum), with the site API's conventions: JSON,
//! bearer tokens, `{"error": ...}` with a status code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use brokk_proto::openapi::Bearer;
use brokk_proto::wire::{
    Accepted, BrokerJob, BrokerReservation, BrokerReservationRequest, Checked, CoallocRequest, Coallocated, ErrorBody,
    Me, Resource, SubmitRequest, Unanswered, UploadUsage, UploadView, WorkflowRefused, WorkflowRequest, WorkflowView,
};
use serde::Deserialize;
use utoipa::{IntoParams, OpenApi as _};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::service::{Service, ServiceError};

mod site;

/// Who may call the API, and as what.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Bearer token -> identity.
    pub tokens: BTreeMap<String, String>,
    /// Identities that may use this broker as a site (`/site/v1`).
    pub delegates: brokk_site::delegates::Delegates,
    /// The name published as a site.
    pub name: String,
    /// Event streams open at once per user.
    pub event_streams: usize,
}

#[derive(Clone)]
struct App {
    service: Service,
    access: Arc<Access>,
    /// Event streams open per user.
    streams: Arc<brokk_site::listener::Counts<Arc<str>>>,
}

/// One open event stream of a user, counted until it is dropped.
struct StreamTurn {
    open: Arc<brokk_site::listener::Counts<Arc<str>>>,
    who: Arc<str>,
}

impl StreamTurn {
    /// Counts one more stream of `who`, unless it has `most` open already.
    fn take(app: &App, who: &Arc<str>, most: usize) -> Option<StreamTurn> {
        app.streams.take(who.clone(), most).then(|| StreamTurn {
            open: app.streams.clone(),
            who: who.clone(),
        })
    }
}

impl Drop for StreamTurn {
    fn drop(&mut self) {
        self.open.give_back(&self.who);
    }
}

#[derive(Clone)]
struct Identity(Arc<str>);

struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let status = match e {
            ServiceError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServiceError::Forbidden(_) => StatusCode::FORBIDDEN,
            ServiceError::NotFound(_) => StatusCode::NOT_FOUND,
            ServiceError::Conflict(_) => StatusCode::CONFLICT,
            ServiceError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError(status, e.to_string())
    }
}

/// Parses a JSON body; a 400 names the field at fault.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    brokk_proto::wire::from_json(bytes).map_err(|m| ApiError(StatusCode::BAD_REQUEST, m))
}

async fn auth(State(app): State<App>, mut req: Request, next: Next) -> Result<Response, ApiError> {
    let who = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|t| app.access.tokens.get(t.trim()))
        .ok_or_else(|| ApiError(StatusCode::UNAUTHORIZED, "a valid bearer token is required (`Authorization: Bearer TOKEN`; the brokk commands send BROKK_TOKEN or --token)".into()))?;
    req.extensions_mut().insert(Identity(Arc::from(who.as_str())));
    Ok(next.run(req).await)
}

/// Submits a job description in any supported language; it is stored and
/// brokered to a site. A description that makes several jobs (HTCondor
/// `queue N`, a JDL collection) answers every id.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = SubmitRequest, responses(
    (status = 202, body = Accepted),
    (status = 400, body = ErrorBody, description = "the description is wrong (`line:column: message`), or no site could ever run it"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the reservation or an upload is not the caller's"),
    (status = 413, body = ErrorBody, description = "the body is over the size limit"),
    (status = 409, body = ErrorBody, description = "the caller has as many unfinished jobs as it may"),
    (status = 503, body = ErrorBody, description = "the broker cannot take work now"),
))]
async fn submit(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let t = Instant::now();
    let req: SubmitRequest = body(&bytes)?;
    let accepted = app.service.accept(&who.0, req).await?;
    app.service.observe_submit(t.elapsed().as_secs_f64());
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

/// Answers what the broker would do with a description's jobs if they were
/// submitted now, as `sbatch --test-only` does: each site's answer (it takes
/// the job, with the predicted start and delivery; it cannot, with every
/// reason; it cannot be asked now) and the site a decision would choose.
/// Nothing is stored; uploads are not looked for.
#[utoipa::path(post, path = "/v1/jobs/check", tag = "jobs", request_body = SubmitRequest, responses(
    (status = 200, body = Checked),
    (status = 400, body = ErrorBody, description = "the description is wrong (`line:column: message`)"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the reservation is not the caller's"),
    (status = 409, body = ErrorBody, description = "the caller has as many unfinished jobs as it may"),
))]
async fn check(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Json<Checked>, ApiError> {
    let req: SubmitRequest = body(&bytes)?;
    Ok(Json(app.service.check(&who.0, req).await?))
}

/// Co-allocates several jobs for one common start within `delta` seconds of
/// each other inside the window, across sites: all or nothing.
#[utoipa::path(post, path = "/v1/coallocations", tag = "coallocations", request_body = CoallocRequest, responses(
    (status = 201, body = Coallocated),
    (status = 400, body = ErrorBody, description = "a part is wrong, or no site could ever run it (each site's reason)"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 409, body = ErrorBody, description = "no common start in the window"),
))]
async fn coallocate(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: CoallocRequest = body(&bytes)?;
    let done = app.service.coallocate(&who.0, req).await?;
    Ok((StatusCode::CREATED, Json(done)).into_response())
}

/// Reserves processors at the site that offers the earliest start in the
/// window; a job claims it with `reservation` at submission.
#[utoipa::path(post, path = "/v1/reservations", tag = "reservations", request_body = BrokerReservationRequest, responses(
    (status = 201, body = BrokerReservation),
    (status = 400, body = ErrorBody, description = "the request is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 409, body = ErrorBody, description = "no site can grant it in the window"),
))]
async fn reserve(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: BrokerReservationRequest = body(&bytes)?;
    Ok((StatusCode::CREATED, Json(app.service.reserve(&who.0, req).await?)).into_response())
}

/// The caller's reservations.
#[utoipa::path(get, path = "/v1/reservations", tag = "reservations", responses(
    (status = 200, body = Vec<BrokerReservation>),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn list_reservations(State(app): State<App>, Extension(who): Extension<Identity>) -> Result<Response, ApiError> {
    Ok(Json(app.service.reservations(&who.0).await?).into_response())
}

/// One of the caller's reservations.
#[utoipa::path(get, path = "/v1/reservations/{id}", tag = "reservations", params(("id" = String, Path, description = "the reservation's id at the broker")), responses(
    (status = 200, body = BrokerReservation),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such reservation of the caller's"),
))]
async fn show_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.reservation(&who.0, &id).await?).into_response())
}

/// Cancels one of the caller's reservations at its site.
#[utoipa::path(delete, path = "/v1/reservations/{id}", tag = "reservations", params(("id" = String, Path, description = "the reservation's id at the broker")), responses(
    (status = 200, body = BrokerReservation),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such reservation of the caller's"),
    (status = 409, body = ErrorBody, description = "a job runs in it"),
))]
async fn cancel_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.cancel_reservation(&who.0, &id).await?).into_response())
}

/// 201 with the admitted workflow's plan, or 409 with why not and the
/// earliest finish on offer.
/// Admits a workflow against its deadline: every task reserved at a site
/// and every transfer on the network, or nothing (409 with the reason and
/// the earliest finish on offer).
#[utoipa::path(post, path = "/v1/workflows", tag = "workflows", request_body = WorkflowRequest, responses(
    (status = 201, body = WorkflowView),
    (status = 409, body = WorkflowRefused, description = "not admitted"),
    (status = 400, body = ErrorBody, description = "the workflow is wrong; the message names the field or task"),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn submit_workflow(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: WorkflowRequest = body(&bytes)?;
    Ok(match app.service.submit_workflow(&who.0, req).await? {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(rejection) => (
            StatusCode::CONFLICT,
            Json(WorkflowRefused {
                error: rejection.to_string(),
                rejection,
            }),
        )
            .into_response(),
    })
}

/// The caller's workflows.
#[utoipa::path(get, path = "/v1/workflows", tag = "workflows", responses(
    (status = 200, body = Vec<WorkflowView>),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn list_workflows(State(app): State<App>, Extension(who): Extension<Identity>) -> Result<Response, ApiError> {
    Ok(Json(app.service.workflows(&who.0).await?).into_response())
}

/// One of the caller's workflows, with each task's reservation and state.
#[utoipa::path(get, path = "/v1/workflows/{id}", tag = "workflows", params(("id" = String, Path, description = "the workflow's id")), responses(
    (status = 200, body = WorkflowView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such workflow of the caller's"),
))]
async fn show_workflow(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.workflow(&who.0, &id).await?).into_response())
}

/// Cancels a workflow: its tasks, and every reservation left.
#[utoipa::path(delete, path = "/v1/workflows/{id}", tag = "workflows", params(("id" = String, Path, description = "the workflow's id")), responses(
    (status = 200, body = WorkflowView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such workflow of the caller's"),
))]
async fn cancel_workflow(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.cancel_workflow(&who.0, &id).await?).into_response())
}

/// `GET /v1/jobs`: a page of the caller's jobs, newest first unless sorted.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only jobs in this state.
    state: Option<String>,
    /// Only jobs submitted at or after: RFC 3339 or seconds since the epoch.
    since: Option<String>,
    /// The last job of the page before.
    before: Option<String>,
    /// At most this many jobs (1-10,000; 1,000 by default).
    limit: Option<usize>,
    /// The order: `submitted`, `started` or `ended`, oldest first, or
    /// newest first after a `-` (`-ended`); `-submitted` by default. A job
    /// not started (or not ended) comes before every start (or end).
    sort: Option<String>,
}

/// Jobs in a page when the caller does not say.
const PAGE: usize = 1000;
/// The most jobs in a page.
const MAX_PAGE: usize = 10_000;

/// A page of the caller's jobs, newest first or in the order asked for; a
/// full page answers with a `Link` header (`rel="next"`) to the next.
#[utoipa::path(get, path = "/v1/jobs", tag = "jobs", params(ListQuery), responses(
    (status = 200, body = Vec<BrokerJob>),
    (status = 400, body = ErrorBody, description = "a parameter is wrong; the message names it"),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn list(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let bad = |what: String| ApiError::from(ServiceError::BadRequest(what));
    let state = match q.state.as_deref() {
        Some(s) => Some(s.parse().map_err(|e: String| bad(format!("state: {e}")))?),
        None => None,
    };
    let since = match q.since.as_deref() {
        Some(s) => Some(match s.parse::<i64>() {
            Ok(t) => brokk_model::Time(t),
            Err(_) => brokk_model::Time::parse(s)
                .map_err(|_| bad(format!("since: `{s}` is neither RFC 3339 nor seconds since the epoch")))?,
        }),
        None => None,
    };
    let limit = q.limit.unwrap_or(PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(bad(format!("limit: {limit} is not between 1 and {MAX_PAGE}")));
    }
    let sort = match q.sort.as_deref() {
        Some(s) => s.parse().map_err(|e: String| bad(format!("sort: {e}")))?,
        None => crate::db::JobSort::default(),
    };
    let page = crate::db::JobPage {
        state,
        since,
        before: q.before.clone(),
        limit,
        sort,
    };
    let (jobs, more) = app.service.jobs(&who.0, &page).await?;
    let mut r = Json(&jobs).into_response();
    if let (true, Some(last)) = (more, jobs.last()) {
        // The next page, as RFC 8288 links it.
        let mut next = reqwest::Url::parse("http://broker/v1/jobs").expect("a fixed URL");
        {
            let mut pairs = next.query_pairs_mut();
            if let Some(s) = &q.state {
                pairs.append_pair("state", s);
            }
            if let Some(s) = &q.since {
                pairs.append_pair("since", s);
            }
            if let Some(s) = &q.sort {
                pairs.append_pair("sort", s);
            }
            pairs.append_pair("before", &last.id);
            pairs.append_pair("limit", &limit.to_string());
        }
        let link = format!("<{}?{}>; rel=\"next\"", next.path(), next.query().unwrap_or_default());
        if let Ok(v) = header::HeaderValue::from_str(&link) {
            r.headers_mut().insert(header::LINK, v);
        }
    }
    Ok(r)
}

/// One of the caller's jobs, with its history.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = String, Path, description = "the job's id at the broker")), responses(
    (status = 200, body = BrokerJob),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
))]
async fn show(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.job(&who.0, &id).await?).into_response())
}

/// Cancels one of the caller's jobs, at its site too.
#[utoipa::path(delete, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = String, Path, description = "the job's id at the broker")), responses(
    (status = 200, body = BrokerJob),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
))]
async fn cancel(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.cancel(&who.0, &id).await?).into_response())
}

/// A file of the job's (an output, stdout, stderr), fetched from its site:
/// whole, or the byte range a `Range` header asks for.
#[utoipa::path(get, path = "/v1/jobs/{id}/files/{*name}", tag = "jobs", params(
    ("id" = String, Path, description = "the job's id at the broker"),
    ("name" = String, Path, description = "the file's path in the job's directory"),
    ("Range" = Option<String>, Header, description = "`bytes=FIRST-LAST`, `bytes=FIRST-` or `bytes=-COUNT`"),
), responses(
    (status = 200, content_type = "application/octet-stream", body = String, description = "the file"),
    (status = 206, content_type = "application/octet-stream", body = String, description = "the range asked for"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's, or no such file"),
    (status = 503, body = ErrorBody, description = "the job's site does not answer"),
))]
async fn file(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path((id, name)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let file = app.service.file(&who.0, &id, &name, range).await?;
    let stream = futures_util::stream::unfold(
        file.chunks,
        |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) },
    );
    let mut resp = Response::new(axum::body::Body::from_stream(stream));
    if file.head.partial {
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, header::HeaderValue::from_static("bytes"));
    if let Some(n) = file.head.length {
        h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(n));
    }
    if let Some(v) = file
        .head
        .content_range
        .and_then(|r| header::HeaderValue::from_str(&r).ok())
    {
        h.insert(header::CONTENT_RANGE, v);
    }
    Ok(resp)
}

/// Stores a file for jobs' input under its SHA-256, which must be its name;
/// a submission names it in `uploads`.
#[utoipa::path(put, path = "/v1/uploads/{sha}", tag = "uploads", params(("sha" = String, Path, description = "the file's SHA-256, lowercase hexadecimal")),
    request_body(content = String, content_type = "application/octet-stream", description = "the file's bytes"),
    responses(
    (status = 201, body = UploadView),
    (status = 400, body = ErrorBody, description = "the bytes' SHA-256 is not the name"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 413, body = ErrorBody, description = "over the size limit or the caller's quota"),
))]
async fn put_upload(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(sha): Path<String>,
    body: axum::body::Body,
) -> Response {
    brokk_site::uploads::put_response(&app.service.uploads, &who.0, &sha, body).await
}

/// Whether the caller's store holds this file, and its size.
#[utoipa::path(get, path = "/v1/uploads/{sha}", tag = "uploads", params(("sha" = String, Path, description = "the file's SHA-256, lowercase hexadecimal")), responses(
    (status = 200, body = UploadView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "not held"),
))]
async fn upload_info(State(app): State<App>, Extension(who): Extension<Identity>, Path(sha): Path<String>) -> Response {
    brokk_site::uploads::info_response(&app.service.uploads, &who.0, &sha)
}

/// `GET /v1/me`: who the caller is and what their uploads hold against the quota.
/// Who the token is, and what its upload store holds.
#[utoipa::path(get, path = "/v1/me", tag = "users", responses(
    (status = 200, body = Me),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn me(State(app): State<App>, Extension(who): Extension<Identity>) -> Response {
    let store = app.service.uploads.clone();
    let owner = who.0.to_string();
    let used = tokio::task::spawn_blocking(move || store.usage(&owner))
        .await
        .unwrap_or_default();
    let quota = app.service.uploads.quota();
    Json(Me {
        identity: who.0.to_string(),
        uploads: UploadUsage {
            bytes: used.bytes,
            files: used.files,
            quota_bytes: quota.bytes,
            quota_files: quota.files,
        },
    })
    .into_response()
}

/// Keeps a job from starting until it is released: one not yet at a site
/// is not dispatched; one waiting at a site is held there, giving its slot
/// back (as Slurm's `scontrol uhold`).
#[utoipa::path(post, path = "/v1/jobs/{id}/hold", tag = "jobs", params(("id" = String, Path, description = "the job's id at the broker")), responses(
    (status = 200, body = BrokerJob),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
    (status = 409, body = ErrorBody, description = "the job has started or ended, is a workflow's task or a co-allocation's part at a site, or its site cannot hold it"),
    (status = 503, body = ErrorBody, description = "the job's site does not answer"),
))]
async fn hold(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.hold(&who.0, &id).await?).into_response())
}

/// Sends an ended job (finished, failed or cancelled) again with the same
/// id, decided afresh, as Slurm's `scontrol requeue`; its earlier run stays
/// in its history.
#[utoipa::path(post, path = "/v1/jobs/{id}/requeue", tag = "jobs", params(("id" = String, Path, description = "the job's id at the broker")), responses(
    (status = 200, body = BrokerJob),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
    (status = 409, body = ErrorBody, description = "the job has not ended, is a workflow's task or a co-allocation's part, or the caller has as many unfinished jobs as it may"),
))]
async fn requeue(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.requeue(&who.0, &id).await?).into_response())
}

/// Lets a held job go: dispatched, or at its site placed again as an
/// arrival is.
#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "jobs", params(("id" = String, Path, description = "the job's id at the broker")), responses(
    (status = 200, body = BrokerJob),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
    (status = 409, body = ErrorBody, description = "the job is not held"),
    (status = 503, body = ErrorBody, description = "the job's site does not answer"),
))]
async fn release(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.release(&who.0, &id).await?).into_response())
}

/// `GET /v1/events`: the caller's jobs as they change, as server-sent events
/// (`event: job`, the job as JSON); `event: resync` when this reader fell
/// behind and should read the list again.
/// Server-sent events: `job` with the job as JSON each time one of the
/// caller's changes; `resync` when the reader fell behind.
#[utoipa::path(get, path = "/v1/events", tag = "jobs", responses(
    (status = 200, content_type = "text/event-stream", body = String, description = "the event stream"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 429, body = ErrorBody, description = "the caller has as many streams open as it may"),
))]
async fn events(State(app): State<App>, Extension(who): Extension<Identity>) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let most = app.access.event_streams;
    let Some(turn) = StreamTurn::take(&app, &who.0, most) else {
        return ApiError(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{} has {most} event streams open, the most one user may ([limits] event_streams); close one first",
                who.0
            ),
        )
        .into_response();
    };
    let rx = app.service.db.subscribe();
    let stream = futures_util::stream::unfold((rx, who, turn), |(mut rx, who, turn)| async move {
        loop {
            let event = match rx.recv().await {
                Ok(j) if *j.owner == *who.0 => Event::default().event("job").json_data(&j).ok()?,
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    Event::default().event("resync").data(n.to_string())
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            };
            return Some((Ok::<_, std::convert::Infallible>(event), (rx, who, turn)));
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

/// What each site reports: its information, or why there is none.
#[utoipa::path(get, path = "/v1/resources", tag = "sites", responses(
    (status = 200, body = Vec<Resource>),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn resources(State(app): State<App>) -> Response {
    let unanswered = |name: String, error: String| {
        Resource::Unanswered(Unanswered {
            name,
            available: false,
            error,
        })
    };
    let mut all: Vec<Resource> = app
        .service
        .resources()
        .await
        .into_iter()
        .zip(app.service.sites().iter())
        .map(|(r, site)| match r {
            Ok(info) => Resource::Site(Box::new(info)),
            // A site that did not answer is named, with why.
            Err(e) => unanswered(site.name.clone(), e),
        })
        .collect();
    // And what discovery found but could not reach.
    let unreachable = app.service.unreachable.lock().map(|u| u.clone()).unwrap_or_default();
    all.extend(unreachable.into_iter().map(|(name, why)| unanswered(name, why)));
    Json(all).into_response()
}

/// The broker's figures in Prometheus's text format (open, as `/healthz`:
/// counts only, nobody's jobs).
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()), responses(
    (status = 200, content_type = "text/plain", body = String, description = "the text exposition, version 0.0.4"),
))]
async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    use brokk_site::metrics::family;
    let c = &app.service.counters;
    let mut out = String::new();
    family(&mut out, "brokk_jobs", "gauge", "Jobs stored, by state.");
    for (state, n) in app.service.db.count_by_state() {
        let _ = writeln!(out, "brokk_jobs{{state=\"{state}\"}} {n}");
    }
    // The broker core's own: the jobs it holds, and those waiting for a decision.
    let (held, waiting) = app.service.broker.held_and_waiting();
    // What the core asked of the sites, each with a reply, and how often
    // a job started later than it predicted ([AB-avail]).
    let (requests, violations, refused) = app.service.broker.requests_and_violations();
    let (hits, misses) = app.service.info.hits_and_misses();
    let load = |v: &std::sync::atomic::AtomicU64| v.load(Ordering::Relaxed);
    for (name, kind, help, v) in [
        ("brokk_core_jobs", "gauge", "Jobs the broker core holds.", held as u64),
        (
            "brokk_core_jobs_waiting",
            "gauge",
            "Jobs waiting for a brokering decision.",
            waiting as u64,
        ),
        (
            "brokk_start_violations_total",
            "counter",
            "Jobs that started later than their site's published availability promised.",
            violations,
        ),
        (
            "brokk_slot_refusals_total",
            "counter",
            "Published slots a site refused when the broker claimed them.",
            refused,
        ),
        (
            "brokk_jobs_accepted_total",
            "counter",
            "Jobs accepted from users.",
            load(&c.accepted),
        ),
        (
            "brokk_decisions_total",
            "counter",
            "Brokering decisions made.",
            load(&c.decisions),
        ),
        (
            "brokk_jobs_undispatchable_total",
            "counter",
            "Jobs no site took.",
            load(&c.undispatchable),
        ),
        (
            "brokk_site_errors_total",
            "counter",
            "Calls to sites that failed.",
            load(&c.site_errors),
        ),
        (
            "brokk_info_pushes_total",
            "counter",
            "Information pushes the sites made.",
            load(&c.info_pushes),
        ),
        (
            "brokk_info_cache_hits_total",
            "counter",
            "Looks at a site's information, before a decision, that found it fresh.",
            hits,
        ),
        (
            "brokk_info_cache_misses_total",
            "counter",
            "Looks at a site's information, before a decision, that asked the site again.",
            misses,
        ),
    ] {
        family(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    }
    family(
        &mut out,
        "brokk_site_requests_total",
        "counter",
        "Requests the broker core made of its sites, by kind.",
    );
    for (kind, n) in [
        ("info", requests.info),
        ("submit", requests.submit),
        ("reserve", requests.reserve),
        ("release", requests.release),
        ("other", requests.other),
    ] {
        let _ = writeln!(out, "brokk_site_requests_total{{kind=\"{kind}\"}} {n}");
    }
    family(
        &mut out,
        "brokk_delegations_total",
        "counter",
        "Delegations between brokers, by kind.",
    );
    for (kind, n) in c.delegations.counts() {
        let _ = writeln!(out, "brokk_delegations_total{{kind=\"{kind}\"}} {n}");
    }
    app.service.per_site.write(&mut out);
    for (name, help, h) in [
        (
            "brokk_submit_duration_seconds",
            "Time to answer a submission.",
            &c.submit_latency,
        ),
        (
            "brokk_decision_duration_seconds",
            "Time the broker core took per brokering decision.",
            &c.decision_latency,
        ),
    ] {
        family(&mut out, name, "histogram", help);
        h.lock()
            .map(|h| h.clone())
            .unwrap_or_default()
            .write(&mut out, name, "");
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}

/// Ready: 200 when the broker can take and place work, 503 with what is
/// wrong otherwise (open, as `/healthz`: no one's jobs).
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()), responses(
    (status = 200, body = crate::service::Readiness, description = "ready"),
    (status = 503, body = crate::service::Readiness, description = "not ready: each check says what it found"),
))]
async fn readyz(State(app): State<App>) -> Response {
    let r = app.service.readiness().await;
    let status = match r.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(r)).into_response()
}

/// Alive: answers while the process serves (a standby too).
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()), responses(
    (status = 200, content_type = "text/plain", body = String, description = "`ok`"),
))]
async fn healthz() -> &'static str {
    "ok\n"
}

async fn not_found() -> ApiError {
    ApiError(StatusCode::NOT_FOUND, "no such endpoint".into())
}

/// The broker's document: the title and the token scheme; the paths and
/// schemas come from the handlers as the router is built.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "Brokk broker service", description = "Jobs in any supported job description language, brokered \
        over the service's sites; reservations, co-allocations and workflows. Times are RFC 3339 UTC, durations whole \
        seconds. /v1 needs `Authorization: Bearer TOKEN`; /site/v1 is the site API for the brokers this one serves \
        as a site (`delegates`)."),
    security(("bearer" = [])),
    modifiers(&Bearer),
)]
struct BrokerApi;

/// The router: `/healthz`, `/readyz`, `/metrics`, `/openapi.json` and the
/// dashboard are open, `/v1` needs a token, `/site/v1` a delegate's.
pub fn router(service: Service, access: Access, max_body: usize) -> Router {
    let app = App {
        service,
        access: Arc::new(access),
        streams: Arc::default(),
    };
    let v1 = OpenApiRouter::new()
        .routes(routes!(list, submit))
        .routes(routes!(check))
        .routes(routes!(show, cancel))
        .routes(routes!(file))
        .routes(routes!(hold))
        .routes(routes!(release))
        .routes(routes!(requeue))
        .routes(routes!(upload_info, put_upload))
        .routes(routes!(resources))
        .routes(routes!(events))
        .routes(routes!(me))
        .routes(routes!(coallocate))
        .routes(routes!(list_reservations, reserve))
        .routes(routes!(show_reservation, cancel_reservation))
        .routes(routes!(list_workflows, submit_workflow))
        .routes(routes!(show_workflow, cancel_workflow))
        .route_layer(middleware::from_fn_with_state(app.clone(), auth));
    let (router, doc) = OpenApiRouter::with_openapi(BrokerApi::openapi())
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .merge(v1)
        .merge(site::router(app.clone()))
        .split_for_parts();
    let doc = brokk_proto::openapi::served(doc);
    router
        .route(
            "/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], doc) }),
        )
        .merge(crate::dashboard::router())
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(app)
}
