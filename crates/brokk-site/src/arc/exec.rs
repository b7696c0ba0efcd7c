//! Running one job on an ARC CE: written in xRSL by Brokk's writer (inputs
//! the runner staged into the sandbox are uploaded into the CE's session
//! directory; outputs, standard output and error are kept there), submitted,
//! its state read every `poll_ms` to its end, its session files fetched back
//! into the sandbox, and the CE's copy cleaned. Calls that fail because the
//! CE is down or slow are tried again at the next reading: a job is never
//! failed because its CE did not answer.

use std::path::Path;
use std::time::Duration as StdDuration;

use brokk_jdl::Format;
use brokk_model::{Duration, InputFile, Job, OutputFile};

use super::client::{ArcError, ArcState};
use super::ArcCe;
use crate::launch::{pause, plain_name, retrying, End, Launch, Progress};

/// Where the CE's id of a job is kept in its sandbox, so that an agent
/// restarted follows the job again instead of submitting it twice.
const ID_FILE: &str = ".brokk-arc-id";

/// The job as the CE is given it, the sandbox files to upload, and whether
/// the CE's data staging moves any of its files (it then acts with a proxy
/// delegated to it, as the job's owner).
fn prepare(arc: &ArcCe, launch: &Launch, sandbox: &Path) -> Result<(String, Vec<String>, bool), String> {
    let mut job: Job = launch.job.clone();
    job.earliest_start = None;
    job.deadline = None;
    job.reservation = None;
    job.working_directory = None;
    job.wall_time = Some(Duration(launch.wall));
    if let Some(q) = &arc.config.queue {
        job.queue = Some(q.clone());
    }
    // Inputs at a URL the CE's data staging fetches are left to it; the
    // rest were staged into the sandbox by the runner, and the CE gets them
    // from the agent's upload.
    let handed = |url: &Option<String>| url.as_deref().is_some_and(|u| arc.config.stages(u));
    let (fetched, staged): (Vec<InputFile>, Vec<InputFile>) =
        job.input_files.iter().cloned().partition(|f| handed(&f.source));
    let mut uploads: Vec<String> = staged.iter().map(|f| plain_name(&f.name)).collect();
    if let (None, Some(exe)) = (&job.script, &job.executable) {
        let fetched_exe = fetched.iter().any(|f| plain_name(&f.name) == plain_name(exe));
        if !exe.contains('/') && sandbox.join(plain_name(exe)).is_file() && !uploads.contains(&plain_name(exe)) {
            uploads.push(plain_name(exe));
        } else if fetched_exe {
            // Run from the session directory, where A-REX puts it.
            job.executable = Some(format!("./{}", plain_name(exe)));
        }
    }
    job.input_files = uploads
        .iter()
        .map(|name| InputFile {
            name: name.clone(),
            source: None,
            size: None,
            local: None,
        })
        .chain(fetched.into_iter().map(|f| InputFile {
            name: plain_name(&f.name),
            ..f
        }))
        .collect();
    // Outputs for a URL the CE's data staging delivers go there from the
    // CE; everything else the owner may fetch is kept on the CE until the
    // agent has fetched it (A-REX deletes what `outputfiles` does not list).
    let (delivered, kept): (Vec<OutputFile>, Vec<OutputFile>) =
        job.output_files.iter().cloned().partition(|f| handed(&f.target));
    let moves = job.input_files.iter().any(|f| f.source.is_some()) || !delivered.is_empty();
    let mut keep: Vec<String> = kept.iter().map(|f| plain_name(&f.name)).collect();
    keep.extend(job.stdout.iter().chain(job.stderr.iter()).map(|n| plain_name(n)));
    keep.sort();
    keep.dedup();
    job.output_files = keep
        .into_iter()
        .map(OutputFile::kept)
        .chain(delivered.into_iter().map(|f| OutputFile {
            name: plain_name(&f.name),
            ..f
        }))
        .collect();
    let mut xrsl = brokk_jdl::write(Format::Xrsl, std::slice::from_ref(&job))
        .map_err(|e| e.to_string())?
        .text;
    // A job in the owner's reservation runs in its Slurm twin, through the
    // runtime environment the CE offers for it.
    if let (Some(slurm), Some(r)) = (&arc.slurm, launch.claimed) {
        let bind = brokk_jdl::xrsl_relation(
            "runtimeenvironment",
            &[&arc.config.reservation_rte, &slurm.reservation_name(r.0)],
        );
        xrsl = format!(
            "{}
 {bind}
",
            xrsl.trim_end()
        );
    }
    Ok((xrsl, uploads, moves))
}

