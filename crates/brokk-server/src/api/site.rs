//! The site API under `/site/v1`, for brokers above this one (see
//! `service::as_site`): the calls a broker makes of a site agent, with the
//! same paths, headers and bodies, open to the identities in `delegates`.

use axum::extract::Query;
use axum::http::HeaderMap;
use brokk_core::{Change, Reply, Request as Wanted};
use brokk_model::Job;
use brokk_proto::wire::{
    BrokerReservationState, ChangeFeed, Created, Granted, InfoView, JobView, Never, ProbeResponse, Rejected,
    ReservationRequest, ReservationState, ReservationView,
};

use super::*;
use brokk_broker::jobs::ClaimTerms;

/// Lets only delegates through.
async fn delegates_only(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if !app.access.delegates.contains(&who.0) {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!("{} is not a broker this one serves as a site (`delegates`)", who.0),
        ));
    }
    Ok(next.run(req).await)
}

/// A text header's value.
fn text_header(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::to_string)
                .map_err(|_| ApiError(StatusCode::BAD_REQUEST, format!("{name}: not text")))
        })
        .transpose()
}

/// This broker as a site: the union of its sites' information, and the
/// chain of brokers above it (`ancestors`).
#[utoipa::path(get, path = "/site/v1/info", operation_id = "site_info", tag = "as a site", responses(
    (status = 200, body = InfoView),
    (status = 503, body = InfoView, description = "none of its sites answers: `available` is false"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
))]
async fn info(State(app): State<App>) -> Response {
    let v = app.service.site_info(&app.access.name).await;
    let status = if v.available {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(v)).into_response()
}

/// A reservation id in a path.
fn reservation_id(id: &str) -> Result<u64, ApiError> {
    id.parse()
        .map_err(|_| ApiError(StatusCode::NOT_FOUND, format!("reservation {id} not found")))
}

/// A refusal as a site agent answers it: 409 with the next start, 422 why never.
fn refusal(reply: Reply) -> Response {
    match reply {
        Reply::Rejected { next_start } => (
            StatusCode::CONFLICT,
            Json(Rejected {
                reply: "rejected".into(),
                next_start,
            }),
        )
            .into_response(),
        Reply::Never { reason } => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(Never {
                reply: "never".into(),
                reason,
            }),
        )
            .into_response(),
        Reply::Granted { id, start } => (
            StatusCode::OK,
            Json(Granted {
                id: id.0,
                start,
                state: ReservationState::Committed,
            }),
        )
            .into_response(),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ProbeQuery {
    /// How many candidates at most; 3 by default.
    k: Option<usize>,
}

/// Non-binding offers for a request across this broker's sites.
#[utoipa::path(post, path = "/site/v1/probe", operation_id = "site_probe", tag = "as a site", params(ProbeQuery), request_body = Wanted, responses(
    (status = 200, body = ProbeResponse),
    (status = 400, body = ErrorBody, description = "the request is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
))]
async fn probe(State(app): State<App>, Query(q): Query<ProbeQuery>, bytes: Bytes) -> Result<Response, ApiError> {
    let req: Wanted = body(&bytes)?;
    let candidates = app.service.site_probe(req, q.k.unwrap_or(3)).await?;
    Ok(Json(ProbeResponse { candidates }).into_response())
}

/// An advance reservation at one of this broker's sites, committed at once
/// or held preliminary for `hold` seconds.
#[utoipa::path(post, path = "/site/v1/reservations", operation_id = "site_reserve", tag = "as a site", request_body = ReservationRequest, responses(
    (status = 201, body = Granted),
    (status = 409, body = Rejected, description = "no room in the window now"),
    (status = 422, body = Never, description = "the request can never be granted here"),
    (status = 400, body = ErrorBody, description = "the request is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
))]
async fn reserve(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let req: ReservationRequest = body(&bytes)?;
    Ok(match app.service.site_reserve(&who.0, req).await? {
        Ok(r) => (
            StatusCode::CREATED,
            Json(Granted {
                id: r.id.parse().unwrap_or_default(),
                start: r.start,
                state: match r.state() {
                    BrokerReservationState::Held => ReservationState::Preliminary,
                    _ => ReservationState::Committed,
                },
            }),
        )
            .into_response(),
        Err(reply) => refusal(reply),
    })
}

/// One of the caller's reservations, as a site shows it.
#[utoipa::path(get, path = "/site/v1/reservations/{id}", operation_id = "site_get_reservation", tag = "as a site", params(("id" = String, Path, description = "the reservation's number")), responses(
    (status = 200, body = ReservationView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such reservation of the caller's"),
))]
async fn get_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_reservation(&who.0, reservation_id(&id)?).await?).into_response())
}

