//! `brokk workflow`: workflows from DAGMan files, WfCommons instances or
//! Brokk's canonical JSON. `validate` reads one and its node files and
//! reports every error with its file, line and column; admission against a
//! deadline builds on this.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use brokk_jdl::workflow::read_path;

/// Arguments of `brokk workflow`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Read a workflow and its node files; print its tasks and dependencies,
    /// or every error with its place.
    Validate(ValidateArgs),
}

#[derive(clap::Args)]
struct ValidateArgs {
    /// A DAGMan file, a WfFormat instance or Brokk's workflow JSON.
    file: PathBuf,
    /// Print the workflow as Brokk's canonical JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `brokk workflow`.
pub fn run(a: Args) -> Result<ExitCode> {
    let What::Validate(v) = a.what;
    match read_path(&v.file) {
        Ok(read) => {
            for w in &read.warnings {
                eprintln!("{w}");
            }
            let w = &read.workflow;
            if v.json {
                say!("{}", serde_json::to_string_pretty(w)?);
            } else {
                let work: i64 = w.tasks.iter().map(|t| t.runtime.0 * i64::from(t.cores)).sum();
                let bytes: u64 = w.edges.iter().map(|e| e.bytes).sum();
                say!(
                    "{}: ok: {} tasks, {} dependencies, {} processor-seconds on the reference resource, {} bytes between tasks",
                    v.file.display(),
                    w.tasks.len(),
                    w.edges.len(),
                    work,
                    bytes
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            for d in &e.errors {
                eprintln!("{d}");
            }
            Ok(ExitCode::from(1))
        }
    }
}
