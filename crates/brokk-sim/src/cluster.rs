//! A cluster of N processors under a local policy: FCFS without backfilling
//! ([DMM], assumption 3), or backfilling with a number of reservations for the
//! jobs at the head of the queue (1 is EASY, Maui-style pivots; unbounded is
//! conservative, as [AB-avail] uses it). The rules are the scheduling core's
//! [`LocalQueue`]; this module is its event loop over a trace.
//!
//! Semantics, where the trace format leaves them open:
//! - a job runs for its recorded run time; the estimate (exact, or the trace's
//!   requested time) is used only for planning, and a job is never killed at it;
//! - events at the same instant are all applied before scheduling.

use brokk_core::order::QueueOrder;
use brokk_core::queue::LocalQueue;
pub use brokk_core::queue::{Outcome, Policy, QueueJob as SimJob};
use brokk_model::{Duration, Time};

use crate::engine::EventQueue;

/// Where the planning estimate of a trace job comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Estimates {
    /// The scheduler knows each run time exactly.
    Exact,
    /// The user's requested time (SWF field 9), the run time when missing.
    Requested,
}

/// Turns SWF records into simulator jobs. The size is the requested processors
/// (field 8), else the allocated ones (field 5); the job runs for field 4. Records
/// without a usable size or run time (-1) are left out, whatever their status.
pub fn from_swf(records: &[crate::swf::SwfJob], estimates: Estimates) -> Vec<SimJob> {
    records
        .iter()
        .filter_map(|r| {
            let size = if r.req_procs > 0 { r.req_procs } else { r.procs };
            if size <= 0 || r.run < 0 || r.submit < 0 {
                return None;
            }
            let estimate = match estimates {
                Estimates::Requested if r.req_time > 0 => r.req_time,
                _ => r.run,
            };
            Some(SimJob {
                id: r.id,
                submit: Time(r.submit),
                run: Duration(r.run),
                size: u32::try_from(size).ok()?,
                estimate: Duration(estimate),
                partition: r.partition,
                user: r.user,
                queue: r.queue,
            })
        })
        .collect()
}

/// Simulates `jobs` on `procs` processors under `policy`; jobs larger than the
/// machine are left out. Outcomes come in job order.
pub fn simulate(procs: u32, jobs: &[SimJob], policy: Policy) -> Vec<Outcome> {
    run(LocalQueue::new(procs, jobs, false), procs, jobs, policy)
}

/// [`simulate`] with the waiting jobs served in `order` rather than arrival
/// order.
pub fn simulate_in_order(procs: u32, jobs: &[SimJob], policy: Policy, order: Box<dyn QueueOrder>) -> Vec<Outcome> {
    run(
        LocalQueue::new(procs, jobs, false).with_order(order),
        procs,
        jobs,
        policy,
    )
}

/// [`simulate`] with conservative backfilling's kept profile a tree above
/// `spans` spans (0: always): for tests of the tree path.
pub fn simulate_with_flat_spans(procs: u32, jobs: &[SimJob], policy: Policy, spans: usize) -> Vec<Outcome> {
    run(
        LocalQueue::new(procs, jobs, false).with_flat_spans(spans),
        procs,
        jobs,
        policy,
    )
}

/// Like [`simulate`] but always plans on the planner's profile, also where the
/// fast path applies: the reference the fast path is tested against.
pub fn simulate_on_profile(procs: u32, jobs: &[SimJob], policy: Policy) -> Vec<Outcome> {
    run(LocalQueue::new(procs, jobs, true), procs, jobs, policy)
}

/// The event loop: arrivals in (time, job order), finishes through the
/// event queue.
fn run(mut queue: LocalQueue<'_>, procs: u32, jobs: &[SimJob], policy: Policy) -> Vec<Outcome> {
    // Arrivals in (time, job order); finishes through the event queue.
    let mut arrivals: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].size <= procs && jobs[i].size > 0)
        .collect();
    arrivals.sort_by_key(|&i| jobs[i].submit);
    let start = arrivals.first().map_or(Time::EPOCH, |&i| jobs[i].submit);
    let mut finishes: EventQueue<usize> = EventQueue::new(start);
    let mut next_arrival = 0;
    loop {
        let arrival_at = arrivals.get(next_arrival).map(|&i| jobs[i].submit);
        let now = match (arrival_at, finishes.peek_time()) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(f)) => f,
            (Some(a), Some(f)) => a.min(f),
        };
        while finishes.peek_time() == Some(now) {
            if let Some((_, i)) = finishes.pop() {
                queue.finish(i, now);
            }
        }
        while arrivals.get(next_arrival).is_some_and(|&i| jobs[i].submit == now) {
            queue.arrive(arrivals[next_arrival]);
            next_arrival += 1;
        }
        for i in queue.schedule(now, policy) {
            // A finish is never before now, so this cannot fail.
            let _ = finishes.schedule(now + jobs[i].run, i);
        }
    }
    queue.into_outcomes()
}
