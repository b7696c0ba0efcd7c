//! What keeps every process of a local job the job's: a cgroup of its own,
//! or, where none can be made, the supervisor as the job's child subreaper.
//!
//! A job's processes are found by membership, not by process group: a child
//! that calls `setsid` leaves the job's group but not its cgroup, and as a
//! subreaper's descendant it is re-parented to the supervisor, not to init.
//! So cancel, wall time and the job's own end reach all of them, and nothing
//! outlives its job (Slurm's proctrack/cgroup, HTCondor's per-job cgroups).
//!
//! The supervisor makes the cgroup under its own, in each hierarchy it finds:
//! cgroup v1's `pids`, `memory` and `freezer` controllers where they are
//! mounted apart (as on hosts with the hybrid layout), else the v2 unified
//! hierarchy with whichever of `pids` and `memory` it can enable. It enters
//! the cgroup itself, starts the job (which inherits it) and leaves again,
//! since the job's account cannot write the cgroup's files and a process
//! can be moved only by one that can.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// One controller's (or the unified hierarchy's) directory for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The v2 unified hierarchy.
    Unified,
    /// v1 `pids`.
    Pids,
    /// v1 `memory`.
    Memory,
    /// v1 `freezer`.
    Freezer,
}

impl Kind {
    fn v1_name(self) -> &'static str {
        match self {
            Kind::Unified => "",
            Kind::Pids => "pids",
            Kind::Memory => "memory",
            Kind::Freezer => "freezer",
        }
    }
}

/// The cgroup hierarchies this process can make job cgroups in: each with
/// the directory of the process's own cgroup there.
fn hierarchies() -> Vec<(Kind, PathBuf)> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    // (fstype, super options, mount root, mount point) of cgroup mounts.
    let mounts: Vec<(&str, &str, &str, &str)> = mountinfo
        .lines()
        .filter_map(|line| {
            let (fields, tail) = line.split_once(" - ")?;
            let f: Vec<&str> = fields.split(' ').collect();
            let t: Vec<&str> = tail.split(' ').collect();
            (f.len() >= 5 && t.len() >= 3).then(|| (t[0], t[2], f[3], f[4]))
        })
        .filter(|(fs, ..)| *fs == "cgroup" || *fs == "cgroup2")
        .collect();
    // The process's cgroup path in a hierarchy, below where it is mounted.
    let place = |root: &str, point: &str, path: &str| -> PathBuf {
        let rel = path.strip_prefix(root).unwrap_or(path).trim_start_matches('/');
        Path::new(point).join(rel)
    };
    let mut v1 = Vec::new();
    for kind in [Kind::Pids, Kind::Memory, Kind::Freezer] {
        let name = kind.v1_name();
        let path = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctl, path) = (parts.next()?, parts.next()?, parts.next()?);
            ctl.split(',').any(|c| c == name).then_some(path)
        });
        let mount = mounts
            .iter()
            .find(|(fs, opts, ..)| *fs == "cgroup" && opts.split(',').any(|o| o == name));
        if let (Some(path), Some((_, _, root, point))) = (path, mount) {
            v1.push((kind, place(root, point, path)));
        }
    }
    // The v1 process limit, where it is mounted, decides the layout: a
    // hybrid host's unified hierarchy has no controllers to give.
    if v1.iter().any(|(k, _)| *k == Kind::Pids) {
        return v1;
    }
    let path = own.lines().find_map(|l| l.strip_prefix("0::"));
    let mount = mounts.iter().find(|(fs, ..)| *fs == "cgroup2");
    match (path, mount) {
        (Some(path), Some((_, _, root, point))) => vec![(Kind::Unified, place(root, point, path))],
        _ => Vec::new(),
    }
}

/// A job's cgroup: a directory in each hierarchy, under the supervisor's own.
#[derive(Debug)]
pub struct JobCgroup {
    dirs: Vec<(Kind, PathBuf)>,
}

/// The limits a job's cgroup enforces, as far as its controllers allow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// At most this many processes and threads at once.
    pub processes: u64,
    /// At most this many bytes of memory, when the job states its memory.
    pub memory_bytes: Option<u64>,
}

