//! Globus RSL as GRAM5 accepts it. Attribute names are case-insensitive and
//! underscores in them are ignored (`max_wall_time` = `maxWallTime`), as in GRAM.

use brokk_model::{EnvVar, InputFile, Job, Memory, MemoryScope, OutputFile};

use crate::diag::Diagnostic;
use crate::rsl_syntax::lower::{self, Vars};
use crate::rsl_syntax::{quote, Relation};
use crate::units::{format_minutes, parse_duration};
use crate::{Dropped, ParseError, Parsed, Written};

/// GRAM5 attributes that concern the job manager, not the job's needs.
const IGNORED: &[&str] = &[
    "resourcemanagercontact",
    "label",
    "filecleanup",
    "filestageinshared",
    "gasscache",
    "librarypath",
    "remoteiourl",
    "scratchdir",
    "twophase",
    "savestate",
    "restart",
    "proxytimeout",
    "dryrun",
    "username",
    "savejobdescription",
    "emailaddress",
    "emailonabort",
    "emailonexecution",
    "emailonsuspend",
    "emailontermination",
    "minmemory",
    "stdoutposition",
    "stderrposition",
    "exclusive",
    "minlocalport",
    "maxlocalport",
];

/// Reads a GRAM5 RSL description, including `+` multi-requests.
pub(crate) fn read(src: &str) -> Result<Parsed, ParseError> {
    lower::read_jobs(src, |rels, warnings| read_job(src, rels, warnings))
}

