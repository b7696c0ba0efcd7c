//! Readers and writers for every job description language Brokk speaks, and
//! the ClassAd expression language that JDL and HTCondor requirements use.
//!
//! Every reader turns text into [`Job`]s plus warnings, or fails with
//! [`Diagnostic`]s that carry a line and column; no input makes a reader panic.
//! Every writer turns jobs into text and lists what the target language could
//! not express.
//!
//! Architecture invariant: this crate does no IO except where a description
//! names a file to read (`queue ... from FILE`), and then only through
//! [`ReadOptions::base_dir`].

pub mod assign;
pub mod classad;
mod condor;
mod detect;
mod diag;
mod header;
mod jdl;
mod jsdl;
mod json;
pub mod program;
mod requirements;
mod rsl;
mod rsl_syntax;
mod shellwords;
mod slurm;
pub use slurm::sbatch_arguments;
mod units;
pub mod workflow;
mod xrsl;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use brokk_model::Job;
use serde::Serialize;

pub use detect::detect;
pub use diag::{line_col, render_all, Diagnostic, Severity};

/// One xRSL relation, `(attribute="value" ...)`, for what a site adds to a
/// written description that the job model does not hold (a runtime
/// environment's arguments, say).
pub fn xrsl_relation(attribute: &str, values: &[&str]) -> String {
    let values: Vec<String> = values.iter().map(|v| rsl_syntax::quote(v)).collect();
    format!("({attribute}={})", values.join(" "))
}

/// A job description language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// OGF JSDL 1.0 with the POSIX and HPC Profile application extensions.
    Jsdl,
    /// NorduGrid ARC extended RSL.
    Xrsl,
    /// Globus RSL as GRAM5 accepts it.
    Rsl,
    /// gLite / LCG-2 JDL in ClassAd syntax.
    Jdl,
    /// HTCondor submit description file.
    Condor,
    /// Slurm batch script with `#SBATCH` options.
    Slurm,
    /// Brokk's canonical JSON (one job object or an array of them).
    Json,
}

impl Format {
    /// Every format, in the order the CLI lists them.
    pub const ALL: [Format; 7] = [
        Format::Jsdl,
        Format::Xrsl,
        Format::Rsl,
        Format::Jdl,
        Format::Condor,
        Format::Slurm,
        Format::Json,
    ];

    /// The short name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Jsdl => "jsdl",
            Format::Xrsl => "xrsl",
            Format::Rsl => "rsl",
            Format::Jdl => "jdl",
            Format::Condor => "condor",
            Format::Slurm => "slurm",
            Format::Json => "json",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A format name that Brokk does not know.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown format `{0}` (expected one of jsdl, xrsl, rsl, jdl, condor, slurm, json)")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "jsdl" | "xml" => Format::Jsdl,
            "xrsl" | "arc" => Format::Xrsl,
            "rsl" | "globus" | "gram" => Format::Rsl,
            "jdl" | "glite" | "classad" => Format::Jdl,
            "condor" | "htcondor" | "sub" | "submit" => Format::Condor,
            "slurm" | "sbatch" | "sh" => Format::Slurm,
            "json" => Format::Json,
            _ => return Err(UnknownFormat(s.to_string())),
        })
    }
}

/// Options for readers.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// Directory that relative file names inside a description resolve against
    /// (HTCondor `queue ... from FILE`); `None` forbids reading files.
    pub base_dir: Option<PathBuf>,
}

/// What a reader produced: one or more jobs and any warnings.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The jobs, in the order the description gives them.
    pub jobs: Vec<Job>,
    /// Things that were read but ignored or guessed.
    pub warnings: Vec<Diagnostic>,
    /// The jobs must start together, a co-allocation of them (a Slurm
    /// heterogeneous job's components).
    pub together: bool,
}

/// A description that could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}", .diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("; "))]
pub struct ParseError {
    /// At least one error, with its position.
    pub diagnostics: Vec<Diagnostic>,
}

impl From<Diagnostic> for ParseError {
    fn from(d: Diagnostic) -> Self {
        ParseError { diagnostics: vec![d] }
    }
}

/// What a writer produced: the text and what the language could not express.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The description in the target language.
    pub text: String,
    /// One line per dropped or approximated attribute.
    pub dropped: Vec<String>,
}

