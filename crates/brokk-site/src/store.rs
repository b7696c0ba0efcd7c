//! Durable records in SQLite: every reservation and every job, written before
//! the API answers. WAL journal with `synchronous = NORMAL`: a committed write
//! survives the agent being killed (kill -9), though not necessarily a power
//! cut of the host.

use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use brokk_core::{JobId, KeptJobs, Reservation, ReservationId, State};
use brokk_model::{Job, Time};
use brokk_proto::wire::JobPhase;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

/// A store failure.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused.
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// A stored job description no longer parses.
    #[error("stored job {0}: {1}")]
    Corrupt(JobId, String),
}

pub use brokk_core::JobRecord;

/// One durable change.
#[derive(Debug, Clone)]
pub enum Write {
    /// Reservations as they now are (live).
    Reservations(Vec<Reservation>),
    /// Reservations that ended, and why (`cancelled`, `expired`, `released`).
    Ended(Vec<ReservationId>, &'static str),
    /// A job record as it now is, with the feed version of this change.
    Job(Box<JobRecord>, u64),
}

/// The agent's database.
#[derive(Debug, Clone)]
pub struct Store {
    /// The one connection that writes (and reloads at a restart), so its
    /// page cache stays warm.
    pool: SqlitePool,
    /// Connections for reads of retired jobs beside the writer: under WAL a
    /// reader never waits for a write.
    readers: SqlitePool,
}

/// Writes of operations that arrive together, made durable in one
/// transaction (group commit): each caller enqueues its writes in the
/// order the operations happened and waits until they are on disk, and a
/// single writer takes everything queued at once. A batch commits after
/// every batch before it, so an operation answered is on disk with every
/// one it followed.
///
/// Every enqueue is numbered; the writer publishes the number of the last
/// write on disk, so a reader that saw the state after enqueue `n` can wait
/// until `n` is durable before it answers (see [`GroupCommit::durable_through`]).
#[derive(Debug, Clone)]
pub struct GroupCommit {
    queue: Arc<Mutex<(u64, tokio::sync::mpsc::UnboundedSender<Pending>)>>,
    durable: tokio::sync::watch::Receiver<Progress>,
}

/// How far the writer has got: the number of the last write on disk, and
/// why the writes after it are not, while they are not.
#[derive(Debug, Clone, Default)]
struct Progress {
    through: u64,
    failing: Option<String>,
}

/// One operation's writes, its number, and who waits for them.
type Pending = (Vec<Write>, u64, tokio::sync::oneshot::Sender<Result<(), String>>);

/// Most operations one transaction takes.
const GROUP: usize = 512;

impl GroupCommit {
    /// Starts the writer of `store` on the current runtime.
    pub fn start(store: Store) -> GroupCommit {
        let (queue, mut rx) = tokio::sync::mpsc::unbounded_channel::<Pending>();
        let (publish, durable) = tokio::sync::watch::channel(Progress::default());
        tokio::spawn(async move {
            // A failed transaction's writes, tried again first with the next
            // batch: the state they record has been shown to nobody, but the
            // writes after them build on it, and a retry that lands them
            // lets the agent answer again.
            let mut backlog: Vec<Write> = Vec::new();
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < GROUP {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                let mut writes = std::mem::take(&mut backlog);
                let mut waiting = Vec::with_capacity(batch.len());
                let mut last = 0;
                for (w, n, done) in batch {
                    writes.extend(w);
                    waiting.push(done);
                    last = n;
                }
                let outcome = store.write(&writes).await.map_err(|e| e.to_string());
                // A failed write is answered as such to its operations and
                // to every reader waiting for it or for a later one: what
                // they would show is not on disk.
                match &outcome {
                    Ok(()) => {
                        publish.send_replace(Progress {
                            through: last,
                            failing: None,
                        });
                    }
                    Err(e) => {
                        tracing::error!("the database write failed, to be tried again with the next: {e}");
                        backlog = writes;
                        publish.send_modify(|p| p.failing = Some(e.clone()));
                    }
                }
                for done in waiting {
                    let _ = done.send(outcome.clone());
                }
            }
        });
        GroupCommit {
            queue: Arc::new(Mutex::new((0, queue))),
            durable,
        }
    }

    /// Queues `writes` behind every write queued before; the receiver
    /// answers once they are durable (or why not).
    pub fn enqueue(&self, writes: Vec<Write>) -> tokio::sync::oneshot::Receiver<Result<(), String>> {
        let (done, rx) = tokio::sync::oneshot::channel();
        if writes.is_empty() {
            let _ = done.send(Ok(()));
            return rx;
        }
        // Numbering and sending together keep the numbers in queue order.
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.0 += 1;
        let n = q.0;
        if let Err(e) = q.1.send((writes, n, done)) {
            let _ = e.0 .2.send(Err("the database writer has stopped".into()));
        }
        rx
    }

