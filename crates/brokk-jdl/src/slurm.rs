//! Slurm batch scripts: the `#SBATCH` options that map to the model, and the body.
//!
//! As sbatch does, options are read from `#SBATCH` lines before the first
//! command; later ones are ignored (with a warning). A body that is one plain
//! command becomes `executable` + `arguments`; anything else is kept as `script`.

use brokk_model::{Duration, EnvVar, Job, Memory, MemoryScope, Notify, NotifyOn, Time};

use crate::diag::Diagnostic;
use crate::{shellwords, Dropped, ParseError, Parsed, Written};

/// Options sbatch knows that do not map to the model.
const IGNORED: &[&str] = &[
    "qos",
    "exclusive",
    "dependency",
    "requeue",
    "no-requeue",
    "constraint",
    "C",
    "signal",
    "open-mode",
    "parsable",
    "wait",
    "hold",
    "H",
    "licenses",
    "L",
    "comment",
    "wckey",
    "exclude",
    "x",
    "nodelist",
    "w",
    "distribution",
    "m",
    "kill-on-invalid-dep",
    "switches",
    "get-user-env",
    "propagate",
    "threads-per-core",
    "hint",
    "cores-per-socket",
    "sockets-per-node",
    "mem-bind",
    "cpu-freq",
    "priority",
    "profile",
    "oversubscribe",
    "s",
    "spread-job",
    "use-min-nodes",
    "verbose",
    "v",
    "quiet",
    "Q",
    // The rest of sbatch's manual: read, and said to mean nothing here.
    "acctg-freq",
    "batch",
    "bb",
    "bbf",
    "cluster-constraint",
    "clusters",
    "M",
    "container-id",
    "contiguous",
    "core-spec",
    "S",
    "delay-boot",
    "d",
    "export-file",
    "extra",
    "extra-node-info",
    "B",
    "gpu-bind",
    "gpu-freq",
    "gpus-per-socket",
    "gres-flags",
    "ignore-pbs",
    "mcs-label",
    "mincpus",
    "network",
    "no-kill",
    "k",
    "nodefile",
    "F",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-socket",
    "oom-kill-step",
    "overcommit",
    "O",
    "power",
    "prefer",
    "q",
    "reboot",
    "resv-ports",
    "segment",
    "stepmgr",
    "test-only",
    "thread-spec",
    "time-min",
    "tres-bind",
    "tres-per-task",
    "W",
    "wait-all-nodes",
    "wrap",
    "x11",
];

#[derive(Default)]
struct Opts {
    ntasks: Option<u32>,
    cpt: Option<u32>,
    tasks_per_node: Option<u32>,
    /// `--gpus`: for the whole job.
    gpus: Option<u32>,
    /// `--gres=gpu:N`, `--gpus-per-node`.
    gpus_per_node: Option<u32>,
    /// `--gpus-per-task`.
    gpus_per_task: Option<u32>,
    /// `--cpus-per-gpu`.
    cpus_per_gpu: Option<u32>,
    /// `--array`: the task indices, and where the option was.
    array: Option<(Vec<u32>, usize)>,
    /// The memory option given first (sbatch takes one of them).
    memory_option: Option<String>,
    /// `--mem-per-gpu`, MiB.
    mem_per_gpu: Option<u64>,
    /// Every option given so far, by its long name where it has one.
    seen: Vec<String>,
}

/// The most tasks one `--array` may make (Slurm's own MaxArraySize default
/// is 1001; sites raise it).
const MAX_ARRAY: usize = 100_000;

