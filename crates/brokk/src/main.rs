//! The `brokk` command line.

/// `println!` for what a command prints for its user: a reader that
/// closed the pipe (`brokk status | head -1`) ends the command quietly, as
/// it ends `squeue`, instead of a panic.
macro_rules! say {
    () => {
        $crate::emit(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod commands;

/// Writes to standard output; see [`say!`].
fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing the output: {e}");
        std::process::exit(2);
    }
}

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Brokk: grid resource broker, meta-scheduler and scheduling simulator.
#[derive(Parser)]
#[command(name = "brokk", version, about)]
struct Cli {
    /// How log lines are written to standard error: `text` for people,
    /// `json` (one object per line, with each event's fields such as the
    /// job, site and user) for log shippers; what is logged is filtered by
    /// `BROKK_LOG`.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "BROKK_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Translate a job description from one language to another.
    Translate(commands::translate::Args),
    /// Check job descriptions and report every error with its position.
    Validate(commands::validate::Args),
    /// Measure Brokk's components against baselines run alongside.
    Bench(commands::bench::Args),
    /// Run scheduling experiments on the simulator.
    Sim(commands::sim::Args),
    /// Read workflows (DAGMan, WfCommons, Brokk's JSON) and report every error.
    Workflow(commands::workflow::Args),
    /// Run a site agent: reservations, jobs and the site API for one cluster.
    Site(commands::ServerArgs),
    /// Run the broker service.
    Serve(commands::ServerArgs),
    /// Submit a job description (any language) to the broker service.
    Submit(commands::user::SubmitArgs),
    /// Show your jobs, or one job with its history.
    Status(commands::user::StatusArgs),
    /// Follow a job until it ends.
    Watch(commands::user::IdArgs),
    /// Cancel jobs, named or picked by filters.
    Cancel(commands::user::SelectArgs),
    /// Keep jobs from starting until released: not dispatched yet, or held
    /// at their site (giving their slot back, as `scontrol uhold`).
    Hold(commands::user::SelectArgs),
    /// Let held jobs go: dispatched, or placed again at their site.
    Release(commands::user::SelectArgs),
    /// Send ended jobs (finished, failed or cancelled) again, each under its own id.
    Requeue(commands::user::SelectArgs),
    /// Print a job's output file.
    Output(commands::user::OutputArgs),
    /// Fetch all of a job's files (its output and error streams, its output files) into a directory.
    Get(commands::user::GetArgs),
    /// Show the sites the broker knows.
    Resources(commands::user::ResourcesArgs),
    /// Show what your uploads hold on the broker against your quota.
    Quota(commands::user::QuotaArgs),
    /// Reserve several jobs to start together (within --delta) and submit them.
    Coalloc(commands::user::CoallocArgs),
    /// Reserve slots at the site where they start earliest (or cancel a reservation).
    Reserve(commands::user::ReserveArgs),
    /// Start a broker with three embedded sites, run example jobs in every language, show where they ran.
    Quickstart(commands::quickstart::Args),
    /// Print the shell completion script for bash, zsh, fish, elvish or
    /// powershell (`source <(brokk completions bash)`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (`brokk.1`, `brokk-submit.1`, ...) into a
    /// directory (`man -l DIR/brokk.1`, or install them under `man1`).
    Man {
        /// Where to write them.
        #[arg(long, default_value = ".")]
        out: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    // `brokk supervise FILE`: a site agent starts one for every job it runs,
    // so it goes straight to work, without the command line's set-up.
    if let Some(code) = brokk_site::supervisor::from_args(std::env::args_os().skip(1)) {
        return code;
    }
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("BROKK_LOG"))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().with_current_span(true).init(),
    }
    let result = match cli.command {
        Command::Translate(a) => commands::translate::run(a),
        Command::Validate(a) => commands::validate::run(a),
        Command::Bench(a) => commands::bench::run(a),
        Command::Sim(a) => commands::sim::run(a),
        Command::Workflow(a) => commands::workflow::run(a),
        Command::Site(a) => commands::site::run(a),
        Command::Serve(a) => commands::serve::run(a),
        Command::Submit(a) => commands::user::submit(a),
        Command::Status(a) => commands::user::status(a),
        Command::Watch(a) => commands::user::watch_cmd(a),
        Command::Cancel(a) => commands::user::select(a, commands::user::Action::Cancel),
        Command::Hold(a) => commands::user::select(a, commands::user::Action::Hold),
        Command::Requeue(a) => commands::user::select(a, commands::user::Action::Requeue),
        Command::Release(a) => commands::user::select(a, commands::user::Action::Release),
        Command::Get(a) => commands::user::get(a),
        Command::Output(a) => commands::user::output(a),
        Command::Resources(a) => commands::user::resources(a),
        Command::Quota(a) => commands::user::quota(a),
        Command::Coalloc(a) => commands::user::coalloc(a),
        Command::Reserve(a) => commands::user::reserve(a),
        Command::Quickstart(a) => commands::quickstart::run(a),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "brokk", &mut script);
            // Through `emit`, so that `| head` ends it quietly.
            emit(format_args!("{}", String::from_utf8_lossy(&script)));
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { out } => man_pages(&out),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// Writes the manual page of `brokk` and of each of its commands (and
/// theirs) into `out`, generated from the command definitions.
fn man_pages(out: &std::path::Path) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let cmd = <Cli as clap::CommandFactory>::command();
    fn write(out: &std::path::Path, cmd: &clap::Command, name: &str, n: &mut usize) -> anyhow::Result<()> {
        use anyhow::Context;
        let cmd = cmd.clone().name(name.to_string());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
        let path = out.join(format!("{name}.1"));
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        *n += 1;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            write(out, sub, &format!("{name}-{}", sub.get_name()), n)?;
        }
        Ok(())
    }
    let mut n = 0;
    write(out, &cmd, "brokk", &mut n)?;
    say!("wrote {n} manual pages into {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// The documented exit status for an error: 2 a usage or description
/// error, 3 not found, 4 not permitted, 5 unavailable (the service or a
/// site could not be reached or failed), 6 refused (it conflicts with what
/// the sites hold, as a reservation no site can give). 1 is a job that
/// ended without success (`watch`, `validate`).
fn exit_code(e: &anyhow::Error) -> u8 {
    let Some(call) = e
        .chain()
        .find_map(|c| c.downcast_ref::<brokk_proto::broker::CallError>())
    else {
        return 2;
    };
    match call.status {
        0 | 500..=599 => 5,
        401 | 403 => 4,
        404 => 3,
        409 => 6,
        _ => 2,
    }
}
