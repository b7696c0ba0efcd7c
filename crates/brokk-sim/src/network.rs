//! Network rerouting ([VRM] 5.7.2, Fig. 5.6): a network manager alone,
//! admitting bandwidth requests between the grid's cities slot by slot on
//! the `k` fewest-hop paths, against the same manager that reroutes a
//! degraded slot's reservations as a maximum concurrent flow and tries the
//! request again ([`brokk_broker::reroute`]). Both see the same requests;
//! the rerouting one's acceptance is given with and without the requests
//! it saved that way, since the thesis finds it higher even without them.
//!
//! The requests follow the proposal of EXPERIMENTS.md V9: Poisson
//! arrivals, an exponential book-ahead, the bandwidth of a Lublin-Feitelson
//! size draw capped at the largest request, its run time in slots as the
//! duration, between two distinct cities chosen at random.

use brokk_broker::reroute::{Rerouted, SlottedNetwork, Transfer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use crate::admission::GridConfig;
use crate::lublin;
use crate::stats::{paired, spread, Spread};
use crate::timing::SchedulerTime;

/// A rerouting experiment as its TOML file states it (times in slots).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkExperiment {
    /// Name of the experiment (and of its results directory).
    pub name: String,
    /// Seeds; each point runs once per seed.
    pub seeds: Vec<u64>,
    /// Requests per run.
    pub requests: usize,
    /// Mean inter-arrival times of requests (slots), swept: lower is more load.
    pub inter_arrival: Vec<f64>,
    /// Candidate paths per endpoint pair (the `k` fewest hops), swept.
    #[serde(default = "default_paths")]
    pub paths: Vec<usize>,
    /// The concurrent flow's approximation (within `1 - epsilon`).
    #[serde(default = "default_epsilon")]
    pub epsilon: f64,
    /// Mean book-ahead (slots, exponential).
    #[serde(default = "default_book_ahead")]
    pub book_ahead: f64,
    /// Largest bandwidth a request asks for (units).
    #[serde(default = "default_max_bandwidth")]
    pub max_bandwidth: u32,
    /// Longest request (slots).
    #[serde(default = "default_max_duration")]
    pub max_duration: i64,
    /// Seconds per slot: a drawn run time becomes this many slots, rounded up.
    #[serde(default = "default_slot")]
    pub slot: i64,
    /// The cities and links; `bandwidth` is each link's units each way.
    pub grid: GridConfig,
    /// How the figures are written (`[plots] formats`).
    #[serde(default)]
    pub plots: crate::figures::FiguresSpec,
}

fn default_paths() -> Vec<usize> {
    vec![3]
}
fn default_epsilon() -> f64 {
    0.1
}
fn default_book_ahead() -> f64 {
    120.0
}
fn default_max_bandwidth() -> u32 {
    100
}
fn default_max_duration() -> i64 {
    1440
}
fn default_slot() -> i64 {
    60
}

/// What is wrong with an experiment.
#[derive(Debug, thiserror::Error)]
pub enum NetworkExperimentError {
    /// The file does not read.
    #[error("{0}")]
    Parse(String),
    /// A value is out of its range.
    #[error("network experiment: {0}")]
    Invalid(String),
}

/// One run: a number of paths, a load level and a seed, both managers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkPoint {
    /// Candidate paths per pair.
    pub paths: usize,
    /// Mean inter-arrival (slots).
    pub inter_arrival: f64,
    /// The seed.
    pub seed: u64,
    /// Requests submitted.
    pub requests: usize,
    /// Bandwidth-slots the requests ask for on their fewest-hop paths over
    /// the links' capacity-slots while they arrive.
    pub offered_load: f64,
    /// Accepted by the manager that does not reroute.
    pub accepted_min_hop: usize,
    /// Accepted by the rerouting manager, saved ones included.
    pub accepted_rerouting: usize,
    /// Of those, accepted only after rerouting their degraded slots.
    pub saved: usize,
    /// Degraded slots routed again.
    pub rerouted: usize,
    /// Degraded slots kept as they were: the flow fell short of 1.
    pub short_flow: usize,
    /// Degraded slots kept as they were: no single path for a reservation.
    pub unsplittable: usize,
}

