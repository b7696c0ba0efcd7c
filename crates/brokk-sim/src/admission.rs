//! Workflow admission experiments ([VRM] 4.6): a stream of workflows with
//! book-ahead and deadlines, generated in advance so that every scheduler
//! sees the same sequence, admitted by the broker's own schedulers
//! (`brokk_broker::workflow`) over simulated sites (the site core, as live)
//! and a reservable network, beside a stream of local jobs that book the
//! sites directly. As in the thesis only allocation is simulated: a
//! reservation occupies its capacity for its booked span. Measured per run:
//! rejection rate, utilization of the steady phase, and messages per task.

use std::collections::BTreeMap;

use brokk_broker::reoptimize::{self, Placed, Search};
use brokk_broker::rescue::{fenced, Fenced, Strategy, NEVER};
use brokk_broker::workflow::{
    admit, admit_without_probing, memory_sites, remember, LinkSpec, Network, Options, Scheduler, SiteSpec, Topology,
};
use brokk_broker::Site;
use brokk_core::Request;
use brokk_model::workflow::Workflow;
use brokk_model::{Duration, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use serde::{Deserialize, Serialize};

use crate::course::{CourseConfig, CourseFigures, Courses, Grid};
use crate::lublin;
use crate::reoptimize::{ReoptimizeConfig, ReoptimizeFigures};
use crate::rescue::{Outage, RescueConfig, RescueFigures, View};
use crate::stats::{spread, Spread};
use crate::timing::SchedulerTime;
use crate::workflows::{generate, WorkflowParams};

/// An admission experiment as its TOML file states it. Times are in slots
/// of `slot` seconds, as [VRM] states them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionExperiment {
    /// Name of the experiment (and of its results directory).
    pub name: String,
    /// Seeds; each point runs once per seed.
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    /// Workflows submitted per run.
    pub workflows: usize,
    /// Schedulers compared.
    pub schedulers: Vec<Scheduler>,
    /// Mean inter-arrival times of workflows (slots), swept: lower is more load.
    pub inter_arrival: Vec<f64>,
    /// Seconds per slot.
    #[serde(default = "default_slot")]
    pub slot: i64,
    /// Mean book-ahead (slots, exponential).
    #[serde(default = "default_book_ahead")]
    pub book_ahead: f64,
    /// Longest book-ahead (slots).
    #[serde(default = "default_max_book_ahead")]
    pub max_book_ahead: i64,
    /// A workflow's deadline is its earliest start plus sigma times its
    /// critical path, sigma uniform in this range.
    #[serde(default = "default_slack")]
    pub slack: [f64; 2],
    /// Share of the offered load from local jobs booked at the sites directly.
    #[serde(default = "default_local_share")]
    pub local_share: f64,
    /// Factor on the data each dependency carries (1: the proposal's
    /// processors x run time of a further draw, in bytes at one byte per
    /// second per bandwidth unit).
    #[serde(default = "one")]
    pub data_scale: f64,
    /// How long preliminary holds last (slots), swept.
    #[serde(default = "default_hold")]
    pub hold: Vec<i64>,
    /// Rejecters per accepter, swept ([VRM] 4.6.2): an accepter commits
    /// its offer at once; a rejecter never answers, so its holds stay until
    /// they lapse. Rejecters come as a further stream of the same workflows.
    #[serde(default = "default_rejecters")]
    pub rejecters: Vec<f64>,
    /// Shares of the workflows sent to the monitored broker, swept ([VRM]
    /// 4.6.2's probe-phase experiment); a second broker, which probes,
    /// takes the rest on the same sites. 1 (the default): one broker.
    #[serde(default = "default_shares")]
    pub shares: Vec<f64>,
    /// Whether the monitored broker probes before it reserves, swept; one
    /// that does not answers its probes from what it knows (its own
    /// reservations) and learns from the sites' refusals.
    #[serde(default = "default_probing")]
    pub probing: Vec<bool>,
    /// The grid.
    pub grid: GridConfig,
    /// The workflows' shape.
    pub workflow: ShapeConfig,
    /// Whether the accepters' admitted workflows run after their commit,
    /// and how (`[course]`); without it only allocation is simulated.
    #[serde(default)]
    pub course: Option<CourseConfig>,
    /// A resource that fails during each run, and the rescue strategies
    /// compared (`[rescue]`, [VRM] 6.4); the jobs must be atomic.
    #[serde(default)]
    pub rescue: Option<RescueConfig>,
    /// A re-optimization of the admitted jobs once in the steady state,
    /// window sizes swept (`[reoptimize]`, [VRM] 5.7.1); the jobs must be
    /// atomic.
    #[serde(default)]
    pub reoptimize: Option<ReoptimizeConfig>,
    /// How the figures are written (`[plots] formats`).
    #[serde(default)]
    pub plots: crate::figures::FiguresSpec,
    /// The workflow every arrival submits, when `workflow.file` names one
    /// (read by the caller, which knows the job languages).
    #[serde(skip)]
    pub template: Option<Workflow>,
}

/// Sites and links.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridConfig {
    /// `"ediscom"`: the eight-city, twelve-link grid proposed for [VRM]'s
    /// lost map (EXPERIMENTS.md V0.1); without it, `sites` and `links`.
    #[serde(default)]
    pub preset: Option<String>,
    /// With the preset: the proposed heterogeneous speeds instead of 1.
    #[serde(default)]
    pub heterogeneous: bool,
    /// Sites (without a preset).
    #[serde(default)]
    pub sites: Vec<SiteSpec>,
    /// Links by site names (without a preset).
    #[serde(default)]
    pub links: Vec<[String; 2]>,
    /// Bandwidth of every link each way (bytes per second; a slot's data
    /// unit is one byte per second for one slot).
    #[serde(default = "default_bandwidth")]
    pub bandwidth: u64,
    /// Routes a transfer may take between two sites, fewest hops first, it
    /// going by whichever delivers first ([`Network::with_paths`]), swept
    /// (1: the fewest-hop route alone, the default).
    #[serde(default = "default_paths")]
    pub paths: Vec<usize>,
}

fn default_paths() -> Vec<usize> {
    vec![1]
}