/// The indices of an `--array` value (`0-15`, `1-7:2`, `1,3,5`, `1-100%10`);
/// a `%` limit on tasks at once is returned apart.
fn array_indices(v: &str) -> Result<(Vec<u32>, Option<u32>), String> {
    let (list, limit) = match v.split_once('%') {
        Some((l, n)) => (l, Some(n.parse::<u32>().map_err(|_| format!("`%{n}` is not a count"))?)),
        None => (v, None),
    };
    let mut out = Vec::new();
    for part in list.split(',') {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or(format!("`:{s}` is not a step"))?,
            ),
            None => (part, 1),
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (a, b),
            None => (range, range),
        };
        let (a, b) = match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            (Ok(a), Ok(b)) if a <= b => (a, b),
            _ => return Err(format!("`{part}` is not an index or a range of them")),
        };
        let mut i = a;
        loop {
            out.push(i);
            if out.len() > MAX_ARRAY {
                return Err(format!("more than {MAX_ARRAY} tasks"));
            }
            match i.checked_add(step) {
                Some(n) if n <= b => i = n,
                _ => break,
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok((out, limit))
}

/// GPUs of a `--gpus`-style value: `N` or `TYPE:N`.
fn gpu_count(v: &str) -> Option<u32> {
    v.rsplit(':').next()?.trim().parse().ok()
}

/// Reads one batch script. A heterogeneous job (`#SBATCH hetjob` between
/// the components' options) gives one job per component, each running the
/// script, that must start together ([`Parsed::together`]).
pub(crate) fn read(src: &str) -> Result<Parsed, ParseError> {
    let mut job = Job::default();
    let mut warnings = Vec::new();
    let mut o = Opts::default();
    let mut offset = 0;
    let mut body_start = None;
    // Every directive is read, so that one pass reports every error.
    let mut errors: Vec<Diagnostic> = Vec::new();
    // The components read so far, the current one last once all is read.
    let mut components: Vec<(Job, Opts)> = Vec::new();
    for (i, line) in src.split_inclusive('\n').enumerate() {
        let t = line.trim();
        let here = offset;
        offset += line.len();
        if i == 0 && t.starts_with("#!") {
            continue;
        }
        if let Some(rest) = t.strip_prefix("#SBATCH") {
            let lead = line.len() - line.trim_start().len();
            let at = here + lead + "#SBATCH".len();
            if body_start.is_some() {
                warnings.push(Diagnostic::warning_at(
                    src,
                    here,
                    "#SBATCH after the first command is ignored, as sbatch does",
                ));
            } else if rest.trim() == "hetjob" || rest.trim() == "packjob" {
                // The options that follow are the next component's own.
                components.push((std::mem::take(&mut job), std::mem::take(&mut o)));
            } else if let Err(e) = directive(src, rest, at, &mut job, &mut o, &mut warnings) {
                errors.push(e);
            }
            continue;
        }
        if body_start.is_none() && !t.is_empty() && !t.starts_with('#') {
            body_start = Some(here);
        }
    }
    components.push((job, o));
    let together = components.len() > 1;
    if together {
        if let Some((_, at)) = components.iter().find_map(|(_, o)| o.array.as_ref()) {
            errors.push(Diagnostic::error_at(
                src,
                *at,
                "a heterogeneous job cannot be an array (sbatch refuses it too)",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(ParseError { diagnostics: errors });
    }
    let body = body_start.map(|start| program(src, start));
    let het_group = body_start
        .filter(|_| together)
        .and_then(|b| Some(b + src[b..].find("--het-group")?));
    if let Some(at) = het_group {
        warnings.push(Diagnostic::warning_at(
            src,
            at,
            "each component runs this script at its own site, where `srun --het-group` cannot reach the others: \
             branch on BROKK_HET_GROUP (0, 1, ...) instead",
        ));
    }
    let n = components.len();
    // What later components take from the first, copied only when there are any.
    let first = together.then(|| components[0].0.clone());
    let mut jobs = Vec::new();
    for (k, (mut job, o)) in components.into_iter().enumerate() {
        shape(src, &mut job, &o, &mut warnings);
        if let Some((executable, arguments, script)) = &body {
            job.executable.clone_from(executable);
            job.arguments.clone_from(arguments);
            job.script.clone_from(script);
        }
        if let Some(first) = &first {
            if k > 0 {
                inherit_whole_job(&mut job, first);
            }
            // Each component runs the script; these say which it is.
            job.environment.push(EnvVar {
                name: "SLURM_HET_SIZE".into(),
                value: n.to_string(),
            });
            job.environment.push(EnvVar {
                name: "BROKK_HET_GROUP".into(),
                value: k.to_string(),
            });
        }
        match &o.array {
            None => jobs.push(job),
            Some((indices, _)) => jobs.extend(array_jobs(&job, indices)),
        }
    }
    Ok(Parsed {
        jobs,
        warnings,
        together,
    })
}

/// What the body from `start` runs: a simple command as executable and
/// arguments, or else the body as a script (with the interpreter line,
/// which says what runs it).
fn program(src: &str, start: usize) -> (Option<String>, Vec<String>, Option<String>) {
    let body = &src[start..];
    match simple_command(body) {
        Some(mut words) => {
            let executable = words.remove(0);
            (Some(executable), words, None)
        }
        None => {
            let shebang = src.lines().next().filter(|l| l.starts_with("#!"));
            let text = body.trim_end().to_string() + "\n";
            let script = match shebang {
                Some(l) => format!("{}\n{text}", l.trim_end()),
                None => text,
            };
            (None, Vec::new(), Some(script))
        }
    }
}

/// A component's processors, GPUs and memory from the options that shape
/// them together.
fn shape(src: &str, job: &mut Job, o: &Opts, warnings: &mut Vec<Diagnostic>) {
    if o.ntasks.is_some() || o.cpt.is_some() || o.tasks_per_node.is_some() {
        let cpt = o.cpt.unwrap_or(1);
        let tasks = match (o.ntasks, o.tasks_per_node, job.nodes) {
            (Some(n), _, _) => Some(n),
            (None, Some(tpn), Some(nodes)) => tpn.checked_mul(nodes),
            (None, Some(_), None) => None,
            (None, None, _) => Some(1),
        };
        job.cpus = tasks.and_then(|t| t.checked_mul(cpt));
        job.cpus_per_task = o.cpt;
        job.cpus_per_node = o.tasks_per_node.and_then(|t| t.checked_mul(cpt));
    }
    let tasks = o.ntasks.unwrap_or(1);
    job.gpus = o
        .gpus
        .or_else(|| o.gpus_per_task.map(|g| g.saturating_mul(tasks)))
        .or_else(|| o.gpus_per_node.map(|g| g.saturating_mul(job.nodes.unwrap_or(1))));
    if let (Some(g), Some(c), None) = (job.gpus, o.cpus_per_gpu, job.cpus) {
        job.cpus = Some(g.saturating_mul(c));
    }
    if let Some(m) = o.mem_per_gpu {
        match job.gpus {
            Some(g) => {
                job.memory = Some(Memory {
                    mib: m.saturating_mul(u64::from(g)),
                    per: MemoryScope::Job,
                })
            }
            None => warnings.push(Diagnostic::warning_at(
                src,
                0,
                "--mem-per-gpu without GPUs asks for no memory; ignored",
            )),
        }
    }
}

/// What sbatch takes from a heterogeneous job's first component for the
/// whole job (its name, files, directory, account, mail, environment,
/// hold, time bounds) where a later component does not set it; resources
/// stay each component's own.
fn inherit_whole_job(job: &mut Job, first: &Job) {
    fn keep<T: Clone>(mine: &mut Option<T>, theirs: &Option<T>) {
        if mine.is_none() {
            mine.clone_from(theirs);
        }
    }
    keep(&mut job.name, &first.name);
    keep(&mut job.stdout, &first.stdout);
    keep(&mut job.stderr, &first.stderr);
    keep(&mut job.stdin, &first.stdin);
    keep(&mut job.working_directory, &first.working_directory);
    keep(&mut job.project, &first.project);
    keep(&mut job.notify, &first.notify);
    keep(&mut job.wall_time, &first.wall_time);
    keep(&mut job.earliest_start, &first.earliest_start);
    keep(&mut job.deadline, &first.deadline);
    if job.environment.is_empty() {
        job.environment.clone_from(&first.environment);
    }
    job.hold |= first.hold;
}

/// One job per array task, each with the variables Slurm sets for it (its
/// `%a` file-name patterns stay, filled in from `SLURM_ARRAY_TASK_ID` by the
/// broker, or by a writer of a language without them).
fn array_jobs(job: &Job, indices: &[u32]) -> Vec<Job> {
    indices
        .iter()
        .map(|&i| with_array_variables(job, indices, &i.to_string()))
        .collect()
}

/// `%a` (and `%Na`, zero-padded where `index` is a number) replaced by
/// `index`; `%%` kept for later.
pub(crate) fn task_index(s: &str, index: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(p) = rest.find('%') {
        out.push_str(&rest[..p]);
        let after = &rest[p + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if after[digits..].starts_with('a') {
            let width = after[..digits].parse::<usize>().unwrap_or(0).min(10);
            match index.parse::<u32>() {
                Ok(n) => out.push_str(&format!("{n:0width$}")),
                Err(_) => out.push_str(index),
            }
            rest = &after[digits + 1..];
        } else if let Some(stripped) = after.strip_prefix('%') {
            out.push_str("%%");
            rest = stripped;
        } else {
            out.push('%');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Splits a directive line into shell words; `#` at the start of a word ends it.
fn words(src: &str, line: &str, at: usize) -> Result<Vec<(String, usize)>, Diagnostic> {
    let mut out = Vec::new();
    let mut chars = line.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if c == '#' {
            break;
        }
        let mut w = String::new();
        while let Some(&(j, c)) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '"' | '\'' => loop {
                    match chars.next() {
                        Some((_, q)) if q == c => break,
                        Some((_, '\\')) if c == '"' => {
                            if let Some((_, e)) = chars.next() {
                                w.push(e);
                            }
                        }
                        Some((_, ch)) => w.push(ch),
                        None => return Err(Diagnostic::error_at(src, at + j, format!("unterminated `{c}` quote"))),
                    }
                },
                '\\' => {
                    if let Some((_, e)) = chars.next() {
                        w.push(e);
                    }
                }
                _ => w.push(c),
            }
        }
        out.push((w, at + i));
    }
    Ok(out)
}

fn directive(
    src: &str,
    rest: &str,
    at: usize,
    job: &mut Job,
    o: &mut Opts,
    warnings: &mut Vec<Diagnostic>,
) -> Result<(), Diagnostic> {
    let ws = words(src, rest, at)?;
    let mut k = 0;
    while k < ws.len() {
        let (w, pos) = (&ws[k].0, ws[k].1);
        k += 1;
        let (name, inline): (String, Option<String>) = if let Some(long) = w.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (long.to_string(), None),
            }
        } else if let Some(short) = w.strip_prefix('-') {
            let mut cs = short.chars();
            match cs.next() {
                Some(c) => {
                    let v: String = cs.collect();
                    (
                        c.to_string(),
                        (!v.is_empty()).then_some(v.trim_start_matches('=').to_string()),
                    )
                }
                None => return Err(Diagnostic::error_at(src, pos, "expected an option after `-`")),
            }
        } else {
            return Err(Diagnostic::error_at(
                src,
                pos,
                format!("expected an option such as `--ntasks=4`, found `{w}`"),
            ));
        };
        // sbatch's options that take no value, or one only after `=`.
        let flag = matches!(
            name.as_str(),
            "exclusive"
                | "requeue"
                | "no-requeue"
                | "parsable"
                | "wait"
                | "W"
                | "hold"
                | "H"
                | "get-user-env"
                | "use-min-nodes"
                | "spread-job"
                | "verbose"
                | "v"
                | "quiet"
                | "Q"
                | "oversubscribe"
                | "s"
                | "contiguous"
                | "ignore-pbs"
                | "no-kill"
                | "k"
                | "overcommit"
                | "O"
                | "reboot"
                | "test-only"
                | "nice"
                | "propagate"
                | "x11"
                | "oom-kill-step"
                | "stepmgr"
                | "usage"
                | "help"
                | "h"
                | "version"
                | "V"
        );
        // Pairs sbatch itself refuses together.
        let long = match name.as_str() {
            "c" => "cpus-per-task",
            other => other,
        };
        for (a, b) in [("cpus-per-gpu", "cpus-per-task"), ("gpus-per-task", "ntasks-per-gpu")] {
            let other = if long == a {
                b
            } else if long == b {
                a
            } else {
                continue;
            };
            if o.seen.iter().any(|s| s == other) {
                return Err(Diagnostic::error_at(
                    src,
                    pos,
                    format!("--{long} with --{other}: sbatch refuses them together"),
                ));
            }
        }
        o.seen.push(long.to_string());
        let value = if flag {
            inline.unwrap_or_default()
        } else {
            match inline {
                Some(v) => v,
                None if k < ws.len() => {
                    k += 1;
                    ws[k - 1].0.clone()
                }
                None => return Err(Diagnostic::error_at(src, pos, format!("option `{w}` needs a value"))),
            }
        };
        let bad = |what: &str| Diagnostic::error_at(src, pos, format!("`{w}` expects {what}, found `{value}`"));
        let count = |v: &str| -> Result<u32, Diagnostic> {
            // `--nodes=2-4` asks for at least 2; Brokk plans with the minimum.
            v.split('-')
                .next()
                .unwrap_or("")
                .trim()
                .parse()
                .map_err(|_| bad("a count"))
        };
        if matches!(name.as_str(), "mem" | "mem-per-cpu" | "mem-per-gpu") {
            match &o.memory_option {
                Some(first) if *first != name => {
                    return Err(Diagnostic::error_at(
                        src,
                        pos,
                        format!("--{name} with --{first}: --mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive, as sbatch says"),
                    ))
                }
                _ => o.memory_option = Some(name.clone()),
            }
        }
        match name.as_str() {
            "J" | "job-name" => job.name = Some(value.clone()),
            "G" | "gpus" => o.gpus = Some(gpu_count(&value).ok_or_else(|| bad("a GPU count such as 2 or a100:2"))?),
            "gpus-per-node" => {
                o.gpus_per_node = Some(gpu_count(&value).ok_or_else(|| bad("a GPU count such as 2 or a100:2"))?)
            }
            "gpus-per-task" => {
                o.gpus_per_task = Some(gpu_count(&value).ok_or_else(|| bad("a GPU count such as 1 or a100:1"))?)
            }
            "cpus-per-gpu" => o.cpus_per_gpu = Some(count(&value)?),
            "gres" => {
                for item in value.split(',') {
                    let mut f = item.split(':');
                    if f.next() == Some("gpu") {
                        // `gpu`, `gpu:N`, `gpu:TYPE:N`: per node.
                        let n = match item.matches(':').count() {
                            0 => 1,
                            _ => gpu_count(item).ok_or_else(|| bad("gpu[:TYPE]:N"))?,
                        };
                        o.gpus_per_node = Some(n);
                    } else {
                        warnings.push(Diagnostic::warning_at(
                            src,
                            pos,
                            format!("generic resource `{item}` has no place in Brokk's model; ignored"),
                        ));
                    }
                }
            }
            "a" | "array" => {
                let (indices, limit) = array_indices(&value).map_err(|why| bad(&format!("task indices ({why})")))?;
                if let Some(n) = limit {
                    warnings.push(Diagnostic::warning_at(
                        src,
                        pos,
                        format!("--array limit %{n} (tasks at once) is not kept: every task is a job of its own"),
                    ));
                }
                o.array = Some((indices, pos));
            }
            "n" | "ntasks" => o.ntasks = Some(count(&value)?),
            "c" | "cpus-per-task" => o.cpt = Some(count(&value)?),
            "N" | "nodes" => job.nodes = Some(count(&value)?),
            "ntasks-per-node" => o.tasks_per_node = Some(count(&value)?),
            "mem" => {
                job.memory = Some(Memory {
                    mib: mem(&value).ok_or_else(|| bad("a size such as 4G"))?,
                    per: MemoryScope::Node,
                })
            }
            "mem-per-cpu" => {
                job.memory = Some(Memory {
                    mib: mem(&value).ok_or_else(|| bad("a size such as 2000M"))?,
                    per: MemoryScope::Cpu,
                })
            }
            "mem-per-gpu" => o.mem_per_gpu = Some(mem(&value).ok_or_else(|| bad("a size such as 16G"))?),
            "tmp" => job.disk_mib = Some(mem(&value).ok_or_else(|| bad("a size such as 10G"))?),
            "t" | "time" => job.wall_time = Some(time_limit(&value).ok_or_else(|| bad("a time such as 1-12:00:00"))?),
            "o" | "output" => job.stdout = Some(value.clone()),
            "e" | "error" => job.stderr = Some(value.clone()),
            "i" | "input" => job.stdin = Some(value.clone()),
            "p" | "partition" => job.queue = Some(value.clone()),
            "reservation" => job.reservation = Some(value.clone()),
            // Slurm's OCI support runs the job in the bundle at this path.
            "container" => job.container_image = Some(value.clone()),
            "A" | "account" => job.project = Some(value.clone()),
            "D" | "chdir" => job.working_directory = Some(value.clone()),
            "b" | "begin" => match Time::parse(&value) {
                Ok(t) => job.earliest_start = Some(t),
                Err(_) => warnings.push(Diagnostic::warning_at(
                    src,
                    pos,
                    format!("--begin={value} is relative to submission; Brokk keeps only absolute times; ignored"),
                )),
            },
            "deadline" => {
                job.deadline =
                    Some(Time::parse(&value).map_err(|_| bad("an absolute time such as 2026-11-22T18:00:00"))?)
            }
            "export" => {
                for item in value.split(',') {
                    match item.split_once('=') {
                        Some((n, v)) => job.environment.push(EnvVar {
                            name: n.to_string(),
                            value: v.to_string(),
                        }),
                        None if matches!(item, "ALL" | "NONE" | "NIL") => {}
                        None => warnings.push(Diagnostic::warning_at(
                            src,
                            pos,
                            format!("--export of `{item}` passes the submitting shell's value; ignored"),
                        )),
                    }
                }
            }
            "hold" | "H" => job.hold = true,
            // sbatch runs the job as another user for root only: from a
            // user it is a request to be someone else, never honoured.
            "uid" | "gid" => {
                return Err(Diagnostic::error_at(
                    src,
                    pos,
                    format!("`{w}` asks to run as another user; a job runs as the account its owner maps to"),
                ))
            }
            "mail-user" => job.notify.get_or_insert_with(Notify::default).to = Some(value.clone()),
            "mail-type" => {
                let mut on = Vec::new();
                for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                    match item.to_ascii_uppercase().as_str() {
                        "NONE" => on.clear(),
                        "BEGIN" => on.push(NotifyOn::Begin),
                        "END" => on.push(NotifyOn::End),
                        "FAIL" => on.push(NotifyOn::Fail),
                        "ALL" => on.extend([NotifyOn::Begin, NotifyOn::End, NotifyOn::Fail]),
                        other => warnings.push(Diagnostic::warning_at(
                            src,
                            pos,
                            format!("--mail-type={other} has no place in Brokk's model; no mail for it"),
                        )),
                    }
                }
                on.sort();
                on.dedup();
                job.notify.get_or_insert_with(Notify::default).on = on;
            }
            "nice" => {
                let n = if value.is_empty() {
                    Ok(100)
                } else {
                    value.parse::<i32>()
                };
                job.priority = Some(n.map_err(|_| bad("a whole number"))?.saturating_neg());
            }
            n if IGNORED.contains(&n) => warnings.push(Diagnostic::warning_at(
                src,
                pos,
                format!("`{w}` has no meaning for Brokk's model; ignored"),
            )),
            _ => warnings.push(Diagnostic::warning_at(
                src,
                pos,
                format!("unknown sbatch option `{w}`; ignored"),
            )),
        }
    }
    Ok(())
}

/// MiB from a Slurm size (`4000`, `4G`, `512M`, `1T`); megabytes when no suffix.
fn mem(v: &str) -> Option<u64> {
    // sbatch takes `4G` and `4GB` alike.
    let v = v.trim();
    let v = match v.strip_suffix(['B', 'b']) {
        Some(rest) if rest.ends_with(|c: char| c.is_ascii_alphabetic()) => rest,
        _ => v,
    };
    let (num, mult) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 0),
        (i, 'M' | 'm') => (&v[..i], 1),
        (i, 'G' | 'g') => (&v[..i], 1024),
        (i, 'T' | 't') => (&v[..i], 1024 * 1024),
        _ => (v, 1),
    };
    let n: u64 = num.parse().ok()?;
    if mult == 0 {
        Some(n.div_ceil(1024))
    } else {
        n.checked_mul(mult)
    }
}

