//! The usage profile as change points in a B+ tree whose nodes carry each
//! child's minimum, maximum and pending (lazy) add.
//!
//! The same idea as the treap ([`crate::FreeList`]), laid out for the cache:
//! a leaf holds up to 128 change points in three flat arrays, an inner node up
//! to 32 children with their figures side by side, so 100,000 reservations
//! sit three or four levels deep and a walk touches a handful of cache lines
//! per level instead of one scattered node per level. A span's range add
//! splits into the children it covers wholly (one lazy add each) and at most
//! two it covers in part; a fit search skips every child that is wholly free
//! or wholly blocked for the query's threshold. Nodes split when full, are
//! dropped when empty and join a neighbour when down to a quarter, so a
//! profile that shrinks after growing stays dense.

use crate::profile::Profile;

/// Most change points in a leaf (its arrays hold one more, for the moment
/// between an insertion and the split it causes).
const LEAF_MAX: usize = 128;
/// Most children of an inner node (likewise, one more in its arrays).
const INNER_MAX: usize = 32;

/// A leaf: change points in time order. Each starts a segment of constant
/// usage lasting until the next point (in this leaf or the next).
#[derive(Debug, Clone)]
struct Leaf {
    len: usize,
    keys: [i64; LEAF_MAX + 1],
    /// Usage from the point on, without the pending adds of the ancestors.
    vals: [i32; LEAF_MAX + 1],
    /// How many span ends sit at the point.
    refs: [u32; LEAF_MAX + 1],
}

/// An inner node: its children in time order, with each child's smallest key
/// and, on this node's footing, its pending add and its usage's extremes.
#[derive(Debug, Clone)]
struct Inner {
    len: usize,
    keys: [i64; INNER_MAX + 1],
    child: [u32; INNER_MAX + 1],
    /// Add owed to every point under the child.
    lazy: [i32; INNER_MAX + 1],
    /// Extremes of the child's usage, its `lazy` included.
    min: [i32; INNER_MAX + 1],
    max: [i32; INNER_MAX + 1],
}

/// What a change below a node tells the entry that points at it.
struct Summary {
    first: i64,
    min: i32,
    max: i32,
}

/// What a release did to a node, for the entry that points at it.
enum Released {
    /// Nothing its parent records changed.
    Same,
    /// Its summary is now this.
    Changed(Summary),
    /// It holds nothing any more and was freed.
    Emptied,
}

/// A new right sibling made by a split.
struct Split {
    node: u32,
    summary: Summary,
}

/// The least of `lows` and the greatest of `highs` (0 and 0 when empty), in
/// one pass the compiler vectorises.
fn extremes(lows: &[i32], highs: &[i32]) -> (i32, i32) {
    if lows.is_empty() {
        return (0, 0);
    }
    let (mut min, mut max) = (i32::MAX, i32::MIN);
    for (&a, &b) in lows.iter().zip(highs) {
        min = min.min(a);
        max = max.max(b);
    }
    (min, max)
}

/// Two distinct elements of `v`, both mutable.
fn pair<T>(v: &mut [T], a: usize, b: usize) -> (&mut T, &mut T) {
    debug_assert_ne!(a, b);
    if a < b {
        let (x, y) = v.split_at_mut(b);
        (&mut x[a], &mut y[0])
    } else {
        let (x, y) = v.split_at_mut(a);
        (&mut y[0], &mut x[b])
    }
}

/// The B+ tree profile (see the module documentation).
#[derive(Debug, Clone)]
pub struct BTree {
    leaves: Vec<Leaf>,
    inners: Vec<Inner>,
    spare_leaves: Vec<u32>,
    spare_inners: Vec<u32>,
    root: u32,
    /// Levels of inner nodes above the leaves (0: the root is a leaf).
    height: usize,
    leaf_cap: usize,
    inner_cap: usize,
}

impl Default for BTree {
    fn default() -> Self {
        Self::new()
    }
}

/// The state of a forward fit search.
struct Scan {
    thr: i32,
    d: i64,
    latest: i64,
    run: Option<i64>,
}

