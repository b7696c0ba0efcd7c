//! The agent's TOML configuration.
//!
//! ```toml
//! name = "alpha"
//! listen = "127.0.0.1:8441"
//! capacity = 8                     # slots (processors) the agent plans
//! database = "alpha.db"            # SQLite file; relative to the config file
//! workdir = "alpha-jobs"           # job sandboxes; relative to the config file
//! bandwidth_bytes_per_s = 125000000
//! [[benchmarks]]
//! name = "specint2006"
//! value = 20.0
//! stage_in_dirs = ["/srv/inputs"]   # file:// inputs only from here (default: none)
//! stage_out_dirs = ["/srv/results"] # file:// outputs only to here (default: none)
//! [delegates]                    # identities that submit on behalf of users
//! broker = ["ann"]                 # and the users each may name (see `delegates`)
//! [tokens]
//! "secret-token-of-ann" = "ann"
//! [accounts]                       # identity -> Unix account its jobs run as
//! "ann" = "ann"
//!
//! # Optional: front a Slurm cluster instead of running jobs locally.
//! [slurm]
//! conf = "/etc/slurm/slurm.conf"  # the cluster's slurm.conf
//! partition = "batch"             # default: the whole cluster
//! user = "brokk"                  # Slurm user the jobs run as; default: the agent's
//! oci_bundles = ["/shared/bundles"] # OCI bundles the cluster's oci.conf runs (--container)
//!
//! # Or an ARC CE (see `arc::ArcConfig`), with the Slurm cluster behind it
//! # when the site may reserve there.
//! [arc]
//! url = "https://ce.example.org/arex"
//! cert = "usercert.pem"
//! key = "userkey.pem"
//! [arc.slurm]
//! conf = "/etc/slurm/slurm.conf"
//! user = "nobody"                 # the account the CE maps the certificate to
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use brokk_model::PublishedBenchmark;
use serde::Deserialize;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable or malformed file (the message has line and column).
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A value out of range.
    #[error("{0}")]
    Invalid(String),
}

