//! The time-exclusive free list: change points of usage in a treap augmented
//! with subtree minimum and maximum and a lazy range-add.
//!
//! Each node is the start of a segment of constant usage that lasts until the
//! next node's time. Adding a span inserts (or references) its two end points
//! and adds the amount to every segment between them with one lazy update, so
//! it costs O(log n) however many change points it covers. Fit queries take
//! `&self` and skip every subtree whose maximum (or minimum) rules it out, so an
//! earliest-fit query costs O((k + 1) log n) for k blocked runs it jumps over.
//! Points that no span references any more are removed, so the tree holds at
//! most two points per live span.

use crate::profile::Profile;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Node {
    key: i64,
    /// Usage of this node's segment, including this node's own pending `lazy`,
    /// excluding the pending adds of its ancestors.
    val: i32,
    /// Add owed to both children subtrees.
    lazy: i32,
    /// Subtree maximum and minimum of `val`, on the same footing as `val`.
    max: i32,
    min: i32,
    left: u32,
    right: u32,
    prio: u32,
    /// How many span ends sit at this point.
    refs: u32,
}

/// The free-list profile (see the module documentation).
#[derive(Debug, Clone)]
pub struct FreeList {
    nodes: Vec<Node>,
    spare: Vec<u32>,
    root: u32,
    rng: u64,
}

impl Default for FreeList {
    fn default() -> Self {
        Self::new()
    }
}

impl FreeList {
    /// An empty profile: zero usage everywhere.
    pub fn new() -> Self {
        let mut f = FreeList {
            nodes: Vec::new(),
            spare: Vec::new(),
            root: NIL,
            rng: 0x9E37_79B9_7F4A_7C15,
        };
        // A sentinel at the start of time keeps every instant inside a segment.
        let s = f.alloc(i64::MIN, 0);
        f.nodes[s as usize].refs = u32::MAX;
        f.root = s;
        f
    }

    fn next_prio(&mut self) -> u32 {
        // xorshift64*: deterministic, so the same operations build the same tree.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }

    fn alloc(&mut self, key: i64, val: i32) -> u32 {
        let prio = self.next_prio();
        let n = Node {
            key,
            val,
            lazy: 0,
            max: val,
            min: val,
            left: NIL,
            right: NIL,
            prio,
            refs: 0,
        };
        match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = n;
                i
            }
            None => {
                self.nodes.push(n);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    fn apply(&mut self, n: u32, add: i32) {
        if n != NIL {
            let x = &mut self.nodes[n as usize];
            x.val += add;
            x.max += add;
            x.min += add;
            x.lazy += add;
        }
    }

    fn push(&mut self, n: u32) {
        let (l, r, lazy) = {
            let x = &self.nodes[n as usize];
            (x.left, x.right, x.lazy)
        };
        if lazy != 0 {
            self.apply(l, lazy);
            self.apply(r, lazy);
            self.nodes[n as usize].lazy = 0;
        }
    }

    /// Recomputes a node's subtree extremes; its children's figures owe its `lazy`.
    fn pull(&mut self, n: u32) {
        let x = self.nodes[n as usize];
        let (mut max, mut min) = (x.val, x.val);
        for c in [x.left, x.right] {
            if c != NIL {
                max = max.max(self.nodes[c as usize].max + x.lazy);
                min = min.min(self.nodes[c as usize].min + x.lazy);
            }
        }
        let x = &mut self.nodes[n as usize];
        x.max = max;
        x.min = min;
    }

    /// Joins two treaps where every key of `a` is below every key of `b`.
    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            self.push(a);
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.pull(a);
            a
        } else {
            self.push(b);
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.pull(b);
            b
        }
    }

