//! The site API over HTTP (axum): JSON bodies, bearer tokens mapped to
//! identities, errors as `{"error": ...}` with their status codes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use brokk_core::{Change, Reply, Request, ReservationId};
use brokk_model::Job;
use brokk_proto::wire::{Created, ErrorBody, Granted, Never, ProbeResponse, Rejected, ReservationRequest};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use brokk_core::{CoreError, JobId};

use crate::agent::{Agent, AgentError};

/// The caller's identity, from its bearer token.
#[derive(Debug, Clone)]
struct Identity(Arc<str>);

/// An API failure with its status.
struct ApiError(StatusCode, serde_json::Value);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> ApiError {
    let body = ErrorBody { error: message.into() };
    ApiError(status, serde_json::to_value(body).unwrap_or_default())
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Refused(CoreError::BadRequest(m)) => error(StatusCode::BAD_REQUEST, m),
            AgentError::Refused(CoreError::Forbidden(_)) => error(StatusCode::FORBIDDEN, e.to_string()),
            AgentError::Refused(CoreError::NotFound(_)) => error(StatusCode::NOT_FOUND, e.to_string()),
            AgentError::Refused(CoreError::Conflict(m)) => error(StatusCode::CONFLICT, m),
            AgentError::Internal(m) => error(StatusCode::INTERNAL_SERVER_ERROR, m),
            AgentError::Unavailable(_) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            AgentError::Refused(CoreError::NotGranted(Reply::Rejected { next_start })) => ApiError(
                StatusCode::CONFLICT,
                serde_json::to_value(Rejected {
                    reply: "rejected".into(),
                    next_start,
                })
                .unwrap_or_default(),
            ),
            AgentError::Refused(CoreError::NotGranted(Reply::Never { reason })) => ApiError(
                StatusCode::UNPROCESSABLE_ENTITY,
                serde_json::to_value(Never {
                    reply: "never".into(),
                    reason,
                })
                .unwrap_or_default(),
            ),
            AgentError::Refused(CoreError::NotGranted(Reply::Granted { .. })) => {
                error(StatusCode::INTERNAL_SERVER_ERROR, "granted")
            }
        }
    }
}

/// Parses a JSON body; the error names the field at fault.
fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, ApiError> {
    brokk_proto::wire::from_json(bytes).map_err(|m| error(StatusCode::BAD_REQUEST, m))
}

fn reservation_id(text: &str) -> Result<ReservationId, ApiError> {
    text.parse()
        .map(ReservationId)
        .map_err(|_| error(StatusCode::NOT_FOUND, format!("reservation {text} not found")))
}

fn job_id(text: &str) -> Result<JobId, ApiError> {
    text.parse()
        .map_err(|_| error(StatusCode::NOT_FOUND, format!("job {text} not found")))
}

async fn auth(State(agent): State<Agent>, mut req: HttpRequest, next: Next) -> Result<Response, ApiError> {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let Some(who) = token.and_then(|t| agent.config().tokens.get(t)) else {
        return Err(error(StatusCode::UNAUTHORIZED, "a valid bearer token is required"));
    };
    req.extensions_mut().insert(Identity(Arc::from(who.as_str())));
    Ok(next.run(req).await)
}

async fn info(State(agent): State<Agent>) -> Response {
    let info = agent.info().await;
    // Unavailable sites still say who they are and why, with a 503.
    let status = if info.available {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(info)).into_response()
}

/// `GET /v1/info/stream`'s query, read field by field so that a bad value
/// is refused naming its field.
#[derive(Deserialize)]
struct StreamQuery {
    every: Option<String>,
    on_change: Option<String>,
}

/// How often a subscription looks for a change of the site's information.
const CHANGE_CHECK: std::time::Duration = std::time::Duration::from_millis(250);

/// The least time between two pushes a change makes: a burst of changes
/// is one push.
const CHANGE_GAP: std::time::Duration = std::time::Duration::from_secs(1);