/// The agent's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Site name, published in `/v1/info`.
    pub name: String,
    /// Address to listen on; port 0 picks a free one.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Slots the planner manages; with `[slurm]`, 0 (the default) means the
    /// cluster's CPUs as `sinfo` reports them.
    #[serde(default)]
    pub capacity: u32,
    /// SQLite database file.
    pub database: PathBuf,
    /// Directory for job sandboxes.
    pub workdir: PathBuf,
    /// How far ahead the planner books, in days.
    #[serde(default = "default_horizon_days")]
    pub horizon_days: i64,
    /// How the site's own queue is served between reservations: `fcfs`,
    /// `easy`, `conservative` (the default: every waiting job keeps its
    /// planned start) or `backfill:K` (K protected jobs), as the
    /// simulator's sites run them; or partitioned ([AB-avail] section 4):
    /// `easy-m`, `conservative-m` (three partitions by wall time) or
    /// `easy-mf@INTERVAL` (the grid, whose jobs are those its delegates
    /// submit for users, offered what a forecast of local load leaves).
    #[serde(default = "default_policy")]
    pub policy: String,
    /// The order waiting jobs are served in under `easy` or `backfill:K`
    /// (arrival order when absent): `sjf`, `ljf`, `wfp` or
    /// `fairshare[:HALF_LIFE_S]`, as the simulator's queue orders.
    #[serde(default)]
    pub order: Option<String>,
    /// Wall time assumed for jobs that state none, seconds.
    #[serde(default = "default_wall_time")]
    pub default_wall_time: i64,
    /// Seconds between SIGTERM and SIGKILL when a job overruns or is cancelled.
    #[serde(default = "default_grace")]
    pub kill_grace: u64,
    /// Seconds an ended job stays in the agent's memory before only its
    /// database answers for it (Slurm's `MinJobAge`, whose default it
    /// takes): a long-lived site holds its live and recent jobs, not all.
    #[serde(default = "default_min_job_age")]
    pub min_job_age_s: i64,
    /// Processes and threads one local job may have at once (its cgroup's
    /// `pids.max`; `RLIMIT_NPROC` of its account where no cgroup can be made).
    #[serde(default = "default_job_processes")]
    pub job_processes: u64,
    /// Largest request body accepted, bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Largest file uploaded for a job's input, bytes (1 GiB by default).
    #[serde(default = "default_max_upload")]
    pub max_upload_bytes: u64,
    /// Bytes one identity's uploads may hold in all (10 GiB by default).
    #[serde(default = "default_upload_quota_bytes")]
    pub upload_quota_bytes: u64,
    /// Files one identity's uploads may hold (10,000 by default).
    #[serde(default = "default_upload_quota_files")]
    pub upload_quota_files: u64,
    /// Seconds an upload no unfinished job names is kept (7 days by default).
    #[serde(default = "default_upload_retention_s")]
    pub upload_retention_s: u64,
    /// Published benchmark results.
    #[serde(default)]
    pub benchmarks: Vec<PublishedBenchmark>,
    /// Network bandwidth to the site.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Bearer token -> identity.
    #[serde(default)]
    pub tokens: BTreeMap<String, String>,
    /// Identity (or user a broker acts for) -> local Unix account that runs
    /// its jobs, as ARC's and GRAM's grid-mapfiles say it. When set, an
    /// identity without an account here is refused, and the agent must run
    /// as root (or as the one account named). When empty, every job runs as
    /// the agent's own account, and the agent says so when it starts.
    #[serde(default)]
    pub accounts: BTreeMap<String, String>,
    /// Identities trusted to submit on behalf of their users (brokers), each
    /// with the users it may name in an `On-Behalf-Of` header
    /// ([`crate::delegates`]); that user's account runs the job.
    #[serde(default)]
    pub delegates: crate::delegates::Delegates,
    /// Local directories `file://` stage-in may read from (none by default:
    /// only `http(s)://` inputs are fetched).
    #[serde(default)]
    pub stage_in_dirs: Vec<PathBuf>,
    /// Local directories `file://` stage-out may write to (none by default).
    #[serde(default)]
    pub stage_out_dirs: Vec<PathBuf>,
    /// Hosts (names or addresses) that HTTP stage-in and stage-out may reach
    /// although they are this host's own (loopback, link-local, the agent's
    /// address): none by default.
    #[serde(default)]
    pub stage_hosts: Vec<String>,
    /// Grid transfers (`root://`, `gsiftp://`, `srm://`) by the protocols'
    /// own clients or gfal2's ([`crate::gridcopy`]); by default those
    /// installed, GridFTP and SRM only with a credential.
    #[serde(default)]
    pub transfers: crate::gridcopy::TransfersConfig,
    /// Container jobs under rootless podman ([`crate::container`]); none
    /// run without it.
    pub containers: Option<crate::container::ContainersConfig>,
    /// The Slurm backend; without it jobs run as local processes.
    pub slurm: Option<SlurmConfig>,
    /// Front this ARC compute element instead of running jobs as local
    /// processes.
    pub arc: Option<crate::arc::ArcConfig>,
    /// Front this Globus GRAM5 gatekeeper instead of running jobs as local
    /// processes (the site's `capacity` must be set: GRAM publishes none).
    pub gram: Option<crate::gram::GramConfig>,
    /// Run nothing: jobs are planned, marked running at their planned start
    /// and finish at once. For benchmarks of the broker and the agent only.
    #[serde(default)]
    pub null_backend_for_benchmarks: bool,
    /// What jobs may ask of the site beyond its size, published in its
    /// information (`[capabilities]`).
    #[serde(default)]
    pub capabilities: Capabilities,
}

/// What a site offers jobs beyond processors, as it publishes it: a
/// broker sends a job only where everything it asks for is published.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Runtime environments (software) installed for jobs, GLUE 2's
    /// `ApplicationEnvironment`: a job naming one (xRSL
    /// `runtimeenvironment`, JSDL and JDL alike) goes only to a site that
    /// publishes it.
    #[serde(default)]
    pub runtime_environments: Vec<String>,
    /// GPUs per node, for jobs that ask for GPUs (none by default).
    pub gpus_per_node: Option<u32>,
    /// Applications the site runs by name, UNICORE's application database:
    /// `"NAME/VERSION"` (or `"NAME"`) = the executable that runs it. A job
    /// naming an application and no executable runs it with its arguments;
    /// without a version asked, the last version listed in name order.
    #[serde(default)]
    pub applications: std::collections::BTreeMap<String, String>,
}

