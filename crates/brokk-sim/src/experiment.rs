//! Experiments as TOML files: a workload (a trace or the Lublin-Feitelson
//! model, with transformations), a platform, the policies to compare, the
//! metrics' options and a sweep over load levels and seeds. Every point of the
//! sweep (load x seed x policy) is an independent, deterministic simulation;
//! [`run_points`] spreads them over threads and returns them in point order.
//!
//! ```toml
//! name = "kth-easy"
//! policies = ["fcfs", "easy", "conservative"]
//! [workload]
//! swf = "../../shared/data/traces/KTH-SP2-1996-2.1-cln.swf.gz"  # relative to this file
//! estimates = "requested"
//! [platform]
//! clusters = [{ name = "kth-sp2", procs = 100 }]
//! [sweep]
//! loads = [0.6, 0.8]
//! seeds = [1]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use brokk_broker::Publishing;
use brokk_core::SitePolicy;
use brokk_model::{Duration, Time};
use serde::Deserialize;

use crate::cluster::{from_swf, Estimates, Outcome, Policy, SimJob};
use crate::grid::{
    simulate_grid_routed, simulate_grid_with_local, Adaptation, GridOptions, GridRouting, PredictionError, Staleness,
};
use crate::lublin;
use crate::metrics::{by_size, by_user, summary, Horizon, Summary, Window, DEFAULT_BOUND};
use crate::orders::{OrderMaker, Orders};
use crate::platform::{clusters_from_partitions, simulate_platform, ClusterRun, ClusterSpec, PlatformRun, Routing};
use crate::routers::RouterMaker;
use crate::swf::SwfJob;
use crate::timing::SchedulerTime;
use crate::transform::{allocated, scale_load, window, Filter, Processors};

/// An experiment that cannot be read or run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The TOML is malformed or has unknown or missing keys.
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// The TOML is well-formed but says something impossible.
    #[error("{0}")]
    Invalid(String),
    /// A workload file could not be read.
    #[error("{path}: {message}")]
    Workload {
        /// The workload file.
        path: String,
        /// Why.
        message: String,
    },
    /// The workload model refused its parameters.
    #[error(transparent)]
    Model(#[from] lublin::ModelError),
}

/// An experiment file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Name, for reports.
    pub name: String,
    /// The jobs.
    pub workload: WorkloadSpec,
    /// The clusters and routing.
    pub platform: PlatformSpec,
    /// Local policies to compare: `fcfs`, `easy`, `conservative`,
    /// `backfill:K`, each optionally with a queue order after `+`
    /// (`easy+sjf`; see [`crate::orders`]).
    #[serde(default = "default_policies")]
    pub policies: Vec<String>,
    /// Priorities of the trace's queues (SWF field 15) by queue number, for
    /// the `priority` order; higher goes first, unlisted queues have 0.
    #[serde(default)]
    pub priorities: BTreeMap<String, f64>,
    /// How metrics are computed.
    #[serde(default)]
    pub metrics: MetricsSpec,
    /// Load levels and seeds.
    #[serde(default)]
    pub sweep: SweepSpec,
    /// How the plots are drawn.
    #[serde(default)]
    pub plots: PlotsSpec,
}

/// Plot options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlotsSpec {
    /// Value axes on a log scale (`true`), linear (`false`), or by rule when
    /// absent: log when the data spans a decade or more.
    pub log_y: Option<bool>,
    /// The Gantt charts' window, seconds from the first arrival
    /// (default the first day).
    pub gantt_window: Option<[i64; 2]>,
    /// At most this many jobs in a Gantt chart, the first to start.
    #[serde(default = "default_gantt_jobs")]
    pub gantt_jobs: usize,
    /// The files each figure is written as: `svg`, `png`, `pdf` (SVG alone
    /// by default; see [`crate::figures`]).
    #[serde(default = "crate::figures::default_formats")]
    pub formats: Vec<crate::figures::Format>,
}

fn default_gantt_jobs() -> usize {
    60
}

impl Default for PlotsSpec {
    fn default() -> Self {
        PlotsSpec {
            log_y: None,
            gantt_window: None,
            gantt_jobs: default_gantt_jobs(),
            formats: crate::figures::default_formats(),
        }
    }
}

fn default_policies() -> Vec<String> {
    vec!["easy".into()]
}

/// Where jobs come from, and how they are transformed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// An SWF trace (optionally .gz), relative to the experiment file.
    pub swf: Option<PathBuf>,
    /// A GWF trace; its submitting sites become partitions.
    pub gwf: Option<PathBuf>,
    /// The Lublin-Feitelson model.
    pub lublin: Option<LublinSpec>,
    /// A record `brokk serve` kept of the jobs it accepted (JSON Lines).
    pub record: Option<PathBuf>,
    /// `exact` or `requested` (default) run-time estimates.
    #[serde(default)]
    pub estimates: EstimateSpec,
    /// `requested` (default) or `allocated` processors as a trace job's
    /// size.
    #[serde(default)]
    pub processors: Processors,
    /// Skip malformed trace lines instead of failing.
    #[serde(default)]
    pub lenient: bool,
    /// Keep jobs submitted in [from, to) seconds.
    pub window: Option<[i64; 2]>,
    /// Keep only jobs passing these bounds.
    pub filter: Option<Filter>,
    /// Offered load to scale to when the sweep gives none.
    pub load: Option<f64>,
    /// Deadlines for a share of the grid's jobs ([AB-avail]'s
    /// QoS-constrained requests; broker routings).
    pub deadlines: Option<DeadlineSpec>,
}

/// Which grid jobs get a deadline, and how tight, by [AB-avail]'s rule
/// after Islam et al.: the workload is first run with EASY backfilling at
/// the sites and the least-loaded site chosen for each job (the base
/// policy, the sites' load read every 10 minutes); a job's deadline is
/// its arrival plus `stringency` times its response time there.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadlineSpec {
    /// The share of the grid's jobs given one, drawn by the point's seed.
    pub share: f64,
    /// How many times its base response time a job may take (the paper's
    /// stringency factor, 5).
    #[serde(default = "default_stringency")]
    pub stringency: f64,
}

