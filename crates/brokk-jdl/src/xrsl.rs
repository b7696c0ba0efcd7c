//! NorduGrid ARC xRSL: the attributes of the ARC manual that map to the model,
//! plus [ET-brokering]'s `benchmarks` and `outputfilesizes`.

use brokk_model::{Benchmark, EnvVar, InputFile, Job, Memory, MemoryScope, Notify, NotifyOn, OutputFile, Time};

use crate::diag::Diagnostic;
use crate::rsl_syntax::lower::{self, seq, Vars};
use crate::rsl_syntax::{quote, Op, Relation};
use crate::units::{format_size, format_with_unit, parse_duration, parse_size};
use crate::{Dropped, ParseError, Parsed, Written};

/// Attributes ARC knows that say nothing a broker's model needs; read and ignored with a warning.
const IGNORED: &[&str] = &[
    "executables",
    "cache",
    "lifetime",
    "gridtime",
    "middleware",
    "gmlog",
    "ftpthreads",
    "acl",
    "cluster",
    "replicacollection",
    "nodeaccess",
    "dryrun",
    "credentialserver",
    "jobreport",
    "priority",
    "exclusiveexecution",
    "action",
    "savestate",
    "jobid",
    "hostname",
    "clientxrsl",
    "clientsoftware",
    "sessiondirectory",
    "localtimezone",
    "loglevel",
    "migrateactivityidentifier",
];

/// ARC's runtime environment that runs the job in the container image its
/// first argument names (`(runtimeenvironment="ENV/SINGULARITY" "IMAGE")`).
const CONTAINER_RTE: &str = "ENV/SINGULARITY";

/// Reads an xRSL description (one job, or several joined by `+`).
pub(crate) fn read(src: &str) -> Result<Parsed, ParseError> {
    lower::read_jobs(src, |rels, warnings| read_job(src, rels, warnings))
}

