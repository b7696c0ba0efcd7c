//! Running one job on Slurm: the job is written as a batch script (Brokk's
//! Slurm writer) and given to `sbatch` on its standard input, with every
//! option the agent owns (job name, processors, wall time, working
//! directory, output files, reservation, partition) on the command line as
//! well, where it wins over anything a script says; the queue readings then
//! follow the Slurm job by the id `sbatch` returned (a job can rename
//! itself; its id it cannot change) to its end, which slurmctld's own
//! structured record gives. Until slurmctld answers, submission and
//! cancellation are retried; nothing is lost while it is down.

use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use brokk_jdl::Format;
use brokk_model::{Duration, Job, Time};
use tokio::sync::watch;

use super::cli::{JobEnd, SlurmError};
use super::{is_final, Slurm};
use crate::launch::{make_executable, plain_name, wait_cancel, End, Launch, Progress};

/// How many times a job Slurm lost before it started is submitted again.
const RESUBMISSIONS: u32 = 2;

/// The agent's own directory for job `sandbox`'s Slurm side, beside the
/// sandboxes (`WORKDIR/.slurm/job-ID`): a copy of the batch script as
/// given to sbatch, and the run-once mark. The job cannot replace anything
/// the agent put there (made fresh each time, never through a link); with
/// an account, the directory is sticky and unlistable, so the job can add
/// its mark and touch nothing else.
fn control_dir(sandbox: &Path, account: Option<crate::accounts::Account>) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let absolute = std::path::absolute(sandbox)?;
    let (Some(workdir), Some(name)) = (absolute.parent(), absolute.file_name()) else {
        return Err(std::io::Error::other(format!("{} has no parent", absolute.display())));
    };
    let all = workdir.join(".slurm");
    std::fs::create_dir_all(&all)?;
    std::fs::set_permissions(&all, std::fs::Permissions::from_mode(0o711))?;
    let dir = all.join(name);
    match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {}
        Ok(_) => {
            std::fs::remove_file(&dir)?;
            std::fs::create_dir(&dir)?;
        }
        Err(_) => std::fs::create_dir(&dir)?,
    }
    let mode = if account.is_some() { 0o1733 } else { 0o700 };
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
    Ok(dir)
}

/// The job as the agent gives it to Slurm: what the agent decides (the
/// Slurm job name, the working directory, the reservation, the partition,
/// the wall time it planned with) is set on the job, so Brokk's Slurm
/// writer says it like everything else; begin and deadline are the
/// planner's business, not Slurm's.
async fn for_slurm(slurm: &Slurm, launch: &Launch, sandbox: &Path) -> Result<Job, String> {
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
            make_executable(&staged).map_err(|e| format!("{}: {e}", staged.display()))?;
            job.executable = Some(format!("./{}", plain_name(exe)));
        }
    }
    Ok(job)
}

