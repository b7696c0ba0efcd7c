//! Workflow files: a DAGMan pipeline whose nodes are in three languages,
//! WfFormat instances of both schemas, the canonical JSON, and mistakes
//! named with their file, line and column.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use brokk_jdl::workflow::{dagman, jdl_dag, read_json, read_path, wfformat, WorkflowError};
use brokk_model::workflow::Workflow;
use brokk_model::Duration;
use proptest::prelude::*;

fn pipeline() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows/pipeline/pipeline.dag")
}

fn edges(w: &Workflow) -> Vec<(&str, &str, u64)> {
    let mut e: Vec<_> = w
        .edges
        .iter()
        .map(|e| (e.parent.as_str(), e.child.as_str(), e.bytes))
        .collect();
    e.sort();
    e
}

#[test]
fn the_example_pipeline_reads_with_every_node_in_its_language() {
    let read = read_path(&pipeline()).unwrap_or_else(|e| panic!("{e}"));
    let w = &read.workflow;
    assert_eq!(w.name, "pipeline");
    let ids: Vec<&str> = w.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(
        ids,
        ["prepare", "left", "right", "join", "part1", "part2", "part3", "part4", "part5", "collect"]
    );
    // Wall times from HTCondor, Slurm and xRSL; the xRSL node asks for two
    // processors.
    let task = |id: &str| &w.tasks[w.task(id).unwrap()];
    assert_eq!(task("prepare").runtime, Duration(300));
    assert_eq!(task("left").runtime, Duration(300));
    assert_eq!((task("right").runtime, task("right").cores), (Duration(300), 2));
    assert_eq!(task("collect").runtime, Duration(600));
    // VARS fill each part's macros, so each part writes its own file.
    let part3 = task("part3").job.as_ref().unwrap();
    assert!(
        part3.output_files.iter().any(|o| o.name == "part3.txt"),
        "{:?}",
        part3.output_files
    );
    assert!(
        part3.arguments.iter().any(|a| a.contains("grep -c 3 joined.txt")),
        "{:?}",
        part3.arguments
    );
    assert_eq!(task("join").retries, 2);
    assert_eq!(task("collect").post.as_deref(), Some(&["/bin/true".to_string()][..]));
    // A diamond, then a fan-out and in again: 2 + 2 + 5 + 5 edges.
    assert_eq!(w.edges.len(), 14);
    assert!(edges(w).contains(&("left", "join", 0)));
    assert!(edges(w).contains(&("part4", "collect", 0)));
}

