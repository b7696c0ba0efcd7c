//! The user's commands against a broker service: `submit`, `status`, `watch`,
//! `cancel`, `hold`, `release`, `output`, `get`, `resources`, `reserve`,
//! `coalloc`. The service comes from `--server` or `BROKK_SERVER`, the
//! token from `--token` or `BROKK_TOKEN`; either, when not given, from the
//! client configuration file ([`ClientConfig`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use brokk_model::{JobPreferences, Time};
use brokk_proto::broker::BrokerClient;
use brokk_proto::wire::{BrokerState, SubmitRequest};

use super::check;
use super::listing::{self, Filter};

/// Where the service is and who we are.
#[derive(clap::Args, Clone)]
pub struct Server {
    /// The broker service's URL; an active broker and its standby
    /// separated by a comma [default: the client configuration's `server`,
    /// else http://127.0.0.1:8440].
    #[arg(long, env = "BROKK_SERVER")]
    server: Option<String>,
    /// Bearer token (never shown in `--help`).
    #[arg(
        long,
        env = "BROKK_TOKEN",
        default_value = "",
        hide_env_values = true,
        hide_default_value = true
    )]
    token: String,
}

impl Server {
    /// A client of the service as this identity: the server and token
    /// given, else those of the client configuration file.
    pub fn client(&self) -> Result<BrokerClient> {
        let config = ClientConfig::read()?;
        let server = self
            .server
            .clone()
            .or(config.server)
            .unwrap_or_else(|| "http://127.0.0.1:8440".into());
        let token = match (self.token.is_empty(), &config.token_file) {
            (true, Some(file)) => std::fs::read_to_string(file)
                .with_context(|| {
                    format!(
                        "reading the token file {} (token_file in the client configuration)",
                        file.display()
                    )
                })?
                .trim()
                .to_string(),
            _ => self.token.clone(),
        };
        Ok(BrokerClient::new(&server, &token))
    }
}

/// The client configuration file: `$BROKK_CONFIG`, else
/// `$XDG_CONFIG_HOME/brokk/client.toml` (`~/.config/brokk/client.toml`),
/// read when present:
///
/// ```toml
/// server = "https://broker.example.org:8440"
/// token_file = "~/.brokk/token"     # a file holding the token, readable by you alone
/// ```
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The broker service's URL.
    pub server: Option<String>,
    /// A file holding the bearer token (`~/` is the home directory).
    pub token_file: Option<PathBuf>,
}

