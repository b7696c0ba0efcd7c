//! One job's life on the site: its sandbox, stage-in from `file://` and
//! `http(s)://`, the run on the site's backend (see [`crate::backend`]),
//! stage-out to `file://` or by HTTP PUT; cancellable in every state, and
//! every outcome recorded by the agent.

use brokk_core::JobId;
use std::path::Path;

use brokk_model::{Job, JobPhase};

use crate::accounts::Account;
use crate::agent::Agent;
use crate::launch::{plain_name, wait_cancel, End, Launch};

/// Runs job `id` to its end; every outcome is recorded by the agent.
/// `resumed` is true for jobs taken up again after the agent restarted.
pub async fn run(agent: Agent, id: JobId, resumed: bool) {
    let Some(launch) = agent.launch(id, resumed).await else {
        return;
    };
    let sandbox = agent.sandbox(id);
    let end = drive(&agent, launch, &sandbox).await;
    let (phase, code, reason) = match end {
        End::Exited(0) => (JobPhase::Finished, Some(0), None),
        // As sbatch and condor_q users read it: a non-zero exit is a failure,
        // with its code.
        End::Exited(code) => (JobPhase::Failed, Some(code), Some(format!("exited with code {code}"))),
        End::Failed(why) => (JobPhase::Failed, None, Some(why)),
        End::Cancelled => (JobPhase::Cancelled, None, Some("cancelled by its owner".to_string())),
    };
    if let Err(e) = agent.finish(id, phase, code, reason).await {
        tracing::error!(job = %id, "recording the end of a job failed: {e}");
    }
}

/// Stages in, runs on the backend, stages out.
async fn drive(agent: &Agent, mut launch: Launch, sandbox: &Path) -> End {
    let id = launch.id;
    // Only a language that defines GRAM's substitutions gets them: a `$(`
    // in a JSON or Slurm job is its own text.
    if launch.job.site_variables {
        let values = crate::launch::site_values(&launch, &agent.config().name, sandbox);
        brokk_jdl::assign::fill_at_site(&mut launch.job, &values);
    }
    // `directory = $(SCRATCH_DIRECTORY)` names the sandbox itself: the job's
    // working directory stays relative to it.
    if let (Some(dir), Ok(root)) = (&launch.job.working_directory, std::path::absolute(sandbox)) {
        if let Ok(rel) = Path::new(dir).strip_prefix(&root) {
            let rel = rel.display().to_string();
            launch.job.working_directory = (!rel.is_empty()).then_some(rel);
        }
    }
    let outputs = launch.job.output_files.clone();
    let mut cancel = launch.controls.cancel.clone();
    // Made only when a file moves over HTTP: building a client is not free.
    let allowed = agent.staging();
    let http = std::sync::LazyLock::new(|| allowed.client());
    let (user, account) = (launch.user.clone(), launch.account);
    // A job already handed to the resource manager, or started, was staged
    // before; a backend that runs nothing needs no sandbox.
    if launch.backend_id.is_none() && !launch.started && agent.backend().runs_jobs() {
        if let Err(e) = make_sandbox(sandbox, &launch.job, account).await {
            return End::Failed(format!("creating the sandbox: {e}"));
        }
        if !matches!(agent.set_phase(id, JobPhase::StagingIn).await, Ok(true)) {
            return End::Cancelled;
        }
        for f in &launch.job.input_files {
            // What the resource manager fetches itself is left to it.
            let Some(source) = f.source.as_ref().filter(|s| !agent.backend().stages(s)) else {
                continue;
            };
            let name = plain_name(&f.name);
            let upload = crate::uploads::digest_of(source).map(|sha| agent.uploads().path(&launch.owner, sha));
            let staged = async {
                match upload {
                    Some(path) => {
                        let path = path.map_err(|e| e.to_string())?;
                        crate::staging::copy_in(path, sandbox, &name, account).await
                    }
                    None => crate::staging::stage_in(&http, allowed, source, sandbox, &name, (&user, account)).await,
                }
            };
            tokio::select! {
                r = staged => {
                    if let Err(e) = r {
                        return End::Failed(format!("staging in {}: {e}", f.name));
                    }
                }
                _ = wait_cancel(&mut cancel) => return End::Cancelled,
            }
        }
        // A container job becomes the podman command that runs it, for
        // whichever backend starts it; one in the Slurm cluster's own
        // bundles is given to sbatch as it is (slurm::bundle).
        let config = agent.config();
        let bundled = |image: &str| config.slurm.as_ref().is_some_and(|s| s.runs_bundle(image));
        let podman = match (&config.containers, &launch.job.container_image) {
            (Some(c), Some(image)) if !bundled(image) => Some(c),
            _ => None,
        };
        if let Some(c) = podman {
            let batch = crate::launch::batch_environment(id, &config.name, &launch.job, sandbox);
            if let Err(e) = crate::container::into_podman(c, &mut launch.job, batch, sandbox, account) {
                return End::Failed(format!("preparing the container: {e}"));
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
    let end = agent.backend().execute(agent, agent.config(), launch, sandbox).await;
    let End::Exited(code) = end else { return end };
    if !matches!(agent.set_phase(id, JobPhase::StagingOut).await, Ok(true)) {
        return End::Cancelled;
    }
    for f in &outputs {
        let Some(target) = f.target.as_ref().filter(|t| !agent.backend().stages(t)) else {
            continue;
        };
        let name = plain_name(&f.name);
        tokio::select! {
            r = crate::staging::stage_out(&http, allowed, sandbox, &name, target, (&user, account)) => {
                if let Err(e) = r {
                    return End::Failed(format!("staging out {}: {e}", f.name));
                }
            }
            _ = wait_cancel(&mut cancel) => return End::Cancelled,
        }
    }
    End::Exited(code)
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
