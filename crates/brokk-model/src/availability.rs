//! A site's published availability ([AB-avail] section 3): its free
//! capacity over time as a list of ranges, computed at a known moment, so
//! that a broker can find where a job of its own shape starts first and
//! knows how old that answer is.

use serde::{Deserialize, Serialize};

use crate::time::{Duration, Time};

/// Capacity free throughout `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FreeRange {
    /// Start of the range.
    pub start: Time,
    /// End of the range (exclusive).
    pub end: Time,
    /// Processors free throughout it.
    pub free: u32,
}

/// Free capacity over `[computed_at, until)`: `ranges` in time order, not
/// overlapping; a time inside that span and outside every range has nothing
/// free. Beyond `until` the site said nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Availability {
    /// When the site computed it.
    pub computed_at: Time,
    /// The end of what it covers.
    pub until: Time,
    /// The free ranges.
    pub ranges: Vec<FreeRange>,
}

impl Availability {
    /// The earliest start at or after `from` of a job of `cpus` processors
    /// for `wall`: the first moment from which `cpus` stay free for `wall`.
    /// Beyond `until` the site published nothing, so it is taken as wholly
    /// free (`capacity`): a job that fits nowhere within the span starts at
    /// its end at the latest. `None` when the job is wider than `capacity`.
    pub fn earliest_start(&self, cpus: u32, wall: Duration, from: Time, capacity: u32) -> Option<Time> {
        let cpus = cpus.max(1);
        if cpus > capacity {
            return None;
        }
        if from >= self.until {
            return Some(from);
        }
        let first = self.ranges.partition_point(|r| r.end <= from);
        // The start of the current run of ranges wide enough, and where the
        // run has reached.
        let mut run: Option<Time> = None;
        let mut reached = from;
        for r in &self.ranges[first..] {
            let start = r.start.max(from);
            if start > reached {
                run = None;
            }
            if r.free >= cpus {
                let s = *run.get_or_insert(start);
                if r.end - s >= wall {
                    return Some(s);
                }
            } else {
                run = None;
            }
            reached = r.end;
        }
        match run {
            // A run that lasts to the end of the span goes on beyond it.
            Some(s) if reached >= self.until => Some(s),
            _ => Some(self.until.max(from)),
        }
    }

    /// Takes `cpus` off the free capacity of `[start, start + wall)`: what a
    /// job the broker has just sent there will use, until the site's next
    /// answer shows it.
    pub fn book(&mut self, cpus: u32, start: Time, wall: Duration) {
        let end = Time(start.0.saturating_add(wall.0.max(1)));
        let first = self.ranges.partition_point(|r| r.end <= start);
        let last = self.ranges.partition_point(|r| r.start < end);
        if first >= last {
            return;
        }
        let mut pieces = Vec::with_capacity(last - first + 2);
        for r in &self.ranges[first..last] {
            if r.start < start {
                pieces.push(FreeRange { end: start, ..*r });
            }
            let free = r.free.saturating_sub(cpus);
            if free > 0 {
                pieces.push(FreeRange {
                    start: r.start.max(start),
                    end: r.end.min(end),
                    free,
                });
            }
            if r.end > end {
                pieces.push(FreeRange { start: end, ..*r });
            }
        }
        self.ranges.splice(first..last, pieces);
    }