fn default_stringency() -> f64 {
    5.0
}

/// `exact` or `requested` estimates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EstimateSpec {
    /// The run time itself.
    Exact,
    /// SWF field 9, the run time when missing.
    #[default]
    Requested,
}

/// Lublin-Feitelson settings; the machine size is the platform's.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LublinSpec {
    /// Days of arrivals.
    pub days: f64,
    /// Override of SERIAL_PROB ([DMM] uses 0.95).
    pub serial_prob: Option<f64>,
    /// Hour of day of the first arrival.
    #[serde(default)]
    pub start_hour: u32,
    /// The largest job the model draws, in processors (by default the
    /// largest cluster's size): larger than every cluster to study
    /// co-allocation (`platform.coallocate`).
    pub max_size: Option<u32>,
}

/// Each cluster's local jobs are numbered from its position times this.
const LOCAL_IDS: i64 = 1_000_000_000;

/// The clusters.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformSpec {
    /// Explicit clusters.
    #[serde(default)]
    pub clusters: Vec<ClusterToml>,
    /// One cluster per trace partition, sized by its peak use in the log.
    #[serde(default)]
    pub from_partitions: bool,
    /// `partition`, `round-robin` or `random`; by default `partition` for
    /// clusters from partitions, else `round-robin`.
    pub routing: Option<String>,
    /// Routings to compare, each a series: the rules above and the broker's
    /// `broker-tts`, `broker-ttd`, `broker-least-load`,
    /// `broker-ttd-reserve[:K]`, each of these
    /// with `@ask` (the sites asked before every decision) or `@INTERVAL`
    /// (`@15m`: what a site said is used until it is that old) in place
    /// of `info_ttl` for that series, and with several `brokers`
    /// `+delegate` or `+delegate:THRESHOLD` (`broker-ttd+delegate:10m@15m`):
    /// the brokers are each other's siblings and delegate a job that none
    /// of their own sites is predicted to start within the threshold
    /// (default zero) ([DMM], as `brokk serve` delegates). With a broker routing among them
    /// every series runs on a grid of site cores.
    #[serde(default)]
    pub routings: Vec<String>,
    /// Seconds the broker reuses a site's information (grid runs).
    #[serde(default)]
    pub info_ttl: i64,
    /// Seconds before a site's information reaches the broker (grid runs).
    #[serde(default)]
    pub info_delay: i64,
    /// Seconds between the broker's queue adaptation rounds (broker
    /// routings; 0: none).
    #[serde(default)]
    pub adapt_every: i64,
    /// Seconds of earlier delivery a move must gain (adaptation).
    #[serde(default = "default_adapt_margin")]
    pub adapt_margin: i64,
    /// Co-allocate a job larger than every site over several sites that
    /// start it together (broker routings).
    #[serde(default)]
    pub coallocate: bool,
    /// Brokers in the grid (broker routings): the clusters in this many
    /// groups of consecutive clusters, each routed by a broker of its own
    /// for the jobs whose home is there (their partition's cluster, else
    /// their user modulo the brokers). Default one.
    #[serde(default = "default_brokers")]
    pub brokers: usize,
    /// Seconds a message between a broker and a site takes (broker
    /// routings): a job reaches its site this long after the decision, and
    /// the site's answer the broker as long again.
    #[serde(default)]
    pub latency: i64,
    /// What the sites publish (grid runs): `slots`, their free capacity
    /// over time as live agents do ([AB-avail]), or `summary`, only their
    /// free slots, queue and one-slot wait, as an ARC CE does. Default
    /// `slots`.
    #[serde(default)]
    pub published: PublishedSpec,
    /// How far ahead the sites publish (with `published = "slots"`), as a
    /// duration (`30d`), every range of it; by default what a live agent
    /// publishes, the next day in up to 1,000 ranges. [AB-avail] publishes
    /// the whole schedule.
    #[serde(default)]
    pub published_span: Option<String>,
    /// The offered load of each site's own users (grid runs, with a
    /// Lublin-Feitelson workload): every cluster also runs a stream of
    /// local jobs of its own, drawn by the same model for its size over the
    /// same days, submitted straight to it ([AB-avail]'s local jobs). Their
    /// figures are reported apart (`local`); the table's are the grid's.
    #[serde(default)]
    pub local_load: Option<f64>,
}

/// What the sites of a grid run publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PublishedSpec {
    /// Their free capacity over time.
    #[default]
    Slots,
    /// Only the summary figures.
    Summary,
}

fn default_brokers() -> usize {
    1
}

fn default_adapt_margin() -> i64 {
    600
}

/// One explicit cluster.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterToml {
    /// Name.
    pub name: String,
    /// Processors.
    pub procs: u32,
    /// Trace partitions routed here.
    #[serde(default)]
    pub partitions: Vec<i64>,
    /// Speed relative to the trace's machine (grid routings only).
    #[serde(default = "one")]
    pub speed: f64,
}

fn one() -> f64 {
    1.0
}

/// Metric options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSpec {
    /// Bounded-slowdown threshold, seconds.
    #[serde(default = "default_bound")]
    pub bound: i64,
    /// `cool-down` (default) or `steady-state`.
    #[serde(default)]
    pub horizon: Horizon,
    /// The series every other is compared with (the first series when
    /// none is named): seed by seed, the paired differences of every
    /// figure (`comparisons` in the JSON report, the printed table of a
    /// sweep, the `paired-*.svg` figures); and job by job at each point,
    /// [AB-avail]'s improvement ratio of bounded slowdowns, for the grid's
    /// jobs and the sites' own (`improvement`, only when named).
    #[serde(default)]
    pub base: Option<String>,
    /// How long after the first arrival the measured period starts
    /// (`14d`: [AB-avail] leaves out its first two weeks); jobs that
    /// arrive earlier are a warm-up and count in no figure.
    #[serde(default)]
    pub warmup: Option<String>,
}

fn default_bound() -> i64 {
    DEFAULT_BOUND.0
}

