//! An experiment over [DMM]'s architectures (TOML): architectures x loads
//! (x delegation thresholds for `dmm`) x seeds, each seed one workload
//! every architecture runs, with [DMM]'s metrics aggregated over the seeds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::run::{simulate, Architecture, Params, Run};
use super::{workload, GridJob, Platform};
use crate::stats::{spread, Spread};

/// Seconds in the year goodput is counted in.
const YEAR: f64 = 365.0 * 86_400.0;

/// The experiment as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchitectureExperiment {
    /// Its name: the results' directory.
    pub name: String,
    /// The architectures compared: `sep-c`, `condor`, `fcondor`, `cern`,
    /// `koala`, `dmm`, `brokk`.
    pub architectures: Vec<String>,
    /// Days of arrivals simulated ([DMM]: one).
    #[serde(default = "one_day")]
    pub days: f64,
    /// The load of every cluster, one setting each; with `das_load`, of the
    /// Grid'5000 clusters only ([DMM] 5.5's imbalance).
    pub loads: Vec<f64>,
    /// The DAS clusters' load, fixed, when it differs from Grid'5000's.
    pub das_load: Option<f64>,
    /// Seeds: each a workload every setting runs (one when none).
    #[serde(default)]
    pub seeds: Vec<u64>,
    /// `dmm`'s delegation thresholds, one setting each ([DMM] 5.6); none:
    /// `params.threshold`.
    #[serde(default)]
    pub thresholds: Vec<f64>,
    /// The architectures' parameters.
    #[serde(default)]
    pub params: ParamsSpec,
    /// How the figures are written (`[plots] formats`).
    #[serde(default)]
    pub plots: crate::figures::FiguresSpec,
}

fn one_day() -> f64 {
    1.0
}

/// `[params]`: [`Params`] in seconds.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ParamsSpec {
    /// Matchmaking cycle, seconds.
    pub cycle_s: i64,
    /// `dmm`'s delegation cycle, seconds.
    pub delegation_cycle_s: i64,
    /// `dmm`'s delegation threshold.
    pub threshold: f64,
    /// `dmm`'s delegation time-to-live.
    pub ttl: u32,
    /// `koala`'s monitoring period, seconds (0: exact).
    pub monitor_s: i64,
    /// `fcondor`'s users per cluster.
    pub users_per_cluster: usize,
    /// `fcondor`'s half-life of past usage, seconds.
    pub usage_half_life_s: i64,
    /// `brokk`'s delegation threshold, seconds.
    pub brokk_threshold_s: i64,
    /// `brokk`'s age of information, seconds.
    pub info_ttl_s: i64,
    /// `brokk`'s queue adaptation period, seconds (0: none).
    pub brokk_adapt_s: i64,
}

impl Default for ParamsSpec {
    fn default() -> Self {
        let p = Params::default();
        ParamsSpec {
            cycle_s: p.cycle,
            delegation_cycle_s: p.delegation_cycle,
            threshold: p.threshold,
            ttl: p.ttl,
            monitor_s: p.monitor,
            users_per_cluster: p.users_per_cluster,
            usage_half_life_s: p.usage_half_life,
            brokk_threshold_s: p.brokk_threshold,
            info_ttl_s: p.info_ttl,
            brokk_adapt_s: p.brokk_adapt,
        }
    }
}

/// One compared setting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// The architecture.
    pub architecture: Architecture,
    /// The clusters' load (Grid'5000's when the DAS load is fixed).
    pub load: f64,
    /// `dmm`'s threshold (the parameter's for the others).
    pub threshold: f64,
}

/// [DMM]'s figures of one run (D0.6), over the jobs finished by its end.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// Jobs in the workload.
    pub jobs: usize,
    /// Finished by the end, % of all (JF%).
    pub finished_pct: f64,
    /// Average wait, seconds (AWT).
    pub awt: f64,
    /// Average slowdown, run time floored at 1 s (ASD).
    pub asd: f64,
    /// Average bounded slowdown (10 s), for comparison with the rest of Brokk.
    pub bsld: f64,
    /// Processor time of the finished jobs, CPU-years.
    pub goodput: f64,
    /// Processor time used over what the clusters had.
    pub utilization: f64,
    /// Delegation hops per job (0 for a job served where it arrived).
    pub delegations_per_job: f64,
    /// Hops per delegated job.
    pub delegations_per_delegated: f64,
    /// Delegation messages per job.
    pub messages_per_job: f64,
    /// Goodput on processors lent within one site, CPU-years.
    pub goodput_intra_site: f64,
    /// Lent between sites of one grid.
    pub goodput_intra_grid: f64,
    /// Lent between the grids.
    pub goodput_inter_grid: f64,
}

