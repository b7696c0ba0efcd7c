//! HTCondor submit description files.
//!
//! Commands are `key = value` lines (with `\` continuation and `#` comments);
//! macros `$(name)` and `$(name:default)` expand when a `queue` statement runs,
//! so every job sees the values in force at its own `queue`. `queue N`,
//! `queue v in (...)` and `queue v1,v2 from (...)` / `from FILE` expand to
//! several jobs with `$(Process)`, `$(Step)`, `$(Item)`, `$(ItemIndex)` and
//! `$(Row)` set; `$(Cluster)` is left for the scheduler that assigns it.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use brokk_model::{Attribute, Duration, EnvVar, Job, Memory, MemoryScope, Notify, NotifyOn, OutputFile, Time};

use crate::classad::{BinOp, Parser, Value};
use crate::diag::Diagnostic;
use crate::requirements::{atom, combine, kept_for, lift, Atom};
use crate::{sandbox_input, Dropped, Format, ParseError, Parsed, ReadOptions, Written};

/// Commands about the submitting side or the pool's bookkeeping: nothing
/// about the job changes where Brokk runs it; accepted without a warning.
const HARMLESS: &[&str] = &[
    "log",
    "log_xml",
    "should_transfer_files",
    "when_to_transfer_output",
    "transfer_executable",
    "copy_to_spool",
    "job_ad_information_attrs",
    "stream_output",
    "stream_error",
    "max_idle",
    "max_materialize",
];

/// Commands that change what happens to the job but have no place in
/// Brokk's model: each is read, and a warning says what is not kept.
const UNKEPT: &[(&str, &str)] = &[
    (
        "getenv",
        "the submitting shell's environment is not copied; name the variables in `environment`",
    ),
    ("periodic_remove", "the job is not removed by this expression"),
    ("periodic_hold", "the job is not held by this expression"),
    ("periodic_release", "the job is not released by this expression"),
    ("on_exit_remove", "a job that ends leaves the queue whatever this says"),
    ("on_exit_hold", "a job that ends is not held"),
    ("nice_user", "the job is not run at lower priority"),
    ("job_max_vacate_time", "the site's kill grace applies instead"),
    ("leave_in_queue", "an ended job's record stays at the broker anyway"),
    (
        "want_graceful_removal",
        "a removed job gets SIGTERM, then SIGKILL after the site's grace",
    ),
    ("coresize", "core dumps are off for every job (RLIMIT_CORE 0)"),
];

/// Macro expansion stops growing a value past this many bytes (mutual references can double it at every step).
const MAX_EXPANSION: usize = 1 << 16;

/// Jobs beyond this from one file are refused, so a typo cannot exhaust memory.
const MAX_JOBS: usize = 100_000;

/// Most work macro expansion may take for one description: references
/// followed plus 256-byte pieces copied. About a second of one core at
/// worst; 100,000 queued jobs with a few macros each stay well inside.
const MAX_WORK: u64 = 4_000_000;

struct Line {
    text: String,
    pos: usize,
}

/// Logical lines: continuations joined, comments and blank lines dropped.
fn logical_lines(src: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut cur: Option<Line> = None;
    let mut offset = 0;
    for raw in src.split_inclusive('\n') {
        let here = offset;
        offset += raw.len();
        let body = raw.trim_end_matches(['\n', '\r']);
        let trimmed = body.trim_start();
        let lead = body.len() - trimmed.len();
        if cur.is_none() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        let (piece, cont) = match body.trim_end().strip_suffix('\\') {
            Some(p) => (p, true),
            None => (body, false),
        };
        match &mut cur {
            Some(l) => l.text.push_str(piece.trim_start()),
            None => {
                cur = Some(Line {
                    text: piece[lead..].to_string(),
                    pos: here + lead,
                })
            }
        }
        if !cont {
            out.extend(cur.take());
        }
    }
    out.extend(cur);
    out
}

#[derive(Default)]
struct Macros {
    /// Lower-cased name -> (raw value, byte offset of the value).
    vars: HashMap<String, (String, usize)>,
    /// Lower-cased names some value refers to (`$(name`), kept as values
    /// are set so that telling a variable from a command is one look-up.
    referenced: HashSet<String>,
    /// Work spent expanding so far: references followed, and 256-byte
    /// pieces of text copied in.
    work: Cell<u64>,
    /// Submit commands in the order first set.
    order: Vec<String>,
    /// Lower-cased name -> the name as first written, for messages.
    spelled: HashMap<String, String>,
}

impl Macros {
    fn set(&mut self, name: &str, value: String, pos: usize) {
        let k = name.to_ascii_lowercase();
        // A macro that names itself means its previous value, as in HTCondor (`PATH = $(PATH):/x`).
        let own = format!("$({k})");
        let times = value.to_ascii_lowercase().matches(&own).count();
        let value = if times > 0 {
            let old = self.vars.get(&k).map(|(v, _)| v.clone()).unwrap_or_default();
            // Each such line can multiply the value (`T = $(T)$(T)`): past
            // what an expansion ever copies, the description has spent its
            // budget and is refused as one whose expansion did.
            if old.len().saturating_mul(times).saturating_add(value.len()) > MAX_EXPANSION {
                self.work.set(MAX_WORK + 1);
                value
            } else {
                replace_ignore_case(&value, &own, &old)
            }
        } else {
            value
        };
        let mut rest = value.as_str();
        while let Some(i) = rest.find("$(") {
            rest = &rest[i + 2..];
            let end = rest.find([')', ':', '$']).unwrap_or(rest.len());
            self.referenced.insert(rest[..end].trim().to_ascii_lowercase());
        }
        if !self.vars.contains_key(&k) {
            self.order.push(k.clone());
            self.spelled.insert(k.clone(), name.to_string());
        }
        self.vars.insert(k, (value, pos));
    }

