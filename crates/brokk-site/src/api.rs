//! The site API over HTTP (axum): JSON bodies, bearer tokens mapped to
//! identities, errors as `{"error": ...}` with their status codes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use brokk_core::{Change, Reply, Request, ReservationId};
use brokk_model::Job;
use brokk_proto::openapi::Bearer;
use brokk_proto::wire::{
    ChangeFeed, Created, ErrorBody, Granted, InfoView, JobView, Never, ProbeResponse, Readiness, Rejected,
    ReservationRequest, ReservationView, UploadView,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa::OpenApi as _;
use utoipa_axum::{router::OpenApiRouter, routes};

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

/// The site's information: its size, load, benchmarks, the resource
/// manager's cluster and the free capacity it publishes.
#[utoipa::path(get, path = "/v1/info", tag = "information", responses(
    (status = 200, body = InfoView),
    (status = 503, body = InfoView, description = "the resource manager does not answer: `available` is false and `unavailable_reason` says why"),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
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
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct StreamQuery {
    /// Seconds (or a duration such as `5m`) between pushes at most; 60 by default.
    every: Option<String>,
    /// `false` to push on the period only; `true` by default.
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
#[utoipa::path(get, path = "/v1/info/stream", tag = "information", params(StreamQuery), responses(
    (status = 200, content_type = "text/event-stream", body = String, description = "`info` events, each `/v1/info`'s body"),
    (status = 400, body = ErrorBody, description = "a parameter is wrong; the message names it"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 503, body = ErrorBody, description = "too many subscriptions are open"),
))]
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
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SlotsQuery {
    /// The first instant asked about (RFC 3339); now by default.
    from: Option<String>,
    /// The end of the span asked about (RFC 3339); a day after `from` by default.
    to: Option<String>,
    /// Only runs of at least this many free processors; 1 by default.
    min_amount: Option<String>,
    /// Only runs lasting at least this many seconds (or a duration such as `2h`).
    min_duration: Option<String>,
}

/// The free capacity the site publishes over a span ([AB-avail]): ranges of
/// free processors, computed at `computed_at`.
#[utoipa::path(get, path = "/v1/slots", tag = "information", params(SlotsQuery), responses(
    (status = 200, body = brokk_model::Availability),
    (status = 400, body = ErrorBody, description = "a parameter is wrong; the message names it"),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
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

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ProbeQuery {
    /// How many candidates at most; 3 by default.
    k: Option<usize>,
}

/// Non-binding offers for a request, each rated by the fragmentation it
/// would leave (lower is better).
#[utoipa::path(post, path = "/v1/probe", tag = "reservations", params(ProbeQuery), request_body = brokk_core::Request, responses(
    (status = 200, body = ProbeResponse),
    (status = 400, body = ErrorBody, description = "the request is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 503, body = ErrorBody, description = "the resource manager does not answer"),
))]
async fn probe(State(agent): State<Agent>, Query(q): Query<ProbeQuery>, bytes: Bytes) -> Result<Response, ApiError> {
    let req: Request = body(&bytes)?;
    let candidates = agent.probe(&req, q.k.unwrap_or(3)).await?;
    Ok(Json(ProbeResponse { candidates }).into_response())
}

/// An advance reservation somewhere in the window, committed at once or held
/// preliminary for `hold` seconds.
#[utoipa::path(post, path = "/v1/reservations", tag = "reservations", request_body = ReservationRequest, responses(
    (status = 201, body = Granted),
    (status = 409, body = Rejected, description = "no room in the window now; `next_start` is the next start that could be granted"),
    (status = 422, body = Never, description = "the request can never be granted here"),
    (status = 400, body = ErrorBody, description = "the request is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 503, body = ErrorBody, description = "the resource manager does not answer"),
))]
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

/// One of the caller's reservations.
#[utoipa::path(get, path = "/v1/reservations/{id}", tag = "reservations", params(("id" = String, Path, description = "the reservation's number")), responses(
    (status = 200, body = ReservationView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's reservation"),
    (status = 404, body = ErrorBody, description = "no such reservation"),
))]
async fn get_reservation(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.reservation(&who.0, reservation_id(&id)?).await?).into_response())
}

