//! Workflows in the formats users have: HTCondor DAGMan files ([`dagman`]),
//! gLite JDL DAGs ([`jdl_dag`]), WfCommons WfFormat instances ([`wfformat`])
//! and Brokk's canonical JSON
//! (`brokk_model::workflow`). Every reader ends in [`check`]: ids unique,
//! edges between known tasks, and no cycle (a cycle is refused with its
//! tasks named in order). Errors carry the file, line and column.

pub mod dagman;
pub mod jdl_dag;
pub mod wfformat;

use std::fmt;
use std::path::Path;

use brokk_model::workflow::{Edge, Task, Workflow};
use petgraph::graph::DiGraph;

use crate::diag::{Diagnostic, Severity};

/// An error in a workflow or one of the files it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowDiagnostic {
    /// The file it is in.
    pub file: String,
    /// Where, and what.
    pub diagnostic: Diagnostic,
}

impl fmt::Display for WorkflowDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.diagnostic.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {kind}: {}",
            self.file, self.diagnostic.line, self.diagnostic.column, self.diagnostic.message
        )
    }
}

/// A workflow that could not be read: every error found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct WorkflowError {
    /// At least one error.
    pub errors: Vec<WorkflowDiagnostic>,
}

impl WorkflowError {
    fn one(file: &str, src: &str, offset: usize, message: impl Into<String>) -> Self {
        WorkflowError {
            errors: vec![WorkflowDiagnostic {
                file: file.to_string(),
                diagnostic: Diagnostic::error_at(src, offset, message),
            }],
        }
    }
}

/// A workflow read, with what was read but ignored.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadWorkflow {
    /// The workflow, checked.
    pub workflow: Workflow,
    /// Warnings, each with its file.
    pub warnings: Vec<WorkflowDiagnostic>,
}

impl ReadWorkflow {
    /// Workflow `name` of `tasks` and `edges` read from `text` (a DAG
    /// reader's result), checked ([`check`]), with its `warnings`.
    fn checked(
        (file, text, name): (&str, &str, &str),
        tasks: Vec<Task>,
        edges: Vec<Edge>,
        warnings: Vec<WorkflowDiagnostic>,
    ) -> Result<Self, WorkflowError> {
        let workflow = Workflow {
            name: name.to_string(),
            tasks,
            edges,
            ..Workflow::default()
        };
        check(file, text, &workflow)?;
        Ok(ReadWorkflow { workflow, warnings })
    }
}

/// Reads the workflow file `path` in its format, reading the files it names
/// (DAGMan node files, a JDL DAG's node files) relative to it: a JSON
/// object with a `workflow` member is a WfFormat instance, another JSON
/// object Brokk's own, a JDL record of `Type = "DAG"` a gLite DAG, anything
/// else DAGMan.
pub fn read_path(path: &Path) -> Result<ReadWorkflow, WorkflowError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| WorkflowError {
        errors: vec![WorkflowDiagnostic {
            file: file.clone(),
            diagnostic: Diagnostic {
                severity: Severity::Error,
                line: 1,
                column: 1,
                message: e.to_string(),
            },
        }],
    })?;
    let name = path
        .file_stem()
        .map_or("workflow".into(), |s| s.to_string_lossy().into_owned());
    if !text.trim_start().starts_with('{') {
        let base = path.parent().unwrap_or(Path::new("."));
        let load = |p: &Path| std::fs::read_to_string(base.join(p));
        if jdl_dag::is_dag(&text) {
            return jdl_dag::read(&file, &text, &name, &load);
        }
        return dagman::read(&file, &text, &name, &load);
    }
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(doc) if doc.get("workflow").is_some() => wfformat::read_value(&file, &text, &doc),
        _ => read_json(&file, &text),
    }
}

/// Reads Brokk's canonical workflow JSON.
pub fn read_json(file: &str, text: &str) -> Result<ReadWorkflow, WorkflowError> {
    let _lines = crate::diag::indexed(text);
    let workflow: Workflow = serde_json::from_str(text).map_err(|e| json_error(file, &e))?;
    check(file, text, &workflow)?;
    Ok(ReadWorkflow {
        workflow,
        warnings: Vec::new(),
    })
}

/// A JSON parse error at its line and column.
fn json_error(file: &str, e: &serde_json::Error) -> WorkflowError {
    WorkflowError {
        errors: vec![WorkflowDiagnostic {
            file: file.to_string(),
            diagnostic: Diagnostic {
                severity: Severity::Error,
                line: e.line().max(1),
                column: e.column().max(1),
                message: e.to_string(),
            },
        }],
    }
}

/// At most this many errors are reported per file.
pub const MAX_ERRORS: usize = 50;