    /// Expands `$(...)` references; undefined macros become empty, as in HTCondor.
    /// Cycles stop at a fixed depth, and expansion stops growing past [`MAX_EXPANSION`].
    fn expand(&self, s: &str, local: &HashMap<String, String>, depth: usize) -> String {
        if depth > 16 || !s.contains("$(") || s.len() > MAX_EXPANSION || self.exhausted() {
            return s.to_string();
        }
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("$(") {
            // `$$(...)` is expanded from the machine ad at match time; keep it.
            if i > 0 && rest.as_bytes()[i - 1] == b'$' {
                out.push_str(&rest[..i + 2]);
                rest = &rest[i + 2..];
                continue;
            }
            out.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let Some(close) = matching_paren(after) else {
                out.push_str(&rest[i..]);
                return out;
            };
            let inner = &after[..close];
            let (name, default) = match inner.split_once(':') {
                Some((n, d)) => (n.trim(), Some(d)),
                None => (inner.trim(), None),
            };
            let k = name.to_ascii_lowercase();
            self.work.set(self.work.get() + 1 + (out.len() as u64 >> 8));
            if k == "dollar" {
                out.push('$');
            } else if k == "cluster" || k == "clusterid" {
                out.push_str(&format!("$({name})"));
            } else if let Some(v) = local.get(&k) {
                out.push_str(v);
            } else if let Some((v, _)) = self.vars.get(&k) {
                out.push_str(&self.expand(v, local, depth + 1));
            } else if let Some(d) = default {
                out.push_str(&self.expand(d, local, depth + 1));
            }
            rest = &after[close + 1..];
            if out.len() > MAX_EXPANSION {
                out.push_str(rest);
                return out;
            }
        }
        out.push_str(rest);
        out
    }

    /// Whether expansion has spent its budget ([`MAX_WORK`]); from then on
    /// nothing more expands, and the reader refuses the description.
    fn exhausted(&self) -> bool {
        self.work.get() > MAX_WORK
    }

    fn get(&self, name: &str, local: &HashMap<String, String>) -> Option<(String, usize)> {
        let (raw, pos) = self.vars.get(name)?;
        let v = self.expand(raw, local, 0).trim().to_string();
        (!v.is_empty()).then_some((v, *pos))
    }
}

fn replace_ignore_case(s: &str, pat: &str, with: &str) -> String {
    let lower = s.to_ascii_lowercase();
    let mut out = String::new();
    let mut last = 0;
    for (i, _) in lower.match_indices(pat) {
        out.push_str(&s[last..i]);
        out.push_str(with);
        last = i + pat.len();
    }
    out.push_str(&s[last..]);
    out
}

fn matching_paren(s: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return Some(i),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Reads a submit description into one job per queued instance.
pub(crate) fn read(src: &str, opts: &ReadOptions) -> Result<Parsed, ParseError> {
    let lines = logical_lines(src);
    let mut m = Macros::default();
    let mut jobs = Vec::new();
    let mut warnings = Vec::new();
    let mut warned: HashSet<String> = HashSet::new();
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        i += 1;
        let t = line.text.trim();
        let lower = t.to_ascii_lowercase();
        if lower == "queue" || lower.starts_with("queue ") || lower.starts_with("queue\t") {
            let (items, consumed) = queue_items(src, &lines, i - 1, &m, opts)?;
            i += consumed;
            let count = items.count;
            let rows: Vec<HashMap<String, String>> = if items.rows.is_empty() {
                vec![HashMap::new()]
            } else {
                items.rows
            };
            for (row_idx, row) in rows.iter().enumerate() {
                for step in 0..count {
                    if jobs.len() >= MAX_JOBS {
                        return Err(
                            Diagnostic::error_at(src, line.pos, format!("more than {MAX_JOBS} jobs queued")).into(),
                        );
                    }
                    let mut local = row.clone();
                    let process = jobs.len().to_string();
                    local.insert("process".into(), process.clone());
                    local.insert("procid".into(), process);
                    local.insert("step".into(), step.to_string());
                    local.insert("itemindex".into(), row_idx.to_string());
                    local.insert("row".into(), row_idx.to_string());
                    jobs.push(make_job(src, &m, &local, &mut warnings, &mut warned)?);
                    if m.exhausted() {
                        return Err(Diagnostic::error_at(
                            src,
                            line.pos,
                            format!(
                                "expanding macros for the jobs of this `queue` took more than {MAX_WORK} steps; \
                                 the description is refused (fewer chained macros, or fewer jobs)"
                            ),
                        )
                        .into());
                    }
                }
            }
            continue;
        }
        let first = lower.split_whitespace().next().unwrap_or("");
        let is_assignment = t[first.len().min(t.len())..].trim_start().starts_with('=');
        if !is_assignment
            && matches!(
                first,
                "if" | "elif" | "else" | "endif" | "include" | "error" | "warning"
            )
        {
            return Err(Diagnostic::error_at(
                src,
                line.pos,
                format!("`{first}` statements are not supported; expand them before submitting"),
            )
            .into());
        }
        let Some((k, v)) = t.split_once('=') else {
            return Err(
                Diagnostic::error_at(src, line.pos, "expected `command = value` or a `queue` statement").into(),
            );
        };
        let key = k.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(Diagnostic::error_at(
                src,
                line.pos,
                format!("expected a command name before `=`, found `{key}`"),
            )
            .into());
        }
        let vpos = line.pos + t.find('=').map_or(0, |e| e + 1) + (v.len() - v.trim_start().len());
        m.set(key, v.trim().to_string(), vpos);
    }
    if jobs.is_empty() {
        return Err(Diagnostic::error_at(src, src.len(), "no `queue` statement: the file submits no job").into());
    }
    Ok(Parsed {
        jobs,
        warnings,
        together: false,
    })
}

