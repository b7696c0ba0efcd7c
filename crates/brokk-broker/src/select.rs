//! Selection ([ET-interop], 3.1; [ET-brokering], Algorithm 1 steps 5-8): validate the job,
//! filter out resources that cannot run it, predict on the rest, rank them by the
//! user's objective. A resource that is left out is left out with its reasons.

use brokk_model::{Duration, Job, JobPreferences, Objective, ResourceInfo, Time};

use crate::predict::{Prediction, Predictor};

/// A job the broker cannot consider at all; each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// Neither an executable nor a script.
    #[error("the job has nothing to run: give it an executable, a script or an application")]
    NothingToRun,
    /// Zero processors or nodes asked for.
    #[error("the job asks for zero processors or nodes; ask for at least one")]
    ZeroProcessors,
    /// A wall time or CPU time of zero or less.
    #[error("the job's {0} must be positive")]
    NonPositiveTime(&'static str),
    /// It may not start before a moment after its deadline.
    #[error("the job's earliest start ({start}) is after its deadline ({deadline})")]
    StartAfterDeadline {
        /// The earliest start.
        start: Time,
        /// The deadline.
        deadline: Time,
    },
    /// Its deadline has already passed.
    #[error("the job's deadline ({0}) has already passed")]
    DeadlinePassed(Time),
    /// A file or directory name that leaves the job's directory.
    #[error("{field}: `{name}` {why}; name it relative to the job's directory, without `..`")]
    OutsideDirectory {
        /// The field (`stdout`, `output file`, `working_directory`).
        field: &'static str,
        /// The name given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// Whether `name` stays inside the job's directory: not absolute, no `..`
/// component, no NUL. Sites resolve every name in the job's sandbox, so a
/// name that leaves it would be renamed or lost there; it is refused here,
/// at submission, with its field named.
fn inside(field: &'static str, name: &str) -> Result<(), Invalid> {
    let why = if name.starts_with('/') || name.starts_with('\\') {
        "is absolute"
    } else if name.split(['/', '\\']).any(|c| c == "..") {
        "goes up with `..`"
    } else if name.contains('\0') {
        "holds a NUL character"
    } else {
        return Ok(());
    };
    Err(Invalid::OutsideDirectory {
        field,
        name: name.to_string(),
        why,
    })
}

/// Checks the attributes every job needs.
pub fn validate(job: &Job) -> Result<(), Invalid> {
    if job.executable.is_none() && job.script.is_none() && job.application.is_none() {
        return Err(Invalid::NothingToRun);
    }
    if job.cpus == Some(0) || job.nodes == Some(0) || job.cpus_per_node == Some(0) {
        return Err(Invalid::ZeroProcessors);
    }
    if job.wall_time.is_some_and(|d| d.0 <= 0) {
        return Err(Invalid::NonPositiveTime("wall time"));
    }
    if job.cpu_time.is_some_and(|d| d.0 <= 0) {
        return Err(Invalid::NonPositiveTime("CPU time"));
    }
    if let (Some(start), Some(deadline)) = (job.earliest_start, job.deadline) {
        if start > deadline {
            return Err(Invalid::StartAfterDeadline { start, deadline });
        }
    }
    let streams = [
        ("working_directory", &job.working_directory),
        ("stdin", &job.stdin),
        ("stdout", &job.stdout),
        ("stderr", &job.stderr),
    ];
    for (field, name) in streams {
        if let Some(n) = name {
            inside(field, n)?;
        }
    }
    for f in &job.output_files {
        inside("output file", &f.name)?;
    }
    for f in &job.input_files {
        inside("input file", &f.name)?;
    }
    Ok(())
}

/// What a job asks that the broker carries in its description but does
/// not do itself, one sentence each, for the submitter's warnings.
pub fn not_done_here(job: &Job) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(n) = job.retries {
        out.push(format!(
            "retries ({n}): the broker does not run a failed job again; a workflow's RETRY is honoured"
        ));
    }
    if job.priority.is_some() {
        out.push("priority: the broker takes each user's jobs in the order they came".into());
    }
    if job.notify.as_ref().is_some_and(|n| !n.on.is_empty()) {
        out.push("notify: the broker sends no mail; `brokk watch` follows a job".into());
    }
    out
}

/// [`validate`], and that the job's deadline is still ahead at `now`.
pub fn validate_at(job: &Job, now: Time) -> Result<(), Invalid> {
    validate(job)?;
    match job.deadline {
        Some(d) if d <= now => Err(Invalid::DeadlinePassed(d)),
        _ => Ok(()),
    }
}

/// Why a resource cannot run a job, in words a user reads beside the
/// site's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// Different processor architecture.
    #[error("it needs architecture {wanted}, the site has {}", offered.as_deref().unwrap_or("none named"))]
    Architecture {
        /// What the job needs.
        wanted: String,
        /// What the resource has.
        offered: Option<String>,
    },
    /// Different operating system.
    #[error("it needs operating system {wanted}, the site has {}", offered.as_deref().unwrap_or("none named"))]
    OperatingSystem {
        /// What the job needs.
        wanted: String,
        /// What the resource has.
        offered: Option<String>,
    },
    /// A runtime environment the resource does not have.
    #[error("it needs runtime environment {0}, which the site does not have")]
    RuntimeEnvironment(String),
    /// More processors than the resource (or the queue) has.
    #[error("it asks for {wanted} processors, the site has at most {offered}")]
    Processors {
        /// Processors wanted.
        wanted: u32,
        /// Processors available at most.
        offered: u32,
    },
    /// More memory per node than a node has.
    #[error("it asks for {wanted} MiB per node, a node has {offered}")]
    Memory {
        /// MiB per node wanted.
        wanted: u64,
        /// MiB per node offered.
        offered: u64,
    },
    /// The named queue does not exist here.
    #[error("the site has no queue {0}")]
    Queue(String),
    /// The job's project is not among those the resource admits.
    #[error("{}", match project {
        Some(p) => format!("the site does not admit project {p}"),
        None => "the site admits named projects only, and the job names none".to_string(),
    })]
    NotAuthorized {
        /// The job's project, if it names one.
        project: Option<String>,
    },
    /// An input or output at a URL of a scheme the site does not stage.
    #[error("{what} {name} is at {url}; the site stages {} only{hint}", staged.join(", "))]
    Staging {
        /// `input` or `output`.
        what: &'static str,
        /// The file's name in the job's directory.
        name: String,
        /// Where it is to come from or go to.
        url: String,
        /// The schemes the site stages.
        staged: Vec<String>,
        /// What to do instead, where there is more to say.
        hint: &'static str,
    },
    /// A container image, where the site runs no container runtime.
    #[error("it runs in the container image {0}; the site runs no containers")]
    Container(String),
    /// A container image the site neither holds nor pulls.
    #[error("it runs in the container image {0}, which the site neither holds nor pulls")]
    Image(String),
    /// More GPUs per node than the site has.
    #[error("it asks for {wanted} GPU{} per node, the site has {offered}", if *wanted == 1 { "" } else { "s" })]
    Gpus {
        /// GPUs wanted.
        wanted: u32,
        /// GPUs per node offered.
        offered: u32,
    },
    /// The job names an application the site does not publish.
    #[error("it runs the application {0}, which the site does not publish")]
    Application(String),
    /// The job names a grid resource (HTCondor's `grid_resource`) the
    /// site does not front.
    #[error("it names the grid resource `{0}`, which the site does not front")]
    GridResource(String),
    /// The wall time exceeds the queue's limit.
    #[error("it asks for {} s of wall time, the queue allows {} s", wanted.0, limit.0)]
    WallTime {
        /// Wall time wanted.
        wanted: Duration,
        /// The queue's limit.
        limit: Duration,
    },
}

