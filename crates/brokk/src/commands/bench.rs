//! `brokk bench`: measurements printed as ratios against a baseline run in the
//! same process, so figures compare across machines.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use brokk_model::{Duration, Time};
use brokk_planner::{BTree, Change, FreeList, Planner, Profile, Reply, Request, ReservationId, Slotted};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Arguments of `brokk bench`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// A hostile user and an ordinary one at once: the ordinary user's
    /// latencies against their own baseline, the broker's memory.
    Attack(super::bench_attack::AttackArgs),
    /// The reservation planner: free list against the slotted baseline.
    Planner(PlannerArgs),
    /// The simulator on real traces, against AccaSim run on the same trace.
    Sim(super::bench_sim::SimArgs),
    /// A site agent over loopback: reservation operations and trivial jobs.
    Site(super::bench_site::SiteArgs),
    /// The broker service with embedded sites: accepted and dispatched jobs per second.
    Submit(super::bench_submit::SubmitBenchArgs),
    /// Admitting one workflow over many sites, each scheduler against single-job admission.
    Workflow(super::bench_workflow::WorkflowBenchArgs),
}

#[derive(clap::Args)]
struct PlannerArgs {
    /// Live reservation counts to measure at.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    sizes: Vec<usize>,
    /// Seconds of mixed operations per implementation and size.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Slot width of the slotted baseline in seconds; 1 gives the same answers as the free list.
    #[arg(long, default_value_t = 1)]
    slot_seconds: i64,
    /// Seed of the operation stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Runs the chosen benchmark.
pub fn run(a: Args) -> Result<ExitCode> {
    match a.what {
        What::Attack(a) => super::bench_attack::run(a),
        What::Planner(p) => planner(p),
        What::Sim(s) => super::bench_sim::run(s),
        What::Site(s) => super::bench_site::run(s),
        What::Submit(s) => super::bench_submit::run(s),
        What::Workflow(w) => super::bench_workflow::run(w),
    }
}

/// The `p` quantile (0 to 1) of ascending `sorted`, nearest rank; 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted[i]
}

const CAPACITY: u32 = 512;
/// Share of capacity x time the live reservations fill when spread evenly.
const LOAD: f64 = 0.6;

#[derive(Serialize)]
struct PlannerFigures {
    live: usize,
    /// The treap (`FreeList`).
    free_list_ops_per_s: f64,
    slotted_ops_per_s: f64,
    /// Treap against the slotted baseline.
    ratio: f64,
    /// The treap's heap bytes (with the planner's bookkeeping).
    bytes_per_reservation: f64,
    /// The B+ tree profile (`BTree`), the live sites' planner.
    b_tree_ops_per_s: f64,
    /// B+ tree against the slotted baseline.
    b_tree_ratio: f64,
    /// B+ tree against the treap.
    b_tree_vs_free_list: f64,
    /// The B+ tree's heap bytes (with the planner's bookkeeping).
    b_tree_bytes_per_reservation: f64,
    /// Slot width of the baseline.
    slot_seconds: i64,
    /// Share of capacity x time reserved over the stream's span at the end (free list run).
    utilization: f64,
    /// Share of reservation attempts granted in the mixed phase (free list run).
    acceptance: f64,
}

/// The stream's shape: amounts 1..=64 of 512, durations 10 minutes to 2 hours,
/// start windows of up to a day, spread so the schedule runs at about 70% load.
struct Stream {
    rng: ChaCha8Rng,
    span: i64,
}

impl Stream {
    fn new(seed: u64, live: usize) -> Self {
        // Mean amount 32.5 x mean duration 3900 s per reservation, at 70% of 512 units.
        let span = (live as f64 * 32.5 * 3900.0 / (LOAD * f64::from(CAPACITY))) as i64 + 86_400;
        Stream {
            rng: ChaCha8Rng::seed_from_u64(seed),
            span,
        }
    }

    fn request(&mut self) -> Request {
        let e = self.rng.gen_range(0..self.span);
        Request {
            amount: self.rng.gen_range(1..=64),
            duration: Duration(self.rng.gen_range(600..=7200)),
            earliest: Time(e),
            latest: Time(e + self.rng.gen_range(0..86_400)),
            flexible: false,
        }
    }
}

fn horizon(stream: &Stream) -> i64 {
    stream.span + 3 * 86_400
}

struct Measured {
    ops_per_s: f64,
    bytes: usize,
    utilization: f64,
    acceptance: f64,
}

