//! gLite / LCG-2 JDL: a ClassAd record of job attributes.
//!
//! Simple conjuncts of `Requirements` on GLUE 1.3 attributes (wall and CPU time,
//! main memory, architecture, OS, queue, runtime environments) are lifted into
//! the model's fields; the rest is kept as an expression. `Parametric` jobs and
//! `Collection`s expand into several jobs.

use brokk_model::{Duration, EnvVar, Job, Memory, MemoryScope, OutputFile};

use crate::classad::{eval, BinOp, Entry, Env, Expr, Kind, Parser, Value};
use crate::diag::Diagnostic;
use crate::requirements::{atom, combine, kept_for, lift, Atom};
use crate::{sandbox_input, shellwords, Dropped, Format, ParseError, Parsed, Written};

const IGNORED: &[&str] = &[
    "shallowretrycount",
    "myproxyserver",
    "perusalfileenable",
    "perusaltimeinterval",
    "inputdata",
    "dataaccessprotocol",
    "outputdata",
    "storageindex",
    "expirytime",
    "allowzippedisb",
    "defaultnodeshallowretrycount",
    "defaultnoderetrycount",
    "outputse",
    "hlrlocation",
    "lbaddress",
    "usertags",
    "prologue",
    "prologuearguments",
    "epilogue",
    "epiloguearguments",
    "wholenodes",
    "defaultrank",
    "fuzzyrank",
    "jobtype",
    "type",
    "nodes",
    "parameters",
    "parameterstart",
    "parameterstep",
    "shortdeadlinejob",
    "zippedisb",
    "ceforwardparameters",
    "edgrequirements",
];

/// The `name = expr` entries of a JDL record (with or without the
/// enclosing brackets).
pub(crate) fn entries(src: &str) -> Result<Vec<Entry>, Diagnostic> {
    let mut p = Parser::new(src, 0, src.len())?;
    p.bare_list_items = true;
    let bracketed = p.at_bracket();
    let entries = p.entries(bracketed)?;
    p.finish()?;
    Ok(entries)
}

/// Reads a JDL description (with or without the enclosing brackets).
pub(crate) fn read(src: &str) -> Result<Parsed, ParseError> {
    let entries = entries(src)?;
    let mut warnings = Vec::new();
    let get = |name: &str| entries.iter().find(|e| e.name.eq_ignore_ascii_case(name));
    let konst = |e: &Entry| eval(&e.expr, Env::new(None, None, 0));
    let text = |name: &str| {
        get(name).map(konst).and_then(|v| match v {
            Value::Str(s) => Some(s.to_ascii_lowercase()),
            _ => None,
        })
    };
    let kind = text("Type").unwrap_or_else(|| "job".into());
    let jobs = match kind.as_str() {
        "job" => {
            let job = read_job(src, &entries.iter().collect::<Vec<_>>(), &mut warnings)?;
            if text("JobType").as_deref() == Some("parametric") {
                parametric(src, &entries, job)?
            } else {
                vec![job]
            }
        }
        "collection" => {
            let Some(nodes) = get("Nodes") else {
                return Err(Diagnostic::error_at(src, 0, "a Collection needs `Nodes = { [ ... ], ... }`").into());
            };
            let Kind::List(items) = &nodes.expr.kind else {
                return Err(
                    Diagnostic::error_at(src, nodes.expr.start, "`Nodes` must be a list of job records").into(),
                );
            };
            let outer: Vec<&Entry> = entries.iter().collect();
            let mut jobs = Vec::new();
            for item in items {
                let Kind::Record(fields) = &item.kind else {
                    return Err(
                        Diagnostic::error_at(src, item.start, "expected a job record `[ ... ]` in `Nodes`").into(),
                    );
                };
                jobs.push(record_job(src, &record_entries(fields), &outer, &mut warnings)?);
            }
            jobs
        }
        "dag" => {
            let pos = get("Type").map_or(0, |e| e.expr.start);
            return Err(Diagnostic::error_at(
                src,
                pos,
                "Type `DAG` is a workflow of dependent jobs: `brokk workflow submit FILE` runs it \
                 (`brokk workflow validate FILE` reads it)",
            )
            .into());
        }
        other => {
            let pos = get("Type").map_or(0, |e| e.expr.start);
            return Err(Diagnostic::error_at(
                src,
                pos,
                format!("Type `{other}` is not supported; expected Job or Collection"),
            )
            .into());
        }
    };
    Ok(Parsed {
        jobs,
        warnings,
        together: false,
    })
}

