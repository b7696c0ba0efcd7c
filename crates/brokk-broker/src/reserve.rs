//! The reservation a user asks the broker for: at the site where the
//! request can start earliest, or every site's reason why not.

use brokk_core::{NeverReason, Reply, Request, ReservationId};
use brokk_model::Time;

use crate::site::{Site, SiteError};

/// Why a site did not take a reservation request, in words a user reads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// It never can (too large, beyond its planning horizon, ...).
    #[error("{0}")]
    Never(NeverReason),
    /// Not within the window.
    #[error("{}", match next_start {
        Some(t) => format!("busy in that window; the earliest start it can give is {t}"),
        None => "busy up to its planning horizon".to_string(),
    })]
    Busy {
        /// The earliest start it could give after the window, if any.
        next_start: Option<Time>,
    },
    /// It could not be asked.
    #[error("{0}")]
    Failed(SiteError),
}

impl Refusal {
    /// Whether the site could not be asked, rather than said no.
    pub fn is_failure(&self) -> bool {
        matches!(self, Refusal::Failed(_))
    }
}

/// Probes every site and reserves, for `owner`, at the site whose earliest
/// candidate start is soonest, trying the next one when a grant does not
/// come (the schedule moved between probe and request). Returns the site
/// (index), the reservation and its start; otherwise each site (index) with
/// its reason.
pub fn at_earliest(
    req: &Request,
    sites: &mut [&mut dyn Site],
    owner: &str,
) -> Result<(usize, ReservationId, Time), Vec<(usize, Refusal)>> {
    at_earliest_held(req, sites, owner, None)
}

/// [`at_earliest`] for a reservation preliminary until `hold` when given
/// (what a broker above asks of a broker serving it as a site).
pub fn at_earliest_held(
    req: &Request,
    sites: &mut [&mut dyn Site],
    owner: &str,
    hold: Option<Time>,
) -> Result<(usize, ReservationId, Time), Vec<(usize, Refusal)>> {
    at_earliest_among(req, sites, owner, hold, |_| true)
}

/// [`at_earliest_held`] asking only the sites `among` admits.
fn at_earliest_among(
    req: &Request,
    sites: &mut [&mut dyn Site],
    owner: &str,
    hold: Option<Time>,
    among: impl Fn(usize) -> bool,
) -> Result<(usize, ReservationId, Time), Vec<(usize, Refusal)>> {
    let mut order: Vec<(Time, usize)> = Vec::new();
    let mut refused: Vec<(usize, Refusal)> = Vec::new();
    let mut unplaced: Vec<usize> = Vec::new();
    for (k, s) in sites.iter().enumerate().filter(|(k, _)| among(*k)) {
        match s.probe(req, 1) {
            Ok(c) => match c.first() {
                Some(c) => order.push((c.start, k)),
                None => unplaced.push(k),
            },
            Err(e @ SiteError::Unavailable(_)) => refused.push((k, Refusal::Failed(e))),
            // A probe a site refuses (too large a request, say): its
            // reservation answer below says why in the protocol's terms.
            Err(_) => unplaced.push(k),
        }
    }
    order.sort();
    // Candidates first, soonest first; a site without one is asked too, so
    // that its answer says why.
    for k in order.into_iter().map(|(_, k)| k).chain(unplaced) {
        match sites[k].reserve(owner, req, hold) {
            Ok(Reply::Granted { id, start }) => return Ok((k, id, start)),
            Ok(Reply::Rejected { next_start }) => refused.push((k, Refusal::Busy { next_start })),
            Ok(Reply::Never { reason }) => refused.push((k, Refusal::Never(reason))),
            Err(e) => refused.push((k, Refusal::Failed(e))),
        }
    }
    refused.sort_by_key(|r| r.0);
    Err(refused)
}

/// The `k` soonest of every site's candidates for a probe, the better
/// rated first among equal starts: what a broker serving another as a site
/// offers for it.
pub fn soonest(mut all: Vec<brokk_core::Candidate>, k: usize) -> Vec<brokk_core::Candidate> {
    all.sort_by(|a, b| a.start.cmp(&b.start).then(a.rating.total_cmp(&b.rating)));
    all.truncate(k);
    all
}

/// What a broker serving another as a site answers when none of its
/// sites granted a reservation, as a site agent would: rejected with the
/// soonest next start any busy site named, else never (with the first
/// reason given); or, when no site could even be asked, why (`Err`).
pub fn as_one_site(refused: &[(usize, Refusal)]) -> Result<Reply, String> {
    if refused.iter().all(|(_, r)| r.is_failure()) {
        let why: Vec<String> = refused.iter().map(|(_, r)| r.to_string()).collect();
        return Err(format!("no site could be asked: {}", why.join("; ")));
    }
    let busy: Vec<Option<Time>> = refused
        .iter()
        .filter_map(|(_, r)| match r {
            Refusal::Busy { next_start } => Some(*next_start),
            _ => None,
        })
        .collect();
    if !busy.is_empty() {
        return Ok(Reply::Rejected {
            next_start: busy.into_iter().flatten().min(),
        });
    }
    let never = refused.iter().find_map(|(_, r)| match r {
        Refusal::Never(reason) => Some(*reason),
        _ => None,
    });
    Ok(Reply::Never {
        reason: never.unwrap_or(NeverReason::Empty),
    })
}

