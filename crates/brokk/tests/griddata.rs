//! Grid data at an embedded site: `root://` and `gsiftp://` files fetched
//! and sent by XRootD's and the Grid Community Toolkit's own clients,
//! against the real servers `scripts/griddata-testbed.sh` starts (named by
//! the directory in `BROKK_TEST_GRIDDATA`), with the GRAM testbed's test
//! user as the site's grid credential (`BROKK_TEST_GRAM`). They need both
//! testbeds (and root), so a plain `cargo test` skips them (ignored);
//! `scripts/test.sh` starts them and runs them.

use std::path::PathBuf;

mod common;

fn bed(var: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(var).unwrap_or_else(|| panic!("{var}: scripts/test.sh starts the testbeds")))
}

/// The testbed's URL of a kind (`root`, `gsiftp`), ending in `/`.
fn url(kind: &str) -> String {
    std::fs::read_to_string(bed("BROKK_TEST_GRIDDATA").join(kind))
        .unwrap()
        .trim()
        .to_string()
}

/// The servers' host, which is this host: a site reaches it only where it
/// names it in `stage_hosts`.
fn host() -> String {
    std::fs::read_to_string(bed("BROKK_TEST_GRAM").join("host"))
        .unwrap()
        .trim()
        .to_string()
}

/// A broker with two embedded sites: `plain`, larger and faster, with no
/// grid client, and `grid`, with the GRAM testbed's user as its credential
/// and the installed clients, or those `clients` names (a TOML table);
/// `stage_hosts` for `grid` when `allow`.
fn broker(name: &str, allow: bool, clients: Option<&str>) -> (PathBuf, common::Server) {
    let gram = bed("BROKK_TEST_GRAM");
    let dir = common::scratch("griddata", name);
    let hosts = if allow {
        format!("stage_hosts = [\"{}\"]\n", host())
    } else {
        String::new()
    };
    let clients = clients.map(|c| format!("clients = {c}\n")).unwrap_or_default();
    let config = format!(
        "database = \"broker.db\"\nstate_dir = \"sites\"\n[tokens]\n\"tok-ann\" = \"ann\"\n\
         [[embedded]]\nname = \"plain\"\ncapacity = 16\n[[embedded.benchmarks]]\nname = \"specint2006\"\nvalue = 40.0\n\
         [embedded.transfers]\nclients = {{}}\n\
         [[embedded]]\nname = \"grid\"\ncapacity = 2\n{hosts}[[embedded.benchmarks]]\nname = \"specint2006\"\nvalue = 10.0\n\
         [embedded.transfers]\n{clients}ca_dir = \"{ca}\"\n[embedded.transfers.credential]\ncert = \"{cert}\"\nkey = \"{key}\"\n",
        ca = gram.join("ca").display(),
        cert = gram.join("user.pem").display(),
        key = gram.join("user.key").display(),
    );
    common::write_private(&dir.join("broker.toml"), &config);
    let server = common::serve(&dir);
    (dir, server)
}

/// A name no earlier run used, so that a file found on a server is this run's.
fn unique(what: &str) -> String {
    format!("{what}-{}-{}", std::process::id(), brokk_proto::wall_clock().0)
}

/// A job at `grid` (its transfers by `clients`, or those installed) that
/// reads one input from each server and writes one output to each, into
/// `{out}/{sub}` there, run to its end and its outputs read on the
/// servers' disks: only `grid` moves these, the larger, faster site
/// publishing neither.
fn both_ways(name: &str, clients: Option<&str>, sub: &str) -> (PathBuf, common::Server) {
    let (dir, server) = broker(name, true, clients);
    let data = bed("BROKK_TEST_GRIDDATA");
    let (root, gsiftp) = (url("root"), url("gsiftp"));
    let (a, b, out) = (unique("a"), unique("b"), unique("out"));
    std::fs::write(data.join("xrootd").join(&a), "over xrootd\n").unwrap();
    std::fs::write(data.join("gridftp").join(&b), "over gridftp\n").unwrap();
    let xrsl = format!(
        r#"&(executable="/bin/sh")(arguments="-c" "cat a.txt b.txt > both.txt; tr a-z A-Z < both.txt > up.txt")
 (inputfiles=("a.txt" "{root}/{a}")("b.txt" "{gsiftp}{b}"))
 (outputfiles=("both.txt" "{root}/{out}/{sub}both.txt")("up.txt" "{gsiftp}{out}/{sub}up.txt"))(walltime="5")"#
    );
    let (_, end) = common::run_to_end(&server.url, "tok-ann", &dir, "job.xrsl", &xrsl);
    assert_eq!(
        (end["state"].as_str(), end["exit_code"].as_i64(), end["site"].as_str()),
        (Some("finished"), Some(0), Some("grid")),
        "{end}"
    );
    let both = std::fs::read_to_string(data.join("xrootd").join(&out).join(sub).join("both.txt")).unwrap();
    assert_eq!(both, "over xrootd\nover gridftp\n");
    let up = std::fs::read_to_string(data.join("gridftp").join(&out).join(sub).join("up.txt")).unwrap();
    assert_eq!(up, "OVER XROOTD\nOVER GRIDFTP\n");
    (dir, server)
}

