//! Predictors of the Total Time to Delivery ([ET-brokering], 3.1; [ET-interop], 3.1).
//!
//! TTD = waiting + execution + stage-out, where waiting is the larger of the
//! stage-in time and the queue wait (the job cannot start before both are over),
//! and stage-out is left out when no output size is known. The time to start
//! (TTS) is the waiting part alone.

use brokk_model::{Benchmark, Duration, Job, JobPreferences, PublishedBenchmark, ResourceInfo, Time};

/// Execution time predicted from benchmarks: the average of the per-benchmark
/// estimates ranks resources, the maximum is the wall time to request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionEstimate {
    /// Average of the estimates, for ranking.
    pub ranking: Duration,
    /// Maximum of the estimates, to request as the job's wall time.
    pub requested: Duration,
}

/// Scales each benchmark triple {b, r, t} to the resource linearly: a resource
/// scoring R on b runs the job in t * r / R. A benchmark the resource does not
/// publish is taken as `penalty` times the longest estimate from those it does.
/// `None` when the job names no benchmark or the resource publishes none of them.
pub fn execution_time(
    triples: &[Benchmark],
    published: &[PublishedBenchmark],
    penalty: f64,
) -> Option<ExecutionEstimate> {
    let scaled = |b: &Benchmark| {
        published
            .iter()
            // Names are usually written alike: the byte comparison settles most.
            .find(|p| p.name == b.name || p.name.eq_ignore_ascii_case(&b.name))
            .filter(|p| p.value > 0.0 && p.value.is_finite())
            .map(|p| b.time.0 as f64 * b.result / p.value)
    };
    // The penalty needs the longest known estimate first: the estimates of
    // the usual few triples are kept on the stack between the two passes
    // (name matching is most of a prediction's cost), more are found again.
    const KEPT: usize = 4;
    let mut kept = [None; KEPT];
    for (k, b) in triples.iter().take(KEPT).enumerate() {
        kept[k] = scaled(b);
    }
    let estimate = |k: usize, b: &Benchmark| if k < KEPT { kept[k] } else { scaled(b) };
    let longest = triples
        .iter()
        .enumerate()
        .filter_map(|(k, b)| estimate(k, b))
        .fold(f64::NAN, f64::max);
    if longest.is_nan() {
        return None;
    }
    let (mut sum, mut max) = (0.0, 0.0f64);
    for (k, b) in triples.iter().enumerate() {
        let e = estimate(k, b).unwrap_or(penalty * longest);
        sum += e;
        max = max.max(e);
    }
    Some(ExecutionEstimate {
        ranking: whole_seconds(sum / triples.len() as f64),
        requested: whole_seconds(max),
    })
}

/// Seconds rounded up: a prediction should not promise less than the computation.
fn whole_seconds(s: f64) -> Duration {
    Duration(s.ceil().clamp(0.0, i64::MAX as f64) as i64)
}

/// Time to move `bytes` at `bandwidth` bytes per second; `None` without a bandwidth.
pub fn transfer_time(bytes: u64, bandwidth: Option<u64>) -> Option<Duration> {
    let bw = bandwidth.filter(|b| *b > 0)?;
    Some(Duration(bytes.div_ceil(bw).min(i64::MAX as u64) as i64))
}

/// Stage-in: the input files of known size (the executable among them when staged).
pub fn stage_in(job: &Job, resource: &ResourceInfo) -> Option<Duration> {
    let bytes: u64 = job.input_files.iter().filter_map(|f| f.size).sum();
    if bytes == 0 {
        return Some(Duration::ZERO);
    }
    transfer_time(bytes, resource.bandwidth_bytes_per_s)
}

/// Stage-out from the user's output size estimates; `None` when there are none
/// ([ET-brokering] then leaves stage-out out of the TTD).
pub fn stage_out(job: &Job, resource: &ResourceInfo) -> Option<Duration> {
    let sizes: Vec<u64> = job.output_files.iter().filter_map(|f| f.size_estimate).collect();
    if sizes.is_empty() {
        return None;
    }
    transfer_time(sizes.iter().sum(), resource.bandwidth_bytes_per_s)
}

/// How queue wait is estimated when the resource gives no reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadModel {
    /// Typical run time of the jobs ahead in the queue.
    pub mean_job_runtime: Duration,
}

impl Default for LoadModel {
    fn default() -> Self {
        LoadModel {
            mean_job_runtime: Duration::hours(1),
        }
    }
}

