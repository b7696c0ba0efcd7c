//! `brokk site`: runs a site agent until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use brokk_site::Config;

/// Arguments of `brokk site`.
#[derive(clap::Args)]
pub struct Args {
    /// The agent's configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Listen here instead of the configured address.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
}

/// Runs the agent; prints `listening on ADDR` once it serves.
pub fn run(a: Args) -> Result<ExitCode> {
    let mut config = Config::load(&a.config)?;
    if let Some(l) = a.listen {
        config.listen = l;
    }
    super::serve(async { brokk_site::start(config).await.map(|r| (r.addr, r.server)) })
}
