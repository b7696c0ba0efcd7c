//! Stage-in and stage-out under the site's rules: `http(s)://` anywhere but
//! this host's own services (loopback, link-local, unspecified and the
//! agent's own address, checked on every address a name resolves to and on
//! every redirect, unless the site names the host in `stage_hosts`),
//! `file:///PATH` only inside the directories the site's configuration allows
//! (never inside the job sandboxes of the site; a host part or a relative
//! path is refused, and a refusal reads the same whether the file exists
//! or not), and the job's side of every
//! transfer only inside its own sandbox, opened without following links, so
//! a job cannot make the agent read or write a file its owner could not.
//! `dav(s)://` is HTTP(S); grid URLs (`root://`, `gsiftp://`) go by the
//! protocol's own client under the same host rule ([`crate::gridcopy`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::accounts::Account;
use crate::sandbox;

/// Where `file://` transfers may go.
#[derive(Debug, Clone, Default)]
pub struct Allowed {
    /// Directories stage-in may read from.
    pub read: Vec<PathBuf>,
    /// Directories stage-out may write to.
    pub write: Vec<PathBuf>,
    /// The site's job sandboxes, out of bounds whatever the lists say.
    pub workdir: PathBuf,
    /// Hosts (names or addresses) that HTTP transfers may reach even though
    /// they are this host's own.
    pub hosts: Vec<String>,
    /// The agent's own listening address.
    pub own: Option<std::net::IpAddr>,
    /// The grid clients that move `root://`, `gsiftp://` and the like.
    pub grid: crate::gridcopy::GridCopy,
}

impl Allowed {
    /// Whether an HTTP transfer may reach `ip` (of host `host`).
    fn may_reach(&self, host: &str, ip: std::net::IpAddr) -> bool {
        use std::net::IpAddr;
        if self
            .hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(host) || h.parse::<IpAddr>().is_ok_and(|a| a == ip))
        {
            return true;
        }
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local(),
            IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
        };
        !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || link_local || self.own == Some(ip))
    }

    /// Refuses `url` when its host is an address a transfer may not reach
    /// (names are checked as they resolve, by [`Allowed::client`]).
    fn check_url(&self, url: &reqwest::Url) -> Result<(), String> {
        let refused = || own_host_refused(url.as_str());
        match url.host() {
            Some(url::Host::Ipv4(ip)) if !self.may_reach(&ip.to_string(), ip.into()) => Err(refused()),
            Some(url::Host::Ipv6(ip)) if !self.may_reach(&format!("[{ip}]"), ip.into()) => Err(refused()),
            Some(url::Host::Domain(d))
                if d.eq_ignore_ascii_case("localhost") && !self.may_reach(d, [127, 0, 0, 1].into()) =>
            {
                Err(refused())
            }
            None => Err(format!("{url}: no host")),
            _ => Ok(()),
        }
    }

    /// Refuses a grid URL whose host is, or resolves to any address that
    /// is, one a transfer may not reach: the client resolves the name again
    /// itself, so every address must be one it may reach.
    async fn check_grid_url(&self, raw: &str) -> Result<(), String> {
        let url = reqwest::Url::parse(raw).map_err(|e| format!("{raw}: {e}"))?;
        let host = match url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(h) => h.to_string(),
            None => return Err(format!("{raw}: no host")),
        };
        let all: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
            .await
            .map_err(|e| format!("{raw}: {host}: {e}"))?
            .collect();
        let shown = url.host_str().unwrap_or(&host);
        if all.iter().any(|a| !self.may_reach(shown, a.ip())) {
            return Err(own_host_refused(raw));
        }
        Ok(())
    }

    /// The HTTP client of transfers: names resolve only to addresses a
    /// transfer may reach, and a redirect is followed only to such a URL.
    pub fn client(self: &Arc<Self>) -> reqwest::Client {
        let (dns, hops) = (self.clone(), self.clone());
        reqwest::Client::builder()
            .dns_resolver(Arc::new(Resolver(dns)))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() >= 10 {
                    attempt.error("more than 10 redirects")
                } else if let Err(e) = hops.check_url(attempt.url()) {
                    attempt.error(e)
                } else {
                    attempt.follow()
                }
            }))
            .build()
            .unwrap_or_default()
    }
}

/// Why a transfer to `url` is refused: its host is this host's own.
fn own_host_refused(url: &str) -> String {
    format!(
        "{url}: this site does not fetch from or send to its own host's services (loopback, link-local, its own \
         address); a site may allow a host in `stage_hosts`"
    )
}

