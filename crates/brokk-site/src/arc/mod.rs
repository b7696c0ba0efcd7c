//! The ARC backend: the agent fronts a NorduGrid ARC compute element through
//! A-REX's REST interface 1.0, authenticated with an X.509 certificate (or
//! proxy). Jobs are written in xRSL by Brokk's writer, their staged inputs
//! uploaded into the CE's session directory, their state read at an interval,
//! their outputs fetched back into the sandbox, and the CE's copy cleaned.
//! ARC has no reservations: the agent plans on the CE's slots (from its
//! GLUE 2 document) and says it cannot reserve, unless the operator names
//! the Slurm cluster behind the CE (`[arc.slurm]`): then reservations are
//! made there, as on a Slurm site, and a job that claims one is bound to it
//! through a runtime environment that adds `--reservation` to the batch
//! script A-REX writes.

pub mod client;
pub mod delegation;
pub(crate) mod exec;
pub mod glue2;
pub mod ldap;
mod tls;

use std::path::PathBuf;

use serde::Deserialize;

pub use client::{ArcClient, ArcError};

/// The ARC backend's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArcConfig {
    /// The CE's A-REX URL, e.g. `https://ce.example.org:443/arex` (empty
    /// only in a broker's `[discovery.arc]`, which discovery fills).
    #[serde(default)]
    pub url: String,
    /// The certificate (PEM) the agent authenticates with: a user
    /// certificate, or a proxy with its key in the same file.
    pub cert: PathBuf,
    /// The key (PEM), when it is not in `cert`.
    pub key: Option<PathBuf>,
    /// A directory of CA certificates (PEM) the CE's certificate is checked
    /// against.
    #[serde(default = "default_ca_dir")]
    pub ca_dir: PathBuf,
    /// Milliseconds between two readings of a job's state. A-REX changes a
    /// job's state at its own cycles, up to a minute apart.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// Seconds a request may take before the CE counts as unreachable.
    #[serde(default = "default_timeout_s")]
    pub timeout_s: u64,
    /// The queue (GLUE 2 share) jobs are sent to; the CE's default when
    /// absent.
    pub queue: Option<String>,
    /// Seconds A-REX takes to move a job along, before its start and again
    /// before its end is known (its state cycle: a minute by default, as
    /// measured); the site publishes it, so the broker's predictions add it.
    #[serde(default = "default_state_lag_s")]
    pub state_lag_s: u64,
    /// The Slurm cluster the CE submits to, where the operator lets the
    /// agent make reservations in it; `user` is the Unix account the CE maps
    /// Brokk's certificate to, whom the reservations must admit.
    pub slurm: Option<crate::config::SlurmConfig>,
    /// The CE's LDAP information system (`ldap://ce.example.org:2135`), read
    /// for its GLUE 2 information instead of the REST `/info`.
    pub ldap: Option<String>,
    /// The CE's runtime environment that binds a job to the Slurm
    /// reservation its argument names.
    #[serde(default = "default_reservation_rte")]
    pub reservation_rte: String,
    /// Brokk users' own credentials (`ann = { cert = "ann.pem", key =
    /// "ann.key" }`): their jobs reach the CE as them, so the CE maps each to
    /// its own account. A user without one is submitted with `cert`, as the
    /// site's one identity, which a site with `[accounts]` refuses.
    #[serde(default)]
    pub users: std::collections::BTreeMap<String, Credential>,
    /// The URL schemes the CE's own data staging (A-REX's) fetches inputs
    /// from and delivers outputs to: a job's file at such a URL is handed to
    /// the CE in its description rather than moved by the agent, and the
    /// site publishes the schemes.
    #[serde(default = "default_staging")]
    pub staging: Vec<String>,
}

impl ArcConfig {
    /// Whether the CE moves the file at `url` itself (its scheme is one of
    /// [`ArcConfig::staging`]; a `file://` path, the agent's own, never).
    pub fn stages(&self, url: &str) -> bool {
        brokk_model::url_scheme(url)
            .is_some_and(|scheme| scheme != "file" && self.staging.iter().any(|s| s.eq_ignore_ascii_case(&scheme)))
    }
}

/// A certificate (or proxy) and its key, as a grid client presents them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// The certificate (PEM), or a proxy with its key in the same file.
    pub cert: PathBuf,
    /// The key (PEM), when it is not in `cert`.
    pub key: Option<PathBuf>,
}

impl Credential {
    /// Reads relative paths against `base`.
    pub fn resolve(&mut self, base: &std::path::Path) {
        self.cert = base.join(&self.cert);
        self.key = self.key.as_ref().map(|k| base.join(k));
    }
}

impl ArcConfig {
    /// Reads relative paths against `base` (the configuration file's
    /// directory).
    pub fn resolve(&mut self, base: &std::path::Path) {
        self.cert = base.join(&self.cert);
        self.key = self.key.as_ref().map(|k| base.join(k));
        self.ca_dir = base.join(&self.ca_dir);
        if let Some(s) = &mut self.slurm {
            s.resolve(base);
        }
        for c in self.users.values_mut() {
            c.resolve(base);
        }
    }
}