/// Every reason `resource` cannot run `job`; empty when it can.
pub fn mismatches(job: &Job, resource: &ResourceInfo) -> Vec<Mismatch> {
    let env = &resource.environment;
    let mut out = Vec::new();
    if !resource.access.is_empty()
        && !job
            .project
            .as_ref()
            .is_some_and(|p| resource.access.iter().any(|a| a == p))
    {
        out.push(Mismatch::NotAuthorized {
            project: job.project.clone(),
        });
    }
    let same = |a: &str, b: &Option<String>| b.as_deref().is_some_and(|b| a.eq_ignore_ascii_case(b));
    if let Some(a) = &job.architecture {
        if !same(a, &env.architecture) {
            out.push(Mismatch::Architecture {
                wanted: a.clone(),
                offered: env.architecture.clone(),
            });
        }
    }
    if let Some(o) = &job.operating_system {
        if !same(o, &env.operating_system) {
            out.push(Mismatch::OperatingSystem {
                wanted: o.clone(),
                offered: env.operating_system.clone(),
            });
        }
    }
    for r in &job.runtime_environments {
        if !env.runtime_environments.iter().any(|x| x.eq_ignore_ascii_case(r)) {
            out.push(Mismatch::RuntimeEnvironment(r.clone()));
        }
    }
    let share = job
        .queue
        .as_ref()
        .map(|q| resource.shares.iter().find(|s| s.name == *q));
    if let (Some(q), Some(None)) = (&job.queue, &share) {
        out.push(Mismatch::Queue(q.clone()));
    }
    let share = share.flatten();
    let wanted = job.cpus.unwrap_or(1);
    let offered = share
        .and_then(|s| s.max_slots_per_job)
        .map_or(resource.total_slots, |m| m.min(resource.total_slots));
    if wanted > offered {
        out.push(Mismatch::Processors { wanted, offered });
    }
    if let (Some(w), Some(o)) = (job.memory_per_node_mib(), env.memory_mib_per_node) {
        if w > o {
            out.push(Mismatch::Memory { wanted: w, offered: o });
        }
    }
    if let (Some(w), Some(limit)) = (job.wall_time, share.and_then(|s| s.max_wall_time)) {
        if w > limit {
            out.push(Mismatch::WallTime { wanted: w, limit });
        }
    }
    out.extend(staging(job, env));
    if let Some(image) = &job.container_image {
        if env.containers.is_empty() {
            out.push(Mismatch::Container(image.clone()));
        } else if !env.holds_image(image) {
            out.push(Mismatch::Image(image.clone()));
        }
    }
    if let Some(wanted) = job.gpus.filter(|&g| g > 0) {
        let offered = env.gpus_per_node.unwrap_or(0);
        if wanted > offered {
            out.push(Mismatch::Gpus { wanted, offered });
        }
    }
    if let Some(app) = &job.application {
        if !env.applications.iter().any(|a| app.is(a)) {
            out.push(Mismatch::Application(app.to_string()));
        }
    }
    if let Some(named) = job.grid_resource.as_ref().filter(|r| !env.fronts(r)) {
        out.push(Mismatch::GridResource(named.clone()));
    }
    out
}

