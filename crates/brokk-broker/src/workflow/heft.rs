//! HEFTSync and HEFTSyncBT ([VRM] 4.4.3-4.4.4): classes in decreasing
//! upward rank, each task at the site where a probe promises the earliest
//! finish; co-allocated tasks share one window.

use super::booking::Booking;

/// Steps the backtracking search may take per co-allocation class.
const BACKTRACK_STEPS: usize = 2_000;
/// Window starts the backtracking search tries per co-allocation class.
const BACKTRACK_STARTS: usize = 32;

/// Places every class; false (with `b.failure` set) at the first that
/// finds no room.
pub(super) fn schedule(b: &mut Booking, backtrack: bool) -> bool {
    let dag = b.dag;
    let ranks = dag.upward_ranks(b.topo);
    b.place_all(dag.topological(|c| ranks[c]), |b, c| {
        match (dag.classes[c].len(), backtrack) {
            (1, _) => place_task(b, dag.classes[c][0]),
            (_, false) => place_class(b, c),
            (_, true) => place_class_backtracking(b, c),
        }
    })
}

/// Task `t` at the site with the earliest finish that can also receive
/// its inputs in time; the next best sites when booking fails.
pub(super) fn place_task(b: &mut Booking, t: usize) -> bool {
    let mut options = Vec::new();
    for site in 0..b.site_count() {
        let (Some(d), Some(est)) = (b.duration(t, site), b.arrival(t, site)) else {
            continue;
        };
        let latest = b.latest_start(d);
        if let Some(s) = b.probe_first(t, site, d, est, latest) {
            options.push((s + d, site, s, d));
        }
    }
    options.sort_unstable();
    for (_, site, s, d) in options {
        let mark = b.mark();
        let latest = b.latest_start(d);
        if let Some(arrival) = b.book_inputs(t, site, s, latest) {
            if b.reserve_task(t, site, d, s.max(arrival), latest).is_some() {
                return true;
            }
        }
        b.rollback(mark);
    }
    false
}

/// The earliest a class may start: every member's inputs must be able to
/// reach some site that can run it ([VRM] 4.4.3 treats the class as one
/// node, its start after all members' predecessors and their data).
pub(super) fn class_floor(b: &mut Booking, members: &[usize]) -> i64 {
    let mut floor = b.earliest.0;
    for &m in members {
        let mut best: Option<i64> = None;
        for site in 0..b.site_count() {
            if b.duration(m, site).is_some() {
                if let Some(a) = b.arrival(m, site) {
                    best = Some(best.map_or(a, |x| x.min(a)));
                }
            }
        }
        floor = floor.max(best.unwrap_or(i64::MAX / 8));
    }
    floor
}

/// The shortest window every member fits in at some site, given the first
/// member's duration `first`.
pub(super) fn least_window(b: &Booking, members: &[usize], first: i64) -> i64 {
    members[1..]
        .iter()
        .filter_map(|&m| (0..b.site_count()).filter_map(|s| b.duration(m, s)).min())
        .fold(first, i64::max)
}

/// What filling a window came to.
pub(super) enum Fill {
    /// Every member holds the window.
    Done,
    /// A member fits only in a longer window, the length given.
    Longer(i64),
    /// A member fits nowhere.
    Failed,
}

/// Books every member of a class over `[s, s + w)`, the first at `site0`,
/// each other at the fastest site where it fits with its data in time.
/// On anything but `Done` the caller rolls back.
pub(super) fn fill_window(b: &mut Booking, members: &[usize], s: i64, w: i64, site0: usize) -> Fill {
    if !hold_member(b, members[0], site0, s, w) {
        return Fill::Failed;
    }
    for &m in &members[1..] {
        let mut sites: Vec<(i64, usize)> = (0..b.site_count())
            .filter_map(|site| b.duration(m, site).map(|d| (d, site)))
            .collect();
        sites.sort_unstable();
        let mut placed = false;
        let mut longer: Option<i64> = None;
        for &(d, site) in &sites {
            if d > w {
                if longer.is_none() && fits(b, m, site, s, d) {
                    longer = Some(d);
                }
                continue;
            }
            if hold_member(b, m, site, s, w) {
                placed = true;
                break;
            }
        }
        if !placed {
            return longer.map_or(Fill::Failed, Fill::Longer);
        }
    }
    Fill::Done
}

/// Whether `t` could hold `[s, s + d)` at `site` by the estimates and a probe.
fn fits(b: &mut Booking, t: usize, site: usize, s: i64, d: i64) -> bool {
    let arrives = b.arrival(t, site).is_some_and(|a| a <= s);
    let leaves = b.departure(t, site).is_some_and(|l| s + d <= l);
    arrives && leaves && b.probe_first(t, site, d, s, s).is_some()
}

