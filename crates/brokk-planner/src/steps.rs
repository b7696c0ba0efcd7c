//! A usage profile held as one sorted vector of change points.
//!
//! Every change moves the points after it, so a change costs O(n); but for the
//! few dozen spans of a cluster's running jobs and queue a flat vector beats
//! the treap's pointer chasing several times over, and a fit search is one
//! forward scan over contiguous memory. The treap ([`crate::FreeList`]) is the
//! choice for large profiles.

use crate::profile::Profile;

/// The flat profile: usage is 0 before the first point, and from each point's
/// time on its value until the next point.
#[derive(Debug, Clone, Default)]
pub struct Steps {
    /// (time, usage from then on), strictly increasing in time, no two
    /// neighbours with the same usage, the first one not 0.
    points: Vec<(i64, i32)>,
}

impl Steps {
    /// An empty profile.
    pub fn new() -> Self {
        Steps::default()
    }

    /// Forgets all usage, keeping the allocation.
    pub fn clear(&mut self) {
        self.points.clear();
    }

    /// Replaces the usage with the sum of `spans` (start, end, amount): one
    /// sort of their ends instead of an insertion per span.
    pub fn set_sum(&mut self, spans: impl IntoIterator<Item = (i64, i64, i32)>) {
        let mut ends: Vec<(i64, i32)> = Vec::new();
        for (s, e, a) in spans {
            if s < e && a != 0 {
                ends.push((s, a));
                ends.push((e, -a));
            }
        }
        ends.sort_unstable_by_key(|p| p.0);
        self.points.clear();
        let mut usage = 0;
        let mut k = 0;
        while k < ends.len() {
            let t = ends[k].0;
            while k < ends.len() && ends[k].0 == t {
                usage += ends[k].1;
                k += 1;
            }
            if self.points.last().map_or(0, |p| p.1) != usage {
                self.points.push((t, usage));
            }
        }
    }

    /// The number of change points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether there is no usage anywhere.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The usage just before point `k` (at `points[k].0 - 1`).
    fn before(&self, k: usize) -> i32 {
        if k == 0 {
            0
        } else {
            self.points[k - 1].1
        }
    }

    /// The index of a point at `t`, inserting one (with the usage already in
    /// force there) if none is, for a `t` whose place is known to be among
    /// indices `lo..=hi`: a search of that range only.
    fn point_at_within(&mut self, t: i64, lo: usize, hi: usize) -> usize {
        let k = lo + self.points[lo..hi].partition_point(|p| p.0 < t);
        if self.points.get(k).is_none_or(|p| p.0 != t) {
            let u = self.before(k);
            self.points.insert(k, (t, u));
        }
        k
    }

    /// Removes point `k` if it does not change the usage.
    fn merge_at(&mut self, k: usize) {
        if k < self.points.len() && self.points[k].1 == self.before(k) {
            self.points.remove(k);
        }
    }

    fn shift(&mut self, start: i64, end: i64, amount: i32) {
        self.shift_within(start, end, amount, 0, self.points.len());
    }

    /// [`Steps::shift`] for a span whose start and end points belong among
    /// indices `lo..=hi`.
    fn shift_within(&mut self, start: i64, end: i64, amount: i32, lo: usize, hi: usize) {
        if start >= end || amount == 0 {
            return;
        }
        let n = self.points.len();
        let a = self.point_at_within(start, lo, hi);
        // A point inserted at `a` moved the range's end one place on.
        let hi = hi + usize::from(self.points.len() > n);
        let b = self.point_at_within(end, a, hi);
        for p in &mut self.points[a..b] {
            p.1 += amount;
        }
        // The end point first: merging at `a` would move it.
        self.merge_at(b);
        self.merge_at(a);
    }

    /// Segments from `from` on: (start, end, usage), the first one starting
    /// at `from`, the last one open-ended (`i64::MAX`).
    fn segments_from(&self, from: i64) -> impl Iterator<Item = (i64, i64, i32)> + '_ {
        let k = self.points.partition_point(|p| p.0 <= from);
        let end_of = move |j: usize| self.points.get(j).map_or(i64::MAX, |p| p.0);
        std::iter::once((from, end_of(k), self.before(k))).chain(
            self.points[k..]
                .iter()
                .enumerate()
                .map(move |(j, &(t, u))| (t, end_of(k + j + 1), u)),
        )
    }
}

impl Profile for Steps {
    fn add(&mut self, start: i64, end: i64, amount: i32) {
        self.shift(start, end, amount);
    }

    fn remove(&mut self, start: i64, end: i64, amount: i32) {
        self.shift(start, end, -amount);
    }

