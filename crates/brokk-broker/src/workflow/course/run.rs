//! One admitted workflow's course as a state machine: the rules of
//! [`steps`] and [`rest`] chained as a broker carries them out. A failed
//! task is retried in its slack; when no site has room there, the rest of
//! the workflow is planned again against the deadline; when that does not
//! fit either, the workflow fails. The driver (the service, or the
//! simulator's admission runs) tells the course what its tasks did and
//! what the sites answered, and carries out the [`Action`]s it returns;
//! the course keeps the plan, so both drivers see one plan change the
//! same way.

use brokk_core::{Request, ReservationId};
use brokk_model::workflow::Workflow;
use brokk_model::{Duration, Time};

use super::{rest, steps, Step, TaskRun, TaskStatus};
use crate::workflow::{Plan, TaskPlan, TransferPlan};

/// What the driver does next for a workflow, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send `task` into its reservation with its parents' outputs; when
    /// `early` says from when, its reservation may first move up to start
    /// sooner (answer with [`Course::moved`] if it did).
    Release {
        /// The task.
        task: usize,
        /// The earliest it may move up to, when it may.
        early: Option<Time>,
    },
    /// Reserve `request` at any site for a retry of `task` (the earliest
    /// start wins), then answer with [`Course::retried`].
    Reserve {
        /// The task.
        task: usize,
        /// Its processors for its booked length, ending by its slack's end.
        request: Request,
    },
    /// Give back the reservations of the tasks `map` names and the
    /// bookings of `transfers`, then admit `part` (those tasks) anew and
    /// answer with [`Course::replanned`].
    Replan {
        /// The failed task the rescue is for.
        task: usize,
        /// The rest of the workflow, as a workflow of its own.
        part: Workflow,
        /// For each task of `part`, its index in the workflow.
        map: Vec<usize>,
        /// Transfers of the old plan that touch `part`, to give back.
        transfers: Vec<TransferPlan>,
    },
    /// The workflow is over: cancel what has not ended and give back what
    /// is still booked (the network's bandwidth too, unless it finished).
    End(Outcome),
}

/// How a workflow's course ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every task succeeded.
    Finished,
    /// It cannot finish as planned; why, for its owner.
    Failed(String),
}

/// Why a rescue did not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplanned {
    /// Admission found no plan for the rest before the deadline.
    NoFit(String),
    /// A plan was found but could not be committed.
    NotCommitted(String),
}

/// A rescue under way: the failed task, why it failed, and the tasks its
/// part maps to.
#[derive(Debug, Clone)]
struct Rescue {
    task: usize,
    why: String,
    map: Vec<usize>,
}

/// One admitted workflow's course: its description, its plan as it now
/// stands, and its tasks' runs.
#[derive(Debug, Clone)]
pub struct Course {
    wf: Workflow,
    plan: Plan,
    runs: Vec<TaskRun>,
    /// Why each retry under way is one, by task.
    retrying: Vec<Option<String>>,
    rescue: Option<Rescue>,
    ended: Option<Outcome>,
}

impl Course {
    /// The course of `wf`, admitted as `plan`, whose tasks stand as `runs`.
    pub fn new(wf: Workflow, plan: Plan, runs: Vec<TaskRun>) -> Course {
        let n = wf.tasks.len();
        Course {
            wf,
            plan,
            runs,
            retrying: vec![None; n],
            rescue: None,
            ended: None,
        }
    }

    /// A course that has just been admitted: every task waits for its parents.
    pub fn admitted(wf: Workflow, plan: Plan) -> Course {
        let runs = vec![
            TaskRun {
                status: TaskStatus::Planned,
                retried: 0
            };
            wf.tasks.len()
        ];
        Course::new(wf, plan, runs)
    }

    /// The workflow.
    pub fn workflow(&self) -> &Workflow {
        &self.wf
    }

    /// The plan as it now stands: moves, retries and rescues included.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The tasks' runs as the course knows them.
    pub fn runs(&self) -> &[TaskRun] {
        &self.runs
    }

    /// How it ended, once it has.
    pub fn ended(&self) -> Option<&Outcome> {
        self.ended.as_ref()
    }

    /// Records what task `task` now does (the driver's report of its job).
    pub fn set(&mut self, task: usize, status: TaskStatus) {
        self.runs[task].status = status;
    }

    /// What to do at `now` with the tasks as they stand: tasks whose
    /// parents all succeeded go, failed ones retry in their slack or have
    /// the rest planned again, and a workflow that cannot go on or is done
    /// ends. Nothing while a rescue's answer is awaited or once ended.
    pub fn advance(&mut self, now: Time) -> Vec<Action> {
        self.advance_holding(now, &[])
    }

