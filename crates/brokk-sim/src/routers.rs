//! Grid routing policies a program writes itself: a [`GridRouter`] picks
//! each arrival's site from what every site publishes at that moment (free
//! processors, jobs running and waiting, the estimated wait), as a
//! metascheduler that reads the sites' information would, without the
//! broker's predictions. An experiment names it in `routings` like a
//! built-in rule, once the program has registered it
//! ([`crate::orders::Orders::with_router`]); the Python package registers
//! functions and classes this way.

use std::fmt;
use std::sync::Arc;

use brokk_model::Time;

use crate::cluster::SimJob;

/// One site as a router sees it at an arrival.
#[derive(Debug, Clone, PartialEq)]
pub struct SiteView {
    /// Its name.
    pub name: String,
    /// Processors.
    pub procs: u32,
    /// Speed against the trace's machine.
    pub speed: f64,
    /// Processors free now.
    pub free: u32,
    /// Jobs running.
    pub running: u32,
    /// Jobs waiting.
    pub waiting: u32,
    /// The wait a one-processor, one-hour job would see, seconds; `None`
    /// when it cannot be placed.
    pub estimated_wait: Option<i64>,
}

/// A grid routing policy (see the module's documentation).
pub trait GridRouter: Send {
    /// The site (by position in `sites`) that `job`, arriving at `now`,
    /// goes to; `None`, or a site too small for it, leaves it unrouted.
    fn route(&mut self, job: &SimJob, sites: &[SiteView], now: Time) -> Option<usize>;
}

type Make = dyn Fn() -> Box<dyn GridRouter> + Send + Sync;

/// Makes a fresh router for each simulation (a router may keep state, so
/// runs never share one).
#[derive(Clone)]
pub struct RouterMaker {
    name: String,
    make: Arc<Make>,
}

impl RouterMaker {
    /// A router named `name`, made by `make`.
    pub fn new(name: impl Into<String>, make: impl Fn() -> Box<dyn GridRouter> + Send + Sync + 'static) -> Self {
        RouterMaker {
            name: name.into(),
            make: Arc::new(make),
        }
    }

    /// A fresh router.
    pub fn make(&self) -> Box<dyn GridRouter> {
        (self.make)()
    }

    /// The name the experiment uses.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for RouterMaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RouterMaker").field(&self.name).finish()
    }
}