    /// The node with the largest key `<= t`, and its true usage.
    fn floor(&self, t: i64) -> (u32, i32) {
        let (mut n, mut acc) = (self.root, 0);
        let mut best = (NIL, 0);
        while n != NIL {
            let x = &self.nodes[n as usize];
            if x.key <= t {
                best = (n, x.val + acc);
                acc += x.lazy;
                n = x.right;
            } else {
                acc += x.lazy;
                n = x.left;
            }
        }
        best
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        self.push(n);
        let l = self.nodes[n as usize].left;
        self.push(l);
        self.nodes[n as usize].left = self.nodes[l as usize].right;
        self.pull(n);
        self.nodes[l as usize].right = n;
        self.pull(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        self.push(n);
        let r = self.nodes[n as usize].right;
        self.push(r);
        self.nodes[n as usize].right = self.nodes[r as usize].left;
        self.pull(n);
        self.nodes[r as usize].left = n;
        self.pull(r);
        r
    }

    /// Adds a reference to the point `key` in the subtree `n` (whose ancestors owe it
    /// `acc`), creating the point with usage `before`, the true usage of the segment
    /// it splits, found on the way down. Lazy adds are pushed only where a rotation
    /// moves nodes between levels.
    fn acquire_in(&mut self, n: u32, key: i64, before: i32, acc: i32) -> u32 {
        if n == NIL {
            let node = self.alloc(key, before - acc);
            self.nodes[node as usize].refs = 1;
            return node;
        }
        let x = self.nodes[n as usize];
        if key == x.key {
            self.nodes[n as usize].refs += 1;
            return n;
        }
        if key < x.key {
            let l = self.acquire_in(x.left, key, before, acc + x.lazy);
            self.nodes[n as usize].left = l;
            if self.nodes[l as usize].prio > x.prio {
                return self.rotate_right(n);
            }
        } else {
            // This node's segment is the one `key` falls in unless a later node is closer.
            let r = self.acquire_in(x.right, key, x.val + acc, acc + x.lazy);
            self.nodes[n as usize].right = r;
            if self.nodes[r as usize].prio > x.prio {
                return self.rotate_left(n);
            }
        }
        self.pull(n);
        n
    }

    /// Drops a reference to the point `key` in the subtree `n`, removing the point
    /// when no span ends there any more.
    fn release_in(&mut self, n: u32, key: i64) -> u32 {
        if n == NIL {
            return NIL;
        }
        let x = self.nodes[n as usize];
        if key == x.key {
            self.nodes[n as usize].refs -= 1;
            if self.nodes[n as usize].refs > 0 {
                return n;
            }
            // The children move up a level, so they take this node's pending add with them.
            self.push(n);
            self.spare.push(n);
            let (l, r) = (self.nodes[n as usize].left, self.nodes[n as usize].right);
            return self.merge(l, r);
        }
        if key < x.key {
            let l = self.release_in(x.left, key);
            self.nodes[n as usize].left = l;
        } else {
            let r = self.release_in(x.right, key);
            self.nodes[n as usize].right = r;
        }
        self.pull(n);
        n
    }

    /// Adds `amount` to every segment starting in `[start, end)`, for the subtree `n`
    /// whose keys all lie strictly between `lo` and `hi`.
    fn add_in(&mut self, n: u32, lo: i64, hi: i64, start: i64, end: i64, amount: i32) {
        if n == NIL || hi <= start || lo >= end {
            return;
        }
        if lo >= start.saturating_sub(1) && hi <= end {
            // Every key in the subtree is inside the range.
            self.apply(n, amount);
            return;
        }
        // Adds commute, so nothing needs pushing: children's figures stay relative to this node.
        let x = self.nodes[n as usize];
        if x.key >= start && x.key < end {
            self.nodes[n as usize].val += amount;
        }
        self.add_in(x.left, lo, x.key, start, end, amount);
        self.add_in(x.right, x.key, hi, start, end, amount);
        self.pull(n);
    }

    fn range_add(&mut self, start: i64, end: i64, amount: i32) {
        self.add_in(self.root, i64::MIN, i64::MAX, start, end, amount);
    }

    /// Last key in `[lo, hi)` whose usage exceeds `thr`.
    fn last_over(&self, n: u32, lo: i64, hi: i64, thr: i32, acc: i32) -> Option<i64> {
        if n == NIL {
            return None;
        }
        let x = &self.nodes[n as usize];
        if x.max + acc <= thr {
            return None;
        }
        let inner = acc + x.lazy;
        if x.key < hi {
            if let Some(k) = self.last_over(x.right, lo, hi, thr, inner) {
                return Some(k);
            }
            if x.key >= lo && x.val + acc > thr {
                return Some(x.key);
            }
        }
        if x.key >= lo {
            return self.last_over(x.left, lo, hi, thr, inner);
        }
        None
    }

    fn leftmost(&self, mut n: u32) -> i64 {
        while self.nodes[n as usize].left != NIL {
            n = self.nodes[n as usize].left;
        }
        self.nodes[n as usize].key
    }

    fn max_from(&self, n: u32, lo: i64, hi: i64, acc: i32) -> i32 {
        if n == NIL {
            return i32::MIN;
        }
        let x = &self.nodes[n as usize];
        let inner = acc + x.lazy;
        let mut best = i32::MIN;
        if x.key >= lo && x.key < hi {
            best = x.val + acc;
        }
        if x.key >= lo {
            best = best.max(self.max_from(x.left, lo, hi, inner));
        }
        if x.key < hi {
            best = best.max(self.max_from(x.right, lo, hi, inner));
        }
        best
    }

    fn walk(&self, n: u32, acc: i32, from: i64, to: i64, out: &mut Vec<(i64, i32)>) {
        if n == NIL {
            return;
        }
        let x = &self.nodes[n as usize];
        let inner = acc + x.lazy;
        if x.key > from {
            self.walk(x.left, inner, from, to, out);
        }
        if x.key >= from && x.key < to {
            out.push((x.key, x.val + acc));
        }
        if x.key < to {
            self.walk(x.right, inner, from, to, out);
        }
    }
}

impl Profile for FreeList {
    fn add(&mut self, start: i64, end: i64, amount: i32) {
        if start >= end {
            return;
        }
        self.root = self.acquire_in(self.root, start, 0, 0);
        self.root = self.acquire_in(self.root, end, 0, 0);
        self.range_add(start, end, amount);
    }

