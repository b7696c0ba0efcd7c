//! [DMM]'s question: how should independent clusters be joined into one
//! grid? Its architectures simulated on one platform (`EXPERIMENTS.md`,
//! D0): independent clusters (`sep-c`, and `condor`, which matches at
//! cycles), a central queue that clusters pull from (`cern`) or that pushes
//! to them from monitored figures (`koala`), and delegated matchmaking
//! (`dmm`), whose site managers delegate the requests they cannot serve to
//! their neighbours with the rules live brokers use
//! ([`brokk_broker::delegate`]: target order, path, time-to-live and what a
//! neighbour takes, passes on or rejects).
//!
//! The platform is [DMM]'s two grids, DAS-2 and Grid'5000, as
//! `EXPERIMENTS.md` proposes them where the paper's figure is lost
//! ([`Platform::das_g5k`]); each cluster runs FCFS without backfilling,
//! a job needs its processors at one cluster and runs for its recorded run
//! time; the workload is one Lublin-Feitelson stream per cluster
//! ([`workload`]); the run ends at the last arrival.
//!
//! Where this model departs from the paper's simulator, for lack of its
//! detail: a delegated request is answered at once (zero latency, as the
//! paper assumes of its network), not at the target's next matchmaking
//! cycle; the processors lent are held from then, and the job starts on
//! them at its own site's next delegation cycle (the paper's step 5); messages are
//! counted for delegation only (a request and an answer per hop, a claim
//! and a release per hop of an accepted chain).
//!
//! Beside the paper's six, `brokk` joins the same clusters with Brokk's
//! own brokers, one per cluster, delegating to each other with the broker
//! core `brokk serve` runs (`architectures/brokers.rs`).

mod brokers;
mod experiment;
mod run;

pub use experiment::{ArchitectureExperiment, ArchitectureReport, Figures, PointResult, Setting, SettingAggregate};
pub use run::{simulate, Architecture, Outcome, Params, Run};

use brokk_broker::delegate::Relation;

use crate::lublin;

/// The clusters and the administrative sites above them, linked as [DMM]
/// links its site managers.
#[derive(Debug, Clone, PartialEq)]
pub struct Platform {
    /// Processors of each site (0 for an administrative one).
    pub procs: Vec<u32>,
    /// Each site's parent.
    pub parent: Vec<Option<usize>>,
    /// Each site's siblings.
    pub siblings: Vec<Vec<usize>>,
    /// The grid of each site (0: DAS, 1: Grid'5000).
    pub grid: Vec<u8>,
    /// The site of each cluster in [DMM]'s goodput breakdown: a DAS
    /// cluster is its own, a Grid'5000 cluster its administrative parent's.
    pub group: Vec<usize>,
}

impl Platform {
    /// [DMM]'s DAS-2 and Grid'5000 as `EXPERIMENTS.md` (D0.1) proposes them:
    /// clusters 0-4 (DAS-2, 400 processors) and 5-19 (Grid'5000, 2,944),
    /// administrative sites 20 (DAS root) and 21 (Grid'5000 root) linked as
    /// siblings, and 22-30 (the Grid'5000 sites).
    pub fn das_g5k() -> Platform {
        let clusters = [
            144, 64, 64, 64, 64, 256, 128, 128, 64, 96, 320, 128, 160, 624, 64, 144, 224, 128, 96, 384,
        ];
        let mut procs: Vec<u32> = clusters.to_vec();
        procs.extend([0; 11]);
        let n = procs.len();
        let mut parent = vec![None; n];
        let children: [(usize, &[usize]); 11] = [
            (20, &[0, 1, 2, 3, 4]),
            (21, &[22, 23, 24, 25, 26, 27, 28, 29, 30]),
            (22, &[5, 6, 7, 8]),
            (23, &[9]),
            (24, &[10]),
            (25, &[11, 12]),
            (26, &[13, 14]),
            (27, &[15, 16]),
            (28, &[17]),
            (29, &[18]),
            (30, &[19]),
        ];
        for (p, cs) in children {
            for &c in cs {
                parent[c] = Some(p);
            }
        }
        let sets: [&[usize]; 7] = [
            &[0, 1, 2, 3, 4],
            &[5, 6, 7, 8],
            &[11, 12],
            &[13, 14],
            &[15, 16],
            &[22, 23, 24, 25, 26, 27, 28, 29, 30],
            &[20, 21],
        ];
        let mut siblings = vec![Vec::new(); n];
        for set in sets {
            for &a in set {
                siblings[a] = set.iter().copied().filter(|&b| b != a).collect();
            }
        }
        let grid = (0..n).map(|s| u8::from(!(s < 5 || s == 20))).collect();
        let group = (0..n)
            .map(|s| match (s, parent[s]) {
                (5.., Some(p)) if (22..=30).contains(&p) => p,
                _ => s,
            })
            .collect();
        Platform {
            procs,
            parent,
            siblings,
            grid,
            group,
        }
    }