/// The byte offset where `name` first appears as a JSON string or a word in
/// `text`, for placing an error about a name (0 if nowhere).
fn place_of(text: &str, name: &str) -> usize {
    text.find(&format!("\"{name}\""))
        .or_else(|| text.find(name))
        .unwrap_or(0)
}

/// Checks what every reader's result must hold: at least one task, unique
/// ids, edges between known tasks and no cycle. Errors are placed where the
/// name first appears in `text`.
pub fn check(file: &str, text: &str, w: &Workflow) -> Result<(), WorkflowError> {
    let mut errors = Vec::new();
    let mut err = |name: &str, message: String| {
        // Each is placed by a search of the text: a bounded number keeps a
        // broken large file quick to report.
        if errors.len() >= MAX_ERRORS {
            return;
        }
        errors.push(WorkflowDiagnostic {
            file: file.to_string(),
            diagnostic: Diagnostic::error_at(text, place_of(text, name), message),
        })
    };
    if w.tasks.is_empty() {
        err("", "the workflow has no tasks".into());
    }
    let mut ids: Vec<&str> = w.tasks.iter().map(|t| t.id.as_str()).collect();
    ids.sort_unstable();
    for pair in ids.windows(2) {
        if pair[0] == pair[1] {
            err(pair[0], format!("task {:?} is defined twice", pair[0]));
        }
    }
    for t in &w.tasks {
        if t.cores == 0 {
            err(&t.id, format!("task {:?} asks for no processors", t.id));
        }
    }
    let mut graph = DiGraph::<usize, ()>::new();
    let nodes: Vec<_> = (0..w.tasks.len()).map(|i| graph.add_node(i)).collect();
    let index: std::collections::HashMap<&str, usize> =
        w.tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
    for e in &w.edges {
        match (
            index.get(e.parent.as_str()).copied(),
            index.get(e.child.as_str()).copied(),
        ) {
            (Some(p), Some(c)) if p == c => err(&e.parent, format!("task {:?} depends on itself", e.parent)),
            (Some(p), Some(c)) => {
                graph.add_edge(nodes[p], nodes[c], ());
            }
            (None, _) => err(&e.parent, format!("no task {:?} (a parent of {:?})", e.parent, e.child)),
            (_, None) => err(&e.child, format!("no task {:?} (a child of {:?})", e.child, e.parent)),
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        let names: Vec<&str> = cycle.iter().map(|&i| w.tasks[i].id.as_str()).collect();
        err(
            names[0],
            format!("the dependencies form a cycle: {} -> {}", names.join(" -> "), names[0]),
        );
    } else {
        // Tasks that start together cannot wait for each other.
        for c in &w.coallocations {
            match (index.get(c.a.as_str()).copied(), index.get(c.b.as_str()).copied()) {
                (Some(a), Some(b)) if a == b => err(&c.a, format!("task {:?} is co-allocated with itself", c.a)),
                (Some(a), Some(b)) => {
                    if petgraph::algo::has_path_connecting(&graph, nodes[a], nodes[b], None)
                        || petgraph::algo::has_path_connecting(&graph, nodes[b], nodes[a], None)
                    {
                        err(
                            &c.a,
                            format!(
                                "tasks {:?} and {:?} must start together, but one waits for the other",
                                c.a, c.b
                            ),
                        );
                    }
                }
                (None, _) => err(&c.a, format!("no task {:?} (co-allocated with {:?})", c.a, c.b)),
                (_, None) => err(&c.b, format!("no task {:?} (co-allocated with {:?})", c.b, c.a)),
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(WorkflowError { errors })
    }
}

/// One cycle of `graph` in order, if it has one: a strongly connected
/// component of several tasks, walked from its first task back to it.
fn find_cycle(graph: &DiGraph<usize, ()>) -> Option<Vec<usize>> {
    let scc = petgraph::algo::tarjan_scc(graph).into_iter().find(|c| c.len() > 1)?;
    let members: std::collections::HashSet<_> = scc.iter().copied().collect();
    let inside = |n| members.contains(&n);
    let start = *scc.iter().min_by_key(|n| graph[**n])?;
    // Breadth-first from the start's successors inside the component back
    // to the start gives a shortest cycle through it.
    let mut prev = std::collections::HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(n) = queue.pop_front() {
        let mut next: Vec<_> = graph.neighbors(n).filter(|m| inside(*m)).collect();
        next.sort_by_key(|m| graph[*m]);
        for m in next {
            if m == start {
                let mut path = vec![graph[n]];
                let mut k = n;
                while k != start {
                    k = prev[&k];
                    path.push(graph[k]);
                }
                path.reverse();
                return Some(path);
            }
            if let std::collections::hash_map::Entry::Vacant(e) = prev.entry(m) {
                e.insert(n);
                queue.push_back(m);
            }
        }
    }
    None
}