/// Queue wait: from a reservation's start when there is one (exact); else,
/// where the resource publishes its free capacity over time, the earliest
/// start of the job's own shape (`cpus` for `wall`) in it, counted from
/// `now` however old the answer (what has passed since is gone); else the
/// resource's own published estimate, which is for a one-slot job, so a
/// job wider than the slots free now waits at least the coarse estimate
/// below; else zero when enough slots are free and nothing waits; else the
/// time for the resource to work through the waiting jobs at its full
/// width, `waiting * mean_job_runtime / total_slots` (coarse, as [ET-brokering],
/// 3.1.3 warns).
pub fn queue_wait(
    resource: &ResourceInfo,
    cpus: u32,
    wall: Duration,
    reservation_start: Option<Time>,
    now: Time,
    load: LoadModel,
) -> Duration {
    if let Some(start) = reservation_start {
        return Duration((start - now).0.max(0));
    }
    let cpus = cpus.max(1);
    if let Some(start) = resource
        .availability
        .as_ref()
        .and_then(|a| a.earliest_start(cpus, wall, now, resource.total_slots))
    {
        return start - now;
    }
    let fits = resource.free_slots >= cpus;
    // The published estimate is a one-slot job's: it stands for one that
    // fits the slots free now, and for a one-slot job in any case.
    let as_estimated = fits || cpus == 1;
    let width = i64::from(resource.total_slots.max(1));
    let coarse = Duration((i64::from(resource.waiting_jobs) + 1).saturating_mul(load.mean_job_runtime.0) / width);
    match resource.estimated_wait {
        Some(w) if as_estimated => w,
        Some(w) => w.max(coarse),
        None if fits && resource.waiting_jobs == 0 => Duration::ZERO,
        None => coarse,
    }
}

/// How much later than predicted a job may start before the prediction
/// counts as violated ([AB-avail] section 6.1: T = 20 s).
pub const VIOLATION_TOLERANCE: Duration = Duration(20);

/// Whether a job predicted to start at `predicted` and started at
/// `started` is a violation ([AB-avail]'s Eq. 3): the room the broker
/// counted on was gone. Starting sooner never is.
pub fn violated(predicted: Time, started: Time) -> bool {
    started - predicted > VIOLATION_TOLERANCE
}

/// The predicted components of a job's delivery on one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// Stage-in, when it can be estimated.
    pub stage_in: Option<Duration>,
    /// Queue wait.
    pub queue_wait: Duration,
    /// Execution time used for ranking.
    pub execution: Option<Duration>,
    /// Wall time to request at submission.
    pub requested_wall_time: Option<Duration>,
    /// Stage-out, when output sizes are known.
    pub stage_out: Option<Duration>,
    /// The delay the resource's middleware adds before the start and
    /// again before the end is known.
    pub lag: Duration,
}

impl Prediction {
    /// Waiting before execution: the larger of stage-in and queue wait,
    /// then the middleware's lag.
    pub fn waiting(&self) -> Duration {
        self.queue_wait.max(self.stage_in.unwrap_or(Duration::ZERO)) + self.lag
    }

    /// Time to start (TTS).
    pub fn tts(&self) -> Duration {
        self.waiting()
    }

    /// Total Time to Delivery (TTD); unknown parts count as zero.
    pub fn ttd(&self) -> Duration {
        self.waiting() + self.execution.unwrap_or(Duration::ZERO) + self.lag + self.stage_out.unwrap_or(Duration::ZERO)
    }
}

/// Predicts a job on a resource. Benchmarks come from the job and its preferences;
/// without usable benchmarks the job's own wall time stands in for execution.
pub fn predict(
    job: &Job,
    extra_benchmarks: &[Benchmark],
    penalty: f64,
    resource: &ResourceInfo,
    reservation_start: Option<Time>,
    now: Time,
    load: LoadModel,
) -> Prediction {
    let exec = if extra_benchmarks.is_empty() {
        execution_time(&job.benchmarks, &resource.benchmarks, penalty)
    } else {
        let triples: Vec<Benchmark> = job.benchmarks.iter().chain(extra_benchmarks).cloned().collect();
        execution_time(&triples, &resource.benchmarks, penalty)
    };
    let requested = exec.map(|e| e.requested).or(job.wall_time);
    // The shape the job takes in the queue: its wall time there, an hour
    // when nothing says.
    let wall = requested.unwrap_or(Duration::hours(1));
    Prediction {
        stage_in: stage_in(job, resource),
        queue_wait: queue_wait(resource, job.cpus.unwrap_or(1), wall, reservation_start, now, load),
        execution: exec.map(|e| e.ranking).or(job.wall_time),
        requested_wall_time: requested,
        stage_out: stage_out(job, resource),
        lag: resource.lag.unwrap_or(Duration::ZERO),
    }
}

/// Predicts a job's delivery on one resource: the pluggable part of ranking,
/// chosen by configuration ([ET-interop], 3.1: Selectors over Predictors).
pub trait Predictor {
    /// The prediction for `job` with `prefs` on `resource` at `now`, with the start
    /// of a reservation when one is held.
    fn predict(
        &self,
        job: &Job,
        prefs: &JobPreferences,
        resource: &ResourceInfo,
        reservation_start: Option<Time>,
        now: Time,
    ) -> Prediction;
}

/// Seed 003's predictors: benchmark scaling with the penalty factor, transfers from
/// sizes and bandwidth, queue wait from a reservation, the published estimate or load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StandardPredictor {
    /// How queue wait is estimated from load.
    pub load: LoadModel,
}

/// The standard predictor with default settings, for options that borrow one.
pub static STANDARD_PREDICTOR: StandardPredictor = StandardPredictor {
    load: LoadModel {
        mean_job_runtime: Duration(3600),
    },
};

impl Predictor for StandardPredictor {
    fn predict(
        &self,
        job: &Job,
        prefs: &JobPreferences,
        resource: &ResourceInfo,
        reservation_start: Option<Time>,
        now: Time,
    ) -> Prediction {
        predict(
            job,
            &prefs.benchmarks,
            prefs.penalty_factor(),
            resource,
            reservation_start,
            now,
            self.load,
        )
    }
}