/// A Slurm time limit: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`; `infinite`/`UNLIMITED` are refused.
fn time_limit(v: &str) -> Option<Duration> {
    let v = v.trim();
    let num = |s: &str| s.parse::<i64>().ok().filter(|n| *n >= 0);
    let secs = if let Some((d, rest)) = v.split_once('-') {
        let d = num(d)?;
        let p: Vec<&str> = rest.split(':').collect();
        let (h, m, s) = match p.as_slice() {
            [h] => (num(h)?, 0, 0),
            [h, m] => (num(h)?, num(m)?, 0),
            [h, m, s] => (num(h)?, num(m)?, num(s)?),
            _ => return None,
        };
        d.checked_mul(86400)?
            .checked_add(h.checked_mul(3600)?)?
            .checked_add(m.checked_mul(60)?)?
            .checked_add(s)?
    } else {
        let p: Vec<&str> = v.split(':').collect();
        match p.as_slice() {
            [m] => num(m)?.checked_mul(60)?,
            [m, s] => num(m)?.checked_mul(60)?.checked_add(num(s)?)?,
            [h, m, s] => num(h)?
                .checked_mul(3600)?
                .checked_add(num(m)?.checked_mul(60)?)?
                .checked_add(num(s)?)?,
            _ => return None,
        }
    };
    Some(Duration(secs))
}

