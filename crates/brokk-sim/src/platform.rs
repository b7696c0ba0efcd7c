//! Platforms of several clusters and the rule that routes each job to one:
//! by the trace's partition field (independent clusters, [DMM]'s `sep-c`),
//! round robin, or uniformly at random from a seed. Each cluster then runs its
//! own local policy on the jobs it received.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::{simulate, simulate_in_order, Outcome, Policy, SimJob};
use crate::orders::OrderMaker;
use crate::swf::SwfJob;

/// One cluster of a platform.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSpec {
    /// Name, for reports.
    pub name: String,
    /// Processors.
    pub procs: u32,
    /// Trace partitions routed here by [`Routing::Partition`].
    pub partitions: Vec<i64>,
    /// Speed relative to the machine the trace's run times were recorded
    /// on (1.0: the same); used by grid simulations.
    pub speed: f64,
}

/// How jobs are spread over clusters. Only clusters large enough for a job are
/// candidates; a job with none is counted as unrouted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// The cluster listing the job's partition.
    Partition,
    /// The next cluster after the last one used that is large enough.
    RoundRobin,
    /// A candidate drawn uniformly, from this seed.
    Random(u64),
}

/// One cluster's share of a platform run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterRun {
    /// The cluster.
    pub spec: ClusterSpec,
    /// Jobs routed here.
    pub submitted: usize,
    /// When they ran, in job order.
    pub outcomes: Vec<Outcome>,
}

/// A whole platform run.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformRun {
    /// Per cluster, in the platform's order.
    pub clusters: Vec<ClusterRun>,
    /// Jobs no cluster could take.
    pub unrouted: usize,
}

/// Picks a cluster for each job by a fixed [`Routing`]: the one rule of
/// platform runs and of grid runs routed without the broker.
#[derive(Debug, Clone)]
pub struct Router<'a> {
    clusters: &'a [ClusterSpec],
    routing: Routing,
    turn: usize,
    rng: ChaCha8Rng,
    by_partition: std::collections::HashMap<i64, usize>,
    candidates: Vec<usize>,
}

impl<'a> Router<'a> {
    /// A router over `clusters`; random routing draws from its seed.
    pub fn new(clusters: &'a [ClusterSpec], routing: Routing) -> Self {
        Router {
            clusters,
            routing,
            turn: 0,
            rng: ChaCha8Rng::seed_from_u64(match routing {
                Routing::Random(seed) => seed,
                _ => 0,
            }),
            by_partition: clusters
                .iter()
                .enumerate()
                .flat_map(|(c, s)| s.partitions.iter().map(move |&p| (p, c)))
                .collect(),
            candidates: Vec::with_capacity(clusters.len()),
        }
    }

    /// The cluster for `j`, `None` when no cluster large enough qualifies.
    pub fn route(&mut self, j: &SimJob) -> Option<usize> {
        let clusters = self.clusters;
        let fits = |c: usize| clusters[c].procs >= j.size;
        match self.routing {
            Routing::Partition => self.by_partition.get(&j.partition).copied().filter(|&c| fits(c)),
            Routing::RoundRobin => {
                let n = clusters.len();
                let c = (0..n).map(|k| (self.turn + k) % n).find(|&c| fits(c));
                if let Some(c) = c {
                    self.turn = c + 1;
                }
                c
            }
            Routing::Random(_) => {
                self.candidates.clear();
                self.candidates.extend((0..clusters.len()).filter(|&c| fits(c)));
                (!self.candidates.is_empty()).then(|| self.candidates[self.rng.gen_range(0..self.candidates.len())])
            }
        }
    }
}

/// Routes `jobs` over `clusters` and simulates each cluster under `policy`,
/// serving its queue in a fresh `order` if one is given (else arrival order).
pub fn simulate_platform(
    clusters: &[ClusterSpec],
    jobs: &[SimJob],
    routing: Routing,
    policy: Policy,
    order: Option<&OrderMaker>,
) -> PlatformRun {
    let mut shares: Vec<Vec<SimJob>> = vec![Vec::new(); clusters.len()];
    let mut unrouted = 0;
    let mut router = Router::new(clusters, routing);
    for j in jobs {
        match router.route(j) {
            Some(c) => shares[c].push(*j),
            None => unrouted += 1,
        }
    }
    PlatformRun {
        clusters: clusters
            .iter()
            .zip(shares)
            .map(|(spec, share)| ClusterRun {
                outcomes: match order {
                    Some(o) => simulate_in_order(spec.procs, &share, policy, o.make()),
                    None => simulate(spec.procs, &share, policy),
                },
                submitted: share.len(),
                spec: spec.clone(),
            })
            .collect(),
        unrouted,
    }
}

