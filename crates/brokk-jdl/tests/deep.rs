//! Deeply nested and very long inputs, one family per reader, read on a
//! thread with the stack the broker's async workers have (2 MiB), in a debug build whose frames are larger than the release build's: each
//! is refused with a positioned error (or read), never a stack overflow.
//! Whatever a reader accepts is also written in every language and its
//! requirements evaluated, since those walk the same trees.

use brokk_jdl::{classad, read, write, Format, ReadOptions};

/// The broker's tokio workers run on 2 MiB stacks; the readers must live on less.
const STACK: usize = 2 << 20;

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

/// (format, description) pairs at the given nesting depth or term count.
fn family(n: usize) -> Vec<(Format, String)> {
    let open = |s: &str| s.repeat(n);
    vec![
        (
            Format::Xrsl,
            format!("&{}(executable=/bin/true){}", open("(|"), open(")")),
        ),
        (
            Format::Xrsl,
            format!("&(executable=/bin/true)(arguments={}a{})", open("("), open(")")),
        ),
        (
            Format::Rsl,
            format!("&{}(executable=/bin/true){}", open("(|"), open(")")),
        ),
        (
            Format::Rsl,
            format!("+{}(&(executable=/bin/true)){}", open("("), open(")")),
        ),
        (
            Format::Jdl,
            format!(
                "[ Executable = \"/bin/true\"; Requirements = {}true{}; ]",
                open("("),
                open(")")
            ),
        ),
        (
            Format::Jdl,
            format!(
                "[ Executable = \"/bin/true\"; Requirements = true{}; ]",
                open(" && true")
            ),
        ),
        (
            Format::Jdl,
            format!("[ Executable = \"/bin/true\"; Rank = 1{}; ]", open(" + 1")),
        ),
        (
            Format::Jdl,
            format!("[ Executable = \"/bin/true\"; Requirements = {}true; ]", open("!")),
        ),
        (
            Format::Jdl,
            format!(
                "[ Executable = \"/bin/true\"; Requirements = {{{}}}; ]",
                open("{1},").trim_end_matches(',')
            ),
        ),
        (
            Format::Jdl,
            format!("[ Executable = \"/bin/true\"; A = {}1{}; ]", open("[ B = "), open("]")),
        ),
        (
            Format::Jdl,
            format!(
                "[ Executable = \"/bin/true\"; Requirements = {}1{}; ]",
                open("f("),
                open(")")
            ),
        ),
        (
            Format::Jdl,
            format!(
                "[ Executable = \"/bin/true\"; Requirements = true {}; ]",
                open("? 1 : 2 ")
            ),
        ),
        (
            Format::Condor,
            format!(
                "executable = /bin/true\nrequirements = {}true{}\nqueue\n",
                open("("),
                open(")")
            ),
        ),
        (
            Format::Condor,
            format!(
                "executable = /bin/true\nrequirements = true{}\nqueue\n",
                open(" || false")
            ),
        ),
        (
            Format::Condor,
            format!("executable = /bin/true\nrequirements = {}true\nqueue\n", open("-")),
        ),
        (
            Format::Condor,
            format!("executable = /bin/true\nrank = a{}\nqueue\n", open(".b")),
        ),
        (
            Format::Jsdl,
            format!(
                "<JobDefinition xmlns=\"http://schemas.ggf.org/jsdl/2005/11/jsdl\">{}{}</JobDefinition>",
                open("<x>"),
                open("</x>")
            ),
        ),
        (Format::Json, format!("{}{}", open("["), open("]"))),
        (
            Format::Json,
            format!(
                "{{\"executable\": \"/bin/true\", \"x\": {}1{}}}",
                open("{\"a\":"),
                open("}")
            ),
        ),
        (
            Format::Slurm,
            format!("#!/bin/sh\n#SBATCH --time=1\n{}true\n", open("$((")),
        ),
    ]
}

fn exercise(format: Format, text: String) -> Result<(), String> {
    match read(format, &text, &ReadOptions::default()) {
        Err(e) => match e.diagnostics.first() {
            Some(d) if d.line >= 1 && d.column >= 1 => Ok(()),
            _ => Err(format!("{format}: an error without a position: {e}")),
        },
        Ok(parsed) => {
            for f in Format::ALL {
                let _ = write(f, &parsed.jobs);
            }
            for job in &parsed.jobs {
                if let Ok(ad) = classad::ClassAd::for_job(job) {
                    let _ = ad.matches(&ad, 0);
                    let _ = ad.rank(&ad, 0);
                    let _ = ad.to_string();
                }
            }
            Ok(())
        }
    }
}

#[test]
fn deep_nesting_and_long_chains_never_overflow_the_stack() {
    for n in [100, 1_000, 5_000, 25_000, 100_000] {
        for (k, (format, text)) in family(n).into_iter().enumerate() {
            let r = on_small_stack(move || exercise(format, text));
            assert_eq!(r, Ok(()), "input {k} at {n}");
        }
    }
}

#[test]
fn expressions_real_files_use_still_read() {
    // A long but flat machine list, as HTCondor users write them.
    let machines: Vec<String> = (0..150)
        .map(|i| format!("Machine == \"node{i}.example.org\""))
        .collect();
    let text = format!(
        "executable = /bin/true\nrequirements = {}\nqueue\n",
        machines.join(" || ")
    );
    let parsed = on_small_stack(move || read(Format::Condor, &text, &ReadOptions::default()).map(|p| p.jobs.len()));
    assert_eq!(parsed.map_err(|e| e.to_string()), Ok(1));
}