/// The entries of a record `[ ... ]` written inside another (a
/// Collection's node, a DAG node's `description`).
pub(crate) fn record_entries(fields: &[(String, Expr)]) -> Vec<Entry> {
    fields
        .iter()
        .map(|(n, e)| Entry {
            name: n.clone(),
            name_pos: e.start,
            expr: e.clone(),
        })
        .collect()
}

/// The job entries `own` describe (a Collection's node, a DAG node): it
/// inherits the enclosing `outer` attributes it does not set itself.
pub(crate) fn record_job(
    src: &str,
    own: &[Entry],
    outer: &[&Entry],
    warnings: &mut Vec<Diagnostic>,
) -> Result<Job, ParseError> {
    let mut merged: Vec<&Entry> = own.iter().collect();
    for &e in outer {
        if !own.iter().any(|o| o.name.eq_ignore_ascii_case(&e.name)) {
            merged.push(e);
        }
    }
    read_job(src, &merged, warnings)
}

/// The text of `e` when it is a bare word: attribute names joined by `.`,
/// `/`, `-` or `:` (a file name or path written without quotes), or a list
/// item the parser kept as text.
fn bare_word(src: &str, e: &Expr) -> Option<String> {
    fn words_only(e: &Expr) -> bool {
        match &e.kind {
            Kind::Attr(None, _) => true,
            Kind::Select(a, _) => words_only(a),
            Kind::Binary(BinOp::Div | BinOp::Sub, a, b) => words_only(a) && words_only(b),
            Kind::Unary(_, a) => words_only(a),
            _ => false,
        }
    }
    words_only(e).then(|| src.get(e.start..e.end).unwrap_or("").trim().to_string())
}

