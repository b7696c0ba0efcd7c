//! Files users upload for their jobs' input (`brokk submit` sends the local
//! files a description names, as `arcsub` and `condor_submit` do), kept by
//! content: each identity has its own store, and a file is named by its
//! SHA-256, checked on arrival. A job names one as `upload:SHA256`, which
//! resolves only in its owner's store, so knowing a digest gives no one
//! else's file. The broker keeps one store and the sites another; the broker
//! sends a site what a job needs before it sends the job.

use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use brokk_proto::wire::{ErrorBody, UploadView};
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

/// The scheme of an input file's source that names an upload.
pub const SCHEME: &str = "upload:";

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The name is not a digest.
    #[error("{0:?} is not a SHA-256 digest (64 lowercase hexadecimal digits)")]
    BadName(String),
    /// The content does not have the digest it was sent under.
    #[error("the file's SHA-256 is {found}, not {named}; it was changed or cut short on the way")]
    Mismatch {
        /// The digest it was sent under.
        named: String,
        /// The digest of what arrived.
        found: String,
    },
    /// Over the size limit.
    #[error("an uploaded file may hold at most {0} bytes here")]
    TooLarge(u64),
    /// Over the owner's quota of bytes or files.
    #[error(
        "your uploads would hold {bytes} bytes in {files} files; the quota is {quota_bytes} bytes and {quota_files} \
         files per user (files no unfinished job needs are deleted after their retention)"
    )]
    OverQuota {
        /// Bytes the owner's uploads would hold.
        bytes: u64,
        /// Files they would be.
        files: u64,
        /// The quota of bytes.
        quota_bytes: u64,
        /// The quota of files.
        quota_files: u64,
    },
    /// The body stopped arriving.
    #[error("the upload was interrupted: {0}")]
    Interrupted(String),
    /// The disk failed.
    #[error("storing the upload: {0}")]
    Io(#[from] std::io::Error),
}

/// The digest an `upload:` source names, or `None` for another source.
pub fn digest_of(source: &str) -> Option<&str> {
    source.strip_prefix(SCHEME)
}

/// Whether `s` is a SHA-256 digest written as we write them.
pub fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The SHA-256 of a local file, streamed.
pub fn digest_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let n = std::io::copy(&mut f, &mut h)?;
    Ok((hex::encode(h.finalize()), n))
}

/// One store of uploads: `ROOT/HEX(IDENTITY)/SHA256`.
#[derive(Debug, Clone)]
pub struct Uploads {
    root: PathBuf,
    max_bytes: u64,
    quota: Quota,
}

/// What one identity's uploads may hold in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Bytes on disk.
    pub bytes: u64,
    /// Files.
    pub files: u64,
}

impl Quota {
    /// No quota.
    pub const NONE: Quota = Quota {
        bytes: u64::MAX,
        files: u64::MAX,
    };
}

/// What one identity's uploads hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// Bytes on disk (allocated blocks, so a sparse file counts what it takes).
    pub bytes: u64,
    /// Files.
    pub files: u64,
}

impl Uploads {
    /// A store under `root` taking files of at most `max_bytes`.
    pub fn new(root: PathBuf, max_bytes: u64) -> Uploads {
        Uploads {
            root,
            max_bytes,
            quota: Quota::NONE,
        }
    }

    /// The same store with a quota per identity.
    pub fn with_quota(mut self, quota: Quota) -> Uploads {
        self.quota = quota;
        self
    }

    /// The quota per identity.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// What `owner`'s uploads hold now (files being received included).
    pub fn usage(&self, owner: &str) -> Usage {
        use std::os::unix::fs::MetadataExt;
        let mut u = Usage::default();
        if let Ok(entries) = std::fs::read_dir(self.dir(owner)) {
            for m in entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
            {
                u.bytes += m.blocks() * 512;
                u.files += 1;
            }
        }
        u
    }

