//! Files of a job's sandbox, streamed from its site through the broker.

use super::*;

/// Bytes read from a site per chunk of a proxied file.
pub(super) const FILE_CHUNK: usize = 64 * 1024;
/// Chunks of one proxied file buffered between the site and the user.
pub(super) const FILE_CHUNKS_IN_FLIGHT: usize = 4;

/// What a site answered for a file, before its bytes.
#[derive(Debug, Clone)]
pub struct FileHead {
    /// A range of the file (206), not all of it.
    pub partial: bool,
    /// Bytes that follow, when the site said.
    pub length: Option<u64>,
    /// The site's `Content-Range`, for a partial answer.
    pub content_range: Option<String>,
}

/// A file on its way from a site: its head, then its bytes in chunks.
#[derive(Debug)]
pub struct FileStream {
    /// Status and lengths.
    pub head: FileHead,
    /// The bytes, in order; an error ends the stream.
    pub chunks: tokio::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
}

/// Reads `r` to its end into `tx` in chunks, on a blocking thread; an
/// error is sent as the last item, and a receiver gone (the client went
/// away) stops it.
pub(super) fn pump(mut r: impl std::io::Read, tx: &tokio::sync::mpsc::Sender<std::io::Result<Vec<u8>>>) {
    loop {
        let mut buf = vec![0u8; FILE_CHUNK];
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                buf.truncate(n);
                if tx.blocking_send(Ok(buf)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = tx.blocking_send(Err(e));
                return;
            }
        }
    }
}

impl Service {
    /// A file from the job's sandbox at its site, streamed: the site's answer
    /// is read in chunks on a blocking thread and handed over through a small
    /// channel, so the broker holds at most a few chunks of it at a time.
    /// `range` is a `Range` header passed on to the site.
    pub async fn file(
        &self,
        owner: &str,
        id: &str,
        name: &str,
        range: Option<String>,
    ) -> Result<FileStream, ServiceError> {
        brokk_site::sandbox::components(name).map_err(|m| ServiceError::BadRequest(format!("name: {m}")))?;
        let j = self.owned(owner, id).await?.view;
        // What the broker keeps of an ended job is served whether or not
        // its site answers.
        if let Some(kept) = self.kept_file(&j, name, range.as_deref()).await? {
            return Ok(kept);
        }
        let (Some(site), Some(handle)) = (j.site.and_then(|s| self.site(&s)), j.site_job) else {
            return Err(ServiceError::NotFound(format!(
                "file {name} of job {id} (not dispatched yet)"
            )));
        };
        let site_name = site.name.clone();
        let (head_tx, head_rx) = tokio::sync::oneshot::channel();
        let (tx, chunks) = tokio::sync::mpsc::channel(FILE_CHUNKS_IN_FLIGHT);
        let fname = name.to_string();
        tokio::task::spawn_blocking(move || {
            let resp = match site.client.file(&JobHandle(handle), &fname, range.as_deref()) {
                Ok(r) => r,
                Err(e) => {
                    let _ = head_tx.send(Err(e));
                    return;
                }
            };
            let header = |h| resp.headers().get(h).and_then(|v| v.to_str().ok()).map(str::to_string);
            let head = FileHead {
                partial: resp.status() == reqwest::StatusCode::PARTIAL_CONTENT,
                length: resp.content_length(),
                content_range: header(reqwest::header::CONTENT_RANGE),
            };
            if head_tx.send(Ok(head)).is_err() {
                return;
            }
            pump(resp, &tx);
        });
        let head = head_rx
            .await
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?
            .map_err(|e| match e {
                // The site's own address and job number mean nothing to its user.
                brokk_broker::SiteError::Unavailable(m) => {
                    tracing::debug!("file {name} of job {id}: {m}");
                    ServiceError::Unavailable(format!(
                        "site {site_name} does not answer, and the broker keeps no copy of {name} of job {id}"
                    ))
                }
                brokk_broker::SiteError::Refused { reason, .. } => ServiceError::BadRequest(reason),
                _ => ServiceError::NotFound(format!("file {name} of job {id}")),
            })?;
        Ok(FileStream { head, chunks })
    }
}
