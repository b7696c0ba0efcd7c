//! Filtering with reasons, and the two objectives ranking the same sites differently.

use brokk_broker::predict::StandardPredictor;
use brokk_broker::select::{mismatches, rank, validate, Invalid, Mismatch};
use brokk_model::{
    Benchmark, Duration, Environment, Job, JobPreferences, Objective, PublishedBenchmark, ResourceInfo, Share, Time,
};

fn site(endpoint: &str, bench: f64, wait: i64) -> ResourceInfo {
    ResourceInfo {
        endpoint: endpoint.into(),
        total_slots: 128,
        // A site that starts jobs at once has slots free.
        free_slots: if wait == 0 { 128 } else { 0 },
        estimated_wait: Some(Duration(wait)),
        benchmarks: vec![PublishedBenchmark {
            name: "app".into(),
            value: bench,
        }],
        environment: Environment {
            architecture: Some("x86_64".into()),
            operating_system: Some("linux".into()),
            memory_mib_per_node: Some(64_000),
            runtime_environments: vec!["APPS/CHEM/GROMACS".into()],
            ..Environment::default()
        },
        shares: vec![Share {
            name: "batch".into(),
            max_wall_time: Some(Duration::hours(24)),
            max_slots_per_job: Some(64),
        }],
        ..ResourceInfo::default()
    }
}

fn job() -> Job {
    Job {
        executable: Some("md".into()),
        cpus: Some(16),
        architecture: Some("X86_64".into()),
        runtime_environments: vec!["APPS/CHEM/GROMACS".into()],
        benchmarks: vec![Benchmark {
            name: "app".into(),
            result: 100.0,
            time: Duration::hours(4),
        }],
        ..Job::default()
    }
}

#[test]
fn a_job_needs_something_to_run_and_processors() {
    assert_eq!(validate(&Job::default()), Err(Invalid::NothingToRun));
    assert_eq!(validate(&Job { cpus: Some(0), ..job() }), Err(Invalid::ZeroProcessors));
    assert_eq!(validate(&job()), Ok(()));
}

#[test]
fn names_that_leave_the_jobs_directory_are_refused_with_their_field() {
    let cases: [(Job, &str); 5] = [
        (
            Job {
                working_directory: Some("/tmp".into()),
                ..job()
            },
            "working_directory: `/tmp` is absolute",
        ),
        (
            Job {
                stdout: Some("../up.txt".into()),
                ..job()
            },
            "stdout: `../up.txt` goes up",
        ),
        (
            Job {
                stderr: Some("a/../../b".into()),
                ..job()
            },
            "stderr: `a/../../b` goes up",
        ),
        (
            Job {
                stdin: Some("/etc/shadow".into()),
                ..job()
            },
            "stdin: `/etc/shadow` is absolute",
        ),
        (
            Job {
                output_files: vec![brokk_model::OutputFile {
                    name: "/home/ann/result".into(),
                    target: None,
                    size_estimate: None,
                }],
                ..job()
            },
            "output file: `/home/ann/result` is absolute",
        ),
    ];
    for (j, said) in cases {
        let e = validate(&j).unwrap_err().to_string();
        assert!(e.starts_with(said), "{e}");
    }
    let fine = Job {
        stdout: Some("out/run..1.txt".into()),
        working_directory: Some("sub/dir".into()),
        ..job()
    };
    assert_eq!(validate(&fine), Ok(()));
}

#[test]
fn an_input_a_site_cannot_fetch_leaves_it_out_with_what_to_give_instead() {
    let with = |source: &str| Job {
        input_files: vec![brokk_model::InputFile {
            name: "data.root".into(),
            source: Some(source.into()),
            size: None,
            local: None,
        }],
        ..job()
    };
    let s = site("a", 100.0, 0);
    for ok in [
        "https://example.org/d",
        "file:///srv/d",
        "upload:ab12",
        "HTTP://example.org/d",
    ] {
        assert_eq!(mismatches(&with(ok), &s), vec![], "{ok}");
    }
    let e = mismatches(&with("LFN:/vo/user/a/data.root"), &s)[0].to_string();
    assert!(e.contains("input data.root is at LFN:/vo/user/a/data.root"), "{e}");
    assert!(e.contains("give the URL of one of its replicas"), "{e}");
    let e = mismatches(&with("srm://se.example.org/d"), &s)[0].to_string();
    assert!(e.contains("the site stages file, http, https only"), "{e}");
}

#[test]
fn every_reason_for_leaving_a_site_out_is_reported() {
    let j = Job {
        queue: Some("long".into()),
        cpus: Some(200),
        runtime_environments: vec!["APPS/X".into()],
        ..job()
    };
    let mut s = site("a", 100.0, 0);
    s.environment.architecture = Some("aarch64".into());
    assert_eq!(
        mismatches(&j, &s),
        vec![
            Mismatch::Architecture {
                wanted: "X86_64".into(),
                offered: Some("aarch64".into())
            },
            Mismatch::RuntimeEnvironment("APPS/X".into()),
            Mismatch::Queue("long".into()),
            Mismatch::Processors {
                wanted: 200,
                offered: 128
            },
        ]
    );
    let j = Job {
        queue: Some("batch".into()),
        wall_time: Some(Duration::hours(48)),
        ..job()
    };
    assert_eq!(
        mismatches(&j, &site("a", 100.0, 0)),
        vec![Mismatch::WallTime {
            wanted: Duration::hours(48),
            limit: Duration::hours(24)
        }]
    );
}

