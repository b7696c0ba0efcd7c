//! HTCondor DAGMan input files: `JOB name file [DIR dir] [NOOP] [DONE]`,
//! `PARENT ... CHILD ...` (with `ALL_NODES`), `VARS name key="value" ...`
//! (each `$(key)` of the node's file is replaced, and `$(JOB)` is the node's
//! name, as DAGMan does), `RETRY name n [UNLESS-EXIT v]` and `SCRIPT [DEFER
//! s t] [DEBUG f t] PRE|POST name command ...`. Each node's file may be in
//! any language Brokk reads; it must make one job. Statements that shape
//! only how DAGMan itself runs (PRIORITY, CATEGORY, MAXJOBS, CONFIG, DOT,
//! NODE_STATUS_FILE, JOBSTATE_LOG, ABORT-DAG-ON, SET_JOB_ATTR, ENV,
//! SAVE_POINT_FILE, REJECT, SCRIPT HOLD) are read and warned about;
//! SPLICE, SUBDAG, FINAL, SERVICE, PROVISIONER and INCLUDE are refused with
//! the reason. Keywords are case-insensitive, `#` starts a comment line.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;

use brokk_model::workflow::{Edge, Task};
use brokk_model::Duration;

use super::{ReadWorkflow, WorkflowDiagnostic, WorkflowError};
use crate::diag::Diagnostic;
use crate::{detect, ReadOptions};

/// A word of a line and its byte offset in the file.
type Word<'a> = (usize, &'a str);

/// Splits a line into words; a double-quoted run (with `\"` inside) stays
/// within its word, as VARS values need.
fn words(line: &str, at: usize) -> Vec<Word<'_>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == bytes.len() {
            break;
        }
        let start = i;
        let mut quoted = false;
        while i < bytes.len() && (quoted || !bytes[i].is_ascii_whitespace()) {
            match bytes[i] {
                b'\\' if quoted => i += 1,
                b'"' => quoted = !quoted,
                _ => {}
            }
            i += 1;
        }
        let end = i.min(bytes.len());
        out.push((at + start, &line[start..end]));
    }
    out
}

struct Node<'a> {
    name: Word<'a>,
    file: Word<'a>,
    dir: Option<&'a str>,
    noop: bool,
}

