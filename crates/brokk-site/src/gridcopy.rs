//! Files at grid URLs moved by the protocol's own client: `root://` (and
//! `xroot://`) by XRootD's `xrdcp`, `gsiftp://` by the Grid Community
//! Toolkit's `globus-url-copy`, `srm://` (which has no client of its own)
//! by gfal2's `gfal-cat` and `gfal-save`, which a site may also name for
//! the others.
//!
//! ```toml
//! [transfers]
//! clients = { root = "xrdcp", gsiftp = "/usr/bin/globus-url-copy", srm = "gfal-copy" }  # default: those on PATH
//! ca_dir = "/etc/grid-security/certificates"
//! [transfers.credential]            # the site's own, for a site without [accounts]
//! cert = "usercert.pem"
//! key = "userkey.pem"
//! [transfers.users.ann]             # a user's own (the site's is never used for another account)
//! cert = "ann.pem"
//! key = "ann.key"
//! ```
//!
//! The client runs as the agent and touches no local file: it reads the
//! file it sends from its standard input and writes the file it fetches to
//! its standard output, while the agent opens the job's side as the HTTP
//! transfers do (in the sandbox, no link followed, owned by the job's
//! account). So a URL cannot make the client read or write a file of the
//! site's, and the job's account cannot point the agent at someone else's.
//! The URL's host is checked as an HTTP transfer's is (not this host's own
//! services unless the site names it in `stage_hosts`), on every address
//! the name resolves to, since the client resolves it again itself.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::arc::Credential;

/// The `[transfers]` section: which client moves which scheme, and with
/// what grid credential.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransfersConfig {
    /// URL scheme -> the program that moves it (`xrdcp`,
    /// `globus-url-copy`, or gfal2's `gfal-copy`, `gfal-cat` or
    /// `gfal-save` for the pair beside it; by name on `PATH` or by path).
    /// Absent: `root` and `xroot` by `xrdcp`, `gsiftp` by
    /// `globus-url-copy`, `srm` by gfal2 where its SRM plugin is there,
    /// each where it is installed; `{}` turns grid transfers off.
    pub clients: Option<BTreeMap<String, PathBuf>>,
    /// The site's grid credential, for GridFTP; used only at a site that
    /// runs every job as the agent (no `[accounts]`).
    pub credential: Option<Credential>,
    /// Users' own grid credentials (user -> credential).
    #[serde(default)]
    pub users: BTreeMap<String, Credential>,
    /// The trusted CAs' directory (`X509_CERT_DIR`); the client's default
    /// when absent.
    pub ca_dir: Option<PathBuf>,
}

impl TransfersConfig {
    /// Reads relative paths against `base` (the configuration file's
    /// directory); a client given by bare name stays a name on `PATH`.
    pub fn resolve(&mut self, base: &Path) {
        for p in self.clients.iter_mut().flat_map(|c| c.values_mut()) {
            if p.components().count() > 1 {
                *p = base.join(&*p);
            }
        }
        for c in self.credential.iter_mut().chain(self.users.values_mut()) {
            c.resolve(base);
        }
        self.ca_dir = self.ca_dir.as_ref().map(|d| base.join(d));
    }
}

/// Which command line a client takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// XRootD's `xrdcp`: `-` is standard input or output.
    Xrdcp,
    /// `globus-url-copy`: `file:///dev/stdin` and `file:///dev/stdout`.
    GlobusUrlCopy,
    /// gfal2's clients, which read the protocol from the URL: `gfal-cat`
    /// writes a file to standard output, `gfal-save` stores standard
    /// input (the path given names either; its sibling is the other).
    Gfal,
}

impl Kind {
    fn of(program: &Path) -> Option<Kind> {
        match program.file_name()?.to_str()? {
            "xrdcp" => Some(Kind::Xrdcp),
            "globus-url-copy" => Some(Kind::GlobusUrlCopy),
            "gfal-copy" | "gfal-cat" | "gfal-save" => Some(Kind::Gfal),
            _ => None,
        }
    }