    /// Several sites' availability as one (a broker that stands as one site
    /// for a broker above it): at each moment the most any one of them has
    /// free, over the span all of them cover, as old as the oldest. A run read
    /// from it may join ranges of different sites, so it is what the sites
    /// could offer at best, as the other folded figures are. `None` without
    /// parts.
    pub fn fold(parts: &[&Availability]) -> Option<Availability> {
        let computed_at = parts.iter().map(|a| a.computed_at).min()?;
        let until = parts.iter().map(|a| a.until).min()?;
        let mut cuts: Vec<Time> = parts
            .iter()
            .flat_map(|a| a.ranges.iter().flat_map(|r| [r.start, r.end]))
            .filter(|t| *t < until)
            .collect();
        cuts.push(until);
        cuts.sort_unstable();
        cuts.dedup();
        // Each part's position in its ranges as the sweep moves on.
        let mut at = vec![0usize; parts.len()];
        let mut ranges: Vec<FreeRange> = Vec::new();
        for w in cuts.windows(2) {
            let (start, end) = (w[0], w[1]);
            let mut free = 0;
            for (a, k) in parts.iter().zip(at.iter_mut()) {
                while a.ranges.get(*k).is_some_and(|r| r.end <= start) {
                    *k += 1;
                }
                if let Some(r) = a.ranges.get(*k).filter(|r| r.start <= start) {
                    free = free.max(r.free);
                }
            }
            match ranges.last_mut() {
                Some(l) if l.end == start && l.free == free => l.end = end,
                _ if free > 0 => ranges.push(FreeRange { start, end, free }),
                _ => {}
            }
        }
        Some(Availability {
            computed_at,
            until,
            ranges,
        })
    }

    /// The least free over `[from, to)`: nothing in a gap between ranges,
    /// `capacity` beyond what the site published.
    pub fn least_free(&self, from: Time, to: Time, capacity: u32) -> u32 {
        let end = to.min(self.until);
        if from >= end {
            return capacity;
        }
        let (mut at, mut least) = (from, capacity);
        let first = self.ranges.partition_point(|r| r.end <= from);
        for r in &self.ranges[first..] {
            if r.start > at || r.start >= end {
                break;
            }
            least = least.min(r.free);
            at = r.end;
            if at >= end {
                break;
            }
        }
        if at < end {
            0
        } else {
            least
        }
    }

