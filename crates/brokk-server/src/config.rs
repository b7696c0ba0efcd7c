//! The broker service's TOML configuration: where it listens, its database,
//! its users' tokens, and its sites (remote agents, or embedded ones it starts
//! in-process).
//!
//! ```toml
//! listen = "127.0.0.1:8440"
//! database = "broker.db"              # or "postgres://user@localhost/brokk"
//! state_dir = "broker-state"        # embedded sites' databases and sandboxes
//! info_ttl_ms = 1000                 # how long a site's information is reused
//! record = "record.jsonl"            # optional: what was accepted and how it ended, for replay
//! [tokens]
//! "token-of-ann" = "ann"
//! [limits]                           # per user; these are the defaults
//! queued_jobs = 10000
//! jobs_per_submission = 1000
//! coallocation_jobs = 16
//! reserved_slot_hours = 10000
//! reservation_seconds = 604800
//! [workflows]                        # workflow admission; these are the defaults
//! bandwidth_bytes_per_s = 125000000  # between every two sites, reserved per transfer
//! hold_seconds = 120                 # how long an admission's holds wait for its commit
//! admission_seconds = 10             # how long one admission may ask the sites
//! [rescue]                           # optional: move workflow tasks off a site that stops answering
//! strategy = "feedback:0.9"          # a1, all, load:ETA or feedback:SUCCESS ([VRM] 6)
//! step_s = 60                        # how often the rescue looks again
//! reach_s = 86400                    # how far ahead its horizon may reach
//! [standby]                          # optional: one of two brokers on one database
//! url = "http://host-a:8440"         # how clients reach this one
//! lease_s = 10                       # a silent active broker is replaced after this
//! [[sites]]                          # a remote `brokk site`
//! name = "alpha"
//! url = "http://127.0.0.1:8441"
//! token = "the broker's token there"
//! push_every_s = 60                  # optional: the site pushes its information (at least this often, and on change)
//! [[embedded]]                       # started by the broker itself
//! name = "small"
//! capacity = 4
//! bandwidth_bytes_per_s = 100000000
//! benchmarks = [{ name = "specint2006", value = 20.0 }]
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use brokk_model::PublishedBenchmark;
use serde::Deserialize;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong (with line and column for TOML errors).
    pub message: String,
}

/// The service's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// SQLite database file, or a `postgres://` URL.
    pub database: String,
    /// Directory for embedded sites' state.
    #[serde(default = "default_state")]
    pub state_dir: PathBuf,
    /// Bearer token -> identity.
    #[serde(default)]
    pub tokens: BTreeMap<String, String>,
    /// Remote site agents.
    #[serde(default)]
    pub sites: Vec<RemoteSiteConfig>,
    /// Sites the service starts in-process.
    #[serde(default)]
    pub embedded: Vec<EmbeddedSiteConfig>,
    /// What one user may hold at once.
    #[serde(default)]
    pub limits: Limits,
    /// Largest request body, bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Seconds between queue-adaptation rounds ([ET-brokering], 3.3) for jobs that
    /// ask for it.
    #[serde(default = "default_adapt_every")]
    pub adapt_every: u64,
    /// Move a waiting job only if another site would deliver it this many
    /// seconds sooner.
    #[serde(default = "default_adapt_margin")]
    pub adapt_margin: i64,
    /// Milliseconds a site's information is reused for brokering decisions
    /// (0: every decision asks the sites); the broker core counts it in
    /// whole seconds, rounded up.
    #[serde(default = "default_info_ttl_ms")]
    pub info_ttl_ms: u64,
    /// Append what the service accepts and how each job ends to this JSON
    /// Lines file, for `brokk sim` to replay (relative to this file).
    pub record: Option<PathBuf>,
    /// Workflow admission.
    #[serde(default)]
    pub workflows: WorkflowSettings,
    /// The name this broker publishes as a site of a broker above it.
    #[serde(default = "default_name")]
    pub name: String,
    /// Identities (brokers above this one) that may use it as a site:
    /// the site API under `/site/v1`, jobs run for the users they name.
    #[serde(default)]
    pub delegates: brokk_site::delegates::Delegates,
    /// ARC compute elements found in GLUE 2, as embedded ARC sites.
    pub discovery: Option<crate::discovery::DiscoveryConfig>,
    /// Two brokers on one database, one active and one waiting to take over.
    pub standby: Option<Standby>,
    /// Delegation to neighbouring brokers.
    #[serde(default)]
    pub delegation: DelegationSettings,
    /// How the tasks booked at a site that stops answering are moved.
    pub rescue: Option<RescueSettings>,
}

