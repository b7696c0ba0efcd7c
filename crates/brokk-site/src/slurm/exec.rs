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
use crate::launch::{make_executable, plain_name, wait_cancel, End, Launch, Progress};

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
    let mut f = crate::staging::create_owned(sandbox, "brokk-job.sbatch", launch.account)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let text = run_once(&written.text, &std::path::absolute(sandbox).map_err(|e| e.to_string())?);
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The batch script made to run once: a slurmctld killed before it saved a
/// job's completion starts the job again when it comes back (seen on the
/// testbed), so the script's first start leaves a mark in the sandbox (a
/// directory, made atomically) with its exit status, and a later start
/// exits with that status without running anything; output files are
/// appended to, not truncated, by a later start. Only shell scripts get the
/// guard: another interpreter's script is left as it is.
fn run_once(script: &str, sandbox: &Path) -> String {
    let shell = match script.lines().next() {
        Some(l) if l.starts_with("#!") => {
            let interp = l.trim_start_matches("#!").split_whitespace().last().unwrap_or("");
            ["sh", "bash", "dash", "ksh", "zsh"].iter().any(|s| interp.ends_with(s))
        }
        _ => true,
    };
    if !shell {
        return script.to_string();
    }
    let lines: Vec<&str> = script.lines().collect();
    // Slurm reads #SBATCH lines up to the first command.
    let body = lines
        .iter()
        .position(|l| !(l.trim().is_empty() || l.trim_start().starts_with('#')))
        .unwrap_or(lines.len());
    let mark = sh_quote(&sandbox.join(".brokk-ran").display().to_string());
    let mut out = String::new();
    for l in &lines[..body] {
        out.push_str(l);
        out.push('\n');
    }
    out.push_str("#SBATCH --open-mode=append\n");
    out.push_str(&format!(
        "# Brokk: run once, even when Slurm starts this job a second time.\n\
         BROKK_RAN={mark}\n\
         if ! mkdir \"$BROKK_RAN\" 2>/dev/null; then\n\
         \x20 if [ -f \"$BROKK_RAN/exit\" ]; then exit \"$(cat \"$BROKK_RAN/exit\")\"; fi\n\
         \x20 echo 'brokk: an earlier start of this job was interrupted; it is not run again' >&2\n\
         \x20 exit 1\n\
         fi\n\
         trap 'echo $? > \"$BROKK_RAN/exit\"' EXIT\n"
    ));
    for l in &lines[body..] {
        out.push_str(l);
        out.push('\n');
    }
    out
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
pub(crate) async fn execute<P: Progress>(agent: &P, slurm: &Slurm, mut launch: Launch, sandbox: &Path) -> End {
    let mut readings = slurm.subscribe();
    let mut slurm_id = launch.backend_id;
    if slurm_id.is_none() && launch.resumed {
        // The agent may have stopped between sbatch and its record.
        match slurm.cli.jobs_named(&slurm.job_name(launch.id)).await {
            Ok(rows) => slurm_id = rows.iter().filter_map(|r| r.id.parse().ok()).max(),
            Err(e) => slurm.note(&e),
        }
    }
    loop {
        let id = match slurm_id.take() {
            Some(id) => id,
            None => match submit(slurm, &mut launch, sandbox).await {
                Ok(id) => id,
                Err(end) => return end,
            },
        };
        agent.record_submitted(launch.id, id).await;
        match follow(agent, slurm, &mut launch, id, &mut readings).await {
            Followed::End(end) => return end,
            Followed::Lost => match ran_mark(sandbox) {
                // Slurm lost the job: its sandbox tells whether it ran.
                Mark::Exited(code) => return End::Exited(code),
                Mark::Interrupted => {
                    return End::Failed(format!(
                        "Slurm lost job {id} (its controller restarted without it) after it had started"
                    ))
                }
                Mark::None => tracing::warn!(
                    job = %launch.id,
                    "Slurm lost job {id} before it started; submitting again"
                ),
            },
        }
    }
}

/// What the run-once mark in a sandbox says.
enum Mark {
    /// The job ran and exited with this status.
    Exited(i32),
    /// It started and did not finish.
    Interrupted,
    /// It never started.
    None,
}

fn ran_mark(sandbox: &Path) -> Mark {
    let dir = sandbox.join(".brokk-ran");
    match std::fs::read_to_string(dir.join("exit")) {
        Ok(code) => code.trim().parse().map_or(Mark::Interrupted, Mark::Exited),
        Err(_) if dir.is_dir() => Mark::Interrupted,
        Err(_) => Mark::None,
    }
}

/// How following a Slurm job ended.
enum Followed {
    /// With Slurm's final record (or a cancel).
    End(End),
    /// Slurm no longer knows the job.
    Lost,
}

/// Writes the batch script and submits it, retrying while slurmctld does not
/// answer; the job's Slurm id, or how it ended without one.
async fn submit(slurm: &Slurm, launch: &mut Launch, sandbox: &Path) -> Result<u64, End> {
    let script = prepare(slurm, launch, sandbox)
        .await
        .map_err(|e| End::Failed(format!("writing the batch script: {e}")))?;
    loop {
        if *launch.controls.cancel.borrow() {
            return Err(End::Cancelled);
        }
        let submitted = match slurm.submitters.acquire().await {
            Ok(_slot) => {
                let account = launch.account.map(|a| (a.uid, a.gid));
                slurm.cli.sbatch(&script, account).await
            }
            Err(_) => Err(SlurmError::Unavailable("the agent is stopping".into())),
        };
        match submitted {
            Ok(id) => return Ok(id),
            Err(SlurmError::Refused(m)) => return Err(End::Failed(format!("sbatch refused the job: {m}"))),
            Err(e) => {
                slurm.note(&e);
                tracing::warn!(job = %launch.id, "sbatch: {e}; retrying");
                if !pause(slurm, &mut launch.controls.cancel).await {
                    return Err(End::Cancelled);
                }
            }
        }
    }
}

/// Follows Slurm job `slurm_id` through the queue readings to its end.
async fn follow<P: Progress>(
    agent: &P,
    slurm: &Slurm,
    launch: &mut Launch,
    slurm_id: u64,
    readings: &mut watch::Receiver<std::sync::Arc<super::Snapshot>>,
) -> Followed {
    let name = slurm.job_name(launch.id);
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
                    tracing::warn!(job = %launch.id, "scancel {slurm_id}: {m}");
                    cancel_sent = true;
                }
                Err(e) => slurm.note(&e),
            }
        }
        if let Some(end) = slurm.take_ended(slurm_id, &name) {
            break end;
        }
        let snap = readings.borrow_and_update().clone();
        if snap.reading > first {
            match snap.jobs.get(&slurm_id).filter(|row| row.name == name) {
                Some(row) => {
                    missing = 0;
                    if let (false, false, Some(start)) = (running, row.state == "PENDING", row.start) {
                        running = true;
                        agent.mark_running(launch.id, start).await;
                    }
                }
                None => missing += 1,
            }
        }
        // Gone from the queue (which lists unfinished jobs only) and not in
        // the completion log: ask slurmctld for the job's record.
        if missing >= MISSING_READINGS {
            // Another job under the same id is no record of ours.
            match slurm.cli.show_job(slurm_id).await.map(|e| e.filter(|e| e.name == name)) {
                Ok(Some(end)) if is_final(&end.state) => break end,
                Ok(Some(_)) => missing = 0,
                Ok(None) => match slurm.take_ended(slurm_id, &name) {
                    Some(end) => break end,
                    None if cancelled => return Followed::End(End::Cancelled),
                    None => return Followed::Lost,
                },
                Err(e) => slurm.note(&e),
            }
        }
        tokio::select! {
            r = readings.changed() => {
                if r.is_err() {
                    return Followed::End(End::Failed("the Slurm poller stopped".into()));
                }
            }
            _ = wait_cancel(&mut launch.controls.cancel), if !cancelled => cancelled = true,
        }
    };
    // A job that ran between two readings was never seen running: its start
    // comes from Slurm's final record.
    if let (false, Some(start)) = (running, end.start) {
        agent.mark_running(launch.id, start).await;
    }
    Followed::End(outcome(&end, cancelled, launch.wall))
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

#[cfg(test)]
mod run_once_tests {
    use super::*;

    fn run(script: &str, dir: &Path) -> (i32, String) {
        let path = dir.join("s.sh");
        std::fs::write(&path, run_once(script, dir)).unwrap();
        let o = std::process::Command::new("/bin/sh")
            .arg(&path)
            .current_dir(dir)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    }

    #[test]
    fn a_batch_script_runs_once_and_a_second_start_repeats_its_status() {
        let dir = std::env::temp_dir().join(format!("brokk-run-once-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = "#!/bin/sh\n#SBATCH --time=1\n\necho ran\nexit 3\n";
        assert_eq!(run(script, &dir), (3, "ran\n".into()));
        assert_eq!(run(script, &dir), (3, String::new()));
        let text = run_once(script, &dir);
        let header = text.find("--open-mode=append").unwrap();
        assert!(header < text.find("echo ran").unwrap() && header < text.find("BROKK_RAN=").unwrap());
        // Another interpreter's script is left alone.
        let py = "#!/usr/bin/env python3\nprint('hi')\n";
        assert_eq!(run_once(py, &dir), py);
    }
}
