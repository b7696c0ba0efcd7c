//! Turns per user: a user's requests of one kind wait behind each other,
//! never in front of another user's. Workflow admission takes its turn
//! here before the broker's decision turn (which every decision shares,
//! first come first served), so a user who sends ten large workflows at
//! once has one of them in that queue at a time, and another user's
//! workflow waits for at most one of theirs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// One queue per user.
#[derive(Debug, Default)]
pub struct UserTurns {
    queues: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl UserTurns {
    /// Waits for `user`'s turn; it lasts as long as the guard.
    pub async fn take(&self, user: &str) -> OwnedMutexGuard<()> {
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            // A queue nobody holds or waits for is only kept by this map.
            queues.retain(|_, q| Arc::strong_count(q) > 1);
            queues.entry(user.to_string()).or_default().clone()
        };
        queue.lock_owned().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_users_second_request_waits_and_another_users_does_not() {
        let turns = Arc::new(UserTurns::default());
        let ann = turns.take("ann").await;
        let again = {
            let turns = turns.clone();
            tokio::spawn(async move { drop(turns.take("ann").await) })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!again.is_finished(), "ann's second request waits for her first");
        let bob = tokio::time::timeout(Duration::from_secs(1), turns.take("bob")).await;
        assert!(bob.is_ok(), "bob does not wait behind ann");
        drop(ann);
        tokio::time::timeout(Duration::from_secs(1), again)
            .await
            .unwrap()
            .unwrap();
        drop(bob);
        // Queues nobody uses are let go.
        drop(turns.take("carl").await);
        assert_eq!(turns.queues.lock().unwrap().len(), 1);
    }
}