/// The interval between two readings of a job's state.
/// How many times a job the CE refuses is submitted before it fails.
const SUBMISSIONS: u32 = 3;

fn period(arc: &ArcCe) -> StdDuration {
    StdDuration::from_millis(arc.config.poll_ms)
}

/// Submits (or finds again, after a restart) and follows the job to its end.
pub(crate) async fn execute<P: Progress>(agent: &P, arc: &ArcCe, mut launch: Launch, sandbox: &Path) -> End {
    let known = std::fs::read_to_string(sandbox.join(ID_FILE))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let id = match known {
        Some(id) => id,
        None => match submit(arc, &mut launch, sandbox).await {
            Ok(id) => id,
            Err(end) => return end,
        },
    };
    agent.record_submitted(launch.id, 1).await;
    let end = follow(agent, arc, &mut launch, &id).await;
    if !matches!(end, End::Cancelled) {
        fetch_outputs(arc, &launch, &id, sandbox).await;
    }
    if let Err(e) = arc.client_for(&launch.user).clean(&id).await {
        tracing::warn!(job = %launch.id, "cleaning ARC job {id}: {e}");
    }
    end
}

/// Writes the job, submits it (retrying while the CE is unreachable), keeps
/// its id in the sandbox and uploads its inputs; a job whose inputs cannot
/// all be uploaded is killed on the CE.
async fn submit(arc: &ArcCe, launch: &mut Launch, sandbox: &Path) -> Result<String, End> {
    let (mut xrsl, uploads, moves) =
        prepare(arc, launch, sandbox).map_err(|e| End::Failed(format!("writing the xRSL description: {e}")))?;
    if moves {
        // The CE fetches and delivers as the job's owner: a GridFTP or SRM
        // server knows the owner, not the CE. A credential that cannot sign
        // a proxy (not RSA) leaves the CE to move what needs none, as before.
        let client = arc.client_for(&launch.user);
        match retrying(launch, period(arc), "delegating to the ARC CE", || client.delegate()).await {
            Ok(id) => {
                xrsl = format!(
                    "{}\n {}\n",
                    xrsl.trim_end(),
                    brokk_jdl::xrsl_relation("delegationid", &[&id])
                )
            }
            Err(None) => return Err(End::Cancelled),
            Err(Some(ArcError::Credentials(e))) => tracing::warn!(job = %launch.id, "no proxy delegated: {e}"),
            Err(Some(e)) => return Err(End::Failed(format!("delegating a proxy to the ARC CE: {e}"))),
        }
    }
    // A CE that read the job and refused it is asked again a few times (its
    // refusal may pass, as a full session directory does), then believed.
    let mut refusals = 0;
    let user = launch.user.clone();
    let id = loop {
        let client = arc.client_for(&user);
        match retrying(launch, period(arc), "ARC submission", || client.submit(&xrsl)).await {
            Ok(id) => break id,
            Err(None) => return Err(End::Cancelled),
            Err(Some(e @ ArcError::JobRefused { .. })) if refusals + 1 < SUBMISSIONS => {
                refusals += 1;
                tracing::warn!(job = %launch.id, "{e}; asking again ({refusals} of {})", SUBMISSIONS - 1);
                if !pause(launch, period(arc)).await {
                    return Err(End::Cancelled);
                }
            }
            Err(Some(e @ ArcError::JobRefused { .. })) => {
                return Err(End::Failed(format!("{e} (asked {SUBMISSIONS} times)")))
            }
            Err(Some(e)) => return Err(End::Failed(format!("the ARC CE refused the job: {e}"))),
        }
    };
    if let Err(e) = std::fs::write(sandbox.join(ID_FILE), &id) {
        tracing::warn!(job = %launch.id, "keeping ARC job id {id}: {e}");
    }
    if let Err(end) = upload(arc, launch, &id, sandbox, &uploads).await {
        let _ = arc.client_for(&launch.user).kill(&id).await;
        return Err(end);
    }
    Ok(id)
}

/// Uploads `names` from the sandbox into ARC job `id`'s session directory.
async fn upload(arc: &ArcCe, launch: &mut Launch, id: &str, sandbox: &Path, names: &[String]) -> Result<(), End> {
    let user = launch.user.clone();
    let client = arc.client_for(&user);
    for name in names {
        let bytes = tokio::fs::read(sandbox.join(name))
            .await
            .map_err(|e| End::Failed(format!("reading input {name}: {e}")))?;
        let what = format!("uploading {name} to ARC job {id}");
        retrying(launch, period(arc), &what, || client.put_file(id, name, bytes.clone()))
            .await
            .map_err(|e| match e {
                None => End::Cancelled,
                Some(e) => End::Failed(format!("uploading {name} to the ARC CE: {e}")),
            })?;
    }
    Ok(())
}