impl GridConfig {
    /// The sites and links it describes, checked.
    pub fn platform(&self) -> Result<(Vec<SiteSpec>, Vec<LinkSpec>), AdmissionError> {
        let g = self;
        let (sites, links): (Vec<SiteSpec>, Vec<[String; 2]>) = match g.preset.as_deref() {
            Some("ediscom") => ediscom(g.heterogeneous),
            Some(other) => {
                return Err(AdmissionError::Invalid(format!(
                    "grid.preset: unknown `{other}` (known: ediscom)"
                )))
            }
            None => (g.sites.clone(), g.links.clone()),
        };
        if sites.is_empty()
            || sites
                .iter()
                .any(|s| s.capacity == 0 || s.speed.is_nan() || s.speed <= 0.0)
        {
            return Err(AdmissionError::Invalid(
                "grid: at least one site, each with processors and a positive speed".into(),
            ));
        }
        let index = |n: &str| {
            sites
                .iter()
                .position(|s| s.name == n)
                .ok_or_else(|| AdmissionError::Invalid(format!("grid.links: no site `{n}`")))
        };
        let links = links
            .iter()
            .map(|[a, b]| {
                Ok(LinkSpec {
                    a: index(a)?,
                    b: index(b)?,
                    bandwidth: g.bandwidth,
                })
            })
            .collect::<Result<Vec<_>, AdmissionError>>()?;
        Network::new(sites.len(), links.clone(), 1, Time(1)).map_err(|e| AdmissionError::Invalid(e.to_string()))?;
        if g.paths.is_empty() || g.paths.contains(&0) {
            return Err(AdmissionError::Invalid(
                "grid.paths: routes per pair of sites, each at least 1".into(),
            ));
        }
        Ok((sites, links))
    }
}

/// The generator's parameters ([VRM] 2.3.4) with the task count drawn per
/// workflow, or a workflow file every arrival submits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeConfig {
    /// A workflow (DAGMan, WfCommons WfFormat or Brokk's JSON), relative to
    /// the experiment file, submitted by every arrival instead of generated
    /// ones; its run times are seconds on the reference resource.
    #[serde(default)]
    pub file: Option<std::path::PathBuf>,
    /// Tasks per workflow, uniform in this inclusive range.
    #[serde(default = "default_tasks")]
    pub tasks: [usize; 2],
    /// Most tasks per level.
    #[serde(default = "default_width")]
    pub width: usize,
    /// Level width regularity.
    #[serde(default = "half")]
    pub regularity: f64,
    /// Dependency probability.
    #[serde(default = "half")]
    pub density: f64,
    /// Levels a dependency may span.
    #[serde(default = "default_jump")]
    pub max_jump: usize,
    /// Co-allocation probability between tasks of a level.
    #[serde(default = "default_coalloc")]
    pub coallocation_density: f64,
}

fn default_seeds() -> Vec<u64> {
    vec![1]
}
fn default_slot() -> i64 {
    60
}
fn default_book_ahead() -> f64 {
    120.0
}
fn default_max_book_ahead() -> i64 {
    5_000
}
fn default_slack() -> [f64; 2] {
    [1.5, 3.0]
}
fn default_local_share() -> f64 {
    0.4
}
fn one() -> f64 {
    1.0
}
fn default_hold() -> Vec<i64> {
    vec![5]
}
fn default_rejecters() -> Vec<f64> {
    vec![0.0]
}
fn default_shares() -> Vec<f64> {
    vec![1.0]
}
fn default_probing() -> Vec<bool> {
    vec![true]
}
fn default_bandwidth() -> u64 {
    100
}
fn default_tasks() -> [usize; 2] {
    [3, 12]
}
fn default_width() -> usize {
    4
}
fn half() -> f64 {
    0.5
}
fn default_jump() -> usize {
    2
}
fn default_coalloc() -> f64 {
    0.1
}

/// Longest task run time (slots), as the proposal clips Lublin's.
const MAX_TASK_SLOTS: i64 = 1_440;

/// An experiment that cannot run as written.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The file does not parse.
    #[error("{0}")]
    Parse(String),
    /// A value is out of range.
    #[error("{0}")]
    Invalid(String),
}

/// What a run varies besides its seed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Setting {
    /// Scheduler.
    pub scheduler: Scheduler,
    /// Mean inter-arrival of the accepters' workflows (slots).
    pub inter_arrival: f64,
    /// How long holds last (slots).
    pub hold: i64,
    /// Rejecters per accepter.
    pub rejecters: f64,
    /// Share of the workflows the monitored broker gets.
    pub share: f64,
    /// Whether the monitored broker probes.
    pub probing: bool,
    /// The rescue strategy, when a resource fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// How long it is down (slots; 0 without a failure).
    #[serde(skip_serializing_if = "is_zero")]
    pub downtime: i64,
    /// What the rescuing broker knows, when a resource fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub view: Option<View>,
    /// The re-optimization's window size (slots; 0 none), when it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<i64>,
    /// The re-optimization's search inside a window (`each` unsaid).
    #[serde(skip_serializing_if = "Search::is_each")]
    pub search: Search,
    /// The failed resource's load against the grid's, with every resource
    /// a domain of its own ([`RescueConfig::imbalance`]); none unsaid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imbalance: Option<f64>,
    /// How long each window's search and switch take (slots; 0 unsaid):
    /// what arrives meanwhile is booked against the schedule that holds.
    #[serde(skip_serializing_if = "is_zero")]
    pub delay: i64,
    /// Routes a transfer may take between two sites (1 unsaid).
    #[serde(skip_serializing_if = "is_one")]
    pub paths: usize,
}

fn is_one(x: &usize) -> bool {
    *x == 1
}

fn is_zero(x: &i64) -> bool {
    *x == 0
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmissionPoint {
    /// What the run varies.
    #[serde(flatten)]
    pub setting: Setting,
    /// Seed.
    pub seed: u64,
    /// Workflows submitted.
    pub submitted: usize,
    /// Of those, admitted.
    pub admitted: usize,
    /// Rejected share.
    pub rejection_rate: f64,
    /// Rejected share of the accepters' workflows.
    pub accepter_rejection_rate: f64,
    /// Processor time submitted (workflows at reference speed, and local
    /// jobs) over the grid's processors and the arrival span.
    pub offered_load: f64,
    /// Booked share of the grid's processor time over the steady phase
    /// (the first 10% of the arrival span dropped, up to the last arrival).
    pub utilization: f64,
    /// Of it, booked by admitted workflows.
    pub workflow_utilization: f64,
    /// Probe messages per submitted task.
    pub probes_per_task: f64,
    /// Preliminary reservation requests per submitted task.
    pub reservations_per_task: f64,
    /// Workflows the monitored broker got, and admitted.
    pub monitored: [usize; 2],
    /// The monitored broker's reservation attempts per task, for its
    /// admitted and its rejected workflows ([VRM] Fig. 4.7a).
    pub attempts_per_task: [f64; 2],
    /// Its messages (probes and reservation attempts) per task, admitted
    /// and rejected (Fig. 4.7b).
    pub messages_per_task: [f64; 2],
    /// Local jobs submitted and refused.
    pub local: [usize; 2],
    /// Rejections by reason.
    pub reasons: BTreeMap<String, usize>,
    /// The admitted workflows' courses, when they run (`[course]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub course: Option<CourseFigures>,
    /// What the rescue did, when a resource failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescue: Option<RescueFigures>,
    /// What the re-optimization did and what came after, when it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reoptimized: Option<ReoptimizeFigures>,
}

/// The figures aggregated over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmissionAggregate {
    /// What the runs vary.
    #[serde(flatten)]
    pub setting: Setting,
    /// Offered load over seeds.
    pub offered_load: Spread,
    /// Rejection rate over seeds.
    pub rejection_rate: Spread,
    /// The accepters' rejection rate over seeds.
    pub accepter_rejection_rate: Spread,
    /// Utilization over seeds.
    pub utilization: Spread,
    /// Probes per task over seeds.
    pub probes_per_task: Spread,
    /// Reservation requests per task over seeds.
    pub reservations_per_task: Spread,
    /// The monitored broker's attempts per task of admitted workflows.
    pub attempts_admitted: Spread,
    /// Of rejected workflows.
    pub attempts_rejected: Spread,
    /// Its messages per task of admitted workflows.
    pub messages_admitted: Spread,
    /// Of rejected workflows.
    pub messages_rejected: Spread,
    /// Share of the workflows run that finished, when they run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished: Option<Spread>,
    /// Terminated over affected jobs, every seed pooled, when a resource failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination: Option<Spread>,
    /// Moved needlessly over affected jobs, every seed pooled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Spread>,
    /// With re-optimization: the workflows admitted after it over those
    /// the same seed's run without it admitted, less one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gain: Option<Spread>,
}