    /// The program that takes `step`: gfal2 has one for each, beside the
    /// one named; the others do everything.
    fn program(self, named: &Path, step: Step) -> PathBuf {
        match (self, step) {
            (Kind::Gfal, Step::Fetch) => named.with_file_name("gfal-cat"),
            (Kind::Gfal, Step::Send) => named.with_file_name("gfal-save"),
            (Kind::Gfal, Step::MakeDirs) => named.with_file_name("gfal-mkdir"),
            _ => named.to_path_buf(),
        }
    }

    /// The arguments of `step` on `url`: a file fetched to standard
    /// output, one sent from standard input, a directory made with its
    /// parents.
    fn args(self, step: Step, url: &str) -> Vec<String> {
        let words: &[&str] = match (self, step) {
            (Kind::Xrdcp, Step::Fetch) => &["--nopbar", url, "-"],
            // Replaces a file there and makes the directories on the way.
            (Kind::Xrdcp, Step::Send) => &["--nopbar", "--force", "--path", "-", url],
            (Kind::GlobusUrlCopy, Step::Fetch) => &[url, "file:///dev/stdout"],
            (Kind::GlobusUrlCopy, Step::Send) => &["-cd", "file:///dev/stdin", url],
            (Kind::Gfal, Step::MakeDirs) => &["-p", url],
            (_, Step::MakeDirs) => &[],
            (Kind::Gfal, _) => &[url],
        };
        words.iter().map(|w| w.to_string()).collect()
    }
}

/// What a client is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Fetch,
    Send,
    /// Only gfal2 needs the directories made before `gfal-save`: `xrdcp
    /// --path` and `globus-url-copy -cd` make them themselves.
    MakeDirs,
}

/// The directory holding the file at `url`, where the URL's path has one
/// below the server's root.
fn parent_url(url: &str) -> Option<&str> {
    let path_from = url.find("://")? + 3;
    let host_end = path_from + url[path_from..].find('/')?;
    let last = url.rfind('/')?;
    let parent = &url[..last];
    // `...?SFN=/f` has its file at the root too.
    (last > host_end && !url[host_end..last].trim_matches('/').is_empty() && !parent.ends_with('=')).then_some(parent)
}

/// Whether a scheme's servers authenticate the client with a grid
/// credential: GridFTP and SRM always do; XRootD serves public data
/// anonymously.
fn needs_credential(scheme: &str) -> bool {
    matches!(scheme, "gsiftp" | "srm")
}

/// Whether gfal2's SRM plugin is installed, in the directory gfal2 reads
/// its plugins from on Debian and on RPM systems: without it `gfal-cat`
/// cannot reach an SRM, and the site does not offer `srm://`.
fn gfal_has_srm() -> bool {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ];
    dirs.iter()
        .any(|d| Path::new(d).join("gfal2-plugins/libgfal_plugin_srm.so").is_file())
}

/// The grid transfers a site makes, from its `[transfers]` section.
#[derive(Debug, Clone, Default)]
pub struct GridCopy {
    clients: BTreeMap<String, (Kind, PathBuf)>,
    config: TransfersConfig,
}

/// Finds the executable `name` on the agent's own `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    crate::launch::on_path(name, &std::env::var("PATH").unwrap_or_default())
}

