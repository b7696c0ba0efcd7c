//! Snapshot tests over the corpus: every valid description lowers to the
//! expected canonical JSON (with its warnings), every invalid one fails with the
//! expected positioned diagnostic, and detection names the right language.

use std::path::Path;

use brokk_jdl::{detect, read, write, Diagnostic, Format, ReadOptions, WriteError};
use brokk_model::Job;
use serde::Serialize;

fn format_of(path: &Path) -> Format {
    let lang = path
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .unwrap_or("");
    lang.parse()
        .unwrap_or_else(|_| panic!("corpus directory `{lang}` is not a format"))
}

fn load(path: &Path) -> (Format, String, ReadOptions) {
    let text = std::fs::read_to_string(path).unwrap();
    let opts = ReadOptions {
        base_dir: path.parent().map(Path::to_path_buf),
    };
    (format_of(path), text, opts)
}

#[derive(Serialize)]
struct Lowered {
    jobs: Vec<Job>,
    warnings: Vec<String>,
    /// Shown only where the jobs must start together.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    together: bool,
}

#[test]
fn valid_descriptions_lower_to_the_expected_jobs() {
    insta::glob!("corpus/*/valid/*", |path| {
        let (format, text, opts) = load(path);
        let ext = path.extension().and_then(|e| e.to_str());
        assert_eq!(detect(&text, ext), Some(format), "detection of {}", path.display());
        let parsed = read(format, &text, &opts).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let warnings = parsed.warnings.iter().map(Diagnostic::to_string).collect();
        insta::assert_json_snapshot!(Lowered {
            jobs: parsed.jobs,
            warnings,
            together: parsed.together,
        });
    });
}

#[test]
fn invalid_descriptions_fail_with_a_positioned_error() {
    insta::glob!("corpus/*/invalid/*", |path| {
        let (format, text, opts) = load(path);
        let err = read(format, &text, &opts).expect_err("an invalid description was accepted");
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("?");
        let rendered: String = err.diagnostics.iter().map(|d| d.render(name, &text)).collect();
        insta::assert_snapshot!(rendered);
    });
}

/// Every valid job can be written in every language, and what a writer keeps
/// survives a second trip through that language unchanged.
#[test]
fn every_valid_job_translates_to_every_language_stably() {
    insta::glob!("corpus/*/valid/*", |path| {
        let (format, text, opts) = load(path);
        let jobs = read(format, &text, &opts).unwrap().jobs;
        for target in Format::ALL {
            let first = match write(target, &jobs) {
                Ok(w) => w,
                // JSDL and Slurm hold one job per document.
                Err(WriteError::OneJobOnly { .. }) => {
                    assert!(jobs.len() > 1 && matches!(target, Format::Jsdl | Format::Slurm));
                    continue;
                }
                Err(e @ WriteError::NothingToRun { .. }) => {
                    assert!(jobs.iter().any(|j| j.executable.is_none() && j.script.is_none()), "{e}");
                    continue;
                }
                Err(e) => panic!("{}: {e}", path.display()),
            };
            let back = read(target, &first.text, &ReadOptions::default()).unwrap_or_else(|e| {
                panic!(
                    "{} -> {target}: output does not read back: {e}\n{}",
                    path.display(),
                    first.text
                )
            });
            let second = write(target, &back.jobs).unwrap();
            assert_eq!(first.text, second.text, "{} -> {target} is not stable", path.display());
            if target == Format::Json {
                assert_eq!(back.jobs, jobs, "{}: canonical JSON must be lossless", path.display());
            }
        }
    });
}

/// Every valid file to every language and back: the program is kept (a
/// job that runs something still runs something), and so are the number
/// of jobs (an array's size), GPUs and memory, unless the writer lists the
/// loss; nothing is lost without a word.
#[test]
fn translation_keeps_what_a_job_means_or_says_what_it_lost() {
    insta::glob!("corpus/*/valid/*", |path| {
        let (format, text, opts) = load(path);
        let jobs = read(format, &text, &opts).unwrap().jobs;
        for target in Format::ALL {
            let written = match write(target, &jobs) {
                Ok(w) => w,
                Err(WriteError::OneJobOnly { .. }) => continue,
                Err(WriteError::NothingToRun { .. }) => continue,
                Err(e) => panic!("{}: {e}", path.display()),
            };
            let back = read(target, &written.text, &ReadOptions::default()).unwrap().jobs;
            let said = |field: &str| written.dropped.iter().any(|d| d.starts_with(field));
            let at = format!("{} -> {target}", path.display());
            assert_eq!(back.len(), jobs.len(), "{at}: the number of jobs");
            for (a, b) in jobs.iter().zip(&back) {
                let runs = |j: &brokk_model::Job| j.executable.is_some() || j.script.is_some();
                assert_eq!(runs(a), runs(b), "{at}: the program\n{}", written.text);
                assert!(
                    a.gpus == b.gpus || said("gpus"),
                    "{at}: gpus {:?} -> {:?}",
                    a.gpus,
                    b.gpus
                );
                assert!(
                    a.memory_total_mib() == b.memory_total_mib() || said("memory"),
                    "{at}: memory {:?} -> {:?}",
                    a.memory,
                    b.memory
                );
            }
        }
    });
}