    /// Refuses when uploads holding `u` plus `bytes` more in one more file
    /// would be over the quota.
    fn within_quota(&self, u: Usage, bytes: u64) -> Result<(), UploadError> {
        self.fits(u.bytes.saturating_add(bytes), u.files.saturating_add(1))
    }

    /// Refuses when `owner`'s store, counted again with a finished upload's
    /// part in it, is over the quota. Uploads arriving at once each pass
    /// the checks made while they stream, against what the others held
    /// then; this last count, made by each just before it becomes visible,
    /// sees every other finished one whole, so together they cannot pass
    /// the quota (at worst two near it are both refused).
    fn settled_within_quota(&self, owner: &str) -> Result<(), UploadError> {
        let u = self.usage(owner);
        self.fits(u.bytes, u.files)
    }

    /// Refuses a store of `bytes` in `files` that is over the quota.
    fn fits(&self, bytes: u64, files: u64) -> Result<(), UploadError> {
        if bytes > self.quota.bytes || files > self.quota.files {
            return Err(UploadError::OverQuota {
                bytes,
                files,
                quota_bytes: self.quota.bytes,
                quota_files: self.quota.files,
            });
        }
        Ok(())
    }

    /// Deletes `owner`'s uploads last changed before `before` that `needed`
    /// does not name (digests an unfinished job or workflow still refers
    /// to); returns how many went.
    pub fn sweep(&self, owner_dir: &Path, before: std::time::SystemTime, needed: &dyn Fn(&str) -> bool) -> usize {
        let mut gone = 0;
        for e in std::fs::read_dir(owner_dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let old = e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t < before);
            let digest = is_digest(&name);
            // A part left by an interrupted upload goes too, once old.
            if old && ((digest && !needed(&name)) || name.ends_with(".part")) && std::fs::remove_file(e.path()).is_ok()
            {
                gone += 1;
            }
        }
        gone
    }

    /// Every identity's store directory with the identity it belongs to.
    pub fn owners(&self) -> Vec<(String, PathBuf)> {
        std::fs::read_dir(&self.root)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let owner = String::from_utf8(hex::decode(&name).ok()?).ok()?;
                Some((owner, e.path()))
            })
            .collect()
    }

    fn dir(&self, owner: &str) -> PathBuf {
        // Hex: any identity is a safe directory name, and no two collide.
        self.root.join(hex::encode(owner))
    }

    /// Where `owner`'s upload `sha` is (or would be).
    pub fn path(&self, owner: &str, sha: &str) -> Result<PathBuf, UploadError> {
        if !is_digest(sha) {
            return Err(UploadError::BadName(sha.to_string()));
        }
        Ok(self.dir(owner).join(sha))
    }

    /// The size of `owner`'s upload `sha`, if it holds it.
    pub fn size(&self, owner: &str, sha: &str) -> Option<u64> {
        let p = self.path(owner, sha).ok()?;
        std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| m.len())
    }

    /// Stores what `body` streams as `owner`'s upload `sha`, if its digest
    /// is `sha` and it fits; returns its size. Nothing is visible under the
    /// name until all of it has arrived, checked and been synced.
    pub async fn put<S, B, E>(&self, owner: &str, sha: &str, body: S) -> Result<u64, UploadError>
    where
        S: Stream<Item = Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        let target = self.path(owner, sha)?;
        let used = self.usage(owner);
        self.within_quota(used, 0)?;
        let dir = self.dir(owner);
        let mut b = tokio::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(&dir).await?;
        let part = dir.join(format!(".{sha}.{}.part", uuid::Uuid::new_v4().simple()));
        let result = self.receive(&part, body, used).await;
        let outcome = match result {
            Ok((found, n)) if found == sha => match self.settled_within_quota(owner) {
                Ok(()) => tokio::fs::rename(&part, &target).await.map(|()| n).map_err(Into::into),
                Err(e) => Err(e),
            },
            Ok((found, _)) => Err(UploadError::Mismatch {
                named: sha.to_string(),
                found,
            }),
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            let _ = tokio::fs::remove_file(&part).await;
        }
        outcome
    }

    /// Stores what `body` reads as one of `owner`'s uploads under its own
    /// digest (a file the broker fetched, whose digest nobody named);
    /// returns the digest and the size. Blocking.
    pub fn keep(&self, owner: &str, mut body: impl std::io::Read) -> Result<(String, u64), UploadError> {
        use std::io::Write as _;
        let used = self.usage(owner);
        self.within_quota(used, 0)?;
        let dir = self.dir(owner);
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700).create(&dir)?;
        let part = dir.join(format!(".kept.{}.part", uuid::Uuid::new_v4().simple()));
        let result = (|| {
            let mut f = std::fs::File::create(&part)?;
            let mut h = Sha256::new();
            let mut n = 0u64;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let got = body
                    .read(&mut buf)
                    .map_err(|e| UploadError::Interrupted(e.to_string()))?;
                if got == 0 {
                    break;
                }
                n += got as u64;
                if n > self.max_bytes {
                    return Err(UploadError::TooLarge(self.max_bytes));
                }
                self.within_quota(used, n)?;
                h.update(&buf[..got]);
                f.write_all(&buf[..got])?;
            }
            f.sync_all()?;
            let sha = hex::encode(h.finalize());
            self.settled_within_quota(owner)?;
            std::fs::rename(&part, dir.join(&sha))?;
            Ok((sha, n))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&part);
        }
        result
    }

    async fn receive<S, B, E>(&self, part: &Path, mut body: S, used: Usage) -> Result<(String, u64), UploadError>
    where
        S: Stream<Item = Result<B, E>> + Unpin,
        B: AsRef<[u8]>,
        E: std::fmt::Display,
    {
        let mut f = tokio::fs::File::create(part).await?;
        let mut h = Sha256::new();
        let mut n = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| UploadError::Interrupted(e.to_string()))?;
            let bytes = chunk.as_ref();
            n += bytes.len() as u64;
            if n > self.max_bytes {
                return Err(UploadError::TooLarge(self.max_bytes));
            }
            self.within_quota(used, n)?;
            h.update(bytes);
            f.write_all(bytes).await?;
        }
        f.sync_all().await?;
        Ok((hex::encode(h.finalize()), n))
    }
}