/// Name resolution that leaves out the addresses transfers may not reach.
struct Resolver(Arc<Allowed>);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<std::net::SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| allowed.may_reach(&host, a.ip()))
                .collect();
            if kept.is_empty() && !all.is_empty() {
                return Err(format!(
                    "{host} resolves only to this host's own services; a site may allow it in `stage_hosts`"
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The absolute path of a `file://` URL; a host part (`file://host/x`,
/// `file://localhost/x`) or a relative path (`file://x`) is refused.
fn local_path(url: &str, rest: &str) -> Result<PathBuf, String> {
    if !rest.starts_with('/') {
        return Err(format!(
            "{url}: a file URL names an absolute path on the site and no host: file:///PATH"
        ));
    }
    let path = PathBuf::from(rest);
    if path.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("{url}: `..` in a file URL"));
    }
    Ok(path)
}

/// Creates the file `name` in the sandbox `dir` (no link followed), owned by
/// `account` when the job has one.
pub fn create_owned(dir: &Path, name: &str, account: Option<Account>) -> std::io::Result<std::fs::File> {
    let f = sandbox::create_write(dir, name)?;
    if let Some(a) = account {
        std::os::unix::fs::fchown(&f, Some(a.uid), Some(a.gid))?;
    }
    Ok(f)
}

/// Whether `account` may use the canonical `path` as `bits` (0o4 read,
/// 0o2 write, 0o1 search) say, by its mode bits (the agent does it for the
/// job, perhaps as root), every directory above it searchable: owner, group
/// or others as the account stands to each. Supplementary groups and ACLs
/// are not consulted, so this may refuse what the account could do, never
/// the reverse.
fn may(path: &Path, account: Account, bits: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let allows = |p: &Path, bits: u32| {
        std::fs::metadata(p).is_ok_and(|m| {
            let shift = if m.uid() == account.uid {
                6
            } else if m.gid() == account.gid {
                3
            } else {
                0
            };
            (m.mode() >> shift) & bits == bits
        })
    };
    path.ancestors().skip(1).all(|d| allows(d, 0o1)) && allows(path, bits)
}

/// The canonical form of `path` when it lies inside one of `dirs` and
/// outside `workdir`; an error sentence otherwise.
fn inside(path: &Path, dirs: &[PathBuf], workdir: &Path, what: &str) -> Result<PathBuf, String> {
    let refused = || {
        format!(
            "{}: this site {what} local files only in the directories its configuration allows",
            path.display()
        )
    };
    // Outside every allowed directory as written: refused before the file
    // system is asked, so the answer says nothing of what is there.
    let written = |d: &PathBuf| std::path::absolute(d).is_ok_and(|d| path.starts_with(d));
    let canonical = |d: &PathBuf| std::fs::canonicalize(d).is_ok_and(|d| path.starts_with(d));
    if !dirs.iter().any(|d| written(d) || canonical(d)) {
        return Err(refused());
    }
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let under = |d: &PathBuf| std::fs::canonicalize(d).is_ok_and(|d| real.starts_with(d));
    if std::fs::canonicalize(workdir).is_ok_and(|w| real.starts_with(w)) || !dirs.iter().any(under) {
        return Err(refused());
    }
    Ok(real)
}

/// Runs `f` on the blocking pool: file system work off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| e.to_string())?
}

/// A WebDAV URL as the HTTP URL it is: a file is read with GET and
/// written with PUT alike.
fn dav_as_http(url: &str) -> std::borrow::Cow<'_, str> {
    match brokk_model::url_scheme(url).as_deref() {
        Some("davs") => format!("https{}", &url[4..]).into(),
        Some("dav") => format!("http{}", &url[3..]).into(),
        _ => url.into(),
    }
}

/// Copies `source` into the sandbox as `name`, owned by `account`, for
/// `user` (whose grid credential a grid transfer uses).
pub async fn stage_in(
    http: &reqwest::Client,
    allowed: &Arc<Allowed>,
    source: &str,
    sandbox_dir: &Path,
    name: &str,
    (user, account): (&str, Option<Account>),
) -> Result<(), String> {
    let (dir, owned) = (sandbox_dir.to_path_buf(), name.to_string());
    let mut to = blocking(move || create_owned(&dir, &owned, account).map_err(|e| format!("{owned}: {e}"))).await?;
    if allowed.grid.moves(source) {
        allowed.check_grid_url(source).await?;
        return allowed.grid.fetch(source, user, account.is_some(), to).await;
    }
    let source = &*dav_as_http(source);
    if let Some(rest) = source.strip_prefix("file://") {
        let (allowed, path) = (allowed.clone(), local_path(source, rest)?);
        return blocking(move || {
            let real = inside(&path, &allowed.read, &allowed.workdir, "reads")?;
            if account.is_some_and(|a| !may(&real, a, 0o4)) {
                return Err(format!("{}: the job's account may not read it", path.display()));
            }
            let mut from = std::fs::File::open(&real).map_err(|e| format!("{}: {e}", path.display()))?;
            std::io::copy(&mut from, &mut to).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(())
        })
        .await;
    }
    if source.starts_with("http://") || source.starts_with("https://") {
        use tokio::io::AsyncWriteExt;
        let url = reqwest::Url::parse(source).map_err(|e| format!("{source}: {e}"))?;
        allowed.check_url(&url)?;
        let mut resp = http.get(url).send().await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{source}: HTTP {}", resp.status()));
        }
        let mut to = tokio::fs::File::from_std(to);
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            to.write_all(&chunk).await.map_err(|e| e.to_string())?;
        }
        return to.flush().await.map_err(|e| e.to_string());
    }
    Err(format!("{source}: this site does not fetch from such a URL"))
}

