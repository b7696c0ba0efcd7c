//! Slots shared by share, not by first come: how much of a site one user
//! may hold reserved at any instant, and how many reservations one user may
//! keep. A user who reserves every slot of every site for a week within a
//! slot-hour quota leaves every other user's job planned a week out; a
//! share of each site's capacity (half by default) leaves room for the rest
//! whoever asked first. Workflows count like reservations: each task's
//! reservation is one.

use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{Job, ResourceInfo, Time};

use crate::site::{JobHandle, JobState, Site, SiteError};
use crate::workflow::RejectReason;

/// A user's reservation at one site: `amount` slots over `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Slots.
    pub amount: u32,
    /// Its start.
    pub start: Time,
    /// Its end (exclusive).
    pub end: Time,
}

/// The limits of one user's reservations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// The fraction (0 to 1) of a site's capacity one user may hold
    /// reserved at any instant.
    pub of_capacity: f64,
    /// Reservations one user may keep that have not ended.
    pub live: usize,
}

/// Why a reservation would take more than the user's share.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverShare {
    /// More slots at once than the share of the site's capacity.
    #[error(
        "this would hold {held} of the {capacity} slots of {site} reserved at once (from {at}); one user may hold \
         at most {most} there ([limits] reserved_share = {share})"
    )]
    Slots {
        /// The site.
        site: String,
        /// Slots the user would hold at once at the peak.
        held: u32,
        /// When that peak begins.
        at: Time,
        /// The site's capacity.
        capacity: u32,
        /// The most one user may hold there.
        most: u32,
        /// The share configured.
        share: f64,
    },
    /// More reservations than a user may keep.
    #[error("you have {have} reservations that have not ended and ask for {asked} more; one user may keep at most {most} ([limits] reservations)")]
    Count {
        /// Live reservations held.
        have: usize,
        /// Asked for.
        asked: usize,
        /// The most one user may keep.
        most: usize,
    },
}

impl Share {
    /// The most slots of a site of `capacity` one user may hold at once:
    /// at least one, so a share rounds down to no less than a slot.
    pub fn most(&self, capacity: u32) -> u32 {
        ((f64::from(capacity) * self.of_capacity.clamp(0.0, 1.0)).floor() as u32).max(1)
    }

    /// Where a user's reservation of `amount` slots over `(start, end)` at
    /// a site of `capacity` may move up to from `now`, the user holding
    /// `held` there besides: a window of starts before `start` in which any
    /// start keeps them within the share (a site may place it anywhere in
    /// it), or `None` when there is none. A site of unknown capacity (0)
    /// is not judged.
    pub fn move_up_window(
        &self,
        capacity: u32,
        held: &[Span],
        amount: u32,
        (start, end): (Time, Time),
        now: Time,
    ) -> Option<(Time, Time)> {
        let window = if capacity == 0 {
            (now, start)
        } else {
            let (first, last) = starts_within(self.most(capacity), held, amount, (end - start).0, now)?;
            (first, last.map_or(start, |l| l.min(start)))
        };
        (window.0 < start && window.0 <= window.1).then_some(window)
    }

    /// Whether a user who keeps `have` live reservations may ask for `asked` more.
    pub fn count(&self, have: usize, asked: usize) -> Result<(), OverShare> {
        if have.saturating_add(asked) > self.live {
            return Err(OverShare::Count {
                have,
                asked,
                most: self.live,
            });
        }
        Ok(())
    }

    /// Whether a user holding `held` at site `site` of `capacity` may also
    /// hold `new` (several spans: a workflow's tasks at that site), judged
    /// at the instant they overlap most.
    pub fn within(&self, site: &str, capacity: u32, held: &[Span], new: &[Span]) -> Result<(), OverShare> {
        let most = self.most(capacity);
        let (peak, at) = peak(held.iter().chain(new));
        if peak > most && !new.is_empty() {
            return Err(OverShare::Slots {
                site: site.to_string(),
                held: peak,
                at,
                capacity,
                most,
                share: self.of_capacity,
            });
        }
        Ok(())
    }
}

