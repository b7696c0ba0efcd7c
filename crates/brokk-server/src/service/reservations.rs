//! Advance reservations users make through the broker.

use super::*;
use brokk_broker::reserve::{within_share, NotReserved};
use brokk_broker::share::Span;

/// A user's reservations that have not ended.
pub(super) struct Live {
    /// How many, a workflow counting as one.
    pub count: usize,
    reservations: Vec<BrokerReservation>,
}

impl Live {
    /// Those at `site`, as spans.
    pub fn at(&self, site: &str) -> Vec<Span> {
        self.at_but(site, "")
    }

    /// Reservation `r` where it is now.
    pub fn moved(&mut self, r: &BrokerReservation) {
        if let Some(old) = self.reservations.iter_mut().find(|o| o.id == r.id) {
            (old.start, old.end) = (r.start, r.end);
        }
    }

    /// Those at `site` but reservation `id`, as spans.
    pub fn at_but(&self, site: &str, id: &str) -> Vec<Span> {
        self.reservations
            .iter()
            .filter(|r| r.site == site && r.id != id)
            .map(|r| Span {
                amount: r.amount,
                start: r.start,
                end: r.end,
            })
            .collect()
    }
}

impl Service {
    /// Checks that `rid` is a committed broker reservation of `owner`'s.
    pub(super) async fn own_committed_reservation(
        &self,
        owner: &str,
        rid: &str,
    ) -> Result<BrokerReservation, ServiceError> {
        let r = self
            .db
            .reservation(rid)
            .await?
            .filter(|r| r.state() == BrokerReservationState::Committed)
            .ok_or_else(|| ServiceError::NotFound(format!("reservation {rid}")))?;
        if r.owner != owner {
            return Err(ServiceError::Forbidden(format!("reservation {rid}")));
        }
        Ok(r)
    }

    /// Reserves at the site where the request starts earliest, for `owner`.
    pub async fn reserve(&self, owner: &str, req: BrokerReservationRequest) -> Result<BrokerReservation, ServiceError> {
        if req.amount == 0 || req.duration.0 <= 0 || req.latest < req.earliest {
            return Err(ServiceError::BadRequest(
                "amount and duration must be positive, and earliest <= latest".into(),
            ));
        }
        let t = now();
        if req.latest < t {
            return Err(ServiceError::BadRequest(format!(
                "the window ends at {}, which has passed; give a window in the future",
                req.latest
            )));
        }
        if req.duration.0 > self.limits.reservation_seconds {
            return Err(ServiceError::BadRequest(format!(
                "a reservation may last at most {} s on this broker, not {} s",
                self.limits.reservation_seconds, req.duration.0
            )));
        }
        self.within_reserved_limit(owner, i64::from(req.amount).saturating_mul(req.duration.0), t)
            .await?;
        let sites = self.sites();
        let request = brokk_core::Request {
            amount: req.amount,
            duration: req.duration,
            earliest: req.earliest,
            latest: req.latest,
            flexible: false,
        };
        let turn = self.decision_turn().await;
        // Read once, in the turn: what the share is judged against before
        // the sites are asked and again where the grant came.
        let live = self.live_of(owner, t).await?;
        let share = self.limits.share();
        share
            .count(live.count, 1)
            .map_err(|e| ServiceError::Conflict(e.to_string()))?;
        let held: Vec<Vec<Span>> = sites.iter().map(|s| live.at(&s.name)).collect();
        let (info, user) = (self.info.clone(), owner.to_string());
        let names: Vec<String> = sites.iter().map(|s| s.name.clone()).collect();
        let got = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            within_share(&request, &mut refs, &names, &held, share, "broker")
                .map(|(k, id, start)| (names[k].clone(), id.0, start))
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        let (site, site_reservation, start) = got.map_err(|e| match e {
            // Only when no site could even be asked is it the sites' failure.
            NotReserved::Refused { unreachable: true, .. } => ServiceError::Unavailable(e.to_string()),
            e => ServiceError::Conflict(e.to_string()),
        })?;
        let id = format!("r{}", &uuid::Uuid::new_v4().simple().to_string()[..15]);
        let (amount, end) = (req.amount, start + req.duration);
        let r = BrokerReservation::new(id, owner.to_string(), site, site_reservation, amount, start, end);
        self.db.save_reservation(&r).await?;
        Ok(r)
    }

    /// `owner`'s reservations that have not ended at `t`, read once.
    pub(super) async fn live_of(&self, owner: &str, t: Time) -> Result<Live, ServiceError> {
        let live: Vec<BrokerReservation> = self
            .db
            .reservations_of(owner)
            .await?
            .into_iter()
            .filter(|r| r.state() == BrokerReservationState::Committed && r.end > t)
            .collect();
        // A workflow's tasks count as one.
        let kinds: std::collections::BTreeSet<&str> =
            live.iter().map(|r| r.workflow.as_deref().unwrap_or(&r.id)).collect();
        Ok(Live {
            count: kinds.len(),
            reservations: live,
        })
    }

    /// `owner`'s reservations, by start: their own only.
    pub async fn reservations(&self, owner: &str) -> Result<Vec<BrokerReservation>, ServiceError> {
        Ok(self.db.reservations_of(owner).await?)
    }

    /// A reservation of `owner`'s.
    pub async fn reservation(&self, owner: &str, id: &str) -> Result<BrokerReservation, ServiceError> {
        let r = self
            .db
            .reservation(id)
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("reservation {id}")))?;
        if r.owner != owner {
            return Err(ServiceError::Forbidden(format!("reservation {id}")));
        }
        Ok(r)
    }

    /// Cancels a reservation at its site.
    pub async fn cancel_reservation(&self, owner: &str, id: &str) -> Result<BrokerReservation, ServiceError> {
        let mut r = self.reservation(owner, id).await?;
        if r.state() == BrokerReservationState::Cancelled {
            return Ok(r);
        }
        let site = self
            .site(&r.site)
            .ok_or_else(|| ServiceError::Unavailable(format!("site {} is no longer configured", r.site)))?;
        let sid = r.site_reservation;
        let res =
            tokio::task::spawn_blocking(move || site.client.clone().cancel("broker", brokk_core::ReservationId(sid)))
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        match res {
            Ok(()) | Err(brokk_broker::SiteError::Unknown) => {}
            Err(e) => return Err(ServiceError::Unavailable(format!("cancelling at {}: {e}", r.site))),
        }
        let _ = r.apply(ReservationChange::Cancel);
        self.db.save_reservation(&r).await?;
        Ok(r)
    }
}