    /// The number of the last write queued so far.
    pub fn queued(&self) -> u64 {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Waits until write `n` and all before it are on disk; the error says
    /// why they are not (a failed transaction, a stopped writer).
    pub async fn durable_through(&self, n: u64) -> Result<(), String> {
        let mut durable = self.durable.clone();
        let seen = durable
            .wait_for(|p| p.through >= n || p.failing.is_some())
            .await
            .map(|p| p.clone());
        match seen {
            Ok(p) if p.through >= n => Ok(()),
            Ok(p) => Err(format!(
                "the site's database could not write: {}",
                p.failing.as_deref().unwrap_or("unknown error")
            )),
            Err(_) => Err("the database writer has stopped".into()),
        }
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS reservations (
        id INTEGER PRIMARY KEY, owner TEXT NOT NULL, start INTEGER NOT NULL, stop INTEGER NOT NULL,
        amount INTEGER NOT NULL, expires INTEGER, win_lo INTEGER, win_hi INTEGER,
        live INTEGER NOT NULL, ended TEXT)",
    "CREATE TABLE IF NOT EXISTS jobs (
        id INTEGER PRIMARY KEY, owner TEXT NOT NULL, spec TEXT NOT NULL, slot INTEGER,
        claimed INTEGER NOT NULL, state TEXT NOT NULL, reason TEXT, exit_code INTEGER,
        planned_start INTEGER, started INTEGER, ended INTEGER, idem TEXT, backend_id INTEGER)",
];

/// Columns added after a table was first made, for databases made before.
/// Each with what fills it in the rows that were there before, if anything.
const ADDED_COLUMNS: &[(&str, &str, Option<&str>)] = &[
    ("jobs", "backend_id INTEGER", None),
    ("jobs", "user TEXT", None),
    // Rows from before versions were stored: ids are as good an order.
    ("jobs", "version INTEGER", Some("UPDATE jobs SET version = id")),
];

/// Made after the columns: the store answers for retired jobs by id, by
/// key, by feed version and by end.
const INDEXES: &[&str] = &[
    "CREATE INDEX IF NOT EXISTS jobs_feed ON jobs (owner, version)",
    "CREATE INDEX IF NOT EXISTS jobs_key ON jobs (owner, idem)",
    "CREATE INDEX IF NOT EXISTS jobs_ended ON jobs (ended)",
];

/// The columns a job record is read from, `version` last.
const JOB_COLUMNS: &str =
    "id, owner, spec, slot, claimed, state, reason, exit_code, planned_start, started, ended, idem, backend_id, user, version";

fn phase_name(p: JobPhase) -> String {
    serde_json::to_value(p)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn phase_of(s: &str) -> JobPhase {
    serde_json::from_value(serde_json::Value::String(s.to_string())).unwrap_or(JobPhase::Failed)
}

impl Store {
    /// Opens (creating if needed) the database at `path`.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts.clone())
            .await?;
        for stmt in SCHEMA {
            sqlx::query(stmt).execute(&pool).await?;
        }
        for (table, column, fill) in ADDED_COLUMNS {
            let name = column.split_whitespace().next().unwrap_or(column);
            let has: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = '{name}'"
            ))
            .fetch_one(&pool)
            .await?;
            if has == 0 {
                sqlx::query(&format!("ALTER TABLE {table} ADD COLUMN {column}"))
                    .execute(&pool)
                    .await?;
                if let Some(fill) = fill {
                    sqlx::query(fill).execute(&pool).await?;
                }
            }
        }
        for stmt in INDEXES {
            sqlx::query(stmt).execute(&pool).await?;
        }
        let readers = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts.read_only(true))
            .await?;
        Ok(Store { pool, readers })
    }

    /// Makes `writes` durable together, in order, in one transaction.
    pub async fn write(&self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for w in writes {
            match w {
                Write::Reservations(rs) => {
                    for r in rs {
                        let expires = match r.state {
                            State::Committed => None,
                            State::Preliminary { expires } => Some(expires.0),
                        };
                        sqlx::query(
                            "INSERT OR REPLACE INTO reservations (id, owner, start, stop, amount, expires, win_lo, win_hi, live, ended)
                             VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, NULL)",
                        )
                        .bind(r.id.0 as i64)
                        .bind(r.owner.as_ref())
                        .bind(r.start.0)
                        .bind(r.end.0)
                        .bind(i64::from(r.amount))
                        .bind(expires)
                        .bind(r.window.map(|w| w.0 .0))
                        .bind(r.window.map(|w| w.1 .0))
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                Write::Ended(ids, why) => {
                    for id in ids {
                        sqlx::query("UPDATE reservations SET live = 0, ended = ? WHERE id = ?")
                            .bind(*why)
                            .bind(id.0 as i64)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                Write::Job(j, version) => {
                    let spec = serde_json::to_string(&j.spec).map_err(|e| StoreError::Corrupt(j.id, e.to_string()))?;
                    sqlx::query(
                        "INSERT OR REPLACE INTO jobs (id, owner, spec, slot, claimed, state, reason, exit_code, planned_start, started, ended, idem, backend_id, user, version)
                         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    )
                    .bind(j.id.0 as i64)
                    .bind(&j.owner)
                    .bind(spec)
                    .bind(j.slot.map(|s| s.0 as i64))
                    // 0: the job's own slot, 1: a kept reservation it claimed,
                    // 2: a claimed reservation that ends with it.
                    .bind(i64::from(j.claimed) + i64::from(j.claimed && j.release_claim))
                    .bind(phase_name(j.state))
                    .bind(&j.reason)
                    .bind(j.exit_code)
                    .bind(j.planned_start.map(|t| t.0))
                    .bind(j.started.map(|t| t.0))
                    .bind(j.ended.map(|t| t.0))
                    .bind(&j.key)
                    .bind(j.backend_id.map(|b| b as i64))
                    .bind(&j.user)
                    .bind(*version as i64)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every live reservation, by id.
    pub async fn live_reservations(&self) -> Result<Vec<Reservation>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, owner, start, stop, amount, expires, win_lo, win_hi FROM reservations WHERE live = 1 ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                let expires: Option<i64> = r.get("expires");
                let lo: Option<i64> = r.get("win_lo");
                let hi: Option<i64> = r.get("win_hi");
                Reservation {
                    id: ReservationId(r.get::<i64, _>("id") as u64),
                    owner: Arc::from(r.get::<String, _>("owner")),
                    start: Time(r.get("start")),
                    end: Time(r.get("stop")),
                    amount: r.get::<i64, _>("amount") as u32,
                    state: expires.map_or(State::Committed, |e| State::Preliminary { expires: Time(e) }),
                    window: lo.zip(hi).map(|(a, b)| (Time(a), Time(b))),
                }
            })
            .collect())
    }

    /// The largest reservation id ever used (live or not).
    pub async fn max_reservation_id(&self) -> Result<u64, StoreError> {
        let v: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM reservations")
            .fetch_one(&self.pool)
            .await?;
        Ok(v.unwrap_or(0) as u64)
    }

    /// What a restart reloads: the jobs not ended and those that ended at
    /// or after `since` (the rest stay retired here), with the largest id
    /// and the latest version of those left.
    pub async fn kept_jobs(&self, since: Time) -> Result<KeptJobs, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE ended IS NULL OR ended >= ? ORDER BY id"
        ))
        .bind(since.0)
        .fetch_all(&self.pool)
        .await?;
        let records = rows.iter().map(versioned_record).collect::<Result<_, _>>()?;
        let next: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM jobs")
            .fetch_one(&self.pool)
            .await?;
        let retired: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM jobs WHERE ended < ?")
            .bind(since.0)
            .fetch_one(&self.pool)
            .await?;
        Ok(KeptJobs {
            records,
            next_job: next.unwrap_or(0) as u64 + 1,
            retired_through: retired.unwrap_or(0) as u64,
        })
    }

    /// Job `id`'s record, whoever owns it.
    pub async fn job(&self, id: JobId) -> Result<Option<JobRecord>, StoreError> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?"))
            .bind(id.0 as i64)
            .fetch_optional(&self.readers)
            .await?;
        row.as_ref().map(|r| versioned_record(r).map(|(j, _)| j)).transpose()
    }

    /// `owner`'s job submitted with idempotency key `key`.
    pub async fn job_by_key(&self, owner: &str, key: &str) -> Result<Option<JobRecord>, StoreError> {
        let row = sqlx::query(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE owner = ? AND idem = ?"))
            .bind(owner)
            .bind(key)
            .fetch_optional(&self.readers)
            .await?;
        row.as_ref().map(|r| versioned_record(r).map(|(j, _)| j)).transpose()
    }

    /// `owner`'s jobs whose latest change is after version `after`, oldest
    /// first, at most `limit`, each with its version.
    pub async fn changes(&self, owner: &str, after: u64, limit: usize) -> Result<Vec<(JobRecord, u64)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE owner = ? AND version > ? ORDER BY version LIMIT ?"
        ))
        .bind(owner)
        .bind(after as i64)
        .bind(limit as i64)
        .fetch_all(&self.readers)
        .await?;
        rows.iter().map(versioned_record).collect()
    }
}

