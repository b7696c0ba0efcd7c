//! The outputs the broker keeps of ended jobs. A job that ends at a site
//! leaves its streams and declared output files there; the broker fetches
//! them into the owner's output store (content-addressed, under its own
//! quota and retention), so that `brokk get` and `brokk output` work while
//! the site is down or after it cleaned up, as `arcget` users expect of a
//! CE's session directory. Which jobs are still to be kept is written with
//! their end ([`crate::db::Db::to_keep`]), so a stop loses none; a site
//! that does not answer is asked again later, until the retention passes.

use brokk_broker::jobs::KeptOutput;
use brokk_site::uploads::UploadError;
use futures_util::StreamExt;

use super::files::{pump, FileHead, FileStream, FILE_CHUNKS_IN_FLIGHT};
use super::*;
use crate::db::KeptFile;

/// Jobs one round keeps at most.
const ROUND: i64 = 32;
/// Jobs kept at once (each a site round trip per file).
const AT_ONCE: usize = 4;
/// Seconds before a site that did not answer is asked again.
const AGAIN_S: i64 = 30;

/// Why a file was not kept when its site has none of that name.
const NO_SUCH_FILE: &str = "the site has no such file";

/// Every file a job leaves for its owner, as `brokk get` fetches them:
/// its streams, then its output files, each once, plain paths only.
fn names(v: &BrokerJob) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for n in v.stdout.iter().chain(v.stderr.iter()).chain(v.outputs.iter()) {
        if !names.contains(n) && brokk_site::sandbox::components(n).is_ok() {
            names.push(n.clone());
        }
    }
    names
}

/// Why a file was not kept, in words for its owner.
fn not_kept(e: &UploadError, quota: brokk_site::uploads::Quota) -> String {
    match e {
        UploadError::OverQuota { .. } | UploadError::TooLarge(_) => format!(
            "over your quota for kept outputs ({} bytes in {} files); fetched from the site while it keeps it",
            quota.bytes, quota.files
        ),
        e => format!("not kept: {e}"),
    }
}

impl Service {
    /// Keeps the outputs of the ended jobs that are due, up to a round of
    /// them; whether more are due.
    pub async fn keep_outputs(&self) -> Result<bool, ServiceError> {
        let at = now();
        let due = self.db.to_keep(at, ROUND).await?;
        let more = due.len() as i64 == ROUND;
        let kept: Vec<Result<(), ServiceError>> = futures_util::stream::iter(due)
            .map(|id| self.keep_job(id, at))
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;
        for e in kept.into_iter().filter_map(Result::err) {
            tracing::warn!("keeping a job's outputs: {e}");
        }
        Ok(more)
    }

