//! The course of an admitted workflow, after its commit ([VRM] 4.2): which
//! tasks may go to their reservations, when a failed task may run again
//! (DAGMan's RETRY) inside the slack before its children's reservations,
//! and when the workflow is over. Synchronous, time as an argument: the
//! driver asks what to do and does it; [`Course`] chains the rules as a
//! state machine for the service and the simulator alike.

use brokk_model::workflow::Workflow;
use brokk_model::Time;

use brokk_model::workflow::{CoAllocation, Edge};

use super::{Plan, FAR};

mod run;
pub use run::{Action, Course, Outcome, Unplanned};

/// Where one task is, as the broker's records say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskStatus {
    /// Waiting for its parents; nothing sent yet.
    Planned,
    /// Sent to its site (queued there, waiting for its reservation, or running).
    Sent,
    /// Ended with exit status 0.
    Succeeded,
    /// Ended otherwise, or could not run; with why.
    Failed(String),
    /// Cancelled by its owner.
    Cancelled,
}

/// A task's run so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRun {
    /// Its status.
    pub status: TaskStatus,
    /// Runs started again after a failure so far.
    pub retried: u32,
}

/// What to do next for a running workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Every parent of `task` succeeded: send it into its reservation,
    /// with its parents' outputs.
    Release {
        /// The task.
        task: usize,
        /// The earliest its reservation may first move up to start at,
        /// when it may: its parents ended before their reservations did
        /// (or it has none and its reservation starts later than it may),
        /// and it neither waits for booked data nor starts together with
        /// other tasks. Never before the workflow's earliest start.
        early: Option<Time>,
    },
    /// Task `task` failed and may run again: reserve `cores` for `duration`
    /// seconds ending by `latest_end` (its children's first reservation, or
    /// the deadline) and send it there.
    Retry {
        /// The task.
        task: usize,
        /// Processors.
        cores: u32,
        /// Seconds it is given (its planned reservation's length).
        duration: i64,
        /// The retry must end by this.
        latest_end: Time,
        /// Why it failed.
        why: String,
    },
    /// Task `task` failed and may run again, but not before its children's
    /// reservations: plan the rest of the workflow ([`rest`]) again from
    /// now against the deadline, its reservations given back first.
    Rescue {
        /// The task.
        task: usize,
        /// Why it failed.
        why: String,
    },
    /// The workflow cannot finish as planned: cancel what is left.
    Fail {
        /// The task at fault.
        task: usize,
        /// Why, for the owner.
        reason: String,
    },
    /// Every task succeeded.
    Finished,
}

