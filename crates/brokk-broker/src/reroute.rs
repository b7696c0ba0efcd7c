//! A network manager that reroutes its reservations ([VRM] 5.6.1 and
//! 5.7.2, the "local only" re-optimization): bandwidth is booked per time
//! slot on one of the `k` fewest-hop paths between two endpoints (each slot
//! may take another path, since a running transfer switches paths at
//! almost no cost), shortest path first, all slots or none, as the
//! advance-reservation network managers the thesis compares against do.
//!
//! When a request finds no room in some slots, those slots are *degraded*:
//! every reservation they carry is routed again as a maximum concurrent
//! flow ([`flow`]) with each endpoint pair's reserved bandwidth as its
//! demand, so that the pairs asked for most get the most room; the request
//! is then tried again. A slot's new routing is kept only where the flow
//! carries all of it (a ratio of at least 1) and every reservation finds
//! one path with room for it (multi-path reservations are not allowed, as
//! in MPLS): each takes the path carrying the largest share of its pair's
//! flow, largest reservations first, falling back to the next path with
//! room. Otherwise the slot keeps the routing it had. Nothing admitted is
//! ever lost: a slot either keeps every reservation on some path or is
//! left as it was.

pub mod flow;

use std::collections::BTreeMap;

use crate::workflow::LinkSpec;

/// A bandwidth request for a span of slots between two endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    /// Its identifier (unique among those booked).
    pub id: u64,
    /// Source endpoint (a site's index).
    pub from: usize,
    /// Target endpoint.
    pub to: usize,
    /// Bandwidth units, the same in every slot.
    pub bandwidth: u32,
    /// First slot.
    pub start: i64,
    /// Slot after the last.
    pub end: i64,
}

/// Why a network cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopologyError {
    /// A link names an endpoint that does not exist or joins one to itself.
    #[error("link {0} joins no two distinct endpoints of the network")]
    BadLink(usize),
    /// A link's bandwidth does not fit the units the manager counts in.
    #[error("link {0}: a bandwidth of 1 to {max} units", max = u32::MAX)]
    BadBandwidth(usize),
    /// No path is asked for.
    #[error("at least one path per endpoint pair")]
    NoPaths,
}

/// What rerouting one slot did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerouted {
    /// Every reservation of the slot is on its new path.
    Done,
    /// The slot carries nothing to move.
    Empty,
    /// The concurrent flow fell short of the demands (a ratio under 1): kept.
    ShortFlow,
    /// Some reservation found no single path with room: kept.
    Unsplittable,
}

/// One reservation as a slot carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Carried {
    transfer: u64,
    pair: usize,
    bandwidth: u32,
    /// Its index among the pair's paths.
    path: usize,
}

/// One slot's bookings.
#[derive(Debug, Clone, Default)]
struct Slot {
    /// Units used per directed link.
    used: Vec<u32>,
    carried: Vec<Carried>,
}

/// The network manager's schedule.
#[derive(Debug, Clone)]
pub struct SlottedNetwork {
    endpoints: usize,
    /// Units per directed link (`2 * link` one way, `2 * link + 1` back).
    capacity: Vec<u32>,
    /// Per endpoint pair (`from * endpoints + to`), its paths as directed
    /// links, fewest hops first.
    paths: Vec<Vec<Vec<usize>>>,
    slots: BTreeMap<i64, Slot>,
    /// The last slot's reservations routed again, the approximation asked,
    /// and their new paths (or why not): the next slots of a long request
    /// mostly carry the same reservations, and the answer depends on
    /// nothing else.
    last: Option<(Vec<Carried>, f64, Routing)>,
}

/// Each reservation's new path, in the order given, or why there is none.
type Routing = Result<Vec<usize>, Rerouted>;

