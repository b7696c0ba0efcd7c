//! gLite JDL workflows: a record of `Type = "DAG"` whose `Nodes` record
//! names each node, with its job inline (`description = [ ... ]`) or in a
//! JDL file of its own (`file = "a.jdl"`), and whose `Dependencies` (inside
//! `Nodes`, as the WMS's first form writes it, or beside it) list pairs
//! `{parent, child}`, either side a node or a list of nodes. Nodes inherit
//! the DAG's own job attributes (its sandbox, its requirements) unless they
//! set their own, as the WMS does.

use std::borrow::Cow;
use std::io;
use std::path::Path;

use brokk_model::workflow::{Edge, Task};
use brokk_model::Duration;

use super::{ReadWorkflow, WorkflowDiagnostic, WorkflowError};
use crate::classad::{eval, Entry, Env, Expr, Kind, Value};
use crate::diag::Diagnostic;
use crate::Format;

/// Attributes of the DAG itself, read here or ignored, never inherited by
/// its nodes.
const OF_THE_DAG: &[&str] = &[
    "type",
    "nodes",
    "dependencies",
    "max_nodes_running",
    "nodescollocation",
    "defaultnoderetrycount",
    "defaultnodeshallowretrycount",
    "subjobs",
];

/// Whether `text` is a JDL record whose `Type` is `DAG`.
pub fn is_dag(text: &str) -> bool {
    crate::jdl::entries(text).is_ok_and(|entries| {
        entries.iter().any(|e| {
            e.name.eq_ignore_ascii_case("type")
                && matches!(eval(&e.expr, Env::new(None, None, 0)), Value::Str(s) if s.eq_ignore_ascii_case("dag"))
        })
    })
}

/// Reads the DAG `text` of `file` as workflow `name`; `load` reads a node's
/// `file` relative to the DAG.
pub fn read(
    file: &str,
    text: &str,
    name: &str,
    load: &dyn Fn(&Path) -> io::Result<String>,
) -> Result<ReadWorkflow, WorkflowError> {
    let _lines = crate::diag::indexed(text);
    let here = |d: Diagnostic| WorkflowDiagnostic {
        file: file.to_string(),
        diagnostic: d,
    };
    let fail = |d: Diagnostic| WorkflowError { errors: vec![here(d)] };
    let entries = crate::jdl::entries(text).map_err(fail)?;
    let get = |n: &str| entries.iter().find(|e| e.name.eq_ignore_ascii_case(n));
    let constant = |e: &Entry| eval(&e.expr, Env::new(None, None, 0));
    let Some(nodes) = get("nodes") else {
        return Err(fail(Diagnostic::error_at(
            text,
            0,
            "a DAG needs `Nodes = [ name = [ description = [ ... ]; ]; ... ]`",
        )));
    };
    let Kind::Record(fields) = &nodes.expr.kind else {
        return Err(fail(Diagnostic::error_at(
            text,
            nodes.expr.start,
            "`Nodes` of a DAG is a record of named nodes `[ a = [ ... ]; b = [ ... ]; ]`",
        )));
    };
    let retries = match get("defaultnoderetrycount").map(constant) {
        Some(Value::Int(n)) => u32::try_from(n).unwrap_or(0),
        _ => 0,
    };
    let outer: Vec<&Entry> = entries
        .iter()
        .filter(|e| !OF_THE_DAG.iter().any(|d| e.name.eq_ignore_ascii_case(d)))
        .collect();
    let mut errors: Vec<WorkflowDiagnostic> = Vec::new();
    let mut warnings: Vec<WorkflowDiagnostic> = Vec::new();
    // The attributes every node inherits, read once here so that their
    // mistakes are placed in this file, not in each node's.
    if let Err(e) = crate::jdl::record_job(text, &[], &outer, &mut Vec::new()) {
        return Err(WorkflowError {
            errors: e.diagnostics.into_iter().map(here).collect(),
        });
    }
    for attr in ["max_nodes_running", "nodescollocation"] {
        if let Some(e) = get(attr) {
            warnings.push(here(Diagnostic::warning_at(
                text,
                e.name_pos,
                format!("`{}` shapes how the WMS runs the DAG and is ignored", e.name),
            )));
        }
    }
    let mut tasks = Vec::new();
    let mut dependencies = get("dependencies").map(|e| &e.expr);
    for (node, expr) in fields {
        if node.eq_ignore_ascii_case("dependencies") {
            dependencies = Some(expr);
            continue;
        }
        match node_task(file, text, (node, expr), (&outer, retries), load) {
            Ok((task, said)) => {
                warnings.extend(said);
                tasks.push(task);
            }
            Err(e) => errors.extend(e),
        }
    }
    let mut edges = Vec::new();
    if let Some(deps) = dependencies {
        match pairs(text, deps) {
            Ok(pairs) => {
                // Each once, however often the pairs repeat it: a set, so
                // that lists on both sides cost their product, no more.
                // Attribute names are not case-sensitive: a dependency
                // names a node as the node's own entry spells it.
                let spelt: std::collections::HashMap<String, &str> = tasks
                    .iter()
                    .map(|t| (t.id.to_ascii_lowercase(), t.id.as_str()))
                    .collect();
                let as_spelt = |n: &String| spelt.get(&n.to_ascii_lowercase()).map_or(n.clone(), |s| s.to_string());
                let mut seen = std::collections::HashSet::new();
                for (parents, children) in pairs {
                    let children: Vec<String> = children.iter().map(as_spelt).collect();
                    for p in parents.iter().map(as_spelt) {
                        for c in &children {
                            if seen.insert((p.clone(), c.clone())) {
                                edges.push(Edge {
                                    parent: p.clone(),
                                    child: c.clone(),
                                    bytes: 0,
                                });
                            }
                        }
                    }
                }
            }
            Err(d) => errors.push(here(d)),
        }
    }
    if !errors.is_empty() {
        return Err(WorkflowError { errors });
    }
    ReadWorkflow::checked((file, text, name), tasks, edges, warnings)
}

