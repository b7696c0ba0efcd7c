//! The job: everything a JSDL, xRSL, RSL, JDL, HTCondor or Slurm description can say
//! that a broker needs, in one canonical form.

use serde::{Deserialize, Serialize};

use crate::time::{Duration, Time};

/// One job as Brokk understands it, whatever language it was written in.
///
/// Every field is optional: readers fill what their language says, writers
/// report what their language cannot say. The canonical JSON form is this
/// struct through serde, with empty fields left out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields, default)]
pub struct Job {
    /// Human-readable job name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Program to run (a path on the execution host or a staged file name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    /// Command-line arguments, one string each, unquoted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub arguments: Vec<String>,
    /// An inline script (a Slurm batch script's body with its `#!` line),
    /// run instead of `executable`, with the `arguments`: its `#!` line names
    /// the interpreter, `/bin/sh` without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Environment variables, in the order given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub environment: Vec<EnvVar>,
    /// File the job reads as standard input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// File that receives standard output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// File that receives standard error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Directory the job starts in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_directory: Option<String>,
    /// Files staged in before the job starts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub input_files: Vec<InputFile>,
    /// Files staged out after the job ends.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub output_files: Vec<OutputFile>,
    /// Total number of processors (slots, xRSL `count`, Slurm ntasks x cpus-per-task).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
    /// Processors wanted on each node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_per_node: Option<u32>,
    /// Number of nodes (hosts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// Processors per task, for languages that group processors into tasks (Slurm).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    /// GPUs for the whole job (HTCondor `request_gpus`, Slurm `--gpus`,
    /// `--gres=gpu:N`, `--gpus-per-node`, `--gpus-per-task`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Memory requirement and what it is counted per.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Scratch disk for the whole job, in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_mib: Option<u64>,
    /// Wall-clock limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<Duration>,
    /// CPU-time limit, summed over all processors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_time: Option<Duration>,
    /// Required processor architecture (`x86_64`, `aarch64`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Required operating system (`linux`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operating_system: Option<String>,
    /// Runtime environments / installed software the job needs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtime_environments: Vec<String>,
    /// Queue, partition or share to submit to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Project or account to charge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Advance reservation the job claims.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// The job must not start before this instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earliest_start: Option<Time>,
    /// The job should be finished by this instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Time>,
    /// Submitted held: it waits until released (HTCondor `hold = true`,
    /// Slurm `--hold`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hold: bool,
    /// The container image it runs in (HTCondor's `container_image`, or
    /// `+SingularityImage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_image: Option<String>,
    /// An application the site resolves to its own executable (UNICORE's
    /// and JSDL's `ApplicationName` and `ApplicationVersion`): the job's
    /// program when it names no executable, run with its `arguments`; only
    /// a site that publishes it takes the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<Application>,
    /// The grid resource it names to run on, `TYPE CONTACT` as HTCondor's
    /// grid universe writes it (`arc https://ce.example.org/arex`, `gt5
    /// host/jobmanager-slurm`, `batch slurm`): only a site that fronts it
    /// takes the job ([`crate::Environment::fronts`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid_resource: Option<String>,
    /// Times it may run again after failing (HTCondor `max_retries`, JDL
    /// `RetryCount`, xRSL `rerun`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Its priority among its owner's jobs, higher first (HTCondor
    /// `priority`; Slurm's `--nice` is its negation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Mail about its course (HTCondor `notification` and `notify_user`,
    /// Slurm `--mail-type` and `--mail-user`, xRSL `notify`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
    /// Benchmark triples {name, result, time} for execution-time prediction.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub benchmarks: Vec<Benchmark>,
    /// Requirement expression in ClassAd syntax, kept as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requirements: Option<String>,
    /// Rank expression in ClassAd syntax, kept as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<String>,
    /// Attributes the job carries for the middleware that the model has no
    /// field for (HTCondor's `+Name`, a JDL's own attributes), as written
    /// (ClassAd expressions); written back where the target has a place.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attributes: Vec<Attribute>,
    /// Whether GRAM's standard substitutions (`$(HOME)`,
    /// `$(SCRATCH_DIRECTORY)`, ...) are filled in where the job runs: set by
    /// the GRAM RSL reader, whose language defines them. Elsewhere a `$(`
    /// in a job's strings is the job's own text.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub site_variables: bool,
}

/// An application by name, and version when one is asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Application {
    /// Its name (`BLAST`, `Gaussian`).
    pub name: String,
    /// Its version; any the site has when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl Application {
    /// Whether a site's application published as `NAME` or `NAME/VERSION`
    /// is this one: the same name (any case) and, where a version is asked
    /// for, that version.
    pub fn is(&self, published: &str) -> bool {
        let (name, version) = match published.split_once('/') {
            Some((n, v)) => (n, Some(v)),
            None => (published, None),
        };
        name.trim().eq_ignore_ascii_case(self.name.trim())
            && self
                .version
                .as_deref()
                .is_none_or(|v| version.is_some_and(|pv| pv.trim() == v.trim()))
    }
}

impl std::fmt::Display for Application {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{} {v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Mail about a job: to whom (the submitter's address where not said) and
/// on which events (none: never).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Notify {
    /// The address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<NotifyOn>,
}

/// An event worth a mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum NotifyOn {
    /// It started.
    Begin,
    /// It ended (successfully or not).
    End,
    /// It failed.
    Fail,
}

/// A custom attribute: a name and its value as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Attribute {
    /// Its name, without HTCondor's `+`.
    pub name: String,
    /// Its value, as the description wrote it (a ClassAd expression).
    pub value: String,
}

