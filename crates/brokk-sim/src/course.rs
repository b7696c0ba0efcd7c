//! Admitted workflows run ([VRM] 4.2's course, simulated): a task starts
//! in its reservation once its parents succeeded, runs for a share of the
//! time booked for it and may fail, and the broker's own course
//! (`brokk_broker::workflow::course::Course`, the machine the live broker
//! drives) decides what follows: children released and moved up when
//! their parents end early, a failed task retried inside its slack, the
//! rest planned again when there is none, the workflow failed when that
//! does not fit. Without a `[course]` table only allocation is simulated,
//! as in the thesis.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use brokk_broker::reserve::at_earliest;
use brokk_broker::workflow::course::{Action, Course, Outcome, TaskStatus, Unplanned};
use brokk_broker::workflow::{admit, Network, Options, Plan, Topology};
use brokk_broker::{MemorySite, Site};
use brokk_model::workflow::Workflow;
use brokk_model::{Duration, Time};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Who the broker's reservations belong to at the simulated sites.
const OWNER: &str = "broker";

/// How admitted workflows run (`[course]` of an admission experiment).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CourseConfig {
    /// A run lasts this share of the time booked for it, uniform in
    /// [low, high] with 0 < low <= high <= 1 (estimates are upper bounds).
    #[serde(default = "whole")]
    pub runtime: [f64; 2],
    /// The chance that one run of a task fails, at a uniform point of it.
    #[serde(default)]
    pub failure: f64,
    /// Retries every task gets (DAGMan's RETRY), where the workflow does
    /// not say; the generated workflows say none.
    #[serde(default)]
    pub retries: Option<u32>,
}

fn whole() -> [f64; 2] {
    [1.0, 1.0]
}

impl Default for CourseConfig {
    /// Every run lasts its whole reservation and succeeds.
    fn default() -> Self {
        CourseConfig {
            runtime: whole(),
            failure: 0.0,
            retries: None,
        }
    }
}

impl CourseConfig {
    /// Why the table cannot run as written, naming the key.
    pub fn check(&self) -> Result<(), String> {
        let [lo, hi] = self.runtime;
        if !(lo > 0.0 && lo <= hi && hi <= 1.0) {
            return Err("course.runtime: [low, high] with 0 < low <= high <= 1".into());
        }
        if !(0.0..=1.0).contains(&self.failure) {
            return Err("course.failure: a chance from 0 to 1".into());
        }
        Ok(())
    }
}

/// `wf` admitted over the grid with `opts` and committed: its plan, or
/// why not (nothing of it is left held).
fn committed(wf: &Workflow, grid: &mut Grid, opts: &Options) -> Result<Plan, Unplanned> {
    let mut refs: Vec<&mut dyn Site> = grid.sites.iter_mut().map(|s| s as &mut dyn Site).collect();
    let offer = admit(wf, grid.topo, &mut refs, grid.net, OWNER, opts).map_err(|r| Unplanned::NoFit(r.to_string()))?;
    match offer.commit(OWNER, &mut refs, grid.net) {
        Ok(()) => Ok(offer.plan),
        Err(e) => {
            offer.release(OWNER, &mut refs, grid.net);
            Err(Unplanned::NotCommitted(e.to_string()))
        }
    }
}

/// What the admitted workflows' courses came to in one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CourseFigures {
    /// Workflows committed and run.
    pub ran: usize,
    /// Of those, finished (every task succeeded).
    pub finished: usize,
    /// Failed after their commit (no retry, no rescue left them room).
    pub failed: usize,
    /// Task runs started, retries included.
    pub runs: u64,
    /// Runs that failed.
    pub failures: u64,
    /// Retries that found room in their slack.
    pub retries: u64,
    /// Rescues (the rest planned again), and of those, committed.
    pub rescues: [u64; 2],
    /// Reservations moved up because their parents ended early.
    pub moved: u64,
    /// Mean seconds a finished workflow ended before its planned finish.
    pub gain: f64,
}

/// The sites, the network and the admission settings courses run over.
pub struct Grid<'a> {
    /// The simulated sites.
    pub sites: &'a mut [MemorySite],
    /// The reservable network.
    pub net: &'a mut Network,
    /// Its topology.
    pub topo: &'a Topology,
    /// The admission options rescues use (`now` is set per rescue).
    pub opts: Options,
}

