//! The seam between reservation bookkeeping and the availability data structure:
//! how much of the resource is used over time, and where a span fits.

/// A piecewise-constant usage profile over integer time. Times are seconds.
///
/// Implementations answer fit queries for a threshold `thr` = capacity - amount:
/// a span fits at `t` when usage stays at or below `thr` over `[t, t + d)`.
pub trait Profile {
    /// Adds `amount` of usage over `[start, end)`.
    fn add(&mut self, start: i64, end: i64, amount: i32);
    /// Removes `amount` of usage over `[start, end)` that an earlier `add` put there.
    fn remove(&mut self, start: i64, end: i64, amount: i32);
    /// The earliest `t` in `[earliest, latest]` where `[t, t + d)` stays at or below `thr`.
    fn earliest_fit(&self, thr: i32, d: i64, earliest: i64, latest: i64) -> Option<i64>;
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
