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
use brokk_proto::wire::{
    BrokerReservationRequest, CoallocRequest, ErrorBody, SubmitRequest, WorkflowRefused, WorkflowRequest,
};
use serde::Deserialize;

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

async fn coallocate(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: CoallocRequest = body(&bytes)?;
    let done = app.service.coallocate(&who.0, req).await?;
    Ok((StatusCode::CREATED, Json(done)).into_response())
}

async fn reserve(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: BrokerReservationRequest = body(&bytes)?;
    Ok((StatusCode::CREATED, Json(app.service.reserve(&who.0, req).await?)).into_response())
}

async fn list_reservations(State(app): State<App>, Extension(who): Extension<Identity>) -> Result<Response, ApiError> {
    Ok(Json(app.service.reservations(&who.0).await?).into_response())
}

async fn show_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.reservation(&who.0, &id).await?).into_response())
}

async fn cancel_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.cancel_reservation(&who.0, &id).await?).into_response())
}

/// 201 with the admitted workflow's plan, or 409 with why not and the
/// earliest finish on offer.
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

async fn list_workflows(State(app): State<App>, Extension(who): Extension<Identity>) -> Result<Response, ApiError> {
    Ok(Json(app.service.workflows(&who.0).await?).into_response())
}

async fn show_workflow(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.workflow(&who.0, &id).await?).into_response())
}

async fn cancel_workflow(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.cancel_workflow(&who.0, &id).await?).into_response())
}

/// `GET /v1/jobs`: a page of the caller's jobs, newest first.
#[derive(Deserialize)]
struct ListQuery {
    state: Option<String>,
    /// RFC 3339, or seconds since the epoch.
    since: Option<String>,
    /// The last job of the page before.
    before: Option<String>,
    limit: Option<usize>,
}

/// Jobs in a page when the caller does not say.
const PAGE: usize = 1000;
/// The most jobs in a page.
const MAX_PAGE: usize = 10_000;

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
    let page = crate::db::JobPage {
        state,
        since,
        before: q.before.clone(),
        limit,
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

async fn show(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.job(&who.0, &id).await?).into_response())
}

async fn cancel(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.cancel(&who.0, &id).await?).into_response())
}

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

async fn put_upload(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(sha): Path<String>,
    body: axum::body::Body,
) -> Response {
    brokk_site::uploads::put_response(&app.service.uploads, &who.0, &sha, body).await
}

async fn upload_info(State(app): State<App>, Extension(who): Extension<Identity>, Path(sha): Path<String>) -> Response {
    brokk_site::uploads::info_response(&app.service.uploads, &who.0, &sha)
}

/// `GET /v1/me`: who the caller is and what their uploads hold against the quota.
async fn me(State(app): State<App>, Extension(who): Extension<Identity>) -> Response {
    let store = app.service.uploads.clone();
    let owner = who.0.to_string();
    let used = tokio::task::spawn_blocking(move || store.usage(&owner))
        .await
        .unwrap_or_default();
    let quota = app.service.uploads.quota();
    Json(serde_json::json!({
        "identity": &*who.0,
        "uploads": { "bytes": used.bytes, "files": used.files, "quota_bytes": quota.bytes, "quota_files": quota.files },
    }))
    .into_response()
}

async fn hold(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.hold(&who.0, &id).await?).into_response())
}

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

async fn resources(State(app): State<App>) -> Response {
    let mut all: Vec<serde_json::Value> = app
        .service
        .resources()
        .await
        .into_iter()
        .zip(app.service.sites().iter())
        .map(|(r, site)| match r {
            Ok(info) => serde_json::to_value(info).unwrap_or_default(),
            // A site that did not answer is named, with why.
            Err(e) => serde_json::json!({ "name": site.name, "available": false, "error": e }),
        })
        .collect();
    // And what discovery found but could not reach.
    let unreachable = app.service.unreachable.lock().map(|u| u.clone()).unwrap_or_default();
    all.extend(
        unreachable
            .into_iter()
            .map(|(name, why)| serde_json::json!({ "name": name, "available": false, "error": why })),
    );
    Json(all).into_response()
}

