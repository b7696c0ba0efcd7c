//! The embedded backend: the job's process, started at its planned time
//! under its supervisor (`brokk supervise`), which enforces the wall time
//! and survives the agent.

use brokk_core::JobId;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use brokk_model::Job;

use crate::accounts::Account;
use crate::config::Config;
use crate::launch::{batch_environment, plain_name, start_when_due, wait_cancel, End, Launch, Progress};
use crate::supervisor;

/// Waits for the planned start and runs the process under its
/// supervisor, or attaches to the supervisor of a job that was
/// already running when the agent restarted.
pub(crate) async fn run<P: Progress>(site: &P, config: &Config, launch: Launch, sandbox: &Path) -> End {
    let Launch {
        id,
        job,
        controls: mut c,
        wall,
        started,
        account,
        ..
    } = launch;
    let sup = supervisor::file(&config.workdir, id);
    // Counted while it is followed, in either branch (`brokk_site_supervisors`).
    let mut _followed = None;
    let outcome = if started && supervisor::started(&sup) {
        _followed = Some(crate::metrics::Supervising::start());
        // Taken up again after a restart: the supervisor is followed
        // through its files.
        let waiting = supervisor::wait(&sup);
        tokio::pin!(waiting);
        tokio::select! {
            o = &mut waiting => o,
            _ = wait_cancel(&mut c.cancel) => {
                supervisor::cancel(&sup);
                waiting.await
            }
        }
    } else {
        // Wait for the planned start, which may move earlier, or a cancel.
        if !start_when_due(site, id, &mut c).await {
            return End::Cancelled;
        }
        let mut child = match start_supervised(config, id, &job, sandbox, wall, &sup, account).await {
            Ok(child) => child,
            Err(e) => return End::Failed(format!("starting the job: {e}")),
        };
        _followed = Some(crate::metrics::Supervising::start());
        // Its own child: its exit says at once that the outcome is on disk.
        let mut cancelled = false;
        loop {
            tokio::select! {
                _ = child.wait() => break,
                _ = wait_cancel(&mut c.cancel), if !cancelled => {
                    cancelled = true;
                    if let Some(pid) = child.id() {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
                    }
                }
            }
        }
        supervisor::ended(&sup, cancelled)
    };
    match outcome {
        supervisor::Outcome::Exited(code) => End::Exited(code),
        supervisor::Outcome::WallTime(wall) => End::Failed(format!("wall time of {wall} s exceeded; terminated")),
        supervisor::Outcome::Cancelled => End::Cancelled,
        supervisor::Outcome::Failed(why) => End::Failed(why),
    }
}

/// Opens the job's standard streams in its sandbox and starts its
/// supervisor (the agent's child), which starts the job in its own process
/// group.
async fn start_supervised(
    config: &Config,
    id: JobId,
    job: &Job,
    sandbox: &Path,
    wall: i64,
    sup: &Path,
    account: Option<Account>,
) -> std::io::Result<tokio::process::Child> {
    // A bare command (`seq`, a one-line script's) is looked up on the
    // job's PATH, as a shell would.
    let (program, args) = crate::launch::program_of(job, sandbox, account, |exe| {
        let path = job
            .environment
            .iter()
            .rev()
            .find(|v| v.name == "PATH")
            .map_or(crate::launch::DEFAULT_PATH, |v| v.value.as_str());
        crate::launch::on_path(exe, path).unwrap_or_else(|| PathBuf::from(exe))
    })?;
    // Relative, inside the sandbox: the agent refused anything else at submission.
    let cwd = match &job.working_directory {
        Some(d) => sandbox.join(d),
        None => sandbox.to_path_buf(),
    };
    // Nothing of the agent's own environment (its tokens, a database
    // password) reaches the job: only the batch variables and what it asked for.
    let mut env = batch_environment(id, &config.name, job, sandbox);
    env.extend(job.environment.iter().map(|v| (v.name.clone(), v.value.clone())));
    let file = |name: &Option<String>, out: bool| -> std::io::Result<Stdio> {
        match name {
            None => Ok(Stdio::null()),
            Some(n) => {
                let n = plain_name(n);
                Ok(if out {
                    crate::staging::create_owned(sandbox, &n, account)?.into()
                } else {
                    crate::sandbox::open_read_owned(sandbox, &n, account.map(|a| a.uid))?.into()
                })
            }
        }
    };
    let stdout = match &job.stdout {
        Some(n) => Some(crate::staging::create_owned(sandbox, &plain_name(n), account)?),
        None => None,
    };
    // One file for both streams (sbatch's default) is opened once, so the two
    // append to it rather than overwrite each other.
    let stderr = match (&job.stderr, &stdout) {
        (Some(e), Some(out)) if job.stdout.as_deref().map(plain_name) == Some(plain_name(e)) => out.try_clone()?.into(),
        _ => file(&job.stderr, true)?,
    };
    let stdio = [
        file(&job.stdin, false)?,
        stdout.map_or_else(Stdio::null, Into::into),
        stderr,
    ];
    let spec = supervisor::Spec {
        program: std::path::absolute(&program)?,
        args,
        env,
        cwd: std::path::absolute(cwd)?,
        uid: account.map(|a| a.uid),
        gid: account.map(|a| a.gid),
        deadline: brokk_proto::wall_clock().0 + wall.max(1),
        wall: wall.max(1),
        grace: config.kill_grace,
        cpu_seconds: job.cpu_time.map(|d| d.0.max(1) as u64),
        data_bytes: job
            .memory_per_cpu_mib()
            .or_else(|| job.memory_total_mib())
            .map(|m| m.saturating_mul(1 << 20)),
        processes: config.job_processes,
        memory_bytes: job.memory_total_mib().map(|m| m.saturating_mul(1 << 20)),
        sandbox: Some(std::path::absolute(sandbox)?),
    };
    let sup = sup.to_path_buf();
    let mut cmd = tokio::task::spawn_blocking(move || supervisor::command(&sup, &spec))
        .await
        .map_err(std::io::Error::other)??;
    let [stdin, stdout, stderr] = stdio;
    cmd.stdin(stdin).stdout(stdout).stderr(stderr).spawn()
}
