//! The reservation a user asks the broker for: at the site where the
//! request can start earliest.

use brokk_core::{Reply, Request, ReservationId};
use brokk_model::Time;

use crate::site::Site;

/// Probes every site and reserves, for `owner`, at the site whose earliest
/// candidate start is soonest, trying the next one when a grant does not
/// come (the schedule moved between probe and request). Returns the site
/// (index), the reservation and its start; `None` when no site can hold it.
pub fn at_earliest(req: &Request, sites: &mut [&mut dyn Site], owner: &str) -> Option<(usize, ReservationId, Time)> {
    let mut order: Vec<(Time, usize)> = sites
        .iter()
        .enumerate()
        .filter_map(|(k, s)| s.probe(req, 1).ok()?.first().map(|c| (c.start, k)))
        .collect();
    order.sort();
    order
        .into_iter()
        .find_map(|(_, k)| match sites[k].reserve(owner, req, None) {
            Ok(Reply::Granted { id, start }) => Some((k, id, start)),
            _ => None,
        })
}
