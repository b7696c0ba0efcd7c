//! One admission in progress: the preliminary reservations made so far at
//! sites and on links, journalled so that a scheduler can take back any
//! suffix of its steps (backtracking) and the admission can take back all
//! of them (rejection).

use brokk_core::{Reply, Request};
use brokk_model::{Duration, Time};

use super::dag::Dag;
use super::network::{Network, Slot};
use super::{Messages, RejectReason, TaskPlan, Topology, TransferKind, TransferPlan, FAR};
use crate::site::Site;

/// One step that holds something.
#[derive(Debug, Clone, Copy)]
enum Step {
    Task(usize),
    Transfer(usize),
}

/// The admission's state.
pub(crate) struct Booking<'s, 'x> {
    pub dag: &'s Dag,
    pub topo: &'s Topology,
    sites: &'s mut [&'x mut dyn Site],
    net: &'s mut Network,
    owner: &'s str,
    /// When the preliminary holds lapse.
    hold: Time,
    /// Nothing starts before this (the later of now and the workflow's earliest start).
    pub earliest: Time,
    /// Everything ends by this.
    pub deadline: Option<Time>,
    /// Where each task is, once placed.
    pub tasks: Vec<Option<TaskPlan>>,
    /// Transfers booked (some slots emptied by rollbacks are `None`).
    transfers: Vec<Option<TransferPlan>>,
    journal: Vec<Step>,
    /// Messages sent to sites and the network.
    pub messages: Messages,
    /// Why the last step failed, for the rejection.
    pub failure: Option<RejectReason>,
    /// A broker that does not probe ([VRM] 4.6.2's comparison): what it
    /// knows of each site's schedule (its own earlier reservations, and
    /// this admission's holds with their ids there, by task), answering in
    /// place of the sites' probes.
    knowledge: Option<(Vec<brokk_core::Planner>, Vec<Option<brokk_core::ReservationId>>)>,
    /// What the sites' refusals taught such a broker during this
    /// admission: per site, (processors, from, until) where a request for
    /// at least that many starting from `from` could not start before `until`.
    learned: Vec<Vec<(u32, i64, i64)>>,
}

