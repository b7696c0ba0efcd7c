//! A program's own grid routers, named by an experiment beside the
//! built-in rules: one that copies round robin routes exactly as the
//! built-in one does, and one that reads what the sites publish sends each
//! job where it sees the most free processors.

use std::sync::atomic::{AtomicUsize, Ordering};

use brokk_model::Time;
use brokk_sim::cluster::SimJob;
use brokk_sim::experiment::{prepare_with_orders, run_points, Experiment};
use brokk_sim::orders::Orders;
use brokk_sim::routers::{GridRouter, SiteView};

/// Round robin over the sites large enough, as the built-in rule.
#[derive(Default)]
struct OwnRoundRobin {
    turn: usize,
}

impl GridRouter for OwnRoundRobin {
    fn route(&mut self, job: &SimJob, sites: &[SiteView], _now: Time) -> Option<usize> {
        let n = sites.len();
        let c = (0..n)
            .map(|k| (self.turn + k) % n)
            .find(|&c| sites[c].procs >= job.size)?;
        self.turn = c + 1;
        Some(c)
    }
}

/// The site with the most free processors now (the first of equals).
struct MostFree;

impl GridRouter for MostFree {
    fn route(&mut self, job: &SimJob, sites: &[SiteView], _now: Time) -> Option<usize> {
        (0..sites.len())
            .filter(|&c| sites[c].procs >= job.size)
            .max_by_key(|&c| (sites[c].free, std::cmp::Reverse(c)))
    }
}

/// Where and when each job ran: (id, site, start), in id order.
type Placed = Vec<(i64, String, i64)>;

/// Each series' jobs, for `routings` over sites a (8 processors) and b
/// (4) under conservative backfilling.
fn routed(trace: &str, routings: &[&str]) -> Vec<(String, Placed)> {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("brokk-routers-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("t.swf"), trace).unwrap();
    let text = format!(
        "name = \"routers\"\npolicies = [\"conservative\"]\n[workload]\nswf = \"t.swf\"\nestimates = \"exact\"\n\
         [platform]\nclusters = [{{ name = \"a\", procs = 8 }}, {{ name = \"b\", procs = 4 }}]\nroutings = {routings:?}\n"
    );
    let spec: Experiment = toml::from_str(&text).unwrap();
    let own = Orders::new()
        .with_router("own-rr", || Box::new(OwnRoundRobin::default()))
        .with_router("most-free", || Box::new(MostFree));
    let prepared = prepare_with_orders(spec, &dir, None, &own).unwrap();
    let results = run_points(&prepared, &prepared.points(), 1, &|| {}).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    results
        .iter()
        .map(|r| {
            let mut jobs: Placed = r
                .runs
                .iter()
                .flat_map(|c| c.outcomes.iter().map(|o| (o.id, c.spec.name.clone(), o.start.0)))
                .collect();
            jobs.sort();
            (r.policy.clone(), jobs)
        })
        .collect()
}

/// SWF lines of (id, submit, run, size), estimates exact.
fn swf(jobs: &[(i64, i64, i64, u32)]) -> String {
    jobs.iter()
        .map(|&(id, submit, run, size)| {
            format!("{id} {submit} -1 {run} {size} -1 -1 {size} {run} -1 1 1 -1 -1 1 -1 -1 -1\n")
        })
        .collect()
}

#[test]
fn an_own_router_copying_round_robin_routes_as_the_built_in_one() {
    let jobs: Vec<(i64, i64, i64, u32)> = (1..=40)
        .map(|k| (k, k * 7, 50 + (k * 37) % 200, 1 + (k as u32 * 5) % 8))
        .collect();
    let series = routed(&swf(&jobs), &["round-robin", "own-rr"]);
    assert_eq!(series.len(), 2);
    assert_eq!(series[1].0, "own-rr");
    assert_eq!(series[0].1.len(), jobs.len());
    assert_eq!(series[0].1, series[1].1);
}

#[test]
fn a_router_reading_the_sites_sends_each_job_where_most_is_free() {
    // J1 (4) finds a with 8 free; J2 (4) finds a and b with 4 each and
    // takes a, the first; J3 (2) finds only b free; J4 (4) finds b with 2
    // free, a with none, and waits at b for J3's end at 120.
    let jobs = [(1, 0, 100, 4), (2, 10, 100, 4), (3, 20, 100, 2), (4, 30, 100, 4)];
    let series = routed(&swf(&jobs), &["most-free", "round-robin"]);
    let s = |id: i64, site: &str, start: i64| (id, site.to_string(), start);
    assert_eq!(
        series[0].1,
        [s(1, "a", 0), s(2, "a", 10), s(3, "b", 20), s(4, "b", 120)]
    );
    // Round robin alternates whatever the sites hold: J3 waits at a.
    assert_eq!(
        series[1].1,
        [s(1, "a", 0), s(2, "b", 10), s(3, "a", 20), s(4, "b", 110)]
    );
}
