//! Fuzzes the workflow readers (DAGMan, WfFormat, canonical JSON): no input
//! may panic, and a workflow the canonical reader accepts is written back as
//! JSON that reads again to the same workflow.
#![no_main]

use std::path::Path;

use brokk_jdl::workflow::{dagman, read_json, wfformat};
use libfuzzer_sys::fuzz_target;

const NODE: &str = "executable = /bin/true\nallowed_job_duration = 60\nqueue\n";

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
    let _ = wfformat::read("f.json", text);
    if let Ok(read) = read_json("f.json", text) {
        let written = serde_json::to_string(&read.workflow).expect("a workflow serializes");
        match read_json("f.json", &written) {
            Ok(again) => assert_eq!(again.workflow, read.workflow),
            Err(e) => panic!("own output does not read back: {e}\n{written}"),
        }
    }
});
