//! The Lublin-Feitelson workload model with its typeless parameters, the
//! papers' synthetic workload ([DMM] with a serial probability of 0.95,
//! [AB-avail] for local jobs).
//!
//! Choices the published model leaves to the implementation:
//! - the daily cycle's Gamma(ANUM, BNUM) is evaluated at the half-hour bucket's
//!   number, counted cyclically from bucket CYCLIC_DAY_START = 11 as the model's
//!   reference code does, which puts the busiest half hour in the early
//!   afternoon; a bucket's weight scales the arrival rate in it;
//! - the first job arrives at time 0, at `start_hour` o'clock (default 0);
//! - run times and inter-arrival gaps are whole seconds, rounded down;
//! - an arrival gap is drawn by inverting the Gamma CDF (truncated at e^13 s),
//!   so that scaling AARR moves every gap monotonically and a target load can
//!   be met by bisection; sizes and run times come from a second stream, so
//!   they do not change with the load.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Gamma};
use statrs::distribution::{Continuous, ContinuousCDF};

use crate::swf::SwfJob;

/// Half-hour buckets per day.
const BUCKETS: usize = 48;
/// Seconds per bucket.
const BUCKET_SECONDS: f64 = 1800.0;
/// Log run times above this are redrawn (e^12 s, about 45 hours).
const MAX_LOG_RUN: f64 = 12.0;
/// Log inter-arrival gaps above this are redrawn (e^13 s, about 5 days).
const MAX_LOG_GAP: f64 = 13.0;

/// The model's parameters; [`Params::typeless`] gives the published set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Probability that a job is serial.
    pub serial_prob: f64,
    /// Probability that a job's size is a power of two.
    pub pow2_prob: f64,
    /// Two-stage uniform for log2(size): low end.
    pub ulow: f64,
    /// Two-stage uniform: the point between the stages.
    pub umed: f64,
    /// Two-stage uniform: high end, log2 of the machine size.
    pub uhi: f64,
    /// Probability of the first stage.
    pub uprob: f64,
    /// First Gamma of the log run time (shape, scale).
    pub a1: f64,
    /// Scale of the first Gamma.
    pub b1: f64,
    /// Second Gamma of the log run time (shape).
    pub a2: f64,
    /// Scale of the second Gamma.
    pub b2: f64,
    /// Slope of the first Gamma's probability in the size.
    pub pa: f64,
    /// Intercept of the first Gamma's probability.
    pub pb: f64,
    /// Shape of the log inter-arrival Gamma (before ARAR).
    pub aarr: f64,
    /// Scale of the log inter-arrival Gamma.
    pub barr: f64,
    /// Multiplier of AARR.
    pub arar: f64,
    /// Daily cycle Gamma shape.
    pub anum: f64,
    /// Daily cycle Gamma scale.
    pub bnum: f64,
    /// Hour of day of the first arrival.
    pub start_hour: u32,
}

impl Params {
    /// The typeless parameters adapted to a machine of `procs` processors
    /// (UHI = log2 procs, UMED = UHI - 2.5).
    pub fn typeless(procs: u32) -> Params {
        let uhi = f64::from(procs.max(2)).log2();
        Params {
            serial_prob: 0.244,
            pow2_prob: 0.576,
            ulow: 0.8,
            umed: uhi - 2.5,
            uhi,
            uprob: 0.86,
            a1: 4.2,
            b1: 0.94,
            a2: 312.0,
            b2: 0.03,
            pa: -0.0054,
            pb: 0.78,
            aarr: 10.2303,
            barr: 0.4871,
            arar: 1.0225,
            anum: 8.1737,
            bnum: 3.9631,
            start_hour: 0,
        }
    }

    /// The probability that a job of `size` draws its log run time from the
    /// first Gamma.
    pub fn first_gamma_prob(&self, size: u32) -> f64 {
        (self.pa * f64::from(size) + self.pb).clamp(0.0, 1.0)
    }

    /// The daily cycle's weights per half-hour bucket from midnight, averaging 1.
    pub fn daily_weights(&self) -> Result<[f64; BUCKETS], ModelError> {
        let g = statrs::distribution::Gamma::new(self.anum, 1.0 / self.bnum)
            .map_err(|_| ModelError::Parameter("anum/bnum"))?;
        let mut w = [0.0; BUCKETS];
        for (idx, slot) in w.iter_mut().enumerate() {
            let x = ((idx + 1 + BUCKETS - 11) % BUCKETS + 11) as f64;
            *slot = g.cdf(x + 0.5) - g.cdf(x - 0.5);
        }
        let mean = w.iter().sum::<f64>() / BUCKETS as f64;
        if mean <= 0.0 || !mean.is_finite() {
            return Err(ModelError::Parameter("anum/bnum"));
        }
        w.iter_mut().for_each(|x| *x /= mean);
        Ok(w)
    }
}