/// The CE's GLUE 2 information from its LDAP information system.
async fn read_ldap(ldap: &str, url: &str) -> Result<glue2::Glue2, ArcError> {
    let classes = "(|(objectClass=GLUE2ComputingService)(objectClass=GLUE2ComputingEndpoint)\
                   (objectClass=GLUE2ComputingShare)(objectClass=GLUE2ComputingManager)(objectClass=GLUE2Benchmark))";
    let entries = ldap::search(ldap, "o=glue", classes, &["*"])
        .await
        .map_err(ArcError::Unreachable)?;
    Ok(glue2::Glue2::from_ldap(&entries, url))
}

/// Where grid middleware keeps its trusted CAs by convention.
pub(crate) fn default_ca_dir() -> PathBuf {
    PathBuf::from("/etc/grid-security/certificates")
}
fn default_poll_ms() -> u64 {
    5000
}
fn default_timeout_s() -> u64 {
    30
}
fn default_state_lag_s() -> u64 {
    60
}
/// What A-REX's data staging moves with the plugins a CE ordinarily has.
fn default_staging() -> Vec<String> {
    ["http", "https", "gsiftp", "srm", "root", "davs", "s3"]
        .map(String::from)
        .to_vec()
}
fn default_reservation_rte() -> String {
    "ENV/SLURM-RESERVATION".into()
}

/// A connected compute element.
#[derive(Debug)]
pub struct ArcCe {
    /// Its settings.
    pub config: ArcConfig,
    /// The REST client, with the site's own credential.
    pub client: ArcClient,
    /// A client per user with a credential of their own.
    users: std::collections::BTreeMap<String, ArcClient>,
    /// Why the CE does not answer, as of the last reading of its
    /// information; `None` while it does.
    down: crate::reachability::Reachability,
    /// Its information as last read.
    latest: std::sync::Mutex<glue2::Glue2>,
    /// The Slurm cluster behind it that holds the site's reservations.
    pub slurm: Option<std::sync::Arc<crate::slurm::Slurm>>,
}

impl ArcCe {
    /// Connects to the CE and reads its GLUE 2 document; returns the backend
    /// and the document.
    pub async fn connect(
        config: ArcConfig,
        slurm: Option<std::sync::Arc<crate::slurm::Slurm>>,
    ) -> Result<(ArcCe, glue2::Glue2), ArcError> {
        let client = ArcClient::new(&config)?;
        // The certificate is checked at the REST service in any case.
        let info = match client.info().await {
            Ok(info) => info,
            // A connection that closed may be a refused certificate.
            Err(ArcError::Unreachable(text)) => match client.refused_certificate().await {
                Some(alert) => return Err(ArcError::Authentication(alert)),
                None => return Err(ArcError::Unreachable(text)),
            },
            Err(e) => return Err(e),
        };
        // An information system that has no data yet (ARC's fills about two
        // minutes after it starts) leaves the REST reading standing.
        let info = match &config.ldap {
            Some(url) => Some(read_ldap(url, &config.url).await?)
                .filter(|l| l.total_slots.is_some())
                .unwrap_or(info),
            None => info,
        };
        let mut users = std::collections::BTreeMap::new();
        for (user, c) in &config.users {
            let own = ArcConfig {
                cert: c.cert.clone(),
                key: c.key.clone(),
                ..config.clone()
            };
            users.insert(user.clone(), ArcClient::new(&own)?);
        }
        let ce = ArcCe {
            config,
            client,
            users,
            down: Default::default(),
            latest: std::sync::Mutex::new(info.clone()),
            slurm,
        };
        Ok((ce, info))
    }

    /// The client `user`'s jobs reach the CE with: their own credential's,
    /// or the site's.
    pub fn client_for(&self, user: &str) -> &ArcClient {
        self.users.get(user).unwrap_or(&self.client)
    }

    /// Whether `user` has a credential of their own here.
    pub fn has_own_identity(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    /// Why the CE (or the Slurm cluster that holds its reservations) does
    /// not answer; `None` while both do.
    pub fn down(&self) -> Option<String> {
        self.down.down().or_else(|| self.slurm.as_ref().and_then(|s| s.down()))
    }

    /// The CE's information as last read.
    pub fn latest(&self) -> glue2::Glue2 {
        self.latest.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Reads the CE's information every `poll_ms` for as long as the agent
    /// runs, so the site reports the CE unavailable while it does not answer
    /// (jobs are kept meanwhile, and followed again when it returns).
    pub async fn watch(self: std::sync::Arc<Self>) {
        let mut every = crate::reachability::every(std::time::Duration::from_millis(self.config.poll_ms));
        loop {
            every.tick().await;
            let read = match &self.config.ldap {
                Some(url) => read_ldap(url, &self.config.url).await,
                None => self.client.info().await,
            };
            let now_down = match read {
                Ok(info) => {
                    if let Ok(mut l) = self.latest.lock() {
                        *l = info;
                    }
                    None
                }
                Err(e) => Some(e.to_string()),
            };
            self.down.record("ARC CE", &self.config.url, now_down);
        }
    }
}