/// A site as one user may use it within their share: probes offer only
/// starts where the request keeps the user within it, and a grant that
/// would take more is given back and answered as a site answers a request
/// that does not fit. Workflow admission asks through it, so a workflow is
/// planned within the share (later, or at another site) rather than refused
/// after the sites were searched.
pub struct Within<'a> {
    site: &'a mut dyn Site,
    /// The site's name, for the reason of a refusal.
    name: String,
    share: Share,
    capacity: u32,
    /// The user's reservations at the site, and those granted through here.
    held: Vec<Span>,
    granted: Vec<(ReservationId, Span)>,
    /// The first time the share stood in the way, for the reason of a
    /// rejection (probes judge through `&self`).
    over: std::cell::RefCell<Option<OverShare>>,
}

impl<'a> Within<'a> {
    /// `site`, named `name` and of `capacity` slots, for a user who holds
    /// `held` there.
    pub fn new(site: &'a mut dyn Site, name: &str, share: Share, capacity: u32, held: Vec<Span>) -> Self {
        Within {
            site,
            name: name.to_string(),
            share,
            capacity,
            held,
            granted: Vec::new(),
            over: Default::default(),
        }
    }

    /// The site's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// As many slots as the user may hold at the site at once: the
    /// site's size for their plans (a site of unknown size stays unknown, 0).
    pub fn usable(&self) -> u32 {
        if self.capacity == 0 {
            0
        } else {
            self.share.most(self.capacity)
        }
    }

    /// The first time the share kept a request from a start the site had.
    pub fn over(&self) -> Option<OverShare> {
        self.over.borrow().clone()
    }

    /// The user's spans at the site: held before and granted through here.
    fn spans(&self) -> Vec<Span> {
        let mut all = self.held.clone();
        all.extend(self.granted.iter().map(|(_, s)| *s));
        all
    }

    /// Whether `span` keeps the user within the share; remembers the first
    /// time it does not. A site without a known capacity is not judged.
    fn fits(&self, span: Span) -> bool {
        if self.capacity == 0 {
            return true;
        }
        match self.share.within(&self.name, self.capacity, &self.spans(), &[span]) {
            Ok(()) => true,
            Err(e) => {
                self.over.borrow_mut().get_or_insert(e);
                false
            }
        }
    }

    /// `req` moved to start no earlier than where the share lets it (after
    /// `after` as well), or `None` when it cannot start within its window
    /// (the reason remembered).
    fn within_window(&self, req: &Request, after: Time) -> Option<Request> {
        let from = req.earliest.max(after);
        if self.capacity == 0 {
            return (from <= req.latest).then_some(Request { earliest: from, ..*req });
        }
        let most = self.share.most(self.capacity);
        match earliest_within(most, &self.spans(), req.amount, req.duration.0, from) {
            Some(t) if t <= req.latest => Some(Request { earliest: t, ..*req }),
            _ => {
                self.fits(span_of(req, from));
                None
            }
        }
    }
}

/// The reason of a workflow's rejection when the owner's share, not the
/// sites, kept it out, asked through `views`: a task wider than the share
/// of every site it would fit, or no room found where the share stood in
/// the way. `None` when the share was not why.
pub fn why_rejected(reason: &RejectReason, views: &[Within], at: Time) -> Option<RejectReason> {
    let (task, limit) = match reason {
        RejectReason::TooLarge { task, cores, .. } => {
            let v = views
                .iter()
                .filter(|v| v.capacity >= *cores)
                .max_by_key(|v| v.capacity)?;
            let limit = OverShare::Slots {
                site: v.name.clone(),
                held: *cores,
                at,
                capacity: v.capacity,
                most: v.share.most(v.capacity),
                share: v.share.of_capacity,
            };
            (task, limit)
        }
        RejectReason::NoRoom { task } => (task, views.iter().find_map(Within::over)?),
        _ => return None,
    };
    Some(RejectReason::Share {
        task: task.clone(),
        limit: limit.to_string(),
    })
}

/// How many times a view asks its site again after the site's answer fell
/// where the share does not allow: each time past one more of the user's
/// own reservations' ends, so a few suffice; the bound keeps a pathological
/// site from being asked without end.
const ASKED_AGAIN: usize = 16;

/// The earliest start at or after `from` where `amount` more slots for
/// `duration` seconds keep a user who holds `spans` at no more than `most`
/// at any instant: `from` itself or the end of a stretch where the user
/// holds too much. `None` when `amount` alone is more than `most`.
pub fn earliest_within(most: u32, spans: &[Span], amount: u32, duration: i64, from: Time) -> Option<Time> {
    let room = i64::from(most.checked_sub(amount)?);
    Some(Levels::of(spans).earliest(room, duration, from))
}

