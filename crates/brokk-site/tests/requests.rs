//! Any request, however malformed, gets an answer with a 2xx or 4xx status:
//! never a panic, never a 5xx. The router runs in process on a real agent
//! (SQLite file, sandboxes) without a socket.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{Method, Request};
use brokk_site::{api, Agent, Config};
use proptest::prelude::*;
use tower::ServiceExt;

fn agent(rt: &tokio::runtime::Runtime) -> Agent {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "brokk-site-requests-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let config: Config = toml::from_str(&format!(
        "name = \"t\"\ncapacity = 8\ndatabase = \"{}\"\nworkdir = \"{}\"\nmax_body_bytes = 4096\n[tokens]\n\"tok\" = \"ann\"\n",
        dir.join("t.db").display(),
        dir.join("jobs").display()
    ))
    .unwrap();
    rt.block_on(Agent::open(config)).unwrap().0
}

const PATHS: &[&str] = &[
    "/v1/info",
    "/v1/probe",
    "/v1/probe?k=abc",
    "/v1/probe?k=100000",
    "/v1/slots",
    "/v1/slots?from=2030-01-01T00:00:00Z&to=2029-01-01T00:00:00Z",
    "/v1/slots?to=9999-12-31T23:59:59Z",
    "/v1/slots?min_amount=0",
    "/v1/slots?min_amount=-3&min_duration=-1",
    "/v1/slots?min_amount=abc&min_duration=1h",
    "/v1/reservations",
    "/v1/reservations/1",
    "/v1/reservations/18446744073709551615",
    "/v1/reservations/-1",
    "/v1/reservations/1/commit",
    "/v1/jobs",
    "/v1/jobs/1",
    "/v1/jobs/1/files/out.txt",
    "/v1/jobs/1/files/..",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/nope",
];

/// Bodies near the valid shapes, and arbitrary ones.
fn bodies() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        Just("\"amount\"".to_string()),
        Just("\"duration\"".to_string()),
        Just("\"earliest\"".to_string()),
        Just("\"latest\"".to_string()),
        Just("\"hold\"".to_string()),
        Just("\"window\"".to_string()),
        Just("\"executable\"".to_string()),
        Just("\"reservation\"".to_string()),
        Just("\"cpus\"".to_string()),
        Just("\"wall_time\"".to_string()),
        "\"[a-z]{1,6}\"",
    ];
    let value = prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("4294967296".to_string()),
        Just("9223372036854775807".to_string()),
        Just("\"2030-01-01T00:00:00Z\"".to_string()),
        Just("\"1970-01-01T00:00:00Z\"".to_string()),
        Just("\"9999-12-31T23:59:59Z\"".to_string()),
        Just("\"/bin/true\"".to_string()),
        Just("[\"2030-01-01T00:00:00Z\", \"2029-01-01T00:00:00Z\"]".to_string()),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("{}".to_string()),
        "-?[0-9]{1,20}",
        "\"[ -~]{0,12}\"",
    ];
    prop_oneof![
        prop::collection::vec((field, value), 0..8).prop_map(|kv| {
            let inner: Vec<String> = kv.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}}", inner.join(", ")).into_bytes()
        }),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
    ))]

    #[test]
    fn every_request_gets_a_client_or_success_status(
        requests in prop::collection::vec(
            (0..5usize, 0..PATHS.len(), bodies(), any::<bool>()),
            1..12,
        )
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let agent = agent(&rt);
        let dir = agent.config().workdir.clone();
        for (m, p, body, auth) in requests {
            let method = [Method::GET, Method::POST, Method::PATCH, Method::DELETE, Method::PUT][m].clone();
            let mut req = Request::builder().method(method.clone()).uri(PATHS[p]);
            if auth {
                req = req.header("authorization", "Bearer tok");
            }
            let req = req.header("content-type", "application/json").body(Body::from(body)).unwrap();
            let status = rt.block_on(api::router(agent.clone()).oneshot(req)).unwrap().status();
            prop_assert!(!status.is_server_error(), "{} {} -> {}", method, PATHS[p], status);
        }
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}

/// A slots query that cannot be answered gets a 400 naming its field; a
/// good one gets the free capacity, computed now.
#[test]
fn a_bad_slots_query_is_refused_naming_its_field() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let agent = agent(&rt);
    let get = |uri: &str| {
        let req = Request::builder()
            .uri(uri)
            .header("authorization", "Bearer tok")
            .body(Body::empty())
            .unwrap();
        let resp = rt.block_on(api::router(agent.clone()).oneshot(req)).unwrap();
        let status = resp.status().as_u16();
        let bytes = rt.block_on(axum::body::to_bytes(resp.into_body(), 1 << 20)).unwrap();
        (status, serde_json::from_slice::<serde_json::Value>(&bytes).unwrap())
    };
    for (uri, field) in [
        ("/v1/slots?from=2030-01-02T00:00:00Z&to=2030-01-01T00:00:00Z", "to:"),
        ("/v1/slots?to=9999-12-31T23:59:59Z", "to:"),
        ("/v1/slots?min_amount=0", "min_amount:"),
        ("/v1/slots?min_amount=-2", "min_amount:"),
        ("/v1/slots?min_duration=-1", "min_duration:"),
        ("/v1/slots?from=yesterday", "from:"),
    ] {
        let (status, body) = get(uri);
        assert_eq!(status, 400, "{uri}: {body}");
        let said = body["error"].as_str().unwrap();
        assert!(said.starts_with(field), "{uri}: {said}");
    }
    // An idle site of 8: all of it free over the next day, from now.
    let (status, body) = get("/v1/slots?min_amount=8&min_duration=600");
    assert_eq!(status, 200, "{body}");
    let ranges = body["ranges"].as_array().unwrap();
    assert_eq!(ranges.len(), 1, "{body}");
    assert_eq!(ranges[0]["free"], 8);
    assert_eq!(ranges[0]["start"], body["computed_at"]);
    assert_eq!(ranges[0]["end"], body["until"]);
    let _ = std::fs::remove_dir_all(agent.config().workdir.parent().unwrap());
}