/// A parameter set the model cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// A distribution parameter is out of range.
    #[error("Lublin-Feitelson parameter {0} is out of range")]
    Parameter(&'static str),
    /// No arrival rate gives the asked load.
    #[error("no arrival rate gives an offered load of {target:.3} (reachable: {low:.3} to {high:.3})")]
    Unreachable {
        /// The asked load.
        target: f64,
        /// The lowest load reached.
        low: f64,
        /// The highest load reached.
        high: f64,
    },
}

/// An endless stream of jobs from the model, reproducible from its seed.
#[derive(Debug)]
pub struct Generator {
    params: Params,
    procs: u32,
    jobs_rng: ChaCha8Rng,
    arrivals_rng: ChaCha8Rng,
    weights: [f64; BUCKETS],
    run1: Gamma<f64>,
    run2: Gamma<f64>,
    gap: statrs::distribution::Gamma,
    gap_cdf_cap: f64,
    bucket: usize,
    /// Start of the current bucket, in seconds from the first arrival.
    bucket_start: f64,
    /// Points already paid in the current bucket.
    paid: f64,
    next_id: i64,
}

impl Generator {
    /// A generator for a machine of `procs` processors.
    pub fn new(params: Params, procs: u32, seed: u64) -> Result<Generator, ModelError> {
        let run1 = Gamma::new(params.a1, params.b1).map_err(|_| ModelError::Parameter("a1/b1"))?;
        let run2 = Gamma::new(params.a2, params.b2).map_err(|_| ModelError::Parameter("a2/b2"))?;
        let gap = statrs::distribution::Gamma::new(params.aarr * params.arar, 1.0 / params.barr)
            .map_err(|_| ModelError::Parameter("aarr/barr"))?;
        let ok = |x: f64| x.is_finite() && (0.0..=1.0).contains(&x);
        if !ok(params.serial_prob) || !ok(params.pow2_prob) || !ok(params.uprob) || procs == 0 {
            return Err(ModelError::Parameter("probabilities"));
        }
        if !(params.ulow <= params.umed && params.umed <= params.uhi) {
            return Err(ModelError::Parameter("ulow/umed/uhi"));
        }
        let gap_cdf_cap = gap.cdf(MAX_LOG_GAP);
        Ok(Generator {
            weights: params.daily_weights()?,
            bucket: (params.start_hour as usize % 24) * 2,
            params,
            procs,
            jobs_rng: ChaCha8Rng::seed_from_u64(seed),
            arrivals_rng: ChaCha8Rng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
            run1,
            run2,
            gap,
            gap_cdf_cap,
            bucket_start: 0.0,
            paid: 0.0,
            next_id: 1,
        })
    }

    fn size(&mut self) -> u32 {
        let p = &self.params;
        let u: f64 = self.jobs_rng.gen();
        if u <= p.serial_prob {
            return 1;
        }
        let (lo, hi) = if self.jobs_rng.gen::<f64>() <= p.uprob {
            (p.ulow, p.umed)
        } else {
            (p.umed, p.uhi)
        };
        let mut par = self.jobs_rng.gen_range(lo..=hi);
        if u <= p.serial_prob + p.pow2_prob {
            par = par.round();
        }
        (2f64.powf(par).round() as u32).clamp(1, self.procs)
    }

    fn run_time(&mut self, size: u32) -> i64 {
        let p = self.params.first_gamma_prob(size);
        loop {
            let x = if self.jobs_rng.gen::<f64>() <= p {
                self.run1.sample(&mut self.jobs_rng)
            } else {
                self.run2.sample(&mut self.jobs_rng)
            };
            if x <= MAX_LOG_RUN {
                return x.exp() as i64;
            }
        }
    }

    /// The next inter-arrival gap in points (seconds at the average rate over
    /// the bucket length), drawn from the truncated Gamma by inversion.
    fn gap_points(&mut self) -> f64 {
        let u: f64 = self.arrivals_rng.gen_range(f64::EPSILON..1.0);
        inverse_cdf(&self.gap, u * self.gap_cdf_cap).exp() / BUCKET_SECONDS
    }