/// `[rescue]`: while a site does not answer, the workflow tasks booked
/// there that have not been sent move to the other sites as the strategy's
/// horizon reaches them ([VRM] 6).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RescueSettings {
    /// `a1`, `all`, `load:ETA` or `feedback:SUCCESS`.
    pub strategy: brokk_broker::rescue::Strategy,
    /// Seconds between two steps.
    #[serde(default = "default_rescue_step")]
    pub step_s: i64,
    /// Seconds ahead the horizon may reach at most.
    #[serde(default = "default_rescue_reach")]
    pub reach_s: i64,
}

impl RescueSettings {
    /// The core's parameters.
    pub fn params(&self) -> brokk_broker::rescue::RescueParams {
        brokk_broker::rescue::RescueParams {
            strategy: self.strategy,
            step: brokk_model::Duration(self.step_s),
            reach: brokk_model::Duration(self.reach_s),
        }
    }
}

fn default_rescue_step() -> i64 {
    60
}
fn default_rescue_reach() -> i64 {
    86_400
}

/// `[standby]`: this broker runs only while it holds the database's lease;
/// another `brokk serve` on the same database waits, answering that it is
/// the standby, and takes over when the lease lapses (what Slurm's backup
/// controller and HTCondor's high-availability schedd give).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Standby {
    /// This broker's URL as clients reach it, told to them by the standby.
    pub url: String,
    /// Seconds the lease lasts unrenewed: how long a crash of the active
    /// broker goes unnoticed. It is renewed every third of that.
    #[serde(default = "default_lease_s")]
    pub lease_s: u64,
}

fn default_lease_s() -> u64 {
    10
}

fn default_name() -> String {
    "brokk".into()
}

/// How workflows are admitted: the network the broker reserves between its
/// sites, and how long an admission's preliminary holds last.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkflowSettings {
    /// Bandwidth between every two sites, bytes per second; transfers of a
    /// task's output to another site are booked on it.
    pub bandwidth_bytes_per_s: u64,
    /// Seconds the holds of an admission wait for its commit.
    pub hold_seconds: i64,
    /// Seconds an admission may ask the sites: past them it is answered
    /// with what it found (a plan, or no plan and why), so one user's
    /// large workflow holds the decision turn for no longer.
    pub admission_seconds: u64,
}

impl Default for WorkflowSettings {
    fn default() -> Self {
        WorkflowSettings {
            bandwidth_bytes_per_s: 125_000_000,
            hold_seconds: 120,
            admission_seconds: 10,
        }
    }
}

/// Per-user limits, so that no user fills the queue or the sites for
/// everyone else.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Jobs not yet ended, per user.
    pub queued_jobs: u64,
    /// Jobs one submission may describe (a `queue 1000` line is 1000).
    pub jobs_per_submission: u64,
    /// Jobs one co-allocation may hold.
    pub coallocation_jobs: u64,
    /// Slot-hours a user may hold in reservations that have not ended.
    pub reserved_slot_hours: u64,
    /// Longest reservation, seconds.
    pub reservation_seconds: i64,
    /// Largest file uploaded for a job's input, bytes (the embedded sites
    /// take the same).
    pub upload_bytes: u64,
    /// The fraction of any site's capacity one user may hold reserved at
    /// any instant (reservations and workflows' tasks alike).
    pub reserved_share: f64,
    /// Reservations one user may keep that have not ended (a workflow
    /// counts as one).
    pub reservations: usize,
    /// Bytes one user's uploads (and the workflow files the broker keeps
    /// for them) may hold.
    pub upload_quota_bytes: u64,
    /// Files one user's uploads may be.
    pub upload_quota_files: u64,
    /// Seconds an upload no unfinished job needs is kept.
    pub upload_retention_s: u64,
    /// Bytes the outputs the broker keeps of one user's ended jobs may
    /// hold (0: the broker keeps none, and outputs are fetched from the
    /// sites only).
    pub output_quota_bytes: u64,
    /// Files they may be.
    pub output_quota_files: u64,
    /// Seconds a kept output is kept after its job ended.
    pub output_retention_s: u64,
    /// Event streams (`/v1/events`, `brokk watch`) open at once per user.
    pub event_streams: usize,
    /// Connections open at once (default: half the open files the process
    /// may have).
    pub connections: Option<usize>,
    /// Connections open at once from one address (default: an eighth of
    /// `connections`, at most 512).
    pub connections_per_client: Option<usize>,
}