impl GridCopy {
    /// The clients the configuration names, or those installed; an error
    /// for a program that is neither `xrdcp` nor `globus-url-copy`, or one
    /// not found.
    pub fn new(config: &TransfersConfig) -> Result<GridCopy, String> {
        let named: BTreeMap<String, PathBuf> = match &config.clients {
            Some(c) => c.clone(),
            None => [
                ("root", "xrdcp"),
                ("xroot", "xrdcp"),
                ("gsiftp", "globus-url-copy"),
                ("srm", "gfal-copy"),
            ]
            .into_iter()
            .filter(|(s, p)| on_path(p).is_some() && (*s != "srm" || gfal_has_srm()))
            .map(|(s, p)| (s.to_string(), PathBuf::from(p)))
            .collect(),
        };
        let mut clients = BTreeMap::new();
        for (scheme, program) in named {
            let kind = Kind::of(&program).ok_or_else(|| {
                format!(
                    "transfers.clients.{scheme}: {} is none of xrdcp, globus-url-copy, gfal-copy",
                    program.display()
                )
            })?;
            let found = match program.components().count() {
                1 => on_path(&program.to_string_lossy()),
                _ => program.is_file().then(|| program.clone()),
            };
            // gfal2's pair must both be there.
            let found = found
                .filter(|f| {
                    [Step::Fetch, Step::Send, Step::MakeDirs]
                        .iter()
                        .all(|s| kind.program(f, *s).is_file())
                })
                .ok_or_else(|| format!("transfers.clients.{scheme}: {} not found", program.display()))?;
            clients.insert(scheme.to_ascii_lowercase(), (kind, found));
        }
        Ok(GridCopy {
            clients,
            config: config.clone(),
        })
    }

    /// The schemes the site moves itself this way, as it publishes them: a
    /// protocol that authenticates only where some credential is set.
    pub fn schemes(&self) -> Vec<String> {
        let credentials = self.config.credential.is_some() || !self.config.users.is_empty();
        self.clients
            .iter()
            .filter(|(scheme, _)| credentials || !needs_credential(scheme))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// Whether the file at `url` is moved by a grid client here.
    pub fn moves(&self, url: &str) -> bool {
        brokk_model::url_scheme(url).is_some_and(|s| self.clients.contains_key(&s))
    }

    /// The credential `user`'s transfer uses: their own, or the site's at a
    /// site that runs every job as the agent. The site's is never used for
    /// a job with an account of its own, which could then reach what
    /// another user stored under the site's identity.
    fn credential(&self, user: &str, own_account: bool) -> Result<Option<&Credential>, String> {
        if let Some(c) = self.config.users.get(user) {
            return Ok(Some(c));
        }
        match (&self.config.credential, own_account) {
            (Some(_), true) => Err(format!(
                "{user} has no grid credential of their own here ([transfers.users]); \
                 the site's is not used for another account"
            )),
            (c, _) => Ok(c.as_ref()),
        }
    }

    /// The client's command for `url`, as `user` with or without an
    /// account of their own, with a clean environment.
    fn command(&self, url: &str, user: &str, own_account: bool, step: Step) -> Result<tokio::process::Command, String> {
        let scheme = brokk_model::url_scheme(url).unwrap_or_default();
        let Some((kind, program)) = self.clients.get(&scheme) else {
            return Err(format!("{url}: this site has no client for {scheme}://"));
        };
        let mut cmd = tokio::process::Command::new(kind.program(program, step));
        cmd.args(kind.args(step, url))
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .kill_on_drop(true)
            .stderr(Stdio::piped());
        if needs_credential(&scheme) {
            match self.credential(user, own_account)? {
                Some(Credential { cert, key: Some(key) }) => {
                    cmd.env("X509_USER_CERT", cert).env("X509_USER_KEY", key);
                }
                Some(Credential { cert, key: None }) => {
                    cmd.env("X509_USER_PROXY", cert);
                }
                None => return Err(format!("{url}: this site has no grid credential for {user}")),
            }
            if let Some(d) = &self.config.ca_dir {
                cmd.env("X509_CERT_DIR", d);
            }
        }
        Ok(cmd)
    }

    /// Fetches `url` into `to` (the job's file, opened by the agent).
    pub async fn fetch(&self, url: &str, user: &str, own_account: bool, to: std::fs::File) -> Result<(), String> {
        let mut cmd = self.command(url, user, own_account, Step::Fetch)?;
        cmd.stdin(Stdio::null()).stdout(to);
        finish(url, cmd).await
    }

    /// Sends `from` (the job's file, opened by the agent) to `url`.
    pub async fn send(&self, from: std::fs::File, url: &str, user: &str, own_account: bool) -> Result<(), String> {
        let gfal = self.clients.get(&brokk_model::url_scheme(url).unwrap_or_default());
        if let (Some((Kind::Gfal, _)), Some(parent)) = (gfal, parent_url(url)) {
            let mut cmd = self.command(parent, user, own_account, Step::MakeDirs)?;
            cmd.stdin(Stdio::null()).stdout(Stdio::null());
            // gfal2's GridFTP plugin can crash as its tool exits, its work
            // done (seen in CI: `gfal-mkdir` killed by SIGSEGV with nothing
            // said). A tool killed by a signal is not the send's failure:
            // if the directory is not there, the send fails in its own words.
            let (program, status, said) = run(cmd).await?;
            if status.signal().is_some() {
                tracing::warn!(url = %parent, %program, %status, "making the directories ended by a signal; sending anyway");
            } else {
                failed(parent, &program, status, &said)?;
            }
        }
        let mut cmd = self.command(url, user, own_account, Step::Send)?;
        cmd.stdin(from).stdout(Stdio::null());
        finish(url, cmd).await
    }
}

/// Runs the client to its end: an error with the last of what it said when
/// it fails.
async fn finish(url: &str, cmd: tokio::process::Command) -> Result<(), String> {
    let (program, status, said) = run(cmd).await?;
    failed(url, &program, status, &said)
}

/// Runs the client to its end: its name, how it ended and the last of what
/// it said on its standard error.
async fn run(mut cmd: tokio::process::Command) -> Result<(String, std::process::ExitStatus, String), String> {
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let mut child = cmd.spawn().map_err(|e| format!("{program}: {e}"))?;
    let mut said = String::new();
    if let Some(mut err) = child.stderr.take() {
        // Only the end matters; a chatty client cannot fill the agent's memory.
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = err.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            said.push_str(&String::from_utf8_lossy(&buf[..n]));
            if said.len() > 8192 {
                said.drain(..said.len() - 4096);
            }
        }
    }
    let status = child.wait().await.map_err(|e| format!("{program}: {e}"))?;
    Ok((program, status, said))
}