    /// The ranges within `[from, to)` with at least `min_amount` free, in
    /// runs of such ranges that last at least `min_duration`: what a
    /// consumer looking for room of that size wants to see.
    pub fn filtered(&self, from: Time, to: Time, min_amount: u32, min_duration: Duration) -> Vec<FreeRange> {
        let mut out = Vec::new();
        let mut run: Vec<FreeRange> = Vec::new();
        let flush = |run: &mut Vec<FreeRange>, out: &mut Vec<FreeRange>| {
            if let (Some(a), Some(b)) = (run.first(), run.last()) {
                if b.end - a.start >= min_duration {
                    out.append(run);
                }
            }
            run.clear();
        };
        for r in &self.ranges {
            let (start, end) = (r.start.max(from), r.end.min(to));
            if end <= start {
                continue;
            }
            let joins = run.last().is_some_and(|l| l.end == start);
            if r.free < min_amount || !joins {
                flush(&mut run, &mut out);
            }
            if r.free >= min_amount {
                run.push(FreeRange {
                    start,
                    end,
                    free: r.free,
                });
            }
        }
        flush(&mut run, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: i64, end: i64, free: u32) -> FreeRange {
        FreeRange {
            start: Time(start),
            end: Time(end),
            free,
        }
    }

    /// An 8-processor site from 0 to 1000: 6 free until 100 (a 2-wide job
    /// runs), 8 free until 300, nothing free until 400 (a reservation), 8
    /// free after.
    fn site() -> Availability {
        Availability {
            computed_at: Time(0),
            until: Time(1000),
            ranges: vec![r(0, 100, 6), r(100, 300, 8), r(400, 1000, 8)],
        }
    }

    #[test]
    fn the_least_free_reads_ranges_gaps_and_beyond() {
        let av = Availability {
            computed_at: Time(0),
            until: Time(40),
            ranges: vec![r(0, 10, 4), r(10, 20, 2), r(30, 40, 8)],
        };
        let least = |from, to| av.least_free(Time(from), Time(to), 8);
        assert_eq!(least(0, 10), 4);
        assert_eq!(least(5, 15), 2);
        assert_eq!(least(15, 25), 0, "a gap has nothing free");
        assert_eq!(least(30, 50), 8);
        assert_eq!(least(45, 50), 8, "beyond what is published: the capacity");
    }

    #[test]
    fn a_job_starts_where_its_own_shape_first_fits() {
        let a = site();
        // One slot for a minute: at once.
        assert_eq!(a.earliest_start(1, Duration(60), Time(0), 8), Some(Time(0)));
        // Eight slots wait for the 2-wide job's end.
        assert_eq!(a.earliest_start(8, Duration(60), Time(0), 8), Some(Time(100)));
        // Six slots for 250 s run across the step at 100 but not the gap at 300.
        assert_eq!(a.earliest_start(6, Duration(250), Time(0), 8), Some(Time(0)));
        assert_eq!(a.earliest_start(6, Duration(350), Time(0), 8), Some(Time(400)));
        // Asked later (the answer has aged): from then on.
        assert_eq!(a.earliest_start(8, Duration(60), Time(150), 8), Some(Time(150)));
        assert_eq!(a.earliest_start(8, Duration(200), Time(150), 8), Some(Time(400)));
        // A run that reaches the end of the span goes on beyond it.
        assert_eq!(a.earliest_start(8, Duration(5000), Time(0), 8), Some(Time(400)));
        // Beyond the span, and wider than the site.
        assert_eq!(a.earliest_start(8, Duration(60), Time(2000), 8), Some(Time(2000)));
        assert_eq!(a.earliest_start(9, Duration(60), Time(0), 8), None);
    }

    #[test]
    fn a_range_ending_before_the_span_leaves_nothing_free_to_its_end() {
        let a = Availability {
            computed_at: Time(0),
            until: Time(500),
            ranges: vec![r(0, 100, 4)],
        };
        assert_eq!(a.earliest_start(4, Duration(200), Time(0), 4), Some(Time(500)));
        let none = Availability { ranges: vec![], ..a };
        assert_eq!(none.earliest_start(1, Duration(1), Time(10), 4), Some(Time(500)));
    }

    #[test]
    fn a_booking_takes_its_processors_off_its_span_only() {
        let mut a = site();
        a.book(8, Time(100), Duration(100));
        assert_eq!(a.ranges, vec![r(0, 100, 6), r(200, 300, 8), r(400, 1000, 8)]);
        a.book(2, Time(50), Duration(400));
        assert_eq!(
            a.ranges,
            vec![
                r(0, 50, 6),
                r(50, 100, 4),
                r(200, 300, 6),
                r(400, 450, 6),
                r(450, 1000, 8)
            ]
        );
        // The next 8-wide job now starts after both.
        assert_eq!(a.earliest_start(8, Duration(60), Time(0), 8), Some(Time(450)));
    }

    #[test]
    fn filters_keep_runs_wide_and_long_enough() {
        let a = site();
        // Six or more free for at least 250 s: both runs; for 350 s, the
        // run 0-300 is too short.
        assert_eq!(a.filtered(Time(0), Time(1000), 6, Duration(250)), site().ranges);
        assert_eq!(a.filtered(Time(0), Time(1000), 6, Duration(350)), vec![r(400, 1000, 8)]);
        // Seven or more: the 6 free at first break the run.
        assert_eq!(
            a.filtered(Time(0), Time(1000), 7, Duration(1)),
            vec![r(100, 300, 8), r(400, 1000, 8)]
        );
        // Eight free for at least 300 s: the last range only, clipped.
        assert_eq!(a.filtered(Time(0), Time(800), 8, Duration(300)), vec![r(400, 800, 8)]);
        assert!(a.filtered(Time(0), Time(1000), 9, Duration(1)).is_empty());
    }

    #[test]
    fn a_fold_has_the_most_any_part_has_free() {
        let other = Availability {
            computed_at: Time(-5),
            until: Time(800),
            ranges: vec![r(0, 200, 4), r(250, 350, 2)],
        };
        let f = Availability::fold(&[&site(), &other]).unwrap();
        assert_eq!((f.computed_at, f.until), (Time(-5), Time(800)));
        assert_eq!(
            f.ranges,
            vec![r(0, 100, 6), r(100, 300, 8), r(300, 350, 2), r(400, 800, 8)]
        );
        assert!(Availability::fold(&[]).is_none());
    }
}