/// The run of starts at or after `from` where `amount` more slots for
/// `duration` seconds keep a user who holds `spans` within `most`: its
/// first start (as [`earliest_within`]) and its last, where the user's own
/// reservations would next take too much (`None` for the last when nothing
/// later does). Any start in that run keeps the user within the share, so
/// a site may be asked to place the request anywhere in it.
pub fn starts_within(
    most: u32,
    spans: &[Span],
    amount: u32,
    duration: i64,
    from: Time,
) -> Option<(Time, Option<Time>)> {
    let room = i64::from(most.checked_sub(amount)?);
    let levels = Levels::of(spans);
    let first = levels.earliest(room, duration, from);
    // No stretch over the room meets the first start's window, so the next
    // one begins after it.
    let next = levels.over(room, first, Time(i64::MAX));
    Some((first, next.map(|k| Time(levels.at[k].0 .0 - duration.max(1)))))
}

/// What a user holds over time: from each change point on, a level, in
/// time order (the last is 0: every span ends).
struct Levels {
    at: Vec<(Time, i64)>,
}

impl Levels {
    fn of<'a>(spans: impl IntoIterator<Item = &'a Span>) -> Levels {
        let mut edges: Vec<(Time, i64)> = spans
            .into_iter()
            .filter(|s| s.end > s.start)
            .flat_map(|s| [(s.start, i64::from(s.amount)), (s.end, -i64::from(s.amount))])
            .collect();
        edges.sort_unstable();
        let mut at: Vec<(Time, i64)> = Vec::new();
        let mut level = 0;
        for (t, d) in edges {
            level += d;
            match at.last_mut() {
                Some(last) if last.0 == t => last.1 = level,
                _ => at.push((t, level)),
            }
        }
        Levels { at }
    }

    /// The earliest start at or after `from` of `duration` seconds that
    /// meets no stretch over `room`: each such stretch pushes the start
    /// past its end and the scan goes on from there, so every stretch is
    /// looked at once.
    fn earliest(&self, room: i64, duration: i64, from: Time) -> Time {
        let length = brokk_model::Duration(duration.max(1));
        let mut t = from;
        while let Some(k) = self.over(room, t, t + length) {
            t = self.end(k);
        }
        t
    }

    /// The first stretch over `room` that meets `[from, to)`.
    fn over(&self, room: i64, from: Time, to: Time) -> Option<usize> {
        // The stretch holding `from`, or the first after it.
        let k = self.at.partition_point(|&(t, _)| t <= from).saturating_sub(1);
        (k..self.at.len())
            .take_while(|&k| self.at[k].0 < to)
            .find(|&k| self.at[k].1 > room && self.end(k) > from)
    }

    /// Where stretch `k` ends.
    fn end(&self, k: usize) -> Time {
        self.at.get(k + 1).map_or(Time(i64::MAX), |s| s.0)
    }
}

fn span_of(req: &Request, start: Time) -> Span {
    Span {
        amount: req.amount,
        start,
        end: start + req.duration,
    }
}