impl ClientConfig {
    /// Where the file is looked for.
    fn path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("BROKK_CONFIG") {
            return Some(PathBuf::from(p));
        }
        let base = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(base.join("brokk/client.toml"))
    }

    /// The file's settings; none when there is no file. A file that
    /// `BROKK_CONFIG` names must exist; a token file others can read is
    /// refused, as ssh refuses such a key.
    pub fn read() -> Result<ClientConfig> {
        let Some(path) = Self::path() else {
            return Ok(ClientConfig::default());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && std::env::var_os("BROKK_CONFIG").is_none() => {
                return Ok(ClientConfig::default())
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let mut c: ClientConfig = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
        if let Some(f) = &mut c.token_file {
            if let (Ok(rest), Some(home)) = (f.strip_prefix("~"), std::env::var_os("HOME")) {
                *f = PathBuf::from(home).join(rest);
            }
            use std::os::unix::fs::PermissionsExt;
            if std::fs::metadata(&*f).is_ok_and(|m| m.permissions().mode() & 0o077 != 0) {
                anyhow::bail!(
                    "{}: the token file {} can be read by others; chmod 600 it",
                    path.display(),
                    f.display()
                );
            }
        }
        Ok(c)
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
    /// Preferences: a JSON file, or the JSON itself
    /// (`--prefs '{"objective":"earliest_start"}'`).
    #[arg(long)]
    prefs: Option<String>,
    /// Keep the jobs held until `brokk release`.
    #[arg(long)]
    hold: bool,
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
    /// Follow every job the description made until all have ended (the
    /// status is 0 only if every one finished with exit code 0).
    #[arg(long)]
    watch: bool,
    /// Submit nothing: ask the broker where it would send the jobs now and
    /// what each site answers, as `sbatch --test-only` does (the status is
    /// 1 if a job has no site that takes it).
    #[arg(long, visible_alias = "test-only", conflicts_with_all = ["watch", "hold"])]
    dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// A job (shown with its history), or several (a table of them);
    /// without one, all of yours that pass the filters.
    ids: Vec<String>,
    #[command(flatten)]
    filter: Filter,
    #[command(flatten)]
    layout: listing::Layout,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Without a job: the newest this many that pass the filters (0: all).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[command(flatten)]
    server: Server,
}

/// `brokk watch`.
#[derive(clap::Args)]
pub struct IdArgs {
    /// The jobs, followed together until every one has ended.
    #[arg(required = true)]
    ids: Vec<String>,
    /// Print each change as a line of JSON (an event stream), the job last.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk cancel`, `hold`, `release`: jobs named, or picked by filters.
#[derive(clap::Args)]
pub struct SelectArgs {
    /// The jobs.
    #[arg(required_unless_present_any = ["state", "name", "site", "since"])]
    ids: Vec<String>,
    #[command(flatten)]
    filter: Filter,
    /// Print JSON (one object for one job named, an array otherwise).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// `brokk get`.
#[derive(clap::Args)]
pub struct GetArgs {
    /// The jobs (each into a directory of its own, as arcget does).
    #[arg(required = true)]
    ids: Vec<String>,
    /// Where to put its files [default: a directory named after the job];
    /// with several jobs, each job's go into a directory named after it
    /// there.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Replace files that are there already (without it, `get` refuses
    /// before fetching anything).
    #[arg(long)]
    force: bool,
    /// Print what was fetched as JSON: the directory, each file with its
    /// path and size in bytes, and the files not fetched.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// Files at least this large show their transfer's progress.
const SHOWN_TRANSFER: u64 = 8 << 20;

/// A progress bar for a transfer of `len` bytes on standard error: drawn
/// only for a large file and only on a terminal (indicatif draws nothing
/// elsewhere), so scripts and logs read the same lines as before.
fn transfer_bar(len: u64) -> indicatif::ProgressBar {
    if len < SHOWN_TRANSFER {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("  {bytes}/{total_bytes} {wide_bar} {bytes_per_sec}, {eta} left")
            .expect("a fixed template"),
    );
    bar
}

/// A size in bytes as people read it: `512 B`, `1.5 KiB`, `3.0 MiB`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
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
    /// Start window `EARLIEST,LATEST`, each a time (RFC 3339) or a duration
    /// from now (`0,2h`) [default: now to an hour from now].
    #[arg(long)]
    window: Option<String>,
    /// Largest difference between the jobs' starts (`60`, `2m`).
    #[arg(long, default_value = "60")]
    delta: brokk_model::Duration,
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
            let at = |s: &str| listing::time_arg("--window", s.trim(), |d| now + d);
            (at(e)?, at(l)?)
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
        delta: a.delta,
    };
    let done = a.server.client()?.coallocate(&req)?;
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
    /// How long (`3600`, `90m`, `1h30m`, `01:30:00`).
    #[arg(long, required_unless_present_any = ["cancel", "list"])]
    duration: Option<brokk_model::Duration>,
    /// Earliest start: a time (RFC 3339) or a duration from now (`2h`, `1d`)
    /// [default: now].
    #[arg(long)]
    earliest: Option<String>,
    /// Latest start: a time (RFC 3339) or a duration from now [default: a
    /// day after the earliest].
    #[arg(long)]
    latest: Option<String>,
    /// Cancel this reservation instead.
    #[arg(long, conflicts_with_all = ["earliest", "latest"])]
    cancel: Option<String>,
    /// List your reservations instead.
    #[arg(long, conflicts_with_all = ["earliest", "latest", "cancel", "duration"])]
    list: bool,
    /// With `--list`: only reservations in these states (comma-separated:
    /// held, committed, ended, cancelled; `ended` is a held or committed one
    /// whose time is over, which the others then leave out).
    #[arg(long, value_delimiter = ',', requires = "list")]
    state: Vec<ReservationShown>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// A reservation's state as `reserve --list` shows and filters it: the
/// broker's, or `ended` once its time is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReservationShown {
    Held,
    Committed,
    Ended,
    Cancelled,
}

impl ReservationShown {
    /// How `r` stands at `now`.
    fn of(r: &brokk_proto::wire::BrokerReservation, now: Time) -> ReservationShown {
        use brokk_broker::reservations::BrokerReservationState as S;
        match r.state() {
            S::Cancelled => ReservationShown::Cancelled,
            _ if r.end <= now => ReservationShown::Ended,
            S::Held => ReservationShown::Held,
            S::Committed => ReservationShown::Committed,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ReservationShown::Held => "held",
            ReservationShown::Committed => "committed",
            ReservationShown::Ended => "ended",
            ReservationShown::Cancelled => "cancelled",
        }
    }
}

fn print_reservation(r: &brokk_proto::wire::BrokerReservation, now: Time) {
    say!(
        "{} {} at {}: {} slots {} to {}",
        r.id,
        ReservationShown::of(r, now).name(),
        r.site,
        r.amount,
        r.start,
        r.end
    );
}

/// Runs `brokk reserve`.
pub fn reserve(a: ReserveArgs) -> Result<ExitCode> {
    let c = a.server.client()?;
    let now = brokk_proto::wall_clock();
    if a.list {
        let mut all = c.reservations()?;
        if !a.state.is_empty() {
            all.retain(|r| a.state.contains(&ReservationShown::of(r, now)));
        }
        if a.json {
            say!("{}", serde_json::to_string_pretty(&all)?);
        } else {
            for r in &all {
                print_reservation(r, now);
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let r = match &a.cancel {
        Some(id) => c.cancel_reservation(id)?,
        None => {
            let earliest = a
                .earliest
                .as_deref()
                .map(|s| listing::time_arg("--earliest", s, |d| now + d))
                .transpose()?
                .unwrap_or(now);
            let latest = a
                .latest
                .as_deref()
                .map(|s| listing::time_arg("--latest", s, |d| now + d))
                .transpose()?
                .unwrap_or(earliest + brokk_model::Duration::hours(24));
            c.reserve(&brokk_proto::wire::BrokerReservationRequest {
                amount: a.amount,
                duration: a.duration.unwrap_or_default(),
                earliest,
                latest,
            })?
        }
    };
    if a.json {
        say!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print_reservation(&r, now);
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

/// `brokk quota`.
#[derive(clap::Args)]
pub struct QuotaArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

/// Runs `brokk quota`: the caller's uploads on the broker against the quota.
pub fn quota(a: QuotaArgs) -> Result<ExitCode> {
    let me = a.server.client()?.me()?;
    let u = &me["uploads"];
    if a.json {
        say!("{}", serde_json::to_string_pretty(u)?);
        return Ok(ExitCode::SUCCESS);
    }
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    say!(
        "uploads of {}: {} of {} bytes, {} of {} files",
        listing::shown(me["identity"].as_str().unwrap_or("?")),
        n("bytes"),
        n("quota_bytes"),
        n("files"),
        n("quota_files")
    );
    Ok(ExitCode::SUCCESS)
}

/// Polls until every job of `ids` ends, printing each state change (as a
/// line of JSON with `json`), with the reason or exit code of an end that
/// is not a success; exits non-zero unless every one finished with code 0.
fn watch(c: &BrokerClient, ids: &[String], json: bool) -> Result<ExitCode> {
    // Per job: history entries shown, last state shown, and whether it ended well.
    let mut seen = vec![0; ids.len()];
    let mut last = vec![None; ids.len()];
    let mut ended: Vec<Option<bool>> = vec![None; ids.len()];
    let mut waiting = None;
    while ended.iter().any(Option::is_none) {
        for (k, id) in ids.iter().enumerate() {
            if ended[k].is_some() {
                continue;
            }
            let j = job_patiently(c, id, &mut waiting)?;
            if json {
                // Every history entry once, in order: an event stream a script can follow.
                for h in j.history.iter().skip(seen[k]) {
                    let event = serde_json::json!({
                        "event": "state", "id": j.id, "at": h.at, "state": h.state, "detail": h.detail,
                    });
                    say!("{event}");
                }
                seen[k] = seen[k].max(j.history.len());
            } else if Some(j.state()) != last[k] {
                say!("{}", change_line(&j));
                last[k] = Some(j.state());
            }
            if j.state().is_terminal() {
                if json {
                    say!("{}", serde_json::json!({ "event": "end", "job": j }));
                }
                ended[k] = Some(j.state() == BrokerState::Finished && j.exit_code == Some(0));
            }
        }
        if ended.iter().any(Option::is_none) {
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let ok = ended.iter().all(|e| *e == Some(true));
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// How long `watch` waits for a broker that does not answer (restarting,
/// or its standby taking over) before it gives up.
const PATIENCE: Duration = Duration::from_secs(600);

/// Job `id` as the broker answers; while the broker cannot be reached (or
/// answers that it is not the active one), asked again every second for
/// up to [`PATIENCE`], said once on standard error. `waiting` keeps since
/// when it has not answered.
fn job_patiently(
    c: &BrokerClient,
    id: &str,
    waiting: &mut Option<std::time::Instant>,
) -> Result<brokk_proto::wire::BrokerJob> {
    loop {
        match c.job(id) {
            Ok(j) => {
                if waiting.take().is_some() {
                    eprintln!("the broker answers again");
                }
                return Ok(j);
            }
            Err(e) if e.status == 0 || e.status == 503 => {
                let since = *waiting.get_or_insert_with(|| {
                    eprintln!(
                        "the broker does not answer ({e}); trying again for up to {} minutes",
                        PATIENCE.as_secs() / 60
                    );
                    std::time::Instant::now()
                });
                if since.elapsed() >= PATIENCE {
                    return Err(e.into());
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A job's state as `watch` prints it: `ID STATE [at SITE]`, and for an end
/// that is not a success its exit code or its reason.
fn change_line(j: &brokk_proto::wire::BrokerJob) -> String {
    let at = j
        .site
        .as_ref()
        .map_or(String::new(), |s| format!(" at {}", listing::shown(s)));
    let why = match (j.state(), j.exit_code, &j.reason) {
        (BrokerState::Finished, Some(code), _) if code != 0 => format!(" (exit code {code})"),
        (BrokerState::Failed | BrokerState::Cancelled, _, Some(reason)) => format!(": {}", listing::shown(reason)),
        _ => String::new(),
    };
    format!("{} {}{at}{why}", listing::shown(&j.id), j.state())
}

/// Preferences from `--prefs`: inline JSON, or a file holding it.
fn preferences(arg: &str) -> Result<JobPreferences> {
    let (text, what) = if arg.trim_start().starts_with('{') {
        (arg.to_string(), "--prefs".to_string())
    } else {
        let text = std::fs::read_to_string(arg).with_context(|| format!("reading {arg}"))?;
        (text, arg.to_string())
    };
    brokk_proto::wire::from_json(text.as_bytes())
        .map_err(|e| anyhow::anyhow!("{what}: not a preferences document: {e}"))
}

/// Uploads the local input files the description names (those with no
/// URL), each once, and returns input name -> SHA-256 for the submission.
fn upload_inputs(
    c: &BrokerClient,
    input: &super::Input,
    format: Option<&str>,
) -> Result<std::collections::BTreeMap<String, String>> {
    let Some(format) = format.and_then(|f| f.parse::<brokk_jdl::Format>().ok()) else {
        return Ok(Default::default());
    };
    // A description that does not read is sent as it is: the broker's
    // answer names the error with its position.
    let Ok(parsed) = brokk_jdl::read(format, &input.text, &input.opts) else {
        return Ok(Default::default());
    };
    let base = input.opts.base_dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let inputs = parsed.jobs.iter().flat_map(|j| &j.input_files);
    upload_files(c, &base, inputs, |_| true)
}

/// Uploads the local `inputs` (those with no URL) found under `base` for
/// which `wanted` holds, each once; returns input name -> SHA-256.
pub fn upload_files<'a>(
    c: &BrokerClient,
    base: &std::path::Path,
    inputs: impl Iterator<Item = &'a brokk_model::InputFile>,
    wanted: impl Fn(&std::path::Path) -> bool,
) -> Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    for f in inputs {
        if f.source.is_some() || out.contains_key(&f.name) {
            continue;
        }
        // Where the description says it is on this machine, else its name
        // beside the description.
        let path = base.join(f.local.as_deref().unwrap_or(&f.name));
        if !wanted(&path) {
            continue;
        }
        let (sha, size) = brokk_site::uploads::digest_file(&path)
            .with_context(|| format!("input file {}: reading {}", f.name, path.display()))?;
        if !c.has_upload(&sha)? {
            eprintln!("uploading {} ({})", f.name, human_bytes(size));
            let file = std::fs::File::open(&path).with_context(|| format!("reading {}", path.display()))?;
            let bar = transfer_bar(size);
            let body = reqwest::blocking::Body::sized(bar.wrap_read(file), size);
            c.upload_from(&sha, body)
                .with_context(|| format!("uploading {}", path.display()))?;
            bar.finish_and_clear();
        }
        out.insert(f.name.clone(), sha);
    }
    Ok(out)
}

/// Runs `brokk submit`.
pub fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let input = super::Input::load(&a.file)?;
    let mut prefs: Option<JobPreferences> = a.prefs.as_deref().map(preferences).transpose()?;
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
    let c = a.server.client()?;
    let mut request = SubmitRequest {
        description: input.text.clone(),
        format,
        preferences: prefs,
        reservation: a.reservation.clone(),
        uploads: Default::default(),
        hold: a.hold,
    };
    if a.dry_run {
        let checked = c.check(&request).map_err(|e| anyhow::anyhow!("{}: {e}", input.name))?;
        return Ok(check::show(&input.name, &checked, a.json));
    }
    request.uploads = upload_inputs(&c, &input, request.format.as_deref())?;
    let accepted = c.submit(&request)?;
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
        return watch(&c, &accepted.ids, a.json);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `brokk status`.
pub fn status(a: StatusArgs) -> Result<ExitCode> {
    let c = a.server.client()?;
    // A wrong column or order is said before anything is asked.
    let _ = a.layout.render(Vec::new(), Time(0))?;
    let now = brokk_proto::wall_clock();
    match a.ids.as_slice() {
        // All that pass the filters: below.
        [] => {}
        [id] => {
            let j = c.job(id)?;
            if a.json {
                say!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                crate::emit(format_args!("{}", a.layout.render(vec![j.clone()], now)?));
                if a.layout.csv {
                    return Ok(ExitCode::SUCCESS);
                }
                // Said once: on a line of its own unless the table shows it.
                if let (Some(r), false) = (&j.reason, a.layout.shows("reason")) {
                    say!("  reason: {}", listing::shown(r));
                }
                if let Some(d) = &j.delegated {
                    say!(
                        "  delegated here along {} ({} more hops allowed)",
                        listing::shown(&d.path.join(" → ")),
                        d.ttl
                    );
                }
                for h in &j.history {
                    say!(
                        "  {} {}{}",
                        h.at,
                        h.state,
                        h.detail
                            .as_ref()
                            .map_or(String::new(), |d| format!(": {}", listing::shown(d)))
                    );
                }
                for w in &j.warnings {
                    say!("  warning: {}", listing::shown(w));
                }
                // What `brokk get` can fetch whether or not the site answers.
                for k in &j.kept {
                    let what = match (k.bytes, &k.note) {
                        (Some(n), _) => format!("kept by the broker ({})", human_bytes(n)),
                        (None, Some(note)) => listing::shown(note),
                        (None, None) => "not kept".into(),
                    };
                    say!("  output {}: {what}", listing::shown(&k.name));
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        ids => {
            // Each as it is; one that cannot be read is said and the rest shown.
            let mut jobs = Vec::new();
            let mut failed = false;
            for id in ids {
                match c.job(id) {
                    Ok(j) => jobs.push(j),
                    Err(e) => {
                        eprintln!("{id}: {e}");
                        failed = true;
                    }
                }
            }
            if a.json {
                say!("{}", serde_json::to_string_pretty(&jobs)?);
            } else {
                crate::emit(format_args!("{}", a.layout.render(jobs, now)?));
            }
            return Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS });
        }
    }
    let (jobs, more) = a.filter.fetch(&c, a.limit, now)?;
    if a.json {
        say!("{}", serde_json::to_string_pretty(&jobs)?);
    } else {
        crate::emit(format_args!("{}", a.layout.render(jobs, now)?));
    }
    // After the table, where a reader's eye ends up.
    if more {
        eprintln!(
            "the newest {} jobs shown; more match (--limit N shows more, --limit 0 all)",
            a.limit
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `brokk watch`.
pub fn watch_cmd(a: IdArgs) -> Result<ExitCode> {
    watch(&a.server.client()?, &a.ids, a.json)
}

/// What `cancel`, `hold` and `release` do to one job.
#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// `brokk cancel`.
    Cancel,
    /// `brokk hold`.
    Hold,
    /// `brokk release`.
    Release,
    /// `brokk requeue`.
    Requeue,
}

impl Action {
    fn done(self) -> &'static str {
        match self {
            Action::Cancel => "cancelled",
            Action::Hold => "held",
            Action::Release => "released",
            Action::Requeue => "requeued",
        }
    }
}

/// Runs `brokk cancel`, `hold`, `release` or `requeue` on the jobs named
/// and those the filters pick (of those, only jobs that have not ended, or
/// for `requeue` only those that have).
pub fn select(a: SelectArgs, action: Action) -> Result<ExitCode> {
    let c = a.server.client()?;
    let mut ids = a.ids.clone();
    if a.filter.is_set() {
        let (picked, _) = a.filter.fetch(&c, 0, brokk_proto::wall_clock())?;
        for j in picked {
            let wanted = j.state().is_terminal() == matches!(action, Action::Requeue);
            if wanted && !ids.contains(&j.id) {
                ids.push(j.id);
            }
        }
    }
    let mut done = Vec::new();
    let mut first_error = None;
    // Every job is tried; one that fails does not stop the rest.
    for id in &ids {
        let r = match action {
            Action::Cancel => c.cancel(id),
            Action::Hold => c.hold(id),
            Action::Release => c.release(id),
            Action::Requeue => c.requeue(id),
        };
        match r {
            Ok(j) => {
                if !a.json {
                    say!("{} {}", j.id, j.state());
                }
                done.push(j);
            }
            Err(e) => {
                if ids.len() > 1 {
                    eprintln!("error: {id}: {e}");
                }
                first_error.get_or_insert(e);
            }
        }
    }
    if a.json {
        match done.as_slice() {
            [one] if a.ids.len() == 1 && !a.filter.is_set() => say!("{}", serde_json::to_string_pretty(one)?),
            all => say!("{}", serde_json::to_string_pretty(all)?),
        }
    }
    let failed = ids.len() - done.len();
    match first_error {
        // The first error's kind sets the exit status.
        Some(e) if ids.len() > 1 => {
            Err(anyhow::Error::new(e).context(format!("{failed} of {} jobs were not {}", ids.len(), action.done())))
        }
        Some(e) => Err(e.into()),
        None => Ok(ExitCode::SUCCESS),
    }
}

/// Runs `brokk get`: every file each job leaves (its streams and output
/// files) into a directory of the job's, as `arcget` does. A job that
/// cannot be fetched is said and the others fetched; the exit status is
/// then the first failure's (1 when files were missing).
pub fn get(a: GetArgs) -> Result<ExitCode> {
    let c = a.server.client()?;
    let several = a.ids.len() > 1;
    let mut reports = Vec::new();
    let mut status = ExitCode::SUCCESS;
    let mut first_error = None;
    for id in &a.ids {
        let dir = match (&a.dir, several) {
            (Some(d), true) => Some(d.join(id)),
            (d, _) => d.clone(),
        };
        match get_one(&c, id, dir, a.force, a.json) {
            Ok((report, complete)) => {
                if !complete {
                    status = ExitCode::from(1);
                }
                reports.push(report);
            }
            Err(e) if several => {
                eprintln!("error: {id}: {e:#}");
                first_error.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    if a.json {
        match reports.as_slice() {
            [one] if !several => say!("{}", serde_json::to_string_pretty(one)?),
            all => say!("{}", serde_json::to_string_pretty(all)?),
        }
    }
    match first_error {
        Some(e) => Err(e.context(format!(
            "{} of {} jobs were not fetched",
            a.ids.len() - reports.len(),
            a.ids.len()
        ))),
        None => Ok(status),
    }
}

/// Fetches job `id`'s files into `dir` (its id by default); the report
/// `--json` prints and whether every file came.
fn get_one(
    c: &BrokerClient,
    id: &str,
    dir: Option<PathBuf>,
    force: bool,
    json: bool,
) -> Result<(serde_json::Value, bool)> {
    let j = c.job(id)?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(&j.id));
    let mut names: Vec<String> = Vec::new();
    for n in j.stdout.iter().chain(j.stderr.iter()).chain(j.outputs.iter()) {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    // Only plain relative paths land in the directory.
    let plain = |name: &str| {
        let rel = std::path::Path::new(name);
        !rel.is_absolute() && rel.components().all(|p| matches!(p, std::path::Component::Normal(_)))
    };
    if !force {
        let there: Vec<String> = names
            .iter()
            .filter(|n| plain(n) && dir.join(n).symlink_metadata().is_ok())
            .map(|n| listing::shown(&dir.join(n).display().to_string()))
            .collect();
        if !there.is_empty() {
            anyhow::bail!("not replacing {} (--force replaces them)", there.join(", "));
        }
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut missing = Vec::new();
    let mut fetched = Vec::new();
    for name in &names {
        let rel = std::path::Path::new(name);
        if !plain(name) {
            missing.push(format!("{} (not a relative path)", listing::shown(name)));
            continue;
        }
        match c.file(&j.id, name) {
            Ok(mut body) => {
                let to = dir.join(rel);
                if let Some(parent) = to.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let mut f = std::fs::File::create(&to).with_context(|| format!("creating {}", to.display()))?;
                let bar = transfer_bar(body.content_length().unwrap_or(0));
                let n =
                    std::io::copy(&mut bar.wrap_read(&mut body), &mut f).with_context(|| format!("fetching {name}"))?;
                bar.finish_and_clear();
                if !json {
                    say!("{} ({})", listing::shown(&to.display().to_string()), human_bytes(n));
                }
                fetched.push(serde_json::json!({"name": name, "path": to, "bytes": n}));
            }
            Err(e) if e.status == 404 => missing.push(listing::shown(name)),
            Err(e) => return Err(e.into()),
        }
    }
    if !missing.is_empty() && !json {
        eprintln!("not fetched: {}", missing.join(", "));
    }
    let complete = missing.is_empty();
    let report = serde_json::json!({"job": j.id, "dir": dir, "files": fetched, "missing": missing});
    Ok((report, complete))
}

/// Runs `brokk output`.
pub fn output(a: OutputArgs) -> Result<ExitCode> {
    let c = a.server.client()?;
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
    let all = a.server.client()?.resources()?;
    if a.json {
        say!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "{:<12} {:>6} {:>6} {:>8} {:>8} {:>10}  {:<8} queues",
        "site",
        "slots",
        "free",
        "running",
        "waiting",
        "wait (s)",
        "health"
    );
    for r in all {
        // A site that did not answer comes as its name and the error.
        let info = match r.get("error") {
            Some(_) => None,
            None => serde_json::from_value::<brokk_model::ResourceInfo>(r.clone()).ok(),
        };
        match info {
            Some(i) => say!(
                "{:<12} {:>6} {:>6} {:>8} {:>8} {:>10}  {:<8} {}",
                i.name,
                i.total_slots,
                i.free_slots,
                i.running_jobs,
                i.waiting_jobs,
                i.estimated_wait.map_or("-".into(), |d| d.0.to_string()),
                // A site that answers and says nothing of its health is up, as the dashboard shows it.
                i.health.as_deref().unwrap_or("up"),
                if i.shares.is_empty() {
                    "-".to_string()
                } else {
                    i.shares.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(",")
                }
            ),
            // In the table's columns, the reason where the queues go.
            None => say!(
                "{:<12} {:>6} {:>6} {:>8} {:>8} {:>10}  {:<8} {}",
                r["name"].as_str().unwrap_or("?"),
                "-",
                "-",
                "-",
                "-",
                "-",
                "down",
                r["error"].as_str().unwrap_or("no answer")
            ),
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_people_write_them() {
        let h = super::human_bytes;
        assert_eq!(
            [h(0), h(1023), h(1536), h(3 << 20)],
            ["0 B", "1023 B", "1.5 KiB", "3.0 MiB"]
        );
    }
}
