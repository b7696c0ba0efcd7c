//! The information layer (seed 000, 2.2): a ResourceFinder lists endpoints from an
//! index, an InformationFetcher queries them with bounded concurrency and a
//! per-site timeout, an InformationConverter turns what each backend publishes
//! into the GLUE 2 subset, and a cache keeps answers for a time-to-live.
//!
//! The fetch here runs on virtual time: each answer says how long it took, slow or
//! failing sites are excluded and reported, and the elapsed time is what
//! `concurrency` parallel workers would have needed. The service's driver performs
//! the same steps with real requests; the rules (timeout, exclusion, ordering) live
//! here so that both behave alike.

use std::collections::{BTreeMap, HashMap};

use brokk_model::{Duration, Environment, ResourceInfo, Share, Time};

use crate::site::SiteError;

/// Lists the endpoints an index knows (seed 000's ResourceFinder).
pub trait ResourceIndex {
    /// Endpoints, in any order.
    fn endpoints(&self) -> Vec<String>;
}

/// An index given as a fixed list, e.g. from the configuration.
#[derive(Debug, Clone, Default)]
pub struct StaticIndex(pub Vec<String>);

impl ResourceIndex for StaticIndex {
    fn endpoints(&self) -> Vec<String> {
        self.0.clone()
    }
}

/// Information as a backend publishes it, before conversion.
#[derive(Debug, Clone, PartialEq)]
pub enum RawInfo {
    /// Already in the GLUE 2 subset (Brokk site agents publish this).
    Glue(ResourceInfo),
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
            info
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchFailure {
    /// The query failed.
    Error(SiteError),
    /// The answer took longer than the timeout.
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

/// Default time-to-live of cached information (seed 000, section 5).
pub const DEFAULT_TTL: Duration = Duration(60);

/// Resource information kept for a time-to-live, with hit and miss counters.
#[derive(Debug, Clone)]
pub struct InfoCache {
    ttl: Duration,
    entries: HashMap<String, (ResourceInfo, Time)>,
    /// Lookups answered from the cache.
    pub hits: u64,
    /// Lookups that needed a fetch.
    pub misses: u64,
}

impl Default for InfoCache {
    fn default() -> Self {
        InfoCache::new(DEFAULT_TTL)
    }
}

impl InfoCache {
    /// An empty cache whose entries live for `ttl`.
    pub fn new(ttl: Duration) -> Self {
        InfoCache {
            ttl,
            entries: HashMap::new(),
            hits: 0,
            misses: 0,
        }
    }

    /// The fresh information of every endpoint the index lists at `now`, fetching
    /// only what is missing or stale. Failures are reported, never fatal.
    pub fn resources(
        &mut self,
        index: &dyn ResourceIndex,
        source: &dyn InfoSource,
        now: Time,
        opts: FetchOptions,
    ) -> (Vec<ResourceInfo>, Vec<(String, FetchFailure)>) {
        let mut fresh: BTreeMap<String, ResourceInfo> = BTreeMap::new();
        let mut stale = Vec::new();
        for e in index.endpoints() {
            match self.entries.get(&e) {
                Some((info, at)) if now - *at < self.ttl => {
                    self.hits += 1;
                    fresh.insert(e, info.clone());
                }
                _ => {
                    self.misses += 1;
                    stale.push(e);
                }
            }
        }
        let report = fetch(&stale, source, opts);
        for info in report.infos {
            self.entries.insert(info.endpoint.clone(), (info.clone(), now));
            fresh.insert(info.endpoint.clone(), info);
        }
        (fresh.into_values().collect(), report.failures)
    }
}
