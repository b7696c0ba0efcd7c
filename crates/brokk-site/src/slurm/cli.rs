//! Slurm's command-line tools (`sbatch`, `squeue`, `scontrol`, `scancel`,
//! `sinfo`) as typed async calls, and the parsers of what they print.
//!
//! Every command runs with `SLURM_CONF` naming the cluster and `TZ=UTC`, so the
//! times Slurm prints and reads are UTC whatever the host's zone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration as StdDuration;

use brokk_model::Time;
use brokk_proto::wire::NodeView;
use tokio::process::Command;

/// A failed Slurm command.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SlurmError {
    /// slurmctld cannot be reached (down, unreachable or not answering).
    #[error("slurmctld unreachable: {0}")]
    Unavailable(String),
    /// Slurm answered and refused; the message is Slurm's.
    #[error("{0}")]
    Refused(String),
}

/// How long one command may take before slurmctld counts as unreachable.
const COMMAND_TIMEOUT: StdDuration = StdDuration::from_secs(30);

/// Slurm's messages meaning the controller did not answer.
const UNREACHABLE: &[&str] = &[
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
];

/// One cluster's tools.
#[derive(Debug, Clone)]
pub struct SlurmCli {
    conf: PathBuf,
    bin: Option<PathBuf>,
}

/// A job as `squeue` lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    /// Slurm's job id (`123`, or `123_4` for an array task).
    pub id: String,
    /// Job state (`PENDING`, `RUNNING`, `COMPLETED`, ...).
    pub state: String,
    /// Start: actual once running, expected (or none) while pending.
    pub start: Option<Time>,
    /// End: actual once ended, start plus time limit while running.
    pub end: Option<Time>,
    /// CPUs allocated or asked for.
    pub cpus: u32,
    /// The reservation it runs in, if any.
    pub reservation: Option<String>,
    /// The uid it runs as.
    pub uid: Option<u32>,
}

/// A job's record, from `squeue --json` or the completion log.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    /// Slurm's job id.
    pub id: u64,
    /// The uid it ran as.
    pub uid: Option<u32>,
    /// Its name (its first word, in the completion log): a hint of whose
    /// it may be, never who it is.
    pub name: String,
    /// Job state.
    pub state: String,
    /// Exit code of the batch script (128 + signal when killed by one).
    pub exit_code: Option<i32>,
    /// When it started.
    pub start: Option<Time>,
    /// Slurm's reason.
    pub reason: String,
}

/// A reservation as `scontrol show res` prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResRow {
    /// Reservation name.
    pub name: String,
    /// Start.
    pub start: Option<Time>,
    /// End.
    pub end: Option<Time>,
    /// CPUs (cores) it holds.
    pub cpus: u32,
}

/// What a Brokk reservation becomes in Slurm.
#[derive(Debug, Clone, PartialEq)]
pub struct ResSpec {
    /// Reservation name.
    pub name: String,
    /// Start.
    pub start: Time,
    /// End.
    pub end: Time,
    /// Cores.
    pub cpus: u32,
    /// The Slurm user allowed to run in it.
    pub user: String,
    /// Partition, when the agent fronts one partition.
    pub partition: Option<String>,
}

