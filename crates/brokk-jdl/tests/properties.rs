//! Property tests: no reader panics on any input, and for jobs in each writer's
//! representable subset, read(write(jobs)) == jobs.

use brokk_jdl::classad::{eval, parse_expr, Env};
use brokk_jdl::{read, write, Format, ReadOptions};
use brokk_model::{Benchmark, Duration, EnvVar, InputFile, Job, Memory, MemoryScope, OutputFile, Time};
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;

const READERS: [Format; 7] = Format::ALL;

fn word() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_][a-zA-Z0-9_./-]{0,11}"
}

/// Free text with spaces and quotes, for fields every language quotes.
fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_][a-zA-Z0-9_ .'\"/-]{0,10}[a-zA-Z0-9_]"
}

fn url() -> impl Strategy<Value = String> {
    ("(gsiftp|https|http)", "[a-z]{1,6}\\.example\\.org", word()).prop_map(|(s, h, p)| format!("{s}://{h}/{p}"))
}

fn minutes() -> impl Strategy<Value = Duration> {
    (1i64..100_000).prop_map(Duration::minutes)
}

fn seconds() -> impl Strategy<Value = Duration> {
    (1i64..10_000_000).prop_map(Duration)
}

fn time() -> impl Strategy<Value = Time> {
    (1_700_000_000i64..1_900_000_000).prop_map(Time)
}

fn env() -> impl Strategy<Value = Vec<EnvVar>> {
    vec(
        ("[A-Z_][A-Z0-9_]{0,8}", "[a-zA-Z0-9_/.:-]{0,10}").prop_map(|(name, value)| EnvVar { name, value }),
        0..3,
    )
}

fn benchmark() -> impl Strategy<Value = Benchmark> {
    (word(), 1u32..100_000, 0u32..4, 1i64..10_000).prop_map(|(name, r, frac, t)| Benchmark {
        name,
        result: f64::from(r) + f64::from(frac) * 0.25,
        time: Duration::minutes(t),
    })
}

/// Inputs whose name is the last path segment of their URL, or client uploads.
fn sandbox_inputs() -> impl Strategy<Value = Vec<InputFile>> {
    vec(
        prop_oneof![
            word().prop_map(|name| InputFile {
                name,
                source: None,
                size: None,
                local: None,
            }),
            ("[a-z]{1,6}", "[a-z][a-z0-9_.]{0,8}").prop_map(|(host, name)| InputFile {
                source: Some(format!("https://{host}.example.org/d/{name}")),
                name,
                size: None,
                local: None,
            }),
        ],
        0..3,
    )
}

fn xrsl_job() -> impl Strategy<Value = Job> {
    (
        (
            of(text()),
            of(word()),
            vec(text(), 0..4),
            of(word()),
            of(word()),
            of(word()),
            env(),
        ),
        (
            vec((word(), of(url()), of(0u64..1 << 40)), 0..3),
            vec((word(), of(url()), of(1u64..1 << 20)), 0..3),
            of(1u32..4096),
            of(1u32..128),
            of(1u64..1 << 20),
            of(1u64..1 << 20),
        ),
        (
            of(seconds()),
            of(seconds()),
            of(time()),
            of(word()),
            of(word()),
            vec(word(), 0..3),
            of(word()),
        ),
        vec(benchmark(), 0..3),
    )
        .prop_map(
            |(
                (name, exe, args, i, o, e, environment),
                (ins, outs, cpus, cpn, mem, disk),
                (w, c, st, arch, os, rte, q),
                b,
            )| Job {
                name,
                executable: exe,
                arguments: args,
                stdin: i,
                stdout: o,
                stderr: e,
                environment,
                input_files: ins
                    .into_iter()
                    .map(|(name, source, size)| InputFile {
                        name,
                        source,
                        size,
                        local: None,
                    })
                    .collect(),
                output_files: outs
                    .into_iter()
                    .map(|(name, target, kib)| OutputFile {
                        name,
                        target,
                        size_estimate: kib.map(|k| k * 1024),
                    })
                    .collect(),
                cpus,
                cpus_per_node: cpn,
                memory: mem.map(|mib| Memory {
                    mib,
                    per: MemoryScope::Cpu,
                }),
                disk_mib: disk,
                wall_time: w,
                cpu_time: c,
                earliest_start: st,
                architecture: arch,
                operating_system: os,
                runtime_environments: rte,
                queue: q,
                benchmarks: b,
                ..Job::default()
            },
        )
}