fn format_time_limit(d: Duration) -> String {
    let s = d.0.max(0);
    let (days, h, m, sec) = (s / 86400, s % 86400 / 3600, s % 3600 / 60, s % 60);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:{sec:02}")
    } else {
        format!("{h:02}:{m:02}:{sec:02}")
    }
}

const SHELL_SPECIAL: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '*', '?', '[', ']', '{', '}', '~', '\n', '#', '!',
];

/// The words of a body that is exactly one plain command, or `None`.
fn simple_command(body: &str) -> Option<Vec<String>> {
    let mut lines = body
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let line = lines.next()?;
    if lines.next().is_some() || line.ends_with('\\') {
        return None;
    }
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => cur.push(ch),
                    }
                }
            }
            '"' | '\\' => return None,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c if SHELL_SPECIAL.contains(&c) => return None,
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    // `NAME=value cmd` is an assignment, not a program called `NAME=value`.
    if line
        .split_whitespace()
        .next()
        .is_some_and(|w| w.contains('=') && !w.starts_with('\''))
    {
        return None;
    }
    (!words.is_empty()).then_some(words)
}

/// Quotes an `#SBATCH` value if it has spaces or quotes.
fn opt_value(v: &str) -> String {
    if v.chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'' || c == '#' || c == '\\')
        || v.is_empty()
    {
        format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
    } else {
        v.to_string()
    }
}

