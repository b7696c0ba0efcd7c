//! Independent runs on several threads, their results in the order the
//! runs were listed whatever the threads' timing, so that a sweep's report
//! is the same byte for byte on one thread or many.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// `run` over every item of `items` on `threads` threads, calling `done`
/// after each; `None` where a run's result was lost (its thread panicked
/// and poisoned the results).
pub fn in_order<P: Sync, T: Send>(
    items: &[P],
    threads: usize,
    done: &(dyn Fn() + Sync),
    run: impl Fn(&P) -> T + Sync,
) -> Vec<Option<T>> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<T>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let r = run(item);
                if let Ok(mut slots) = slots.lock() {
                    slots[i] = Some(r);
                }
                done();
            });
        }
    });
    slots.into_inner().unwrap_or_else(|e| e.into_inner())
}