/// Fills a planner to `live` reservations, then runs the 70/20/10 mix for `seconds`.
fn measure<P: Profile>(mut p: Planner<P>, live: usize, seed: u64, seconds: f64) -> Measured {
    let mut s = Stream::new(seed, live);
    let mut ids: Vec<ReservationId> = Vec::with_capacity(live * 2);
    let before = ALLOCATED.allocated();
    while ids.len() < live {
        if let Reply::Granted { id, .. } = p.reserve("bench", &s.request(), None) {
            ids.push(id);
        }
    }
    let bytes = ALLOCATED.allocated().saturating_sub(before) - ids.capacity() * std::mem::size_of::<ReservationId>();
    let (mut ops, mut attempts, mut granted) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    loop {
        for _ in 0..256 {
            // Hold the live count near its target: above it, the next operation is a cancel.
            let roll = if ids.len() > live + live / 20 {
                7
            } else {
                s.rng.gen_range(0..10)
            };
            if roll < 7 {
                let req = s.request();
                // let _ = p.probe(&req, 2);
                attempts += 1;
                if let Reply::Granted { id, .. } = p.reserve("bench", &req, None) {
                    ids.push(id);
                    granted += 1;
                }
            } else if roll < 9 {
                if !ids.is_empty() {
                    let i = s.rng.gen_range(0..ids.len());
                    let id = ids.swap_remove(i);
                    let _ = p.cancel(id);
                }
            } else if !ids.is_empty() {
                let id = ids[s.rng.gen_range(0..ids.len())];
                let e = s.rng.gen_range(0..s.span);
                let change = Change {
                    amount: Some(s.rng.gen_range(1..=64)),
                    duration: None,
                    window: Some((Time(e), Time(e + 43_200))),
                };
                let _ = p.modify(id, change);
            }
            ops += 1;
        }
        if started.elapsed().as_secs_f64() >= seconds {
            break;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    Measured {
        ops_per_s: ops as f64 / elapsed,
        bytes,
        utilization: p.utilization(Time(0), Time(s.span)),
        acceptance: granted as f64 / attempts.max(1) as f64,
    }
}

fn planner(a: PlannerArgs) -> Result<ExitCode> {
    if !a.json {
        say!(
            "{:>8} {:>14} {:>14} {:>14} {:>8} {:>8} {:>10} {:>10} {:>12} {:>10}",
            "live",
            "b-tree ops/s",
            "treap ops/s",
            "slotted ops/s",
            "b/slot",
            "b/treap",
            "b bytes/r",
            "t bytes/r",
            "utilization",
            "accepted"
        );
    }
    for &live in &a.sizes {
        let stream = Stream::new(a.seed, live);
        let end = horizon(&stream);
        let free = measure(
            Planner::new(CAPACITY, Time(end), FreeList::new()),
            live,
            a.seed,
            a.seconds,
        );
        let tree = measure(Planner::new(CAPACITY, Time(end), BTree::new()), live, a.seed, a.seconds);
        let slots = (end / a.slot_seconds + 1) as usize;
        let slotted = measure(
            Planner::new(CAPACITY, Time(end), Slotted::new(0, a.slot_seconds, slots)),
            live,
            a.seed,
            a.seconds,
        );
        let f = PlannerFigures {
            live,
            free_list_ops_per_s: free.ops_per_s.round(),
            slotted_ops_per_s: slotted.ops_per_s.round(),
            ratio: (free.ops_per_s / slotted.ops_per_s * 10.0).round() / 10.0,
            bytes_per_reservation: (free.bytes as f64 / live as f64).round(),
            b_tree_ops_per_s: tree.ops_per_s.round(),
            b_tree_ratio: (tree.ops_per_s / slotted.ops_per_s * 10.0).round() / 10.0,
            b_tree_vs_free_list: (tree.ops_per_s / free.ops_per_s * 100.0).round() / 100.0,
            b_tree_bytes_per_reservation: (tree.bytes as f64 / live as f64).round(),
            slot_seconds: a.slot_seconds,
            utilization: (free.utilization * 1000.0).round() / 1000.0,
            acceptance: (free.acceptance * 1000.0).round() / 1000.0,
        };
        if a.json {
            say!("{}", serde_json::to_string(&f)?);
        } else {
            say!(
                "{:>8} {:>14.0} {:>14.0} {:>14.0} {:>7.1}x {:>7.2}x {:>10.0} {:>10.0} {:>12.3} {:>10.3}",
                f.live,
                f.b_tree_ops_per_s,
                f.free_list_ops_per_s,
                f.slotted_ops_per_s,
                f.b_tree_ratio,
                f.b_tree_vs_free_list,
                f.b_tree_bytes_per_reservation,
                f.bytes_per_reservation,
                f.utilization,
                f.acceptance
            );
        }
    }
    availability(&a)?;
    Ok(ExitCode::SUCCESS)
}

/// What publishing a site's free capacity costs ([AB-avail]), against the
/// planner's own earliest start in the same run.
#[derive(Serialize)]
struct AvailabilityFigures {
    /// Live reservations at the site.
    live: usize,
    /// Microseconds to publish its next week (`SiteCore::availability`).
    publish_week_us: f64,
    /// Ranges in that week.
    week_ranges: usize,
    /// Microseconds for the earliest start of a job shape in a published
    /// profile of `PUBLISHED_RANGES` ranges (`Availability::earliest_start`).
    earliest_start_us: f64,
    /// Microseconds for the planner's own earliest start of the same shapes.
    planner_earliest_start_us: f64,
    /// Publishing a week against one earliest start at the planner.
    publish_vs_planner: f64,
    /// The published profile's earliest start against the planner's.
    earliest_start_vs_planner: f64,
}

/// Mean microseconds per call of `f` over at least `seconds`.
fn per_call(seconds: f64, mut f: impl FnMut(u64)) -> f64 {
    let started = Instant::now();
    let mut n = 0u64;
    while n < 16 || started.elapsed().as_secs_f64() < seconds {
        f(n);
        n += 1;
    }
    started.elapsed().as_secs_f64() * 1e6 / n as f64
}

/// A site of `CAPACITY` processors filled to 10,000 live reservations by
/// the planner stream, publishing its next week; shapes read from what it
/// publishes in `/v1/info` and from the planner itself.
fn availability(a: &PlannerArgs) -> Result<()> {
    use brokk_core::{SiteCore, SiteParams, PUBLISHED_RANGES};
    let live = 10_000;
    let mut stream = Stream::new(a.seed, live);
    let mut site = SiteCore::new(SiteParams {
        capacity: CAPACITY,
        horizon: Time(horizon(&stream)),
        default_wall_time: Duration(3600),
        policy: brokk_core::queue::Policy::CONSERVATIVE.into(),
        lead: Duration(0),
    });
    let mut n = 0;
    while n < live {
        n += usize::from(site.reserve(Time(0), "bench", &stream.request(), None).is_ok());
    }
    let week = Time(7 * 86_400);
    let published = site.availability(Time(0), week, usize::MAX);
    let publish_week_us = per_call(a.seconds / 4.0, |_| {
        std::hint::black_box(site.availability(Time(0), week, usize::MAX));
    });
    let profile = site.availability(Time(0), week, PUBLISHED_RANGES);
    let shapes: Vec<Request> = (0..1024).map(|_| stream.request()).collect();
    let shape = |k: u64| {
        let r = &shapes[k as usize % shapes.len()];
        // Asked within the profile's span.
        let from = Time(r.earliest.0 % (profile.until.0.max(1)));
        (r.amount, r.duration, from)
    };
    let earliest_start_us = per_call(a.seconds / 4.0, |k| {
        let (amount, duration, from) = shape(k);
        std::hint::black_box(profile.earliest_start(amount, duration, from, CAPACITY));
    });
    let planner_earliest_start_us = per_call(a.seconds / 4.0, |k| {
        let (amount, duration, from) = shape(k);
        let req = Request {
            amount,
            duration,
            earliest: from,
            latest: Time(horizon(&stream)),
            flexible: false,
        };
        let _ = std::hint::black_box(site.planner().earliest_start(&req));
    });
    let f = AvailabilityFigures {
        live,
        publish_week_us: (publish_week_us * 10.0).round() / 10.0,
        week_ranges: published.ranges.len(),
        earliest_start_us: (earliest_start_us * 1000.0).round() / 1000.0,
        planner_earliest_start_us: (planner_earliest_start_us * 1000.0).round() / 1000.0,
        publish_vs_planner: (publish_week_us / planner_earliest_start_us * 10.0).round() / 10.0,
        earliest_start_vs_planner: (earliest_start_us / planner_earliest_start_us * 100.0).round() / 100.0,
    };
    if a.json {
        say!("{}", serde_json::to_string(&f)?);
    } else {
        say!(
            "published availability, {} live reservations: a week ({} ranges) in {:.1} us ({:.1}x the planner's earliest start); \
             earliest start in {} ranges {:.3} us against the planner's {:.3} us ({:.2}x)",
            f.live,
            f.week_ranges,
            f.publish_week_us,
            f.publish_vs_planner,
            PUBLISHED_RANGES,
            f.earliest_start_us,
            f.planner_earliest_start_us,
            f.earliest_start_vs_planner
        );
    }
    Ok(())
}

/// Counts live heap bytes so the benchmark can report memory per reservation.
#[global_allocator]
static ALLOCATED: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);
