//! HLST ([VRM] 4.4.5): HEFTSync backwards. Classes in decreasing downward
//! rank, so children come before parents; exit tasks as close to the
//! deadline as they fit, each task at the site where it can start last,
//! leaving the near future to later workflows.

use super::booking::Booking;
use super::heft::{fill_window, least_window, Fill};

/// Places every class from the exits back; false (with `b.failure` set)
/// at the first that finds no room. Needs a deadline.
pub(super) fn schedule(b: &mut Booking) -> bool {
    let dag = b.dag;
    let ranks = dag.downward_ranks(b.topo);
    b.place_all(dag.reverse_topological(|c| ranks[c]), |b, c| {
        match dag.classes[c].as_slice() {
            [t] => place_task(b, *t),
            members => place_class(b, members),
        }
    })
}

/// Task `t` at the site where it can start latest and still hand its data
/// to its children in time; the next sites when booking fails.
fn place_task(b: &mut Booking, t: usize) -> bool {
    let mut options = Vec::new();
    for site in 0..b.site_count() {
        let (Some(d), Some(by)) = (b.duration(t, site), b.departure(t, site)) else {
            continue;
        };
        if let Some(s) = b.probe_last(t, site, d, b.earliest.0, by - d) {
            options.push((std::cmp::Reverse(s), site, d));
        }
    }
    options.sort_unstable();
    for (std::cmp::Reverse(s), site, d) in options {
        let mark = b.mark();
        if b.reserve_task(t, site, d, s, s).is_some() && b.book_outputs(t) {
            return true;
        }
        b.rollback(mark);
    }
    false
}

/// A co-allocation backwards: the longest member where it starts latest
/// sets the window, the others must fit it.
fn place_class(b: &mut Booking, members: &[usize]) -> bool {
    let first = members[0];
    // Every member must hand its data on in time from some site.
    let mut others_by = i64::MAX;
    for &m in &members[1..] {
        let mut by = None;
        for s in 0..b.site_count() {
            if b.duration(m, s).is_some() {
                by = by.max(b.departure(m, s));
            }
        }
        match by {
            Some(by) => others_by = others_by.min(by),
            None => return false,
        }
    }
    let mut best: Option<(i64, usize, i64)> = None;
    for site in 0..b.site_count() {
        let (Some(d), Some(by)) = (b.duration(first, site), b.departure(first, site)) else {
            continue;
        };
        let by = by.min(others_by);
        let w = least_window(b, members, d);
        if let Some(s) = b.probe_last(first, site, w, b.earliest.0, by - w) {
            if best.is_none_or(|(bs, ..)| s > bs) {
                best = Some((s, site, w));
            }
        }
    }
    let Some((s, site0, w)) = best else {
        return false;
    };
    let mark = b.mark();
    if matches!(fill_window(b, members, s, w, site0), Fill::Done) {
        return true;
    }
    b.rollback(mark);
    false
}
