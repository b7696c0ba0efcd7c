//! `brokk serve`: runs the broker service until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

/// Arguments of `brokk serve`.
#[derive(clap::Args)]
pub struct Args {
    /// The service's configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Listen here instead of the configured address.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
}

/// Runs the service; prints `listening on URL` once it serves.
pub fn run(a: Args) -> Result<ExitCode> {
    let mut config = brokk_server::Config::load(&a.config)?;
    if let Some(l) = a.listen {
        config.listen = l;
    }
    super::serve(async { brokk_server::start(config).await.map(|r| (r.addr, r.server)) })
}