/// Writes `summary.json`, `timings.csv` (each run's admission calls and
/// their wall-clock time, `times` in the report's point order) and the
/// plots into `dir`.
pub fn write_all(dir: &std::path::Path, report: &AdmissionReport, times: &[SchedulerTime]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("summary.json"), json)?;
    std::fs::write(dir.join("timings.csv"), crate::timing::csv(&timed(report, times)))?;
    for (name, svg) in crate::plots::admission(report).map_err(std::io::Error::other)? {
        crate::figures::save(dir, &name, &svg, &report.formats)?;
    }
    Ok(())
}

/// Each run's admission time ([VRM]'s scheduler time per workflow), named
/// by its scheduler (and its routes per pair of sites, where more than
/// one), inter-arrival and seed.
pub fn timed(report: &AdmissionReport, times: &[SchedulerTime]) -> Vec<crate::timing::Timed> {
    report
        .points
        .iter()
        .zip(times)
        .map(|(p, &time)| crate::timing::Timed {
            series: match p.setting.paths {
                1 => p.setting.scheduler.name().to_string(),
                k => format!("{} {k} routes", p.setting.scheduler.name()),
            },
            at: p.setting.inter_arrival.to_string(),
            seed: p.seed,
            time,
        })
        .collect()
}

/// Everything a sweep found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AdmissionReport {
    /// The experiment's name.
    pub name: String,
    /// The grid's sites.
    pub sites: Vec<SiteSpec>,
    /// Each run.
    pub points: Vec<AdmissionPoint>,
    /// Each setting over its seeds.
    pub aggregates: Vec<AdmissionAggregate>,
    /// The files each figure is written as (`[plots] formats`).
    #[serde(skip)]
    pub formats: Vec<crate::figures::Format>,
}

