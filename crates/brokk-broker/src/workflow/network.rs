//! The network between sites as a reservable resource ([VRM] 2.3.3): each
//! link has a bandwidth in each direction, booked over time like processors
//! are (one planner per direction); a transfer between two sites books every
//! link on its route, all or none. Data transfers are moldable: the same
//! bytes at a lower bandwidth take longer, and the broker takes the
//! bandwidth that delivers them first.
//!
//! A pair of sites is joined by its fewest-hop route and, where the network
//! is built [`Network::with_paths`], by its next fewest-hop ones (Yen's, as
//! [`crate::reroute`] takes them): a transfer that a busy link holds up on
//! the first route goes by another when that one delivers first, as the
//! network managers [VRM] 5.6.1 compares against route each reservation.

use std::collections::VecDeque;

use brokk_core::{Planner, Reply, Request, ReservationId};
use brokk_model::{Duration, Time};
use serde::{Deserialize, Serialize};

/// A link between two sites, the same bandwidth each way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// One end (a site's index).
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Bytes per second in each direction.
    pub bandwidth: u64,
}

/// Where a transfer was booked: the directed links with their reservations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkBooking {
    /// Directed link index (`2 * link + direction`).
    pub link: usize,
    /// The reservation on it.
    pub reservation: ReservationId,
}

/// A found transfer slot: when, at which bandwidth, over which links.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub start: Time,
    pub end: Time,
    /// Bandwidth units.
    pub units: u32,
    /// The pair's route it was found on (0, the fewest hops, when none
    /// was searched): booked there first.
    pub route: usize,
}

/// The network's schedule.
#[derive(Debug, Clone)]
pub struct Network {
    links: Vec<LinkSpec>,
    /// Bytes per second per planner unit.
    unit: u64,
    /// One planner per direction of each link.
    planners: Vec<Planner>,
    /// `routes[a][b]`: directed links from site a to site b (empty when a == b
    /// or unreachable).
    routes: Vec<Vec<Option<Vec<usize>>>>,
    /// `others[a][b]`: the pair's next fewest-hop routes, when the network
    /// takes more than one ([`Network::with_paths`]).
    others: Vec<Vec<Vec<Vec<usize>>>>,
}

/// A network that cannot be built as described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// A link names a site that does not exist.
    #[error("link {index} joins site {site}, but there are {sites} sites")]
    NoSuchSite {
        /// The link's position.
        index: usize,
        /// The site it names.
        site: usize,
        /// How many sites there are.
        sites: usize,
    },
    /// A link with no bandwidth, to itself, or with more units than a planner holds.
    #[error("link {0} must join two different sites with a bandwidth of at least one unit")]
    BadLink(usize),
}

impl Network {
    /// The network over `sites` sites made of `links`, booked in units of
    /// `unit` bytes per second, planning until `horizon`. Routes are the
    /// fewest hops (the first found in link order, so always the same).
    pub fn new(sites: usize, links: Vec<LinkSpec>, unit: u64, horizon: Time) -> Result<Network, NetworkError> {
        let unit = unit.max(1);
        let mut planners = Vec::with_capacity(links.len() * 2);
        for (i, l) in links.iter().enumerate() {
            for s in [l.a, l.b] {
                if s >= sites {
                    return Err(NetworkError::NoSuchSite {
                        index: i,
                        site: s,
                        sites,
                    });
                }
            }
            let units = l.bandwidth / unit;
            if l.a == l.b || units == 0 || units > i32::MAX as u64 {
                return Err(NetworkError::BadLink(i));
            }
            for _ in 0..2 {
                planners.push(brokk_core::planner(units as u32, horizon));
            }
        }
        let adjacent = adjacency(sites, &links);
        let routes = (0..sites).map(|from| shortest_routes(&adjacent, from)).collect();
        Ok(Network {
            links,
            unit,
            planners,
            routes,
            others: Vec::new(),
        })
    }