fn rsl_job() -> impl Strategy<Value = Job> {
    (
        (
            of(word()),
            vec(text(), 0..4),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
            env(),
        ),
        (
            vec((word(), url()), 0..3),
            vec((word(), url()), 0..3),
            of(1u32..4096),
            of(1u32..64),
            of(1u64..1 << 20),
        ),
        (of(seconds()), of(seconds()), of(word()), of(word())),
    )
        .prop_map(
            |((exe, args, dir, i, o, e, environment), (ins, outs, cpus, nodes, mem), (w, c, q, p))| Job {
                executable: exe,
                arguments: args,
                working_directory: dir,
                stdin: i,
                stdout: o,
                stderr: e,
                environment,
                input_files: ins
                    .into_iter()
                    .map(|(name, s)| InputFile {
                        name,
                        source: Some(s),
                        size: None,
                        local: None,
                    })
                    .collect(),
                output_files: outs
                    .into_iter()
                    .map(|(name, t)| OutputFile {
                        name,
                        target: Some(t),
                        size_estimate: None,
                    })
                    .collect(),
                cpus,
                nodes,
                memory: mem.map(|mib| Memory {
                    mib,
                    per: MemoryScope::Cpu,
                }),
                wall_time: w,
                cpu_time: c,
                queue: q,
                project: p,
                ..Job::default()
            },
        )
}

fn jsdl_job() -> impl Strategy<Value = Job> {
    (
        (
            of(text()),
            of(word()),
            of(word()),
            vec(text(), 0..4),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
        ),
        (env(), vec((word(), url()), 0..3), vec((word(), url()), 0..3)),
        (
            of(1u32..4096),
            of(1u32..128),
            of(1u32..64),
            of((1u64..1 << 20, any::<bool>())),
            of(1u64..1 << 20),
        ),
        (
            of(seconds()),
            of(seconds()),
            of(word()),
            of(word()),
            vec(word(), 0..3),
            of(word()),
        ),
    )
        .prop_map(
            |(
                (name, project, exe, args, i, o, e, dir),
                (environment, ins, outs),
                (cpus, cpn, nodes, mem, disk),
                (w, c, arch, os, rte, q),
            )| Job {
                name,
                project,
                executable: exe,
                arguments: args,
                stdin: i,
                stdout: o,
                stderr: e,
                working_directory: dir,
                environment,
                input_files: ins
                    .into_iter()
                    .map(|(name, s)| InputFile {
                        name,
                        source: Some(s),
                        size: None,
                        local: None,
                    })
                    .collect(),
                output_files: outs
                    .into_iter()
                    .map(|(name, t)| OutputFile {
                        name,
                        target: Some(t),
                        size_estimate: None,
                    })
                    .collect(),
                cpus,
                cpus_per_node: cpn,
                nodes,
                memory: mem.map(|(mib, node)| Memory {
                    mib,
                    per: if node { MemoryScope::Node } else { MemoryScope::Job },
                }),
                disk_mib: disk,
                wall_time: w,
                cpu_time: c,
                architecture: arch,
                operating_system: os,
                runtime_environments: rte,
                queue: q,
                ..Job::default()
            },
        )
}

/// What HTCondor users write about machines (not lifted into fields).
const CONDOR_REQUIREMENTS: &[&str] = &[
    "TARGET.HasSingularity == true",
    "TARGET.TotalCpus > 10 || TARGET.KFlops > 2",
    "TARGET.CUDACapability < 5 && TARGET.TotalCpus >= 1",
];

const USER_REQUIREMENTS: &[&str] = &[
    "other.GlueCEStateStatus == \"Production\"",
    "other.GlueCEInfoTotalCPUs > 10 || other.GlueCEStateFreeCPUs > 2",
    "other.GlueCEStateWaitingJobs < 5 && other.GlueCEStateFreeCPUs >= 1",
];