    /// Fetches the outputs of ended job `id` from its site into its
    /// owner's output store, and records them; a site that does not
    /// answer is asked again in [`AGAIN_S`] seconds.
    async fn keep_job(&self, id: String, at: Time) -> Result<(), ServiceError> {
        let v = self.db.get(&id).await?.map(|j| j.view);
        let retention = i64::try_from(self.limits.output_retention_s).unwrap_or(i64::MAX);
        let job = v.filter(|v| v.state().is_terminal() && self.limits.output_quota_bytes > 0);
        let target = job.as_ref().and_then(|v| {
            let ended = v.ended.filter(|e| e.0.saturating_add(retention) > at.0)?;
            Some((
                ended,
                v.site.as_deref().and_then(|s| self.site(s))?,
                v.site_job.clone()?,
            ))
        });
        // Requeued since, deleted, past its retention, or at a site no
        // longer configured: nothing to keep.
        let (Some(v), Some((ended, site, handle))) = (job, target) else {
            self.db.kept(&id, at, &[]).await?;
            return Ok(());
        };
        let (store, owner, names) = (self.outputs.clone(), v.owner.clone(), names(&v));
        let fetched = tokio::task::spawn_blocking(move || -> Result<Vec<KeptFile>, String> {
            let mut files = Vec::new();
            for name in names {
                let shown = |bytes: Option<u64>, note: Option<String>| KeptOutput {
                    name: name.clone(),
                    bytes,
                    note,
                };
                let (shown, sha) = match site.client.file(&JobHandle(handle.clone()), &name, None) {
                    Ok(body) => match store.keep(&owner, body) {
                        Ok((sha, n)) => (shown(Some(n), None), Some(sha)),
                        Err(UploadError::Interrupted(m)) => {
                            return Err(format!("fetching {name} from {}: {m}", site.name))
                        }
                        Err(e) => (shown(None, Some(not_kept(&e, store.quota()))), None),
                    },
                    Err(e) if e.is_unavailable() => return Err(format!("{e}")),
                    Err(brokk_broker::SiteError::Unknown) => (shown(None, Some(NO_SUCH_FILE.into())), None),
                    Err(e) => (shown(None, Some(format!("not kept: {e}"))), None),
                };
                files.push(KeptFile { shown, sha });
            }
            Ok(files)
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        match fetched {
            Ok(files) => self.db.kept(&id, ended, &files).await?,
            Err(why) => {
                tracing::debug!(job = %id, "keeping its outputs: {why}; trying again in {AGAIN_S} s");
                self.db.keep_later(&id, at + brokk_model::Duration(AGAIN_S)).await?;
            }
        }
        Ok(())
    }

    /// What the broker keeps of ended job `v`'s outputs; a file deleted
    /// after its retention says so.
    pub(super) async fn kept_of(&self, v: &BrokerJob) -> Result<Vec<KeptOutput>, ServiceError> {
        let Some(ended) = v.ended.filter(|_| v.state().is_terminal()) else {
            return Ok(Vec::new());
        };
        let kept = self.db.kept_of(&v.id, ended).await?;
        Ok(kept
            .into_iter()
            .map(|f| {
                let mut k = f.shown;
                let there = f
                    .sha
                    .and_then(|s| self.outputs.path(&v.owner, &s).ok())
                    .is_some_and(|p| p.is_file());
                if k.bytes.is_some() && !there {
                    k.bytes = None;
                    k.note = Some("deleted after its retention".into());
                }
                k
            })
            .collect())
    }

    /// Kept output `name` of ended job `v`, streamed from the owner's output
    /// store (whole, or the byte range `range` asks for); `None` when the
    /// broker does not hold it, and not found when the site had no such
    /// file when its outputs were kept.
    pub(super) async fn kept_file(
        &self,
        v: &BrokerJob,
        name: &str,
        range: Option<&str>,
    ) -> Result<Option<FileStream>, ServiceError> {
        let Some(ended) = v.ended.filter(|_| v.state().is_terminal()) else {
            return Ok(None);
        };
        let sha = match self.db.kept_file(&v.id, ended, name).await? {
            Some(KeptFile { sha: Some(sha), .. }) => sha,
            Some(f) if f.shown.note.as_deref() == Some(NO_SUCH_FILE) => {
                return Err(ServiceError::NotFound(format!("file {name} of job {}", v.id)))
            }
            _ => return Ok(None),
        };
        let Ok(mut f) = self
            .outputs
            .path(&v.owner, &sha)
            .and_then(|p| Ok(std::fs::File::open(p)?))
        else {
            return Ok(None);
        };
        let len = f
            .metadata()
            .map_err(|e| ServiceError::Unavailable(e.to_string()))?
            .len();
        let range = brokk_site::api::byte_range(range, len)
            .map_err(|()| ServiceError::BadRequest(format!("the range is outside the file ({len} bytes)")))?;
        let (first, count) = range.map_or((0, len), |(a, b)| (a, b - a + 1));
        let head = FileHead {
            partial: range.is_some(),
            length: Some(count),
            content_range: range.map(|(a, b)| format!("bytes {a}-{b}/{len}")),
        };
        let (tx, chunks) = tokio::sync::mpsc::channel(FILE_CHUNKS_IN_FLIGHT);
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Seek};
            match f.seek(std::io::SeekFrom::Start(first)) {
                Ok(_) => pump(f.take(count), &tx),
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                }
            }
        });
        Ok(Some(FileStream { head, chunks }))
    }

    /// Deletes kept outputs older than `retention`; how many went.
    pub async fn sweep_outputs(&self, retention: std::time::Duration) -> Result<usize, ServiceError> {
        let before = std::time::SystemTime::now() - retention;
        let store = self.outputs.clone();
        tokio::task::spawn_blocking(move || {
            store
                .owners()
                .iter()
                .map(|(_, dir)| store.sweep(dir, before, &|_| false))
                .sum()
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))
    }
}