    /// The same network, each pair joined by up to `k` routes, fewest hops
    /// first: the first is the one [`Network::route`] gives, the others
    /// Yen's next loopless ones. A transfer is booked on whichever
    /// delivers first.
    pub fn with_paths(mut self, k: usize) -> Network {
        let n = self.routes.len();
        let adjacent = adjacency(n, &self.links);
        self.others = (0..n)
            .map(|a| {
                (0..n)
                    .map(|b| {
                        let first = self.route(a, b).filter(|r| !r.is_empty()).map(<[usize]>::to_vec);
                        let Some(first) = first.filter(|_| k > 1) else {
                            return Vec::new();
                        };
                        let mut more: Vec<Vec<usize>> = crate::reroute::fewest_hops(&adjacent, a, b, k)
                            .into_iter()
                            .filter(|r| *r != first)
                            .collect();
                        more.truncate(k - 1);
                        more
                    })
                    .collect()
            })
            .collect();
        self
    }

    /// The routes from `a` to `b` in the order they are tried: the fewest
    /// hops first.
    fn routes_between(&self, a: usize, b: usize) -> Vec<&[usize]> {
        let first = self.route(a, b).filter(|r| !r.is_empty());
        let others = self.others.get(a).and_then(|o| o.get(b)).into_iter().flatten();
        first.into_iter().chain(others.map(Vec::as_slice)).collect()
    }

    /// Bytes per second per booking unit.
    pub fn unit(&self) -> u64 {
        self.unit
    }

    /// The planner of directed link `i`, for inspection.
    pub fn planner(&self, i: usize) -> &Planner {
        &self.planners[i]
    }

    /// Number of directed links.
    pub fn directed_links(&self) -> usize {
        self.planners.len()
    }

    /// Mean bandwidth of the links in bytes per second (0 without links).
    pub fn mean_bandwidth(&self) -> f64 {
        if self.links.is_empty() {
            return 0.0;
        }
        self.links.iter().map(|l| l.bandwidth as f64).sum::<f64>() / self.links.len() as f64
    }

    /// The directed links from `a` to `b`: `Some(empty)` within one site,
    /// `None` when no route joins them.
    pub fn route(&self, a: usize, b: usize) -> Option<&[usize]> {
        if a == b {
            return Some(&[]);
        }
        self.routes.get(a)?.get(b)?.as_deref()
    }

    /// The narrowest link's units on the route from `a` to `b`.
    fn bottleneck(&self, route: &[usize]) -> u32 {
        route.iter().map(|&l| self.planners[l].capacity()).min().unwrap_or(0)
    }

    /// Bandwidth units for `bytes_per_s` (at least one).
    pub(crate) fn units_for(&self, bytes_per_s: u64) -> u32 {
        bytes_per_s.div_ceil(self.unit).clamp(1, u64::from(u32::MAX)) as u32
    }

    /// The earliest (or, `late`, the latest) start in `[earliest, latest]`
    /// where `units` are free for `d` on every link of `route`: each link's
    /// fit in turn, from the window's near end, until all agree.
    fn common_start(&self, route: &[usize], units: u32, d: i64, earliest: i64, latest: i64, late: bool) -> Option<i64> {
        let mut t = if late { latest } else { earliest };
        loop {
            let mut moved = false;
            for &l in route {
                let (lo, hi) = if late { (earliest, t) } else { (t, latest) };
                let req = Request {
                    amount: units,
                    duration: Duration(d),
                    earliest: Time(lo),
                    latest: Time(hi),
                    flexible: false,
                };
                let p = &self.planners[l];
                let fit = if late {
                    p.latest_start(&req)
                } else {
                    p.earliest_start(&req)
                };
                let s = fit.ok().flatten()?.0;
                if s != t {
                    t = s;
                    moved = true;
                }
            }
            if !moved {
                return Some(t);
            }
        }
    }

    /// The slot that delivers `bytes` from `a` to `b` first, starting at or
    /// after `after` and ending by `by`. Tried: the narrowest link's whole
    /// bandwidth and what is free on the whole route at `after`; the
    /// earliest end wins (the lower bandwidth on a tie). `None` when
    /// nothing fits.
    pub(crate) fn find_transfer(&self, a: usize, b: usize, bytes: u64, after: Time, by: Time) -> Option<Slot> {
        self.find(a, b, bytes, after, by, Aim::Earliest)
    }

    /// The transfer slot in `[after, by)` that starts last (the higher
    /// bandwidth on a tie): how late data may leave and still arrive by `by`.
    pub(crate) fn find_latest_transfer(&self, a: usize, b: usize, bytes: u64, after: Time, by: Time) -> Option<Slot> {
        self.find(a, b, bytes, after, by, Aim::Latest)
    }