impl SlottedNetwork {
    /// A network of `endpoints` joined by `links` (bandwidth in units each
    /// way), admitting on the `k` fewest-hop paths of each pair (ties in a
    /// fixed order, so the same input gives the same paths).
    pub fn new(endpoints: usize, links: &[LinkSpec], k: usize) -> Result<SlottedNetwork, TopologyError> {
        if k == 0 {
            return Err(TopologyError::NoPaths);
        }
        let mut capacity = Vec::with_capacity(2 * links.len());
        let mut adjacent: Vec<Vec<(usize, usize)>> = vec![Vec::new(); endpoints];
        for (i, l) in links.iter().enumerate() {
            if l.a >= endpoints || l.b >= endpoints || l.a == l.b {
                return Err(TopologyError::BadLink(i));
            }
            let units = u32::try_from(l.bandwidth)
                .ok()
                .filter(|&u| u > 0)
                .ok_or(TopologyError::BadBandwidth(i))?;
            capacity.extend([units, units]);
            adjacent[l.a].push((l.b, 2 * i));
            adjacent[l.b].push((l.a, 2 * i + 1));
        }
        let mut paths = Vec::with_capacity(endpoints * endpoints);
        for from in 0..endpoints {
            for to in 0..endpoints {
                paths.push(if from == to {
                    Vec::new()
                } else {
                    fewest_hops(&adjacent, from, to, k)
                });
            }
        }
        Ok(SlottedNetwork {
            endpoints,
            capacity,
            paths,
            slots: BTreeMap::new(),
            last: None,
        })
    }

    /// The candidate paths from `from` to `to`, as directed links.
    pub fn paths(&self, from: usize, to: usize) -> &[Vec<usize>] {
        self.paths.get(self.pair(from, to)).map_or(&[], Vec::as_slice)
    }

    fn pair(&self, from: usize, to: usize) -> usize {
        from * self.endpoints + to
    }

    /// Units all directed links carry together in one slot.
    pub fn capacity_total(&self) -> f64 {
        self.capacity.iter().map(|&c| f64::from(c)).sum()
    }

    /// Units of directed link `link` used in `slot`.
    pub fn used(&self, slot: i64, link: usize) -> u32 {
        self.slots.get(&slot).map_or(0, |s| s.used[link])
    }

    /// The path index `transfer` takes in `slot`, if it is carried there.
    pub fn path_of(&self, slot: i64, transfer: u64) -> Option<usize> {
        let s = self.slots.get(&slot)?;
        s.carried.iter().find(|c| c.transfer == transfer).map(|c| c.path)
    }

    /// Books `t` on the first path with room in each of its slots, or, when
    /// some slot has none, books nothing and names those slots (the
    /// degraded ones). A transfer within one endpoint, or of no bandwidth,
    /// needs no link and always fits.
    pub fn admit(&mut self, t: &Transfer) -> Result<(), Vec<i64>> {
        if t.from == t.to || t.bandwidth == 0 || t.end <= t.start {
            return Ok(());
        }
        let pair = self.pair(t.from, t.to);
        let Some(paths) = self.paths.get(pair).filter(|p| !p.is_empty()) else {
            return Err((t.start..t.end).collect());
        };
        let mut chosen = Vec::with_capacity((t.end - t.start) as usize);
        let mut lacking = Vec::new();
        for slot in t.start..t.end {
            let fits = |p: &Vec<usize>| match self.slots.get(&slot) {
                Some(s) => p.iter().all(|&e| s.used[e] + t.bandwidth <= self.capacity[e]),
                None => p.iter().all(|&e| t.bandwidth <= self.capacity[e]),
            };
            match paths.iter().position(fits) {
                Some(p) => chosen.push(p),
                None => lacking.push(slot),
            }
        }
        if !lacking.is_empty() {
            return Err(lacking);
        }
        let links = self.capacity.len();
        for (slot, p) in (t.start..t.end).zip(chosen) {
            let s = self.slots.entry(slot).or_insert_with(|| Slot {
                used: vec![0; links],
                carried: Vec::new(),
            });
            for &e in &self.paths[pair][p] {
                s.used[e] += t.bandwidth;
            }
            s.carried.push(Carried {
                transfer: t.id,
                pair,
                bandwidth: t.bandwidth,
                path: p,
            });
        }
        Ok(())
    }