/// The variables Slurm sets for an array task.
pub(crate) const ARRAY_VARIABLES: [&str; 4] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
];

/// A job's array task index, if it is one.
pub(crate) fn task_of(job: &Job) -> Option<u32> {
    job.environment
        .iter()
        .find(|v| v.name == "SLURM_ARRAY_TASK_ID")
        .and_then(|v| v.value.parse().ok())
}

/// Jobs that are the tasks of one array: equal but for the array
/// variables, which each carries last, in Slurm's order, with its own task
/// index (ascending). Their template (without the variables) and indices,
/// or `None` when `jobs` are not one array.
pub(crate) fn array_of(jobs: &[Job]) -> Option<(Job, Vec<u32>)> {
    let strip = |j: &Job| {
        let mut t = j.clone();
        t.environment.retain(|v| !ARRAY_VARIABLES.contains(&v.name.as_str()));
        t
    };
    let template = strip(jobs.first()?);
    let mut indices = Vec::with_capacity(jobs.len());
    for j in jobs {
        indices.push(task_of(j)?);
        let tail: Vec<&str> = j
            .environment
            .iter()
            .rev()
            .take(4)
            .rev()
            .map(|v| v.name.as_str())
            .collect();
        if strip(j) != template || tail != ARRAY_VARIABLES {
            return None;
        }
    }
    if indices.windows(2).any(|w| w[0] >= w[1]) {
        return None;
    }
    Some((template, indices))
}