    fn remove(&mut self, start: i64, end: i64, amount: i32) {
        if start >= end {
            return;
        }
        self.range_add(start, end, -amount);
        self.root = self.release_in(self.root, start);
        self.root = self.release_in(self.root, end);
    }

    /// One forward walk over the change points from `earliest`, carrying the start of
    /// the current free run; subtrees that are wholly free or wholly blocked for
    /// `thr` are taken in one step, so the walk visits only where usage crosses `thr`.
    fn earliest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        // Stack of (node, sum of ancestors' pending adds, whole subtree?).
        let mut stack: Vec<(u32, i32, bool)> = Vec::with_capacity(64);
        let (mut n, mut acc) = (self.root, 0);
        let mut run: Option<i64> = None;
        while n != NIL {
            let x = &self.nodes[n as usize];
            if x.key <= earliest {
                // The segment containing `earliest` starts at the last such node.
                run = if x.val + acc <= thr { Some(earliest) } else { None };
                acc += x.lazy;
                n = x.right;
            } else {
                stack.push((n, acc, false));
                acc += x.lazy;
                n = x.left;
            }
        }
        while let Some((n, acc, whole)) = stack.pop() {
            let x = &self.nodes[n as usize];
            if whole {
                if x.min + acc > thr {
                    if let Some(s) = run {
                        if self.leftmost(n) - s >= d {
                            return Some(s);
                        }
                    }
                    run = None;
                } else if run.is_none() {
                    let k = self.leftmost(n);
                    if k > latest {
                        return None;
                    }
                    run = Some(k);
                }
                continue;
            }
            if let Some(s) = run {
                if x.key - s >= d {
                    return Some(s);
                }
            }
            if x.val + acc <= thr {
                if run.is_none() {
                    if x.key > latest {
                        return None;
                    }
                    run = Some(x.key);
                }
            } else {
                run = None;
            }
            // Queue the right subtree, taking wholly free or blocked subtrees as one step.
            let (mut m, mut a) = (x.right, acc + x.lazy);
            while m != NIL {
                let y = &self.nodes[m as usize];
                if y.max + a <= thr || y.min + a > thr {
                    stack.push((m, a, true));
                    break;
                }
                stack.push((m, a, false));
                a += y.lazy;
                m = y.left;
            }
        }
        run.filter(|&s| s <= latest)
    }

    fn latest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        crate::profile::latest_fit_by(
            thr,
            d,
            (earliest, latest),
            |lo, hi| self.last_over(self.root, lo, hi, thr, 0),
            |t| {
                let (n, used) = self.floor(t);
                (self.nodes[n as usize].key, used)
            },
        )
    }

    fn max_used(&self, start: i64, end: i64) -> i32 {
        if start >= end {
            return 0;
        }
        let (_, at_start) = self.floor(start);
        at_start.max(self.max_from(self.root, start.saturating_add(1), end, 0))
    }

    fn segments(&self, from: i64, to: i64) -> Vec<(i64, i64, i32)> {
        if from >= to {
            return Vec::new();
        }
        let (_, first) = self.floor(from);
        let mut points = vec![(from, first)];
        self.walk(self.root, 0, from.saturating_add(1), to, &mut points);
        crate::profile::segments_of(&points, to)
    }

    fn check_invariants(&self) {
        fn go(f: &FreeList, n: u32, lo: i64, hi: i64, acc: i32, prev: &mut Option<i32>) -> (i32, i32) {
            let x = &f.nodes[n as usize];
            assert!(x.key >= lo && x.key <= hi, "key {} out of order", x.key);
            let inner = acc + x.lazy;
            let (mut max, mut min) = (x.val, x.val);
            for c in [x.left, x.right] {
                if c != NIL {
                    assert!(f.nodes[c as usize].prio <= x.prio, "heap order broken at {}", x.key);
                }
            }
            if x.left != NIL {
                let (a, b) = go(f, x.left, lo, x.key - 1, inner, prev);
                max = max.max(a + x.lazy);
                min = min.min(b + x.lazy);
            }
            let v = x.val + acc;
            assert!(v >= 0, "negative usage {v} at {}", x.key);
            if x.refs != u32::MAX {
                assert!(x.refs > 0, "unreferenced point {}", x.key);
            }
            *prev = Some(v);
            if x.right != NIL {
                let (a, b) = go(f, x.right, x.key + 1, hi, inner, prev);
                max = max.max(a + x.lazy);
                min = min.min(b + x.lazy);
            }
            assert_eq!((x.max, x.min), (max, min), "stale max/min at {}", x.key);
            (x.max, x.min)
        }
        if self.root != NIL {
            go(self, self.root, i64::MIN, i64::MAX, 0, &mut None);
        }
    }
}
