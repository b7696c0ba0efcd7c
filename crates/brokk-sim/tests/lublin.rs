//! The Lublin-Feitelson generator against the model's definitions.

use brokk_sim::lublin::{at_load, offered_load, take_span, Generator, Params};
use statrs::distribution::{ContinuousCDF, Gamma};

const MONTH: i64 = 30 * 86_400;

fn sample(n: usize, seed: u64) -> Vec<brokk_sim::swf::SwfJob> {
    Generator::new(Params::typeless(128), 128, seed)
        .unwrap()
        .take(n)
        .collect()
}

#[test]
fn the_same_seed_gives_the_same_jobs() {
    assert_eq!(sample(500, 7), sample(500, 7));
    assert_ne!(sample(500, 7), sample(500, 8));
}

#[test]
fn a_target_load_is_met_within_two_percent_over_a_month_on_128_processors() {
    for (target, seed) in [(0.5, 1), (0.7, 2), (0.9, 3)] {
        let (jobs, params) = at_load(Params::typeless(128), 128, MONTH, target, seed).unwrap();
        let load = offered_load(&jobs, 128, MONTH);
        assert!(
            (load - target).abs() <= 0.02 * target,
            "target {target}: offered {load}"
        );
        assert!(jobs.iter().all(|j| j.submit < MONTH));
        // Regenerating from the returned parameters gives the same month.
        assert_eq!(take_span(Generator::new(params, 128, seed).unwrap(), MONTH), jobs);
    }
    assert!(at_load(Params::typeless(128), 128, MONTH, 1e6, 1).is_err());
}

#[test]
fn sizes_follow_the_two_stage_uniform() {
    let p = Params::typeless(128);
    let jobs = sample(40_000, 11);
    let n = jobs.len() as f64;
    let serial = jobs.iter().filter(|j| j.procs == 1).count() as f64 / n;
    // A parallel job is serial only if 2^u rounds to 1, which u >= 0.8 never does.
    assert!((serial - p.serial_prob).abs() < 0.01, "serial share {serial}");
    assert!(jobs.iter().all(|j| (1..=128).contains(&j.procs)));
    // Mean of log2(size) over parallel jobs: the two-stage uniform's mean.
    let par: Vec<f64> = jobs
        .iter()
        .filter(|j| j.procs > 1)
        .map(|j| (j.procs as f64).log2())
        .collect();
    let mean = par.iter().sum::<f64>() / par.len() as f64;
    let expect = p.uprob * (p.ulow + p.umed) / 2.0 + (1.0 - p.uprob) * (p.umed + p.uhi) / 2.0;
    assert!((mean - expect).abs() < 0.05, "mean log2 size {mean}, model {expect}");
    // Power-of-two sizes: the rounded share plus the unrounded ones whose
    // round(2^u) lands on a power of two anyway (integrated over the uniforms).
    let lands = |lo: f64, hi: f64| {
        let steps = 100_000;
        (0..steps)
            .filter(|k| {
                let u = lo + (hi - lo) * (*k as f64 + 0.5) / steps as f64;
                (2f64.powf(u).round() as u32).count_ones() == 1
            })
            .count() as f64
            / steps as f64
    };
    let by_chance = p.uprob * lands(p.ulow, p.umed) + (1.0 - p.uprob) * lands(p.umed, p.uhi);
    let expect = p.pow2_prob + (1.0 - p.serial_prob - p.pow2_prob) * by_chance;
    let pow2 = jobs.iter().filter(|j| j.procs > 1 && j.procs.count_ones() == 1).count() as f64 / n;
    assert!(
        (pow2 - expect).abs() < 0.01,
        "power-of-two share {pow2}, model {expect}"
    );
}

#[test]
fn run_times_follow_the_size_dependent_hyper_gamma() {
    let p = Params::typeless(128);
    let jobs = sample(40_000, 12);
    for (size, threshold) in [(1, 1097), (1, 20), (8, 1097)] {
        let runs: Vec<i64> = jobs.iter().filter(|j| j.procs == size).map(|j| j.run).collect();
        let share = runs.iter().filter(|&&r| r >= threshold).count() as f64 / runs.len() as f64;
        // P(e^x >= t | x <= 12) for the mixture, redrawn as a whole above 12.
        let t = (threshold as f64).ln();
        let q = p.first_gamma_prob(size as u32);
        let (g1, g2) = (
            Gamma::new(p.a1, 1.0 / p.b1).unwrap(),
            Gamma::new(p.a2, 1.0 / p.b2).unwrap(),
        );
        let tail = q * (g1.cdf(12.0) - g1.cdf(t)) + (1.0 - q) * (g2.cdf(12.0) - g2.cdf(t));
        let expect = tail / (q * g1.cdf(12.0) + (1.0 - q) * g2.cdf(12.0));
        let sd = (expect * (1.0 - expect) / runs.len() as f64).sqrt();
        assert!(
            (share - expect).abs() < 4.0 * sd + 1e-3,
            "size {size}, P(run >= {threshold}) = {share}, model {expect} (n = {})",
            runs.len()
        );
    }
}

#[test]
fn arrivals_follow_the_daily_cycle() {
    let p = Params::typeless(128);
    let w = p.daily_weights().unwrap();
    assert!((w.iter().sum::<f64>() / 48.0 - 1.0).abs() < 1e-9);
    let jobs = sample(60_000, 13);
    let mut per_bucket = [0usize; 48];
    for j in &jobs {
        per_bucket[((j.submit % 86_400) / 1800) as usize] += 1;
    }
    let busiest = (0..48).max_by(|&a, &b| w[a].total_cmp(&w[b])).unwrap();
    let quietest = (0..48).min_by(|&a, &b| w[a].total_cmp(&w[b])).unwrap();
    // The busiest half hour is in the early afternoon, the quietest at night.
    assert!((24..32).contains(&busiest), "busiest bucket {busiest}");
    assert!(!(16..40).contains(&quietest), "quietest bucket {quietest}");
    // Arrival counts follow the weights: the correlation is strong.
    let n = jobs.len() as f64 / 48.0;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for b in 0..48 {
        let (x, y) = (w[b] - 1.0, per_bucket[b] as f64 / n - 1.0);
        sxy += x * y;
        sxx += x * x;
        syy += y * y;
    }
    let r = sxy / (sxx * syy).sqrt();
    assert!(r > 0.9, "correlation of arrivals with weights {r}");
}
