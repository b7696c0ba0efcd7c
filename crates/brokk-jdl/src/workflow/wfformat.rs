//! WfCommons WfFormat instances, the workflow traces and synthetic
//! workflows researchers share. Schema 1.5 keeps the structure in
//! `workflow.specification` (tasks with `parents`, `inputFiles` and
//! `outputFiles` by file id; files with `sizeInBytes`) and what a run
//! measured in `workflow.execution` (tasks' `runtimeInSeconds` and
//! `coreCount`); schema 1.4 and earlier put both in `workflow.tasks` (with
//! `files` linked `input` or `output`, `runtimeInSeconds` or `runtime`, and
//! `cores`). Parents are found by task id, then by name. The data on an edge
//! is the size of the files the parent writes and the child reads.

use std::collections::{HashMap, HashSet};

use brokk_model::workflow::{Edge, Task, Workflow};
use brokk_model::Duration;
use serde_json::Value;

use super::{check, place_of, ReadWorkflow, WorkflowDiagnostic, WorkflowError};
use crate::diag::Diagnostic;

/// What the reader gathers of one task before edges are made.
struct Raw {
    id: String,
    name: String,
    parents: Vec<String>,
    inputs: Vec<(String, u64)>,
    outputs: Vec<(String, u64)>,
    runtime: Option<f64>,
    cores: Option<u64>,
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn number(v: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_f64))
}

/// Reads a WfFormat instance `text` from `file`.
pub fn read(file: &str, text: &str) -> Result<ReadWorkflow, WorkflowError> {
    let doc: Value = serde_json::from_str(text).map_err(|e| super::json_error(file, &e))?;
    read_value(file, text, &doc)
}

