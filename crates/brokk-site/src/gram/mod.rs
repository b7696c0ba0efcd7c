//! The Globus GRAM5 backend: the agent fronts a GRAM gatekeeper through the
//! Grid Community Toolkit's own client, with a proxy made from the
//! configured certificate. Jobs are written in RSL by Brokk's writer and
//! wrapped so that they leave their exit status beside their outputs; the
//! sandbox's inputs are served to the job manager's stage-in over GASS by
//! `globusrun` running as the job's account; the state is read at an
//! interval; at the end the job's directory comes back as a tar stream on a
//! short job's standard output and is removed. GRAM publishes no resource
//! information and has no reservations: the site's capacity is configured,
//! and the site says it cannot reserve.

pub mod cli;
pub(crate) mod exec;

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use serde::Deserialize;

use crate::accounts::Account;
pub use cli::{GramClient, GramError};

/// The GRAM backend's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GramConfig {
    /// The gatekeeper's resource manager contact, `host[:port]/service`,
    /// e.g. `ce.example.org:2119/jobmanager-slurm`.
    pub contact: String,
    /// The certificate (PEM) jobs are submitted with: a user certificate
    /// with `key`, from which the agent makes proxies, or a proxy (its key
    /// in the same file) used as it is.
    pub cert: PathBuf,
    /// The certificate's key (PEM); absent when `cert` is a proxy.
    pub key: Option<PathBuf>,
    /// A directory of CA certificates and signing policies the gatekeeper's
    /// certificate is checked against.
    #[serde(default = "crate::arc::default_ca_dir")]
    pub ca_dir: PathBuf,
    /// Milliseconds between two readings of a job's state, and of the
    /// gatekeeper's health.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// Seconds a call may take before the gatekeeper counts as unreachable
    /// (a job's stage-in and the return of its outputs are calls).
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// Where the jobs' directories are made on the gatekeeper's side,
    /// relative to the mapped account's home.
    #[serde(default = "default_directory")]
    pub directory: String,
    /// Hours a proxy the agent makes is valid; it makes a new one after
    /// half of them.
    #[serde(default = "default_proxy_hours")]
    pub proxy_hours: u32,
    /// The host name the job manager calls back and reads files from
    /// (`GLOBUS_HOSTNAME`); the machine's own when absent.
    pub hostname: Option<String>,
    /// The ports `globusrun` listens on for call-backs and GASS, `low,high`
    /// (`GLOBUS_TCP_PORT_RANGE`), for a firewall.
    pub port_range: Option<String>,
    /// Brokk users' own credentials (`ann = { cert = "ann.pem", key =
    /// "ann.key" }`): their jobs reach the gatekeeper with proxies made from
    /// them, so its grid-mapfile maps each to its own account. A user without
    /// one is submitted with the site's credential, which a site with
    /// `[accounts]` refuses: the site's proxy is never given to another account.
    #[serde(default)]
    pub users: std::collections::BTreeMap<String, crate::arc::Credential>,
}

impl GramConfig {
    /// Reads relative paths against `base` (the configuration file's
    /// directory).
    pub fn resolve(&mut self, base: &Path) {
        self.cert = base.join(&self.cert);
        self.key = self.key.as_ref().map(|k| base.join(k));
        self.ca_dir = base.join(&self.ca_dir);
        for c in self.users.values_mut() {
            c.resolve(base);
        }
    }

    /// Checks ranges.
    pub fn check(&self) -> Result<(), String> {
        if self.poll_ms == 0 || self.timeout_s == 0 || self.proxy_hours == 0 {
            return Err("gram.poll_ms, gram.timeout_s and gram.proxy_hours must be positive".into());
        }
        let plain = |p: &str| !p.is_empty() && p != "." && p != "..";
        if self.directory.starts_with('/') || !self.directory.split('/').all(plain) {
            return Err("gram.directory must be a relative path without `.` or `..`".into());
        }
        Ok(())
    }
}

fn default_poll_ms() -> u64 {
    5000
}
fn default_timeout_s() -> u64 {
    300
}
fn default_directory() -> String {
    ".brokk".into()
}
fn default_proxy_hours() -> u32 {
    24
}

/// A gatekeeper the agent fronts.
#[derive(Debug)]
pub struct GramCe {
    /// Its settings.
    pub config: GramConfig,
    /// The command-line client.
    pub client: GramClient,
    /// Where the agent keeps its proxies (the site's own, and one per user
    /// with a credential of their own).
    proxies: PathBuf,
    /// Whether the gatekeeper answers, as of the last reading.
    down: crate::reachability::Reachability,
    /// Held while a proxy is made: two of a user's jobs submitted at once
    /// would otherwise both write it, and one would find it moved away.
    making: tokio::sync::Mutex<()>,
}

impl GramCe {
    /// Makes the agent's proxy (in `workdir`) and authenticates at the
    /// gatekeeper.
    pub async fn connect(config: GramConfig, workdir: &Path) -> Result<GramCe, GramError> {
        let client = GramClient::new(
            &config.contact,
            &config.ca_dir,
            config.hostname.clone(),
            config.port_range.clone(),
            StdDuration::from_secs(config.timeout_s),
        );
        let proxies = workdir.join(".gram");
        std::fs::create_dir_all(&proxies).map_err(|e| GramError::Credentials(format!("{}: {e}", proxies.display())))?;
        // Accounts reach their own proxy copy by name; nobody lists them.
        std::fs::set_permissions(&proxies, std::os::unix::fs::PermissionsExt::from_mode(0o711))
            .map_err(|e| GramError::Credentials(format!("{}: {e}", proxies.display())))?;
        let ce = GramCe {
            config,
            client,
            proxies,
            down: Default::default(),
            making: tokio::sync::Mutex::new(()),
        };
        ce.renew(true).await?;
        ce.client.ping(&ce.proxy()).await?;
        Ok(ce)
    }