struct QueueItems {
    count: usize,
    rows: Vec<HashMap<String, String>>,
}

/// Parses one queue statement (which may continue on following lines); returns the
/// items and how many extra lines it used.
fn queue_items(
    src: &str,
    lines: &[Line],
    at: usize,
    m: &Macros,
    opts: &ReadOptions,
) -> Result<(QueueItems, usize), Diagnostic> {
    let line = &lines[at];
    let err = |msg: String| Diagnostic::error_at(src, line.pos, msg);
    let rest = m.expand(line.text.trim()[5..].trim(), &HashMap::new(), 0);
    let mut words = rest.as_str();
    let mut count = 1usize;
    let first = words.split_whitespace().next().unwrap_or("");
    if let Ok(n) = first.parse::<usize>() {
        count = n;
        words = words[first.len()..].trim_start();
    } else if first.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return Err(err(format!("queue count must be a whole number, found `{first}`")));
    }
    if count > MAX_JOBS {
        return Err(err(format!("queue count {count} is more than {MAX_JOBS}")));
    }
    if words.is_empty() {
        return Ok((
            QueueItems {
                count,
                rows: Vec::new(),
            },
            0,
        ));
    }
    let lw = words.to_ascii_lowercase();
    let (kw_at, kw) = [" in ", " from ", " matching "]
        .iter()
        .filter_map(|k| lw.find(k).map(|p| (p, k.trim())))
        .min()
        .or_else(|| {
            ["in ", "from ", "matching "]
                .iter()
                .find(|k| lw.starts_with(*k))
                .map(|k| (0, k.trim()))
        })
        .ok_or_else(|| {
            err(format!(
                "expected `queue [N] [vars] in|from|matching ...`, found `queue {rest}`"
            ))
        })?;
    let vars: Vec<String> = words[..kw_at]
        .split([',', ' ', '\t'])
        .filter(|s| !s.is_empty())
        .map(|s| s.to_ascii_lowercase())
        .collect();
    let vars = if vars.is_empty() {
        vec!["item".to_string()]
    } else {
        vars
    };
    let list_text = words[kw_at..].trim_start()[kw.len()..].trim();
    let mut consumed = 0;
    let body: Vec<String> = if let Some(open) = list_text.strip_prefix('(') {
        match open.rfind(')') {
            Some(close) => vec![open[..close].to_string()],
            None => {
                let mut acc = vec![open.to_string()];
                loop {
                    let Some(l) = lines.get(at + 1 + consumed) else {
                        return Err(err("the item list is not closed with `)`".into()));
                    };
                    consumed += 1;
                    let t = l.text.trim();
                    if t == ")" {
                        break;
                    }
                    if let Some(last) = t.strip_suffix(')') {
                        acc.push(last.to_string());
                        break;
                    }
                    acc.push(t.to_string());
                }
                acc
            }
        }
    } else if kw == "from" {
        let Some(dir) = &opts.base_dir else {
            return Err(err(format!("`queue ... from {list_text}` reads a file; give the submit file by path, or list the items inline in ( )")));
        };
        let path = dir.join(list_text);
        let text = std::fs::read_to_string(&path).map_err(|e| err(format!("cannot read `{}`: {e}", path.display())))?;
        text.lines().map(str::to_string).collect()
    } else if kw == "in" {
        vec![list_text.to_string()]
    } else {
        return Err(err(
            "`queue ... matching` needs the submit machine's files; list the items with `in` or `from`".into(),
        ));
    };
    let mut rows = Vec::new();
    if kw == "in" {
        for item in body.join(",").split([',', ' ', '\t']).filter(|s| !s.is_empty()) {
            rows.push(HashMap::from([
                (vars[0].clone(), item.trim().to_string()),
                ("item".into(), item.trim().to_string()),
            ]));
        }
    } else {
        for row in body
            .iter()
            .map(|r| r.trim())
            .filter(|r| !r.is_empty() && !r.starts_with('#'))
        {
            let fields: Vec<String> = if row.contains(',') {
                row.splitn(vars.len(), ',').map(|f| f.trim().to_string()).collect()
            } else {
                row.splitn(vars.len(), char::is_whitespace)
                    .map(|f| f.trim().to_string())
                    .collect()
            };
            let mut map = HashMap::new();
            for (k, v) in vars.iter().zip(fields.iter().chain(std::iter::repeat(&String::new()))) {
                map.insert(k.clone(), v.clone());
            }
            rows.push(map);
        }
    }
    if rows.len().saturating_mul(count) > MAX_JOBS {
        return Err(err(format!("more than {MAX_JOBS} jobs queued")));
    }
    Ok((QueueItems { count, rows }, consumed))
}

