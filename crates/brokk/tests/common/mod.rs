//! What the end-to-end tests of `brokk site` and `brokk serve` share: scratch
//! directories, starting a server process on an ephemeral port, and reading
//! JSON answers.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command};

/// A fresh directory for one test, private to its user (servers refuse
/// configuration files with tokens that others can read).
pub fn scratch(kind: &str, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("brokk-{kind}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// A free port on the loopback interface, for a server that must keep its
/// address across restarts. Taken below the kernel's ephemeral range
/// (32768 up on Linux): a port the kernel hands out for port 0 (an embedded
/// site, a client) cannot be the one a server is about to listen on, as it
/// could be when this port came from the kernel too.
#[allow(dead_code)] // the tests that restart servers'
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Spread over the range by process and time, so that test binaries
    // running at once start from different places.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let base = std::process::id().wrapping_mul(7919) ^ nanos;
    loop {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + (base.wrapping_add(k.wrapping_mul(104_729)) % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A server process and where it listens; killed (SIGKILL) when dropped.
pub struct Server {
    child: Child,
    /// Its base URL.
    #[allow(dead_code)] // a test that fixed the address itself does not read it
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// The process id.
    #[allow(dead_code)] // not every test binary looks at the process
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Spawns `cmd` (with stdout piped) and waits for its `listening on URL` line.
pub fn spawn_listening(cmd: &mut Command) -> Server {
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().strip_prefix("listening on ").expect(&line).to_string();
    Server { child, url }
}

/// `brokk serve` on `DIR/broker.toml`, its log in `DIR/service.log`.
#[allow(dead_code)] // not every test binary runs a broker
pub fn serve(dir: &std::path::Path) -> Server {
    spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["serve", "--config"])
            .arg(dir.join("broker.toml"))
            .stderr(
                std::fs::File::create(dir.join("service.log"))
                    .map(std::process::Stdio::from)
                    .unwrap_or(std::process::Stdio::null()),
            )
            .env("BROKK_LOG", "brokk_server=debug,brokk_site=info,brokk_broker=warn"),
    )
}

/// A JSON array of strings as strings.
#[allow(dead_code)] // not every test binary reads one
pub fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap_or_else(|| panic!("not a string: {s}")).to_string())
        .collect()
}

/// Runs a `brokk` user command against the service at `url` as `token`, from
/// the repository's root (so example paths are `examples/...`).
#[allow(dead_code)] // not every test binary drives a service
pub fn brokk(url: &str, token: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(args)
        .env("BROKK_SERVER", url)
        .env("BROKK_TOKEN", token)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .unwrap()
}

/// [`brokk`] with `--json`-style output: fails the test unless the command
/// succeeds, and returns what it printed (for a `--watch` event stream, the
/// job its last line carries).
#[allow(dead_code)] // not every test binary drives a service
pub fn json(url: &str, token: &str, args: &[&str]) -> serde_json::Value {
    let o = brokk(url, token, args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    printed(&o.stdout)
}

/// `token`'s broker reservation `id` as `brokk reserve --list` shows it.
#[allow(dead_code)] // the rescue tests'
pub fn listed_reservation(url: &str, token: &str, id: &str) -> serde_json::Value {
    let list = json(url, token, &["reserve", "--list", "--json"]);
    list.as_array()
        .and_then(|all| all.iter().find(|x| x["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("reservation {id} is not listed: {list:#}"))
}

/// What a `--json` command printed: one document, or an event stream
/// (`watch`) whose last line carries the job as it ended.
#[allow(dead_code)] // not every test binary drives a service
pub fn printed(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    if let Ok(v) = serde_json::from_str(&text) {
        return v;
    }
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    assert_eq!(last["event"], "end", "{text}");
    last["job"].clone()
}

/// Submits `file` (written into `dir` with `text`) as `token`'s user and
/// follows it to its end: its id and the job as it ended.
#[allow(dead_code)] // the grid middleware tests'
pub fn run_to_end(
    url: &str,
    token: &str,
    dir: &std::path::Path,
    file: &str,
    text: &str,
) -> (String, serde_json::Value) {
    std::fs::write(dir.join(file), text).unwrap();
    let path = dir.join(file).display().to_string();
    let sub = json(url, token, &["submit", "--json", &path]);
    let id = sub["id"].as_str().unwrap_or_else(|| panic!("{sub}")).to_string();
    (id.clone(), watch_end(url, token, &id))
}

/// Follows job `id` to its end (`watch` exits non-zero for a job that did
/// not finish with 0); the job as it ended.
#[allow(dead_code)] // the grid middleware tests'
pub fn watch_end(url: &str, token: &str, id: &str) -> serde_json::Value {
    printed(&brokk(url, token, &["watch", "--json", id]).stdout)
}

/// Output file `name` of job `id`, as `brokk output` prints it.
#[allow(dead_code)] // the grid middleware tests'
pub fn output(url: &str, token: &str, id: &str, name: &str) -> String {
    let o = brokk(url, token, &["output", id, name]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Whether `brokk resources` says site `site` answers.
#[allow(dead_code)] // the grid middleware tests'
pub fn site_available(url: &str, token: &str, site: &str) -> bool {
    let sites = json(url, token, &["resources", "--json"]);
    let found = sites
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == site))
        .cloned();
    found.is_some_and(|s| s["available"] != false)
}

/// Waits until job `id` is in `state`, reading it as `token`'s user.
#[allow(dead_code)] // the grid middleware tests'
pub fn wait_for_state(url: &str, token: &str, id: &str, state: &str, within: std::time::Duration) -> serde_json::Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let job = json(url, token, &["status", "--json", id]);
        if job["state"] == state {
            return job;
        }
        assert!(std::time::Instant::now() < deadline, "never {state}: {job}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

/// Runs a service's SysV init script with `action` (`start`, `stop`),
/// without the `X509_*` credential variables: the GRAM gatekeeper takes them
/// from its environment as its own credential.
#[allow(dead_code)] // the grid middleware tests'
pub fn init_script(name: &str, action: &str) {
    let mut cmd = Command::new(format!("/etc/init.d/{name}"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("X509_") {
            cmd.env_remove(k);
        }
    }
    let o = cmd.arg(action).output().unwrap();
    assert!(
        o.status.success(),
        "{name} {action}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Starts `brokk site` on `config` and expects it to refuse to start within
/// 30 s; what it printed on standard error.
#[allow(dead_code)] // the grid middleware tests'
pub fn site_refuses(config: &std::path::Path) -> String {
    let started = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_brokk"))
        .args(["site", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    err
}

/// A Slurm command on the cluster of `conf`, with its output (stdout, then
/// stderr), times in UTC.
#[allow(dead_code)] // the Slurm tests'
pub fn slurm_command(conf: &std::path::Path, program: &str, args: &[&str]) -> String {
    let o = Command::new(program)
        .args(args)
        .env("SLURM_CONF", conf)
        .env("TZ", "UTC")
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Deletes the reservations of the cluster of `conf` whose names start with
/// `prefix`: what a test's agents left in Slurm once they are gone.
#[allow(dead_code)] // the Slurm tests'
pub fn drop_slurm_reservations(conf: &std::path::Path, prefix: &str) {
    for line in slurm_command(conf, "scontrol", &["show", "res", "-o"]).lines() {
        if let Some(name) = line
            .strip_prefix("ReservationName=")
            .and_then(|r| r.split_whitespace().next())
            .filter(|n| n.starts_with(prefix))
        {
            slurm_command(conf, "scontrol", &["delete", &format!("ReservationName={name}")]);
        }
    }
}

/// The value of `key=` in a Slurm record line.
#[allow(dead_code)] // the Slurm tests'
pub fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
}

/// A Slurm time (UTC) as seconds since the epoch.
#[allow(dead_code)] // the Slurm tests'
pub fn slurm_time(s: &str) -> i64 {
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
        .unwrap()
        .and_utc()
        .timestamp()
}

/// Polls job `id` until it ends or `within` passes; the job as last read.
#[allow(dead_code)] // the Slurm tests'
pub fn wait_ended(url: &str, token: &str, id: &str, within: std::time::Duration) -> serde_json::Value {
    let t = std::time::Instant::now();
    loop {
        let j = json(url, token, &["status", id, "--json"]);
        let s = j["state"].as_str().unwrap_or("");
        if matches!(s, "finished" | "failed" | "cancelled") || t.elapsed() > within {
            return j;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Writes a configuration that holds tokens, readable by its owner only
/// (the servers refuse one others can read).
#[allow(dead_code)] // the grid middleware and chaos tests'
pub fn write_private(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A tiny HTTP server for staging: GET /data, PUT /up (with `Expect:
/// 100-continue` as ARC's clients send it), and /hang, which never answers.
#[allow(dead_code)] // the staging tests'
pub fn file_server() -> (String, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let uploaded = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let up = uploaded.clone();
    use std::io::{BufRead, Read, Write};
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let up = up.clone();
            std::thread::spawn(move || {
                let mut s = stream;
                let mut reader = std::io::BufReader::new(s.try_clone().unwrap());
                let mut first = String::new();
                reader.read_line(&mut first).unwrap_or(0);
                let (mut len, mut expects) = (0usize, false);
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    let h = h.to_ascii_lowercase();
                    if let Some(v) = h.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    expects |= h.starts_with("expect:") && h.contains("100-continue");
                }
                if first.contains(" /hang") {
                    std::thread::sleep(std::time::Duration::from_secs(60));
                    return;
                }
                // ARC's clients name the whole URL and wait to be asked
                // for the body.
                if first.starts_with("PUT ") && first.contains("/up ") {
                    if expects {
                        let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    let mut body = vec![0; len];
                    reader.read_exact(&mut body).unwrap();
                    *up.lock().unwrap() = body;
                    let _ = s.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    return;
                }
                // Nothing but /data is there (ARC's data staging asks
                // whether a destination exists before it writes it), and
                // WebDAV's methods are not spoken (it falls back on HEAD).
                let (get, head) = (first.starts_with("GET "), first.starts_with("HEAD "));
                if !(get || head) {
                    let _ =
                        s.write_all(b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    return;
                }
                if !first.contains("/data ") {
                    let _ = s.write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    return;
                }
                let body = b"staged over http\n";
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                if get {
                    let _ = s.write_all(body);
                }
            });
        }
    });
    (url, uploaded)
}
