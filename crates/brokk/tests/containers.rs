//! Container jobs at an embedded site: rootless podman as the job's
//! account, with the image store, image and account that
//! `scripts/container-testbed.sh` makes (named by the directory in
//! `BROKK_TEST_CONTAINERS`). They need podman and root (to run jobs as the
//! account), so a plain `cargo test` skips them (ignored);
//! `scripts/test.sh` makes the testbed and runs them.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

fn bed() -> PathBuf {
    PathBuf::from(
        std::env::var_os("BROKK_TEST_CONTAINERS").expect("BROKK_TEST_CONTAINERS: scripts/test.sh makes the testbed"),
    )
}

fn read(name: &str) -> String {
    std::fs::read_to_string(bed().join(name)).unwrap().trim().to_string()
}

/// A broker with two embedded sites: `plain`, larger and faster, which runs
/// no containers, and `pod`, whose jobs run as the testbed's account and in
/// its images.
fn broker(name: &str) -> (PathBuf, common::Server) {
    broker_with(name, "")
}

/// [`broker`] with more of `pod`'s `[containers]` settings.
fn broker_with(name: &str, containers: &str) -> (PathBuf, common::Server) {
    let dir = common::scratch("containers", name);
    // The account passes through to its sandboxes, and lists nothing here.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let runtime = match read("oci_runtime") {
        r if r.is_empty() => String::new(),
        r => format!("oci_runtime = \"{r}\"\n"),
    };
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"plain\"\ncapacity = 16\n[[embedded.benchmarks]]\nname = \"specint2006\"\nvalue = 40.0\n\
         [[embedded]]\nname = \"pod\"\ncapacity = 2\n[[embedded.benchmarks]]\nname = \"specint2006\"\nvalue = 10.0\n\
         [embedded.accounts]\nann = \"{account}\"\n[embedded.containers]\nstore = \"{store}\"\n{runtime}{containers}",
        account = read("account"),
        store = bed().join("store").display(),
    );
    common::write_private(&dir.join("broker.toml"), &config);
    let server = common::serve(&dir);
    (dir, server)
}

/// Runs `sub` to its end through the broker at `url`; with `slurm` (a
/// cluster's `slurm.conf`), nothing of it is left queued there for the next
/// test. It must finish with 0. Its id, its end and its standard output.
fn run_finished(
    url: &str,
    dir: &std::path::Path,
    sub: &str,
    slurm: Option<&std::path::Path>,
) -> (String, serde_json::Value, String) {
    let (id, end) = common::run_to_end(url, "tok-ann", dir, "job.sub", sub);
    let out = common::output(url, "tok-ann", &id, "out.txt");
    if let Some(conf) = slurm {
        let left = common::slurm_command(conf, "squeue", &["-h", "-o", "%i"]);
        let left: Vec<&str> = left.split_whitespace().collect();
        if !left.is_empty() {
            common::slurm_command(conf, "scancel", &left);
        }
    }
    assert_eq!(
        (end["state"].as_str(), end["exit_code"].as_i64()),
        (Some("finished"), Some(0)),
        "{end}: {out} {}",
        common::output(url, "tok-ann", &id, "err.txt")
    );
    (id, end, out)
}

