//! Advance reservations users make through the broker.

use super::*;

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
            .filter(|r| r.state == BrokerReservationState::Committed)
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
        let info = self.info.clone();
        let user = owner.to_string();
        let got = tokio::task::spawn_blocking(move || {
            let mut clients = cached_sites(&sites, &info, None, None, &user);
            let mut refs: Vec<&mut dyn Site> = clients.iter_mut().map(|c| c as &mut dyn Site).collect();
            at_earliest(&request, &mut refs, "broker")
                .map(|(k, id, start)| (sites[k].name.clone(), id.0, start))
                .map_err(|refused| {
                    let reasons: Vec<String> = refused
                        .iter()
                        .map(|(k, why)| format!("{}: {why}", sites[*k].name))
                        .collect();
                    let message = format!("no site can hold the reservation: {}", reasons.join("; "));
                    // Only when no site could even be asked is it the sites' failure.
                    if refused.iter().all(|(_, r)| r.is_failure()) {
                        ServiceError::Unavailable(message)
                    } else {
                        ServiceError::Conflict(message)
                    }
                })
        })
        .await
        .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
        drop(turn);
        let (site, site_reservation, start) = got?;
        let r = BrokerReservation {
            id: format!("r{}", &uuid::Uuid::new_v4().simple().to_string()[..15]),
            owner: owner.to_string(),
            site,
            site_reservation,
            amount: req.amount,
            start,
            end: start + req.duration,
            state: BrokerReservationState::Committed,
        };
        self.db.save_reservation(&r).await?;
        Ok(r)
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
        if r.state == BrokerReservationState::Cancelled {
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
        r.state = BrokerReservationState::Cancelled;
        self.db.save_reservation(&r).await?;
        Ok(r)
    }
}