/// One number of paths and load level over its seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkAggregate {
    /// Candidate paths per pair.
    pub paths: usize,
    /// Mean inter-arrival (slots).
    pub inter_arrival: f64,
    /// Offered load.
    pub offered_load: Spread,
    /// Acceptance of the manager that does not reroute.
    pub min_hop: Spread,
    /// Acceptance of the rerouting manager.
    pub rerouting: Spread,
    /// Its acceptance without the requests it saved.
    pub rerouting_unsaved: Spread,
    /// Rerouting's acceptance less the fewest-hop manager's, seed by seed
    /// on the same requests.
    pub gain: Spread,
    /// The same without the saved requests: what rerouting did for the
    /// requests after it.
    pub gain_unsaved: Spread,
    /// Share of degraded slots routed again.
    pub rerouted_share: Spread,
}

/// Everything a sweep found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkReport {
    /// The experiment's name.
    pub name: String,
    /// The flow's approximation.
    pub epsilon: f64,
    /// Every run.
    pub points: Vec<NetworkPoint>,
    /// Per load level.
    pub aggregates: Vec<NetworkAggregate>,
    /// The files each figure is written as.
    #[serde(skip)]
    pub formats: Vec<crate::figures::Format>,
}

impl NetworkExperiment {
    /// Reads an experiment file.
    pub fn load(path: &std::path::Path) -> Result<NetworkExperiment, NetworkExperimentError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| NetworkExperimentError::Parse(format!("reading {}: {e}", path.display())))?;
        NetworkExperiment::from_toml(&text).map_err(|e| {
            let e = crate::experiment::run_elsewhere(&text, Some("network")).unwrap_or_else(|| e.to_string());
            NetworkExperimentError::Parse(format!("in {}: {e}", path.display()))
        })
    }

    /// Reads an experiment from TOML text.
    pub fn from_toml(text: &str) -> Result<NetworkExperiment, NetworkExperimentError> {
        let e: NetworkExperiment = toml::from_str(text).map_err(|e| NetworkExperimentError::Parse(e.to_string()))?;
        e.check()?;
        Ok(e)
    }

    fn check(&self) -> Result<(), NetworkExperimentError> {
        let bad = |m: &str| Err(NetworkExperimentError::Invalid(m.into()));
        if self.requests == 0 || self.seeds.is_empty() {
            return bad("requests and seeds must not be empty");
        }
        if self.inter_arrival.is_empty() || self.inter_arrival.iter().any(|a| !(*a > 0.0 && a.is_finite())) {
            return bad("inter_arrival: positive slot counts");
        }
        if self.paths.is_empty() || self.paths.contains(&0) || !(self.epsilon > 0.0 && self.epsilon <= 0.5) {
            return bad("paths: counts of at least 1; epsilon: above 0, at most 0.5");
        }
        if !(self.book_ahead >= 0.0 && self.book_ahead.is_finite())
            || self.max_bandwidth == 0
            || self.max_duration <= 0
            || self.slot <= 0
        {
            return bad("book_ahead, max_bandwidth, max_duration and slot are positive");
        }
        for &k in &self.paths {
            self.network(k)?;
        }
        Ok(())
    }

    /// The network manager's empty schedule with `k` paths per pair, and
    /// the number of cities.
    fn network(&self, k: usize) -> Result<(SlottedNetwork, usize), NetworkExperimentError> {
        let (sites, links) = self
            .grid
            .platform()
            .map_err(|e| NetworkExperimentError::Invalid(e.to_string()))?;
        if sites.len() < 2 {
            return Err(NetworkExperimentError::Invalid("grid: at least two cities".into()));
        }
        let net =
            SlottedNetwork::new(sites.len(), &links, k).map_err(|e| NetworkExperimentError::Invalid(e.to_string()))?;
        Ok((net, sites.len()))
    }

    /// Every (paths, inter-arrival, seed) run, in the order they are reported.
    pub fn points(&self) -> Vec<(usize, f64, u64)> {
        self.settings()
            .into_iter()
            .flat_map(|(k, a)| self.seeds.iter().map(move |&s| (k, a, s)))
            .collect()
    }

    /// Every (paths, inter-arrival) pair, each aggregated over the seeds.
    fn settings(&self) -> Vec<(usize, f64)> {
        self.paths
            .iter()
            .flat_map(|&k| self.inter_arrival.iter().map(move |&a| (k, a)))
            .collect()
    }

    /// The requests of one run with their arrival slots, in arrival order:
    /// the same for every manager.
    pub fn requests(&self, cities: usize, inter_arrival: f64, seed: u64) -> Vec<(i64, Transfer)> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut sizes = lublin::Generator::new(lublin::Params::typeless(self.max_bandwidth), self.max_bandwidth, seed)
            .expect("the typeless model takes any machine size");
        let gap = Exp::new(1.0 / inter_arrival).expect("a positive inter-arrival");
        let ahead = Exp::new(1.0 / self.book_ahead.max(1e-9)).expect("a positive book-ahead");
        let mut now = 0.0;
        (0..self.requests)
            .map(|id| {
                now += gap.sample(&mut rng);
                let job = sizes.next().unwrap_or_default();
                let duration = (job.run.max(1) + self.slot - 1) / self.slot;
                let start = (now + ahead.sample(&mut rng)).ceil() as i64;
                let from = rng.gen_range(0..cities);
                let to = (from + rng.gen_range(1..cities)) % cities;
                let t = Transfer {
                    id: id as u64,
                    from,
                    to,
                    bandwidth: (job.procs.max(1) as u32).min(self.max_bandwidth),
                    start,
                    end: start + duration.clamp(1, self.max_duration),
                };
                (now.floor() as i64, t)
            })
            .collect()
    }

    /// One run of both managers, and the wall time the rerouting took (one
    /// call per degraded slot).
    pub fn run(
        &self,
        paths: usize,
        inter_arrival: f64,
        seed: u64,
    ) -> Result<(NetworkPoint, SchedulerTime), NetworkExperimentError> {
        let (empty, cities) = self.network(paths)?;
        let requests = self.requests(cities, inter_arrival, seed);
        let (mut plain, mut rerouting) = (empty.clone(), empty);
        let mut time = SchedulerTime::default();
        let mut p = NetworkPoint {
            paths,
            inter_arrival,
            seed,
            requests: requests.len(),
            offered_load: offered_load(&plain, requests.iter().map(|(_, t)| t)),
            accepted_min_hop: 0,
            accepted_rerouting: 0,
            saved: 0,
            rerouted: 0,
            short_flow: 0,
            unsplittable: 0,
        };
        for (now, t) in &requests {
            // What began before this arrival is past for every later one.
            let now = *now;
            plain.advance(now);
            rerouting.advance(now);
            p.accepted_min_hop += usize::from(plain.admit(t).is_ok());
            match rerouting.admit(t) {
                Ok(()) => p.accepted_rerouting += 1,
                Err(degraded) => {
                    for slot in degraded {
                        match time.time(|| rerouting.reroute(slot, self.epsilon)) {
                            Rerouted::Done => p.rerouted += 1,
                            Rerouted::ShortFlow => p.short_flow += 1,
                            Rerouted::Unsplittable => p.unsplittable += 1,
                            Rerouted::Empty => {}
                        }
                    }
                    if rerouting.admit(t).is_ok() {
                        p.accepted_rerouting += 1;
                        p.saved += 1;
                    }
                }
            }
        }
        Ok((p, time))
    }

    /// Every run on `threads` threads, and each run's rerouting time.
    pub fn sweep(
        &self,
        threads: usize,
        done: &(dyn Fn() + Sync),
    ) -> Result<(NetworkReport, Vec<SchedulerTime>), NetworkExperimentError> {
        let points = self.points();
        let (points, times): (Vec<NetworkPoint>, Vec<SchedulerTime>) =
            crate::parallel::in_order(&points, threads, done, |&(k, a, seed)| self.run(k, a, seed))
                .into_iter()
                .map(|r| r.unwrap_or_else(|| Err(NetworkExperimentError::Invalid("a simulation thread failed".into()))))
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .unzip();
        let aggregates = self
            .settings()
            .into_iter()
            .map(|(k, a)| {
                let of: Vec<&NetworkPoint> = points.iter().filter(|p| p.paths == k && p.inter_arrival == a).collect();
                let each = |f: &dyn Fn(&NetworkPoint) -> f64| of.iter().map(|p| f(p)).collect::<Vec<_>>();
                let over = |f: &dyn Fn(&NetworkPoint) -> f64| spread(&each(f));
                let share = |n: usize, p: &NetworkPoint| n as f64 / p.requests.max(1) as f64;
                let min_hop = each(&|p| share(p.accepted_min_hop, p));
                let rerouting = each(&|p| share(p.accepted_rerouting, p));
                let unsaved = each(&|p| share(p.accepted_rerouting - p.saved, p));
                NetworkAggregate {
                    paths: k,
                    inter_arrival: a,
                    offered_load: over(&|p| p.offered_load),
                    min_hop: spread(&min_hop),
                    rerouting: spread(&rerouting),
                    rerouting_unsaved: spread(&unsaved),
                    gain: paired(&rerouting, &min_hop),
                    gain_unsaved: paired(&unsaved, &min_hop),
                    rerouted_share: over(&|p| {
                        let degraded = p.rerouted + p.short_flow + p.unsplittable;
                        p.rerouted as f64 / degraded.max(1) as f64
                    }),
                }
            })
            .collect();
        Ok((
            NetworkReport {
                name: self.name.clone(),
                epsilon: self.epsilon,
                points,
                aggregates,
                formats: self.plots.formats.clone(),
            },
            times,
        ))
    }
}