/// What the broker at `url` says when it refuses the submission `text`
/// (written to `dir/name`); the test fails if it takes it.
fn refused(url: &str, dir: &std::path::Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    let o = common::brokk(url, "tok-ann", &["submit", &dir.join(name).display().to_string()]);
    assert!(!o.status.success(), "{name} was taken");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The processes the account has now.
fn processes_of(account: &str) -> Vec<String> {
    let out = Command::new("pgrep").args(["-a", "-u", account]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).lines().map(String::from).collect()
}

#[test]
#[ignore = "needs rootless podman and root: scripts/container-testbed.sh (scripts/test.sh makes it)"]
fn a_container_job_runs_in_its_image_as_its_account_and_only_where_the_image_is() {
    let (dir, server) = broker("runs");
    let image = read("image");
    std::fs::write(dir.join("in.txt"), "one\ntwo\nthree\n").unwrap();
    // The container universe's own kind: a shell of the image's, the job's
    // input in its sandbox, its output written there.
    let sub = format!(
        "universe = container\ncontainer_image = {image}\nexecutable = /bin/sh\n\
         arguments = \"-c 'test -d /usr && echo on the host || echo in the image; id -un; wc -l < in.txt > count.txt; echo $GREETING'\"\n\
         transfer_executable = false\nenvironment = \"GREETING=hello\"\n\
         transfer_input_files = in.txt\noutput = out.txt\nerror = err.txt\nqueue\n"
    );
    let (id, end, out) = run_finished(&server.url, &dir, &sub, None);
    // Only `pod` runs it, though `plain` is larger and faster.
    assert_eq!(end["site"], "pod", "{end}");
    // The image has no /usr; the job is its account inside, with its environment.
    assert_eq!(out, format!("in the image\n{}\nhello\n", read("account")), "{out}");
    assert_eq!(common::output(&server.url, "tok-ann", &id, "count.txt").trim(), "3");
    // The site publishes podman and its image.
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let pod = sites.as_array().unwrap().iter().find(|s| s["name"] == "pod").unwrap();
    assert_eq!(common::strings(&pod["environment"]["containers"]), ["podman"], "{pod}");
    assert!(common::strings(&pod["environment"]["images"]).contains(&image), "{pod}");

    // An image no site holds is refused at submission, with every site's reason.
    let other = "universe = container\ncontainer_image = docker.io/library/debian:12\nexecutable = /bin/true\n\
                 transfer_executable = false\nqueue\n";
    let said = refused(&server.url, &dir, "other.sub", other);
    assert!(
        said.contains("pod") && said.contains("neither holds nor pulls"),
        "{said}"
    );
    assert!(said.contains("plain") && said.contains("runs no containers"), "{said}");
}

#[test]
#[ignore = "needs rootless podman, root and a registry: scripts/container-testbed.sh (scripts/test.sh makes it)"]
fn an_image_from_a_registry_the_site_names_is_pulled_for_the_job_alone() {
    let registry = read("registry");
    let (dir, server) = broker_with("pulls", &format!("registries = [\"{registry}\"]\n"));
    // An image only the registry has: not in the site's store.
    let pulled = read("pulled");
    let in_store = |image: &str| {
        let bed = bed();
        Command::new("podman")
            .args(["--root", &bed.join("store").display().to_string()])
            .args(["--runroot", &bed.join("run").display().to_string()])
            .args(["--storage-driver", "overlay", "image", "exists", image])
            .status()
            .unwrap()
            .success()
    };
    assert!(!in_store(&pulled));
    let sub = format!(
        "universe = container\ncontainer_image = {pulled}\nexecutable = /bin/sh\n\
         arguments = \"-c 'test -d /usr && echo on the host || echo in the image; id -un'\"\n\
         transfer_executable = false\noutput = out.txt\nerror = err.txt\nqueue\n"
    );
    let (_, end, out) = run_finished(&server.url, &dir, &sub, None);
    assert_eq!(end["site"], "pod", "{end}");
    assert_eq!(out, format!("in the image\n{}\n", read("account")), "{out}");
    // Pulled into the job's own storage: the site's store is as it was.
    assert!(!in_store(&pulled));
    // The site publishes the registry, as a pattern of images.
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let pod = sites.as_array().unwrap().iter().find(|s| s["name"] == "pod").unwrap();
    assert!(
        common::strings(&pod["environment"]["images"]).contains(&format!("{registry}/*")),
        "{pod}"
    );
    // The same image at a registry the site does not name is refused.
    let elsewhere = sub.replace(&registry, "registry.example.org");
    let said = refused(&server.url, &dir, "elsewhere.sub", &elsewhere);
    assert!(said.contains("neither holds nor pulls"), "{said}");
}

#[test]
#[ignore = "needs rootless podman and root: scripts/container-testbed.sh (scripts/test.sh makes it)"]
fn a_cancelled_container_job_leaves_no_process_behind() {
    let (dir, server) = broker("cancel");
    let account = read("account");
    let sub = format!(
        "universe = container\ncontainer_image = {}\nexecutable = /bin/sh\n\
         arguments = \"-c 'sleep 300 & sleep 301; wait'\"\ntransfer_executable = false\nqueue\n",
        read("image")
    );
    std::fs::write(dir.join("job.sub"), &sub).unwrap();
    let sub = common::json(
        &server.url,
        "tok-ann",
        &["submit", "--json", &dir.join("job.sub").display().to_string()],
    );
    let id = sub["id"].as_str().unwrap().to_string();
    common::wait_for_state(&server.url, "tok-ann", &id, "running", Duration::from_secs(60));
    // The container's sleeps are up, as the account.
    let t = Instant::now();
    while !processes_of(&account).iter().any(|p| p.contains("sleep 301")) {
        assert!(t.elapsed() < Duration::from_secs(30), "{:?}", processes_of(&account));
        std::thread::sleep(Duration::from_millis(200));
    }
    let cancel = common::brokk(&server.url, "tok-ann", &["cancel", &id]);
    assert!(cancel.status.success(), "{}", String::from_utf8_lossy(&cancel.stderr));
    let end = common::watch_end(&server.url, "tok-ann", &id);
    assert_eq!(end["state"], "cancelled", "{end}");
    // Podman, conmon and the container's processes are the job's: all gone.
    let t = Instant::now();
    while !processes_of(&account).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "left behind: {:?}",
            processes_of(&account)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs rootless podman, root and the Slurm testbed: scripts/container-testbed.sh and scripts/slurm-testbed.sh (scripts/test.sh starts both)"]
fn slurm_runs_a_container_job_in_its_image_as_its_account() {
    let slurm = PathBuf::from(std::env::var_os("BROKK_TEST_SLURM").expect("BROKK_TEST_SLURM: the Slurm testbed"));
    let dir = common::scratch("containers", "slurm");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let runtime = match read("oci_runtime") {
        r if r.is_empty() => String::new(),
        r => format!("oci_runtime = \"{r}\"\n"),
    };
    let conf = slurm.join("c1/slurm.conf");
    common::write_private(
        &dir.join("broker.toml"),
        &format!(
            "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
             [[embedded]]\nname = \"cluster\"\nslurm = {{ conf = \"{}\" }}\n\
             [embedded.accounts]\nann = \"{}\"\n[embedded.containers]\nstore = \"{}\"\n{runtime}",
            conf.display(),
            read("account"),
            bed().join("store").display(),
        ),
    );
    let server = common::serve(&dir);
    let sub = format!(
        "universe = container\ncontainer_image = {}\nexecutable = /bin/sh\n\
         arguments = \"-c 'test -d /usr && echo on the host || echo in the image; id -un; echo slurm job $SLURM_JOB_ID; pwd'\"\n\
         transfer_executable = false\noutput = out.txt\nerror = err.txt\nqueue\n",
        read("image")
    );
    let (_, _, out) = run_finished(&server.url, &dir, &sub, Some(&conf));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[..2], ["in the image", read("account").as_str()], "{out}");
    // Slurm's own variables reach the container; the sandbox is /srv there.
    let slurm_id = lines[2].strip_prefix("slurm job ").unwrap_or_default();
    assert!(
        !slurm_id.is_empty() && slurm_id.chars().all(|c| c.is_ascii_digit()),
        "{out}"
    );
    assert_eq!(lines[3], "/srv", "{out}");
    // Podman's pause process, which leaves the job's process tree, ended
    // with it: a batch system tracking processes by descent would miss it.
    let t = Instant::now();
    while !processes_of(&read("account")).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "left behind: {:?}",
            processes_of(&read("account"))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs runc, root and the Slurm testbed: scripts/container-testbed.sh and scripts/slurm-testbed.sh (scripts/test.sh starts both)"]
fn slurm_runs_a_job_in_one_of_its_oci_bundles_with_its_sandbox_as_its_account() {
    let slurm = PathBuf::from(std::env::var_os("BROKK_TEST_SLURM").expect("BROKK_TEST_SLURM: the Slurm testbed"));
    let dir = common::scratch("containers", "slurm-oci");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o711)).unwrap();
    let conf = slurm.join("c1/slurm.conf");
    let bundles = bed().join("bundles");
    // Slurm's own OCI support alone: no podman at this site.
    common::write_private(
        &dir.join("broker.toml"),
        &format!(
            "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
             [[embedded]]\nname = \"cluster\"\nslurm = {{ conf = \"{}\", oci_bundles = [\"{}\"] }}\n\
             [embedded.accounts]\nann = \"{}\"\n",
            conf.display(),
            bundles.display(),
            read("account"),
        ),
    );
    let server = common::serve(&dir);
    std::fs::write(dir.join("in.txt"), "staged in\n").unwrap();
    let sub = format!(
        "universe = container\ncontainer_image = {}\nexecutable = /bin/sh\n\
         arguments = \"-c 'cat /etc/brokk-bundle; pwd; cat in.txt; echo slurm job $SLURM_JOB_ID; echo made > made.txt'\"\n\
         transfer_executable = false\ntransfer_input_files = in.txt\ntransfer_output_files = made.txt\n\
         output = out.txt\nerror = err.txt\nqueue\n",
        bundles.join("busybox").display()
    );
    let (id, _, out) = run_finished(&server.url, &dir, &sub, Some(&conf));
    let lines: Vec<&str> = out.lines().collect();
    // The bundle's files, the sandbox as its working directory, the staged
    // input, and Slurm's own variables.
    assert_eq!(lines[..3], ["in the bundle", "/srv", "staged in"], "{out}");
    let slurm_id = lines[3].strip_prefix("slurm job ").unwrap_or_default();
    assert!(
        !slurm_id.is_empty() && slurm_id.chars().all(|c| c.is_ascii_digit()),
        "{out}"
    );
    assert_eq!(common::output(&server.url, "tok-ann", &id, "made.txt"), "made\n");
    // A bundle outside the site's bundle directories is refused with the
    // site's reason.
    let elsewhere = sub.replace(
        &bundles.join("busybox").display().to_string(),
        "/var/tmp/elsewhere/busybox",
    );
    let said = refused(&server.url, &dir, "elsewhere.sub", &elsewhere);
    assert!(
        said.contains("/var/tmp/elsewhere/busybox") && said.contains("cluster"),
        "{said}"
    );
}
