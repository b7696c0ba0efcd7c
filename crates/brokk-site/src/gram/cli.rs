//! The Globus tools the backend drives: `globusrun` (submission, state,
//! kill, and short jobs whose standard output comes back through GASS) and
//! `grid-proxy-init`. GRAM speaks GSI, TLS with proxy certificates and
//! delegation, for which Rust has no client; the toolkit's own client is the
//! reference implementation, and Brokk calls it as it calls Slurm's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration as StdDuration;

use tokio::process::Command;

use crate::accounts::Account;

/// Why a call to the gatekeeper or a job manager failed.
#[derive(Debug, thiserror::Error)]
pub enum GramError {
    /// The certificate, key or proxy could not be read or used.
    #[error("GRAM credentials: {0}")]
    Credentials(String),
    /// The gatekeeper refused the credentials (GSI authentication or
    /// authorization, an unmapped subject).
    #[error("the GRAM gatekeeper refused the credentials: {0}")]
    Authentication(String),
    /// The gatekeeper or job manager could not be reached or did not answer
    /// in time.
    #[error("the GRAM gatekeeper is unreachable: {0}")]
    Unreachable(String),
    /// The gatekeeper or job manager answered with an error for this
    /// request (an RSL it does not accept, an executable that does not
    /// exist).
    #[error("the GRAM gatekeeper refused the request: {0}")]
    Refused(String),
}

impl crate::launch::Transient for GramError {
    fn is_transient(&self) -> bool {
        matches!(self, GramError::Unreachable(_))
    }
}

/// A job's state as its job manager reports it (`globusrun -status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GramState(pub String);

impl GramState {
    /// Whether the job manager says the job has ended. `globusrun -status`
    /// also prints DONE when it cannot reach the job manager at all, so an
    /// end is believed only with the exit status the job left behind.
    pub fn is_final(&self) -> bool {
        matches!(self.0.as_str(), "DONE" | "FAILED")
    }
    /// Whether the job runs (or ran).
    pub fn has_started(&self) -> bool {
        matches!(self.0.as_str(), "ACTIVE" | "STAGE_OUT" | "SUSPENDED" | "DONE")
    }
}

/// GRAM protocol error codes (`globus_gram_protocol_error_t`) that mean the
/// gatekeeper or job manager was not reached: the connection failed (12),
/// contacting the job manager failed (79).
const UNREACHABLE_CODES: [u32; 2] = [12, 79];

/// The GRAM protocol error code of refused credentials (GSI authentication,
/// or a subject the gatekeeper's grid-mapfile does not map).
const AUTHENTICATION_CODE: u32 = 7;

/// Tells a failed `globusrun`'s message apart by its GRAM error code, or
/// its words where it gives none.
fn classify(message: String) -> GramError {
    let code = message
        .rsplit("(error code ")
        .next()
        .filter(|_| message.contains("(error code "))
        .and_then(|tail| tail.split(')').next())
        .and_then(|c| c.trim().parse::<u32>().ok());
    match code {
        Some(c) if UNREACHABLE_CODES.contains(&c) => GramError::Unreachable(message),
        Some(AUTHENTICATION_CODE) => GramError::Authentication(message),
        Some(_) => GramError::Refused(message),
        None if message.contains("connecting to the job manager failed") || message.contains("did not answer") => {
            GramError::Unreachable(message)
        }
        None if ["GSS", "authentication", "authorization", "proxy"]
            .iter()
            .any(|w| message.contains(w)) =>
        {
            GramError::Authentication(message)
        }
        None => GramError::Refused(message),
    }
}

/// The command-line client of one gatekeeper, with one credential.
#[derive(Debug, Clone)]
pub struct GramClient {
    /// The resource manager contact, `host[:port]/service`.
    pub contact: String,
    ca_dir: PathBuf,
    hostname: Option<String>,
    port_range: Option<String>,
    timeout: StdDuration,
}

/// The outcome of one command: its standard output, or why it failed.
type Output = Result<Vec<u8>, GramError>;

impl GramClient {
    /// A client of `contact`, checking servers against `ca_dir`.
    pub fn new(
        contact: &str,
        ca_dir: &Path,
        hostname: Option<String>,
        port_range: Option<String>,
        timeout: StdDuration,
    ) -> GramClient {
        GramClient {
            contact: contact.to_string(),
            ca_dir: ca_dir.to_path_buf(),
            hostname,
            port_range,
            timeout,
        }
    }

    /// Runs a Globus tool as `account` (the agent's own when `None`) with
    /// `proxy` as its credential and nothing else of the agent's
    /// environment.
    async fn run(&self, program: &str, args: &[&str], proxy: &Path, account: Option<Account>) -> Output {
        let t = std::time::Instant::now();
        let r = self.execute(program, args, proxy, account).await;
        crate::metrics::BACKEND_COMMANDS.observe("gram", program, r.is_ok(), t.elapsed());
        r
    }