/// A Slurm array written in each language's own array form where it has
/// one (Slurm's `--array`, HTCondor's `queue VAR in (...)`, gLite's
/// parametric job), and read back as the same tasks with the same names.
#[test]
fn an_array_is_written_in_each_languages_own_array_form() {
    let script = "#!/bin/sh\n#SBATCH --array=1-7:2,10\n#SBATCH --time=10\n#SBATCH --output=out-%a.txt\n\
                  echo task $SLURM_ARRAY_TASK_ID\n";
    let tasks = read(Format::Slurm, script, &ReadOptions::default()).unwrap().jobs;
    assert_eq!(tasks.len(), 5);
    for (format, form) in [
        (Format::Slurm, "#SBATCH --array=1-7:2,10"),
        (Format::Condor, "queue SLURM_ARRAY_TASK_ID in (1, 3, 5, 7, 10)"),
        (Format::Jdl, "Parameters = {\"1\", \"3\", \"5\", \"7\", \"10\"};"),
    ] {
        let w = write(format, &tasks).unwrap();
        assert!(w.text.contains(form), "{format}:\n{}", w.text);
        let back = read(format, &w.text, &ReadOptions::default()).unwrap().jobs;
        assert_eq!(back.len(), 5, "{format}");
        let names: Vec<Option<String>> = back.iter().map(|j| j.stdout.clone()).collect();
        let want: Vec<Option<String>> = if format == Format::Slurm {
            vec![Some("out-%a.txt".into()); 5]
        } else {
            [1, 3, 5, 7, 10].iter().map(|i| Some(format!("out-{i}.txt"))).collect()
        };
        assert_eq!(names, want, "{format}");
        let ids: Vec<String> = back
            .iter()
            .map(|j| {
                j.environment
                    .iter()
                    .find(|v| v.name == "SLURM_ARRAY_TASK_ID")
                    .unwrap()
                    .value
                    .clone()
            })
            .collect();
        assert_eq!(ids, ["1", "3", "5", "7", "10"], "{format}");
        // Written again from what was read, the same text.
        assert_eq!(write(format, &back).unwrap().text, w.text, "{format}");
    }
    // Tasks whose names do not follow their index stay separate jobs.
    let mut odd = tasks.clone();
    odd[2].stdout = Some("elsewhere.txt".into());
    for format in [Format::Condor, Format::Jdl] {
        let w = write(format, &odd).unwrap();
        assert!(
            !w.text.contains("SLURM_ARRAY_TASK_ID in") && !w.text.contains("Parametric"),
            "{format}"
        );
        assert_eq!(read(format, &w.text, &ReadOptions::default()).unwrap().jobs.len(), 5);
    }
}

/// Retries, priority and mail travel where the target has a place for
/// them, and are listed as dropped where it has none.
#[test]
fn retries_priority_and_mail_travel_or_are_listed() {
    let sub = "executable = /bin/true\nmax_retries = 2\npriority = -5\nnotification = Complete\n\
               notify_user = ann@example.org\nqueue\n";
    let job = read(Format::Condor, sub, &ReadOptions::default()).unwrap().jobs;
    assert_eq!((job[0].retries, job[0].priority), (Some(2), Some(-5)));
    let kept = |format: Format| {
        let w = write(format, &job).unwrap();
        let back = read(format, &w.text, &ReadOptions::default()).unwrap().jobs.remove(0);
        (back, w.dropped)
    };
    let (slurm, dropped) = kept(Format::Slurm);
    assert_eq!(
        (slurm.priority, slurm.notify.clone()),
        (Some(-5), job[0].notify.clone())
    );
    assert!(dropped.iter().any(|d| d.starts_with("retries")), "{dropped:?}");
    let (xrsl, dropped) = kept(Format::Xrsl);
    assert_eq!(xrsl.retries, Some(2));
    assert_eq!(
        xrsl.notify.as_ref().and_then(|n| n.to.clone()).as_deref(),
        Some("ann@example.org")
    );
    assert!(dropped.iter().any(|d| d.starts_with("priority")), "{dropped:?}");
    let (jdl, dropped) = kept(Format::Jdl);
    assert_eq!(jdl.retries, Some(2));
    assert!(dropped.iter().any(|d| d.starts_with("notify")), "{dropped:?}");
    let (condor, dropped) = kept(Format::Condor);
    assert_eq!(condor, job[0]);
    assert!(dropped.is_empty(), "{dropped:?}");
}

/// A sandbox entry whose fourth byte falls inside a character (found by
/// the fuzzer) is a plain file name, not a crash.
#[test]
fn a_sandbox_entry_with_wide_characters_reads() {
    let jdl = "[ Executable = \"/bin/true\"; InputSandbox = {\"aéé.txt\"}; ]";
    let job = read(Format::Jdl, jdl, &ReadOptions::default()).unwrap().jobs.remove(0);
    assert_eq!(job.input_files[0].name, "aéé.txt");
    assert_eq!(job.input_files[0].source, None);
}
