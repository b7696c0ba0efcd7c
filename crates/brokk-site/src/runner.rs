//! The embedded backend: one sandbox directory per job; stage-in from
//! `file://` and `http(s)://`; the process started at its planned time with
//! its arguments, environment and standard streams; wall time enforced with
//! SIGTERM and, after a grace period, SIGKILL to the job's process group;
//! stage-out to `file://` or by HTTP PUT; cancellable in every state. With
//! the Slurm backend, staging is the same and [`crate::slurm::exec`] runs
//! the job in between.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration as StdDuration;

use brokk_model::Job;
use brokk_proto::wire::JobPhase;
use tokio::sync::watch;

use crate::accounts::Account;
use crate::agent::{now, Agent, Launch};
use crate::supervisor;

/// How a job's run ended.
pub(crate) enum End {
    Exited(i32),
    Failed(String),
    Cancelled,
}

/// Runs job `id` to its end; every outcome is recorded by the agent.
/// `resumed` is true for jobs taken up again after the agent restarted.
pub async fn run(agent: Agent, id: u64, resumed: bool) {
    let Some(launch) = agent.launch(id, resumed).await else {
        return;
    };
    let sandbox = agent.sandbox(id);
    let end = drive(&agent, launch, &sandbox).await;
    let (phase, code, reason) = match end {
        End::Exited(code) => (JobPhase::Finished, Some(code), None),
        End::Failed(why) => (JobPhase::Failed, None, Some(why)),
        End::Cancelled => (JobPhase::Cancelled, None, Some("cancelled by its owner".to_string())),
    };
    if let Err(e) = agent.finish(id, phase, code, reason).await {
        tracing::error!(job = id, "recording the end of a job failed: {e}");
    }
}

/// Stages in, runs on the backend, stages out.
async fn drive(agent: &Agent, launch: Launch, sandbox: &Path) -> End {
    let id = launch.id;
    let outputs = launch.job.output_files.clone();
    let mut cancel = launch.controls.cancel.clone();
    let http = reqwest::Client::new();
    let allowed = agent.staging();
    let account = launch.account;
    // A job already handed to the resource manager, or started, was staged before.
    if launch.backend_id.is_none() && !launch.started {
        if let Err(e) = make_sandbox(sandbox, &launch.job, account).await {
            return End::Failed(format!("creating the sandbox: {e}"));
        }
        if !matches!(agent.set_phase(id, JobPhase::StagingIn).await, Ok(true)) {
            return End::Cancelled;
        }
        for f in &launch.job.input_files {
            let Some(source) = &f.source else { continue };
            let name = plain_name(&f.name);
            tokio::select! {
                r = crate::staging::stage_in(&http, allowed, source, sandbox, &name, account) => {
                    if let Err(e) = r {
                        return End::Failed(format!("staging in {}: {e}", f.name));
                    }
                }
                _ = wait_cancel(&mut cancel) => return End::Cancelled,
            }
        }
        if !matches!(agent.set_phase(id, JobPhase::Queued).await, Ok(true)) {
            return End::Cancelled;
        }
    }
    // A job in a hold its submitter commits itself starts only once it has.
    let mut committed = launch.controls.committed.clone();
    while !*committed.borrow() {
        tokio::select! {
            r = committed.changed() => if r.is_err() { return End::Cancelled },
            _ = wait_cancel(&mut cancel) => return End::Cancelled,
        }
    }
    let end = match agent.slurm() {
        Some(slurm) => crate::slurm::exec::execute(agent, slurm, launch, sandbox).await,
        None => run_locally(agent, launch, sandbox).await,
    };
    let End::Exited(code) = end else { return end };
    if !matches!(agent.set_phase(id, JobPhase::StagingOut).await, Ok(true)) {
        return End::Cancelled;
    }
    for f in &outputs {
        let Some(target) = &f.target else { continue };
        let name = plain_name(&f.name);
        tokio::select! {
            r = crate::staging::stage_out(&http, allowed, sandbox, &name, target, account) => {
                if let Err(e) = r {
                    return End::Failed(format!("staging out {}: {e}", f.name));
                }
            }
            _ = wait_cancel(&mut cancel) => return End::Cancelled,
        }
    }
    End::Exited(code)
}

