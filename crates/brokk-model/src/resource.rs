//! What a broker knows about a computing resource: a subset of GLUE 2.0
//! (computing service, shares, execution environment, benchmarks, load), the
//! form every information source is converted into before brokering.

use serde::{Deserialize, Serialize};

use crate::time::Duration;

/// One computing resource (a GLUE 2 ComputingService with its manager).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct ResourceInfo {
    /// Endpoint the broker reaches the resource at; unique per resource.
    pub endpoint: String,
    /// Human-readable name.
    pub name: String,
    /// Queues (GLUE 2 ComputingShares).
    pub shares: Vec<Share>,
    /// What the jobs run on (GLUE 2 ExecutionEnvironment).
    pub environment: Environment,
    /// Benchmark results the resource publishes.
    pub benchmarks: Vec<PublishedBenchmark>,
    /// Processor slots in total, free now and in use.
    pub total_slots: u32,
    /// Slots free now.
    pub free_slots: u32,
    /// Slots in use.
    pub used_slots: u32,
    /// Jobs running.
    pub running_jobs: u32,
    /// Jobs waiting in the local queue.
    pub waiting_jobs: u32,
    /// The resource's own estimate of how long a new job waits, when it publishes one.
    pub estimated_wait: Option<Duration>,
    /// Measured or predicted bandwidth between the broker's data sources and the resource, bytes per second.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Whether the resource accepts advance reservations.
    pub reservations: bool,
    /// Projects / virtual organisations allowed to use it (GLUE 2 access policy);
    /// empty means open to all.
    pub access: Vec<String>,
    /// Its own word on its health, where it publishes one (GLUE 2
    /// `HealthState`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<String>,
    /// How many reservations it can no longer hold, part of it being lost
    /// (a node down or drained): a broker holding some asks which are its
    /// own and moves them ([VRM] 6).
    #[serde(skip_serializing_if = "is_zero")]
    pub endangered_reservations: u32,
    /// The delay its middleware adds before a job starts, and again before
    /// the job's end is known (an ARC CE's state cycle).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag: Option<Duration>,
    /// Its free capacity over time, where it publishes that ([AB-avail]):
    /// a job's wait is then read for the job's own shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability: Option<crate::Availability>,
    /// When it is a broker with a parent ([DMM]): its chain of parents as
    /// it last read them, nearest first, so a broker reading its own
    /// parent sees where that chain leads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A queue / share of the resource.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Share {
    /// Queue name as jobs name it.
    pub name: String,
    /// Longest wall time the queue allows.
    pub max_wall_time: Option<Duration>,
    /// Most processors one job may use.
    pub max_slots_per_job: Option<u32>,
}

/// The hardware and software jobs run on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Environment {
    /// Processor architecture (`x86_64`, ...).
    pub architecture: Option<String>,
    /// Operating system (`linux`, ...).
    pub operating_system: Option<String>,
    /// Processors per node.
    pub cpus_per_node: Option<u32>,
    /// Memory per node in MiB.
    pub memory_mib_per_node: Option<u64>,
    /// Installed runtime environments / software (GLUE 2
    /// `ApplicationEnvironment`).
    pub runtime_environments: Vec<String>,
    /// The URL schemes the site stages inputs from and outputs to (GLUE 2
    /// data staging capabilities: `file`, `http`, `https`, ...); empty when
    /// the site publishes none, read as [`Environment::STAGING`].
    pub staging: Vec<String>,
    /// The container runtimes jobs may run in (`podman`, `apptainer`);
    /// empty: none.
    pub containers: Vec<String>,
    /// The container images it holds (`REGISTRY/REPOSITORY:TAG`, as
    /// [`image_name`] writes them) and the registries it pulls from
    /// (`REGISTRY/*`).
    pub images: Vec<String>,
    /// GPUs per node; `None`: none.
    pub gpus_per_node: Option<u32>,
    /// The applications it resolves to its own executables, `NAME` or
    /// `NAME/VERSION` (GLUE 2's `ApplicationEnvironment` with its
    /// `AppName` and `AppVersion`; UNICORE's application database).
    pub applications: Vec<String>,
    /// The grid endpoints it fronts, each `TYPE CONTACT` as HTCondor's
    /// `grid_resource` names one (`arc https://ce.example.org/arex`, `gt5
    /// host:2119/jobmanager-fork`, `batch slurm`); GLUE 2's
    /// `ComputingEndpoint`s.
    pub endpoints: Vec<String>,
}

