//! The service's driver of the broker's own core
//! ([`brokk_broker::broker::BrokerCore`]): the core decides, this module
//! carries out what it asks and feeds the answers back.
//!
//! The core holds every job (a co-allocation's parts through
//! [`BrokerCore::coallocate`]) from their acceptance to their end; every
//! change it makes to one is written by one writer task in the order the
//! core made them, several at a time in one transaction (group commit),
//! and an operation answers its user only once its changes are stored. A write that fails is answered as a
//! failure and tried again with the next, never reported stored.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use brokk_broker::broker::{BrokerCore, Effect};
use brokk_broker::jobs::BrokerJob;
use brokk_broker::JobHandle;
use tokio::sync::{mpsc, oneshot};

use super::*;
use crate::db::HistoryLine;

/// Sends in flight at once.
const SENDS_IN_FLIGHT: usize = 32;

/// Batches the core decides in one turn of the dispatcher.
const ROUNDS_PER_TURN: usize = 16;

/// Rows written in one transaction at most.
const GROUP: usize = 512;

/// A site's answer to a job sent: the job, the site's position, the
/// site's id for the job or why it did not take it.
type SendAnswer = (String, usize, Result<String, brokk_broker::SiteError>);

/// An answer to something the core asked about one job.
enum Answer {
    /// A site's answer to the job sent.
    Sent(SendAnswer),
    /// A site's answer when asked to hold a reservation for the job.
    Held(String, usize, Result<brokk_core::Reply, brokk_broker::SiteError>),
    /// Where the job stands at its site.
    Status(String, Result<brokk_broker::JobState, brokk_broker::SiteError>),
    /// Where the job was found under its key, if anywhere, with what its
    /// site reports of it there.
    Found(
        String,
        Result<Option<(usize, String, brokk_broker::broker::Report)>, String>,
    ),
    /// The reservation the job names, as stored.
    Resolved(String, Result<Option<brokk_broker::broker::Reserved>, String>),
}

/// Rows to store, and who waits for them.
struct Batch {
    /// New jobs, stored before any change of theirs.
    new: Vec<StoredJob>,
    rows: Vec<(BrokerJob, Option<HistoryLine>)>,
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// The core, shared by every task of the service, and its writer.
#[derive(Debug)]
pub struct Broker {
    core: Arc<Mutex<BrokerCore>>,
    writes: mpsc::UnboundedSender<Batch>,
    record: Option<Arc<crate::record::Recorder>>,
    counters: Arc<Counters>,
    /// Every job the core has taken until its end is stored: the careful
    /// path leaves these alone even where the database, behind the core,
    /// still says accepted.
    taken: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} rows", self.rows.len())
    }
}

/// Answers once what an operation changed is stored.
pub(super) struct Stored(Option<oneshot::Receiver<Result<(), String>>>);

impl Stored {
    /// Waits until the changes are stored; an error when they could not be.
    pub(super) async fn wait(self) -> Result<(), ServiceError> {
        match self.0 {
            None => Ok(()),
            Some(rx) => match rx.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(ServiceError::Unavailable(format!("storing the job: {e}"))),
                Err(_) => Err(ServiceError::Unavailable("storing the job: the writer stopped".into())),
            },
        }
    }
}

