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
        Field::Left => match (j.state(), elapsed(j, now), j.wall_time) {
            (BrokerState::Running, Some(e), Some(w)) => (Duration(w) - e).human(),
            _ => "-".into(),
        },
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
    let widths: Vec<usize> = (0..fields.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            cells.join("  ").trim_end().to_string()
        })
        .collect()
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
