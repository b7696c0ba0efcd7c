//! The Slurm backend: the agent fronts a Slurm cluster. Jobs become batch
//! scripts given to `sbatch`; Brokk's reservations become core-based Slurm
//! reservations made with `scontrol`; a poller reads the queue, the
//! reservations, the completion log and the nodes, keeps the agent's planner
//! mirroring what occupies the cluster that Brokk did not put there, and
//! marks the site unavailable while slurmctld does not answer.

pub mod bundle;
pub mod cli;
pub mod exec;

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use brokk_model::Time;
use brokk_proto::wire::ClusterView;
use tokio::sync::watch;

use crate::config::SlurmConfig;
use crate::launch::Progress;
use brokk_core::{JobId, Reservation, ReservationId};
use brokk_proto::wall_clock as now;
use cli::{JobEnd, QueueRow, ResRow, ResSpec, SlurmCli, SlurmError};

pub use brokk_core::Occupant;

/// One reading of the queue: every job slurmctld lists, by Slurm id (a
/// runner follows the id its own `sbatch` returned, never a name).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The jobs slurmctld lists, by Slurm job id (array tasks left out).
    pub jobs: HashMap<u64, QueueRow>,
    /// Counts readings, so a runner can tell a new one from the last.
    pub reading: u64,
}

/// The backend's shared state.
#[derive(Debug)]
pub struct Slurm {
    /// The cluster's tools.
    pub cli: SlurmCli,
    /// The settings.
    pub config: SlurmConfig,
    /// The Slurm user jobs and reservations are for where no account is
    /// mapped.
    pub user: String,
    /// Brokk users' local accounts (the site's `[accounts]`): a
    /// reservation admits its owner's account.
    accounts: std::collections::BTreeMap<String, String>,
    /// Who may speak for whom: a delegate's reservation (a broker's, made
    /// for its users' jobs) admits the accounts of the users it may speak for.
    delegates: crate::delegates::Delegates,
    /// Names of Brokk's jobs and reservations on this cluster start with it.
    prefix: String,
    /// Why slurmctld does not answer; `None` while it does.
    down: Mutex<Option<String>>,
    snapshot: watch::Sender<Arc<Snapshot>>,
    /// Final records read from the completion log, by Slurm id, until their
    /// runner takes them (and the reading they came in).
    ended: Mutex<HashMap<u64, (JobEnd, u64)>>,
    /// The Slurm jobs Brokk's runners follow (Brokk's, whatever their
    /// names), each with the Brokk job it is: a controller that lost its
    /// state hands the same ids out again, and only the agent's own
    /// `sbatch` answers say which job an id is now.
    followed: Mutex<HashMap<u64, JobId>>,
    completion_log: Option<PathBuf>,
    log_offset: AtomicU64,
    cluster: Mutex<ClusterView>,
    /// Reservations Brokk did not make, as last read.
    foreign_reservations: Mutex<Vec<Occupant>>,
    /// Since when each node that takes no new work has been seen so, so
    /// that its occupant stays the same from reading to reading.
    lost_since: Mutex<HashMap<String, Time>>,
    /// Bounds the `sbatch` commands running at once.
    pub submitters: tokio::sync::Semaphore,
    /// Whether others' running jobs are mirrored into the planner: not
    /// behind an ARC CE, whose own jobs (Brokk's among them) reach Slurm
    /// under names A-REX chooses and would be counted twice.
    mirrors_jobs: bool,
}

/// Job states after which Slurm runs nothing more of the job.
pub fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "BOOT_FAIL"
            | "OUT_OF_MEMORY"
            | "DEADLINE"
            | "PREEMPTED"
            | "SPECIAL_EXIT"
            | "REVOKED"
    )
}

/// The end a completion-log line records, if it records one: a launch that
/// failed is logged too, as PENDING, but Slurm requeued that job.
fn completed(line: &str) -> Option<JobEnd> {
    cli::parse_job_end(line).filter(|e| is_final(&e.state))
}