fn read_job(src: &str, rels: &[Relation], warnings: &mut Vec<Diagnostic>) -> Result<Job, ParseError> {
    let mut job = Job::default();
    let mut vars = Vars::default();
    // Substitutions apply wherever they are written, so define them first.
    for rel in rels.iter().filter(|r| r.attr.eq_ignore_ascii_case("rsl_substitution")) {
        vars.define(src, rel)?;
    }
    let mut join = false;
    let mut sizes: Vec<(String, u64, usize)> = Vec::new();
    // Every relation is read, so that one pass reports every error.
    crate::each_reported(rels, |rel| {
        let attr = rel.attr.to_ascii_lowercase();
        match attr.as_str() {
            "rsl_substitution" => {}
            "executable" => job.executable = Some(vars.single(src, rel)?),
            "arguments" => job.arguments = vars.list(src, rel)?,
            "stdin" => job.stdin = Some(vars.single(src, rel)?),
            "stdout" => job.stdout = Some(vars.single(src, rel)?),
            "stderr" => job.stderr = Some(vars.single(src, rel)?),
            "join" => join = yes_no(src, rel, &vars)?,
            "jobname" => job.name = Some(vars.single(src, rel)?),
            "rerun" => job.retries = Some(vars.number(src, rel)?),
            "notify" => {
                let mut n = Notify::default();
                for item in vars.list(src, rel)? {
                    let mut words = item.split_whitespace();
                    let flags = words.next().unwrap_or("");
                    if !flags.chars().all(|c| "bqfedc".contains(c)) {
                        return Err(Diagnostic::error_at(
                            src,
                            rel.pos,
                            format!(
                                "notify: `{item}` should start with flags from b, q, f, e, d, c and then an address"
                            ),
                        ));
                    }
                    for f in flags.chars() {
                        match f {
                            'b' => n.on.push(NotifyOn::Begin),
                            'e' => n.on.push(NotifyOn::End),
                            _ => {}
                        }
                    }
                    if let Some(to) = words.next() {
                        n.to.get_or_insert_with(|| to.to_string());
                    }
                }
                n.on.sort();
                n.on.dedup();
                job.notify = Some(n);
            }
            "queue" => job.queue = Some(vars.single(src, rel)?),
            "architecture" => job.architecture = Some(vars.single(src, rel)?),
            "opsys" => job.operating_system = Some(vars.single(src, rel)?),
            "count" => job.cpus = Some(vars.number(src, rel)?),
            "countpernode" => job.cpus_per_node = Some(vars.number(src, rel)?),
            "memory" => {
                job.memory = Some(Memory {
                    mib: vars.number(src, rel)?,
                    per: MemoryScope::Cpu,
                })
            }
            "disk" => job.disk_mib = Some(vars.number(src, rel)?),
            "walltime" => job.wall_time = Some(duration(src, rel, &vars)?),
            "cputime" => job.cpu_time = Some(duration(src, rel, &vars)?),
            "starttime" => job.earliest_start = Some(time(src, rel, &vars)?),
            "runtimeenvironment" => {
                if rel.op != Op::Eq {
                    warnings.push(Diagnostic::warning_at(
                        src,
                        rel.pos,
                        "version comparison on runtimeenvironment is kept as the plain name",
                    ));
                }
                // ARC passes the values after the name to the runtime
                // environment as its arguments (a site's choice, such as a
                // reservation); the job model keeps the name only.
                if let Some((name, args)) = rel.values.split_first() {
                    let name = vars.text(src, name)?;
                    // ARC's container runtime environment names the image
                    // first (then an executable of its own, which a site
                    // chooses here): the image is the job's requirement.
                    if name.eq_ignore_ascii_case(CONTAINER_RTE) && !args.is_empty() {
                        job.container_image = Some(vars.text(src, &args[0])?);
                        if args[1..]
                            .iter()
                            .any(|a| !matches!(vars.text(src, a).as_deref(), Ok("")))
                        {
                            warnings.push(Diagnostic::warning_at(
                                src,
                                rel.pos,
                                "the container runtime environment's arguments after the image are not kept; the site \
                                 chooses its own runtime",
                            ));
                        }
                    } else {
                        job.runtime_environments.push(name);
                        if !args.is_empty() {
                            warnings.push(Diagnostic::warning_at(
                                src,
                                rel.pos,
                                "the runtime environment's arguments are not kept (only its name)",
                            ));
                        }
                    }
                }
            }
            "environment" => {
                for (name, value) in vars.pairs(src, rel, "(NAME value)")? {
                    job.environment.push(EnvVar { name, value });
                }
            }
            "inputfiles" => {
                for v in &rel.values {
                    let f = seq(src, v, 1, 4, "(name source [size] [checksum])")?;
                    let name = vars.text(src, &f[0])?;
                    let source = match f.get(1) {
                        Some(s) => Some(vars.text(src, s)?).filter(|s| !s.is_empty()),
                        None => None,
                    };
                    let size = match f.get(2) {
                        Some(s) => Some(size_value(src, s, &vars)?),
                        None => None,
                    };
                    job.input_files.push(InputFile {
                        name,
                        source,
                        size,
                        local: None,
                    });
                }
            }
            "outputfiles" => {
                for v in &rel.values {
                    let f = seq(src, v, 1, 2, "(name target)")?;
                    let name = vars.text(src, &f[0])?;
                    let target = match f.get(1) {
                        Some(s) => Some(vars.text(src, s)?).filter(|s| !s.is_empty()),
                        None => None,
                    };
                    job.output_files.push(OutputFile {
                        name,
                        target,
                        size_estimate: None,
                    });
                }
            }
            "outputfilesizes" => {
                for v in &rel.values {
                    let f = seq(src, v, 2, 2, "(name size)")?;
                    sizes.push((vars.text(src, &f[0])?, size_value(src, &f[1], &vars)?, f[0].pos()));
                }
            }
            "benchmarks" => {
                for v in &rel.values {
                    job.benchmarks.push(benchmark(src, v, &vars)?);
                }
            }
            a if IGNORED.contains(&a) => warnings.push(Diagnostic::warning_at(
                src,
                rel.pos,
                format!("`{}` has no meaning for Brokk's model; ignored", rel.attr),
            )),
            _ => warnings.push(Diagnostic::warning_at(
                src,
                rel.pos,
                format!("unknown xRSL attribute `{}`; ignored", rel.attr),
            )),
        }
        Ok(())
    })?;
    if join && job.stderr.is_none() {
        job.stderr = job.stdout.clone();
    }
    for (name, size, pos) in sizes {
        match job.output_files.iter_mut().find(|f| f.name == name) {
            Some(f) => f.size_estimate = Some(size),
            None => {
                return Err(Diagnostic::error_at(
                    src,
                    pos,
                    format!("outputfilesizes names `{name}`, which is not in outputfiles"),
                )
                .into())
            }
        }
    }
    Ok(job)
}

