//! Reading users' descriptions off the service's async workers: each on a
//! blocking thread, at most one at a time per user and a bounded number in
//! all, so that one user's submissions (each within its reader's work
//! budget) queue behind each other and never hold the threads that answer
//! `/healthz`, `status` or another user's submission.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use super::ServiceError;

/// The turns of description reading.
#[derive(Debug)]
pub struct Parsing {
    threads: Arc<Semaphore>,
    users: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Parsing {
    /// At most `threads` descriptions read at once, whoever sent them.
    pub fn new(threads: usize) -> Parsing {
        Parsing {
            threads: Arc::new(Semaphore::new(threads.max(1))),
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `work` (reading `user`'s description) on a blocking thread once
    /// it is the user's turn and a thread is free.
    pub async fn run<T: Send + 'static>(
        &self,
        user: &str,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        let mine = {
            let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
            users
                .entry(user.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(1)))
                .clone()
        };
        let result = async {
            let _turn = mine
                .acquire()
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            let _thread = self
                .threads
                .acquire()
                .await
                .map_err(|e| ServiceError::Unavailable(e.to_string()))?;
            tokio::task::spawn_blocking(work)
                .await
                .map_err(|e| ServiceError::Unavailable(format!("reading a description: {e}")))
        }
        .await;
        // The user's entry goes once nobody else waits on it.
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if Arc::strong_count(&mine) == 2 {
            users.remove(user);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_users_readings_take_turns_and_leave_room_for_others() {
        let p = Arc::new(Parsing::new(4));
        // Eve's readings block until released, counting how many run at once.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = Arc::new(Mutex::new(wait));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let hostile: Vec<_> = (0..3)
            .map(|_| {
                let (p, wait, running, most) = (p.clone(), wait.clone(), running.clone(), most.clone());
                tokio::spawn(async move {
                    p.run("eve", move || {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        wait.lock().unwrap().recv().unwrap();
                        running.fetch_sub(1, Ordering::SeqCst);
                    })
                    .await
                })
            })
            .collect();
        while running.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Ann's reading goes while eve's first is still held.
        let ann = tokio::time::timeout(Duration::from_secs(10), p.run("ann", || 7)).await;
        assert_eq!(ann.expect("ann waited behind eve").unwrap(), 7);
        for _ in 0..3 {
            release.send(()).unwrap();
        }
        for h in hostile {
            h.await.unwrap().unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 1, "eve's readings ran side by side");
        assert!(p.users.lock().unwrap().is_empty());
    }
}
