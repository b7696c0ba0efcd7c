//! What a backend is given to run one job, what it answers, and what it
//! tells the site while the job runs: the seam between the agent and the
//! backends, which know nothing of the agent itself.

use std::future::Future;
use std::path::{Path, PathBuf};

use brokk_core::{JobId, Occupant, ReservationId};
use brokk_model::{Job, JobPhase, Time};
use tokio::sync::watch;

use crate::accounts::Account;

/// The `PATH` a job is given unless it sets its own.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What the runner of one job listens to.
#[derive(Debug, Clone)]
pub struct Controls {
    /// The planned start, which moves earlier when the queue compresses.
    pub start: watch::Receiver<Time>,
    /// Set when the owner cancels.
    pub cancel: watch::Receiver<bool>,
    /// Whether the reservation the job claimed is committed: a job
    /// submitted into a hold with an explicit commit waits for it.
    pub committed: watch::Receiver<bool>,
}

/// What a job's runner needs to run it.
#[derive(Debug)]
pub struct Launch {
    /// Job id on this site.
    pub id: JobId,
    /// The identity that submitted it (its uploads are this one's).
    pub owner: String,
    /// The user it runs for: the owner, or whom a delegate submitted it for.
    pub user: String,
    /// The description.
    pub job: Job,
    /// What it listens to.
    pub controls: Controls,
    /// Its id in the resource manager, once submitted there.
    pub backend_id: Option<u64>,
    /// The owner's reservation it runs in, if it claimed one.
    pub claimed: Option<ReservationId>,
    /// Its wall time, seconds (the site's default when it states none).
    pub wall: i64,
    /// Whether it has started.
    pub started: bool,
    /// Whether the agent restarted since the job was accepted.
    pub resumed: bool,
    /// The local account it runs as (`None`: the agent's own).
    pub account: Option<Account>,
}

/// How a job's run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The program exited with this status.
    Exited(i32),
    /// It could not run or complete; why.
    Failed(String),
    /// Its owner cancelled it.
    Cancelled,
}

/// What a backend tells the site about the jobs it runs, and asks of it.
/// The agent implements it; backends see nothing else of the agent.
pub trait Progress: Clone + Send + Sync + 'static {
    /// Moves job `id` to `phase` (not a terminal one); false if it has ended.
    fn set_phase(&self, id: JobId, phase: JobPhase) -> impl Future<Output = bool> + Send;
    /// Job `id` is in the resource manager as `backend_id`.
    fn record_submitted(&self, id: JobId, backend_id: u64) -> impl Future<Output = ()> + Send;
    /// Job `id` started at the resource manager's `start`.
    fn mark_running(&self, id: JobId, start: Time) -> impl Future<Output = ()> + Send;
    /// What occupies the resource manager without the site having put it there.
    fn mirror(&self, occupants: Vec<Occupant>) -> impl Future<Output = ()> + Send;
    /// Of resource-manager job ids, those the site submitted for a job that
    /// has since ended, each with that job.
    fn ended_as(&self, backend_ids: Vec<u64>) -> impl Future<Output = Vec<(JobId, u64)>> + Send;
    /// Whether the site holds reservation `id`.
    fn holds_reservation(&self, id: u64) -> impl Future<Output = bool> + Send;
}

/// Waits until `rx` says cancelled (never, once its sender is gone).
pub(crate) async fn wait_cancel(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            // The sender is gone: never cancelled from now on.
            std::future::pending::<()>().await;
        }
    }
}

/// An error of a resource manager's client that may pass if the call is
/// made again later (the manager down or slow).
pub(crate) trait Transient: std::fmt::Display {
    /// Whether trying again later may help.
    fn is_transient(&self) -> bool;
}

/// Waits `period`; false when the owner cancelled meanwhile.
pub(crate) async fn pause(launch: &mut Launch, period: std::time::Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(period) => true,
        _ = wait_cancel(&mut launch.controls.cancel) => false,
    }
}

/// Makes `call` until it succeeds, waiting `period` after each failure that
/// may pass; `Err(None)` when the owner cancels meanwhile, `Err(Some(e))`
/// when the manager refuses for good. A job is never failed because its
/// manager did not answer.
pub(crate) async fn retrying<T, E, F, Fut>(
    launch: &mut Launch,
    period: std::time::Duration,
    what: &str,
    mut call: F,
) -> Result<T, Option<E>>
where
    E: Transient,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    loop {
        if *launch.controls.cancel.borrow() {
            return Err(None);
        }
        match call().await {
            Ok(t) => return Ok(t),
            Err(e) if e.is_transient() => {
                tracing::warn!(job = %launch.id, "{what}: {e}; retrying");
                if !pause(launch, period).await {
                    return Err(None);
                }
            }
            Err(e) => return Err(Some(e)),
        }
    }
}

/// What a resource manager's command that failed said: its standard error
/// then standard output, non-empty lines joined by `; `; how it exited when
/// it said nothing.
pub(crate) fn failure_message(program: &str, out: &std::process::Output) -> String {
    let (stderr, stdout) = (
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout),
    );
    let message = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    if message.is_empty() {
        format!("{program} exited with {}", out.status)
    } else {
        message
    }
}

/// The last path component, so a job cannot write outside its sandbox.
pub(crate) fn plain_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    if base.is_empty() || base == "." || base == ".." {
        "_".to_string()
    } else {
        base.to_string()
    }
}