#[test]
fn earliest_completion_and_earliest_start_disagree_when_they_should() {
    // "fast" runs the job in 2 h but starts in 1 h; "free" runs it in 4 h but starts now.
    let sites = vec![site("fast", 200.0, 3600), site("free", 100.0, 0)];
    assert_eq!(
        ranked(&sites, None),
        vec![("fast".to_string(), 3600 + 7200), ("free".to_string(), 14_400)]
    );
    assert_eq!(
        ranked(&sites, Some(Objective::EarliestStart)),
        vec![("free".to_string(), 0), ("fast".to_string(), 3600)]
    );
}

/// The sites `job()` may run on, best first, with their scores, by
/// `objective` (the default without one).
fn ranked(sites: &[ResourceInfo], objective: Option<Objective>) -> Vec<(String, i64)> {
    let prefs = JobPreferences {
        objective,
        ..JobPreferences::default()
    };
    let r = rank(&job(), &prefs, sites, Time(0), &StandardPredictor::default());
    assert!(r.excluded.is_empty());
    r.ranked
        .iter()
        .map(|x| (sites[x.index].endpoint.clone(), x.score))
        .collect()
}

#[test]
fn what_the_broker_carries_but_does_not_do_is_said() {
    let mut job = brokk_model::Job::default();
    assert!(brokk_broker::select::not_done_here(&job).is_empty());
    job.retries = Some(3);
    job.priority = Some(5);
    job.notify = Some(brokk_model::Notify {
        to: Some("ann@example.org".into()),
        on: vec![brokk_model::NotifyOn::End],
    });
    let said = brokk_broker::select::not_done_here(&job);
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(said[0].starts_with("retries (3)"));
    // Mail never asked for is nothing to warn about.
    job.notify = Some(brokk_model::Notify { to: None, on: vec![] });
    assert_eq!(brokk_broker::select::not_done_here(&job).len(), 2);
}

#[test]
fn a_job_goes_only_where_its_container_schemes_and_gpus_are_published() {
    use brokk_broker::select::{mismatches, Mismatch};
    let job = brokk_model::Job {
        executable: Some("/usr/bin/python3".into()),
        container_image: Some("python:3.12".into()),
        gpus: Some(2),
        input_files: vec![
            brokk_model::InputFile {
                name: "in.root".into(),
                source: Some("root://eos.example.org//data/in.root".into()),
                size: None,
                local: None,
            },
            brokk_model::InputFile {
                name: "local.csv".into(),
                source: Some("upload:0f0f".into()),
                size: None,
                local: None,
            },
        ],
        output_files: vec![brokk_model::OutputFile {
            name: "out.dat".into(),
            target: Some("gsiftp://se.example.org/out.dat".into()),
            size_estimate: None,
        }],
        ..Default::default()
    };
    // Valid as a description: what it needs is the sites' to offer.
    assert_eq!(validate(&job), Ok(()));
    // A site that publishes nothing stages what every Brokk site stages.
    let plain = site("plain", 100.0, 0);
    let why: Vec<String> = mismatches(&job, &plain).iter().map(ToString::to_string).collect();
    assert_eq!(
        why,
        [
            "input in.root is at root://eos.example.org//data/in.root; the site stages file, http, https only",
            "output out.dat is at gsiftp://se.example.org/out.dat; the site stages file, http, https only",
            "it runs in the container image python:3.12; the site runs no containers",
            "it asks for 2 GPUs per node, the site has 0",
        ]
    );
    // One that publishes all of it takes it.
    let mut grid = site("grid", 100.0, 0);
    grid.environment.staging = vec!["https".into(), "root".into(), "gsiftp".into()];
    grid.environment.containers = vec!["podman".into()];
    grid.environment.gpus_per_node = Some(4);
    // A runtime alone is not the image: it must be held, or pulled from
    // the image's registry.
    assert_eq!(
        mismatches(&job, &grid)
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["it runs in the container image python:3.12, which the site neither holds nor pulls"]
    );
    grid.environment.images = vec!["docker.io/*".into()];
    assert_eq!(mismatches(&job, &grid), Vec::<Mismatch>::new());
    // Folded into one by a broker above: the union of what its sites offer.
    let (folded, _) = brokk_broker::info::fold("dept", &[Ok(plain), Ok(grid)]);
    assert!(folded.environment.stages("file") && folded.environment.stages("GSIFTP"));
    assert_eq!(folded.environment.gpus_per_node, Some(4));
    assert!(mismatches(&job, &folded).is_empty());
}

/// [AB-avail]'s base gateway policy: the site with the smallest share of
/// its processors in use, whatever the predictions say.
#[test]
fn least_loaded_takes_the_site_with_the_smallest_share_in_use() {
    let mut fast = site("fast", 200.0, 0);
    fast.free_slots = 32; // 96 of 128 in use
    let mut slow = site("slow", 100.0, 0);
    slow.free_slots = 64; // 64 of 128 in use
    assert_eq!(
        ranked(&[fast, slow], Some(Objective::LeastLoaded)),
        vec![("slow".to_string(), 500_000), ("fast".to_string(), 750_000)]
    );
}
