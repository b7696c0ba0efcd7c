//! Fuzzes the workflow readers (DAGMan, gLite JDL DAGs, WfFormat, canonical
//! JSON): no input
//! may panic, and a workflow the canonical reader accepts is written back as
//! JSON that reads again to the same workflow.
#![no_main]

use std::path::Path;

use brokk_jdl::workflow::{dagman, jdl_dag, read_json, wfformat};
use libfuzzer_sys::fuzz_target;

const NODE: &str = "executable = /bin/true\nallowed_job_duration = 60\nqueue\n";
const JDL_NODE: &str = "[ Executable = \"/bin/true\"; ]";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let load = |p: &Path| {
        if p.extension().is_some_and(|e| e == "sub") {
            Ok(NODE.to_string())
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    };
    let _ = dagman::read("f.dag", text, "f", &load);
    let load_jdl = |p: &Path| {
        if p.extension().is_some_and(|e| e == "jdl") {
            Ok(JDL_NODE.to_string())
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    };
    let _ = jdl_dag::read("f.jdl", text, "f", &load_jdl);
    let _ = wfformat::read("f.json", text);
    if let Ok(read) = read_json("f.json", text) {
        let written = serde_json::to_string(&read.workflow).expect("a workflow serializes");
        match read_json("f.json", &written) {
            Ok(again) => assert_eq!(again.workflow, read.workflow),
            Err(e) => panic!("own output does not read back: {e}\n{written}"),
        }
    }
});