/// Node files from a map, as a reader's `load` reads them.
fn loader(files: &[(&str, &str)]) -> impl Fn(&Path) -> io::Result<String> {
    let files: HashMap<PathBuf, String> = files.iter().map(|(p, t)| (PathBuf::from(p), t.to_string())).collect();
    move |p: &Path| {
        files
            .get(p)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

/// A DAG read with node files from a map.
fn dag(text: &str, files: &[(&str, &str)]) -> Result<Workflow, WorkflowError> {
    dagman::read("test.dag", text, "test", &loader(files)).map(|r| r.workflow)
}

const SUB: &str = "executable = /bin/true\nallowed_job_duration = 60\nqueue\n";

#[test]
fn a_cycle_is_refused_with_its_nodes_in_order() {
    let text = "JOB A a.sub\nJOB B a.sub\nJOB C a.sub\nJOB D a.sub\n\
                PARENT A CHILD B\nPARENT B CHILD C\nPARENT C CHILD A D\n";
    let e = dag(text, &[("a.sub", SUB)]).unwrap_err().to_string();
    assert!(e.contains("cycle: A -> B -> C -> A"), "{e}");
    assert!(e.starts_with("test.dag:1:5: error"), "{e}");
}

#[test]
fn a_missing_node_file_and_an_unknown_node_are_named_where_they_are() {
    let text = "JOB A a.sub\nJOB B missing.sub\nPARENT A CHILD Z\n";
    let e = dag(text, &[("a.sub", SUB)]).unwrap_err();
    let lines: Vec<String> = e.errors.iter().map(|d| d.to_string()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("test.dag:3:16: error: no node \"Z\"")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("test.dag:2:7: error: node \"B\": cannot read its submit file missing.sub")),
        "{lines:?}"
    );
}

#[test]
fn a_node_files_own_error_is_placed_in_that_file() {
    let e = dag(
        "JOB A a.sub\n",
        &[("a.sub", "executable = /bin/true\nrequest_cpus = many\nqueue\n")],
    )
    .unwrap_err();
    let first = e.errors[0].to_string();
    assert!(first.starts_with("a.sub:2:"), "{first}");
}

#[test]
fn statements_dagman_alone_needs_are_warned_and_unsupported_ones_refused() {
    let text = "CONFIG dag.config\nJOB A a.sub\nPRIORITY A 10\nRETRY A 3 UNLESS-EXIT 2\n";
    let files = HashMap::from([(PathBuf::from("a.sub"), SUB.to_string())]);
    let load = move |p: &Path| {
        files
            .get(p)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    };
    let r = dagman::read("t.dag", text, "t", &load).unwrap();
    assert_eq!(r.warnings.len(), 3, "{:?}", r.warnings);
    assert_eq!(r.workflow.tasks[0].retries, 3);
    let e = dag("SPLICE S other.dag\n", &[]).unwrap_err().to_string();
    assert!(e.contains("SPLICE is not supported"), "{e}");
    let e = dag("JOB A\n", &[]).unwrap_err().to_string();
    assert!(e.contains("t.dag:1:6") || e.contains("test.dag:1:6"), "{e}");
    let e = dag("JOBS A a.sub\n", &[]).unwrap_err().to_string();
    assert!(e.contains("unknown DAGMan statement `JOBS`"), "{e}");
}

const WF14: &str = r#"{
  "name": "blast-small",
  "schemaVersion": "1.4",
  "workflow": {
    "makespanInSeconds": 100,
    "tasks": [
      {"name": "split", "id": "ID01", "runtimeInSeconds": 10.2, "cores": 1, "parents": [],
       "files": [{"link": "output", "name": "chunk1", "sizeInBytes": 1000},
                 {"link": "output", "name": "chunk2", "sizeInBytes": 3000}]},
      {"name": "blast1", "id": "ID02", "runtimeInSeconds": 50, "cores": 4, "parents": ["split"],
       "files": [{"link": "input", "name": "chunk1", "sizeInBytes": 1000},
                 {"link": "input", "name": "db", "sizeInBytes": 99}]},
      {"name": "blast2", "id": "ID03", "runtimeInSeconds": 40, "parents": ["ID01"],
       "files": [{"link": "input", "name": "chunk2", "sizeInBytes": 3000}]}
    ]
  }
}"#;

const WF15: &str = r#"{
  "name": "blast-small",
  "schemaVersion": "1.5",
  "workflow": {
    "specification": {
      "tasks": [
        {"name": "split", "id": "split_1", "parents": [], "children": ["blast_2"], "inputFiles": [], "outputFiles": ["c1"]},
        {"name": "blast", "id": "blast_2", "parents": ["split_1"], "children": [], "inputFiles": ["c1", "db"], "outputFiles": []}
      ],
      "files": [{"id": "c1", "sizeInBytes": 2048}, {"id": "db", "sizeInBytes": 7}]
    },
    "execution": {
      "makespanInSeconds": 60,
      "tasks": [
        {"id": "split_1", "runtimeInSeconds": 5.5, "coreCount": 1},
        {"id": "blast_2", "runtimeInSeconds": 44, "coreCount": 8}
      ]
    }
  }
}"#;

/// A gLite JDL DAG read with node files from a map.
fn jdl_dag(text: &str, files: &[(&str, &str)]) -> Result<brokk_jdl::workflow::ReadWorkflow, WorkflowError> {
    jdl_dag::read("test.jdl", text, "test", &loader(files))
}