/// What stands for an array task's index in a template until a writer puts
/// its language's placeholder there (HTCondor's macro, JDL's `_PARAM_`).
pub(crate) const TASK_MARK: &str = "BROKKARRAYTASKINDEX";

/// Several jobs that are the tasks of one array whose file names carry
/// each task's index (as a language without `%a` writes them): their
/// template, the index in its names written as [`TASK_MARK`], and the
/// indices; `None` otherwise, or where putting the index back would not
/// give each task's names.
pub(crate) fn array_form(jobs: &[Job]) -> Option<(Job, Vec<u32>)> {
    if jobs.len() < 2 || serde_json::to_string(&jobs[0]).ok()?.contains(TASK_MARK) {
        return None;
    }
    let marked: Vec<Job> = jobs
        .iter()
        .map(|j| {
            let mut m = j.clone();
            let index = task_of(j).map(|t| t.to_string());
            for name in [&mut m.stdin, &mut m.stdout, &mut m.stderr].into_iter().flatten() {
                if let Some(i) = &index {
                    *name = name.replace(i.as_str(), TASK_MARK);
                }
            }
            m
        })
        .collect();
    array_of(&marked)
}

/// `template` given the array variables of its tasks, with the task index
/// written as `index` (a language's placeholder for it).
pub(crate) fn with_array_variables(template: &Job, indices: &[u32], index: &str) -> Job {
    let mut j = template.clone();
    let (min, max) = (indices[0], indices[indices.len() - 1]);
    for (name, value) in ARRAY_VARIABLES.iter().zip([
        index.to_string(),
        min.to_string(),
        max.to_string(),
        indices.len().to_string(),
    ]) {
        j.environment.push(EnvVar {
            name: (*name).into(),
            value,
        });
    }
    j
}

