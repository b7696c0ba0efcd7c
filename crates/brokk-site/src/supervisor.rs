//! A job's supervisor: a small process of its own (`brokk-supervise
//! supervise FILE`) that starts the job, enforces its wall time, passes on a
//! cancel and records how it ended. It outlives the agent, so a job keeps
//! its limits and its true ending when the agent is killed, and the
//! restarted agent attaches to it again.
//!
//! Everything about one job's supervision is one file under the work
//! directory's `.supervisors` (private to the agent, not reachable by the
//! job), of tagged lines, each written in one write:
//! - `spec JSON`: what to run, as whom, until when ([`Spec`]), written by the
//!   agent before it starts the supervisor;
//! - `supervisor PID` (for cancel, SIGTERM), `cgroup DIRS` (where its
//!   processes are kept, [`crate::containment`]), `job PID` (its process
//!   group) once started, `note TEXT` (what it could not set up), and
//!   `end JSON`, how the job ended ([`Outcome`]), appended by the
//!   supervisor, the last before it exits.
//!
//! The supervisor holds an flock on the file for its whole life, so the
//! agent can tell a live supervisor from a dead one without trusting a pid.
//! A line cut short (a process killed while writing it) does not parse and
//! counts as not written. One file for all of it: every file made per job
//! is an inode to allocate, which dominated a trivial job's cost on ext4.
//!
//! The job's standard streams are the supervisor's own, opened by the agent
//! inside the sandbox; the supervisor writes nothing to them.

use brokk_core::JobId;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use crate::containment::{self, JobCgroup, Limits};
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

/// What a supervisor runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// The account it runs as (`None`: the supervisor's own).
    pub uid: Option<u32>,
    /// The group it runs as.
    pub gid: Option<u32>,
    /// When its wall time ends, Unix seconds: fixed at the start, so nothing
    /// (a restart included) extends it.
    pub deadline: i64,
    /// Its wall time, seconds, for the message.
    pub wall: i64,
    /// Seconds between SIGTERM and SIGKILL.
    pub grace: u64,
    /// CPU seconds per process (RLIMIT_CPU), when the job states a CPU time.
    pub cpu_seconds: Option<u64>,
    /// Bytes of data per process (RLIMIT_DATA), when the job states memory.
    pub data_bytes: Option<u64>,
    /// Processes and threads the job may have at once (its cgroup's
    /// `pids.max`, else `RLIMIT_NPROC` of its account).
    #[serde(default = "default_processes")]
    pub processes: u64,
    /// Bytes of memory of the whole job (its cgroup's limit), when it states memory.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// The job's sandbox: with an account, the only one it sees
    /// ([`containment::hide_other_sandboxes`]).
    #[serde(default)]
    pub sandbox: Option<PathBuf>,
}

/// The process limit of a job whose specification names none.
pub const DEFAULT_PROCESSES: u64 = 1024;

fn default_processes() -> u64 {
    DEFAULT_PROCESSES
}

/// How a supervised job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It exited with this code (-1 when a signal ended it).
    Exited(i32),
    /// Its wall time ran out and it was terminated.
    WallTime(i64),
    /// It was cancelled and terminated.
    Cancelled,
    /// It could not be started, or its supervisor failed.
    Failed(String),
}

/// The supervision file of job `id` under the site's work directory.
pub fn file(workdir: &Path, id: JobId) -> PathBuf {
    workdir.join(".supervisors").join(format!("job-{id}"))
}

/// The outcome a supervisor recorded, if it has.
pub fn outcome(file: &Path) -> Option<Outcome> {
    record(file).end
}

/// Whether the supervisor of `file` is alive (it holds its lock).
pub fn alive(file: &Path) -> bool {
    let Ok(f) = std::fs::File::open(file) else {
        return false;
    };
    Flock::lock(f, FlockArg::LockExclusiveNonblock).is_err()
}

/// Whether the job of `file` may have started: a supervisor for it is
/// alive, or one recorded starting it or its end. An agent stopped between
/// writing the specification and its supervisor starting the job leaves
/// none of these, and the job is started afresh.
pub fn started(file: &Path) -> bool {
    // A supervisor is started only once the specification is written, so
    // any of these implies it.
    let r = record(file);
    r.job.is_some() || r.end.is_some() || alive(file)
}