impl Scan {
    /// A segment of usage `used` starts at `s`; `Some` ends the search.
    fn segment(&mut self, s: i64, free: bool) -> Option<Option<i64>> {
        if let Some(r) = self.run {
            if s - r >= self.d {
                return Some(Some(r));
            }
        }
        if free {
            if self.run.is_none() {
                if s > self.latest {
                    return Some(None);
                }
                self.run = Some(s);
            }
        } else {
            self.run = None;
        }
        None
    }
}

impl BTree {
    /// An empty profile: zero usage everywhere.
    pub fn new() -> Self {
        Self::with_fanout(LEAF_MAX, INNER_MAX)
    }

    /// An empty profile whose leaves hold at most `leaf` points and inner
    /// nodes at most `inner` children (at least 2 each, at most 128 and 32):
    /// small fan-outs let tests reach splits and several levels.
    pub fn with_fanout(leaf: usize, inner: usize) -> Self {
        let mut b = BTree {
            leaves: Vec::new(),
            inners: Vec::new(),
            spare_leaves: Vec::new(),
            spare_inners: Vec::new(),
            root: 0,
            height: 0,
            leaf_cap: leaf.clamp(2, LEAF_MAX),
            inner_cap: inner.clamp(2, INNER_MAX),
        };
        // A sentinel at the start of time keeps every instant inside a segment.
        let root = b.new_leaf();
        let l = &mut b.leaves[root as usize];
        l.len = 1;
        l.keys[0] = i64::MIN;
        l.vals[0] = 0;
        l.refs[0] = u32::MAX;
        b.root = root;
        b
    }

    fn new_leaf(&mut self) -> u32 {
        let empty = Leaf {
            len: 0,
            keys: [0; LEAF_MAX + 1],
            vals: [0; LEAF_MAX + 1],
            refs: [0; LEAF_MAX + 1],
        };
        match self.spare_leaves.pop() {
            Some(i) => {
                self.leaves[i as usize] = empty;
                i
            }
            None => {
                self.leaves.push(empty);
                (self.leaves.len() - 1) as u32
            }
        }
    }

    fn new_inner(&mut self) -> u32 {
        let empty = Inner {
            len: 0,
            keys: [0; INNER_MAX + 1],
            child: [0; INNER_MAX + 1],
            lazy: [0; INNER_MAX + 1],
            min: [0; INNER_MAX + 1],
            max: [0; INNER_MAX + 1],
        };
        match self.spare_inners.pop() {
            Some(i) => {
                self.inners[i as usize] = empty;
                i
            }
            None => {
                self.inners.push(empty);
                (self.inners.len() - 1) as u32
            }
        }
    }

    fn leaf_summary(&self, n: u32) -> Summary {
        let l = &self.leaves[n as usize];
        let (min, max) = extremes(&l.vals[..l.len], &l.vals[..l.len]);
        Summary {
            first: l.keys[0],
            min,
            max,
        }
    }

    fn inner_summary(&self, n: u32) -> Summary {
        let x = &self.inners[n as usize];
        let (min, max) = extremes(&x.min[..x.len], &x.max[..x.len]);
        Summary {
            first: x.keys[0],
            min,
            max,
        }
    }

    fn summary(&self, n: u32, h: usize) -> Summary {
        if h == 0 {
            self.leaf_summary(n)
        } else {
            self.inner_summary(n)
        }
    }

    /// The child of inner node `x` whose keys range holds `t`.
    fn child_for(x: &Inner, t: i64) -> usize {
        x.keys[..x.len].partition_point(|&k| k <= t).saturating_sub(1)
    }

    /// Sets entry `i` of inner node `n` from its child's summary.
    fn refresh(&mut self, n: u32, i: usize, s: &Summary) {
        let x = &mut self.inners[n as usize];
        x.keys[i] = s.first;
        x.min[i] = s.min + x.lazy[i];
        x.max[i] = s.max + x.lazy[i];
    }

