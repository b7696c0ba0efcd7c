//! One run of one architecture over a platform and its jobs, on the event
//! engine, ended at the last arrival.

use std::collections::VecDeque;

use brokk_broker::delegate::{self, Delegation, Target};
use brokk_model::{Duration, Time};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{GridJob, Platform};
use crate::engine::EventQueue;

/// How the clusters are joined ([DMM] Table 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Architecture {
    /// Independent clusters: each job queues where it arrived, served
    /// first come first served as soon as processors free.
    SepC,
    /// Independent clusters that match at cycles (Condor's negotiator):
    /// jobs start only at a cluster's matchmaking instants.
    Condor,
    /// Condor with flocking and fair share: at each round a cluster serves
    /// the users whose jobs are there, least past usage first, every job
    /// that fits (the rest bypassed); a user's jobs left unserved move on
    /// to the next cluster of the user's flock list.
    Fcondor,
    /// One central queue; a cluster with free processors pulls its head
    /// (the one free longest, on a tie).
    Cern,
    /// One central queue pushing its head to the cluster with the most free
    /// processors as a monitor last read them (worst fit), into that
    /// cluster's queue.
    Koala,
    /// Delegated matchmaking: each cluster's site manager delegates what it
    /// cannot serve to its neighbours.
    Dmm,
    /// Brokk's own brokers, one per cluster, delegating to each other as
    /// `brokk serve` does (`architectures/brokers.rs`).
    Brokk,
}

impl Architecture {
    /// Every architecture here, in [DMM]'s table order.
    pub const ALL: [Architecture; 7] = [
        Architecture::SepC,
        Architecture::Condor,
        Architecture::Fcondor,
        Architecture::Cern,
        Architecture::Koala,
        Architecture::Dmm,
        Architecture::Brokk,
    ];

    /// Its name in experiment files and tables.
    pub fn name(self) -> &'static str {
        match self {
            Architecture::SepC => "sep-c",
            Architecture::Condor => "condor",
            Architecture::Fcondor => "fcondor",
            Architecture::Cern => "cern",
            Architecture::Koala => "koala",
            Architecture::Dmm => "dmm",
            Architecture::Brokk => "brokk",
        }
    }

    /// The architecture named `name`.
    pub fn parse(name: &str) -> Result<Architecture, String> {
        Architecture::ALL.into_iter().find(|a| a.name() == name).ok_or_else(|| {
            format!("`{name}` is not an architecture: sep-c, condor, fcondor, cern, koala, dmm or brokk")
        })
    }
}

/// The architectures' parameters, named as `EXPERIMENTS.md` (D0.2, D0.3)
/// names the paper's gaps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Params {
    /// Matchmaking cycle of `condor` and `dmm`, seconds (Condor's
    /// `NEGOTIATOR_INTERVAL`).
    pub cycle: i64,
    /// `dmm`'s delegation cycle, seconds.
    pub delegation_cycle: i64,
    /// `dmm`'s delegation threshold: a site delegates while its load
    /// (processors held on its own plus those its waiting requests ask
    /// for, over its own) is above it.
    pub threshold: f64,
    /// `dmm`'s delegation time-to-live, a budget each request spends one
    /// of per attempt (and a forwarder one per hop).
    pub ttl: u32,
    /// `koala`'s monitoring period, seconds (0: exact figures).
    pub monitor: i64,
    /// `fcondor`'s users per cluster, among whom each cluster's jobs are
    /// shared at random.
    pub users_per_cluster: usize,
    /// `fcondor`'s half-life of past usage, seconds (Condor's default:
    /// a day).
    pub usage_half_life: i64,
    /// `brokk`'s delegation threshold, seconds: a job its broker's
    /// cluster is not predicted to start within this is delegated.
    pub brokk_threshold: i64,
    /// `brokk`'s age of information, seconds: how long a broker reuses
    /// what its cluster and its siblings said.
    pub info_ttl: i64,
    /// `brokk`'s queue adaptation, seconds (0: none): how often a broker
    /// decides its waiting jobs again, moving (or delegating) one that
    /// would start at least that much sooner elsewhere.
    pub brokk_adapt: i64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            cycle: 300,
            delegation_cycle: 60,
            threshold: 1.0,
            ttl: delegate::DEFAULT_TTL,
            monitor: 60,
            users_per_cluster: 10,
            usage_half_life: 86_400,
            brokk_threshold: 0,
            info_ttl: 60,
            brokk_adapt: 0,
        }
    }
}