fn jdl_job() -> impl Strategy<Value = Job> {
    (
        (
            of(word()),
            vec(text(), 0..4),
            of(word()),
            of(word()),
            of(word()),
            env(),
            of(word()),
        ),
        (
            sandbox_inputs(),
            vec(word(), 0..3),
            any::<bool>(),
            of(1u32..4096),
            of(1u32..64),
            of(1u32..64),
        ),
        (
            of(minutes()),
            of(minutes()),
            of(1u64..1 << 20),
            of(word()),
            of(word()),
            of(word()),
            vec(word(), 0..3),
        ),
        (
            of(0..USER_REQUIREMENTS.len()),
            of(Just("-other.GlueCEStateEstimatedResponseTime".to_string())),
        ),
    )
        .prop_map(
            |(
                (exe, args, i, o, e, environment, vo),
                (ins, outs, targets, cpus, cpn, nodes),
                (w, c, mem, arch, os, q, rte),
                (req, rank),
            )| Job {
                executable: exe,
                arguments: args,
                stdin: i,
                stdout: o,
                stderr: e,
                environment,
                project: vo,
                input_files: ins,
                output_files: outs
                    .into_iter()
                    .map(|name| OutputFile {
                        target: targets.then(|| format!("gsiftp://se.example.org/out/{name}")),
                        name,
                        size_estimate: None,
                    })
                    .collect(),
                cpus,
                cpus_per_node: cpn,
                nodes,
                wall_time: w,
                cpu_time: c,
                memory: mem.map(|mib| Memory {
                    mib,
                    per: MemoryScope::Node,
                }),
                architecture: arch,
                operating_system: os,
                queue: q,
                runtime_environments: rte,
                requirements: req.map(|k| USER_REQUIREMENTS[k].to_string()),
                rank,
                ..Job::default()
            },
        )
}

fn condor_job() -> impl Strategy<Value = Job> {
    (
        (
            of(word()),
            of(word()),
            vec(text(), 0..4),
            env(),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
        ),
        (of(word()), sandbox_inputs(), vec((word(), of(word())), 0..3)),
        (
            prop_oneof![
                Just(None),
                (1u32..64).prop_map(|c| Some((c, None))),
                (1u32..64, 1u32..16).prop_map(|(c, n)| Some((c, Some(n))))
            ],
            of(1u64..1 << 20),
            of(1u64..1 << 20),
        ),
        (
            of(seconds()),
            of(time()),
            of(word()),
            of(word()),
            of(0..CONDOR_REQUIREMENTS.len()),
            of(Just("KFlops".to_string())),
        ),
    )
        .prop_map(
            |(
                (name, exe, args, environment, i, o, e, dir),
                (project, ins, outs),
                (shape, mem, disk),
                (w, st, arch, os, req, rank),
            )| {
                let (cpus, cpus_per_node, nodes, scope) = match shape {
                    None => (None, None, None, MemoryScope::Job),
                    Some((c, None)) => (Some(c), None, None, MemoryScope::Job),
                    Some((c, Some(n))) => (Some(c * n), Some(c), Some(n), MemoryScope::Node),
                };
                Job {
                    name,
                    executable: exe,
                    arguments: args,
                    environment,
                    stdin: i,
                    stdout: o,
                    stderr: e,
                    working_directory: dir,
                    project,
                    input_files: ins,
                    output_files: outs
                        .into_iter()
                        .map(|(name, target)| OutputFile {
                            name,
                            target,
                            size_estimate: None,
                        })
                        .collect(),
                    cpus,
                    cpus_per_node,
                    nodes,
                    memory: mem.map(|mib| Memory { mib, per: scope }),
                    disk_mib: disk,
                    wall_time: w,
                    earliest_start: st,
                    architecture: arch,
                    operating_system: os,
                    requirements: req.map(|k| CONDOR_REQUIREMENTS[k].to_string()),
                    rank,
                    ..Job::default()
                }
            },
        )
}