/// Changes a reservation's size, length or window.
#[utoipa::path(patch, path = "/site/v1/reservations/{id}", operation_id = "site_modify", tag = "as a site", params(("id" = String, Path, description = "the reservation's number")), request_body = Change, responses(
    (status = 200, body = ReservationView),
    (status = 409, body = Rejected, description = "the change does not fit"),
    (status = 422, body = Never, description = "the change can never fit here"),
    (status = 400, body = ErrorBody, description = "the change is malformed; the message names the field"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such reservation of the caller's"),
))]
async fn modify(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let change: Change = body(&bytes)?;
    Ok(
        match app.service.site_modify(&who.0, reservation_id(&id)?, change).await? {
            Ok(v) => Json(v).into_response(),
            Err(reply) => refusal(reply),
        },
    )
}

/// Commits a preliminary reservation.
#[utoipa::path(post, path = "/site/v1/reservations/{id}/commit", operation_id = "site_commit", tag = "as a site", params(("id" = String, Path, description = "the reservation's number")), responses(
    (status = 200, body = ReservationView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such reservation of the caller's, or it lapsed"),
))]
async fn commit(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_commit(&who.0, reservation_id(&id)?).await?).into_response())
}

/// Cancels a reservation.
#[utoipa::path(delete, path = "/site/v1/reservations/{id}", operation_id = "site_cancel_reservation", tag = "as a site", params(("id" = String, Path, description = "the reservation's number")), responses(
    (status = 204, description = "cancelled"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such reservation of the caller's"),
    (status = 409, body = ErrorBody, description = "a job runs in it"),
))]
async fn cancel_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.service
        .cancel_reservation(&who.0, &reservation_id(&id)?.to_string())
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Takes a job in Brokk's canonical JSON from a broker above, for a user
/// (`On-Behalf-Of`) or delegated by a neighbour (`Brokk-Delegation`), and
/// brokers it over this broker's sites.
#[utoipa::path(post, path = "/site/v1/jobs", operation_id = "site_submit", tag = "as a site", request_body = Job, params(
    ("Idempotency-Key" = Option<String>, Header, description = "the same key again answers the job it made"),
    ("On-Behalf-Of" = Option<String>, Header, description = "the user the caller submits for"),
    ("Reservation-Commit" = Option<String>, Header, description = "`explicit`: a held reservation the job claims is committed by the job"),
    ("Reservation-Release" = Option<String>, Header, description = "`with-job`: the reservation ends with the job"),
    ("Brokk-Delegation" = Option<String>, Header, description = "a delegation between brokers: the path so far and the time to live"),
), responses(
    (status = 201, body = Created),
    (status = 200, body = Created, description = "the job this idempotency key made before"),
    (status = 400, body = ErrorBody, description = "the job or a header is malformed"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a delegate, or may not speak for that user"),
    (status = 409, body = ErrorBody, description = "the reservation cannot take the job, or the delegation cannot be taken"),
))]
async fn submit(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let job: Job = body(&bytes)?;
    let key = text_header(&headers, "idempotency-key")?;
    let on_behalf = text_header(&headers, "on-behalf-of")?;
    if let Some(user) = &on_behalf {
        app.access
            .delegates
            .may_speak_for(&who.0, user)
            .map_err(|why| ApiError(StatusCode::FORBIDDEN, why))?;
    }
    let is = |name: &str, value: &[u8]| {
        headers
            .get(name)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(value))
    };
    let claim = ClaimTerms {
        explicit_commit: is("reservation-commit", b"explicit"),
        release_with_job: is("reservation-release", b"with-job"),
    };
    // A neighbouring broker delegating the job ([DMM]).
    let delegation = text_header(&headers, brokk_broker::delegate::HEADER)?
        .map(|d| brokk_broker::delegate::Delegation::parse(&d))
        .transpose()
        .map_err(|why| ApiError(StatusCode::BAD_REQUEST, why))?;
    let (id, new) = app
        .service
        .site_submit(&who.0, job, key, on_behalf, claim, delegation)
        .await?;
    let status = if new { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(Created { id })).into_response())
}

/// One of the caller's jobs, as a site shows it.
#[utoipa::path(get, path = "/site/v1/jobs/{id}", operation_id = "site_job", tag = "as a site", params(("id" = String, Path, description = "the job's id at this broker")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
))]
async fn job(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_job(&who.0, &id).await?).into_response())
}

/// Cancels one of the caller's jobs, along its chain of brokers too.
#[utoipa::path(delete, path = "/site/v1/jobs/{id}", operation_id = "site_cancel_job", tag = "as a site", params(("id" = String, Path, description = "the job's id at this broker")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
))]
async fn cancel_job(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.service.cancel(&who.0, &id).await?;
    Ok(Json(app.service.site_job(&who.0, &id).await?).into_response())
}

