//! The seam between reservation bookkeeping and the availability data structure:
//! how much of the resource is used over time, and where a span fits.

/// A piecewise-constant usage profile over integer time. Times are seconds.
///
/// Implementations answer fit queries for a threshold `thr` = capacity - amount:
/// a span fits at `t` when usage stays at or below `thr` over `[t, t + d)`.
pub trait Profile {
    /// Adds `amount` of usage over `[start, end)`.
    fn add(&mut self, start: i64, end: i64, amount: i32);
    /// Removes `amount` of usage over `[start, end)` that an earlier `add` of
    /// that same span and amount put there (the trees count span ends, so a
    /// removal must match an addition).
    fn remove(&mut self, start: i64, end: i64, amount: i32);
    /// The earliest `t` in `[earliest, latest]` where `[t, t + d)` stays at or below `thr`.
    fn earliest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64>;
    /// Adds `amount` over `[t, t + d)` at `t` = [`Profile::earliest_fit`] and
    /// returns `t`; nothing when nothing fits. One call, so a structure can
    /// add where its search ended instead of searching again.
    fn add_at_earliest(&mut self, thr: i32, d: i64, earliest: i64, latest: i64, amount: i32) -> Option<i64> {
        let t = self.earliest_fit(thr, d, earliest, latest)?;
        self.add(t, t + d, amount);
        Some(t)
    }
    /// The latest `t` in `[earliest, latest]` where `[t, t + d)` stays at or below `thr`.
    fn latest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64>;
    /// The highest usage anywhere in `[start, end)`.
    fn max_used(&self, start: i64, end: i64) -> i32;
    /// The segments of constant usage that overlap `[from, to)`, clipped to it, in order:
    /// `(start, end, used)`.
    fn segments(&self, from: i64, to: i64) -> Vec<(i64, i64, i32)>;
    /// Rounds a span to what the structure can represent (the slotted baseline
    /// rounds to whole slots; the free list is exact).
    fn round(&self, start: i64, end: i64) -> (i64, i64) {
        (start, end)
    }
    /// Forgets usage before `now`; the slotted baseline moves its ring forward.
    fn advance(&mut self, _now: i64) {}
    /// Checks internal invariants; panics with a description when one is broken.
    fn check_invariants(&self) {}
}

/// The segments between change points `points` (time and usage from then
/// on, the first at the range's start) up to `to`, neighbours of equal usage
/// joined: `segments` for the trees, which list their points in order.
pub(crate) fn segments_of(points: &[(i64, i32)], to: i64) -> Vec<(i64, i64, i32)> {
    let mut out: Vec<(i64, i64, i32)> = Vec::with_capacity(points.len());
    for (i, &(s, u)) in points.iter().enumerate() {
        let e = points.get(i + 1).map_or(to, |p| p.0);
        match out.last_mut() {
            Some((_, end, used)) if *used == u => *end = e,
            _ => out.push((s, e, u)),
        }
    }
    out
}

/// `latest_fit` for the trees, from the last point over `thr` in a range
/// (`last_over(lo, hi)`) and the point and usage in force at a time
/// (`floor(t)`): each blocked point moves the candidate to just before it.
pub(crate) fn latest_fit_by(
    thr: i32,
    d: i64,
    (earliest, latest): (i64, i64),
    last_over: impl Fn(i64, i64) -> Option<i64>,
    floor: impl Fn(i64) -> (i64, i32),
) -> Option<i64> {
    let mut t = latest;
    while t >= earliest {
        let blocked = last_over(t.saturating_add(1), t.saturating_add(d)).or_else(|| {
            let (k, used) = floor(t);
            (used > thr).then_some(k)
        });
        match blocked {
            None => return Some(t),
            Some(k) => t = k.saturating_sub(d),
        }
    }
    None
}
