//! Running one job through a GRAM gatekeeper. The job is written in RSL by
//! Brokk's writer around a small shell wrapper: the job manager stages the
//! sandbox's inputs into a scratch directory (served by `globusrun` over
//! GASS), the wrapper moves them into the job's own directory under the
//! account's home, runs the program there with its standard streams in
//! files, and leaves the exit status beside them. The state is read every
//! `poll_ms`; at the end a short job sends the directory back as a tar
//! stream, which the agent unpacks into the sandbox, and the directory is
//! removed. Calls that fail because the gatekeeper is down or slow are tried
//! again at the next reading: a job is never failed because its gatekeeper
//! did not answer.

use std::path::Path;
use std::time::Duration as StdDuration;

use brokk_jdl::Format;
use brokk_model::{Duration, Job};

use super::cli::GramError;
use super::GramCe;
use crate::launch::{pause, plain_name, retrying, End, Launch, Progress};

/// Where the job contact and the job's directory are kept in its sandbox,
/// so that an agent restarted follows the job instead of submitting it
/// twice.
const ID_FILE: &str = ".brokk-gram-job";

/// Where a script job's script is written, in the sandbox and beside the
/// job.
const SCRIPT_FILE: &str = ".brokk-job-script";

/// Where the wrapper leaves the program's exit status.
const EXIT_FILE: &str = ".brokk-exit";

/// How many readings may say an end without the job's exit status before
/// the job counts as ended without one: `globusrun -status` prints DONE
/// when it cannot reach the job manager, so one such reading proves nothing.
const UNPROVEN_ENDS: u32 = 3;

