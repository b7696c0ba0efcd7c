//! Reservation bookkeeping over a [`Profile`]: the provider side of the
//! reservation protocol ([ET-interop], 2.3; [ET-brokering], 3.2).
//!
//! **Flexible reservations.** When a request does not fit its window, the planner
//! tries to make room by moving one flexible reservation: candidates are tried in
//! increasing id order; each is lifted out, the new request is placed at its
//! earliest fit, and the lifted one is put back at its own earliest fit inside
//! its window. The first candidate for which both fit is kept; if none works,
//! nothing moves. One move per request keeps the cost bounded and the outcome
//! easy to explain; the moved reservation never leaves the window its owner gave.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use brokk_model::{Duration, Time};

use crate::fragmentation;
use crate::profile::Profile;
use crate::types::{
    Candidate, Change, FreeSlot, NeverReason, PlannerError, Reply, Request, Reservation, ReservationId, State,
};

const COMMITTED: i64 = i64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    start: i64,
    end: i64,
    /// When a preliminary hold lapses; `COMMITTED` once committed.
    expires: i64,
    amount: u32,
    owner: u32,
}

/// The advance-reservation schedule of one resource of fixed capacity.
#[derive(Debug, Clone)]
pub struct Planner<P: Profile> {
    capacity: u32,
    horizon: i64,
    profile: P,
    entries: HashMap<u64, Entry>,
    holds: BTreeSet<(i64, u64)>,
    flexible: HashMap<u64, (i64, i64)>,
    owners: Vec<Arc<str>>,
    owner_ids: HashMap<Arc<str>, u32>,
    next_id: u64,
    /// Changes made to the schedule so far.
    changes: u64,
}

impl<P: Profile> Planner<P> {
    /// A planner for `capacity` units whose reservations must end by `horizon`.
    pub fn new(capacity: u32, horizon: Time, profile: P) -> Self {
        assert!(capacity <= i32::MAX as u32, "capacity must fit in 31 bits");
        Planner {
            capacity,
            horizon: horizon.0,
            profile,
            entries: HashMap::default(),
            holds: BTreeSet::new(),
            flexible: HashMap::default(),
            owners: Vec::new(),
            owner_ids: HashMap::default(),
            next_id: 1,
            changes: 0,
        }
    }

