//! `GET /readyz`: whether this broker can take and place work now, as a
//! load balancer or Kubernetes asks before sending it any (`/healthz` only
//! says the process answers).

use super::*;

/// How long the database may take to answer the probe.
const DATABASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// What `/readyz` answers: ready, and each check with what it found.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// The database answers and at least one of the broker's own sites
    /// has fresh information.
    pub ready: bool,
    /// `ok`, or why not.
    pub database: String,
    /// Each own site: `ok` with the age of its information, or why not.
    pub sites: std::collections::BTreeMap<String, String>,
}

impl Service {
    /// Whether this broker is ready: its database answers within two
    /// seconds, and one of its own sites (neighbouring brokers aside) has
    /// answered with information recent enough to decide on
    /// ([`brokk_broker::broker::BrokerCore::freshness`]); a broker that
    /// cannot place a job anywhere is not.
    pub async fn readiness(&self) -> Readiness {
        let database = match tokio::time::timeout(DATABASE_TIMEOUT, self.db.ping()).await {
            Ok(Ok(())) => "ok".to_string(),
            Ok(Err(e)) => format!("unreachable: {e}"),
            Err(_) => format!("no answer within {} s", DATABASE_TIMEOUT.as_secs()),
        };
        let mut fresh = self.broker.read(|core| core.freshness(now()));
        fresh.retain(|(name, _)| !self.neighbours.contains(name));
        let placeable = fresh.iter().any(|(_, state)| state.is_ok());
        let sites: std::collections::BTreeMap<String, String> = fresh
            .into_iter()
            .map(|(name, state)| {
                let said = match state {
                    Ok(age) => format!("ok ({} old)", age.human()),
                    Err(why) => why,
                };
                (name, said)
            })
            .collect();
        Readiness {
            ready: database == "ok" && placeable,
            database,
            sites,
        }
    }
}