fn slurm_job() -> impl Strategy<Value = Job> {
    (
        (
            of(text()),
            of(1u32..64),
            of(1u32..8),
            of(1u32..16),
            of(1u32..8),
            of((1u64..1 << 20, any::<bool>())),
            of(1u64..1 << 20),
        ),
        (
            of(seconds()),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
            of(word()),
        ),
        (of(time()), of(time()), env()),
        prop_oneof![
            ("[a-z][a-z0-9_./-]{0,10}", vec("[a-zA-Z0-9_ ./=:-]{1,10}", 0..4)).prop_map(|(e, a)| (Some(e), a, None)),
            "[a-z]{1,8}".prop_map(|cmd| (None, vec![], Some(format!("#!/bin/bash\nset -e\n{cmd} \"$1\"\n")))),
        ],
    )
        .prop_map(
            |(
                (name, tasks, cpt, nodes, tpn, mem, disk),
                (w, i, o, e, q, r, p, dir),
                (st, dl, environment),
                (exe, args, script),
            )| {
                let per = cpt.unwrap_or(1);
                // sbatch counts one task when only per-task or per-node counts are given.
                let tasks = if cpt.is_some() || tpn.is_some() {
                    Some(tasks.unwrap_or(1))
                } else {
                    tasks
                };
                Job {
                    name,
                    cpus: tasks.map(|t| t * per),
                    cpus_per_task: cpt,
                    nodes,
                    cpus_per_node: tpn.map(|t| t * per),
                    memory: mem.map(|(mib, node)| Memory {
                        mib,
                        per: if node { MemoryScope::Node } else { MemoryScope::Cpu },
                    }),
                    disk_mib: disk,
                    wall_time: w,
                    stdin: i,
                    stdout: o,
                    stderr: e,
                    queue: q,
                    reservation: r,
                    project: p,
                    working_directory: dir,
                    earliest_start: st,
                    deadline: dl,
                    environment,
                    executable: exe,
                    arguments: args,
                    script,
                    ..Job::default()
                }
            },
        )
}

fn json_job() -> impl Strategy<Value = Job> {
    (xrsl_job(), of(text()), of(".*"), of(1u32..9), of(time())).prop_map(|(mut j, project, script, cpt, dl)| {
        j.project = project;
        j.script = script;
        j.cpus_per_task = cpt;
        j.deadline = dl;
        j
    })
}

/// File names are unique within a job: a second entry for the same name means
/// nothing in any language, so generators keep the first.
fn uniq(mut job: Job) -> Job {
    let mut seen = std::collections::HashSet::new();
    job.input_files.retain(|f| seen.insert(f.name.clone()));
    let mut seen = std::collections::HashSet::new();
    job.output_files.retain(|f| seen.insert(f.name.clone()));
    job
}