/// `GET /v1/info/stream?every=SECONDS&on_change=BOOL`: the site's
/// information (`/v1/info`'s body) pushed as server-sent `info` events at
/// once, then at least every `every` seconds (default 60) and, unless
/// `on_change=false`, within a second of any change of what it says (a
/// job's, a reservation's): [AB-avail]'s publication to a gateway, which
/// then need not ask. At most [`crate::agent::MAX_SUBSCRIPTIONS`] are
/// open at once (503 beyond).
async fn info_stream(State(agent): State<Agent>, Query(q): Query<StreamQuery>) -> Result<Response, ApiError> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let bad = |field: &str, e: String| error(StatusCode::BAD_REQUEST, format!("{field}: {e}"));
    let every = match q.every.as_deref() {
        None => brokk_model::Duration(60),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) => brokk_model::Duration(n),
            Err(_) => brokk_model::Duration::parse_human(v).map_err(|e| bad("every", e))?,
        },
    };
    if every.0 < 1 {
        return Err(bad("every", format!("at least a second, not {} s", every.0)));
    }
    let on_change = match q.on_change.as_deref() {
        None | Some("true") => true,
        Some("false") => false,
        Some(v) => return Err(bad("on_change", format!("`{v}` is neither true nor false"))),
    };
    let permit = agent.subscription().ok_or_else(|| {
        error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} subscriptions are open already", crate::agent::MAX_SUBSCRIPTIONS),
        )
    })?;
    let every = std::time::Duration::from_secs(every.0.unsigned_abs());
    // (agent, its subscription, when and at which version it last pushed)
    let first = (agent, permit, None::<(tokio::time::Instant, u64)>);
    let events = futures_util::stream::unfold(first, move |(agent, permit, last)| async move {
        if let Some((at, seen)) = last {
            loop {
                tokio::time::sleep(CHANGE_CHECK).await;
                let due = at.elapsed() >= every;
                let changed = on_change && at.elapsed() >= CHANGE_GAP && agent.published_version().await != seen;
                if due || changed {
                    break;
                }
            }
        }
        let version = agent.published_version().await;
        let info = agent.info().await;
        let event = Event::default().event("info").json_data(info);
        Some((event, (agent, permit, Some((tokio::time::Instant::now(), version)))))
    });
    let keep_alive = KeepAlive::new().interval(std::time::Duration::from_secs(10));
    Ok(Sse::new(events).keep_alive(keep_alive).into_response())
}

/// `GET /v1/slots`'s query, read field by field so that a bad value is
/// refused naming its field.
#[derive(Deserialize)]
struct SlotsQuery {
    from: Option<String>,
    to: Option<String>,
    min_amount: Option<String>,
    min_duration: Option<String>,
}

async fn slots(State(agent): State<Agent>, Query(q): Query<SlotsQuery>) -> Result<Response, ApiError> {
    let bad = |field: &str, e: String| error(StatusCode::BAD_REQUEST, format!("{field}: {e}"));
    let time = |field: &str, v: &Option<String>| {
        v.as_deref()
            .map(|t| t.parse::<brokk_model::Time>().map_err(|e| bad(field, e.to_string())))
            .transpose()
    };
    let (from, to) = (time("from", &q.from)?, time("to", &q.to)?);
    let min_amount = match q.min_amount.as_deref() {
        None => 1,
        Some(v) => v
            .trim()
            .parse::<i64>()
            .map_err(|_| bad("min_amount", format!("`{v}` is not a whole number")))?,
    };
    let min_duration = match q.min_duration.as_deref() {
        None => brokk_model::Duration(0),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) => brokk_model::Duration(n),
            Err(_) => brokk_model::Duration::parse_human(v).map_err(|e| bad("min_duration", e))?,
        },
    };
    let a = agent.slots(from, to, min_amount, min_duration).await?;
    Ok(Json(a).into_response())
}

#[derive(Deserialize)]
struct ProbeQuery {
    k: Option<usize>,
}

async fn probe(State(agent): State<Agent>, Query(q): Query<ProbeQuery>, bytes: Bytes) -> Result<Response, ApiError> {
    let req: Request = body(&bytes)?;
    let candidates = agent.probe(&req, q.k.unwrap_or(3)).await?;
    Ok(Json(ProbeResponse { candidates }).into_response())
}

async fn reserve(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: ReservationRequest = body(&bytes)?;
    let r = agent.reserve(&who.0, &req).await?;
    let granted = Granted {
        id: r.id,
        start: r.start,
        state: r.state,
    };
    Ok((StatusCode::CREATED, Json(granted)).into_response())
}

async fn get_reservation(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.reservation(&who.0, reservation_id(&id)?).await?).into_response())
}

async fn modify(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let change: Change = body(&bytes)?;
    Ok(Json(agent.modify(&who.0, reservation_id(&id)?, change).await?).into_response())
}

async fn commit(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.commit(&who.0, reservation_id(&id)?).await?).into_response())
}

async fn cancel(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    agent.cancel(&who.0, reservation_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn submit(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let job: Job = body(&bytes)?;
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let on_behalf = headers
        .get("on-behalf-of")
        .map(|v| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| error(StatusCode::BAD_REQUEST, "On-Behalf-Of: not text"))
        })
        .transpose()?;
    let explicit_commit = headers
        .get("reservation-commit")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"explicit"));
    // A broker's reservation made for this one job ends with it.
    let release_with_job = headers
        .get("reservation-release")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"with-job"));
    let (id, new) = agent
        .submit(&who.0, job, key, on_behalf, (explicit_commit, release_with_job))
        .await?;
    if new {
        tokio::spawn(crate::runner::run(agent.clone(), id, false));
    }
    // A repeated idempotency key answers 200 with the job it made before.
    let status = if new { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(Created { id: id.to_string() })).into_response())
}

async fn get_job(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.job(&who.0, job_id(&id)?).await?).into_response())
}

#[derive(Deserialize)]
struct ChangesQuery {
    #[serde(default)]
    epoch: u64,
    #[serde(default)]
    after: u64,
    limit: Option<usize>,
}

