//! How a site divides its processors among kinds of jobs ([AB-avail]
//! section 4): Lawson and Smirni's partitions by run time, each protecting
//! its own first waiting jobs, and two partitions (the site's own users'
//! and the grid's) whose split follows a forecast of the local load
//! (Algorithm 1).
//!
//! How Brokk reads them, where the paper leaves room:
//! - A partition may borrow whatever the others leave idle, as long as no
//!   other partition's protected jobs are delayed. All protected jobs hold
//!   their slots in the one schedule of the site, so "fits now without
//!   delaying anyone's pivot" is "fits now in that schedule", and a
//!   protected job's start is its earliest in it (borrowing never starts a
//!   job later than its own partition would). The sizes of the partitions
//!   therefore change no start: what partitions change is who is protected
//!   (each partition its own first jobs, rather than the queue's first
//!   alone), who is served first (local jobs, under priorities) and, with
//!   the forecast, what the site publishes.
//! - The grid's jobs are those a broker placed for one of its users (the
//!   submission names the user, as a delegate's does); every other job is
//!   a local one.
//! - Algorithm 1's line 8 as printed (`min{0, 1 - actualLoad}`) is never
//!   positive, so nothing would ever be published: the grid is offered
//!   `max{0, 1 - forecast}` of the free capacity, the forecast being that
//!   of the local load over the next interval; the load observed over the
//!   interval that ended feeds the forecaster.
//! - Local load is the processors local jobs hold or wait for (their
//!   demand), averaged over the time elapsed, as a share of the site's.
//! - The reallocation check runs every quarter interval until the next
//!   publication; once the forecast proves low, every waiting job is
//!   protected (local jobs first) and the site publishes again, offering
//!   the grid what the observed load leaves, conservative until the next
//!   publication.
//! - The forecast is an exponential moving average with weight
//!   `2 / (window + 1)` over the last `window` observed loads, started from
//!   their plain mean; with none observed yet, it is the load of waiting
//!   and running local jobs at the publication.

use std::collections::VecDeque;

use brokk_model::{Duration, Time};

use crate::queue::Policy;

/// Wall-time bounds of Lawson and Smirni's partitions ([AB-avail] Eq. 1),
/// seconds: under 1,000, under 10,000, and longer.
pub const RUN_TIME_BOUNDS: [i64; 2] = [1_000, 10_000];

/// The forecaster's window in the paper: 25 intervals.
pub const FORECAST_WINDOW: usize = 25;

/// The forecast policy's publication interval when none is named: the two
/// hours of [AB-avail]'s second experiment.
pub const FORECAST_INTERVAL: Duration = Duration::hours(2);

/// How a site's processors are partitioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitions {
    /// One partition: every job in one queue.
    One,
    /// Three partitions by wall time ([`RUN_TIME_BOUNDS`]), each
    /// protecting its own first waiting jobs; with `local_first`, local
    /// jobs are served before the grid's and may take a grid job's
    /// protection in their partition (Lawson and Smirni's priorities).
    ByRunTime {
        /// Whether local jobs come first.
        local_first: bool,
    },
    /// Two partitions, local (0) and grid (1), the grid offered what the
    /// local load's forecast leaves (Algorithm 1).
    Forecast(ForecastParams),
}

/// The forecast policy's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForecastParams {
    /// Time between publications (and between forecasts).
    pub interval: Duration,
    /// Loads the moving average remembers.
    pub window: usize,
}

impl Partitions {
    /// How many partitions.
    pub fn count(self) -> usize {
        match self {
            Partitions::One => 1,
            Partitions::ByRunTime { .. } => 3,
            Partitions::Forecast(_) => 2,
        }
    }

    /// The partition of a job running up to `wall`, a grid job or not.
    pub fn of(self, wall: Duration, grid: bool) -> usize {
        match self {
            Partitions::One => 0,
            Partitions::ByRunTime { .. } => RUN_TIME_BOUNDS.iter().filter(|&&b| wall.0 >= b).count(),
            Partitions::Forecast(_) => usize::from(grid),
        }
    }

    /// Whether local jobs are served before the grid's.
    pub fn local_first(self) -> bool {
        matches!(self, Partitions::ByRunTime { local_first: true })
    }
}