/// The Slurm users a reservation of `owner` admits (`Users=`): the owner's
/// account; a delegate's (a broker reserving for its users' jobs), the
/// accounts of the users it may speak for; `fallback` (the agent's user)
/// where no account is mapped.
fn reservation_users(
    accounts: &std::collections::BTreeMap<String, String>,
    delegates: &crate::delegates::Delegates,
    fallback: &str,
    owner: &str,
) -> String {
    if let Some(account) = accounts.get(owner) {
        return account.clone();
    }
    let mut spoken_for: Vec<&str> = accounts
        .iter()
        .filter(|(user, _)| delegates.contains(owner) && delegates.may_speak_for(owner, user).is_ok())
        .map(|(_, account)| account.as_str())
        .collect();
    spoken_for.sort_unstable();
    spoken_for.dedup();
    match spoken_for.is_empty() {
        true => fallback.to_string(),
        false => spoken_for.join(","),
    }
}

/// Whether a node in `state` (sinfo's compact `%t`) takes no new work:
/// down, drained or draining, failed or failing, or unknown to slurmctld.
fn node_unusable(state: &str) -> bool {
    let s = state.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
    ["down", "drain", "drng", "fail", "inval", "unk"]
        .iter()
        .any(|p| s.starts_with(p))
}

/// The cluster's health as GLUE 2's `HealthState` says it, from its
/// nodes: `critical` when none takes new work (every node down or
/// drained: a broker reads it as the site failing and rescues what it
/// booked there), `warning` when some do not, `ok` when all do; `None`
/// before the nodes are read.
pub fn health(nodes: &[brokk_proto::wire::NodeView]) -> Option<&'static str> {
    let down = nodes.iter().filter(|n| node_unusable(&n.state)).count();
    match down {
        _ if nodes.is_empty() => None,
        0 => Some("ok"),
        d if d == nodes.len() => Some("critical"),
        _ => Some("warning"),
    }
}

/// The idle CPUs of each node that takes no new work, as occupants
/// (`node:NAME`) from when it was first seen so (`since`, kept up to date
/// here; `now` for a node newly lost) until it is seen back: the same
/// occupant from reading to reading, not booked again at each.
fn lost_nodes(nodes: &[brokk_proto::wire::NodeView], since: &mut HashMap<String, Time>, now: Time) -> Vec<Occupant> {
    since.retain(|name, _| nodes.iter().any(|n| &n.name == name && node_unusable(&n.state)));
    nodes
        .iter()
        .filter(|n| node_unusable(&n.state))
        .filter_map(|n| {
            let from = *since.entry(n.name.clone()).or_insert(now);
            (n.cpus > n.cpus_allocated).then(|| Occupant {
                key: format!("node:{}", n.name),
                start: from,
                end: Occupant::UNTIL_GONE,
                cpus: n.cpus - n.cpus_allocated,
            })
        })
        .collect()
}

/// Job states in which a job holds CPUs.
fn holds_cpus(state: &str) -> bool {
    matches!(
        state,
        "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" | "STAGE_OUT" | "SIGNALING"
    )
}

impl Slurm {
    /// The backend for `site` as configured; reads the cluster's nodes once so
    /// the agent knows its size (an error when slurmctld does not answer).
    pub async fn connect(site: &str, config: SlurmConfig) -> Result<(Slurm, u32), SlurmError> {
        let conf_text = std::fs::read_to_string(&config.conf)
            .map_err(|e| SlurmError::Refused(format!("{}: {e}", config.conf.display())))?;
        let slurm = Slurm::new(site, config, &conf_text);
        let cpus = slurm.read_nodes().await?;
        Ok((slurm, cpus))
    }

    /// The backend before it has read anything from the cluster.
    fn new(site: &str, config: SlurmConfig, conf_text: &str) -> Slurm {
        let cli = SlurmCli::new(config.conf.clone(), config.bin_dir.clone());
        let user = match &config.user {
            Some(u) => u.clone(),
            None => nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map_or_else(|| "root".to_string(), |u| u.name),
        };
        Slurm {
            cli,
            user,
            accounts: Default::default(),
            delegates: Default::default(),
            prefix: format!("brokk-{site}-"),
            down: Mutex::new(None),
            snapshot: watch::channel(Arc::new(Snapshot::default())).0,
            ended: Mutex::new(HashMap::new()),
            followed: Mutex::new(Default::default()),
            completion_log: cli::completion_log(conf_text),
            log_offset: AtomicU64::new(0),
            foreign_reservations: Mutex::new(Vec::new()),
            lost_since: Mutex::new(HashMap::new()),
            submitters: tokio::sync::Semaphore::new(config.submitters),
            mirrors_jobs: true,
            cluster: Mutex::new(ClusterView {
                manager: "slurm".into(),
                ..ClusterView::default()
            }),
            config,
        }
    }

