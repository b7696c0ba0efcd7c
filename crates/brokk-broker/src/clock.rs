//! Where algorithms get the time from: the service passes the wall clock, the
//! simulator and the tests a clock they move themselves.

use std::cell::Cell;

use brokk_model::{Duration, Time};

/// A source of the current time.
pub trait Clock {
    /// The present.
    fn now(&self) -> Time;
}

/// A clock that only moves when told to: virtual time for tests and simulation.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: Cell<Time>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: Time) -> Self {
        ManualClock { now: Cell::new(start) }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        self.now.set(self.now.get() + d);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: Time) {
        self.now.set(t);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        self.now.get()
    }
}