/// The next steps of `wf`, admitted as `plan`, whose tasks stand as `runs`
/// (in the workflow's order) at `now`. A workflow that fails yields one
/// [`Step::Fail`] and nothing else; one whose tasks all succeeded yields
/// [`Step::Finished`].
pub fn steps(wf: &Workflow, plan: &Plan, runs: &[TaskRun], now: Time) -> Vec<Step> {
    let index: std::collections::HashMap<&str, usize> =
        wf.tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); wf.tasks.len()];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); wf.tasks.len()];
    for e in &wf.edges {
        if let (Some(&p), Some(&c)) = (index.get(e.parent.as_str()), index.get(e.child.as_str())) {
            parents[c].push(p);
            children[p].push(c);
        }
    }
    let mut out = Vec::new();
    for (k, run) in runs.iter().enumerate() {
        match &run.status {
            TaskStatus::Cancelled => {
                return vec![Step::Fail {
                    task: k,
                    reason: format!("task {} was cancelled", wf.tasks[k].id),
                }]
            }
            TaskStatus::Failed(why) => {
                let task = &wf.tasks[k];
                if run.retried >= task.retries {
                    let reason = if task.retries == 0 {
                        format!("task {} failed: {why}", task.id)
                    } else {
                        format!("task {} failed: {why}; its {} retries are used", task.id, task.retries)
                    };
                    return vec![Step::Fail { task: k, reason }];
                }
                let (start, end) = (plan.tasks[k].start, plan.tasks[k].end);
                let duration = (end - start).0;
                let latest_end = latest_end(wf, plan, &children[k], k);
                if now + brokk_model::Duration(duration) > latest_end {
                    return vec![Step::Rescue {
                        task: k,
                        why: why.clone(),
                    }];
                }
                out.push(Step::Retry {
                    task: k,
                    cores: task.cores,
                    duration,
                    latest_end,
                    why: why.clone(),
                });
            }
            TaskStatus::Planned => {
                if parents[k].iter().all(|&p| runs[p].status == TaskStatus::Succeeded) {
                    let id = &wf.tasks[k].id;
                    let from = wf.earliest.map_or(now, |e| e.max(now));
                    let early = from < plan.tasks[k].start
                        && !wf.coallocations.iter().any(|c| &c.a == id || &c.b == id)
                        && !plan
                            .transfers
                            .iter()
                            .any(|x| &x.to_task == id || &x.from_task == id && x.kind == super::TransferKind::Stream);
                    out.push(Step::Release {
                        task: k,
                        early: early.then_some(from),
                    });
                }
            }
            TaskStatus::Sent | TaskStatus::Succeeded => {}
        }
    }
    if runs.iter().all(|r| r.status == TaskStatus::Succeeded) {
        out.push(Step::Finished);
    }
    out
}

/// The latest task `k` may end where its plan stands: its data leaves at
/// its booked time and its children (`children`) start at theirs, so a
/// retry or a move fits only in the time before both; the deadline where
/// it has neither.
fn latest_end(wf: &Workflow, plan: &Plan, children: &[usize], k: usize) -> Time {
    let id = &wf.tasks[k].id;
    children
        .iter()
        .map(|&c| plan.tasks[c].start)
        .chain(
            plan.transfers
                .iter()
                .filter(|x| &x.from_task == id && matches!(x.kind, super::TransferKind::Data { .. }))
                .map(|x| x.start),
        )
        .min()
        .or(wf.deadline)
        .unwrap_or(Time(FAR))
}

/// A task booked at a site that failed, not sent yet, that may move to
/// another site on its own ([`movable`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movable {
    /// The task.
    pub task: usize,
    /// When it would start: its booked start, or `now` once its parents
    /// all succeeded (it would go now, as a released task moves up).
    pub start: Time,
    /// That start plus its booked length.
    pub end: Time,
    /// Its processors for its booked length, starting no sooner than
    /// `start` (its parents' outputs are due then) and ending by its
    /// slack's end.
    pub request: brokk_core::Request,
}

/// Whether every parent of task `k` succeeded.
fn ready(wf: &Workflow, runs: &[TaskRun], k: usize) -> bool {
    wf.edges
        .iter()
        .filter(|e| e.child == wf.tasks[k].id)
        .filter_map(|e| wf.task(&e.parent))
        .all(|p| runs[p].status == TaskStatus::Succeeded)
}

/// Whether task `k` may move to another site on its own: it has no booked
/// transfer and starts together with no other task, whose bandwidth and
/// partners are booked where it is.
fn alone(wf: &Workflow, plan: &Plan, k: usize) -> bool {
    let id = &wf.tasks[k].id;
    !wf.coallocations.iter().any(|c| &c.a == id || &c.b == id)
        && !plan.transfers.iter().any(|x| &x.to_task == id || &x.from_task == id)
}