/// A job record read from its row (see [`JOB_COLUMNS`]), with its version.
fn versioned_record(r: &sqlx::sqlite::SqliteRow) -> Result<(JobRecord, u64), StoreError> {
    let id = JobId(r.get::<i64, _>("id") as u64);
    let spec: String = r.get("spec");
    let spec: Job = serde_json::from_str(&spec).map_err(|e| StoreError::Corrupt(id, e.to_string()))?;
    let state: String = r.get("state");
    let record = JobRecord {
        id,
        owner: r.get("owner"),
        spec,
        slot: r.get::<Option<i64>, _>("slot").map(|s| ReservationId(s as u64)),
        claimed: r.get::<i64, _>("claimed") > 0,
        release_claim: r.get::<i64, _>("claimed") == 2,
        state: phase_of(&state),
        reason: r.get("reason"),
        exit_code: r.get("exit_code"),
        planned_start: r.get::<Option<i64>, _>("planned_start").map(Time),
        started: r.get::<Option<i64>, _>("started").map(Time),
        ended: r.get::<Option<i64>, _>("ended").map(Time),
        key: r.get("idem"),
        backend_id: r.get::<Option<i64>, _>("backend_id").map(|b| b as u64),
        user: r.get("user"),
    };
    Ok((record, r.get::<Option<i64>, _>("version").unwrap_or(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(id: u64) -> Reservation {
        Reservation {
            id: ReservationId(id),
            owner: "ann".into(),
            start: Time(100),
            end: Time(200),
            amount: 1,
            state: State::Committed,
            window: None,
        }
    }

    /// A write that fails is not reported durable, to its operation or to
    /// a reader of the state after it; the next batch writes it again, and
    /// once that lands everything is durable again.
    #[tokio::test]
    async fn a_failed_write_is_not_durable_until_written_again() {
        let dir = std::env::temp_dir().join(format!("brokk-group-commit-fail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir.join("site.db")).await.unwrap();
        // A disk that refuses writes while `broken` says so.
        for stmt in [
            "CREATE TABLE broken (on_ INTEGER NOT NULL)",
            "INSERT INTO broken VALUES (0)",
            "CREATE TRIGGER refuse BEFORE INSERT ON reservations WHEN (SELECT on_ FROM broken) = 1
             BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END",
        ] {
            sqlx::query(stmt).execute(&store.pool).await.unwrap();
        }
        let set_broken = |on: i64| {
            let pool = store.pool.clone();
            async move {
                sqlx::query("UPDATE broken SET on_ = $1")
                    .bind(on)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        };
        let commits = GroupCommit::start(store.clone());
        assert_eq!(
            commits
                .enqueue(vec![Write::Reservations(vec![reservation(1)])])
                .await
                .unwrap(),
            Ok(())
        );
        set_broken(1).await;
        let failed = commits
            .enqueue(vec![Write::Reservations(vec![reservation(2)])])
            .await
            .unwrap();
        assert!(failed.unwrap_err().contains("disk I/O error"));
        assert_eq!(
            commits.durable_through(1).await,
            Ok(()),
            "what was written stays written"
        );
        let e = commits.durable_through(2).await.unwrap_err();
        assert!(e.contains("could not write"), "{e}");
        set_broken(0).await;
        assert_eq!(
            commits
                .enqueue(vec![Write::Reservations(vec![reservation(3)])])
                .await
                .unwrap(),
            Ok(())
        );
        assert_eq!(commits.durable_through(3).await, Ok(()));
        let ids: Vec<u64> = store
            .live_reservations()
            .await
            .unwrap()
            .iter()
            .map(|r| r.id.0)
            .collect();
        assert_eq!(ids.len(), 3, "the failed write landed with the next: {ids:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A reader that waits for the last queued write finds every write
    /// queued before it on disk, though nobody awaited the writes.
    #[tokio::test]
    async fn waiting_for_the_queued_number_finds_the_writes_on_disk() {
        let dir = std::env::temp_dir().join(format!("brokk-group-commit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir.join("site.db")).await.unwrap();
        let commits = GroupCommit::start(store.clone());
        assert_eq!(commits.queued(), 0);
        let unawaited: Vec<_> = (1..=300)
            .map(|i| commits.enqueue(vec![Write::Reservations(vec![reservation(i)])]))
            .collect();
        // Nothing to write takes no number.
        assert_eq!(commits.enqueue(Vec::new()).await.unwrap(), Ok(()));
        assert_eq!(commits.queued(), 300);
        commits.durable_through(commits.queued()).await.unwrap();
        let other = Store::open(&dir.join("site.db")).await.unwrap();
        assert_eq!(other.live_reservations().await.unwrap().len(), 300);
        for rx in unawaited {
            assert_eq!(rx.await.unwrap(), Ok(()));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
