//! JDL `Requirements` and `Rank` stay evaluable after reading: matched against
//! GLUE resource ads with HTCondor's semantics.

use brokk_jdl::classad::ClassAd;
use brokk_jdl::{read, Format, ReadOptions};

fn jdl_job(text: &str) -> brokk_model::Job {
    read(Format::Jdl, text, &ReadOptions::default()).unwrap().jobs.remove(0)
}

#[test]
fn requirements_and_rank_evaluate_against_resources() {
    let job = jdl_job(
        r#"[ Executable = "sim";
             Requirements = other.GlueCEPolicyMaxWallClockTime >= 720 && other.GlueCEStateStatus == "Production"
                            && other.GlueCEStateFreeCPUs > 0;
             Rank = -other.GlueCEStateEstimatedResponseTime; ]"#,
    );
    // The wall-time conjunct was lifted into a field; the rest is still an expression.
    assert_eq!(job.wall_time.map(|d| d.as_secs()), Some(720 * 60));
    let ad = ClassAd::for_job(&job).unwrap();
    let ce = |status: &str, free: i64, wait: i64| {
        ClassAd::parse(&format!(
            "[ GlueCEStateStatus = \"{status}\"; GlueCEStateFreeCPUs = {free}; GlueCEStateEstimatedResponseTime = {wait} ]"
        ))
        .unwrap()
    };
    // String equality ignores case, as in HTCondor.
    assert!(ad.matches(&ce("production", 4, 30), 0));
    assert!(!ad.matches(&ce("Draining", 4, 30), 0));
    assert!(!ad.matches(&ce("Production", 0, 30), 0));
    // A resource that does not publish an attribute leaves the requirement UNDEFINED: no match.
    assert!(!ad.matches(&ClassAd::parse("[ GlueCEStateFreeCPUs = 3 ]").unwrap(), 0));
    // Rank orders resources: the shorter estimated response time ranks higher.
    assert!(ad.rank(&ce("Production", 4, 30), 0) > ad.rank(&ce("Production", 4, 600), 0));
}

#[test]
fn runtime_environment_membership_survives_lifting_and_writing() {
    let job = jdl_job(
        r#"[ Executable = "a"; Requirements = Member("OPENMPI", other.GlueHostApplicationSoftwareRunTimeEnvironment); ]"#,
    );
    assert_eq!(job.runtime_environments, ["OPENMPI"]);
    assert_eq!(job.requirements, None);
    let written = brokk_jdl::write(Format::Jdl, std::slice::from_ref(&job)).unwrap();
    let reread = jdl_job(&written.text);
    assert_eq!(reread, job);
    // And the written requirement evaluates against a resource publishing the RTE.
    let full = ClassAd::parse(&written.text).unwrap();
    let ce = ClassAd::parse(r#"[ GlueHostApplicationSoftwareRunTimeEnvironment = {"MPICH", "OpenMPI"} ]"#).unwrap();
    assert!(full.matches(&ce, 0));
}

#[test]
fn translation_reports_what_the_target_cannot_say() {
    let parsed = read(
        Format::Xrsl,
        "&(executable = a)(benchmarks = (nas-lu-c 250:65))(runtimeenvironment = APPS/X)",
        &ReadOptions::default(),
    )
    .unwrap();
    let w = brokk_jdl::write(Format::Slurm, &parsed.jobs).unwrap();
    assert_eq!(
        w.dropped,
        [
            "runtime_environments: Slurm cannot express it",
            "benchmarks: Slurm cannot express it"
        ]
    );
    let w = brokk_jdl::write(Format::Xrsl, &parsed.jobs).unwrap();
    assert!(w.dropped.is_empty());
}
