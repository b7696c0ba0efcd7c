//! The site API under `/site/v1`, for brokers above this one (see
//! `service::as_site`): the calls a broker makes of a site agent, with the
//! same paths, headers and bodies, open to the identities in `delegates`.

use axum::extract::Query;
use axum::http::HeaderMap;
use axum::routing::post;
use brokk_model::Job;

use super::*;
use crate::service::NO_RESERVATIONS;

/// Lets only delegates through.
async fn delegates_only(
    State(app): State<App>,
    Extension(who): Extension<Identity>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if !app.access.delegates.iter().any(|d| **d == *who.0) {
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

async fn no_reservations() -> ApiError {
    ApiError(StatusCode::CONFLICT, NO_RESERVATIONS.into())
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
    let (id, new) = app.service.site_submit(&who.0, job, key, on_behalf).await?;
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
        .route("/site/v1/probe", post(no_reservations))
        .route("/site/v1/reservations", post(no_reservations))
        .route("/site/v1/jobs", post(submit))
        .route("/site/v1/jobs/changes", get(changes))
        .route("/site/v1/jobs/by-key/{key}", get(job_by_key))
        .route("/site/v1/jobs/{id}", get(job).delete(cancel_job))
        .route("/site/v1/jobs/{id}/files/{*name}", get(super::file))
        .route("/site/v1/uploads/{sha}", get(super::upload_info).put(super::put_upload))
        .route_layer(middleware::from_fn_with_state(app.clone(), delegates_only))
        .route_layer(middleware::from_fn_with_state(app, auth))
}