/// One seed's run of one setting.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// The setting.
    pub setting: Setting,
    /// The seed.
    pub seed: u64,
    /// What it measured.
    pub figures: Figures,
}

/// A setting's figures over its seeds.
#[derive(Debug, Clone, Serialize)]
pub struct SettingAggregate {
    /// The setting.
    pub setting: Setting,
    /// JF%.
    pub finished_pct: Spread,
    /// AWT, seconds.
    pub awt: Spread,
    /// ASD.
    pub asd: Spread,
    /// Goodput, CPU-years.
    pub goodput: Spread,
    /// Delegation hops per job.
    pub delegations_per_job: Spread,
    /// Delegation messages per job.
    pub messages_per_job: Spread,
    /// Goodput on lent processors by distance, CPU-years.
    pub goodput_lent: [Spread; 3],
}

/// What an experiment wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ArchitectureReport {
    /// The experiment's name.
    pub experiment: String,
    /// The platform's clusters' processors.
    pub clusters: Vec<u32>,
    /// Every run, by setting then seed.
    pub points: Vec<PointResult>,
    /// Each setting over its seeds, in the order of the settings.
    pub aggregates: Vec<SettingAggregate>,
}

impl ArchitectureExperiment {
    /// Reads and checks an experiment, naming what is wrong.
    pub fn from_toml(text: &str) -> Result<ArchitectureExperiment, String> {
        let e: ArchitectureExperiment = toml::from_str(text).map_err(|e| e.to_string())?;
        if e.architectures.is_empty() {
            return Err("architectures: name at least one".into());
        }
        for a in &e.architectures {
            Architecture::parse(a).map_err(|m| format!("architectures: {m}"))?;
        }
        if !(e.days > 0.0 && e.days <= 366.0) {
            return Err(format!("days: {} is not between 0 and 366", e.days));
        }
        if e.loads.is_empty() || e.loads.iter().chain(&e.das_load).any(|l| !(*l > 0.0 && *l <= 4.0)) {
            return Err("loads: give loads above 0 and at most 4".into());
        }
        if e.thresholds.iter().any(|t| !(*t > 0.0 && t.is_finite())) {
            return Err("thresholds: give positive thresholds".into());
        }
        let p = e.params;
        if p.cycle_s < 1
            || p.delegation_cycle_s < 1
            || p.monitor_s < 0
            || p.threshold.is_nan()
            || p.threshold <= 0.0
            || p.users_per_cluster == 0
            || p.usage_half_life_s < 1
        {
            return Err(
                "params: cycles and a usage half-life of at least a second, a positive threshold, a monitor period of 0 or more, at least one user per cluster".into(),
            );
        }
        if p.brokk_threshold_s < 0 || p.info_ttl_s < 0 || p.brokk_adapt_s < 0 {
            return Err("params: brokk_threshold_s, info_ttl_s and brokk_adapt_s are seconds, 0 or more".into());
        }
        Ok(e)
    }

    fn params(&self, threshold: f64) -> Params {
        let p = self.params;
        Params {
            cycle: p.cycle_s,
            delegation_cycle: p.delegation_cycle_s,
            threshold,
            ttl: p.ttl,
            monitor: p.monitor_s,
            users_per_cluster: p.users_per_cluster,
            usage_half_life: p.usage_half_life_s,
            brokk_threshold: p.brokk_threshold_s,
            info_ttl: p.info_ttl_s,
            brokk_adapt: p.brokk_adapt_s,
        }
    }

    /// The settings, in architecture, load, threshold order.
    pub fn settings(&self) -> Vec<Setting> {
        let thresholds = match self.thresholds.is_empty() {
            true => vec![self.params.threshold],
            false => self.thresholds.clone(),
        };
        let mut out = Vec::new();
        for a in &self.architectures {
            let Ok(architecture) = Architecture::parse(a) else {
                continue;
            };
            for &load in &self.loads {
                let ts: &[f64] = match architecture {
                    Architecture::Dmm => &thresholds,
                    _ => std::slice::from_ref(&self.params.threshold),
                };
                for &threshold in ts {
                    out.push(Setting {
                        architecture,
                        load,
                        threshold,
                    });
                }
            }
        }
        out
    }

    fn seeds(&self) -> Vec<u64> {
        match self.seeds.is_empty() {
            true => vec![1],
            false => self.seeds.clone(),
        }
    }