/// What a node's reading says, each with its file.
type Said = Vec<WorkflowDiagnostic>;

/// One node as a task: its job read from its `description` or its `file`,
/// inheriting `outer` and, unless it sets its own, the DAG's retry count;
/// with the warnings its reading gave.
fn node_task(
    file: &str,
    text: &str,
    (node, expr): (&str, &Expr),
    (outer, retries): (&[&Entry], u32),
    load: &dyn Fn(&Path) -> io::Result<String>,
) -> Result<(Task, Said), Said> {
    let at = |f: &str, d: Diagnostic| WorkflowDiagnostic {
        file: f.to_string(),
        diagnostic: d,
    };
    let here = |offset: usize, message: String| vec![at(file, Diagnostic::error_at(text, offset, message))];
    let Kind::Record(attrs) = &expr.kind else {
        return Err(here(
            expr.start,
            format!("node `{node}` is a record `[ description = [ ... ]; ]`"),
        ));
    };
    let find = |n: &str| attrs.iter().find(|(a, _)| a.eq_ignore_ascii_case(n)).map(|(_, e)| e);
    // The job's entries, with the text and the file they are placed in.
    let (source, shown, own): (Cow<'_, str>, String, Vec<Entry>) = match (find("description"), find("file")) {
        (Some(d), _) => {
            let Kind::Record(fields) = &d.kind else {
                return Err(here(
                    d.start,
                    format!("node `{node}`: `description` is a job record `[ ... ]`"),
                ));
            };
            (
                Cow::Borrowed(text),
                file.to_string(),
                crate::jdl::record_entries(fields),
            )
        }
        (None, Some(f)) => {
            let Value::Str(path) = eval(f, Env::new(None, None, 0)) else {
                return Err(here(f.start, format!("node `{node}`: `file` is a quoted path")));
            };
            let source =
                load(Path::new(&path)).map_err(|e| here(f.start, format!("node `{node}`: cannot read {path}: {e}")))?;
            // A job record of its own, which inherits as a description does.
            let own = crate::jdl::entries(&source).map_err(|d| vec![at(&path, d)])?;
            (Cow::Owned(source), path, own)
        }
        (None, None) => {
            return Err(here(
                expr.start,
                format!("node `{node}` needs its job: `description = [ ... ]` or `file = \"node.jdl\"`"),
            ))
        }
    };
    let mut warnings = Vec::new();
    let job = crate::jdl::record_job(&source, &own, outer, &mut warnings)
        .map_err(|e| e.diagnostics.into_iter().map(|d| at(&shown, d)).collect::<Vec<_>>())?;
    let task = Task {
        id: node.to_string(),
        runtime: job.wall_time.unwrap_or(Duration(0)),
        cores: job.cpus.unwrap_or(1).max(1),
        retries: job.retries.unwrap_or(retries),
        format: Some(Format::Jdl.name().to_string()),
        job: Some(job),
        ..Task::default()
    };
    Ok((task, warnings.into_iter().map(|d| at(&shown, d)).collect()))
}

/// One dependency: its parents and its children.
type Pair = (Vec<String>, Vec<String>);

/// The `{parent, child}` pairs of `Dependencies`, each side as its nodes.
fn pairs(text: &str, deps: &Expr) -> Result<Vec<Pair>, Diagnostic> {
    let Kind::List(items) = &deps.kind else {
        return Err(Diagnostic::error_at(
            text,
            deps.start,
            "`Dependencies` is a list of pairs `{ {a, b}, {a, {c, d}} }`",
        ));
    };
    items
        .iter()
        .map(|item| match &item.kind {
            Kind::List(pair) if pair.len() == 2 => Ok((side(text, &pair[0])?, side(text, &pair[1])?)),
            _ => Err(Diagnostic::error_at(
                text,
                item.start,
                "a dependency is a pair `{parent, child}`, either side a node or a list of nodes",
            )),
        })
        .collect()
}

/// One side of a dependency: a node's name, or a list of them.
fn side(text: &str, e: &Expr) -> Result<Vec<String>, Diagnostic> {
    match &e.kind {
        Kind::Attr(None, name) => Ok(vec![name.clone()]),
        Kind::Lit(Value::Str(name)) => Ok(vec![name.clone()]),
        Kind::List(items) => items
            .iter()
            .map(|i| side(text, i))
            .collect::<Result<Vec<_>, _>>()
            .map(|v| v.concat()),
        _ => Err(Diagnostic::error_at(
            text,
            e.start,
            "expected a node's name or a list of them",
        )),
    }
}