/// Holds `[s, s + w)` for `t` at `site` with its inputs arriving, its
/// outputs leaving and its streams booked; all or nothing.
pub(super) fn hold_member(b: &mut Booking, t: usize, site: usize, s: i64, w: i64) -> bool {
    if !fits(b, t, site, s, w) {
        return false;
    }
    let mark = b.mark();
    let ok = b.book_inputs(t, site, s, s).is_some()
        && b.reserve_task(t, site, w, s, s).is_some()
        && b.book_outputs(t)
        && b.book_streams(t);
    if !ok {
        b.rollback(mark);
    }
    ok
}

/// HEFTSync's co-allocation: the longest member where it finishes first
/// sets the window; the others must fit it, the window growing when only
/// slower sites are left; no other start is tried.
fn place_class(b: &mut Booking, c: usize) -> bool {
    let dag = b.dag;
    let members = &dag.classes[c];
    let first = members[0];
    let floor = class_floor(b, members);
    let mut best: Option<(i64, usize, i64, i64)> = None;
    for site in 0..b.site_count() {
        let (Some(d), Some(est)) = (b.duration(first, site), b.arrival(first, site)) else {
            continue;
        };
        let w = least_window(b, members, d);
        if let Some(s) = b.probe_first(first, site, w, est.max(floor), b.latest_start(w)) {
            if best.is_none_or(|(eft, ..)| s + d < eft) {
                best = Some((s + d, site, s, w));
            }
        }
    }
    let Some((_, site0, s, mut w)) = best else {
        return false;
    };
    for _ in 0..=members.len() {
        if s > b.latest_start(w) {
            return false;
        }
        let mark = b.mark();
        match fill_window(b, members, s, w, site0) {
            Fill::Done => return true,
            Fill::Longer(longer) => {
                b.rollback(mark);
                w = longer;
            }
            Fill::Failed => {
                b.rollback(mark);
                return false;
            }
        }
    }
    false
}

/// HEFTSyncBT's co-allocation: window starts in increasing order (every
/// start some member could take at some site), at each the first member at
/// each site it fits, the others searched depth-first over their sites.
fn place_class_backtracking(b: &mut Booking, c: usize) -> bool {
    let dag = b.dag;
    let members = &dag.classes[c];
    let floor = class_floor(b, members);
    let mut steps = BACKTRACK_STEPS;
    let mut tried = std::collections::BTreeSet::new();
    loop {
        let mut starts = Vec::new();
        for &m in members {
            for site in 0..b.site_count() {
                let (Some(d), Some(est)) = (b.duration(m, site), b.arrival(m, site)) else {
                    continue;
                };
                if let Some(s) = b.probe_first(m, site, d, est.max(floor), b.latest_start(d)) {
                    starts.push(s);
                }
            }
        }
        starts.sort_unstable();
        starts.dedup();
        starts.retain(|s| !tried.contains(s));
        starts.truncate(BACKTRACK_STARTS.saturating_sub(tried.len()));
        if starts.is_empty() || steps == 0 {
            return false;
        }
        tried.extend(starts.iter().copied());
        if try_starts(b, members, &starts, &mut steps) {
            return true;
        }
        // A broker that probes saw every start there is; one that does not
        // learned from the refusals and looks again.
        if !b.is_blind() {
            return false;
        }
    }
}

/// Tries each window start of `starts` in turn for the class `members`.
fn try_starts(b: &mut Booking, members: &[usize], starts: &[i64], steps: &mut usize) -> bool {
    let first = members[0];
    for &s in starts {
        let mut sites: Vec<(i64, usize)> = (0..b.site_count())
            .filter_map(|site| b.duration(first, site).map(|d| (d, site)))
            .collect();
        sites.sort_unstable();
        for (d, site0) in sites {
            let w = least_window(b, members, d);
            if s > b.latest_start(w) || *steps == 0 {
                continue;
            }
            *steps -= 1;
            let mark = b.mark();
            if hold_member(b, first, site0, s, w) && search(b, &members[1..], s, w, steps) {
                return true;
            }
            b.rollback(mark);
        }
    }
    false
}

/// Depth-first placement of `rest` in the window `[s, s + w)`.
fn search(b: &mut Booking, rest: &[usize], s: i64, w: i64, steps: &mut usize) -> bool {
    let Some((&m, rest)) = rest.split_first() else {
        return true;
    };
    let mut sites: Vec<(i64, usize)> = (0..b.site_count())
        .filter_map(|site| b.duration(m, site).filter(|&d| d <= w).map(|d| (d, site)))
        .collect();
    sites.sort_unstable();
    for (_, site) in sites {
        if *steps == 0 {
            return false;
        }
        *steps -= 1;
        let mark = b.mark();
        if hold_member(b, m, site, s, w) && search(b, rest, s, w, steps) {
            return true;
        }
        b.rollback(mark);
    }
    false
}
