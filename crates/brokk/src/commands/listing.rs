//! How the job commands show and pick jobs: the columns `squeue` and
//! `condor_q` users read (chosen with `--format`), and the filters that
//! `status`, `cancel`, `hold` and `release` share.

use anyhow::{bail, Result};
use brokk_model::{Duration, Time};
use brokk_proto::broker::{BrokerClient, JobsQuery};
use brokk_proto::wire::{BrokerJob, BrokerState};

/// The most jobs the service returns at once.
const MAX_PAGE: usize = 10_000;

/// A column of `brokk status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The broker's id.
    Id,
    /// The job's name.
    Name,
    /// Its state.
    State,
    /// The site it went to.
    Site,
    /// Its exit code.
    Exit,
    /// When it was accepted.
    Submitted,
    /// When it started, or its predicted start ("in 9m").
    Started,
    /// How long it has run.
    Elapsed,
    /// Wall time left while it runs.
    Left,
    /// When it ended.
    Ended,
    /// The language it was written in.
    Format,
    /// Predicted seconds to start.
    Tts,
    /// Predicted seconds to delivery.
    Ttd,
    /// Why it failed or was cancelled.
    Reason,
}

/// Every field with its name on the command line and its heading.
const FIELDS: [(Field, &str, &str); 14] = [
    (Field::Id, "id", "JOB"),
    (Field::Name, "name", "NAME"),
    (Field::State, "state", "STATE"),
    (Field::Site, "site", "SITE"),
    (Field::Exit, "exit", "EXIT"),
    (Field::Submitted, "submitted", "SUBMITTED"),
    (Field::Started, "started", "STARTED"),
    (Field::Elapsed, "elapsed", "ELAPSED"),
    (Field::Left, "left", "LEFT"),
    (Field::Ended, "ended", "ENDED"),
    (Field::Format, "format", "FORMAT"),
    (Field::Tts, "tts", "TTS"),
    (Field::Ttd, "ttd", "TTD"),
    (Field::Reason, "reason", "REASON"),
];

/// The columns shown without `--format`.
pub const DEFAULT_FORMAT: &str = "id,name,state,site,exit,submitted,started,elapsed,left";

/// Parses `--format`: field names separated by commas.
pub fn parse_format(spec: &str) -> Result<Vec<Field>> {
    let mut out = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match FIELDS.iter().find(|(_, n, _)| n.eq_ignore_ascii_case(name)) {
            Some((f, _, _)) => out.push(*f),
            None => {
                let all: Vec<&str> = FIELDS.iter().map(|(_, n, _)| *n).collect();
                bail!("--format: unknown field `{name}`; fields are {}", all.join(", "));
            }
        }
    }
    if out.is_empty() {
        bail!("--format: name at least one field");
    }
    Ok(out)
}

/// A clock time as a table shows it: the time of day for today, the date
/// and minute otherwise; local time, as `squeue` shows it.
fn clock(t: Time, now: Time) -> String {
    use chrono::{Local, TimeZone};
    let (Some(at), Some(today)) = (
        Local.timestamp_opt(t.0, 0).single(),
        Local.timestamp_opt(now.0, 0).single(),
    ) else {
        return t.to_string();
    };
    if at.date_naive() == today.date_naive() {
        at.format("%H:%M:%S").to_string()
    } else {
        at.format("%Y-%m-%d %H:%M").to_string()
    }
}

/// The predicted start of a job that has not started, if the broker made one.
fn predicted_start(j: &BrokerJob) -> Option<Time> {
    j.predicted_tts.map(|s| j.submitted + Duration(s))
}

/// How long the job has run (so far, or in all).
fn elapsed(j: &BrokerJob, now: Time) -> Option<Duration> {
    let start = j.started?;
    Some(j.ended.unwrap_or(now) - start)
}

/// Wall time left while the job runs.
fn left(j: &BrokerJob, now: Time) -> Option<Duration> {
    match (j.state(), elapsed(j, now), j.wall_time) {
        (BrokerState::Running, Some(e), Some(w)) => Some(Duration(w) - e),
        _ => None,
    }
}