/// `PUT .../uploads/{sha}` for `owner`, as the site and the broker serve it:
/// 201 with what was stored, 400 for a bad name or digest, 413 when too large.
pub async fn put_response(store: &Uploads, owner: &str, sha: &str, body: axum::body::Body) -> Response {
    let mut stream = body.into_data_stream();
    let stored = store.put(owner, sha, &mut stream).await;
    if matches!(stored, Err(UploadError::TooLarge(_) | UploadError::OverQuota { .. })) {
        linger(&mut stream).await;
    }
    match stored {
        Ok(size) => (
            StatusCode::CREATED,
            Json(UploadView {
                sha256: sha.to_string(),
                size,
            }),
        )
            .into_response(),
        Err(e) => {
            let status = match e {
                UploadError::TooLarge(_) | UploadError::OverQuota { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                UploadError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, Json(ErrorBody { error: e.to_string() })).into_response()
        }
    }
}

/// Most of a refused upload read and dropped before the refusal is sent.
const LINGER_BYTES: u64 = 256 << 20;

/// Reads and drops what the client is still sending of a refused upload
/// (up to [`LINGER_BYTES`], each piece within 5 s), so that it reads the
/// refusal rather than a connection reset while it writes: the server
/// closes a connection whose request it did not read to the end.
async fn linger<S, B, E>(stream: &mut S)
where
    S: Stream<Item = Result<B, E>> + Unpin,
    B: AsRef<[u8]>,
{
    let mut read = 0u64;
    while read < LINGER_BYTES {
        match tokio::time::timeout(std::time::Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(piece))) => read += piece.as_ref().len() as u64,
            _ => return,
        }
    }
}

