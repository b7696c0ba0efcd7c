//! Container jobs: a job naming an image runs in it under rootless podman,
//! as the job's own account, under the same supervisor, cgroup and limits
//! as any other job.
//!
//! ```toml
//! [containers]
//! store = "/var/lib/brokk/images"   # the site's image store (read-only for jobs)
//! registries = ["docker.io"]        # pulled from where not held (default: none)
//! oci_runtime = "runc"              # podman's --runtime, where its default cannot run here
//! ```
//!
//! Why rootless, as the account: podman then runs inside the job's process
//! tree and cgroup (its `cgroupfs` manager never asks systemd for a scope
//! of its own, which would put the container outside the job), so cancel,
//! wall time and the job's end reach every process of it, and what the
//! container writes into the sandbox is the account's, as it would be
//! without a container (`--userns=keep-id`). A rootful podman hands the
//! container to its own cgroup tree and to `conmon`, outside the job: so a
//! site that would run a job as root refuses container jobs.
//!
//! The site's administrator fills the store (`podman --root STORE import` or
//! `pull`); each job's podman reads it as an additional, read-only image
//! store and keeps its own storage, runtime state (`XDG_RUNTIME_DIR`: podman
//! refuses a `--runroot` longer than 50 characters) and configuration in
//! the sandbox, where they go with it. The job's sandbox is mounted at
//! `/srv`, as HTCondor's container universe mounts its scratch directory:
//! a mount point every FHS image has, so nothing needs making in an image
//! whose files, imported by root, the account's namespace cannot write; its
//! working directory, `HOME`, `TMPDIR`, `BROKK_SANDBOX` and any argument
//! naming the sandbox are read there. The job's environment reaches the
//! container through a file private to the account, not the command line
//! others can read.

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::accounts::Account;

/// The `[containers]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainersConfig {
    /// The podman program, by name on `PATH` or by path.
    #[serde(default = "default_podman")]
    pub podman: PathBuf,
    /// The site's image store: what its administrator imported or pulled
    /// with `podman --root STORE`; published, and read by jobs.
    pub store: Option<PathBuf>,
    /// Registries an image the store does not hold may be pulled from, for
    /// the job alone (none by default: only the store's images run).
    #[serde(default)]
    pub registries: Vec<String>,
    /// Podman's OCI runtime (`runc`, `crun`); podman's default when absent.
    pub oci_runtime: Option<String>,
    /// Whether a job's container has a network (podman's rootless one).
    #[serde(default = "default_network")]
    pub network: bool,
}

/// Why a site that would run jobs as root runs no containers (`setting`
/// names what asked for them): a rootless container is the account's, a
/// container as root would be root's.
pub fn refused_as_root(setting: &str) -> String {
    format!(
        "{setting}: container jobs run rootless, as their own account; this site would run them as root: \
         map identities to accounts ([accounts]) or run the agent as another user"
    )
}

fn default_podman() -> PathBuf {
    PathBuf::from("podman")
}

fn default_network() -> bool {
    true
}

/// Podman's storage driver for the store and every job's storage: an
/// additional image store is read only by the driver that wrote it.
const DRIVER: &str = "overlay";

impl ContainersConfig {
    /// Reads a relative store path against `base`.
    pub fn resolve(&mut self, base: &Path) {
        self.store = self.store.as_ref().map(|s| base.join(s));
        if self.podman.components().count() > 1 {
            self.podman = base.join(&self.podman);
        }
    }

    /// The registries it pulls from, as images are listed: `REGISTRY/*`.
    fn pulled(&self) -> Vec<String> {
        self.registries
            .iter()
            .map(|r| format!("{}/*", r.trim_end_matches('/')))
            .collect()
    }