async fn changes(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Query(q): Query<ChangesQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    Ok(Json(agent.changes(&who.0, q.epoch, q.after, limit).await?).into_response())
}

async fn job_by_key(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.job_by_key(&who.0, &key).await?).into_response())
}

async fn cancel_job(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.cancel_job(&who.0, job_id(&id)?).await?).into_response())
}

/// The byte range a `Range: bytes=...` header asks of a file of `len`
/// bytes: `Ok(None)` for the whole file (no header, or a form this endpoint
/// does not serve, such as several ranges), `Err` when it cannot be met.
fn byte_range(headers: &HeaderMap, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
    else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (first, last) = match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
        (Ok(a), Ok(b)) if a <= b => (a, b.min(len.saturating_sub(1))),
        (Ok(a), Err(_)) if b.trim().is_empty() => (a, len.saturating_sub(1)),
        (Err(_), Ok(n)) if a.trim().is_empty() && n > 0 => (len.saturating_sub(n), len.saturating_sub(1)),
        _ => return Err(()),
    };
    if first >= len || first > last {
        return Err(());
    }
    Ok(Some((first, last)))
}

async fn file(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    use std::io::Seek;
    use tokio::io::AsyncReadExt;
    let mut f = agent.file(&who.0, job_id(&id)?, &name).await?;
    let len = f
        .metadata()
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .len();
    let range = byte_range(&headers, len)
        .map_err(|()| error(StatusCode::RANGE_NOT_SATISFIABLE, format!("the file has {len} bytes")))?;
    let (status, first, count) = match range {
        Some((a, b)) => (StatusCode::PARTIAL_CONTENT, a, b - a + 1),
        None => (StatusCode::OK, 0, len),
    };
    f.seek(std::io::SeekFrom::Start(first))
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    // Streamed in chunks: a large output never sits whole in the agent's memory.
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(f).take(count));
    let mut resp = Response::new(axum::body::Body::from_stream(stream));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(count));
    h.insert(header::ACCEPT_RANGES, header::HeaderValue::from_static("bytes"));
    if range.is_some() {
        if let Ok(v) = header::HeaderValue::from_str(&format!("bytes {first}-{}/{len}", first + count - 1)) {
            h.insert(header::CONTENT_RANGE, v);
        }
    }
    Ok(resp)
}

async fn put_upload(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(sha): Path<String>,
    body: axum::body::Body,
) -> Response {
    crate::uploads::put_response(agent.uploads(), &who.0, &sha, body).await
}

async fn upload_info(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(sha): Path<String>,
) -> Response {
    crate::uploads::info_response(agent.uploads(), &who.0, &sha)
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when the site can take work, 503 with why not (its
/// resource manager does not answer), as load balancers ask.
async fn readyz(State(agent): State<Agent>) -> Response {
    match agent.not_ready() {
        None => Json(serde_json::json!({"ready": true})).into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({"ready": false, "why": why})),
        )
            .into_response(),
    }
}

async fn openapi() -> Response {
    Json(crate::openapi::document()).into_response()
}

async fn not_found() -> ApiError {
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

/// `GET /metrics`: the site's figures for Prometheus (open, as `/healthz`:
/// counts only, nobody's jobs).
async fn metrics(State(agent): State<Agent>) -> Response {
    let body = agent.metrics().await;
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Counts every call by the route it matched (`unmatched` for none), its
/// method and status, with its latency to the answer's head.
async fn measure(State(agent): State<Agent>, req: axum::extract::Request, next: middleware::Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().clone();
    let t = std::time::Instant::now();
    let resp = next.run(req).await;
    agent
        .api_metrics()
        .observe(method.as_str(), &route, resp.status().as_u16(), t.elapsed());
    resp
}

/// The router: `/healthz`, `/openapi.json` and `/metrics` are open, `/v1`
/// needs a token.
pub fn router(agent: Agent) -> Router {
    let limit = agent.config().max_body_bytes;
    let v1 = Router::new()
        .route("/v1/info", get(info))
        .route("/v1/info/stream", get(info_stream))
        .route("/v1/probe", post(probe))
        .route("/v1/slots", get(slots))
        .route("/v1/reservations", post(reserve))
        .route(
            "/v1/reservations/{id}",
            get(get_reservation).patch(modify).delete(cancel),
        )
        .route("/v1/reservations/{id}/commit", post(commit))
        .route("/v1/jobs", post(submit))
        .route("/v1/jobs/{id}", get(get_job).delete(cancel_job))
        .route("/v1/jobs/by-key/{key}", get(job_by_key))
        .route("/v1/jobs/changes", get(changes))
        .route("/v1/jobs/{id}/files/{*name}", get(file))
        .route("/v1/uploads/{sha}", get(upload_info).put(put_upload))
        .route_layer(middleware::from_fn_with_state(agent.clone(), auth));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi))
        .route("/metrics", get(metrics))
        .merge(v1)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(agent.clone(), measure))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(agent)
}