    /// Advances the arrival clock by one gap and returns the new time.
    fn next_arrival(&mut self) -> f64 {
        let mut points = self.paid + self.gap_points();
        while points > self.weights[self.bucket] {
            points -= self.weights[self.bucket];
            self.bucket = (self.bucket + 1) % BUCKETS;
            self.bucket_start += BUCKET_SECONDS;
        }
        self.paid = points;
        self.bucket_start + BUCKET_SECONDS * points / self.weights[self.bucket]
    }
}

impl Iterator for Generator {
    type Item = SwfJob;

    fn next(&mut self) -> Option<SwfJob> {
        let submit = if self.next_id == 1 { 0.0 } else { self.next_arrival() };
        let size = self.size();
        let run = self.run_time(size);
        let id = self.next_id;
        self.next_id += 1;
        Some(SwfJob {
            id,
            submit: submit as i64,
            wait: -1,
            run,
            procs: i64::from(size),
            avg_cpu: -1.0,
            used_memory: -1.0,
            req_procs: i64::from(size),
            req_time: -1,
            req_memory: -1,
            status: 1,
            user: -1,
            group: -1,
            executable: -1,
            queue: -1,
            partition: -1,
            preceding: -1,
            think: -1,
        })
    }
}

/// The Gamma quantile by safeguarded Newton steps (statrs' own inversion is a
/// plain bisection, about ten times slower here).
fn inverse_cdf(g: &statrs::distribution::Gamma, p: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, MAX_LOG_GAP.max(g.shape() / g.rate() * 10.0));
    let mut x = g.shape() / g.rate();
    for _ in 0..100 {
        let f = g.cdf(x) - p;
        if f.abs() < 1e-12 {
            break;
        }
        if f > 0.0 {
            hi = x;
        } else {
            lo = x;
        }
        let step = x - f / g.pdf(x);
        x = if step > lo && step < hi && step.is_finite() {
            step
        } else {
            (lo + hi) / 2.0
        };
        if hi - lo < 1e-12 {
            break;
        }
    }
    x
}

/// The jobs of `generator` arriving before `span` seconds.
pub fn take_span(generator: Generator, span: i64) -> Vec<SwfJob> {
    generator.take_while(|j| j.submit < span).collect()
}

/// Offered load of `jobs` on `procs` processors over `span` seconds:
/// sum(size x run time) / (procs x span).
pub fn offered_load(jobs: &[SwfJob], procs: u32, span: i64) -> f64 {
    let work: f64 = jobs.iter().map(|j| j.procs.max(0) as f64 * j.run.max(0) as f64).sum();
    work / (f64::from(procs) * span.max(1) as f64)
}

/// A span of jobs whose offered load is `target` (within 0.5%, or as close as
/// 30 bisection steps get: one long job entering or leaving the span moves the
/// load in steps), found by scaling AARR; returns the jobs and the parameters
/// used. The same seed gives the same sizes and run times at every load.
pub fn at_load(
    params: Params,
    procs: u32,
    span: i64,
    target: f64,
    seed: u64,
) -> Result<(Vec<SwfJob>, Params), ModelError> {
    let attempt = |scale: f64| -> Result<(Vec<SwfJob>, Params, f64), ModelError> {
        let p = Params {
            aarr: params.aarr * scale,
            ..params
        };
        let jobs = take_span(Generator::new(p, procs, seed)?, span);
        let load = offered_load(&jobs, procs, span);
        Ok((jobs, p, load))
    };
    // A larger AARR means longer gaps and a lower load. Widen a bracket around
    // the published value step by step: a much smaller AARR means millions of
    // jobs per month.
    let mut best = attempt(1.0)?;
    let (mut lo, mut hi) = (0.0f64, 0.0f64);
    let (mut low, mut high) = (best.2, best.2);
    while high < target && lo > 0.3f64.ln() {
        hi = lo;
        lo -= 0.2;
        high = attempt(lo.exp())?.2;
    }
    while low > target && hi < 4f64.ln() {
        lo = hi;
        hi += 0.2;
        low = attempt(hi.exp())?.2;
    }
    if !(low..=high).contains(&target) {
        return Err(ModelError::Unreachable { target, low, high });
    }
    for _ in 0..30 {
        if (best.2 - target).abs() <= 0.005 * target {
            break;
        }
        let mid = (lo + hi) / 2.0;
        let cand = attempt(mid.exp())?;
        if cand.2 > target {
            lo = mid;
        } else {
            hi = mid;
        }
        if (cand.2 - target).abs() < (best.2 - target).abs() {
            best = cand;
        }
    }
    Ok((best.0, best.1))
}