/// The embedded backend: waits for the planned start and runs the process
/// under its supervisor, or attaches to the supervisor of a job that was
/// already running when the agent restarted.
async fn run_locally(agent: &Agent, launch: Launch, sandbox: &Path) -> End {
    let Launch {
        id,
        job,
        controls: mut c,
        wall,
        started,
        account,
        ..
    } = launch;
    let sup = supervisor::dir(&agent.config().workdir, id);
    let outcome = if started && supervisor::started(&sup) {
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
        loop {
            if *c.cancel.borrow() {
                return End::Cancelled;
            }
            let start = *c.start.borrow();
            let wait = start.0 - now().0;
            if wait <= 0 {
                break;
            }
            tokio::select! {
                _ = tokio::time::sleep(StdDuration::from_secs(wait as u64)) => {}
                _ = c.start.changed() => {}
                _ = c.cancel.changed() => {}
            }
        }
        // Recorded as running before the process exists: after a crash, a job
        // not recorded as running never started, so resuming it cannot run it twice.
        if !matches!(agent.set_phase(id, JobPhase::Running).await, Ok(true)) {
            return End::Cancelled;
        }
        let mut child = match start_supervised(agent, id, &job, sandbox, wall, &sup, account).await {
            Ok(child) => child,
            Err(e) => return End::Failed(format!("starting the job: {e}")),
        };
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

pub(crate) async fn wait_cancel(rx: &mut watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            // The sender is gone: never cancelled from now on.
            std::future::pending::<()>().await;
        }
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

/// Creates the job's sandbox, private to its account (0700, owned by it),
/// and the relative working directory inside it that the job asks for.
async fn make_sandbox(sandbox: &Path, job: &Job, account: Option<Account>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut b = tokio::fs::DirBuilder::new();
    b.mode(0o700);
    b.recursive(true);
    b.create(sandbox).await?;
    tokio::fs::set_permissions(sandbox, std::fs::Permissions::from_mode(0o700)).await?;
    let own = |p: &Path| match account {
        Some(a) => std::os::unix::fs::chown(p, Some(a.uid), Some(a.gid)),
        None => Ok(()),
    };
    own(sandbox)?;
    if let Some(dir) = &job.working_directory {
        let parts = crate::sandbox::components(dir).map_err(std::io::Error::other)?;
        let mut path = sandbox.to_path_buf();
        for p in parts {
            path.push(p);
            b.create(&path).await?;
            own(&path)?;
        }
    }
    Ok(())
}

/// The variables every job finds set, as batch systems set theirs.
pub(crate) fn batch_environment(id: u64, site: &str, job: &Job, sandbox: &Path) -> Vec<(String, String)> {
    let sandbox = std::path::absolute(sandbox).unwrap_or_else(|_| sandbox.to_path_buf());
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), sandbox.display().to_string()),
        ("TMPDIR".into(), sandbox.display().to_string()),
        ("BROKK_JOB_ID".into(), id.to_string()),
        ("BROKK_SITE".into(), site.to_string()),
        ("BROKK_CPUS".into(), job.cpus.unwrap_or(1).max(1).to_string()),
        ("BROKK_SANDBOX".into(), sandbox.display().to_string()),
    ]
}

/// Opens the job's standard streams in its sandbox and starts its
/// supervisor (the agent's child), which starts the job in its own process
/// group.
async fn start_supervised(
    agent: &Agent,
    id: u64,
    job: &Job,
    sandbox: &Path,
    wall: i64,
    sup: &Path,
    account: Option<Account>,
) -> std::io::Result<tokio::process::Child> {
    let (program, args) = match (&job.script, &job.executable) {
        (Some(script), _) => {
            let mut f = crate::staging::create_owned(sandbox, "job-script.sh", account)?;
            std::io::Write::write_all(&mut f, script.as_bytes())?;
            (
                PathBuf::from("/bin/sh"),
                vec![sandbox.join("job-script.sh").display().to_string()],
            )
        }
        (None, Some(exe)) => {
            let staged = sandbox.join(plain_name(exe));
            let program: PathBuf = if !exe.contains('/') && staged.exists() {
                make_executable(&staged).await?;
                staged
            } else {
                PathBuf::from(exe)
            };
            (program, job.arguments.clone())
        }
        (None, None) => return Err(std::io::Error::other("no executable")),
    };
    // Relative, inside the sandbox: the agent refused anything else at submission.
    let cwd = match &job.working_directory {
        Some(d) => sandbox.join(d),
        None => sandbox.to_path_buf(),
    };
    // Nothing of the agent's own environment (its tokens, a database
    // password) reaches the job: only the batch variables and what it asked for.
    let mut env = batch_environment(id, &agent.config().name, job, sandbox);
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
    let stdio = [
        file(&job.stdin, false)?,
        file(&job.stdout, true)?,
        file(&job.stderr, true)?,
    ];
    let spec = supervisor::Spec {
        program: std::path::absolute(&program)?,
        args,
        env,
        cwd: std::path::absolute(cwd)?,
        uid: account.map(|a| a.uid),
        gid: account.map(|a| a.gid),
        deadline: now().0 + wall.max(1),
        wall: wall.max(1),
        grace: agent.config().kill_grace,
        cpu_seconds: job.cpu_time.map(|d| d.0.max(1) as u64),
        data_bytes: job
            .memory_per_cpu_mib()
            .or_else(|| job.memory_total_mib())
            .map(|m| m.saturating_mul(1 << 20)),
    };
    let sup = sup.to_path_buf();
    let mut cmd = tokio::task::spawn_blocking(move || supervisor::command(&sup, &spec))
        .await
        .map_err(std::io::Error::other)??;
    let [stdin, stdout, stderr] = stdio;
    cmd.stdin(stdin).stdout(stdout).stderr(stderr).spawn()
}

pub(crate) async fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = tokio::fs::metadata(path).await?.permissions();
    perm.set_mode(perm.mode() | 0o755);
    tokio::fs::set_permissions(path, perm).await
}