/// The job's inputs and outputs at URLs whose scheme `env` does not stage.
/// A file uploaded with the job (`upload:`) comes from the broker, and an
/// output without a target stays in the job's directory: any site takes
/// those.
fn staging(job: &Job, env: &brokk_model::Environment) -> Vec<Mismatch> {
    let inputs = job
        .input_files
        .iter()
        .filter_map(|f| Some(("input", &f.name, f.source.as_ref()?)));
    let outputs = job
        .output_files
        .iter()
        .filter_map(|f| Some(("output", &f.name, f.target.as_ref()?)));
    inputs
        .chain(outputs)
        .filter_map(|(what, name, url)| {
            let s = brokk_model::url_scheme(url)?;
            if s == "upload" || env.stages(&s) {
                return None;
            }
            let hint = match s.as_str() {
                "lfn" => " (an LFN names a DIRAC file-catalogue entry: give the URL of one of its replicas)",
                _ => "",
            };
            Some(Mismatch::Staging {
                what,
                name: name.clone(),
                url: url.clone(),
                staged: env.staged(),
                hint,
            })
        })
        .collect()
}

/// Chooses the order of resources from their predictions and what they
/// publish.
pub trait Selector {
    /// The figure to minimise for a job predicted as `p` on `r`.
    fn score(&self, p: &Prediction, r: &ResourceInfo) -> i64;
}

