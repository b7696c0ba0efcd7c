//! Ranking and co-allocation speed. The planner-backed sites are rebuilt for every
//! co-allocation (outside the timing), so each run starts from the same load.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use brokk_broker::coalloc::{coallocate, CoJob, CoRequest};
use brokk_broker::predict::{Predictor, StandardPredictor};
use brokk_broker::select::{mismatches, rank, selector_for, Ranked};
use brokk_broker::{MemorySite, Site};
use brokk_core::Request;
use brokk_model::{Benchmark, Duration, Job, JobPreferences, PublishedBenchmark, ResourceInfo, Time};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const NOW: Time = Time(1_795_338_000);

fn infos(n: usize, rng: &mut ChaCha8Rng) -> Vec<ResourceInfo> {
    (0..n)
        .map(|i| ResourceInfo {
            endpoint: format!("site{i:04}"),
            total_slots: rng.gen_range(64..4096),
            free_slots: rng.gen_range(0..64),
            waiting_jobs: rng.gen_range(0..500),
            bandwidth_bytes_per_s: Some(rng.gen_range(1..100) << 20),
            benchmarks: vec![
                PublishedBenchmark {
                    name: "nas-lu-c".into(),
                    value: rng.gen_range(50.0..500.0),
                },
                PublishedBenchmark {
                    name: "nas-bt-c".into(),
                    value: rng.gen_range(50.0..500.0),
                },
            ],
            ..ResourceInfo::default()
        })
        .collect()
}

fn sites(n: usize, rng: &mut ChaCha8Rng) -> Vec<MemorySite> {
    (0..n)
        .map(|i| {
            let info = ResourceInfo {
                endpoint: format!("site{i:03}"),
                total_slots: 64,
                ..ResourceInfo::default()
            };
            let mut s = MemorySite::new(info, NOW, NOW + Duration::hours(24 * 30));
            for _ in 0..20 {
                let start = NOW + Duration(rng.gen_range(0..86_400));
                let req = Request {
                    amount: rng.gen_range(8..48),
                    duration: Duration(rng.gen_range(600..14_400)),
                    earliest: start,
                    latest: start,
                    flexible: false,
                };
                let _ = s.reserve("others", &req, None);
            }
            s
        })
        .collect()
}

fn request(jobs: usize, n_sites: usize, rng: &mut ChaCha8Rng) -> CoRequest {
    CoRequest {
        jobs: (0..jobs)
            .map(|_| CoJob {
                amount: rng.gen_range(4..32),
                duration: Duration(rng.gen_range(1800..7200)),
                memory_mib: 0,
                resources: (0..n_sites.min(5)).map(|_| rng.gen_range(0..n_sites)).collect(),
            })
            .collect(),
        earliest: NOW,
        latest: NOW + Duration::hours(48),
        delta: Duration::minutes(5),
        hold: None,
    }
}

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let resources = infos(1000, &mut rng);
    let job = Job {
        executable: Some("app".into()),
        cpus: Some(16),
        benchmarks: vec![
            Benchmark {
                name: "nas-lu-c".into(),
                result: 250.0,
                time: Duration::minutes(65),
            },
            Benchmark {
                name: "nas-cg-c".into(),
                result: 90.0,
                time: Duration::minutes(50),
            },
        ],
        ..Job::default()
    };
    let prefs = JobPreferences::default();
    c.bench_function("rank_one_job_over_1000_sites", |b| {
        b.iter(|| rank(&job, &prefs, &resources, NOW, &StandardPredictor::default()))
    });
    // The baseline in the same run: the same filter and prediction, and the
    // candidates themselves sorted, as `rank` did before it sorted keys.
    c.bench_function("rank_one_job_over_1000_sites_baseline_full_sort", |b| {
        b.iter(|| {
            let predictor = StandardPredictor::default();
            let selector = selector_for(prefs.objective());
            let mut ranked: Vec<Ranked> = resources
                .iter()
                .enumerate()
                .filter(|(_, r)| mismatches(&job, r).is_empty())
                .map(|(index, r)| {
                    let prediction = predictor.predict(&job, &prefs, r, None, NOW);
                    Ranked {
                        index,
                        score: selector.score(&prediction, r),
                        prediction,
                    }
                })
                .collect();
            ranked.sort_unstable_by_key(|r| (r.score, r.index));
            ranked
        })
    });
    for (jobs, n) in [(3usize, 4usize), (20, 100)] {
        let mut r = ChaCha8Rng::seed_from_u64(7);
        let base = sites(n, &mut r);
        let req = request(jobs, n, &mut r);
        c.bench_function(&format!("coallocate_{jobs}_jobs_over_{n}_sites"), |b| {
            b.iter_batched(
                || base.clone(),
                |mut owned| {
                    let mut refs: Vec<&mut dyn Site> = owned.iter_mut().map(|s| s as &mut dyn Site).collect();
                    coallocate(&req, &mut refs, "alice").is_ok()
                },
                BatchSize::SmallInput,
            )
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
