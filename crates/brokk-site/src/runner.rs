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
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::agent::{now, Agent, Launch};

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
    // A job already handed to the resource manager was staged before.
    if launch.backend_id.is_none() {
        if let Err(e) = tokio::fs::create_dir_all(sandbox).await {
            return End::Failed(format!("creating the sandbox: {e}"));
        }
        if !matches!(agent.set_phase(id, JobPhase::StagingIn).await, Ok(true)) {
            return End::Cancelled;
        }
        for f in &launch.job.input_files {
            let Some(source) = &f.source else { continue };
            let to = sandbox.join(plain_name(&f.name));
            tokio::select! {
                r = stage_in(&http, source, &to) => {
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
        let from = sandbox.join(plain_name(&f.name));
        tokio::select! {
            r = stage_out(&http, &from, target) => {
                if let Err(e) = r {
                    return End::Failed(format!("staging out {}: {e}", f.name));
                }
            }
            _ = wait_cancel(&mut cancel) => return End::Cancelled,
        }
    }
    End::Exited(code)
}

/// The embedded backend: waits for the planned start and runs the process.
async fn run_locally(agent: &Agent, launch: Launch, sandbox: &Path) -> End {
    let Launch {
        id,
        job,
        controls: mut c,
        wall,
        ..
    } = launch;
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
    let mut child = match spawn(&job, sandbox).await {
        Ok(child) => child,
        Err(e) => return End::Failed(format!("starting the job: {e}")),
    };
    let grace = StdDuration::from_secs(agent.config().kill_grace);
    let wall = wall.max(1) as u64;
    let status = tokio::select! {
        s = child.wait() => s,
        _ = tokio::time::sleep(StdDuration::from_secs(wall)) => {
            terminate(&mut child, grace).await;
            return End::Failed(format!("wall time of {wall} s exceeded; terminated"));
        }
        _ = wait_cancel(&mut c.cancel) => {
            terminate(&mut child, grace).await;
            return End::Cancelled;
        }
    };
    match status {
        Ok(s) => End::Exited(s.code().unwrap_or(-1)),
        Err(e) => End::Failed(format!("waiting for the job: {e}")),
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

async fn stage_in(http: &reqwest::Client, source: &str, to: &Path) -> Result<(), String> {
    if let Some(path) = source.strip_prefix("file://") {
        tokio::fs::copy(path, to).await.map_err(|e| format!("{source}: {e}"))?;
        return Ok(());
    }
    if source.starts_with("http://") || source.starts_with("https://") {
        let resp = http.get(source).send().await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{source}: HTTP {}", resp.status()));
        }
        let bytes = resp.bytes().await.map_err(|e| e.to_string())?;
        tokio::fs::write(to, &bytes).await.map_err(|e| e.to_string())?;
        return Ok(());
    }
    Err(format!("{source}: only file:// and http(s):// sources are supported"))
}

async fn stage_out(http: &reqwest::Client, from: &Path, target: &str) -> Result<(), String> {
    let bytes = tokio::fs::read(from)
        .await
        .map_err(|e| format!("{}: {e}", from.display()))?;
    if let Some(path) = target.strip_prefix("file://") {
        if let Some(dir) = Path::new(path).parent() {
            tokio::fs::create_dir_all(dir).await.map_err(|e| e.to_string())?;
        }
        tokio::fs::write(path, &bytes)
            .await
            .map_err(|e| format!("{target}: {e}"))?;
        return Ok(());
    }
    if target.starts_with("http://") || target.starts_with("https://") {
        let resp = http.put(target).body(bytes).send().await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("{target}: HTTP {}", resp.status()));
        }
        return Ok(());
    }
    Err(format!("{target}: only file:// and http(s):// targets are supported"))
}

/// Starts the job's process in its own process group, in the sandbox.
async fn spawn(job: &Job, sandbox: &Path) -> std::io::Result<Child> {
    let mut cmd = match (&job.script, &job.executable) {
        (Some(script), _) => {
            let path = sandbox.join("job-script.sh");
            tokio::fs::write(&path, script).await?;
            let mut c = Command::new("/bin/sh");
            c.arg(path);
            c
        }
        (None, Some(exe)) => {
            let staged = sandbox.join(plain_name(exe));
            let program: PathBuf = if !exe.contains('/') && staged.exists() {
                make_executable(&staged).await?;
                staged
            } else {
                PathBuf::from(exe)
            };
            let mut c = Command::new(program);
            c.args(&job.arguments);
            c
        }
        (None, None) => return Err(std::io::Error::other("no executable")),
    };
    let dir = match &job.working_directory {
        Some(d) if Path::new(d).is_absolute() => PathBuf::from(d),
        _ => sandbox.to_path_buf(),
    };
    cmd.current_dir(dir).process_group(0).kill_on_drop(true);
    for v in &job.environment {
        cmd.env(&v.name, &v.value);
    }
    let file = |name: &Option<String>, out: bool| -> std::io::Result<Stdio> {
        match name {
            None => Ok(Stdio::null()),
            Some(n) => {
                let p = sandbox.join(plain_name(n));
                Ok(if out {
                    std::fs::File::create(p)?.into()
                } else {
                    std::fs::File::open(p)?.into()
                })
            }
        }
    };
    cmd.stdin(file(&job.stdin, false)?);
    cmd.stdout(file(&job.stdout, true)?);
    cmd.stderr(file(&job.stderr, true)?);
    cmd.spawn()
}

pub(crate) async fn make_executable(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = tokio::fs::metadata(path).await?.permissions();
    perm.set_mode(perm.mode() | 0o755);
    tokio::fs::set_permissions(path, perm).await
}

/// SIGTERM to the process group, SIGKILL after `grace` if it is still there.
async fn terminate(child: &mut Child, grace: StdDuration) {
    if let Some(pid) = child.id() {
        let group = Pid::from_raw(pid as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let _ = tokio::time::timeout(grace, child.wait()).await;
        // Whatever is left of the group, the leader included, goes now.
        let _ = killpg(group, Signal::SIGKILL);
    }
    let _ = child.wait().await;
}
