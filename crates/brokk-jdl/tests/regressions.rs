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