    /// Runs every setting on every seed's workload, on `threads` threads,
    /// calling `tick` after each (load, seed); the same output whatever
    /// the threads.
    pub fn sweep(&self, threads: usize, tick: &(dyn Fn() + Sync)) -> Result<ArchitectureReport, String> {
        let points = self.run_work(&self.work(), threads, tick)?;
        Ok(self.report(points))
    }

    /// Every (load, seed): one workload each, which every setting of that
    /// load runs.
    pub fn work(&self) -> Vec<(f64, u64)> {
        self.loads
            .iter()
            .flat_map(|&l| self.seeds().into_iter().map(move |s| (l, s)))
            .collect()
    }

    /// Share `k` of `n` of [`ArchitectureExperiment::work`] (every `n`th
    /// item from the `k`th): what one task of a job array runs.
    pub fn shard(&self, k: usize, n: usize) -> Vec<(f64, u64)> {
        self.work().into_iter().skip(k).step_by(n.max(1)).collect()
    }

    /// Every setting run on the workloads of `work`, on `threads` threads,
    /// calling `tick` after each; in no particular order ([`Self::report`]
    /// puts them in one).
    pub fn run_work(
        &self,
        work: &[(f64, u64)],
        threads: usize,
        tick: &(dyn Fn() + Sync),
    ) -> Result<Vec<PointResult>, String> {
        let platform = Platform::das_g5k();
        let settings = self.settings();
        let span = (self.days * 86_400.0) as i64;
        let next = AtomicUsize::new(0);
        let out: Mutex<Vec<PointResult>> = Mutex::new(Vec::new());
        let failed: Mutex<Option<String>> = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..threads.max(1) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(load, seed)) = work.get(i) else { break };
                    let load_of = |c: usize| match (self.das_load, platform.grid[c]) {
                        (Some(das), 0) => das,
                        _ => load,
                    };
                    let jobs = match workload(&platform, span, load_of, seed) {
                        Ok(j) => j,
                        Err(e) => {
                            *failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                                Some(format!("load {load}, seed {seed}: {e}"));
                            break;
                        }
                    };
                    for setting in settings.iter().filter(|st| st.load == load) {
                        let run = simulate(
                            setting.architecture,
                            &platform,
                            &jobs,
                            self.params(setting.threshold),
                            seed,
                        );
                        let figures = figures(&platform, &jobs, &run, span);
                        out.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(PointResult {
                                setting: *setting,
                                seed,
                                figures,
                            });
                    }
                    tick();
                });
            }
        });
        if let Some(e) = failed.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
            return Err(e);
        }
        Ok(out.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The report of `points` (from one run, or merged from the shards of
    /// a job array): the same, byte for byte, however they were computed.
    pub fn report(&self, mut points: Vec<PointResult>) -> ArchitectureReport {
        let platform = Platform::das_g5k();
        let settings = self.settings();
        let place = |p: &PointResult| settings.iter().position(|s| *s == p.setting).unwrap_or(usize::MAX);
        points.sort_by_key(|p| (place(p), p.seed));
        let aggregates = settings
            .iter()
            .map(|s| {
                let of = |f: fn(&Figures) -> f64| -> Spread {
                    let v: Vec<f64> = points
                        .iter()
                        .filter(|p| p.setting == *s)
                        .map(|p| f(&p.figures))
                        .collect();
                    spread(&v)
                };
                SettingAggregate {
                    setting: *s,
                    finished_pct: of(|f| f.finished_pct),
                    awt: of(|f| f.awt),
                    asd: of(|f| f.asd),
                    goodput: of(|f| f.goodput),
                    delegations_per_job: of(|f| f.delegations_per_job),
                    messages_per_job: of(|f| f.messages_per_job),
                    goodput_lent: [
                        of(|f| f.goodput_intra_site),
                        of(|f| f.goodput_intra_grid),
                        of(|f| f.goodput_inter_grid),
                    ],
                }
            })
            .collect();
        ArchitectureReport {
            experiment: self.name.clone(),
            clusters: platform.clusters().map(|c| platform.procs[c]).collect(),
            points,
            aggregates,
        }
    }
}

/// [DMM]'s figures of `run` over `jobs` on `platform`, `span` seconds of
/// arrivals (D0.6).
pub fn figures(platform: &Platform, jobs: &[GridJob], run: &Run, span: i64) -> Figures {
    let n = jobs.len().max(1) as f64;
    let (mut finished, mut wait, mut sd, mut bsld, mut work) = (0usize, 0.0, 0.0, 0.0, 0.0);
    let mut lent = [0.0f64; 3];
    let (mut hops, mut delegated, mut used) = (0u64, 0usize, 0.0);
    for (j, o) in jobs.iter().zip(&run.outcomes) {
        hops += u64::from(o.hops);
        delegated += usize::from(o.hops > 0);
        if let Some(start) = o.start {
            used += f64::from(j.size) * (o.end.unwrap_or(run.end).min(run.end) - start).max(0) as f64;
        }
        let (Some(start), Some(_), Some(at)) = (o.start, o.end, o.ran_at) else {
            continue;
        };
        finished += 1;
        let w = (start - j.submit) as f64;
        let r = j.run as f64;
        wait += w;
        sd += (w + r) / r.max(1.0);
        bsld += ((w + r) / r.max(10.0)).max(1.0);
        let cpu = f64::from(j.size) * r;
        work += cpu;
        if at != j.origin {
            let class = match (
                platform.group[at] == platform.group[j.origin],
                platform.grid[at] == platform.grid[j.origin],
            ) {
                (true, _) => 0,
                (false, true) => 1,
                (false, false) => 2,
            };
            lent[class] += cpu / YEAR;
        }
    }
    let f = finished.max(1) as f64;
    let capacity: f64 =
        platform.clusters().map(|c| f64::from(platform.procs[c])).sum::<f64>() * run.end.max(span).max(1) as f64;
    Figures {
        jobs: jobs.len(),
        finished_pct: 100.0 * finished as f64 / n,
        awt: wait / f,
        asd: sd / f,
        bsld: bsld / f,
        goodput: work / YEAR,
        utilization: used / capacity,
        delegations_per_job: hops as f64 / n,
        delegations_per_delegated: hops as f64 / delegated.max(1) as f64,
        messages_per_job: run.delegation_messages as f64 / n,
        goodput_intra_site: lent[0],
        goodput_intra_grid: lent[1],
        goodput_inter_grid: lent[2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_experiment_names_what_is_wrong() {
        let ok = "name = \"x\"\narchitectures = [\"sep-c\", \"dmm\"]\nloads = [0.5]\nthresholds = [0.8, 1.0]\n";
        let e = ArchitectureExperiment::from_toml(ok).unwrap();
        // dmm runs each threshold, the others once.
        assert_eq!(e.settings().len(), 3);
        for (bad, says) in [
            (ok.replace("dmm", "grid"), "not an architecture"),
            (ok.replace("[0.5]", "[]"), "loads"),
            (ok.replace("[0.8, 1.0]", "[0.0]"), "thresholds"),
            (format!("{ok}days = 0\n"), "days"),
            (format!("{ok}colour = 1\n"), "colour"),
            (format!("{ok}[params]\ninfo_ttl_s = -1\n"), "info_ttl_s"),
        ] {
            let m = ArchitectureExperiment::from_toml(&bad).unwrap_err();
            assert!(m.contains(says), "{bad}: {m}");
        }
    }

    #[test]
    fn a_sweep_is_the_same_on_one_thread_and_many() {
        let text = "name = \"x\"\narchitectures = [\"sep-c\", \"cern\", \"dmm\"]\nloads = [0.9]\nseeds = [1, 2]\n";
        let e = ArchitectureExperiment::from_toml(text).unwrap();
        let one = serde_json::to_string(&e.sweep(1, &|| {}).unwrap()).unwrap();
        let many = serde_json::to_string(&e.sweep(4, &|| {}).unwrap()).unwrap();
        assert_eq!(one, many);
        // Shards run apart and merged through their JSON give the same.
        let mut merged = Vec::new();
        for k in 0..3 {
            let part = e.run_work(&e.shard(k, 3), 1, &|| {}).unwrap();
            let text = serde_json::to_string(&part).unwrap();
            merged.extend(serde_json::from_str::<Vec<PointResult>>(&text).unwrap());
        }
        assert_eq!(serde_json::to_string(&e.report(merged)).unwrap(), one);
        let r = e.sweep(2, &|| {}).unwrap();
        let agg = |a: Architecture| r.aggregates.iter().find(|g| g.setting.architecture == a).unwrap();
        // Sharing beats independent clusters on wait; only dmm delegates.
        assert!(agg(Architecture::Dmm).awt.mean < agg(Architecture::SepC).awt.mean);
        assert_eq!(agg(Architecture::SepC).delegations_per_job.mean, 0.0);
        assert!(agg(Architecture::Dmm).delegations_per_job.mean > 0.0);
    }
}
