//! `brokk serve`: runs the broker service until interrupted.

use std::process::ExitCode;

use anyhow::Result;

/// Runs the service; prints `listening on URL` once it serves.
pub fn run(a: super::ServerArgs) -> Result<ExitCode> {
    super::bounded_allocator()?;
    let mut config = brokk_server::Config::load(&a.config)?;
    if let Some(l) = a.listen {
        config.listen = l;
    }
    super::serve(async { brokk_server::start(config).await.map(|r| (r.addr, r.server)) })
}
