//! Regressions found by fuzzing, each named after what broke.

use brokk_jdl::{read, write, Format, ReadOptions, WriteError};

fn round_trip(format: Format, text: &str) {
    let first = read(format, text, &ReadOptions::default()).unwrap();
    let written = write(format, &first.jobs).unwrap();
    let again = read(format, &written.text, &ReadOptions::default())
        .unwrap_or_else(|e| panic!("own output does not read back: {e}\n{}", written.text));
    assert_eq!(again.jobs, first.jobs, "{}", written.text);
}

#[test]
fn condor_dollar_signs_in_values_are_not_read_as_macros() {
    round_trip(
        Format::Condor,
        "executable = a\narguments = x$(DOLLAR)( '--\"x) $(Cluster)\nqueue\n",
    );
}

#[test]
fn rsl_jobs_without_a_program_are_refused_rather_than_written_empty() {
    // These once came back unreadable; now a job that runs nothing is not written at all.
    for (format, text, index) in [
        (Format::Xrsl, "+(&(jobname = a))(&(gmlog = log))", 0),
        (Format::Rsl, "+(&(executable = a))(&(label = x))", 1),
    ] {
        let jobs = read(format, text, &ReadOptions::default()).unwrap().jobs;
        assert_eq!(write(format, &jobs), Err(WriteError::NothingToRun { index }), "{text}");
    }
    round_trip(Format::Rsl, "+(&(executable = a))(&(executable = b)(label = x))");
}

#[test]
fn condor_macros_that_name_themselves_mean_their_previous_value() {
    let p = read(
        Format::Condor,
        "x = a\nx = $(x)b$(x)\nexecutable = $(x)\nqueue\n",
        &ReadOptions::default(),
    )
    .unwrap();
    assert_eq!(p.jobs[0].executable.as_deref(), Some("aba"));
    // Mutual references stop growing instead of exhausting memory.
    let p = read(
        Format::Condor,
        "a = $(b)$(b)\nb = $(a)$(a)\nexecutable = $(a)\nqueue\n",
        &ReadOptions::default(),
    );
    assert!(p.is_ok());
}

#[test]
fn a_parameter_value_with_quotes_stays_inside_a_carried_string_attribute() {
    // Found by fuzzing: a parametric job's value was pasted into an unknown
    // attribute's raw ClassAd text, and the written JDL did not read back.
    round_trip(
        Format::Jdl,
        "[\n  JobType = \"Parametric\";\n  Executable = \"fit.py\";\n  Parameters = {\"a\\\"b $x\"};\n  \
         StdOu4put = \"fit-_PARAM_.out\";\n]\n",
    );
}

#[test]
fn thousands_of_diagnostics_on_a_large_collection_are_placed_in_linear_time() {
    // Found by fuzzing: every node of a 3,737-node collection repeated a
    // warning, and each warning counted the lines of the whole text again.
    let node = "    [ Executable = \"a\"; Unknown = 1; ]";
    let text = format!(
        "[\n  Type = \"Collection\";\n  Nodes = {{\n{}\n  }};\n]\n",
        vec![node; 20_000].join(",\n")
    );
    let parsed = read(Format::Jdl, &text, &ReadOptions::default()).unwrap();
    assert_eq!(parsed.jobs.len(), 20_000);
    assert_eq!(parsed.warnings.len(), 20_000);
    assert_eq!(parsed.warnings[19_999].line, 20_003);
}

#[test]
fn condor_macro_expansion_has_a_budget_and_long_chains_stay_linear() {
    // 20,000 chained macros (`m0 = $(m1)` ...) once took the reader 25 s of
    // CPU: telling a variable from a command searched every value for every
    // name. It reads, each macro a variable (no warning for any of them).
    let mut chain = String::from("executable = /bin/true\n");
    for i in 0..20_000 {
        chain.push_str(&format!("m{i} = $(m{})\n", i + 1));
    }
    chain.push_str("m20000 = x\nqueue\n");
    let p = read(Format::Condor, &chain, &ReadOptions::default()).unwrap();
    assert_eq!(p.jobs.len(), 1);
    assert!(
        p.warnings.iter().all(|w| !w.message.contains("`m1`")),
        "{:?}",
        p.warnings
    );
    // Macros that double at every level, in every command Brokk reads, for
    // a thousand jobs: refused at the `queue` line once the budget is spent.
    let mut doubling = String::new();
    for i in 0..16 {
        doubling.push_str(&format!("d{i} = $(d{})$(d{})\n", i + 1, i + 1));
    }
    doubling.push_str("d16 = xxxxxxxx\n");
    for command in ["executable", "arguments", "output", "error", "input", "log"] {
        doubling.push_str(&format!("{command} = $(d0)\n"));
    }
    doubling.push_str("queue 1000\n");
    let e = read(Format::Condor, &doubling, &ReadOptions::default()).unwrap_err();
    let d = &e.diagnostics[0];
    assert!(d.message.contains("steps"), "{e}");
    assert_eq!(d.line, 24, "{e}");
    // A macro that names itself takes its previous value: tripling itself
    // line after line (found by fuzzing: 3.4 GB asked for by a 2.8 kB file)
    // is refused at the `queue` line once it outgrows any expansion.
    let mut tripling = String::from(
        "executable = /bin/true
tag = x
",
    );
    for _ in 0..40 {
        tripling.push_str(
            "tag = $(tag)-$(tag)-$(tag)
",
        );
    }
    tripling.push_str(
        "arguments = $(tag)
queue
",
    );
    let e = read(Format::Condor, &tripling, &ReadOptions::default()).unwrap_err();
    let d = &e.diagnostics[0];
    assert!(d.message.contains("steps"), "{e}");
    assert_eq!(d.line, 44, "{e}");
}

