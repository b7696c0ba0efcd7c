//! The slotted-time baseline of [VRM] (section 2.2.2): a ring buffer of
//! fixed-width slots over a finite horizon, each holding the usage in it.
//!
//! Every operation walks the slots it touches, so cost grows with durations and
//! with how far a fit search has to look; spans are rounded outwards to whole
//! slots. Kept as the baseline the free list is measured against.

use crate::profile::Profile;

/// The slotted profile.
#[derive(Debug, Clone)]
pub struct Slotted {
    width: i64,
    /// Time at the start of slot `head`.
    base: i64,
    head: usize,
    used: Vec<i32>,
}

impl Slotted {
    /// `slots` slots of `width` seconds starting at `base`.
    pub fn new(base: i64, width: i64, slots: usize) -> Self {
        assert!(
            width > 0 && slots > 0,
            "a slotted profile needs a positive width and slot count"
        );
        Slotted {
            width,
            base: base.div_euclid(width) * width,
            head: 0,
            used: vec![0; slots],
        }
    }

    /// The end of the horizon.
    pub fn horizon_end(&self) -> i64 {
        self.base + self.width * self.used.len() as i64
    }

    /// Slot index range (relative to `base`) covering `[start, end)`, clipped to the horizon.
    fn range(&self, start: i64, end: i64) -> (usize, usize) {
        let n = self.used.len() as i64;
        let a = (start - self.base).div_euclid(self.width).clamp(0, n);
        let b = (end - self.base + self.width - 1).div_euclid(self.width).clamp(0, n);
        (a as usize, b as usize)
    }

    fn at(&self, rel: usize) -> i32 {
        self.used[(self.head + rel) % self.used.len()]
    }

    fn bump(&mut self, start: i64, end: i64, amount: i32) {
        let (a, b) = self.range(start, end);
        let n = self.used.len();
        for rel in a..b {
            self.used[(self.head + rel) % n] += amount;
        }
    }

    fn fits(&self, rel: usize, slots: usize, thr: i32) -> bool {
        rel + slots <= self.used.len() && (rel..rel + slots).all(|r| self.at(r) <= thr)
    }
}

impl Profile for Slotted {
    fn add(&mut self, start: i64, end: i64, amount: i32) {
        self.bump(start, end, amount);
    }

    fn remove(&mut self, start: i64, end: i64, amount: i32) {
        self.bump(start, end, -amount);
    }

    fn earliest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        let slots = ((d + self.width - 1) / self.width).max(1) as usize;
        let first = (earliest.max(self.base) - self.base + self.width - 1).div_euclid(self.width) as usize;
        let last = ((latest.min(self.horizon_end()) - self.base).div_euclid(self.width)).max(-1);
        if last < 0 {
            return None;
        }
        let last = last as usize;
        // Slide a window, restarting after each slot that is too full.
        let mut start = first;
        let mut rel = first;
        while start <= last && start + slots <= self.used.len() {
            if rel == start + slots {
                return Some(self.base + start as i64 * self.width);
            }
            if self.at(rel) > thr {
                start = rel + 1;
            }
            rel += 1;
        }
        None
    }

    fn latest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64> {
        let slots = ((d + self.width - 1) / self.width).max(1) as usize;
        let first = (earliest.max(self.base) - self.base + self.width - 1).div_euclid(self.width);
        let last = (latest.min(self.horizon_end()) - self.base).div_euclid(self.width);
        let mut s = last;
        while s >= first && s >= 0 {
            if self.fits(s as usize, slots, thr) {
                return Some(self.base + s * self.width);
            }
            s -= 1;
        }
        None
    }

    fn max_used(&self, start: i64, end: i64) -> i32 {
        let (a, b) = self.range(start, end);
        (a..b).map(|r| self.at(r)).max().unwrap_or(0)
    }

    fn segments(&self, from: i64, to: i64) -> Vec<(i64, i64, i32)> {
        let mut out: Vec<(i64, i64, i32)> = Vec::new();
        let (a, b) = self.range(from, to);
        for rel in a..b {
            let s = (self.base + rel as i64 * self.width).max(from);
            let e = (self.base + (rel as i64 + 1) * self.width).min(to);
            let u = self.at(rel);
            match out.last_mut() {
                Some((_, end, used)) if *used == u && *end == s => *end = e,
                _ => out.push((s, e, u)),
            }
        }
        out
    }

    fn round(&self, start: i64, end: i64) -> (i64, i64) {
        let s = start.div_euclid(self.width) * self.width;
        let e = (end + self.width - 1).div_euclid(self.width) * self.width;
        (s, e)
    }

    fn advance(&mut self, now: i64) {
        let n = self.used.len();
        let steps = ((now - self.base).div_euclid(self.width)).clamp(0, n as i64) as usize;
        for _ in 0..steps {
            self.used[self.head] = 0;
            self.head = (self.head + 1) % n;
        }
        self.base = if steps == n {
            now.div_euclid(self.width) * self.width
        } else {
            self.base + steps as i64 * self.width
        };
    }
}