/// Slurm's time (`2026-11-22T13:29:49`, UTC by our `TZ`); `N/A`, `Unknown`,
/// `None` and anything else unreadable are `None`.
pub fn parse_time(s: &str) -> Option<Time> {
    chrono::NaiveDateTime::parse_from_str(s.trim(), "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|t| Time(t.and_utc().timestamp()))
}

/// Formats a time the way Slurm reads it.
pub fn format_time(t: Time) -> String {
    chrono::DateTime::from_timestamp(t.0, 0)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_else(|| "now".to_string())
}

/// Splits a one-line Slurm record (`Key=Value Key=Value ...`) into its pairs,
/// the first of each key winning: a job's name comes early in a record and
/// may hold spaces and `Key=` words of its owner's choosing, so a later
/// value never replaces an earlier one. (It can still hold a newline, and
/// so a whole record of its own: see [`parse_job_end`].)
pub fn key_values(line: &str) -> BTreeMap<&str, &str> {
    let mut kv = BTreeMap::new();
    for (k, v) in line.split_whitespace().filter_map(|w| w.split_once('=')) {
        kv.entry(k).or_insert(v);
    }
    kv
}

/// The uid of a `UserId=name(uid)` value.
fn uid_of(v: &str) -> Option<u32> {
    v.rsplit_once('(')?.1.strip_suffix(')')?.parse().ok()
}

/// `ExitCode=3:0` -> 3; `0:9` (killed by signal 9) -> 137.
fn exit_code(v: &str) -> Option<i32> {
    let (code, signal) = v.split_once(':').unwrap_or((v, "0"));
    let code: i32 = code.parse().ok()?;
    let signal: i32 = signal.parse().unwrap_or(0);
    Some(if signal > 0 { 128 + signal } else { code })
}

/// One record of the `jobcomp/filetxt` log. A job's name is written there
/// as it is, newlines included, so a line may be a record forged by any
/// user who can name a job: the agent takes these only for its own jobs
/// that slurmctld no longer knows (see `exec`), never over slurmctld.
pub fn parse_job_end(line: &str) -> Option<JobEnd> {
    let kv = key_values(line);
    Some(JobEnd {
        id: kv.get("JobId")?.parse().ok()?,
        uid: kv.get("UserId").and_then(|v| uid_of(v)),
        name: kv.get("Name").or_else(|| kv.get("JobName")).unwrap_or(&"").to_string(),
        state: kv.get("JobState")?.to_string(),
        exit_code: kv.get("ExitCode").and_then(|v| exit_code(v)),
        start: kv.get("StartTime").and_then(|v| parse_time(v)),
        reason: kv.get("Reason").unwrap_or(&"").to_string(),
    })
}

/// The `squeue` format [`parse_queue`] reads: no field a job's owner writes
/// (a name may hold `|` and newlines, and so forge a row), so every row is
/// slurmctld's; jobs are known by id.
pub const QUEUE_FORMAT: &str = "%i|%T|%S|%e|%C|%v|%U";

/// `squeue -h -o QUEUE_FORMAT` output.
pub fn parse_queue(text: &str) -> Vec<QueueRow> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('|').collect();
            if f.len() != 7 {
                return None;
            }
            let reservation = f[5].trim();
            Some(QueueRow {
                id: f[0].trim().to_string(),
                state: f[1].trim().to_string(),
                start: parse_time(f[2]),
                end: parse_time(f[3]),
                cpus: f[4].trim().parse().ok()?,
                reservation: (!reservation.is_empty() && reservation != "(null)").then(|| reservation.to_string()),
                uid: f[6].trim().parse().ok(),
            })
        })
        .collect()
}

/// `scontrol show res -o` output.
pub fn parse_reservations(text: &str) -> Vec<ResRow> {
    text.lines()
        .filter_map(|line| {
            let kv = key_values(line);
            let cpus = kv
                .get("TRES")
                .and_then(|t| t.split(',').find_map(|p| p.strip_prefix("cpu=")))
                .or_else(|| kv.get("CoreCnt").copied())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            Some(ResRow {
                name: kv.get("ReservationName")?.to_string(),
                start: kv.get("StartTime").and_then(|v| parse_time(v)),
                end: kv.get("EndTime").and_then(|v| parse_time(v)),
                cpus,
            })
        })
        .collect()
}

/// The `sinfo -N` format [`parse_nodes`] reads.
pub const NODE_FORMAT: &str = "%N|%t|%c|%C|%m|%O|%P";

/// `sinfo -h -N -o NODE_FORMAT` output, as the site API publishes nodes; a
/// node listed once per partition comes back once with all its partitions.
pub fn parse_nodes(text: &str) -> Vec<NodeView> {
    let mut nodes: Vec<NodeView> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 7 {
            continue;
        }
        let partition = f[6].trim().trim_end_matches('*').to_string();
        if let Some(n) = nodes.iter_mut().find(|n| n.name == f[0]) {
            if !n.partitions.contains(&partition) {
                n.partitions.push(partition);
            }
            continue;
        }
        let Ok(cpus) = f[2].trim().parse() else { continue };
        nodes.push(NodeView {
            name: f[0].to_string(),
            state: f[1].trim().to_string(),
            cpus,
            cpus_allocated: f[3].split('/').next().and_then(|a| a.parse().ok()).unwrap_or(0),
            memory_mib: f[4].trim().parse().unwrap_or(0),
            load: f[5].trim().parse().ok(),
            partitions: vec![partition],
        });
    }
    nodes
}