/// Asks the supervisor of `file` to cancel its job (SIGTERM to it).
pub fn cancel(file: &Path) {
    if !alive(file) {
        return;
    }
    if let Some(pid) = record(file).supervisor {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
}

/// What the supervisor wrote to its supervision file so far.
#[derive(Debug, Default)]
struct Record {
    supervisor: Option<i32>,
    cgroup: Option<String>,
    job: Option<i32>,
    end: Option<Outcome>,
}

/// The lines of a supervision file as (tag, text).
fn tagged(text: &str) -> impl Iterator<Item = (&str, &str)> {
    text.lines().filter_map(|line| line.split_once(' '))
}

/// Reads the supervisor's record ([`Record`]); the specification, which
/// only the supervisor needs, is skipped unparsed.
fn record(file: &Path) -> Record {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut r = Record::default();
    for line in tagged(&text) {
        match line {
            ("supervisor", pid) => r.supervisor = pid.parse().ok(),
            ("cgroup", dirs) => r.cgroup = Some(dirs.to_string()),
            ("job", pid) => r.job = pid.parse().ok(),
            ("end", json) => r.end = serde_json::from_str(json).ok(),
            _ => {}
        }
    }
    r
}

/// After the supervisor of `file` died without recording an end (it was
/// killed too): stops whatever is left of the job, its whole cgroup where
/// it had one, else its process group, so nothing runs unsupervised.
/// Returns whether the job had been started.
pub fn stop_orphan(file: &Path) -> bool {
    let r = record(file);
    if let Some(dirs) = &r.cgroup {
        let cg = JobCgroup::from_paths(dirs);
        cg.kill_all();
        // Re-parented to init, which collects them.
        if cg.wait_empty(StdDuration::from_secs(5), || {}) {
            cg.remove();
        }
    }
    match r.job {
        Some(pid) => {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            true
        }
        None => false,
    }
}

/// Writes `spec` as the first line of `file` (made afresh, in a private
/// directory) and returns the command that starts its supervisor, detached
/// from the agent's process group so that it survives the agent; the caller
/// gives it the job's standard streams.
pub fn command(file: &Path, spec: &Spec) -> std::io::Result<tokio::process::Command> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(parent) = file.parent() {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)?;
    }
    // A directory of the layout before one file per job.
    if file.is_dir() {
        let _ = std::fs::remove_dir_all(file);
    }
    let line = format!("spec {}\n", serde_json::to_string(spec).map_err(std::io::Error::other)?);
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)?
        .write_all(line.as_bytes())?;
    let mut cmd = tokio::process::Command::new(supervisor_program()?);
    cmd.arg("supervise").arg(file).env_clear().process_group(0);
    Ok(cmd)
}

/// How the job ended, once its supervisor is gone: what it recorded; or,
/// when it died without a word (killed itself), whatever is left of the job
/// is stopped and the job ended as `cancelled` when the agent had signalled
/// the supervisor (which may have ended it before it recorded anything),
/// as failed otherwise.
pub fn ended(file: &Path, cancelled: bool) -> Outcome {
    if let Some(o) = outcome(file) {
        return o;
    }
    let started = stop_orphan(file);
    if cancelled {
        return Outcome::Cancelled;
    }
    Outcome::Failed(if started {
        "the job's supervisor was killed; what was left of the job was stopped".into()
    } else {
        "the job's supervisor ended before starting the job".into()
    })
}

/// The program that runs `supervise`: `BROKK_SUPERVISOR` when set (an
/// agent embedded in another program), else the small `brokk-supervise`
/// beside the agent's binary when it is there, else the agent's binary
/// itself (`brokk supervise` does the same, only slower to start).
fn supervisor_program() -> std::io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("BROKK_SUPERVISOR") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let small = exe.with_file_name("brokk-supervise");
    Ok(if small.is_file() { small } else { exe })
}