impl Capabilities {
    /// The executable that runs `app` here, if the site has it.
    pub fn resolve(&self, app: &brokk_model::Application) -> Option<&str> {
        self.applications
            .iter()
            .rev()
            .find(|(published, _)| app.is(published))
            .map(|(_, exe)| exe.as_str())
    }

    /// What the site publishes of itself from these (its backend adds the
    /// URL schemes it stages and the endpoints it fronts; no container
    /// runtime yet).
    pub fn environment(&self) -> brokk_model::Environment {
        brokk_model::Environment {
            runtime_environments: self.runtime_environments.clone(),
            gpus_per_node: self.gpus_per_node,
            applications: self.applications.keys().cloned().collect(),
            ..brokk_model::Environment::default()
        }
    }
}

/// The Slurm backend's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// The cluster's `slurm.conf` (given to every command as `SLURM_CONF`).
    pub conf: PathBuf,
    /// The partition the agent fronts; the default partition when absent.
    pub partition: Option<String>,
    /// The Slurm user jobs and reservations are for; the agent's own user
    /// when absent.
    pub user: Option<String>,
    /// Where `sbatch`, `squeue`, `scontrol`, `scancel` and `sinfo` are, when
    /// not on `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// Milliseconds between two readings of the cluster's queue.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// At most this many `sbatch` commands at once, so a burst of jobs does
    /// not start thousands of processes against slurmctld.
    #[serde(default = "default_submitters")]
    pub submitters: usize,
    /// Directories of OCI bundles that the cluster runs through Slurm's
    /// own OCI support (its `oci.conf`): a job naming a bundle in one
    /// (`#SBATCH --container=DIR/NAME`) is given to `sbatch` with a copy of
    /// it made for the job ([`crate::slurm::bundle`]), and the site
    /// publishes `DIR/*` among the images it runs.
    #[serde(default)]
    pub oci_bundles: Vec<PathBuf>,
}

impl SlurmConfig {
    /// Reads relative paths against `base` (the configuration file's
    /// directory).
    pub fn resolve(&mut self, base: &Path) {
        self.conf = base.join(&self.conf);
        self.bin_dir = self.bin_dir.as_ref().map(|b| base.join(b));
        self.oci_bundles = self.oci_bundles.iter().map(|d| base.join(d)).collect();
    }

    fn check(&self, section: &str) -> Result<(), ConfigError> {
        if self.poll_ms == 0 || self.submitters == 0 {
            return Err(ConfigError::Invalid(format!(
                "{section}.poll_ms and {section}.submitters must be positive"
            )));
        }
        Ok(())
    }

    /// The images this cluster's OCI support runs, as a site publishes
    /// them: `DIR/*` for each bundle directory.
    pub fn bundle_images(&self) -> Vec<String> {
        self.oci_bundles
            .iter()
            .map(|d| format!("{}/*", d.display().to_string().trim_end_matches('/')))
            .collect()
    }

    /// Whether `image` names a bundle directly inside a bundle directory
    /// (a name, not a path climbing out of it).
    pub fn runs_bundle(&self, image: &str) -> bool {
        let path = Path::new(image);
        let named = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| !n.starts_with('.'));
        named
            && path
                .parent()
                .is_some_and(|dir| self.oci_bundles.iter().any(|d| d.components().eq(dir.components())))
    }
}

fn default_poll_ms() -> u64 {
    250
}
fn default_submitters() -> usize {
    8
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
/// Conservative backfilling, as sites have always served their queues.
pub fn default_policy() -> String {
    "conservative".into()
}

fn default_horizon_days() -> i64 {
    365
}
fn default_wall_time() -> i64 {
    3600
}
/// The default of `min_job_age_s`: 300 s, Slurm's `MinJobAge`.
pub fn default_min_job_age() -> i64 {
    300
}
fn default_grace() -> u64 {
    5
}
/// The default of `job_processes`.
pub fn default_job_processes() -> u64 {
    crate::supervisor::DEFAULT_PROCESSES
}
fn default_max_body() -> usize {
    1 << 20
}
/// The largest upload a site or the broker takes unless configured otherwise.
pub fn default_max_upload() -> u64 {
    1 << 30
}
fn default_upload_quota_bytes() -> u64 {
    10 << 30
}
fn default_upload_quota_files() -> u64 {
    10_000
}
fn default_upload_retention_s() -> u64 {
    7 * 86_400
}

/// Whether a user other than the file's owner and group can read `path`:
/// the file is world-readable and every directory above it lets the world
/// through.
pub fn others_can_read(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode()).unwrap_or(0);
    let Ok(full) = std::path::absolute(path) else {
        return true;
    };
    mode(&full) & 0o004 != 0 && full.ancestors().skip(1).all(|d| mode(d) & 0o001 != 0)
}

