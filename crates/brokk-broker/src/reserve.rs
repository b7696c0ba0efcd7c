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
    let mut order: Vec<(Time, usize)> = Vec::new();
    let mut refused: Vec<(usize, Refusal)> = Vec::new();
    let mut unplaced: Vec<usize> = Vec::new();
    for (k, s) in sites.iter().enumerate() {
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