    /// The narrowest bandwidth (of the whole link, its halves down to one
    /// unit, and what is free at `after`) that still moves the data within
    /// `[after, by)`: data that only has to be there by a time leaves the
    /// rest of the link to others.
    pub(crate) fn find_gentle_transfer(&self, a: usize, b: usize, bytes: u64, after: Time, by: Time) -> Option<Slot> {
        self.find(a, b, bytes, after, by, Aim::Narrowest)
    }

    fn find(&self, a: usize, b: usize, bytes: u64, after: Time, by: Time, aim: Aim) -> Option<Slot> {
        let mut best: Option<Slot> = None;
        for (k, route) in self.routes_between(a, b).into_iter().enumerate() {
            if let Some(slot) = self.find_on(route, k, bytes, after, by, aim) {
                if best.is_none_or(|b| aim.prefers(&slot, &b)) {
                    best = Some(slot);
                }
            }
        }
        best
    }

    /// [`Network::find`] on one route, the pair's `k`th.
    fn find_on(&self, route: &[usize], k: usize, bytes: u64, after: Time, by: Time, aim: Aim) -> Option<Slot> {
        let late = aim == Aim::Latest;
        let full = self.bottleneck(route);
        let at = if late { by - Duration(1) } else { after };
        let free_then = route
            .iter()
            .map(|&l| {
                let p = &self.planners[l];
                p.free_slots(at, at + Duration(1)).first().map_or(0, |f| f.free)
            })
            .min()
            .unwrap_or(0);
        // The whole link, and what is free on all of it at the near end;
        // the narrowest search also halves down to one unit.
        let mut tries: Vec<u32> = if aim == Aim::Narrowest {
            std::iter::successors(Some(full), |u| (*u > 1).then_some(u / 2)).collect()
        } else {
            vec![full]
        };
        if free_then > 0 && free_then < full {
            tries.push(free_then);
        }
        let mut best: Option<Slot> = None;
        for units in tries {
            let d = seconds(bytes, u64::from(units) * self.unit);
            let Some(start) = self.common_start(route, units, d, after.0, by.0.saturating_sub(d), late) else {
                continue;
            };
            let slot = Slot {
                start: Time(start),
                end: Time(start + d),
                units,
                route: k,
            };
            if best.is_none_or(|b| aim.prefers(&slot, &b)) {
                best = Some(slot);
            }
        }
        best
    }

    /// Books `slot.units` on every link of a route from `a` to `b` over the
    /// slot, preliminary until `hold` when given: the slot's own route
    /// first, then the others in their order; all links of one route or
    /// none.
    pub(crate) fn book(
        &mut self,
        owner: &str,
        a: usize,
        b: usize,
        slot: Slot,
        hold: Option<Time>,
    ) -> Option<Vec<LinkBooking>> {
        if a == b {
            return Some(Vec::new());
        }
        let routes: Vec<Vec<usize>> = self.routes_between(a, b).into_iter().map(<[usize]>::to_vec).collect();
        let order = std::iter::once(slot.route).chain((0..routes.len()).filter(|&k| k != slot.route));
        order
            .filter_map(|k| routes.get(k))
            .find_map(|route| self.book_on(owner, route, slot, hold))
    }

    /// [`Network::book`] on one route.
    fn book_on(&mut self, owner: &str, route: &[usize], slot: Slot, hold: Option<Time>) -> Option<Vec<LinkBooking>> {
        let req = Request {
            amount: slot.units,
            duration: slot.end - slot.start,
            earliest: slot.start,
            latest: slot.start,
            flexible: false,
        };
        let mut made = Vec::with_capacity(route.len());
        for &l in route {
            match self.planners[l].reserve(owner, &req, hold) {
                Reply::Granted { id, .. } => made.push(LinkBooking {
                    link: l,
                    reservation: id,
                }),
                _ => {
                    self.release(&made);
                    return None;
                }
            }
        }
        Some(made)
    }

    /// Makes preliminary link bookings permanent.
    pub fn commit(&mut self, bookings: &[LinkBooking]) {
        for b in bookings {
            let _ = self.planners[b.link].commit(b.reservation);
        }
    }