/// A subscription to the site's information: a bad query is refused
/// naming its field; a good one pushes the information at once, then
/// within about a second of a change (a reservation made), and with
/// `on_change=false` nothing before its interval.
#[test]
fn the_sites_information_is_pushed_at_once_and_on_change() {
    use futures_util::StreamExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let agent = agent(&rt);
    let call = |method: Method, uri: &str, body: &str| {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", "Bearer tok")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        rt.block_on(api::router(agent.clone()).oneshot(req)).unwrap()
    };
    for (uri, field) in [
        ("/v1/info/stream?every=0", "every:"),
        ("/v1/info/stream?every=-5", "every:"),
        ("/v1/info/stream?every=soon", "every:"),
        ("/v1/info/stream?on_change=maybe", "on_change:"),
    ] {
        let resp = call(Method::GET, uri, "");
        assert_eq!(resp.status().as_u16(), 400, "{uri}");
        let bytes = rt.block_on(axum::body::to_bytes(resp.into_body(), 1 << 20)).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert!(body["error"].as_str().unwrap().starts_with(field), "{uri}: {body}");
    }
    // The next `info` event of a stream within `within`, as JSON.
    let next = |events: &mut axum::body::BodyDataStream, within: std::time::Duration| {
        rt.block_on(async {
            let mut text = String::new();
            loop {
                let chunk = tokio::time::timeout(within, events.next()).await.ok()??.ok()?;
                text.push_str(std::str::from_utf8(&chunk).ok()?);
                if let Some(end) = text.find("\n\n") {
                    let event = &text[..end];
                    if event.contains("event: info") {
                        let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
                        return serde_json::from_str::<serde_json::Value>(data).ok();
                    }
                    text.drain(..end + 2);
                }
            }
        })
    };
    let reserve = |amount: u32| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let at = brokk_model::Time(now.as_secs() as i64 + 3600).to_string();
        let body = serde_json::json!({"amount": amount, "duration": 3600, "earliest": at, "latest": at});
        let resp = call(Method::POST, "/v1/reservations", &body.to_string());
        assert!(resp.status().is_success(), "{}", resp.status());
    };
    let wait = std::time::Duration::from_secs(3);
    let resp = call(Method::GET, "/v1/info/stream?every=3600", "");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut pushed = resp.into_body().into_data_stream();
    let first = next(&mut pushed, wait).expect("the information at once");
    assert_eq!(
        (first["name"].as_str(), first["capacity"].as_u64()),
        (Some("t"), Some(8))
    );
    let quiet = call(Method::GET, "/v1/info/stream?every=3600&on_change=false", "");
    let mut quiet = quiet.into_body().into_data_stream();
    assert!(next(&mut quiet, wait).is_some());
    // A change: pushed to the first, not to the one that asked for none.
    reserve(8);
    let after = next(&mut pushed, wait).expect("pushed on change");
    assert_ne!(after["availability"], first["availability"], "{after}");
    assert!(next(&mut quiet, std::time::Duration::from_millis(1500)).is_none());
    let _ = std::fs::remove_dir_all(agent.config().workdir.parent().unwrap());
}

/// `GET /metrics`, open: the site's gauges and each call counted under the
/// route it matched (not the path asked), by status.
#[test]
fn metrics_count_calls_by_route_and_read_the_sites_state() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let agent = agent(&rt);
    let call = |uri: &str, token: bool| {
        let mut req = Request::builder().uri(uri);
        if token {
            req = req.header("authorization", "Bearer tok");
        }
        let resp = rt
            .block_on(api::router(agent.clone()).oneshot(req.body(Body::empty()).unwrap()))
            .unwrap();
        let status = resp.status().as_u16();
        let bytes = rt.block_on(axum::body::to_bytes(resp.into_body(), 1 << 20)).unwrap();
        (status, String::from_utf8_lossy(&bytes).to_string())
    };
    assert_eq!(call("/v1/jobs/7", true).0, 404);
    assert_eq!(call("/v1/jobs/8", true).0, 404);
    assert_eq!(call("/v1/info", false).0, 401);
    assert_eq!(call("/no/such/path/123", true).0, 404);
    let (status, text) = call("/metrics", false);
    assert_eq!(status, 200);
    for line in [
        "brokk_site_jobs{state=\"running\"} 0",
        "brokk_site_reservations 0",
        "brokk_site_free_slots 8",
        "brokk_site_subscriptions 0",
        "brokk_site_http_requests_total{method=\"GET\",route=\"/v1/jobs/{id}\",code=\"404\"} 2",
        "brokk_site_http_requests_total{method=\"GET\",route=\"/v1/info\",code=\"401\"} 1",
        "brokk_site_http_requests_total{method=\"GET\",route=\"unmatched\",code=\"404\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
    assert!(!text.contains("/v1/jobs/7"), "{text}");
    let _ = std::fs::remove_dir_all(agent.config().workdir.parent().unwrap());
}