/// A site's local policy: how its queue backfills and how its processors
/// are partitioned. Named as the simulator and the agent's configuration
/// name it: `fcfs`, `easy`, `conservative`, `backfill:K`, and [AB-avail]'s
/// partitioned ones, `easy-m` (ArEbM: EASY in each of the three run-time
/// partitions, local jobs first), `conservative-m` (ArCbM: conservative,
/// no priorities) and `easy-mf` or `easy-mf@INTERVAL` (ArEbMf: local and
/// grid partitions resized by a load forecast at every publication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SitePolicy {
    /// How each partition backfills.
    pub queue: Policy,
    /// The partitions.
    pub partitions: Partitions,
}

impl From<Policy> for SitePolicy {
    fn from(queue: Policy) -> Self {
        SitePolicy {
            queue,
            partitions: Partitions::One,
        }
    }
}

impl SitePolicy {
    /// Whether it partitions the processors.
    pub fn is_partitioned(&self) -> bool {
        self.partitions != Partitions::One
    }

    /// The forecast policy's interval, if it is that policy.
    pub fn forecast_interval(&self) -> Option<Duration> {
        match self.partitions {
            Partitions::Forecast(f) => Some(f.interval),
            _ => None,
        }
    }

    /// The same policy publishing every `interval` when it is the forecast
    /// one named without its own interval (an experiment's series publish
    /// at their gateway's interval).
    pub fn publishing_every(self, interval: Duration) -> SitePolicy {
        match self.partitions {
            Partitions::Forecast(f) => SitePolicy {
                partitions: Partitions::Forecast(ForecastParams { interval, ..f }),
                ..self
            },
            _ => self,
        }
    }
}

impl std::str::FromStr for SitePolicy {
    type Err = String;

    fn from_str(name: &str) -> Result<SitePolicy, String> {
        let by_run_time = |queue, local_first| SitePolicy {
            queue,
            partitions: Partitions::ByRunTime { local_first },
        };
        match name {
            "easy-m" => return Ok(by_run_time(Policy::EASY, true)),
            "conservative-m" => return Ok(by_run_time(Policy::CONSERVATIVE, false)),
            _ => {}
        }
        if let Some(rest) = name.strip_prefix("easy-mf") {
            let interval = match rest.strip_prefix('@') {
                None if rest.is_empty() => FORECAST_INTERVAL,
                Some(every) => match Duration::parse_human(every) {
                    Ok(d) if d.0 > 0 => d,
                    _ => {
                        return Err(format!(
                            "policy {name:?}: the interval after @ must be a duration such as 2h"
                        ))
                    }
                },
                None => return Err(format!("policy {name:?}: easy-mf or easy-mf@INTERVAL")),
            };
            return Ok(SitePolicy {
                queue: Policy::EASY,
                partitions: Partitions::Forecast(ForecastParams {
                    interval,
                    window: FORECAST_WINDOW,
                }),
            });
        }
        name.parse::<Policy>()
            .map(SitePolicy::from)
            .map_err(|e| format!("{e}; or a partitioned one: easy-m, conservative-m, easy-mf, easy-mf@INTERVAL"))
    }
}

/// The load forecaster: an exponential moving average over a window of
/// observed loads.
#[derive(Debug, Clone, PartialEq)]
pub struct Forecaster {
    window: usize,
    loads: VecDeque<f64>,
}

impl Forecaster {
    /// A forecaster remembering `window` loads (at least one).
    pub fn new(window: usize) -> Self {
        Forecaster {
            window: window.max(1),
            loads: VecDeque::new(),
        }
    }

    /// Adds the load observed over the interval that just ended.
    pub fn observe(&mut self, load: f64) {
        if self.loads.len() == self.window {
            self.loads.pop_front();
        }
        self.loads.push_back(load);
    }

    /// The forecast for the next interval, `None` before any observation.
    pub fn forecast(&self) -> Option<f64> {
        let n = self.loads.len();
        if n == 0 {
            return None;
        }
        let alpha = 2.0 / (self.window as f64 + 1.0);
        let mean = self.loads.iter().sum::<f64>() / n as f64;
        Some(self.loads.iter().fold(mean, |f, &x| alpha * x + (1.0 - alpha) * f))
    }
}