impl Environment {
    /// What every Brokk site stages, and so what a site that publishes no
    /// list is taken to stage.
    pub const STAGING: [&'static str; 3] = ["file", "http", "https"];

    /// Whether the site stages URLs of `scheme` (any case).
    pub fn stages(&self, scheme: &str) -> bool {
        match self.staging.is_empty() {
            true => Self::STAGING.iter().any(|s| s.eq_ignore_ascii_case(scheme)),
            false => self.staging.iter().any(|s| s.eq_ignore_ascii_case(scheme)),
        }
    }

    /// The schemes it stages, as [`Environment::stages`] reads them.
    pub fn staged(&self) -> Vec<String> {
        match self.staging.is_empty() {
            true => Self::STAGING.iter().map(|s| s.to_string()).collect(),
            false => self.staging.clone(),
        }
    }

    /// Whether it fronts `grid_resource` (`TYPE CONTACT`): one of its
    /// endpoints is of the same kind (ARC's `arc` and `nordugrid` alike,
    /// GRAM's `gt2`, `gt5` and `gram` alike) and names the same host, any
    /// port (for `batch`, the same batch system).
    pub fn fronts(&self, grid_resource: &str) -> bool {
        let wanted = GridResource::parse(grid_resource);
        self.endpoints
            .iter()
            .any(|e| wanted.is_some() && GridResource::parse(e) == wanted)
    }

    /// Whether it holds the container image `reference`, or pulls it from
    /// a registry it names.
    pub fn holds_image(&self, reference: &str) -> bool {
        image_held(&self.images, reference)
    }

    /// What several sites can do between them, as a broker above sees
    /// them folded into one: every scheme, runtime, environment and the
    /// most GPUs any has (each job still goes to one of them that can).
    pub fn union<'a>(all: impl IntoIterator<Item = &'a Environment>) -> Environment {
        let mut out = Environment::default();
        let add = |into: &mut Vec<String>, from: &[String]| {
            for x in from {
                if !into.iter().any(|y| y.eq_ignore_ascii_case(x)) {
                    into.push(x.clone());
                }
            }
        };
        for e in all {
            add(&mut out.runtime_environments, &e.runtime_environments);
            add(&mut out.staging, &e.staged());
            add(&mut out.containers, &e.containers);
            add(&mut out.images, &e.images);
            add(&mut out.endpoints, &e.endpoints);
            add(&mut out.applications, &e.applications);
            out.gpus_per_node = out.gpus_per_node.max(e.gpus_per_node);
        }
        out
    }
}

/// Whether `images` (references and `REGISTRY/*` patterns, as
/// [`Environment::images`] lists them) hold the image `reference`.
pub fn image_held(images: &[String], reference: &str) -> bool {
    let wanted = image_name(reference);
    images.iter().any(|held| match held.strip_suffix("/*") {
        Some(registry) => wanted.strip_prefix(registry).is_some_and(|rest| rest.starts_with('/')),
        None => image_name(held) == wanted,
    })
}

/// A container image reference in full, as registries and `podman`
/// read it: `docker://` (HTCondor's and Apptainer's prefix) dropped,
/// `docker.io` where no registry is named (`library/` for a bare name), and
/// `:latest` where neither a tag nor a digest is: `busybox` is
/// `docker.io/library/busybox:latest`.
pub fn image_name(reference: &str) -> String {
    let r = reference.trim();
    let r = r.strip_prefix("docker://").unwrap_or(r);
    // A path is an image (or OCI bundle) on the site's file system.
    if r.starts_with('/') {
        return r.to_string();
    }
    let (first, _) = r.split_once('/').unwrap_or((r, ""));
    let registry = r.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = match (registry, r.contains('/')) {
        (true, _) => r.to_string(),
        (false, true) => format!("docker.io/{r}"),
        (false, false) => format!("docker.io/library/{r}"),
    };
    let last = full.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && !last.contains('@') {
        full.push_str(":latest");
    }
    full
}

/// The scheme of a URL (`gsiftp` of `gsiftp://host/file`), lower case;
/// `None` for a plain name: what a site's staging list is read against.
pub fn url_scheme(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once(':')?;
    let plain = !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    plain.then(|| scheme.to_ascii_lowercase())
}

