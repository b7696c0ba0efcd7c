//! The `brokk` architecture: [DMM]'s platform joined by Brokk's own
//! brokers. Each cluster has a broker of its own, the `BrokerCore` that
//! `brokk serve` runs, over that one cluster, and the brokers are each
//! other's siblings: a broker whose cluster is not predicted to start a
//! job within the threshold delegates it, and a sibling takes it only when
//! its own cluster starts it within the threshold (or it can pass it on),
//! as live brokers decide ([`crate::grid`] with delegation).
//!
//! Where it differs from `dmm` on the same platform: a broker delegates the
//! job, not a lease of processors, and at once rather than at its next
//! delegation cycle; it reads a sibling as the one site the sibling
//! publishes, its information reused up to `info_ttl`; the siblings are
//! every other cluster's broker, not the paper's hierarchy; and the clusters
//! run FCFS on Brokk's site core. Its messages are every request a broker
//! made of a site or a sibling, and the reply.

use brokk_model::{Duration, Time};

use super::run::{Outcome, Params, Run};
use super::{GridJob, Platform};
use crate::cluster::{Policy, SimJob};
use crate::grid::{simulate_grid, Adaptation, Delegate, GridOptions, GridRouting, Staleness};
use crate::platform::ClusterSpec;

/// Runs the platform's clusters under one broker each, delegating to each
/// other, with `jobs` (in arrival order) until the last arrival.
pub fn simulate(platform: &Platform, jobs: &[GridJob], params: Params) -> Run {
    let end = jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let clusters: Vec<usize> = platform.clusters().collect();
    let specs: Vec<ClusterSpec> = clusters
        .iter()
        .map(|&c| ClusterSpec {
            name: Platform::name(c),
            procs: platform.procs[c],
            partitions: vec![c as i64],
            speed: 1.0,
        })
        .collect();
    let sim_jobs: Vec<SimJob> = jobs
        .iter()
        .enumerate()
        .map(|(k, j)| SimJob {
            id: k as i64,
            submit: Time(j.submit),
            run: Duration(j.run.max(1)),
            size: j.size,
            estimate: Duration(j.run.max(1)),
            partition: j.origin as i64,
            ..SimJob::default()
        })
        .collect();
    let options = GridOptions {
        staleness: Staleness {
            info_ttl: Duration(params.info_ttl),
            ..Staleness::default()
        },
        policy: Policy::Fcfs.into(),
        adaptation: (params.brokk_adapt > 0).then_some(Adaptation {
            every: Duration(params.brokk_adapt),
            margin: Duration(params.brokk_adapt),
        }),
        brokers: specs.len(),
        delegation: Some(Delegate {
            threshold: Duration(params.brokk_threshold),
            ttl: params.ttl,
        }),
        ..GridOptions::default()
    };
    let routing = GridRouting::Broker {
        objective: brokk_model::Objective::EarliestStart,
        reserve_top_k: 0,
    };
    let run = simulate_grid(&specs, &sim_jobs, routing, options);
    let mut outcomes = vec![Outcome::default(); jobs.len()];
    // What happened by the last arrival, as the other architectures end.
    for (k, c) in run.clusters.iter().enumerate() {
        for o in &c.outcomes {
            let Some(out) = usize::try_from(o.id).ok().and_then(|i| outcomes.get_mut(i)) else {
                continue;
            };
            if o.start.0 > end {
                continue;
            }
            let at = clusters[k];
            *out = Outcome {
                start: Some(o.start.0),
                end: (o.end.0 <= end).then_some(o.end.0),
                ran_at: Some(at),
                hops: u32::from(at != jobs[o.id as usize].origin),
            };
        }
    }
    Run {
        outcomes,
        end,
        delegation_messages: run.messages.map_or(0, |m| m.messages()),
    }
}
