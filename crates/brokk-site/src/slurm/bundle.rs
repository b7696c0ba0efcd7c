//! Slurm's own OCI support (`sbatch --container=BUNDLE`, run by the
//! cluster's `oci.conf`): a job naming one of the site's bundles is given a
//! copy of the bundle's `config.json` made for it, and Slurm runs its batch
//! script in that.
//!
//! Why a copy: Slurm (22.05, as measured on the testbed) mounts only the
//! batch script and the standard streams into the container, takes the
//! root file system as the bundle's `rootfs` whatever `config.json` says,
//! and leaves the user namespace as the bundle says. A bundle as `runc spec
//! --rootless` writes it maps one uid, the one that wrote it, so a shared
//! bundle would run for one account only, and would see nothing of the
//! job's sandbox. The job's copy is a `config.json` and an empty root of
//! its own (runc takes no link for a root), over which the shared root is
//! mounted read-only entry by entry when the container starts, on the node
//! that runs it: no file of the image is copied, and nothing needs a mount
//! made by the agent. It adds:
//! - the user namespace mapping the container's root to the job's account
//!   (rootless runc runs it as that account, nothing more);
//! - the sandbox at `/srv`, the job's working directory, as the podman
//!   path and HTCondor's container universe have it;
//! - a private `/tmp` (where Slurm's own mount points are made, so nothing
//!   is written into the shared root file system);
//! - the job's control directory at [`CONTROL`], for its run-once mark.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::container::INSIDE;

/// Where the job's control directory is inside its container.
pub const CONTROL: &str = "/tmp/.brokk-control";