fn yes_no(src: &str, rel: &Relation, vars: &Vars) -> Result<bool, Diagnostic> {
    match vars.single(src, rel)?.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        other => Err(Diagnostic::error_at(
            src,
            rel.values[0].pos(),
            format!("expected yes or no, found `{other}`"),
        )),
    }
}

fn duration(src: &str, rel: &Relation, vars: &Vars) -> Result<brokk_model::Duration, Diagnostic> {
    let s = vars.single(src, rel)?;
    parse_duration(&s, 60).ok_or_else(|| {
        Diagnostic::error_at(
            src,
            rel.values[0].pos(),
            format!("expected a time in minutes or with units (e.g. `90` or `2 hours`), found `{s}`"),
        )
    })
}

fn time(src: &str, rel: &Relation, vars: &Vars) -> Result<Time, Diagnostic> {
    let s = vars.single(src, rel)?;
    Time::parse(&s).map_err(|e| Diagnostic::error_at(src, rel.values[0].pos(), e.to_string()))
}

fn size_value(src: &str, v: &crate::rsl_syntax::Value, vars: &Vars) -> Result<u64, Diagnostic> {
    let s = vars.text(src, v)?;
    parse_size(&s).ok_or_else(|| {
        Diagnostic::error_at(
            src,
            v.pos(),
            format!("expected a size in bytes or with kB, MB, GB, found `{s}`"),
        )
    })
}

/// `(name result:minutes)` as in [ET-brokering]'s Figure 3, or `(name result minutes)`.
fn benchmark(src: &str, v: &crate::rsl_syntax::Value, vars: &Vars) -> Result<Benchmark, Diagnostic> {
    let f = seq(src, v, 2, 3, "(name result:time)")?;
    let name = vars.text(src, &f[0])?;
    let (result, time, pos) = if f.len() == 3 {
        (vars.text(src, &f[1])?, vars.text(src, &f[2])?, f[1].pos())
    } else {
        let joined = vars.text(src, &f[1])?;
        match joined.split_once(':') {
            Some((r, t)) => (r.to_string(), t.to_string(), f[1].pos()),
            None => {
                return Err(Diagnostic::error_at(
                    src,
                    f[1].pos(),
                    format!("expected `result:time` (e.g. `250:65`), found `{joined}`"),
                ))
            }
        }
    };
    let result: f64 = result
        .trim()
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite() && *r > 0.0)
        .ok_or_else(|| {
            Diagnostic::error_at(
                src,
                pos,
                format!("benchmark result must be a positive number, found `{result}`"),
            )
        })?;
    let time = parse_duration(&time, 60)
        .ok_or_else(|| Diagnostic::error_at(src, pos, format!("benchmark time must be minutes, found `{time}`")))?;
    Ok(Benchmark { name, result, time })
}

/// Writes jobs as xRSL; several jobs become a `+` multi-request.
pub(crate) fn write(jobs: &[Job]) -> Written {
    lower::write_jobs(jobs, write_job)
}

