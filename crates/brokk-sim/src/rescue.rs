//! A resource failing during an admission experiment ([VRM] 6.4): the grid
//! runs at a steady load, one resource goes down for a known time (known to
//! the simulation, not to the broker), and the broker rescues the jobs
//! booked there with `brokk_broker::rescue` while it goes on admitting new
//! ones. As in the thesis's evaluation the jobs are atomic, and a moved job
//! is admitted again over the other resources within its own window
//! (its earliest start, not before now, and its deadline).
//!
//! Measured: the *affected* jobs (booked at the resource at the failure,
//! not started, their booking inside the downtime), the *terminated* (still
//! there when they were to start while it was down) and the *overhead*
//! (jobs moved that were booked to start after the recovery), both over the
//! affected. The affected are the same for every strategy of a run, since
//! the strategies differ only from the failure on, so the ratios compare.
//! A strategy with a short horizon lets new bookings land on the resource
//! while it is down: those count among the terminated and the moved, and
//! apart as `later`. Jobs running at the failure are lost and counted apart.

use std::collections::{BTreeMap, BTreeSet};

use brokk_broker::rescue::{booked_load, combined_load, fenced, Booked, BookingProfile, Failure, Strategy, NEVER};
use brokk_broker::workflow::{admit, Network, Options, SiteSpec, Topology};
use brokk_broker::{MemorySite, Publishing, Site};
use brokk_core::{Occupant, ReservationId};
use brokk_model::workflow::{Task, Workflow};
use brokk_model::{Duration, Time};
use serde::{Deserialize, Serialize};

/// The failure an experiment injects (`[rescue]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RescueConfig {
    /// The strategies compared.
    pub strategies: Vec<Strategy>,
    /// How long the resource is down (slots), swept.
    pub downtime: Vec<i64>,
    /// The resource that fails; the largest when not given.
    #[serde(default)]
    pub site: Option<String>,
    /// When it fails, as a share of the arrival span (the grid has reached
    /// its steady load by then).
    #[serde(default = "half")]
    pub at: f64,
    /// What the broker that rescues knows of the grid's load, swept:
    /// `central`, one broker over every site; `local`, [VRM] 6.4's
    /// distributed worst case, where the failed site's own domain broker
    /// knows only that site (its load and its bookings) and moves jobs
    /// through the broker above to the others.
    #[serde(default = "central")]
    pub views: Vec<View>,
    /// The share of the resource's processors lost (a node down or
    /// drained): it goes on taking work into the rest, and only the
    /// bookings it can no longer hold are rescued; absent, all of it.
    #[serde(default)]
    pub lost: Option<f64>,
    /// The failed resource's offered load against its processors' share
    /// of the grid's, as a relative difference, swept ([VRM] 6.4's
    /// imbalance: 0.5 is half as much again, -0.5 half as much). With it
    /// every resource is a domain of its own, whose jobs are tried there
    /// first and through the grid after; the failed one's domain takes
    /// that much more (or less) of the jobs than its processors' share,
    /// the others the rest by theirs. Absent, one broker places every job
    /// over the whole grid.
    #[serde(default)]
    pub imbalance: Vec<f64>,
}

/// What the rescuing broker knows of the grid ([`RescueConfig::views`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum View {
    /// Every site's load and bookings.
    Central,
    /// The failed site's alone.
    Local,
}

impl std::fmt::Display for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            View::Central => "central",
            View::Local => "local",
        })
    }
}

fn central() -> Vec<View> {
    vec![View::Central]
}

fn half() -> f64 {
    0.5
}

impl RescueConfig {
    /// Checks the values.
    pub fn check(&self) -> Result<(), String> {
        if self.strategies.is_empty() || self.downtime.is_empty() || self.downtime.iter().any(|&d| d <= 0) {
            return Err("rescue: at least one strategy and positive downtimes (slots)".into());
        }
        if self.views.is_empty() {
            return Err("rescue.views: central, local or both".into());
        }
        if !(self.at > 0.0 && self.at < 1.0) {
            return Err("rescue.at: a share of the arrival span, between 0 and 1".into());
        }
        if self.lost.is_some_and(|l| !(l > 0.0 && l <= 1.0)) {
            return Err("rescue.lost: a share of the resource's processors, above 0 and at most 1".into());
        }
        if self.imbalance.iter().any(|x| !(*x > -1.0 && x.is_finite())) {
            return Err("rescue.imbalance: relative differences of load, above -1".into());
        }
        Ok(())
    }

