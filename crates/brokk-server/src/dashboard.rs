//! The web dashboard `brokk serve` offers at `/ui/`: one static page, its
//! script and its style, compiled into the binary. The page logs in with
//! the same token as the API and reads only the API (`/v1/...`, live
//! through `/v1/events`), so it sees exactly what its user may see. Plain
//! HTML, CSS and JavaScript with no build step: the page is small, and a
//! front-end toolchain would be a second build for every contributor.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/app.css");
const ICON: &str = include_str!("dashboard/favicon.svg");

/// A static asset with its type; the page forbids what it does not use.
fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `/` (to the dashboard) and `/ui/...`; open, as the page holds no data.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(|| async { asset(INDEX, "text/html; charset=utf-8") }))
        .route(
            "/ui/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route("/ui/app.css", get(|| async { asset(STYLE, "text/css; charset=utf-8") }))
        // Asked for by every browser that opens the page.
        .route("/ui/favicon.svg", get(|| async { asset(ICON, "image/svg+xml") }))
        .route("/favicon.ico", get(|| async { Redirect::to("/ui/favicon.svg") }))
}