#[test]
fn a_glite_dag_reads_its_nodes_inline_and_from_files_with_every_dependency() {
    // The WMS's first form: dependencies inside `nodes`, a side may be a
    // list, and the DAG's own attributes are the nodes' unless they set
    // their own.
    let text = r#"[
  Type = "dag";
  VirtualOrganisation = "biomed";
  max_nodes_running = 2;
  DefaultNodeRetryCount = 2;
  Requirements = other.GlueCEPolicyMaxWallClockTime >= 30;
  InputSandbox = {"common.tar"};
  nodes = [
    prepare = [ description = [ Executable = "prep.sh"; RetryCount = 1; ]; ];
    Left = [ description = [ Executable = "left.sh"; CpuNumber = 4; ]; ];
    right = [ file = "right.jdl"; ];
    merge = [ description = [ Executable = "merge.sh"; InputSandbox = {"merge.py"}; ]; ];
    dependencies = { {prepare, {left, right}}, {{left, right}, merge} };
  ];
]"#;
    let right = "[ Executable = \"right.sh\"; Arguments = \"-n 3\"; ]";
    let read = jdl_dag(text, &[("right.jdl", right)]).unwrap_or_else(|e| panic!("{e}"));
    let w = &read.workflow;
    let ids: Vec<&str> = w.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["prepare", "Left", "right", "merge"]);
    let mut e: Vec<(&str, &str)> = w.edges.iter().map(|e| (e.parent.as_str(), e.child.as_str())).collect();
    e.sort_unstable();
    assert_eq!(
        e,
        [
            ("Left", "merge"),
            ("prepare", "Left"),
            ("prepare", "right"),
            ("right", "merge")
        ]
    );
    let task = |id: &str| &w.tasks[w.task(id).unwrap()];
    let job = |id: &str| task(id).job.as_ref().unwrap();
    // Inherited: the wall time the requirement gives, the sandbox.
    assert_eq!(task("prepare").runtime, Duration(30 * 60));
    assert_eq!(job("prepare").input_files[0].name, "common.tar");
    // A node's own sandbox replaces the DAG's.
    let merged: Vec<&str> = job("merge").input_files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(merged, ["merge.py"]);
    assert_eq!(task("Left").cores, 4);
    assert_eq!(job("right").arguments, ["-n", "3"]);
    assert_eq!(task("right").format.as_deref(), Some("jdl"));
    // Its own retry count, else the DAG's default.
    assert_eq!((task("prepare").retries, task("merge").retries), (1, 2));
    assert!(
        read.warnings
            .iter()
            .any(|d| d.to_string().contains("max_nodes_running")),
        "{:?}",
        read.warnings
    );
}

#[test]
fn a_glite_dag_with_dependencies_beside_its_nodes_and_its_mistakes_placed() {
    // The later form: `Nodes` and `Dependencies` side by side.
    let text = "[\n Type = \"DAG\";\n Nodes = [ a = [ description = [ Executable = \"a\"; ]; ];\n b = [ description = [ Executable = \"b\"; ]; ]; ];\n Dependencies = { {a, b} };\n]";
    let w = jdl_dag(text, &[]).unwrap().workflow;
    assert_eq!(w.edges.len(), 1);
    // A node without its job, a file that is not there, an unknown node
    // in a dependency: each named where it is.
    let text = "[\n Type = \"DAG\";\n Nodes = [ a = [ retrycount = 1; ];\n b = [ file = \"b.jdl\"; ];\n c = [ description = [ Executable = \"c\"; ]; ]; ];\n Dependencies = { {c, d} };\n]";
    let e = jdl_dag(text, &[]).unwrap_err().to_string();
    assert!(e.contains("test.jdl:3:16: error: node `a` needs its job"), "{e}");
    assert!(e.contains("test.jdl:4:15: error: node `b`: cannot read b.jdl"), "{e}");
    // The unknown node is found by `check`, after the nodes read.
    let text =
        "[ Type = \"DAG\"; Nodes = [ c = [ description = [ Executable = \"c\"; ]; ]; ]; Dependencies = { {c, d} }; ]";
    let e = jdl_dag(text, &[]).unwrap_err().to_string();
    assert!(e.contains("no task \"d\" (a child of \"c\")"), "{e}");
    // A cycle is refused as in every workflow format.
    let text = "[ Type = \"DAG\"; Nodes = [ a = [ description = [ Executable = \"a\"; ]; ]; b = [ description = [ Executable = \"b\"; ]; ]; ]; Dependencies = { {a, b}, {b, a} }; ]";
    let e = jdl_dag(text, &[]).unwrap_err().to_string();
    assert!(e.contains("cycle"), "{e}");
}