impl Default for MetricsSpec {
    fn default() -> Self {
        MetricsSpec {
            bound: default_bound(),
            horizon: Horizon::default(),
            base: None,
            warmup: None,
        }
    }
}

/// Load levels and seeds to sweep.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepSpec {
    /// Offered loads; none means the workload as it is (or its `load`).
    #[serde(default)]
    pub loads: Vec<f64>,
    /// Seeds for the model and random routing; none means seed 1.
    #[serde(default)]
    pub seeds: Vec<u64>,
}

/// Parses a policy name: a queue policy, or a partitioned one for sites
/// of a grid ([`SitePolicy`]).
pub fn parse_policy(name: &str) -> Result<SitePolicy, String> {
    name.parse()
}

/// An experiment read, checked and with its trace loaded, ready to run points.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The experiment as written.
    pub spec: Experiment,
    /// The series compared: each a label and a local policy, in the order
    /// of [`Prepared::routes`].
    pub policies: Vec<(String, SitePolicy)>,
    /// Each series' queue order (arrival order when none).
    pub orders: Vec<Option<OrderMaker>>,
    /// How each series routes jobs (the seed of random routing is the point's).
    pub routes: Vec<Route>,
    /// The program's own routers that [`GridRouting::Own`] routes name.
    pub routers: Vec<RouterMaker>,
    /// The platform's clusters.
    pub clusters: Vec<ClusterSpec>,
    /// Trace records after window and filter (empty for the model).
    pub trace: Vec<SwfJob>,
    /// The SWF trace's header lines (empty for other workloads).
    pub header: Vec<String>,
    /// The grid jobs' deadlines of each (load, seed) drawn so far
    /// ([`DeadlineSpec`]): every series of a point reads the same ones,
    /// and the base run behind them is made once.
    deadlines: DeadlineCache,
    /// `metrics.warmup`, read.
    warmup: Option<Duration>,
}

/// Deadlines by (offered load's bits, seed).
type DeadlineCache =
    std::sync::Arc<Mutex<std::collections::HashMap<(Option<u64>, u64), std::sync::Arc<Vec<Option<Time>>>>>>;

/// How one series spreads jobs over the platform.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Route {
    /// Each cluster runs its own local queue on what a fixed rule sent it.
    Clusters(Routing),
    /// Every cluster is a site core running the series' local policy;
    /// arrivals are routed by a rule or by the broker, with these options
    /// (whose policy each point replaces with its own).
    Grid(GridRouting, GridOptions),
}

/// One simulation of a sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Index into [`Prepared::policies`].
    pub policy: usize,
    /// Offered load, if scaled.
    pub load: Option<f64>,
    /// Seed.
    pub seed: u64,
}

/// What one point produced.
#[derive(Debug, Clone)]
pub struct PointResult {
    /// The point.
    pub point: Point,
    /// Policy name.
    pub policy: String,
    /// The offered load of the jobs actually simulated.
    pub offered_load: f64,
    /// All clusters together.
    pub overall: Summary,
    /// Per cluster, in platform order.
    pub clusters: Vec<(String, Summary)>,
    /// Jobs no cluster could take.
    pub unrouted: usize,
    /// Jobs killed at their wall time (grid runs).
    pub killed: usize,
    /// Moves made by queue adaptation (broker routings).
    pub moved: usize,
    /// Jobs co-allocated over several sites (broker routings).
    pub coallocated: usize,
    /// How well the broker predicted completions (broker routings).
    pub prediction: Option<PredictionError>,
    /// What the brokers asked of the sites (broker routings).
    pub messages: Option<brokk_broker::broker::Requests>,
    /// Jobs that ran under a broker other than their home's (series
    /// whose brokers delegate).
    pub delegated: Option<usize>,
    /// The sites' own users' jobs, all clusters together
    /// (`platform.local_load`).
    pub local: Option<Summary>,
    /// Every job of the workload that ran (a co-allocated one once).
    pub jobs: Vec<Outcome>,
    /// Every local job that ran.
    pub local_jobs: Vec<Outcome>,
    /// Every cluster's outcomes.
    pub runs: Vec<ClusterRun>,
    /// The measured period ([`Window`]).
    pub cut: Window,
    /// All clusters together, per user.
    pub by_user: Vec<(i64, Summary)>,
    /// All clusters together, per size class.
    pub by_size: Vec<(&'static str, Summary)>,
    /// The simulation's wall-clock time, its calls the jobs simulated: not
    /// part of the report, which is the same byte for byte from run to run.
    pub time: SchedulerTime,
}

/// What the trace's own system did: each job started after the wait the
/// trace recorded, on the platform as a whole.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// Offered load of the trace as recorded.
    pub offered_load: f64,
    /// Its figures, under the experiment's metric options.
    pub overall: Summary,
    /// When each job ran.
    pub outcomes: Vec<Outcome>,
    /// The measured period, as for the simulated points.
    pub cut: Window,
}

/// Reads and checks an experiment file, loading its trace.
pub fn load(path: &Path) -> Result<Prepared, ExperimentError> {
    load_with(path, None)
}

/// [`load`], looking for a trace file that is not where the experiment
/// says by its name in `traces` too (`brokk sim --traces DIR`).
pub fn load_with(path: &Path, traces: Option<&Path>) -> Result<Prepared, ExperimentError> {
    load_with_orders(path, traces, &Orders::new())
}

