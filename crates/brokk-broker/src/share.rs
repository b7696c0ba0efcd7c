//! Slots shared by share, not by first come: how much of a site one user
//! may hold reserved at any instant, and how many reservations one user may
//! keep. A user who reserves every slot of every site for a week within a
//! slot-hour quota leaves every other user's job planned a week out; a
//! share of each site's capacity (half by default) leaves room for the rest
//! whoever asked first. Workflows count like reservations: each task's
//! reservation is one.

use brokk_model::Time;

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

/// The most slots `spans` hold at once, and when that begins: one sweep
/// over their starts and ends, an end before a start at the same instant
/// (`[start, end)`).
pub fn peak<'a>(spans: impl Iterator<Item = &'a Span>) -> (u32, Time) {
    let mut edges: Vec<(Time, i64)> = spans
        .filter(|s| s.end > s.start)
        .flat_map(|s| [(s.start, i64::from(s.amount)), (s.end, -i64::from(s.amount))])
        .collect();
    edges.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut best, mut at) = (0i64, 0i64, Time(0));
    for (t, d) in edges {
        now += d;
        if now > best {
            best = now;
            at = t;
        }
    }
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
    fn a_user_keeps_a_bounded_number_of_reservations() {
        assert!(HALF.count(2, 1).is_ok());
        let e = HALF.count(2, 2).unwrap_err();
        assert!(e.to_string().contains("at most 3"), "{e}");
    }
}