/// Reads `JobCompType` and `JobCompLoc` from a `slurm.conf`: the completion
/// log's path when it is `jobcomp/filetxt`.
pub fn completion_log(conf_text: &str) -> Option<PathBuf> {
    let mut filetxt = false;
    let mut loc = None;
    for line in conf_text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((k, v)) = line.split_once('=') else { continue };
        match k.trim().to_ascii_lowercase().as_str() {
            "jobcomptype" => filetxt = v.trim() == "jobcomp/filetxt",
            "jobcomploc" => loc = Some(PathBuf::from(v.trim())),
            _ => {}
        }
    }
    loc.filter(|_| filetxt)
}

/// `squeue --json`: what Brokk reads of it.
#[derive(serde::Deserialize)]
struct JsonListing {
    #[serde(default)]
    jobs: Vec<JsonJob>,
}

/// One job of `squeue --json` (data parser v0.0.38 and later).
#[derive(serde::Deserialize)]
struct JsonJob {
    job_id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    user_id: Option<u32>,
    #[serde(default)]
    job_state: serde_json::Value,
    #[serde(default)]
    exit_code: serde_json::Value,
    #[serde(default)]
    start_time: serde_json::Value,
    #[serde(default)]
    state_reason: String,
}

/// A number, or the `{"set": .., "number": ..}` later versions write.
fn number(v: &serde_json::Value) -> Option<i64> {
    v.as_i64().or_else(|| v.get("number")?.as_i64())
}

impl JsonJob {
    fn end(self) -> JobEnd {
        // A string, or a list of flags whose first is the state (23.02 on).
        let state = match &self.job_state {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(a) => a.first().and_then(|s| s.as_str()).unwrap_or("").to_string(),
            _ => String::new(),
        };
        // A wait status (v0.0.38), or `{return_code, signal}` later.
        let exit_code = match number(&self.exit_code) {
            Some(status) if status & 0x7f != 0 => Some(128 + (status & 0x7f) as i32),
            Some(status) => Some((status >> 8) as i32),
            None => {
                let rc = number(self.exit_code.get("return_code").unwrap_or(&serde_json::Value::Null));
                let signal = self
                    .exit_code
                    .get("signal")
                    .and_then(|s| number(s.get("id").or_else(|| s.get("signal_id"))?));
                match signal.filter(|s| *s > 0) {
                    Some(s) => Some(128 + s as i32),
                    None => rc.map(|c| c as i32),
                }
            }
        };
        JobEnd {
            id: self.job_id,
            uid: self.user_id,
            name: self.name,
            state,
            exit_code,
            start: number(&self.start_time).filter(|t| *t > 0).map(Time),
            reason: self.state_reason,
        }
    }
}

impl SlurmCli {
    /// The tools for the cluster configured by `conf`; `bin` is where they
    /// are installed when not on `PATH`.
    pub fn new(conf: PathBuf, bin: Option<PathBuf>) -> SlurmCli {
        SlurmCli { conf, bin }
    }

    async fn run(&self, program: &str, args: &[String]) -> Result<String, SlurmError> {
        self.run_as(program, args, None, None).await
    }

    /// Runs `program` as `account` (uid, gid) when given: Slurm then records
    /// that user as the job's owner, as if they had submitted it themselves.
    /// `input` is its standard input.
    async fn run_as(
        &self,
        program: &str,
        args: &[String],
        account: Option<(u32, u32)>,
        input: Option<&str>,
    ) -> Result<String, SlurmError> {
        let t = std::time::Instant::now();
        let r = self.execute(program, args, account, input).await;
        crate::metrics::BACKEND_COMMANDS.observe("slurm", program, r.is_ok(), t.elapsed());
        r
    }

