//! Grid-initiated re-optimization of admitted work ([VRM] 5.4): while the
//! schedule runs, the broker moves its own jobs that have not started, one
//! optimization window (a time frame over the sites) at a time, to where
//! the sites rate the result least fragmented, so that later requests find
//! room. Local jobs are the sites' own and stay where they are.
//!
//! This is the thesis's cheapest search, re-placement sub-job by sub-job:
//! each job wholly inside the window is taken off its site and probed for
//! at every site within the window and its own bounds, its old place among
//! the candidates, and booked at the best rated; a tie keeps it where it
//! was. Since its old place is free again when it is probed, a job always
//! has somewhere to go, and the schedule is never worse for admissions
//! already made: the shadow schedule and its two-phase switch reduce to
//! one move at a time for a single broker.

use brokk_core::{Reply, Request, ReservationId};
use brokk_model::{Duration, Time};

use crate::site::Site;

/// One of the broker's jobs as booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The site's index.
    pub site: usize,
    /// Its reservation there.
    pub reservation: ReservationId,
    /// Its reservation's start.
    pub start: Time,
    /// Its reservation's end.
    pub end: Time,
    /// Processors.
    pub amount: u32,
    /// It may not start before this.
    pub earliest: Time,
    /// It must end by this.
    pub deadline: Time,
}

/// What one window's pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pass {
    /// Jobs wholly inside the window and not started, each taken up.
    pub considered: usize,
    /// Of those, booked elsewhere or at another time.
    pub moved: usize,
}

/// Windows of `size` covering `[from, to)`, each starting half a window
/// after the one before, so that every span no longer than half a window
/// lies wholly inside one ([VRM] 5.4.4: windows applied overlapping).
pub fn windows(from: Time, to: Time, size: Duration) -> Vec<(Time, Time)> {
    let size = Duration(size.0.max(2));
    let stride = Duration(size.0 / 2);
    let mut out = Vec::new();
    let mut start = from;
    while start < to {
        out.push((start, start + size));
        start += stride;
    }
    out
}

/// The grid's rating over `window` as probe answers give it ([VRM]
/// 5.4.2 (b)): one minus the sites' mean fragmentation there. Each site
/// is probed for a job of one processor over the window's middle third,
/// whose rating is the fragmentation of exactly the window with that job
/// in it, so a free site rates just under 1 (the probe's own job cuts its
/// room by one processor: 0.875 at 4, 0.99 at 64); a site with no room
/// there at all has nothing left to fragment and rates 1.
pub fn window_rating(window: (Time, Time), sites: &[&mut dyn Site]) -> f64 {
    let third = Duration(((window.1 - window.0).0 / 3).max(1));
    let probe = Request {
        amount: 1,
        duration: third,
        earliest: window.0 + third,
        latest: window.0 + third,
        flexible: false,
    };
    let fragmented: f64 = sites
        .iter()
        .map(|s| {
            s.probe(&probe, 1)
                .ok()
                .and_then(|c| c.first().map(|c| c.rating))
                .unwrap_or(0.0)
        })
        .sum();
    1.0 - fragmented / sites.len().max(1) as f64
}

/// Candidates probed per site for a job being re-placed.
const CANDIDATES: usize = 8;

/// Re-places, at `now`, the jobs of `placed` wholly inside `window` that
/// have not started, over `sites`, as `owner`; `placed` is updated where
/// they go.
pub fn pass(now: Time, window: (Time, Time), placed: &mut [Placed], sites: &mut [&mut dyn Site], owner: &str) -> Pass {
    let mut out = Pass::default();
    let mut inside: Vec<usize> = (0..placed.len())
        .filter(|&i| placed[i].start >= now.max(window.0) && placed[i].end <= window.1)
        .collect();
    inside.sort_by_key(|&i| (placed[i].start, i));
    for i in inside {
        let p = placed[i];
        let duration = p.end - p.start;
        let earliest = p.earliest.max(now).max(window.0);
        let latest = Time(p.deadline.min(window.1).0 - duration.0);
        if sites[p.site].cancel(owner, p.reservation).is_err() {
            continue;
        }
        out.considered += 1;
        let request = |earliest: Time, latest: Time| Request {
            amount: p.amount,
            duration,
            earliest,
            latest,
            flexible: false,
        };
        // Its old place first: a tie keeps it there.
        let mut best: Option<(f64, usize, Time)> = sites[p.site]
            .probe(&request(p.start, p.start), 1)
            .ok()
            .and_then(|c| c.first().map(|c| (c.rating, p.site, c.start)));
        if latest >= earliest {
            for (k, site) in sites.iter().enumerate() {
                for c in site.probe(&request(earliest, latest), CANDIDATES).unwrap_or_default() {
                    if best.is_none_or(|(r, ..)| c.rating < r) {
                        best = Some((c.rating, k, c.start));
                    }
                }
            }
        }
        let targets = best.into_iter().map(|(_, k, s)| (k, s)).chain([(p.site, p.start)]);
        for (k, start) in targets {
            if let Ok(Reply::Granted { id, start }) = sites[k].reserve(owner, &request(start, start), None) {
                if (k, start) != (p.site, p.start) {
                    out.moved += 1;
                }
                placed[i] = Placed {
                    site: k,
                    reservation: id,
                    start,
                    end: start + duration,
                    ..p
                };
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;