/// A submit file that names its batch as the ClassAd does (`+JobBatchName`)
/// names its jobs, as `batch_name` does; `batch_name` wins when both are
/// given, as it sets the same attribute last.
#[test]
fn condor_jobbatchname_names_the_jobs() {
    let named = |text: &str| {
        read(Format::Condor, text, &ReadOptions::default()).unwrap().jobs[0]
            .name
            .clone()
    };
    assert_eq!(
        named("executable = a\n+JobBatchName = \"sweep\"\nqueue\n").as_deref(),
        Some("sweep")
    );
    assert_eq!(
        named("executable = a\n+JobBatchName = \"sweep\"\nbatch_name = plots\nqueue\n").as_deref(),
        Some("plots")
    );
    let jobs = read(
        Format::Condor,
        "executable = a\n+JobBatchName = \"sweep\"\nqueue\n",
        &ReadOptions::default(),
    )
    .unwrap()
    .jobs;
    assert!(
        jobs[0].attributes.iter().all(|a| a.name != "JobBatchName"),
        "{:?}",
        jobs[0].attributes
    );
    round_trip(Format::Condor, "executable = a\n+JobBatchName = \"sweep\"\nqueue\n");
}

#[test]
fn arcs_container_runtime_environment_is_the_jobs_image_and_is_written_back() {
    let text = r#"&(executable="/bin/sh")(arguments="-c" "cat /etc/os-release")
 (runtimeenvironment="ENV/SINGULARITY" "docker://centos:7" "" "/usr/bin/singularity")
 (runtimeenvironment="APPS/HEP/ATLAS-SITE")"#;
    let parsed = read(Format::Xrsl, text, &ReadOptions::default()).unwrap();
    let job = &parsed.jobs[0];
    assert_eq!(job.container_image.as_deref(), Some("docker://centos:7"));
    // The container is not a software requirement of its own.
    assert_eq!(job.runtime_environments, ["APPS/HEP/ATLAS-SITE"]);
    assert!(
        parsed
            .warnings
            .iter()
            .any(|w| w.message.contains("after the image are not kept")),
        "{:?}",
        parsed.warnings
    );
    // HTCondor's image reaches an ARC CE as the same runtime environment.
    let sub = "universe = container\ncontainer_image = docker://centos:7\nexecutable = /bin/true\nqueue\n";
    let condor = read(Format::Condor, sub, &ReadOptions::default()).unwrap();
    let xrsl = write(Format::Xrsl, &condor.jobs).unwrap();
    assert!(
        xrsl.text
            .contains(r#"(runtimeenvironment = "ENV/SINGULARITY" "docker://centos:7")"#),
        "{}",
        xrsl.text
    );
    round_trip(Format::Xrsl, text);
}

#[test]
fn slurms_container_option_is_the_jobs_bundle_and_only_a_bundle_is_written_back() {
    let script = "#!/bin/sh\n#SBATCH --container=/shared/bundles/centos7\n#SBATCH --time=10\nhostname\n";
    let parsed = read(Format::Slurm, script, &ReadOptions::default()).unwrap();
    assert_eq!(
        parsed.jobs[0].container_image.as_deref(),
        Some("/shared/bundles/centos7")
    );
    round_trip(Format::Slurm, script);
    // A registry image is no bundle: said, not written as one.
    let sub = "universe = container\ncontainer_image = centos:7\nexecutable = /bin/true\nqueue\n";
    let condor = read(Format::Condor, sub, &ReadOptions::default()).unwrap();
    let written = write(Format::Slurm, &condor.jobs).unwrap();
    assert!(!written.text.contains("--container"), "{}", written.text);
    assert!(
        written.dropped.iter().any(|n| n.contains("OCI bundle")),
        "{:?}",
        written.dropped
    );
}