impl Broker {
    /// The driver of `core`, its writer started on the current runtime
    /// over `db`; ended jobs go to `record` when one is kept, and what it
    /// sees to `counters`.
    pub fn start(
        core: Arc<Mutex<BrokerCore>>,
        db: Db,
        record: Option<Arc<crate::record::Recorder>>,
        counters: Arc<Counters>,
    ) -> Broker {
        let (writes, mut rx) = mpsc::unbounded_channel::<Batch>();
        let taken: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
        let ended = taken.clone();
        tokio::spawn(async move {
            // The changes a failed transaction held, written first with the
            // next: the core made them, and later ones build on them. New
            // jobs are not: their requests were answered that they failed.
            let mut backlog: Vec<(BrokerJob, Option<HistoryLine>)> = Vec::new();
            while let Some(first) = rx.recv().await {
                let mut new: Vec<StoredJob> = Vec::new();
                let mut rows = std::mem::take(&mut backlog);
                let mut waiting = Vec::new();
                let mut next = Some(first);
                while let Some(b) = next.take() {
                    new.extend(b.new);
                    rows.extend(b.rows);
                    waiting.extend(b.done);
                    if new.len() + rows.len() < GROUP {
                        next = rx.try_recv().ok();
                    }
                }
                // A job's changes come after it in the queue: new jobs
                // first keeps every job's own order.
                let mut outcome = db.insert_all(&new).await.map_err(|e| e.to_string());
                if let Err(e) = &outcome {
                    tracing::error!("storing {} new jobs: {e}", new.len());
                }
                let refs: Vec<(&BrokerJob, Option<HistoryLine>)> = rows.iter().map(|(v, h)| (v, h.clone())).collect();
                if let Err(e) = db.update_all(&refs).await {
                    tracing::error!("storing {} job changes: {e}; trying again with the next", rows.len());
                    outcome = Err(e.to_string());
                    backlog = rows;
                } else {
                    let mut taken = ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    for (v, _) in rows.iter().filter(|(v, _)| v.state().is_terminal()) {
                        taken.remove(&v.id);
                    }
                }
                for w in waiting {
                    let _ = w.send(outcome.clone());
                }
            }
        });
        Broker {
            core,
            writes,
            record,
            counters,
            taken,
        }
    }

    /// Runs `f` on the core; what it changed is queued to be stored in
    /// the order changed. Returns `f`'s answer, the other effects, and
    /// what answers once the changes are stored.
    pub(super) fn run<T>(&self, f: impl FnOnce(&mut BrokerCore) -> T) -> (T, Vec<Effect>, Stored) {
        // A rule that panicked left the core as it was between two calls.
        let mut core = self.core.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let out = f(&mut core);
        let mut rows = Vec::new();
        let mut rest = Vec::new();
        for e in core.drain() {
            match e {
                Effect::Persist { job, line } => {
                    if let (Some(r), Some(l)) = (&self.record, &line) {
                        if l.state.is_terminal() {
                            r.ended(&job);
                        }
                    }
                    if line.as_ref().is_some_and(|l| l.state == BrokerState::Failed) && job.site.is_none() {
                        // Failed before any site took it: no site could.
                        self.counters.undispatchable.fetch_add(1, Ordering::Relaxed);
                    }
                    rows.push((*job, line.map(|l| (l.at, l.detail))));
                }
                other => rest.push(other),
            }
        }
        if rows.is_empty() {
            return (out, rest, Stored(None));
        }
        let (tx, rx) = oneshot::channel();
        // Sent under the lock: the writer sees the changes in the core's order.
        let batch = Batch {
            new: Vec::new(),
            rows,
            done: Some(tx),
        };
        let stored = match self.writes.send(batch) {
            Ok(()) => Stored(Some(rx)),
            Err(_) => Stored(Some(oneshot::channel().1)),
        };
        drop(core);
        (out, rest, stored)
    }