impl JobCgroup {
    /// Makes cgroup `name` in every hierarchy available, with `limits`
    /// written; `None` when none can be made (no cgroup file system, or no
    /// permission). A leftover of the same name (a supervisor killed before
    /// tidying, whose pid came round again) is emptied and made afresh.
    pub fn create(name: &str, limits: Limits) -> Option<JobCgroup> {
        let mut dirs = Vec::new();
        for (kind, own) in hierarchies() {
            let dir = own.join(name);
            if dir.exists() {
                JobCgroup {
                    dirs: vec![(kind, dir.clone())],
                }
                .kill_all();
                let _ = std::fs::remove_dir(&dir);
            }
            if kind == Kind::Unified {
                // Fails where the own cgroup holds processes and is not the
                // root (v2's rule of no internal processes): the job is then
                // still kept together, without these limits.
                let _ = std::fs::write(own.join("cgroup.subtree_control"), "+pids +memory");
            }
            if std::fs::create_dir(&dir).is_ok() {
                // Searchable by the job's account, writable only by the
                // supervisor: a rootless container runtime inside (podman's
                // runc) then finds it cannot make a cgroup here and runs in
                // this one, rather than failing on a directory it may not
                // even look into.
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
                dirs.push((kind, dir));
            }
        }
        if dirs.is_empty() {
            return None;
        }
        let cg = JobCgroup { dirs };
        cg.write_limits(limits);
        Some(cg)
    }

    /// The cgroup whose directories a supervisor recorded ([`JobCgroup::paths`]).
    pub fn from_paths(text: &str) -> JobCgroup {
        let dirs = text
            .split('\t')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
            .map(|p| {
                let kind = if p.join("cgroup.kill").exists() || p.join("cgroup.controllers").exists() {
                    Kind::Unified
                } else if p.join("freezer.state").exists() {
                    Kind::Freezer
                } else if p.join("pids.max").exists() {
                    Kind::Pids
                } else {
                    Kind::Memory
                };
                (kind, p)
            })
            .collect();
        JobCgroup { dirs }
    }

    /// The directories, tab-separated, for the supervision file.
    pub fn paths(&self) -> String {
        let all: Vec<String> = self.dirs.iter().map(|(_, p)| p.display().to_string()).collect();
        all.join("\t")
    }

