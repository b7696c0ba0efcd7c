//! A-REX's REST interface 1.0: the calls the backend makes, each a plain
//! HTTPS request with the configured certificate.

use std::time::Duration as StdDuration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::delegation::Delegator;
use super::glue2::Glue2;
use super::ArcConfig;

/// Why a call to the CE failed.
#[derive(Debug, thiserror::Error)]
pub enum ArcError {
    /// The certificate, key or CA files could not be read or used.
    #[error("ARC credentials: {0}")]
    Credentials(String),
    /// The CE refused the credentials (TLS handshake or 401/403).
    #[error("the ARC CE refused the certificate: {0}")]
    Authentication(String),
    /// The CE could not be reached or did not answer in time.
    #[error("the ARC CE is unreachable: {0}")]
    Unreachable(String),
    /// The CE answered with an error for this request.
    #[error("the ARC CE answered {status}: {message}")]
    Refused {
        /// HTTP status, or the status code inside a job answer.
        status: u16,
        /// What it said.
        message: String,
    },
    /// The CE read a submission and refused the job: its own status code
    /// and reason. Never taken as passing by itself (A-REX says 500 for a
    /// description it cannot take, too).
    #[error("the ARC CE refused the job ({status}): {message}")]
    JobRefused {
        /// The status code inside the CE's answer.
        status: u16,
        /// The CE's reason.
        message: String,
    },
}