/// Writes the job's copy of `bundle` into `dir` (made afresh, readable by
/// the account; its parent must be one the job cannot write) for a job with
/// sandbox `sandbox` and control directory `control`, run as `uid`:`gid`;
/// returns the copy's path, which `sbatch --container` names.
pub fn for_job(
    bundle: &Path,
    dir: &Path,
    sandbox: &Path,
    control: &Path,
    uid: u32,
    gid: u32,
) -> Result<PathBuf, String> {
    let at = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let config = bundle.join("config.json");
    let text = std::fs::read_to_string(&config).map_err(|e| at(&config, e))?;
    let mut spec: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", config.display()))?;
    let shared = bundle.join(spec["root"]["path"].as_str().unwrap_or("rootfs"));
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(at(dir, e)),
        _ => {}
    }
    let rootfs = dir.join("rootfs");
    for d in [dir, &rootfs] {
        std::fs::create_dir(d).map_err(|e| at(d, e))?;
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(|e| at(d, e))?;
    }
    spec["root"] = json!({"path": "rootfs", "readonly": true});
    spec["process"]["cwd"] = json!(INSIDE);
    spec["process"]["terminal"] = json!(false);
    let ours = ["/tmp", INSIDE, CONTROL];
    let theirs: Vec<Value> = spec["mounts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| !ours.contains(&m["destination"].as_str().unwrap_or("")))
        .collect();
    let mounted: Vec<String> = theirs
        .iter()
        .chain([json!({"destination": "/tmp"}), json!({"destination": INSIDE})].iter())
        .filter_map(|m| m["destination"].as_str().map(str::to_string))
        .collect();
    // The shared root file system, entry by entry, read-only, over the
    // job's own empty root (links copied as they are), before the mounts
    // that go inside its directories.
    let mut mounts = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(&shared)
        .map_err(|e| at(&shared, e))?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let (from, to) = (entry.path(), rootfs.join(&name));
        let kind = entry.file_type().map_err(|e| at(&from, e))?;
        if kind.is_symlink() {
            let target = std::fs::read_link(&from).map_err(|e| at(&from, e))?;
            std::os::unix::fs::symlink(target, &to).map_err(|e| at(&to, e))?;
            continue;
        }
        if kind.is_dir() {
            std::fs::create_dir(&to).map_err(|e| at(&to, e))?;
        } else {
            std::fs::File::create(&to).map_err(|e| at(&to, e))?;
        }
        let inside = format!("/{}", name.to_string_lossy());
        if !mounted.contains(&inside) {
            mounts.push(json!({"destination": inside, "type": "bind", "source": from,
                "options": ["rbind", "ro"]}));
        }
    }
    mounts.extend(theirs);
    mounts.push(json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
        "options": ["nosuid", "nodev", "mode=1777"]}));
    mounts.push(json!({"destination": INSIDE, "type": "bind", "source": sandbox,
        "options": ["rbind", "rw"]}));
    mounts.push(json!({"destination": CONTROL, "type": "bind", "source": control,
        "options": ["rbind", "rw"]}));
    // Mount points at the top that the shared root lacks: the container
    // cannot make them in a root that is not its own.
    for m in &mounts {
        let top = m["destination"]
            .as_str()
            .and_then(|d| d.trim_start_matches('/').split('/').next());
        if let Some(top) = top.filter(|t| !t.is_empty()) {
            let point = rootfs.join(top);
            if std::fs::symlink_metadata(&point).is_err() {
                std::fs::create_dir(&point).map_err(|e| at(&point, e))?;
            }
        }
    }
    spec["mounts"] = Value::Array(mounts);
    let linux = &mut spec["linux"];
    linux["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1}]);
    linux["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1}]);
    let mut namespaces = linux["namespaces"].as_array().cloned().unwrap_or_default();
    if !namespaces.iter().any(|n| n["type"] == "user") {
        namespaces.push(json!({"type": "user"}));
    }
    linux["namespaces"] = Value::Array(namespaces);
    let written = serde_json::to_string_pretty(&spec).map_err(|e| e.to_string())?;
    let path = dir.join("config.json");
    std::fs::write(&path, written).map_err(|e| at(&path, e))?;
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_copy_maps_its_account_and_mounts_its_sandbox_over_the_shared_root() {
        let base = std::env::temp_dir().join(format!("brokk-bundle-{}", std::process::id()));
        let bundle = base.join("busybox");
        let shared = bundle.join("rootfs");
        for d in ["bin", "proc", "tmp"] {
            std::fs::create_dir_all(shared.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("usr/lib", shared.join("lib")).unwrap();
        std::fs::write(shared.join("etc-file"), "x").unwrap();
        // As `runc spec --rootless` writes it for uid 0, with a mount of
        // /tmp that the copy replaces.
        let spec = json!({
            "process": {"terminal": true, "cwd": "/", "args": ["sh"]},
            "root": {"path": "rootfs", "readonly": true},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                       {"destination": "/tmp", "type": "bind", "source": "/tmp"}],
            "linux": {"uidMappings": [{"containerID": 0, "hostID": 0, "size": 1}],
                      "namespaces": [{"type": "pid"}, {"type": "mount"}]}
        });
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let dir = base.join("job.bundle");
        // Made afresh: what was there before is gone.
        std::fs::create_dir_all(dir.join("stale")).unwrap();
        let got = for_job(&bundle, &dir, Path::new("/jobs/7"), Path::new("/ctl/7"), 1009, 1010).unwrap();
        assert_eq!(got, dir);
        assert!(!dir.join("stale").exists());
        let copy: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!(copy["root"], json!({"path": "rootfs", "readonly": true}));
        assert_eq!(copy["process"]["cwd"], "/srv");
        assert_eq!(copy["process"]["terminal"], false);
        assert_eq!(copy["process"]["args"], json!(["sh"]), "the rest is the bundle's");
        assert_eq!(
            copy["linux"]["uidMappings"],
            json!([{"containerID": 0, "hostID": 1009, "size": 1}])
        );
        assert_eq!(
            copy["linux"]["gidMappings"],
            json!([{"containerID": 0, "hostID": 1010, "size": 1}])
        );
        assert_eq!(
            copy["linux"]["namespaces"].as_array().unwrap().len(),
            3,
            "a user namespace added"
        );
        let mounts: Vec<(String, String, String)> = copy["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let s = |k: &str| m[k].as_str().unwrap().to_string();
                (s("destination"), s("source"), m["options"].to_string())
            })
            .collect();
        let shared_at = |d: &str| shared.join(d).display().to_string();
        let want = [
            ("/bin", shared_at("bin"), r#"["rbind","ro"]"#),
            ("/etc-file", shared_at("etc-file"), r#"["rbind","ro"]"#),
            ("/proc", "proc".into(), "null"),
            ("/dev", "tmpfs".into(), "null"),
            ("/tmp", "tmpfs".into(), r#"["nosuid","nodev","mode=1777"]"#),
            ("/srv", "/jobs/7".into(), r#"["rbind","rw"]"#),
            (CONTROL, "/ctl/7".into(), r#"["rbind","rw"]"#),
        ]
        .map(|(d, s, o)| (d.to_string(), s, o.to_string()));
        assert_eq!(
            mounts, want,
            "the shared root read-only, and the host's /tmp is not the job's"
        );
        // The job's own root: mount points and links, no file of the image.
        let root = dir.join("rootfs");
        assert_eq!(std::fs::read_link(root.join("lib")).unwrap(), Path::new("usr/lib"));
        for point in ["bin", "proc", "tmp", "dev", "srv"] {
            assert!(root.join(point).is_dir(), "{point}");
        }
        assert_eq!(std::fs::read(root.join("etc-file")).unwrap(), b"");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_bundle_without_a_configuration_is_named_in_the_error() {
        let e = for_job(
            Path::new("/nonexistent/bundle"),
            Path::new("/nonexistent/out"),
            Path::new("/s"),
            Path::new("/c"),
            1,
            1,
        )
        .unwrap_err();
        assert!(e.contains("/nonexistent/bundle/config.json"), "{e}");
    }
}