    /// [`SlurmCli::run_as`]'s work, which it times.
    async fn execute(
        &self,
        program: &str,
        args: &[String],
        account: Option<(u32, u32)>,
        input: Option<&str>,
    ) -> Result<String, SlurmError> {
        let path = self.bin.as_ref().map_or(PathBuf::from(program), |b| b.join(program));
        let mut cmd = Command::new(&path);
        if let Some((uid, gid)) = account {
            cmd.uid(uid).gid(gid);
        }
        // sbatch hands its own environment to the job: only what Slurm's
        // commands need goes in, none of the agent's secrets.
        cmd.env_clear();
        if let Some(p) = std::env::var_os("PATH") {
            cmd.env("PATH", p);
        }
        cmd.args(args)
            .env("SLURM_CONF", &self.conf)
            .env("TZ", "UTC")
            .stdin(match input {
                Some(_) => std::process::Stdio::piped(),
                None => std::process::Stdio::null(),
            })
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let output = async {
            let mut child = cmd.spawn()?;
            if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
                tokio::io::AsyncWriteExt::write_all(&mut stdin, text.as_bytes()).await?;
            }
            child.wait_with_output().await
        };
        let out = match tokio::time::timeout(COMMAND_TIMEOUT, output).await {
            Err(_) => return Err(SlurmError::Unavailable(format!("{program} did not answer in 30 s"))),
            Ok(Err(e)) => return Err(SlurmError::Unavailable(format!("running {}: {e}", path.display()))),
            Ok(Ok(out)) => out,
        };
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let message = crate::launch::failure_message(program, &out);
        if UNREACHABLE.iter().any(|m| message.contains(m)) {
            Err(SlurmError::Unavailable(message))
        } else {
            Err(SlurmError::Refused(message))
        }
    }

    /// `sbatch --parsable OPTIONS` with the batch script on its standard
    /// input (no file the job could replace or link), run as the job's
    /// account (uid, gid) when it has one: the new job's id. Options given
    /// here win over the script's own.
    pub async fn sbatch(
        &self,
        script: &str,
        options: &[String],
        account: Option<(u32, u32)>,
    ) -> Result<u64, SlurmError> {
        let mut args = vec!["--parsable".to_string()];
        args.extend(options.iter().cloned());
        let out = self.run_as("sbatch", &args, account, Some(script)).await?;
        let id = out.trim().split(';').next().unwrap_or("");
        id.parse()
            .map_err(|_| SlurmError::Refused(format!("sbatch printed `{}`, not a job id", out.trim())))
    }

    /// Every job not yet ended (pending, running, suspended, completing);
    /// ended ones come from the completion log or [`SlurmCli::show_job`], so
    /// slurmctld does not pack every finished job it still keeps each time.
    pub async fn queue(&self) -> Result<Vec<QueueRow>, SlurmError> {
        let args = ["-h", "-o", QUEUE_FORMAT].map(String::from);
        Ok(parse_queue(&self.run("squeue", &args).await?))
    }

    /// Every job slurmctld still knows (any state), read structured: names
    /// there cannot pass for other fields.
    async fn jobs_json(&self) -> Result<Vec<JsonJob>, SlurmError> {
        let args = ["--json", "--states=all"].map(String::from);
        let out = self.run("squeue", &args).await?;
        let listing: JsonListing = serde_json::from_str(&out)
            .map_err(|e| SlurmError::Refused(format!("squeue --json printed what Brokk cannot read: {e}")))?;
        Ok(listing.jobs)
    }

    /// The ids of the jobs named `name` that `uid` runs (any state), oldest first.
    pub async fn jobs_named(&self, name: &str, uid: u32) -> Result<Vec<u64>, SlurmError> {
        let mut ids: Vec<u64> = self
            .jobs_json()
            .await?
            .into_iter()
            .filter(|j| j.name == name && j.user_id == Some(uid))
            .map(|j| j.job_id)
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Job `id` as slurmctld knows it; `None` once it no longer does.
    pub async fn show_job(&self, id: u64) -> Result<Option<JobEnd>, SlurmError> {
        Ok(self
            .jobs_json()
            .await?
            .into_iter()
            .find(|j| j.job_id == id)
            .map(JsonJob::end))
    }

    /// `scancel ID`.
    pub async fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        self.run("scancel", &[id.to_string()]).await.map(drop)
    }

    /// `scontrol uhold ID`: held as its owner holds a job (`JobHeldUser`),
    /// so that its owner may release it with Slurm's own tools too.
    pub async fn hold(&self, id: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &["uhold".into(), id.to_string()]).await.map(drop)
    }

    /// `scontrol release ID`.
    pub async fn release(&self, id: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &["release".into(), id.to_string()])
            .await
            .map(drop)
    }

    /// Every reservation slurmctld holds.
    pub async fn reservations(&self) -> Result<Vec<ResRow>, SlurmError> {
        let args = ["show", "res", "-o"].map(String::from);
        match self.run("scontrol", &args).await {
            Ok(out) => Ok(parse_reservations(&out)),
            Err(SlurmError::Refused(m)) if m.contains("No reservations") => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// One reservation, read back.
    pub async fn reservation(&self, name: &str) -> Result<Option<ResRow>, SlurmError> {
        Ok(self.reservations().await?.into_iter().find(|r| r.name == name))
    }

    /// `scontrol create reservation` for `spec` (core-based).
    pub async fn create_reservation(&self, spec: &ResSpec) -> Result<(), SlurmError> {
        let mut args: Vec<String> = vec![
            "create".into(),
            "reservation".into(),
            format!("ReservationName={}", spec.name),
            format!("StartTime={}", format_time(spec.start)),
            format!("EndTime={}", format_time(spec.end)),
            format!("CoreCnt={}", spec.cpus),
            format!("Users={}", spec.user),
        ];
        if let Some(p) = &spec.partition {
            args.push(format!("PartitionName={p}"));
        }
        self.run("scontrol", &args).await.map(drop)
    }

    /// `scontrol update` of a reservation's times (Slurm cannot change the
    /// core count of a core-based reservation); on failure Slurm keeps it as
    /// it was.
    pub async fn move_reservation(&self, name: &str, start: Time, end: Time) -> Result<(), SlurmError> {
        let args = vec![
            "update".into(),
            format!("ReservationName={name}"),
            format!("StartTime={}", format_time(start)),
            format!("EndTime={}", format_time(end)),
        ];
        self.run("scontrol", &args).await.map(drop)
    }

    /// `scontrol delete ReservationName=NAME`; gone already counts as done.
    pub async fn delete_reservation(&self, name: &str) -> Result<(), SlurmError> {
        let args = vec!["delete".into(), format!("ReservationName={name}")];
        match self.run("scontrol", &args).await {
            Err(SlurmError::Refused(m)) if m.contains("not found") || m.contains("Invalid") => Ok(()),
            other => other.map(drop),
        }
    }

    /// The cluster's nodes.
    pub async fn nodes(&self) -> Result<Vec<NodeView>, SlurmError> {
        let args = ["-h", "-N", "-o", NODE_FORMAT].map(String::from);
        Ok(parse_nodes(&self.run("sinfo", &args).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_squeue_rows() {
        let text = "1|FAILED|2026-11-22T13:29:49|2026-11-22T13:29:49|3||0\n\
                    7_2|RUNNING|2026-11-22T13:00:00|2026-11-22T14:00:00|16|maint|1001\n\
                    9|PENDING|N/A|N/A|2|(null)|1002\n\
                    9|PENDING|N/A|N/A|2|(null)|1002|extra\n";
        let rows = parse_queue(text);
        assert_eq!(rows.len(), 3, "a row with a field too many is no row of slurmctld's");
        assert_eq!(rows[0].state, "FAILED");
        assert_eq!((rows[0].start, rows[0].uid), (Some(Time(1_795_354_189)), Some(0)));
        assert_eq!(rows[0].reservation, None);
        assert_eq!(rows[1].id, "7_2");
        assert_eq!(rows[1].reservation.as_deref(), Some("maint"));
        assert_eq!(rows[1].end.unwrap().0 - rows[1].start.unwrap().0, 3600);
        assert_eq!(rows[2].start, None);
    }

    #[test]
    fn reads_job_records_and_exit_codes() {
        let line = "JobId=1 UserId=ann(1001) GroupId=ann(1001) Name=brokk-x-1 JobState=FAILED Partition=batch \
                    TimeLimit=2 StartTime=2026-11-22T13:29:49 EndTime=2026-11-22T13:29:50 NodeList=c1n1 \
                    DerivedExitCode=0:0 ExitCode=3:0 ";
        let j = parse_job_end(line).unwrap();
        assert_eq!((j.id, j.uid, j.state.as_str()), (1, Some(1001), "FAILED"));
        assert_eq!(j.exit_code, Some(3));
        assert_eq!(j.start, Some(Time(1_795_354_189)));
        let killed = parse_job_end("JobId=4 JobName=x JobState=CANCELLED ExitCode=0:15").unwrap();
        assert_eq!(killed.exit_code, Some(143));
        assert_eq!(parse_job_end("JobState=RUNNING"), None);
    }

    #[test]
    fn a_name_cannot_pass_for_the_fields_after_it() {
        // As slurmctld logged bob's job named to look like ann's end.
        let line = "JobId=900 UserId=bob(1002) GroupId=bob(1002) Name=x JobId=841 UserId=ann(1001) \
                    JobState=COMPLETED ExitCode=0:0 Name=brokk-a-5 JobState=RUNNING ExitCode=1:0";
        let j = parse_job_end(line).unwrap();
        assert_eq!((j.id, j.uid), (900, Some(1002)));
    }

    #[test]
    fn reads_squeue_json_ends() {
        // squeue --json of Slurm 22.05 (exit codes as wait statuses) and of
        // later versions (objects).
        let old = r#"{"jobs": [{"job_id": 28, "name": "a\nJobId=1", "user_id": 1001, "job_state": "FAILED",
            "exit_code": 768, "start_time": 1795643100, "state_reason": "NonZeroExitCode"},
            {"job_id": 29, "user_id": 0, "job_state": "FAILED", "exit_code": 9, "start_time": 0, "state_reason": "x"}]}"#;
        let jobs: Vec<JobEnd> = serde_json::from_str::<JsonListing>(old)
            .unwrap()
            .jobs
            .into_iter()
            .map(JsonJob::end)
            .collect();
        assert_eq!((jobs[0].id, jobs[0].uid, jobs[0].exit_code), (28, Some(1001), Some(3)));
        assert_eq!(
            (jobs[0].state.as_str(), jobs[0].start),
            ("FAILED", Some(Time(1_795_643_100)))
        );
        assert_eq!((jobs[1].exit_code, jobs[1].start), (Some(137), None));
        let new = r#"{"jobs": [{"job_id": 5, "user_id": 0, "job_state": ["CANCELLED"],
            "exit_code": {"status": ["SIGNALED"], "return_code": {"set": true, "number": 0}, "signal": {"id": {"set": true, "number": 15}}},
            "start_time": {"set": true, "number": 1795643100}}]}"#;
        let j = serde_json::from_str::<JsonListing>(new).unwrap().jobs.remove(0).end();
        assert_eq!(
            (j.state.as_str(), j.exit_code, j.start),
            ("CANCELLED", Some(143), Some(Time(1_795_643_100)))
        );
    }

    #[test]
    fn reads_reservations_and_nodes() {
        let text = "ReservationName=brokk-t1 StartTime=2026-11-22T14:29:51 EndTime=2026-11-22T14:39:51 \
                    Duration=00:10:00 Nodes=c1n[1-2] NodeCnt=2 CoreCnt=10 TRES=cpu=10 Users=root State=INACTIVE\n\
                    ReservationName=maint StartTime=2026-11-22T14:00:00 EndTime=2026-11-22T15:00:00 NodeCnt=1 \
                    TRES=cpu=8,node=1 State=ACTIVE";
        let r = parse_reservations(text);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].cpus, 10);
        assert_eq!(r[0].end.unwrap().0 - r[0].start.unwrap().0, 600);
        assert_eq!(r[1].cpus, 8);
        let nodes = parse_nodes("c1n1|mix|8|3/5/0/8|4000|0.15|batch*\nc1n1|mix|8|3/5/0/8|4000|0.15|debug\nc1n2|down*|8|0/0/8/8|4000|N/A|batch*\n");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].partitions, vec!["batch", "debug"]);
        assert_eq!((nodes[0].cpus_allocated, nodes[0].load), (3, Some(0.15)));
        assert_eq!((nodes[1].state.as_str(), nodes[1].load), ("down*", None));
    }

    #[test]
    fn finds_the_completion_log() {
        let conf = "JobCompType=jobcomp/filetxt # yes\njobcomploc = /var/log/slurm/jobcomp.log\n";
        assert_eq!(completion_log(conf), Some(PathBuf::from("/var/log/slurm/jobcomp.log")));
        assert_eq!(completion_log("JobCompType=jobcomp/none\nJobCompLoc=/x\n"), None);
        assert_eq!(format_time(Time(1_795_354_189)), "2026-11-22T13:29:49");
        assert_eq!(parse_time(&format_time(Time(0))), Some(Time(0)));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(text in "\\PC{0,300}") {
            let _ = parse_queue(&text);
            let _ = parse_reservations(&text);
            let _ = parse_nodes(&text);
            let _ = parse_job_end(&text);
            let _ = completion_log(&text);
            let _ = parse_time(&text);
        }

        #[test]
        fn times_round_trip(t in 0i64..10_000_000_000) {
            prop_assert_eq!(parse_time(&format_time(Time(t))), Some(Time(t)));
        }
    }
}
