//! `brokk translate`: read a description in one language, write it in another.

use std::process::ExitCode;

use anyhow::{anyhow, Result};
use brokk_jdl::{read, write, Format};
use serde_json::json;

use super::Input;

/// Arguments of `brokk translate`.
#[derive(clap::Args)]
pub struct Args {
    /// Source language; detected from the content when absent.
    #[arg(long)]
    from: Option<Format>,
    /// Target language: jsdl, xrsl, rsl, jdl, condor, slurm or json.
    #[arg(long)]
    to: Format,
    /// Print one JSON object with the text, what was dropped and the warnings.
    #[arg(long)]
    json: bool,
    /// The description to translate, or `-` for standard input.
    file: String,
}

/// Runs the translation; exit 1 when the input cannot be read.
pub fn run(a: Args) -> Result<ExitCode> {
    let input = Input::load(&a.file)?;
    let format = input
        .format(a.from)
        .ok_or_else(|| anyhow!("cannot tell the language of {}; give it with --from", input.name))?;
    let parsed = match read(format, &input.text, &input.opts) {
        Ok(p) => p,
        Err(e) => {
            if a.json {
                say!("{}", json!({ "ok": false, "format": format, "errors": e.diagnostics }));
            } else {
                eprint!("{}", brokk_jdl::render_all(&e.diagnostics, &input.name, &input.text));
            }
            return Ok(ExitCode::from(1));
        }
    };
    let mut written = write(a.to, &parsed.jobs)?;
    if parsed.together {
        // Written as separate jobs, the components no longer wait for each other.
        written.dropped.push(format!(
            "the {} jobs start together (a heterogeneous job): written as separate jobs, they do not; \
             `brokk submit` co-allocates them",
            parsed.jobs.len()
        ));
    }
    if a.json {
        let v = json!({
            "ok": true,
            "from": format,
            "to": a.to,
            "jobs": parsed.jobs.len(),
            "text": written.text,
            "dropped": written.dropped,
            "warnings": parsed.warnings,
        });
        say!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        eprint!("{}", brokk_jdl::render_all(&parsed.warnings, &input.name, &input.text));
        for d in &written.dropped {
            eprintln!("warning: not translated to {}: {d}", a.to);
        }
        crate::emit(format_args!("{}", written.text));
    }
    Ok(ExitCode::SUCCESS)
}
