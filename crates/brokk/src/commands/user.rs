//! The user's commands against a broker service: `submit`, `status`, `watch`,
//! `cancel`, `output`, `resources`. The service comes from `--server` or
//! `BROKK_SERVER`, the token from `--token` or `BROKK_TOKEN`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use brokk_model::{JobPreferences, Time};
use brokk_proto::broker::BrokerClient;
use brokk_proto::wire::{BrokerJob, BrokerState};

/// Where the service is and who we are.
#[derive(clap::Args, Clone)]
pub struct Server {
    /// The broker service's URL.
    #[arg(long, env = "BROKK_SERVER", default_value = "http://127.0.0.1:8440")]
    server: String,
    /// Bearer token.
    #[arg(long, env = "BROKK_TOKEN", default_value = "")]
    token: String,
}

impl Server {
    fn client(&self) -> BrokerClient {
        BrokerClient::new(&self.server, &self.token)
    }
}

/// `brokk submit`.
#[derive(clap::Args)]
pub struct SubmitArgs {
    /// The job description (any supported language; `-` reads standard input).
    file: String,
    /// Its language, when detection is not enough.
    #[arg(long)]
    format: Option<String>,
    /// Preferences (JSON: objective, start bounds, benchmarks, ...).
    #[arg(long)]
    prefs: Option<PathBuf>,
    /// Run in an advance reservation: a hold on the best site, committed by
    /// the submission ([ET-brokering]'s two phases).
    #[arg(long)]
    reserve: bool,
    /// Keep looking for a site that would deliver the job sooner while it
    /// waits, and move it there ([ET-brokering]'s queue adaptation).
    #[arg(long)]
    adapt: bool,
    /// Run in this reservation, made earlier with `brokk reserve`.
    #[arg(long, conflicts_with = "reserve")]
    reservation: Option<String>,
    /// Follow the job until it ends.
    #[arg(long)]
    watch: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// A job; without one, all of yours.
    id: Option<String>,
    /// Only jobs in this state (accepted, reserving, moving, dispatched,
    /// running, finished, failed, cancelled).
    #[arg(long)]
    state: Option<brokk_proto::wire::BrokerState>,
    /// Only jobs at this site.
    #[arg(long)]
    site: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk watch`.
#[derive(clap::Args)]
pub struct IdArgs {
    /// The job.
    id: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk cancel`.
#[derive(clap::Args)]
pub struct CancelArgs {
    /// The jobs.
    #[arg(required = true)]
    ids: Vec<String>,
    /// Print JSON (one object for one job, an array for several).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk output`.
#[derive(clap::Args)]
pub struct OutputArgs {
    /// The job.
    id: String,
    /// The file [default: the job's standard output].
    name: Option<String>,
    #[command(flatten)]
    server: Server,
}

/// `brokk coalloc`.
#[derive(clap::Args)]
pub struct CoallocArgs {
    /// One description per job.
    #[arg(required = true)]
    files: Vec<String>,
    /// Start window `EARLIEST,LATEST` (RFC 3339) [default: now to an hour from now].
    #[arg(long)]
    window: Option<String>,
    /// Largest difference between the jobs' starts, seconds.
    #[arg(long, default_value_t = 60)]
    delta: i64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// Runs `brokk coalloc`.
pub fn coalloc(a: CoallocArgs) -> Result<ExitCode> {
    let now = brokk_proto::wall_clock();
    let (earliest, latest) = match &a.window {
        Some(w) => {
            let (e, l) = w.split_once(',').context("--window is EARLIEST,LATEST")?;
            (Time::parse(e.trim())?, Time::parse(l.trim())?)
        }
        None => (now, now + brokk_model::Duration::hours(1)),
    };
    let mut jobs = Vec::new();
    for f in &a.files {
        let input = super::Input::load(f)?;
        jobs.push(brokk_proto::wire::CoallocJob {
            format: input.format(None).map(|f| f.name().to_string()),
            description: input.text,
        });
    }
    let req = brokk_proto::wire::CoallocRequest {
        jobs,
        earliest,
        latest,
        delta: brokk_model::Duration(a.delta),
    };
    let done = a.server.client().coallocate(&req)?;
    if a.json {
        say!("{}", serde_json::to_string_pretty(&done)?);
    } else {
        for ((id, site), start) in done.ids.iter().zip(&done.sites).zip(&done.starts) {
            say!("{id} at {site}, starting {start}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `brokk reserve`.
#[derive(clap::Args)]
pub struct ReserveArgs {
    /// Slots.
    #[arg(long, default_value_t = 1)]
    amount: u32,
    /// Seconds.
    #[arg(long, required_unless_present_any = ["cancel", "list"])]
    duration: Option<i64>,
    /// Earliest start (RFC 3339) [default: now].
    #[arg(long)]
    earliest: Option<String>,
    /// Latest start (RFC 3339) [default: a day after the earliest].
    #[arg(long)]
    latest: Option<String>,
    /// Cancel this reservation instead.
    #[arg(long, conflicts_with_all = ["earliest", "latest"])]
    cancel: Option<String>,
    /// List your reservations instead.
    #[arg(long, conflicts_with_all = ["earliest", "latest", "cancel", "duration"])]
    list: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

fn print_reservation(r: &brokk_proto::wire::BrokerReservation) {
    say!(
        "{} {} at {}: {} slots {} to {}",
        r.id,
        r.state,
        r.site,
        r.amount,
        r.start,
        r.end
    );
}

/// Runs `brokk reserve`.
pub fn reserve(a: ReserveArgs) -> Result<ExitCode> {
    let c = a.server.client();
    if a.list {
        let all = c.reservations()?;
        if a.json {
            say!("{}", serde_json::to_string_pretty(&all)?);
        } else {
            for r in &all {
                print_reservation(r);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let r = match &a.cancel {
        Some(id) => c.cancel_reservation(id)?,
        None => {
            let now = brokk_proto::wall_clock();
            let earliest = a.earliest.as_deref().map(Time::parse).transpose()?.unwrap_or(now);
            let latest = a
                .latest
                .as_deref()
                .map(Time::parse)
                .transpose()?
                .unwrap_or(earliest + brokk_model::Duration::hours(24));
            c.reserve(&brokk_proto::wire::BrokerReservationRequest {
                amount: a.amount,
                duration: brokk_model::Duration(a.duration.unwrap_or(0)),
                earliest,
                latest,
            })?
        }
    };
    if a.json {
        say!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_reservation(&r);
    }
    Ok(ExitCode::SUCCESS)
}

/// `brokk resources`.
#[derive(clap::Args)]
pub struct ResourcesArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

fn when(t: Option<Time>) -> String {
    t.map_or("-".into(), |t| t.to_string())
}

fn print_jobs(jobs: &[BrokerJob]) {
    say!(
        "{:<18} {:<8} {:<10} {:>4} {:<10} {:>8} {:>8} {:<21} {:<21}",
        "job",
        "format",
        "state",
        "exit",
        "site",
        "TTS (s)",
        "TTD (s)",
        "started",
        "ended"
    );
    for j in jobs {
        say!(
            "{:<18} {:<8} {:<10} {:>4} {:<10} {:>8} {:>8} {:<21} {:<21}",
            j.id,
            j.format,
            j.state,
            j.exit_code.map_or("-".into(), |c| c.to_string()),
            j.site.as_deref().unwrap_or("-"),
            j.predicted_tts.map_or("-".into(), |v| v.to_string()),
            j.predicted_ttd.map_or("-".into(), |v| v.to_string()),
            when(j.started),
            when(j.ended)
        );
    }
}

fn terminal(j: &BrokerJob) -> bool {
    j.state.is_terminal()
}

/// Polls until the job ends, printing each state change; exits non-zero
/// unless it finished with code 0.
fn watch(c: &BrokerClient, id: &str, json: bool) -> Result<ExitCode> {
    let mut last = None;
    loop {
        let j = c.job(id)?;
        if Some(j.state) != last && !json {
            say!(
                "{} {}{}",
                j.id,
                j.state,
                j.site.as_ref().map_or(String::new(), |s| format!(" at {s}"))
            );
            last = Some(j.state);
        }
        if terminal(&j) {
            if json {
                say!("{}", serde_json::to_string_pretty(&j)?);
            }
            let ok = j.state == BrokerState::Finished && j.exit_code == Some(0);
            return Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Runs `brokk submit`.
pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let input = super::Input::load(&a.file)?;
    let mut prefs: Option<JobPreferences> = match &a.prefs {
        Some(p) => Some(
            serde_json::from_str(&std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
                .with_context(|| format!("{}: not a preferences document", p.display()))?,
        ),
        None => None,
    };
    if a.reserve {
        prefs.get_or_insert_with(JobPreferences::default).use_reservations = Some(true);
    }
    if a.adapt {
        prefs.get_or_insert_with(JobPreferences::default).queue_adaptation = Some(true);
    }
    let format = a
        .format
        .clone()
        .or_else(|| input.format(None).map(|f| f.name().to_string()));
    let c = a.server.client();
    let accepted = c.submit(&input.text, format.as_deref(), prefs, a.reservation.as_deref())?;
    for w in &accepted.warnings {
        eprintln!("warning: {}: {w}", input.name);
    }
    if a.json && !a.watch {
        say!("{}", serde_json::to_string_pretty(&accepted)?);
    } else if !a.json {
        for id in &accepted.ids {
            say!("{id}");
        }
    }
    if a.watch {
        return watch(&c, &accepted.id, a.json);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `brokk status`.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let c = a.server.client();
    match &a.id {
        Some(id) => {
            let j = c.job(id)?;
            if a.json {
                say!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                print_jobs(std::slice::from_ref(&j));
                for h in &j.history {
                    say!(
                        "  {} {}{}",
                        h.at,
                        h.state,
                        h.detail.as_ref().map_or(String::new(), |d| format!(": {d}"))
                    );
                }
                for w in &j.warnings {
                    say!("  warning: {w}");
                }
            }
        }
        None => {
            let mut jobs = c.jobs(a.state.map(|s| s.as_str()))?;
            if let Some(site) = &a.site {
                jobs.retain(|j| j.site.as_deref() == Some(site.as_str()));
            }
            if a.json {
                say!("{}", serde_json::to_string_pretty(&jobs)?);
            } else {
                print_jobs(&jobs);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `brokk watch`.
pub fn watch_cmd(a: IdArgs) -> Result<ExitCode> {
    watch(&a.server.client(), &a.id, a.json)
}

/// Runs `brokk cancel`.
pub fn cancel(a: CancelArgs) -> Result<ExitCode> {
    let c = a.server.client();
    let mut done = Vec::new();
    let mut first_error = None;
    // Every job is tried; one that cannot be cancelled does not stop the rest.
    for id in &a.ids {
        match c.cancel(id) {
            Ok(j) => {
                if !a.json {
                    say!("{} {}", j.id, j.state);
                }
                done.push(j);
            }
            Err(e) => {
                if a.ids.len() > 1 {
                    eprintln!("error: {id}: {e}");
                }
                first_error.get_or_insert(e);
            }
        }
    }
    if a.json {
        match done.as_slice() {
            [one] if a.ids.len() == 1 => say!("{}", serde_json::to_string_pretty(one)?),
            all => say!("{}", serde_json::to_string_pretty(all)?),
        }
    }
    let failed = a.ids.len() - done.len();
    match first_error {
        // The first error's kind sets the exit status.
        Some(e) if a.ids.len() > 1 => {
            Err(anyhow::Error::new(e).context(format!("{failed} of {} jobs were not cancelled", a.ids.len())))
        }
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Runs `brokk output`.
pub fn output(a: OutputArgs) -> Result<ExitCode> {
    let c = a.server.client();
    let name = match a.name {
        Some(n) => n,
        None => c
            .job(&a.id)?
            .stdout
            .context("the job names no standard output file; give a file name")?,
    };
    let mut file = c.file(&a.id, &name)?;
    std::io::copy(&mut file, &mut std::io::stdout().lock())?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `brokk resources`.
pub fn resources(a: ResourcesArgs) -> Result<ExitCode> {
    let all = a.server.client().resources()?;
    if a.json {
        say!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "{:<12} {:>6} {:>6} {:>8} {:>8} {:>10}",
        "site",
        "slots",
        "free",
        "running",
        "waiting",
        "wait (s)"
    );
    for r in all {
        // A site that did not answer comes as its name and the error.
        let info = match r.get("error") {
            Some(_) => None,
            None => serde_json::from_value::<brokk_model::ResourceInfo>(r.clone()).ok(),
        };
        match info {
            Some(i) => say!(
                "{:<12} {:>6} {:>6} {:>8} {:>8} {:>10}",
                i.name,
                i.total_slots,
                i.free_slots,
                i.running_jobs,
                i.waiting_jobs,
                i.estimated_wait.map_or("-".into(), |d| d.0.to_string())
            ),
            None => say!(
                "{:<12} unavailable: {}",
                r["name"].as_str().unwrap_or("?"),
                r["error"].as_str().unwrap_or("no answer")
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}
