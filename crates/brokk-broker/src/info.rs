//! The information layer ([ET-interop], 2.2): the service's driver queries the
//! sites with bounded concurrency and a per-site timeout (`FetchOptions`),
//! each answering in the GLUE 2 subset already (`brokk_proto::client::resource_info`
//! is the InformationConverter, stamping the endpoint asked), a
//! failure or a timeout is kept as the site's answer (`FetchFailure`), and
//! the broker core keeps each site's last answer for its time-to-live
//! (`BrokerCore::informed`, `BrokerCore::stale`). Here too: the fold of a
//! broker's sites into one, and the bookings the broker counts in a site's
//! information until the site answers again.

use brokk_model::{Duration, ResourceInfo, Time};

use crate::site::SiteError;

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

/// How the service fetches: queries in flight at once and the time after
/// which a site is left out of a refresh and reported.
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

/// Default time-to-live of cached information ([ET-interop], section 5).
pub const DEFAULT_TTL: Duration = Duration(60);

/// What a fetch learned of a site: its information, or why there is none.
pub type Answer = Result<ResourceInfo, FetchFailure>;