impl crate::launch::Transient for ArcError {
    fn is_transient(&self) -> bool {
        match self {
            ArcError::Unreachable(_) => true,
            ArcError::Refused { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// A job's state as A-REX reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArcState(pub String);

impl ArcState {
    /// Whether the job has reached an end on the CE.
    pub fn is_final(&self) -> bool {
        matches!(self.0.as_str(), "FINISHED" | "FAILED" | "KILLED" | "WIPED")
    }
    /// Whether the job is running (or past running, before its end).
    pub fn has_started(&self) -> bool {
        matches!(
            self.0.as_str(),
            "RUNNING" | "EXITINGLRMS" | "FINISHING" | "FINISHED" | "HELD" | "KILLING"
        )
    }
}

/// The REST client of one CE.
#[derive(Debug, Clone)]
pub struct ArcClient {
    http: reqwest::Client,
    base: String,
    /// The TLS set-up, kept for [`ArcClient::refused_certificate`].
    tls: std::sync::Arc<rustls::ClientConfig>,
    /// What signs the proxies this identity delegates to the CE, or why
    /// its credential cannot (only a job that needs one fails on it).
    delegator: std::sync::Arc<Result<Delegator, String>>,
}

fn read(path: &std::path::Path) -> Result<Vec<u8>, ArcError> {
    std::fs::read(path).map_err(|e| ArcError::Credentials(format!("{}: {e}", path.display())))
}

/// Errors of the HTTP layer, told apart: a refused handshake is the
/// credentials', anything else the network's.
fn transport(e: reqwest::Error) -> ArcError {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    let lower = text.to_lowercase();
    if lower.contains("certificate") || lower.contains("handshake") || lower.contains("alert") {
        ArcError::Authentication(text)
    } else {
        ArcError::Unreachable(text)
    }
}

impl ArcClient {
    /// A client for `config.url` with its certificate, key and CAs.
    pub fn new(config: &ArcConfig) -> Result<ArcClient, ArcError> {
        let mut pem = read(&config.cert)?;
        if let Some(key) = &config.key {
            pem.push(b'\n');
            pem.extend(read(key)?);
        }
        let entries = std::fs::read_dir(&config.ca_dir)
            .map_err(|e| ArcError::Credentials(format!("{}: {e}", config.ca_dir.display())))?;
        let mut cas = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if (name.ends_with(".pem") || name.ends_with(".0")) && !name.ends_with("-key.pem") {
                if let Ok(bytes) = std::fs::read(&path) {
                    cas.push(bytes);
                }
            }
        }
        let tls = super::tls::client_config(&cas, &pem).map_err(|e| {
            ArcError::Credentials(format!("{} ({}): {e}", config.cert.display(), config.ca_dir.display()))
        })?;
        let builder = reqwest::Client::builder()
            .use_preconfigured_tls(tls.clone())
            .connect_timeout(StdDuration::from_secs(config.timeout_s))
            .timeout(StdDuration::from_secs(config.timeout_s));
        let http = builder.build().map_err(|e| ArcError::Credentials(e.to_string()))?;
        Ok(ArcClient {
            http,
            base: format!("{}/rest/1.0", config.url.trim_end_matches('/')),
            tls: std::sync::Arc::new(tls),
            delegator: std::sync::Arc::new(Delegator::from_pem(&pem)),
        })
    }

    /// Whether the CE refuses this client's certificate, found by a TLS
    /// handshake of its own and one read after it: under TLS 1.3 the server
    /// judges the client's certificate after the client thinks the
    /// handshake done, so its alert arrives on the first read, and the HTTP
    /// client may only see a connection that closed ("connection was not
    /// ready": seen here against A-REX). `Some(alert)` when refused.
    pub async fn refused_certificate(&self) -> Option<String> {
        let tls = self.tls.clone();
        let url = reqwest::Url::parse(&format!("{}/info", self.base)).ok()?;
        let timeout = StdDuration::from_secs(10);
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let host = url.host_str()?.to_string();
            let addr = url.socket_addrs(|| Some(443)).ok()?.into_iter().next()?;
            let mut sock = std::net::TcpStream::connect_timeout(&addr, timeout).ok()?;
            sock.set_read_timeout(Some(timeout)).ok()?;
            let name = rustls_pki_types::ServerName::try_from(host.clone()).ok()?;
            let mut conn = rustls::ClientConnection::new(tls, name).ok()?;
            let mut stream = rustls::Stream::new(&mut conn, &mut sock);
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
                url.path()
            );
            let refused = |e: std::io::Error| {
                let alert = e
                    .get_ref()
                    .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                    .is_some_and(|r| {
                        matches!(
                            r,
                            rustls::Error::AlertReceived(_) | rustls::Error::InvalidCertificate(_)
                        )
                    });
                alert.then(|| e.to_string())
            };
            if let Err(e) = stream.write_all(request.as_bytes()) {
                return refused(e);
            }
            let mut first = [0u8; 64];
            match stream.read(&mut first) {
                Err(e) => refused(e),
                Ok(n) => {
                    tracing::debug!(bytes = n, "the ARC CE answered the certificate probe");
                    None
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    async fn call(&self, method: Method, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<Vec<u8>, ArcError> {
        let t = std::time::Instant::now();
        let command = command_name(&method, path);
        let r = self.request(method, path, body).await;
        crate::metrics::BACKEND_COMMANDS.observe("arc", &command, r.is_ok(), t.elapsed());
        r
    }

    /// [`ArcClient::call`]'s work, which it times.
    async fn request(&self, method: Method, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<Vec<u8>, ArcError> {
        self.request_located(method, path, body).await.map(|(bytes, _)| bytes)
    }

    /// A request's answer with the `Location` it names, if any.
    async fn request_located(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> Result<(Vec<u8>, Option<String>), ArcError> {
        let mut req = self
            .http
            .request(method, format!("{}/{path}", self.base))
            .header("Accept", "application/json");
        if let Some((kind, bytes)) = body {
            req = req.header("Content-Type", kind).body(bytes);
        }
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_string);
        let bytes = resp.bytes().await.map_err(transport)?.to_vec();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(ArcError::Authentication(format!(
                "{status}: {}",
                String::from_utf8_lossy(&bytes).trim()
            )));
        }
        if !status.is_success() {
            return Err(ArcError::Refused {
                status: status.as_u16(),
                message: String::from_utf8_lossy(&bytes).trim().chars().take(500).collect(),
            });
        }
        Ok((bytes, location))
    }

    /// Delegates a proxy of this client's identity to the CE (A-REX's
    /// two-step REST delegation: a new delegation answers with the CE's
    /// certificate request and its place, the signed proxy is put there);
    /// the delegation's id, which a job names to act with it.
    pub async fn delegate(&self) -> Result<String, ArcError> {
        let delegator = self.delegator.as_ref().as_ref().map_err(|e| {
            ArcError::Credentials(format!("delegating to the CE needs an RSA certificate and key: {e}"))
        })?;
        let t = std::time::Instant::now();
        let r = async {
            let (request, location) = self
                .request_located(Method::POST, "delegations?action=new", None)
                .await?;
            let id = location
                .as_deref()
                .and_then(|l| l.trim_end_matches('/').rsplit('/').next())
                .filter(|id| !id.is_empty() && !id.contains('?'))
                .map(str::to_string)
                .ok_or_else(|| ArcError::Refused {
                    status: 201,
                    message: format!("a new delegation without its place ({location:?})"),
                })?;
            let proxy = delegator
                .sign(&String::from_utf8_lossy(&request), std::time::SystemTime::now())
                .map_err(ArcError::Credentials)?;
            self.request(
                Method::PUT,
                &format!("delegations/{}", escape(&id)),
                Some(("application/x-pem-file", proxy.into_bytes())),
            )
            .await?;
            Ok(id)
        }
        .await;
        crate::metrics::BACKEND_COMMANDS.observe("arc", "delegate", r.is_ok(), t.elapsed());
        r
    }

    /// The CE's GLUE 2 document, summarised.
    pub async fn info(&self) -> Result<Glue2, ArcError> {
        let bytes = self.call(Method::GET, "info", None).await?;
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| ArcError::Refused {
            status: 200,
            message: format!("the GLUE 2 document is not JSON: {e}"),
        })?;
        Ok(Glue2::from_json(&doc))
    }

    /// Submits an xRSL description; the CE's job id.
    pub async fn submit(&self, xrsl: &str) -> Result<String, ArcError> {
        let bytes = self
            .call(
                Method::POST,
                "jobs?action=new",
                Some(("application/rsl", xrsl.as_bytes().to_vec())),
            )
            .await?;
        let answer = job_answer(&bytes).map_err(|e| match e {
            ArcError::Refused { status, message } => ArcError::JobRefused { status, message },
            e => e,
        })?;
        answer.id.ok_or_else(|| ArcError::Refused {
            status: 200,
            message: "the CE answered without a job id".into(),
        })
    }

    /// Job action `action` (`status`, `info`, `kill`, `clean`) on job `id`:
    /// the CE's answer as it came.
    async fn job_request(&self, action: &str, id: &str) -> Result<Vec<u8>, ArcError> {
        let body = json!({"job": [{"id": id}]}).to_string();
        self.call(
            Method::POST,
            &format!("jobs?action={action}"),
            Some(("application/json", body.into_bytes())),
        )
        .await
    }

    /// One management action on job `id`, its answer read.
    async fn action(&self, action: &str, id: &str) -> Result<JobAnswer, ArcError> {
        job_answer(&self.job_request(action, id).await?)
    }

    /// Job `id`'s state.
    pub async fn status(&self, id: &str) -> Result<ArcState, ArcError> {
        let a = self.action("status", id).await?;
        a.state.map(ArcState).ok_or_else(|| ArcError::Refused {
            status: 200,
            message: format!("no state for job {id}"),
        })
    }

    /// Job `id`'s exit code from its GLUE 2 activity, where the CE gives it.
    pub async fn exit_code(&self, id: &str) -> Result<Option<i32>, ArcError> {
        let bytes = self.job_request("info", id).await?;
        let doc: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(super::glue2::find(&doc, "ExitCode")
            .and_then(super::glue2::number)
            .and_then(|n| i32::try_from(n as i64).ok()))
    }

    /// Asks the CE to kill job `id`.
    pub async fn kill(&self, id: &str) -> Result<(), ArcError> {
        self.action("kill", id).await.map(|_| ())
    }

    /// Asks the CE to remove job `id` and its session directory.
    pub async fn clean(&self, id: &str) -> Result<(), ArcError> {
        self.action("clean", id).await.map(|_| ())
    }

    /// Uploads `bytes` as `name` into job `id`'s session directory.
    pub async fn put_file(&self, id: &str, name: &str, bytes: Vec<u8>) -> Result<(), ArcError> {
        self.call(
            Method::PUT,
            &format!("jobs/{id}/session/{}", escape(name)),
            Some(("application/octet-stream", bytes)),
        )
        .await
        .map(|_| ())
    }

    /// The names in job `id`'s session directory (top level).
    pub async fn list_files(&self, id: &str) -> Result<Vec<String>, ArcError> {
        let bytes = self.call(Method::GET, &format!("jobs/{id}/session/"), None).await?;
        #[derive(Deserialize)]
        struct Listing {
            #[serde(default)]
            file: OneOrMany,
        }
        #[derive(Deserialize, Default)]
        #[serde(untagged)]
        enum OneOrMany {
            One(String),
            Many(Vec<String>),
            #[default]
            None,
        }
        let listing: Listing = serde_json::from_slice(&bytes).unwrap_or(Listing { file: OneOrMany::None });
        Ok(match listing.file {
            OneOrMany::One(f) => vec![f],
            OneOrMany::Many(fs) => fs,
            OneOrMany::None => Vec::new(),
        })
    }

    /// File `name` of job `id`'s session directory.
    pub async fn get_file(&self, id: &str, name: &str) -> Result<Vec<u8>, ArcError> {
        self.call(Method::GET, &format!("jobs/{id}/session/{}", escape(name)), None)
            .await
    }
}

/// A file name as a URL path segment.
fn escape(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The one job of an answer to a job request.
#[derive(Debug, Default)]
struct JobAnswer {
    id: Option<String>,
    state: Option<String>,
}

/// Reads `{"job": {...}}` (or a one-element list), failing with the job's
/// own status code when it is not 2xx.
fn job_answer(bytes: &[u8]) -> Result<JobAnswer, ArcError> {
    let doc: Value = serde_json::from_slice(bytes).map_err(|e| ArcError::Refused {
        status: 200,
        message: format!("an answer that is not JSON: {e}"),
    })?;
    let job = match &doc["job"] {
        Value::Array(a) => a.first().cloned().unwrap_or(Value::Null),
        j => j.clone(),
    };
    let code: u16 = match &job["status-code"] {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()).unwrap_or(0),
        _ => 0,
    };
    if !(200..300).contains(&code) {
        return Err(ArcError::Refused {
            status: code,
            message: job["reason"].as_str().unwrap_or("no reason given").to_string(),
        });
    }
    Ok(JobAnswer {
        id: job["id"].as_str().map(str::to_string),
        state: job["state"].as_str().map(str::to_string),
    })
}

/// An A-REX call as a metric names it: the method, the path's first
/// segment and the action (`POST jobs status`), never a job's id, so the
/// names stay few.
fn command_name(method: &Method, path: &str) -> String {
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let first = route.split('/').next().unwrap_or("");
    match query.split('&').find_map(|kv| kv.strip_prefix("action=")) {
        Some(action) => format!("{method} {first} {action}"),
        None => format!("{method} {first}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_answers_are_read_with_their_own_status() {
        let a =
            job_answer(br#"{"job":{"status-code":"201","reason":"Created","id":"abc","state":"ACCEPTING"}}"#).unwrap();
        assert_eq!(a.id.as_deref(), Some("abc"));
        assert_eq!(a.state.as_deref(), Some("ACCEPTING"));
        let e = job_answer(br#"{"job":[{"status-code":"404","reason":"Job not found","id":"x"}]}"#).unwrap_err();
        assert!(matches!(e, ArcError::Refused { status: 404, .. }), "{e}");
        assert!(job_answer(b"<html>").is_err());
    }

    #[test]
    fn names_are_escaped_as_path_segments() {
        assert_eq!(escape("out.txt"), "out.txt");
        assert_eq!(escape("a b/../c"), "a%20b%2F..%2Fc");
    }
}