impl Limits {
    /// The share rule's limits ([`brokk_broker::share`]).
    pub fn share(&self) -> brokk_broker::share::Share {
        brokk_broker::share::Share {
            of_capacity: self.reserved_share,
            live: self.reservations,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            queued_jobs: 10_000,
            jobs_per_submission: 1_000,
            coallocation_jobs: 16,
            reserved_slot_hours: 10_000,
            reservation_seconds: 7 * 24 * 3600,
            upload_bytes: brokk_site::config::default_max_upload(),
            reserved_share: 0.5,
            reservations: 100,
            upload_quota_bytes: 10 << 30,
            upload_quota_files: 10_000,
            upload_retention_s: 7 * 86_400,
            output_quota_bytes: 10 << 30,
            output_quota_files: 100_000,
            output_retention_s: 7 * 86_400,
            event_streams: 32,
            connections: None,
            connections_per_client: None,
        }
    }
}

/// A remote agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteSiteConfig {
    /// Name, for tables.
    pub name: String,
    /// Base URL.
    pub url: String,
    /// The broker's token at that agent.
    pub token: String,
    /// Subscribe to the site's information (`/v1/info/stream`), which it
    /// then pushes at least this often, in seconds, and within a second
    /// of every change; the broker asks it only while the subscription is
    /// down. Absent: asked as `info_ttl_ms` says.
    pub push_every_s: Option<u64>,
    /// When the site is a neighbouring broker (its `url` ends in `/site`,
    /// its `name` is the name it gives itself): `sibling`, `parent` or
    /// `child`. Such a site takes only the jobs this broker delegates
    /// ([DMM], see `[delegation]`).
    pub neighbour: Option<brokk_broker::delegate::Relation>,
}

/// `[delegation]`: when this broker delegates a job to its neighbouring
/// brokers (the sites with a `neighbour`), and how far it may travel.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DelegationSettings {
    /// A job none of this broker's own sites is predicted to start within
    /// this many seconds is delegated ([DMM]'s delegation threshold; 0:
    /// any job that would wait).
    pub threshold_s: i64,
    /// Hops a delegated job may take ([DMM]'s delegation time-to-live).
    pub ttl: u32,
}

impl Default for DelegationSettings {
    fn default() -> Self {
        DelegationSettings {
            threshold_s: 0,
            ttl: brokk_broker::delegate::DEFAULT_TTL,
        }
    }
}