fn make_job(
    src: &str,
    m: &Macros,
    local: &HashMap<String, String>,
    warnings: &mut Vec<Diagnostic>,
    warned: &mut HashSet<String>,
) -> Result<Job, ParseError> {
    let mut job = Job::default();
    // Every command is read, so that one pass reports every error.
    let mut errors: Vec<Diagnostic> = Vec::new();
    let get = |k: &str| m.get(k, local);
    let bad = |pos: usize, msg: String| Diagnostic::error_at(src, pos, msg);
    if let Some((v, _)) = get("executable") {
        job.executable = Some(v);
    }
    if let Some((v, pos)) = get("arguments") {
        if let Some(a) = keep(
            arguments(&v).ok_or_else(|| bad(pos, "unbalanced quote in `arguments`".into())),
            &mut errors,
        ) {
            job.arguments = a;
        }
    }
    if let Some((v, pos)) = get("environment") {
        if let Some(e) = keep(
            environment(&v).ok_or_else(|| bad(pos, "`environment` must be NAME=value pairs".into())),
            &mut errors,
        ) {
            job.environment = e;
        }
    }
    job.stdin = get("input").map(|v| v.0);
    job.stdout = get("output").map(|v| v.0);
    job.stderr = get("error").map(|v| v.0);
    job.working_directory = get("initialdir").map(|v| v.0);
    // `batch_name` sets the ClassAd's `JobBatchName`, which a submit file
    // may also set itself (`+JobBatchName = "sweep"`).
    job.name = get("batch_name").map(|v| v.0).or_else(|| {
        get("+jobbatchname")
            .map(|(v, _)| v.trim().trim_matches('"').to_string())
            .filter(|v| !v.is_empty())
    });
    job.project = get("accounting_group")
        .or_else(|| get("+projectname"))
        .map(|v| unquote(&v.0));
    if let Some((v, _)) = get("transfer_input_files") {
        job.input_files = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(sandbox_input)
            .collect();
    }
    if let Some((v, _)) = get("transfer_output_files") {
        let remaps = get("transfer_output_remaps").map(|r| unquote(&r.0)).unwrap_or_default();
        let targets: Vec<(String, String)> = remaps
            .split(';')
            .filter_map(|p| {
                p.split_once('=')
                    .map(|(a, b)| (a.trim().to_string(), b.trim().to_string()))
            })
            .collect();
        job.output_files = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|n| OutputFile {
                name: n.to_string(),
                target: targets.iter().find(|(a, _)| a == n).map(|(_, b)| b.clone()),
                size_estimate: None,
            })
            .collect();
    }
    if let Some((v, _)) = get("hold") {
        job.hold = v.trim().eq_ignore_ascii_case("true");
    }
    let number = |key: &str| -> Result<Option<i64>, Diagnostic> {
        let Some((v, pos)) = get(key) else { return Ok(None) };
        v.trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| Diagnostic::error_at(src, pos, format!("{key} must be a whole number, not `{}`", v.trim())))
    };
    match number("max_retries") {
        Ok(n) => job.retries = n.map(|n| n.clamp(0, i64::from(u32::MAX)) as u32),
        Err(e) => errors.push(e),
    }
    match number("priority") {
        Ok(n) => job.priority = n.map(|n| n.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32),
        Err(e) => errors.push(e),
    }
    let to = get("notify_user")
        .map(|(v, _)| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let on = match get("notification") {
        None => None,
        Some((v, pos)) => match v.trim().to_ascii_lowercase().as_str() {
            "never" => Some(Vec::new()),
            "complete" | "always" => Some(vec![NotifyOn::End, NotifyOn::Fail]),
            "error" => Some(vec![NotifyOn::Fail]),
            other => {
                errors.push(Diagnostic::error_at(
                    src,
                    pos,
                    format!("notification must be Always, Complete, Error or Never, not `{other}`"),
                ));
                None
            }
        },
    };
    if to.is_some() || on.is_some() {
        // HTCondor mails on completion unless told otherwise.
        let on = on.unwrap_or_else(|| vec![NotifyOn::End, NotifyOn::Fail]);
        job.notify = Some(Notify { to, on });
    }
    job.container_image = get("container_image")
        .or_else(|| get("docker_image"))
        .map(|(v, _)| v.trim().to_string())
        .or_else(|| get("+singularityimage").map(|(v, _)| v.trim().trim_matches('"').to_string()))
        .filter(|v| !v.is_empty());
    // A grid resource means something only to a grid-universe job.
    let grid = get("universe").is_some_and(|(v, _)| v.trim().eq_ignore_ascii_case("grid"));
    job.grid_resource = get("grid_resource")
        .map(|(v, _)| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|v| grid && !v.is_empty());
    if let Some((v, pos)) = get("universe") {
        keep(universe(&v, pos, src, &mut job, warnings), &mut errors);
    }
    let int = |k: &str| -> Result<Option<u32>, Diagnostic> {
        match get(k) {
            Some((v, pos)) => v
                .parse()
                .map(Some)
                .map_err(|_| bad(pos, format!("`{k}` must be a whole number, found `{v}`"))),
            None => Ok(None),
        }
    };
    // In the parallel universe each of the `machine_count` slots gets `request_cpus`
    // and `request_memory`; otherwise they describe the job's one slot.
    let slot_cpus = keep(int("request_cpus"), &mut errors).flatten();
    job.nodes = keep(int("machine_count"), &mut errors).flatten();
    job.gpus = keep(int("request_gpus"), &mut errors)
        .flatten()
        .map(|g| g.saturating_mul(job.nodes.unwrap_or(1)));
    let scope = match job.nodes {
        Some(n) => {
            job.cpus_per_node = slot_cpus;
            job.cpus = slot_cpus.map(|c| c.saturating_mul(n));
            MemoryScope::Node
        }
        None => {
            job.cpus = slot_cpus;
            MemoryScope::Job
        }
    };
    if let Some((v, pos)) = get("request_memory") {
        let mib = size(&v, true).ok_or_else(|| {
            bad(
                pos,
                format!("`request_memory` must be a size such as 2048 or 2GB, found `{v}`"),
            )
        });
        if let Some(mib) = keep(mib, &mut errors) {
            job.memory = Some(Memory { mib, per: scope });
        }
    }
    if let Some((v, pos)) = get("request_disk") {
        let mib = size(&v, false).ok_or_else(|| {
            bad(
                pos,
                format!("`request_disk` must be a size such as 1048576 (KiB) or 1GB, found `{v}`"),
            )
        });
        job.disk_mib = keep(mib, &mut errors);
    }
    for key in ["allowed_job_duration", "+maxruntime"] {
        if let Some((v, pos)) = get(key) {
            let secs = v
                .parse::<i64>()
                .ok()
                .filter(|s| *s >= 0)
                .ok_or_else(|| bad(pos, format!("`{key}` must be seconds, found `{v}`")));
            job.wall_time = keep(secs, &mut errors).map(Duration);
            break;
        }
    }
    if let Some((v, pos)) = get("deferral_time") {
        let t = v
            .parse::<i64>()
            .map_err(|_| bad(pos, format!("`deferral_time` must be Unix seconds, found `{v}`")));
        job.earliest_start = keep(t, &mut errors).map(Time);
    }
    if let Some((v, pos)) = get("requirements") {
        job.requirements = keep(requirements(src, &v, pos, &mut job), &mut errors).flatten();
    }
    if let Some((v, pos)) = get("rank") {
        let parsed = Parser::new(&v, 0, v.len())
            .and_then(|mut p| p.expr().and_then(|_| p.finish()))
            .map_err(|d| shift(src, pos, &v, d));
        if keep(parsed, &mut errors).is_some() {
            job.rank = Some(v);
        }
    }
    // `+Name = value` puts an attribute into the job's ClassAd: carried as written.
    for k in &m.order {
        if !k.starts_with('+')
            || matches!(
                k.as_str(),
                "+projectname" | "+maxruntime" | "+singularityimage" | "+jobbatchname"
            )
        {
            continue;
        }
        let Some((v, pos)) = get(k).filter(|(v, _)| !v.trim().is_empty()) else {
            continue;
        };
        let name = m.spelled[k].trim_start_matches('+').to_string();
        let lower = name.to_ascii_lowercase();
        if lower.contains("image")
            && (lower.contains("singularity") || lower.contains("docker") || lower.contains("container"))
        {
            warnings.push(Diagnostic::warning_at(
                src,
                pos,
                format!("`+{name}` is carried as an attribute; the image a job runs in is `container_image` (or `+SingularityImage`)"),
            ));
        }
        job.attributes.push(Attribute {
            name,
            value: v.trim().to_string(),
        });
    }
    let mut unkept: Vec<(usize, String)> = Vec::new();
    for (command, what) in UNKEPT {
        // `hold = false`, `getenv = false` and the like change nothing.
        let Some((v, pos)) = get(command).filter(|(v, _)| !v.trim().eq_ignore_ascii_case("false")) else {
            continue;
        };
        if v.trim().is_empty() || !warned.insert(command.to_string()) {
            continue;
        }
        unkept.push((pos, format!("`{command} = {}` is not kept: {what}", v.trim())));
    }
    unkept.sort();
    warnings.extend(unkept.into_iter().map(|(pos, m)| Diagnostic::warning_at(src, pos, m)));
    for k in &m.order {
        let known = matches!(
            k.as_str(),
            "executable"
                | "arguments"
                | "environment"
                | "input"
                | "output"
                | "error"
                | "initialdir"
                | "batch_name"
                | "accounting_group"
                | "+projectname"
                | "transfer_input_files"
                | "transfer_output_files"
                | "transfer_output_remaps"
                | "request_cpus"
                | "request_gpus"
                | "hold"
                | "container_image"
                | "docker_image"
                | "grid_resource"
                | "max_retries"
                | "priority"
                | "notification"
                | "notify_user"
                | "universe"
                | "machine_count"
                | "request_memory"
                | "request_disk"
                | "allowed_job_duration"
                | "+maxruntime"
                | "deferral_time"
                | "requirements"
                | "rank"
        ) || k.starts_with('+')
            || HARMLESS.contains(&k.as_str())
            || UNKEPT.iter().any(|(c, _)| c == k)
            || !k
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '+' || c == '.')
            || local.contains_key(k);
        if !known && !warned.contains(k) && m.vars.get(k).is_some_and(|(v, _)| !v.is_empty()) {
            warned.insert(k.clone());
            let pos = m.vars[k].1;
            // A lower-case name used only as a macro elsewhere is a variable, not a command.
            if !m.referenced.contains(k) {
                warnings.push(Diagnostic::warning_at(
                    src,
                    pos,
                    format!(
                        "submit command `{}` has no meaning for Brokk's model; ignored",
                        m.spelled[k]
                    ),
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(ParseError { diagnostics: errors });
    }
    Ok(job)
}

/// `r`'s value, or `None` with its error kept for the report.
fn keep<T>(r: Result<T, Diagnostic>, errors: &mut Vec<Diagnostic>) -> Option<T> {
    r.map_err(|d| errors.push(d)).ok()
}

/// What the job's universe means for where and how it runs: the vanilla and
/// parallel universes are what Brokk runs; a java job runs its class with
/// `java` (the class file staged with it); local and scheduler jobs run on a
/// grid site like any other (said); a container job is its image (the
/// model's `container_image`); a grid job names the resource it runs on
/// (`grid_resource`, which only a site fronting it takes); a universe that
/// needs what Brokk's model cannot carry (a virtual machine) is refused
/// rather than run without it.
fn universe(v: &str, pos: usize, src: &str, job: &mut Job, warnings: &mut Vec<Diagnostic>) -> Result<(), Diagnostic> {
    match v.trim().to_ascii_lowercase().as_str() {
        "vanilla" | "parallel" => {}
        "container" | "docker" if job.container_image.is_some() => {}
        "container" | "docker" => {
            return Err(Diagnostic::error_at(
                src,
                pos,
                format!("universe = {v} needs `container_image` (or `docker_image`)"),
            ))
        }
        "grid" => {
            let Some(resource) = &job.grid_resource else {
                return Err(Diagnostic::error_at(
                    src,
                    pos,
                    "universe = grid needs `grid_resource` (`arc https://ce.example.org/arex`, \
                     `gt5 host/jobmanager-slurm`, `batch slurm`)",
                ));
            };
            let kind = resource.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
            if brokk_model::grid_kind(&kind).is_none() {
                return Err(Diagnostic::error_at(
                    src,
                    pos,
                    format!(
                        "grid_resource of type `{kind}`: grid sites front ARC CEs (arc, nordugrid), \
                         GRAM gatekeepers (gt2, gt5), HTCondor-CEs (condor) and batch systems (batch)"
                    ),
                ));
            }
        }
        "local" | "scheduler" => warnings.push(Diagnostic::warning_at(
            src,
            pos,
            format!("universe = {v}: the job runs on a grid site like a vanilla job, not on the submitting machine"),
        )),
        "java" => {
            // `executable` is the class file; the first argument names the main class.
            let Some(class_file) = job.executable.take() else {
                return Err(Diagnostic::error_at(
                    src,
                    pos,
                    "universe = java needs `executable` (the .class or .jar file)",
                ));
            };
            let mut args = vec!["-cp".to_string(), ".".to_string()];
            if class_file.ends_with(".jar") {
                args = vec!["-jar".to_string(), class_file.clone()];
            }
            args.append(&mut job.arguments);
            job.executable = Some("java".into());
            job.arguments = args;
            if !job.input_files.iter().any(|f| f.name == class_file) {
                job.input_files.push(sandbox_input(&class_file));
            }
            warnings.push(Diagnostic::warning_at(
                src,
                pos,
                "universe = java: runs as `java` with the class file staged beside it; the site must have Java",
            ));
        }
        other => {
            return Err(Diagnostic::error_at(
                src,
                pos,
                format!(
                    "universe = {other}: Brokk cannot run it as HTCondor would (it has no place for a virtual \
                     machine); use the vanilla, container or grid universe"
                ),
            ))
        }
    }
    Ok(())
}

/// Moves a diagnostic from a value's own text to its place in the file, when the
/// value was not changed by macro expansion.
fn shift(src: &str, pos: usize, value: &str, d: Diagnostic) -> Diagnostic {
    let raw_here = src.get(pos..pos + value.len()) == Some(value);
    let off = if raw_here {
        let line_start: usize = value.lines().take(d.line - 1).map(|l| l.len() + 1).sum();
        line_start
            + value
                .lines()
                .nth(d.line - 1)
                .map_or(0, |l| l.char_indices().nth(d.column - 1).map_or(l.len(), |(i, _)| i))
    } else {
        0
    };
    Diagnostic::error_at(src, pos + off, format!("in the expression: {}", d.message))
}

fn requirements(src: &str, v: &str, pos: usize, job: &mut Job) -> Result<Option<String>, Diagnostic> {
    let mut p = Parser::new(v, 0, v.len()).map_err(|d| shift(src, pos, v, d))?;
    let e = p.expr().map_err(|d| shift(src, pos, v, d))?;
    p.finish().map_err(|d| shift(src, pos, v, d))?;
    Ok(lift(v, &e, |c| match atom(c, true) {
        Some(Atom::Cmp(attr, BinOp::Eq, Value::Str(s))) => {
            let slot = match attr.as_str() {
                "arch" => &mut job.architecture,
                "opsys" => &mut job.operating_system,
                _ => return false,
            };
            if slot.is_some() {
                return false;
            }
            *slot = Some(s.clone());
            true
        }
        _ => false,
    }))
}

fn unquote(s: &str) -> String {
    let t = s.trim();
    if t.len() >= 2 && t.starts_with('"') && t.ends_with('"') {
        t[1..t.len() - 1].to_string()
    } else {
        t.to_string()
    }
}

/// A size in MiB, rounded up, from a number with an optional unit; a bare number
/// counts MiB (`request_memory`) or KiB (`request_disk`), as HTCondor reads them.
fn size(v: &str, bare_is_mib: bool) -> Option<u64> {
    let v = v.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..digits].parse().ok()?;
    let unit_kib: u64 = match v[digits..].trim().to_ascii_uppercase().as_str() {
        "" if bare_is_mib => 1024,
        "" | "K" | "KB" => 1,
        "M" | "MB" => 1024,
        "G" | "GB" => 1024 * 1024,
        "T" | "TB" => 1024 * 1024 * 1024,
        _ => return None,
    };
    Some(n.checked_mul(unit_kib)?.div_ceil(1024))
}

/// The new (double-quoted) or old argument syntax.
fn arguments(v: &str) -> Option<Vec<String>> {
    match v.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => new_syntax_words(inner),
        None => Some(v.split_whitespace().map(|w| w.replace("\\\"", "\"")).collect()),
    }
}

/// Words of the new syntax: whitespace separates, `'...'` groups, `''` and `""` escape.
fn new_syntax_words(s: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' if chars.peek() == Some(&'\'') => {
                            chars.next();
                            cur.push('\'');
                        }
                        '\'' => break,
                        '"' if chars.peek() == Some(&'"') => {
                            chars.next();
                            cur.push('"');
                        }
                        ch => cur.push(ch),
                    }
                }
            }
            '"' if chars.peek() == Some(&'"') => {
                chars.next();
                in_word = true;
                cur.push('"');
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Some(out)
}