/// `text` as a terminal shows it safely: control characters (an escape
/// sequence's ESC, a carriage return, a line break) as Rust writes them in
/// a string (`\u{1b}`, `\r`, `\n`), so that a job's name or reason cannot
/// retitle a terminal, clear it, or add a row of its own. `--json` and
/// file contents stay as they are.
pub fn shown(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One cell, control characters escaped ([`shown`]).
pub fn cell(j: &BrokerJob, f: Field, now: Time) -> String {
    shown(&raw_cell(j, f, now))
}

fn raw_cell(j: &BrokerJob, f: Field, now: Time) -> String {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    match f {
        Field::Id => j.id.clone(),
        Field::Name => or_dash(j.name.clone()),
        Field::State => j.state().to_string(),
        Field::Site => or_dash(j.site.clone()),
        Field::Exit => or_dash(j.exit_code.map(|c| c.to_string())),
        Field::Submitted => clock(j.submitted, now),
        Field::Started => match (j.started, predicted_start(j)) {
            (Some(t), _) => clock(t, now),
            (None, Some(p)) if !j.state().is_terminal() && p > now => format!("in {}", (p - now).human()),
            (None, Some(_)) if !j.state().is_terminal() => "due".into(),
            _ => "-".into(),
        },
        Field::Elapsed => or_dash(elapsed(j, now).map(Duration::human)),
        Field::Left => or_dash(left(j, now).map(Duration::human)),
        Field::Ended => or_dash(j.ended.map(|t| clock(t, now))),
        Field::Format => j.format.clone(),
        Field::Tts => or_dash(j.predicted_tts.map(|s| Duration(s).human())),
        Field::Ttd => or_dash(j.predicted_ttd.map(|s| Duration(s).human())),
        Field::Reason => or_dash(j.reason.clone()),
    }
}

/// The table's lines: a heading, then one line per job, columns as wide as
/// their widest cell.
pub fn table(jobs: &[BrokerJob], fields: &[Field], now: Time) -> Vec<String> {
    let heading: Vec<String> = fields
        .iter()
        .map(|f| {
            FIELDS
                .iter()
                .find(|(g, _, _)| g == f)
                .map_or("", |(_, _, h)| h)
                .to_string()
        })
        .collect();
    let rows: Vec<Vec<String>> = std::iter::once(heading)
        .chain(jobs.iter().map(|j| fields.iter().map(|&f| cell(j, f, now)).collect()))
        .collect();
    aligned(&rows)
}

/// `rows` (a heading first, if any) as lines whose columns are as wide as
/// their widest cell, two spaces apart.
pub fn aligned(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
}

/// How `brokk status` lays its rows out: which columns, in what order,
/// with or without the heading, as a table or as CSV (`squeue`'s
/// `--format`, `--sort` and `--noheader`; `sacct --parsable2`'s use).
#[derive(clap::Args, Debug, Clone)]
pub struct Layout {
    /// Columns, comma-separated, from: id, name, state, site, exit,
    /// submitted, started, elapsed, left, ended, format, tts, ttd, reason.
    #[arg(long, default_value = DEFAULT_FORMAT)]
    pub format: String,
    /// Order the rows by these fields, comma-separated, each ascending or,
    /// after a `-`, descending (`--sort=-submitted,name`); by default the
    /// newest job first.
    #[arg(long, allow_hyphen_values = true)]
    pub sort: Option<String>,
    /// Leave out the heading line.
    #[arg(long)]
    pub noheader: bool,
    /// Comma-separated values (RFC 4180) with the same columns, for
    /// spreadsheets and scripts: times in RFC 3339 (UTC), durations in
    /// seconds, an unknown value empty.
    #[arg(long)]
    pub csv: bool,
}

impl Layout {
    /// Whether the table shows column `name`.
    pub fn shows(&self, name: &str) -> bool {
        self.format.split(',').any(|c| c.trim().eq_ignore_ascii_case(name))
    }
}

/// A field's value as rows are sorted by it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Number(i64),
    Text(String),
}

/// Job `j`'s value of `f` to sort by (`None` sorts last either way).
fn key(j: &BrokerJob, f: Field, now: Time) -> Option<Key> {
    let n = |v: Option<i64>| v.map(Key::Number);
    match f {
        Field::Id => Some(Key::Text(j.id.clone())),
        Field::Name => j.name.clone().map(Key::Text),
        Field::State => Some(Key::Text(j.state().to_string())),
        Field::Site => j.site.clone().map(Key::Text),
        Field::Exit => n(j.exit_code.map(i64::from)),
        Field::Submitted => n(Some(j.submitted.0)),
        Field::Started => n(j.started.or_else(|| predicted_start(j)).map(|t| t.0)),
        Field::Elapsed => n(elapsed(j, now).map(|d| d.0)),
        Field::Left => n(left(j, now).map(|d| d.0)),
        Field::Ended => n(j.ended.map(|t| t.0)),
        Field::Format => Some(Key::Text(j.format.clone())),
        Field::Tts => n(j.predicted_tts),
        Field::Ttd => n(j.predicted_ttd),
        Field::Reason => j.reason.clone().map(Key::Text),
    }
}

