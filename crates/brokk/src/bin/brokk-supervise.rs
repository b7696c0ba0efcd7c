//! `brokk-supervise supervise FILE`: a job's supervisor as a program of its
//! own. A site agent starts one for every job it runs; this one links only
//! the supervisor, so it starts in a fraction of the time `brokk supervise`
//! takes (the full binary's loading and relocation were half the CPU of a
//! trivial job). The agent uses it when it sits beside the `brokk` binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    brokk_site::supervisor::from_args(std::env::args_os().skip(1)).unwrap_or_else(|| {
        eprintln!("usage: brokk-supervise supervise FILE (started by a site agent for each job)");
        ExitCode::from(2)
    })
}