/// Jobs that a writer cannot put into one document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// The language holds one job per document.
    #[error("{format} holds one job per document, and this description has {count}")]
    OneJobOnly {
        /// Target format.
        format: Format,
        /// Number of jobs given.
        count: usize,
    },
    /// There was nothing to write.
    #[error("no job to write")]
    Empty,
    /// A job names no program and no script: written, it would run nothing.
    #[error("job {} has nothing to run: it names no executable and no script", index + 1)]
    NothingToRun {
        /// The job's place among those given, from 0.
        index: usize,
    },
}

/// Reads a description in `format`.
pub fn read(format: Format, text: &str, opts: &ReadOptions) -> Result<Parsed, ParseError> {
    let _lines = diag::indexed(text);
    let mut parsed = read_only(format, text, opts)?;
    // A script's own #SBATCH header is the job's too (see `header`).
    match header::absorb(text, &mut parsed.jobs) {
        Ok(warnings) => parsed.warnings.extend(warnings),
        Err(diagnostics) => return Err(ParseError { diagnostics }),
    }
    Ok(parsed)
}

/// Reads `jobs` as they arrive at a site, whatever language they came in:
/// a script's own `#SBATCH` header is read into its job, as [`read`] does;
/// the errors that refuse them otherwise.
pub fn absorb_script_headers(jobs: &mut [Job]) -> Result<(), ParseError> {
    header::absorb("", jobs)
        .map(drop)
        .map_err(|diagnostics| ParseError { diagnostics })
}

fn read_only(format: Format, text: &str, opts: &ReadOptions) -> Result<Parsed, ParseError> {
    match format {
        Format::Jsdl => jsdl::read(text),
        Format::Xrsl => xrsl::read(text),
        Format::Rsl => rsl::read(text),
        Format::Jdl => jdl::read(text),
        Format::Condor => condor::read(text, opts),
        Format::Slurm => slurm::read(text),
        Format::Json => json::read(text),
    }
}

/// Writes `jobs` in `format`. Every job keeps its program: a script becomes
/// a program where the language has no place for one (see [`program`]), and
/// a job with nothing to run is refused.
pub fn write(format: Format, jobs: &[Job]) -> Result<Written, WriteError> {
    if jobs.is_empty() {
        return Err(WriteError::Empty);
    }
    let mut notes = Vec::new();
    let mut carried = Vec::with_capacity(jobs.len());
    for (index, job) in jobs.iter().enumerate() {
        let (job, how) = program::carried(format, job, index)?;
        notes.extend(how);
        let mut job = job.into_owned();
        notes.extend(assign::translate_patterns(format, &mut job));
        carried.push(job);
    }
    // The tasks of an array go in the language's own array form where it
    // has one and they are one.
    let array = match format {
        Format::Condor => slurm::array_form(&carried),
        // `_PARAM_` in a value of theirs would be read back as the index.
        Format::Jdl => {
            slurm::array_form(&carried).filter(|(t, _)| !serde_json::to_string(t).is_ok_and(|t| t.contains("_PARAM_")))
        }
        _ => None,
    };
    let jobs = carried.as_slice();
    let single = |f: fn(&Job) -> Written| {
        if jobs.len() == 1 {
            Ok(f(&jobs[0]))
        } else {
            Err(WriteError::OneJobOnly {
                format,
                count: jobs.len(),
            })
        }
    };
    let mut written = match format {
        Format::Jsdl => single(jsdl::write),
        Format::Xrsl => Ok(xrsl::write(jobs)),
        Format::Rsl => Ok(rsl::write(jobs)),
        // An array's tasks in the language's own array form where they are one.
        Format::Jdl => Ok(array.map_or_else(|| jdl::write(jobs), |(t, i)| jdl::write_array(&t, &i))),
        Format::Condor => Ok(array.map_or_else(|| condor::write(jobs), |(t, i)| condor::write_array(&t, &i))),
        // An array's tasks are one batch script with `--array`.
        Format::Slurm if jobs.len() > 1 => slurm::write_array(jobs).ok_or(WriteError::OneJobOnly {
            format,
            count: jobs.len(),
        }),
        Format::Slurm => single(slurm::write),
        Format::Json => Ok(json::write(jobs)),
    }?;
    for n in notes {
        if !written.dropped.contains(&n) {
            written.dropped.push(n);
        }
    }
    Ok(written)
}