    /// Reads the core: `f`'s answer.
    pub(super) fn read<T>(&self, f: impl FnOnce(&BrokerCore) -> T) -> T {
        f(&self.core.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Answers once every change queued so far is stored: a read of the
    /// database after it sees every job the core has let go as it left.
    pub(super) fn flush(&self) -> Stored {
        self.insert(Vec::new())
    }

    /// Stores new jobs with those other requests store at the same time;
    /// answers once they are stored.
    pub(super) fn insert(&self, new: Vec<StoredJob>) -> Stored {
        let (tx, rx) = oneshot::channel();
        let batch = Batch {
            new,
            rows: Vec::new(),
            done: Some(tx),
        };
        match self.writes.send(batch) {
            Ok(()) => Stored(Some(rx)),
            Err(_) => Stored(Some(oneshot::channel().1)),
        }
    }

    /// Marks jobs `ids` as the core's (`yes`), or not after all (their
    /// rows could not be stored).
    pub(super) fn claim(&self, ids: &[String], yes: bool) {
        let mut taken = self.taken.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for id in ids {
            if yes {
                taken.insert(id.clone());
            } else {
                taken.remove(id);
            }
        }
    }

    /// Hands the core a job already stored.
    pub(super) fn adopt(&self, view: BrokerJob, job: Job, prefs: JobPreferences) {
        self.claim(std::slice::from_ref(&view.id), true);
        let _ = self.run(move |c| c.adopt(view, job, prefs));
    }

    /// Hands the core a planned job whose turn has come (`detail` says
    /// why), to be accepted and decided; answers once that is stored.
    pub(super) fn ready(
        &self,
        view: BrokerJob,
        job: Job,
        prefs: JobPreferences,
        detail: String,
    ) -> Result<Stored, ServiceError> {
        let id = view.id.clone();
        self.claim(std::slice::from_ref(&id), true);
        let (done, _, stored) = self.run(move |c| c.ready(now(), view, job, prefs, detail));
        if let Err(e) = done {
            self.claim(&[id], false);
            return Err(ServiceError::Conflict(e.to_string()));
        }
        Ok(stored)
    }

    /// Hands the core a job stored before this process started
    /// ([`BrokerCore::inherit`]).
    pub(super) fn inherit(&self, view: BrokerJob, job: Job, prefs: JobPreferences) {
        self.claim(std::slice::from_ref(&view.id), true);
        let _ = self.run(move |c| c.inherit(now(), view, job, prefs));
    }

    /// Has the core fail a stored job it cannot take (`why`: its
    /// description no longer reads back); answers once that is stored.
    pub(super) fn refuse(&self, view: BrokerJob, why: String) -> Stored {
        self.claim(std::slice::from_ref(&view.id), true);
        self.run(move |c| c.refuse(now(), view, why)).2
    }

    /// Whether job `id` is the core's (held by it, or let go and its end
    /// not yet stored).
    pub(super) fn took(&self, id: &str) -> bool {
        self.taken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(id)
    }

    /// Jobs the core holds, and those of them waiting for a decision.
    pub fn held_and_waiting(&self) -> (usize, usize) {
        let core = self.core.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (core.len(), core.pending())
    }

    /// What the core has asked of the sites by kind, its jobs that
    /// started later than it predicted and the slots it reserved that were
    /// gone ([AB-avail]'s violations).
    pub fn requests_and_violations(&self) -> (brokk_broker::broker::Requests, u64, u64) {
        self.read(|c| (c.requests(), c.violations(), c.refused_slots()))
    }

    /// Whether the core holds job `id`, and whose it is.
    pub(super) fn owner_of(&self, id: &str) -> Option<String> {
        self.core
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .job(id)
            .map(|v| v.owner.clone())
    }
}

impl Service {
    /// Decides the jobs the core holds that wait, a batch at a time, and
    /// carries out what the core asks (fetch, send, withdraw); the sends
    /// of a batch go while the next is decided. At most
    /// [`ROUNDS_PER_TURN`] batches, so that a flood of plain jobs does not
    /// keep the dispatcher's other work (co-allocations, workflow rounds)
    /// waiting: the dispatcher comes back at once for the rest.
    ///
    /// When the information lives for no time at all, a batch is one job,
    /// carried out before the next is decided: each decision then reads
    /// every site afresh after every earlier job landed, as a simulation
    /// without latency decides.
    pub(super) async fn dispatch_held(&self) -> Result<(), ServiceError> {
        let mut batches = tokio::task::JoinSet::new();
        let mut first_error = None;
        let exact = self.info.exact();
        let batch = if exact { 1 } else { super::dispatch::DECISION_BATCH };
        for _ in 0..ROUNDS_PER_TURN {
            let (_, fetches, _) = self.broker.run(|c| c.stale(now()));
            if let Err(e) = self.carry_out(fetches).await {
                first_error.get_or_insert(e);
                break;
            }
            let t = std::time::Instant::now();
            let (n, effects, stored) = self.broker.run(|c| c.decide(now(), batch));
            self.counters.decisions.fetch_add(n as u64, Ordering::Relaxed);
            if n > 0 {
                let each = t.elapsed().as_secs_f64() / n as f64;
                if let Ok(mut h) = self.counters.decision_latency.lock() {
                    h.observe_n(each, n as u64);
                }
            }
            while batches.len() >= super::dispatch::BATCHES_IN_FLIGHT {
                if let Some(Ok(Err(e))) = batches.join_next().await {
                    first_error.get_or_insert(e);
                }
            }
            let svc = self.clone();
            // Every batch is joined below, whatever fails: one dropped
            // half-way would leave its jobs on their way for ever.
            batches.spawn(async move {
                svc.carry_out(effects).await?;
                stored.wait().await
            });
            while exact && !batches.is_empty() {
                if let Some(Ok(Err(e))) = batches.join_next().await {
                    first_error.get_or_insert(e);
                }
            }
            if n == 0 {
                break;
            }
            if n == batch && self.broker.held_and_waiting().1 > 0 {
                // More wait than one turn decides: the dispatcher comes back.
                self.wake.notify_one();
            }
        }
        while let Some(r) = batches.join_next().await {
            if let Ok(Err(e)) = r {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Carries out `effects` and every effect the answers lead to: fetches
    /// all at once, sends, searches and reads several at once (each answer
    /// fed back, a refusal sending the job on), withdrawals one by one.
    /// Returns once the changes the answers made are stored.
    pub(super) async fn carry_out(&self, effects: Vec<Effect>) -> Result<(), ServiceError> {
        use futures_util::{FutureExt, StreamExt};
        let mut queue: VecDeque<Effect> = effects.into();
        let mut asked = futures_util::stream::FuturesUnordered::new();
        let mut last = Stored(None);
        loop {
            let mut fetch = Vec::new();
            while let Some(e) = queue.pop_front() {
                let ask = match e {
                    Effect::Fetch { site } => {
                        fetch.push(site);
                        continue;
                    }
                    Effect::Withdraw { site, site_job, owner } => {
                        let (_, more, stored) = self.withdraw(site, site_job, owner).await;
                        queue.extend(more);
                        last = stored;
                        continue;
                    }
                    Effect::HoldAtSite {
                        site,
                        site_job,
                        owner,
                        hold,
                    } => {
                        let (_, stored) = self.hold_at_site(site, site_job, owner, hold).await;
                        last = stored;
                        continue;
                    }
                    Effect::Release {
                        site,
                        reservation,
                        owner,
                    } => {
                        self.give_back(site, reservation, owner).await;
                        continue;
                    }
                    Effect::Retired { site, site_job, .. } => {
                        self.retired(site, &site_job).await;
                        continue;
                    }
                    Effect::CoAllocate {
                        group,
                        owner,
                        parts,
                        search,
                    } => {
                        let (_, more) = self.coallocation(&group, &owner, &parts, search).await?;
                        queue.extend(more);
                        continue;
                    }
                    Effect::Placed { .. } | Effect::Persist { .. } => continue,
                    Effect::Status { job, site, site_job } => self.status_of(job, site, site_job).boxed(),
                    Effect::Send {
                        job,
                        site,
                        wall,
                        claim,
                        delegation,
                    } => self.send(job, site, wall, claim, delegation).map(Answer::Sent).boxed(),
                    Effect::Hold {
                        job,
                        site,
                        owner,
                        request,
                        until,
                    } => self.hold_at(job, site, owner, request, until).boxed(),
                    Effect::Find { job, key } => self.find(job, key).boxed(),
                    Effect::Resolve { job, reservation } => self.resolve(job, reservation).boxed(),
                };
                if asked.len() >= SENDS_IN_FLIGHT {
                    if let Some(answer) = asked.next().await {
                        let (more, stored) = self.answered(answer);
                        queue.extend(more);
                        last = stored;
                    }
                }
                asked.push(ask);
            }
            if !fetch.is_empty() {
                let names: Vec<String> = {
                    let core = self
                        .broker
                        .core
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    fetch.iter().map(|&k| core.site_name(k).to_string()).collect()
                };
                // The answers reach the core as they are kept.
                self.fetch_info(names).await;
                continue;
            }
            match asked.next().await {
                Some(answer) => {
                    let (more, stored) = self.answered(answer);
                    queue.extend(more);
                    last = stored;
                }
                None => break,
            }
        }
        last.wait().await
    }

    /// An answer to what the core asked, counted and told to the core.
    fn answered(&self, answer: Answer) -> (Vec<Effect>, Stored) {
        let t = now();
        let (_, more, stored) = match answer {
            Answer::Sent((id, k, answer)) => {
                if answer.is_err() {
                    self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(site) = self.sites().get(k) {
                    self.per_site.sent(&site.name, answer.is_ok());
                }
                self.broker.run(|c| c.sent(t, &id, k, answer))
            }
            Answer::Held(id, k, reply) => {
                if reply.is_err() {
                    self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                }
                self.broker.run(|c| c.held(t, &id, k, reply))
            }
            Answer::Status(id, state) => {
                if state.is_err() {
                    self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                }
                self.broker.run(|c| c.status(t, &id, state))
            }
            Answer::Found(id, found) => self.broker.run(|c| c.found(t, &id, found)),
            Answer::Resolved(id, r) => self.broker.run(|c| c.resolved(t, &id, r)),
        };
        (more, stored)
    }

    /// Asks the site at position `k` where job `id`'s copy `site_job`
    /// stands.
    async fn status_of(&self, id: String, k: usize, site_job: String) -> Answer {
        let state = self
            .at_site(k, String::new(), move |c| c.status(&JobHandle(site_job)))
            .await;
        Answer::Status(id, state)
    }

    /// Records that the copy `site_job` at the site at position `k` was
    /// let go for a move, so that its site's reports of it are passed over.
    async fn retired(&self, k: usize, site_job: &str) {
        let name = self.site_name_of(k);
        if let Err(e) = self.db.retire(&name, site_job).await {
            tracing::warn!("recording {name}'s job {site_job} as moved away: {e}");
        }
    }

    /// Looks for job `id` at every site under `key`, its run's (it was
    /// accepted before this process started and may have reached one).
    async fn find(&self, id: String, key: String) -> Answer {
        let found = match self.already_at(&key).await {
            Ok(Some((name, view))) => {
                let k = self.broker.core.lock().ok().and_then(|c| c.site_position(&name));
                let report = super::follow::report_of(&view);
                Ok(k.map(|k| (k, view.id, report)))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
                Err(e.to_string())
            }
        };
        Answer::Found(id, found)
    }

    /// Reads the broker reservation `rid` job `id` names.
    async fn resolve(&self, id: String, rid: String) -> Answer {
        let found = self.db.reservation(&rid).await.map_err(|e| e.to_string());
        let found = found.map(|r| {
            r.map(|r| brokk_broker::broker::Reserved {
                state: r.state(),
                owner: r.owner,
                site: r.site,
                site_reservation: r.site_reservation,
                start: r.start,
                end: r.end,
                workflow: r.workflow.is_some(),
            })
        });
        Answer::Resolved(id, found)
    }

    /// The name of the site at position `k` in the core.
    pub(super) fn site_name_of(&self, k: usize) -> String {
        self.broker.read(|c| c.site_name(k).to_string())
    }

    /// Runs `call` on the blocking pool with the client of the site at
    /// position `k`, acting for `owner`.
    async fn at_site<T: Send + 'static>(
        &self,
        k: usize,
        owner: String,
        call: impl FnOnce(brokk_proto::RemoteSite) -> Result<T, brokk_broker::SiteError> + Send + 'static,
    ) -> Result<T, brokk_broker::SiteError> {
        let name = self.site_name_of(k);
        let site = self
            .site(&name)
            .ok_or_else(|| brokk_broker::SiteError::Unavailable(format!("site {name} is no longer configured")))?;
        let mut c = site.client;
        c.set_on_behalf_of(Some(owner));
        tokio::task::spawn_blocking(move || call(c))
            .await
            .unwrap_or_else(|e| Err(brokk_broker::SiteError::Unavailable(e.to_string())))
    }

    /// Asks the site at position `k` to hold `request` for `owner` until
    /// `until`, for job `id`.
    /// A grant is written down (`holds`) before the core hears of it, so
    /// that a broker that stops before it is used or given back gives it
    /// back when it starts again ([`Service::release_core_holds`]).
    async fn hold_at(&self, id: String, k: usize, owner: String, request: brokk_core::Request, until: Time) -> Answer {
        let on_behalf = owner.clone();
        let reply = self
            .at_site(k, on_behalf, move |mut c| c.reserve("broker", &request, Some(until)))
            .await;
        if let Ok(brokk_core::Reply::Granted { id: rid, .. }) = &reply {
            if let Err(e) = self.db.add_hold(&self.site_name_of(k), rid.0, &id, &owner).await {
                tracing::warn!("writing down hold {} for job {id}: {e}; it lapses by itself", rid.0);
            }
        }
        Answer::Held(id, k, reply)
    }

    /// Gives `owner`'s reservation back at the site at position `k`; one
    /// that cannot be given back lapses by itself.
    /// Whether the site gave it back.
    async fn give_back(&self, k: usize, reservation: u64, owner: String) -> bool {
        let id = brokk_core::ReservationId(reservation);
        let gone = self.at_site(k, owner, move |mut c| c.cancel("broker", id)).await;
        if let Err(e) = &gone {
            self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("giving back reservation {reservation}: {e}; it lapses by itself");
        }
        self.forget_hold(k, reservation).await;
        gone.is_ok()
    }

    /// Hold `reservation` at the site at position `k` is no longer the
    /// broker's to give back.
    async fn forget_hold(&self, k: usize, reservation: u64) {
        if let Err(e) = self.db.drop_hold(&self.site_name_of(k), reservation).await {
            tracing::warn!("forgetting hold {reservation}: {e}");
        }
    }

    /// At start, before anything is decided: the holds a stopped broker (or
    /// the active one a standby takes over from) had for jobs it had not
    /// sent yet are given back, so they do not keep the sites' slots until
    /// they lapse. One a job was sent into before the stop is in use at
    /// its site, which keeps it. Returns how many were given back.
    pub async fn release_core_holds(&self) -> Result<usize, ServiceError> {
        let mut n = 0;
        for (site, reservation, owner) in self.db.holds().await? {
            match self.broker.read(|c| c.site_position(&site)) {
                Some(k) => n += usize::from(self.give_back(k, reservation, owner).await),
                // A site no longer configured keeps nothing of this broker's.
                None => self.db.drop_hold(&site, reservation).await?,
            }
        }
        Ok(n)
    }

    /// Sends job `id` to the site at position `k`, asking for `wall`, into
    /// reservation `claim` there when given: the owner's uploads first,
    /// under the run's key (`BrokerJob::site_key`) as the site's
    /// idempotency key, for the user it
    /// runs for; to a neighbouring broker with its `delegation`.
    async fn send(
        &self,
        id: String,
        k: usize,
        wall: Option<brokk_model::Duration>,
        claim: Option<brokk_broker::broker::Claim>,
        delegation: Option<brokk_broker::delegate::Delegation>,
    ) -> SendAnswer {
        let found = {
            let core = self
                .broker
                .core
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            core.job(&id).zip(core.outgoing(&id, wall)).map(|(v, job)| {
                let who = (v.owner.clone(), v.runs_as.clone());
                (core.site_name(k).to_string(), who, v.site_key(), job)
            })
        };
        let Some((name, (owner, runs_as), key, job)) = found else {
            return (id, k, Err(brokk_broker::SiteError::Unknown));
        };
        let Some(site) = self.site(&name) else {
            return (
                id,
                k,
                Err(brokk_broker::SiteError::Unavailable(format!(
                    "site {name} is no longer configured"
                ))),
            );
        };
        let uploads = self.uploads.clone();
        let delegated = delegation.is_some();
        let answer = tokio::task::spawn_blocking(move || {
            let mut c = site.client.clone();
            super::sites::send_uploads(&c, &uploads, &owner, &job)?;
            c.set_delegation(delegation.map(|d| d.to_header()));
            c.set_idempotency_key(Some(key));
            c.set_on_behalf_of(Some(runs_as.unwrap_or(owner)));
            // What the broker held for this job ends with it; a user's own
            // reservation is kept.
            c.set_release_with_job(claim.is_some_and(|c| c.release_with_job));
            // A broker above that made the hold commits it itself.
            c.set_explicit_commit(claim.is_some_and(|c| c.explicit_commit));
            let into = claim.map(|c| brokk_core::ReservationId(c.reservation));
            c.submit("broker", &job, into).map(|h| h.0)
        })
        .await
        .unwrap_or_else(|e| Err(brokk_broker::SiteError::Unavailable(e.to_string())));
        if delegated {
            self.counters.delegations.count(match &answer {
                Ok(_) => "accepted",
                Err(_) => "rejected",
            });
        }
        if let (Ok(_), Some(claim)) = (&answer, claim) {
            // Taken by the job: it ends with it, or is its owner's own.
            self.forget_hold(k, claim.reservation).await;
        }
        (id, k, answer)
    }

    /// Asks the site at position `k` to let `owner`'s job `site_job` go,
    /// and tells the core its answer.
    async fn withdraw(
        &self,
        k: usize,
        site_job: String,
        owner: String,
    ) -> (Result<jobs::Applied, brokk_broker::SiteError>, Vec<Effect>, Stored) {
        let handle = JobHandle(site_job.clone());
        let answer = self
            .at_site(k, owner, move |mut c| c.cancel_job("broker", &handle))
            .await;
        if answer.is_err() {
            self.counters.site_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.broker.run(|c| c.withdrawn(now(), k, &site_job, answer))
    }

    /// Asks the site at position `k` to hold (or release) its job
    /// `site_job`, and gives the answer to the core.
    async fn hold_at_site(
        &self,
        k: usize,
        site_job: String,
        owner: String,
        hold: bool,
    ) -> (Result<(), brokk_broker::SiteError>, Stored) {
        let handle = JobHandle(site_job.clone());
        let answer = self
            .at_site(k, owner, move |c| c.hold_job(&handle, hold))
            .await
            .map(|v| super::follow::report_of(&v));
        let (done, _, stored) = self.broker.run(|c| c.held_at_site(now(), k, &site_job, answer));
        (done, stored)
    }

    /// `owner`'s job `id` held, released or cancelled by the core, when the
    /// core holds it: `None` when it does not (the caller's own path).
    pub(super) async fn owner_request(
        &self,
        owner: &str,
        id: &str,
        change: jobs::Change,
    ) -> Option<Result<BrokerJob, ServiceError>> {
        let Some(whose) = self.broker.owner_of(id) else {
            // Not the core's now: if it was, its last change is read
            // back by the caller's own path.
            let _ = self.broker.flush().wait().await;
            return None;
        };
        if whose != owner {
            return Some(Err(ServiceError::Forbidden(format!("job {id}"))));
        }
        Some(self.owner_change(owner, id, change).await)
    }

    /// Sends an ended job of `owner`'s again, with the same id (`brokk
    /// requeue`): the core decides whether it may, from its stored record.
    pub async fn requeue(&self, owner: &str, id: &str) -> Result<BrokerJob, ServiceError> {
        // Its end written first, so that the record read back is its last.
        let _ = self.broker.flush().wait().await;
        let record = self.owned(owner, id).await?;
        let unreadable = |e: serde_json::Error| ServiceError::Unavailable(format!("job {id}: its stored record: {e}"));
        let job: brokk_model::Job = serde_json::from_str(&record.spec).map_err(unreadable)?;
        let prefs: brokk_model::JobPreferences = serde_json::from_str(&record.prefs).map_err(unreadable)?;
        let t = now();
        let (answer, effects, stored) = self.broker.run(|c| c.requeue(t, owner, record.view, job, prefs));
        answer.map_err(denied)?;
        stored.wait().await?;
        self.carry_out(effects).await?;
        self.wake.notify_one();
        Ok(self.owned(owner, id).await?.view)
    }

    async fn owner_change(&self, owner: &str, id: &str, change: jobs::Change) -> Result<BrokerJob, ServiceError> {
        let t = now();
        let (answer, effects, stored) = self.broker.run(|c| match change {
            jobs::Change::Hold => c.hold(t, owner, id),
            jobs::Change::Release => c.release(t, owner, id),
            _ => c.cancel(t, owner, id),
        });
        answer.map_err(denied)?;
        stored.wait().await?;
        for e in effects {
            match e {
                Effect::Withdraw { site, site_job, owner } => {
                    // Its site lets it go first: one that cannot leaves it running.
                    let (gone, more, stored) = self.withdraw(site, site_job, owner).await;
                    gone.map_err(|e| ServiceError::Unavailable(format!("cancelling at the site: {e}")))?;
                    self.carry_out(more).await?;
                    stored.wait().await?;
                }
                Effect::HoldAtSite {
                    site,
                    site_job,
                    owner,
                    hold,
                } => {
                    let (done, stored) = self.hold_at_site(site, site_job, owner, hold).await;
                    let verb = if hold { "holding" } else { "releasing" };
                    done.map_err(|e| match e {
                        brokk_broker::SiteError::Refused { site, reason } => {
                            ServiceError::Conflict(format!("site {site} refused: {reason}"))
                        }
                        e => ServiceError::Unavailable(format!("{verb} at the site: {e}")),
                    })?;
                    stored.wait().await?;
                }
                _ => {}
            }
        }
        self.wake.notify_one();
        Ok(self.owned(owner, id).await?.view)
    }

    /// A job's report from site `site`, when the core holds the job:
    /// whether it does, and what answers once the change is stored.
    pub(super) fn report_held(
        &self,
        site: &str,
        site_job: &str,
        report: brokk_broker::broker::Report,
    ) -> Option<Stored> {
        let (known, _, stored) = self.broker.run(|c| {
            let k = c.site_position(site)?;
            c.reported(now(), k, site_job, report).then_some(())
        });
        known.map(|()| stored)
    }

    /// Sites found at run time, known to the core too.
    pub(super) fn core_sites(&self, names: &[String]) {
        let _ = self.broker.run(|c| {
            for n in names {
                c.add_site(n.clone());
            }
        });
    }
}

/// An owner's request the core turned down, as the API answers it.
fn denied(d: brokk_broker::broker::Denied) -> ServiceError {
    match d {
        brokk_broker::broker::Denied::Unknown(id) => ServiceError::NotFound(format!("job {id}")),
        brokk_broker::broker::Denied::Refused(r) => ServiceError::Conflict(r.to_string()),
        brokk_broker::broker::Denied::OverLimit(e) => ServiceError::Conflict(e.to_string()),
    }
}