/// The wrapper the job manager runs: `$1` the job's directory under the
/// home, `$2`-`$4` its standard input, output and error files (empty for
/// none), then the program and its arguments.
const WRAPPER: &str = r#"d="$HOME/$1"; i=${2:-/dev/null}; o=${3:-/dev/null}; e=${4:-/dev/null}; shift 4
mkdir -p "$d" || exit 1
find . -mindepth 1 -maxdepth 1 -exec mv -f {} "$d"/ \;
cd "$d" || exit 1
case "$1" in ./*) chmod u+x "$1" ;; esac
"$@" <"$i" >"$o" 2>"$e"
echo $? >.brokk-exit
"#;

/// A quoted RSL string.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// A job as the gatekeeper is given it: the RSL, and the sandbox files the
/// job manager stages in.
struct Prepared {
    rsl: String,
    uploads: Vec<String>,
}

/// Writes the job's RSL: the program wrapped, the sandbox's inputs staged
/// into the scratch directory, one process (`jobType = single`) however
/// many CPUs it asks for, as Brokk's jobs run their program once.
fn prepare(launch: &Launch, sandbox: &Path, dir: &str) -> Result<Prepared, String> {
    let mut job: Job = launch.job.clone();
    let mut uploads: Vec<String> = job.input_files.iter().map(|f| plain_name(&f.name)).collect();
    let program: Vec<String> = match job.script.take() {
        Some(script) => {
            let mut f = crate::staging::create_owned(sandbox, SCRIPT_FILE, launch.account)
                .map_err(|e| format!("writing the script: {e}"))?;
            std::io::Write::write_all(&mut f, script.as_bytes()).map_err(|e| format!("writing the script: {e}"))?;
            uploads.push(SCRIPT_FILE.to_string());
            let (interpreter, arg) = brokk_jdl::program::interpreter(&script);
            std::iter::once(interpreter)
                .chain(arg)
                .chain([format!("./{SCRIPT_FILE}")])
                .collect()
        }
        None => {
            let exe = job.executable.take().ok_or("the job has nothing to run")?;
            // A program staged beside the job runs from its directory.
            let exe = if !exe.contains('/') && sandbox.join(plain_name(&exe)).is_file() {
                if !uploads.contains(&plain_name(&exe)) {
                    uploads.push(plain_name(&exe));
                }
                format!("./{}", plain_name(&exe))
            } else {
                exe
            };
            std::iter::once(exe).chain(std::mem::take(&mut job.arguments)).collect()
        }
    };
    let stream = |s: &Option<String>| s.as_deref().map(plain_name).unwrap_or_default();
    job.executable = Some("/bin/sh".into());
    job.arguments = [
        "-c".to_string(),
        WRAPPER.to_string(),
        "brokk-job".to_string(),
        dir.to_string(),
    ]
    .into_iter()
    .chain([stream(&job.stdin), stream(&job.stdout), stream(&job.stderr)])
    .chain(program)
    .collect();
    job.stdin = None;
    job.stdout = None;
    job.stderr = None;
    job.input_files.clear();
    job.output_files.clear();
    job.working_directory = None;
    job.earliest_start = None;
    job.deadline = None;
    job.reservation = None;
    job.wall_time = Some(Duration(launch.wall));
    let written = brokk_jdl::write(Format::Rsl, std::slice::from_ref(&job)).map_err(|e| e.to_string())?;
    for line in &written.dropped {
        tracing::debug!(job = %launch.id, "not said in RSL: {line}");
    }
    let mut rsl = written.text.trim_end().to_string();
    rsl.push_str("\n (jobType = single)(scratchDir = $(HOME))(directory = $(SCRATCH_DIRECTORY))");
    if !uploads.is_empty() {
        let staged: Vec<String> = uploads
            .iter()
            .map(|name| {
                let local = sandbox.join(name).display().to_string();
                format!(
                    "($(GLOBUSRUN_GASS_URL) # {} $(SCRATCH_DIRECTORY) # {})",
                    quoted(&local),
                    quoted(&format!("/{name}"))
                )
            })
            .collect();
        rsl.push_str(&format!("\n (file_stage_in = {})", staged.join(" ")));
    }
    Ok(Prepared { rsl, uploads })
}

/// The interval between two readings of a job's state.
fn period(gram: &GramCe) -> StdDuration {
    StdDuration::from_millis(gram.config.poll_ms)
}

/// Submits (or finds again, after a restart) and follows the job to its end.
pub(crate) async fn execute<P: Progress>(agent: &P, gram: &GramCe, mut launch: Launch, sandbox: &Path) -> End {
    let known = std::fs::read_to_string(sandbox.join(ID_FILE)).ok().and_then(|s| {
        let (contact, dir) = s.trim().split_once('\n')?;
        Some((contact.to_string(), dir.to_string()))
    });
    let (contact, dir) = match known {
        Some(k) => k,
        None => match submit(gram, &mut launch, sandbox).await {
            Ok(k) => k,
            Err(end) => return end,
        },
    };
    agent.record_submitted(launch.id, 1).await;
    let end = follow(agent, gram, &mut launch, &contact, &dir, sandbox).await;
    clean(gram, &launch, &dir).await;
    end
}

/// Writes the job and submits it, retrying while the gatekeeper is
/// unreachable; keeps its contact and directory in the sandbox.
async fn submit(gram: &GramCe, launch: &mut Launch, sandbox: &Path) -> Result<(String, String), End> {
    let dir = format!(
        "{}/job-{}-{}",
        gram.config.directory,
        launch.id,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let prepared =
        prepare(launch, sandbox, &dir).map_err(|e| End::Failed(format!("writing the RSL description: {e}")))?;
    let account = launch.account;
    let proxy = gram
        .proxy_for(&launch.user, account)
        .await
        .map_err(|e| End::Failed(format!("the GRAM proxy: {e}")))?;
    let serve = !prepared.uploads.is_empty();
    let out = retrying(launch, period(gram), "GRAM submission", || {
        gram.client.submit(&prepared.rsl, serve, &proxy, account)
    })
    .await
    .map_err(|e| match e {
        None => End::Cancelled,
        Some(e) => End::Failed(format!("the GRAM gatekeeper refused the job: {e}")),
    })?;
    let contact = String::from_utf8_lossy(&out).trim().to_string();
    if !contact.starts_with("https://") {
        return Err(End::Failed(format!("globusrun printed `{contact}`, not a job contact")));
    }
    if let Err(e) = std::fs::write(sandbox.join(ID_FILE), format!("{contact}\n{dir}\n")) {
        tracing::warn!(job = %launch.id, "keeping GRAM job contact {contact}: {e}");
    }
    Ok((contact, dir))
}

/// What came back from the job's directory.
#[derive(Debug, Default)]
struct Returned {
    /// The exit status the wrapper left, when it did.
    exit: Option<i32>,
    /// The other top-level files: name and content.
    files: Vec<(String, Vec<u8>)>,
}

/// Reads the tar stream of the job's directory.
fn unpack(stream: &[u8]) -> Result<Returned, String> {
    let mut returned = Returned::default();
    let mut archive = tar::Archive::new(stream);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry.path().map_err(|e| e.to_string())?.to_string_lossy().into_owned();
        let name = name.strip_prefix("./").unwrap_or(&name).to_string();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).map_err(|e| e.to_string())?;
        if name == EXIT_FILE {
            returned.exit = String::from_utf8_lossy(&bytes).trim().parse().ok();
        } else if plain_name(&name) == name && !name.starts_with('.') {
            returned.files.push((name, bytes));
        }
    }
    Ok(returned)
}

/// Fetches the job's directory (its top-level files) through a short job
/// whose standard output is the directory as tar.
async fn fetch(gram: &GramCe, launch: &Launch, dir: &str) -> Result<Returned, GramError> {
    let rsl = format!(
        "&(executable = \"/bin/sh\")(arguments = \"-c\" {} \"brokk-fetch\" {})",
        quoted(r#"cd "$HOME/$1" 2>/dev/null || exit 0; tar cf - -- * .[!.]* 2>/dev/null; exit 0"#),
        quoted(dir)
    );
    let proxy = gram.proxy_for(&launch.user, launch.account).await?;
    let out = gram.client.output_of(&rsl, &proxy, launch.account).await?;
    if out.is_empty() {
        return Ok(Returned::default());
    }
    unpack(&out).map_err(|e| GramError::Unreachable(format!("reading job {}'s files: {e}", launch.id)))
}

/// Keeps the returned files in the sandbox, owned by the job's account, for
/// the owner to fetch and for stage-out.
fn keep(launch: &Launch, sandbox: &Path, returned: &Returned) {
    for (name, bytes) in &returned.files {
        let written = crate::staging::create_owned(sandbox, name, launch.account)
            .and_then(|mut f| std::io::Write::write_all(&mut f, bytes));
        if let Err(e) = written {
            tracing::warn!(job = %launch.id, "keeping {name}: {e}");
        }
    }
}

/// Removes the job's directory on the gatekeeper's side (submitted, not
/// waited for).
async fn clean(gram: &GramCe, launch: &Launch, dir: &str) {
    let rsl = format!("&(executable = \"/bin/rm\")(arguments = \"-rf\" {})", quoted(dir));
    let done = match gram.proxy_for(&launch.user, launch.account).await {
        Ok(proxy) => gram.client.submit(&rsl, false, &proxy, launch.account).await.map(drop),
        Err(e) => Err(e),
    };
    if let Err(e) = done {
        tracing::warn!(job = %launch.id, "removing GRAM job directory {dir}: {e}");
    }
}

/// Reads the job's state until it ends; kills it when the owner cancels.
/// An end is taken from the exit status the wrapper left; a job manager
/// that says FAILED, or keeps saying DONE without one, ended it otherwise.
async fn follow<P: Progress>(
    agent: &P,
    gram: &GramCe,
    launch: &mut Launch,
    contact: &str,
    dir: &str,
    sandbox: &Path,
) -> End {
    let mut running = launch.started;
    let mut cancelled = false;
    let mut kill_sent = false;
    let mut unproven = 0;
    loop {
        let proxy = match gram.proxy_for(&launch.user, launch.account).await {
            Ok(p) => p,
            Err(e) => return End::Failed(format!("the GRAM proxy: {e}")),
        };
        if cancelled && !kill_sent {
            match gram.client.kill(contact, &proxy, launch.account).await {
                Ok(()) => kill_sent = true,
                Err(e) => tracing::warn!(job = %launch.id, "killing GRAM job {contact}: {e}"),
            }
        }
        match gram.client.status(contact, &proxy, launch.account).await {
            Ok(state) if state.is_final() => match fetch(gram, launch, dir).await {
                Ok(returned) => {
                    if let Some(code) = returned.exit {
                        keep(launch, sandbox, &returned);
                        if !running {
                            agent.mark_running(launch.id, crate::agent::now()).await;
                        }
                        return if cancelled { End::Cancelled } else { End::Exited(code) };
                    }
                    if cancelled {
                        return End::Cancelled;
                    }
                    unproven += 1;
                    if state.0 == "FAILED" || unproven >= UNPROVEN_ENDS {
                        keep(launch, sandbox, &returned);
                        return End::Failed(format!(
                            "GRAM job {contact} ended ({}) without its exit status: killed outside Brokk, or it could not start",
                            state.0
                        ));
                    }
                }
                Err(e) => tracing::warn!(job = %launch.id, "fetching GRAM job {contact}'s files: {e}"),
            },
            Ok(state) => {
                unproven = 0;
                if !running && state.has_started() {
                    running = true;
                    agent.mark_running(launch.id, crate::agent::now()).await;
                }
            }
            // Unreachable, slow or refusing for now: the job is not failed for it.
            Err(e) => tracing::warn!(job = %launch.id, "reading GRAM job {contact}: {e}"),
        }
        if cancelled {
            tokio::time::sleep(period(gram)).await;
        } else if !pause(launch, period(gram)).await {
            cancelled = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, bytes) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(bytes.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, *bytes).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn the_exit_status_and_top_level_files_come_back() {
        let stream = tar_of(&[
            ("out.txt", b"hello\n"),
            (".brokk-exit", b"3\n"),
            (".brokk-job-script", b"#!/bin/sh\n"),
            ("sub/deep.txt", b"x"),
        ]);
        let r = unpack(&stream).unwrap();
        assert_eq!(r.exit, Some(3));
        assert_eq!(r.files, vec![("out.txt".to_string(), b"hello\n".to_vec())]);
        assert_eq!(unpack(&tar_of(&[("a", b"1")])).unwrap().exit, None);
        assert!(unpack(b"not a tar stream at all, but long enough to be read as a header block?").is_err());
    }

    #[test]
    fn rsl_strings_double_their_quotes() {
        assert_eq!(quoted(r#"say "hi""#), r#""say ""hi""""#);
    }
}
