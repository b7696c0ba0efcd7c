//! Running one job on Slurm: the job is written as a batch script (Brokk's
//! Slurm writer) and given to `sbatch` with the options only the agent knows
//! (job name, working directory, reservation, partition); the queue readings
//! then follow it to its end, which comes from the completion log or
//! `scontrol show job`. Until slurmctld answers, submission and cancellation
//! are retried; nothing is lost while it is down.

use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use brokk_jdl::Format;
use brokk_model::{Duration, Job};
use tokio::sync::watch;

use super::cli::{JobEnd, SlurmError};
use super::{is_final, Slurm};
use crate::agent::{Agent, Launch};
use crate::runner::{make_executable, plain_name, wait_cancel, End};

/// Readings a submitted job may be missing from the queue before the agent
/// asks slurmctld about it directly.
const MISSING_READINGS: u32 = 3;

/// Writes the batch script for the job into the sandbox. What the agent
/// decides (the Slurm job name, the working directory, the reservation, the
/// partition, the wall time it planned with) is set on the job, so Brokk's
/// Slurm writer says it like everything else; begin and deadline are the
/// planner's business, not Slurm's.
async fn prepare(slurm: &Slurm, launch: &Launch, sandbox: &Path) -> Result<PathBuf, String> {
    let mut job: Job = launch.job.clone();
    job.name = Some(slurm.job_name(launch.id));
    job.reservation = launch.claimed.map(|r| slurm.reservation_name(r.0));
    job.earliest_start = None;
    job.deadline = None;
    job.wall_time = Some(Duration(launch.wall));
    if let Some(p) = &slurm.config.partition {
        job.queue = Some(p.clone());
    }
    // Absolute, inside the sandbox (the agent refused any other at
    // submission): sbatch would read a relative one against its own directory.
    let dir = std::path::absolute(sandbox).map_err(|e| format!("{}: {e}", sandbox.display()))?;
    let dir = match &job.working_directory {
        Some(rel) => dir.join(rel),
        None => dir,
    };
    job.working_directory = Some(dir.display().to_string());
    if let (None, Some(exe)) = (&job.script, &job.executable) {
        // A program staged into the sandbox runs from there.
        let staged = sandbox.join(plain_name(exe));
        if !exe.contains('/') && staged.exists() {
            make_executable(&staged)
                .await
                .map_err(|e| format!("{}: {e}", staged.display()))?;
            job.executable = Some(format!("./{}", plain_name(exe)));
        }
    }
    let written = brokk_jdl::write(Format::Slurm, std::slice::from_ref(&job)).map_err(|e| e.to_string())?;
    let path = sandbox.join("brokk-job.sbatch");
    let account = launch.account.clone().unwrap_or(None);
    let mut f = crate::staging::create_owned(sandbox, "brokk-job.sbatch", account)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    std::io::Write::write_all(&mut f, written.text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// How Slurm's final record ends the job for Brokk.
fn outcome(end: &JobEnd, cancelled: bool, wall: i64) -> End {
    match end.state.as_str() {
        _ if cancelled => End::Cancelled,
        "COMPLETED" | "FAILED" => End::Exited(end.exit_code.unwrap_or(-1)),
        "TIMEOUT" => End::Failed(format!(
            "wall time of {wall} s exceeded; Slurm ended job {} (TIMEOUT)",
            end.id
        )),
        "CANCELLED" => End::Failed(format!("Slurm job {} was cancelled outside Brokk", end.id)),
        other => End::Failed(format!(
            "Slurm job {} ended {other}{}",
            end.id,
            if end.reason.is_empty() || end.reason == "None" {
                String::new()
            } else {
                format!(" ({})", end.reason)
            }
        )),
    }
}

/// Waits one poll interval or until cancelled; false when cancelled.
async fn pause(slurm: &Slurm, cancel: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(StdDuration::from_millis(slurm.config.poll_ms)) => true,
        _ = wait_cancel(cancel) => false,
    }
}

/// Submits (or finds again, after a restart) and follows the job to its end.
pub(crate) async fn execute(agent: &Agent, slurm: &Slurm, mut launch: Launch, sandbox: &Path) -> End {
    let mut readings = slurm.subscribe();
    let mut slurm_id = launch.backend_id;
    if slurm_id.is_none() && launch.resumed {
        // The agent may have stopped between sbatch and its record.
        match slurm.cli.jobs_named(&slurm.job_name(launch.id)).await {
            Ok(rows) => slurm_id = rows.iter().filter_map(|r| r.id.parse().ok()).max(),
            Err(e) => slurm.note(&e),
        }
    }
    let slurm_id = match slurm_id {
        Some(id) => id,
        None => {
            let script = match prepare(slurm, &launch, sandbox).await {
                Ok(p) => p,
                Err(e) => return End::Failed(format!("writing the batch script: {e}")),
            };
            loop {
                if *launch.controls.cancel.borrow() {
                    return End::Cancelled;
                }
                let submitted = match slurm.submitters.acquire().await {
                    Ok(_slot) => {
                        let account = launch.account.clone().unwrap_or(None).map(|a| (a.uid, a.gid));
                        slurm.cli.sbatch(&script, account).await
                    }
                    Err(_) => Err(SlurmError::Unavailable("the agent is stopping".into())),
                };
                match submitted {
                    Ok(id) => break id,
                    Err(SlurmError::Refused(m)) => return End::Failed(format!("sbatch refused the job: {m}")),
                    Err(e) => {
                        slurm.note(&e);
                        tracing::warn!(job = launch.id, "sbatch: {e}; retrying");
                        if !pause(slurm, &mut launch.controls.cancel).await {
                            return End::Cancelled;
                        }
                    }
                }
            }
        }
    };
    if let Err(e) = agent.record_submitted(launch.id, slurm_id).await {
        tracing::error!(job = launch.id, "recording Slurm job {slurm_id}: {e}");
    }
    follow(agent, slurm, &mut launch, slurm_id, &mut readings).await
}

/// Follows Slurm job `slurm_id` through the queue readings to its end.
async fn follow(
    agent: &Agent,
    slurm: &Slurm,
    launch: &mut Launch,
    slurm_id: u64,
    readings: &mut watch::Receiver<std::sync::Arc<super::Snapshot>>,
) -> End {
    let mut cancelled = false;
    let mut cancel_sent = false;
    let mut running = launch.started;
    let mut missing = 0u32;
    let first = readings.borrow().reading;
    let end = loop {
        if cancelled && !cancel_sent {
            match slurm.cli.cancel(slurm_id).await {
                Ok(()) => cancel_sent = true,
                Err(SlurmError::Refused(m)) => {
                    tracing::warn!(job = launch.id, "scancel {slurm_id}: {m}");
                    cancel_sent = true;
                }
                Err(e) => slurm.note(&e),
            }
        }
        if let Some(end) = slurm.take_ended(slurm_id) {
            break end;
        }
        let snap = readings.borrow_and_update().clone();
        if snap.reading > first {
            match snap.jobs.get(&slurm_id) {
                Some(row) => {
                    missing = 0;
                    if let (false, false, Some(start)) = (running, row.state == "PENDING", row.start) {
                        running = true;
                        record_start(agent, launch.id, start).await;
                    }
                }
                None => missing += 1,
            }
        }
        // Gone from the queue (which lists unfinished jobs only) and not in
        // the completion log: ask slurmctld for the job's record.
        if missing >= MISSING_READINGS {
            match slurm.cli.show_job(slurm_id).await {
                Ok(Some(end)) if is_final(&end.state) => break end,
                Ok(Some(_)) => missing = 0,
                Ok(None) => match slurm.take_ended(slurm_id) {
                    Some(end) => break end,
                    None if cancelled => return End::Cancelled,
                    None => return End::Failed(format!("Slurm has no record of job {slurm_id}")),
                },
                Err(e) => slurm.note(&e),
            }
        }
        tokio::select! {
            r = readings.changed() => {
                if r.is_err() {
                    return End::Failed("the Slurm poller stopped".into());
                }
            }
            _ = wait_cancel(&mut launch.controls.cancel), if !cancelled => cancelled = true,
        }
    };
    // A job that ran between two readings was never seen running: its start
    // comes from Slurm's final record.
    if let (false, Some(start)) = (running, end.start) {
        record_start(agent, launch.id, start).await;
    }
    outcome(&end, cancelled, launch.wall)
}

async fn record_start(agent: &Agent, id: u64, start: brokk_model::Time) {
    if let Err(e) = agent.mark_running(id, start).await {
        tracing::error!(job = id, "recording the start: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states_map_to_brokk_ends() {
        let end = |state: &str, code| JobEnd {
            id: 7,
            name: "brokk-a-1".into(),
            state: state.into(),
            exit_code: code,
            start: None,
            reason: "None".into(),
        };
        assert!(matches!(outcome(&end("COMPLETED", Some(0)), false, 60), End::Exited(0)));
        assert!(matches!(outcome(&end("FAILED", Some(3)), false, 60), End::Exited(3)));
        assert!(matches!(outcome(&end("CANCELLED", None), true, 60), End::Cancelled));
        match outcome(&end("TIMEOUT", None), false, 60) {
            End::Failed(m) => assert!(m.contains("wall time of 60 s"), "{m}"),
            _ => panic!("TIMEOUT must fail the job"),
        }
        match outcome(&end("NODE_FAIL", None), false, 60) {
            End::Failed(m) => assert_eq!(m, "Slurm job 7 ended NODE_FAIL"),
            _ => panic!("NODE_FAIL must fail the job"),
        }
    }
}
