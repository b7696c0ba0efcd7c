//! The service's records: jobs and their state history, in SQLite (a file
//! path, the default) or PostgreSQL (a `postgres://` URL), through sqlx's Any
//! driver with one schema and one set of queries for both. A job is written
//! before `202 Accepted` is sent, so an accepted job survives any crash. One
//! broker instance uses a database: the change feed's versions and the
//! per-user counts are handed out and kept in its memory.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use brokk_broker::jobs::Member;
use brokk_broker::workflow::Plan;
use brokk_model::workflow::Workflow;
use brokk_model::Time;
use brokk_proto::wire::{
    BrokerJob, BrokerReservation, BrokerReservationState, BrokerState, HistoryEntry, WorkflowState, WorkflowView,
};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

/// A database failure.
#[derive(Debug, thiserror::Error)]
#[error("database: {0}")]
pub struct DbError(#[from] sqlx::Error);

/// A stored job: the public view plus what dispatching needs.
#[derive(Debug, Clone)]
pub struct StoredJob {
    /// What clients see.
    pub view: BrokerJob,
    /// The canonical job, JSON.
    pub spec: String,
    /// Preferences, JSON.
    pub prefs: String,
    /// The idempotency key a broker above gave it, unique per owner.
    pub key: Option<String>,
}

/// Which of an owner's jobs a listing returns (see [`Db::list`]).
#[derive(Debug, Clone, Default)]
pub struct JobPage {
    /// Only jobs in this state.
    pub state: Option<BrokerState>,
    /// Only jobs submitted at or after this time.
    pub since: Option<Time>,
    /// Only jobs after this one in the listing's order: the last job of
    /// the page before.
    pub before: Option<String>,
    /// At most this many.
    pub limit: usize,
    /// The order.
    pub sort: JobSort,
}

/// The times a listing may be ordered by, each read from an index of its
/// own, so that a page comes as quickly from a million stored jobs as from
/// a hundred.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SortKey {
    /// When it was submitted.
    #[default]
    Submitted,
    /// When it started (a job not started yet: before every start).
    Started,
    /// When it ended (a job not ended yet: before every end).
    Ended,
}

/// A listing's order: by a time, newest or oldest first, then by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSort {
    /// The time.
    pub key: SortKey,
    /// Newest first.
    pub descending: bool,
}

impl Default for JobSort {
    /// Newest submission first, as `squeue` and `condor_q` users expect.
    fn default() -> Self {
        JobSort {
            key: SortKey::Submitted,
            descending: true,
        }
    }
}

impl std::str::FromStr for JobSort {
    type Err = String;
    /// `submitted`, `started` or `ended`, oldest first; with a `-`, newest first.
    fn from_str(s: &str) -> Result<Self, String> {
        let (descending, name) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let key = match name {
            "submitted" => SortKey::Submitted,
            "started" => SortKey::Started,
            "ended" => SortKey::Ended,
            _ => {
                return Err(format!(
                    "`{s}` is not one of submitted, started, ended (a `-` before it: newest first)"
                ))
            }
        };
        Ok(JobSort { key, descending })
    }
}

impl SortKey {
    /// The indexed expression a listing orders by: a time not reached yet
    /// reads as -1, so that the order and its index are the same in SQLite
    /// and PostgreSQL, which place NULLs apart.
    fn expression(self) -> &'static str {
        match self {
            SortKey::Submitted => "submitted",
            SortKey::Started => "COALESCE(started, -1)",
            SortKey::Ended => "COALESCE(ended, -1)",
        }
    }
}

