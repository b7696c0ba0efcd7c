//! The archive's traces in `../shared/data/traces` read completely and write back
//! unchanged.

use std::path::PathBuf;

use brokk_sim::swf::{read, read_path, write};

fn trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/traces")
        .join(name)
}

#[test]
fn every_shared_trace_reads_with_its_documented_job_count() {
    for (name, jobs, procs) in [
        ("KTH-SP2-1996-2.1-cln.swf.gz", 27_992, Some(100)),
        ("NASA-iPSC-1993-3.1-cln.swf.gz", 18_239, Some(128)),
        ("LCG-2005-1.swf.gz", 188_041, None),
        ("lublin_256.swf", 10_000, Some(256)),
    ] {
        let swf = read_path(&trace(name), false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(swf.jobs.len(), jobs, "{name}");
        if procs.is_some() {
            assert_eq!(swf.max_procs(), procs, "{name}");
        }
        assert!(
            swf.jobs.windows(2).all(|w| w[0].submit <= w[1].submit),
            "{name}: submit times must not decrease"
        );
    }
}

#[test]
fn kth_round_trips_through_the_writer() {
    let swf = read_path(&trace("KTH-SP2-1996-2.1-cln.swf.gz"), false).unwrap();
    let mut out = Vec::new();
    write(&swf, &mut out).unwrap();
    assert_eq!(read(out.as_slice(), false).unwrap(), swf);
}