    /// Inserts `entry` (a new child with pending add `lazy`) at `at` in inner
    /// node `n`, splitting it when full.
    fn insert_entry(&mut self, n: u32, at: usize, entry: Split, lazy: i32) -> Option<Split> {
        let x = &mut self.inners[n as usize];
        let len = x.len;
        x.keys.copy_within(at..len, at + 1);
        x.child.copy_within(at..len, at + 1);
        x.lazy.copy_within(at..len, at + 1);
        x.min.copy_within(at..len, at + 1);
        x.max.copy_within(at..len, at + 1);
        x.keys[at] = entry.summary.first;
        x.child[at] = entry.node;
        x.lazy[at] = lazy;
        x.min[at] = entry.summary.min + lazy;
        x.max[at] = entry.summary.max + lazy;
        x.len += 1;
        if x.len <= self.inner_cap {
            return None;
        }
        let right = self.new_inner();
        let (l, r) = pair(&mut self.inners, n as usize, right as usize);
        let half = l.len / 2;
        let moved = l.len - half;
        r.keys[..moved].copy_from_slice(&l.keys[half..l.len]);
        r.child[..moved].copy_from_slice(&l.child[half..l.len]);
        r.lazy[..moved].copy_from_slice(&l.lazy[half..l.len]);
        r.min[..moved].copy_from_slice(&l.min[half..l.len]);
        r.max[..moved].copy_from_slice(&l.max[half..l.len]);
        r.len = moved;
        l.len = half;
        let summary = self.inner_summary(right);
        Some(Split { node: right, summary })
    }

    /// Adds a reference to the point `t` under node `n` (height `h`),
    /// creating it with the usage in force there. Returns the node's new
    /// summary and the sibling a split made, or `None` when neither its
    /// summary nor its children changed (a new point repeats the usage
    /// before it, so only a split changes anything above a leaf).
    fn acquire_in(&mut self, n: u32, h: usize, t: i64) -> Option<(Summary, Option<Split>)> {
        if h == 0 {
            let cap = self.leaf_cap;
            let l = &mut self.leaves[n as usize];
            let k = l.keys[..l.len].partition_point(|&k| k < t);
            if k < l.len && l.keys[k] == t {
                l.refs[k] += 1;
                return None;
            }
            // The leaf's first key is at most `t`, so the segment `t` splits
            // is the previous point's, in this leaf.
            let before = l.vals[k - 1];
            let len = l.len;
            l.keys.copy_within(k..len, k + 1);
            l.vals.copy_within(k..len, k + 1);
            l.refs.copy_within(k..len, k + 1);
            l.keys[k] = t;
            l.vals[k] = before;
            l.refs[k] = 1;
            l.len += 1;
            if l.len <= cap {
                return None;
            }
            let right = self.new_leaf();
            let (l, r) = pair(&mut self.leaves, n as usize, right as usize);
            let half = l.len / 2;
            let moved = l.len - half;
            r.keys[..moved].copy_from_slice(&l.keys[half..l.len]);
            r.vals[..moved].copy_from_slice(&l.vals[half..l.len]);
            r.refs[..moved].copy_from_slice(&l.refs[half..l.len]);
            r.len = moved;
            l.len = half;
            let split = Split {
                node: right,
                summary: self.leaf_summary(right),
            };
            return Some((self.leaf_summary(n), Some(split)));
        }
        let x = &self.inners[n as usize];
        let i = Self::child_for(x, t);
        let (c, lazy) = (x.child[i], x.lazy[i]);
        let (s, split) = self.acquire_in(c, h - 1, t)?;
        self.refresh(n, i, &s);
        let up = split.and_then(|sp| self.insert_entry(n, i + 1, sp, lazy));
        Some((self.inner_summary(n), up))
    }

