//! Snapshot tests over the corpus: every valid description lowers to the
//! expected canonical JSON (with its warnings), every invalid one fails with the
//! expected positioned diagnostic, and detection names the right language.

use std::path::Path;

use brokk_jdl::{detect, read, write, Diagnostic, Format, ReadOptions};
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
            warnings
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
            let Ok(first) = write(target, &jobs) else {
                // JSDL and Slurm hold one job per document.
                assert!(jobs.len() > 1 && matches!(target, Format::Jsdl | Format::Slurm));
                continue;
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