/// Holds one of the caller's jobs that has not started, along its chain of
/// brokers too.
#[utoipa::path(post, path = "/site/v1/jobs/{id}/hold", operation_id = "site_hold_job", tag = "as a site", params(("id" = String, Path, description = "the job's id at this broker")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
    (status = 409, body = ErrorBody, description = "it has started or ended, or where it is cannot hold it"),
))]
async fn hold_job(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.service.hold(&who.0, &id).await?;
    Ok(Json(app.service.site_job(&who.0, &id).await?).into_response())
}

/// Releases one of the caller's held jobs, along its chain of brokers too.
#[utoipa::path(post, path = "/site/v1/jobs/{id}/release", operation_id = "site_release_job", tag = "as a site", params(("id" = String, Path, description = "the job's id at this broker")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's"),
    (status = 409, body = ErrorBody, description = "it has ended"),
))]
async fn release_job(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.service.release(&who.0, &id).await?;
    Ok(Json(app.service.site_job(&who.0, &id).await?).into_response())
}

/// The caller's job submitted with this `Idempotency-Key`.
#[utoipa::path(get, path = "/site/v1/jobs/by-key/{key}", operation_id = "site_job_by_key", tag = "as a site", params(("key" = String, Path, description = "the Idempotency-Key")), responses(
    (status = 200, body = JobView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no job of the caller's has this key"),
))]
async fn job_by_key(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_job_by_key(&who.0, &key).await?).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ChangesQuery {
    /// The run the caller last read (0 at first).
    #[serde(default)]
    epoch: u64,
    /// The version the caller last read (0 at first).
    #[serde(default)]
    after: u64,
}

/// The caller's jobs changed after version `after` of run `epoch`.
#[utoipa::path(get, path = "/site/v1/jobs/changes", operation_id = "site_changes", tag = "as a site", params(ChangesQuery), responses(
    (status = 200, body = ChangeFeed),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
))]
async fn changes(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Query(q): Query<ChangesQuery>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_changes(&who.0, q.epoch, q.after).await?).into_response())
}

/// A file of a job the caller sent here (as `/v1/jobs/{id}/files/{name}`).
#[utoipa::path(get, path = "/site/v1/jobs/{id}/files/{*name}", operation_id = "site_file", tag = "as a site", params(
    ("id" = String, Path, description = "the job's id at this broker"),
    ("name" = String, Path, description = "the file's path in the job's directory"),
    ("Range" = Option<String>, Header, description = "`bytes=FIRST-LAST`, `bytes=FIRST-` or `bytes=-COUNT`"),
), responses(
    (status = 200, content_type = "application/octet-stream", body = String, description = "the file"),
    (status = 206, content_type = "application/octet-stream", body = String, description = "the range asked for"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "no such job of the caller's, or no such file"),
))]
async fn file(
    state: State<App>,
    who: Extension<Identity>,
    path: Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    super::file(state, who, path, headers).await
}

/// Whether the caller's store holds this file (as `/v1/uploads/{sha}`).
#[utoipa::path(get, path = "/site/v1/uploads/{sha}", operation_id = "site_upload_info", tag = "as a site", params(("sha" = String, Path, description = "the file's SHA-256")), responses(
    (status = 200, body = UploadView),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 404, body = ErrorBody, description = "not held"),
))]
async fn upload_info(state: State<App>, who: Extension<Identity>, sha: Path<String>) -> Response {
    super::upload_info(state, who, sha).await
}

/// Stores a file for jobs' input (as `/v1/uploads/{sha}`).
#[utoipa::path(put, path = "/site/v1/uploads/{sha}", operation_id = "site_put_upload", tag = "as a site", params(("sha" = String, Path, description = "the file's SHA-256")),
    request_body(content = String, content_type = "application/octet-stream", description = "the file's bytes"),
    responses(
    (status = 201, body = UploadView),
    (status = 400, body = ErrorBody, description = "the bytes' SHA-256 is not the name"),
    (status = 401, body = ErrorBody, description = "no valid token"),
    (status = 403, body = ErrorBody, description = "the caller is not a broker this one serves as a site (`delegates`)"),
    (status = 413, body = ErrorBody, description = "over the size limit or the caller's quota"),
))]
async fn put_upload(
    state: State<App>,
    who: Extension<Identity>,
    sha: Path<String>,
    body: axum::body::Body,
) -> Response {
    super::put_upload(state, who, sha, body).await
}

/// The routes, behind the bearer token and the delegates check.
pub(super) fn router(app: App) -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(info))
        .routes(routes!(probe))
        .routes(routes!(reserve))
        .routes(routes!(get_reservation, modify, cancel_reservation))
        .routes(routes!(commit))
        .routes(routes!(submit))
        .routes(routes!(changes))
        .routes(routes!(job_by_key))
        .routes(routes!(job, cancel_job))
        .routes(routes!(hold_job))
        .routes(routes!(release_job))
        .routes(routes!(file))
        .routes(routes!(upload_info, put_upload))
        .route_layer(middleware::from_fn_with_state(app.clone(), delegates_only))
        .route_layer(middleware::from_fn_with_state(app, auth))
}