/// The share of free capacity offered to the grid when the local load is
/// expected to be `load` (a fraction of the site's processors).
pub fn share_for(load: f64) -> f64 {
    (1.0 - load).clamp(0.0, 1.0)
}

/// `free` processors as offered to the grid at `share`, rounded down.
pub fn offered(free: u32, share: f64) -> u32 {
    (f64::from(free) * share).floor() as u32
}

/// Algorithm 1's state at one site: the local demand integrated over the
/// current interval, the forecaster, the share offered and the times of
/// the next publication and check.
#[derive(Debug, Clone, PartialEq)]
pub struct ForecastState {
    /// The parameters.
    pub params: ForecastParams,
    forecaster: Forecaster,
    /// Processors local jobs hold or wait for now.
    demand: u64,
    /// Processor-seconds of local demand since `since`, up to `last`.
    area: f64,
    since: Time,
    last: Time,
    /// The forecast made at the last publication.
    pub forecast: f64,
    /// The share of free capacity the grid is offered now.
    pub share: f64,
    /// When the next publication is due.
    pub next_publication: Time,
    /// When the next reallocation check is due, if one is.
    pub next_check: Option<Time>,
}

impl ForecastState {
    /// The state of a site starting at `now`: nothing observed, everything
    /// offered until the first publication, an interval from now.
    pub fn new(params: ForecastParams, now: Time) -> Self {
        ForecastState {
            params,
            forecaster: Forecaster::new(params.window),
            demand: 0,
            area: 0.0,
            since: now,
            last: now,
            forecast: 0.0,
            share: 1.0,
            next_publication: now + params.interval,
            next_check: None,
        }
    }

    /// The local demand changes by `delta` processors at `now`.
    pub fn demand_changes(&mut self, now: Time, delta: i64) {
        self.accumulate(now);
        self.demand = self.demand.saturating_add_signed(delta);
    }

    fn accumulate(&mut self, now: Time) {
        if now > self.last {
            self.area += self.demand as f64 * (now - self.last).0 as f64;
            self.last = now;
        }
    }

    /// The local load observed since the interval began, as a share of
    /// `capacity`; the load now when no time has passed.
    pub fn observed(&mut self, now: Time, capacity: u32) -> f64 {
        self.accumulate(now);
        let elapsed = (now - self.since).0;
        let cap = f64::from(capacity.max(1));
        if elapsed <= 0 {
            return self.demand as f64 / cap;
        }
        self.area / (elapsed as f64 * cap)
    }

    /// Algorithm 1's `getFreeTimeSlots` at `now`, once the queue has been
    /// scheduled: the load observed over the interval that ends feeds the
    /// forecaster, the forecast for the next one sets the grid's share,
    /// and the next publication (and, when anything is offered, the first
    /// check) are set.
    pub fn publish(&mut self, now: Time, capacity: u32) {
        let observed = self.observed(now, capacity);
        if now > self.since {
            self.forecaster.observe(observed);
        }
        self.forecast = self
            .forecaster
            .forecast()
            .unwrap_or(self.demand as f64 / f64::from(capacity.max(1)));
        self.share = share_for(self.forecast);
        self.area = 0.0;
        self.since = now;
        self.next_publication = now + self.params.interval;
        self.next_check = (self.share > 0.0).then(|| self.check_after(now)).flatten();
    }

    /// Algorithm 1's `reallocationEvent` at `now`: whether the local load
    /// observed so far this interval exceeds the forecast. When it does,
    /// the grid is offered what the observed load leaves and no more
    /// checks come this interval; else the next check is set.
    pub fn check(&mut self, now: Time, capacity: u32) -> bool {
        let observed = self.observed(now, capacity);
        if observed > self.forecast {
            self.share = share_for(observed);
            self.next_check = None;
            true
        } else {
            self.next_check = self.check_after(now);
            false
        }
    }

    /// The check a quarter interval after `now`, if it comes before the
    /// next publication.
    fn check_after(&self, now: Time) -> Option<Time> {
        let at = now + Duration((self.params.interval.0 / 4).max(1));
        (at < self.next_publication).then_some(at)
    }