impl<'s, 'x> Booking<'s, 'x> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dag: &'s Dag,
        topo: &'s Topology,
        sites: &'s mut [&'x mut dyn Site],
        net: &'s mut Network,
        owner: &'s str,
        hold: Time,
        earliest: Time,
        deadline: Option<Time>,
    ) -> Self {
        let n = dag.nodes.len();
        Booking {
            dag,
            topo,
            sites,
            net,
            owner,
            hold,
            earliest,
            deadline,
            tasks: vec![None; n],
            transfers: Vec::new(),
            journal: Vec::new(),
            messages: Messages::default(),
            failure: None,
            knowledge: None,
            learned: Vec::new(),
        }
    }

    /// Answers probes from (a copy of) `knowledge`, one planner per site,
    /// instead of asking the sites: a broker that reserves without probing.
    pub fn without_probing(mut self, knowledge: &[brokk_core::Planner]) -> Self {
        self.knowledge = Some((knowledge.to_vec(), vec![None; self.dag.nodes.len()]));
        self.learned = vec![Vec::new(); self.sites.len()];
        self
    }

    /// Whether probes are answered from what the broker knows, not by the sites.
    pub fn is_blind(&self) -> bool {
        self.knowledge.is_some()
    }

    /// The first start from `earliest` that no refusal at `site` ruled out
    /// for `amount` processors.
    fn past_refusals(&self, site: usize, amount: u32, mut earliest: i64) -> i64 {
        let Some(learned) = self.learned.get(site) else {
            return earliest;
        };
        while let Some(&(_, _, until)) = learned
            .iter()
            .find(|&&(a, from, until)| amount >= a && from <= earliest && earliest < until)
        {
            earliest = until;
        }
        earliest
    }

    /// The free capacity site `site` publishes over time, where it
    /// publishes one (one information request); none for a broker that
    /// does not probe, which answers from what it knows instead.
    pub fn published_free(&self, site: usize) -> Option<brokk_model::Availability> {
        if self.knowledge.is_some() {
            return None;
        }
        self.sites.get(site)?.info().ok()?.availability
    }

    /// Number of sites.
    pub fn site_count(&self) -> usize {
        self.sites.len().min(self.topo.sites.len())
    }

    /// How long task `t` runs at `site`, or `None` when it cannot run there.
    pub fn duration(&self, t: usize, site: usize) -> Option<i64> {
        let s = self.topo.sites.get(site)?;
        let n = &self.dag.nodes[t];
        (n.cores <= s.capacity && s.speed > 0.0).then(|| ((n.runtime as f64 / s.speed).ceil() as i64).max(1))
    }

    /// The latest start that still ends by the deadline.
    pub fn latest_start(&self, d: i64) -> i64 {
        self.deadline.map_or(FAR, |dl| dl.0 - d)
    }

    /// The earliest all inputs of `t` can be at `site`: its placed
    /// parents' ends, and for data from other sites the earliest arrival
    /// the network offers now ([VRM] 4.4.3: the bandwidth actually
    /// available on the links towards the site); `None` when some data
    /// cannot get there at all.
    pub fn arrival(&mut self, t: usize, site: usize) -> Option<i64> {
        let mut at = self.earliest.0;
        let by = Time(self.deadline.map_or(FAR, |d| d.0));
        let dag = self.dag;
        for &(p, bytes) in &dag.nodes[t].parents {
            let Some(pp) = &self.tasks[p] else { continue };
            let (from, end) = (pp.site, pp.end);
            if from == site || bytes == 0 {
                at = at.max(end.0);
                continue;
            }
            self.messages.probes += 1;
            let slot = self.net.find_transfer(from, site, bytes, end, by)?;
            at = at.max(slot.end.0);
        }
        Some(at)
    }

    /// The latest end of `t` at `site` that lets its placed children
    /// start on time, their data leaving in the latest slot the network
    /// offers; `None` when some data cannot arrive at all.
    pub fn departure(&mut self, t: usize, site: usize) -> Option<i64> {
        let mut by = self.deadline.map_or(FAR, |d| d.0);
        let dag = self.dag;
        for &(c, bytes) in &dag.nodes[t].children {
            let Some(cp) = &self.tasks[c] else { continue };
            let (to, start) = (cp.site, cp.start);
            if to == site || bytes == 0 {
                by = by.min(start.0);
                continue;
            }
            self.messages.probes += 1;
            let slot = self.net.find_latest_transfer(site, to, bytes, self.earliest, start)?;
            by = by.min(slot.start.0);
        }
        Some(by)
    }

    fn request(&self, t: usize, d: i64, earliest: i64, latest: i64) -> Request {
        Request {
            amount: self.dag.nodes[t].cores,
            duration: Duration(d),
            earliest: Time(earliest),
            latest: Time(latest),
            flexible: false,
        }
    }

    /// The earliest start of `t` at `site` for `d` seconds in `[earliest, latest]`.
    pub fn probe_first(&mut self, t: usize, site: usize, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        self.probe_many(t, site, d, earliest, latest, 1).first().map(|c| c.0)
    }

    /// The latest start of `t` at `site` for `d` seconds in `[earliest, latest]`
    /// (a site's answer to two candidates ends with its latest fit).
    pub fn probe_last(&mut self, t: usize, site: usize, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        self.probe_many(t, site, d, earliest, latest, 2).last().map(|c| c.0)
    }

    /// Up to `k` candidate starts of `t` at `site` for `d` seconds in
    /// `[earliest, latest]`, each with the site's rating (lower is better).
    pub fn probe_many(
        &mut self,
        t: usize,
        site: usize,
        d: i64,
        earliest: i64,
        latest: i64,
        k: usize,
    ) -> Vec<(i64, f64)> {
        if latest < earliest {
            return Vec::new();
        }
        let found = match &self.knowledge {
            Some((known, _)) => {
                let from = self.past_refusals(site, self.dag.nodes[t].cores, earliest);
                if from > latest {
                    return Vec::new();
                }
                let req = self.request(t, d, from, latest);
                known
                    .get(site)
                    .map_or(Ok(Vec::new()), |p| p.probe(&req, k).map_err(|_| ()))
            }
            None => {
                self.messages.probes += 1;
                let req = self.request(t, d, earliest, latest);
                self.sites[site].probe(&req, k).map_err(|_| ())
            }
        };
        found
            .map(|c| c.iter().map(|c| (c.start.0, c.rating)).collect())
            .unwrap_or_default()
    }

    /// A journal position to roll back to.
    pub fn mark(&self) -> usize {
        self.journal.len()
    }

    /// Holds `t` at `site` for `d` seconds starting in `[earliest, latest]`
    /// (the site's earliest fit there); the start, or `None` when refused.
    pub fn reserve_task(&mut self, t: usize, site: usize, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        if latest < earliest {
            return None;
        }
        self.messages.reservations += 1;
        let req = self.request(t, d, earliest, latest);
        match self.sites[site].reserve(self.owner, &req, Some(self.hold)) {
            Ok(Reply::Granted { id, start }) => {
                self.tasks[t] = Some(TaskPlan {
                    task: self.dag.nodes[t].id.clone(),
                    site,
                    start,
                    end: start + Duration(d),
                    reservation: id,
                });
                self.journal.push(Step::Task(t));
                if let Some((known, ids)) = &mut self.knowledge {
                    // It knows its own holds.
                    ids[t] = known
                        .get_mut(site)
                        .and_then(|p| super::remember(p, req.amount, start, start + Duration(d)));
                }
                Some(start.0)
            }
            reply => {
                self.messages.refused += 1;
                if let Some(learned) = self.learned.get_mut(site) {
                    // The site's refusal says when such a request could start.
                    let until = match reply {
                        Ok(Reply::Rejected { next_start: Some(n) }) => n.0,
                        _ => latest + 1,
                    };
                    learned.push((self.dag.nodes[t].cores, earliest, until.max(latest + 1)));
                }
                None
            }
        }
    }

    /// Books the transfer of `bytes` from task `from` (placed) to task `to`
    /// (placed at `to_site`, or about to be): at the narrowest bandwidth
    /// that has it there by `want`, else the earliest arrival by `by`; the
    /// time the data is there. Nothing is booked within one site or for no data.
    fn book_transfer(&mut self, from: usize, to: usize, to_site: usize, bytes: u64, want: i64, by: i64) -> Option<i64> {
        let src = self.tasks[from].as_ref()?;
        let (from_site, after) = (src.site, src.end);
        if from_site == to_site || bytes == 0 {
            return Some(after.0);
        }
        self.messages.probes += 1;
        let found = self
            .net
            .find_gentle_transfer(from_site, to_site, bytes, after, Time(want.min(by)))
            .or_else(|| self.net.find_transfer(from_site, to_site, bytes, after, Time(by)));
        let Some(slot) = found else {
            self.fail_network(from, to);
            return None;
        };
        self.messages.reservations += 1;
        let Some(links) = self.net.book(self.owner, from_site, to_site, slot, Some(self.hold)) else {
            self.messages.refused += 1;
            self.fail_network(from, to);
            return None;
        };
        let plan = TransferPlan {
            from_task: self.dag.nodes[from].id.clone(),
            to_task: self.dag.nodes[to].id.clone(),
            kind: TransferKind::Data { bytes },
            from_site,
            to_site,
            start: slot.start,
            end: slot.end,
            bytes_per_s: u64::from(slot.units) * self.net.unit(),
            links,
        };
        self.transfers.push(Some(plan));
        self.journal.push(Step::Transfer(self.transfers.len() - 1));
        Some(slot.end.0)
    }

    fn fail_network(&mut self, from: usize, to: usize) {
        self.failure = Some(RejectReason::Network {
            from: self.dag.nodes[from].id.clone(),
            to: self.dag.nodes[to].id.clone(),
        });
    }

    /// Books every placed parent's data to `t` at `site`, each arriving by
    /// `want` if it can without the link's whole bandwidth, else as early
    /// as it can by `by`; the time the last arrives (the earliest start
    /// when no data moves). On failure the transfers booked here are released.
    pub fn book_inputs(&mut self, t: usize, site: usize, want: i64, by: i64) -> Option<i64> {
        let mark = self.mark();
        let mut at = self.earliest.0;
        let dag = self.dag;
        for &(p, bytes) in &dag.nodes[t].parents {
            if self.tasks[p].is_none() {
                continue;
            }
            match self.book_transfer(p, t, site, bytes, want, by) {
                Some(end) => at = at.max(end),
                None => {
                    self.rollback(mark);
                    return None;
                }
            }
        }
        Some(at)
    }

    /// Books `t`'s data (placed) to every placed child, each arriving
    /// before the child starts. On failure the transfers booked here are
    /// released.
    pub fn book_outputs(&mut self, t: usize) -> bool {
        let mark = self.mark();
        let dag = self.dag;
        for &(c, bytes) in &dag.nodes[t].children {
            let Some(cp) = &self.tasks[c] else { continue };
            let (site, start) = (cp.site, cp.start.0);
            if self.book_transfer(t, c, site, bytes, start, start).is_none() {
                self.rollback(mark);
                return false;
            }
        }
        true
    }

    /// Books the bandwidth between `t` (placed) and each placed task it is
    /// co-allocated with, over their common run, where they sit at
    /// different sites. On failure what was booked here is released.
    pub fn book_streams(&mut self, t: usize) -> bool {
        let mark = self.mark();
        let dag = self.dag;
        let streams = dag.streams.iter().filter_map(|&(a, b, bw)| match (a == t, b == t) {
            (true, false) => Some((b, bw)),
            (false, true) => Some((a, bw)),
            _ => None,
        });
        for (other, bw) in streams {
            let (Some(me), Some(them)) = (&self.tasks[t], &self.tasks[other]) else {
                continue;
            };
            if me.site == them.site || bw == 0 {
                continue;
            }
            let (a, b, start, end) = (me.site, them.site, me.start, me.end.max(them.end));
            let units = self.net.units_for(bw);
            self.messages.reservations += 1;
            let slot = Slot {
                start,
                end,
                units,
                route: 0,
            };
            let Some(links) = self.net.book(self.owner, a, b, slot, Some(self.hold)) else {
                self.messages.refused += 1;
                self.fail_network(t, other);
                self.rollback(mark);
                return false;
            };
            self.transfers.push(Some(TransferPlan {
                from_task: self.dag.nodes[t].id.clone(),
                to_task: self.dag.nodes[other].id.clone(),
                kind: TransferKind::Stream,
                from_site: a,
                to_site: b,
                start,
                end,
                bytes_per_s: u64::from(units) * self.net.unit(),
                links,
            }));
            self.journal.push(Step::Transfer(self.transfers.len() - 1));
        }
        true
    }

    /// Releases everything held after `mark`, newest first.
    pub fn rollback(&mut self, mark: usize) {
        while self.journal.len() > mark {
            match self.journal.pop() {
                Some(Step::Task(t)) => {
                    if let Some(p) = self.tasks[t].take() {
                        let _ = self.sites[p.site].cancel(self.owner, p.reservation);
                        if let Some((known, ids)) = &mut self.knowledge {
                            if let Some(id) = ids[t].take() {
                                let _ = known[p.site].cancel(id);
                            }
                        }
                    }
                }
                Some(Step::Transfer(i)) => {
                    if let Some(x) = self.transfers[i].take() {
                        self.net.release(&x.links);
                    }
                }
                None => break,
            }
        }
    }

    /// Places the classes in `order` with `place`; at the first that fails,
    /// stops with the failure it left, or else that the task found no room
    /// (the co-allocated tasks no common window).
    pub fn place_all(&mut self, order: Vec<usize>, mut place: impl FnMut(&mut Self, usize) -> bool) -> bool {
        let dag = self.dag;
        for c in order {
            if place(self, c) {
                continue;
            }
            let members = &dag.classes[c];
            if self.failure.is_none() {
                self.failure = Some(if members.len() == 1 {
                    RejectReason::NoRoom {
                        task: dag.nodes[members[0]].id.clone(),
                    }
                } else {
                    RejectReason::CoAllocation {
                        tasks: members.iter().map(|&m| dag.nodes[m].id.clone()).collect(),
                    }
                });
            }
            return false;
        }
        true
    }

    /// Whether every task is placed.
    pub fn complete(&self) -> bool {
        self.tasks.iter().all(Option::is_some)
    }

    /// The placed tasks and booked transfers (call once all are placed).
    pub fn into_plan(self) -> (Vec<TaskPlan>, Vec<TransferPlan>, Messages) {
        let tasks = self.tasks.into_iter().flatten().collect();
        let transfers = self.transfers.into_iter().flatten().collect();
        (tasks, transfers, self.messages)
    }
}