/// [`load_with`], where the experiment may also name the queue orders in
/// `orders` (a program's own).
pub fn load_with_orders(path: &Path, traces: Option<&Path>, orders: &Orders) -> Result<Prepared, ExperimentError> {
    let text = std::fs::read_to_string(path).map_err(|e| ExperimentError::Toml {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let spec: Experiment = toml::from_str(&text).map_err(|e| ExperimentError::Toml {
        path: path.display().to_string(),
        message: run_elsewhere(&text, None).unwrap_or_else(|| e.to_string()),
    })?;
    prepare_with_orders(spec, path.parent().unwrap_or(Path::new(".")), traces, orders)
}

/// Why an experiment file that does not read as one for `brokk sim own`
/// (`None`: a trace sweep's `run` or `sweep`) is of another kind, naming
/// the command that runs it; `None` when it is of that kind after all.
pub fn run_elsewhere(text: &str, own: Option<&str>) -> Option<String> {
    let (command, kind) = if is_admission(text) {
        ("workflows", "a workflow admission experiment")
    } else if is_architectures(text) {
        ("architectures", "an experiment over [DMM]'s architectures")
    } else if is_network(text) {
        ("network", "a network rerouting experiment")
    } else {
        return None;
    };
    (Some(command) != own).then(|| format!("this is {kind}: run it with `brokk sim {command}`"))
}

/// Whether an experiment file is a workflow admission experiment (it names
/// `schedulers`, which [`Experiment`] has not), run by [`crate::admission`].
pub fn is_admission(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("schedulers"))
}

/// Whether an experiment file is one over [DMM]'s architectures (it names
/// `architectures`), run by [`crate::architectures`].
pub fn is_architectures(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("architectures"))
}

/// Whether an experiment file is one of a network manager's bandwidth
/// requests (it names `requests`), run by [`crate::network`].
pub fn is_network(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("requests"))
}

/// Checks an experiment, resolving trace paths against `base`.
pub fn prepare(spec: Experiment, base: &Path) -> Result<Prepared, ExperimentError> {
    prepare_with(spec, base, None)
}

/// [`prepare`], looking for missing trace files by name in `traces` too.
pub fn prepare_with(spec: Experiment, base: &Path, traces: Option<&Path>) -> Result<Prepared, ExperimentError> {
    prepare_with_orders(spec, base, traces, &Orders::new())
}

