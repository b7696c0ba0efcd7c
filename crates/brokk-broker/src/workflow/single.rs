//! Single-job admission ([VRM] 4.4.1): what a broker without workflow
//! support does. Classes in dependency order, each task at the site where
//! it starts first, regardless of the deadline; co-allocated tasks only if
//! their earliest starts agree. The deadline is checked once all is placed.

use super::booking::Booking;
use super::heft::{class_floor, fill_window, Fill};
use super::FAR;

/// Places every class in index order among the ready ones.
pub(super) fn schedule(b: &mut Booking) -> bool {
    let dag = b.dag;
    b.place_all(dag.topological(|c| -(c as f64)), |b, c| {
        match dag.classes[c].as_slice() {
            [t] => place_task(b, *t),
            members => place_class(b, members),
        }
    })
}

/// The earliest start of `t` over the sites, with the site and duration.
fn earliest_start(b: &mut Booking, t: usize, floor: i64) -> Option<(i64, usize, i64)> {
    let mut options = Vec::new();
    for site in 0..b.site_count() {
        let (Some(d), Some(est)) = (b.duration(t, site), b.arrival(t, site)) else {
            continue;
        };
        if let Some(s) = b.probe_first(t, site, d, est.max(floor), FAR) {
            options.push((s, site, d));
        }
    }
    options.into_iter().min()
}

fn place_task(b: &mut Booking, t: usize) -> bool {
    let Some((s, site, d)) = earliest_start(b, t, b.earliest.0) else {
        return false;
    };
    let mark = b.mark();
    if let Some(arrival) = b.book_inputs(t, site, s, FAR) {
        if b.reserve_task(t, site, d, s.max(arrival), FAR).is_some() {
            return true;
        }
    }
    b.rollback(mark);
    false
}

/// Co-allocated tasks are booked only when every member's earliest start
/// is the same; the window is the longest member's duration there.
fn place_class(b: &mut Booking, members: &[usize]) -> bool {
    let floor = class_floor(b, members);
    let mut found = Vec::with_capacity(members.len());
    for &m in members {
        match earliest_start(b, m, floor) {
            Some(x) => found.push(x),
            None => return false,
        }
    }
    let (s, site0, _) = found[0];
    if found.iter().any(|&(x, ..)| x != s) {
        return false;
    }
    let w = found.iter().map(|&(.., d)| d).max().unwrap_or(1);
    let mark = b.mark();
    if matches!(fill_window(b, members, s, w, site0), Fill::Done) {
        return true;
    }
    b.rollback(mark);
    false
}
