//! The information layer (seed 000, 2.2): an InformationFetcher queries the
//! configured sites with bounded concurrency and a
//! per-site timeout, an InformationConverter turns what each backend publishes
//! into the GLUE 2 subset; the broker core keeps each site's last answer
//! for its time-to-live (`BrokerCore::informed`, `BrokerCore::stale`).
//!
//! The fetch here runs on virtual time: each answer says how long it took, slow or
//! failing sites are excluded and reported, and the elapsed time is what
//! `concurrency` parallel workers would have needed. The service's driver performs
//! the same steps with real requests; the rules (timeout, exclusion, ordering) live
//! here so that both behave alike.

use brokk_model::{Duration, Environment, ResourceInfo, Share, Time};

use crate::site::SiteError;

/// Information as a backend publishes it, before conversion.
#[derive(Debug, Clone, PartialEq)]
pub enum RawInfo {
    /// Already in the GLUE 2 subset (Brokk site agents publish this).
    Glue(Box<ResourceInfo>),
    /// A batch system's summary (what `sinfo` / `squeue` give).
    BatchSummary(BatchSummary),
}

/// The counts a batch system reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchSummary {
    /// Cluster name.
    pub name: String,
    /// Nodes.
    pub nodes: u32,
    /// Processors per node.
    pub cpus_per_node: u32,
    /// Idle processors.
    pub cpus_idle: u32,
    /// Memory per node in MiB.
    pub memory_mib_per_node: u64,
    /// Partitions and their time limits.
    pub partitions: Vec<(String, Option<Duration>)>,
    /// Running jobs.
    pub running: u32,
    /// Pending jobs.
    pub pending: u32,
}

/// Converts raw information into the GLUE 2 subset (seed 000's InformationConverter).
pub fn convert(endpoint: &str, raw: RawInfo) -> ResourceInfo {
    match raw {
        RawInfo::Glue(mut info) => {
            info.endpoint = endpoint.to_string();
            *info
        }
        RawInfo::BatchSummary(b) => {
            let total = b.nodes.saturating_mul(b.cpus_per_node);
            ResourceInfo {
                endpoint: endpoint.to_string(),
                name: b.name,
                shares: b
                    .partitions
                    .into_iter()
                    .map(|(name, max_wall_time)| Share {
                        name,
                        max_wall_time,
                        max_slots_per_job: None,
                    })
                    .collect(),
                environment: Environment {
                    cpus_per_node: Some(b.cpus_per_node),
                    memory_mib_per_node: Some(b.memory_mib_per_node),
                    ..Environment::default()
                },
                total_slots: total,
                free_slots: b.cpus_idle.min(total),
                used_slots: total - b.cpus_idle.min(total),
                running_jobs: b.running,
                waiting_jobs: b.pending,
                ..ResourceInfo::default()
            }
        }
    }
}

/// Answers information queries: the seam the service implements over HTTP and
/// the simulator in memory.
pub trait InfoSource {
    /// The raw information of `endpoint` and how long the query took.
    fn query(&self, endpoint: &str) -> Result<(RawInfo, Duration), SiteError>;
}

/// Why a site's information is missing from a fetch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchFailure {
    /// The query failed.
    #[error("{0}")]
    Error(SiteError),
    /// The answer took longer than the timeout.
    #[error("no answer within {0}")]
    Timeout(Duration),
}

/// How to fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchOptions {
    /// Queries in flight at once.
    pub concurrency: usize,
    /// A site slower than this is excluded.
    pub timeout: Duration,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            concurrency: 16,
            timeout: Duration(10),
        }
    }
}

/// The outcome of one fetch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FetchReport {
    /// Converted information, by endpoint order.
    pub infos: Vec<ResourceInfo>,
    /// Sites left out, with the reason, by endpoint order.
    pub failures: Vec<(String, FetchFailure)>,
    /// How long the fetch took with `concurrency` workers (a timed-out query
    /// occupies its worker for the timeout, then is abandoned).
    pub elapsed: Duration,
}

/// Queries `endpoints`, excluding failing and slow sites (seed 000's InformationFetcher).
/// The result is sorted by endpoint, whatever order the index gave or answers came in.
pub fn fetch(endpoints: &[String], source: &dyn InfoSource, opts: FetchOptions) -> FetchReport {
    let mut sorted: Vec<&String> = endpoints.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut report = FetchReport::default();
    let mut workers = vec![Duration::ZERO; opts.concurrency.max(1)];
    for e in sorted {
        let (took, outcome) = match source.query(e) {
            Ok((_, took)) if took > opts.timeout => (opts.timeout, Err(FetchFailure::Timeout(took))),
            Ok((raw, took)) => (took, Ok(raw)),
            Err(err) => (Duration::ZERO, Err(FetchFailure::Error(err))),
        };
        // List scheduling: the next query goes to the worker that frees up first.
        if let Some(w) = workers.iter_mut().min() {
            *w = *w + took;
        }
        match outcome {
            Ok(raw) => report.infos.push(convert(e, raw)),
            Err(f) => report.failures.push((e.clone(), f)),
        }
    }
    report.elapsed = workers.into_iter().max().unwrap_or_default();
    report
}