/// Copies the agent's own file `from` (an upload) into the sandbox as
/// `name`, owned by `account`.
pub async fn copy_in(from: PathBuf, sandbox_dir: &Path, name: &str, account: Option<Account>) -> Result<(), String> {
    let (dir, owned) = (sandbox_dir.to_path_buf(), name.to_string());
    blocking(move || {
        let mut to = create_owned(&dir, &owned, account).map_err(|e| format!("{owned}: {e}"))?;
        let mut src = std::fs::File::open(&from).map_err(|e| format!("the upload is gone: {e}"))?;
        std::io::copy(&mut src, &mut to).map_err(|e| format!("{owned}: {e}"))?;
        Ok(())
    })
    .await
}

/// Sends the sandbox's file `name` (which must belong to `account`) to
/// `target`, for `user` (whose grid credential a grid transfer uses).
pub async fn stage_out(
    http: &reqwest::Client,
    allowed: &Arc<Allowed>,
    sandbox_dir: &Path,
    name: &str,
    target: &str,
    (user, account): (&str, Option<Account>),
) -> Result<(), String> {
    let (dir, owned) = (sandbox_dir.to_path_buf(), name.to_string());
    let mut from = blocking(move || {
        sandbox::open_read_owned(&dir, &owned, account.map(|a| a.uid)).map_err(|e| format!("{owned}: {e}"))
    })
    .await?;
    if allowed.grid.moves(target) {
        allowed.check_grid_url(target).await?;
        return allowed.grid.send(from, target, user, account.is_some()).await;
    }
    let target = &*dav_as_http(target);
    if let Some(rest) = target.strip_prefix("file://") {
        let (allowed, path) = (allowed.clone(), local_path(target, rest)?);
        return blocking(move || {
            let (Some(parent), Some(file)) = (path.parent(), path.file_name()) else {
                return Err(format!("{}: not a file name", path.display()));
            };
            // The nearest existing ancestor must be allowed before anything is created.
            let mut existing = parent;
            while !existing.exists() {
                existing = existing.parent().unwrap_or(Path::new("/"));
            }
            let base = inside(existing, &allowed.write, &allowed.workdir, "writes")?;
            let refused = || format!("{}: the job's account may not write it", path.display());
            if account.is_some_and(|a| !may(&base, a, 0o3)) {
                return Err(refused());
            }
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
            let dir = inside(parent, &allowed.write, &allowed.workdir, "writes")?;
            if let Some(a) = account {
                // What was just made is the account's, as if it had made it.
                for d in dir.ancestors().take_while(|d| *d != base) {
                    std::os::unix::fs::chown(d, Some(a.uid), Some(a.gid))
                        .map_err(|e| format!("{}: {e}", d.display()))?;
                }
                // Written by the agent as the job's account would: into a
                // directory it may write, over no file of someone else's.
                let theirs = std::fs::symlink_metadata(dir.join(file))
                    .is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) != a.uid);
                if !may(&dir, a, 0o3) || theirs {
                    return Err(refused());
                }
            }
            let name = file.to_string_lossy();
            let mut to = create_owned(&dir, &name, account).map_err(|e| format!("{}: {e}", path.display()))?;
            std::io::copy(&mut from, &mut to).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(())
        })
        .await;
    }
    if target.starts_with("http://") || target.starts_with("https://") {
        // Streamed from the file: an output of any size costs a few chunks.
        let url = reqwest::Url::parse(target).map_err(|e| format!("{target}: {e}"))?;
        allowed.check_url(&url)?;
        let len = from.metadata().map_err(|e| format!("{name}: {e}"))?.len();
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(from)));
        let resp = http
            .put(url)
            .header(reqwest::header::CONTENT_LENGTH, len)
            .body(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{target}: HTTP {}", resp.status()));
        }
        return Ok(());
    }
    Err(format!("{target}: this site does not send to such a URL"))
}
