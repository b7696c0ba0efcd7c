//! The runner of simulated sites: starts each job at its planned start, ends
//! it after its run time (or at its wall time, as a live site kills it), on
//! virtual time.

use std::collections::{BTreeSet, HashMap};

use brokk_model::{Duration, JobPhase, Time};

use crate::effect::Effect;
use crate::record::JobId;
use crate::site::SiteCore;

/// Drives one [`SiteCore`] on virtual time; feed it every effect the core
/// emits and call [`VirtualRunner::advance`] at each event time.
#[derive(Debug, Clone, Default)]
pub struct VirtualRunner {
    /// Waiting jobs by (planned start, id).
    starts: BTreeSet<(Time, JobId)>,
    /// Each waiting job's entry in `starts`.
    planned: HashMap<JobId, Time>,
    /// Running jobs by (end, id).
    ends: BTreeSet<(Time, JobId)>,
    /// Each running job's end.
    running: HashMap<JobId, Time>,
    /// Running jobs that end by being killed at their wall time.
    killed: BTreeSet<JobId>,
    /// Jobs due to start whose hold is not committed yet.
    held: BTreeSet<JobId>,
    /// How long jobs actually run, where the driver said.
    run_times: HashMap<JobId, Duration>,
}

impl VirtualRunner {
    /// A runner with nothing to do.
    pub fn new() -> Self {
        Self::default()
    }

    /// Job `id` will run for `d` (otherwise for its wall time).
    pub fn set_run_time(&mut self, id: JobId, d: Duration) {
        self.run_times.insert(id, d);
    }

    /// The time of the next start or end, if any.
    pub fn next_event(&self) -> Option<Time> {
        let s = self.starts.first().map(|e| e.0);
        let e = self.ends.first().map(|e| e.0);
        match (s, e) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn unplan(&mut self, id: JobId) {
        if let Some(t) = self.planned.remove(&id) {
            self.starts.remove(&(t, id));
        }
    }

    fn plan(&mut self, id: JobId, at: Time) {
        self.unplan(id);
        self.planned.insert(id, at);
        self.starts.insert((at, id));
    }

    /// Carries out what the core did at `now` (and what that leads to):
    /// waiting jobs are planned at their planned start, a stopped running
    /// job ends as cancelled.
    pub fn apply(&mut self, core: &mut SiteCore, now: Time, mut effects: Vec<Effect>) {
        while !effects.is_empty() {
            for e in &effects {
                match *e {
                    Effect::SaveJob(id) | Effect::StartMoved { job: id, .. } => self.follow(core, id),
                    Effect::Committed(id) if self.held.remove(&id) => {
                        let at = core.record(id).and_then(|j| j.planned_start).unwrap_or(now);
                        self.plan(id, at.max(now));
                    }
                    Effect::Stop(id) => {
                        if let Some(end) = self.running.remove(&id) {
                            self.ends.remove(&(end, id));
                            core.finish(
                                now,
                                id,
                                JobPhase::Cancelled,
                                None,
                                Some("cancelled by its owner".into()),
                            );
                        }
                    }
                    _ => {}
                }
            }
            effects = core.drain();
        }
    }

    fn follow(&mut self, core: &SiteCore, id: JobId) {
        let Some(j) = core.record(id) else { return };
        if j.is_waiting() {
            match (j.planned_start, self.held.contains(&id)) {
                (Some(s), false) => self.plan(id, s),
                // It lost its slot (a local job took its protection).
                (None, _) => self.unplan(id),
                _ => {}
            }
        } else {
            self.unplan(id);
            if j.state.is_terminal() {
                self.held.remove(&id);
                self.run_times.remove(&id);
                if let Some(end) = self.running.remove(&id) {
                    self.ends.remove(&(end, id));
                }
            }
        }
    }

    /// Runs every start and end due by `now`, in time order (ends before
    /// starts at the same instant, so freed processors are used at once).
    pub fn advance(&mut self, core: &mut SiteCore, now: Time) {
        loop {
            let end = self.ends.first().copied().filter(|e| e.0 <= now);
            let start = self.starts.first().copied().filter(|s| s.0 <= now);
            let t = match (end, start) {
                (Some((t, _)), s) if s.is_none_or(|s| t <= s.0) => {
                    // Every job ending at `t` ends before the queue moves.
                    let mut together = Vec::new();
                    while let Some((_, id)) = self.ends.first().copied().filter(|e| e.0 == t) {
                        self.ends.remove(&(t, id));
                        self.running.remove(&id);
                        self.run_times.remove(&id);
                        together.push(if self.killed.remove(&id) {
                            (id, JobPhase::Failed, None, Some("wall time exceeded".into()))
                        } else {
                            (id, JobPhase::Finished, Some(0), None)
                        });
                    }
                    core.finish_together(t, together);
                    t
                }
                (_, Some((t, id))) => {
                    self.unplan(id);
                    let Some(launch) = core.launch(id) else { continue };
                    if !launch.committed {
                        self.held.insert(id);
                        continue;
                    }
                    if core.mark_running(id, t) {
                        let run = self.run_times.get(&id).copied().unwrap_or(launch.wall);
                        if run > launch.wall {
                            self.killed.insert(id);
                        }
                        let end = t + run.min(launch.wall).max(Duration(1));
                        self.running.insert(id, end);
                        self.ends.insert((end, id));
                    }
                    t
                }
                _ => break,
            };
            let effects = core.drain();
            self.apply(core, t, effects);
        }
    }
}