/// [`prepare_with`], where the experiment may also name the queue orders in
/// `orders` (a program's own).
pub fn prepare_with_orders(
    spec: Experiment,
    base: &Path,
    traces: Option<&Path>,
    orders: &Orders,
) -> Result<Prepared, ExperimentError> {
    let invalid = |m: String| Err(ExperimentError::Invalid(m));
    let w = &spec.workload;
    let sources = [w.swf.is_some(), w.gwf.is_some(), w.lublin.is_some(), w.record.is_some()];
    if sources.iter().filter(|&&s| s).count() != 1 {
        return invalid("workload: give exactly one of swf, gwf, lublin or record".into());
    }
    if let Some(l) = &w.lublin {
        if !(l.days.is_finite() && l.days > 0.0 && l.days <= 36_500.0) {
            return invalid(format!("workload.lublin.days: {} is not between 0 and 36500", l.days));
        }
        if l.max_size.is_some_and(|m| !(1..=1_000_000).contains(&m)) {
            return invalid("workload.lublin.max_size: give 1 to 1000000 processors".into());
        }
    }
    let mut policies = Vec::new();
    for name in &spec.policies {
        let (local, order) = match name.split_once('+') {
            Some((l, o)) => (l, Some(o)),
            None => (name.as_str(), None),
        };
        let p = match parse_policy(local) {
            Ok(p) => p,
            Err(e) if local.starts_with("easy-mf@") => return invalid(format!("policies: {e}")),
            Err(_) => {
                return invalid(format!(
                    "policies: unknown policy {local:?} (fcfs, easy, conservative, backfill:K, each optionally \
                     +ORDER; on a grid's sites also easy-m, conservative-m, easy-mf or easy-mf@INTERVAL)"
                ))
            }
        };
        let order = match order.map(|o| orders.find(o, &spec.priorities)) {
            None => None,
            Some(Ok(o)) => Some(o),
            Some(Err(e)) => return invalid(format!("policies: {name}: {e}")),
        };
        policies.push((name.clone(), p, order));
    }
    if policies.is_empty() {
        return invalid("policies: name at least one".into());
    }
    for &l in spec.sweep.loads.iter().chain(&w.load) {
        if !(l.is_finite() && l > 0.0) {
            return invalid(format!("load {l} must be a positive number"));
        }
    }
    let Trace {
        jobs: mut trace,
        partitions,
        max_procs,
        sizes,
        header,
    } = read_trace(w, base, traces)?;
    if w.processors == Processors::Allocated {
        trace = allocated(&trace);
    }
    if let Some([from, to]) = w.window {
        trace = window(&trace, from, to);
    }
    if let Some(f) = &w.filter {
        trace = f.apply(&trace);
    }
    let p = &spec.platform;
    let clusters: Vec<ClusterSpec> = if p.from_partitions {
        if w.lublin.is_some() {
            return invalid("platform: from_partitions needs a trace".into());
        }
        let mut clusters = clusters_from_partitions(&partitions, &trace, max_procs);
        // A site's own report of its size beats an estimate from its use.
        for c in &mut clusters {
            if let Some((_, n)) = sizes.iter().find(|(k, _)| c.partitions.contains(k)) {
                c.procs = *n;
            }
        }
        clusters
    } else {
        p.clusters
            .iter()
            .map(|c| ClusterSpec {
                name: c.name.clone(),
                procs: c.procs,
                partitions: c.partitions.clone(),
                speed: c.speed,
            })
            .collect()
    };
    if clusters.is_empty() || clusters.iter().any(|c| c.procs == 0) {
        return invalid("platform: give clusters with at least one processor, or from_partitions = true".into());
    }
    let names: Vec<String> = if p.routings.is_empty() {
        vec![p
            .routing
            .clone()
            .unwrap_or_else(|| if p.from_partitions { "partition" } else { "round-robin" }.to_string())]
    } else {
        p.routings.clone()
    };
    let mut grid = Vec::new();
    // The program's own routers the routings name, in order of first use.
    let mut routers: Vec<RouterMaker> = Vec::new();
    // Per series, how old its broker's information may grow, when it says.
    let mut intervals = Vec::new();
    // Per series, whether and when its brokers delegate to each other.
    let mut delegations = Vec::new();
    for n in &names {
        let (rule, interval) = match n.split_once('@') {
            Some((rule, "ask")) => (rule, Some(Duration(0))),
            Some((rule, every)) => match Duration::parse_human(every) {
                Ok(d) => (rule, Some(d)),
                Err(e) => return invalid(format!("platform.routings: {n:?}: {e}")),
            },
            None => (n.as_str(), None),
        };
        let (rule, delegate) = match rule.split_once("+delegate") {
            Some((rule, "")) => (rule, Some(Duration::ZERO)),
            Some((rule, threshold)) => match threshold.strip_prefix(':').map(Duration::parse_human) {
                Some(Ok(d)) if d.0 >= 0 => (rule, Some(d)),
                Some(Err(e)) => return invalid(format!("platform.routings: {n:?}: delegation threshold: {e}")),
                _ => {
                    return invalid(format!(
                        "platform.routings: {n:?}: write `+delegate` or `+delegate:THRESHOLD` (`+delegate:10m`)"
                    ))
                }
            },
            None => (rule, None),
        };
        if let Some(threshold) = delegate {
            if p.brokers < 2 || p.coallocate || p.adapt_every > 0 {
                return invalid(format!(
                    "platform.routings: {n:?}: brokers delegate to each other with brokers = 2 or more, \
                     without coallocate or adapt_every"
                ));
            }
            delegations.push(Some(crate::grid::Delegate {
                threshold,
                ttl: brokk_broker::delegate::DEFAULT_TTL,
            }));
        } else {
            delegations.push(None);
        }
        // A program's own router, by its name (never a built-in's).
        let own = || {
            let maker = orders.router(rule)?;
            let k = routers
                .iter()
                .position(|m: &RouterMaker| m.name() == rule)
                .unwrap_or_else(|| {
                    routers.push(maker.clone());
                    routers.len() - 1
                });
            Some(GridRouting::Own(k))
        };
        match GridRouting::parse(rule).or_else(own) {
            Some(r) if delegate.is_some() && !r.is_broker() => {
                return invalid(format!(
                    "platform.routings: {n:?}: `+delegate` applies to broker routings"
                ))
            }
            Some(r) if interval.is_none() || r.is_broker() => {
                grid.push(r);
                intervals.push(interval);
            }
            Some(_) => {
                return invalid(format!(
                    "platform.routings: {n:?}: `@` sets how old a broker's information may grow; it applies to broker routings"
                ))
            }
            None => {
                return invalid(format!(
                    "platform.routing: unknown rule {n:?} (partition, round-robin, random, broker-tts, broker-ttd, broker-least-load, broker-ttd-reserve[:K], each broker rule with @ask or @INTERVAL, and +delegate[:THRESHOLD] with several brokers; or a router the program registered, such as Python's `routers=`)"
                ))
            }
        }
    }
    // Brokers and a program's routers read the sites as they run: the
    // whole platform is then a grid of site cores.
    let on_grid = grid.iter().any(|r| !matches!(r, GridRouting::Fixed(_)));
    if !on_grid && clusters.iter().any(|c| c.speed != 1.0) {
        return invalid("platform.clusters: speed applies to grid runs; add a broker routing to routings".into());
    }
    if clusters.iter().any(|c| !(c.speed.is_finite() && c.speed > 0.0)) {
        return invalid("platform.clusters: speed must be a positive number".into());
    }
    if p.info_ttl < 0 || p.info_delay < 0 || p.adapt_every < 0 || p.adapt_margin < 0 || p.latency < 0 {
        return invalid(
            "platform: info_ttl, info_delay, adapt_every, adapt_margin and latency are seconds, zero or more".into(),
        );
    }
    if let Some(l) = p.local_load {
        if !(l > 0.0 && l < 1.0) {
            return invalid(format!("platform: local_load must be above 0 and below 1, not {l}"));
        }
        if !on_grid || spec.workload.lublin.is_none() {
            return invalid(
                "platform: local_load applies to broker routings over a Lublin-Feitelson workload ([workload] lublin)"
                    .into(),
            );
        }
    }
    let warmup = match spec.metrics.warmup.as_deref().map(Duration::parse_human) {
        None => None,
        Some(Ok(d)) if d.0 > 0 => Some(d),
        Some(Ok(_)) => return invalid("metrics.warmup must be longer than zero".into()),
        Some(Err(e)) => return invalid(format!("metrics.warmup: {e}")),
    };
    if let Some(d) = spec.workload.deadlines {
        if !(d.share > 0.0 && d.share <= 1.0 && d.stringency >= 1.0 && d.stringency.is_finite()) {
            return invalid(format!(
                "workload.deadlines: share must be above 0 and at most 1, stringency at least 1 (not {} and {})",
                d.share, d.stringency
            ));
        }
        if !on_grid {
            return invalid("workload.deadlines applies to broker routings; add one to routings".into());
        }
    }
    if (p.adapt_every > 0 || p.coallocate || p.brokers > 1 || p.latency > 0) && !on_grid {
        return invalid(
            "platform: adapt_every, coallocate, brokers and latency apply to broker routings; add one to routings"
                .into(),
        );
    }
    if p.brokers == 0 || p.brokers > clusters.len().max(1) {
        return invalid(format!(
            "platform: brokers must be between 1 and the number of clusters ({}), not {}",
            clusters.len(),
            p.brokers
        ));
    }
    let published = match (p.published, &p.published_span) {
        (PublishedSpec::Summary, None) => None,
        (PublishedSpec::Summary, Some(_)) => {
            return invalid("platform: published_span applies to published = \"slots\"".into())
        }
        (PublishedSpec::Slots, None) => Some(Publishing::LIVE),
        (PublishedSpec::Slots, Some(span)) => match Duration::parse_human(span) {
            Ok(d) if d.0 > 0 => Some(Publishing {
                span: d,
                most: usize::MAX,
            }),
            Ok(_) => return invalid("platform: published_span must be longer than zero".into()),
            Err(e) => return invalid(format!("platform: published_span: {e}")),
        },
    };
    let adaptation = (p.adapt_every > 0).then_some(Adaptation {
        every: Duration(p.adapt_every),
        margin: Duration(p.adapt_margin),
    });
    let options = GridOptions {
        staleness: Staleness {
            info_ttl: Duration(p.info_ttl),
            info_delay: Duration(p.info_delay),
        },
        adaptation,
        coallocate: p.coallocate,
        brokers: p.brokers,
        latency: Duration(p.latency),
        published,
        ..GridOptions::default()
    };
    let mut series = Vec::new();
    let mut series_orders = Vec::new();
    let mut routes = Vec::new();
    for (((n, r), interval), delegation) in names.iter().zip(grid).zip(intervals).zip(delegations) {
        let mut options = options;
        if let Some(every) = interval {
            options.staleness.info_ttl = every;
        }
        options.delegation = delegation;
        let route = if on_grid {
            Route::Grid(r, options)
        } else {
            match r {
                GridRouting::Fixed(r) => Route::Clusters(r),
                GridRouting::Broker { .. } | GridRouting::Own(_) => Route::Grid(r, options),
            }
        };
        for (pn, policy, order) in &policies {
            // A grid's sites are site cores: each serves a built-in order
            // of its own.
            let mut route = route;
            if let (Some(o), Route::Grid(_, options)) = (order, &mut route) {
                let named: brokk_core::order::Named = o.name().parse().map_err(|_| {
                    ExperimentError::Invalid(format!(
                        "policies: {pn}: a grid's sites serve the built-in queue orders (sjf, ljf, wfp, \
                         fairshare[:HALF_LIFE_S]); {:?} runs on clusters under fixed routing",
                        o.name()
                    ))
                })?;
                options.order = Some(named);
            }
            if policy.is_partitioned() && matches!(route, Route::Clusters(_)) {
                return invalid(format!(
                    "policies: {pn}: partitioned policies run on a grid's sites; add a broker routing or local_load"
                ));
            }
            // The forecast policy publishes at its gateway's interval
            // unless it names its own.
            let policy = match interval {
                Some(every) if !pn.contains('@') => policy.publishing_every(every),
                _ => *policy,
            };
            let label = match (names.len(), policies.len()) {
                (1, _) => pn.clone(),
                (_, 1) => n.clone(),
                _ => format!("{n}/{pn}"),
            };
            series.push((label, policy));
            series_orders.push(order.clone());
            routes.push(route);
        }
    }
    let policies = series;
    if let Some(base) = &spec.metrics.base {
        if !policies.iter().any(|(name, _)| name == base) {
            let names: Vec<&str> = policies.iter().map(|(n, _)| n.as_str()).collect();
            return invalid(format!(
                "metrics.base: no series {base:?} (the series are {})",
                names.join(", ")
            ));
        }
    }
    Ok(Prepared {
        spec,
        policies,
        orders: series_orders,
        routers,
        routes,
        clusters,
        trace,
        header,
        deadlines: DeadlineCache::default(),
        warmup,
    })
}