/// A stored workflow: what clients see, the workflow as admitted and its plan.
#[derive(Debug, Clone)]
pub struct StoredWorkflow {
    /// What clients see (the tasks' states as last written).
    pub view: WorkflowView,
    /// The workflow, every task with its job.
    pub spec: Workflow,
    /// The admitted plan (sites by their index in the configuration at
    /// admission; the view names them).
    pub plan: Plan,
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, DbError> {
    serde_json::to_string(v).map_err(|e| DbError(sqlx::Error::Encode(Box::new(e))))
}

fn row_to_workflow(r: &AnyRow) -> Result<StoredWorkflow, DbError> {
    let json = |column: &str| -> Result<String, DbError> { Ok(r.try_get::<String, _>(column)?) };
    let bad = |e: serde_json::Error| DbError(sqlx::Error::Decode(Box::new(e)));
    Ok(StoredWorkflow {
        view: serde_json::from_str(&json("view")?).map_err(bad)?,
        spec: serde_json::from_str(&json("spec")?).map_err(bad)?,
        plan: serde_json::from_str(&json("plan")?).map_err(bad)?,
    })
}

/// The service's database.
#[derive(Debug, Clone)]
pub struct Db {
    pool: AnyPool,
    /// Whether it is a SQLite file (else PostgreSQL).
    sqlite: bool,
    /// Every job as it is written, for live views (`/v1/events`); what
    /// another broker instance on the same PostgreSQL writes is not seen.
    changes: tokio::sync::broadcast::Sender<BrokerJob>,
    /// The last feed version given to a job a broker above follows (see
    /// [`Db::changes`]); one broker instance per database gives them out.
    feed: Arc<tokio::sync::Mutex<i64>>,
    /// The change feed's run.
    feed_epoch: u64,
    /// Each owner's jobs that count against the per-user limit (not ended,
    /// not held), kept beside the table so a submission's check does not
    /// count up to the limit's rows; changed while the write that changes a
    /// job's state holds its lock, so it follows the writes' order.
    unfinished: Arc<Mutex<HashMap<String, HashSet<String>>>>,
    /// Jobs per state, kept as they are written, for `/metrics`: counting
    /// the table took 80-120 ms with a million jobs stored.
    states: Arc<Mutex<StateCounts>>,
    /// Sites whose jobs' outputs stay where they are rather than being kept
    /// by the broker: its embedded sites, whose sandboxes are on its own
    /// disk and live as long as it does.
    outputs_stay: Arc<std::sync::RwLock<HashSet<String>>>,
    /// Told when an end puts a job on the list to keep, so its outputs are
    /// fetched at once rather than at the keeper's next look.
    keep_due: Arc<tokio::sync::Notify>,
}

/// Jobs per state, and the state of each job not yet ended (the only ones
/// whose state can still change), so a write moves one count to another.
#[derive(Debug, Default)]
struct StateCounts {
    open: HashMap<String, BrokerState>,
    counts: std::collections::BTreeMap<&'static str, i64>,
}

impl StateCounts {
    /// Counts `v` as written; `new` when its row was just inserted. A job
    /// that ended earlier and is written again is already counted.
    fn write(&mut self, v: &BrokerJob, new: bool) {
        let state = v.state();
        match self.open.get(&v.id).copied() {
            Some(old) if old == state => return,
            Some(old) => *self.counts.entry(old.as_str()).or_default() -= 1,
            None if !new && state.is_terminal() => return,
            None => {}
        }
        *self.counts.entry(state.as_str()).or_default() += 1;
        match state.is_terminal() {
            true => self.open.remove(&v.id),
            false => self.open.insert(v.id.clone(), state),
        };
    }
}

/// The schema, valid in both SQLite and PostgreSQL.
const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS jobs (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, format TEXT NOT NULL, spec TEXT NOT NULL, prefs TEXT NOT NULL,
        warnings TEXT NOT NULL, state TEXT NOT NULL, site TEXT, site_job TEXT, predicted_tts BIGINT,
        predicted_ttd BIGINT, submitted BIGINT NOT NULL, started BIGINT, ended BIGINT, exit_code BIGINT, reason TEXT)",
    // Jobs a broker above sent through the site API: whom they run for, its
    // idempotency key, and their place in the owner's change feed.
    "ALTER TABLE jobs ADD COLUMN runs_as TEXT",
    "ALTER TABLE jobs ADD COLUMN idem TEXT",
    "ALTER TABLE jobs ADD COLUMN version BIGINT",
    "ALTER TABLE jobs ADD COLUMN member TEXT",
    "ALTER TABLE jobs ADD COLUMN member_of TEXT",
    // How a neighbouring broker delegated the job here: its path and hops
    // left, as JSON.
    "ALTER TABLE jobs ADD COLUMN delegated TEXT",
    // How a job a broker above sent claims its reservation, as JSON.
    "ALTER TABLE jobs ADD COLUMN claim_terms TEXT",
    // How many times its owner requeued it (NULL: never).
    "ALTER TABLE jobs ADD COLUMN requeued BIGINT",
    "CREATE INDEX IF NOT EXISTS jobs_by_member ON jobs (member_of)",
    "CREATE INDEX IF NOT EXISTS jobs_feed ON jobs (owner, version)",
    "CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_key ON jobs (owner, idem)",
    // The feed's run: made once per database, so a follower of a database
    // that was replaced starts again instead of waiting past its versions.
    "CREATE TABLE IF NOT EXISTS feed (epoch BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, submitted)",
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state)",
    // A listing in one state, newest first, reads it in order.
    "DROP INDEX IF EXISTS jobs_by_owner_state",
    "CREATE INDEX IF NOT EXISTS jobs_by_owner_state_submitted ON jobs (owner, state, submitted)",
    "CREATE INDEX IF NOT EXISTS jobs_by_site_job ON jobs (site, site_job)",
    // Listings ordered by start or end read these in order (`SortKey`).
    "CREATE INDEX IF NOT EXISTS jobs_by_owner_started ON jobs (owner, (COALESCE(started, -1)), id)",
    "CREATE INDEX IF NOT EXISTS jobs_by_owner_ended ON jobs (owner, (COALESCE(ended, -1)), id)",
    "CREATE TABLE IF NOT EXISTS history (
        job TEXT NOT NULL, n BIGINT NOT NULL, at BIGINT NOT NULL, state TEXT NOT NULL, detail TEXT)",
    "CREATE INDEX IF NOT EXISTS history_by_job ON history (job, n)",
    "CREATE TABLE IF NOT EXISTS retired (site TEXT NOT NULL, site_job TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS retired_by_site_job ON retired (site, site_job)",
    "CREATE TABLE IF NOT EXISTS reservations (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, site TEXT NOT NULL, site_reservation BIGINT NOT NULL,
        amount BIGINT NOT NULL, start BIGINT NOT NULL, stop BIGINT NOT NULL, state TEXT NOT NULL)",
    "ALTER TABLE reservations ADD COLUMN workflow TEXT",
    "CREATE TABLE IF NOT EXISTS workflows (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, state TEXT NOT NULL, submitted BIGINT NOT NULL,
        view TEXT NOT NULL, spec TEXT NOT NULL, plan TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS workflows_by_owner ON workflows (owner, submitted)",
    "CREATE INDEX IF NOT EXISTS workflows_by_state ON workflows (state)",
    // The holds the broker core has at the sites for jobs not sent yet
    // ([ET-brokering]'s first phase): a broker that stops, or a standby
    // that takes over, gives them back instead of leaving them to block
    // the sites until they lapse.
    "CREATE TABLE IF NOT EXISTS holds (
        site TEXT NOT NULL, reservation BIGINT NOT NULL, job TEXT NOT NULL, owner TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS holds_by_site ON holds (site, reservation)",
    // Ended jobs whose outputs the broker has still to fetch from their
    // site (written with the end, so a stop loses none), and when to try.
    "CREATE TABLE IF NOT EXISTS keep (job TEXT PRIMARY KEY, due BIGINT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS keep_by_due ON keep (due)",
    // The outputs kept: each file's digest in the owner's output store, or
    // why it was not kept; `ended` is the run's end (a requeued job's new
    // run replaces them).
    "CREATE TABLE IF NOT EXISTS outputs (
        job TEXT NOT NULL, ended BIGINT NOT NULL, name TEXT NOT NULL, sha TEXT, bytes BIGINT, note TEXT)",
    "CREATE INDEX IF NOT EXISTS outputs_by_job ON outputs (job, name)",
];

/// One output of an ended job as the broker kept it: its digest in the
/// owner's output store beside what the job's view shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptFile {
    /// Name, size when kept, why not.
    pub shown: brokk_broker::jobs::KeptOutput,
    /// Its digest in the owner's output store, when kept.
    pub sha: Option<String>,
}

/// A row of `outputs` (name, sha, bytes, note) as the file it records.
fn kept_row(r: &AnyRow) -> KeptFile {
    KeptFile {
        shown: brokk_broker::jobs::KeptOutput {
            name: r.get(0),
            bytes: r.get::<Option<i64>, _>(2).and_then(|b| u64::try_from(b).ok()),
            note: r.get(3),
        },
        sha: r.get(1),
    }
}

/// A line for a job's history: when it entered its new state, and why.
pub type HistoryLine = (Time, Option<String>);

const COLUMNS: &str = "id, owner, format, spec, prefs, warnings, state, site, site_job, predicted_tts, predicted_ttd, \
                       submitted, started, ended, exit_code, reason, runs_as, idem, member, delegated, claim_terms, requeued";

/// Appends a history entry numbered after the job's last one.
const ADD_HISTORY: &str = "INSERT INTO history (job, n, at, state, detail)
     SELECT $1, COUNT(*), $2, $3, $4 FROM history WHERE job = $1";

/// A stored state name; one this version does not know reads as failed
/// rather than stopping the broker.
fn state_of(name: &str) -> BrokerState {
    name.parse().unwrap_or(BrokerState::Failed)
}

