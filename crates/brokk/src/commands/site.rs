//! `brokk site`: runs a site agent until interrupted.

use std::process::ExitCode;

use anyhow::Result;
use brokk_site::Config;

/// Runs the agent; prints `listening on URL` once it serves.
pub fn run(a: super::ServerArgs) -> Result<ExitCode> {
    super::bounded_allocator()?;
    let mut config = Config::load(&a.config)?;
    if let Some(l) = a.listen {
        config.listen = l;
    }
    if let Some(notice) = brokk_site::accounts::shared_account_notice(&config) {
        eprintln!("note: {notice}");
    }
    eprintln!("note: {}", brokk_site::containment::notice(&config));
    super::serve(async { brokk_site::start(config).await.map(|r| (r.addr, r.server)) })
}