/// Why a configuration file holding tokens is refused while others can read it.
pub const READABLE_TOKENS: &str = "it holds tokens and other users can read it; make it private (chmod 600)";

/// Refuses a configuration file holding tokens that other users can read.
pub fn refuse_if_others_can_read(path: &Path) -> Result<(), ConfigError> {
    if others_can_read(path) {
        return Err(ConfigError::File {
            path: path.display().to_string(),
            message: READABLE_TOKENS.into(),
        });
    }
    Ok(())
}

/// The directory a configuration file is in, as an absolute path: the
/// relative paths in the file resolve against it, so they still hold after
/// a job's runner changes into its sandbox.
pub fn directory_of(path: &Path) -> PathBuf {
    std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/"))
}

impl Config {
    /// Reads a configuration file; relative paths in it resolve next to it
    /// and are absolute once loaded.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file_err = |message: String| ConfigError::File {
            path: path.display().to_string(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
        let mut c: Config = toml::from_str(&text).map_err(|e| file_err(e.to_string()))?;
        if !c.tokens.is_empty() {
            refuse_if_others_can_read(path)?;
        }
        let base = &directory_of(path);
        c.database = base.join(&c.database);
        c.workdir = base.join(&c.workdir);
        for d in c.stage_in_dirs.iter_mut().chain(c.stage_out_dirs.iter_mut()) {
            *d = base.join(&*d);
        }
        if let Some(a) = &mut c.arc {
            a.resolve(base);
        }
        c.transfers.resolve(base);
        if let Some(k) = &mut c.containers {
            k.resolve(base);
        }
        if let Some(g) = &mut c.gram {
            g.resolve(base);
        }
        if let Some(s) = &mut c.slurm {
            s.resolve(base);
        }
        c.check()?;
        Ok(c)
    }