/// How the CE's final state ends the job for Brokk.
fn outcome(state: &ArcState, exit: Option<i32>, cancelled: bool, id: &str) -> End {
    match state.0.as_str() {
        _ if cancelled => End::Cancelled,
        "FINISHED" => End::Exited(exit.unwrap_or(0)),
        // A-REX counts a non-zero exit as a failure; the job did run.
        "FAILED" if exit.is_some_and(|c| c != 0) => End::Exited(exit.unwrap_or(1)),
        "KILLED" => End::Failed(format!("ARC job {id} was killed on the CE outside Brokk")),
        other => End::Failed(format!("ARC job {id} ended {other} on the CE")),
    }
}

/// Reads the job's state until it ends; kills it on the CE when the owner
/// cancels.
async fn follow<P: Progress>(agent: &P, arc: &ArcCe, launch: &mut Launch, id: &str) -> End {
    let mut running = launch.started;
    let mut cancelled = false;
    let mut kill_sent = false;
    loop {
        if cancelled && !kill_sent {
            match arc.client_for(&launch.user).kill(id).await {
                Ok(()) => kill_sent = true,
                // Already over, or gone: nothing left to kill.
                Err(ArcError::Refused { status, .. }) if status < 500 => return End::Cancelled,
                Err(e) => tracing::warn!(job = %launch.id, "killing ARC job {id}: {e}"),
            }
        }
        match arc.client_for(&launch.user).status(id).await {
            Ok(state) => {
                if !running && state.has_started() {
                    running = true;
                    agent.mark_running(launch.id, crate::agent::now()).await;
                }
                if state.is_final() {
                    let exit = match state.0.as_str() {
                        "FINISHED" | "FAILED" => arc.client_for(&launch.user).exit_code(id).await.ok().flatten(),
                        _ => None,
                    };
                    return outcome(&state, exit, cancelled, id);
                }
            }
            Err(ArcError::Refused { status: 404, .. }) if cancelled => return End::Cancelled,
            Err(ArcError::Refused { status: 404, message }) => {
                return End::Failed(format!("the ARC CE no longer knows job {id}: {message}"))
            }
            // Unreachable, slow or refusing for now: the job is not failed for it.
            Err(e) => tracing::warn!(job = %launch.id, "reading ARC job {id}: {e}"),
        }
        if cancelled {
            tokio::time::sleep(period(arc)).await;
        } else if !pause(launch, period(arc)).await {
            cancelled = true;
        }
    }
}

/// Copies the job's session files (top level) into its sandbox, owned by
/// the job's account, for the owner to fetch and for stage-out.
async fn fetch_outputs(arc: &ArcCe, launch: &Launch, id: &str, sandbox: &Path) {
    let names = match arc.client_for(&launch.user).list_files(id).await {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(job = %launch.id, "listing ARC job {id}'s files: {e}");
            return;
        }
    };
    for name in names {
        let plain = plain_name(&name);
        if plain != name || plain.starts_with('.') {
            continue;
        }
        match arc.client_for(&launch.user).get_file(id, &name).await {
            Ok(bytes) => {
                let written = crate::staging::create_owned(sandbox, &name, launch.account)
                    .and_then(|mut f| std::io::Write::write_all(&mut f, &bytes));
                if let Err(e) = written {
                    tracing::warn!(job = %launch.id, "keeping {name} of ARC job {id}: {e}");
                }
            }
            Err(e) => tracing::warn!(job = %launch.id, "fetching {name} of ARC job {id}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states_map_to_brokk_ends() {
        let s = |x: &str| ArcState(x.into());
        assert_eq!(outcome(&s("FINISHED"), Some(3), false, "a"), End::Exited(3));
        assert_eq!(outcome(&s("FINISHED"), None, false, "a"), End::Exited(0));
        assert_eq!(outcome(&s("KILLED"), None, true, "a"), End::Cancelled);
        assert!(matches!(outcome(&s("FAILED"), None, false, "a"), End::Failed(m) if m.contains("FAILED")));
        assert_eq!(outcome(&s("FAILED"), Some(3), false, "a"), End::Exited(3));
        assert!(matches!(outcome(&s("KILLED"), None, false, "a"), End::Failed(m) if m.contains("outside Brokk")));
    }
}