    /// Drops a reference to the point `t` under node `n`, removing the point
    /// when no span ends there any more; says what changed for the entry
    /// that points at the node.
    fn release_in(&mut self, n: u32, h: usize, t: i64) -> Released {
        if h == 0 {
            let l = &mut self.leaves[n as usize];
            let k = l.keys[..l.len].partition_point(|&k| k < t);
            debug_assert!(k < l.len && l.keys[k] == t, "released a point that is not there: {t}");
            if k >= l.len || l.keys[k] != t {
                return Released::Same;
            }
            l.refs[k] -= 1;
            if l.refs[k] > 0 {
                return Released::Same;
            }
            let len = l.len;
            l.keys.copy_within(k + 1..len, k);
            l.vals.copy_within(k + 1..len, k);
            l.refs.copy_within(k + 1..len, k);
            l.len -= 1;
            if l.len == 0 {
                self.spare_leaves.push(n);
                return Released::Emptied;
            }
            return Released::Changed(self.leaf_summary(n));
        }
        let x = &self.inners[n as usize];
        let i = Self::child_for(x, t);
        let c = x.child[i];
        match self.release_in(c, h - 1, t) {
            Released::Same => return Released::Same,
            Released::Changed(s) => {
                let x = &self.inners[n as usize];
                if x.keys[i] == s.first && x.min[i] == s.min + x.lazy[i] && x.max[i] == s.max + x.lazy[i] {
                    return Released::Same;
                }
                self.refresh(n, i, &s);
                self.merge_small(n, i, h - 1);
            }
            Released::Emptied => {
                let x = &mut self.inners[n as usize];
                let len = x.len;
                x.keys.copy_within(i + 1..len, i);
                x.child.copy_within(i + 1..len, i);
                x.lazy.copy_within(i + 1..len, i);
                x.min.copy_within(i + 1..len, i);
                x.max.copy_within(i + 1..len, i);
                x.len -= 1;
                if x.len == 0 {
                    self.spare_inners.push(n);
                    return Released::Emptied;
                }
            }
        }
        Released::Changed(self.inner_summary(n))
    }

    /// Joins child `i` of inner node `n` (children at height `h`) with a
    /// neighbour when one of them is down to a quarter and both fit in one
    /// node, so a profile that shrinks after growing stays dense.
    fn merge_small(&mut self, n: u32, i: usize, h: usize) {
        let x = &self.inners[n as usize];
        if x.len < 2 {
            return;
        }
        let a = if i + 1 < x.len { i } else { i - 1 };
        let (ca, cb) = (x.child[a] as usize, x.child[a + 1] as usize);
        // The right one's points join the left one's footing.
        let shift = x.lazy[a + 1] - x.lazy[a];
        let summary = if h == 0 {
            let (l, r) = pair(&mut self.leaves, ca, cb);
            if l.len.min(r.len) * 4 > self.leaf_cap || l.len + r.len > self.leaf_cap {
                return;
            }
            let (at, moved) = (l.len, r.len);
            l.keys[at..at + moved].copy_from_slice(&r.keys[..moved]);
            l.refs[at..at + moved].copy_from_slice(&r.refs[..moved]);
            for j in 0..moved {
                l.vals[at + j] = r.vals[j] + shift;
            }
            l.len += moved;
            self.spare_leaves.push(cb as u32);
            self.leaf_summary(ca as u32)
        } else {
            let (l, r) = pair(&mut self.inners, ca, cb);
            if l.len.min(r.len) * 4 > self.inner_cap || l.len + r.len > self.inner_cap {
                return;
            }
            let (at, moved) = (l.len, r.len);
            l.keys[at..at + moved].copy_from_slice(&r.keys[..moved]);
            l.child[at..at + moved].copy_from_slice(&r.child[..moved]);
            for j in 0..moved {
                l.lazy[at + j] = r.lazy[j] + shift;
                l.min[at + j] = r.min[j] + shift;
                l.max[at + j] = r.max[j] + shift;
            }
            l.len += moved;
            self.spare_inners.push(cb as u32);
            self.inner_summary(ca as u32)
        };
        let x = &mut self.inners[n as usize];
        let len = x.len;
        x.keys.copy_within(a + 2..len, a + 1);
        x.child.copy_within(a + 2..len, a + 1);
        x.lazy.copy_within(a + 2..len, a + 1);
        x.min.copy_within(a + 2..len, a + 1);
        x.max.copy_within(a + 2..len, a + 1);
        x.len -= 1;
        self.refresh(n, a, &summary);
    }