    /// Releases link bookings (ones already gone are skipped).
    pub fn release(&mut self, bookings: &[LinkBooking]) {
        for b in bookings {
            let _ = self.planners[b.link].cancel(b.reservation);
        }
    }

    /// Lets preliminary bookings lapse at `now` and forgets what ended
    /// before it.
    pub fn advance(&mut self, now: Time) {
        for p in &mut self.planners {
            p.expire(now);
            p.advance(now);
        }
    }

    /// Puts a committed transfer's bookings back as they were (same ids),
    /// as a broker does for its admitted workflows after a restart; returns
    /// whether every link took it back (one that no longer fits is skipped).
    pub fn restore(&mut self, owner: &str, x: &super::TransferPlan) -> bool {
        let units = u32::try_from(x.bytes_per_s / self.unit).unwrap_or(u32::MAX);
        let mut all = true;
        for b in &x.links {
            let r = brokk_core::Reservation {
                id: b.reservation,
                owner: owner.into(),
                start: x.start,
                end: x.end,
                amount: units,
                state: brokk_core::State::Committed,
                window: None,
            };
            all &= self.planners.get_mut(b.link).is_some_and(|p| p.restore(&r).is_ok());
        }
        all
    }

    /// Books `units` from `a` to `b` directly (traffic the broker does not
    /// manage, in simulations), committed.
    pub fn book_background(&mut self, a: usize, b: usize, units: u32, start: Time, end: Time) -> bool {
        self.book(
            "background",
            a,
            b,
            Slot {
                start,
                end,
                units,
                route: 0,
            },
            None,
        )
        .is_some()
    }
}

/// What a transfer search looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aim {
    Earliest,
    Latest,
    Narrowest,
}

impl Aim {
    /// Whether `slot` serves this aim better than `best` (a tie keeps
    /// `best`, found first: on an earlier route or at the full bandwidth).
    fn prefers(self, slot: &Slot, best: &Slot) -> bool {
        match self {
            Aim::Latest => slot.start > best.start || (slot.start == best.start && slot.units > best.units),
            Aim::Earliest => slot.end < best.end || (slot.end == best.end && slot.units < best.units),
            Aim::Narrowest => slot.units < best.units,
        }
    }
}

/// Whole seconds to move `bytes` at `bytes_per_s` (at least one).
fn seconds(bytes: u64, bytes_per_s: u64) -> i64 {
    bytes.div_ceil(bytes_per_s.max(1)).clamp(1, i64::MAX as u64 / 4) as i64
}

/// Each site's links as (the site at the other end, the directed link
/// `2 * link + direction`).
fn adjacency(sites: usize, links: &[LinkSpec]) -> Vec<Vec<(usize, usize)>> {
    let mut adjacent: Vec<Vec<(usize, usize)>> = vec![Vec::new(); sites];
    for (i, l) in links.iter().enumerate() {
        adjacent[l.a].push((l.b, 2 * i));
        adjacent[l.b].push((l.a, 2 * i + 1));
    }
    adjacent
}