/// The caller's reservations the site can no longer hold, part of it being
/// lost (a node down or drained), by start: what a broker moves elsewhere
/// ([VRM] 6). The site's information says how many there are in all.
#[utoipa::path(get, path = "/v1/reservations/endangered", tag = "reservations", responses(
    (status = 200, body = Vec<ReservationView>),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn endangered(State(agent): State<Agent>, Extension(who): Extension<Identity>) -> Response {
    Json(agent.endangered(&who.0).await).into_response()
}

/// Changes a reservation's size, length or window; what the change leaves
/// out stays as it is.
#[utoipa::path(patch, path = "/v1/reservations/{id}", tag = "reservations", params(("id" = String, Path, description = "the reservation's number")), request_body = brokk_core::Change, responses(
    (status = 200, body = ReservationView),
    (status = 400, body = ErrorBody, description = "the change is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's reservation"),
    (status = 404, body = ErrorBody, description = "no such reservation"),
    (status = 409, body = Rejected, description = "the change does not fit"),
    (status = 422, body = Never, description = "the change can never fit here"),
))]
async fn modify(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let change: Change = body(&bytes)?;
    Ok(Json(agent.modify(&who.0, reservation_id(&id)?, change).await?).into_response())
}

/// Commits a preliminary reservation, so that it no longer lapses.
#[utoipa::path(post, path = "/v1/reservations/{id}/commit", tag = "reservations", params(("id" = String, Path, description = "the reservation's number")), responses(
    (status = 200, body = ReservationView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's reservation"),
    (status = 404, body = ErrorBody, description = "no such reservation, or it lapsed"),
))]
async fn commit(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.commit(&who.0, reservation_id(&id)?).await?).into_response())
}

/// Cancels a reservation and frees what it held.
#[utoipa::path(delete, path = "/v1/reservations/{id}", tag = "reservations", params(("id" = String, Path, description = "the reservation's number")), responses(
    (status = 204, description = "cancelled"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's reservation"),
    (status = 404, body = ErrorBody, description = "no such reservation"),
    (status = 409, body = ErrorBody, description = "a job runs in it"),
))]
async fn cancel(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    agent.cancel(&who.0, reservation_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Submits a job in Brokk's canonical JSON; `reservation` claims one of the
/// caller's reservations. An `Idempotency-Key` header makes a retry return
/// the job it made before (200), `On-Behalf-Of` names the user a delegate
/// submits for.
#[utoipa::path(post, path = "/v1/jobs", tag = "jobs", request_body = brokk_model::Job, params(
    ("Idempotency-Key" = Option<String>, Header, description = "the same key again answers the job it made"),
    ("On-Behalf-Of" = Option<String>, Header, description = "the user a delegate submits for"),
    ("Reservation-Commit" = Option<String>, Header, description = "`explicit`: a held reservation the job claims is committed by the job"),
    ("Reservation-Release" = Option<String>, Header, description = "`with-job`: the reservation ends with the job"),
), responses(
    (status = 201, body = Created),
    (status = 200, body = Created, description = "the job this idempotency key made before"),
    (status = 400, body = ErrorBody, description = "the job is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the reservation or the account is not the caller's"),
    (status = 404, body = ErrorBody, description = "no such reservation"),
    (status = 409, body = ErrorBody, description = "the reservation cannot take the job"),
    (status = 413, body = ErrorBody, description = "the body is over the size limit"),
    (status = 503, body = ErrorBody, description = "the resource manager does not answer"),
))]
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

/// One of the caller's jobs.
#[utoipa::path(get, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = String, Path, description = "the job's number at the site")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's job"),
    (status = 404, body = ErrorBody, description = "no such job"),
))]
async fn get_job(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.job(&who.0, job_id(&id)?).await?).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ChangesQuery {
    /// The agent's run the caller last read (0 at first).
    #[serde(default)]
    epoch: u64,
    /// The version the caller last read (0 at first).
    #[serde(default)]
    after: u64,
    /// At most this many jobs (1-10,000; 1,000 by default).
    limit: Option<usize>,
}