impl AdmissionExperiment {
    /// The experiment file at `path`, with the workflow its
    /// `workflow.file` names (relative to the file) read as the template
    /// every arrival submits; the warnings of reading that workflow.
    pub fn load(path: &std::path::Path) -> Result<(AdmissionExperiment, Vec<String>), AdmissionError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AdmissionError::Parse(format!("reading {}: {e}", path.display())))?;
        let mut exp = AdmissionExperiment::from_toml(&text).map_err(|e| {
            let e = crate::experiment::run_elsewhere(&text, Some("workflows")).unwrap_or_else(|| e.to_string());
            AdmissionError::Parse(format!("in {}: {e}", path.display()))
        })?;
        let mut warnings = Vec::new();
        if let Some(file) = &exp.workflow.file {
            let at = path.parent().unwrap_or(std::path::Path::new(".")).join(file);
            let read = brokk_jdl::workflow::read_path(&at).map_err(|e| AdmissionError::Parse(e.to_string()))?;
            warnings = read.warnings.iter().map(ToString::to_string).collect();
            exp = exp.with_template(read.workflow);
        }
        Ok((exp, warnings))
    }

    /// Reads an experiment from TOML text.
    pub fn from_toml(text: &str) -> Result<AdmissionExperiment, AdmissionError> {
        let e: AdmissionExperiment = toml::from_str(text).map_err(|e| AdmissionError::Parse(e.to_string()))?;
        e.check()?;
        Ok(e)
    }

    fn check(&self) -> Result<(), AdmissionError> {
        let bad = |m: &str| Err(AdmissionError::Invalid(m.into()));
        if self.workflows == 0 || self.schedulers.is_empty() || self.seeds.is_empty() {
            return bad("workflows, schedulers and seeds must not be empty");
        }
        if self.inter_arrival.is_empty() || self.inter_arrival.iter().any(|a| !(*a > 0.0 && a.is_finite())) {
            return bad("inter_arrival: positive slot counts");
        }
        if self.slot <= 0
            || self.hold.is_empty()
            || self.hold.iter().any(|&h| h <= 0)
            || self.max_book_ahead < 0
            || self.book_ahead.is_nan()
            || self.book_ahead < 0.0
        {
            return bad("slot and every hold are positive; book_ahead and max_book_ahead are not negative");
        }
        if self.rejecters.is_empty() || self.rejecters.iter().any(|r| r.is_nan() || !(0.0..=100.0).contains(r)) {
            return bad("rejecters: rejecters per accepter, from 0 to 100");
        }
        if !(1.0..=100.0).contains(&self.slack[0]) || self.slack[1] < self.slack[0] || self.slack[1] > 100.0 {
            return bad("slack: [low, high] with 1 <= low <= high <= 100");
        }
        if !(self.data_scale >= 0.0 && self.data_scale.is_finite()) {
            return bad("data_scale: a factor of 0 or more");
        }
        if self.shares.is_empty() || self.shares.iter().any(|x| !(*x > 0.0 && *x <= 1.0)) || self.probing.is_empty() {
            return bad("shares: from more than 0 to 1; probing: true, false or both");
        }
        if !(0.0..0.95).contains(&self.local_share) {
            return bad("local_share: from 0 to 0.95");
        }
        let [lo, hi] = self.workflow.tasks;
        if lo == 0 || hi < lo || hi > 10_000 {
            return bad("workflow.tasks: [low, high] with 1 <= low <= high <= 10000");
        }
        if let Some(c) = &self.course {
            c.check().map_err(AdmissionError::Invalid)?;
        }
        if let Some(r) = &self.rescue {
            r.check().map_err(AdmissionError::Invalid)?;
            // [VRM] 6.4 moves atomic jobs: a task of a workflow would take
            // its dependencies' transfers with it.
            if self.workflow.tasks != [1, 1] || self.workflow.file.is_some() || self.course.is_some() {
                return bad("rescue: the jobs are atomic (workflow.tasks = [1, 1], no workflow file, no [course])");
            }
        }
        if let Some(r) = &self.reoptimize {
            r.check().map_err(AdmissionError::Invalid)?;
            if self.workflow.tasks != [1, 1] || self.workflow.file.is_some() || self.course.is_some() {
                return bad("reoptimize: the jobs are atomic (workflow.tasks = [1, 1], no workflow file, no [course])");
            }
            if self.rescue.is_some() {
                return bad("reoptimize and rescue: one or the other in an experiment");
            }
        }
        // The generator checks its own parameters: try one workflow.
        generate(&self.params(lo, 512), "check", 0).map_err(|e| AdmissionError::Invalid(e.to_string()))?;
        let (sites, _) = self.platform()?;
        if let Some(r) = &self.rescue {
            let failed = r.site_of(&sites).map_err(AdmissionError::Invalid)?;
            let capacities: Vec<u32> = sites.iter().map(|s| s.capacity).collect();
            for &x in &r.imbalance {
                RescueConfig::domain_shares(&capacities, failed, x).map_err(AdmissionError::Invalid)?;
            }
        }
        Ok(())
    }

    /// The sites and links.
    pub fn platform(&self) -> Result<(Vec<SiteSpec>, Vec<LinkSpec>), AdmissionError> {
        self.grid.platform()
    }

    /// Every setting: routes x scheduler x inter-arrival x hold x rejecters
    /// x share x probing x (rescue view x imbalance x downtime x rescue
    /// strategy, or re-optimization window x search x delay), in that
    /// nesting.
    pub fn settings(&self) -> Vec<Setting> {
        let mut out = Vec::new();
        for &paths in &self.grid.paths {
            for &scheduler in &self.schedulers {
                for &inter_arrival in &self.inter_arrival {
                    for &hold in &self.hold {
                        for &rejecters in &self.rejecters {
                            for &share in &self.shares {
                                for &probing in &self.probing {
                                    let base = Setting {
                                        scheduler,
                                        inter_arrival,
                                        hold,
                                        rejecters,
                                        share,
                                        probing,
                                        strategy: None,
                                        downtime: 0,
                                        view: None,
                                        window: None,
                                        search: Search::Each,
                                        delay: 0,
                                        imbalance: None,
                                        paths,
                                    };
                                    if let Some(r) = &self.reoptimize {
                                        for &w in &r.windows {
                                            // The baseline (window 0) once, whatever the search.
                                            let (searches, delays) = match w {
                                                0 => (&[Search::Each][..], &[0][..]),
                                                _ => (&r.searches[..], &r.delays[..]),
                                            };
                                            for &search in searches {
                                                for &delay in delays {
                                                    out.push(Setting {
                                                        window: Some(w),
                                                        search,
                                                        delay,
                                                        ..base
                                                    });
                                                }
                                            }
                                        }
                                        continue;
                                    }
                                    match &self.rescue {
                                        None => out.push(base),
                                        Some(r) => {
                                            let imbalances: Vec<Option<f64>> = match r.imbalance.is_empty() {
                                                true => vec![None],
                                                false => r.imbalance.iter().copied().map(Some).collect(),
                                            };
                                            for &view in &r.views {
                                                for &imbalance in &imbalances {
                                                    for &downtime in &r.downtime {
                                                        for &s in &r.strategies {
                                                            out.push(Setting {
                                                                strategy: Some(s),
                                                                downtime,
                                                                view: Some(view),
                                                                imbalance,
                                                                ..base
                                                            });
                                                        }
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Every run: each setting once per seed.
    pub fn points(&self) -> Vec<(Setting, u64)> {
        self.settings()
            .into_iter()
            .flat_map(|s| self.seeds.iter().map(move |&seed| (s, seed)))
            .collect()
    }

    /// Runs every point on `threads` threads (`done` after each) and
    /// aggregates; the same file gives the same report whatever the threads.
    pub fn sweep(&self, threads: usize, done: &(dyn Fn() + Sync)) -> Result<AdmissionReport, AdmissionError> {
        self.sweep_timed(threads, done).map(|(report, _)| report)
    }

    /// [`AdmissionExperiment::sweep`], and each run's admission calls with
    /// their wall-clock time in the report's point order: kept apart from
    /// the report, which is the same byte for byte from run to run.
    pub fn sweep_timed(
        &self,
        threads: usize,
        done: &(dyn Fn() + Sync),
    ) -> Result<(AdmissionReport, Vec<SchedulerTime>), AdmissionError> {
        let (sites, links) = self.platform()?;
        let points = self.points();
        let (points, times): (Vec<AdmissionPoint>, Vec<SchedulerTime>) =
            crate::parallel::in_order(&points, threads, done, |&(setting, seed)| {
                let mut time = SchedulerTime::default();
                (self.run(&sites, &links, setting, seed, &mut time), time)
            })
            .into_iter()
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| AdmissionError::Invalid("a simulation thread failed".into()))?
            .into_iter()
            .unzip();
        let mut aggregates = Vec::new();
        for setting in self.settings() {
            let of: Vec<&AdmissionPoint> = points.iter().filter(|p| p.setting == setting).collect();
            let over = |f: fn(&AdmissionPoint) -> f64| spread(&of.iter().map(|p| f(p)).collect::<Vec<_>>());
            aggregates.push(AdmissionAggregate {
                setting,
                offered_load: over(|p| p.offered_load),
                rejection_rate: over(|p| p.rejection_rate),
                accepter_rejection_rate: over(|p| p.accepter_rejection_rate),
                utilization: over(|p| p.utilization),
                probes_per_task: over(|p| p.probes_per_task),
                reservations_per_task: over(|p| p.reservations_per_task),
                attempts_admitted: over(|p| p.attempts_per_task[0]),
                attempts_rejected: over(|p| p.attempts_per_task[1]),
                messages_admitted: over(|p| p.messages_per_task[0]),
                messages_rejected: over(|p| p.messages_per_task[1]),
                finished: self.course.as_ref().map(|_| {
                    over(|p| {
                        p.course
                            .as_ref()
                            .map_or(0.0, |c| c.finished as f64 / c.ran.max(1) as f64)
                    })
                }),
                termination: setting.strategy.map(|_| pooled(&of, |r| r.terminated)),
                overhead: setting.strategy.map(|_| pooled(&of, |r| r.overhead)),
                gain: setting.window.map(|_| {
                    let gains: Vec<f64> = of
                        .iter()
                        .filter_map(|p| {
                            let base = points.iter().find(|b| {
                                b.seed == p.seed
                                    && b.setting
                                        == Setting {
                                            window: Some(0),
                                            search: Search::Each,
                                            delay: 0,
                                            ..p.setting
                                        }
                            })?;
                            let (mine, theirs) = (p.reoptimized.as_ref()?, base.reoptimized.as_ref()?);
                            (theirs.admitted_after > 0)
                                .then(|| mine.admitted_after as f64 / theirs.admitted_after as f64 - 1.0)
                        })
                        .collect();
                    spread(&gains)
                }),
            });
        }
        let report = AdmissionReport {
            name: self.name.clone(),
            sites,
            points,
            aggregates,
            formats: self.plots.formats.clone(),
        };
        Ok((report, times))
    }

    /// The arrivals of one (inter-arrival, rejecters, seed): the accepters'
    /// workflows with their earliest start and deadline, the rejecters'
    /// (a stream of its own, so the accepters' is the same for every
    /// share), and local jobs, in time order. The scheduler and the hold
    /// play no part, so every scheduler sees the same stream.
    pub fn arrivals(&self, sites: &[SiteSpec], inter_arrival: f64, rejecters: f64, seed: u64) -> Vec<Arrival> {
        let slot = self.slot;
        let largest = sites.iter().map(|s| s.capacity).max().unwrap_or(1);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0004);
        let gap = Exp::new(1.0 / inter_arrival).ok();
        let ahead = Exp::new(1.0 / self.book_ahead.max(1e-9)).ok();
        let book_ahead = |rng: &mut ChaCha8Rng| {
            let a = ahead.map_or(0.0, |d| d.sample(rng)).round() as i64;
            a.min(self.max_book_ahead) * slot
        };
        let mut out = Vec::new();
        let mut t = 0.0;
        let mut work = 0.0;
        let draw = |k: usize, rng: &mut ChaCha8Rng| {
            if let Some(t) = &self.template {
                let mut wf = t.clone();
                wf.name = format!("{}-{k}", t.name);
                for e in &mut wf.edges {
                    e.bytes = (e.bytes as f64 * self.data_scale).round() as u64;
                }
                return Some(wf);
            }
            let [lo, hi] = self.workflow.tasks;
            let n = rng.gen_range(lo..=hi);
            let mut wf = generate(&self.params(n, largest), &format!("w{k}"), rng.gen()).ok()?;
            clip(&mut wf, slot, self.grid.bandwidth, self.data_scale);
            Some(wf)
        };
        let deadline_of = |wf: &mut Workflow, at: i64, rng: &mut ChaCha8Rng| {
            let earliest = at + book_ahead(rng);
            let sigma = rng.gen_range(self.slack[0]..=self.slack[1]);
            wf.earliest = Some(Time(earliest));
            wf.deadline = Some(Time(earliest + (sigma * critical_path(wf) as f64).ceil() as i64));
        };
        for k in 0..self.workflows {
            t += gap.map_or(inter_arrival, |d| d.sample(&mut rng));
            let at = (t * slot as f64).round() as i64;
            let Some(mut wf) = draw(k, &mut rng) else { continue };
            work += wf
                .tasks
                .iter()
                .map(|t| f64::from(t.cores) * t.runtime.0 as f64)
                .sum::<f64>();
            deadline_of(&mut wf, at, &mut rng);
            out.push(Arrival {
                at: Time(at),
                what: Arrived::Workflow { wf, commits: true },
            });
        }
        let span = (t * slot as f64).max(1.0);
        // Rejecters: the same workflows at `rejecters` times the rate, from
        // a generator of their own.
        if rejecters > 0.0 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0de_c11e);
            let gap = Exp::new(rejecters / inter_arrival).ok();
            let mut rt = 0.0;
            for k in self.workflows.. {
                rt += gap.map_or(f64::INFINITY, |d| d.sample(&mut rng));
                if rt * slot as f64 > span {
                    break;
                }
                let at = (rt * slot as f64).round() as i64;
                let Some(mut wf) = draw(k, &mut rng) else { continue };
                deadline_of(&mut wf, at, &mut rng);
                out.push(Arrival {
                    at: Time(at),
                    what: Arrived::Workflow { wf, commits: false },
                });
            }
        }
        // Local jobs: the same job model, enough of them for their share.
        if self.local_share > 0.0 && work > 0.0 {
            let rate = work / span * self.local_share / (1.0 - self.local_share);
            let mut jobs = match lublin::Generator::new(lublin::Params::typeless(largest), largest, seed ^ 0x10ca1) {
                Ok(g) => g,
                Err(_) => return out,
            };
            let mut draw = || {
                let j = jobs.next().unwrap_or_default();
                let run = j.run.clamp(slot, MAX_TASK_SLOTS * slot);
                (j.procs.clamp(1, largest as i64) as u32, run)
            };
            let sample: Vec<(u32, i64)> = (0..1_000).map(|_| draw()).collect();
            let mean = sample.iter().map(|&(p, r)| f64::from(p) * r as f64).sum::<f64>() / sample.len() as f64;
            let local_gap = Exp::new(rate / mean).ok();
            let mut lt = 0.0;
            loop {
                lt += local_gap.map_or(f64::INFINITY, |d| d.sample(&mut rng));
                if lt > span {
                    break;
                }
                let (procs, run) = draw();
                let fits: Vec<usize> = (0..sites.len()).filter(|&i| sites[i].capacity >= procs).collect();
                let site = fits[rng.gen_range(0..fits.len())];
                let start = lt.round() as i64 + book_ahead(&mut rng);
                out.push(Arrival {
                    at: Time(lt.round() as i64),
                    what: Arrived::Local {
                        site,
                        procs,
                        start: Time(start),
                        run: Duration(run),
                    },
                });
            }
        }
        // Stable: a workflow before a local job arriving the same second.
        out.sort_by_key(|a| a.at);
        out
    }

    /// Every arrival submits `wf` (with its own deadline) instead of a
    /// generated workflow.
    pub fn with_template(mut self, wf: Workflow) -> AdmissionExperiment {
        self.template = Some(wf);
        self
    }

    /// The generator's parameters for a workflow of `tasks` tasks.
    fn params(&self, tasks: usize, max_size: u32) -> WorkflowParams {
        let s = &self.workflow;
        WorkflowParams {
            tasks,
            width: s.width,
            regularity: s.regularity,
            density: s.density,
            max_jump: s.max_jump,
            coallocation_density: s.coallocation_density,
            max_size,
            // A data unit is one byte per second for one slot: a
            // dependency carries processors x run time of a further draw.
            bytes_per_cpu_second: 1.0,
            bandwidth_per_cpu: 1.0,
        }
    }

    /// One run, each workflow's admission timed into `time` (the
    /// scheduler's own run time per workflow, [VRM]'s third figure).
    pub fn run(
        &self,
        specs: &[SiteSpec],
        links: &[LinkSpec],
        setting: Setting,
        seed: u64,
        time: &mut SchedulerTime,
    ) -> AdmissionPoint {
        let arrivals = self.arrivals(specs, setting.inter_arrival, setting.rejecters, seed);
        let last = arrivals.last().map_or(0, |a| a.at.0);
        let horizon = Time(last + (self.max_book_ahead + 100 * MAX_TASK_SLOTS) * self.slot * 4);
        let mut sites = memory_sites(specs, horizon);
        let Ok(net) = Network::new(specs.len(), links.to_vec(), 1, horizon) else {
            return Self::empty(setting, seed);
        };
        let mut net = net.with_paths(setting.paths);
        let topo = Topology::new(specs.to_vec(), &net);
        let steady = (Time(last / 10), Time(last));
        let mut booked = [0.0f64; 2];
        let count = |booked: &mut f64, cores: u32, start: Time, end: Time| {
            let overlap = end.0.min(steady.1 .0) - start.0.max(steady.0 .0);
            if overlap > 0 {
                *booked += f64::from(cores) * overlap as f64;
            }
        };
        let mut p = Self::empty(setting, seed);
        let mut accepters = [0usize; 2];
        let offered: f64 = arrivals
            .iter()
            .map(|a| match &a.what {
                Arrived::Workflow { wf, .. } => wf.tasks.iter().map(|t| f64::from(t.cores) * t.runtime.0 as f64).sum(),
                Arrived::Local { procs, run, .. } => f64::from(*procs) * run.0 as f64,
            })
            .sum();
        let (mut tasks, mut probes, mut reservations) = (0u64, 0u64, 0u64);
        // The monitored broker's [tasks, attempts, messages] for its
        // admitted and its rejected workflows.
        let mut monitored = [[0u64; 3]; 2];
        // What a monitored broker that does not probe knows: its own reservations.
        let mut knowledge: Vec<brokk_core::Planner> =
            specs.iter().map(|s| brokk_core::planner(s.capacity, horizon)).collect();
        // Which broker takes each workflow: a stream of its own, the same
        // for every other setting.
        let mut split = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0046);
        let mut courses = self.course.clone().map(|c| Courses::new(c, seed));
        let mut outage = self.outage(specs, setting, last);
        // Each site's share of the jobs as a domain of its own, and the
        // draw that gives each job its domain: a stream of its own, the
        // same whatever the imbalance.
        let mut domains = setting.imbalance.and_then(|x| {
            let failed = self.rescue.as_ref()?.site_of(specs).ok()?;
            let capacities: Vec<u32> = specs.iter().map(|s| s.capacity).collect();
            let shares = RescueConfig::domain_shares(&capacities, failed, x).ok()?;
            Some((shares, ChaCha8Rng::seed_from_u64(seed ^ 0xd0_3a15)))
        });
        // With re-optimization: the broker's jobs as booked, the accepters'
        // workflow after which it runs, and what it did.
        let mut placed: Vec<Placed> = Vec::new();
        let reopt_at = self
            .reoptimize
            .as_ref()
            .filter(|_| setting.window.is_some())
            .map(|r| (self.workflows as f64 * r.after).round() as usize);
        let mut reoptimized = reopt_at.map(|_| ReoptimizeFigures::default());
        // The windows not yet searched, and the one being searched with
        // when its switch is due.
        let mut unsearched: std::collections::VecDeque<(Time, Time)> = Default::default();
        let mut searching: Option<(reoptimize::Trial, Time)> = None;
        let opts_at = |now| Options {
            scheduler: setting.scheduler,
            now,
            hold: Duration(setting.hold * self.slot),
            explain: false,
        };
        for a in &arrivals {
            let now = a.at;
            if let Some(courses) = &mut courses {
                let mut grid = Grid {
                    sites: &mut sites,
                    net: &mut net,
                    topo: &topo,
                    opts: opts_at(now),
                };
                courses.until(now, &mut grid);
            }
            if let Some(o) = &mut outage {
                o.until(now, &mut sites, &mut net, &topo, &opts_at(now));
            }
            // A window's switch comes at its time, before what arrives
            // after it.
            if let (Some(figures), Some((_, due))) = (&mut reoptimized, &searching) {
                if *due <= now {
                    let due = *due;
                    for s in &mut sites {
                        s.advance(due);
                    }
                    let mut refs: Vec<&mut dyn Site> = sites.iter_mut().map(|s| s as &mut dyn Site).collect();
                    if let Some((trial, _)) = searching.take() {
                        figures.switched(trial.switch(&mut placed, &mut refs, "broker"));
                    }
                }
            }
            for s in &mut sites {
                s.advance(now);
            }
            for k in &mut knowledge {
                k.advance(now);
            }
            net.advance(now);
            let after_point = matches!(&a.what, Arrived::Workflow { commits: true, .. })
                && reopt_at.is_some_and(|at| accepters[0] >= at);
            if let (Some(figures), true) = (&mut reoptimized, after_point) {
                if figures.submitted_after == 0 {
                    let size = Duration(setting.window.unwrap_or(0) * self.slot);
                    if size.0 > 0 {
                        let to = placed.iter().map(|p| p.end).max().unwrap_or(now);
                        unsearched = reoptimize::windows(now, to, size).into();
                    }
                }
                figures.submitted_after += 1;
            }
            if let (Some(figures), None, false) = (&mut reoptimized, &searching, unsearched.is_empty()) {
                let mut refs: Vec<&mut dyn Site> = sites.iter_mut().map(|s| s as &mut dyn Site).collect();
                let delay = Duration(setting.delay * self.slot);
                let trigger = self.reoptimize.as_ref().and_then(|r| r.trigger);
                let budget = self.reoptimize.as_ref().map_or(reoptimize::FULL_BUDGET, |r| r.budget);
                // One window at a time. Its search opens the broker's
                // shadows and plans for when its switch comes, `delay`
                // later, after the arrivals in between were booked on what
                // still holds; only jobs that start after that move.
                while let Some(w) = unsearched.pop_front() {
                    if trigger.is_some_and(|t| reoptimize::window_rating(w, &refs) >= t) {
                        figures.windows += 1;
                        figures.skipped += 1;
                        continue;
                    }
                    let due = now + delay;
                    let trial = match setting.search {
                        Search::Each => reoptimize::try_each(due, w, &mut placed, &mut refs, "broker"),
                        Search::Full => reoptimize::try_full(due, w, &mut placed, &mut refs, "broker", budget),
                    };
                    if due > now && trial.considered() > 0 {
                        searching = Some((trial, due));
                        break;
                    }
                    figures.switched(trial.switch(&mut placed, &mut refs, "broker"));
                }
            }
            match &a.what {
                Arrived::Local {
                    site,
                    procs,
                    start,
                    run,
                } => {
                    p.local[0] += 1;
                    let req = Request {
                        amount: *procs,
                        duration: *run,
                        earliest: *start,
                        latest: *start + Duration(self.max_book_ahead * self.slot),
                        flexible: false,
                    };
                    // A resource that is down takes no local job either
                    // before its rescue horizon.
                    let from = match outage.as_ref().and_then(Outage::fence) {
                        Some((k, from)) if k == *site => from,
                        _ => Time(i64::MIN),
                    };
                    let mut fenced_site = Fenced {
                        site: &mut sites[*site],
                        from,
                    };
                    match fenced_site.reserve("local", &req, None) {
                        Ok(brokk_core::Reply::Granted { start, .. }) => {
                            count(&mut booked[0], *procs, start, start + *run);
                            if let Some(o) = &mut outage {
                                o.record(now, *site, *procs, start, start + *run);
                            }
                        }
                        _ => p.local[1] += 1,
                    }
                }
                Arrived::Workflow { wf, commits } => {
                    p.submitted += 1;
                    accepters[0] += usize::from(*commits);
                    tasks += wf.tasks.len() as u64;
                    let opts = opts_at(now);
                    let (k, from) = outage.as_ref().and_then(Outage::fence).unwrap_or((0, Time(i64::MIN)));
                    // With domains, a job is tried at its own domain's
                    // resource first, and through the grid after.
                    let home = domains
                        .as_mut()
                        .map(|(shares, draw)| domain_of(shares, draw.gen::<f64>()));
                    let at_home = home.map(|d| {
                        let mut views: Vec<Fenced> = sites
                            .iter_mut()
                            .enumerate()
                            .map(|(i, site)| Fenced {
                                site,
                                from: match i {
                                    _ if i != d => NEVER,
                                    _ if i == k => from,
                                    _ => Time(i64::MIN),
                                },
                            })
                            .collect();
                        let mut refs: Vec<&mut dyn Site> = views.iter_mut().map(|v| v as &mut dyn Site).collect();
                        time.time(|| admit(wf, &topo, &mut refs, &mut net, "broker", &opts))
                    });
                    let mut fence = None;
                    let mut refs = fenced(&mut sites, k, from, &mut fence);
                    let mine = split.gen::<f64>() < setting.share;
                    let answer = match at_home {
                        Some(Ok(offer)) => Ok(offer),
                        Some(Err(refused)) => {
                            probes += refused.messages.probes;
                            reservations += refused.messages.reservations;
                            time.more(|| admit(wf, &topo, &mut refs, &mut net, "broker", &opts))
                        }
                        None => time.time(|| {
                            if mine && !setting.probing {
                                admit_without_probing(wf, &topo, &mut refs, &mut net, "broker", &opts, &knowledge)
                            } else {
                                admit(wf, &topo, &mut refs, &mut net, "broker", &opts)
                            }
                        }),
                    };
                    if mine {
                        let m = match &answer {
                            Ok(o) => (0, o.messages),
                            Err(r) => (1, r.messages),
                        };
                        p.monitored[0] += 1;
                        p.monitored[1] += usize::from(m.0 == 0);
                        let tally = &mut monitored[m.0];
                        tally[0] += wf.tasks.len() as u64;
                        tally[1] += m.1.reservations;
                        tally[2] += m.1.reservations + m.1.probes;
                    }
                    match answer {
                        Ok(offer) => {
                            probes += offer.messages.probes;
                            reservations += offer.messages.reservations;
                            p.admitted += 1;
                            accepters[1] += usize::from(*commits);
                            if let (Some(figures), true) = (&mut reoptimized, after_point) {
                                figures.admitted_after += 1;
                            }
                            // An accepter commits at once; a rejecter's holds lapse.
                            if !*commits {
                                continue;
                            }
                            if offer.commit("broker", &mut refs, &mut net).is_ok() {
                                // A plan lists the tasks in the workflow's order.
                                for (t, spec) in offer.plan.tasks.iter().zip(&wf.tasks) {
                                    count(&mut booked[1], spec.cores, t.start, t.end);
                                    let window = (wf.earliest.unwrap_or(now), wf.deadline.unwrap_or(t.end));
                                    if let Some(o) = &mut outage {
                                        let at = (t.site, t.reservation, t.start, t.end);
                                        o.booked(now, at, spec.cores, spec.runtime, window);
                                    }
                                    if reoptimized.is_some() {
                                        placed.push(Placed {
                                            site: t.site,
                                            reservation: t.reservation,
                                            start: t.start,
                                            end: t.end,
                                            amount: spec.cores,
                                            earliest: window.0,
                                            deadline: window.1,
                                        });
                                    }
                                    if mine {
                                        remember(&mut knowledge[t.site], spec.cores, t.start, t.end);
                                    }
                                }
                                if let Some(courses) = &mut courses {
                                    drop(refs);
                                    let mut grid = Grid {
                                        sites: &mut sites,
                                        net: &mut net,
                                        topo: &topo,
                                        opts: opts_at(now),
                                    };
                                    courses.start(now, wf, offer.plan, &mut grid);
                                }
                            } else {
                                offer.release("broker", &mut refs, &mut net);
                                p.admitted -= 1;
                                accepters[1] -= 1;
                                if let (Some(figures), true) = (&mut reoptimized, after_point) {
                                    figures.admitted_after -= 1;
                                }
                            }
                        }
                        Err(r) => {
                            probes += r.messages.probes;
                            reservations += r.messages.reservations;
                            *p.reasons.entry(r.reason.kind().to_string()).or_default() += 1;
                        }
                    }
                }
            }
        }
        if let Some(courses) = &mut courses {
            let mut grid = Grid {
                sites: &mut sites,
                net: &mut net,
                topo: &topo,
                opts: opts_at(Time(last)),
            };
            courses.until(Time(i64::MAX), &mut grid);
            p.course = Some(courses.figures());
        }
        p.reoptimized = reoptimized;
        if let Some(o) = &mut outage {
            // The rest of the downtime, with no more arrivals.
            o.until(Time(i64::MAX / 4), &mut sites, &mut net, &topo, &opts_at(Time(last)));
            p.rescue = Some(o.figures());
        }
        let capacity: f64 = specs.iter().map(|s| f64::from(s.capacity)).sum();
        let window = (steady.1 .0 - steady.0 .0).max(1) as f64 * capacity;
        let rejected = |all: usize, admitted: usize| {
            if all == 0 {
                0.0
            } else {
                1.0 - admitted as f64 / all as f64
            }
        };
        p.rejection_rate = rejected(p.submitted, p.admitted);
        p.accepter_rejection_rate = rejected(accepters[0], accepters[1]);
        p.offered_load = offered / (last.max(1) as f64 * capacity);
        p.utilization = (booked[0] + booked[1]) / window;
        p.workflow_utilization = booked[1] / window;
        let per = |x: u64| if tasks == 0 { 0.0 } else { x as f64 / tasks as f64 };
        p.probes_per_task = per(probes);
        p.reservations_per_task = per(reservations);
        for (i, [tasks, attempts, messages]) in monitored.into_iter().enumerate() {
            let per = |x: u64| if tasks == 0 { 0.0 } else { x as f64 / tasks as f64 };
            p.attempts_per_task[i] = per(attempts);
            p.messages_per_task[i] = per(messages);
        }
        p
    }

    /// The failure a run with a rescue strategy injects: at the configured
    /// share of the arrival span (`last` the last arrival), on a slot.
    fn outage(&self, specs: &[SiteSpec], setting: Setting, last: i64) -> Option<Outage> {
        let (config, strategy) = (self.rescue.as_ref()?, setting.strategy?);
        let site = config.site_of(specs).ok()?;
        let slot = self.slot;
        let begins = (last as f64 * config.at / slot as f64).round() as i64 * slot;
        Some(Outage::new(
            site,
            (Time(begins), Time(begins + setting.downtime * slot)),
            Duration(slot),
            Duration(self.max_book_ahead.max(1) * slot),
            strategy,
            &specs.iter().map(|s| s.capacity).collect::<Vec<_>>(),
            setting.view.unwrap_or(View::Central),
            config
                .lost
                .map(|l| ((f64::from(specs[site].capacity) * l).round() as u32).max(1)),
        ))
    }

    fn empty(setting: Setting, seed: u64) -> AdmissionPoint {
        AdmissionPoint {
            setting,
            seed,
            submitted: 0,
            admitted: 0,
            rejection_rate: 0.0,
            accepter_rejection_rate: 0.0,
            offered_load: 0.0,
            utilization: 0.0,
            workflow_utilization: 0.0,
            probes_per_task: 0.0,
            reservations_per_task: 0.0,
            monitored: [0, 0],
            attempts_per_task: [0.0, 0.0],
            messages_per_task: [0.0, 0.0],
            local: [0, 0],
            reasons: BTreeMap::new(),
            course: None,
            rescue: None,
            reoptimized: None,
        }
    }
}

/// A rescue figure over the affected jobs of every seed pooled
/// ([`crate::stats::ratio`]): some failures find few jobs booked.
fn pooled(of: &[&AdmissionPoint], count: fn(&RescueFigures) -> usize) -> Spread {
    let figures: Vec<&RescueFigures> = of.iter().filter_map(|p| p.rescue.as_ref()).collect();
    let num: Vec<f64> = figures.iter().map(|r| count(r) as f64).collect();
    let den: Vec<f64> = figures.iter().map(|r| r.affected as f64).collect();
    crate::stats::ratio(&num, &den)
}

/// Something arriving at the grid.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    /// When.
    pub at: Time,
    /// What.
    pub what: Arrived,
}

/// A workflow for the broker, or a local job booked at a site directly.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrived {
    /// A workflow with its earliest start and deadline.
    Workflow {
        /// The workflow.
        wf: Workflow,
        /// Whether its submitter commits an offer (an accepter) or never
        /// answers (a rejecter).
        commits: bool,
    },
    /// A local job.
    Local {
        /// The site's index.
        site: usize,
        /// Processors.
        procs: u32,
        /// Earliest start.
        start: Time,
        /// Run time.
        run: Duration,
    },
}

/// Run times clipped to whole slots within [1, 1,440] slots; data and
/// streams as the proposal bounds them (a stream at most a link's bandwidth).
fn clip(wf: &mut Workflow, slot: i64, bandwidth: u64, data_scale: f64) {
    for t in &mut wf.tasks {
        let slots = (t.runtime.0 + slot - 1) / slot;
        t.runtime = Duration(slots.clamp(1, MAX_TASK_SLOTS) * slot);
    }
    let max_bytes = 512 * (MAX_TASK_SLOTS * slot) as u64;
    for e in &mut wf.edges {
        e.bytes = ((e.bytes.min(max_bytes) as f64) * data_scale).round() as u64;
    }
    for c in &mut wf.coallocations {
        c.bandwidth = c.bandwidth.min(bandwidth);
    }
}

/// The longest path through the workflow by reference run time ([VRM]
/// 2.3.2's lower bound of its execution time); co-allocated tasks count
/// as running together.
pub fn critical_path(wf: &Workflow) -> i64 {
    let n = wf.tasks.len();
    let index: std::collections::HashMap<&str, usize> =
        wf.tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut parents = vec![0usize; n];
    for e in &wf.edges {
        if let (Some(&p), Some(&c)) = (index.get(e.parent.as_str()), index.get(e.child.as_str())) {
            children[p].push(c);
            parents[c] += 1;
        }
    }
    let mut start = vec![0i64; n];
    let mut ready: Vec<usize> = (0..n).filter(|&i| parents[i] == 0).collect();
    let mut longest = 0;
    while let Some(i) = ready.pop() {
        let end = start[i] + wf.tasks[i].runtime.0;
        longest = longest.max(end);
        for &c in &children[i] {
            start[c] = start[c].max(end);
            parents[c] -= 1;
            if parents[c] == 0 {
                ready.push(c);
            }
        }
    }
    longest
}

/// The eight cities and twelve links proposed as a stand-in for [VRM]'s
/// ediscom map (its figure is lost): Berlin 512, Hamburg, Hannover and
/// Leipzig 256, Dresden and Magdeburg 128, Potsdam and Rostock 64; with
/// `heterogeneous`, Berlin 2.0, Hamburg and Hannover 1.5, Leipzig 1.25.
pub fn ediscom(heterogeneous: bool) -> (Vec<SiteSpec>, Vec<[String; 2]>) {
    let cities = [
        ("Berlin", 512, 2.0),
        ("Hamburg", 256, 1.5),
        ("Hannover", 256, 1.5),
        ("Leipzig", 256, 1.25),
        ("Dresden", 128, 1.0),
        ("Magdeburg", 128, 1.0),
        ("Potsdam", 64, 1.0),
        ("Rostock", 64, 1.0),
    ];
    let sites = cities
        .iter()
        .map(|&(name, capacity, speed)| SiteSpec {
            name: name.into(),
            capacity,
            speed: if heterogeneous { speed } else { 1.0 },
        })
        .collect();
    let links = [
        ("Berlin", "Potsdam"),
        ("Berlin", "Rostock"),
        ("Berlin", "Hamburg"),
        ("Berlin", "Magdeburg"),
        ("Berlin", "Leipzig"),
        ("Berlin", "Dresden"),
        ("Potsdam", "Magdeburg"),
        ("Hamburg", "Rostock"),
        ("Hamburg", "Hannover"),
        ("Hannover", "Magdeburg"),
        ("Magdeburg", "Leipzig"),
        ("Leipzig", "Dresden"),
    ]
    .iter()
    .map(|&(a, b)| [a.to_string(), b.to_string()])
    .collect();
    (sites, links)
}

/// The domain a draw `u` in [0, 1) falls in, by the domains' shares.
fn domain_of(shares: &[f64], u: f64) -> usize {
    let mut upto = 0.0;
    for (i, share) in shares.iter().enumerate() {
        upto += share;
        if u < upto {
            return i;
        }
    }
    shares.len() - 1
}