/// One cluster per partition of a grid trace, named from the header's
/// `Partition:` lines. Such traces do not record cluster sizes, so each
/// cluster gets, at least the largest job routed there:
/// - the most processors its partition's jobs used at once in the log, from
///   their recorded start (submit + wait) and run time, when waits are
///   recorded;
/// - otherwise its share of `max_procs` (the header's MaxProcs) in proportion
///   to its share of the trace's work (processors x run time), which gives
///   every cluster the trace's overall offered load;
/// - otherwise the most processors its jobs would use at once had none waited.
pub fn clusters_from_partitions(
    header_partitions: &[(i64, String)],
    jobs: &[SwfJob],
    max_procs: Option<i64>,
) -> Vec<ClusterSpec> {
    #[derive(Default)]
    struct Part {
        edges: Vec<(i64, i64)>,
        largest: i64,
        work: f64,
        waits_recorded: bool,
    }
    let mut parts: std::collections::BTreeMap<i64, Part> = std::collections::BTreeMap::new();
    for j in jobs {
        let size = if j.req_procs > 0 { j.req_procs } else { j.procs };
        if size <= 0 {
            continue;
        }
        let p = parts.entry(j.partition).or_default();
        p.largest = p.largest.max(size);
        if j.run > 0 {
            p.work += size as f64 * j.run as f64;
            p.waits_recorded |= j.wait >= 0;
            let start = j.submit + j.wait.max(0);
            p.edges.push((start + j.run, -size));
            p.edges.push((start, size));
        }
    }
    let total_work: f64 = parts.values().map(|p| p.work).sum();
    let name_of = |n: i64| {
        header_partitions
            .iter()
            .find(|(k, _)| *k == n)
            .map_or_else(|| format!("partition-{n}"), |(_, name)| name.clone())
    };
    parts
        .into_iter()
        .map(|(n, mut p)| {
            let size = match max_procs {
                Some(total) if !p.waits_recorded && total_work > 0.0 => {
                    (total as f64 * p.work / total_work).round() as i64
                }
                _ => {
                    // Ends sort before starts at the same second: -size < size.
                    p.edges.sort_unstable();
                    let (mut used, mut peak) = (0, 0);
                    for &(_, d) in &p.edges {
                        used += d;
                        peak = peak.max(used);
                    }
                    peak
                }
            };
            ClusterSpec {
                name: name_of(n),
                procs: u32::try_from(size.max(p.largest)).unwrap_or(u32::MAX),
                partitions: vec![n],
                speed: 1.0,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brokk_model::{Duration, Time};

    fn job(id: i64, size: u32, partition: i64) -> SimJob {
        SimJob {
            id,
            submit: Time(id),
            run: Duration(10),
            size,
            estimate: Duration(10),
            partition,
            ..SimJob::default()
        }
    }

    fn spec(name: &str, procs: u32, partitions: Vec<i64>) -> ClusterSpec {
        ClusterSpec {
            name: name.into(),
            procs,
            partitions,
            speed: 1.0,
        }
    }

    #[test]
    fn partition_routing_keeps_clusters_independent() {
        let cs = [spec("a", 4, vec![1]), spec("b", 8, vec![2, 3])];
        let js = [job(1, 2, 1), job(2, 8, 3), job(3, 8, 1), job(4, 1, 9)];
        let run = simulate_platform(&cs, &js, Routing::Partition, Policy::Fcfs, None);
        let ids = |c: usize| run.clusters[c].outcomes.iter().map(|o| o.id).collect::<Vec<_>>();
        assert_eq!((ids(0), ids(1)), (vec![1], vec![2]));
        // Job 3 is too large for its partition's cluster; job 4's partition has none.
        assert_eq!(run.unrouted, 2);
    }

    #[test]
    fn round_robin_skips_clusters_too_small() {
        let cs = [spec("a", 2, vec![]), spec("b", 8, vec![])];
        let js = [job(1, 1, -1), job(2, 1, -1), job(3, 4, -1), job(4, 1, -1)];
        let run = simulate_platform(&cs, &js, Routing::RoundRobin, Policy::Fcfs, None);
        let counts: Vec<usize> = run.clusters.iter().map(|c| c.submitted).collect();
        assert_eq!(counts, vec![2, 2]);
        let random = |seed| simulate_platform(&cs, &js, Routing::Random(seed), Policy::Fcfs, None);
        assert_eq!(random(5), random(5));
    }

    #[test]
    fn partition_clusters_are_sized_by_their_peak_use() {
        let rec = |submit, wait, run, procs, partition| SwfJob {
            submit,
            wait,
            run,
            procs,
            req_procs: -1,
            partition,
            ..SwfJob::default()
        };
        // Partition 1: [0,10) x2 and [5,15) x3 overlap (5); [10,20) x1 starts as
        // the first ends. Partition 2: one job of 7 that never ran.
        let jobs = [
            rec(0, 0, 10, 2, 1),
            rec(0, 5, 10, 3, 1),
            rec(10, 0, 10, 1, 1),
            rec(0, -1, -1, 7, 2),
        ];
        let cs = clusters_from_partitions(&[(1, "alpha".into())], &jobs, None);
        assert_eq!(cs, vec![spec("alpha", 5, vec![1]), spec("partition-2", 7, vec![2])]);
        // Without waits, MaxProcs is shared by work: 300 and 100 processor-seconds.
        let jobs = [rec(0, -1, 100, 3, 1), rec(0, -1, 100, 1, 2), rec(5, -1, 0, 2, 2)];
        let cs = clusters_from_partitions(&[], &jobs, Some(40));
        assert_eq!(
            cs,
            vec![spec("partition-1", 30, vec![1]), spec("partition-2", 10, vec![2])]
        );
        // Without MaxProcs either: the peak had no job waited.
        let cs = clusters_from_partitions(&[], &jobs, None);
        assert_eq!(cs[0].procs, 3);
    }
}