/// The caller's jobs changed after version `after` of the agent's run
/// `epoch`: a broker follows many jobs with one request.
#[utoipa::path(get, path = "/v1/jobs/changes", tag = "jobs", params(ChangesQuery), responses(
    (status = 200, body = ChangeFeed),
    (status = 400, body = ErrorBody, description = "a parameter is wrong"),
    (status = 401, body = ErrorBody, description = "no valid token"),
))]
async fn changes(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Query(q): Query<ChangesQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(1000).clamp(1, 10_000);
    Ok(Json(agent.changes(&who.0, q.epoch, q.after, limit).await?).into_response())
}

/// The caller's job submitted with this `Idempotency-Key`.
#[utoipa::path(get, path = "/v1/jobs/by-key/{key}", tag = "jobs", params(("key" = String, Path, description = "the Idempotency-Key")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "no job of the caller's has this key"),
))]
async fn job_by_key(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.job_by_key(&who.0, &key).await?).into_response())
}

/// Cancels one of the caller's jobs; its processes end with it.
#[utoipa::path(delete, path = "/v1/jobs/{id}", tag = "jobs", params(("id" = String, Path, description = "the job's number at the site")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's job"),
    (status = 404, body = ErrorBody, description = "no such job"),
))]
async fn cancel_job(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.cancel_job(&who.0, job_id(&id)?).await?).into_response())
}

/// Holds one of the caller's jobs that has not started: it gives its slot
/// back and does not start until released (Slurm's `scontrol uhold`).
#[utoipa::path(post, path = "/v1/jobs/{id}/hold", tag = "jobs", params(("id" = String, Path, description = "the job's number at the site")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's job"),
    (status = 404, body = ErrorBody, description = "no such job"),
    (status = 409, body = ErrorBody, description = "it has started or ended, claims a reservation, or the resource manager cannot hold it"),
))]
async fn hold_job(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.hold_job(&who.0, job_id(&id)?).await?).into_response())
}

/// Releases one of the caller's held jobs: it is placed again as an
/// arrival is. A job not held is answered as it is.
#[utoipa::path(post, path = "/v1/jobs/{id}/release", tag = "jobs", params(("id" = String, Path, description = "the job's number at the site")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's job"),
    (status = 404, body = ErrorBody, description = "no such job"),
    (status = 409, body = ErrorBody, description = "it has ended"),
))]
async fn release_job(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(agent.release_job(&who.0, job_id(&id)?).await?).into_response())
}

/// The byte range a `Range: bytes=...` header (`header`) asks of a file of
/// `len` bytes: `Ok(None)` for the whole file (no header, or a form not
/// served here, such as several ranges), `Err` when it cannot be met. The
/// broker serves the outputs it keeps by the same rule.
#[allow(clippy::result_unit_err)]
pub fn byte_range(header: Option<&str>, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = header.and_then(|v| v.strip_prefix("bytes=")) else {
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

/// A file of the job's working directory (its outputs, stdout, stderr),
/// whole or the byte range a `Range` header asks for.
#[utoipa::path(get, path = "/v1/jobs/{id}/files/{*name}", tag = "jobs", params(
    ("id" = String, Path, description = "the job's number at the site"),
    ("name" = String, Path, description = "the file's path in the job's directory"),
    ("Range" = Option<String>, Header, description = "`bytes=FIRST-LAST`, `bytes=FIRST-` or `bytes=-COUNT`"),
), responses(
    (status = 200, content_type = "application/octet-stream", body = String, description = "the file"),
    (status = 206, content_type = "application/octet-stream", body = String, description = "the range asked for"),
    (status = 400, body = ErrorBody, description = "the name leaves the job's directory"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "another identity's job"),
    (status = 404, body = ErrorBody, description = "no such job or file"),
    (status = 416, body = ErrorBody, description = "the range is outside the file"),
))]
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
    let range = byte_range(headers.get(header::RANGE).and_then(|v| v.to_str().ok()), len)
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

