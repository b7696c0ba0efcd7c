//! `brokk validate`: check descriptions; exit 0 only when every file is valid.

use std::process::ExitCode;

use anyhow::Result;
use brokk_jdl::{read, Diagnostic, Format};
use brokk_proto::wire::{Checked, SubmitRequest};
use serde_json::json;

use super::Input;

/// Arguments of `brokk validate`.
#[derive(clap::Args)]
pub struct Args {
    /// Language of every file; detected per file when absent.
    #[arg(long)]
    from: Option<Format>,
    /// Print one JSON object per file: file, format, ok, jobs, errors[], warnings[].
    #[arg(long)]
    json: bool,
    /// Also ask the broker whether its sites would take each correct file's
    /// jobs now, with each site's answer (as `brokk submit --dry-run`).
    #[arg(long)]
    broker: bool,
    /// Files to check (`-` for standard input).
    #[arg(required = true)]
    files: Vec<String>,
    #[command(flatten)]
    server: super::user::Server,
}

/// Checks every file and reports each one.
pub fn run(a: Args) -> Result<ExitCode> {
    let client = a.broker.then(|| a.server.client()).transpose()?;
    let mut all_ok = true;
    for f in &a.files {
        let (format, outcome) = match Input::load(f) {
            Err(e) => (None, Err((vec![plain(format!("{e:#}"))], None))),
            Ok(input) => match input.format(a.from) {
                None => (
                    None,
                    Err((
                        vec![plain("cannot tell the language; give it with --from".into())],
                        Some(input),
                    )),
                ),
                Some(fmt) => match read(fmt, &input.text, &input.opts) {
                    // What the broker would refuse at submission is an error
                    // here too.
                    Ok(mut p) => match broker_refusals(&p) {
                        errors if errors.is_empty() => {
                            // Asked of the broker, the question has its
                            // answer from the sites themselves.
                            if !a.broker {
                                p.warnings.extend(needs_a_site_that_publishes(&p));
                            }
                            (Some(fmt), Ok((p, input)))
                        }
                        errors => (Some(fmt), Err((errors, Some(input)))),
                    },
                    Err(e) => (Some(fmt), Err((e.diagnostics, Some(input)))),
                },
            },
        };
        all_ok &= outcome.is_ok();
        // The second question, asked only of a file that is correct.
        let checked = match (&outcome, &client) {
            (Ok((_, input)), Some(c)) => {
                let checked = c.check(&SubmitRequest {
                    description: input.text.clone(),
                    format: format.map(|f| f.name().to_string()),
                    ..Default::default()
                });
                Some(checked.map_err(|e| anyhow::anyhow!("{f}: asking the broker: {e}"))?)
            }
            _ => None,
        };
        report(f, format, &outcome, a.json, checked.as_ref());
        all_ok &= checked.as_ref().is_none_or(super::check::all_placed);
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The broker's own checks of every job read ([`brokk_broker::select::validate_at`]),
/// as errors; a file of several jobs names the one at fault.
fn broker_refusals(p: &brokk_jdl::Parsed) -> Vec<Diagnostic> {
    let now = brokk_proto::wall_clock();
    p.jobs
        .iter()
        .enumerate()
        .filter_map(|(k, job)| {
            let why = brokk_broker::select::validate_at(job, now).err()?;
            Some(plain(if p.jobs.len() == 1 {
                format!("the broker would refuse it: {why}")
            } else {
                format!("job {}: the broker would refuse it: {why}", k + 1)
            }))
        })
        .collect()
}

/// What a job asks that a site must publish before a broker sends it
/// there (a URL scheme beyond file and http(s), a container runtime,
/// GPUs, a runtime environment, an architecture): correct in its language,
/// but offline `validate` cannot know the user's sites, so it says so as
/// warnings rather than errors.
fn needs_a_site_that_publishes(p: &brokk_jdl::Parsed) -> Vec<Diagnostic> {
    let plain_site = brokk_model::ResourceInfo {
        total_slots: u32::MAX,
        ..Default::default()
    };
    p.jobs
        .iter()
        .enumerate()
        .flat_map(|(k, job)| {
            let whose = if p.jobs.len() == 1 {
                String::new()
            } else {
                format!("job {}: ", k + 1)
            };
            brokk_broker::select::mismatches(job, &plain_site)
                .into_iter()
                .map(move |m| Diagnostic {
                    severity: brokk_jdl::Severity::Warning,
                    line: 1,
                    column: 1,
                    message: format!(
                        "{whose}a site that publishes no more than every Brokk site does would not take it: {m}"
                    ),
                })
        })
        .collect()
}

type Outcome = std::result::Result<(brokk_jdl::Parsed, Input), (Vec<Diagnostic>, Option<Input>)>;

fn plain(message: String) -> Diagnostic {
    Diagnostic {
        severity: brokk_jdl::Severity::Error,
        line: 1,
        column: 1,
        message,
    }
}

fn report(file: &str, format: Option<Format>, outcome: &Outcome, as_json: bool, checked: Option<&Checked>) {
    match (outcome, as_json) {
        (Ok((p, _)), true) => {
            let mut v = json!({"file": file, "format": format, "ok": true, "jobs": p.jobs.len(), "errors": [], "warnings": p.warnings});
            if let Some(c) = checked {
                v["broker"] = json!(c);
            }
            say!("{v}")
        }
        (Err((errors, _)), true) => {
            say!(
                "{}",
                json!({"file": file, "format": format, "ok": false, "jobs": 0, "errors": errors, "warnings": []})
            )
        }
        (Ok((p, input)), false) => {
            eprint!("{}", brokk_jdl::render_all(&p.warnings, file, &input.text));
            let n = p.jobs.len();
            say!(
                "{file}: ok ({}, {n} job{})",
                format.map_or("?", |f| f.name()),
                if n == 1 { "" } else { "s" }
            );
            if let Some(c) = checked {
                // Those the reading above has not said already.
                let said: Vec<String> = p.warnings.iter().map(ToString::to_string).collect();
                for w in c.warnings.iter().filter(|w| !said.contains(w)) {
                    eprintln!("warning: {file}: {w}");
                }
                for line in super::check::lines(file, c) {
                    say!("{line}");
                }
            }
        }
        (Err((errors, input)), false) => {
            match input {
                Some(i) => eprint!("{}", brokk_jdl::render_all(errors, file, &i.text)),
                None => errors.iter().for_each(|e| eprintln!("{file}: error: {}", e.message)),
            }
            say!("{file}: invalid");
        }
    }
}