/// Jobs that are the tasks of one array ([`array_of`]) as one batch
/// script with `--array`; `None` otherwise.
pub(crate) fn write_array(jobs: &[Job]) -> Option<Written> {
    let (template, indices) = array_of(jobs)?;
    let mut written = write(&template);
    let cut = written.text.find('\n').map_or(0, |i| i + 1);
    written
        .text
        .insert_str(cut, &format!("#SBATCH --array={}\n", array_spec(&indices)));
    Some(written)
}

/// Sorted task indices as `--array` writes them: runs with one step as
/// `a-b:s` (`a-b` for a step of one), separated by commas.
fn array_spec(indices: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut k = 0;
    while k < indices.len() {
        let a = indices[k];
        let step = indices.get(k + 1).map(|b| b - a);
        let mut end = k;
        if let Some(st) = step {
            while end + 1 < indices.len() && indices[end + 1] - indices[end] == st {
                end += 1;
            }
        }
        match (end - k, step) {
            (0, _) => parts.push(a.to_string()),
            (1, _) => {
                // Two are clearer as a list than as a range.
                parts.push(a.to_string());
                parts.push(indices[end].to_string());
            }
            (_, Some(1)) => parts.push(format!("{a}-{}", indices[end])),
            (_, Some(st)) => parts.push(format!("{a}-{}:{st}", indices[end])),
            _ => {}
        }
        k = end + 1;
    }
    parts.join(",")
}

