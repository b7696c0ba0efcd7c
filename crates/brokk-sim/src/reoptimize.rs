//! Re-optimization during an admission experiment ([VRM] 5.7.1, Fig. 5.5):
//! once the grid is in its steady state the broker re-places its admitted
//! jobs window by window (`brokk_broker::reoptimize`), and the workflows
//! submitted afterwards are admitted on the schedule it leaves; the same
//! stream without the optimization (window 0) is the baseline, so the gain
//! is the share of later workflows admitted more.

use brokk_broker::reoptimize::Search;
use serde::{Deserialize, Serialize};

/// When and how the broker re-optimizes (`[reoptimize]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReoptimizeConfig {
    /// Window sizes (slots), swept; 0 is the run without optimization.
    pub windows: Vec<i64>,
    /// The searches inside each window, swept: `each` (sub-job by
    /// sub-job, the default) and `full` (every combination of the jobs'
    /// places, [VRM] 5.4.3, up to `budget` trial reservations a window).
    #[serde(default = "default_searches")]
    pub searches: Vec<Search>,
    /// Trial reservations a full search makes in one window before it
    /// books the best it has rated.
    #[serde(default = "default_budget")]
    pub budget: usize,
    /// How long each window's search and switch take, in slots, swept:
    /// local jobs and workflows arriving meanwhile are booked against the
    /// schedule that still holds, and a site votes no to the switch where
    /// they took what the search chose ([VRM] 5.4.1).
    #[serde(default = "default_delays")]
    pub delays: Vec<i64>,
    /// After which share of the workflows the optimization runs.
    #[serde(default = "default_after")]
    pub after: f64,
    /// Optimize a window only when the grid's rating there, from the
    /// sites' probe answers, is below this ([VRM] 5.4.2's degradation
    /// detection; the V8 proposal's 0.45); every window when absent.
    #[serde(default)]
    pub trigger: Option<f64>,
}

fn default_budget() -> usize {
    brokk_broker::reoptimize::FULL_BUDGET
}

fn default_delays() -> Vec<i64> {
    vec![0]
}

fn default_searches() -> Vec<Search> {
    vec![Search::Each]
}

fn default_after() -> f64 {
    0.8
}

impl ReoptimizeConfig {
    /// Checks the values.
    pub fn check(&self) -> Result<(), String> {
        if self.windows.is_empty() || self.windows.iter().any(|&w| w < 0) || !self.windows.contains(&0) {
            return Err("reoptimize.windows: sizes in slots, 0 (no optimization, the baseline) among them".into());
        }
        if self.budget == 0 {
            return Err("reoptimize.budget: trial reservations a window, at least 1".into());
        }
        if self.delays.is_empty() || self.delays.iter().any(|&d| d < 0) {
            return Err("reoptimize.delays: slots each window's search and switch take, 0 or more".into());
        }
        if self.searches.is_empty() {
            return Err("reoptimize.searches: one or more of \"each\" and \"full\"".into());
        }
        if !(self.after > 0.0 && self.after < 1.0) {
            return Err("reoptimize.after: a share of the workflows, between 0 and 1".into());
        }
        if self.trigger.is_some_and(|t| !(t > 0.0 && t <= 1.0)) {
            return Err("reoptimize.trigger: a rating above 0, at most 1".into());
        }
        Ok(())
    }
}

/// What a run's optimization did, and what came after it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReoptimizeFigures {
    /// Jobs taken up by some window.
    pub considered: usize,
    /// Of those moves, the jobs booked elsewhere or at another time.
    pub moved: usize,
    /// Windows passed.
    pub windows: usize,
    /// Of those, left alone: the grid rated them at or above the trigger.
    pub skipped: usize,
    /// Of those, searched in full until the budget ended the search.
    #[serde(skip_serializing_if = "is_zero")]
    pub cut_short: usize,
    /// Of those, searched but not switched to: a site voted no, something
    /// booked meanwhile having taken what the search chose.
    #[serde(skip_serializing_if = "is_zero")]
    pub vetoed: usize,
    /// Workflows submitted after the optimization point.
    pub submitted_after: usize,
    /// Of those, admitted.
    pub admitted_after: usize,
}

impl ReoptimizeFigures {
    /// Counts a window's pass, switched to or not.
    pub fn switched(&mut self, done: brokk_broker::reoptimize::Pass) {
        self.cut_short += usize::from(done.cut_short);
        self.vetoed += usize::from(done.vetoed);
        self.considered += done.considered;
        self.moved += done.moved;
        self.windows += 1;
    }
}

fn is_zero(x: &usize) -> bool {
    *x == 0
}