/// The window task `k` may move within at `now`: its processors for its
/// booked length, from when it would start to its slack's end; the request
/// and that start, or `None` when the window has closed.
fn window(wf: &Workflow, plan: &Plan, runs: &[TaskRun], k: usize, now: Time) -> Option<(brokk_core::Request, Time)> {
    let p = &plan.tasks[k];
    let duration = p.end - p.start;
    let start = if ready(wf, runs, k) {
        wf.earliest.map_or(now, |e| e.max(now))
    } else {
        p.start.max(now)
    };
    let children: Vec<usize> = wf
        .edges
        .iter()
        .filter(|e| e.parent == wf.tasks[k].id)
        .filter_map(|e| wf.task(&e.child))
        .collect();
    let latest = latest_end(wf, plan, &children, k) - duration;
    (latest >= start).then_some((
        brokk_core::Request {
            amount: wf.tasks[k].cores,
            duration,
            earliest: start,
            latest,
            flexible: false,
        },
        start,
    ))
}

/// The tasks of `wf` (admitted as `plan`, its tasks standing as `runs`)
/// booked at site `site` that have not been sent and can move elsewhere on
/// their own at `now` ([VRM] 6.3: a rescue remaps a workflow's jobs one by
/// one). A task with booked transfers or that starts together with others
/// cannot: its bandwidth and its partners are booked where it is. Such a
/// task stays, and if its site is still down when it is released it fails,
/// and the course retries it or plans the rest again.
pub fn movable(wf: &Workflow, plan: &Plan, runs: &[TaskRun], site: usize, now: Time) -> Vec<Movable> {
    (0..wf.tasks.len())
        .filter(|&k| runs[k].status == TaskStatus::Planned && plan.tasks[k].site == site && alone(wf, plan, k))
        .filter_map(|k| {
            let (request, start) = window(wf, plan, runs, k, now)?;
            Some(Movable {
                task: k,
                start,
                end: start + request.duration,
                request,
            })
        })
        .collect()
}

/// The tasks of `wf` booked at site `site`, which is down, that are due at
/// `now` (their parents all succeeded, or their booked start came) and
/// cannot move: they are not alone ([`movable`]), or their window has
/// closed. A broker that holds such tasks back rather than send them to a
/// site that does not answer ends their workflow instead.
pub fn stranded(wf: &Workflow, plan: &Plan, runs: &[TaskRun], site: usize, now: Time) -> Vec<usize> {
    (0..wf.tasks.len())
        .filter(|&k| runs[k].status == TaskStatus::Planned && plan.tasks[k].site == site)
        .filter(|&k| ready(wf, runs, k) || now >= plan.tasks[k].start)
        .filter(|&k| !alone(wf, plan, k) || window(wf, plan, runs, k, now).is_none())
        .collect()
}