/// How one job fared (by default: not started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Outcome {
    /// When it started, if it did by the end.
    pub start: Option<i64>,
    /// When it ended, if it did by the end.
    pub end: Option<i64>,
    /// The cluster whose processors it ran on.
    pub ran_at: Option<usize>,
    /// Delegation hops (0: served where it arrived).
    pub hops: u32,
}

/// What one run produced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    /// Each job's outcome, in the jobs' order.
    pub outcomes: Vec<Outcome>,
    /// When the run ended (the last arrival).
    pub end: i64,
    /// Delegation messages ([DMM] D0.6: a request and an answer per hop,
    /// a claim and a release per hop of an accepted chain).
    pub delegation_messages: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Arrival(usize),
    End(usize),
    Cycle(usize),
    Delegation(usize),
    /// A job whose request was lent processors starts on them.
    Leased(usize),
    Monitor,
}

/// A `dmm` request's state at its site manager.
#[derive(Debug, Clone, Default)]
struct Request {
    /// Delegation attempts it may still make.
    budget: u32,
    /// Neighbours that rejected it this delegation cycle.
    tried: Vec<usize>,
}

struct State<'a> {
    platform: &'a Platform,
    jobs: &'a [GridJob],
    params: Params,
    arch: Architecture,
    free: Vec<u32>,
    /// Since when each cluster has had free processors (for `cern`).
    free_since: Vec<Option<i64>>,
    /// Each cluster's own queue, in arrival order.
    queues: Vec<VecDeque<usize>>,
    /// The central queue of `cern` and `koala`.
    central: VecDeque<usize>,
    /// `koala`'s monitored free processors, less what it pushed since.
    view: Vec<u32>,
    requests: Vec<Request>,
    /// Each cluster's delegation cycle's phase.
    phase: Vec<i64>,
    /// `fcondor`: each job's user, and its place in that user's flock list.
    user: Vec<usize>,
    flock_at: Vec<usize>,
    /// `fcondor`: each origin's flock list (itself first).
    flock: Vec<Vec<usize>>,
    /// `fcondor`: each user's past usage (processor-seconds) as of a time.
    usage: std::collections::HashMap<usize, (f64, i64)>,
    outcomes: Vec<Outcome>,
    events: EventQueue<Event>,
    messages: u64,
    end: i64,
}

/// Runs `arch` over `platform` with `jobs` (in arrival order), the cycles'
/// phases drawn from `seed`, until the last arrival.
pub fn simulate(arch: Architecture, platform: &Platform, jobs: &[GridJob], params: Params, seed: u64) -> Run {
    if arch == Architecture::Brokk {
        return super::brokers::simulate(platform, jobs, params);
    }
    let n = platform.procs.len();
    let end = jobs.iter().map(|j| j.submit).max().unwrap_or(0);
    let mut s = State {
        platform,
        jobs,
        params,
        arch,
        free: platform.procs.clone(),
        free_since: platform.procs.iter().map(|&p| (p > 0).then_some(0)).collect(),
        queues: vec![VecDeque::new(); n],
        central: VecDeque::new(),
        view: platform.procs.clone(),
        requests: vec![
            Request {
                budget: params.ttl,
                tried: Vec::new(),
            };
            jobs.len()
        ],
        outcomes: vec![Outcome::default(); jobs.len()],
        phase: vec![0; n],
        user: Vec::new(),
        flock_at: vec![0; jobs.len()],
        flock: (0..n).map(|c| flock_list(platform, c)).collect(),
        usage: std::collections::HashMap::new(),
        events: EventQueue::new(Time(0)),
        messages: 0,
        end,
    };
    for (k, j) in jobs.iter().enumerate() {
        s.at(j.submit, Event::Arrival(k));
    }
    // Each cluster's cycles begin at a phase of its own.
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x00d3_3d00);
    if arch == Architecture::Fcondor {
        let u = params.users_per_cluster.max(1);
        s.user = jobs.iter().map(|j| j.origin * u + rng.gen_range(0..u)).collect();
    }
    for c in platform.clusters() {
        let cycle: i64 = rng.gen_range(0..params.cycle.max(1));
        let delegation: i64 = rng.gen_range(0..params.delegation_cycle.max(1));
        match arch {
            Architecture::Condor | Architecture::Fcondor => s.at(cycle, Event::Cycle(c)),
            Architecture::Dmm => {
                s.at(cycle, Event::Cycle(c));
                s.at(delegation, Event::Delegation(c));
                s.phase[c] = delegation;
            }
            _ => {}
        }
    }
    if arch == Architecture::Koala && params.monitor > 0 {
        s.at(0, Event::Monitor);
    }
    while let Some((t, e)) = s.events.pop() {
        if t.0 > end {
            break;
        }
        s.handle(t.0, e);
    }
    Run {
        outcomes: s.outcomes,
        end,
        delegation_messages: s.messages,
    }
}