/// Stores a file for jobs' input under its SHA-256, which must be its name.
#[utoipa::path(put, path = "/v1/uploads/{sha}", tag = "uploads", params(("sha" = String, Path, description = "the file's SHA-256, lowercase hexadecimal")),
    request_body(content = String, content_type = "application/octet-stream", description = "the file's bytes"),
    responses(
    (status = 201, body = UploadView),
    (status = 400, body = ErrorBody, description = "the bytes' SHA-256 is not the name"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 413, body = ErrorBody, description = "over the size limit or the caller's quota"),
))]
async fn put_upload(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(sha): Path<String>,
    body: axum::body::Body,
) -> Response {
    crate::uploads::put_response(agent.uploads(), &who.0, &sha, body).await
}

/// Whether the caller's store holds this file, and its size.
#[utoipa::path(get, path = "/v1/uploads/{sha}", tag = "uploads", params(("sha" = String, Path, description = "the file's SHA-256, lowercase hexadecimal")), responses(
    (status = 200, body = UploadView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 404, body = ErrorBody, description = "not held"),
))]
async fn upload_info(
    State(agent): State<Agent>,
    Extension(who): Extension<Identity>,
    Path(sha): Path<String>,
) -> Response {
    crate::uploads::info_response(agent.uploads(), &who.0, &sha)
}

/// Alive: answers while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()), responses(
    (status = 200, content_type = "text/plain", body = String, description = "`ok`"),
))]
async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready: 200 when the site can take work, 503 with why not (its resource
/// manager does not answer), as load balancers ask.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()), responses(
    (status = 200, body = Readiness, description = "ready"),
    (status = 503, body = Readiness, description = "not ready; `why` says why"),
))]
async fn readyz(State(agent): State<Agent>) -> Response {
    let why = agent.not_ready();
    let status = match why {
        None => StatusCode::OK,
        Some(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (
        status,
        Json(Readiness {
            ready: why.is_none(),
            why,
        }),
    )
        .into_response()
}

async fn not_found() -> ApiError {
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

/// The site's figures in Prometheus's text format (open, as `/healthz`:
/// counts only, nobody's jobs).
#[utoipa::path(get, path = "/metrics", tag = "operations", security(()), responses(
    (status = 200, content_type = "text/plain", body = String, description = "the text exposition, version 0.0.4"),
))]
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

/// The site API's document: the title and the token scheme; the paths and
/// schemas come from the handlers as the router is built.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(title = "Brokk site API", description = "A `brokk site` agent: information, advance reservations, jobs and \
        their files. Times are RFC 3339 UTC, durations whole seconds. Every /v1 call needs `Authorization: Bearer TOKEN`."),
    security(("bearer" = [])),
    modifiers(&Bearer),
)]
struct SiteApi;

/// The router: `/healthz`, `/readyz`, `/openapi.json` and `/metrics` are
/// open, `/v1` needs a token.
pub fn router(agent: Agent) -> Router {
    let (router, doc) = routes(agent.clone()).split_for_parts();
    let doc = brokk_proto::openapi::served(doc);
    let limit = agent.config().max_body_bytes;
    router
        .route(
            "/openapi.json",
            get(move || async move { ([(header::CONTENT_TYPE, "application/json")], doc) }),
        )
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(agent.clone(), measure))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(agent)
}

/// Every described route: each handler brings its path and description.
fn routes(agent: Agent) -> OpenApiRouter<Agent> {
    let v1 = OpenApiRouter::new()
        .routes(routes!(info))
        .routes(routes!(info_stream))
        .routes(routes!(probe))
        .routes(routes!(slots))
        .routes(routes!(reserve))
        .routes(routes!(endangered))
        .routes(routes!(get_reservation, modify, cancel))
        .routes(routes!(commit))
        .routes(routes!(submit))
        .routes(routes!(get_job, cancel_job))
        .routes(routes!(hold_job))
        .routes(routes!(release_job))
        .routes(routes!(job_by_key))
        .routes(routes!(changes))
        .routes(routes!(file))
        .routes(routes!(upload_info, put_upload))
        .route_layer(middleware::from_fn_with_state(agent, auth));
    OpenApiRouter::with_openapi(SiteApi::openapi())
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .merge(v1)
}