/// A trace's records, its partitions, its declared machine size, and the
/// processors partitions are known to have (a record's sites say).
#[derive(Default)]
struct Trace {
    jobs: Vec<SwfJob>,
    partitions: Vec<(i64, String)>,
    max_procs: Option<i64>,
    sizes: Vec<(i64, u32)>,
    header: Vec<String>,
}

fn read_trace(w: &WorkloadSpec, base: &Path, traces: Option<&Path>) -> Result<Trace, ExperimentError> {
    let fail = |path: &Path, e: &dyn std::fmt::Display| ExperimentError::Workload {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    // Where the experiment says, else by its name in `traces`.
    let locate = |rel: &Path| {
        let path = base.join(rel);
        match (traces, rel.file_name()) {
            (Some(dir), Some(name)) if !path.exists() => dir.join(name),
            _ => path,
        }
    };
    if let Some(rel) = &w.swf {
        let path = locate(rel);
        let swf = crate::swf::read_path(&path, w.lenient).map_err(|e| fail(&path, &e))?;
        let (partitions, max_procs) = (swf.partitions(), swf.max_procs());
        return Ok(Trace {
            jobs: swf.jobs,
            partitions,
            max_procs,
            header: swf.header,
            ..Trace::default()
        });
    }
    if let Some(rel) = &w.gwf {
        let path = locate(rel);
        let file = std::fs::File::open(&path).map_err(|e| fail(&path, &e))?;
        let jobs = crate::gwf::read(std::io::BufReader::new(file)).map_err(|e| fail(&path, &e))?;
        // Submitting sites, numbered in name order, become partitions.
        let mut sites: Vec<String> = jobs.iter().map(|j| j.orig_site.clone()).collect();
        sites.sort();
        sites.dedup();
        let records = jobs
            .iter()
            .map(|j| SwfJob {
                partition: sites.binary_search(&j.orig_site).map_or(-1, |i| i as i64 + 1),
                ..j.swf
            })
            .collect();
        let partitions = sites.into_iter().enumerate().map(|(i, s)| (i as i64 + 1, s)).collect();
        return Ok(Trace {
            jobs: records,
            partitions,
            ..Trace::default()
        });
    }
    if let Some(rel) = &w.record {
        let path = locate(rel);
        let file = std::fs::File::open(&path).map_err(|e| fail(&path, &e))?;
        let replay = crate::replay::read(std::io::BufReader::new(file)).map_err(|e| fail(&path, &e))?;
        let partitions = replay.sites.iter().map(|(k, name, _)| (*k, name.clone())).collect();
        let sizes = replay.sites.iter().filter_map(|(k, _, n)| Some((*k, (*n)?))).collect();
        return Ok(Trace {
            jobs: replay.jobs,
            partitions,
            max_procs: None,
            sizes,
            header: Vec::new(),
        });
    }
    Ok(Trace::default())
}

impl Prepared {
    /// Every point of the sweep, in (load, seed, policy) order.
    pub fn points(&self) -> Vec<Point> {
        let loads: Vec<Option<f64>> = if self.spec.sweep.loads.is_empty() {
            vec![self.spec.workload.load]
        } else {
            self.spec.sweep.loads.iter().map(|&l| Some(l)).collect()
        };
        let seeds = if self.spec.sweep.seeds.is_empty() {
            vec![1]
        } else {
            self.spec.sweep.seeds.clone()
        };
        let mut out = Vec::new();
        for &load in &loads {
            for &seed in &seeds {
                for policy in 0..self.policies.len() {
                    out.push(Point { policy, load, seed });
                }
            }
        }
        out
    }

    /// The first point of each policy: a single run without the sweep.
    pub fn single_points(&self) -> Vec<Point> {
        let all = self.points();
        all.iter().take(self.policies.len()).copied().collect()
    }

    /// The platform's processors in all.
    pub fn total_procs(&self) -> u32 {
        self.clusters.iter().map(|c| c.procs).sum()
    }

    /// The workload of a point, as SWF records, and its offered load.
    pub fn workload(&self, load: Option<f64>, seed: u64) -> Result<(Vec<SwfJob>, f64), ExperimentError> {
        let procs = self.total_procs();
        if let Some(l) = &self.spec.workload.lublin {
            // Jobs are sized for the largest cluster, loaded for all of them.
            let largest = l
                .max_size
                .unwrap_or_else(|| self.clusters.iter().map(|c| c.procs).max().unwrap_or(procs));
            let mut params = lublin::Params::typeless(largest);
            if let Some(s) = l.serial_prob {
                params.serial_prob = s;
            }
            params.start_hour = l.start_hour;
            let span = (l.days * 86_400.0) as i64;
            let jobs = match load {
                Some(target) => lublin::at_load(params, procs, span, target, seed)?.0,
                None => lublin::take_span(lublin::Generator::new(params, procs, seed)?, span),
            };
            let offered = lublin::offered_load(&jobs, procs, span);
            return Ok((jobs, offered));
        }
        let span = |js: &[SwfJob]| {
            let first = js.iter().map(|j| j.submit).min().unwrap_or(0);
            let last = js.iter().map(|j| j.submit).max().unwrap_or(0);
            last - first
        };
        let offered = lublin::offered_load(&self.trace, procs, span(&self.trace));
        match load {
            Some(target) if offered > 0.0 => {
                let jobs = scale_load(&self.trace, target / offered);
                let now = lublin::offered_load(&jobs, procs, span(&jobs));
                Ok((jobs, now))
            }
            _ => Ok((self.trace.clone(), offered)),
        }
    }

    /// The sites' own users' jobs for a point of seed `seed`
    /// (`platform.local_load`): per cluster, a Lublin-Feitelson stream for
    /// its size at that load over the workload's days, each job's
    /// `partition` its cluster's position. None without a local load.
    fn local_jobs(&self, seed: u64, estimates: Estimates) -> Result<Vec<SimJob>, ExperimentError> {
        let (Some(load), Some(l)) = (self.spec.platform.local_load, &self.spec.workload.lublin) else {
            return Ok(Vec::new());
        };
        let span = (l.days * 86_400.0) as i64;
        let mut out = Vec::new();
        for (k, c) in self.clusters.iter().enumerate() {
            let mut params = lublin::Params::typeless(c.procs);
            params.start_hour = l.start_hour;
            // A stream of its own per cluster and seed, apart from the grid's.
            let own = seed.wrapping_mul(1_000_003).wrapping_add(k as u64 + 1);
            let records = lublin::at_load(params, c.procs, span, load, own)?.0;
            out.extend(from_swf(&records, estimates).into_iter().map(|mut j| {
                // Ids unique across the clusters' streams, so that runs
                // can be compared job by job.
                j.id += (k as i64 + 1) * LOCAL_IDS;
                j.partition = k as i64;
                j
            }));
        }
        Ok(out)
    }

    /// The deadline of each of `jobs` ([`DeadlineSpec`]) for a point of
    /// seed `seed`: the base policy's run of them beside the sites' `local`
    /// jobs on the platform of `options`, then a share drawn by the seed.
    /// A job the base run did not finish gets none.
    fn draw_deadlines(
        &self,
        jobs: &[SimJob],
        local: &[SimJob],
        spec: DeadlineSpec,
        seed: u64,
        options: GridOptions,
    ) -> Vec<Option<Time>> {
        let base = GridRouting::Broker {
            objective: brokk_model::Objective::LeastLoaded,
            reserve_top_k: 0,
        };
        let options = GridOptions {
            policy: Policy::EASY.into(),
            staleness: Staleness {
                info_ttl: Duration(600),
                info_delay: Duration::ZERO,
            },
            ..options
        };
        let ends: std::collections::HashMap<i64, Time> =
            simulate_grid_with_local(&self.clusters, jobs, local, &[], base, options)
                .jobs
                .iter()
                .map(|o| (o.id, o.end))
                .collect();
        // A stream of its own, apart from the workload's and the routing's.
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed ^ 0xdead_11e5);
        jobs.iter()
            .map(|j| {
                let chosen = rand::Rng::gen_bool(&mut rng, spec.share);
                let end = ends.get(&j.id).filter(|_| chosen)?;
                let response = (*end - j.submit).0 as f64;
                Some(j.submit + Duration((spec.stringency * response).ceil() as i64))
            })
            .collect()
    }

    /// The measured period of `jobs`: from the end of the warm-up after
    /// their first arrival, to their last arrival under the steady-state
    /// rule (no end when every job counts).
    fn cut(&self, jobs: &[SimJob]) -> Window {
        let to = match self.spec.metrics.horizon {
            Horizon::SteadyState => jobs.iter().map(|j| j.submit).max().or(Some(Time::EPOCH)),
            Horizon::CoolDown => None,
        };
        let from = self.warmup.and_then(|w| Some(jobs.iter().map(|j| j.submit).min()? + w));
        Window { from, to }
    }

    /// The trace's own schedule ("as recorded"): each job the simulator
    /// would run, started at its arrival plus the wait the trace recorded
    /// (jobs without a recorded wait are left out). None for a model
    /// workload, whose jobs never ran anywhere, and for a trace that
    /// records no job's wait (LCG-2005-1).
    pub fn as_recorded(&self) -> Option<Baseline> {
        if self.spec.workload.lublin.is_some() {
            return None;
        }
        let (records, offered_load) = self.workload(None, 1).ok()?;
        let kept = from_swf(&records, Estimates::Exact);
        let waits: std::collections::HashMap<i64, i64> = records.iter().map(|r| (r.id, r.wait)).collect();
        let outcomes: Vec<Outcome> = kept
            .iter()
            .filter_map(|j| {
                let wait = *waits.get(&j.id)?;
                (wait >= 0).then(|| {
                    let start = j.submit + Duration(wait);
                    Outcome {
                        id: j.id,
                        submit: j.submit,
                        start,
                        end: start + j.run,
                        size: j.size,
                        user: j.user,
                    }
                })
            })
            .collect();
        if outcomes.is_empty() {
            return None;
        }
        let cut = self.cut(&kept);
        let overall = summary(
            &outcomes,
            records.len(),
            self.total_procs(),
            cut,
            Duration(self.spec.metrics.bound),
        );
        Some(Baseline {
            offered_load,
            overall,
            outcomes,
            cut,
        })
    }

    /// Runs one point.
    pub fn run(&self, point: Point) -> Result<PointResult, ExperimentError> {
        let (records, offered_load) = self.workload(point.load, point.seed)?;
        let estimates = match self.spec.workload.estimates {
            EstimateSpec::Exact => Estimates::Exact,
            EstimateSpec::Requested => Estimates::Requested,
        };
        let jobs = from_swf(&records, estimates);
        let local = self.local_jobs(point.seed, estimates)?;
        let (name, policy) = &self.policies[point.policy];
        // The simulation's wall-clock time over its jobs: what a decision
        // costs under this policy, apart from the simulated figures.
        let started = std::time::Instant::now();
        // Each job once: on a grid, a co-allocated job is one job of its
        // whole size, though its parts count at their own sites.
        let (run, all, killed, moved, coallocated, prediction, messages, local_ran, delegated) = match self.routes
            [point.policy]
        {
            Route::Clusters(routing) => {
                let routing = match routing {
                    Routing::Random(_) => Routing::Random(point.seed),
                    r => r,
                };
                let order = self.orders[point.policy].as_ref();
                let run = simulate_platform(&self.clusters, &jobs, routing, policy.queue, order);
                let all: Vec<_> = run.clusters.iter().flat_map(|c| c.outcomes.iter().copied()).collect();
                (run, all, 0, 0, 0, None, None, Vec::new(), None)
            }
            Route::Grid(routing, options) => {
                let routing = match routing {
                    GridRouting::Fixed(Routing::Random(_)) => GridRouting::Fixed(Routing::Random(point.seed)),
                    r => r,
                };
                let options = GridOptions {
                    policy: *policy,
                    ..options
                };
                let deadlines = match self.spec.workload.deadlines {
                    Some(d) => {
                        let key = (point.load.map(f64::to_bits), point.seed);
                        let known = self.deadlines.lock().ok().and_then(|m| m.get(&key).cloned());
                        known.unwrap_or_else(|| {
                            let drawn = std::sync::Arc::new(self.draw_deadlines(&jobs, &local, d, point.seed, options));
                            if let Ok(mut m) = self.deadlines.lock() {
                                m.insert(key, drawn.clone());
                            }
                            drawn
                        })
                    }
                    None => Default::default(),
                };
                let g = match routing {
                    GridRouting::Own(k) => {
                        let mut router = self.routers[k].make();
                        simulate_grid_routed(&self.clusters, &jobs, &local, &deadlines, router.as_mut(), options)
                    }
                    _ => simulate_grid_with_local(&self.clusters, &jobs, &local, &deadlines, routing, options),
                };
                let run = PlatformRun {
                    clusters: g.clusters,
                    unrouted: g.unrouted,
                };
                (
                    run,
                    g.jobs,
                    g.killed,
                    g.moved,
                    g.coallocated,
                    g.prediction,
                    g.messages,
                    g.local,
                    g.delegated,
                )
            }
        };
        let time = SchedulerTime {
            calls: (jobs.len() + local.len()) as u64,
            total: started.elapsed(),
        };
        let cut = self.cut(&jobs);
        let bound = Duration(self.spec.metrics.bound);
        let clusters = run
            .clusters
            .iter()
            .map(|c| {
                // Those of its jobs that never ran count as submitted.
                let warm = c.outcomes.len() - cut.arrived(&c.outcomes);
                let s = summary(&c.outcomes, c.submitted - warm, c.spec.procs, cut, bound);
                (c.spec.name.clone(), s)
            })
            .collect();
        // Jobs the trace record could not describe (no size or run time) never
        // reach the simulator; they count as submitted but never finished.
        let submitted = match cut.from {
            None => records.len(),
            Some(f) => records.iter().filter(|r| Time(r.submit) >= f).count(),
        };
        let local_submitted = local.iter().filter(|j| cut.from.is_none_or(|f| j.submit >= f)).count();
        let procs = self.total_procs();
        let overall = summary(&all, submitted, procs, cut, bound);
        Ok(PointResult {
            cut,
            by_user: by_user(&all, procs, cut, bound),
            by_size: by_size(&all, procs, cut, bound),
            point,
            policy: name.clone(),
            offered_load,
            overall,
            clusters,
            unrouted: run.unrouted,
            killed,
            moved,
            coallocated,
            prediction,
            messages,
            delegated,
            local: (!local.is_empty()).then(|| summary(&local_ran, local_submitted, procs, cut, bound)),
            jobs: all,
            local_jobs: local_ran,
            runs: run.clusters,
            time,
        })
    }
}

/// Runs `points` on `threads` threads, calling `done` after each; results come
/// back in point order whatever the threads' timing.
pub fn run_points(
    prepared: &Prepared,
    points: &[Point],
    threads: usize,
    done: &(dyn Fn() + Sync),
) -> Result<Vec<PointResult>, ExperimentError> {
    crate::parallel::in_order(points, threads, done, |&p| prepared.run(p))
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(ExperimentError::Invalid("a simulation thread failed".into()))))
        .collect()
}
