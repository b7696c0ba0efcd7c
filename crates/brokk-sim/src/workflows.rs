//! Synthetic grid workflows ([VRM] 2.3.4, after the level-based DAG
//! generators of parallel scheduling research): tasks grouped in levels of
//! at most `width` tasks (`regularity` 1 makes every level that wide, lower
//! values vary the widths), dependencies only from a level to the next
//! `max_jump` levels, each eligible pair with probability `density` (a task
//! that drew no parent gets one from the level before, so the workflow is
//! one piece), and co-allocations between tasks of the same level with
//! probability `coallocation_density`. Task sizes and run times come from
//! the Lublin-Feitelson model, as [VRM] 2.2.4 takes them from queueing
//! workloads; data on a dependency and bandwidth between co-allocated tasks
//! are drawn from the same distribution (processor-seconds and processors of
//! a further draw, times a unit). Task ids are `L<level>.<k>`.

use brokk_model::workflow::{CoAllocation, Edge, Task, Workflow};
use brokk_model::Duration;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::lublin::{self, ModelError};

/// The generator's parameters.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkflowParams {
    /// Tasks in the workflow.
    pub tasks: usize,
    /// Most tasks per level (the workflow's parallelism).
    pub width: usize,
    /// 1: every level as wide as `width`; lower values vary level widths
    /// down to `regularity` times it.
    #[serde(default = "one")]
    pub regularity: f64,
    /// Probability of a dependency between an eligible pair.
    pub density: f64,
    /// Levels a dependency may span (1: only to the next level).
    #[serde(default = "one_level")]
    pub max_jump: usize,
    /// Probability of a co-allocation between two tasks of a level.
    #[serde(default)]
    pub coallocation_density: f64,
    /// Processors of the largest task (the Lublin-Feitelson model's machine).
    #[serde(default = "default_max_size")]
    pub max_size: u32,
    /// Bytes a dependency carries per processor-second drawn.
    #[serde(default = "default_unit")]
    pub bytes_per_cpu_second: f64,
    /// Bytes per second two co-allocated tasks exchange per processor drawn.
    #[serde(default = "default_unit")]
    pub bandwidth_per_cpu: f64,
}

fn one() -> f64 {
    1.0
}

fn one_level() -> usize {
    1
}

fn default_max_size() -> u32 {
    64
}

fn default_unit() -> f64 {
    1e6
}

/// Parameters the generator cannot use.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowModelError {
    /// A parameter is out of its range.
    #[error("workflow model: {0}")]
    Invalid(String),
    /// The job model refused its parameters.
    #[error(transparent)]
    Jobs(#[from] ModelError),
}

impl WorkflowParams {
    fn check(&self) -> Result<(), WorkflowModelError> {
        let bad = |m: &str| Err(WorkflowModelError::Invalid(m.into()));
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        if !(1..=1_000_000).contains(&self.tasks) {
            return bad("tasks: give 1 to 1000000");
        }
        if self.width == 0 {
            return bad("width: at least one task per level");
        }
        if !(unit(self.regularity) && unit(self.density) && unit(self.coallocation_density)) {
            return bad("regularity, density and coallocation_density are between 0 and 1");
        }
        if self.max_jump == 0 {
            return bad("max_jump: at least 1 level");
        }
        if self.max_size == 0 || !(self.bytes_per_cpu_second >= 0.0 && self.bandwidth_per_cpu >= 0.0) {
            return bad("max_size is at least 1 and the data units are not negative");
        }
        Ok(())
    }
}

/// A workflow named `name` drawn with `seed`: the same parameters and seed
/// give the same workflow.
pub fn generate(params: &WorkflowParams, name: &str, seed: u64) -> Result<Workflow, WorkflowModelError> {
    params.check()?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jobs = lublin::Generator::new(lublin::Params::typeless(params.max_size), params.max_size, seed)?;
    let mut draw = move || {
        let j = jobs.next().unwrap_or_default();
        (j.procs.max(1) as u32, j.run.max(1))
    };
    let mut levels: Vec<usize> = Vec::new();
    let mut left = params.tasks;
    while left > 0 {
        let share = if params.regularity < 1.0 {
            rng.gen_range(params.regularity..=1.0)
        } else {
            1.0
        };
        let w = ((params.width as f64 * share).round() as usize)
            .clamp(1, params.width)
            .min(left);
        levels.push(w);
        left -= w;
    }
    let id = |level: usize, k: usize| format!("L{level}.{k}");
    let mut tasks = Vec::with_capacity(params.tasks);
    for (l, &w) in levels.iter().enumerate() {
        for k in 0..w {
            let (cores, run) = draw();
            tasks.push(Task {
                id: id(l, k),
                runtime: Duration(run),
                cores,
                ..Task::default()
            });
        }
    }
    let mut edges = Vec::new();
    for l in 1..levels.len() {
        for k in 0..levels[l] {
            let mut parents = 0;
            let first = l.saturating_sub(params.max_jump);
            for (from, &width) in levels.iter().enumerate().take(l).skip(first) {
                for p in 0..width {
                    if rng.gen_bool(params.density) {
                        let (procs, run) = draw();
                        edges.push(Edge {
                            parent: id(from, p),
                            child: id(l, k),
                            bytes: (f64::from(procs) * run as f64 * params.bytes_per_cpu_second) as u64,
                        });
                        parents += 1;
                    }
                }
            }
            if parents == 0 {
                let p = rng.gen_range(0..levels[l - 1]);
                let (procs, run) = draw();
                edges.push(Edge {
                    parent: id(l - 1, p),
                    child: id(l, k),
                    bytes: (f64::from(procs) * run as f64 * params.bytes_per_cpu_second) as u64,
                });
            }
        }
    }
    let mut coallocations = Vec::new();
    for (l, &w) in levels.iter().enumerate() {
        for a in 0..w {
            for b in a + 1..w {
                if params.coallocation_density > 0.0 && rng.gen_bool(params.coallocation_density) {
                    let (procs, _) = draw();
                    coallocations.push(CoAllocation {
                        a: id(l, a),
                        b: id(l, b),
                        bandwidth: (f64::from(procs) * params.bandwidth_per_cpu) as u64,
                    });
                }
            }
        }
    }
    Ok(Workflow {
        name: name.to_string(),
        tasks,
        edges,
        coallocations,
        ..Workflow::default()
    })
}