/// Expands a parametric job: one job per parameter value, `_PARAM_` substituted everywhere.
fn parametric(src: &str, entries: &[Entry], job: Job) -> Result<Vec<Job>, Diagnostic> {
    let get = |name: &str| entries.iter().find(|e| e.name.eq_ignore_ascii_case(name));
    let konst = |e: &Entry| eval(&e.expr, Env::new(None, None, 0));
    let Some(params) = get("Parameters") else {
        return Err(Diagnostic::error_at(src, 0, "a Parametric job needs `Parameters`"));
    };
    let values: Vec<String> = match konst(params) {
        Value::Int(n) => {
            let start = get("ParameterStart")
                .map(konst)
                .and_then(|v| if let Value::Int(i) = v { Some(i) } else { None })
                .unwrap_or(0);
            let step = get("ParameterStep")
                .map(konst)
                .and_then(|v| if let Value::Int(i) = v { Some(i) } else { None })
                .unwrap_or(1);
            if step <= 0 || n < start || (n - start) / step > 100_000 {
                return Err(Diagnostic::error_at(src, params.expr.start, "Parameters must exceed ParameterStart, with a positive ParameterStep, and give at most 100000 jobs"));
            }
            (0..)
                .map(|k| start + k * step)
                .take_while(|v| *v < n)
                .map(|v| v.to_string())
                .collect()
        }
        Value::List(items) => items
            .iter()
            .map(|v| match v {
                Value::Str(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        _ => {
            return Err(Diagnostic::error_at(
                src,
                params.expr.start,
                "`Parameters` must be an integer or a list",
            ))
        }
    };
    let template = serde_json::to_value(&job).map_err(|e| Diagnostic::error_at(src, 0, e.to_string()))?;
    values
        .iter()
        .map(|v| {
            let mut j = template.clone();
            substitute(&mut j, v);
            let mut out: Job =
                serde_json::from_value(j).map_err(|e| Diagnostic::error_at(src, params.expr.start, e.to_string()))?;
            // Carried attributes are ClassAd text: the value goes into a
            // string as a string, escaped, never pasted into the syntax.
            out.attributes = job
                .attributes
                .iter()
                .map(|a| brokk_model::Attribute {
                    name: a.name.clone(),
                    value: param_in_classad(&a.value, v),
                })
                .collect();
            Ok(out)
        })
        .collect()
}

/// `_PARAM_` replaced by `value` in the ClassAd text `raw`: inside a string
/// literal, escaped; in another expression only where `value` is a plain
/// word or number; otherwise `raw` is left as it is.
fn param_in_classad(raw: &str, value: &str) -> String {
    if !raw.contains("_PARAM_") {
        return raw.to_string();
    }
    if let Ok(mut p) = Parser::new(raw, 0, raw.len()) {
        if let Ok(Expr {
            kind: Kind::Lit(Value::Str(s)),
            ..
        }) = p.expr()
        {
            if p.finish().is_ok() {
                return Value::Str(s.replace("_PARAM_", value)).to_string();
            }
        }
    }
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return raw.replace("_PARAM_", value);
    }
    raw.to_string()
}

fn substitute(v: &mut serde_json::Value, param: &str) {
    match v {
        serde_json::Value::String(s) => *s = s.replace("_PARAM_", param),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|x| substitute(x, param)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|x| substitute(x, param)),
        _ => {}
    }
}

fn read_job(src: &str, entries: &[&Entry], warnings: &mut Vec<Diagnostic>) -> Result<Job, ParseError> {
    let mut job = Job::default();
    let mut sandbox_out: Vec<String> = Vec::new();
    let mut dest: Option<(Vec<String>, usize)> = None;
    // Every attribute is read, so that one pass reports every error.
    crate::each_reported(entries, |e| {
        let v = || eval(&e.expr, Env::new(None, None, 0));
        // DIRAC writes file names unquoted (`std.out`, `{job.sh, data/in.txt}`):
        // a bare word where a string belongs is read as its text.
        let string = || match (bare_word(src, &e.expr), v()) {
            (_, Value::Str(s)) => Ok(s),
            (Some(word), _) => Ok(word),
            (None, other) => Err(Diagnostic::error_at(
                src,
                e.expr.start,
                format!("`{}` must be a string, found {}", e.name, other.type_name()),
            )),
        };
        let strings = || match &e.expr.kind {
            Kind::List(items) => items
                .iter()
                .map(
                    |item| match (bare_word(src, item), eval(item, Env::new(None, None, 0))) {
                        (_, Value::Str(s)) => Ok(s),
                        (Some(word), _) => Ok(word),
                        (None, other) => Err(Diagnostic::error_at(
                            src,
                            item.start,
                            format!("`{}` must be a list of strings, found a {}", e.name, other.type_name()),
                        )),
                    },
                )
                .collect::<Result<Vec<_>, _>>(),
            _ => match (bare_word(src, &e.expr), v()) {
                (_, Value::Str(s)) => Ok(vec![s]),
                (Some(word), _) => Ok(vec![word]),
                (None, other) => Err(Diagnostic::error_at(
                    src,
                    e.expr.start,
                    format!("`{}` must be a list of strings, found {}", e.name, other.type_name()),
                )),
            },
        };
        let count = || match v() {
            Value::Int(n) if n >= 0 && n <= i64::from(u32::MAX) => Ok(n as u32),
            other => Err(Diagnostic::error_at(
                src,
                e.expr.start,
                format!("`{}` must be a non-negative integer, found {other}", e.name),
            )),
        };
        match e.name.to_ascii_lowercase().as_str() {
            "executable" => job.executable = Some(string()?),
            "arguments" => {
                let s = string()?;
                job.arguments = shellwords::split(&s)
                    .ok_or_else(|| Diagnostic::error_at(src, e.expr.start, "unbalanced quote in `Arguments`"))?;
            }
            "stdinput" => job.stdin = Some(string()?),
            "stdoutput" => job.stdout = Some(string()?),
            "stderror" => job.stderr = Some(string()?),
            "inputsandbox" => {
                for f in strings()? {
                    job.input_files.push(sandbox_input(&f));
                }
            }
            "outputsandbox" => sandbox_out = strings()?,
            "outputsandboxdesturi" => dest = Some((strings()?, e.expr.start)),
            "environment" => {
                for item in strings()? {
                    let Some((n, val)) = item.split_once('=') else {
                        return Err(Diagnostic::error_at(
                            src,
                            e.expr.start,
                            format!("environment entry `{item}` must be NAME=value"),
                        ));
                    };
                    job.environment.push(EnvVar {
                        name: n.to_string(),
                        value: val.to_string(),
                    });
                }
            }
            "virtualorganisation" => job.project = Some(string()?),
            // DIRAC's name for the job.
            "jobname" => job.name = Some(string()?),
            "cpunumber" | "nodenumber" => job.cpus = Some(count()?),
            "smpgranularity" => job.cpus_per_node = Some(count()?),
            "hostnumber" => job.nodes = Some(count()?),
            "retrycount" => job.retries = Some(count()?),
            "requirements" => job.requirements = requirements(src, &e.expr, &mut job),
            "rank" => job.rank = Some(src.get(e.expr.start..e.expr.end).unwrap_or("").to_string()),
            n if IGNORED.contains(&n) => {
                if !matches!(
                    n,
                    "type" | "jobtype" | "nodes" | "parameters" | "parameterstart" | "parameterstep"
                ) {
                    warnings.push(Diagnostic::warning_at(
                        src,
                        e.name_pos,
                        format!("`{}` has no meaning for Brokk's model; ignored", e.name),
                    ));
                }
            }
            // A JDL's own attributes travel with it (middleware reads them).
            _ => {
                warnings.push(Diagnostic::warning_at(
                    src,
                    e.name_pos,
                    format!("`{}` is not a JDL attribute Brokk knows; carried as written", e.name),
                ));
                job.attributes.push(brokk_model::Attribute {
                    name: e.name.clone(),
                    value: src.get(e.expr.start..e.expr.end).unwrap_or("").to_string(),
                });
            }
        }
        Ok(())
    })?;
    if let Some((targets, pos)) = dest {
        if targets.len() != sandbox_out.len() {
            return Err(Diagnostic::error_at(
                src,
                pos,
                format!(
                    "OutputSandboxDestURI has {} entries but OutputSandbox has {}",
                    targets.len(),
                    sandbox_out.len()
                ),
            )
            .into());
        }
        for (name, target) in sandbox_out.into_iter().zip(targets) {
            job.output_files.push(OutputFile {
                name,
                target: Some(target),
                size_estimate: None,
            });
        }
    } else {
        job.output_files = sandbox_out.into_iter().map(OutputFile::kept).collect();
    }
    Ok(job)
}

fn requirements(src: &str, expr: &Expr, job: &mut Job) -> Option<String> {
    lift(src, expr, |c| match atom(c, false) {
        Some(Atom::Cmp(attr, BinOp::Ge, Value::Int(n))) if *n >= 0 => match attr.as_str() {
            "gluecepolicymaxwallclocktime" if job.wall_time.is_none() => {
                job.wall_time = Some(Duration::minutes(*n));
                true
            }
            "gluecepolicymaxcputime" if job.cpu_time.is_none() => {
                job.cpu_time = Some(Duration::minutes(*n));
                true
            }
            "gluehostmainmemoryramsize" if job.memory.is_none() => {
                job.memory = Some(Memory {
                    mib: *n as u64,
                    per: MemoryScope::Node,
                });
                true
            }
            _ => false,
        },
        Some(Atom::Cmp(attr, BinOp::Eq, Value::Str(s))) => {
            let slot = match attr.as_str() {
                "gluehostarchitectureplatformtype" => &mut job.architecture,
                "gluehostoperatingsystemname" => &mut job.operating_system,
                "gluecename" => &mut job.queue,
                _ => return false,
            };
            if slot.is_some() {
                return false;
            }
            *slot = Some(s.clone());
            true
        }
        Some(Atom::Member(Value::Str(s), attr)) if attr == "gluehostapplicationsoftwareruntimeenvironment" => {
            job.runtime_environments.push(s.clone());
            true
        }
        _ => false,
    })
}

/// Writes jobs as JDL; several jobs become a Collection.
/// The tasks of one array ([`crate::slurm::array_form`]: their template
/// and indices) as one parametric job, gLite's array form: `Parameters`
/// lists the task indices and `_PARAM_` stands for each (the caller sees
/// that no value of theirs says `_PARAM_` already).
pub(crate) fn write_array(template: &Job, indices: &[u32]) -> Written {
    let job = crate::slurm::with_array_variables(template, indices, crate::slurm::TASK_MARK);
    let mut d = Dropped::default();
    let list: Vec<String> = indices.iter().map(|i| s(&i.to_string())).collect();
    let text = format!(
        "[\n  JobType = \"Parametric\";\n  Parameters = {{{}}};\n{}]\n",
        list.join(", "),
        body(&job, &mut d, "  ").replace(crate::slurm::TASK_MARK, "_PARAM_")
    );
    d.finish(text)
}

pub(crate) fn write(jobs: &[Job]) -> Written {
    let mut d = Dropped::default();
    let text = if jobs.len() == 1 {
        format!("[\n{}]\n", body(&jobs[0], &mut d, "  "))
    } else {
        let nodes: Vec<String> = jobs
            .iter()
            .map(|j| format!("    [\n{}    ]", body(j, &mut d, "      ")))
            .collect();
        format!(
            "[\n  Type = \"Collection\";\n  Nodes = {{\n{}\n  }};\n]\n",
            nodes.join(",\n")
        )
    };
    d.finish(text)
}

fn s(v: &str) -> String {
    crate::classad::Value::Str(v.to_string()).to_string()
}

fn list(items: impl IntoIterator<Item = String>) -> String {
    format!(
        "{{{}}}",
        items.into_iter().map(|i| s(&i)).collect::<Vec<_>>().join(", ")
    )
}

fn body(job: &Job, d: &mut Dropped, ind: &str) -> String {
    let mut out = String::new();
    let mut attr = |k: &str, v: String| out.push_str(&format!("{ind}{k} = {v};\n"));
    if let Some(e) = &job.executable {
        attr("Executable", s(e));
    }
    if !job.arguments.is_empty() {
        attr("Arguments", s(&shellwords::join(&job.arguments)));
    }
    if let Some(n) = job.retries {
        attr("RetryCount", n.to_string());
    }
    for (k, v) in [
        ("StdInput", &job.stdin),
        ("StdOutput", &job.stdout),
        ("StdError", &job.stderr),
    ] {
        if let Some(v) = v {
            attr(k, s(v));
        }
    }
    if !job.input_files.is_empty() {
        let items = job.input_files.iter().map(|f| match &f.source {
            Some(src) => {
                if sandbox_input(src).name != f.name {
                    d.note(format!(
                        "input_files: `{}` is renamed from its source, which the sandbox cannot do",
                        f.name
                    ));
                }
                src.clone()
            }
            None => f.name.clone(),
        });
        attr("InputSandbox", list(items.collect::<Vec<_>>()));
    }
    if !job.output_files.is_empty() {
        attr("OutputSandbox", list(job.output_files.iter().map(|f| f.name.clone())));
        let targets: Option<Vec<String>> = job.output_files.iter().map(|f| f.target.clone()).collect();
        match targets {
            Some(t) => attr("OutputSandboxDestURI", list(t)),
            None if job.output_files.iter().any(|f| f.target.is_some()) => {
                d.note("output_files: targets are all-or-none in OutputSandboxDestURI; dropped")
            }
            None => {}
        }
    }
    if !job.environment.is_empty() {
        attr(
            "Environment",
            list(job.environment.iter().map(|e| format!("{}={}", e.name, e.value))),
        );
    }
    if let Some(p) = &job.project {
        attr("VirtualOrganisation", s(p));
    }
    if let Some(n) = job.cpus {
        attr("CPUNumber", n.to_string());
    }
    if let Some(n) = job.cpus_per_node {
        attr("SMPGranularity", n.to_string());
    }
    if let Some(n) = job.nodes {
        attr("HostNumber", n.to_string());
    }
    let mut gen = Vec::new();
    if let Some(w) = job.wall_time {
        gen.push(format!(
            "other.GlueCEPolicyMaxWallClockTime >= {}",
            (w.0 + 59).div_euclid(60)
        ));
        if w.0 % 60 != 0 {
            d.note("wall_time: GLUE counts minutes; rounded up");
        }
    }
    if let Some(c) = job.cpu_time {
        gen.push(format!("other.GlueCEPolicyMaxCPUTime >= {}", (c.0 + 59).div_euclid(60)));
        if c.0 % 60 != 0 {
            d.note("cpu_time: GLUE counts minutes; rounded up");
        }
    }
    if job.memory.is_some() {
        match job.memory_per_node_mib() {
            Some(m) => gen.push(format!("other.GlueHostMainMemoryRAMSize >= {m}")),
            None => {
                d.note("memory: GLUE publishes memory per host and the job's memory does not divide over its nodes")
            }
        }
    }
    if let Some(a) = &job.architecture {
        gen.push(format!("other.GlueHostArchitecturePlatformType == {}", s(a)));
    }
    if let Some(o) = &job.operating_system {
        gen.push(format!("other.GlueHostOperatingSystemName == {}", s(o)));
    }
    if let Some(q) = &job.queue {
        gen.push(format!("other.GlueCEName == {}", s(q)));
    }
    for r in &job.runtime_environments {
        gen.push(format!(
            "Member({}, other.GlueHostApplicationSoftwareRunTimeEnvironment)",
            s(r)
        ));
    }
    let own = kept_for(Format::Jdl, "requirements", job.requirements.as_deref(), d);
    if let Some(r) = combine(&gen, own.as_deref()) {
        attr("Requirements", r);
    }
    if let Some(r) = kept_for(Format::Jdl, "rank", job.rank.as_deref(), d) {
        attr("Rank", r);
    }
    for a in &job.attributes {
        attr(&a.name, a.value.clone());
    }
    d.sizes("JDL", job);
    d.unsupported(
        "JDL",
        job,
        &[
            "container_image",
            "grid_resource",
            "application",
            "priority",
            "notify",
            "name",
            "script",
            "working_directory",
            "cpus_per_task",
            "gpus",
            "disk_mib",
            "reservation",
            "earliest_start",
            "deadline",
            "hold",
            "benchmarks",
        ],
    );
    out
}
