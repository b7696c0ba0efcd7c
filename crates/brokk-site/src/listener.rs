//! Serving HTTP with bounds, for the agent and the broker alike: no client
//! can hold more than its share of the process's connections, and none can
//! hold one open by sending nothing, or its headers a line at a time.
//!
//! - At most [`Bounds::connections`] connections at once, and at most
//!   [`Bounds::per_client`] from one address; a connection past either is
//!   closed at once, before anything is read from it.
//! - A request's headers must arrive within [`Bounds::header_timeout`],
//!   counted from when the connection waits for them (an idle keep-alive
//!   connection is closed then too).
//! - The process's descriptors are checked at start ([`descriptor_budget`]):
//!   the soft limit raised to the hard one, and a start below
//!   [`MIN_DESCRIPTORS`] refused with what to change.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Fewest open files a server starts with.
pub const MIN_DESCRIPTORS: u64 = 1024;

/// What one server allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections open at once, all clients together.
    pub connections: usize,
    /// Connections open at once from one address.
    pub per_client: usize,
    /// Longest wait for a request's headers.
    pub header_timeout: Duration,
}

impl Bounds {
    /// The bounds for a process that may open `descriptors` files: half of
    /// them for connections (the rest for databases, sites, jobs' files),
    /// an eighth of those (at most 512) for one address.
    pub fn for_descriptors(descriptors: u64) -> Bounds {
        let connections = usize::try_from(descriptors / 2).unwrap_or(usize::MAX).max(16);
        Bounds {
            connections,
            per_client: (connections / 8).clamp(4, 512),
            header_timeout: Duration::from_secs(15),
        }
    }
}

/// Raises the soft limit on open files to the hard one and returns it;
/// an error sentence when even that is below [`MIN_DESCRIPTORS`].
pub fn descriptor_budget() -> Result<u64, String> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("reading RLIMIT_NOFILE: {e}"))?;
    let got = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        hard
    } else {
        soft
    };
    if got < MIN_DESCRIPTORS {
        return Err(format!(
            "this process may open only {got} files (RLIMIT_NOFILE, hard limit {hard}); a server needs at least \
             {MIN_DESCRIPTORS}: raise it (`ulimit -n`, LimitNOFILE= in a systemd unit)"
        ));
    }
    Ok(got)
}

/// What each key (a client's address, a user) has open, each at most a
/// bound: shared by whoever opens and whoever closes.
#[derive(Debug)]
pub struct Counts<K>(Mutex<HashMap<K, usize>>);

impl<K> Default for Counts<K> {
    fn default() -> Self {
        Counts(Mutex::new(HashMap::new()))
    }
}

impl<K: std::hash::Hash + Eq> Counts<K> {
    /// Counts one more for `key` unless it has `most` already.
    pub fn take(&self, key: K, most: usize) -> bool {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(key).or_insert(0);
        if *n >= most {
            return false;
        }
        *n += 1;
        true
    }

    /// One fewer for `key`.
    pub fn give_back(&self, key: &K) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                m.remove(key);
            }
        }
    }
}

/// Serves `app` on `listener` within `bounds` until the task is dropped.
pub async fn serve(listener: TcpListener, app: axum::Router, bounds: Bounds) {
    let open = Arc::new(Semaphore::new(bounds.connections));
    let per_client = Arc::new(Counts::<IpAddr>::default());
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of descriptors or memory for a moment: a busy loop
                // would only make it worse.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "closed: {} connections open", bounds.connections);
            continue;
        };
        let ip = peer.ip();
        if !per_client.take(ip, bounds.per_client) {
            tracing::debug!(%peer, "closed: {} connections open from this address", bounds.per_client);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let (app, per_client) = (app.clone(), per_client.clone());
        tokio::spawn(async move {
            // HTTP/1.1 only: every client of Brokk speaks it, and its
            // header timeout is what bounds a trickling client.
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(bounds.header_timeout);
            let service = TowerToHyperService::new(app);
            if let Err(e) = builder.serve_connection(TokioIo::new(stream), service).await {
                tracing::trace!(%peer, "connection ended: {e}");
            }
            per_client.give_back(&ip);
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_takes_at_most_its_share_and_gets_it_back() {
        let p = Counts::<IpAddr>::default();
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.1".parse().unwrap());
        assert!(p.take(a, 2) && p.take(a, 2));
        assert!(!p.take(a, 2));
        assert!(p.take(b, 2));
        p.give_back(&a);
        assert!(p.take(a, 2));
        p.give_back(&a);
        p.give_back(&a);
        p.give_back(&b);
        assert!(p.0.lock().unwrap().is_empty());
    }

    #[test]
    fn bounds_follow_the_descriptors() {
        let b = Bounds::for_descriptors(20_000);
        assert_eq!((b.connections, b.per_client), (10_000, 512));
        let b = Bounds::for_descriptors(1024);
        assert_eq!((b.connections, b.per_client), (512, 64));
    }
}