fn round_trip(format: Format, jobs: &[Job]) -> Result<(), TestCaseError> {
    // A job with nothing to run is refused, never written as an empty job.
    if let Some(k) = jobs.iter().position(|j| j.executable.is_none() && j.script.is_none()) {
        prop_assert_eq!(
            write(format, jobs),
            Err(brokk_jdl::WriteError::NothingToRun { index: k })
        );
        return Ok(());
    }
    let w = write(format, jobs).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        w.dropped.is_empty(),
        "{format} dropped {:?} from a job in its subset",
        w.dropped
    );
    let back = read(format, &w.text, &ReadOptions::default())
        .map_err(|e| TestCaseError::fail(format!("{format} output does not read back: {e}\n{}", w.text)))?;
    prop_assert_eq!(&back.jobs, &jobs.to_vec(), "{} text:\n{}", format, w.text);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

    #[test]
    fn xrsl_round_trips(jobs in vec(xrsl_job().prop_map(uniq), 1..3)) { round_trip(Format::Xrsl, &jobs)?; }

    #[test]
    fn rsl_round_trips(jobs in vec(rsl_job().prop_map(uniq), 1..3)) { round_trip(Format::Rsl, &jobs)?; }

    #[test]
    fn jsdl_round_trips(job in jsdl_job().prop_map(uniq)) { round_trip(Format::Jsdl, &[job])?; }

    #[test]
    fn jdl_round_trips(jobs in vec(jdl_job().prop_map(uniq), 1..3)) { round_trip(Format::Jdl, &jobs)?; }

    #[test]
    fn condor_round_trips(jobs in vec(condor_job().prop_map(uniq), 1..4)) { round_trip(Format::Condor, &jobs)?; }

    #[test]
    fn slurm_round_trips(job in slurm_job().prop_map(uniq)) { round_trip(Format::Slurm, &[job])?; }

    #[test]
    fn json_round_trips(jobs in vec(json_job().prop_map(uniq), 1..3)) { round_trip(Format::Json, &jobs)?; }

    #[test]
    fn no_reader_panics_on_arbitrary_text(text in ".{0,300}") {
        for f in READERS {
            let _ = read(f, &text, &ReadOptions::default());
        }
    }

    #[test]
    fn no_reader_panics_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..300)) {
        let text = String::from_utf8_lossy(&bytes);
        for f in READERS {
            let _ = read(f, &text, &ReadOptions::default());
        }
    }

    /// Corpus files with random edits reach much deeper into each reader than noise does.
    #[test]
    fn no_reader_panics_on_mutated_corpus(pick in any::<prop::sample::Index>(), edits in vec((any::<prop::sample::Index>(), 0u8..4, "[ -~\n]{0,3}"), 1..6)) {
        let files = corpus();
        let (format, original) = &files[pick.index(files.len())];
        let mut text = original.clone();
        for (at, kind, piece) in edits {
            let mut i = at.index(text.len() + 1);
            while !text.is_char_boundary(i) { i -= 1; }
            match kind {
                0 => text.insert_str(i, &piece),
                1 => { let end = (i + piece.len().max(1)).min(text.len()); let mut e = end; while !text.is_char_boundary(e) { e += 1; } text.replace_range(i..e, ""); }
                2 => { let end = (i + 1).min(text.len()); let mut e = end; while !text.is_char_boundary(e) { e += 1; } text.replace_range(i..e, &piece); }
                _ => { let dup = text[i..].chars().take(20).collect::<String>(); text.insert_str(i, &dup); }
            }
        }
        let _ = read(*format, &text, &ReadOptions::default());
    }

    /// The printer's output parses back to an expression with the same value.
    #[test]
    fn classad_printing_preserves_values(seed in any::<u64>()) {
        let text = classad_text(seed, 4);
        if let Ok(e) = parse_expr(&text) {
            let again = parse_expr(&e.to_string()).map_err(|d| TestCaseError::fail(format!("{} from {text}: {d}", e)))?;
            let (a, b) = (eval(&e, Env::new(None, None, 0)), eval(&again, Env::new(None, None, 0)));
            prop_assert!(a == b || a.to_string() == b.to_string(), "{text}: {a} vs {b}");
        }
    }
}

fn corpus() -> Vec<(Format, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut out = Vec::new();
    for f in Format::ALL {
        for kind in ["valid", "invalid"] {
            if let Ok(dir) = std::fs::read_dir(root.join(f.name()).join(kind)) {
                for e in dir.flatten() {
                    if let Ok(t) = std::fs::read_to_string(e.path()) {
                        out.push((f, t));
                    }
                }
            }
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    out
}

/// A small deterministic expression generator for the printer property.
fn classad_text(mut seed: u64, depth: u32) -> String {
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    fn go(next: &mut dyn FnMut(u64) -> u64, depth: u32) -> String {
        const LEAVES: &[&str] = &[
            "1",
            "-3",
            "2.5",
            "\"Ab\"",
            "true",
            "undefined",
            "error",
            "x",
            "{1, 2}",
            "[a = 1].a",
        ];
        const OPS: &[&str] = &["+", "-", "*", "/", "%", "==", "=?=", "<", "&&", "||", "&", "<<", "isnt"];
        if depth == 0 || next(3) == 0 {
            return LEAVES[next(LEAVES.len() as u64) as usize].to_string();
        }
        match next(4) {
            0 => format!("-{}", go(next, depth - 1)),
            1 => format!(
                "({} ? {} : {})",
                go(next, depth - 1),
                go(next, depth - 1),
                go(next, depth - 1)
            ),
            2 => format!("strcat({}, {})", go(next, depth - 1), go(next, depth - 1)),
            _ => format!(
                "{} {} {}",
                go(next, depth - 1),
                OPS[next(OPS.len() as u64) as usize],
                go(next, depth - 1)
            ),
        }
    }
    go(&mut next, depth)
}

/// The number of cases: the default, or `PROPTEST_CASES` for longer runs.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