/// Parses `--sort`: fields, each with `-` before it for descending.
fn parse_sort(spec: &str) -> Result<Vec<(Field, bool)>> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, descending) = match part.strip_prefix('-') {
            Some(n) => (n, true),
            None => (part.strip_prefix('+').unwrap_or(part), false),
        };
        let f = parse_format(name).map_err(|_| {
            let all: Vec<&str> = FIELDS.iter().map(|(_, n, _)| *n).collect();
            anyhow::anyhow!("--sort: unknown field `{name}`; fields are {}", all.join(", "))
        })?;
        out.push((f[0], descending));
    }
    if out.is_empty() {
        bail!("--sort: name at least one field");
    }
    Ok(out)
}

/// A cell as CSV carries it ([`Layout::csv`]).
fn csv_cell(j: &BrokerJob, f: Field, now: Time) -> String {
    let time = |t: Option<Time>| t.map_or(String::new(), |t| t.to_string());
    let secs = |d: Option<i64>| d.map_or(String::new(), |d| d.to_string());
    match f {
        Field::Submitted => time(Some(j.submitted)),
        Field::Started => time(j.started),
        Field::Ended => time(j.ended),
        Field::Elapsed => secs(elapsed(j, now).map(|d| d.0)),
        Field::Left => secs(left(j, now).map(|d| d.0)),
        Field::Tts => secs(j.predicted_tts),
        Field::Ttd => secs(j.predicted_ttd),
        Field::Exit => secs(j.exit_code.map(i64::from)),
        Field::Name => j.name.clone().unwrap_or_default(),
        Field::Site => j.site.clone().unwrap_or_default(),
        Field::Reason => j.reason.clone().unwrap_or_default(),
        Field::Id | Field::State | Field::Format => raw_cell(j, f, now),
    }
}

impl Layout {
    /// `jobs` laid out as asked: sorted, then as a table or CSV, each line
    /// ending in a line feed.
    pub fn render(&self, mut jobs: Vec<BrokerJob>, now: Time) -> Result<String> {
        let fields = parse_format(&self.format)?;
        if let Some(spec) = &self.sort {
            let order = parse_sort(spec)?;
            // Stable: rows equal in every key keep the service's order.
            jobs.sort_by(|a, b| {
                order
                    .iter()
                    .map(|&(f, descending)| match (key(a, f, now), key(b, f, now)) {
                        (Some(x), Some(y)) if descending => y.cmp(&x),
                        (Some(x), Some(y)) => x.cmp(&y),
                        // An unknown value last, whichever the direction.
                        (x, y) => x.is_none().cmp(&y.is_none()),
                    })
                    .find(|o| o.is_ne())
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
        }
        if !self.csv {
            let lines = table(&jobs, &fields, now);
            let skip = usize::from(self.noheader);
            return Ok(lines.iter().skip(skip).map(|l| format!("{l}\n")).collect());
        }
        let mut w = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(Vec::new());
        if !self.noheader {
            let names = fields
                .iter()
                .map(|f| FIELDS.iter().find(|(g, ..)| g == f).map_or("", |(_, n, _)| *n));
            w.write_record(names)?;
        }
        for j in &jobs {
            w.write_record(fields.iter().map(|&f| csv_cell(j, f, now)))?;
        }
        let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("writing CSV: {e}"))?;
        Ok(String::from_utf8(bytes)?)
    }
}

/// Which jobs a command takes: every filter given must hold.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Filter {
    /// Only jobs in these states (comma-separated: accepted, held,
    /// planned, reserving, moving, dispatched, running, finished, failed, cancelled).
    #[arg(long, value_delimiter = ',')]
    pub state: Vec<BrokerState>,
    /// Only jobs with these names (comma-separated; `*` matches any text).
    #[arg(long, value_delimiter = ',')]
    pub name: Vec<String>,
    /// Only jobs at these sites (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub site: Vec<String>,
    /// Only jobs submitted since then: a duration back from now (`2h`,
    /// `1d`) or a time (RFC 3339).
    #[arg(long)]
    pub since: Option<String>,
}

/// `pattern` with `*` matching any text against `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