    /// Routes everything `slot` carries again as a maximum concurrent flow
    /// (within `1 - epsilon` of the optimum), each reservation on one path;
    /// keeps the old routing where that fails (see the module's text).
    ///
    /// The demands are what the slot carries, not the request that found
    /// it degraded: counting that request too saved more requests on the
    /// experiment's stream but left less room for later ones, and fewer
    /// were accepted in all.
    pub fn reroute(&mut self, slot: i64, epsilon: f64) -> Rerouted {
        let Some(s) = self.slots.get_mut(&slot) else {
            return Rerouted::Empty;
        };
        if s.carried.is_empty() {
            return Rerouted::Empty;
        }
        // Sorted by transfer, paths left out: the same reservations however
        // the slot has them routed now.
        let mut key: Vec<Carried> = s.carried.iter().map(|&c| Carried { path: 0, ..c }).collect();
        key.sort_unstable_by_key(|c| c.transfer);
        let routed = match &self.last {
            Some((k, e, routed)) if *k == key && *e == epsilon => routed.clone(),
            _ => {
                let routed = route_again(&self.capacity, &self.paths, &key, epsilon);
                self.last = Some((key.clone(), epsilon, routed.clone()));
                routed
            }
        };
        match routed {
            Ok(new) => {
                s.carried = key;
                s.used.iter_mut().for_each(|u| *u = 0);
                for (c, p) in s.carried.iter_mut().zip(new) {
                    c.path = p;
                    for &e in &self.paths[c.pair][p] {
                        s.used[e] += c.bandwidth;
                    }
                }
                Rerouted::Done
            }
            Err(why) => why,
        }
    }

    /// Forgets the slots before `now`: they are past and can change nothing.
    pub fn advance(&mut self, now: i64) {
        self.slots = self.slots.split_off(&now);
    }
}

/// `carried` as a maximum concurrent flow over `paths` within `capacity`,
/// rounded to one path each: each reservation's new path, or why not.
fn route_again(capacity: &[u32], paths: &[Vec<Vec<usize>>], all: &[Carried], epsilon: f64) -> Routing {
    // One commodity per endpoint pair.
    let mut pairs: Vec<usize> = all.iter().map(|c| c.pair).collect();
    pairs.sort_unstable();
    pairs.dedup();
    let mut demand = vec![0.0; pairs.len()];
    for c in all {
        demand[pairs.binary_search(&c.pair).expect("every pair is listed")] += f64::from(c.bandwidth);
    }
    let commodities: Vec<flow::Commodity<'_>> = pairs
        .iter()
        .zip(&demand)
        .map(|(&p, &demand)| flow::Commodity {
            demand,
            paths: &paths[p],
        })
        .collect();
    let caps: Vec<f64> = capacity.iter().map(|&c| f64::from(c)).collect();
    let solved = flow::max_concurrent_flow(&caps, &commodities, epsilon);
    if solved.ratio < 1.0 {
        return Err(Rerouted::ShortFlow);
    }
    // Each pair's paths by the share of its flow, largest first.
    let preference: Vec<Vec<usize>> = solved
        .flows
        .iter()
        .map(|f| {
            let mut order: Vec<usize> = (0..f.len()).collect();
            order.sort_by(|&a, &b| f[b].total_cmp(&f[a]).then(a.cmp(&b)));
            order
        })
        .collect();
    let mut order: Vec<usize> = (0..all.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(all[i].bandwidth), all[i].transfer));
    let mut used = vec![0u32; capacity.len()];
    let mut chosen = vec![0; all.len()];
    for i in order {
        let c = all[i];
        let commodity = pairs.binary_search(&c.pair).expect("every pair is a commodity");
        let room = |p: usize| paths[c.pair][p].iter().all(|&e| used[e] + c.bandwidth <= capacity[e]);
        let p = preference[commodity]
            .iter()
            .copied()
            .find(|&p| room(p))
            .ok_or(Rerouted::Unsplittable)?;
        for &e in &paths[c.pair][p] {
            used[e] += c.bandwidth;
        }
        chosen[i] = p;
    }
    Ok(chosen)
}

/// Up to `k` loopless paths from `from` to `to` by hop count, as directed
/// links, fewest hops first (Yen's algorithm).
pub(crate) fn fewest_hops(adjacent: &[Vec<(usize, usize)>], from: usize, to: usize, k: usize) -> Vec<Vec<usize>> {
    let found = pathfinding::directed::yen::yen(
        &from,
        |&n| adjacent[n].iter().map(|&(m, _)| (m, 1u32)).collect::<Vec<_>>(),
        |&n| n == to,
        k,
    );
    found
        .into_iter()
        .map(|(nodes, _)| {
            nodes
                .windows(2)
                .map(|w| {
                    adjacent[w[0]]
                        .iter()
                        .find(|&&(m, _)| m == w[1])
                        .map(|&(_, e)| e)
                        .expect("Yen's paths follow links")
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests;