#[test]
fn wfformat_instances_of_both_schemas_read_with_their_data_on_edges() {
    let w = wfformat::read("b.json", WF14).unwrap().workflow;
    assert_eq!(w.name, "blast-small");
    assert_eq!(
        w.tasks
            .iter()
            .map(|t| (t.id.as_str(), t.runtime.0, t.cores))
            .collect::<Vec<_>>(),
        [("ID01", 11, 1), ("ID02", 50, 4), ("ID03", 40, 1)]
    );
    // Parents by name or id; only files the parent writes count.
    assert_eq!(edges(&w), [("ID01", "ID02", 1000), ("ID01", "ID03", 3000)]);
    let w = wfformat::read("b.json", WF15).unwrap().workflow;
    assert_eq!(edges(&w), [("split_1", "blast_2", 2048)]);
    assert_eq!((w.tasks[1].runtime, w.tasks[1].cores), (Duration(44), 8));
}

#[test]
fn wfformat_mistakes_are_placed_and_named() {
    let bad = WF14.replace("\"parents\": [\"split\"]", "\"parents\": [\"nosuch\"]");
    let e = wfformat::read("b.json", &bad).unwrap_err().to_string();
    assert!(e.contains("names a parent \"nosuch\" that is no task"), "{e}");
    assert!(e.starts_with("b.json:10:"), "{e}");
    let e = wfformat::read("b.json", "{\"workflow\": {\"tasks\": [}")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("b.json:1:"), "{e}");
    let no_runtime = WF14.replace("\"runtimeInSeconds\": 40, ", "");
    let e = wfformat::read("b.json", &no_runtime).unwrap_err().to_string();
    assert!(e.contains("\"ID03\" has no run time"), "{e}");
}

#[test]
fn the_canonical_json_round_trips_and_is_checked() {
    let w = read_path(&pipeline()).unwrap().workflow;
    let text = serde_json::to_string_pretty(&w).unwrap();
    assert_eq!(read_json("w.json", &text).unwrap().workflow, w);
    let cyclic = r#"{"name": "c", "tasks": [{"id": "a", "runtime": 5}, {"id": "b", "runtime": 5}],
                     "edges": [{"parent": "a", "child": "b"}, {"parent": "b", "child": "a"}]}"#;
    let e = read_json("c.json", cyclic).unwrap_err().to_string();
    assert!(e.contains("cycle: a -> b -> a"), "{e}");
    let e = read_json("c.json", r#"{"name": "c", "tasks": [], "oops": 1}"#)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `oops`"), "{e}");
}

proptest! {
    #[test]
    fn the_readers_never_panic(text in "\\PC{0,400}", lines in proptest::collection::vec("(JOB|PARENT|CHILD|VARS|RETRY|SCRIPT|PRE|POST|A|B|a.sub|\"x\"|k=\"v\"| |\n|#)", 0..40)) {
        let joined: String = lines.concat();
        for t in [text.as_str(), joined.as_str()] {
            let _ = dag(t, &[("a.sub", SUB)]);
            let _ = wfformat::read("x.json", t);
            let _ = read_json("x.json", t);
        }
    }
}

#[test]
fn co_allocated_tasks_must_exist_and_not_wait_for_each_other() {
    let base = r#"{"name": "c", "tasks": [{"id": "a", "runtime": 5}, {"id": "b", "runtime": 5}, {"id": "c", "runtime": 5}],
                   "edges": [{"parent": "a", "child": "b"}, {"parent": "b", "child": "c"}], "coallocations": "#;
    let read = |c: &str| read_json("c.json", &format!("{base}{c}}}"));
    let e = read(r#"[{"a": "c", "b": "a", "bandwidth": 100}]"#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tasks \"c\" and \"a\" must start together, but one waits for the other"),
        "{e}"
    );
    let e = read(r#"[{"a": "a", "b": "x"}]"#).unwrap_err().to_string();
    assert!(e.contains("no task \"x\""), "{e}");
    let two = r#"{"name": "c", "tasks": [{"id": "a", "runtime": 5}, {"id": "b", "runtime": 5}],
                  "coallocations": [{"a": "a", "b": "b", "bandwidth": 100}]}"#;
    assert_eq!(
        read_json("c.json", two).unwrap().workflow.coallocations[0].bandwidth,
        100
    );
}