/// What a rescue plans again: the failed task and every task not sent yet,
/// with the dependencies and co-allocations among them, from `now` or,
/// where one of them waits for a task still running, from the end of that
/// task's reservation. Returns the part as a workflow (the deadline kept)
/// and, for each of its tasks, its index in `wf`. Data from tasks that
/// already ran is not booked again: it is at the broker already.
pub fn rest(wf: &Workflow, plan: &Plan, runs: &[TaskRun], failed: usize, now: Time) -> (Workflow, Vec<usize>) {
    let keep: Vec<usize> = (0..wf.tasks.len())
        .filter(|&k| k == failed || runs[k].status == TaskStatus::Planned)
        .collect();
    let kept = |id: &str| wf.task(id).is_some_and(|k| keep.contains(&k));
    let running_parent_end = wf
        .edges
        .iter()
        .filter(|e| kept(&e.child))
        .filter_map(|e| wf.task(&e.parent))
        .filter(|&p| runs[p].status == TaskStatus::Sent)
        .map(|p| plan.tasks[p].end)
        .max();
    let part = Workflow {
        name: wf.name.clone(),
        tasks: keep.iter().map(|&k| wf.tasks[k].clone()).collect(),
        edges: wf
            .edges
            .iter()
            .filter(|e| kept(&e.parent) && kept(&e.child))
            .cloned()
            .collect::<Vec<Edge>>(),
        coallocations: wf
            .coallocations
            .iter()
            .filter(|c| kept(&c.a) && kept(&c.b))
            .cloned()
            .collect::<Vec<CoAllocation>>(),
        earliest: Some(running_parent_end.map_or(now, |e| e.max(now))),
        deadline: wf.deadline,
    };
    (part, keep)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::workflow::{TaskPlan, TransferKind, TransferPlan};
    use brokk_core::ReservationId;
    use brokk_model::workflow::{Edge, Task};

    /// a -> b, a -> c, b -> d, c -> d; b may retry once.
    pub(in crate::workflow::course) fn diamond() -> (Workflow, Plan) {
        let task = |id: &str, retries| Task {
            id: id.into(),
            runtime: brokk_model::Duration(100),
            cores: 2,
            retries,
            ..Task::default()
        };
        let edge = |p: &str, c: &str| Edge {
            parent: p.into(),
            child: c.into(),
            bytes: 0,
        };
        let wf = Workflow {
            name: "d".into(),
            tasks: vec![task("a", 0), task("b", 1), task("c", 0), task("d", 0)],
            edges: vec![edge("a", "b"), edge("a", "c"), edge("b", "d"), edge("c", "d")],
            deadline: Some(Time(2000)),
            ..Workflow::default()
        };
        let at = |k: usize, start: i64| TaskPlan {
            task: wf.tasks[k].id.clone(),
            site: 0,
            start: Time(start),
            end: Time(start + 100),
            reservation: ReservationId(k as u64),
        };
        let plan = Plan {
            tasks: vec![at(0, 0), at(1, 100), at(2, 100), at(3, 500)],
            transfers: Vec::new(),
            start: Time(0),
            finish: Time(600),
        };
        (wf, plan)
    }

    fn runs(states: [TaskStatus; 4]) -> Vec<TaskRun> {
        states
            .into_iter()
            .map(|status| TaskRun { status, retried: 0 })
            .collect()
    }

    use TaskStatus::*;

    #[test]
    fn tasks_go_when_every_parent_succeeded() {
        let (wf, plan) = diamond();
        let go = |task| Step::Release { task, early: None };
        let early = |task, from| Step::Release {
            task,
            early: Some(Time(from)),
        };
        assert_eq!(
            steps(&wf, &plan, &runs([Planned, Planned, Planned, Planned]), Time(0)),
            [go(0)]
        );
        assert_eq!(
            steps(&wf, &plan, &runs([Succeeded, Planned, Planned, Planned]), Time(100)),
            [go(1), go(2)]
        );
        // Its parents ended early: b and c may move up.
        assert_eq!(
            steps(&wf, &plan, &runs([Succeeded, Planned, Planned, Planned]), Time(40)),
            [early(1, 40), early(2, 40)]
        );
        // d waits for both of its parents.
        assert_eq!(
            steps(&wf, &plan, &runs([Succeeded, Succeeded, Sent, Planned]), Time(200)),
            []
        );
        assert_eq!(
            steps(&wf, &plan, &runs([Succeeded, Succeeded, Succeeded, Planned]), Time(200)),
            [early(3, 200)]
        );
        assert_eq!(
            steps(
                &wf,
                &plan,
                &runs([Succeeded, Succeeded, Succeeded, Succeeded]),
                Time(600)
            ),
            [Step::Finished]
        );
    }

    #[test]
    fn a_first_task_booked_ahead_moves_up_no_sooner_than_the_workflow_may_start() {
        let (mut wf, mut plan) = diamond();
        plan.tasks[0].start = Time(300);
        plan.tasks[0].end = Time(400);
        wf.earliest = Some(Time(200));
        let all_planned = runs([Planned, Planned, Planned, Planned]);
        assert_eq!(
            steps(&wf, &plan, &all_planned, Time(0)),
            [Step::Release {
                task: 0,
                early: Some(Time(200))
            }]
        );
        wf.earliest = Some(Time(300));
        assert_eq!(
            steps(&wf, &plan, &all_planned, Time(0)),
            [Step::Release { task: 0, early: None }]
        );
    }

    #[test]
    fn a_failed_task_retries_inside_its_slack_or_fails_the_workflow() {
        let (wf, plan) = diamond();
        let failed = || Failed("exit 1".into());
        // b may retry once, ending before d's reservation at 500.
        assert_eq!(
            steps(&wf, &plan, &runs([Succeeded, failed(), Sent, Planned]), Time(250)),
            [Step::Retry {
                task: 1,
                cores: 2,
                duration: 100,
                latest_end: Time(500),
                why: "exit 1".into()
            }]
        );
        // Too late for another 100 s before 500: the rest is planned again.
        let late = steps(&wf, &plan, &runs([Succeeded, failed(), Sent, Planned]), Time(401));
        assert_eq!(
            late,
            [Step::Rescue {
                task: 1,
                why: "exit 1".into()
            }]
        );
        // Its one retry used.
        let mut r = runs([Succeeded, failed(), Sent, Planned]);
        r[1].retried = 1;
        let used = steps(&wf, &plan, &r, Time(250));
        assert!(matches!(&used[..], [Step::Fail { task: 1, reason }] if reason.contains("1 retries are used")));
        // c has no retries: the workflow fails at once.
        let none = steps(&wf, &plan, &runs([Succeeded, Sent, failed(), Planned]), Time(250));
        assert!(matches!(&none[..], [Step::Fail { task: 2, reason }] if reason == "task c failed: exit 1"));
        let cancelled = steps(&wf, &plan, &runs([Succeeded, Cancelled, Sent, Planned]), Time(250));
        assert!(matches!(&cancelled[..], [Step::Fail { task: 1, .. }]));
    }

    #[test]
    fn a_retry_ends_before_its_data_leaves() {
        let (wf, mut plan) = diamond();
        plan.transfers.push(TransferPlan {
            from_task: "b".into(),
            to_task: "d".into(),
            kind: TransferKind::Data { bytes: 10 },
            from_site: 0,
            to_site: 1,
            start: Time(420),
            end: Time(430),
            bytes_per_s: 1,
            links: Vec::new(),
        });
        let got = steps(
            &wf,
            &plan,
            &runs([Succeeded, Failed("x".into()), Sent, Planned]),
            Time(250),
        );
        assert!(matches!(
            &got[..],
            [Step::Retry {
                latest_end: Time(420),
                ..
            }]
        ));
        // d waits for b's data where it was booked: it does not move up.
        let got = steps(&wf, &plan, &runs([Succeeded, Succeeded, Succeeded, Planned]), Time(250));
        assert_eq!(got, [Step::Release { task: 3, early: None }]);
        // d has no retries: its failure fails the workflow.
        let got = steps(
            &wf,
            &plan,
            &runs([Succeeded, Succeeded, Succeeded, Failed("x".into())]),
            Time(700),
        );
        assert!(matches!(&got[..], [Step::Fail { task: 3, .. }]));
    }

    #[test]
    fn a_rescue_plans_the_failed_task_and_what_was_not_sent() {
        let (wf, plan) = diamond();
        // b failed while c runs (its reservation ends at 200); d waits for both.
        let r = runs([Succeeded, Failed("x".into()), Sent, Planned]);
        let (part, map) = rest(&wf, &plan, &r, 1, Time(150));
        assert_eq!(map, [1, 3]);
        let ids: Vec<&str> = part.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["b", "d"]);
        assert_eq!(part.edges.len(), 1);
        assert_eq!(
            (part.edges[0].parent.as_str(), part.edges[0].child.as_str()),
            ("b", "d")
        );
        // d may not start before c's reservation ends.
        assert_eq!(part.earliest, Some(Time(200)));
        assert_eq!(part.deadline, wf.deadline);
        // With c done, the rest starts now.
        let r = runs([Succeeded, Failed("x".into()), Succeeded, Planned]);
        assert_eq!(rest(&wf, &plan, &r, 1, Time(150)).0.earliest, Some(Time(150)));
    }
}