/// A broker's sites as one site, as a broker serving another as a site
/// publishes them ([VRM] 2.4's hierarchical domains): the largest site's
/// slots (a job runs at one site, so that bounds what one job may ask),
/// the most free at one site, every site's running and waiting jobs, the
/// shortest wait, each benchmark's best value, the widest bandwidth and the
/// shortest lag; reservations when any site takes them; what any of them
/// can run (`Environment::union`); the fold of their
/// free capacity over time when every one publishes it. `sites` are each
/// site's information or why it has none; with none answering, the
/// reason names every site's failure.
pub fn fold(name: &str, sites: &[Result<ResourceInfo, String>]) -> (ResourceInfo, Option<String>) {
    let up: Vec<&ResourceInfo> = sites.iter().filter_map(|s| s.as_ref().ok()).collect();
    let mut benchmarks: Vec<brokk_model::PublishedBenchmark> = Vec::new();
    for b in up.iter().flat_map(|i| &i.benchmarks) {
        match benchmarks.iter_mut().find(|k| k.name == b.name) {
            Some(k) => k.value = k.value.max(b.value),
            None => benchmarks.push(b.clone()),
        }
    }
    // Free capacity over time only when every site answering publishes it:
    // one that does not could be the one with room.
    let published: Option<Vec<&brokk_model::Availability>> = up.iter().map(|i| i.availability.as_ref()).collect();
    let unavailable = up.is_empty().then(|| {
        let why: Vec<&str> = sites
            .iter()
            .filter_map(|s| s.as_ref().err())
            .map(String::as_str)
            .collect();
        format!("none of its sites answers ({})", why.join("; "))
    });
    let info = ResourceInfo {
        endpoint: name.to_string(),
        name: name.to_string(),
        total_slots: up.iter().map(|i| i.total_slots).max().unwrap_or(0),
        free_slots: up.iter().map(|i| i.free_slots).max().unwrap_or(0),
        running_jobs: up.iter().map(|i| i.running_jobs).sum(),
        waiting_jobs: up.iter().map(|i| i.waiting_jobs).sum(),
        estimated_wait: Some(up.iter().filter_map(|i| i.estimated_wait).min().unwrap_or(Duration(0))),
        benchmarks,
        bandwidth_bytes_per_s: up.iter().filter_map(|i| i.bandwidth_bytes_per_s).max(),
        reservations: up.iter().any(|i| i.reservations),
        lag: Some(up.iter().filter_map(|i| i.lag).min().unwrap_or(Duration(0))),
        availability: published.and_then(|p| brokk_model::Availability::fold(&p)),
        environment: brokk_model::Environment::union(up.iter().map(|i| &i.environment)),
        ..ResourceInfo::default()
    };
    (info, unavailable)
}

/// What a site's information becomes once the broker has sent it a job of
/// `cpus` processors for up to `wall`, until the site's next answer: the
/// job takes free slots when nothing waits and it fits, else it waits.
/// The site's one-slot wait did not count the job, so it is bounded by
/// what the job itself implies: a job that fills the site frees a slot by
/// its end at the latest (`wall`), and one that queues adds at most its
/// wall time to the wait. So a burst spreads over the sites instead of
/// piling onto the one that looked best at the last refresh. Where the
/// site publishes its free capacity over time, the job's processors are
/// taken off it from where the job starts first after `now`.
pub fn book(info: &mut ResourceInfo, cpus: u32, wall: Duration, now: Time) {
    let cpus = cpus.max(1);
    let capacity = info.total_slots;
    if let Some(a) = info.availability.as_mut() {
        if let Some(start) = a.earliest_start(cpus, wall, now, capacity) {
            a.book(cpus, start, wall);
        }
    }
    if info.waiting_jobs == 0 && info.free_slots >= cpus {
        info.free_slots -= cpus;
        info.used_slots = info.used_slots.saturating_add(cpus);
        info.running_jobs = info.running_jobs.saturating_add(1);
        if info.free_slots == 0 {
            info.estimated_wait = Some(wall);
        }
    } else {
        info.waiting_jobs = info.waiting_jobs.saturating_add(1);
        info.estimated_wait = info.estimated_wait.map(|w| w + wall);
    }
}

/// How long a job sent with `prediction` may hold its processors, as
/// [`book`] counts it: the wall time it is sent with (an hour when nothing
/// predicts one).
pub fn booked_wall(prediction: &crate::predict::Prediction) -> Duration {
    prediction.requested_wall_time.unwrap_or(Duration::hours(1))
}

/// Default time-to-live of cached information (seed 000, section 5).
pub const DEFAULT_TTL: Duration = Duration(60);

/// What a fetch learned of a site: its information, or why there is none.
pub type Answer = Result<ResourceInfo, FetchFailure>;