    /// The next time something is due.
    pub fn next_event(&self) -> Time {
        self.next_check
            .map_or(self.next_publication, |c| c.min(self.next_publication))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_time_partitions_follow_the_papers_bounds() {
        let p = Partitions::ByRunTime { local_first: true };
        assert_eq!(p.of(Duration(1), true), 0);
        assert_eq!(p.of(Duration(999), false), 0);
        assert_eq!(p.of(Duration(1_000), false), 1);
        assert_eq!(p.of(Duration(9_999), true), 1);
        assert_eq!(p.of(Duration(10_000), true), 2);
        let f = Partitions::Forecast(ForecastParams {
            interval: Duration::hours(1),
            window: 25,
        });
        assert_eq!((f.of(Duration(50_000), false), f.of(Duration(5), true)), (0, 1));
    }

    #[test]
    fn policies_are_named_as_the_paper_abbreviates_them() {
        let p: SitePolicy = "easy-m".parse().unwrap();
        assert_eq!(
            (p.queue, p.partitions),
            (Policy::EASY, Partitions::ByRunTime { local_first: true })
        );
        let p: SitePolicy = "conservative-m".parse().unwrap();
        assert_eq!(p.partitions, Partitions::ByRunTime { local_first: false });
        let p: SitePolicy = "easy-mf@30m".parse().unwrap();
        assert_eq!(p.forecast_interval(), Some(Duration::minutes(30)));
        let p: SitePolicy = "easy-mf".parse().unwrap();
        assert_eq!(p.forecast_interval(), Some(FORECAST_INTERVAL));
        assert_eq!(
            p.publishing_every(Duration::hours(4)).forecast_interval(),
            Some(Duration::hours(4))
        );
        assert_eq!("easy".parse::<SitePolicy>().unwrap(), SitePolicy::from(Policy::EASY));
        for bad in ["easy-mf@", "easy-mf@0s", "easy-mfx", "easy-n"] {
            assert!(bad.parse::<SitePolicy>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_forecast_is_a_moving_average_started_from_the_mean() {
        let mut f = Forecaster::new(3);
        assert_eq!(f.forecast(), None);
        f.observe(0.5);
        assert_eq!(f.forecast(), Some(0.5));
        // alpha = 2/4: mean 0.25, then 0.5*0.5+0.5*0.25 = 0.375, then
        // 0.5*0.0+0.5*0.375 = 0.1875.
        f.observe(0.0);
        assert!((f.forecast().unwrap() - 0.1875).abs() < 1e-12);
        // The window drops the oldest: loads 0.0, 1.0, 1.0; mean 2/3.
        f.observe(1.0);
        f.observe(1.0);
        let mean = 2.0 / 3.0;
        let want = [0.0, 1.0, 1.0].iter().fold(mean, |f, &x| 0.5 * x + 0.5 * f);
        assert!((f.forecast().unwrap() - want).abs() < 1e-12);
    }

    #[test]
    fn an_underestimate_found_at_a_check_offers_what_the_observed_load_leaves() {
        let params = ForecastParams {
            interval: Duration(400),
            window: 25,
        };
        let mut s = ForecastState::new(params, Time(0));
        // Half of 10 processors demanded over the whole first interval.
        s.demand_changes(Time(0), 5);
        s.publish(Time(400), 10);
        assert!((s.forecast - 0.5).abs() < 1e-12);
        assert!((s.share - 0.5).abs() < 1e-12);
        assert_eq!((s.next_publication, s.next_check), (Time(800), Some(Time(500))));
        // 0.5 so far: as forecast, no reallocation; the next check is set.
        assert!(!s.check(Time(500), 10));
        assert_eq!(s.next_check, Some(Time(600)));
        // From 500 on, 9 of 10: (5*100 + 9*100) / (10*200) = 0.7 > 0.5.
        s.demand_changes(Time(500), 4);
        assert!(s.check(Time(600), 10));
        assert!((s.share - 0.3).abs() < 1e-12);
        assert_eq!(s.next_check, None);
        assert_eq!(s.next_event(), Time(800));
        // Full demand forecast: nothing offered, no checks.
        s.demand_changes(Time(600), 1);
        for t in [800, 1200, 1600, 2000] {
            s.publish(Time(t), 10);
        }
        assert!(s.forecast > 0.85, "{}", s.forecast);
        assert!(offered(10, s.share) <= 1);
        assert_eq!(offered(7, 0.5), 3);
    }
}