    /// [`GramClient::run`]'s work, which it times.
    async fn execute(&self, program: &str, args: &[&str], proxy: &Path, account: Option<Account>) -> Output {
        let mut cmd = Command::new(program);
        if let Some(a) = account {
            cmd.uid(a.uid).gid(a.gid);
        }
        cmd.env_clear();
        if let Some(p) = std::env::var_os("PATH") {
            cmd.env("PATH", p);
        }
        // Root's default credential is the host certificate: the proxy is
        // named as the certificate and key too, so it is the one used.
        cmd.env("X509_USER_PROXY", proxy)
            .env("X509_USER_CERT", proxy)
            .env("X509_USER_KEY", proxy)
            .env("X509_CERT_DIR", &self.ca_dir)
            .env("TZ", "UTC");
        if let Some(h) = &self.hostname {
            cmd.env("GLOBUS_HOSTNAME", h);
        }
        if let Some(r) = &self.port_range {
            cmd.env("GLOBUS_TCP_PORT_RANGE", r);
        }
        cmd.args(args).current_dir("/").stdin(Stdio::null()).kill_on_drop(true);
        let out = match tokio::time::timeout(self.timeout, cmd.output()).await {
            Err(_) => {
                return Err(GramError::Unreachable(format!(
                    "{program} did not answer in {} s",
                    self.timeout.as_secs()
                )))
            }
            Ok(Err(e)) => return Err(GramError::Unreachable(format!("running {program}: {e}"))),
            Ok(Ok(out)) => out,
        };
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(classify(crate::launch::failure_message(program, &out)))
    }

    /// Makes a proxy from `cert` and `key` at `out`, valid for `hours`,
    /// once the certificate is verified against the CA directory (so a
    /// certificate no trusted CA signed is refused here, saying so).
    pub async fn make_proxy(&self, cert: &Path, key: &Path, out: &Path, hours: u32) -> Result<(), GramError> {
        let (c, k, o) = (
            cert.display().to_string(),
            key.display().to_string(),
            out.display().to_string(),
        );
        let hours = hours.to_string();
        let args = [
            "-q", "-verify", "-debug", "-cert", &c, "-key", &k, "-out", &o, "-hours", &hours,
        ];
        // grid-proxy-init reads the key itself; no proxy is needed yet.
        match self.run("grid-proxy-init", &args, cert, None).await {
            Ok(_) => Ok(()),
            Err(e) => {
                // Its -debug output names the files first; the reason follows.
                let text = e.to_string();
                let reason = text.find("Error:").map_or(text.as_str(), |at| &text[at + 6..]).trim();
                Err(GramError::Credentials(format!(
                    "grid-proxy-init could not make a proxy from {c}: {reason}"
                )))
            }
        }
    }

    /// Authenticates at the gatekeeper without submitting (`globusrun -a`).
    pub async fn ping(&self, proxy: &Path) -> Result<(), GramError> {
        let out = self.run("globusrun", &["-a", "-r", &self.contact], proxy, None).await;
        match out {
            Ok(text) if String::from_utf8_lossy(&text).contains("successful") => Ok(()),
            Ok(text) => Err(classify(String::from_utf8_lossy(&text).trim().to_string())),
            Err(e) => Err(e),
        }
    }

    /// Submits `rsl` and returns the job contact once the job manager has
    /// it (`globusrun -b`). With `serve_files` globusrun serves the
    /// submitter's files over GASS until the job's stage-in is done, so the
    /// RSL may name them as `$(GLOBUSRUN_GASS_URL) # "/path"`; run as
    /// `account`, it serves only what that account may read.
    pub async fn submit(&self, rsl: &str, serve_files: bool, proxy: &Path, account: Option<Account>) -> Output {
        let mut args = vec!["-q", "-b"];
        if serve_files {
            args.push("-s");
        }
        args.extend(["-r", &self.contact, rsl]);
        self.run("globusrun", &args, proxy, account).await
    }

    /// Runs `rsl` to its end and returns what it wrote to standard output,
    /// which globusrun receives over GASS.
    pub async fn output_of(&self, rsl: &str, proxy: &Path, account: Option<Account>) -> Output {
        self.run("globusrun", &["-q", "-o", "-r", &self.contact, rsl], proxy, account)
            .await
    }

    /// The job's state (`globusrun -status`).
    pub async fn status(&self, job: &str, proxy: &Path, account: Option<Account>) -> Result<GramState, GramError> {
        let out = self.run("globusrun", &["-status", job], proxy, account).await?;
        let text = String::from_utf8_lossy(&out);
        match text.split_whitespace().last() {
            Some(state) => Ok(GramState(state.to_string())),
            None => Err(GramError::Unreachable(format!(
                "globusrun -status {job} printed nothing"
            ))),
        }
    }

    /// Kills the job (`globusrun -k`).
    pub async fn kill(&self, job: &str, proxy: &Path, account: Option<Account>) -> Result<(), GramError> {
        self.run("globusrun", &["-k", job], proxy, account).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::Transient;

    #[test]
    fn messages_are_told_apart_by_their_code() {
        let c = |m: &str| classify(m.to_string());
        assert!(matches!(
            c("GRAM Job submission failed because the connection to the server failed (check host and port) (error code 12)"),
            GramError::Unreachable(_)
        ));
        assert!(matches!(
            c("GRAM Job submission failed because authentication with the remote server failed (error code 7)"),
            GramError::Authentication(_)
        ));
        assert!(matches!(
            c("GRAM Job submission failed because the RSL attribute \"bogus\" is not supported by the LRM adapter (error code 1)"),
            GramError::Refused(_)
        ));
        assert!(matches!(
            c("GRAM Authentication test failure: connecting to the job manager failed.  Possible reasons: ..."),
            GramError::Unreachable(_)
        ));
        assert!(matches!(
            c("GRAM Authentication test failure: globus_xio_gsi: gss_wrap failed. GSS failure:"),
            GramError::Authentication(_)
        ));
        assert!(c("(error code 12)").is_transient());
        assert!(!c("(error code 5)").is_transient());
    }

    #[test]
    fn states() {
        assert!(GramState("DONE".into()).is_final());
        assert!(GramState("FAILED".into()).is_final());
        assert!(!GramState("ACTIVE".into()).is_final());
        assert!(GramState("ACTIVE".into()).has_started());
        assert!(!GramState("PENDING".into()).has_started());
    }
}