/// Waits until the supervisor of `file`, which this agent did not start
/// (it restarted since), is gone, and returns how the job ended ([`ended`]).
pub async fn wait(file: &Path) -> Outcome {
    // Its end is written before it lets go of the lock.
    while outcome(file).is_none() && alive(file) {
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    ended(file, false)
}

/// The supervisor's command line, `supervise FILE` (after the program's
/// name), run to its exit code; `None` for any other command line. Both
/// `brokk` and `brokk-supervise` start with it.
pub fn from_args(mut args: impl Iterator<Item = std::ffi::OsString>) -> Option<std::process::ExitCode> {
    match (args.next(), args.next(), args.next()) {
        (Some(cmd), Some(file), None) if cmd == "supervise" => Some(std::process::ExitCode::from(
            u8::try_from(main(Path::new(&file))).unwrap_or(1),
        )),
        _ => None,
    }
}

/// `brokk supervise FILE`: runs the job specified in `FILE` and records
/// its outcome there; the process exits 0 once the outcome is written. It
/// starts for every job, so it is plain: one thread, no runtime, waiting
/// with `poll` on the job's pidfd and a signalfd for the cancel.
pub fn main(file: &Path) -> i32 {
    let Ok(f) = std::fs::OpenOptions::new().append(true).open(file) else {
        return 2;
    };
    let Ok(mut held) = Flock::lock(f, FlockArg::LockExclusiveNonblock) else {
        return 2; // another supervisor has this job
    };
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let spec =
        tagged(&text).find_map(|(tag, json)| (tag == "spec").then(|| serde_json::from_str::<Spec>(json).ok())?);
    let outcome = match spec {
        Some(spec) => {
            supervise(&mut held, &spec).unwrap_or_else(|e| Outcome::Failed(format!("supervising the job: {e}")))
        }
        None => Outcome::Failed("reading the job's specification: it is missing or cut short".into()),
    };
    let line = format!("end {}\n", serde_json::to_string(&outcome).unwrap_or_default());
    match held.write_all(line.as_bytes()) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// Runs the job of `spec`, its pids appended to the held supervision file,
/// inside a cgroup of its own where one can be made and as the subreaper of
/// everything it starts; whatever of the job is left at its end, however it
/// ends, is killed ([`crate::containment`]).
fn supervise(lock: &mut std::fs::File, spec: &Spec) -> std::io::Result<Outcome> {
    // Each line in one write: a reader sees a line whole or not at all.
    lock.write_all(format!("supervisor {}\n", std::process::id()).as_bytes())?;
    containment::become_subreaper()?;
    let limits = Limits {
        processes: spec.processes,
        memory_bytes: spec.memory_bytes,
    };
    let mut cgroup = JobCgroup::create(&format!("brokk-job-{}", std::process::id()), limits);
    if let Some(cg) = &cgroup {
        lock.write_all(format!("cgroup {}\n", cg.paths()).as_bytes())?;
    }
    // Without a pids controller, the account's own process limit (root's
    // jobs, run without accounts, are exempt from it anyway).
    if spec.uid.is_some() && !cgroup.as_ref().is_some_and(JobCgroup::limits_processes) {
        limit(nix::sys::resource::Resource::RLIMIT_NPROC, Some(spec.processes))?;
    }
    // Jobs of users mapped to one account share its permissions: each sees
    // only its own sandbox. Without it, the sandbox's mode still keeps
    // other accounts out.
    if let (Some(_), Some(sandbox)) = (spec.uid, &spec.sandbox) {
        if let Err(e) = containment::hide_other_sandboxes(sandbox) {
            lock.write_all(format!("note other sandboxes not hidden: {e}\n").as_bytes())?;
        }
    }
    let outcome = run(lock, spec, &mut cgroup);
    match &cgroup {
        Some(cg) => {
            cg.kill_all();
            if cg.wait_empty(StdDuration::from_secs(5), containment::reap_children) {
                cg.remove();
            }
        }
        None => containment::kill_descendants(StdDuration::from_secs(5), containment::reap_children),
    }
    outcome
}

fn limit(resource: nix::sys::resource::Resource, value: Option<u64>) -> std::io::Result<()> {
    if let Some(v) = value {
        nix::sys::resource::setrlimit(resource, v, v).map_err(std::io::Error::from)?;
    }
    Ok(())
}

/// Why job `spec` could not be started, naming what was missing or
/// refused: the error alone (`No such file or directory`) says neither
/// the program nor the directory.
fn start_failure(spec: &Spec, e: &std::io::Error) -> String {
    let program = spec.program.display();
    match e.kind() {
        std::io::ErrorKind::NotFound if !spec.cwd.is_dir() => {
            format!(
                "starting the job: its working directory {} does not exist",
                spec.cwd.display()
            )
        }
        std::io::ErrorKind::NotFound => format!(
            "starting the job: no program {program} (in {}, or an interpreter its first line names)",
            spec.cwd.display()
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("starting the job: {program} may not be run by the job's account ({e})")
        }
        _ => format!("starting the job: {program}: {e}"),
    }
}

/// Starts the job (inside `cgroup`, which is dropped if it cannot be
/// entered) and waits for its exit, its wall time or a cancel.
fn run(lock: &mut std::fs::File, spec: &Spec, cgroup: &mut Option<JobCgroup>) -> std::io::Result<Outcome> {
    use nix::sys::signal::{SigSet, Signal as Sig};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use std::os::unix::process::CommandExt;
    // Limits are inherited by the job and everything it starts.
    limit(nix::sys::resource::Resource::RLIMIT_CPU, spec.cpu_seconds)?;
    limit(nix::sys::resource::Resource::RLIMIT_DATA, spec.data_bytes)?;
    limit(nix::sys::resource::Resource::RLIMIT_CORE, Some(0))?;
    let mut cmd = std::process::Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.cwd)
        .process_group(0);
    if let Some(gid) = spec.gid {
        cmd.gid(gid);
    }
    if let Some(uid) = spec.uid {
        cmd.uid(uid);
    }
    // The job inherits the cgroup from the supervisor, which steps in for the
    // start only: the job's account could not be moved in by the job itself.
    if let Some(cg) = cgroup.take() {
        match cg.enter() {
            Ok(()) => *cgroup = Some(cg),
            Err(_) => {
                let _ = cg.leave();
                cg.remove();
            }
        }
    }
    let spawned = cmd.spawn();
    if let Some(cg) = cgroup {
        cg.leave()?;
    }
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Ok(Outcome::Failed(start_failure(spec, &e))),
    };
    let pid = child.id();
    lock.write_all(format!("job {pid}\n").as_bytes())?;
    // SIGTERM, the cancel, is read from a signalfd from here on. Blocked only
    // now, so the job does not inherit the block; one arriving before ends
    // the supervisor itself, and the agent that sent it stops the job's
    // group and records the cancel.
    let mut term = SigSet::empty();
    term.add(Sig::SIGTERM);
    term.thread_block().map_err(std::io::Error::from)?;
    let signals =
        SignalFd::with_flags(&term, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC).map_err(std::io::Error::from)?;
    let exited = rustix::process::pidfd_open(
        rustix::process::Pid::from_child(&child),
        rustix::process::PidfdFlags::empty(),
    )?;
    let grace = StdDuration::from_secs(spec.grace);
    loop {
        let left = (spec.deadline - brokk_proto::wall_clock().0).max(0);
        let mut fds = [
            PollFd::new(&exited, PollFlags::IN),
            PollFd::new(&signals, PollFlags::IN),
        ];
        let timeout = Timespec {
            tv_sec: left,
            tv_nsec: 0,
        };
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if fds[0].revents().contains(PollFlags::IN) {
            let status = child.wait()?;
            return Ok(Outcome::Exited(status.code().unwrap_or(-1)));
        }
        if fds[1].revents().contains(PollFlags::IN) {
            terminate(&mut child, &exited, grace, cgroup.as_ref())?;
            return Ok(Outcome::Cancelled);
        }
        if brokk_proto::wall_clock().0 >= spec.deadline {
            terminate(&mut child, &exited, grace, cgroup.as_ref())?;
            return Ok(Outcome::WallTime(spec.wall));
        }
    }
}

/// SIGTERM to every process of the job (its cgroup, else the supervisor's
/// descendants), SIGKILL to its process group after `grace`; the caller
/// kills whatever else is left.
fn terminate(
    child: &mut std::process::Child,
    exited: &std::os::fd::OwnedFd,
    grace: StdDuration,
    cgroup: Option<&JobCgroup>,
) -> std::io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let group = Pid::from_raw(child.id() as i32);
    let _ = killpg(group, Signal::SIGTERM);
    match cgroup {
        Some(cg) => cg.signal(Signal::SIGTERM),
        None => {
            for p in containment::descendants(nix::unistd::getpid()) {
                let _ = nix::sys::signal::kill(p, Signal::SIGTERM);
            }
        }
    }
    let timeout = Timespec {
        tv_sec: grace.as_secs() as i64,
        tv_nsec: 0,
    };
    let _ = poll(&mut [PollFd::new(exited, PollFlags::IN)], Some(&timeout));
    // Whatever is left of the group, the leader included, goes now.
    let _ = killpg(group, Signal::SIGKILL);
    child.wait().map(|_| ())
}