    fn write_limits(&self, limits: Limits) {
        for (kind, dir) in &self.dirs {
            if matches!(kind, Kind::Pids | Kind::Unified) {
                let _ = std::fs::write(dir.join("pids.max"), limits.processes.to_string());
            }
            if let Some(bytes) = limits.memory_bytes {
                match kind {
                    Kind::Memory => {
                        let _ = std::fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string());
                    }
                    Kind::Unified => {
                        let _ = std::fs::write(dir.join("memory.max"), bytes.to_string());
                        // Past its memory a job is stopped, not swapped out.
                        let _ = std::fs::write(dir.join("memory.swap.max"), "0");
                    }
                    _ => {}
                }
            }
        }
    }

    /// Whether the cgroup limits the job's processes (else the caller sets
    /// `RLIMIT_NPROC`).
    pub fn limits_processes(&self) -> bool {
        self.dirs.iter().any(|(_, d)| d.join("pids.max").exists())
    }

    /// Moves the calling process into the cgroup, so that what it starts
    /// from now on is in it.
    pub fn enter(&self) -> io::Result<()> {
        let me = std::process::id().to_string();
        for (_, dir) in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), &me)?;
        }
        Ok(())
    }

    /// Moves the calling process back to its own cgroup (each directory's
    /// parent), leaving what it started inside.
    pub fn leave(&self) -> io::Result<()> {
        let me = std::process::id().to_string();
        for (_, dir) in &self.dirs {
            if let Some(parent) = dir.parent() {
                std::fs::write(parent.join("cgroup.procs"), &me)?;
            }
        }
        Ok(())
    }

    /// The processes in the cgroup now.
    pub fn members(&self) -> Vec<Pid> {
        let mut all: Vec<Pid> = self
            .dirs
            .iter()
            .flat_map(|(_, d)| {
                std::fs::read_to_string(d.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .filter_map(|l| l.trim().parse().ok().map(Pid::from_raw))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Sends `signal` to every process in the cgroup.
    pub fn signal(&self, signal: Signal) {
        for pid in self.members() {
            let _ = kill(pid, signal);
        }
    }

    /// Kills every process in the cgroup, forks racing the kill included:
    /// v2's `cgroup.kill`, else v1's freezer (frozen, killed, thawed), else
    /// rounds of SIGKILL until none is left.
    pub fn kill_all(&self) {
        for (kind, dir) in &self.dirs {
            if *kind == Kind::Unified && std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                return;
            }
        }
        if let Some((_, freezer)) = self.dirs.iter().find(|(k, _)| *k == Kind::Freezer) {
            let state = freezer.join("freezer.state");
            if std::fs::write(&state, "FROZEN").is_ok() {
                let t = Instant::now();
                while std::fs::read_to_string(&state).is_ok_and(|s| s.trim() != "FROZEN")
                    && t.elapsed() < Duration::from_secs(2)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                self.signal(Signal::SIGKILL);
                let _ = std::fs::write(&state, "THAWED");
                return;
            }
        }
        for _ in 0..100 {
            let members = self.members();
            if members.is_empty() {
                return;
            }
            for pid in members {
                let _ = kill(pid, Signal::SIGKILL);
            }
        }
    }

    /// Waits (at most `limit`) until the cgroup is empty, calling `reap`
    /// between looks (a subreaper collects its dead children there).
    pub fn wait_empty(&self, limit: Duration, mut reap: impl FnMut()) -> bool {
        let t = Instant::now();
        loop {
            reap();
            if self.members().is_empty() {
                return true;
            }
            if t.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Removes the cgroup's directories (they must be empty).
    pub fn remove(&self) {
        for (_, dir) in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Hides every other job's sandbox from what the calling process starts:
/// in a mount namespace of its own, the work directory above `sandbox` is
/// covered by an empty directory holding only `sandbox` (bound back at its
/// own path). Two users mapped to one Unix account share its permissions;
/// this keeps each job to its own sandbox anyway. Needs root (the agent
/// with `[accounts]` is); the agent's own view is unchanged.
pub fn hide_other_sandboxes(sandbox: &Path) -> io::Result<()> {
    use nix::mount::{mount, MsFlags};
    let sandbox = std::path::absolute(sandbox)?;
    let (Some(workdir), Some(name)) = (sandbox.parent(), sandbox.file_name()) else {
        return Err(io::Error::other(format!("{} has no parent", sandbox.display())));
    };
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
    // Nothing mounted here reaches the host's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )?;
    // Opened in this namespace (a bind takes its source from the caller's
    // own mounts) and held open across the covering mount, which hides
    // its path.
    let own = std::fs::File::open(&sandbox)?;
    mount(
        Some("tmpfs"),
        workdir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0711,size=64k"),
    )?;
    let target = workdir.join(name);
    let source = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&own));
    let bound = std::fs::create_dir(&target).and_then(|()| {
        mount(
            Some(source.as_str()),
            &target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(io::Error::from)
    });
    if let Err(e) = bound {
        // Uncovered again: the job keeps its sandbox, if not its privacy.
        let _ = nix::mount::umount2(workdir, nix::mount::MntFlags::MNT_DETACH);
        return Err(e);
    }
    Ok(())
}

/// Makes the calling process the child subreaper of what it starts: an
/// orphaned descendant (its parent gone, a `setsid` daemon) is re-parented
/// to it instead of init, so it stays findable as a descendant.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Every descendant of process `root` now, read from `/proc`.
pub fn descendants(root: Pid) -> Vec<Pid> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            // The parent is the second field after the command, which is in
            // parentheses and may hold anything, so it is read from the last ')'.
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if let Some(ppid) = ppid {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root.as_raw()];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.into_iter().skip(1).map(Pid::from_raw).collect()
}

/// Kills every descendant of the calling subreaper: stopped first, so that
/// none forks past the kill, then killed, in rounds until none is left
/// (at most `limit`), collecting them with `reap` between rounds.
pub fn kill_descendants(limit: Duration, mut reap: impl FnMut()) {
    let me = nix::unistd::getpid();
    let t = Instant::now();
    loop {
        reap();
        // A zombie is a descendant until it is collected; only live ones count.
        let live: Vec<Pid> = descendants(me).into_iter().filter(|p| !zombie(*p)).collect();
        if live.is_empty() {
            // Those that died since the reap above are zombies now: collected
            // too, or they would outlive the job as entries in the table.
            reap();
            return;
        }
        if t.elapsed() >= limit {
            return;
        }
        for p in &live {
            let _ = kill(*p, Signal::SIGSTOP);
        }
        for p in &live {
            let _ = kill(*p, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn zombie(pid: Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next().map(|c| c == "Z"))
        })
        .unwrap_or(true)
}

/// Collects every dead child of the calling process without waiting.
pub fn reap_children() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// What contains this host's jobs, in words, for the agent's start: made
/// by trying it (a cgroup made and removed), as the supervisor will.
pub fn describe(processes: u64) -> String {
    let name = format!("brokk-probe-{}", std::process::id());
    match JobCgroup::create(
        &name,
        Limits {
            processes,
            memory_bytes: None,
        },
    ) {
        Some(cg) => {
            let kinds: Vec<&str> = cg
                .dirs
                .iter()
                .map(|(k, _)| match k {
                    Kind::Unified => "v2",
                    k => k.v1_name(),
                })
                .collect();
            let limit = if cg.limits_processes() {
                format!("at most {processes} processes each")
            } else {
                format!("no pids controller: RLIMIT_NPROC {processes} per mapped account")
            };
            cg.remove();
            format!("jobs contained in a cgroup each ({}; {limit})", kinds.join(", "))
        }
        None => format!(
            "no cgroup can be made here: each job's supervisor is its child subreaper and kills every \
             descendant at its end; RLIMIT_NPROC {processes} per mapped account"
        ),
    }
}

/// What a grid CE sees of the site's users: each user with a credential of
/// their own as themselves; everyone else as the site's one identity, which
/// the CE maps to one account (a site with `[accounts]` refuses those users).
fn remote_identities(ce: &str, cert: &std::path::Path, own: usize, users_apart: bool) -> String {
    let shared = match users_apart {
        true => "users without one are refused, since [accounts] keeps users apart".to_string(),
        false => format!(
            "every other user's jobs reach it as the one identity of {} and run as the one account the {ce} maps it to",
            cert.display()
        ),
    };
    format!("{own} user(s) reach the {ce} with credentials of their own; {shared}")
}

/// What the agent of `config` says at start about how its jobs are
/// contained: the embedded runner's cgroups or subreaper, or the resource
/// manager's own for the backends that hand jobs on (and, for a grid CE, as whom it sees the
/// site's users).
pub fn notice(config: &crate::Config) -> String {
    if config.null_backend_for_benchmarks {
        "no jobs are run (the null backend)".into()
    } else if config.slurm.is_some() {
        "jobs are contained by Slurm itself (its proctrack and task plugins; proctrack/cgroup keeps every \
         process of a job)"
            .into()
    } else if let Some(arc) = &config.arc {
        format!(
            "jobs are contained by the ARC CE and the batch system behind it; {}",
            remote_identities("ARC CE", &arc.cert, arc.users.len(), !config.accounts.is_empty())
        )
    } else if let Some(gram) = &config.gram {
        format!(
            "jobs are contained by the GRAM gatekeeper's job manager; {}",
            remote_identities("gatekeeper", &gram.cert, gram.users.len(), !config.accounts.is_empty())
        )
    } else {
        describe(config.job_processes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subreaper_finds_and_kills_the_descendants_that_left_their_parent() {
        become_subreaper().unwrap();
        // The shell exits at once, leaving a `setsid` grandchild behind.
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", "setsid sleep 300 >/dev/null 2>&1 & echo $!"])
            .stdout(std::process::Stdio::piped())
            .output()
            .unwrap();
        let pid = Pid::from_raw(String::from_utf8(out.stdout).unwrap().trim().parse().unwrap());
        assert!(
            descendants(nix::unistd::getpid()).contains(&pid),
            "re-parented to the subreaper"
        );
        kill_descendants(Duration::from_secs(5), reap_children);
        assert!(kill(pid, None).is_err(), "{pid} still there");
    }
}
