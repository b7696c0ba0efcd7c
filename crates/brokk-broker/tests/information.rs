//! The information layer: what the broker counts in a site's information
//! until the site answers again, and a broker's sites folded into one.

use brokk_model::{Duration, FreeRange, ResourceInfo, Time};

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