/// The kind of endpoint a `grid_resource` type names (HTCondor's `arc`
/// and `nordugrid` are both ARC, `gt2`, `gt5` and `gram` GRAM), any case;
/// `None` for a type no grid site fronts (`ec2`, `boinc`, ...).
pub fn grid_kind(grid_type: &str) -> Option<&'static str> {
    match grid_type.to_ascii_lowercase().as_str() {
        "arc" | "nordugrid" => Some("arc"),
        "gt2" | "gt5" | "gram" => Some("gram"),
        "condor" => Some("condor"),
        "batch" => Some("batch"),
        _ => None,
    }
}

/// A grid resource as two endpoints compare: its kind and host, lowercase.
#[derive(Debug, PartialEq, Eq)]
struct GridResource {
    kind: &'static str,
    host: String,
}

impl GridResource {
    /// `TYPE CONTACT`; `None` for a type Brokk's sites never front.
    fn parse(text: &str) -> Option<GridResource> {
        let mut words = text.split_whitespace();
        let kind = grid_kind(words.next()?)?;
        let contact = words.next()?;
        // A URL's or a GRAM contact's host: after any scheme, before any
        // port or path.
        let rest = contact.split_once("://").map_or(contact, |(_, r)| r);
        let host = rest.split(['/', ':']).next().unwrap_or(rest);
        Some(GridResource {
            kind,
            host: host.to_ascii_lowercase(),
        })
    }
}

/// A benchmark result a resource publishes (higher is faster).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishedBenchmark {
    /// Benchmark name, matched against the job's benchmark names.
    pub name: String,
    /// The resource's result.
    pub value: f64,
}

#[cfg(test)]
mod tests {
    use super::Environment;

    #[test]
    fn a_grid_resource_is_fronted_by_the_endpoint_of_its_kind_and_host() {
        let site = Environment {
            endpoints: vec![
                "arc https://CE.example.org:443/arex".into(),
                "gt5 gk.example.org:2119/jobmanager-slurm".into(),
                "batch slurm".into(),
            ],
            ..Environment::default()
        };
        for named in [
            "arc https://ce.example.org/arex",
            "nordugrid ce.example.org",
            "gt2 gk.example.org/jobmanager-fork",
            "gt5 gk.example.org",
            "batch SLURM",
        ] {
            assert!(site.fronts(named), "{named}");
        }
        for other in [
            "arc https://other.example.org/arex",
            "condor ce.example.org ce.example.org:9619",
            "batch pbs",
            "ec2 https://ec2.amazonaws.com/",
            "arc",
        ] {
            assert!(!site.fronts(other), "{other}");
        }
        // Folded into a broker above, its endpoints are the broker's too.
        assert!(Environment::union([&Environment::default(), &site]).fronts("nordugrid ce.example.org"));
    }
}

#[cfg(test)]
mod image_tests {
    use super::*;

    #[test]
    fn an_image_reference_is_read_in_full_as_registries_read_it() {
        for (given, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("docker://busybox:1.36", "docker.io/library/busybox:1.36"),
            (
                "opensciencegrid/osgvo-el9",
                "docker.io/opensciencegrid/osgvo-el9:latest",
            ),
            ("localhost/brokk-busybox", "localhost/brokk-busybox:latest"),
            ("registry.example.org:5000/a/b:2", "registry.example.org:5000/a/b:2"),
            ("quay.io/x/y@sha256:ab12", "quay.io/x/y@sha256:ab12"),
            ("/cvmfs/unpacked.cern.ch/centos7", "/cvmfs/unpacked.cern.ch/centos7"),
        ] {
            assert_eq!(image_name(given), full, "{given}");
        }
    }

    #[test]
    fn a_site_holds_its_images_in_any_spelling_and_pulls_only_from_its_registries() {
        let env = Environment {
            images: vec![
                "localhost/brokk-busybox:latest".into(),
                "docker.io/library/debian:12".into(),
                "quay.io/*".into(),
            ],
            ..Environment::default()
        };
        assert!(env.holds_image("localhost/brokk-busybox"));
        assert!(env.holds_image("docker://debian:12"));
        assert!(!env.holds_image("debian"), "debian:latest is not debian:12");
        assert!(env.holds_image("quay.io/org/tool:3"));
        assert!(!env.holds_image("quay.io.evil.example/org/tool"));
        assert!(!env.holds_image("busybox"));
    }
}