    /// Adds `amount` to every point in `[start, end)` under node `n`, whose
    /// keys all lie in `[lo, hi)`; returns its new summary.
    fn add_in(&mut self, n: u32, h: usize, (lo, hi): (i64, i64), (start, end): (i64, i64), amount: i32) -> Summary {
        if h == 0 {
            let l = &mut self.leaves[n as usize];
            let a = l.keys[..l.len].partition_point(|&k| k < start);
            let b = l.keys[..l.len].partition_point(|&k| k < end);
            for v in &mut l.vals[a..b] {
                *v += amount;
            }
            return self.leaf_summary(n);
        }
        let x = &self.inners[n as usize];
        let len = x.len;
        // Only the children holding `start` and `end - 1` and those between.
        let (first, last) = (Self::child_for(x, start), Self::child_for(x, end - 1));
        for i in first..=last.min(len - 1) {
            let x = &self.inners[n as usize];
            let c_lo = if i == 0 { lo } else { x.keys[i] };
            let c_hi = if i + 1 < len { x.keys[i + 1] } else { hi };
            if c_hi <= start || c_lo >= end {
                continue;
            }
            if c_lo >= start && c_hi <= end {
                let x = &mut self.inners[n as usize];
                x.lazy[i] += amount;
                x.min[i] += amount;
                x.max[i] += amount;
                continue;
            }
            let c = x.child[i];
            let s = self.add_in(c, h - 1, (c_lo, c_hi), (start, end), amount);
            self.refresh(n, i, &s);
        }
        self.inner_summary(n)
    }

    /// The point with the largest key `<= t`, and its true usage.
    fn floor(&self, t: i64) -> (i64, i32) {
        let (mut n, mut acc) = (self.root, 0);
        for _ in 0..self.height {
            let x = &self.inners[n as usize];
            let i = Self::child_for(x, t);
            acc += x.lazy[i];
            n = x.child[i];
        }
        let l = &self.leaves[n as usize];
        let k = l.keys[..l.len].partition_point(|&k| k <= t).saturating_sub(1);
        (l.keys[k], l.vals[k] + acc)
    }

    /// The forward fit search over the points under node `n` (height `h`,
    /// ancestors' adds `acc`) from the segment holding `from` on.
    fn scan(&self, n: u32, h: usize, acc: i32, from: i64, st: &mut Scan) -> Option<Option<i64>> {
        if h == 0 {
            let l = &self.leaves[n as usize];
            let j0 = l.keys[..l.len].partition_point(|&k| k <= from).saturating_sub(1);
            for j in j0..l.len {
                let free = l.vals[j] + acc <= st.thr;
                if let Some(done) = st.segment(l.keys[j].max(from), free) {
                    return Some(done);
                }
            }
            return None;
        }
        let x = &self.inners[n as usize];
        let i0 = Self::child_for(x, from);
        for i in i0..x.len {
            // A child wholly after `from` that is wholly free or wholly
            // blocked is one segment.
            if x.keys[i] >= from {
                if x.max[i] + acc <= st.thr {
                    if let Some(done) = st.segment(x.keys[i], true) {
                        return Some(done);
                    }
                    continue;
                }
                if x.min[i] + acc > st.thr {
                    if let Some(done) = st.segment(x.keys[i], false) {
                        return Some(done);
                    }
                    continue;
                }
            }
            if let Some(done) = self.scan(x.child[i], h - 1, acc + x.lazy[i], from, st) {
                return Some(done);
            }
        }
        None
    }

    /// The last key in `[lo, hi)` under node `n` whose usage exceeds `thr`.
    fn last_over(&self, n: u32, h: usize, acc: i32, lo: i64, hi: i64, thr: i32) -> Option<i64> {
        if h == 0 {
            let l = &self.leaves[n as usize];
            let a = l.keys[..l.len].partition_point(|&k| k < lo);
            let b = l.keys[..l.len].partition_point(|&k| k < hi);
            return (a..b).rev().find(|&j| l.vals[j] + acc > thr).map(|j| l.keys[j]);
        }
        let x = &self.inners[n as usize];
        for i in (0..x.len).rev() {
            if x.keys[i] >= hi {
                continue;
            }
            if x.max[i] + acc > thr {
                if let Some(k) = self.last_over(x.child[i], h - 1, acc + x.lazy[i], lo, hi, thr) {
                    return Some(k);
                }
            }
            if x.keys[i] < lo {
                break;
            }
        }
        None
    }