fn canonical(attr: &str) -> String {
    attr.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

fn read_job(src: &str, rels: &[Relation], warnings: &mut Vec<Diagnostic>) -> Result<Job, ParseError> {
    let mut job = Job::default();
    let mut vars = Vars::default();
    // Substitutions apply wherever they are written, so define them first.
    for rel in rels.iter().filter(|r| canonical(&r.attr) == "rslsubstitution") {
        vars.define(src, rel)?;
    }
    // Every relation is read, so that one pass reports every error.
    crate::each_reported(rels, |rel| {
        match canonical(&rel.attr).as_str() {
            "rslsubstitution" => {}
            "executable" => job.executable = Some(vars.single(src, rel)?),
            "arguments" => job.arguments = vars.list(src, rel)?,
            "directory" => job.working_directory = Some(vars.single(src, rel)?),
            "stdin" => job.stdin = Some(vars.single(src, rel)?),
            "stdout" => job.stdout = Some(vars.single(src, rel)?),
            "stderr" => job.stderr = Some(vars.single(src, rel)?),
            "count" => job.cpus = Some(vars.number(src, rel)?),
            "jobtype" => match vars.single(src, rel)?.to_ascii_lowercase().as_str() {
                "single" | "mpi" => {}
                "multiple" => warnings.push(Diagnostic::warning_at(
                    src,
                    rel.pos,
                    "jobtype = multiple: GRAM starts `count` copies of the executable; \
                     Brokk starts it once with all the processors",
                )),
                other => {
                    return Err(Diagnostic::error_at(
                        src,
                        rel.pos,
                        format!("jobtype `{other}` is not one of single, multiple, mpi"),
                    ))
                }
            },
            "hostcount" => job.nodes = Some(vars.number(src, rel)?),
            "queue" => job.queue = Some(vars.single(src, rel)?),
            "project" => job.project = Some(vars.single(src, rel)?),
            "maxwalltime" | "maxtime" => job.wall_time = Some(minutes(src, rel, &vars)?),
            "maxcputime" => job.cpu_time = Some(minutes(src, rel, &vars)?),
            "maxmemory" => {
                job.memory = Some(Memory {
                    mib: vars.number(src, rel)?,
                    per: MemoryScope::Cpu,
                })
            }
            "environment" => {
                for (name, value) in vars.pairs(src, rel, "(NAME value)")? {
                    job.environment.push(EnvVar { name, value });
                }
            }
            "filestagein" => {
                for (source, name) in vars.pairs(src, rel, "(source_url destination)")? {
                    job.input_files.push(InputFile {
                        name,
                        source: Some(source),
                        size: None,
                        local: None,
                    });
                }
            }
            "filestageout" => {
                for (name, target) in vars.pairs(src, rel, "(source destination_url)")? {
                    job.output_files.push(OutputFile {
                        name,
                        target: Some(target),
                        size_estimate: None,
                    });
                }
            }
            a if IGNORED.contains(&a) => warnings.push(Diagnostic::warning_at(
                src,
                rel.pos,
                format!("`{}` concerns the GRAM job manager, not the job; ignored", rel.attr),
            )),
            _ => warnings.push(Diagnostic::warning_at(
                src,
                rel.pos,
                format!("unknown RSL attribute `{}`; ignored", rel.attr),
            )),
        }
        Ok(())
    })?;
    from_the_submitter(src, &mut job, warnings);
    // RSL defines GRAM's substitutions: the site fills in those the job uses.
    let text = serde_json::to_string(&job).unwrap_or_default();
    job.site_variables = crate::assign::GRAM_VARIABLES
        .iter()
        .any(|v| text.contains(&format!("$({v})")));
    Ok(job)
}

/// The submitting machine's path a value names through globusrun's GASS
/// server (`$(GLOBUSRUN_GASS_URL) # /home/ann/in.dat`), if it does.
fn gass_path(value: &str) -> Option<&str> {
    value
        .strip_prefix(&format!("$({})", lower::GASS_URL))
        .map(str::trim)
        .filter(|p| !p.is_empty())
}

/// The name a submitting machine's `path` has in the job's directory.
fn base_name(path: &str) -> String {
    path.rsplit('/').find(|p| !p.is_empty()).unwrap_or(path).to_string()
}

/// Files on the submitting machine, as globusrun serves them to the job
/// over GASS, become what Brokk's client does with them: those read
/// (executable, stdin, staged in) are uploaded from there at submission,
/// those written (stdout, stderr, staged out) are kept for `brokk get`.
fn from_the_submitter(src: &str, job: &mut Job, warnings: &mut Vec<Diagnostic>) {
    let mut uploads = Vec::new();
    for field in [&mut job.executable, &mut job.stdin] {
        if let Some(path) = field.as_deref().and_then(gass_path).map(str::to_string) {
            *field = Some(base_name(&path));
            uploads.push((base_name(&path), path));
        }
    }
    for f in &mut job.input_files {
        if let Some(path) = f.source.as_deref().and_then(gass_path).map(str::to_string) {
            f.source = None;
            f.local = Some(path);
        }
    }
    for (name, path) in uploads {
        if !job.input_files.iter().any(|f| f.name == name) {
            job.input_files.push(InputFile {
                name,
                source: None,
                size: None,
                local: Some(path),
            });
        }
    }
    let mut kept = Vec::new();
    for field in [&mut job.stdout, &mut job.stderr] {
        if let Some(path) = field.as_deref().and_then(gass_path).map(str::to_string) {
            *field = Some(base_name(&path));
            kept.push(path);
        }
    }
    for f in &mut job.output_files {
        if let Some(path) = f.target.as_deref().and_then(gass_path).map(str::to_string) {
            f.target = None;
            kept.push(path);
        }
    }
    if !kept.is_empty() {
        warnings.push(Diagnostic::warning_at(
            src,
            src.find(lower::GASS_URL).map_or(0, |p| p.saturating_sub(2)),
            format!(
                "{} to the submitting machine through globusrun: kept with the job, `brokk get ID` fetches them",
                kept.join(", ")
            ),
        ));
    }
}

fn minutes(src: &str, rel: &Relation, vars: &Vars) -> Result<brokk_model::Duration, Diagnostic> {
    let s = vars.single(src, rel)?;
    parse_duration(&s, 60).ok_or_else(|| {
        Diagnostic::error_at(
            src,
            rel.values[0].pos(),
            format!("`{}` expects minutes, found `{s}`", rel.attr),
        )
    })
}

/// Writes jobs as RSL; several jobs become a `+` multi-request.
pub(crate) fn write(jobs: &[Job]) -> Written {
    lower::write_jobs(jobs, write_job)
}

fn write_job(job: &Job, dropped: &mut Dropped) -> String {
    let mut out = String::from("&");
    let mut rel = |attr: &str, value: String| out.push_str(&format!("({attr} = {value})\n "));
    if let Some(v) = &job.executable {
        rel("executable", quote(v));
    }
    if !job.arguments.is_empty() {
        rel(
            "arguments",
            job.arguments.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "),
        );
    }
    if let Some(v) = &job.working_directory {
        rel("directory", quote(v));
    }
    for (attr, v) in [("stdin", &job.stdin), ("stdout", &job.stdout), ("stderr", &job.stderr)] {
        if let Some(v) = v {
            rel(attr, quote(v));
        }
    }
    if !job.environment.is_empty() {
        let env: Vec<String> = job
            .environment
            .iter()
            .map(|e| format!("({} {})", quote(&e.name), quote(&e.value)))
            .collect();
        rel("environment", env.join(""));
    }
    if let Some(n) = job.cpus {
        rel("count", n.to_string());
    }
    if let Some(n) = job.nodes {
        rel("hostCount", n.to_string());
    }
    if job.memory.is_some() {
        match job.memory_per_cpu_mib() {
            Some(m) => rel("maxMemory", m.to_string()),
            None => dropped.note("memory: RSL counts maxMemory per process and the processor counts do not divide it"),
        }
    }
    if let Some(d) = job.wall_time {
        rel("maxWallTime", quote(&format_minutes(d)));
    }
    if let Some(d) = job.cpu_time {
        rel("maxCpuTime", quote(&format_minutes(d)));
    }
    if let Some(v) = &job.queue {
        rel("queue", quote(v));
    }
    if let Some(v) = &job.project {
        rel("project", quote(v));
    }
    let stage_in: Vec<String> = job
        .input_files
        .iter()
        .filter_map(|f| match &f.source {
            Some(s) => Some(format!("({} {})", quote(s), quote(&f.name))),
            None => {
                dropped.note(format!("input_files: `{}` has no source URL, which RSL needs", f.name));
                None
            }
        })
        .collect();
    if !stage_in.is_empty() {
        rel("file_stage_in", stage_in.join(""));
    }
    let stage_out: Vec<String> = job
        .output_files
        .iter()
        .filter_map(|f| match &f.target {
            Some(t) => Some(format!("({} {})", quote(&f.name), quote(t))),
            None => {
                dropped.note(format!("output_files: `{}` has no target URL, which RSL needs", f.name));
                None
            }
        })
        .collect();
    if !stage_out.is_empty() {
        rel("file_stage_out", stage_out.join(""));
    }
    dropped.sizes("RSL", job);
    dropped.unsupported(
        "RSL",
        job,
        &[
            "container_image",
            "grid_resource",
            "application",
            "retries",
            "priority",
            "notify",
            "name",
            "script",
            "cpus_per_node",
            "cpus_per_task",
            "gpus",
            "attributes",
            "disk_mib",
            "architecture",
            "operating_system",
            "runtime_environments",
            "reservation",
            "earliest_start",
            "deadline",
            "hold",
            "benchmarks",
            "requirements",
            "rank",
        ],
    );
    out.trim_end().to_string() + "\n"
}