/// An embedded site.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedSiteConfig {
    /// Name.
    pub name: String,
    /// Slots; with `slurm` or `arc`, 0 (the default) takes the cluster's CPUs or the CE's slots.
    #[serde(default)]
    pub capacity: u32,
    /// Published benchmarks.
    #[serde(default)]
    pub benchmarks: Vec<PublishedBenchmark>,
    /// Bandwidth to the site.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Front this Slurm cluster instead of running jobs as local processes.
    pub slurm: Option<brokk_site::config::SlurmConfig>,
    /// Front this ARC compute element instead of running jobs as local
    /// processes.
    pub arc: Option<brokk_site::arc::ArcConfig>,
    /// Front this Globus GRAM5 gatekeeper instead of running jobs as local
    /// processes (`capacity` must be set: GRAM publishes none).
    pub gram: Option<brokk_site::gram::GramConfig>,
    /// User -> local Unix account their jobs run as (the broker runs as root
    /// then); without it every job runs as the broker's own account.
    #[serde(default)]
    pub accounts: BTreeMap<String, String>,
    /// Local directories `file://` stage-in may read from (none by default).
    #[serde(default)]
    pub stage_in_dirs: Vec<PathBuf>,
    /// Local directories `file://` stage-out may write to (none by default).
    #[serde(default)]
    pub stage_out_dirs: Vec<PathBuf>,
    /// Hosts HTTP staging may reach although they are this host's own (see
    /// the site agent's `stage_hosts`).
    #[serde(default)]
    pub stage_hosts: Vec<String>,
    /// Grid transfers by the protocols' own clients (see the site agent's
    /// `[transfers]`).
    #[serde(default)]
    pub transfers: brokk_site::gridcopy::TransfersConfig,
    /// Container jobs under rootless podman (see the site agent's
    /// `[containers]`).
    pub containers: Option<brokk_site::container::ContainersConfig>,
    /// Run nothing (jobs are planned and finish at their planned start):
    /// for benchmarks of the broker only.
    #[serde(default)]
    pub null_backend_for_benchmarks: bool,
    /// Seconds an ended job stays in the site's memory before only its
    /// database answers for it (see the site agent's `min_job_age_s`).
    #[serde(default = "brokk_site::config::default_min_job_age")]
    pub min_job_age_s: i64,
    /// Processes and threads one job may have at once (see the site
    /// agent's `job_processes`).
    #[serde(default = "brokk_site::config::default_job_processes")]
    pub job_processes: u64,
    /// How the site serves its own queue (see the site agent's `policy`).
    #[serde(default = "brokk_site::config::default_policy")]
    pub policy: String,
    /// The order its waiting jobs are served in (see the site agent's `order`).
    #[serde(default)]
    pub order: Option<String>,
    /// What it offers jobs beyond processors (see the site agent's
    /// `[capabilities]`).
    #[serde(default)]
    pub capabilities: brokk_site::config::Capabilities,
}