    /// Each site's share of the jobs, as domains, when the failed site
    /// `failed` is offered `1 + imbalance` times its processors' share and
    /// the others split the rest by theirs; refused where the failed site
    /// would take more than every job.
    pub fn domain_shares(capacities: &[u32], failed: usize, imbalance: f64) -> Result<Vec<f64>, String> {
        let total: f64 = capacities.iter().map(|&c| f64::from(c)).sum();
        let own = f64::from(capacities[failed]) / total;
        let share = (1.0 + imbalance) * own;
        if share > 1.0 {
            return Err(format!(
                "rescue.imbalance: {imbalance} would give the failed site {:.0}% of the jobs",
                share * 100.0
            ));
        }
        Ok(capacities
            .iter()
            .enumerate()
            .map(|(i, &c)| match i == failed {
                true => share,
                false if own < 1.0 => (1.0 - share) * f64::from(c) / (total - f64::from(capacities[failed])),
                false => 0.0,
            })
            .collect())
    }

    /// The failing resource's index among `sites`.
    pub fn site_of(&self, sites: &[SiteSpec]) -> Result<usize, String> {
        match &self.site {
            Some(n) => sites
                .iter()
                .position(|s| &s.name == n)
                .ok_or_else(|| format!("rescue.site: no site `{n}`")),
            // The first of the largest.
            None => Ok(sites
                .iter()
                .enumerate()
                .max_by_key(|&(i, s)| (s.capacity, std::cmp::Reverse(i)))
                .map_or(0, |(i, _)| i)),
        }
    }
}

/// What a run's rescue did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RescueFigures {
    /// Jobs booked at the resource at the failure, not started, whose
    /// booking reaches into the downtime.
    pub affected: usize,
    /// Jobs still at the resource when they were to start while it was
    /// down, whenever they were booked.
    pub terminated: usize,
    /// Jobs booked at the resource while it was down, beyond the horizon.
    pub later: usize,
    /// Jobs moved to other resources.
    pub moved: usize,
    /// Of those, booked to start after the recovery (moved needlessly).
    pub overhead: usize,
    /// Moves tried (each an admission over the other resources).
    pub tried: usize,
    /// Jobs running at the failure, lost.
    pub lost_running: usize,
}

/// The held jobs a resource that fails can no longer hold: every one
/// (`None`) when it is down, those its `site` names when it `lost` a part.
fn reached(lost: Option<u32>, site: &MemorySite) -> Option<BTreeSet<ReservationId>> {
    lost?;
    Some(site.endangered("broker").unwrap_or_default().into_iter().collect())
}

/// A broker job booked at the resource that fails.
#[derive(Debug, Clone, Copy)]
struct Held {
    start: Time,
    end: Time,
    reservation: ReservationId,
    cores: u32,
    runtime: Duration,
    earliest: Time,
    deadline: Time,
}

/// One failure during a run, and the jobs it concerns.
pub(crate) struct Outage {
    site: usize,
    begins: Time,
    ends: Time,
    step: Duration,
    reach: Duration,
    strategy: Strategy,
    failure: Option<Failure>,
    /// The next step's time.
    next: Time,
    held: BTreeMap<u64, Held>,
    next_id: u64,
    /// Booked starts of the jobs moved away and of those terminated.
    moved: Vec<Time>,
    affected: usize,
    later: usize,
    terminated: usize,
    lost_running: usize,
    tried: usize,
    /// What the rescuing broker knows.
    view: View,
    profile: BookingProfile,
    /// What each site published before the failure made it publish the
    /// rescue's span, given back at the recovery.
    published_before: Vec<Option<Publishing>>,
    /// Processors lost when only a part of the resource fails.
    lost: Option<u32>,
}