/// One environment variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// Variable name.
    pub name: String,
    /// Value, unquoted.
    pub value: String,
}

/// A file staged in before the job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    /// Name in the job's working directory.
    pub name: String,
    /// Where it comes from; `None` means uploaded by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// For a file uploaded by the client, where it is on the submitting
    /// machine when that is not `name` beside the description (RSL's
    /// `$(GLOBUSRUN_GASS_URL) # /home/ann/in.dat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
}

/// A file staged out after the job ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OutputFile {
    /// Name in the job's working directory.
    pub name: String,
    /// Where it goes; `None` means kept for the client to fetch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Estimated size in bytes (xRSL `outputfilesizes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_estimate: Option<u64>,
}

impl OutputFile {
    /// A file kept at the site for its owner to fetch.
    pub fn kept(name: String) -> Self {
        OutputFile {
            name,
            target: None,
            size_estimate: None,
        }
    }
}

/// A benchmark triple {b, r, t}: the job takes `time` on a system where benchmark
/// `name` scores `result` ([ET-brokering], 3.1.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Benchmark {
    /// Benchmark name, e.g. `nas-lu-c`.
    pub name: String,
    /// The benchmark's result on the reference system (higher is faster).
    pub result: f64,
    /// The job's execution time on that reference system.
    pub time: Duration,
}

/// A memory requirement: an amount in MiB and what it is counted per.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Amount in MiB.
    pub mib: u64,
    /// What the amount is counted per.
    pub per: MemoryScope,
}

/// What a memory amount is counted per; languages differ and a translation
/// converts only when the processor counts make it exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum MemoryScope {
    /// For the whole job (HTCondor `request_memory`, JSDL `TotalPhysicalMemory`).
    Job,
    /// On each node (Slurm `--mem`, JSDL `IndividualPhysicalMemory`).
    Node,
    /// For each processor (xRSL `memory`, Slurm `--mem-per-cpu`, RSL `maxMemory`).
    Cpu,
}

impl Job {
    /// Memory for the whole job in MiB, when it can be known exactly.
    pub fn memory_total_mib(&self) -> Option<u64> {
        let m = self.memory?;
        match m.per {
            MemoryScope::Job => Some(m.mib),
            MemoryScope::Cpu => m.mib.checked_mul(u64::from(self.cpus.unwrap_or(1))),
            MemoryScope::Node => m.mib.checked_mul(u64::from(self.node_count()?)),
        }
    }

    /// Memory per processor in MiB, when it can be known exactly.
    pub fn memory_per_cpu_mib(&self) -> Option<u64> {
        let m = self.memory?;
        match m.per {
            MemoryScope::Cpu => Some(m.mib),
            MemoryScope::Job => exact_div(m.mib, u64::from(self.cpus.unwrap_or(1))),
            MemoryScope::Node => exact_div(m.mib, u64::from(self.cpus_on_each_node()?)),
        }
    }

    /// Memory per node in MiB, when it can be known exactly.
    pub fn memory_per_node_mib(&self) -> Option<u64> {
        let m = self.memory?;
        match m.per {
            MemoryScope::Node => Some(m.mib),
            MemoryScope::Cpu => m.mib.checked_mul(u64::from(self.cpus_on_each_node()?)),
            MemoryScope::Job => exact_div(m.mib, u64::from(self.node_count()?)),
        }
    }

    /// Number of nodes, given or implied (a job without node or per-node counts runs on one).
    pub fn node_count(&self) -> Option<u32> {
        match (self.nodes, self.cpus_per_node, self.cpus) {
            (Some(n), _, _) => Some(n),
            (None, Some(per), Some(total)) if per > 0 && total % per == 0 => Some(total / per),
            (None, None, _) => Some(1),
            _ => None,
        }
    }

    fn cpus_on_each_node(&self) -> Option<u32> {
        if let Some(per) = self.cpus_per_node {
            return Some(per);
        }
        let total = self.cpus.unwrap_or(1);
        let nodes = self.nodes.unwrap_or(1);
        (nodes > 0 && total.is_multiple_of(nodes)).then(|| total / nodes)
    }

    /// Parses the canonical JSON form (one job object).
    pub fn from_json(text: &str) -> Result<Job, serde_json::Error> {
        serde_json::from_str(text)
    }
}

fn exact_div(a: u64, b: u64) -> Option<u64> {
    (b > 0 && a.is_multiple_of(b)).then(|| a / b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_scopes_convert_only_when_exact() {
        let job = Job {
            cpus: Some(8),
            nodes: Some(2),
            memory: Some(Memory {
                mib: 1000,
                per: MemoryScope::Cpu,
            }),
            ..Job::default()
        };
        assert_eq!(job.memory_total_mib(), Some(8000));
        assert_eq!(job.memory_per_node_mib(), Some(4000));
        let job = Job {
            cpus: Some(3),
            memory: Some(Memory {
                mib: 1000,
                per: MemoryScope::Job,
            }),
            ..Job::default()
        };
        assert_eq!(job.memory_per_cpu_mib(), None);
        assert_eq!(job.memory_per_node_mib(), Some(1000));
    }

    #[test]
    fn canonical_json_leaves_out_empty_fields_and_rejects_unknown_ones() {
        let job = Job {
            name: Some("a".into()),
            wall_time: Some(Duration(60)),
            ..Job::default()
        };
        let text = serde_json::to_string(&job).unwrap();
        assert_eq!(text, r#"{"name":"a","wall_time":60}"#);
        assert_eq!(Job::from_json(&text).unwrap(), job);
        let err = Job::from_json(r#"{"nmae":"a"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `nmae`"), "{err}");
    }
}