    /// Checks ranges.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.policy
            .parse::<brokk_core::SitePolicy>()
            .map_err(ConfigError::Invalid)?;
        if let Some(o) = &self.order {
            o.parse::<brokk_core::order::Named>()
                .map_err(|e| ConfigError::Invalid(format!("order: {e}")))?;
        }
        let managers = [self.slurm.is_some(), self.arc.is_some(), self.gram.is_some()];
        if managers.iter().filter(|m| **m).count() > 1 {
            return Err(ConfigError::Invalid(
                "an agent fronts one of Slurm, an ARC CE or a GRAM gatekeeper, not several".into(),
            ));
        }
        if self.containers.is_some() && (self.arc.is_some() || self.gram.is_some()) {
            return Err(ConfigError::Invalid(
                "[containers]: container jobs run at a site that runs its jobs itself or through Slurm, not through \
                 ARC or GRAM"
                    .into(),
            ));
        }
        if let Some(g) = &self.gram {
            g.check().map_err(ConfigError::Invalid)?;
            if self.capacity == 0 {
                return Err(ConfigError::Invalid(
                    "a GRAM gatekeeper publishes no slots: set the site's capacity".into(),
                ));
            }
        }
        if self.arc.as_ref().is_some_and(|a| a.url.is_empty()) {
            return Err(ConfigError::Invalid("arc.url: the CE's A-REX URL is required".into()));
        }
        if self.arc.as_ref().is_some_and(|a| a.poll_ms == 0 || a.timeout_s == 0) {
            return Err(ConfigError::Invalid(
                "arc.poll_ms and arc.timeout_s must be positive".into(),
            ));
        }
        let fronted = self.slurm.is_some() || self.arc.is_some();
        if (self.capacity == 0 && !fronted) || self.capacity > i32::MAX as u32 {
            return Err(ConfigError::Invalid("capacity must be between 1 and 2^31 - 1".into()));
        }
        if let Some(s) = &self.slurm {
            s.check("slurm")?;
        }
        if let Some(s) = self.arc.as_ref().and_then(|a| a.slurm.as_ref()) {
            s.check("arc.slurm")?;
            if s.user.is_none() {
                return Err(ConfigError::Invalid(
                    "arc.slurm.user: name the Unix account the CE maps the agent's certificate to; \
                     the reservations must admit it"
                        .into(),
                ));
            }
        }
        if !(1..=36_500).contains(&self.horizon_days) {
            return Err(ConfigError::Invalid("horizon_days must be between 1 and 36500".into()));
        }
        if self.min_job_age_s < 0 {
            return Err(ConfigError::Invalid("min_job_age_s must not be negative".into()));
        }
        if self.default_wall_time <= 0 {
            return Err(ConfigError::Invalid("default_wall_time must be positive".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_site_configurations_read_and_check() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sites");
        let mut read = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let c: Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            c.check().unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            read += 1;
        }
        assert!(read >= 4, "{read} examples");
    }

    #[test]
    fn a_queue_order_is_read_under_every_policy() {
        let base = "name = \"s\"\ncapacity = 4\ndatabase = \"s.db\"\nworkdir = \"jobs\"\n";
        let tokens = "[tokens]\n\"t\" = \"broker\"\n";
        let read = |extra: &str| -> Config { toml::from_str(&format!("{base}{extra}{tokens}")).unwrap() };
        read("policy = \"easy\"\norder = \"fairshare:3600\"\n").check().unwrap();
        read("policy = \"backfill:3\"\norder = \"sjf\"\n").check().unwrap();
        read("order = \"sjf\"\n").check().unwrap();
        read("policy = \"fcfs\"\norder = \"wfp\"\n").check().unwrap();
        let e = read("policy = \"easy\"\norder = \"shortest\"\n")
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown queue order \"shortest\""), "{e}");
    }

    #[test]
    fn a_gram_site_must_say_its_capacity_and_front_nothing_else() {
        let base = "name = \"g\"\ndatabase = \"s.db\"\nworkdir = \"jobs\"\n[tokens]\n\"t\" = \"broker\"\n";
        let gram = "[gram]\ncontact = \"vm/jobmanager-fork\"\ncert = \"u.pem\"\n";
        let c: Config = toml::from_str(&format!("{base}{gram}")).unwrap();
        assert!(c.check().unwrap_err().to_string().contains("set the site's capacity"));
        let c: Config = toml::from_str(&format!("capacity = 2\n{base}{gram}")).unwrap();
        c.check().unwrap();
        let arc = "[arc]\nurl = \"https://vm/arex\"\ncert = \"u.pem\"\n";
        let c: Config = toml::from_str(&format!("capacity = 2\n{base}{gram}{arc}")).unwrap();
        assert!(c.check().unwrap_err().to_string().contains("not several"));
        let c: Config = toml::from_str(&format!("capacity = 2\n{base}{gram}directory = \"../up\"\n")).unwrap();
        assert!(c.check().unwrap_err().to_string().contains("gram.directory"));
    }

    #[test]
    fn an_arc_site_on_slurm_names_the_account_its_reservations_admit() {
        let base = "name = \"a\"\ndatabase = \"s.db\"\nworkdir = \"jobs\"\n[arc]\nurl = \"https://vm/arex\"\ncert = \"u.pem\"\n";
        let c: Config = toml::from_str(&format!("{base}[arc.slurm]\nconf = \"slurm.conf\"\n")).unwrap();
        assert!(c.check().unwrap_err().to_string().contains("arc.slurm.user"));
        let c: Config = toml::from_str(&format!(
            "{base}[arc.slurm]\nconf = \"slurm.conf\"\nuser = \"nobody\"\n"
        ))
        .unwrap();
        c.check().unwrap();
        let arc = c.arc.unwrap();
        assert_eq!(arc.reservation_rte, "ENV/SLURM-RESERVATION");
        assert_eq!(arc.slurm.unwrap().user.as_deref(), Some("nobody"));
    }
}