impl State<'_> {
    fn at(&mut self, t: i64, e: Event) {
        if t <= self.end {
            // Times only move forward: every event is at or after now.
            let _ = self.events.schedule(Time(t), e);
        }
    }

    fn handle(&mut self, t: i64, e: Event) {
        match (self.arch, e) {
            (_, Event::End(k)) => {
                let c = self.outcomes[k].ran_at.unwrap_or(self.jobs[k].origin);
                if let Some(&u) = self.user.get(k) {
                    let used = f64::from(self.jobs[k].size) * self.jobs[k].run as f64;
                    let now = self.usage_of(u, t);
                    self.usage.insert(u, (now + used, t));
                }
                self.give(c, self.jobs[k].size, t);
                match self.arch {
                    Architecture::SepC => self.serve(c, t),
                    Architecture::Koala => {
                        self.serve(c, t);
                        // Exact figures: the end is seen at once.
                        if self.params.monitor == 0 {
                            self.push(t);
                        }
                    }
                    Architecture::Cern => self.pull(t),
                    // `brokk` runs on the grid simulator instead.
                    Architecture::Condor | Architecture::Fcondor | Architecture::Dmm | Architecture::Brokk => {}
                }
            }
            (Architecture::Brokk, _) => {}
            (Architecture::SepC, Event::Arrival(k)) => {
                let c = self.jobs[k].origin;
                self.queues[c].push_back(k);
                self.serve(c, t);
            }
            (Architecture::Condor | Architecture::Fcondor, Event::Arrival(k)) => {
                self.queues[self.jobs[k].origin].push_back(k)
            }
            (Architecture::Fcondor, Event::Cycle(c)) => {
                self.round(c, t);
                self.at(t + self.params.cycle.max(1), Event::Cycle(c));
            }
            (Architecture::Cern, Event::Arrival(k)) => {
                self.central.push_back(k);
                self.pull(t);
            }
            (Architecture::Koala, Event::Arrival(k)) => {
                self.central.push_back(k);
                self.push(t);
            }
            (Architecture::Dmm, Event::Arrival(k)) => {
                let c = self.jobs[k].origin;
                self.queues[c].push_back(k);
                if self.load(c) > self.params.threshold {
                    self.delegate_from(c, t);
                }
            }
            (_, Event::Cycle(c)) => {
                self.serve(c, t);
                self.at(t + self.params.cycle.max(1), Event::Cycle(c));
            }
            (_, Event::Delegation(c)) => {
                for &k in &self.queues[c] {
                    self.requests[k].tried.clear();
                }
                self.delegate_from(c, t);
                self.at(t + self.params.delegation_cycle.max(1), Event::Delegation(c));
            }
            (_, Event::Leased(k)) => self.begin(k, t),
            (_, Event::Monitor) => {
                self.view.clone_from(&self.free);
                self.push(t);
                self.at(t + self.params.monitor, Event::Monitor);
            }
        }
    }

    fn take(&mut self, c: usize, n: u32) {
        self.free[c] -= n;
        if self.free[c] == 0 {
            self.free_since[c] = None;
        }
    }

    fn give(&mut self, c: usize, n: u32, t: i64) {
        if self.free[c] == 0 && n > 0 {
            self.free_since[c] = Some(t);
        }
        self.free[c] += n;
    }

    /// Starts job `k` on cluster `c`'s processors at `t`.
    fn start(&mut self, k: usize, c: usize, t: i64) {
        self.take(c, self.jobs[k].size);
        self.outcomes[k].ran_at = Some(c);
        self.begin(k, t);
    }

    /// Job `k` starts at `t` on the processors it holds.
    fn begin(&mut self, k: usize, t: i64) {
        let o = &mut self.outcomes[k];
        o.start = Some(t);
        let end = t + self.jobs[k].run;
        o.end = Some(end).filter(|&e| e <= self.end);
        self.at(end, Event::End(k));
    }

    /// Cluster `c`'s first delegation cycle after `t`.
    fn next_delegation_cycle(&self, c: usize, t: i64) -> i64 {
        let every = self.params.delegation_cycle.max(1);
        let phase = self.phase[c];
        if t < phase {
            return phase;
        }
        phase + ((t - phase) / every + 1) * every
    }

    /// Cluster `c`'s queue, first come first served: the head starts while
    /// it fits, and blocks the rest when it does not.
    fn serve(&mut self, c: usize, t: i64) {
        while let Some(&k) = self.queues[c].front() {
            if self.jobs[k].size > self.free[c] {
                break;
            }
            self.queues[c].pop_front();
            self.start(k, c, t);
        }
    }

    /// `cern`: while some cluster can take the central queue's head, the
    /// one free the longest pulls it (ties: the lowest id).
    fn pull(&mut self, t: i64) {
        while let Some(&k) = self.central.front() {
            let size = self.jobs[k].size;
            let Some(c) = self
                .platform
                .clusters()
                .filter(|&c| self.free[c] >= size)
                .min_by_key(|&c| (self.free_since[c].unwrap_or(i64::MAX), c))
            else {
                break;
            };
            self.central.pop_front();
            self.start(k, c, t);
        }
    }

    /// `koala`: while the monitored figures show a cluster with room for
    /// the central queue's head, it goes to the one showing the most free
    /// (ties: the lowest id), into that cluster's queue.
    fn push(&mut self, t: i64) {
        let exact = self.params.monitor == 0;
        while let Some(&k) = self.central.front() {
            let size = self.jobs[k].size;
            let shown = if exact { &self.free } else { &self.view };
            let Some(c) = self
                .platform
                .clusters()
                .max_by_key(|&c| (shown[c], std::cmp::Reverse(c)))
                .filter(|&c| shown[c] >= size)
            else {
                break;
            };
            self.central.pop_front();
            self.view[c] = self.view[c].saturating_sub(size);
            self.queues[c].push_back(k);
            self.serve(c, t);
        }
    }

    /// User `u`'s past usage decayed to `t`.
    fn usage_of(&self, u: usize, t: i64) -> f64 {
        self.usage.get(&u).map_or(0.0, |&(v, at)| {
            v * 0.5f64.powf((t - at) as f64 / self.params.usage_half_life.max(1) as f64)
        })
    }

    /// `fcondor`'s matchmaking round at cluster `c`: the users with jobs
    /// here, least past usage first (ties: the lowest id), each job of
    /// theirs that fits started, the others bypassed; a user's jobs left
    /// unserved then move to the next cluster of their flock list (after
    /// its end, home again), considered at its next round.
    fn round(&mut self, c: usize, t: i64) {
        let mut users: Vec<usize> = self.queues[c].iter().map(|&k| self.user[k]).collect();
        users.sort_unstable();
        users.dedup();
        let mut order: Vec<(f64, usize)> = users.iter().map(|&u| (self.usage_of(u, t), u)).collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        for (_, u) in order {
            let mine: Vec<usize> = self.queues[c].iter().copied().filter(|&k| self.user[k] == u).collect();
            for k in mine {
                if self.jobs[k].size <= self.free[c] {
                    self.queues[c].retain(|&q| q != k);
                    self.start(k, c, t);
                }
            }
        }
        let left: Vec<usize> = self.queues[c].drain(..).collect();
        for k in left {
            let list = &self.flock[self.jobs[k].origin];
            self.flock_at[k] = (self.flock_at[k] + 1) % list.len().max(1);
            let next = list[self.flock_at[k]];
            self.queues[next].push_back(k);
        }
    }

    /// `dmm`'s local load of site `c`: processors held on its own, plus
    /// those its waiting requests ask for, over its own.
    fn load(&self, c: usize) -> f64 {
        let held = self.platform.procs[c] - self.free[c];
        let asked: u32 = self.queues[c].iter().map(|&k| self.jobs[k].size).sum();
        f64::from(held + asked) / f64::from(self.platform.procs[c].max(1))
    }

    /// `dmm`'s delegation algorithm at site `c`: its waiting requests in
    /// order, each tried at its neighbours (most free first, those that
    /// rejected it this cycle left out) while the load stays above the
    /// threshold. A request whose budget is spent stays for good.
    fn delegate_from(&mut self, c: usize, t: i64) {
        let mut i = 0;
        while i < self.queues[c].len() && self.load(c) > self.params.threshold {
            let k = self.queues[c][i];
            match self.delegate_one(c, k, t) {
                true => {
                    self.queues[c].remove(i);
                }
                false => i += 1,
            }
        }
    }

    /// Tries request `k` of site `c` at its neighbours in order; whether
    /// one (or a site further on) lent it processors, on which it started.
    fn delegate_one(&mut self, c: usize, k: usize, t: i64) -> bool {
        let me = Platform::name(c);
        let mut ask = self.ordered(c, std::slice::from_ref(&me));
        ask.retain(|n| !self.requests[k].tried.contains(n));
        for n in ask {
            let Some(budget) = self.requests[k].budget.checked_sub(1) else {
                return false;
            };
            self.requests[k].budget = budget;
            let d = Delegation {
                ttl: budget,
                path: vec![me.clone()],
            };
            if let Some((source, hops)) = self.ask(n, &d, self.jobs[k].size) {
                // The lent processors are the request's from now; its job
                // starts on them at the site's next delegation cycle
                // ([DMM]'s step 5).
                self.take(source, self.jobs[k].size);
                self.outcomes[k].ran_at = Some(source);
                self.outcomes[k].hops = hops;
                let at = self.next_delegation_cycle(c, t);
                self.at(at, Event::Leased(k));
                return true;
            }
            self.requests[k].tried.push(n);
        }
        false
    }

    /// Site `s`'s neighbours in the order delegation asks them, those on
    /// `path` left out.
    fn ordered(&self, s: usize, path: &[String]) -> Vec<usize> {
        let neighbours = self.platform.neighbours(s);
        let names: Vec<String> = neighbours.iter().map(|&(n, _)| Platform::name(n)).collect();
        let targets: Vec<Target<'_>> = neighbours
            .iter()
            .zip(&names)
            .map(|(&(n, relation), name)| Target {
                name,
                relation,
                free: self.free[n],
            })
            .collect();
        delegate::order(&targets, path)
            .into_iter()
            .map(|i| neighbours[i].0)
            .collect()
    }

    /// A delegated request for `size` processors reaching site `s` with
    /// `d`: lent at once from its own free processors, else passed on to
    /// its neighbours in order while hops are left, else rejected. The
    /// source and the chain's length when lent.
    fn ask(&mut self, s: usize, d: &Delegation, size: u32) -> Option<(usize, u32)> {
        self.messages += 2;
        let here = (self.platform.procs[s] > 0 && self.free[s] >= size).then_some(Duration::ZERO);
        let me = Platform::name(s);
        let onward: Vec<usize> = self.ordered(s, &d.path).into_iter().filter(|&n| n != s).collect();
        delegate::admit(&me, d, here, Duration::ZERO, |_| !onward.is_empty()).ok()?;
        let hops = d.path.len() as u32;
        if here.is_some() {
            // A claim and a release for each hop of the chain.
            self.messages += 2 * u64::from(hops);
            return Some((s, hops));
        }
        let next = Delegation::onward(Some(d), &me, 0)?;
        onward.into_iter().find_map(|n| self.ask(n, &next, size))
    }
}