/// Prometheus text format.
async fn metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let c = &app.service.counters;
    let mut out = String::new();
    let _ = writeln!(out, "# TYPE brokk_jobs gauge");
    for (state, n) in app.service.db.count_by_state() {
        let _ = writeln!(out, "brokk_jobs{{state=\"{state}\"}} {n}");
    }
    // The broker core's own: the jobs it holds, and those waiting for a decision.
    let (held, waiting) = app.service.broker.held_and_waiting();
    let _ = writeln!(
        out,
        "# TYPE brokk_core_jobs gauge\nbrokk_core_jobs {held}\n# TYPE brokk_core_jobs_waiting gauge\nbrokk_core_jobs_waiting {waiting}"
    );
    // What the core asked of the sites, each with a reply, and how often
    // a job started later than it predicted ([AB-avail]).
    let (requests, violations, refused) = app.service.broker.requests_and_violations();
    let _ = writeln!(out, "# TYPE brokk_site_requests_total counter");
    for (kind, n) in [
        ("info", requests.info),
        ("submit", requests.submit),
        ("reserve", requests.reserve),
        ("release", requests.release),
        ("other", requests.other),
    ] {
        let _ = writeln!(out, "brokk_site_requests_total{{kind=\"{kind}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# TYPE brokk_start_violations_total counter\nbrokk_start_violations_total {violations}\n\
         # TYPE brokk_slot_refusals_total counter\nbrokk_slot_refusals_total {refused}"
    );
    for (name, v) in [
        ("brokk_jobs_accepted_total", &c.accepted),
        ("brokk_decisions_total", &c.decisions),
        ("brokk_jobs_undispatchable_total", &c.undispatchable),
        ("brokk_site_errors_total", &c.site_errors),
        ("brokk_info_pushes_total", &c.info_pushes),
    ] {
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {}", v.load(Ordering::Relaxed));
    }
    let _ = writeln!(out, "# TYPE brokk_delegations_total counter");
    for (kind, n) in c.delegations.counts() {
        let _ = writeln!(out, "brokk_delegations_total{{kind=\"{kind}\"}} {n}");
    }
    // The information cache counts its own lookups.
    let (hits, misses) = app.service.info.hits_and_misses();
    for (name, v) in [
        ("brokk_info_cache_hits_total", hits),
        ("brokk_info_cache_misses_total", misses),
    ] {
        let _ = writeln!(out, "# TYPE {name} counter\n{name} {v}");
    }
    app.service.per_site.write(&mut out);
    let _ = writeln!(out, "# TYPE brokk_submit_seconds histogram");
    let submits = c.submit_latency.lock().map(|h| h.clone()).unwrap_or_default();
    submits.write(&mut out, "brokk_submit_seconds", "");
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}

/// `GET /readyz`: 200 when the broker can take and place work, 503 with
/// what is wrong otherwise (open, as `/healthz`: no one's jobs).
async fn readyz(State(app): State<App>) -> Response {
    let r = app.service.readiness().await;
    let status = match r.ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(r)).into_response()
}

async fn not_found() -> ApiError {
    ApiError(StatusCode::NOT_FOUND, "no such endpoint".into())
}

/// The router: `/healthz` and `/metrics` are open, `/v1` needs a token,
/// `/site/v1` a delegate's.
pub fn router(service: Service, access: Access, max_body: usize) -> Router {
    let app = App {
        service,
        access: Arc::new(access),
        streams: Arc::default(),
    };
    let v1 = Router::new()
        .route("/v1/jobs", get(list).post(submit))
        .route("/v1/jobs/{id}", get(show).delete(cancel))
        .route("/v1/jobs/{id}/files/{*name}", get(file))
        .route("/v1/jobs/{id}/hold", axum::routing::post(hold))
        .route("/v1/jobs/{id}/release", axum::routing::post(release))
        .route("/v1/uploads/{sha}", get(upload_info).put(put_upload))
        .route("/v1/resources", get(resources))
        .route("/v1/events", get(events))
        .route("/v1/me", get(me))
        .route("/v1/coallocations", axum::routing::post(coallocate))
        .route("/v1/reservations", get(list_reservations).post(reserve))
        .route("/v1/workflows", get(list_workflows).post(submit_workflow))
        .route("/v1/workflows/{id}", get(show_workflow).delete(cancel_workflow))
        .route(
            "/v1/reservations/{id}",
            get(show_reservation).delete(cancel_reservation),
        )
        .route_layer(middleware::from_fn_with_state(app.clone(), auth));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(|| async { Json(crate::openapi::document()) }))
        .merge(crate::dashboard::router())
        .merge(v1)
        .merge(site::router(app.clone()))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(app)
}