    /// The clusters (sites with processors).
    pub fn clusters(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.procs.len()).filter(|&s| self.procs[s] > 0)
    }

    /// Site `s`'s neighbourhood: its parent, its children and its siblings,
    /// each with how it is linked.
    pub fn neighbours(&self, s: usize) -> Vec<(usize, Relation)> {
        let mut out: Vec<(usize, Relation)> = self.siblings[s].iter().map(|&b| (b, Relation::Sibling)).collect();
        out.extend(self.parent[s].map(|p| (p, Relation::Parent)));
        out.extend(
            (0..self.procs.len())
                .filter(|&c| self.parent[c] == Some(s))
                .map(|c| (c, Relation::Child)),
        );
        out
    }

    /// Site `s`'s name on a delegation's path.
    pub fn name(s: usize) -> String {
        format!("s{s}")
    }
}

/// A job of the grid: where it arrived, when, how long it runs and on how
/// many processors of one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GridJob {
    /// The cluster it arrived at.
    pub origin: usize,
    /// Arrival, seconds from the start.
    pub submit: i64,
    /// Run time, seconds.
    pub run: i64,
    /// Processors.
    pub size: u32,
}

/// [DMM]'s workload (D0.4): one Lublin-Feitelson stream per cluster over
/// `span` seconds, 95% serial jobs and the parallel ones split evenly
/// between powers of two and other sizes, sizes up to the cluster's,
/// each stream at the load `load_of` gives its cluster and from a seed of
/// its own; jobs in arrival order (ties by cluster).
pub fn workload(
    platform: &Platform,
    span: i64,
    load_of: impl Fn(usize) -> f64,
    seed: u64,
) -> Result<Vec<GridJob>, lublin::ModelError> {
    let mut jobs = Vec::new();
    for c in platform.clusters() {
        let n = platform.procs[c];
        let params = lublin::Params {
            serial_prob: 0.95,
            pow2_prob: 0.5,
            ..lublin::Params::typeless(n)
        };
        let own = seed.wrapping_mul(1_000_003).wrapping_add(c as u64 + 1);
        let (records, _) = lublin::at_load(params, n, span, load_of(c), own)?;
        jobs.extend(records.iter().filter(|r| r.procs > 0).map(|r| GridJob {
            origin: c,
            submit: r.submit,
            run: r.run.max(0),
            size: (r.procs as u32).min(n),
        }));
    }
    jobs.sort_by_key(|j| (j.submit, j.origin));
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_has_the_papers_totals_and_links() {
        let p = Platform::das_g5k();
        let das: u32 = (0..5).map(|c| p.procs[c]).sum();
        let g5k: u32 = (5..20).map(|c| p.procs[c]).sum();
        assert_eq!((das, g5k, p.clusters().count()), (400, 2944, 20));
        // Cluster 0: its four DAS siblings and the DAS root.
        let n0: Vec<usize> = p.neighbours(0).iter().map(|n| n.0).collect();
        assert_eq!(n0, [1, 2, 3, 4, 20]);
        // The DAS root: its sibling root and its five clusters.
        let r: Vec<(usize, Relation)> = p.neighbours(20);
        assert_eq!(r[0], (21, Relation::Sibling));
        assert_eq!(r.len(), 6);
        // Site 9 delegates to its site 23 (as in [DMM]'s Fig. 5).
        assert_eq!(p.neighbours(9), [(23, Relation::Parent)]);
        assert_eq!((p.group[6], p.group[13], p.group[2]), (22, 26, 2));
        assert_eq!((p.grid[4], p.grid[20], p.grid[5], p.grid[30]), (0, 0, 1, 1));
    }

    #[test]
    fn the_workload_reaches_each_clusters_load_with_mostly_serial_jobs() {
        let p = Platform::das_g5k();
        let jobs = workload(&p, 86_400, |_| 0.5, 1).unwrap();
        let serial = jobs.iter().filter(|j| j.size == 1).count() as f64 / jobs.len() as f64;
        assert!(serial > 0.9, "{serial}");
        for c in p.clusters() {
            let work: f64 = jobs
                .iter()
                .filter(|j| j.origin == c)
                .map(|j| f64::from(j.size) * j.run as f64)
                .sum();
            let load = work / (f64::from(p.procs[c]) * 86_400.0);
            // Within the model's steps: a day of one cluster's jobs.
            assert!((load - 0.5).abs() < 0.1, "cluster {c}: {load}");
        }
        assert!(jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
    }
}