    /// The highest usage of the points in `[lo, hi)` under node `n`, whose
    /// keys lie in `[n_lo, n_hi)`.
    fn max_in(&self, n: u32, h: usize, acc: i32, bounds: (i64, i64), lo: i64, hi: i64) -> i32 {
        if h == 0 {
            let l = &self.leaves[n as usize];
            let a = l.keys[..l.len].partition_point(|&k| k < lo);
            let b = l.keys[..l.len].partition_point(|&k| k < hi);
            return l.vals[a..b].iter().map(|v| v + acc).max().unwrap_or(i32::MIN);
        }
        let x = &self.inners[n as usize];
        let mut best = i32::MIN;
        for i in 0..x.len {
            let c_lo = if i == 0 { bounds.0 } else { x.keys[i] };
            let c_hi = if i + 1 < x.len { x.keys[i + 1] } else { bounds.1 };
            if c_hi <= lo || c_lo >= hi {
                continue;
            }
            if x.max[i] + acc <= best {
                continue;
            }
            best = if c_lo >= lo && c_hi <= hi {
                best.max(x.max[i] + acc)
            } else {
                best.max(self.max_in(x.child[i], h - 1, acc + x.lazy[i], (c_lo, c_hi), lo, hi))
            };
        }
        best
    }

    /// The points in `[from, to)` under node `n`, with their true usage.
    fn walk(&self, n: u32, h: usize, acc: i32, from: i64, to: i64, out: &mut Vec<(i64, i32)>) {
        if h == 0 {
            let l = &self.leaves[n as usize];
            let a = l.keys[..l.len].partition_point(|&k| k < from);
            let b = l.keys[..l.len].partition_point(|&k| k < to);
            out.extend((a..b).map(|j| (l.keys[j], l.vals[j] + acc)));
            return;
        }
        let x = &self.inners[n as usize];
        for i in 0..x.len {
            let next = if i + 1 < x.len { x.keys[i + 1] } else { i64::MAX };
            if next <= from {
                continue;
            }
            if x.keys[i] >= to {
                break;
            }
            self.walk(x.child[i], h - 1, acc + x.lazy[i], from, to, out);
        }
    }

    /// Replaces the root by a new one over it and `split`.
    fn grow(&mut self, split: Split) {
        let old = self.root;
        let left = self.summary(old, self.height);
        let root = self.new_inner();
        let x = &mut self.inners[root as usize];
        x.len = 2;
        x.keys[0] = left.first;
        x.child[0] = old;
        x.min[0] = left.min;
        x.max[0] = left.max;
        x.keys[1] = split.summary.first;
        x.child[1] = split.node;
        x.min[1] = split.summary.min;
        x.max[1] = split.summary.max;
        self.root = root;
        self.height += 1;
    }

    /// Points a root with one child at that child, as often as it applies.
    fn shrink(&mut self) {
        while self.height > 0 && self.inners[self.root as usize].len == 1 {
            let x = &self.inners[self.root as usize];
            let (child, lazy) = (x.child[0], x.lazy[0]);
            self.spare_inners.push(self.root);
            self.root = child;
            self.height -= 1;
            // The child's pending add moves into it.
            if lazy != 0 {
                self.push_down(child, self.height, lazy);
            }
        }
    }

    /// Adds `amount` to every point under node `n`.
    fn push_down(&mut self, n: u32, h: usize, amount: i32) {
        if h == 0 {
            let l = &mut self.leaves[n as usize];
            let len = l.len;
            for v in &mut l.vals[..len] {
                *v += amount;
            }
        } else {
            let x = &mut self.inners[n as usize];
            let len = x.len;
            for i in 0..len {
                x.lazy[i] += amount;
                x.min[i] += amount;
                x.max[i] += amount;
            }
        }
    }