/// `GET .../uploads/{sha}` for `owner`: 200 with its size, or 404.
pub fn info_response(store: &Uploads, owner: &str, sha: &str) -> Response {
    match store.size(owner, sha) {
        Some(size) => Json(UploadView {
            sha256: sha.to_string(),
            size,
        })
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(ErrorBody {
                error: format!("upload {sha} not found"),
            }),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(parts: &[&'static [u8]]) -> impl Stream<Item = Result<&'static [u8], String>> + Unpin {
        futures_util::stream::iter(parts.iter().map(|p| Ok(*p)).collect::<Vec<_>>())
    }

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[tokio::test]
    async fn keeps_a_file_under_its_digest_for_its_owner_only() {
        let dir = std::env::temp_dir().join(format!("brokk-uploads-{}", uuid::Uuid::new_v4().simple()));
        let store = Uploads::new(dir.clone(), 1 << 20);
        let d = sha(b"hello world\n");
        assert_eq!(
            store.put("ann", &d, chunks(&[b"hello ", b"world\n"])).await.unwrap(),
            12
        );
        assert_eq!(store.size("ann", &d), Some(12));
        assert_eq!(store.size("bob", &d), None, "another identity's store");
        assert_eq!(std::fs::read(store.path("ann", &d).unwrap()).unwrap(), b"hello world\n");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn refuses_a_wrong_digest_a_bad_name_and_an_oversized_file() {
        let dir = std::env::temp_dir().join(format!("brokk-uploads-{}", uuid::Uuid::new_v4().simple()));
        let store = Uploads::new(dir.clone(), 8);
        let d = sha(b"short");
        let e = store.put("ann", &d, chunks(&[b"shorT"])).await.unwrap_err();
        assert!(matches!(e, UploadError::Mismatch { .. }), "{e}");
        assert_eq!(store.size("ann", &d), None);
        let e = store.put("ann", "../../etc/passwd", chunks(&[b"x"])).await.unwrap_err();
        assert!(matches!(e, UploadError::BadName(_)), "{e}");
        let big = sha(b"0123456789");
        let e = store.put("ann", &big, chunks(&[b"01234", b"56789"])).await.unwrap_err();
        assert!(e.to_string().contains("at most 8 bytes"), "{e}");
        // Nothing half-written is left behind.
        let left: Vec<_> = std::fs::read_dir(dir.join(hex::encode("ann"))).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn uploads_arriving_at_once_do_not_pass_the_quota_together() {
        let dir = std::env::temp_dir().join(format!("brokk-uploads-{}", uuid::Uuid::new_v4().simple()));
        let store = Uploads::new(dir.clone(), 1 << 20).with_quota(Quota {
            bytes: u64::MAX,
            files: 2,
        });
        store.put("ann", &sha(b"one"), chunks(&[b"one"])).await.unwrap();
        // Two more at once, each past the first check before the other ends
        // (when the second is polled after the first made its part file, it
        // is refused at that check and never reads: the first then goes on
        // alone after a while rather than wait for it for ever).
        let gate = std::sync::Arc::new(tokio::sync::Barrier::new(2));
        let slow = |bytes: &'static [u8]| {
            let gate = gate.clone();
            Box::pin(futures_util::stream::once(async move {
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), gate.wait()).await;
                Ok::<_, String>(bytes)
            }))
        };
        let (two, three) = (sha(b"two"), sha(b"three"));
        let (a, b) = tokio::join!(
            store.put("ann", &two, slow(b"two")),
            store.put("ann", &three, slow(b"three"))
        );
        assert!(
            a.is_err() || b.is_err(),
            "both fitted a quota of two files with one held"
        );
        assert!(store.usage("ann").files <= 2, "{:?}", store.usage("ann"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