impl Outage {
    /// Resource `site` of sites of `capacities` fails at `begins` and is
    /// back at `ends`, wholly or losing `lost` of its processors; the
    /// rescue steps every `step` and reaches `reach` ahead, knowing the
    /// grid as `view` says.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        site: usize,
        (begins, ends): (Time, Time),
        step: Duration,
        reach: Duration,
        strategy: Strategy,
        capacities: &[u32],
        view: View,
        lost: Option<u32>,
    ) -> Outage {
        let steps = (reach.0 / step.0.max(1)).max(1) as usize;
        let capacity = match view {
            View::Central => capacities.iter().sum(),
            View::Local => capacities.get(site).copied().unwrap_or(1),
        };
        Outage {
            site,
            begins,
            ends,
            step,
            reach,
            strategy,
            failure: None,
            next: begins,
            held: BTreeMap::new(),
            next_id: 0,
            moved: Vec::new(),
            affected: 0,
            later: 0,
            terminated: 0,
            lost_running: 0,
            tried: 0,
            view,
            profile: BookingProfile::new(Time(0), step, steps, capacity),
            published_before: Vec::new(),
            lost,
        }
    }

    /// Where new bookings are fenced off while the resource is down: the
    /// resource's index and the first start it may take.
    pub fn fence(&self) -> Option<(usize, Time)> {
        // A resource that lost a part takes work into the rest.
        self.failure
            .as_ref()
            .filter(|f| !f.is_partial())
            .map(|f| (self.site, f.horizon()))
    }

    /// A booking of `cores` over `[start, end)` at `site`, made at `now`
    /// (a local job's too: the load profile counts every booking the
    /// rescuing broker sees).
    pub fn record(&mut self, now: Time, site: usize, cores: u32, start: Time, end: Time) {
        if self.view == View::Central || site == self.site {
            self.profile.record(now, cores, start, end);
        }
    }

    /// A broker job committed at `now`: `(site, reservation, start, end)`
    /// where it went, with its shape and its window.
    pub fn booked(
        &mut self,
        now: Time,
        at: (usize, ReservationId, Time, Time),
        cores: u32,
        runtime: Duration,
        window: (Time, Time),
    ) {
        let (site, reservation, start, end) = at;
        self.record(now, site, cores, start, end);
        if site == self.site {
            self.later += usize::from(self.fence().is_some());
            self.next_id += 1;
            self.held.insert(
                self.next_id,
                Held {
                    start,
                    end,
                    reservation,
                    cores,
                    runtime,
                    earliest: window.0,
                    deadline: window.1,
                },
            );
        }
    }

    /// Runs every step due by `now`: the failure at its time, a rescue step
    /// each slot while the resource is down, the recovery at its end.
    pub fn until(&mut self, now: Time, sites: &mut [MemorySite], net: &mut Network, topo: &Topology, opts: &Options) {
        while self.next <= now && self.next <= self.ends {
            let t = self.next;
            for s in sites.iter_mut() {
                s.advance(t);
            }
            net.advance(t);
            let site = self.site;
            // The part lost, mirrored at every step as a live site mirrors
            // at every reading: it grows into what the rescue moved away.
            if let (Some(cpus), true) = (self.lost, t < self.ends) {
                sites[site].mirror(vec![Occupant {
                    key: "node:lost".into(),
                    start: self.begins,
                    end: self.ends,
                    cpus,
                }]);
            }
            if t == self.begins {
                // What runs at the failure is lost (not where only a part
                // is: its jobs run on); what is booked stays until the
                // rescue moves it or its start comes.
                let partial = self.lost.is_some();
                let lost = &mut self.lost_running;
                self.held.retain(|_, h| {
                    if h.start >= t {
                        return true;
                    }
                    if h.end > t && !partial {
                        *lost += 1;
                        let _ = sites[site].cancel("broker", h.reservation);
                    }
                    false
                });
                let reached = reached(self.lost, &sites[site]);
                self.affected = self
                    .held
                    .values()
                    .filter(|h| h.start < self.ends && reached.as_ref().is_none_or(|r| r.contains(&h.reservation)))
                    .count();
                self.failure = Failure::new(self.strategy, t, self.step, self.reach, Some(self.ends - self.begins))
                    .ok()
                    .map(|f| if partial { f.of_a_part() } else { f });
                self.published_before = sites
                    .iter_mut()
                    .map(|s| {
                        s.publish_availability(Some(Publishing {
                            span: self.reach + self.step,
                            most: usize::MAX,
                        }))
                    })
                    .collect();
            } else {
                // A job whose start came while the resource was down, or
                // could not hold it; one it holds runs.
                let reached = reached(self.lost, &sites[site]);
                let terminated = &mut self.terminated;
                self.held.retain(|_, h| {
                    if h.start >= t {
                        return true;
                    }
                    if reached.as_ref().is_none_or(|r| r.contains(&h.reservation)) {
                        *terminated += 1;
                        let _ = sites[site].cancel("broker", h.reservation);
                    }
                    false
                });
            }
            if t == self.ends {
                self.failure = None;
                if self.lost.is_some() {
                    sites[site].mirror(Vec::new());
                }
                for (s, before) in sites.iter_mut().zip(std::mem::take(&mut self.published_before)) {
                    s.publish_availability(before);
                }
                break;
            }
            self.rescue_step(t, sites, net, topo, opts);
            self.next = t + self.step;
        }
    }

    fn rescue_step(&mut self, t: Time, sites: &mut [MemorySite], net: &mut Network, topo: &Topology, opts: &Options) {
        let Outage {
            site,
            step,
            reach,
            strategy,
            failure,
            held,
            moved,
            tried,
            profile,
            view,
            lost,
            ..
        } = self;
        let Some(failure) = failure else { return };
        // Where a part is lost, the jobs its site can no longer hold.
        let reached = reached(*lost, &sites[*site]);
        let booked: Vec<Booked> = held
            .iter()
            .filter(|(_, h)| reached.as_ref().is_none_or(|r| r.contains(&h.reservation)))
            .map(|(&id, h)| Booked {
                id,
                start: h.start,
                end: h.end,
            })
            .collect();
        // The load-based strategy reads the grid's load as the resources
        // publish it, with what usually arrives in a step.
        let load = matches!(strategy, Strategy::Load { .. }).then(|| {
            let infos: Vec<_> = sites
                .iter()
                .enumerate()
                .filter(|&(k, _)| *view == View::Central || k == *site)
                .filter_map(|(_, s)| s.info().ok())
                .collect();
            let published: Vec<_> = infos
                .iter()
                .filter_map(|i| i.availability.as_ref().map(|a| (a, i.total_slots)))
                .collect();
            let steps = (reach.0 / step.0.max(1)).max(1) as usize;
            combined_load(&booked_load(t, *step, steps, &published), &profile.average(t))
        });
        let opts = Options { now: t, ..opts.clone() };
        let done = failure.step(
            t,
            &booked,
            || load.unwrap_or_default(),
            |b| {
                let Some(h) = held.get(&b.id).copied() else {
                    return false;
                };
                let wf = Workflow {
                    name: format!("rescue-{}", b.id),
                    tasks: vec![Task {
                        id: "job".into(),
                        runtime: h.runtime,
                        cores: h.cores,
                        ..Task::default()
                    }],
                    earliest: Some(h.earliest.max(t)),
                    deadline: Some(h.deadline),
                    ..Workflow::default()
                };
                // Never back to the failed resource.
                let mut fence = None;
                let mut refs = fenced(sites, *site, NEVER, &mut fence);
                let Ok(offer) = admit(&wf, topo, &mut refs, net, "broker", &opts) else {
                    return false;
                };
                if offer.commit("broker", &mut refs, net).is_err() {
                    offer.release("broker", &mut refs, net);
                    return false;
                }
                let _ = refs[*site].cancel("broker", h.reservation);
                if *view == View::Central {
                    for p in &offer.plan.tasks {
                        profile.record(t, h.cores, p.start, p.end);
                    }
                }
                held.remove(&b.id);
                moved.push(h.start);
                true
            },
        );
        *tried += done.tried;
    }

    /// The figures, once the resource is back.
    pub fn figures(&self) -> RescueFigures {
        let overhead = self.moved.iter().filter(|&&s| s >= self.ends).count();
        let affected = self.affected;
        RescueFigures {
            affected,
            terminated: self.terminated,
            later: self.later,
            moved: self.moved.len(),
            overhead,
            tried: self.tried,
            lost_running: self.lost_running,
        }
    }
}