    /// What the site publishes: the images of its store (read with
    /// podman, at the agent's start) and `REGISTRY/*` for each registry.
    /// An error when podman cannot read the store, or when the site would
    /// run jobs as root (`runs_as_root`: no `[accounts]`, agent root).
    pub fn published(&self, runs_as_root: bool) -> Result<Vec<String>, String> {
        if runs_as_root {
            return Err(refused_as_root("[containers]"));
        }
        let mut images = Vec::new();
        if let Some(store) = &self.store {
            let out = std::process::Command::new(&self.podman)
                .arg("--root")
                .arg(store)
                .args(["--storage-driver", DRIVER, "--log-level=error", "images", "--format"])
                .arg("{{.Repository}}:{{.Tag}}")
                .env_clear()
                .env("PATH", crate::launch::DEFAULT_PATH)
                .output()
                .map_err(|e| format!("[containers]: {}: {e}", self.podman.display()))?;
            if !out.status.success() {
                return Err(format!(
                    "[containers]: reading the store {}: {}",
                    store.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            images.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.is_empty() && !l.contains("<none>"))
                    .map(brokk_model::image_name),
            );
        }
        images.extend(self.pulled());
        images.sort();
        images.dedup();
        Ok(images)
    }
}

/// The shell around podman (run as `sh -c AROUND_PODMAN PAUSE_FILE PODMAN
/// ARGS...`): podman in the background with the job's standard input (a
/// background command's is `/dev/null` otherwise), signals passed on, its
/// status kept, and its pause process (whose pid podman writes in
/// `--tmpdir`) ended after it.
const AROUND_PODMAN: &str = r#"exec 3<&0
"$@" <&3 3<&- &
p=$!
trap 'kill -TERM $p 2>/dev/null' TERM INT HUP
wait $p
s=$?
if kill -0 $p 2>/dev/null; then wait $p; s=$?; fi
kill "$(cat "$0" 2>/dev/null)" 2>/dev/null
exit $s"#;

/// Where the sandbox is inside the container.
pub const INSIDE: &str = "/srv";

/// `text` with the sandbox's path (`sandbox`, absolute) at its start read
/// as the container's [`INSIDE`].
fn inside(text: &str, sandbox: &str) -> String {
    match text.strip_prefix(sandbox) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("{INSIDE}{rest}"),
        _ => text.to_string(),
    }
}