    /// [`Course::advance`], holding back the tasks booked at the sites of
    /// `held` (sites being rescued, [`super::movable`]): a task is not sent
    /// where nothing answers, and the rescue moves it or ends the workflow.
    pub fn advance_holding(&mut self, now: Time, held: &[usize]) -> Vec<Action> {
        if self.ended.is_some() || self.rescue.is_some() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for step in steps(&self.wf, &self.plan, &self.runs, now) {
            match step {
                Step::Release { task, .. } if held.contains(&self.plan.tasks[task].site) => {}
                Step::Release { task, early } => {
                    self.runs[task].status = TaskStatus::Sent;
                    out.push(Action::Release { task, early });
                }
                Step::Retry {
                    task,
                    cores,
                    duration,
                    latest_end,
                    why,
                } => {
                    // Asked once: the task waits for the answer as if sent.
                    self.runs[task].status = TaskStatus::Sent;
                    self.retrying[task] = Some(why);
                    out.push(Action::Reserve {
                        task,
                        request: Request {
                            amount: cores,
                            duration: Duration(duration),
                            earliest: now,
                            latest: latest_end - Duration(duration),
                            flexible: false,
                        },
                    });
                }
                Step::Rescue { task, why } => return self.replan(now, task, why),
                Step::Fail { reason, .. } => return self.end(Outcome::Failed(reason)),
                Step::Finished => return self.end(Outcome::Finished),
            }
        }
        out
    }

    /// The answer to [`Action::Reserve`] for `task`: the reservation a
    /// site granted (site, id, start), which the task runs in at once, or
    /// none in its slack, and then the rest is planned again.
    pub fn retried(&mut self, now: Time, task: usize, granted: Option<(usize, ReservationId, Time)>) -> Vec<Action> {
        let why = self.retrying[task].take().unwrap_or_default();
        if self.ended.is_some() {
            return Vec::new();
        }
        match granted {
            Some((site, reservation, start)) => {
                self.relocated(task, site, reservation, start);
                self.runs[task].retried += 1;
                Vec::new()
            }
            None => {
                self.runs[task].status = TaskStatus::Failed(why.clone());
                self.replan(now, task, why)
            }
        }
    }

    /// The answer to [`Action::Replan`]: the rest's new plan, committed
    /// (its tasks in the part's order), or why there is none, which fails
    /// the workflow.
    pub fn replanned(&mut self, task: usize, answer: Result<Plan, Unplanned>) -> Vec<Action> {
        let Some(r) = self.rescue.take().filter(|r| r.task == task) else {
            return Vec::new();
        };
        let name = self.wf.tasks[task].id.clone();
        match answer {
            Ok(part) => {
                for (p, &k) in part.tasks.into_iter().zip(&r.map) {
                    self.plan.tasks[k] = p;
                    // Every task of the part waits for its parents again.
                    self.runs[k].status = TaskStatus::Planned;
                }
                self.runs[task].retried += 1;
                self.plan.transfers.extend(part.transfers);
                Vec::new()
            }
            Err(Unplanned::NoFit(why)) => self.end(Outcome::Failed(format!(
                "task {name} failed: {}; its retry and the rest no longer fit: {why}",
                r.why
            ))),
            Err(Unplanned::NotCommitted(why)) => self.end(Outcome::Failed(format!(
                "task {name} failed: {}; its rescue could not be committed: {why}",
                r.why
            ))),
        }
    }

    /// The tasks booked at site `site` that may move elsewhere at `now`
    /// ([`super::movable`]), for a rescue of a site that failed.
    pub fn movable(&self, site: usize, now: Time) -> Vec<super::Movable> {
        if self.ended.is_some() || self.rescue.is_some() {
            return Vec::new();
        }
        super::movable(&self.wf, &self.plan, &self.runs, site, now)
    }

    /// The tasks booked at site `site`, which is down, that are due at
    /// `now` and cannot move ([`super::stranded`]).
    pub fn stranded(&self, site: usize, now: Time) -> Vec<usize> {
        if self.ended.is_some() || self.rescue.is_some() {
            return Vec::new();
        }
        super::stranded(&self.wf, &self.plan, &self.runs, site, now)
    }

    /// Task `task` moved to reservation `reservation` at site `site`,
    /// starting at `start` (its length kept): a rescue found it room there.
    pub fn relocated(&mut self, task: usize, site: usize, reservation: ReservationId, start: Time) {
        let p = &mut self.plan.tasks[task];
        let length = p.end - p.start;
        *p = TaskPlan {
            task: p.task.clone(),
            site,
            start,
            end: start + length,
            reservation,
        };
    }

    /// Task `task`'s reservation moved up to start at `start` (its length kept).
    pub fn moved(&mut self, task: usize, start: Time) {
        let p = &mut self.plan.tasks[task];
        let length = p.end - p.start;
        (p.start, p.end) = (start, start + length);
    }

