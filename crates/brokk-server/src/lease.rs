//! The lease that makes one of two brokers on one database the active one.
//!
//! A row in the database names the holder (a random id of this process),
//! the URL clients reach it at, and when the lease lapses. A broker takes
//! the lease when nobody holds it or it has lapsed, in one conditional
//! write, so two brokers racing for it cannot both win; the holder renews
//! it every third of its length, and a broker that finds the lease gone to
//! another stops at once (a paused or partitioned broker must not go on
//! beside its successor).

use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};

use crate::db::DbError;

/// This process's claim on the lease of one database.
#[derive(Debug, Clone)]
pub struct Lease {
    pool: AnyPool,
    holder: String,
    url: String,
    length_ms: i64,
}

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Lease {
    /// A claim of the lease on `database` for the broker clients reach at
    /// `url`, lasting `length` unrenewed. Takes nothing yet.
    pub async fn open(database: &str, url: &str, length: std::time::Duration) -> Result<Lease, DbError> {
        let pool = AnyPoolOptions::new()
            .max_connections(1)
            .connect(&crate::db::connection_url(database))
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS lease (name TEXT PRIMARY KEY, holder TEXT NOT NULL, url TEXT NOT NULL,
             expires BIGINT NOT NULL)",
        )
        .execute(&pool)
        .await?;
        Ok(Lease {
            pool,
            holder: uuid::Uuid::new_v4().simple().to_string(),
            url: url.to_string(),
            length_ms: length.as_millis().clamp(1_000, i64::MAX as u128) as i64,
        })
    }

    /// Takes or renews the lease if it is free, lapsed or ours: `Ok(None)`
    /// when it is ours now, else the URL of the broker that holds it.
    pub async fn take(&self) -> Result<Option<String>, DbError> {
        let now = now_ms();
        let taken = sqlx::query(
            "INSERT INTO lease (name, holder, url, expires) VALUES ('broker', $1, $2, $3)
             ON CONFLICT (name) DO UPDATE SET holder = $1, url = $2, expires = $3
             WHERE lease.expires < $4 OR lease.holder = $1",
        )
        .bind(&self.holder)
        .bind(&self.url)
        .bind(now + self.length_ms)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if taken == 1 {
            return Ok(None);
        }
        let row = sqlx::query("SELECT url FROM lease WHERE name = 'broker'")
            .fetch_one(&self.pool)
            .await?;
        Ok(Some(row.get("url")))
    }

    /// How often the holder renews the lease.
    pub fn renewal(&self) -> std::time::Duration {
        std::time::Duration::from_millis((self.length_ms / 3).max(100) as u64)
    }
}

/// Waits, as the standby, until this broker holds the lease: meanwhile
/// every request on `listener` is answered 503 with the active broker's
/// URL (`active` in the body, which `brokk`'s client follows), and a
/// browser asking for the dashboard is redirected there. Returns once the
/// lease is this broker's, the standby's answers stopped.
pub async fn wait_as_standby(
    lease: &Lease,
    listener: tokio::net::TcpListener,
    bounds: brokk_site::listener::Bounds,
) -> Result<(), DbError> {
    let active = std::sync::Arc::new(std::sync::RwLock::new(String::new()));
    let app = axum::Router::new().fallback(standby_answer).with_state(active.clone());
    let mut answering: Option<tokio::task::JoinHandle<()>> = None;
    let mut listener = Some(listener);
    loop {
        match lease.take().await {
            Ok(None) => break,
            Ok(Some(url)) => {
                if let Ok(mut a) = active.write() {
                    if *a != url {
                        tracing::info!("standby: the active broker is at {url}");
                        *a = url;
                    }
                }
                if let Some(l) = listener.take() {
                    answering = Some(tokio::spawn(brokk_site::listener::serve(l, app.clone(), bounds)));
                }
            }
            Err(e) => tracing::warn!("standby: reading the lease: {e}"),
        }
        tokio::time::sleep(lease.renewal()).await;
    }
    if let Some(a) = answering {
        a.abort();
    }
    tracing::info!("this broker holds the lease: taking over");
    Ok(())
}

/// The standby's answer to every request.
async fn standby_answer(
    axum::extract::State(active): axum::extract::State<std::sync::Arc<std::sync::RwLock<String>>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let url = active.read().map(|a| a.clone()).unwrap_or_default();
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    // A standby is alive (a liveness probe must not restart it) but not
    // ready: `/readyz` falls to the 503 below.
    if uri.path() == "/healthz" {
        return (axum::http::StatusCode::OK, "ok (standby)\n").into_response();
    }
    let api = ["/v1/", "/site/", "/readyz", "/metrics", "/openapi.json"]
        .iter()
        .any(|p| path.starts_with(p));
    // Each answer closes its connection: a client's kept-alive connection
    // must reach the full service once this broker takes over.
    let close = (axum::http::header::CONNECTION, "close");
    if method == axum::http::Method::GET && !api {
        let to = axum::response::Redirect::temporary(&format!("{url}{path}"));
        return ([close], to).into_response();
    }
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [(axum::http::header::RETRY_AFTER, "1"), close],
        axum::Json(serde_json::json!({
            "error": format!("this broker is the standby; the active one is at {url}"),
            "active": url,
        })),
    )
        .into_response()
}

/// Renews the lease for as long as this broker runs; returns why this
/// broker must stop: the lease went to another, or could not be renewed
/// for its whole length (another may hold it by now).
pub async fn keep(lease: Lease) -> String {
    let length = std::time::Duration::from_millis(lease.length_ms as u64);
    let mut renewed = std::time::Instant::now();
    loop {
        tokio::time::sleep(lease.renewal()).await;
        match lease.take().await {
            Ok(None) => renewed = std::time::Instant::now(),
            Ok(Some(other)) => return format!("the lease went to the broker at {other}"),
            Err(e) if renewed.elapsed() >= length => return format!("the lease could not be renewed: {e}"),
            Err(e) => tracing::warn!("renewing the lease: {e}"),
        }
    }
}