/// Bandwidth-slots on the fewest-hop paths over the links' capacity-slots
/// from the first arrival's start to the last's.
fn offered_load<'a>(net: &SlottedNetwork, requests: impl Iterator<Item = &'a Transfer>) -> f64 {
    let (mut asked, mut first, mut last) = (0.0, i64::MAX, i64::MIN);
    for t in requests {
        let hops = net.paths(t.from, t.to).first().map_or(0, Vec::len);
        asked += f64::from(t.bandwidth) * (t.end - t.start) as f64 * hops as f64;
        first = first.min(t.start);
        last = last.max(t.start);
    }
    asked / (net.capacity_total() * (last - first).max(1) as f64)
}

/// Each run's rerouting time, named by its inter-arrival and seed.
pub fn timed(report: &NetworkReport, times: &[SchedulerTime]) -> Vec<crate::timing::Timed> {
    report
        .points
        .iter()
        .zip(times)
        .map(|(p, &time)| crate::timing::Timed {
            series: format!("rerouting, {} paths", p.paths),
            at: p.inter_arrival.to_string(),
            seed: p.seed,
            time,
        })
        .collect()
}

/// `summary.json`, `timings.csv` and the figure.
pub fn write_all(dir: &std::path::Path, report: &NetworkReport, times: &[SchedulerTime]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json)?;
    std::fs::write(dir.join("timings.csv"), crate::timing::csv(&timed(report, times)))?;
    for (name, svg) in crate::plots::network(report).map_err(std::io::Error::other)? {
        crate::figures::save(dir, &name, &svg, &report.formats)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
