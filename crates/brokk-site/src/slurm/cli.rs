//! Slurm's command-line tools (`sbatch`, `squeue`, `scontrol`, `scancel`,
//! `sinfo`) as typed async calls, and the parsers of what they print.
//!
//! Every command runs with `SLURM_CONF` naming the cluster and `TZ=UTC`, so the
//! times Slurm prints and reads are UTC whatever the host's zone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    /// Job name.
    pub name: String,
}

/// A job's final record, from `scontrol show job` or the completion log.
#[derive(Debug, Clone, PartialEq)]
pub struct JobEnd {
    /// Slurm's job id.
    pub id: u64,
    /// Job name.
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

/// Splits a one-line Slurm record (`Key=Value Key=Value ...`) into its pairs.
/// Values holding spaces are not split correctly, which no field we read has.
pub fn key_values(line: &str) -> BTreeMap<&str, &str> {
    line.split_whitespace().filter_map(|w| w.split_once('=')).collect()
}

/// `ExitCode=3:0` -> 3; `0:9` (killed by signal 9) -> 137.
fn exit_code(v: &str) -> Option<i32> {
    let (code, signal) = v.split_once(':').unwrap_or((v, "0"));
    let code: i32 = code.parse().ok()?;
    let signal: i32 = signal.parse().unwrap_or(0);
    Some(if signal > 0 { 128 + signal } else { code })
}

/// One job record of `scontrol show job -o` or of the `jobcomp/filetxt` log.
pub fn parse_job_end(line: &str) -> Option<JobEnd> {
    let kv = key_values(line);
    Some(JobEnd {
        id: kv.get("JobId")?.parse().ok()?,
        name: kv.get("JobName").or_else(|| kv.get("Name")).unwrap_or(&"").to_string(),
        state: kv.get("JobState")?.to_string(),
        exit_code: kv.get("ExitCode").and_then(|v| exit_code(v)),
        start: kv.get("StartTime").and_then(|v| parse_time(v)),
        reason: kv.get("Reason").unwrap_or(&"").to_string(),
    })
}

/// The `squeue` format [`parse_queue`] reads; the name goes last so a `|` in
/// it cannot shift the other fields.
pub const QUEUE_FORMAT: &str = "%i|%T|%S|%e|%C|%v|%j";

/// `squeue -h -o QUEUE_FORMAT` output.
pub fn parse_queue(text: &str) -> Vec<QueueRow> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.splitn(7, '|').collect();
            if f.len() < 7 {
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
                name: f[6].to_string(),
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

impl SlurmCli {
    /// The tools for the cluster configured by `conf`; `bin` is where they
    /// are installed when not on `PATH`.
    pub fn new(conf: PathBuf, bin: Option<PathBuf>) -> SlurmCli {
        SlurmCli { conf, bin }
    }

    async fn run(&self, program: &str, args: &[String]) -> Result<String, SlurmError> {
        self.run_as(program, args, None).await
    }

    /// Runs `program` as `account` (uid, gid) when given: Slurm then records
    /// that user as the job's owner, as if they had submitted it themselves.
    async fn run_as(&self, program: &str, args: &[String], account: Option<(u32, u32)>) -> Result<String, SlurmError> {
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
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = match tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await {
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

    /// `sbatch --parsable SCRIPT` (its options are in the script), run as
    /// the job's account (uid, gid) when it has one: the new job's id.
    pub async fn sbatch(&self, script: &Path, account: Option<(u32, u32)>) -> Result<u64, SlurmError> {
        let args = ["--parsable".to_string(), script.display().to_string()];
        let out = self.run_as("sbatch", &args, account).await?;
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

    /// Jobs whose name is `name` (any state), oldest first.
    pub async fn jobs_named(&self, name: &str) -> Result<Vec<QueueRow>, SlurmError> {
        let args = ["-h", "--states=all", "--name", name, "-o", QUEUE_FORMAT].map(String::from);
        Ok(parse_queue(&self.run("squeue", &args).await?))
    }

    /// `scontrol show job -o ID`; `None` when slurmctld no longer has it.
    pub async fn show_job(&self, id: u64) -> Result<Option<JobEnd>, SlurmError> {
        let args = ["show", "job", "-o", &id.to_string()].map(String::from);
        match self.run("scontrol", &args).await {
            Ok(out) => Ok(out.lines().find_map(parse_job_end)),
            Err(SlurmError::Refused(m)) if m.contains("Invalid job id") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `scancel ID`.
    pub async fn cancel(&self, id: u64) -> Result<(), SlurmError> {
        self.run("scancel", &[id.to_string()]).await.map(drop)
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
        let text = "1|FAILED|2026-11-22T13:29:49|2026-11-22T13:29:49|3||brokk-x-1\n\
                    7_2|RUNNING|2026-11-22T13:00:00|2026-11-22T14:00:00|16|maint|a|b\n\
                    9|PENDING|N/A|N/A|2|(null)|x\n";
        let rows = parse_queue(text);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].state, "FAILED");
        assert_eq!(rows[0].start, Some(Time(1_795_354_189)));
        assert_eq!(rows[0].reservation, None);
        assert_eq!(rows[1].id, "7_2");
        assert_eq!(rows[1].name, "a|b");
        assert_eq!(rows[1].reservation.as_deref(), Some("maint"));
        assert_eq!(rows[1].end.unwrap().0 - rows[1].start.unwrap().0, 3600);
        assert_eq!(rows[2].start, None);
    }

    #[test]
    fn reads_job_records_and_exit_codes() {
        let line = "JobId=1 UserId=root(0) GroupId=root(0) Name=brokk-x-1 JobState=FAILED Partition=batch \
                    TimeLimit=2 StartTime=2026-11-22T13:29:49 EndTime=2026-11-22T13:29:50 NodeList=c1n1 \
                    DerivedExitCode=0:0 ExitCode=3:0 ";
        let j = parse_job_end(line).unwrap();
        assert_eq!((j.id, j.name.as_str(), j.state.as_str()), (1, "brokk-x-1", "FAILED"));
        assert_eq!(j.exit_code, Some(3));
        assert_eq!(j.start, Some(Time(1_795_354_189)));
        let killed = parse_job_end("JobId=4 JobName=x JobState=CANCELLED ExitCode=0:15").unwrap();
        assert_eq!(killed.exit_code, Some(143));
        assert_eq!(parse_job_end("JobState=RUNNING"), None);
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