fn environment(v: &str) -> Option<Vec<EnvVar>> {
    let pairs: Vec<String> = match v.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => new_syntax_words(inner)?,
        None => v
            .split(';')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect(),
    };
    pairs
        .into_iter()
        .map(|p| {
            p.split_once('=').map(|(n, val)| EnvVar {
                name: n.to_string(),
                value: val.to_string(),
            })
        })
        .collect()
}

fn quote_word(w: &str) -> String {
    if !w.is_empty() && !w.chars().any(|c| c.is_whitespace() || c == '\'' || c == '"') {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "''").replace('"', "\"\""))
    }
}

/// Writes each job as a block of commands and a `queue`; commands a later job does
/// not set are cleared so that it does not inherit them.
pub(crate) fn write(jobs: &[Job]) -> Written {
    let mut d = Dropped::default();
    let mut out = String::new();
    let mut seen: Vec<&'static str> = Vec::new();
    let mut seen_attributes: Vec<&str> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let cmds = commands(job, &mut d);
        for k in &seen {
            if !cmds.iter().any(|(c, _)| c == k) {
                out.push_str(&format!("{k} =\n"));
            }
        }
        for (k, v) in &cmds {
            out.push_str(&format!("{k} = {}\n", escape_dollars(v)));
            if !seen.contains(k) {
                seen.push(k);
            }
        }
        // Commands hold until changed: an attribute of the job before is cleared.
        for a in &seen_attributes {
            if !job.attributes.iter().any(|x| x.name == *a) {
                out.push_str(&format!("+{a} =\n"));
            }
        }
        for a in &job.attributes {
            out.push_str(&format!("+{} = {}\n", a.name, escape_dollars(&a.value)));
            if !seen_attributes.contains(&a.name.as_str()) {
                seen_attributes.push(&a.name);
            }
        }
        out.push_str("queue\n");
    }
    d.finish(out)
}