impl Grid<'_> {
    fn advance(&mut self, t: Time) {
        for s in self.sites.iter_mut() {
            s.advance(t);
        }
        self.net.advance(t);
    }
}

struct Running {
    course: Course,
    planned_finish: Time,
    last_end: Time,
    ran: Vec<TaskRan>,
}

/// One run of a task: where, from when to when, and whether it succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRan {
    /// The task, by its position in the workflow.
    pub task: usize,
    /// The site, by its position in the grid.
    pub site: usize,
    /// When it started.
    pub start: Time,
    /// When it ended.
    pub end: Time,
    /// Whether it succeeded.
    pub ok: bool,
}

/// A task's run ending: (when, order of scheduling, course, task, success).
type Ending = Reverse<(Time, u64, usize, usize, bool)>;

/// Every admitted workflow's course in one run, on one event queue.
pub struct Courses {
    config: CourseConfig,
    running: Vec<Running>,
    endings: BinaryHeap<Ending>,
    seq: u64,
    rng: ChaCha8Rng,
    figures: CourseFigures,
    gain: f64,
}

impl Courses {
    /// No course yet; `seed` draws the runs' lengths and failures.
    pub fn new(config: CourseConfig, seed: u64) -> Courses {
        Courses {
            config,
            running: Vec::new(),
            endings: BinaryHeap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c0de),
            figures: CourseFigures::default(),
            gain: 0.0,
        }
    }

    /// The course of `wf`, committed as `plan` at `now`, begins.
    pub fn start(&mut self, now: Time, wf: &Workflow, plan: Plan, grid: &mut Grid) {
        let mut wf = wf.clone();
        if let Some(r) = self.config.retries {
            for t in &mut wf.tasks {
                t.retries = r;
            }
        }
        self.figures.ran += 1;
        self.running.push(Running {
            planned_finish: plan.finish,
            last_end: now,
            course: Course::admitted(wf, plan),
            ran: Vec::new(),
        });
        let c = self.running.len() - 1;
        let actions = self.running[c].course.advance(now);
        self.carry_out(c, now, actions, grid);
    }

    /// Admits `wf` at `now` with `scheduler` over the grid
    /// ([`brokk_broker::workflow::admit`], as `brokk serve` admits one),
    /// commits it and begins its course. Returns the course's number (for
    /// [`Courses::ran`]) and its plan, or why it was refused.
    pub fn admit(
        &mut self,
        now: Time,
        wf: &Workflow,
        scheduler: brokk_broker::workflow::Scheduler,
        grid: &mut Grid,
    ) -> Result<(usize, Plan), String> {
        grid.advance(now);
        let opts = Options {
            scheduler,
            now,
            ..grid.opts.clone()
        };
        let plan = committed(wf, grid, &opts).map_err(|u| match u {
            Unplanned::NoFit(why) => why,
            Unplanned::NotCommitted(e) => format!("its reservations could not be committed: {e}"),
        })?;
        self.start(now, wf, plan.clone(), grid);
        Ok((self.running.len() - 1, plan))
    }

    /// When the next run ends, if one is under way.
    pub fn next_end(&self) -> Option<Time> {
        self.endings.peek().map(|Reverse(e)| e.0)
    }

    /// Course `c`'s runs so far, in the order they started.
    pub fn ran(&self, c: usize) -> &[TaskRan] {
        self.running.get(c).map_or(&[], |r| &r.ran)
    }

    /// Every run that ends by `t`, in time order, with what follows it.
    /// Runs ending at the same instant all end before any course decides
    /// what follows, as a live broker's round sees them: a child moved up
    /// into room that two parents left sees both gone.
    pub fn until(&mut self, t: Time, grid: &mut Grid) {
        while let Some(at) = self.next_end().filter(|&at| at <= t) {
            grid.advance(at);
            let mut touched: Vec<usize> = Vec::new();
            while let Some(&Reverse((_, _, c, task, ok))) = self.endings.peek().filter(|e| e.0 .0 == at) {
                self.endings.pop();
                if self.running[c].course.ended().is_some() {
                    continue;
                }
                let r = &mut self.running[c];
                r.last_end = r.last_end.max(at);
                // What the task did not use of its reservation is given back.
                let p = &r.course.plan().tasks[task];
                let _ = grid.sites[p.site].cancel(OWNER, p.reservation);
                let status = if ok {
                    TaskStatus::Succeeded
                } else {
                    TaskStatus::Failed("it failed".into())
                };
                r.course.set(task, status);
                if !touched.contains(&c) {
                    touched.push(c);
                }
            }
            for c in touched {
                let actions = self.running[c].course.advance(at);
                self.carry_out(c, at, actions, grid);
            }
        }
    }

    /// The figures so far; every course's runs end with [`Courses::until`]
    /// at the end of time.
    pub fn figures(&self) -> CourseFigures {
        let mut f = self.figures.clone();
        if f.finished > 0 {
            f.gain = self.gain / f.finished as f64;
        }
        f
    }

    fn carry_out(&mut self, c: usize, t: Time, actions: Vec<Action>, grid: &mut Grid) {
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            let course = &mut self.running[c].course;
            match action {
                Action::Release { task, early } => {
                    let p = course.plan().tasks[task].clone();
                    if let Some(from) = early {
                        let change = brokk_core::Change {
                            amount: None,
                            duration: None,
                            window: Some((from, p.start)),
                        };
                        if let Ok(start) = grid.sites[p.site].modify(OWNER, p.reservation, change) {
                            if start < p.start {
                                course.moved(task, start);
                                self.figures.moved += 1;
                            }
                        }
                    }
                    self.run(c, task, t);
                }
                Action::Reserve { task, request } => {
                    let mut refs: Vec<&mut dyn Site> = grid.sites.iter_mut().map(|s| s as &mut dyn Site).collect();
                    let granted = at_earliest(&request, &mut refs, OWNER).ok();
                    queue.extend(course.retried(t, task, granted));
                    if granted.is_some() {
                        self.figures.retries += 1;
                        self.run(c, task, t);
                    }
                }
                Action::Replan {
                    task,
                    part,
                    map,
                    transfers,
                } => {
                    self.figures.rescues[0] += 1;
                    for &k in &map {
                        let p = &course.plan().tasks[k];
                        let _ = grid.sites[p.site].cancel(OWNER, p.reservation);
                    }
                    for x in &transfers {
                        grid.net.release(&x.links);
                    }
                    let opts = Options {
                        now: t,
                        ..grid.opts.clone()
                    };
                    let answer = committed(&part, grid, &opts);
                    let placed = answer.is_ok();
                    queue.extend(course.replanned(task, answer));
                    if placed {
                        self.figures.rescues[1] += 1;
                        // The rest waits for its parents anew: those ready go.
                        queue.extend(course.advance(t));
                    }
                }
                Action::End(outcome) => {
                    // What never ran gives its reservation back; the
                    // bandwidth of a failed workflow is given back too.
                    let runs = course.runs();
                    for (p, r) in course.plan().tasks.iter().zip(runs) {
                        if r.status == TaskStatus::Planned || r.status == TaskStatus::Sent {
                            let _ = grid.sites[p.site].cancel(OWNER, p.reservation);
                        }
                    }
                    match outcome {
                        Outcome::Finished => {
                            self.figures.finished += 1;
                            let r = &self.running[c];
                            self.gain += (r.planned_finish - r.last_end).0 as f64;
                        }
                        Outcome::Failed(_) => {
                            self.figures.failed += 1;
                            for x in &course.plan().transfers {
                                grid.net.release(&x.links);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Task `task` of course `c` starts in its reservation (or at once if
    /// that began already) and its end is drawn.
    fn run(&mut self, c: usize, task: usize, t: Time) {
        let p = &self.running[c].course.plan().tasks[task];
        let (start, site) = (p.start.max(t), p.site);
        let booked = (p.end - p.start).0 as f64;
        let [lo, hi] = self.config.runtime;
        let share = if hi > lo { self.rng.gen_range(lo..=hi) } else { lo };
        let mut length = (booked * share).round().max(1.0);
        let ok = self.rng.gen::<f64>() >= self.config.failure;
        if !ok {
            length = (length * self.rng.gen::<f64>()).round().max(1.0);
            self.figures.failures += 1;
        }
        self.figures.runs += 1;
        self.seq += 1;
        let end = start + Duration(length as i64);
        self.running[c].ran.push(TaskRan {
            task,
            site,
            start,
            end,
            ok,
        });
        self.endings.push(Reverse((end, self.seq, c, task, ok)));
    }
}