/// A time given to `option`: RFC 3339, or a duration (`90m`, `2h`, `1d`)
/// that `offset` makes a time of (back from now for `--since`, ahead of it
/// for a reservation's window).
pub fn time_arg(option: &str, s: &str, offset: impl FnOnce(Duration) -> Time) -> Result<Time> {
    if let Ok(d) = Duration::parse_human(s) {
        return Ok(offset(d));
    }
    Time::parse(s).map_err(|_| anyhow::anyhow!("{option}: `{s}` is neither a duration (2h, 1d) nor a time (RFC 3339)"))
}

impl Filter {
    /// Whether any filter is given.
    pub fn is_set(&self) -> bool {
        !(self.state.is_empty() && self.name.is_empty() && self.site.is_empty() && self.since.is_none())
    }

    /// The earliest submission time `--since` allows.
    fn since(&self, now: Time) -> Result<Option<Time>> {
        self.since
            .as_deref()
            .map(|s| time_arg("--since", s, |d| now - d))
            .transpose()
    }

    /// The newest `limit` of the caller's jobs that pass (0: all of them),
    /// fetched page by page from `c`, and whether more pass beyond them.
    /// One state and `--since` are filtered by the service, the rest here.
    pub fn fetch(&self, c: &BrokerClient, limit: usize, now: Time) -> Result<(Vec<BrokerJob>, bool)> {
        let one_state = match self.state.as_slice() {
            [s] => Some(s.as_str()),
            _ => None,
        };
        let here = self.state.len() > 1 || !self.name.is_empty() || !self.site.is_empty();
        let page = if limit == 0 || here {
            MAX_PAGE
        } else {
            limit.min(MAX_PAGE)
        };
        let since = self.since(now)?;
        let (mut out, mut before) = (Vec::new(), None::<String>);
        loop {
            let jobs = c.jobs(&JobsQuery {
                state: one_state,
                since,
                before: before.as_deref(),
                limit: Some(page),
            })?;
            let full = jobs.len() == page;
            before = jobs.last().map(|j| j.id.clone());
            for j in self.apply(jobs, now)? {
                if limit > 0 && out.len() == limit {
                    return Ok((out, true));
                }
                out.push(j);
            }
            if !full {
                return Ok((out, false));
            }
        }
    }