#[test]
#[ignore = "needs the grid data servers: scripts/griddata-testbed.sh (scripts/test.sh starts it)"]
fn root_and_gsiftp_files_are_fetched_and_sent_by_the_protocols_own_clients() {
    let (dir, server) = both_ways("both", None, "");
    let root = url("root");
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let staging = |name: &str| {
        let site = sites.as_array().unwrap().iter().find(|s| s["name"] == name).unwrap();
        common::strings(&site["environment"]["staging"])
    };
    for scheme in ["root", "xroot", "gsiftp", "davs"] {
        assert!(staging("grid").iter().any(|s| s == scheme), "{scheme}: {sites}");
    }
    assert!(
        !staging("plain").iter().any(|s| s == "root" || s == "gsiftp"),
        "{sites}"
    );
    // A file that is not there fails the job with the server's own word.
    let missing = format!(
        r#"&(executable="/bin/cat")(arguments="in.txt")(inputfiles=("in.txt" "{root}/{}"))(walltime="5")"#,
        unique("missing")
    );
    let (_, end) = common::run_to_end(&server.url, "tok-ann", &dir, "missing.xrsl", &missing);
    assert_eq!(end["state"], "failed", "{end}");
    let reason = end["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("xrdcp") && reason.contains("no such file"), "{reason}");
}

#[test]
#[ignore = "needs the grid data servers: scripts/griddata-testbed.sh (scripts/test.sh starts it)"]
fn a_grid_server_on_the_sites_own_host_is_reached_only_when_the_site_allows_it() {
    let (dir, server) = broker("own-host", false, None);
    let data = bed("BROKK_TEST_GRIDDATA");
    let a = unique("a");
    std::fs::write(data.join("xrootd").join(&a), "private\n").unwrap();
    for (n, source) in [format!("{}/{a}", url("root")), format!("root://localhost:11094//{a}")]
        .iter()
        .enumerate()
    {
        let xrsl =
            format!(r#"&(executable="/bin/cat")(arguments="in.txt")(inputfiles=("in.txt" "{source}"))(walltime="5")"#);
        let (_, end) = common::run_to_end(&server.url, "tok-ann", &dir, &format!("job{n}.xrsl"), &xrsl);
        assert_eq!(end["state"], "failed", "{source}: {end}");
        let reason = end["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("own host's services"), "{source}: {reason}");
    }
}

#[test]
#[ignore = "needs the grid data servers: scripts/griddata-testbed.sh (scripts/test.sh starts it)"]
fn gfal2_moves_root_and_gsiftp_files_and_is_the_sites_way_to_srm() {
    let gfal = "{ root = \"gfal-copy\", gsiftp = \"gfal-copy\", srm = \"gfal-copy\" }";
    // The outputs go into directories not there yet: gfal2 makes them.
    let (dir, server) = both_ways("gfal", Some(gfal), "x/y/");
    // Only the gfal2 site publishes srm, so an SRM job goes there; no SRM
    // server runs here, and gfal2's own words say what it met.
    let sites = common::json(&server.url, "tok-ann", &["resources", "--json"]);
    let grid = sites.as_array().unwrap().iter().find(|s| s["name"] == "grid").unwrap();
    assert!(
        common::strings(&grid["environment"]["staging"])
            .iter()
            .any(|s| s == "srm"),
        "{sites}"
    );
    let srm = format!(
        r#"&(executable="/bin/cat")(arguments="in.txt")(inputfiles=("in.txt" "srm://{}:1/srm/managerv2?SFN=/data/{}"))(walltime="5")"#,
        host(),
        unique("in")
    );
    let (_, end) = common::run_to_end(&server.url, "tok-ann", &dir, "srm.xrsl", &srm);
    assert_eq!(
        (end["state"].as_str(), end["site"].as_str()),
        (Some("failed"), Some("grid")),
        "{end}"
    );
    let reason = end["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("gfal-cat failed"), "{reason}");
}