/// The sbatch options that say `job`, long name and value, in the order a
/// batch script gives them (`hold` has no value); what Slurm cannot say
/// goes to `d`.
fn options(job: &Job, d: &mut Dropped) -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut opt = |k: &'static str, v: &str| out.push((k, v.to_string()));
    if let Some(v) = &job.name {
        opt("job-name", v);
    }
    let cpt = job.cpus_per_task.unwrap_or(1).max(1);
    if let Some(c) = job.cpus {
        if c % cpt == 0 {
            opt("ntasks", &(c / cpt).to_string());
        } else {
            d.note("cpus: not a multiple of cpus_per_task, which Slurm needs");
        }
    }
    if let Some(c) = job.cpus_per_task {
        opt("cpus-per-task", &c.to_string());
    }
    if let Some(g) = job.gpus {
        opt("gpus", &g.to_string());
    }
    if let Some(n) = job.nodes {
        opt("nodes", &n.to_string());
    }
    if let Some(per) = job.cpus_per_node {
        if per % cpt == 0 {
            opt("ntasks-per-node", &(per / cpt).to_string());
        } else {
            d.note("cpus_per_node: not a multiple of cpus_per_task, which Slurm needs");
        }
    }
    if let Some(m) = job.memory {
        let choice = match m.per {
            MemoryScope::Node => Some(("mem", m.mib)),
            MemoryScope::Cpu => Some(("mem-per-cpu", m.mib)),
            MemoryScope::Job => job
                .memory_per_node_mib()
                .map(|v| ("mem", v))
                .or_else(|| job.memory_per_cpu_mib().map(|v| ("mem-per-cpu", v))),
        };
        match choice {
            Some((k, v)) => opt(k, &format!("{v}M")),
            None => d.note("memory: the job total does not divide over its nodes or processors"),
        }
    }
    if let Some(t) = job.disk_mib {
        opt("tmp", &format!("{t}M"));
    }
    if let Some(t) = job.wall_time {
        opt("time", &format_time_limit(t));
    }
    for (k, v) in [
        ("input", &job.stdin),
        ("output", &job.stdout),
        ("error", &job.stderr),
        ("partition", &job.queue),
        ("reservation", &job.reservation),
        ("account", &job.project),
        ("chdir", &job.working_directory),
    ] {
        if let Some(v) = v {
            opt(k, v);
        }
    }
    match &job.container_image {
        Some(bundle) if bundle.starts_with('/') => opt("container", bundle),
        Some(image) => d.note(format!(
            "container_image {image}: Slurm's --container takes an OCI bundle's path, not an image; not written"
        )),
        None => {}
    }
    if let Some(t) = job.earliest_start {
        opt("begin", &t.to_naive_string().replace(' ', "T"));
    }
    if let Some(t) = job.deadline {
        opt("deadline", &t.to_naive_string().replace(' ', "T"));
    }
    if !job.environment.is_empty() {
        let mut items = vec!["ALL".to_string()];
        for e in &job.environment {
            if e.value.contains(',') || e.name.contains(',') || e.name.contains('=') {
                d.note(format!(
                    "environment: `{}` has a comma or `=`, which --export cannot carry",
                    e.name
                ));
            } else {
                items.push(format!("{}={}", e.name, e.value));
            }
        }
        opt("export", &items.join(","));
    }
    match job.priority {
        Some(p) if p <= 0 => opt("nice", &(-i64::from(p)).to_string()),
        Some(_) => d.note("priority: Slurm lets only its administrators raise a job's priority (a negative --nice)"),
        None => {}
    }
    if let Some(n) = &job.notify {
        let types: Vec<&str> =
            n.on.iter()
                .map(|e| match e {
                    NotifyOn::Begin => "BEGIN",
                    NotifyOn::End => "END",
                    NotifyOn::Fail => "FAIL",
                })
                .collect();
        opt(
            "mail-type",
            &if types.is_empty() {
                "NONE".to_string()
            } else {
                types.join(",")
            },
        );
        if let Some(to) = &n.to {
            opt("mail-user", to);
        }
    }
    if job.hold {
        opt("hold", "");
    }
    out
}

/// `job`'s options as sbatch command-line arguments (`--time=1:00`). A
/// site gives these on the command line as well as in the script: there
/// they win over anything the script itself says.
pub fn sbatch_arguments(job: &Job) -> Vec<String> {
    options(job, &mut Dropped::default())
        .into_iter()
        .map(|(k, v)| match k {
            "hold" => "--hold".to_string(),
            _ => format!("--{k}={v}"),
        })
        .collect()
}

/// Writes one job as a batch script.
pub(crate) fn write(job: &Job) -> Written {
    let mut d = Dropped::default();
    // A script's own interpreter line heads the batch script; one without
    // runs with /bin/sh, as everywhere else in Brokk.
    let (shebang, body) = match job.script.as_deref() {
        Some(text) if text.starts_with("#!") => text.split_once('\n').unwrap_or((text, "")),
        Some(text) => ("#!/bin/sh", text),
        None => ("#!/bin/bash", ""),
    };
    let mut s = format!("{shebang}\n");
    for (k, v) in options(job, &mut d) {
        match k {
            "hold" => s.push_str("#SBATCH --hold\n"),
            _ => s.push_str(&format!("#SBATCH --{k}={}\n", opt_value(&v))),
        }
    }
    s.push('\n');
    match (&job.script, &job.executable) {
        (Some(_), exe) => {
            if exe.is_some() {
                d.note("executable: the script is the job in Slurm; executable and arguments dropped");
            }
            s.push_str(body);
        }
        (None, Some(exe)) => {
            // An `=` in the program word would read back as an assignment.
            let program = if exe.contains('=') {
                format!("'{}'", exe.replace('\'', "'\\''"))
            } else {
                shellwords::quote(exe)
            };
            s.push_str(&program);
            for a in &job.arguments {
                s.push(' ');
                s.push_str(&shellwords::quote(a));
            }
            s.push('\n');
        }
        (None, None) => d.note("executable: none given; the script has no command"),
    }
    d.unsupported(
        "Slurm",
        job,
        &[
            "grid_resource",
            "application",
            "retries",
            "attributes",
            "input_files",
            "output_files",
            "cpu_time",
            "architecture",
            "operating_system",
            "runtime_environments",
            "benchmarks",
            "requirements",
            "rank",
        ],
    );
    d.finish(s)
}