/// Reads a WfFormat instance already parsed from `text` (which places the
/// errors).
pub fn read_value(file: &str, text: &str, doc: &Value) -> Result<ReadWorkflow, WorkflowError> {
    let _lines = crate::diag::indexed(text);
    let mut errors: Vec<Diagnostic> = Vec::new();
    let fail = |errors: &mut Vec<Diagnostic>, name: &str, m: String| {
        if errors.len() >= super::MAX_ERRORS {
            return;
        }
        errors.push(Diagnostic::error_at(text, place_of(text, name), m));
    };
    let Some(wf) = doc.get("workflow") else {
        return Err(WorkflowError::one(
            file,
            text,
            0,
            "a WfFormat instance has a \"workflow\" object",
        ));
    };
    let mut raws: Vec<Raw> = Vec::new();
    if let Some(spec) = wf.get("specification") {
        // Schema 1.5: structure and measurements apart.
        let sizes: HashMap<&str, u64> = spec
            .get("files")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|f| {
                Some((
                    f.get("id")?.as_str()?,
                    number(f, &["sizeInBytes"]).unwrap_or(0.0) as u64,
                ))
            })
            .collect();
        let measured: HashMap<&str, &Value> = wf
            .get("execution")
            .and_then(|e| e.get("tasks"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| Some((t.get("id")?.as_str()?, t)))
            .collect();
        for t in spec.get("tasks").and_then(Value::as_array).into_iter().flatten() {
            let Some(id) = t.get("id").and_then(Value::as_str) else {
                fail(
                    &mut errors,
                    "tasks",
                    "a task of workflow.specification has no \"id\"".into(),
                );
                continue;
            };
            let sized = |ids: Vec<String>| {
                ids.into_iter()
                    .map(|f| {
                        let size = sizes.get(f.as_str()).copied().unwrap_or(0);
                        (f, size)
                    })
                    .collect()
            };
            let m = measured.get(id);
            raws.push(Raw {
                id: id.to_string(),
                name: t.get("name").and_then(Value::as_str).unwrap_or(id).to_string(),
                parents: strings(t.get("parents")),
                inputs: sized(strings(t.get("inputFiles"))),
                outputs: sized(strings(t.get("outputFiles"))),
                runtime: m.and_then(|m| number(m, &["runtimeInSeconds", "runtime"])),
                cores: m.and_then(|m| number(m, &["coreCount", "cores"])).map(|c| c as u64),
            });
        }
    } else if let Some(tasks) = wf.get("tasks").and_then(Value::as_array) {
        // Schema 1.4 and earlier.
        for t in tasks {
            let name = t.get("name").and_then(Value::as_str);
            let Some(id) = t.get("id").and_then(Value::as_str).or(name) else {
                fail(
                    &mut errors,
                    "tasks",
                    "a task of workflow.tasks has neither \"id\" nor \"name\"".into(),
                );
                continue;
            };
            let mut inputs = Vec::new();
            let mut outputs = Vec::new();
            for f in t.get("files").and_then(Value::as_array).into_iter().flatten() {
                let fname = f
                    .get("id")
                    .or_else(|| f.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let size = number(f, &["sizeInBytes", "size"]).unwrap_or(0.0) as u64;
                match f.get("link").and_then(Value::as_str) {
                    Some("input") => inputs.push((fname, size)),
                    Some("output") => outputs.push((fname, size)),
                    _ => {}
                }
            }
            raws.push(Raw {
                id: id.to_string(),
                name: name.unwrap_or(id).to_string(),
                parents: strings(t.get("parents")),
                inputs,
                outputs,
                runtime: number(t, &["runtimeInSeconds", "runtime"]),
                cores: number(t, &["cores", "coreCount"]).map(|c| c as u64),
            });
        }
    } else {
        return Err(WorkflowError::one(
            file,
            text,
            place_of(text, "workflow"),
            "the workflow has neither \"specification\" (schema 1.5) nor \"tasks\" (1.4)",
        ));
    }
    let by_id: HashMap<&str, usize> = raws.iter().enumerate().map(|(i, r)| (r.id.as_str(), i)).collect();
    let by_name: HashMap<&str, usize> = raws.iter().enumerate().map(|(i, r)| (r.name.as_str(), i)).collect();
    let mut edges = Vec::new();
    for (c, r) in raws.iter().enumerate() {
        for p in &r.parents {
            let Some(&pi) = by_id.get(p.as_str()).or_else(|| by_name.get(p.as_str())) else {
                fail(
                    &mut errors,
                    p,
                    format!("task {:?} names a parent {p:?} that is no task", r.id),
                );
                continue;
            };
            let written: HashSet<&str> = raws[pi].outputs.iter().map(|(f, _)| f.as_str()).collect();
            let bytes = r
                .inputs
                .iter()
                .filter(|(f, _)| written.contains(f.as_str()))
                .map(|(_, s)| s)
                .sum();
            edges.push(Edge {
                parent: raws[pi].id.clone(),
                child: raws[c].id.clone(),
                bytes,
            });
        }
    }
    let mut tasks = Vec::new();
    for r in &raws {
        let runtime = match r.runtime {
            Some(s) if s.is_finite() && s >= 0.0 => Duration(s.ceil() as i64),
            Some(s) => {
                fail(&mut errors, &r.id, format!("task {:?} has a run time of {s} s", r.id));
                continue;
            }
            None => {
                fail(
                    &mut errors,
                    &r.id,
                    format!("task {:?} has no run time (runtimeInSeconds)", r.id),
                );
                continue;
            }
        };
        let cores = match r.cores {
            None => 1,
            Some(c) => match u32::try_from(c) {
                Ok(c) if c > 0 => c,
                _ => {
                    fail(&mut errors, &r.id, format!("task {:?} asks for {c} cores", r.id));
                    continue;
                }
            },
        };
        tasks.push(Task {
            id: r.id.clone(),
            runtime,
            cores,
            ..Task::default()
        });
    }
    if !errors.is_empty() {
        return Err(WorkflowError {
            errors: errors
                .into_iter()
                .map(|d| WorkflowDiagnostic {
                    file: file.to_string(),
                    diagnostic: d,
                })
                .collect(),
        });
    }
    let workflow = Workflow {
        name: doc
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("workflow")
            .to_string(),
        tasks,
        edges,
        ..Workflow::default()
    };
    check(file, text, &workflow)?;
    Ok(ReadWorkflow {
        workflow,
        warnings: Vec::new(),
    })
}