    fn earliest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        if earliest > latest {
            return None;
        }
        let mut run: Option<i64> = None;
        for (s, e, u) in self.segments_from(earliest) {
            if u <= thr {
                let r = *run.get_or_insert(s);
                if r > latest {
                    return None;
                }
                if e.saturating_sub(r) >= d {
                    return Some(r);
                }
            } else {
                run = None;
                if e > latest {
                    return None;
                }
            }
        }
        None
    }

    fn add_at_earliest(&mut self, thr: i32, d: i64, earliest: i64, latest: i64, amount: i32) -> Option<i64> {
        if earliest > latest {
            return None;
        }
        // The search of `earliest_fit`, remembering where in the points the
        // free run began (`lo`: the place of its start) and where the
        // current segment ends (`j`): the span's points go between them.
        let n = self.points.len();
        let k0 = self.points.partition_point(|p| p.0 <= earliest);
        let (mut s, mut u, mut j) = (earliest, self.before(k0), k0);
        let mut run: Option<(i64, usize)> = None;
        loop {
            let e = self.points.get(j).map_or(i64::MAX, |p| p.0);
            if u <= thr {
                // The place of a run's start: `k0 - 1` or `k0` for
                // `earliest` itself, the point's own index otherwise.
                let (r, lo) = *run.get_or_insert((s, if s == earliest { k0.saturating_sub(1) } else { j - 1 }));
                if r > latest {
                    return None;
                }
                if e.saturating_sub(r) >= d {
                    self.shift_within(r, r + d, amount, lo, j.min(n));
                    return Some(r);
                }
            } else {
                run = None;
                if e > latest {
                    return None;
                }
            }
            if j >= n {
                return None;
            }
            (s, u, j) = (self.points[j].0, self.points[j].1, j + 1);
        }
    }

    fn latest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        if earliest > latest {
            return None;
        }
        let mut best = None;
        let mut run: Option<i64> = None;
        for (s, e, u) in self.segments_from(earliest) {
            if u <= thr {
                let r = *run.get_or_insert(s);
                if r > latest {
                    break;
                }
                // Starts in [r, e - d] fit while the free run lasts this far.
                let last = e.saturating_sub(d).min(latest);
                if last >= r {
                    best = Some(last);
                }
                if e == i64::MAX || last == latest {
                    break;
                }
            } else {
                run = None;
                if s > latest {
                    break;
                }
            }
        }
        best
    }

    fn max_used(&self, start: i64, end: i64) -> i32 {
        self.segments_from(start)
            .take_while(|&(s, _, _)| s < end)
            .map(|(_, _, u)| u)
            .max()
            .unwrap_or(0)
    }

    fn segments(&self, from: i64, to: i64) -> Vec<(i64, i64, i32)> {
        self.segments_from(from)
            .take_while(|&(s, _, _)| s < to)
            .map(|(s, e, u)| (s, e.min(to), u))
            .collect()
    }

    fn check_invariants(&self) {
        for w in self.points.windows(2) {
            assert!(w[0].0 < w[1].0, "change points out of order: {w:?}");
            assert!(w[0].1 != w[1].1, "a change point that changes nothing: {w:?}");
        }
        if let Some(p) = self.points.first() {
            assert!(p.1 != 0, "a first change point to zero: {p:?}");
        }
        assert!(
            self.points.iter().all(|p| p.1 >= 0),
            "negative usage: {:?}",
            self.points
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_and_removes_leave_no_points_behind() {
        let mut p = Steps::new();
        p.add(10, 20, 3);
        p.add(15, 30, 2);
        assert_eq!(
            p.segments(0, 40),
            vec![(0, 10, 0), (10, 15, 3), (15, 20, 5), (20, 30, 2), (30, 40, 0)]
        );
        assert_eq!(p.max_used(0, 16), 5);
        assert_eq!(p.max_used(20, 40), 2);
        p.check_invariants();
        p.remove(10, 20, 3);
        p.remove(15, 30, 2);
        assert!(p.is_empty());
    }

    #[test]
    fn fits_skip_blocked_segments_and_respect_the_window() {
        let mut p = Steps::new();
        p.add(10, 20, 8);
        p.add(25, 30, 8);
        // Capacity 10: 5 units fit in [0, 10) and [20, 25) and from 30 on.
        assert_eq!(p.earliest_fit(5, 10, 0, 100), Some(0));
        assert_eq!(p.earliest_fit(5, 6, 1, 100), Some(1));
        assert_eq!(p.earliest_fit(5, 10, 1, 100), Some(30));
        assert_eq!(p.earliest_fit(5, 5, 11, 100), Some(20));
        assert_eq!(p.earliest_fit(5, 5, 11, 19), None);
        assert_eq!(p.latest_fit(5, 5, 0, 100), Some(100));
        assert_eq!(p.latest_fit(5, 5, 0, 24), Some(20));
        assert_eq!(p.latest_fit(5, 11, 0, 24), None);
    }
}