impl Site for Within<'_> {
    fn endpoint(&self) -> &str {
        self.site.endpoint()
    }

    fn info(&self) -> Result<ResourceInfo, SiteError> {
        self.site.info()
    }

    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        // The site's candidates start where the share allows; where all of
        // them fall where it does not, the site is asked again past them.
        let mut after = req.earliest;
        for _ in 0..ASKED_AGAIN {
            let Some(moved) = self.within_window(req, after) else {
                return Ok(Vec::new());
            };
            let found = self.site.probe(&moved, k)?;
            let Some(first) = found.iter().map(|c| c.start).min() else {
                return Ok(found);
            };
            let kept: Vec<Candidate> = found.into_iter().filter(|c| self.fits(span_of(req, c.start))).collect();
            if !kept.is_empty() {
                return Ok(kept);
            }
            after = first + brokk_model::Duration(1);
        }
        Ok(Vec::new())
    }

    fn reserve(&mut self, owner: &str, req: &Request, hold: Option<Time>) -> Result<Reply, SiteError> {
        let mut after = req.earliest;
        for _ in 0..ASKED_AGAIN {
            let Some(moved) = self.within_window(req, after) else {
                break;
            };
            let reply = self.site.reserve(owner, &moved, hold)?;
            let Reply::Granted { id, start } = reply else {
                return Ok(reply);
            };
            let span = span_of(req, start);
            if self.fits(span) {
                self.granted.push((id, span));
                return Ok(reply);
            }
            // The site put it where the share does not allow: given back,
            // and asked again past it.
            self.site.cancel(owner, id)?;
            after = start + brokk_model::Duration(1);
        }
        // As a site answers a request that does not fit in its window.
        Ok(Reply::Rejected { next_start: None })
    }

    fn modify(&mut self, _owner: &str, _id: ReservationId, _change: Change) -> Result<Time, SiteError> {
        // Nothing that asks through a share changes a reservation; judging
        // a change would need the reservation's old shape.
        Err(SiteError::Refused {
            site: self.site.endpoint().to_string(),
            reason: "a reservation is not changed through a user's share".into(),
        })
    }

    fn commit(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.site.commit(owner, id)
    }

    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.site.cancel(owner, id)?;
        self.granted.retain(|(g, _)| *g != id);
        Ok(())
    }

    fn submit(&mut self, owner: &str, job: &Job, reservation: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        self.site.submit(owner, job, reservation)
    }

    fn submit_held(
        &mut self,
        owner: &str,
        job: &Job,
        reservation: ReservationId,
        key: &str,
    ) -> Result<JobHandle, SiteError> {
        self.site.submit_held(owner, job, reservation, key)
    }

    fn status(&self, job: &JobHandle) -> Result<JobState, SiteError> {
        self.site.status(job)
    }

    fn cancel_job(&mut self, owner: &str, job: &JobHandle) -> Result<(), SiteError> {
        self.site.cancel_job(owner, job)
    }
}