/// A reservation as its row holds it.
fn reservation_of(r: &AnyRow) -> BrokerReservation {
    let mut v = BrokerReservation::new(
        r.get("id"),
        r.get("owner"),
        r.get("site"),
        r.get::<i64, _>("site_reservation") as u64,
        r.get::<i64, _>("amount") as u32,
        Time(r.get("start")),
        Time(r.get("stop")),
    );
    v.workflow = r.get("workflow");
    let state = match r.get::<String, _>("state").as_str() {
        "committed" => BrokerReservationState::Committed,
        "held" => BrokerReservationState::Held,
        _ => BrokerReservationState::Cancelled,
    };
    v.restored(state)
}

/// What a job stored before the `member` column was is part of, from the
/// id those versions gave it.
fn legacy_member(id: &str) -> Member {
    let Some((group, rest)) = id.split_once('-') else {
        return Member::Alone;
    };
    let (k, attempt) = rest.split_once('.').unwrap_or((rest, "0"));
    match (group.as_bytes().first(), k.parse::<usize>(), attempt.parse::<u32>()) {
        (Some(b'w'), Ok(task), Ok(attempt)) => Member::Task {
            workflow: group.to_string(),
            task,
            attempt,
        },
        (Some(b'c'), Ok(index), Ok(0)) if !rest.contains('.') => Member::Part {
            coallocation: group.to_string(),
            index,
        },
        _ => Member::Alone,
    }
}

/// The sqlx URL of the configured `database`: a `postgres://` URL as it
/// is, else a SQLite file (its directory made), created if missing. Installs
/// the drivers.
pub fn connection_url(database: &str) -> String {
    sqlx::any::install_default_drivers();
    if database.starts_with("postgres://") || database.starts_with("postgresql://") {
        return database.to_string();
    }
    if let Some(dir) = Path::new(database).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    format!("sqlite://{database}?mode=rwc")
}

fn row_to_job(r: &AnyRow) -> StoredJob {
    let warnings: String = r.get("warnings");
    let spec: String = r.get("spec");
    let mut view = BrokerJob::default().restored(state_of(&r.get::<String, _>("state")));
    view.id = r.get("id");
    view.owner = r.get("owner");
    view.format = r.get("format");
    view.site = r.get("site");
    view.site_job = r.get("site_job");
    view.predicted_tts = r.get("predicted_tts");
    view.predicted_ttd = r.get("predicted_ttd");
    view.submitted = Time(r.get("submitted"));
    view.started = r.get::<Option<i64>, _>("started").map(Time);
    view.ended = r.get::<Option<i64>, _>("ended").map(Time);
    view.exit_code = r.get::<Option<i64>, _>("exit_code").map(|c| c as i32);
    view.reason = r.get("reason");
    view.warnings = serde_json::from_str(&warnings).unwrap_or_default();
    view.runs_as = r.get("runs_as");
    view.member = r
        .get::<Option<String>, _>("member")
        .and_then(|m| serde_json::from_str(&m).ok())
        .unwrap_or_default();
    view.delegated = r
        .get::<Option<String>, _>("delegated")
        .and_then(|d| serde_json::from_str(&d).ok());
    view.claim_terms = r
        .get::<Option<String>, _>("claim_terms")
        .and_then(|d| serde_json::from_str(&d).ok());
    view.requeued = r
        .get::<Option<i64>, _>("requeued")
        .map_or(0, |n| u32::try_from(n).unwrap_or(0));
    if let Ok(job) = serde_json::from_str::<brokk_model::Job>(&spec) {
        view.describe(&job);
    }
    StoredJob {
        view,
        spec,
        prefs: r.get("prefs"),
        key: r.get("idem"),
    }
}