    fn replan(&mut self, now: Time, task: usize, why: String) -> Vec<Action> {
        let (part, map) = rest(&self.wf, &self.plan, &self.runs, task, now);
        let ids: std::collections::BTreeSet<&str> = part.tasks.iter().map(|t| t.id.as_str()).collect();
        let (transfers, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.plan.transfers)
            .into_iter()
            .partition(|x| ids.contains(x.to_task.as_str()) || ids.contains(x.from_task.as_str()));
        self.plan.transfers = kept;
        self.rescue = Some(Rescue {
            task,
            why,
            map: map.clone(),
        });
        vec![Action::Replan {
            task,
            part,
            map,
            transfers,
        }]
    }

    fn end(&mut self, outcome: Outcome) -> Vec<Action> {
        self.ended = Some(outcome.clone());
        vec![Action::End(outcome)]
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::diamond;
    use super::*;

    fn course() -> Course {
        let (wf, plan) = diamond();
        Course::admitted(wf, plan)
    }

    #[test]
    fn a_rescue_moves_the_tasks_not_sent_within_their_slack() {
        let mut c = course();
        assert_eq!(c.advance(Time(0)), [Action::Release { task: 0, early: None }]);
        let moves = c.movable(0, Time(50));
        // a was sent; b and c may move between their booked start and d's;
        // d between its own and the deadline.
        let windows: Vec<(usize, Time, Time)> = moves
            .iter()
            .map(|m| (m.task, m.request.earliest, m.request.latest))
            .collect();
        assert_eq!(
            windows,
            [
                (1, Time(100), Time(400)),
                (2, Time(100), Time(400)),
                (3, Time(500), Time(1900))
            ]
        );
        assert!(moves
            .iter()
            .all(|m| m.request.amount == 2 && m.request.duration.0 == 100));
        // Nothing is booked at another site; later than the slack, nothing moves.
        assert!(c.movable(1, Time(50)).is_empty());
        assert_eq!(c.movable(0, Time(450)).iter().map(|m| m.task).collect::<Vec<_>>(), [3]);
        c.relocated(1, 1, ReservationId(9), Time(150));
        let p = &c.plan().tasks[1];
        assert_eq!(
            (p.site, p.start, p.end, p.reservation),
            (1, Time(150), Time(250), ReservationId(9))
        );
        assert_eq!(
            c.movable(0, Time(50)).iter().map(|m| m.task).collect::<Vec<_>>(),
            [2, 3]
        );
        assert!(c.stranded(0, Time(50)).is_empty());
        // Once a succeeded, c would go now: it moves from now on.
        c.set(0, TaskStatus::Succeeded);
        let m = &c.movable(0, Time(60))[0];
        assert_eq!(
            (m.task, m.start, m.end, m.request.earliest),
            (2, Time(60), Time(160), Time(60))
        );
        // Past its slack it can no longer move, and it is due: stranded.
        // d waits for its parents and its booked start has not come.
        assert_eq!(c.movable(0, Time(450)).iter().map(|m| m.task).collect::<Vec<_>>(), [3]);
        assert_eq!(c.stranded(0, Time(450)), [2]);
    }

    #[test]
    fn a_task_at_a_site_held_back_is_not_sent_until_its_site_is_let_go() {
        let mut c = course();
        // Every task of the diamond is at site 0: a waits, unsent.
        assert_eq!(c.advance_holding(Time(0), &[0]), []);
        assert_eq!(c.runs()[0].status, TaskStatus::Planned);
        assert_eq!(
            c.advance_holding(Time(0), &[1]),
            [Action::Release { task: 0, early: None }]
        );
    }

    #[test]
    fn a_task_with_booked_data_does_not_move_alone_and_is_stranded_when_due() {
        let (wf, mut plan) = diamond();
        plan.transfers.push(crate::workflow::TransferPlan {
            from_task: "b".into(),
            to_task: "d".into(),
            kind: crate::workflow::TransferKind::Data { bytes: 10 },
            from_site: 0,
            to_site: 0,
            start: Time(420),
            end: Time(430),
            bytes_per_s: 1,
            links: Vec::new(),
        });
        let mut c = Course::admitted(wf, plan);
        c.set(0, TaskStatus::Succeeded);
        // b sends data to d and d receives it: neither moves; c may.
        assert_eq!(c.movable(0, Time(60)).iter().map(|m| m.task).collect::<Vec<_>>(), [2]);
        // b is due (its parent is done) and cannot move: stranded; d is not due.
        assert_eq!(c.stranded(0, Time(60)), [1]);
    }

    #[test]
    fn tasks_go_once_and_the_workflow_finishes() {
        let mut c = course();
        assert_eq!(c.advance(Time(0)), [Action::Release { task: 0, early: None }]);
        // Sent once: asked again, nothing new goes.
        assert_eq!(c.advance(Time(10)), []);
        c.set(0, TaskStatus::Succeeded);
        assert_eq!(
            c.advance(Time(50)),
            [
                Action::Release {
                    task: 1,
                    early: Some(Time(50))
                },
                Action::Release {
                    task: 2,
                    early: Some(Time(50))
                }
            ]
        );
        c.moved(1, Time(50));
        assert_eq!((c.plan().tasks[1].start, c.plan().tasks[1].end), (Time(50), Time(150)));
        for k in 1..3 {
            c.set(k, TaskStatus::Succeeded);
        }
        assert_eq!(
            c.advance(Time(160)),
            [Action::Release {
                task: 3,
                early: Some(Time(160))
            }]
        );
        c.set(3, TaskStatus::Succeeded);
        assert_eq!(c.advance(Time(300)), [Action::End(Outcome::Finished)]);
        assert_eq!(c.ended(), Some(&Outcome::Finished));
        assert_eq!(c.advance(Time(400)), []);
    }

    #[test]
    fn a_retry_is_asked_once_and_runs_where_it_was_granted() {
        let mut c = course();
        c.advance(Time(0));
        c.set(0, TaskStatus::Succeeded);
        c.advance(Time(100));
        c.set(1, TaskStatus::Failed("exit 1".into()));
        let asked = c.advance(Time(250));
        let request = Request {
            amount: 2,
            duration: Duration(100),
            earliest: Time(250),
            latest: Time(400),
            flexible: false,
        };
        assert_eq!(asked, [Action::Reserve { task: 1, request }]);
        assert_eq!(c.advance(Time(251)), [], "the retry is asked for once");
        assert_eq!(c.retried(Time(252), 1, Some((3, ReservationId(9), Time(260)))), []);
        let p = &c.plan().tasks[1];
        assert_eq!(
            (p.site, p.reservation, p.start, p.end),
            (3, ReservationId(9), Time(260), Time(360))
        );
        assert_eq!(c.runs()[1].retried, 1);
        // Its one retry fails too: the workflow fails, naming the retries.
        c.set(1, TaskStatus::Failed("exit 2".into()));
        let out = c.advance(Time(370));
        assert!(matches!(&out[..], [Action::End(Outcome::Failed(why))] if why.contains("1 retries are used")));
    }

    #[test]
    fn no_room_for_a_retry_plans_the_rest_and_its_answer_decides() {
        let mut c = course();
        c.advance(Time(0));
        c.set(0, TaskStatus::Succeeded);
        c.advance(Time(100));
        c.set(1, TaskStatus::Failed("exit 1".into()));
        c.advance(Time(250));
        let out = c.retried(Time(251), 1, None);
        let [Action::Replan { task: 1, part, map, .. }] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(map, &[1, 3]);
        assert_eq!(part.tasks.len(), 2);
        // While the rescue is asked for, nothing else happens.
        assert_eq!(c.advance(Time(252)), []);
        // Planned again: b and d wait for their parents anew, in their new places.
        let at = |task: &str, start| TaskPlan {
            task: task.into(),
            site: 1,
            start: Time(start),
            end: Time(start + 100),
            reservation: ReservationId(start as u64),
        };
        let plan = Plan {
            tasks: vec![at("b", 300), at("d", 600)],
            transfers: Vec::new(),
            start: Time(300),
            finish: Time(700),
        };
        assert_eq!(c.replanned(1, Ok(plan)), []);
        assert_eq!(c.plan().tasks[3].start, Time(600));
        assert_eq!(c.runs()[1].retried, 1);
        assert_eq!(
            c.advance(Time(260)),
            [Action::Release {
                task: 1,
                early: Some(Time(260))
            }]
        );
    }

    #[test]
    fn a_rescue_that_does_not_fit_fails_the_workflow_with_both_reasons() {
        let mut c = course();
        c.advance(Time(0));
        c.set(0, TaskStatus::Succeeded);
        c.advance(Time(100));
        c.set(1, TaskStatus::Failed("exit 1".into()));
        // Too late for a retry before d's reservation: a rescue at once.
        let out = c.advance(Time(401));
        assert!(matches!(&out[..], [Action::Replan { task: 1, .. }]));
        let out = c.replanned(1, Err(Unplanned::NoFit("no room before the deadline".into())));
        assert_eq!(
            out,
            [Action::End(Outcome::Failed(
                "task b failed: exit 1; its retry and the rest no longer fit: no room before the deadline".into()
            ))]
        );
        assert_eq!(c.advance(Time(500)), []);
    }
}