/// The most slots `spans` hold at once, and when that begins: one sweep
/// over their starts and ends, an end before a start at the same instant
/// (`[start, end)`).
pub fn peak<'a>(spans: impl Iterator<Item = &'a Span>) -> (u32, Time) {
    let (at, best) =
        Levels::of(spans).at.into_iter().fold(
            (Time(0), 0),
            |best, (t, level)| if level > best.1 { (t, level) } else { best },
        );
    (u32::try_from(best).unwrap_or(u32::MAX), at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(amount: u32, start: i64, end: i64) -> Span {
        Span {
            amount,
            start: Time(start),
            end: Time(end),
        }
    }

    const HALF: Share = Share {
        of_capacity: 0.5,
        live: 3,
    };

    #[test]
    fn spans_that_touch_do_not_overlap() {
        assert_eq!(peak([span(4, 0, 10), span(4, 10, 20)].iter()), (4, Time(0)));
        assert_eq!(
            peak([span(4, 0, 10), span(3, 5, 20), span(2, 8, 9)].iter()),
            (9, Time(8))
        );
        assert_eq!(peak(std::iter::empty()), (0, Time(0)));
    }

    #[test]
    fn a_user_holds_at_most_their_share_of_a_site_at_any_instant() {
        // Half of 8 slots: 4 at once, however long.
        assert!(HALF.within("a", 8, &[], &[span(4, 0, 7 * 86_400)]).is_ok());
        let e = HALF.within("a", 8, &[], &[span(5, 0, 60)]).unwrap_err();
        assert!(e.to_string().contains("5 of the 8 slots of a"), "{e}");
        // Side by side they add up; one after the other they do not.
        assert!(HALF.within("a", 8, &[span(3, 0, 100)], &[span(2, 50, 150)]).is_err());
        assert!(HALF.within("a", 8, &[span(3, 0, 100)], &[span(2, 100, 150)]).is_ok());
        // A workflow's tasks are judged together.
        assert!(HALF
            .within("a", 8, &[], &[span(2, 0, 10), span(2, 5, 15), span(1, 8, 9)])
            .is_err());
        // A share never rounds down to nothing.
        assert_eq!(HALF.most(1), 1);
    }

    #[test]
    fn the_earliest_start_within_the_share_is_after_the_users_own_reservations() {
        // 2 from 0, 4 from 50, 2 from 100, none from 150, 1 over [300, 400).
        let held = [span(2, 0, 100), span(2, 50, 150), span(1, 300, 400)];
        // 4 at most: a 1 fits at once for 40 s, for 60 s only from 100.
        assert_eq!(earliest_within(4, &held, 1, 40, Time(0)), Some(Time(0)));
        assert_eq!(earliest_within(4, &held, 1, 60, Time(0)), Some(Time(100)));
        assert_eq!(earliest_within(4, &held, 3, 10, Time(0)), Some(Time(150)));
        // From 150 a 3 fits for 150 s; for 200 s only beside the 1; a 4 after it.
        assert_eq!(earliest_within(4, &held, 3, 150, Time(0)), Some(Time(150)));
        assert_eq!(earliest_within(4, &held, 3, 200, Time(120)), Some(Time(150)));
        assert_eq!(earliest_within(4, &held, 4, 200, Time(0)), Some(Time(400)));
        assert_eq!(earliest_within(4, &held, 5, 1, Time(0)), None);
        assert_eq!(earliest_within(4, &[], 4, 1_000, Time(7)), Some(Time(7)));
        // What it finds is what `within` accepts, and nothing earlier is.
        for amount in 1..=4 {
            for duration in [1, 50, 120, 400] {
                let t = earliest_within(4, &held, amount, duration, Time(0)).unwrap();
                let ok = |s: i64| HALF.within("a", 8, &held, &[span(amount, s, s + duration)]).is_ok();
                assert!(ok(t.0), "{amount} for {duration} at {t:?}");
                assert!((0..t.0).all(|s| !ok(s)), "{amount} for {duration} fits before {t:?}");
            }
        }
    }

    #[test]
    fn any_start_in_the_run_keeps_the_user_within_the_share() {
        let held = [span(2, 0, 100), span(2, 50, 150), span(1, 300, 400), span(3, 600, 700)];
        // A 2 for 100 s: from 100 (level 2 until 150) until the 3 at 600.
        assert_eq!(
            starts_within(4, &held, 2, 100, Time(0)),
            Some((Time(100), Some(Time(500))))
        );
        // A 1 for 50 s fits at 0 only (the 4 from 50), and from 150 for good.
        assert_eq!(starts_within(4, &held, 1, 50, Time(0)), Some((Time(0), Some(Time(0)))));
        assert_eq!(starts_within(4, &held, 1, 50, Time(150)), Some((Time(150), None)));
        assert_eq!(starts_within(4, &held, 5, 50, Time(0)), None);
        for amount in 1..=4 {
            for duration in [1, 50, 120, 400] {
                let (first, last) = starts_within(4, &held, amount, duration, Time(0)).unwrap();
                let ok = |s: i64| HALF.within("a", 8, &held, &[span(amount, s, s + duration)]).is_ok();
                let last = last.map_or(first.0 + 1_000, |t| t.0);
                assert!((first.0..=last).all(ok), "{amount} for {duration}: {first:?}..{last}");
                assert!(
                    !ok(last + 1) || last == first.0 + 1_000,
                    "{amount} for {duration}: the run ends early"
                );
            }
        }
    }

    #[test]
    fn a_reservation_moves_up_only_where_the_share_allows() {
        let held = [span(2, 0, 1_000)];
        // Half of 8: 2 more beside the 2 fit from now on.
        assert_eq!(
            HALF.move_up_window(8, &held, 2, (Time(500), Time(600)), Time(0)),
            Some((Time(0), Time(500)))
        );
        // 3 more fit only once the 2 end, after the planned start: no move.
        assert_eq!(HALF.move_up_window(8, &held, 3, (Time(500), Time(600)), Time(0)), None);
        // 4 held over [300, 400): 2 more for 100 s fit from now until 200 only.
        let busy = [span(4, 300, 400)];
        assert_eq!(
            HALF.move_up_window(8, &busy, 2, (Time(800), Time(900)), Time(0)),
            Some((Time(0), Time(200)))
        );
        // Nothing earlier than the planned start: nothing to move.
        assert_eq!(HALF.move_up_window(8, &[], 1, (Time(50), Time(60)), Time(50)), None);
        // A site of unknown size is not judged.
        assert_eq!(
            HALF.move_up_window(0, &busy, 9, (Time(800), Time(900)), Time(0)),
            Some((Time(0), Time(800)))
        );
    }

    #[test]
    fn a_user_keeps_a_bounded_number_of_reservations() {
        assert!(HALF.count(2, 1).is_ok());
        let e = HALF.count(2, 2).unwrap_err();
        assert!(e.to_string().contains("at most 3"), "{e}");
    }
}