/// Why a user's reservation was not made ([`within_share`]), in words the
/// user reads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotReserved {
    /// No site can take it without the user holding more than their share
    /// wherever in the window it lands.
    #[error(
        "{amount} more slots at once would be more than one user may hold reserved at any site in that window \
         (at most {most} of the largest, of {widest} slots, counting your reservations there; [limits] \
         reserved_share = {of_capacity})"
    )]
    NoSiteWithin {
        /// Slots asked for.
        amount: u32,
        /// The most the user may hold at the largest site.
        most: u32,
        /// The largest site's slots.
        widest: u32,
        /// The share of a site's capacity one user may hold.
        of_capacity: f64,
    },
    /// Every site asked said no or could not be asked, each with why
    /// (`names[k]: why`).
    #[error("no site can hold the reservation: {}", .reasons.join("; "))]
    Refused {
        /// Each site's reason, as `name: why`.
        reasons: Vec<String>,
        /// Whether no site could even be asked (the sites' failure, not an answer).
        unreachable: bool,
    },
    /// Granted where it took more than the user's share (given back there).
    #[error(transparent)]
    OverShare(#[from] crate::share::OverShare),
}

/// Reserves `request` for a user who holds `held[k]` at site `k` (named
/// `names[k]`) within `share`: only the sites where it stays within the
/// share wherever in its window it lands are asked (one whose capacity is
/// not known, 0, is asked all the same), the earliest start wins
/// ([`at_earliest`]), and a grant that takes more than the share where it
/// landed is given back. The site (index), reservation and start.
pub fn within_share(
    request: &Request,
    sites: &mut [&mut dyn Site],
    names: &[String],
    held: &[Vec<crate::share::Span>],
    share: crate::share::Share,
    owner: &str,
) -> Result<(usize, ReservationId, Time), NotReserved> {
    use crate::share::Span;
    let capacities: Vec<u32> = sites.iter().map(|s| s.info().map_or(0, |i| i.total_slots)).collect();
    let anywhere = Span {
        amount: request.amount,
        start: request.earliest,
        end: request.latest + request.duration,
    };
    let fits = |k: usize| share.within(&names[k], capacities[k], &held[k], &[anywhere]).is_ok();
    let eligible: Vec<usize> = (0..sites.len()).filter(|&k| capacities[k] == 0 || fits(k)).collect();
    if eligible.is_empty() {
        let widest = capacities.iter().copied().max().unwrap_or(0);
        return Err(NotReserved::NoSiteWithin {
            amount: request.amount,
            most: share.most(widest),
            widest,
            of_capacity: share.of_capacity,
        });
    }
    let among = |k: usize| eligible.contains(&k);
    let (k, id, start) =
        at_earliest_among(request, sites, owner, None, among).map_err(|refused| NotReserved::Refused {
            unreachable: refused.iter().all(|(_, r)| r.is_failure()),
            reasons: refused.iter().map(|(k, why)| format!("{}: {why}", names[*k])).collect(),
        })?;
    let span = Span {
        amount: request.amount,
        start,
        end: start + request.duration,
    };
    // Judged again where it landed (what decides at a site whose capacity
    // was not known before).
    if let Err(over) = share.within(&names[k], capacities[k], &held[k], &[span]) {
        let _ = sites[k].cancel(owner, id);
        return Err(over.into());
    }
    Ok((k, id, start))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::{Share, Span};
    use crate::MemorySite;
    use brokk_model::{Duration, ResourceInfo};

    fn site(name: &str, slots: u32) -> MemorySite {
        let info = ResourceInfo {
            endpoint: name.into(),
            name: name.into(),
            total_slots: slots,
            reservations: true,
            ..ResourceInfo::default()
        };
        MemorySite::new(info, Time(0), Time(100_000))
    }

    fn ask(amount: u32, earliest: i64, latest: i64) -> Request {
        Request {
            amount,
            duration: Duration(100),
            earliest: Time(earliest),
            latest: Time(latest),
            flexible: false,
        }
    }

    const HALF: Share = Share {
        of_capacity: 0.5,
        live: 10,
    };

    #[test]
    fn a_users_reservation_goes_only_where_it_stays_within_their_share() {
        let (mut a, mut b) = (site("a", 8), site("b", 8));
        let names = ["a".to_string(), "b".to_string()];
        // The user holds 3 of a's 8 for the whole window: 2 more would pass
        // half of a, so only b is asked, though a is listed first.
        let held = vec![
            vec![Span {
                amount: 3,
                start: Time(0),
                end: Time(10_000),
            }],
            Vec::new(),
        ];
        let mut sites: Vec<&mut dyn Site> = vec![&mut a, &mut b];
        let got = within_share(&ask(2, 0, 500), &mut sites, &names, &held, HALF, "ann");
        assert!(matches!(got, Ok((1, _, Time(0)))), "{got:?}");
        // 5 slots are more than half of any site.
        let got = within_share(&ask(5, 0, 500), &mut sites, &names, &held, HALF, "ann").unwrap_err();
        assert_eq!(
            got.to_string(),
            "5 more slots at once would be more than one user may hold reserved at any site in that window \
             (at most 4 of the largest, of 8 slots, counting your reservations there; [limits] reserved_share = 0.5)"
        );
        assert!(a.planner().is_empty(), "a was never asked");
    }

    #[test]
    fn a_site_is_asked_only_if_the_request_fits_the_share_anywhere_in_its_window() {
        let mut a = site("a", 8);
        let names = ["a".to_string()];
        // 3 held over [0, 100) only, which any start in the window overlaps.
        let held = vec![vec![Span {
            amount: 3,
            start: Time(0),
            end: Time(100),
        }]];
        // The window itself fits (3 + 1 = 4 of 8 at most).
        let mut sites: Vec<&mut dyn Site> = vec![&mut a];
        let got = within_share(&ask(1, 0, 0), &mut sites, &names, &held, HALF, "ann");
        assert!(matches!(got, Ok((0, _, Time(0)))), "{got:?}");
        // 2 more would hold 5 of 8 at once: a is not asked.
        let got = within_share(&ask(2, 0, 0), &mut sites, &names, &held, HALF, "ann");
        assert!(matches!(got, Err(NotReserved::NoSiteWithin { .. })), "{got:?}");
        assert_eq!(a.planner().reservations().len(), 1, "only the first was made");
    }

    #[test]
    fn a_broker_as_one_site_offers_the_soonest_and_refuses_as_a_site_would() {
        let c = |start: i64, rating: f64| brokk_core::Candidate {
            start: Time(start),
            rating,
        };
        let got = soonest(vec![c(50, 1.0), c(10, 2.0), c(10, 0.5), c(90, 0.0)], 2);
        assert_eq!(got, [c(10, 0.5), c(10, 2.0)]);
        let busy = |t: Option<i64>| Refusal::Busy {
            next_start: t.map(Time),
        };
        let down = || Refusal::Failed(SiteError::Unavailable("down".into()));
        assert_eq!(
            as_one_site(&[(0, busy(Some(70))), (1, down()), (2, busy(Some(40)))]),
            Ok(Reply::Rejected {
                next_start: Some(Time(40))
            })
        );
        assert_eq!(
            as_one_site(&[(0, Refusal::Never(NeverReason::BeyondHorizon)), (1, down())]),
            Ok(Reply::Never {
                reason: NeverReason::BeyondHorizon
            })
        );
        assert!(as_one_site(&[(0, down()), (1, down())])
            .unwrap_err()
            .starts_with("no site could be asked"));
    }

    #[test]
    fn every_sites_reason_is_given_and_unreachable_sites_say_so() {
        let (mut a, mut b) = (site("a", 8), site("b", 4));
        b.set_available(false);
        let names = ["a".to_string(), "b".to_string()];
        let held = vec![Vec::new(), Vec::new()];
        let whole = Share {
            of_capacity: 1.0,
            live: 10,
        };
        // a is full until 1000 for someone else.
        a.reserve(
            "bob",
            &Request {
                duration: Duration(1000),
                ..ask(8, 0, 0)
            },
            None,
        )
        .unwrap();
        let mut sites: Vec<&mut dyn Site> = vec![&mut a, &mut b];
        let got = within_share(&ask(1, 0, 0), &mut sites, &names, &held, whole, "ann").unwrap_err();
        let NotReserved::Refused { reasons, unreachable } = &got else {
            panic!("{got:?}")
        };
        assert!(!unreachable, "a answered");
        assert_eq!(reasons.len(), 2);
        assert!(reasons.iter().any(|r| r.starts_with("a: busy")), "{reasons:?}");
        assert!(reasons.iter().any(|r| r.starts_with("b: ")), "{reasons:?}");
        a.set_available(false);
        let mut sites: Vec<&mut dyn Site> = vec![&mut a, &mut b];
        let got = within_share(&ask(1, 0, 0), &mut sites, &names, &held, whole, "ann").unwrap_err();
        assert!(matches!(got, NotReserved::Refused { unreachable: true, .. }), "{got:?}");
    }
}