    /// The cluster with the site's account map: each reservation is made
    /// for its owner's account (the owner's own jobs run as it), not for
    /// the agent's user.
    pub fn with_accounts(
        self,
        accounts: std::collections::BTreeMap<String, String>,
        delegates: crate::delegates::Delegates,
    ) -> Slurm {
        Slurm {
            accounts,
            delegates,
            ..self
        }
    }

    /// The cluster as the reservations behind an ARC CE: reservations
    /// Brokk did not make are mirrored into the planner, jobs are not.
    pub fn reservations_only(self) -> Slurm {
        Slurm {
            mirrors_jobs: false,
            ..self
        }
    }

    /// The Slurm name of Brokk job `id`.
    pub fn job_name(&self, id: JobId) -> String {
        format!("{}{id}", self.prefix)
    }

    /// The Slurm name of Brokk reservation `id`.
    pub fn reservation_name(&self, id: u64) -> String {
        format!("{}r{id}", self.prefix)
    }

    /// Whether a completion-log name may be one of Brokk's: a hint for
    /// what to keep, never who a job is.
    fn named_as_own(&self, name: &str) -> bool {
        name.strip_prefix(&self.prefix)
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
    }

    /// Slurm job `id` is Brokk job `job`, as `sbatch` has just answered:
    /// a job that held the id before was lost with the controller's state
    /// (its runner sees it is no longer followed), and a completion record
    /// kept for the id was that job's, not this one's.
    pub fn claim(&self, id: u64, job: JobId) {
        if let Ok(mut f) = self.followed.lock() {
            f.insert(id, job);
        }
        if let Ok(mut ended) = self.ended.lock() {
            ended.remove(&id);
        }
    }

    /// Slurm job `id` is Brokk job `job`, as the agent recorded before it
    /// restarted, unless a fresh `sbatch` answer has already given the id
    /// to another job.
    pub fn follow(&self, id: u64, job: JobId) {
        if let Ok(mut f) = self.followed.lock() {
            f.entry(id).or_insert(job);
        }
    }

    /// Whether Slurm job `id` is still Brokk job `job`.
    pub fn follows(&self, id: u64, job: JobId) -> bool {
        self.followed.lock().is_ok_and(|f| f.get(&id) == Some(&job))
    }

    /// Brokk job `job` no longer follows Slurm job `id`.
    pub fn unfollow(&self, id: u64, job: JobId) {
        if let Ok(mut f) = self.followed.lock() {
            if f.get(&id) == Some(&job) {
                f.remove(&id);
            }
        }
    }

    fn is_followed(&self, id: u64) -> bool {
        self.followed.lock().is_ok_and(|f| f.contains_key(&id))
    }

    /// The Brokk reservation id of an own Slurm reservation name.
    pub fn own_reservation(&self, name: &str) -> Option<u64> {
        name.strip_prefix(&self.prefix)?.strip_prefix('r')?.parse().ok()
    }

    /// Why slurmctld did not answer the last command or reading; `None`
    /// while it answers.
    pub fn down(&self) -> Option<String> {
        self.down.lock().ok().and_then(|w| w.clone())
    }

    fn set_down(&self, why: Option<String>) {
        let Ok(mut down) = self.down.lock() else { return };
        match (&*down, &why) {
            (None, Some(w)) => tracing::warn!("Slurm unavailable: {w}"),
            (Some(_), None) => tracing::info!("Slurm reachable"),
            _ => {}
        }
        *down = why;
    }

    /// Notes a command's failure: an unreachable controller makes the site
    /// unavailable until the next good reading.
    pub fn note(&self, e: &SlurmError) {
        if let SlurmError::Unavailable(m) = e {
            self.set_down(Some(m.clone()));
        }
    }

    /// The cluster as last read.
    pub fn cluster(&self) -> Option<ClusterView> {
        self.cluster.lock().ok().map(|c| c.clone())
    }