/// Makes `job` (to run from `sandbox` as `account`) the podman command
/// that runs it in its image, whatever backend then starts that command:
/// the job's program (a script written into the sandbox and run by the
/// interpreter its `#!` names, a staged program by its path there, a bare
/// name as the image's `PATH` finds it), its arguments, and its
/// environment with `batch` (the site's batch variables) in a file private
/// to the account. Podman's own directories are made in the sandbox.
pub fn into_podman(
    c: &ContainersConfig,
    job: &mut brokk_model::Job,
    batch: Vec<(String, String)>,
    sandbox: &Path,
    account: Option<Account>,
) -> io::Result<()> {
    let Some(image) = job.container_image.take() else {
        return Ok(());
    };
    let me = nix::unistd::geteuid().as_raw();
    if account.map_or(me, |a| a.uid) == 0 {
        return Err(io::Error::other(
            "a container job runs rootless, as its own account, and this one would run as root",
        ));
    }
    let sandbox = std::path::absolute(sandbox)?;
    let sandbox_text = sandbox.display().to_string();
    // A bare name is the image's to find on its own PATH.
    let (program, args) = crate::launch::program_of(job, &sandbox, account, |exe| PathBuf::from(exe))?;
    job.script = None;
    let own = |p: &Path| -> io::Result<()> {
        match account {
            Some(a) => std::os::unix::fs::chown(p, Some(a.uid), Some(a.gid)),
            None => Ok(()),
        }
    };
    let state = sandbox.join(".podman");
    let dir = |name: &str| -> io::Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let d = state.join(name);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&d)?;
        own(&d)?;
        Ok(d)
    };
    own(&dir("")?)?;
    let (storage, run, tmp, home) = (dir("storage")?, dir("run")?, dir("tmp")?, dir("home")?);
    let mut lines = String::new();
    let env = batch
        .into_iter()
        .chain(job.environment.iter().map(|v| (v.name.clone(), v.value.clone())));
    for (name, value) in env {
        if value.contains('\n') || name.contains('=') || name.contains('\n') {
            return Err(io::Error::other(format!(
                "the environment variable {name} holds a line break, which a container's environment file cannot carry"
            )));
        }
        lines.push_str(&format!("{name}={}\n", inside(&value, &sandbox_text)));
    }
    let env_file = state.join("environment");
    {
        let mut f = crate::staging::create_owned(&state, "environment", account)?;
        std::io::Write::write_all(&mut f, lines.as_bytes())?;
    }
    let s = |p: &Path| p.display().to_string();
    let mut a: Vec<String> = vec![
        "--root".into(),
        s(&storage),
        "--tmpdir".into(),
        s(&tmp),
        "--storage-driver".into(),
        DRIVER.into(),
        // In the job's own cgroup: systemd would give the container a scope
        // outside it.
        "--cgroup-manager=cgroupfs".into(),
        "--log-level=error".into(),
    ];
    if let Some(store) = &c.store {
        a.push("--storage-opt".into());
        a.push(format!("additionalimagestore={}", store.display()));
    }
    if let Some(r) = &c.oci_runtime {
        a.push("--runtime".into());
        a.push(r.clone());
    }
    let pull = if brokk_model::image_held(&c.pulled(), &image) {
        "--pull=missing"
    } else {
        "--pull=never"
    };
    let cwd = match &job.working_directory {
        Some(d) if d.starts_with('/') => inside(d, &sandbox_text),
        Some(d) => format!("{INSIDE}/{d}"),
        None => INSIDE.to_string(),
    };
    a.extend(
        [
            "run",
            "--rm",
            "-i",
            pull,
            "--userns=keep-id",
            "--volume",
            &format!("{sandbox_text}:{INSIDE}"),
            "--workdir",
            &cwd,
            "--env-file",
            &s(&env_file),
            // What a batch system sets when the job starts (Slurm's
            // SLURM_JOB_ID, ...) reaches the container as it is.
            "--env=SLURM_*",
        ]
        .map(String::from),
    );
    if !c.network {
        a.push("--network=none".into());
    }
    // The image by its full name, so no configured search list picks a
    // look-alike from another registry.
    a.push(brokk_model::image_name(&image));
    a.push(inside(&s(&program), &sandbox_text));
    a.extend(args.iter().map(|x| inside(x, &sandbox_text)));
    let podman = match c.podman.components().count() {
        1 => crate::launch::on_path(&c.podman.to_string_lossy(), crate::launch::DEFAULT_PATH)
            .ok_or_else(|| io::Error::other(format!("{}: not found", c.podman.display())))?,
        _ => c.podman.clone(),
    };
    // Run by a shell that, once podman is done, ends podman's pause
    // process (which keeps the account's user namespace and leaves the
    // job's process tree): a batch system that tracks processes by descent
    // (Slurm's proctrack/linuxproc) would leave it behind. A signal to the
    // shell is passed on to podman, which passes it to the container.
    job.executable = Some("/bin/sh".into());
    job.arguments = [
        "-c".to_string(),
        AROUND_PODMAN.into(),
        s(&tmp.join("pause.pid")),
        s(&podman),
    ]
    .into_iter()
    .chain(a)
    .collect();
    // Podman's own environment; the job's is in the file.
    job.environment = [
        ("PATH", crate::launch::DEFAULT_PATH.to_string()),
        ("HOME", s(&home)),
        ("XDG_RUNTIME_DIR", s(&run)),
        ("XDG_CONFIG_HOME", s(&home.join(".config"))),
        ("XDG_DATA_HOME", s(&home.join(".local/share"))),
        ("TMPDIR", s(&tmp)),
    ]
    .into_iter()
    .map(|(name, value)| brokk_model::EnvVar {
        name: name.into(),
        value,
    })
    .collect();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_is_read_as_srv_inside_and_nothing_else_is() {
        let sb = "/var/lib/brokk/jobs/job-7";
        assert_eq!(inside(sb, sb), "/srv");
        assert_eq!(
            inside("/var/lib/brokk/jobs/job-7/job-script.sh", sb),
            "/srv/job-script.sh"
        );
        // A sibling that shares the prefix is not the sandbox.
        assert_eq!(
            inside("/var/lib/brokk/jobs/job-70/x", sb),
            "/var/lib/brokk/jobs/job-70/x"
        );
        assert_eq!(inside("-c", sb), "-c");
    }

    #[test]
    fn a_container_job_never_runs_as_root() {
        let c = ContainersConfig {
            podman: "/bin/true".into(),
            store: None,
            registries: Vec::new(),
            oci_runtime: None,
            network: false,
        };
        let root = Some(Account { uid: 0, gid: 0 });
        let mut job = brokk_model::Job {
            executable: Some("sh".into()),
            container_image: Some("busybox".into()),
            ..Default::default()
        };
        let e = into_podman(&c, &mut job, Vec::new(), Path::new("/nonexistent"), root).unwrap_err();
        assert!(e.to_string().contains("rootless"), "{e}");
        assert!(c.published(true).unwrap_err().contains("[accounts]"));
    }
}