impl Db {
    /// Opens the database: `postgres://...` URLs go to PostgreSQL, anything
    /// else is a SQLite file (created if needed, WAL journal).
    pub async fn open(database: &str) -> Result<Db, DbError> {
        let url = connection_url(database);
        let sqlite = !url.starts_with("postgres");
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            // `synchronous` is a setting of each connection, not of the file:
            // every connection of the pool gets it. In WAL mode a commit is
            // then durable against a crash of this process (what the kill -9
            // tests hold it to), without an fsync per commit.
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if sqlite {
                        sqlx::Executor::execute(&mut *conn, "PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        if sqlite {
            sqlx::query("PRAGMA journal_mode = WAL").execute(&pool).await?;
        }
        for s in SCHEMA {
            if let Some(added) = s.strip_prefix("ALTER TABLE ") {
                // Added to databases made before the column was.
                let words: Vec<&str> = added.split_whitespace().collect();
                let (table, name) = (
                    words.first().copied().unwrap_or_default(),
                    words.get(3).copied().unwrap_or_default(),
                );
                if sqlx::query(&format!("SELECT {name} FROM {table} LIMIT 1"))
                    .fetch_optional(&pool)
                    .await
                    .is_ok()
                {
                    continue;
                }
            }
            sqlx::query(s).execute(&pool).await?;
        }
        Self::fill_members(&pool).await?;
        let last: Option<i64> = sqlx::query("SELECT MAX(version) AS v FROM jobs")
            .fetch_one(&pool)
            .await?
            .get("v");
        let epoch = match sqlx::query("SELECT epoch FROM feed").fetch_optional(&pool).await? {
            Some(row) => row.get::<i64, _>("epoch"),
            None => {
                let made = (uuid::Uuid::new_v4().as_u128() as i64 & i64::MAX).max(1);
                sqlx::query("INSERT INTO feed (epoch) VALUES ($1)")
                    .bind(made)
                    .execute(&pool)
                    .await?;
                made
            }
        };
        let mut unfinished: HashMap<String, HashSet<String>> = HashMap::new();
        let names: Vec<String> = BrokerState::ALL
            .into_iter()
            .filter(|&s| brokk_broker::jobs::counts_toward_limit(s))
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        let names = names.join(", ");
        for r in sqlx::query(&format!("SELECT owner, id FROM jobs WHERE state IN ({names})"))
            .fetch_all(&pool)
            .await?
        {
            unfinished.entry(r.get("owner")).or_default().insert(r.get("id"));
        }
        // Counted once here, then kept as jobs are written.
        let mut states = StateCounts::default();
        for r in sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
            .fetch_all(&pool)
            .await?
        {
            let state: BrokerState = r.get::<String, _>("state").parse().unwrap_or(BrokerState::Failed);
            *states.counts.entry(state.as_str()).or_default() += r.get::<i64, _>("n");
        }
        let ended: Vec<String> = BrokerState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        let open_query = format!("SELECT id, state FROM jobs WHERE state NOT IN ({})", ended.join(", "));
        for r in sqlx::query(&open_query).fetch_all(&pool).await? {
            if let Ok(state) = r.get::<String, _>("state").parse::<BrokerState>() {
                states.open.insert(r.get("id"), state);
            }
        }
        Ok(Db {
            pool,
            sqlite,
            changes: tokio::sync::broadcast::channel(1024).0,
            feed: Arc::new(tokio::sync::Mutex::new(last.unwrap_or(0))),
            feed_epoch: epoch as u64,
            unfinished: Arc::new(Mutex::new(unfinished)),
            states: Arc::new(Mutex::new(states)),
            outputs_stay: Arc::default(),
            keep_due: Arc::default(),
        })
    }

    /// Whether the database answers a query now (a readiness probe).
    pub async fn ping(&self) -> Result<(), DbError> {
        sqlx::query("SELECT 1").fetch_one(&self.pool).await?;
        Ok(())
    }

    /// The change feed's run (see [`Db::changes`]): one per database.
    pub fn feed_epoch(&self) -> u64 {
        self.feed_epoch
    }

    /// Stores a new job with its first history entry.
    pub async fn insert(&self, j: &StoredJob) -> Result<(), DbError> {
        self.insert_all(std::slice::from_ref(j)).await
    }

    /// [`Db::insert`] of several jobs in one transaction (one commit for
    /// the jobs several requests accepted at once).
    pub async fn insert_all(&self, jobs: &[StoredJob]) -> Result<(), DbError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let mut feed = match jobs.iter().any(|j| j.view.runs_as.is_some()) {
            true => Some(self.feed.clone().lock_owned().await),
            false => None,
        };
        let mut last = feed.as_deref().copied().unwrap_or(0);
        let mut tx = self.pool.begin().await?;
        for j in jobs {
            let v = &j.view;
            let version = v.runs_as.is_some().then(|| {
                last += 1;
                last
            });
            sqlx::query(&format!(
                "INSERT INTO jobs ({COLUMNS}, version, member_of) VALUES ($1, $2, $3, $4, $5, $6, $7, $12, $13, NULL, NULL, $8, NULL, NULL, NULL, NULL, $9, $10, $14, $16, $17, NULL, $11, $15)"
            ))
            .bind(&v.id)
            .bind(&v.owner)
            .bind(&v.format)
            .bind(&j.spec)
            .bind(&j.prefs)
            .bind(serde_json::to_string(&v.warnings).unwrap_or_else(|_| "[]".into()))
            .bind(v.state().as_str())
            .bind(v.submitted.0)
            .bind(&v.runs_as)
            .bind(&j.key)
            .bind(version)
            .bind(&v.site)
            .bind(&v.site_job)
            .bind(to_json(&v.member)?)
            .bind(v.member.group())
            .bind(v.delegated.as_ref().map(to_json).transpose()?)
            .bind(v.claim_terms.as_ref().map(to_json).transpose()?)
            .execute(&mut *tx)
            .await?;
            sqlx::query(ADD_HISTORY)
                .bind(&v.id)
                .bind(v.submitted.0)
                .bind(v.state().as_str())
                .bind(None::<String>)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if let Some(g) = feed.as_mut() {
            **g = last;
        }
        for j in jobs {
            self.track(&j.view, true);
            self.announce(&j.view);
        }
        Ok(())
    }

    /// Counts `v` against its owner's limit or not, as its state says, and
    /// in its state's count (`new`: its row was just inserted). Called
    /// with the job's row written and locked (SQLite takes one writer,
    /// PostgreSQL the row until the commit), so two writes of one job
    /// change the counts in the order they reach the table.
    fn track(&self, v: &BrokerJob, new: bool) {
        if let Ok(mut states) = self.states.lock() {
            states.write(v, new);
        }
        let Ok(mut all) = self.unfinished.lock() else { return };
        if brokk_broker::jobs::counts_toward_limit(v.state()) {
            let of = match all.get_mut(&v.owner) {
                Some(of) => of,
                None => all.entry(v.owner.clone()).or_default(),
            };
            if !of.contains(&v.id) {
                of.insert(v.id.clone());
            }
        } else if let Some(of) = all.get_mut(&v.owner) {
            of.remove(&v.id);
            if of.is_empty() {
                all.remove(&v.owner);
            }
        }
    }

    /// Tells the live views about a job just written.
    fn announce(&self, v: &BrokerJob) {
        if self.changes.receiver_count() > 0 {
            let mut v = v.clone();
            v.history.clear();
            let _ = self.changes.send(v);
        }
    }

    /// Every job written from now on, as written (a slow reader misses some
    /// and is told how many).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<BrokerJob> {
        self.changes.subscribe()
    }

    /// Replaces a job's canonical description (a workflow task's inputs,
    /// once its parents' outputs are stored).
    pub async fn set_spec(&self, id: &str, spec: &str) -> Result<(), DbError> {
        sqlx::query("UPDATE jobs SET spec = $1 WHERE id = $2")
            .bind(spec)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Writes a job's mutable fields and, when its state changed, a history entry.
    pub async fn update(&self, v: &BrokerJob, changed: Option<HistoryLine>) -> Result<(), DbError> {
        self.update_all(&[(v, changed)]).await
    }

    /// [`Db::update`] of several jobs in one transaction (the jobs a
    /// dispatch batch sent): one commit, and one turn of the change feed
    /// for those that run for a user of a broker above.
    pub async fn update_all(&self, writes: &[(&BrokerJob, Option<HistoryLine>)]) -> Result<(), DbError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut feed = match writes.iter().any(|(v, _)| v.runs_as.is_some()) {
            true => Some(self.feed.clone().lock_owned().await),
            false => None,
        };
        let mut last = feed.as_deref().copied().unwrap_or(0);
        let mut tx = self.pool.begin().await?;
        let mut to_keep = false;
        for (v, changed) in writes {
            let version = v.runs_as.is_some().then(|| {
                last += 1;
                last
            });
            sqlx::query(
                "UPDATE jobs SET state = $1, site = $2, site_job = $3, predicted_tts = $4, predicted_ttd = $5, started = $6,
                 ended = $7, exit_code = $8, reason = $9, version = COALESCE($11, version), requeued = $12 WHERE id = $10",
            )
            .bind(v.state().as_str())
            .bind(&v.site)
            .bind(&v.site_job)
            .bind(v.predicted_tts)
            .bind(v.predicted_ttd)
            .bind(v.started.map(|t| t.0))
            .bind(v.ended.map(|t| t.0))
            .bind(v.exit_code.map(i64::from))
            .bind(&v.reason)
            .bind(&v.id)
            .bind(version)
            .bind((v.requeued > 0).then_some(i64::from(v.requeued)))
            .execute(&mut *tx)
            .await?;
            if let Some((at, detail)) = changed {
                sqlx::query(ADD_HISTORY)
                    .bind(&v.id)
                    .bind(at.0)
                    .bind(v.state().as_str())
                    .bind(detail)
                    .execute(&mut *tx)
                    .await?;
            }
            // An end at a site leaves files there: the broker keeps them.
            let leaves = v.stdout.is_some() || v.stderr.is_some() || !v.outputs.is_empty();
            let stay = |site: &String| {
                let stay = self
                    .outputs_stay
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                stay.contains(site)
            };
            let away = v.site.as_ref().is_some_and(|s| !stay(s));
            if let (true, true, true, Some(_), Some(ended)) =
                (v.state().is_terminal(), leaves, away, &v.site_job, v.ended)
            {
                sqlx::query("INSERT INTO keep (job, due) VALUES ($1, $2) ON CONFLICT (job) DO NOTHING")
                    .bind(&v.id)
                    .bind(ended.0)
                    .execute(&mut *tx)
                    .await?;
                to_keep = true;
            }
        }
        tx.commit().await?;
        if to_keep {
            self.keep_due.notify_one();
        }
        if let Some(g) = feed.as_mut() {
            **g = last;
        }
        for (v, _) in writes {
            self.track(v, false);
            self.announce(v);
        }
        Ok(())
    }