/// Earliest completion: minimise the Total Time to Delivery (seconds).
#[derive(Debug, Clone, Copy, Default)]
pub struct TtdSelector;

impl Selector for TtdSelector {
    fn score(&self, p: &Prediction, _: &ResourceInfo) -> i64 {
        p.ttd().0
    }
}

/// Earliest start: minimise the Time To Start (seconds).
#[derive(Debug, Clone, Copy, Default)]
pub struct TtsSelector;

impl Selector for TtsSelector {
    fn score(&self, p: &Prediction, _: &ResourceInfo) -> i64 {
        p.tts().0
    }
}

/// The least loaded site: minimise the share of its processors in use as
/// it last reported, in millionths ([AB-avail]'s `least-load`); the
/// prediction does not count.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastLoadedSelector;

impl Selector for LeastLoadedSelector {
    fn score(&self, _: &Prediction, r: &ResourceInfo) -> i64 {
        let used = r.total_slots.saturating_sub(r.free_slots);
        i64::from(used) * 1_000_000 / i64::from(r.total_slots.max(1))
    }
}

/// The selector for an objective.
pub fn selector_for(objective: Objective) -> &'static dyn Selector {
    match objective {
        Objective::EarliestCompletion => &TtdSelector,
        Objective::EarliestStart => &TtsSelector,
        Objective::LeastLoaded => &LeastLoadedSelector,
    }
}

/// A resource that can run the job, with its prediction and score.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// The resource's position in the list given to [`rank`].
    pub index: usize,
    /// The predicted components.
    pub prediction: Prediction,
    /// The selector's figure (lower is better): seconds for the time
    /// objectives, millionths of the site in use for the least loaded.
    pub score: i64,
}

/// The outcome of selection: candidates best first, and what was left out and why.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ranking {
    /// Resources that can run the job, best first (ties in the order given).
    pub ranked: Vec<Ranked>,
    /// Resources that cannot, with every reason.
    pub excluded: Vec<(String, Vec<Mismatch>)>,
}

/// Filters, predicts (with `predictor`) and ranks `resources` for `job` at `now`.
pub fn rank(
    job: &Job,
    prefs: &JobPreferences,
    resources: &[ResourceInfo],
    now: Time,
    predictor: &dyn Predictor,
) -> Ranking {
    let mut out = assess(job, prefs, resources, now, predictor);
    // Ties go to the resource listed first (the configuration's order), in
    // every driver alike: endpoints differ between worlds (URLs live, names
    // in simulation), positions do not. The candidates were pushed in that
    // order, so a stable sort on the score alone gives it; sorting the small
    // keys and then moving each candidate once costs less than moving the
    // candidates through the whole sort.
    out.ranked.sort_by_cached_key(|r| r.score);
    out
}

/// [`rank`] without the ordering: the candidates in the order of
/// `resources`, for a caller that needs only the best unless it refuses.
pub fn assess(
    job: &Job,
    prefs: &JobPreferences,
    resources: &[ResourceInfo],
    now: Time,
    predictor: &dyn Predictor,
) -> Ranking {
    let selector = selector_for(prefs.objective());
    let mut out = Ranking {
        ranked: Vec::with_capacity(resources.len()),
        excluded: Vec::new(),
    };
    for (index, r) in resources.iter().enumerate() {
        let m = mismatches(job, r);
        if !m.is_empty() {
            out.excluded.push((r.endpoint.clone(), m));
            continue;
        }
        let prediction = predictor.predict(job, prefs, r, None, now);
        out.ranked.push(Ranked {
            index,
            score: selector.score(&prediction, r),
            prediction,
        });
    }
    out
}
