//! `brokk serve`: runs the broker service until interrupted.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

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
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async {
        let running = brokk_server::start(config).await?;
        println!("listening on http://{}", running.addr);
        tokio::select! {
            r = running.server => r.context("the server stopped")?,
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(ExitCode::SUCCESS)
    })
}