    /// `owner`'s job with idempotency key `key`.
    pub async fn by_key(&self, owner: &str, key: &str) -> Result<Option<StoredJob>, DbError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE owner = $1 AND idem = $2"))
            .bind(owner)
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(row_to_job))
    }

    /// `owner`'s jobs that changed after feed version `after`, oldest change
    /// first, at most `limit`, with the version of the last one (`after`
    /// when none did).
    pub async fn changes(&self, owner: &str, after: i64, limit: i64) -> Result<(Vec<StoredJob>, i64), DbError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS}, version FROM jobs WHERE owner = $1 AND version > $2 ORDER BY version LIMIT $3"
        ))
        .bind(owner)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let last = rows.last().map_or(after, |r| r.get::<i64, _>("version"));
        Ok((rows.iter().map(row_to_job).collect(), last))
    }

    /// One job's state alone: one indexed read, for a check before acting.
    pub async fn state(&self, id: &str) -> Result<Option<BrokerState>, DbError> {
        let row = sqlx::query("SELECT state FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| state_of(&r.get::<String, _>("state"))))
    }

    /// The states of the jobs `ids` that exist, in one query.
    pub async fn states(&self, ids: &[&str]) -> Result<HashMap<String, BrokerState>, DbError> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let marks: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!("SELECT id, state FROM jobs WHERE id IN ({})", marks.join(", "));
        let mut q = sqlx::query(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        Ok(q.fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| (r.get("id"), state_of(&r.get::<String, _>("state"))))
            .collect())
    }

    /// One job with its history.
    pub async fn get(&self, id: &str) -> Result<Option<StoredJob>, DbError> {
        let Some(row) = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let mut j = row_to_job(&row);
        let hist = sqlx::query("SELECT at, state, detail FROM history WHERE job = $1 ORDER BY n")
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
        j.view.history = hist
            .iter()
            .map(|h| HistoryEntry {
                at: Time(h.get("at")),
                state: state_of(&h.get::<String, _>("state")),
                detail: h.get("detail"),
            })
            .collect();
        Ok(Some(j))
    }

    /// The jobs of workflow or co-allocation `group` (a workflow's tasks
    /// and their reruns), without their histories.
    pub async fn members_of(&self, group: &str) -> Result<Vec<StoredJob>, DbError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM jobs WHERE member_of = $1"))
            .bind(group)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(row_to_job).collect())
    }

    /// Gives the jobs and reservations stored before they had a column
    /// for what they are part of theirs, read once from the ids those
    /// versions made (`wID-k`, a rerun `wID-k.n`; `cGROUP-k`; `rwID-k`): the
    /// one place an id is parsed.
    async fn fill_members(pool: &AnyPool) -> Result<(), DbError> {
        // A workflow task's reservation was `rWID-K` (a rerun's `rWID-K.S`).
        let reservations: Vec<String> =
            sqlx::query("SELECT id FROM reservations WHERE workflow IS NULL AND id LIKE 'rw%'")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| r.get("id"))
                .collect();
        for id in &reservations {
            if let Some((workflow, _)) = id[1..].split_once('-') {
                sqlx::query("UPDATE reservations SET workflow = $1 WHERE id = $2")
                    .bind(workflow)
                    .bind(id)
                    .execute(pool)
                    .await?;
            }
        }
        let ids: Vec<String> = sqlx::query("SELECT id FROM jobs WHERE member IS NULL")
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| r.get("id"))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let mut tx = pool.begin().await?;
        for id in &ids {
            let member = legacy_member(id);
            sqlx::query("UPDATE jobs SET member = $1, member_of = $2 WHERE id = $3")
                .bind(to_json(&member)?)
                .bind(member.group())
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The job sent to `site` under the site's id `site_job`. A site whose
    /// database was replaced numbers its jobs afresh, so an unfinished job
    /// wins over finished ones with the same id, and a newer over an older.
    pub async fn by_site_job(&self, site: &str, site_job: &str) -> Result<Option<StoredJob>, DbError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM jobs WHERE site = $1 AND site_job = $2
             ORDER BY CASE WHEN state IN ('finished', 'failed', 'cancelled') THEN 1 ELSE 0 END, submitted DESC
             LIMIT 1"
        ))
        .bind(site)
        .bind(site_job)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(row_to_job))
    }

    /// A page of an owner's jobs in `q.sort`'s order (then by id): at most
    /// `q.limit`, optionally in one state, submitted at or after `q.since`,
    /// and after the owner's job `q.before` in that order. `Ok(None)` when
    /// `q.before` is not one of the owner's jobs.
    pub async fn list(&self, owner: &str, q: &JobPage) -> Result<Option<Vec<BrokerJob>>, DbError> {
        let key = q.sort.key.expression();
        let after = match &q.before {
            Some(id) => {
                let row = sqlx::query(&format!("SELECT {key} AS k FROM jobs WHERE id = $1 AND owner = $2"))
                    .bind(id)
                    .bind(owner)
                    .fetch_optional(&self.pool)
                    .await?;
                let Some(row) = row else { return Ok(None) };
                Some((row.get::<i64, _>("k"), id.clone()))
            }
            None => None,
        };
        // Parameters numbered in the order they are bound below.
        let mut sql = format!("SELECT {COLUMNS} FROM jobs WHERE owner = $1");
        let mut n = 1;
        let mut next = || {
            n += 1;
            n
        };
        if q.state.is_some() {
            sql += &format!(" AND state = ${}", next());
        }
        if q.since.is_some() {
            sql += &format!(" AND submitted >= ${}", next());
        }
        let (cmp, dir) = if q.sort.descending { ("<", "DESC") } else { (">", "ASC") };
        if after.is_some() {
            let (t, id) = (next(), next());
            sql += &format!(" AND ({key} {cmp} ${t} OR ({key} = ${t} AND id > ${id}))");
        }
        sql += &format!(" ORDER BY {key} {dir}, id LIMIT ${}", next());
        let mut query = sqlx::query(&sql).bind(owner);
        if let Some(s) = q.state {
            query = query.bind(s.as_str());
        }
        if let Some(t) = q.since {
            query = query.bind(t.0);
        }
        if let Some((t, id)) = after {
            query = query.bind(t).bind(id);
        }
        let rows = query.bind(q.limit as i64).fetch_all(&self.pool).await?;
        Ok(Some(rows.iter().map(|r| row_to_job(r).view).collect()))
    }

    /// Jobs in any of `states`, oldest first (for dispatch).
    pub async fn in_states(&self, states: &[BrokerState]) -> Result<Vec<StoredJob>, DbError> {
        let marks: Vec<String> = (1..=states.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs WHERE state IN ({}) ORDER BY submitted, id",
            marks.join(", ")
        );
        let mut q = sqlx::query(&sql);
        for s in states {
            q = q.bind(s.as_str());
        }
        Ok(q.fetch_all(&self.pool).await?.iter().map(row_to_job).collect())
    }

    /// Remembers that a site's job was left behind by a move, so its later
    /// changes are ignored rather than waited for.
    pub async fn retire(&self, site: &str, site_job: &str) -> Result<(), DbError> {
        sqlx::query("INSERT INTO retired (site, site_job) VALUES ($1, $2)")
            .bind(site)
            .bind(site_job)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Leaves the outputs of the jobs of `sites` where they are: the
    /// broker does not keep copies of them.
    pub fn outputs_stay_at(&self, sites: impl IntoIterator<Item = String>) {
        let mut stay = self
            .outputs_stay
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stay.extend(sites);
    }

    /// Waits until an end puts a job on the list to keep (at once when one
    /// did since the last wait).
    pub async fn keep_due(&self) {
        self.keep_due.notified().await;
    }

    /// Up to `limit` ended jobs whose outputs are due to be kept at `now`,
    /// the longest waiting first.
    pub async fn to_keep(&self, now: Time, limit: i64) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query("SELECT job FROM keep WHERE due <= $1 ORDER BY due LIMIT $2")
            .bind(now.0)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    /// Tries keeping job `id`'s outputs again at `due`.
    pub async fn keep_later(&self, id: &str, due: Time) -> Result<(), DbError> {
        sqlx::query("UPDATE keep SET due = $1 WHERE job = $2")
            .bind(due.0)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Records what was kept of the outputs of job `id`'s run that ended at
    /// `ended` (each file's digest and size, or why not), replacing an
    /// earlier run's, and takes the job off the list to keep. With no
    /// files, only the latter.
    pub async fn kept(&self, id: &str, ended: Time, files: &[KeptFile]) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        if !files.is_empty() {
            sqlx::query("DELETE FROM outputs WHERE job = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
        }
        for f in files {
            sqlx::query("INSERT INTO outputs (job, ended, name, sha, bytes, note) VALUES ($1, $2, $3, $4, $5, $6)")
                .bind(id)
                .bind(ended.0)
                .bind(&f.shown.name)
                .bind(&f.sha)
                .bind(f.shown.bytes.and_then(|b| i64::try_from(b).ok()))
                .bind(&f.shown.note)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("DELETE FROM keep WHERE job = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// What was kept of file `name` of job `id`'s run that ended at
    /// `ended`, if its outputs were kept.
    pub async fn kept_file(&self, id: &str, ended: Time, name: &str) -> Result<Option<KeptFile>, DbError> {
        let row = sqlx::query("SELECT name, sha, bytes, note FROM outputs WHERE job = $1 AND name = $2 AND ended = $3")
            .bind(id)
            .bind(name)
            .bind(ended.0)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.as_ref().map(kept_row))
    }

    /// What was kept of the outputs of job `id`'s run that ended at `ended`,
    /// by name.
    pub async fn kept_of(&self, id: &str, ended: Time) -> Result<Vec<KeptFile>, DbError> {
        let rows =
            sqlx::query("SELECT name, sha, bytes, note FROM outputs WHERE job = $1 AND ended = $2 ORDER BY name")
                .bind(id)
                .bind(ended.0)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.iter().map(kept_row).collect())
    }

    /// Whether a site's job was left behind by a move.
    pub async fn is_retired(&self, site: &str, site_job: &str) -> Result<bool, DbError> {
        let row = sqlx::query("SELECT site FROM retired WHERE site = $1 AND site_job = $2")
            .bind(site)
            .bind(site_job)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    /// Site `site` holds reservation `reservation` for job `job`, as `owner`.
    pub async fn add_hold(&self, site: &str, reservation: u64, job: &str, owner: &str) -> Result<(), DbError> {
        sqlx::query("INSERT INTO holds (site, reservation, job, owner) VALUES ($1, $2, $3, $4)")
            .bind(site)
            .bind(reservation as i64)
            .bind(job)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The hold `reservation` at `site` is given back or taken by its job.
    pub async fn drop_hold(&self, site: &str, reservation: u64) -> Result<(), DbError> {
        sqlx::query("DELETE FROM holds WHERE site = $1 AND reservation = $2")
            .bind(site)
            .bind(reservation as i64)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Every hold written down: (site, reservation, owner).
    pub async fn holds(&self) -> Result<Vec<(String, u64, String)>, DbError> {
        let rows = sqlx::query("SELECT site, reservation, owner FROM holds ORDER BY site, reservation")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1) as u64, r.get::<String, _>(2)))
            .collect())
    }

    /// Stores or updates a reservation.
    pub async fn save_reservation(&self, r: &BrokerReservation) -> Result<(), DbError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM reservations WHERE id = $1")
            .bind(&r.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO reservations (id, owner, site, site_reservation, amount, start, stop, state, workflow)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&r.id)
        .bind(&r.owner)
        .bind(&r.site)
        .bind(r.site_reservation as i64)
        .bind(i64::from(r.amount))
        .bind(r.start.0)
        .bind(r.end.0)
        .bind(r.state().as_str())
        .bind(&r.workflow)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A reservation by id.
    pub async fn reservation(&self, id: &str) -> Result<Option<BrokerReservation>, DbError> {
        let row = sqlx::query(
            "SELECT id, owner, site, site_reservation, amount, start, stop, state, workflow FROM reservations WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.as_ref().map(reservation_of))
    }

    /// The committed reservations at `site` that start after `after` and
    /// belong to no workflow (users' own, and brokers' above), by start.
    pub async fn reservations_at(&self, site: &str, after: Time) -> Result<Vec<BrokerReservation>, DbError> {
        let rows = sqlx::query(
            "SELECT id, owner, site, site_reservation, amount, start, stop, state, workflow FROM reservations \
             WHERE site = $1 AND state = 'committed' AND workflow IS NULL AND start > $2 ORDER BY start, id",
        )
        .bind(site)
        .bind(after.0)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(reservation_of).collect())
    }

    /// `owner`'s reservations, by start.
    pub async fn reservations_of(&self, owner: &str) -> Result<Vec<BrokerReservation>, DbError> {
        let rows = sqlx::query(
            "SELECT id, owner, site, site_reservation, amount, start, stop, state, workflow FROM reservations \
             WHERE owner = $1 ORDER BY start, id",
        )
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.iter().map(reservation_of).collect())
    }

    /// How many of `owner`'s jobs count against the per-user limit: not
    /// ended and not held.
    pub fn unfinished_of(&self, owner: &str) -> usize {
        self.unfinished
            .lock()
            .map(|all| all.get(owner).map_or(0, HashSet::len))
            .unwrap_or(0)
    }

    /// Slot-seconds `owner` holds in committed reservations that end after `now`.
    pub async fn reserved_slot_seconds(&self, owner: &str, now: Time) -> Result<i64, DbError> {
        let rows = sqlx::query(
            "SELECT amount, start, stop FROM reservations WHERE owner = $1 AND state = 'committed' AND stop > $2",
        )
        .bind(owner)
        .bind(now.0)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| r.get::<i64, _>("amount") * (r.get::<i64, _>("stop") - r.get::<i64, _>("start").max(now.0)))
            .sum())
    }

    /// Stores or updates a workflow.
    pub async fn save_workflow(&self, w: &StoredWorkflow) -> Result<(), DbError> {
        let (view, spec, plan) = (to_json(&w.view)?, to_json(&w.spec)?, to_json(&w.plan)?);
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM workflows WHERE id = $1")
            .bind(&w.view.id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO workflows (id, owner, state, submitted, view, spec, plan) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&w.view.id)
        .bind(&w.view.owner)
        .bind(w.view.state.as_str())
        .bind(w.view.submitted.0)
        .bind(view)
        .bind(spec)
        .bind(plan)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A workflow by id.
    pub async fn workflow(&self, id: &str) -> Result<Option<StoredWorkflow>, DbError> {
        let row = sqlx::query("SELECT view, spec, plan FROM workflows WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(row_to_workflow).transpose()
    }

    /// `owner`'s workflows, oldest first.
    pub async fn workflows_of(&self, owner: &str) -> Result<Vec<StoredWorkflow>, DbError> {
        let rows = sqlx::query("SELECT view, spec, plan FROM workflows WHERE owner = $1 ORDER BY submitted, id")
            .bind(owner)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_workflow).collect()
    }

    /// Every workflow in `state`, oldest first.
    pub async fn workflows_in(&self, state: WorkflowState) -> Result<Vec<StoredWorkflow>, DbError> {
        let rows = sqlx::query("SELECT view, spec, plan FROM workflows WHERE state = $1 ORDER BY submitted, id")
            .bind(state.as_str())
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(row_to_workflow).collect()
    }

    /// The database's size on disk, bytes (SQLite: its pages, the
    /// write-ahead log's included; PostgreSQL: `pg_database_size`).
    pub async fn size_bytes(&self) -> Result<i64, DbError> {
        let sql = if self.sqlite {
            "SELECT page_count * page_size AS n FROM pragma_page_count(), pragma_page_size()"
        } else {
            "SELECT CAST(pg_database_size(current_database()) AS BIGINT) AS n"
        };
        let row = sqlx::query(sql).fetch_one(&self.pool).await?;
        Ok(row.get("n"))
    }

    /// The descriptions of `owner`'s jobs that have not ended, for the
    /// uploads they still need.
    pub async fn unfinished_specs(&self, owner: &str) -> Result<Vec<String>, DbError> {
        let rows =
            sqlx::query("SELECT spec FROM jobs WHERE owner = $1 AND state NOT IN ('finished', 'failed', 'cancelled')")
                .bind(owner)
                .fetch_all(&self.pool)
                .await?;
        Ok(rows.iter().map(|r| r.get("spec")).collect())
    }

    /// Jobs per state, for metrics, in state name order: as kept in
    /// memory, not counted from the table.
    pub fn count_by_state(&self) -> Vec<(String, i64)> {
        let Ok(states) = self.states.lock() else {
            return Vec::new();
        };
        states
            .counts
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(s, &n)| (s.to_string(), n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brokk_broker::jobs::Entry;

    fn job(id: &str, owner: &str, state: BrokerState) -> StoredJob {
        StoredJob {
            // Rows as the core left them: the store keeps whatever state it is given.
            view: BrokerJob::new(id.into(), owner.into(), "json".into(), Entry::Accepted, Time(0)).restored(state),
            spec: "{}".into(),
            prefs: "{}".into(),
            key: None,
        }
    }

    /// An empty directory for test `name`'s database, and the database's path.
    fn scratch(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("brokk-db-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("broker.db");
        (dir, path)
    }

    /// A listing sorted by start or end comes in that order page after
    /// page, a job not started (or not ended) before every start (or end),
    /// ties by id, and only the owner's jobs.
    #[tokio::test]
    async fn listings_sorted_by_a_time_page_through_every_job_once_in_order() {
        let (dir, path) = scratch("sorted");
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        // (id, submitted, started, ended)
        let rows = [
            ("a", 1, Some(10), Some(50)),
            ("b", 2, Some(12), Some(30)),
            ("c", 3, Some(12), None),
            ("d", 4, None, None),
            ("e", 5, Some(11), Some(30)),
            ("f", 6, Some(20), Some(40)),
            ("g", 7, None, None),
        ];
        for (id, submitted, started, ended) in rows {
            let mut j = job(id, "ann", BrokerState::Finished);
            j.view.submitted = Time(submitted);
            db.insert(&j).await.unwrap();
            j.view.started = started.map(Time);
            j.view.ended = ended.map(Time);
            db.update(&j.view, None).await.unwrap();
        }
        db.insert(&job("z", "bob", BrokerState::Finished)).await.unwrap();
        let pages = |sort: &str| {
            let db = &db;
            let sort: JobSort = sort.parse().unwrap();
            async move {
                let mut all = Vec::new();
                let mut before = None;
                loop {
                    let q = JobPage {
                        before: before.clone(),
                        limit: 3,
                        sort,
                        ..JobPage::default()
                    };
                    let page = db.list("ann", &q).await.unwrap().unwrap();
                    before = page.last().map(|j| j.id.clone());
                    all.extend(page.iter().map(|j| j.id.clone()));
                    if page.len() < 3 {
                        return all.join("");
                    }
                }
            }
        };
        assert_eq!(pages("-submitted").await, "gfedcba");
        assert_eq!(pages("submitted").await, "abcdefg");
        assert_eq!(pages("-ended").await, "afbecdg");
        assert_eq!(pages("ended").await, "cdgbefa");
        assert_eq!(pages("started").await, "dgaebcf");
        assert_eq!(pages("-started").await, "fbceadg");
        assert!("-colour"
            .parse::<JobSort>()
            .unwrap_err()
            .contains("submitted, started, ended"));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// What a job or a reservation is part of is stored with it and read
    /// back; those stored before there was a column for it get theirs,
    /// once, from their ids.
    #[tokio::test]
    async fn a_jobs_workflow_or_coallocation_is_a_field_and_older_jobs_get_theirs() {
        let (dir, path) = scratch("member");
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        let mut task = job("t-new", "ann", BrokerState::Planned);
        task.view.member = Member::Task {
            workflow: "w1".into(),
            task: 3,
            attempt: 1,
        };
        db.insert(&task).await.unwrap();
        for id in ["w1-0", "w1-2.1", "cab12-1", "4f2a9e", "w1-x", "c0-1.2"] {
            db.insert(&job(id, "ann", BrokerState::Accepted)).await.unwrap();
        }
        for id in ["rw1-0", "r0a1b2"] {
            let r = BrokerReservation::new(id.into(), "ann".into(), "a".into(), 1, 1, Time(0), Time(10));
            db.save_reservation(&r).await.unwrap();
        }
        // As a version before the column left them.
        sqlx::query("UPDATE jobs SET member = NULL, member_of = NULL WHERE id <> 't-new'")
            .execute(&db.pool)
            .await
            .unwrap();
        drop(db);
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        let member = |id: &str| {
            let db = db.clone();
            let id = id.to_string();
            async move { db.get(&id).await.unwrap().unwrap().view.member }
        };
        assert_eq!(
            member("t-new").await,
            task.view.member,
            "stored as given, not read from the id"
        );
        assert_eq!(
            member("w1-2.1").await,
            Member::Task {
                workflow: "w1".into(),
                task: 2,
                attempt: 1
            }
        );
        assert_eq!(
            member("cab12-1").await,
            Member::Part {
                coallocation: "cab12".into(),
                index: 1
            }
        );
        for alone in ["4f2a9e", "w1-x", "c0-1.2"] {
            assert_eq!(member(alone).await, Member::Alone, "{alone}");
        }
        let workflow_of = |id: &str| {
            let db = db.clone();
            let id = id.to_string();
            async move { db.reservation(&id).await.unwrap().unwrap().workflow }
        };
        assert_eq!(workflow_of("rw1-0").await.as_deref(), Some("w1"));
        assert_eq!(workflow_of("r0a1b2").await, None);
        let mut of_w1: Vec<String> = db
            .members_of("w1")
            .await
            .unwrap()
            .into_iter()
            .map(|j| j.view.id)
            .collect();
        of_w1.sort();
        assert_eq!(of_w1, ["t-new", "w1-0", "w1-2.1"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Holds written down are read back after a reopen until dropped.
    #[tokio::test]
    async fn holds_are_written_down_until_dropped() {
        let (dir, path) = scratch("holds");
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        db.add_hold("b", 9, "j1", "ann").await.unwrap();
        db.add_hold("a", u64::from(u32::MAX) * 4, "j1", "ann").await.unwrap();
        db.add_hold("a", 3, "j2", "bob").await.unwrap();
        db.drop_hold("a", 3).await.unwrap();
        drop(db);
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        assert_eq!(
            db.holds().await.unwrap(),
            [
                ("a".to_string(), u64::from(u32::MAX) * 4, "ann".to_string()),
                ("b".to_string(), 9, "ann".to_string())
            ]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The per-user count follows inserts and state changes, leaves held and
    /// ended jobs out, and is read back from the table when opened again.
    #[tokio::test]
    async fn unfinished_jobs_are_counted_per_owner_and_survive_a_reopen() {
        let (dir, path) = scratch("unfinished");
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        for (id, owner) in [("a1", "ann"), ("a2", "ann"), ("a3", "ann"), ("b1", "bob")] {
            db.insert(&job(id, owner, BrokerState::Accepted)).await.unwrap();
        }
        assert_eq!((db.unfinished_of("ann"), db.unfinished_of("bob")), (3, 1));
        let mut a1 = job("a1", "ann", BrokerState::Running).view;
        db.update(&a1, None).await.unwrap();
        assert_eq!(db.unfinished_of("ann"), 3, "running still counts");
        a1 = a1.restored(BrokerState::Finished);
        db.update(&a1, None).await.unwrap();
        db.update(&a1, None).await.unwrap();
        assert_eq!(db.unfinished_of("ann"), 2, "an ended job leaves the count once");
        assert_eq!(db.state("a1").await.unwrap(), Some(BrokerState::Finished));
        assert_eq!(db.state("nobody's").await.unwrap(), None);
        db.update(&job("a2", "ann", BrokerState::Held).view, None)
            .await
            .unwrap();
        db.update(&job("b1", "bob", BrokerState::Cancelled).view, None)
            .await
            .unwrap();
        assert_eq!((db.unfinished_of("ann"), db.unfinished_of("bob")), (1, 0));
        db.insert(&job("a4", "ann", BrokerState::Held)).await.unwrap();
        drop(db);
        let again = Db::open(path.to_str().unwrap()).await.unwrap();
        assert_eq!((again.unfinished_of("ann"), again.unfinished_of("bob")), (1, 0));
        again
            .update(&job("a2", "ann", BrokerState::Accepted).view, None)
            .await
            .unwrap();
        assert_eq!(again.unfinished_of("ann"), 2, "a released job counts again");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// What the table says, counted.
    async fn counted(db: &Db) -> Vec<(String, i64)> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state ORDER BY state")
            .fetch_all(&db.pool)
            .await
            .unwrap();
        rows.iter().map(|r| (r.get("state"), r.get("n"))).collect()
    }

    /// The jobs per state `/metrics` gives are kept as jobs are written,
    /// and equal the table's count through every kind of write: a new job,
    /// a change, the same end written twice, a job that ends at once, and
    /// a reopen.
    #[tokio::test]
    async fn jobs_per_state_are_kept_equal_to_the_tables_count() {
        let (dir, path) = scratch("states");
        let db = Db::open(path.to_str().unwrap()).await.unwrap();
        for id in ["a", "b", "c", "d"] {
            db.insert(&job(id, "ann", BrokerState::Accepted)).await.unwrap();
        }
        db.insert(&job("e", "ann", BrokerState::Failed)).await.unwrap();
        let steps = [
            ("a", BrokerState::Dispatched),
            ("a", BrokerState::Running),
            ("a", BrokerState::Finished),
            ("a", BrokerState::Finished),
            ("b", BrokerState::Held),
            ("c", BrokerState::Cancelled),
            ("b", BrokerState::Accepted),
        ];
        for (id, state) in steps {
            db.update(&job(id, "ann", state).view, None).await.unwrap();
            assert_eq!(db.count_by_state(), counted(&db).await, "after {id} {state}");
        }
        drop(db);
        let again = Db::open(path.to_str().unwrap()).await.unwrap();
        assert_eq!(again.count_by_state(), counted(&again).await);
        again
            .update(&job("d", "ann", BrokerState::Running).view, None)
            .await
            .unwrap();
        again
            .update(&job("d", "ann", BrokerState::Failed).view, None)
            .await
            .unwrap();
        assert_eq!(again.count_by_state(), counted(&again).await);
        assert!(again.count_by_state().contains(&("failed".to_string(), 2)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