/// Runs `f` on every item and returns all their errors together: readers go
/// on past an error, so that one pass reports every one.
pub(crate) fn each_reported<T>(
    items: impl IntoIterator<Item = T>,
    mut f: impl FnMut(T) -> Result<(), Diagnostic>,
) -> Result<(), ParseError> {
    let diagnostics: Vec<Diagnostic> = items.into_iter().filter_map(|item| f(item).err()).collect();
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(ParseError { diagnostics })
    }
}

/// Collects what a writer drops, so each writer only says what and why.
#[derive(Debug, Default)]
pub(crate) struct Dropped(Vec<String>);

impl Dropped {
    pub fn note(&mut self, what: impl Into<String>) {
        let s = what.into();
        if !self.0.contains(&s) {
            self.0.push(s);
        }
    }

    /// Notes each named field that is set on `job` but that the writer cannot say.
    pub fn unsupported(&mut self, format: &str, job: &Job, fields: &[&str]) {
        for &f in fields {
            if field_is_set(job, f) {
                self.note(format!("{f}: {format} cannot express it"));
            }
        }
    }

    /// Notes that file sizes are lost, when the job has any.
    pub fn sizes(&mut self, format: &str, job: &Job) {
        if job.input_files.iter().any(|f| f.size.is_some())
            || job.output_files.iter().any(|f| f.size_estimate.is_some())
        {
            self.note(format!("file sizes: {format} cannot express them"));
        }
    }

    pub fn finish(self, text: String) -> Written {
        Written { text, dropped: self.0 }
    }
}

/// An input-sandbox entry (JDL `InputSandbox`, HTCondor `transfer_input_files`): a
/// URL (or a DIRAC `LFN:` catalogue name) is fetched from there under its last
/// path segment, a plain path is uploaded by the client under that path.
pub(crate) fn sandbox_input(entry: &str) -> brokk_model::InputFile {
    // By bytes: the entry may start with a character wider than one.
    let lfn = entry.len() > 4 && entry.as_bytes()[..4].eq_ignore_ascii_case(b"lfn:");
    let source = (entry.contains("://") || lfn).then(|| entry.to_string());
    let name = match &source {
        Some(url) => url.trim_end_matches('/').rsplit('/').next().unwrap_or(url).to_string(),
        None => entry.to_string(),
    };
    brokk_model::InputFile {
        name,
        source,
        size: None,
        local: None,
    }
}

fn field_is_set(job: &Job, field: &str) -> bool {
    match field {
        "name" => job.name.is_some(),
        "executable" => job.executable.is_some(),
        "arguments" => !job.arguments.is_empty(),
        "script" => job.script.is_some(),
        "environment" => !job.environment.is_empty(),
        "stdin" => job.stdin.is_some(),
        "stdout" => job.stdout.is_some(),
        "stderr" => job.stderr.is_some(),
        "working_directory" => job.working_directory.is_some(),
        "input_files" => !job.input_files.is_empty(),
        "output_files" => !job.output_files.is_empty(),
        "cpus" => job.cpus.is_some(),
        "cpus_per_node" => job.cpus_per_node.is_some(),
        "nodes" => job.nodes.is_some(),
        "cpus_per_task" => job.cpus_per_task.is_some(),
        "gpus" => job.gpus.is_some(),
        "memory" => job.memory.is_some(),
        "disk_mib" => job.disk_mib.is_some(),
        "wall_time" => job.wall_time.is_some(),
        "cpu_time" => job.cpu_time.is_some(),
        "architecture" => job.architecture.is_some(),
        "operating_system" => job.operating_system.is_some(),
        "runtime_environments" => !job.runtime_environments.is_empty(),
        "queue" => job.queue.is_some(),
        "project" => job.project.is_some(),
        "reservation" => job.reservation.is_some(),
        "earliest_start" => job.earliest_start.is_some(),
        "deadline" => job.deadline.is_some(),
        "hold" => job.hold,
        "retries" => job.retries.is_some(),
        "container_image" => job.container_image.is_some(),
        "grid_resource" => job.grid_resource.is_some(),
        "application" => job.application.is_some(),
        "priority" => job.priority.is_some(),
        "notify" => job.notify.is_some(),
        "benchmarks" => !job.benchmarks.is_empty(),
        "requirements" => job.requirements.is_some(),
        "rank" => job.rank.is_some(),
        "attributes" => !job.attributes.is_empty(),
        _ => false,
    }
}