    /// The jobs that pass, in their order.
    pub fn apply(&self, jobs: Vec<BrokerJob>, now: Time) -> Result<Vec<BrokerJob>> {
        let since = self.since(now)?;
        Ok(jobs
            .into_iter()
            .filter(|j| self.state.is_empty() || self.state.contains(&j.state()))
            .filter(|j| self.name.is_empty() || j.name.as_deref().is_some_and(|n| self.name.iter().any(|p| glob(p, n))))
            .filter(|j| self.site.is_empty() || j.site.as_ref().is_some_and(|s| self.site.contains(s)))
            .filter(|j| since.is_none_or(|t| j.submitted >= t))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, name: Option<&str>, state: BrokerState, submitted: i64) -> BrokerJob {
        // As the broker reports it.
        let mut j = BrokerJob::default().restored(state);
        j.id = id.into();
        j.name = name.map(str::to_string);
        j.submitted = Time(submitted);
        j
    }

    #[test]
    fn filters_combine() {
        let jobs = vec![
            job("a", Some("sim-1"), BrokerState::Running, 100),
            job("b", Some("sim-2"), BrokerState::Finished, 200),
            job("c", Some("plot"), BrokerState::Running, 300),
            job("d", None, BrokerState::Running, 400),
        ];
        let f = Filter {
            name: vec!["sim-*".into()],
            ..Filter::default()
        };
        let ids = |v: Vec<BrokerJob>| v.into_iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(ids(f.apply(jobs.clone(), Time(1000)).unwrap()), ["a", "b"]);
        let f = Filter {
            name: vec!["sim-*".into()],
            state: vec![BrokerState::Running],
            ..Filter::default()
        };
        assert_eq!(ids(f.apply(jobs.clone(), Time(1000)).unwrap()), ["a"]);
        let f = Filter {
            since: Some("12m".into()),
            ..Filter::default()
        };
        assert_eq!(ids(f.apply(jobs.clone(), Time(1000)).unwrap()), ["c", "d"]);
        let f = Filter {
            since: Some("yesterday".into()),
            ..Filter::default()
        };
        assert!(f.apply(jobs, Time(1000)).is_err());
    }

    #[test]
    fn globs() {
        assert!(glob("a*c", "abc") && glob("*", "") && glob("a*b*c", "a-b-c") && glob("x", "x"));
        assert!(!glob("a*c", "ab") && !glob("ab*ab", "ab") && !glob("x", "xy"));
    }

    #[test]
    fn cells_read_like_squeue() {
        let now = Time(10_000);
        let mut j = job("a", Some("n"), BrokerState::Dispatched, 9_000);
        j.predicted_tts = Some(1_540);
        assert_eq!(cell(&j, Field::Started, now), "in 9m");
        assert_eq!(cell(&j, Field::Elapsed, now), "-");
        j = j.restored(BrokerState::Running);
        j.started = Some(Time(9_700));
        j.wall_time = Some(3_600);
        assert_eq!(cell(&j, Field::Elapsed, now), "5m");
        assert_eq!(cell(&j, Field::Left, now), "55m");
        assert!(parse_format("id,bogus")
            .unwrap_err()
            .to_string()
            .contains("fields are id, name"));
        let t = table(&[j], &parse_format("id,state,left").unwrap(), now);
        assert_eq!(t, ["JOB  STATE    LEFT", "a    running  55m"]);
    }

    fn layout(format: &str, sort: Option<&str>, noheader: bool, csv: bool) -> Layout {
        Layout {
            format: format.into(),
            sort: sort.map(str::to_string),
            noheader,
            csv,
        }
    }

    #[test]
    fn rows_sort_by_fields_either_way_with_unknown_values_last() {
        let mut a = job("a", Some("zeta"), BrokerState::Finished, 300);
        a.exit_code = Some(0);
        let mut b = job("b", Some("alpha"), BrokerState::Failed, 100);
        b.exit_code = Some(3);
        let c = job("c", None, BrokerState::Running, 200);
        let jobs = vec![a, b, c];
        let ids = |l: &Layout| {
            let text = l.render(jobs.clone(), Time(1000)).unwrap();
            text.lines()
                .map(|r| r.split_whitespace().next().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&layout("id", Some("submitted"), true, false)), ["b", "c", "a"]);
        assert_eq!(ids(&layout("id", Some("-submitted"), true, false)), ["a", "c", "b"]);
        // No name sorts last, ascending or descending.
        assert_eq!(ids(&layout("id", Some("name"), true, false)), ["b", "a", "c"]);
        assert_eq!(ids(&layout("id", Some("-name"), true, false)), ["a", "b", "c"]);
        // Ties go to the next field; the heading stays first without --noheader.
        assert_eq!(
            ids(&layout("id", Some("-exit,id"), false, false)),
            ["JOB", "b", "a", "c"]
        );
        let bad = layout("id", Some("size"), false, false).render(jobs.clone(), Time(0));
        assert!(bad.unwrap_err().to_string().contains("--sort: unknown field `size`"));
    }

    #[test]
    fn csv_quotes_what_needs_it_and_gives_times_and_seconds_for_machines() {
        let mut j = job("a", Some("run, \"big\""), BrokerState::Running, 0);
        j.started = Some(Time(60));
        j.wall_time = Some(3_600);
        j.reason = Some("two\nlines".into());
        let text = layout("id,name,started,elapsed,left,exit,reason", None, false, true)
            .render(vec![j], Time(160))
            .unwrap();
        assert_eq!(
            text,
            "id,name,started,elapsed,left,exit,reason\n\
             a,\"run, \"\"big\"\"\",1970-01-01T00:01:00Z,100,3500,,\"two\nlines\"\n"
        );
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let row = r.records().next().unwrap().unwrap();
        assert_eq!((&row[1], &row[6]), ("run, \"big\"", "two\nlines"));
    }

    #[test]
    fn control_characters_in_cells_are_shown_escaped() {
        let mut j = job("a", Some("\u{1b}]0;owned\u{7}\u{1b}[2J"), BrokerState::Failed, 1);
        j.reason = Some("no\r\na    finished  0".into());
        let t = table(&[j], &parse_format("id,name,reason").unwrap(), Time(10));
        assert_eq!(t.len(), 2, "{t:?}");
        assert!(t.iter().all(|l| !l.chars().any(char::is_control)), "{t:?}");
        assert!(t[1].contains("\\u{1b}]0;owned\\u{7}\\u{1b}[2J"), "{t:?}");
        assert!(t[1].contains("no\\r\\na"), "{t:?}");
        assert_eq!(shown("plain ünïcode"), "plain ünïcode");
    }
}