/// The tasks of one array ([`crate::slurm::array_form`]: their template
/// and indices) as one submit description in HTCondor's own array form:
/// the task index a macro that `queue SLURM_ARRAY_TASK_ID in (...)` sets
/// per job.
pub(crate) fn write_array(template: &Job, indices: &[u32]) -> Written {
    use crate::slurm::TASK_MARK;
    let job = crate::slurm::with_array_variables(template, indices, TASK_MARK);
    let mut written = write(std::slice::from_ref(&job));
    let list: Vec<String> = indices.iter().map(u32::to_string).collect();
    written.text = written.text.replace(TASK_MARK, "$(SLURM_ARRAY_TASK_ID)");
    if let Some(end) = written.text.rfind("queue\n") {
        written.text.truncate(end);
    }
    written
        .text
        .push_str(&format!("queue SLURM_ARRAY_TASK_ID in ({})\n", list.join(", ")));
    written
}

/// Writes a literal `$` as `$(DOLLAR)` so that it is not read as a macro, keeping
/// the `$(Cluster)` placeholders that only the scheduler can fill.
fn escape_dollars(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let keep = ["$(Cluster)", "$(ClusterId)"].iter().find(|p| after.starts_with(*p));
        match keep {
            Some(p) => {
                out.push_str(p);
                rest = &after[p.len()..];
            }
            None => {
                out.push_str("$(DOLLAR)");
                rest = &after[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn commands(job: &Job, d: &mut Dropped) -> Vec<(&'static str, String)> {
    let mut c: Vec<(&'static str, String)> = Vec::new();
    if let Some(n) = &job.name {
        c.push(("batch_name", n.clone()));
    }
    if let Some(e) = &job.executable {
        c.push(("executable", e.clone()));
    }
    if !job.arguments.is_empty() {
        c.push((
            "arguments",
            format!(
                "\"{}\"",
                job.arguments
                    .iter()
                    .map(|a| quote_word(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ));
    }
    if !job.environment.is_empty() {
        let env: Vec<String> = job
            .environment
            .iter()
            .map(|e| quote_word(&format!("{}={}", e.name, e.value)))
            .collect();
        c.push(("environment", format!("\"{}\"", env.join(" "))));
    }
    for (k, v) in [
        ("input", &job.stdin),
        ("output", &job.stdout),
        ("error", &job.stderr),
        ("initialdir", &job.working_directory),
    ] {
        if let Some(v) = v {
            c.push((k, v.clone()));
        }
    }
    if let Some(p) = &job.project {
        c.push(("accounting_group", p.clone()));
    }
    if !job.input_files.is_empty() {
        let files: Vec<String> = job
            .input_files
            .iter()
            .map(|f| match &f.source {
                Some(s) => {
                    if sandbox_input(s).name != f.name {
                        d.note(format!(
                            "input_files: `{}` is renamed from its source, which HTCondor cannot do",
                            f.name
                        ));
                    }
                    s.clone()
                }
                None => f.name.clone(),
            })
            .collect();
        c.push(("transfer_input_files", files.join(", ")));
    }
    if !job.output_files.is_empty() {
        c.push((
            "transfer_output_files",
            job.output_files
                .iter()
                .map(|f| f.name.clone())
                .collect::<Vec<_>>()
                .join(", "),
        ));
        let remaps: Vec<String> = job
            .output_files
            .iter()
            .filter_map(|f| Some(format!("{} = {}", f.name, f.target.as_ref()?)))
            .collect();
        if !remaps.is_empty() {
            c.push(("transfer_output_remaps", format!("\"{}\"", remaps.join("; "))));
        }
    }
    match job.nodes {
        Some(n) => {
            c.push(("machine_count", n.to_string()));
            let per_node = job
                .cpus_per_node
                .or_else(|| job.cpus.filter(|c| n > 0 && c % n == 0).map(|c| c / n));
            match per_node {
                Some(p) => c.push(("request_cpus", p.to_string())),
                None if job.cpus.is_some() => d.note("cpus: do not divide evenly over machine_count"),
                None => {}
            }
            match job.gpus {
                Some(g) if n > 0 && g % n == 0 => c.push(("request_gpus", (g / n).to_string())),
                Some(_) => d.note("gpus: do not divide evenly over machine_count"),
                None => {}
            }
            if job.memory.is_some() {
                match job.memory_per_node_mib() {
                    Some(m) => c.push(("request_memory", format!("{m}MB"))),
                    None => d.note("memory: cannot be turned into the per-machine amount request_memory needs"),
                }
            }
        }
        None => {
            if let Some(n) = job.cpus {
                c.push(("request_cpus", n.to_string()));
            }
            if let Some(g) = job.gpus {
                c.push(("request_gpus", g.to_string()));
            }
            if job.memory.is_some() {
                match job.memory_total_mib() {
                    Some(m) => c.push(("request_memory", format!("{m}MB"))),
                    None => d.note("memory: cannot be turned into the job total that request_memory needs"),
                }
            }
            if job.cpus_per_node.is_some() {
                d.note("cpus_per_node: HTCondor says it only with machine_count");
            }
        }
    }
    if let Some(disk) = job.disk_mib {
        c.push(("request_disk", format!("{disk}MB")));
    }
    if let Some(w) = job.wall_time {
        c.push(("allowed_job_duration", w.0.to_string()));
    }
    if let Some(t) = job.earliest_start {
        c.push(("deferral_time", t.0.to_string()));
    }
    let mut gen = Vec::new();
    if let Some(a) = &job.architecture {
        gen.push(format!("TARGET.Arch == {}", Value::Str(a.clone())));
    }
    if let Some(o) = &job.operating_system {
        gen.push(format!("TARGET.OpSys == {}", Value::Str(o.clone())));
    }
    let own = kept_for(Format::Condor, "requirements", job.requirements.as_deref(), d);
    if let Some(r) = combine(&gen, own.as_deref()) {
        c.push(("requirements", r));
    }
    if let Some(r) = kept_for(Format::Condor, "rank", job.rank.as_deref(), d) {
        c.push(("rank", r));
    }
    if job.hold {
        c.push(("hold", "true".into()));
    }
    if let Some(image) = &job.container_image {
        c.push(("universe", "container".into()));
        c.push(("container_image", image.clone()));
    }
    if let Some(resource) = &job.grid_resource {
        c.push(("universe", "grid".into()));
        c.push(("grid_resource", resource.clone()));
    }
    if let Some(n) = job.retries {
        c.push(("max_retries", n.to_string()));
    }
    if let Some(p) = job.priority {
        c.push(("priority", p.to_string()));
    }
    if let Some(n) = &job.notify {
        let has = |e| n.on.contains(&e);
        let when = match (has(NotifyOn::End), has(NotifyOn::Fail)) {
            (true, _) => "Complete",
            (false, true) => "Error",
            (false, false) => "Never",
        };
        if has(NotifyOn::Begin) {
            d.note("notify: HTCondor sends no mail when a job begins");
        }
        c.push(("notification", when.into()));
        if let Some(to) = &n.to {
            c.push(("notify_user", to.clone()));
        }
    }
    d.sizes("HTCondor", job);
    d.unsupported(
        "HTCondor",
        job,
        &[
            "script",
            "application",
            "cpus_per_task",
            "cpu_time",
            "runtime_environments",
            "queue",
            "reservation",
            "deadline",
            "benchmarks",
        ],
    );
    c
}