    fn acquire(&mut self, t: i64) {
        if let Some((_, Some(s))) = self.acquire_in(self.root, self.height, t) {
            self.grow(s);
        }
    }

    fn release(&mut self, t: i64) {
        // The sentinel is never released, so the root never empties.
        let _ = self.release_in(self.root, self.height, t);
        self.shrink();
    }
}

impl Profile for BTree {
    fn add(&mut self, start: i64, end: i64, amount: i32) {
        if start >= end {
            return;
        }
        self.acquire(start);
        self.acquire(end);
        self.add_in(self.root, self.height, (i64::MIN, i64::MAX), (start, end), amount);
    }

    fn remove(&mut self, start: i64, end: i64, amount: i32) {
        if start >= end {
            return;
        }
        self.add_in(self.root, self.height, (i64::MIN, i64::MAX), (start, end), -amount);
        self.release(start);
        self.release(end);
    }

    /// One forward walk from the segment holding `earliest`, carrying the
    /// start of the current free run; children wholly free or wholly
    /// blocked for `thr` are one step each.
    fn earliest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        let mut st = Scan {
            thr,
            d,
            latest,
            run: None,
        };
        match self.scan(self.root, self.height, 0, earliest, &mut st) {
            Some(found) => found,
            // The last segment lasts for ever.
            None => st.run.filter(|&s| s <= latest),
        }
    }

    fn latest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        crate::profile::latest_fit_by(
            thr,
            d,
            (earliest, latest),
            |lo, hi| self.last_over(self.root, self.height, 0, lo, hi, thr),
            |t| self.floor(t),
        )
    }

    fn max_used(&self, start: i64, end: i64) -> i32 {
        if start >= end {
            return 0;
        }
        let (_, at_start) = self.floor(start);
        let inside = self.max_in(
            self.root,
            self.height,
            0,
            (i64::MIN, i64::MAX),
            start.saturating_add(1),
            end,
        );
        at_start.max(inside)
    }

    fn segments(&self, from: i64, to: i64) -> Vec<(i64, i64, i32)> {
        if from >= to {
            return Vec::new();
        }
        let (_, first) = self.floor(from);
        let mut points = vec![(from, first)];
        self.walk(self.root, self.height, 0, from.saturating_add(1), to, &mut points);
        crate::profile::segments_of(&points, to)
    }

    fn check_invariants(&self) {
        fn go(b: &BTree, n: u32, h: usize, acc: i32, bounds: (i64, i64), prev: &mut Option<i64>) -> Summary {
            if h == 0 {
                let l = &b.leaves[n as usize];
                assert!(l.len > 0 && l.len <= b.leaf_cap, "leaf of {} points", l.len);
                for j in 0..l.len {
                    let k = l.keys[j];
                    assert!(prev.is_none_or(|p| p < k), "keys out of order at {k}");
                    assert!(k >= bounds.0 && k < bounds.1, "key {k} outside its parent's range");
                    assert!(l.refs[j] > 0, "unreferenced point {k}");
                    assert!(l.vals[j] + acc >= 0, "negative usage at {k}");
                    *prev = Some(k);
                }
                return b.leaf_summary(n);
            }
            let x = &b.inners[n as usize];
            assert!(x.len > 0 && x.len <= b.inner_cap, "inner node of {} children", x.len);
            for i in 0..x.len {
                let hi = if i + 1 < x.len { x.keys[i + 1] } else { bounds.1 };
                let s = go(b, x.child[i], h - 1, acc + x.lazy[i], (x.keys[i], hi), prev);
                assert_eq!(s.first, x.keys[i], "stale key");
                assert_eq!(
                    (s.min + x.lazy[i], s.max + x.lazy[i]),
                    (x.min[i], x.max[i]),
                    "stale min/max at {}",
                    x.keys[i]
                );
            }
            b.inner_summary(n)
        }
        go(self, self.root, self.height, 0, (i64::MIN, i64::MAX), &mut None);
    }
}
