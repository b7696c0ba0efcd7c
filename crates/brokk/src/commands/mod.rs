//! One module per subcommand, plus the input handling they share.

pub mod bench;
pub mod bench_attack;
pub mod bench_sim;
pub mod bench_site;
pub mod bench_soak;
pub mod bench_submit;
pub mod bench_workflow;
pub mod check;
pub mod listing;
pub mod quickstart;
pub mod serve;
pub mod sim;
pub mod site;
pub mod translate;
pub mod user;
pub mod validate;
pub mod workflow;

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use brokk_jdl::{detect, Format, ReadOptions};

/// Arguments of `brokk site` and `brokk serve`.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// The configuration (TOML).
    #[arg(long)]
    pub config: std::path::PathBuf,
    /// Listen here instead of the configured address.
    #[arg(long)]
    pub listen: Option<std::net::SocketAddr>,
}

/// Writes a configuration file that holds tokens, readable by its owner only
/// (servers refuse one that others can read).
pub fn write_private(path: &std::path::Path, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private", path.display()))
}

/// Stack of every thread of a server's runtime. Readers and evaluators bound
/// their nesting so that they fit in a quarter of it in a debug build (their
/// tests run on 2 MiB threads), which leaves this one ample room.
pub const SERVER_STACK_BYTES: usize = 8 << 20;

/// The multi-threaded runtime a server runs on, with [`SERVER_STACK_BYTES`]
/// stacks for its workers and its blocking pool alike.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    // Databases, journals, state directories and sandboxes a server creates
    // are its own and its users' business: private from the start.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(SERVER_STACK_BYTES)
        .build()
        .context("starting the async runtime")
}

/// Before a server starts: glibc's allocator bounded to two arenas that
/// give freed memory back, by running this command again with
/// `GLIBC_TUNABLES` set (the process keeps its pid). With glibc's default
/// of an arena per thread, up to eight per core, the broker stayed at its
/// peak after a flood: 203 MiB after `brokk bench attack` against 65 MiB so
/// bounded (23 MiB before either). A `GLIBC_TUNABLES` already set is the
/// operator's choice and is kept.
pub fn bounded_allocator() -> Result<()> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        use std::os::unix::process::CommandExt;
        let failed = std::process::Command::new(std::env::current_exe()?)
            .args(std::env::args_os().skip(1))
            .env(
                "GLIBC_TUNABLES",
                "glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536",
            )
            .exec();
        return Err(failed).context("running again with the allocator bounded");
    }
    Ok(())
}

/// Runs a server on a new runtime: `start` binds it and returns its address
/// and task; prints `listening on http://ADDR` (tests and scripts read it)
/// and serves until the task ends or Ctrl-C.
pub fn serve<F, E>(start: F) -> Result<std::process::ExitCode>
where
    F: std::future::Future<Output = std::result::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>), E>>,
    E: std::error::Error + Send + Sync + 'static,
{
    let rt = runtime()?;
    rt.block_on(async {
        let (addr, server) = start.await?;
        say!("listening on http://{addr}");
        tokio::select! {
            r = server => r.context("the server stopped")?,
            _ = tokio::signal::ctrl_c() => {}
        }
        Ok(std::process::ExitCode::SUCCESS)
    })
}

/// A job description read from a file or standard input.
pub struct Input {
    /// The name used in diagnostics (`-` reads standard input and is shown as `<stdin>`).
    pub name: String,
    /// The text.
    pub text: String,
    /// Options for readers: relative files resolve next to the input file.
    pub opts: ReadOptions,
}

impl Input {
    /// Reads `path`, or standard input for `-`.
    pub fn load(path: &str) -> Result<Input> {
        if path == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading standard input")?;
            return Ok(Input {
                name: "<stdin>".into(),
                text,
                opts: ReadOptions::default(),
            });
        }
        let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
        let text = String::from_utf8(bytes).with_context(|| format!("{path} is not UTF-8 text"))?;
        let base_dir = Path::new(path)
            .parent()
            .map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p })
            .map(Path::to_path_buf);
        Ok(Input {
            name: path.to_string(),
            text,
            opts: ReadOptions { base_dir },
        })
    }

    /// The format given, or the one detected from content and extension.
    pub fn format(&self, given: Option<Format>) -> Option<Format> {
        given.or_else(|| {
            let ext = Path::new(&self.name).extension().and_then(|e| e.to_str());
            detect(&self.text, ext)
        })
    }
}