/// Breadth-first routes from `from` to every site, as directed link lists.
fn shortest_routes(adjacent: &[Vec<(usize, usize)>], from: usize) -> Vec<Option<Vec<usize>>> {
    let n = adjacent.len();
    let mut via: Vec<Option<(usize, usize)>> = vec![None; n];
    let mut seen = vec![false; n];
    seen[from] = true;
    let mut queue = VecDeque::from([from]);
    while let Some(s) = queue.pop_front() {
        for &(t, link) in &adjacent[s] {
            if !seen[t] {
                seen[t] = true;
                via[t] = Some((s, link));
                queue.push_back(t);
            }
        }
    }
    (0..n)
        .map(|to| {
            if to == from || !seen[to] {
                return None;
            }
            let mut path = Vec::new();
            let mut at = to;
            while let Some((prev, link)) = via[at] {
                path.push(link);
                at = prev;
            }
            path.reverse();
            Some(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> Network {
        // 0 - 1 - 2, 10 units each way, 1 byte/s per unit.
        let links = vec![
            LinkSpec {
                a: 0,
                b: 1,
                bandwidth: 10,
            },
            LinkSpec {
                a: 1,
                b: 2,
                bandwidth: 10,
            },
        ];
        Network::new(3, links, 1, Time(1_000_000)).unwrap()
    }

    #[test]
    fn routes_take_the_fewest_hops_in_each_direction() {
        let n = line();
        assert_eq!(n.route(0, 2), Some(&[0, 2][..]));
        assert_eq!(n.route(2, 0), Some(&[3, 1][..]));
        assert_eq!(n.route(1, 1), Some(&[][..]));
        let empty = n.find_transfer(0, 2, 95, Time(0), Time(100)).unwrap();
        assert_eq!(
            (empty.end, empty.units),
            (Time(10), 10),
            "95 bytes over two 10-unit hops"
        );
    }

    #[test]
    fn a_busy_link_on_the_route_delays_the_transfer_or_narrows_it() {
        let mut n = line();
        // 6 of 10 units on 1 -> 2 until t = 100.
        assert!(n.book_background(1, 2, 6, Time(0), Time(100)));
        // 40 bytes: 4 s at 10 units after t = 100, or 10 s at 4 units now
        // (ends at 10): the narrower one delivers first.
        let s = n.find_transfer(0, 2, 40, Time(0), Time(10_000)).unwrap();
        assert_eq!((s.start, s.end, s.units), (Time(0), Time(10), 4));
        let b = n.book("u", 0, 2, s, Some(Time(5))).unwrap();
        assert_eq!(b.len(), 2);
        // Now 1 -> 2 is full until t = 10.
        assert!(n.find_transfer(1, 2, 40, Time(5), Time(15)).is_none());
        n.advance(Time(5));
        let freed = n.find_transfer(1, 2, 40, Time(5), Time(15)).unwrap();
        assert_eq!(
            (freed.start, freed.units),
            (Time(5), 4),
            "the lapsed hold is free again"
        );
    }

    #[test]
    fn a_transfer_held_up_on_the_direct_link_goes_round_when_the_network_takes_two_routes() {
        // A triangle of 10-unit links: 0 - 2 directly, or by 1.
        let triangle = || {
            let link = |a, b| LinkSpec { a, b, bandwidth: 10 };
            Network::new(3, vec![link(0, 2), link(0, 1), link(1, 2)], 1, Time(1_000_000)).unwrap()
        };
        for paths in [1, 2] {
            let mut n = triangle().with_paths(paths);
            // The direct link is full until t = 100.
            assert!(n.book_background(0, 2, 10, Time(0), Time(100)));
            let s = n.find_transfer(0, 2, 40, Time(0), Time(10_000)).unwrap();
            let links = n.book("u", 0, 2, s, None).unwrap();
            let by: Vec<usize> = links.iter().map(|b| b.link).collect();
            if paths == 1 {
                // One route: the transfer waits for it.
                assert_eq!((s.start, s.end, s.route), (Time(100), Time(104), 0));
                assert_eq!(by, [0]);
            } else {
                // Round by site 1 (0 -> 1, then 1 -> 2), at once.
                assert_eq!((s.start, s.end, s.route), (Time(0), Time(4), 1));
                assert_eq!(by, [2, 4]);
            }
        }
        // A route with room is taken even for a slot found on another: a
        // stream booked over the direct link's busy span goes round.
        let mut n = triangle().with_paths(2);
        assert!(n.book_background(0, 2, 10, Time(0), Time(100)));
        let stream = Slot {
            start: Time(10),
            end: Time(20),
            units: 5,
            route: 0,
        };
        let links = n.book("u", 0, 2, stream, None).unwrap();
        assert_eq!(links.iter().map(|b| b.link).collect::<Vec<_>>(), [2, 4]);
        // With one route it is refused.
        let mut one = triangle();
        assert!(one.book_background(0, 2, 10, Time(0), Time(100)));
        assert!(one.book("u", 0, 2, stream, None).is_none());
    }

    #[test]
    fn bad_links_are_refused() {
        let bad = vec![LinkSpec {
            a: 0,
            b: 3,
            bandwidth: 1,
        }];
        assert!(matches!(
            Network::new(2, bad, 1, Time(10)),
            Err(NetworkError::NoSuchSite { site: 3, .. })
        ));
        let zero = vec![LinkSpec {
            a: 0,
            b: 1,
            bandwidth: 0,
        }];
        assert_eq!(
            Network::new(2, zero, 1, Time(10)).unwrap_err(),
            NetworkError::BadLink(0)
        );
    }
}