    /// How many changes the schedule has had (a reservation made, moved,
    /// cancelled, lapsed or restored): a consumer that saw this number
    /// and sees it again knows the schedule is the same, but for time
    /// having passed.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    fn add_use(&mut self, start: i64, end: i64, amount: i32) {
        self.changes += 1;
        self.profile.add(start, end, amount);
    }

    fn remove_use(&mut self, start: i64, end: i64, amount: i32) {
        self.changes += 1;
        self.profile.remove(start, end, amount);
    }

    /// Units of the resource.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Number of live reservations.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when nothing is reserved.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn never(&self, amount: u32, duration: i64, earliest: i64, latest: i64) -> Option<NeverReason> {
        if amount == 0 || duration <= 0 {
            Some(NeverReason::Empty)
        } else if amount > self.capacity {
            Some(NeverReason::OverCapacity {
                amount,
                capacity: self.capacity,
            })
        } else if latest < earliest {
            Some(NeverReason::EmptyWindow)
        } else if earliest.saturating_add(duration) > self.horizon {
            Some(NeverReason::BeyondHorizon)
        } else {
            None
        }
    }

    fn thr(&self, amount: u32) -> i32 {
        (self.capacity - amount) as i32
    }

    /// Earliest fit with the start clipped so the span ends by the horizon.
    fn fit(&self, amount: u32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        let last = latest.min(self.horizon.saturating_sub(d));
        if last < earliest {
            return None;
        }
        self.profile.earliest_fit(self.thr(amount), d, earliest, last)
    }

    fn next_start(&self, amount: u32, d: i64, after: i64) -> Option<Time> {
        self.fit(amount, d, after.saturating_add(1), i64::MAX).map(Time)
    }

    fn owner_id(&mut self, owner: &str) -> u32 {
        if let Some(&id) = self.owner_ids.get(owner) {
            return id;
        }
        let id = self.owners.len() as u32;
        let name: Arc<str> = Arc::from(owner);
        self.owners.push(name.clone());
        self.owner_ids.insert(name, id);
        id
    }

    /// The earliest start of `req` inside its window, without reserving or rating
    /// anything; `Ok(None)` when it does not fit there.
    pub fn earliest_start(&self, req: &Request) -> Result<Option<Time>, NeverReason> {
        let (amount, d, e, l) = (req.amount, req.duration.0, req.earliest.0, req.latest.0);
        if let Some(r) = self.never(amount, d, e, l) {
            return Err(r);
        }
        Ok(self.fit(amount, d, e, l).map(Time))
    }

    /// The latest start of `req` inside its window (clipped so it ends by
    /// the horizon), without reserving or rating anything; `Ok(None)` when
    /// it does not fit there.
    pub fn latest_start(&self, req: &Request) -> Result<Option<Time>, NeverReason> {
        let (amount, d, e, l) = (req.amount, req.duration.0, req.earliest.0, req.latest.0);
        if let Some(r) = self.never(amount, d, e, l) {
            return Err(r);
        }
        let l = l.min(self.horizon.saturating_sub(d));
        if l < e {
            return Ok(None);
        }
        Ok(self.profile.latest_fit(self.thr(amount), d, e, l).map(Time))
    }

    /// Up to `k` non-binding candidates: the earliest fit first, then starts spread
    /// over the window, the latest fit last, each rated by the fragmentation it
    /// would leave around itself.
    pub fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, NeverReason> {
        let (amount, d, e, l) = (req.amount, req.duration.0, req.earliest.0, req.latest.0);
        if let Some(r) = self.never(amount, d, e, l) {
            return Err(r);
        }
        let l = l.min(self.horizon.saturating_sub(d));
        let Some(first) = self.fit(amount, d, e, l) else {
            return Ok(Vec::new());
        };
        let mut starts = vec![first];
        if k > 1 {
            if let Some(last) = self.profile.latest_fit(self.thr(amount), d, first, l) {
                let gaps = (k - 1) as i64;
                for i in 1..gaps {
                    let p = first + (last - first) * i / gaps;
                    if let Some(s) = self.fit(amount, d, p, last) {
                        starts.push(s);
                    }
                }
                starts.push(last);
            }
        }
        starts.sort_unstable();
        starts.dedup();
        starts.truncate(k.max(1));
        Ok(starts
            .into_iter()
            .map(|s| Candidate {
                start: Time(s),
                rating: self.rate(s, d, amount),
            })
            .collect())
    }

    /// Fragmentation of the neighbourhood `[s - d, s + 2d)` with the candidate placed.
    fn rate(&self, s: i64, d: i64, amount: u32) -> f64 {
        let (from, to) = (s.saturating_sub(d), s.saturating_add(d.saturating_mul(2)));
        let mut segs = Vec::new();
        for (a, b, used) in self.profile.segments(from, to) {
            // Split each segment at the candidate's ends and add its usage inside.
            for (x, y, inside) in [
                (a, b.min(s), false),
                (a.max(s), b.min(s + d), true),
                (a.max(s + d), b, false),
            ] {
                if x < y {
                    let u = used as i64 + if inside { i64::from(amount) } else { 0 };
                    segs.push((y - x, (i64::from(self.capacity) - u).max(0) as u32));
                }
            }
        }
        fragmentation::two_dimensional(&segs, self.capacity, None)
    }

    /// Tries to reserve; with `hold = Some(expiry)` the reservation is preliminary
    /// and lapses at [`Planner::expire`] unless committed first.
    pub fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Reply {
        let (amount, d, e, l) = (req.amount, req.duration.0, req.earliest.0, req.latest.0);
        if let Some(reason) = self.never(amount, d, e, l) {
            return Reply::Never { reason };
        }
        let placed = match self.fit(amount, d, e, l) {
            Some(s) => {
                let (s, end) = self.profile.round(s, s + d);
                self.add_use(s, end, amount as i32);
                Some((s, end))
            }
            None => self.place_by_moving(amount, d, e, l),
        };
        let Some((start, end)) = placed else {
            return Reply::Rejected {
                next_start: self.next_start(amount, d, l),
            };
        };
        let id = self.next_id;
        self.next_id += 1;
        let owner = self.owner_id(owner);
        let expires = hold.map_or(COMMITTED, |t| t.0);
        self.entries.insert(
            id,
            Entry {
                start,
                end,
                expires,
                amount,
                owner,
            },
        );
        if expires != COMMITTED {
            self.holds.insert((expires, id));
        }
        if req.flexible {
            self.flexible.insert(id, (e, l));
        }
        Reply::Granted {
            id: ReservationId(id),
            start: Time(start),
        }
    }

    /// The flexible-move rule of the module documentation. On success the new span
    /// is in the profile and the moved reservation is updated.
    fn place_by_moving(&mut self, amount: u32, d: i64, e: i64, l: i64) -> Option<(i64, i64)> {
        let mut candidates: Vec<(u64, (i64, i64))> = self
            .flexible
            .iter()
            .filter(|(id, _)| {
                self.entries
                    .get(id)
                    .is_some_and(|f| f.end > e && f.start < l.saturating_add(d))
            })
            .map(|(id, w)| (*id, *w))
            .collect();
        // In id order, so the outcome does not depend on hashing.
        candidates.sort_unstable();
        for (id, (lo, hi)) in candidates {
            let f = self.entries[&id];
            self.remove_use(f.start, f.end, f.amount as i32);
            if let Some(s) = self.fit(amount, d, e, l) {
                let (s, end) = self.profile.round(s, s + d);
                self.add_use(s, end, amount as i32);
                let fd = f.end - f.start;
                if let Some(fs) = self.fit(f.amount, fd, lo, hi) {
                    let (fs, fe) = self.profile.round(fs, fs + fd);
                    self.add_use(fs, fe, f.amount as i32);
                    if let Some(x) = self.entries.get_mut(&id) {
                        x.start = fs;
                        x.end = fe;
                    }
                    return Some((s, end));
                }
                self.remove_use(s, end, amount as i32);
            }
            self.add_use(f.start, f.end, f.amount as i32);
        }
        None
    }

    /// Makes a preliminary reservation permanent.
    pub fn commit(&mut self, id: ReservationId) -> Result<(), PlannerError> {
        let e = self.entries.get_mut(&id.0).ok_or(PlannerError::Unknown(id))?;
        if e.expires != COMMITTED {
            self.holds.remove(&(e.expires, id.0));
            e.expires = COMMITTED;
        }
        Ok(())
    }

    /// Cancels a reservation and returns what it was.
    pub fn cancel(&mut self, id: ReservationId) -> Result<Reservation, PlannerError> {
        let r = self.get(id).ok_or(PlannerError::Unknown(id))?;
        let e = self.entries.remove(&id.0).ok_or(PlannerError::Unknown(id))?;
        self.remove_use(e.start, e.end, e.amount as i32);
        if e.expires != COMMITTED {
            self.holds.remove(&(e.expires, id.0));
        }
        if !self.flexible.is_empty() {
            self.flexible.remove(&id.0);
        }
        Ok(r)
    }

    /// Changes amount, duration or window, atomically: on failure the reservation
    /// stays exactly as it was and the error carries the protocol reply.
    pub fn modify(&mut self, id: ReservationId, change: Change) -> Result<Time, PlannerError> {
        let old = *self.entries.get(&id.0).ok_or(PlannerError::Unknown(id))?;
        let amount = change.amount.unwrap_or(old.amount);
        let d = change.duration.map_or(old.end - old.start, |d| d.0);
        let window = self.flexible.get(&id.0).copied();
        let (lo, hi) = match (change.window, window) {
            (Some((a, b)), _) => (a.0, b.0),
            (None, Some(w)) => w,
            (None, None) => (old.start, old.start),
        };
        if let Some(reason) = self.never(amount, d, lo, hi) {
            return Err(PlannerError::DoesNotFit(Reply::Never { reason }));
        }
        self.remove_use(old.start, old.end, old.amount as i32);
        match self.fit(amount, d, lo, hi) {
            Some(s) => {
                let (s, end) = self.profile.round(s, s + d);
                self.add_use(s, end, amount as i32);
                if let Some(e) = self.entries.get_mut(&id.0) {
                    e.start = s;
                    e.end = end;
                    e.amount = amount;
                }
                if window.is_some() {
                    self.flexible.insert(id.0, (lo, hi));
                }
                Ok(Time(s))
            }
            None => {
                let next_start = self.next_start(amount, d, hi);
                self.add_use(old.start, old.end, old.amount as i32);
                Err(PlannerError::DoesNotFit(Reply::Rejected { next_start }))
            }
        }
    }

    /// Removes every preliminary reservation whose hold has lapsed at `now`, and
    /// returns their ids in expiry order.
    pub fn expire(&mut self, now: Time) -> Vec<ReservationId> {
        let mut gone = Vec::new();
        while let Some(&(t, id)) = self.holds.first() {
            if t > now.0 {
                break;
            }
            self.holds.pop_first();
            if let Some(e) = self.entries.remove(&id) {
                self.remove_use(e.start, e.end, e.amount as i32);
                self.flexible.remove(&id);
                gone.push(ReservationId(id));
            }
        }
        gone
    }

    /// Moves the planner's notion of the present forward (the slotted baseline
    /// recycles its ring); reservations are untouched.
    pub fn advance(&mut self, now: Time) {
        self.profile.advance(now.0);
    }

    /// Puts back a reservation exactly as it was (id, owner, span, state and
    /// window), as a site does when it reloads its schedule after a restart.
    /// Fails, changing nothing, if the id is taken, the span is empty or beyond
    /// the horizon, or the units are not free throughout it.
    pub fn restore(&mut self, r: &Reservation) -> Result<(), PlannerError> {
        let (s, e) = (r.start.0, r.end.0);
        let fits = !self.entries.contains_key(&r.id.0)
            && r.amount > 0
            && s < e
            && e <= self.horizon
            && self.is_free(r.amount, r.start, Duration(e - s));
        if !fits {
            return Err(PlannerError::DoesNotFit(Reply::Rejected { next_start: None }));
        }
        self.add_use(s, e, r.amount as i32);
        let owner = self.owner_id(&r.owner);
        let expires = match r.state {
            State::Committed => COMMITTED,
            State::Preliminary { expires } => expires.0,
        };
        self.entries.insert(
            r.id.0,
            Entry {
                start: s,
                end: e,
                expires,
                amount: r.amount,
                owner,
            },
        );
        if expires != COMMITTED {
            self.holds.insert((expires, r.id.0));
        }
        if let Some((lo, hi)) = r.window {
            self.flexible.insert(r.id.0, (lo.0, hi.0));
        }
        self.next_id = self.next_id.max(r.id.0 + 1);
        Ok(())
    }

    /// Never issues an id below `first` again: a site reloading its schedule
    /// keeps the ids of cancelled and expired reservations retired.
    pub fn issue_ids_from(&mut self, first: u64) {
        self.next_id = self.next_id.max(first);
    }

    /// A reservation by id.
    pub fn get(&self, id: ReservationId) -> Option<Reservation> {
        let e = self.entries.get(&id.0)?;
        Some(Reservation {
            id,
            owner: self.owners[e.owner as usize].clone(),
            start: Time(e.start),
            end: Time(e.end),
            amount: e.amount,
            state: if e.expires == COMMITTED {
                State::Committed
            } else {
                State::Preliminary {
                    expires: Time(e.expires),
                }
            },
            window: self.flexible.get(&id.0).map(|&(a, b)| (Time(a), Time(b))),
        })
    }

    /// Every live reservation, by id.
    pub fn reservations(&self) -> Vec<Reservation> {
        let mut ids: Vec<u64> = self.entries.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.get(ReservationId(id))).collect()
    }

    /// The live flexible reservations, by id: the ones a grant may move.
    pub fn flexible_reservations(&self) -> Vec<Reservation> {
        let mut ids: Vec<u64> = self.flexible.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.get(ReservationId(id))).collect()
    }

    /// Whether `amount` units are free throughout `[start, start + duration)`.
    pub fn is_free(&self, amount: u32, start: Time, duration: Duration) -> bool {
        amount <= self.capacity
            && self.profile.max_used(start.0, start.0.saturating_add(duration.0)) <= self.thr(amount)
    }

    /// The free rectangles over `[from, to)`: maximal intervals of constant free capacity.
    pub fn free_slots(&self, from: Time, to: Time) -> Vec<FreeSlot> {
        self.profile
            .segments(from.0, to.0)
            .into_iter()
            .filter_map(|(s, e, used)| {
                let free = self.capacity.saturating_sub(used.max(0) as u32);
                (free > 0).then_some(FreeSlot {
                    start: Time(s),
                    end: Time(e),
                    free,
                })
            })
            .collect()
    }

    /// Fraction of capacity x time reserved over `[from, to)`.
    pub fn utilization(&self, from: Time, to: Time) -> f64 {
        if to.0 <= from.0 || self.capacity == 0 {
            return 0.0;
        }
        let used: f64 = self
            .profile
            .segments(from.0, to.0)
            .iter()
            .map(|&(s, e, u)| (e - s) as f64 * f64::from(u))
            .sum();
        used / ((to.0 - from.0) as f64 * f64::from(self.capacity))
    }

    /// Seed 004's two-dimensional fragmentation over `[from, to)`, every demand weighed equally.
    pub fn fragmentation(&self, from: Time, to: Time) -> f64 {
        self.fragmentation_weighted(from, to, None)
    }

    /// The same, with `weights[c - 1]` the frequency of demand c.
    pub fn fragmentation_weighted(&self, from: Time, to: Time, weights: Option<&[f64]>) -> f64 {
        let segs: Vec<(i64, u32)> = self
            .profile
            .segments(from.0, to.0)
            .into_iter()
            .map(|(s, e, used)| (e - s, self.capacity.saturating_sub(used.max(0) as u32)))
            .collect();
        fragmentation::two_dimensional(&segs, self.capacity, weights)
    }

    /// Checks that the profile matches the reservations and never exceeds capacity.
    /// Costs O(n * m); for tests and debugging.
    pub fn check_invariants(&self) {
        self.profile.check_invariants();
        let mut points: Vec<i64> = self.entries.values().flat_map(|e| [e.start, e.end]).collect();
        points.sort_unstable();
        points.dedup();
        for w in points.windows(2) {
            let (a, b) = (w[0], w[1]);
            let expected: i64 = self
                .entries
                .values()
                .filter(|e| e.start <= a && a < e.end)
                .map(|e| i64::from(e.amount))
                .sum();
            let got = i64::from(self.profile.max_used(a, b));
            assert_eq!(got, expected, "usage over [{a}, {b})");
            assert!(expected <= i64::from(self.capacity), "over capacity over [{a}, {b})");
        }
        for (t, id) in &self.holds {
            assert_eq!(
                self.entries.get(id).map(|e| e.expires),
                Some(*t),
                "hold index out of date"
            );
        }
    }
}