fn write_job(job: &Job, dropped: &mut Dropped) -> String {
    let mut out = String::from("&");
    let mut rel = |attr: &str, value: String| {
        out.push_str(&format!("({attr} = {value})\n "));
    };
    if let Some(v) = &job.name {
        rel("jobname", quote(v));
    }
    if let Some(v) = &job.executable {
        rel("executable", quote(v));
    }
    if !job.arguments.is_empty() {
        rel(
            "arguments",
            job.arguments.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "),
        );
    }
    for (attr, v) in [("stdin", &job.stdin), ("stdout", &job.stdout), ("stderr", &job.stderr)] {
        if let Some(v) = v {
            rel(attr, quote(v));
        }
    }
    if !job.environment.is_empty() {
        rel(
            "environment",
            job.environment
                .iter()
                .map(|e| format!("({} {})", quote(&e.name), quote(&e.value)))
                .collect::<Vec<_>>()
                .join(""),
        );
    }
    if !job.input_files.is_empty() {
        let files: Vec<String> = job
            .input_files
            .iter()
            .map(|f| {
                let mut s = format!("({} {}", quote(&f.name), quote(f.source.as_deref().unwrap_or("")));
                if let Some(size) = f.size {
                    s.push_str(&format!(" {size}"));
                }
                s + ")"
            })
            .collect();
        rel("inputfiles", files.join(""));
    }
    if !job.output_files.is_empty() {
        let files: Vec<String> = job
            .output_files
            .iter()
            .map(|f| format!("({} {})", quote(&f.name), quote(f.target.as_deref().unwrap_or(""))))
            .collect();
        rel("outputfiles", files.join(""));
        let sizes: Vec<String> = job
            .output_files
            .iter()
            .filter_map(|f| Some(format!("({} {})", quote(&f.name), format_size(f.size_estimate?))))
            .collect();
        if !sizes.is_empty() {
            rel("outputfilesizes", sizes.join(""));
        }
    }
    if let Some(n) = job.cpus {
        rel("count", n.to_string());
    }
    if let Some(n) = job.cpus_per_node {
        rel("countpernode", n.to_string());
    }
    if job.memory.is_some() {
        match job.memory_per_cpu_mib() {
            Some(m) => rel("memory", m.to_string()),
            None => dropped.note("memory: xRSL counts memory per process and the processor counts do not divide it"),
        }
    }
    if let Some(d) = job.disk_mib {
        rel("disk", d.to_string());
    }
    if let Some(d) = job.wall_time {
        rel("walltime", quote(&format_with_unit(d)));
    }
    if let Some(d) = job.cpu_time {
        rel("cputime", quote(&format_with_unit(d)));
    }
    if let Some(t) = job.earliest_start {
        rel("starttime", quote(&t.to_string()));
    }
    if let Some(v) = &job.architecture {
        rel("architecture", quote(v));
    }
    if let Some(v) = &job.operating_system {
        rel("opsys", quote(v));
    }
    for r in &job.runtime_environments {
        rel("runtimeenvironment", quote(r));
    }
    if let Some(image) = &job.container_image {
        rel(
            "runtimeenvironment",
            format!("{} {}", quote(CONTAINER_RTE), quote(image)),
        );
    }
    if let Some(v) = &job.queue {
        rel("queue", quote(v));
    }
    if let Some(n) = job.retries {
        rel("rerun", n.to_string());
    }
    if let Some(n) = &job.notify {
        let mut flags = String::new();
        if n.on.contains(&NotifyOn::Begin) {
            flags.push('b');
        }
        // ARC mails when a job ends, whether it failed or not.
        if n.on.contains(&NotifyOn::End) || n.on.contains(&NotifyOn::Fail) {
            flags.push('e');
        }
        match (&n.to, flags.is_empty()) {
            (Some(to), false) => rel("notify", quote(&format!("{flags} {to}"))),
            (None, false) => dropped.note("notify: xRSL needs the address to mail"),
            _ => {}
        }
        if n.on == [NotifyOn::Fail] {
            dropped.note("notify: xRSL mails on every end, not on failure alone");
        }
    }
    if !job.benchmarks.is_empty() {
        let b: Vec<String> = job
            .benchmarks
            .iter()
            .map(|b| {
                if b.time.0 % 60 != 0 {
                    dropped.note(format!("benchmarks: time of `{}` rounded up to whole minutes", b.name));
                }
                format!("({} {}:{})", quote(&b.name), b.result, (b.time.0 + 59).div_euclid(60))
            })
            .collect();
        rel("benchmarks", b.join(""));
    }
    dropped.unsupported(
        "xRSL",
        job,
        &[
            "grid_resource",
            "application",
            "priority",
            "script",
            "working_directory",
            "nodes",
            "cpus_per_task",
            "gpus",
            "attributes",
            "project",
            "reservation",
            "deadline",
            "hold",
            "requirements",
            "rank",
        ],
    );
    out.trim_end().to_string() + "\n"
}