    /// The agent's own proxy.
    fn proxy(&self) -> PathBuf {
        match self.config.key {
            Some(_) => self.proxies.join("proxy.pem"),
            None => self.config.cert.clone(),
        }
    }

    /// Whether the proxy at `path` is missing or past half of its validity.
    fn due(&self, path: &Path) -> bool {
        let half = StdDuration::from_secs(u64::from(self.config.proxy_hours) * 1800);
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_none_or(|age| age >= half)
    }

    /// Makes a new proxy at start (`now`), or when half of its validity
    /// has passed since it was written.
    async fn renew(&self, now: bool) -> Result<(), GramError> {
        let Some(key) = &self.config.key else { return Ok(()) };
        if !now && !self.due(&self.proxy()) {
            return Ok(());
        }
        let _one = self.making.lock().await;
        let fresh = self.proxies.join("proxy.pem.new");
        self.client
            .make_proxy(&self.config.cert, key, &fresh, self.config.proxy_hours)
            .await?;
        std::fs::rename(&fresh, self.proxy()).map_err(|e| GramError::Credentials(e.to_string()))
    }

    /// The proxy the calls for `user`'s job (run as `account`) use: one
    /// made from the user's own credential (owned by the account, as GSI
    /// wants), or, for a site that runs every job as the agent, the site's
    /// own. The site's proxy is never given to another account: a user with
    /// an account and no credential of their own is refused.
    pub(crate) async fn proxy_for(&self, user: &str, account: Option<Account>) -> Result<PathBuf, GramError> {
        let Some(credential) = self.config.users.get(user) else {
            return match account {
                None => Ok(self.proxy()),
                Some(_) => Err(GramError::Credentials(format!(
                    "{user} has no credential of their own here ([gram.users]); the site's proxy is not given to their account"
                ))),
            };
        };
        let hex: String = user.bytes().map(|b| format!("{b:02x}")).collect();
        let path = self.proxies.join(format!("user-{hex}.pem"));
        let fail = |e: std::io::Error| GramError::Credentials(format!("{}: {e}", path.display()));
        if !self.due(&path) {
            return Ok(path);
        }
        // Made once: a job that waited here finds it fresh.
        let _one = self.making.lock().await;
        if !self.due(&path) {
            return Ok(path);
        }
        let new = self.proxies.join(format!("user-{hex}.pem.new"));
        let _ = std::fs::remove_file(&new);
        match &credential.key {
            Some(key) => {
                self.client
                    .make_proxy(&credential.cert, key, &new, self.config.proxy_hours)
                    .await?
            }
            // A proxy given as it is: copied, so that its owner can be the account.
            None => {
                let bytes = std::fs::read(&credential.cert).map_err(fail)?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&new)
                    .map_err(fail)?;
                std::io::Write::write_all(&mut f, &bytes).map_err(fail)?;
            }
        }
        if let Some(a) = account {
            std::os::unix::fs::chown(&new, Some(a.uid), Some(a.gid)).map_err(fail)?;
        }
        std::fs::rename(&new, &path).map_err(fail)?;
        Ok(path)
    }

    /// Whether `user` has a credential of their own here.
    pub fn has_own_identity(&self, user: &str) -> bool {
        self.config.users.contains_key(user)
    }

    /// Why the gatekeeper does not answer; `None` while it does.
    pub fn down(&self) -> Option<String> {
        self.down.down()
    }

    /// Authenticates at the gatekeeper every `poll_ms` (renewing the proxy
    /// when due) for as long as the agent runs, so the site reports the
    /// gatekeeper unavailable while it does not answer; jobs are kept
    /// meanwhile and followed again when it returns.
    pub async fn watch(self: std::sync::Arc<Self>) {
        let mut every = crate::reachability::every(StdDuration::from_millis(self.config.poll_ms));
        loop {
            every.tick().await;
            let now_down = match self.renew(false).await {
                Err(e) => Some(e.to_string()),
                Ok(()) => self.client.ping(&self.proxy()).await.err().map(|e| e.to_string()),
            };
            self.down.record("GRAM gatekeeper", &self.config.contact, now_down);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Many of a user's jobs asking for the user's proxy at once all get
    /// it: made once, never found moved away half-way. (A proxy given as it
    /// is, so it is copied and no gatekeeper is needed.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_users_proxy_asked_for_by_many_jobs_at_once_is_made_once_for_all() {
        let dir = std::env::temp_dir().join(format!("brokk-gram-proxy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".gram")).unwrap();
        let given = dir.join("ann.pem");
        std::fs::write(&given, "a proxy\n").unwrap();
        let config: GramConfig = toml::from_str(&format!(
            "contact = \"ce.example.org/jobmanager-fork\"\ncert = \"{0}\"\nca_dir = \"{0}\"\n\
             [users.ann]\ncert = \"{1}\"\n",
            dir.display(),
            given.display()
        ))
        .unwrap();
        let ce = std::sync::Arc::new(GramCe {
            client: GramClient::new(&config.contact, &config.ca_dir, None, None, StdDuration::from_secs(5)),
            config,
            proxies: dir.join(".gram"),
            down: Default::default(),
            making: tokio::sync::Mutex::new(()),
        });
        let asks: Vec<_> = (0..16)
            .map(|_| {
                let ce = ce.clone();
                tokio::spawn(async move { ce.proxy_for("ann", None).await })
            })
            .collect();
        for a in asks {
            let path = a.await.unwrap().unwrap();
            assert_eq!(std::fs::read_to_string(path).unwrap(), "a proxy\n");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