/// What GRAM's standard RSL substitutions stand for where this job runs
/// ([`brokk_jdl::assign::GRAM_VARIABLES`]): its home and scratch directory
/// are its sandbox (as its `HOME` is), its login name its account's.
pub(crate) fn site_values(launch: &Launch, site: &str, sandbox: &Path) -> Vec<(&'static str, String)> {
    let sandbox = std::path::absolute(sandbox)
        .unwrap_or_else(|_| sandbox.to_path_buf())
        .display()
        .to_string();
    let uid = launch
        .account
        .map_or_else(nix::unistd::geteuid, |a| nix::unistd::Uid::from_raw(a.uid));
    let logname = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let os_version = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        ("HOME", sandbox.clone()),
        ("SCRATCH_DIRECTORY", sandbox),
        ("LOGNAME", logname),
        ("GLOBUS_ID", launch.owner.clone()),
        ("GLOBUS_GRAM_JOB_CONTACT", format!("brokk://{site}/{}", launch.id)),
        ("GLOBUS_HOST_MANUFACTURER", "unknown".into()),
        ("GLOBUS_HOST_CPUTYPE", std::env::consts::ARCH.into()),
        ("GLOBUS_HOST_OSNAME", std::env::consts::OS.into()),
        ("GLOBUS_HOST_OSVERSION", os_version.trim().to_string()),
    ]
}

/// The variables every job finds set, as batch systems set theirs.
pub(crate) fn batch_environment(id: JobId, site: &str, job: &Job, sandbox: &Path) -> Vec<(String, String)> {
    let sandbox = std::path::absolute(sandbox).unwrap_or_else(|_| sandbox.to_path_buf());
    let mut env = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), sandbox.display().to_string()),
        ("TMPDIR".into(), sandbox.display().to_string()),
        ("BROKK_JOB_ID".into(), id.to_string()),
        ("BROKK_SITE".into(), site.to_string()),
        ("BROKK_CPUS".into(), job.cpus.unwrap_or(1).max(1).to_string()),
        ("BROKK_SANDBOX".into(), sandbox.display().to_string()),
    ];
    // A Slurm script (its broker gave it Slurm's variables) finds where it
    // was submitted from as its sandbox, where its inputs are: `cd
    // "$SLURM_SUBMIT_DIR"` goes where it would on a cluster.
    if job.environment.iter().any(|v| v.name == "SLURM_JOB_ID") {
        env.push(("SLURM_SUBMIT_DIR".into(), sandbox.display().to_string()));
    }
    env
}

/// Makes a staged program executable.
pub(crate) fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(path)?.permissions();
    perm.set_mode(perm.mode() | 0o755);
    std::fs::set_permissions(path, perm)
}

/// The program that runs `job` from `sandbox` and its arguments: a script
/// written into the sandbox (owned by `account`) and run by the interpreter
/// its `#!` line names, as sbatch reads it; a program staged into the
/// sandbox, made executable; a bare command as `bare` finds it; any other
/// path as it is.
pub(crate) fn program_of(
    job: &Job,
    sandbox: &Path,
    account: Option<Account>,
    bare: impl Fn(&str) -> PathBuf,
) -> std::io::Result<(PathBuf, Vec<String>)> {
    match (&job.script, &job.executable) {
        (Some(script), _) => {
            let mut f = crate::staging::create_owned(sandbox, "job-script.sh", account)?;
            std::io::Write::write_all(&mut f, script.as_bytes())?;
            let (program, arg) = brokk_jdl::program::interpreter(script);
            let mut args: Vec<String> = arg.into_iter().collect();
            args.push(sandbox.join("job-script.sh").display().to_string());
            args.extend(job.arguments.iter().cloned());
            Ok((PathBuf::from(program), args))
        }
        (None, Some(exe)) => {
            let staged = sandbox.join(plain_name(exe));
            let program = if !exe.contains('/') && staged.exists() {
                make_executable(&staged)?;
                staged
            } else if !exe.contains('/') {
                bare(exe)
            } else {
                PathBuf::from(exe)
            };
            Ok((program, job.arguments.clone()))
        }
        (None, None) => Err(std::io::Error::other("no executable")),
    }
}

/// Waits for the planned start, which may move earlier; false when
/// cancelled first.
pub(crate) async fn wait_for_start(c: &mut Controls) -> bool {
    loop {
        if *c.cancel.borrow() {
            return false;
        }
        let start = *c.start.borrow();
        let wait = start.0 - brokk_proto::wall_clock().0;
        if wait <= 0 {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(wait as u64)) => {}
            _ = c.start.changed() => {}
            _ = c.cancel.changed() => {}
        }
    }
}

/// Waits for job `id`'s planned start and records it running, before any
/// process exists (after a crash, a job not recorded as running never
/// started, so resuming it cannot run it twice). A job held meanwhile had
/// its start moved away and waits for its release; false when it was
/// cancelled or has ended.
pub(crate) async fn start_when_due<P: Progress>(site: &P, id: JobId, c: &mut Controls) -> bool {
    loop {
        if !wait_for_start(c).await {
            return false;
        }
        if site.set_phase(id, JobPhase::Running).await {
            return true;
        }
        if *c.start.borrow() <= brokk_proto::wall_clock() {
            return false;
        }
    }
}

/// The first executable file named `name` in the directories of `path`.
pub(crate) fn on_path(name: &str, path: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}