/// Nothing when `status` is success, else the failure of `program` on
/// `url` with the last lines it `said`.
fn failed(url: &str, program: &str, status: std::process::ExitStatus, said: &str) -> Result<(), String> {
    if status.success() {
        return Ok(());
    }
    let lines: Vec<&str> = said.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join("; ");
    Err(format!("{url}: {program} failed ({status}): {tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory with stand-ins for the clients: each notes its name and
    /// arguments in `calls`, prints its arguments and what it read from its
    /// input, and fails for a URL holding `missing`, as the real ones do
    /// for a file not there.
    fn stand_ins() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("brokk-gridcopy-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["xrdcp", "globus-url-copy", "gfal-cat", "gfal-save", "gfal-mkdir"] {
            let path = dir.join(name);
            std::fs::write(
                &path,
                "#!/bin/sh\ncase \"$*\" in *missing*) echo \"[ERROR] no such file\" >&2; exit 54;; esac\n\
                 case \"${0##*/} $*\" in *mkdir*crash*) echo \"${0##*/} $*\" >> \"${0%/*}/calls\"; kill -SEGV $$;; esac\n\
                 echo \"${0##*/} $*\" >> \"${0%/*}/calls\"\n\
                 echo \"args: $*\"; echo \"cert: $X509_USER_CERT proxy: $X509_USER_PROXY home: $HOME\"; cat\n",
            )
            .unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        dir
    }

    fn config(dir: &Path, credential: bool) -> TransfersConfig {
        TransfersConfig {
            clients: Some(
                [("root", "xrdcp"), ("gsiftp", "globus-url-copy"), ("srm", "gfal-cat")]
                    .map(|(s, p)| (s.to_string(), dir.join(p)))
                    .into(),
            ),
            credential: credential.then(|| Credential {
                cert: "/site/cert.pem".into(),
                key: Some("/site/key.pem".into()),
            }),
            users: [(
                "ann".to_string(),
                Credential {
                    cert: "/ann/proxy.pem".into(),
                    key: None,
                },
            )]
            .into(),
            ca_dir: None,
        }
    }

    #[test]
    fn a_client_is_xrdcp_globus_url_copy_or_gfal_and_must_be_there() {
        let dir = stand_ins();
        let other = TransfersConfig {
            clients: Some([("root".to_string(), PathBuf::from("/bin/cp"))].into()),
            ..TransfersConfig::default()
        };
        assert!(GridCopy::new(&other)
            .unwrap_err()
            .contains("none of xrdcp, globus-url-copy, gfal-copy"));
        let gone = TransfersConfig {
            clients: Some([("root".to_string(), dir.join("nowhere/xrdcp"))].into()),
            ..TransfersConfig::default()
        };
        assert!(GridCopy::new(&gone).unwrap_err().contains("not found"));
        // gfal2's clients come as a set: gfal-cat alone cannot send.
        let lone = stand_ins();
        std::fs::remove_file(lone.join("gfal-save")).unwrap();
        let half = TransfersConfig {
            clients: Some([("srm".to_string(), lone.join("gfal-cat"))].into()),
            ..TransfersConfig::default()
        };
        assert!(GridCopy::new(&half).unwrap_err().contains("not found"));
        let none = TransfersConfig {
            clients: Some(BTreeMap::new()),
            ..TransfersConfig::default()
        };
        assert!(GridCopy::new(&none).unwrap().schemes().is_empty());
    }

    #[test]
    fn gridftp_and_srm_are_published_only_with_a_credential_to_authenticate_with() {
        let dir = stand_ins();
        let mut bare = config(&dir, false);
        bare.users.clear();
        assert_eq!(GridCopy::new(&bare).unwrap().schemes(), ["root"]);
        assert_eq!(
            GridCopy::new(&config(&dir, true)).unwrap().schemes(),
            ["gsiftp", "root", "srm"]
        );
        let grid = GridCopy::new(&bare).unwrap();
        assert!(grid.moves("ROOT://h//f") && grid.moves("gsiftp://h/f") && !grid.moves("https://h/f"));
    }

    #[test]
    fn the_sites_credential_is_never_used_for_a_job_with_an_account_of_its_own() {
        let dir = stand_ins();
        let grid = GridCopy::new(&config(&dir, true)).unwrap();
        // A user's own, with or without an account.
        for account in [false, true] {
            assert_eq!(
                grid.credential("ann", account).unwrap().map(|c| c.cert.clone()),
                Some(PathBuf::from("/ann/proxy.pem"))
            );
        }
        // The site's, only where every job runs as the agent.
        let site = grid.credential("bob", false).unwrap().unwrap();
        assert_eq!(site.cert, PathBuf::from("/site/cert.pem"));
        assert!(grid
            .credential("bob", true)
            .unwrap_err()
            .contains("no grid credential of their own"));
    }

    #[tokio::test]
    async fn the_client_moves_the_file_over_its_standard_streams_with_a_clean_environment() {
        let dir = stand_ins();
        let grid = GridCopy::new(&config(&dir, true)).unwrap();
        let out = dir.join("fetched");
        let to = std::fs::File::create(&out).unwrap();
        grid.fetch("root://h//in.txt", "bob", false, to).await.unwrap();
        let fetched = std::fs::read_to_string(&out).unwrap();
        assert!(fetched.starts_with("args: --nopbar root://h//in.txt -\n"), "{fetched}");
        // xrdcp gets no credential, and nothing of the agent's environment.
        assert!(fetched.contains("cert:  proxy:  home: \n"), "{fetched}");
        let from = dir.join("sent");
        std::fs::write(&from, "the job's output\n").unwrap();
        let sink = dir.join("sink");
        // The stand-in echoes its input to its output, which is dropped: a
        // second stand-in run to a file shows what it was given.
        grid.send(std::fs::File::open(&from).unwrap(), "gsiftp://h/o.txt", "ann", true)
            .await
            .unwrap();
        let mut cmd = grid.command("gsiftp://h/o.txt", "ann", true, Step::Send).unwrap();
        cmd.stdin(std::fs::File::open(&from).unwrap())
            .stdout(std::fs::File::create(&sink).unwrap());
        finish("gsiftp://h/o.txt", cmd).await.unwrap();
        let sent = std::fs::read_to_string(&sink).unwrap();
        assert!(
            sent.starts_with("args: -cd file:///dev/stdin gsiftp://h/o.txt\n"),
            "{sent}"
        );
        assert!(
            sent.contains("proxy: /ann/proxy.pem") && sent.ends_with("the job's output\n"),
            "{sent}"
        );
        // A failure says which client failed and what it said.
        let to = std::fs::File::create(&out).unwrap();
        let e = grid.fetch("root://h//missing", "bob", false, to).await.unwrap_err();
        assert!(e.contains("xrdcp failed") && e.contains("no such file"), "{e}");
    }

    #[tokio::test]
    async fn gfal_fetches_with_gfal_cat_and_sends_with_gfal_save_into_directories_it_made() {
        let dir = stand_ins();
        let grid = GridCopy::new(&config(&dir, true)).unwrap();
        let url = "srm://se.example.org:8446/srm/managerv2?SFN=/data/in.txt";
        let out = dir.join("fetched");
        grid.fetch(url, "ann", true, std::fs::File::create(&out).unwrap())
            .await
            .unwrap();
        let fetched = std::fs::read_to_string(&out).unwrap();
        // SRM authenticates: the user's own proxy goes with it.
        assert!(
            fetched.starts_with(&format!("args: {url}\n")) && fetched.contains("proxy: /ann/proxy.pem"),
            "{fetched}"
        );
        let from = dir.join("sent");
        std::fs::write(&from, "result\n").unwrap();
        let to = "srm://se.example.org:8446/srm/managerv2?SFN=/data/run/7/out.txt";
        grid.send(std::fs::File::open(&from).unwrap(), to, "ann", true)
            .await
            .unwrap();
        let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            [
                format!("gfal-cat {url}"),
                "gfal-mkdir -p srm://se.example.org:8446/srm/managerv2?SFN=/data/run/7".to_string(),
                format!("gfal-save {to}"),
            ]
        );
        // A directory that cannot be made is the send's failure.
        let e = grid
            .send(
                std::fs::File::open(&from).unwrap(),
                "srm://se/missing/o.txt",
                "ann",
                true,
            )
            .await
            .unwrap_err();
        assert!(e.contains("gfal-mkdir failed") && e.contains("no such file"), "{e}");
        // A gfal-mkdir killed by a signal (gfal2's GridFTP plugin crashing
        // as it exits) does not stop the send, which says whether it went.
        let to = "srm://se.example.org:8446/srm/managerv2?SFN=/data/crash/out.txt";
        grid.send(std::fs::File::open(&from).unwrap(), to, "ann", true)
            .await
            .unwrap();
        let calls = std::fs::read_to_string(dir.join("calls")).unwrap();
        assert!(
            calls.ends_with(&format!(
                "gfal-mkdir -p srm://se.example.org:8446/srm/managerv2?SFN=/data/crash\ngfal-save {to}\n"
            )),
            "{calls}"
        );
    }

    #[test]
    fn a_files_directory_is_the_url_up_to_its_last_slash_below_the_servers_root() {
        assert_eq!(parent_url("root://h:1094//data/a/f.txt"), Some("root://h:1094//data/a"));
        assert_eq!(parent_url("gsiftp://h/f.txt"), None);
        assert_eq!(parent_url("root://h//f.txt"), None);
        assert_eq!(
            parent_url("srm://h/srm/managerv2?SFN=/d/f"),
            Some("srm://h/srm/managerv2?SFN=/d")
        );
        assert_eq!(parent_url("srm://h/srm/managerv2?SFN=/f"), None);
        assert_eq!(parent_url("not a url"), None);
    }
}
