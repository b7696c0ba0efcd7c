//! The site API under `/site/v1`, for brokers above this one (see
//! `service::as_site`): the calls a broker makes of a site agent, with the
//! same paths, headers and bodies, open to the identities in `delegates`.

use axum::extract::Query;
use axum::http::HeaderMap;
use axum::routing::post;
use brokk_core::{Change, Reply, Request as Wanted};
use brokk_model::Job;
use brokk_proto::wire::{
    BrokerReservationState, Granted, Never, ProbeResponse, Rejected, ReservationRequest, ReservationState,
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

#[derive(Deserialize)]
struct ProbeQuery {
    k: Option<usize>,
}

async fn probe(State(app): State<App>, Query(q): Query<ProbeQuery>, bytes: Bytes) -> Result<Response, ApiError> {
    let req: Wanted = body(&bytes)?;
    let candidates = app.service.site_probe(req, q.k.unwrap_or(3)).await?;
    Ok(Json(ProbeResponse { candidates }).into_response())
}

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

async fn get_reservation(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_reservation(&who.0, reservation_id(&id)?).await?).into_response())
}

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

async fn commit(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_commit(&who.0, reservation_id(&id)?).await?).into_response())
}

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
    Ok((status, Json(serde_json::json!({ "id": id }))).into_response())
}

async fn job(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_job(&who.0, &id).await?).into_response())
}

async fn cancel_job(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    app.service.cancel(&who.0, &id).await?;
    Ok(Json(app.service.site_job(&who.0, &id).await?).into_response())
}

async fn job_by_key(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Path(key): Path<String>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_job_by_key(&who.0, &key).await?).into_response())
}

#[derive(Deserialize)]
struct ChangesQuery {
    #[serde(default)]
    epoch: u64,
    #[serde(default)]
    after: u64,
}

async fn changes(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    Query(q): Query<ChangesQuery>,
) -> Result<Response, ApiError> {
    Ok(Json(app.service.site_changes(&who.0, q.epoch, q.after).await?).into_response())
}

/// The routes, behind the bearer token and the delegates check.
pub(super) fn router(app: App) -> Router<App> {
    Router::new()
        .route("/site/v1/info", get(info))
        .route("/site/v1/probe", post(probe))
        .route("/site/v1/reservations", post(reserve))
        .route(
            "/site/v1/reservations/{id}",
            get(get_reservation).patch(modify).delete(cancel_reservation),
        )
        .route("/site/v1/reservations/{id}/commit", post(commit))
        .route("/site/v1/jobs", post(submit))
        .route("/site/v1/jobs/changes", get(changes))
        .route("/site/v1/jobs/by-key/{key}", get(job_by_key))
        .route("/site/v1/jobs/{id}", get(job).delete(cancel_job))
        .route("/site/v1/jobs/{id}/files/{*name}", get(super::file))
        .route("/site/v1/uploads/{sha}", get(super::upload_info).put(super::put_upload))
        .route_layer(middleware::from_fn_with_state(app.clone(), delegates_only))
        .route_layer(middleware::from_fn_with_state(app, auth))
}
