//! The event queue: events come out in (time, sequence) order, so events at the
//! same instant keep the order they were scheduled in and every run is identical.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use brokk_model::Time;

/// A queue of future events of type `E` with its own virtual clock.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Reverse<(i64, u64, Slot<E>)>>,
    seq: u64,
    now: Time,
}

/// Wraps an event so that ordering looks only at (time, sequence).
#[derive(Debug)]
struct Slot<E>(E);

impl<E> PartialEq for Slot<E> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl<E> Eq for Slot<E> {}
impl<E> PartialOrd for Slot<E> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Slot<E> {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            now: Time::EPOCH,
        }
    }
}

/// Scheduling an event in the past would break causality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("event scheduled at {at} but the simulation is already at {now}")]
pub struct InThePast {
    /// When the event was asked for.
    pub at: Time,
    /// The current simulated time.
    pub now: Time,
}

impl<E> EventQueue<E> {
    /// An empty queue at time `start`.
    pub fn new(start: Time) -> Self {
        EventQueue {
            now: start,
            ..Self::default()
        }
    }

    /// The current simulated time: that of the last event taken out.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Schedules `event` at `at`, which must not be before [`EventQueue::now`].
    pub fn schedule(&mut self, at: Time, event: E) -> Result<(), InThePast> {
        if at < self.now {
            return Err(InThePast { at, now: self.now });
        }
        self.heap.push(Reverse((at.0, self.seq, Slot(event))));
        self.seq += 1;
        Ok(())
    }

    /// Takes out the next event and moves the clock to its time.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        let Reverse((t, _, Slot(e))) = self.heap.pop()?;
        self.now = Time(t);
        Some((self.now, e))
    }

    /// The time of the next event, if any.
    pub fn peek_time(&self) -> Option<Time> {
        self.heap.peek().map(|Reverse((t, _, _))| Time(*t))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_by_scheduling_order() {
        let mut q = EventQueue::new(Time(0));
        q.schedule(Time(5), "c").unwrap();
        q.schedule(Time(1), "a").unwrap();
        q.schedule(Time(5), "d").unwrap();
        q.schedule(Time(1), "b").unwrap();
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(Time(1), "a"), (Time(1), "b"), (Time(5), "c"), (Time(5), "d")]
        );
        assert_eq!(q.now(), Time(5));
        assert_eq!(
            q.schedule(Time(4), "late"),
            Err(InThePast {
                at: Time(4),
                now: Time(5)
            })
        );
    }
}