/// The batch script and sbatch's options for the job; a copy of the script
/// is kept in its control directory for the site's operators.
async fn prepare(
    slurm: &Slurm,
    launch: &Launch,
    sandbox: &Path,
    control: &Path,
) -> Result<(String, Vec<String>), String> {
    let mut job = for_slurm(slurm, launch, sandbox).await?;
    // A job in one of the site's OCI bundles runs in its own copy of it,
    // where the control directory has a path of its own.
    let mut mark_dir = control.to_path_buf();
    if let Some(bundle) = job.container_image.clone().filter(|i| slurm.config.runs_bundle(i)) {
        let (uid, gid) = launch.account.map_or_else(
            || (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()),
            |a| (a.uid, a.gid),
        );
        // Beside the control directory, where the job cannot write: it is
        // made fresh as the agent's own.
        let dir = control.with_extension("bundle");
        let copy = super::bundle::for_job(Path::new(&bundle), &dir, sandbox, control, uid, gid)?;
        job.container_image = Some(copy.display().to_string());
        mark_dir = PathBuf::from(super::bundle::CONTROL);
    }
    let mut written = brokk_jdl::write(Format::Slurm, std::slice::from_ref(&job)).map_err(|e| e.to_string())?;
    if mark_dir != control && job.script.is_none() {
        // The writer's line for a program runs it with bash, which an
        // image need not have; the line itself is POSIX.
        if let Some(rest) = written.text.strip_prefix("#!/bin/bash\n") {
            written.text = format!("#!/bin/sh\n{rest}");
        }
    }
    let text = run_once(&written.text, &mark_dir);
    let copy = control.join("job.sbatch");
    let mut f = crate::sandbox::create_write(control, "job.sbatch").map_err(|e| format!("{}: {e}", copy.display()))?;
    std::io::Write::write_all(&mut f, text.as_bytes()).map_err(|e| format!("{}: {e}", copy.display()))?;
    Ok((text, brokk_jdl::sbatch_arguments(&job)))
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The batch script made to run once: a slurmctld killed before it saved a
/// job's completion starts the job again when it comes back (seen on the
/// testbed), so the script's first start leaves a mark in its control
/// directory (a directory, made atomically) with its exit status, and a
/// later start exits with that status without running anything; output
/// files are appended to, not truncated, by a later start.
///
/// The guard is the first command after the writer's own directives (the
/// interpreter line and the `#SBATCH` lines right after it): sbatch reads
/// no directive after a command, so nothing in the job's script is read as
/// one. Only shell scripts get the guard: another interpreter's script is
/// left as it is (its directives were read into the job at submission).
fn run_once(script: &str, control: &Path) -> String {
    // `control` is where the script sees its control directory: the host's
    // path, or a container's mount of it.
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
    let first = usize::from(lines.first().is_some_and(|l| l.starts_with("#!")));
    let body = first + lines[first..].iter().take_while(|l| l.starts_with("#SBATCH")).count();
    let mark = sh_quote(&control.join("ran").display().to_string());
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

/// How Slurm's final record ends the job for Brokk. `own` is the exit status
/// the script itself wrote in its run-once mark, with when it wrote it.
///
/// A TIMEOUT or NODE_FAIL whose script had already written its status within
/// its wall time is Slurm's bookkeeping, not the job's end: a slurmctld
/// killed after it took a job's completion, but before it saved it, comes
/// back with the job still running and ends it at its time limit (seen in
/// the chaos test: a 2-second job ended TIMEOUT 60 s later). The script's
/// own status is then the truth.
fn outcome(end: &JobEnd, cancelled: bool, wall: i64, own: Option<(i32, Time)>) -> End {
    let own = own
        .filter(|&(_, at)| end.start.is_some_and(|s| at.0 < s.0 + wall))
        .map(|(code, _)| code);
    match (end.state.as_str(), own) {
        _ if cancelled => End::Cancelled,
        ("COMPLETED" | "FAILED", _) => End::Exited(end.exit_code.unwrap_or(-1)),
        ("TIMEOUT" | "NODE_FAIL", Some(code)) => End::Exited(code),
        ("TIMEOUT", _) => End::Failed(format!(
            "wall time of {wall} s exceeded; Slurm ended job {} (TIMEOUT)",
            end.id
        )),
        ("CANCELLED", _) => End::Failed(format!("Slurm job {} was cancelled outside Brokk", end.id)),
        (other, _) => End::Failed(format!(
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

/// The uid Slurm runs the job as: its account's, or the agent's own.
fn uid_of(launch: &Launch) -> u32 {
    launch.account.map_or_else(|| nix::unistd::getuid().as_raw(), |a| a.uid)
}

/// Submits (or finds again, after a restart) and follows the job to its end.
pub(crate) async fn execute<P: Progress>(agent: &P, slurm: &Slurm, mut launch: Launch, sandbox: &Path) -> End {
    let control = match control_dir(sandbox, launch.account) {
        Ok(dir) => dir,
        Err(e) => return End::Failed(format!("making the job's Slurm directory: {e}")),
    };
    let mut readings = slurm.subscribe();
    let mut slurm_id = launch.backend_id;
    if slurm_id.is_none() && launch.resumed {
        // The agent may have stopped between sbatch and its record: the
        // job's own account's job of that name, if there is one.
        match slurm.cli.jobs_named(&slurm.job_name(launch.id), uid_of(&launch)).await {
            Ok(ids) => slurm_id = ids.last().copied(),
            Err(e) => slurm.note(&e),
        }
    }
    let mut lost = 0u32;
    loop {
        let id = match slurm_id.take() {
            Some(id) => {
                slurm.follow(id, launch.id);
                id
            }
            None => match submit(slurm, &mut launch, sandbox, &control).await {
                Ok(id) => id,
                Err(end) => return end,
            },
        };
        agent.record_submitted(launch.id, id).await;
        let followed = follow(agent, slurm, &mut launch, id, &mut readings, &control).await;
        slurm.unfollow(id, launch.id);
        let started = match followed {
            Followed::End(end) => return end,
            Followed::Lost { started } => started,
        };
        // Slurm lost the job: what the agent saw and the mark tell whether it ran.
        match (ran_mark(&control), started) {
            (Mark::Exited(code), _) => return End::Exited(code),
            (Mark::Interrupted, _) | (Mark::None, true) => {
                return End::Failed(format!(
                    "Slurm lost job {id} (its controller restarted without it) after it had started"
                ))
            }
            (Mark::None, false) if lost >= RESUBMISSIONS => {
                return End::Failed(format!(
                    "Slurm lost job {id} before it started, the {} time; not submitted again",
                    lost + 1
                ))
            }
            (Mark::None, false) => {
                lost += 1;
                tracing::warn!(job = %launch.id, "Slurm lost job {id} before it started; submitting again ({lost} of {RESUBMISSIONS})");
            }
        }
    }
}

/// What the run-once mark says.
enum Mark {
    /// The job ran and exited with this status.
    Exited(i32),
    /// It started and did not finish.
    Interrupted,
    /// It never started.
    None,
}

/// The exit status the script wrote in its mark and when it wrote it.
fn own_exit(control: &Path) -> Option<(i32, Time)> {
    let mut f = crate::sandbox::open_read(control, "ran/exit").ok()?;
    let mut s = String::new();
    std::io::Read::read_to_string(&mut f, &mut s).ok()?;
    let at = f.metadata().ok()?.modified().ok()?;
    let at = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    Some((s.trim().parse().ok()?, Time(i64::try_from(at).ok()?)))
}

fn ran_mark(control: &Path) -> Mark {
    match own_exit(control) {
        Some((code, _)) => Mark::Exited(code),
        None if control.join("ran").is_dir() => Mark::Interrupted,
        None => Mark::None,
    }
}

/// How following a Slurm job ended.
enum Followed {
    /// With Slurm's final record (or a cancel).
    End(End),
    /// Slurm no longer knows the job; whether it was seen started.
    Lost {
        /// Whether the agent saw it start.
        started: bool,
    },
}

/// Writes the batch script and submits it, retrying while slurmctld does not
/// answer; the job's Slurm id, or how it ended without one.
async fn submit(slurm: &Slurm, launch: &mut Launch, sandbox: &Path, control: &Path) -> Result<u64, End> {
    let (script, options) = prepare(slurm, launch, sandbox, control)
        .await
        .map_err(|e| End::Failed(format!("writing the batch script: {e}")))?;
    loop {
        if *launch.controls.cancel.borrow() {
            return Err(End::Cancelled);
        }
        let submitted = match slurm.submitters.acquire().await {
            Ok(_slot) => {
                let account = launch.account.map(|a| (a.uid, a.gid));
                slurm.cli.sbatch(&script, &options, account).await
            }
            Err(_) => Err(SlurmError::Unavailable("the agent is stopping".into())),
        };
        match submitted {
            Ok(id) => {
                slurm.claim(id, launch.id);
                return Ok(id);
            }
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

/// Follows Slurm job `slurm_id` through the queue readings to its end. The
/// job is known by its id and its owner's uid: a row or record under
/// another uid is another job that took the id after slurmctld lost ours,
/// and so is one the agent's own `sbatch` has since been given the id for
/// (see [`super::Slurm::claim`]).
async fn follow<P: Progress>(
    agent: &P,
    slurm: &Slurm,
    launch: &mut Launch,
    slurm_id: u64,
    readings: &mut watch::Receiver<std::sync::Arc<super::Snapshot>>,
    control: &Path,
) -> Followed {
    let uid = uid_of(launch);
    let mut cancelled = false;
    let mut cancel_sent = false;
    let mut running = launch.started;
    let mut missing = false;
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
        if !slurm.follows(slurm_id, launch.id) {
            return Followed::Lost { started: running };
        }
        let snap = readings.borrow_and_update().clone();
        if snap.reading > first {
            match snap.jobs.get(&slurm_id).filter(|row| row.uid == Some(uid)) {
                Some(row) if !is_final(&row.state) => {
                    missing = false;
                    if let (false, false, Some(start)) = (running, row.state == "PENDING", row.start) {
                        running = true;
                        agent.mark_running(launch.id, start).await;
                    }
                }
                _ => missing = true,
            }
        }
        // Gone from the queue of unfinished jobs: slurmctld's own record
        // says how it ended; the completion log only once slurmctld has
        // forgotten the job (a line there may be forged by a job's name).
        if missing {
            let shown = slurm.cli.show_job(slurm_id).await;
            if !slurm.follows(slurm_id, launch.id) {
                return Followed::Lost { started: running };
            }
            match shown {
                Ok(Some(end)) if end.uid == Some(uid) && is_final(&end.state) => break end,
                Ok(Some(end)) if end.uid == Some(uid) => missing = false,
                Ok(_) => match slurm.take_ended(slurm_id, uid) {
                    Some(end) => break end,
                    None if cancelled => return Followed::End(End::Cancelled),
                    None => return Followed::Lost { started: running },
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
    Followed::End(outcome(&end, cancelled, launch.wall, own_exit(control)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_states_map_to_brokk_ends() {
        let end = |state: &str, code| JobEnd {
            id: 7,
            uid: Some(0),
            name: "brokk-a-1".into(),
            state: state.into(),
            exit_code: code,
            start: None,
            reason: "None".into(),
        };
        assert!(matches!(
            outcome(&end("COMPLETED", Some(0)), false, 60, None),
            End::Exited(0)
        ));
        assert!(matches!(
            outcome(&end("FAILED", Some(3)), false, 60, None),
            End::Exited(3)
        ));
        assert!(matches!(
            outcome(&end("CANCELLED", None), true, 60, None),
            End::Cancelled
        ));
        match outcome(&end("TIMEOUT", None), false, 60, None) {
            End::Failed(m) => assert!(m.contains("wall time of 60 s"), "{m}"),
            _ => panic!("TIMEOUT must fail the job"),
        }
        match outcome(&end("NODE_FAIL", None), false, 60, None) {
            End::Failed(m) => assert_eq!(m, "Slurm job 7 ended NODE_FAIL"),
            _ => panic!("NODE_FAIL must fail the job"),
        }
    }

    #[test]
    fn a_status_the_script_wrote_within_its_wall_time_outweighs_a_late_timeout() {
        let end = |state: &str| JobEnd {
            id: 7,
            uid: Some(0),
            name: "brokk-a-1".into(),
            state: state.into(),
            exit_code: None,
            start: Some(Time(1_000)),
            reason: "None".into(),
        };
        // Written 2 s after the start: the script ended by itself.
        assert!(matches!(
            outcome(&end("TIMEOUT"), false, 60, Some((0, Time(1_002)))),
            End::Exited(0)
        ));
        assert!(matches!(
            outcome(&end("NODE_FAIL"), false, 60, Some((4, Time(1_002)))),
            End::Exited(4)
        ));
        // Written when the limit had passed (a trap run by the kill): a timeout.
        assert!(matches!(
            outcome(&end("TIMEOUT"), false, 60, Some((143, Time(1_060)))),
            End::Failed(_)
        ));
        // No start on record: nothing to measure the status against.
        let unstarted = JobEnd {
            start: None,
            ..end("TIMEOUT")
        };
        assert!(matches!(
            outcome(&unstarted, false, 60, Some((0, Time(1_002)))),
            End::Failed(_)
        ));
        // Another state keeps its meaning.
        assert!(matches!(
            outcome(&end("CANCELLED"), false, 60, Some((0, Time(1_002)))),
            End::Failed(_)
        ));
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
        // The job's own directives come after the guard, where sbatch reads none.
        let hostile = "#!/bin/sh\n#SBATCH --time=1\n\n#SBATCH --time=7:00:00\n#SBATCH --uid=0\necho ran\n";
        let text = run_once(hostile, &dir);
        let guard = text.find("BROKK_RAN=").unwrap();
        assert!(
            guard < text.find("--time=7").unwrap() && guard < text.find("--uid").unwrap(),
            "{text}"
        );
        assert!(guard > text.find("--time=1").unwrap());
        // Another interpreter's script is left alone.
        let py = "#!/usr/bin/env python3\nprint('hi')\n";
        assert_eq!(run_once(py, &dir), py);
    }
}
