//! The information layer on virtual time: timeouts isolate slow sites, failures
//! are reported, and nothing depends on the order the index lists sites in.

use std::cell::Cell;
use std::collections::HashMap;

use brokk_broker::info::{fetch, BatchSummary, FetchFailure, FetchOptions, InfoSource, RawInfo};
use brokk_broker::SiteError;
use brokk_model::{Duration, FreeRange, ResourceInfo, Time};

/// An information service answering from a table, with a latency per site.
struct Answers {
    table: HashMap<String, (Result<RawInfo, SiteError>, Duration)>,
    queries: Cell<u32>,
}

impl Answers {
    fn new(entries: &[(&str, Option<u32>, i64)]) -> Self {
        let table = entries
            .iter()
            .map(|&(e, slots, secs)| {
                let answer = match slots {
                    Some(n) => Ok(RawInfo::Glue(Box::new(ResourceInfo {
                        total_slots: n,
                        ..ResourceInfo::default()
                    }))),
                    None => Err(SiteError::Unavailable(e.to_string())),
                };
                (e.to_string(), (answer, Duration(secs)))
            })
            .collect();
        Answers {
            table,
            queries: Cell::new(0),
        }
    }
}

impl InfoSource for Answers {
    fn query(&self, endpoint: &str) -> Result<(RawInfo, Duration), SiteError> {
        self.queries.set(self.queries.get() + 1);
        let (answer, took) = self.table.get(endpoint).cloned().ok_or(SiteError::Unknown)?;
        answer.map(|a| (a, took))
    }
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn slow_and_failing_sites_are_excluded_and_reported() {
    let src = Answers::new(&[
        ("a", Some(8), 2),
        ("b", Some(16), 30),
        ("c", None, 0),
        ("d", Some(4), 5),
    ]);
    let opts = FetchOptions {
        concurrency: 2,
        timeout: Duration(10),
    };
    let r = fetch(&names(&["d", "c", "b", "a"]), &src, opts);
    assert_eq!(
        r.infos
            .iter()
            .map(|i| (i.endpoint.as_str(), i.total_slots))
            .collect::<Vec<_>>(),
        vec![("a", 8), ("d", 4)]
    );
    assert_eq!(
        r.failures,
        vec![
            ("b".to_string(), FetchFailure::Timeout(Duration(30))),
            ("c".to_string(), FetchFailure::Error(SiteError::Unavailable("c".into())))
        ]
    );
    // Two workers: a (2 s) and b (cut at 10 s) in parallel, then c (0 s) and d (5 s) on a's worker: 10 s in all.
    assert_eq!(r.elapsed, Duration(10));
}

#[test]
fn batch_system_summaries_become_glue() {
    let raw = RawInfo::BatchSummary(BatchSummary {
        name: "cluster-a".into(),
        nodes: 2,
        cpus_per_node: 8,
        cpus_idle: 5,
        memory_mib_per_node: 32_000,
        partitions: vec![("debug".into(), Some(Duration::hours(1)))],
        running: 3,
        pending: 7,
    });
    let g = brokk_broker::info::convert("https://a.example.org", raw);
    assert_eq!(
        (
            g.total_slots,
            g.free_slots,
            g.used_slots,
            g.running_jobs,
            g.waiting_jobs
        ),
        (16, 5, 11, 3, 7)
    );
    assert_eq!(g.shares[0].max_wall_time, Some(Duration::hours(1)));
    assert_eq!(g.environment.memory_mib_per_node, Some(32_000));
}

#[test]
fn the_order_of_the_index_does_not_matter() {
    let src = Answers::new(&[
        ("a", Some(8), 1),
        ("b", Some(16), 12),
        ("c", Some(4), 3),
        ("d", None, 0),
    ]);
    let opts = FetchOptions::default();
    let one = fetch(&names(&["a", "b", "c", "d"]), &src, opts);
    for order in [["d", "c", "b", "a"], ["b", "d", "a", "c"], ["c", "a", "d", "b"]] {
        assert_eq!(fetch(&names(&order), &src, opts), one);
    }
}

/// Jobs the broker sends count in what it knows of a site until the site
/// answers again: a burst fills the free slots, then queues, and the wait
/// of a site it has filled is what its own jobs imply.
#[test]
fn the_brokers_own_jobs_count_until_the_site_answers_again() {
    use brokk_broker::info::book;
    use brokk_broker::predict::{queue_wait, LoadModel};
    let fresh = ResourceInfo {
        endpoint: "a".into(),
        total_slots: 8,
        free_slots: 6,
        used_slots: 2,
        running_jobs: 2,
        estimated_wait: Some(Duration(0)),
        ..ResourceInfo::default()
    };
    let now = Time(1_000);
    let load = LoadModel::default();
    let mut info = fresh.clone();
    book(&mut info, 4, Duration(60), now);
    assert_eq!((info.free_slots, info.used_slots, info.running_jobs), (2, 6, 3));
    assert_eq!(
        queue_wait(&info, 2, Duration(60), None, now, load),
        Duration(0),
        "two slots are still free"
    );
    book(&mut info, 2, Duration(50), now);
    assert_eq!(info.free_slots, 0);
    assert_eq!(
        info.estimated_wait,
        Some(Duration(50)),
        "a slot frees when that job ends, at the latest"
    );
    // A job that does not fit waits, and adds its wall time to the wait.
    book(&mut info, 4, Duration(30), now);
    assert_eq!((info.free_slots, info.waiting_jobs), (0, 1));
    assert_eq!(queue_wait(&info, 1, Duration(60), None, now, load), Duration(80));

    // Where the site publishes its free capacity over time, a job takes its
    // processors off it where it starts first: the 2-wide job running
    // until 1,100 leaves 6 free, so a 4-wide job for 200 s starts now and
    // the next 6-wide one after both.
    let mut info = ResourceInfo {
        availability: Some(brokk_model::Availability {
            computed_at: now,
            until: now + Duration(3600),
            ranges: vec![
                FreeRange {
                    start: now,
                    end: Time(1_100),
                    free: 6,
                },
                FreeRange {
                    start: Time(1_100),
                    end: now + Duration(3600),
                    free: 8,
                },
            ],
        }),
        ..fresh.clone()
    };
    assert_eq!(queue_wait(&info, 6, Duration(60), None, now, load), Duration(0));
    book(&mut info, 4, Duration(200), now);
    assert_eq!(queue_wait(&info, 6, Duration(60), None, now, load), Duration(200));
    assert_eq!(queue_wait(&info, 2, Duration(60), None, now, load), Duration(0));
}

fn folded_site(name: &str, total: u32, free: u32, wait: i64, bench: f64) -> Result<ResourceInfo, String> {
    Ok(ResourceInfo {
        name: name.into(),
        total_slots: total,
        free_slots: free,
        running_jobs: 2,
        waiting_jobs: 1,
        estimated_wait: Some(Duration(wait)),
        benchmarks: vec![brokk_model::PublishedBenchmark {
            name: "specint2006".into(),
            value: bench,
        }],
        ..ResourceInfo::default()
    })
}

#[test]
fn a_broker_folds_its_sites_into_one_that_a_job_fits_at_one_of() {
    let sites = [
        folded_site("a", 16, 4, 300, 20.0),
        folded_site("b", 8, 6, 60, 30.0),
        Err("c: connection refused".to_string()),
    ];
    let (v, unavailable) = brokk_broker::info::fold("dept", &sites);
    assert_eq!(
        (v.total_slots, v.free_slots),
        (16, 6),
        "the largest site and the most free at one"
    );
    assert_eq!((v.running_jobs, v.waiting_jobs), (4, 2));
    assert_eq!(v.estimated_wait, Some(Duration(60)));
    assert_eq!(v.benchmarks[0].value, 30.0);
    assert!(unavailable.is_none() && !v.reservations);
    let (_, down) = brokk_broker::info::fold("dept", &sites[2..]);
    assert!(down.unwrap().contains("connection refused"));
}
