//! A job keeps its program through translation. A script (a Slurm batch
//! script, a canonical job's `script`) has a place only in Slurm and in
//! Brokk's JSON; for every other language it becomes a program with
//! arguments that runs the same text with the same interpreter: a shell
//! script as `SHELL -c TEXT` where the language can hold the text as it is,
//! anything else (and any script in a language whose values end at a line's
//! end) unpacked from base64 by `/bin/sh` and run through its own `#!` line.
//! A job with nothing to run is an error, never an empty job.

use std::borrow::Cow;

use base64::Engine as _;
use brokk_model::Job;

use crate::{Format, WriteError};

/// The name the unpacked script gets in the job's working directory, and
/// the `$0` it sees.
const SCRIPT_NAME: &str = ".brokk-job-script";

/// Shells that take their script's text after `-c`.
const SHELLS: [&str; 5] = ["sh", "bash", "dash", "ksh", "zsh"];

/// Whether `format` has a place for a script.
fn holds_scripts(format: Format) -> bool {
    matches!(format, Format::Slurm | Format::Json)
}

/// Whether `format` writes a value holding line breaks so that it reads back
/// (JSDL's arguments are normalized strings: no line breaks).
fn holds_line_breaks(format: Format) -> bool {
    matches!(format, Format::Xrsl | Format::Rsl)
}

/// The interpreter a script's `#!` line names (the program and the one
/// argument the kernel passes with it), `/bin/sh` without one.
pub fn interpreter(script: &str) -> (String, Option<String>) {
    let Some(line) = script.lines().next().and_then(|l| l.strip_prefix("#!")) else {
        return ("/bin/sh".into(), None);
    };
    let line = line.trim();
    match line.split_once(char::is_whitespace) {
        Some((program, arg)) => (program.to_string(), Some(arg.trim().to_string())),
        None if line.is_empty() => ("/bin/sh".into(), None),
        None => (line.to_string(), None),
    }
}

/// `job` as `format` can write it: its script made a program where the
/// language has no place for one, with a line saying how; an error when
/// the job has nothing to run. `index` names the job among several.
pub(crate) fn carried(format: Format, job: &Job, index: usize) -> Result<(Cow<'_, Job>, Option<String>), WriteError> {
    let line_bound = !holds_scripts(format) && !holds_line_breaks(format);
    let multi_line = job.executable.iter().chain(&job.arguments).any(|w| w.contains('\n'));
    if job.script.is_none() && line_bound && multi_line {
        // The program's own words cannot be written on one line: they go
        // into a script that execs them, carried like any script.
        let mut j = job.clone();
        let words: Vec<String> = j
            .executable
            .take()
            .into_iter()
            .chain(std::mem::take(&mut j.arguments))
            .map(|w| crate::shellwords::quote(&w))
            .collect();
        j.script = Some(format!("#!/bin/sh\nexec {}\n", words.join(" ")));
        let (out, how) = carried(format, &j, index)?;
        return Ok((Cow::Owned(out.into_owned()), how));
    }
    let Some(script) = &job.script else {
        return match job.executable {
            Some(_) => Ok((Cow::Borrowed(job), None)),
            None => Err(WriteError::NothingToRun { index }),
        };
    };
    if holds_scripts(format) {
        return Ok((Cow::Borrowed(job), None));
    }
    let (program, arg) = interpreter(script);
    // The shell is the interpreter's last word (`/usr/bin/env bash` runs bash).
    let shell = arg
        .as_deref()
        .unwrap_or(&program)
        .rsplit('/')
        .next()
        .is_some_and(|w| SHELLS.contains(&w));
    let mut out = job.clone();
    out.script = None;
    let (executable, mut arguments, how) = if shell && holds_line_breaks(format) {
        let mut args: Vec<String> = arg.into_iter().collect();
        args.extend(["-c".to_string(), script.clone(), SCRIPT_NAME.to_string()]);
        let how =
            format!("script: {format} has no place for a script; it runs as `{program} -c` with the script's text");
        (program, args, how)
    } else {
        let packed = base64::engine::general_purpose::STANDARD.encode(script.as_bytes());
        let unpack = format!(
            "printf %s {packed} | base64 -d > {SCRIPT_NAME} && chmod +x {SCRIPT_NAME} && exec ./{SCRIPT_NAME} \"$@\""
        );
        let how = format!(
            "script: {format} has no place for a script; it travels base64-encoded and /bin/sh unpacks it and runs it with its own interpreter ({program})"
        );
        (
            "/bin/sh".to_string(),
            vec!["-c".to_string(), unpack, SCRIPT_NAME.to_string()],
            how,
        )
    };
    // The script is the job, as in Slurm: arguments given with another
    // executable were that one's.
    if job.executable.is_none() {
        arguments.extend(job.arguments.iter().cloned());
    }
    out.executable = Some(executable);
    out.arguments = arguments;
    Ok((Cow::Owned(out), Some(how)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scripted(text: &str, args: &[&str]) -> Job {
        Job {
            script: Some(text.into()),
            arguments: args.iter().map(|a| a.to_string()).collect(),
            ..Job::default()
        }
    }

    #[test]
    fn interpreters_come_from_the_first_line() {
        assert_eq!(interpreter("#!/bin/bash\necho"), ("/bin/bash".into(), None));
        assert_eq!(
            interpreter("#!/usr/bin/env python3\nprint(1)"),
            ("/usr/bin/env".into(), Some("python3".into()))
        );
        assert_eq!(interpreter("echo hi\n"), ("/bin/sh".into(), None));
        assert_eq!(interpreter("#!\necho"), ("/bin/sh".into(), None));
    }

    #[test]
    fn a_shell_script_runs_as_shell_dash_c_where_the_text_fits() {
        let j = scripted("#!/bin/bash\necho \"$1\"\n", &["x"]);
        let (out, how) = carried(Format::Xrsl, &j, 0).unwrap();
        assert_eq!(out.executable.as_deref(), Some("/bin/bash"));
        assert_eq!(out.arguments, ["-c", "#!/bin/bash\necho \"$1\"\n", SCRIPT_NAME, "x"]);
        assert!(out.script.is_none() && how.unwrap().contains("/bin/bash -c"));
    }

    #[test]
    fn other_scripts_and_line_bound_languages_get_the_packed_form() {
        let j = scripted("#!/usr/bin/env python3\nprint('hi')\n", &[]);
        let (out, _) = carried(Format::Xrsl, &j, 0).unwrap();
        assert_eq!(out.executable.as_deref(), Some("/bin/sh"));
        assert!(out.arguments[1].contains("base64 -d"), "{:?}", out.arguments);
        let j = scripted("#!/bin/sh\necho hi\n", &["a b"]);
        let (out, _) = carried(Format::Condor, &j, 0).unwrap();
        assert_eq!(out.arguments.len(), 4);
        assert_eq!(out.arguments[3], "a b");
        assert!(!out.arguments[1].contains('\n'));
    }

    #[test]
    fn nothing_to_run_is_an_error_and_scripts_stay_where_they_fit() {
        assert!(matches!(
            carried(Format::Condor, &Job::default(), 2),
            Err(WriteError::NothingToRun { index: 2 })
        ));
        let j = scripted("echo\n", &[]);
        assert!(matches!(carried(Format::Slurm, &j, 0), Ok((Cow::Borrowed(_), None))));
    }
}