    /// Follows the queue readings.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshot.subscribe()
    }

    /// Takes the completion-log record of Slurm job `id` run as `uid`, if
    /// one was read (the first for that id: a forged line comes after the
    /// job it names has ended, never before).
    pub fn take_ended(&self, id: u64, uid: u32) -> Option<JobEnd> {
        let mut ended = self.ended.lock().ok()?;
        ended.remove(&id).map(|(e, _)| e).filter(|e| e.uid == Some(uid))
    }

    /// Reads the nodes into the cluster view; returns their CPUs.
    async fn read_nodes(&self) -> Result<u32, SlurmError> {
        let mut nodes = self.cli.nodes().await?;
        if let Some(p) = &self.config.partition {
            nodes.retain(|n| n.partitions.contains(p));
        }
        let cpus = nodes.iter().map(|n| n.cpus).sum();
        if let Ok(mut c) = self.cluster.lock() {
            let mut parts: Vec<String> = nodes.iter().flat_map(|n| n.partitions.clone()).collect();
            parts.sort();
            parts.dedup();
            c.partitions = parts;
            c.cpus = cpus;
            c.cpus_allocated = nodes.iter().map(|n| n.cpus_allocated).sum();
            c.nodes = nodes;
        }
        Ok(cpus)
    }

    /// Reads the completion log's new lines and keeps Brokk's jobs' records.
    fn read_completions(&self, reading: u64) {
        let Some(path) = &self.completion_log else { return };
        let Ok(mut f) = std::fs::File::open(path) else { return };
        let mut offset = self.log_offset.load(Ordering::Acquire);
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < offset {
            // Rotated: read the new file from its start.
            offset = 0;
        }
        if f.seek(SeekFrom::Start(offset)).is_err() {
            return;
        }
        let mut text = String::new();
        if f.read_to_string(&mut text).is_err() {
            return;
        }
        // Only whole lines: a line being written is read next time.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.log_offset.store(offset + whole as u64, Ordering::Release);
        let Ok(mut ended) = self.ended.lock() else { return };
        for line in text[..whole].lines() {
            let Some(e) = completed(line) else { continue };
            let keep = self.is_followed(e.id) || self.named_as_own(&e.name);
            if keep {
                ended.entry(e.id).or_insert((e, reading));
            }
        }
        // Runners take their records within a reading or two; what nobody
        // took in 10,000 readings belongs to jobs that ended long ago.
        ended.retain(|_, (_, at)| reading.saturating_sub(*at) < 10_000);
    }

    /// One reading: the queue (whose answer decides availability), the
    /// completion log's new lines, and now and then the reservations and the
    /// nodes; the planner's mirror and the runners' snapshot follow.
    async fn read<P: Progress>(&self, agent: &P, reading: u64) -> Result<(), SlurmError> {
        let rows = self.cli.queue().await?;
        self.read_completions(reading);
        // Reservations and nodes change far less often than jobs: every
        // fourth and eighth reading, which keeps the load on slurmctld low.
        let reservations = match reading % 4 == 1 {
            true => Some(self.cli.reservations().await?),
            false => None,
        };
        if reading % 8 == 1 {
            self.read_nodes().await?;
        }
        let t = now();
        let mut occupants = Vec::new();
        let mut jobs = HashMap::new();
        let (mut running, mut pending) = (0, 0);
        for row in rows {
            if holds_cpus(&row.state) {
                running += 1;
            } else if row.state == "PENDING" {
                pending += 1;
            }
            let id = row.id.parse::<u64>().ok();
            let own = id.is_some_and(|id| self.is_followed(id));
            // A foreign job in a reservation is covered by that reservation.
            if !own && self.mirrors_jobs && holds_cpus(&row.state) && row.reservation.is_none() {
                occupants.push(Occupant {
                    key: format!("job:{}", row.id),
                    start: row.start.unwrap_or(t).min(t),
                    end: row.end.filter(|e| *e > t).unwrap_or(Occupant::UNTIL_GONE),
                    cpus: row.cpus,
                });
            }
            if let Some(id) = id {
                jobs.insert(id, row);
            }
        }
        let mut own = Vec::new();
        if let Some(reservations) = &reservations {
            let mut foreign = Vec::new();
            for r in reservations {
                match self.own_reservation(&r.name) {
                    Some(id) => own.push((id, r.clone())),
                    None => {
                        if let (Some(start), Some(end)) = (r.start, r.end) {
                            if r.cpus > 0 {
                                foreign.push(Occupant {
                                    key: format!("res:{}", r.name),
                                    start,
                                    end,
                                    cpus: r.cpus,
                                });
                            }
                        }
                    }
                }
            }
            if let Ok(mut last) = self.foreign_reservations.lock() {
                *last = foreign;
            }
        }
        // Between readings of the reservations, the last reading stands.
        if let Ok(last) = self.foreign_reservations.lock() {
            occupants.extend(last.iter().filter(|o| o.end > t).cloned());
        }
        // A node that takes no new work is lost from now on: its idle CPUs
        // are an occupant until it is back (those its jobs hold are theirs,
        // mirrored with them, and join it as the jobs end). Where the site
        // had booked that share, the reservations that no longer fit are
        // published as endangered, for their brokers to move.
        if let (Ok(c), Ok(mut since)) = (self.cluster.lock(), self.lost_since.lock()) {
            occupants.extend(lost_nodes(&c.nodes, &mut since, t));
        }
        if let Ok(mut c) = self.cluster.lock() {
            c.running_jobs = running;
            c.pending_jobs = pending;
            if let Some(r) = &reservations {
                c.reservations = r.len() as u32;
            }
        }
        self.set_down(None);
        agent.mirror(occupants).await;
        self.tidy_reservations(agent, own).await;
        if reading % 4 == 1 {
            self.tidy_jobs(agent, &jobs).await;
        }
        self.snapshot.send_replace(Arc::new(Snapshot { jobs, reading }));
        Ok(())
    }

    /// Deletes Slurm reservations named as Brokk's that the agent no longer
    /// holds (left by a crash between `scontrol` and the database, or by a
    /// delete that failed while slurmctld was down).
    async fn tidy_reservations<P: Progress>(&self, agent: &P, own: Vec<(u64, ResRow)>) {
        for (id, r) in own {
            if !agent.holds_reservation(id).await {
                match self.cli.delete_reservation(&r.name).await {
                    Ok(()) => {
                        tracing::info!(reservation = %r.name, "deleted a Slurm reservation Brokk no longer holds")
                    }
                    Err(e) => tracing::warn!(reservation = %r.name, "deleting a stale reservation: {e}"),
                }
            }
        }
    }

    /// Cancels Slurm jobs that Brokk submitted for a job that has ended: a
    /// slurmctld that restarted from an old state brings back jobs that
    /// already ran (their run-once guard would stop them, but they would
    /// hold the queue and nodes meanwhile). Known by the ids Brokk recorded,
    /// not by names, which any job can take; an id a runner follows is its
    /// job's, whichever ended job held it before the controller lost it.
    async fn tidy_jobs<P: Progress>(&self, agent: &P, jobs: &HashMap<u64, QueueRow>) {
        let live: Vec<u64> = jobs
            .iter()
            .filter(|(id, row)| !is_final(&row.state) && !self.is_followed(**id))
            .map(|(id, _)| *id)
            .collect();
        for (id, slurm_id) in agent.ended_as(live).await {
            match self.cli.cancel(slurm_id).await {
                Ok(()) => tracing::info!(job = %id, "cancelled Slurm job {slurm_id}: its Brokk job has ended"),
                Err(e) => tracing::warn!(job = %id, "cancelling leftover Slurm job {slurm_id}: {e}"),
            }
        }
    }

    /// Reads the cluster every `poll_ms` until the process ends.
    pub async fn poll<P: Progress>(self: Arc<Self>, agent: P) {
        let every = StdDuration::from_millis(self.config.poll_ms);
        let mut reading = 0u64;
        loop {
            reading += 1;
            if let Err(e) = self.read(&agent, reading).await {
                match &e {
                    SlurmError::Unavailable(_) => self.note(&e),
                    SlurmError::Refused(m) => tracing::warn!("reading the Slurm queue: {m}"),
                }
            }
            tokio::time::sleep(every).await;
        }
    }

    fn res_spec(&self, r: &Reservation) -> ResSpec {
        ResSpec {
            name: self.reservation_name(r.id.0),
            start: r.start,
            end: r.end,
            cpus: r.amount,
            user: reservation_users(&self.accounts, &self.delegates, &self.user, &r.owner),
            partition: self.config.partition.clone(),
        }
    }

    /// Makes reservation `r` in Slurm and reads it back: Slurm has been seen
    /// to grant fewer nodes than asked without an error, so a grant that is
    /// not what was asked is undone and refused.
    pub async fn create_reservation_checked(&self, r: &Reservation) -> Result<(), SlurmError> {
        let slurm = self;
        let spec = self.res_spec(r);
        slurm.cli.create_reservation(&spec).await?;
        let back = slurm.cli.reservation(&spec.name).await;
        let problem = match &back {
            Ok(Some(row)) if row.cpus >= spec.cpus && row.end == Some(spec.end) => None,
            Ok(Some(row)) => Some(format!(
                "Slurm made {} with {} cores until {:?} instead of {} until {}",
                spec.name, row.cpus, row.end, spec.cpus, spec.end.0
            )),
            Ok(None) => Some(format!("Slurm does not show {} after creating it", spec.name)),
            Err(e) => Some(e.to_string()),
        };
        match problem {
            None => Ok(()),
            Some(why) => {
                if let Err(e) = slurm.cli.delete_reservation(&spec.name).await {
                    tracing::warn!(reservation = %spec.name, "undoing a short grant: {e}");
                }
                match back {
                    Err(e @ SlurmError::Unavailable(_)) => Err(e),
                    _ => Err(SlurmError::Refused(why)),
                }
            }
        }
    }

    /// Changes the Slurm reservation from `old` to `new`. Slurm moves
    /// core-based reservations in time but cannot change their core count:
    /// then it is made again, and the old one put back if the new one does
    /// not fit.
    pub async fn change_reservation(&self, old: &Reservation, new: &Reservation) -> Result<(), SlurmError> {
        let slurm = self;
        let name = slurm.reservation_name(old.id.0);
        if new.amount == old.amount {
            return slurm.cli.move_reservation(&name, new.start, new.end).await;
        }
        slurm.cli.delete_reservation(&name).await?;
        match self.create_reservation_checked(new).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Err(back) = slurm.cli.create_reservation(&self.res_spec(old)).await {
                    tracing::error!(reservation = %name, "putting back the old reservation failed: {back}");
                }
                Err(e)
            }
        }
    }

    /// Deletes the Slurm reservations of `ids`; what fails now, the poller
    /// deletes later.
    pub async fn delete_reservations(&self, ids: &[ReservationId]) {
        let slurm = self;
        for id in ids {
            if let Err(e) = slurm.cli.delete_reservation(&slurm.reservation_name(id.0)).await {
                slurm.note(&e);
                tracing::warn!(reservation = id.0, "deleting the Slurm reservation: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_whose_nodes_all_take_no_work_is_critical() {
        let nodes = |states: &[&str]| {
            let text: String = states
                .iter()
                .enumerate()
                .map(|(k, s)| format!("n{k}|{s}|8|0/8/0/8|4000|0.00|batch\n"))
                .collect();
            cli::parse_nodes(&text)
        };
        assert_eq!(health(&nodes(&["idle", "mix", "alloc"])), Some("ok"));
        assert_eq!(health(&nodes(&["idle", "drain"])), Some("warning"));
        assert_eq!(health(&nodes(&["down*", "drng", "fail"])), Some("critical"));
        assert_eq!(health(&nodes(&["drained", "down~"])), Some("critical"));
        assert_eq!(health(&[]), None);
    }

    #[test]
    fn a_drained_nodes_idle_cpus_are_lost_from_when_it_was_first_seen_so() {
        // n0 takes work; n1 drains with 3 of its 8 CPUs still allocated.
        let text = "n0|idle|8|0/8/0/8|4000|0.00|batch\nn1|drng|8|3/5/0/8|4000|0.00|batch\n";
        let nodes = cli::parse_nodes(text);
        let mut since = HashMap::new();
        let first = lost_nodes(&nodes, &mut since, Time(100));
        assert_eq!(
            first,
            [Occupant {
                key: "node:n1".into(),
                start: Time(100),
                end: Occupant::UNTIL_GONE,
                cpus: 5
            }]
        );
        // The next reading gives the same occupant, not one from its own time.
        assert_eq!(lost_nodes(&nodes, &mut since, Time(130)), first);
        // Resumed, it is forgotten; drained again later, lost from then.
        let resumed = cli::parse_nodes("n0|idle|8|0/8/0/8|4000|0.00|batch\nn1|idle|8|0/8/0/8|4000|0.00|batch\n");
        assert!(lost_nodes(&resumed, &mut since, Time(160)).is_empty());
        assert_eq!(lost_nodes(&nodes, &mut since, Time(200))[0].start, Time(200));
    }

    /// A controller that lost its state gives a lost job's id to the next
    /// job: the runner of the lost one stops following the id as soon as
    /// the agent's `sbatch` hands it out again, and a completion record
    /// kept for the id is not taken for the new job.
    #[test]
    fn an_id_handed_out_again_belongs_to_the_new_job() {
        let config: SlurmConfig = toml::from_str("conf = \"/nonexistent/slurm.conf\"").unwrap();
        let slurm = Slurm::new("a", config, "JobCompLoc=/nonexistent/jobcomp.log\n");
        let (lost, next) = (JobId(1), JobId(2));
        slurm.claim(20, lost);
        let old = completed("JobId=20 UserId=root(0) Name=brokk-a-1 JobState=COMPLETED ExitCode=0:0").unwrap();
        slurm.ended.lock().unwrap().insert(20, (old, 1));
        slurm.claim(20, next);
        assert!(!slurm.follows(20, lost) && slurm.follows(20, next));
        assert_eq!(slurm.take_ended(20, 0), None, "the record was the lost job's");
        // The lost job's runner lets go of the id: it stays the new job's.
        slurm.unfollow(20, lost);
        assert!(slurm.follows(20, next));
        // After a restart, a runner resuming the lost job does not take the
        // id back from the job the agent's own sbatch gave it to.
        slurm.follow(20, lost);
        assert!(slurm.follows(20, next));
        slurm.unfollow(20, next);
        slurm.follow(20, lost);
        assert!(slurm.follows(20, lost));
    }

    #[test]
    fn a_requeued_launch_in_the_completion_log_is_no_end() {
        // As slurmctld wrote them when a node refused a launch ("Duplicate
        // jobid") and when the job later ran.
        let requeued = "JobId=461 UserId=root(0) GroupId=root(0) Name=brokk-co1-1 JobState=PENDING \
                        Partition=batch TimeLimit=1 StartTime=2026-11-23T12:25:50 ExitCode=0:0";
        let done = "JobId=461 UserId=root(0) GroupId=root(0) Name=brokk-co1-1 JobState=COMPLETED \
                    Partition=batch TimeLimit=1 StartTime=2026-11-23T12:26:10 ExitCode=0:0";
        assert_eq!(completed(requeued), None);
        let end = completed(done).expect("a completed job ended");
        assert_eq!((end.id, end.state.as_str(), end.exit_code), (461, "COMPLETED", Some(0)));
    }

    #[test]
    fn a_reservation_admits_its_owners_accounts() {
        let accounts: std::collections::BTreeMap<String, String> = [("ann", "u-ann"), ("bob", "u-bob"), ("cy", "u-cy")]
            .map(|(a, b)| (a.into(), b.into()))
            .into();
        let delegates: crate::delegates::Delegates =
            toml::from_str::<std::collections::BTreeMap<String, crate::delegates::Delegates>>(
                "d = { broker = [\"ann\", \"bob\"], everyone = [\"*\"] }",
            )
            .unwrap()
            .remove("d")
            .unwrap();
        let users = |owner| reservation_users(&accounts, &delegates, "root", owner);
        assert_eq!(users("ann"), "u-ann");
        assert_eq!(users("broker"), "u-ann,u-bob");
        assert_eq!(users("everyone"), "u-ann,u-bob,u-cy");
        assert_eq!(users("stranger"), "root");
        assert_eq!(
            reservation_users(&Default::default(), &Default::default(), "root", "ann"),
            "root"
        );
    }
}