/// `fcondor`'s flock list of the users of cluster `c` (D0.2): `c` itself,
/// then its own grid's clusters in increasing id after it (wrapping), then
/// the other grid's in increasing id.
fn flock_list(platform: &Platform, c: usize) -> Vec<usize> {
    let clusters: Vec<usize> = platform.clusters().collect();
    let own: Vec<usize> = clusters
        .iter()
        .copied()
        .filter(|&o| platform.grid[o] == platform.grid[c])
        .collect();
    let at = own.iter().position(|&o| o == c).unwrap_or(0);
    let mut list: Vec<usize> = own[at..].iter().chain(&own[..at]).copied().collect();
    list.extend(
        clusters
            .iter()
            .copied()
            .filter(|&o| platform.grid[o] != platform.grid[c]),
    );
    list
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two clusters of 4 and 2 processors, siblings, with no parent.
    fn pair() -> Platform {
        Platform {
            procs: vec![4, 2],
            parent: vec![None, None],
            siblings: vec![vec![1], vec![0]],
            grid: vec![0, 0],
            group: vec![0, 1],
        }
    }

    fn job(origin: usize, submit: i64, run: i64, size: u32) -> GridJob {
        GridJob {
            origin,
            submit,
            run,
            size,
        }
    }

    fn starts(arch: Architecture, jobs: &[GridJob], params: Params) -> Vec<Option<(i64, usize)>> {
        simulate(arch, &pair(), jobs, params, 1)
            .outcomes
            .iter()
            .map(|o| o.start.zip(o.ran_at))
            .collect()
    }

    /// Three jobs at cluster 0 while cluster 1 idles, then a late arrival
    /// that ends the run.
    fn burst() -> Vec<GridJob> {
        vec![
            job(0, 0, 100, 4),
            job(0, 0, 100, 2),
            job(0, 0, 100, 1),
            job(1, 1000, 10, 1),
        ]
    }

    #[test]
    fn independent_clusters_never_share_and_a_blocked_head_blocks() {
        let s = starts(Architecture::SepC, &burst(), Params::default());
        assert_eq!(s, [Some((0, 0)), Some((100, 0)), Some((100, 0)), Some((1000, 1))]);
    }

    #[test]
    fn a_central_queue_uses_the_idle_cluster() {
        let s = starts(Architecture::Cern, &burst(), Params::default());
        // The 2-wide job goes to cluster 1 at once, the 1-wide one (the
        // head then) waits for a cluster with room: none until 100. The
        // last goes to the cluster free the longest (both since 100: the
        // lowest id), wherever it arrived.
        assert_eq!(s, [Some((0, 0)), Some((0, 1)), Some((100, 0)), Some((1000, 0))]);
        let exact = Params {
            monitor: 0,
            ..Params::default()
        };
        let s = starts(Architecture::Koala, &burst(), exact);
        // Worst fit: the last to the cluster with the most free.
        assert_eq!(s, [Some((0, 0)), Some((0, 1)), Some((100, 0)), Some((1000, 0))]);
    }

    #[test]
    fn brokks_brokers_delegate_at_once_to_the_idle_cluster_and_keep_fcfs_at_home() {
        // Cluster 0's broker starts the 4-wide job at once; the 2-wide one
        // would wait for it, so it is delegated to cluster 1's broker,
        // which starts it at once; the 1-wide one would wait there too
        // (cluster 1 is full now, FCFS at home), so it stays home behind
        // the first job's end. The last arrival runs at its own cluster.
        let s = starts(Architecture::Brokk, &burst(), Params::default());
        assert_eq!(s, [Some((0, 0)), Some((0, 1)), Some((100, 0)), Some((1000, 1))]);
        let run = simulate(Architecture::Brokk, &pair(), &burst(), Params::default(), 1);
        assert_eq!(run.outcomes.iter().map(|o| o.hops).collect::<Vec<_>>(), [0, 1, 0, 0]);
        assert!(run.delegation_messages > 0);
    }

    #[test]
    fn delegated_matchmaking_borrows_the_neighbours_processors() {
        let params = Params {
            cycle: 50,
            delegation_cycle: 400,
            ..Params::default()
        };
        let run = simulate(Architecture::Dmm, &pair(), &burst(), params, 1);
        let o = &run.outcomes;
        // The 2-wide request is lent cluster 1's processors at its arrival
        // (over the threshold) and starts on them at cluster 0's next
        // delegation cycle; the first waits for cluster 0's matchmaking
        // cycle, the 1-wide one for the end of the first.
        assert_eq!((o[1].ran_at, o[1].hops), (Some(1), 1));
        assert!(o[1].start.is_some_and(|s| s > 0 && s <= 400), "{:?}", o[1]);
        assert_eq!(o[0].ran_at, Some(0));
        assert!(o[0].start.unwrap() < 50);
        assert_eq!(o[2].ran_at, Some(0));
        assert!(o[2].start.unwrap() >= 100 && o[2].start.unwrap() < 150);
        // At the second arrival, the 4-wide request is asked for at
        // cluster 1 and rejected, the 2-wide one taken (a request and an
        // answer each, a claim and a release); at the third, the 1-wide
        // one is rejected: 8 messages. A delegation cycle while requests
        // still wait asks again, 2 a request.
        let m = run.delegation_messages;
        assert!(m >= 8 && m.is_multiple_of(2), "{m}");
    }

    #[test]
    fn flocking_moves_unserved_jobs_on_and_bypasses_what_does_not_fit() {
        let params = Params {
            cycle: 100,
            ..Params::default()
        };
        // Cluster 0 (4) gets a 4-wide job, then a 3-wide and a 1-wide one:
        // at its first round the first runs, the others wait; their users
        // move them on to cluster 1 (2 processors), where the 1-wide one
        // runs and the 3-wide one is bypassed and moves back home.
        let jobs = [
            job(0, 0, 1000, 4),
            job(0, 0, 10, 3),
            job(0, 0, 10, 1),
            job(1, 3000, 1, 1),
        ];
        let run = simulate(Architecture::Fcondor, &pair(), &jobs, params, 3);
        let o = &run.outcomes;
        assert_eq!(o[0].ran_at, Some(0));
        assert_eq!(o[2].ran_at, Some(1), "{o:?}");
        assert!(o[2].start.unwrap() < 200);
        assert_eq!(o[1].ran_at, Some(0), "{o:?}");
        assert!(o[1].start.unwrap() >= 1000);
        assert_eq!(flock_list(&Platform::das_g5k(), 2)[..6], [2, 3, 4, 0, 1, 5]);
    }

    #[test]
    fn condor_starts_jobs_only_at_its_cycles() {
        let params = Params {
            cycle: 300,
            ..Params::default()
        };
        let run = simulate(Architecture::Condor, &pair(), &burst(), params, 7);
        let first = run.outcomes[0].start.unwrap();
        assert!(first < 300, "{first}");
        // The next two only at the first cycle after the first ended.
        assert_eq!(run.outcomes[1].start, run.outcomes[2].start);
        assert!(run.outcomes[1].start.unwrap() >= first + 100);
    }

    #[test]
    fn a_request_crosses_an_empty_administrative_site_and_stops_at_its_time_to_live() {
        // Cluster 0 (full) under admin site 2, whose sibling admin site 3
        // has cluster 1 (free) below it: 0 -> 2 -> 3 -> 1, three hops.
        let p = Platform {
            procs: vec![1, 4, 0, 0],
            parent: vec![Some(2), Some(3), None, None],
            siblings: vec![vec![], vec![], vec![3], vec![2]],
            grid: vec![0, 1, 0, 1],
            group: vec![0, 1, 2, 3],
        };
        let jobs = [job(0, 0, 100, 1), job(0, 0, 100, 1), job(0, 1000, 1, 1)];
        let run = |ttl| {
            let params = Params {
                ttl,
                ..Params::default()
            };
            simulate(Architecture::Dmm, &p, &jobs, params, 1).outcomes
        };
        // The second arrival puts the site over its threshold: its first
        // waiting request goes, three hops away.
        let far = run(4);
        assert_eq!((far[0].ran_at, far[0].hops), (Some(1), 3));
        assert!(far[0].start.is_some_and(|s| s > 0 && s <= 60), "{:?}", far[0]);
        assert_eq!(far[1].ran_at, Some(0));
        // With two hops the chain cannot reach cluster 1: both wait at home.
        let near = run(2);
        assert_eq!((near[0].ran_at, near[1].ran_at), (Some(0), Some(0)));
        assert!(near[1].start.unwrap() >= 100);
    }
}