impl EmbeddedSiteConfig {
    /// An embedded site `name` in front of the ARC CE `arc`, its slots and
    /// benchmarks as the CE publishes them.
    pub fn arc(name: String, arc: brokk_site::arc::ArcConfig) -> EmbeddedSiteConfig {
        EmbeddedSiteConfig {
            name,
            capacity: 0,
            benchmarks: Vec::new(),
            bandwidth_bytes_per_s: None,
            slurm: None,
            arc: Some(arc),
            gram: None,
            accounts: BTreeMap::new(),
            stage_in_dirs: Vec::new(),
            stage_out_dirs: Vec::new(),
            stage_hosts: Vec::new(),
            transfers: Default::default(),
            containers: None,
            null_backend_for_benchmarks: false,
            capabilities: Default::default(),
            min_job_age_s: brokk_site::config::default_min_job_age(),
            job_processes: brokk_site::config::default_job_processes(),
            policy: brokk_site::config::default_policy(),
            order: None,
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
fn default_state() -> PathBuf {
    PathBuf::from("brokk-state")
}
fn default_max_body() -> usize {
    1 << 20
}
fn default_adapt_every() -> u64 {
    30
}
fn default_info_ttl_ms() -> u64 {
    1000
}
fn default_adapt_margin() -> i64 {
    600
}

impl Config {
    /// Reads a configuration file; relative paths resolve next to it and
    /// are absolute once loaded.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let err = |message: String| ConfigError {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let mut c: Config = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        if (!c.tokens.is_empty() || !c.sites.is_empty()) && brokk_site::config::others_can_read(path) {
            return Err(err(brokk_site::config::READABLE_TOKENS.into()));
        }
        let base = &brokk_site::config::directory_of(path);
        if !c.database.starts_with("postgres://") && !c.database.starts_with("postgresql://") {
            c.database = base.join(&c.database).display().to_string();
        }
        c.state_dir = base.join(&c.state_dir);
        if let Some(r) = &mut c.record {
            *r = base.join(&*r);
        }
        if let Some(d) = &mut c.discovery {
            d.endpoints = d.endpoints.as_ref().map(|p| base.join(p));
            d.arc.resolve(base);
        }
        for e in &mut c.embedded {
            if let Some(s) = &mut e.slurm {
                s.resolve(base);
            }
            if let Some(a) = &mut e.arc {
                a.resolve(base);
            }
            if let Some(g) = &mut e.gram {
                g.resolve(base);
            }
            e.transfers.resolve(base);
            if let Some(k) = &mut e.containers {
                k.resolve(base);
            }
            for d in e.stage_in_dirs.iter_mut().chain(e.stage_out_dirs.iter_mut()) {
                *d = base.join(&*d);
            }
        }
        if let Some(s) = c.sites.iter().find(|s| s.push_every_s == Some(0)) {
            return Err(err(format!("[[sites]] {}: push_every_s must be at least 1", s.name)));
        }
        if c.sites.is_empty() && c.embedded.is_empty() && c.discovery.is_none() {
            return Err(err("no sites: add [[sites]], [[embedded]] or [discovery]".into()));
        }
        check_neighbours(&c).map_err(err)?;
        check_rescue(&c).map_err(err)?;
        if let Some(d) = &c.discovery {
            if d.endpoints.is_none() && d.ldap.is_none() {
                return Err(err(
                    "[discovery]: give `endpoints` (an LDIF file) or `ldap` (a URL)".into()
                ));
            }
            if d.interval_s == 0 || d.timeout_s == 0 {
                return Err(err("[discovery]: interval_s and timeout_s must be positive".into()));
            }
        }
        Ok(c)
    }
}

/// A rescue a live broker can carry out.
fn check_rescue(c: &Config) -> Result<(), String> {
    if let Some(r) = &c.rescue {
        if matches!(r.strategy, brokk_broker::rescue::Strategy::Oracle { .. }) {
            return Err(format!(
                "[rescue] strategy: `{}` needs to know how long a site stays down, which only a simulation knows; use a1, all, load:ETA or feedback:SUCCESS",
                r.strategy
            ));
        }
        if r.step_s <= 0 || r.reach_s < r.step_s {
            return Err(format!(
                "[rescue]: step_s ({}) must be positive and reach_s ({}) at least as long",
                r.step_s, r.reach_s
            ));
        }
    }
    Ok(())
}

/// What a broker's neighbours may be ([`brokk_broker::delegate`]): named
/// once each and not as the broker itself (a path names brokers by name),
/// one parent at most, and a delegation threshold and time-to-live that
/// make sense.
fn check_neighbours(c: &Config) -> Result<(), String> {
    let neighbours: Vec<&RemoteSiteConfig> = c.sites.iter().filter(|s| s.neighbour.is_some()).collect();
    let mut names: Vec<&str> = c.sites.iter().map(|s| s.name.as_str()).collect();
    names.extend(c.embedded.iter().map(|e| e.name.as_str()));
    for n in &neighbours {
        if n.name == c.name {
            return Err(format!(
                "[[sites]] {}: a neighbour cannot have this broker's own name (`name`); name it as it names itself",
                n.name
            ));
        }
        if names.iter().filter(|&&m| m == n.name).count() > 1 {
            return Err(format!("[[sites]] {}: named twice; a neighbour is named once", n.name));
        }
    }
    let parents: Vec<&str> = neighbours
        .iter()
        .filter(|n| n.neighbour == Some(brokk_broker::delegate::Relation::Parent))
        .map(|n| n.name.as_str())
        .collect();
    if parents.len() > 1 {
        return Err(format!(
            "[[sites]]: {} are all `neighbour = \"parent\"`; a broker has one parent at most",
            parents.join(", ")
        ));
    }
    if c.delegation.threshold_s < 0 {
        return Err(format!(
            "[delegation] threshold_s: {} is negative",
            c.delegation.threshold_s
        ));
    }
    if c.delegation.ttl > brokk_broker::delegate::MAX_PATH as u32 {
        return Err(format!(
            "[delegation] ttl: {} is more than {} hops",
            c.delegation.ttl,
            brokk_broker::delegate::MAX_PATH
        ));
    }
    Ok(())
}