/// Reads a DAGMan file `file` (text `text`) into a workflow named `name`;
/// `load` reads a node's file by the path the DAG gives (joined with the
/// node's DIR).
pub fn read(
    file: &str,
    text: &str,
    name: &str,
    load: &dyn Fn(&Path) -> io::Result<String>,
) -> Result<ReadWorkflow, WorkflowError> {
    let _lines = crate::diag::indexed(text);
    let mut errors: Vec<Diagnostic> = Vec::new();
    let mut warnings: Vec<Diagnostic> = Vec::new();
    let mut nodes: Vec<Node> = Vec::new();
    let mut names: HashSet<&str> = HashSet::new();
    let mut deps: Vec<(Vec<Word>, Vec<Word>)> = Vec::new();
    let mut vars: Vec<(Word, Vec<(String, String)>)> = Vec::new();
    let mut retries: Vec<(Word, u32)> = Vec::new();
    let mut scripts: Vec<(Word, bool, Vec<String>)> = Vec::new();
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        if body.trim_start().starts_with('#') {
            continue;
        }
        let w = words(body, start);
        let Some(&(kw_at, kw)) = w.first() else { continue };
        let err = |errors: &mut Vec<Diagnostic>, offset: usize, m: String| {
            errors.push(Diagnostic::error_at(text, offset, m));
        };
        let end_of_line = start + body.len();
        match kw.to_ascii_uppercase().as_str() {
            "JOB" => {
                let (Some(&node), Some(&path)) = (w.get(1), w.get(2)) else {
                    err(
                        &mut errors,
                        end_of_line,
                        "JOB needs a node name and a submit file".into(),
                    );
                    continue;
                };
                let mut dir = None;
                let mut noop = false;
                let mut k = 3;
                while let Some(&(o, word)) = w.get(k) {
                    match word.to_ascii_uppercase().as_str() {
                        "DIR" => match w.get(k + 1) {
                            Some(&(_, d)) => {
                                dir = Some(d);
                                k += 1;
                            }
                            None => err(&mut errors, o, "DIR needs a directory".into()),
                        },
                        "NOOP" => noop = true,
                        "DONE" => warnings.push(Diagnostic::warning_at(
                            text,
                            o,
                            "DONE (a node finished in an earlier run) is ignored: the node runs",
                        )),
                        _ => err(&mut errors, o, format!("unexpected `{word}` (DIR, NOOP or DONE)")),
                    }
                    k += 1;
                }
                if !names.insert(node.1) {
                    err(&mut errors, node.0, format!("node {:?} is defined twice", node.1));
                    continue;
                }
                nodes.push(Node {
                    name: node,
                    file: path,
                    dir,
                    noop,
                });
            }
            "PARENT" => {
                let split = w.iter().position(|(_, x)| x.eq_ignore_ascii_case("CHILD"));
                match split {
                    Some(c) if c > 1 && c + 1 < w.len() => deps.push((w[1..c].to_vec(), w[c + 1..].to_vec())),
                    _ => err(
                        &mut errors,
                        kw_at,
                        "PARENT needs parents, then CHILD and children".into(),
                    ),
                }
            }
            "VARS" => {
                let Some(&node) = w.get(1) else {
                    err(&mut errors, end_of_line, "VARS needs a node name".into());
                    continue;
                };
                let mut pairs = Vec::new();
                for &(o, word) in &w[2..] {
                    let value = word
                        .split_once('=')
                        .filter(|(k, v)| !k.is_empty() && v.len() >= 2 && v.starts_with('"') && v.ends_with('"'));
                    match value {
                        Some((k, v)) => pairs.push((
                            k.to_string(),
                            v[1..v.len() - 1].replace("\\\"", "\"").replace("\\\\", "\\"),
                        )),
                        None => err(&mut errors, o, format!("`{word}` is not name=\"value\"")),
                    }
                }
                vars.push((node, pairs));
            }
            "RETRY" => {
                let (Some(&node), Some(&(o, n))) = (w.get(1), w.get(2)) else {
                    err(&mut errors, end_of_line, "RETRY needs a node name and a count".into());
                    continue;
                };
                match n.parse::<u32>() {
                    Ok(n) => retries.push((node, n)),
                    Err(_) => err(
                        &mut errors,
                        o,
                        format!("the retry count must be a whole number, found `{n}`"),
                    ),
                }
                if let Some(&(o, _)) = w.get(3) {
                    warnings.push(Diagnostic::warning_at(
                        text,
                        o,
                        "UNLESS-EXIT is ignored: every failure is retried",
                    ));
                }
            }
            "SCRIPT" => {
                let mut k = 1;
                while let Some(&(_, word)) = w.get(k) {
                    match word.to_ascii_uppercase().as_str() {
                        "DEFER" | "DEBUG" => k += 3,
                        _ => break,
                    }
                }
                let (Some(&(o, kind)), Some(&node)) = (w.get(k), w.get(k + 1)) else {
                    err(
                        &mut errors,
                        end_of_line,
                        "SCRIPT needs PRE, POST or HOLD, a node name and a command".into(),
                    );
                    continue;
                };
                let command: Vec<String> = w[(k + 2).min(w.len())..].iter().map(|(_, s)| s.to_string()).collect();
                if command.is_empty() {
                    err(&mut errors, end_of_line, "SCRIPT needs a command".into());
                    continue;
                }
                match kind.to_ascii_uppercase().as_str() {
                    "PRE" => scripts.push((node, true, command)),
                    "POST" => scripts.push((node, false, command)),
                    "HOLD" => warnings.push(Diagnostic::warning_at(text, o, "SCRIPT HOLD is ignored")),
                    _ => err(&mut errors, o, format!("SCRIPT runs PRE, POST or HOLD, not `{kind}`")),
                }
            }
            "PRIORITY" | "CATEGORY" | "MAXJOBS" | "CONFIG" | "DOT" | "NODE_STATUS_FILE" | "JOBSTATE_LOG"
            | "ABORT-DAG-ON" | "SET_JOB_ATTR" | "ENV" | "SAVE_POINT_FILE" | "REJECT" => {
                warnings.push(Diagnostic::warning_at(
                    text,
                    kw_at,
                    format!("{kw} shapes how DAGMan itself runs and is ignored"),
                ));
            }
            "SPLICE" | "SUBDAG" | "FINAL" | "SERVICE" | "PROVISIONER" | "INCLUDE" => err(
                &mut errors,
                kw_at,
                format!("{kw} is not supported: write the nodes into this DAG file"),
            ),
            _ => err(&mut errors, kw_at, format!("unknown DAGMan statement `{kw}`")),
        }
    }
    let known = |errors: &mut Vec<Diagnostic>, (o, n): Word| -> bool {
        let ok = names.contains(n);
        if !ok {
            errors.push(Diagnostic::error_at(
                text,
                o,
                format!("no node {n:?}: give it a JOB line"),
            ));
        }
        ok
    };
    let mut edges = Vec::new();
    let mut seen: HashSet<(String, String)> = HashSet::new();
    for (parents, children) in &deps {
        let expand = |errors: &mut Vec<Diagnostic>, list: &[Word]| -> Vec<String> {
            let mut out = Vec::new();
            for &w in list {
                if w.1 == "ALL_NODES" {
                    out.extend(nodes.iter().map(|n| n.name.1.to_string()));
                } else if known(errors, w) {
                    out.push(w.1.to_string());
                }
            }
            out
        };
        let ps = expand(&mut errors, parents);
        let cs = expand(&mut errors, children);
        for p in &ps {
            for c in &cs {
                if p != c && seen.insert((p.clone(), c.clone())) {
                    edges.push(Edge {
                        parent: p.clone(),
                        child: c.clone(),
                        bytes: 0,
                    });
                }
            }
        }
    }
    for (node, _) in &vars {
        known(&mut errors, *node);
    }
    for (node, _) in &retries {
        known(&mut errors, *node);
    }
    for (node, _, _) in &scripts {
        known(&mut errors, *node);
    }
    let mut all: Vec<WorkflowDiagnostic> = Vec::new();
    let here = |d: Diagnostic| WorkflowDiagnostic {
        file: file.to_string(),
        diagnostic: d,
    };
    let retry_of: HashMap<&str, u32> = retries.iter().map(|(w, n)| (w.1, *n)).collect();
    let mut scripts_of: HashMap<&str, Vec<(bool, &Vec<String>)>> = HashMap::new();
    for (w, pre, command) in &scripts {
        scripts_of.entry(w.1).or_default().push((*pre, command));
    }
    let mut vars_of: HashMap<&str, Vec<&(String, String)>> = HashMap::new();
    for (w, pairs) in &vars {
        vars_of.entry(w.1).or_default().extend(pairs.iter());
    }
    let mut tasks = Vec::new();
    for n in &nodes {
        let mut task = Task {
            id: n.name.1.to_string(),
            cores: 1,
            ..Task::default()
        };
        task.retries = retry_of.get(n.name.1).copied().unwrap_or(0);
        for (pre, command) in scripts_of.get(n.name.1).into_iter().flatten() {
            if *pre {
                task.pre = Some((*command).clone());
            } else {
                task.post = Some((*command).clone());
            }
        }
        if n.noop {
            tasks.push(task);
            continue;
        }
        let path = match n.dir {
            Some(d) => Path::new(d).join(n.file.1),
            None => Path::new(n.file.1).to_path_buf(),
        };
        let shown = path.display().to_string();
        let mut source = match load(&path) {
            Ok(s) => s,
            Err(e) => {
                errors.push(Diagnostic::error_at(
                    text,
                    n.file.0,
                    format!("node {:?}: cannot read its submit file {shown}: {e}", n.name.1),
                ));
                continue;
            }
        };
        let mut macros: HashMap<&str, &str> = HashMap::from([("JOB", n.name.1)]);
        for (k, v) in vars_of.get(n.name.1).into_iter().flatten() {
            macros.insert(k, v);
        }
        for (k, v) in &macros {
            source = source.replace(&format!("$({k})"), v);
        }
        let ext = path.extension().and_then(|e| e.to_str());
        let Some(format) = detect(&source, ext) else {
            errors.push(Diagnostic::error_at(
                text,
                n.file.0,
                format!("node {:?}: {shown} is in no job language Brokk reads", n.name.1),
            ));
            continue;
        };
        match crate::read(format, &source, &ReadOptions::default()) {
            Ok(parsed) if parsed.jobs.len() == 1 => {
                all.extend(parsed.warnings.into_iter().map(|d| WorkflowDiagnostic {
                    file: shown.clone(),
                    diagnostic: d,
                }));
                let job = parsed.jobs.into_iter().next();
                if let Some(job) = &job {
                    task.runtime = job.wall_time.unwrap_or(Duration(0));
                    task.cores = job.cpus.unwrap_or(1).max(1);
                }
                task.job = job;
                task.format = Some(format.name().to_string());
            }
            Ok(parsed) => errors.push(Diagnostic::error_at(
                text,
                n.file.0,
                format!(
                    "node {:?}: {shown} makes {} jobs; a node is one job",
                    n.name.1,
                    parsed.jobs.len()
                ),
            )),
            Err(e) => all.extend(e.diagnostics.into_iter().map(|d| WorkflowDiagnostic {
                file: shown.clone(),
                diagnostic: d,
            })),
        }
        tasks.push(task);
    }
    let (node_warnings, node_errors): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|d| d.diagnostic.severity == crate::Severity::Warning);
    let mut failures: Vec<WorkflowDiagnostic> = errors.into_iter().map(here).collect();
    failures.extend(node_errors);
    if !failures.is_empty() {
        return Err(WorkflowError { errors: failures });
    }
    let mut warnings: Vec<WorkflowDiagnostic> = warnings.into_iter().map(here).collect();
    warnings.extend(node_warnings);
    ReadWorkflow::checked((file, text, name), tasks, edges, warnings)
}
