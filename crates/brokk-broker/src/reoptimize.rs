//! Grid-initiated re-optimization of admitted work ([VRM] 5.4): while the
//! schedule runs, the broker moves its own jobs that have not started, one
//! optimization window (a time frame over the sites) at a time, to where
//! the sites rate the result least fragmented, so that later requests find
//! room. Local jobs are the sites' own and stay where they are.
//!
//! Two searches ([`Search`]):
//! - [`pass`], the thesis's cheapest, re-placement sub-job by sub-job:
//!   each job wholly inside the window is taken off its site and probed for
//!   at every site within the window and its own bounds, its old place
//!   among the candidates, and booked at the best rated; a tie keeps it
//!   where it was. Since its old place is free again when it is probed, a
//!   job always has somewhere to go.
//! - [`full_pass`], the full search of [VRM] 5.4.3 inside the window: every
//!   job inside is taken off at once, and combinations of the places the
//!   sites answer for them are booked and rated by the sites as a whole
//!   ([`grid_fragmentation`]), since answers each rated well can add up to
//!   a schedule rated worse (the thesis's Fig. 5.1). The best combination
//!   is booked, the old schedule unless one is strictly less fragmented.
//!
//! Either way the schedule is never worse for admissions already made.
//!
//! Both search in the sites' shadow schedules ([VRM] 5.4.1, [`Shadows`]):
//! each site answers in the broker's shadow as if the broker's old
//! reservations there were gone, while they stay binding for everyone
//! else, who keep booking meanwhile. What a search leaves in the shadows
//! waits as a [`Trial`] until [`Trial::switch`]: every site prepares (books
//! the new reservations beside the old, or votes no where something booked
//! since no longer lets them fit), and only if all agree do all switch;
//! otherwise all abandon and the old schedule holds everywhere. [`pass`]
//! and [`full_pass`] switch at once, as one broker between two of its
//! events does; [`try_each`] and [`try_full`] leave the switch to the
//! caller, so that others may book in between. A site that keeps no
//! shadows is searched directly: its trial bookings are real, made
//! between two of the broker's events, and the switch has nothing to do.

use brokk_core::{Candidate, Change, Reply, Request, ReservationId};
use brokk_model::{Duration, Job, ResourceInfo, Time};
use serde::{Deserialize, Serialize};

use crate::site::{JobHandle, JobState, Shadows, Site, SiteError};

/// One of the broker's jobs as booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The site's index.
    pub site: usize,
    /// Its reservation there.
    pub reservation: ReservationId,
    /// Its reservation's start.
    pub start: Time,
    /// Its reservation's end.
    pub end: Time,
    /// Processors.
    pub amount: u32,
    /// It may not start before this.
    pub earliest: Time,
    /// It must end by this.
    pub deadline: Time,
}

/// How a window's jobs are searched for better places.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Search {
    /// Sub-job by sub-job, each at its best rated place ([`pass`]).
    #[default]
    Each,
    /// Combinations of every job's places, rated by the grid ([`full_pass`]).
    Full,
}

impl Search {
    /// Whether this is the sub-job by sub-job search (the default, which
    /// a report leaves unsaid).
    pub fn is_each(&self) -> bool {
        *self == Search::Each
    }
}

/// What one window's pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pass {
    /// Jobs wholly inside the window and not started, each taken up.
    pub considered: usize,
    /// Of those, booked elsewhere or at another time.
    pub moved: usize,
    /// A full search stopped at its budget before it had rated every
    /// combination.
    pub cut_short: bool,
    /// A site voted no to the switch, and the old schedule held: nothing
    /// moved.
    pub vetoed: bool,
}

/// Windows of `size` covering `[from, to)`, each starting half a window
/// after the one before, so that every span no longer than half a window
/// lies wholly inside one ([VRM] 5.4.4: windows applied overlapping).
pub fn windows(from: Time, to: Time, size: Duration) -> Vec<(Time, Time)> {
    let size = Duration(size.0.max(2));
    let stride = Duration(size.0 / 2);
    let mut out = Vec::new();
    let mut start = from;
    while start < to {
        out.push((start, start + size));
        start += stride;
    }
    out
}

/// The grid's rating over `window` as probe answers give it ([VRM]
/// 5.4.2 (b)): one minus the sites' mean fragmentation there. Each site
/// is probed for a job of one processor over the window's middle third,
/// whose rating is the fragmentation of exactly the window with that job
/// in it, so a free site rates just under 1 (the probe's own job cuts its
/// room by one processor: 0.875 at 4, 0.99 at 64); a site with no room
/// there at all has nothing left to fragment and rates 1.
pub fn window_rating(window: (Time, Time), sites: &[&mut dyn Site]) -> f64 {
    let fragmented: f64 = sites.iter().map(|s| probed_fragmentation(&**s, window)).sum();
    1.0 - fragmented / sites.len().max(1) as f64
}

/// A site's fragmentation over `window` as its answer to a probe of one
/// processor over the window's middle third rates it (0 where it has no
/// room there).
pub fn probed_fragmentation<S: Site + ?Sized>(site: &S, window: (Time, Time)) -> f64 {
    let third = Duration(((window.1 - window.0).0 / 3).max(1));
    let probe = Request {
        amount: 1,
        duration: third,
        earliest: window.0 + third,
        latest: window.0 + third,
        flexible: false,
    };
    site.probe(&probe, 1)
        .ok()
        .and_then(|c| c.first().map(|c| c.rating))
        .unwrap_or(0.0)
}

/// The sites' mean fragmentation over `window`, each as it rates its own
/// schedule there ([`Site::fragmentation`]): what a full search compares
/// combinations by.
pub fn grid_fragmentation(window: (Time, Time), sites: &[&mut dyn Site]) -> f64 {
    let fragmented: f64 = sites.iter().map(|s| s.fragmentation(window)).sum();
    fragmented / sites.len().max(1) as f64
}

/// Candidates probed per site for a job being re-placed.
const CANDIDATES: usize = 8;

/// Re-places, at `now`, the jobs of `placed` wholly inside `window` that
/// have not started, over `sites`, as `owner`, and switches to the result;
/// `placed` is updated where they go.
pub fn pass(now: Time, window: (Time, Time), placed: &mut [Placed], sites: &mut [&mut dyn Site], owner: &str) -> Pass {
    try_each(now, window, placed, sites, owner).switch(placed, sites, owner)
}

/// [`pass`]'s search, left in the sites' shadows to be switched to.
pub fn try_each(
    now: Time,
    window: (Time, Time),
    placed: &mut [Placed],
    sites: &mut [&mut dyn Site],
    owner: &str,
) -> Trial {
    trial(placed, sites, owner, |placed, sites| {
        each(now, window, placed, sites, owner)
    })
}

/// [`pass`]'s search over `sites` as given.
fn each(now: Time, window: (Time, Time), placed: &mut [Placed], sites: &mut [&mut dyn Site], owner: &str) -> Pass {
    let mut out = Pass::default();
    for i in inside(now, window, placed) {
        let p = placed[i];
        let duration = p.end - p.start;
        let (earliest, latest) = bounds(now, window, &p);
        if sites[p.site].cancel(owner, p.reservation).is_err() {
            continue;
        }
        out.considered += 1;
        // Its old place first: a tie keeps it there.
        let mut best: Option<(f64, usize, Time)> = sites[p.site]
            .probe(&p.request(p.start, p.start), 1)
            .ok()
            .and_then(|c| c.first().map(|c| (c.rating, p.site, c.start)));
        if latest >= earliest {
            for (k, site) in sites.iter().enumerate() {
                for c in site.probe(&p.request(earliest, latest), CANDIDATES).unwrap_or_default() {
                    if best.is_none_or(|(r, ..)| c.rating < r) {
                        best = Some((c.rating, k, c.start));
                    }
                }
            }
        }
        let targets = best.into_iter().map(|(_, k, s)| (k, s)).chain([(p.site, p.start)]);
        for (k, start) in targets {
            if let Ok(Reply::Granted { id, start }) = sites[k].reserve(owner, &p.request(start, start), None) {
                if (k, start) != (p.site, p.start) {
                    out.moved += 1;
                }
                placed[i] = Placed {
                    site: k,
                    reservation: id,
                    start,
                    end: start + duration,
                    ..p
                };
                break;
            }
        }
    }
    out
}

impl Placed {
    /// A request for this job's processors and length, starting between
    /// `earliest` and `latest`.
    fn request(&self, earliest: Time, latest: Time) -> Request {
        Request {
            amount: self.amount,
            duration: self.end - self.start,
            earliest,
            latest,
            flexible: false,
        }
    }
}

/// The jobs of `placed` wholly inside `window` that have not started at
/// `now`, earliest first.
fn inside(now: Time, window: (Time, Time), placed: &[Placed]) -> Vec<usize> {
    let mut inside: Vec<usize> = (0..placed.len())
        .filter(|&i| placed[i].start >= now.max(window.0) && placed[i].end <= window.1)
        .collect();
    inside.sort_by_key(|&i| (placed[i].start, i));
    inside
}

/// The earliest and latest start job `p` may be given inside `window`.
fn bounds(now: Time, window: (Time, Time), p: &Placed) -> (Time, Time) {
    let earliest = p.earliest.max(now).max(window.0);
    let latest = Time(p.deadline.min(window.1).0 - (p.end - p.start).0);
    (earliest, latest)
}

/// Reservations a full search makes in one window, trials included, before
/// it stops and books the best it has rated.
pub const FULL_BUDGET: usize = 20_000;

/// The full search of [VRM] 5.4.3 over the jobs of `placed` wholly inside
/// `window` that have not started at `now`, over `sites`, as `owner`,
/// making at most `budget` trial reservations, and the switch to the
/// result; `placed` is updated where they go.
pub fn full_pass(
    now: Time,
    window: (Time, Time),
    placed: &mut [Placed],
    sites: &mut [&mut dyn Site],
    owner: &str,
    budget: usize,
) -> Pass {
    try_full(now, window, placed, sites, owner, budget).switch(placed, sites, owner)
}

/// [`full_pass`]'s search, left in the sites' shadows to be switched to.
pub fn try_full(
    now: Time,
    window: (Time, Time),
    placed: &mut [Placed],
    sites: &mut [&mut dyn Site],
    owner: &str,
    budget: usize,
) -> Trial {
    trial(placed, sites, owner, |placed, sites| {
        full(now, window, placed, sites, owner, budget)
    })
}

/// [`full_pass`]'s search over `sites` as given.
///
/// Every such job is taken off first, the schedule that holds is booked
/// and rated once, as the one to beat, and given back. Then the jobs are
/// booked one after another, earliest first, each at one of the places the
/// sites answer for it where the jobs before it were put (within the
/// window and its bounds, its old place among them), best rated first.
/// Combinations are tried by how many jobs take a place other than their
/// first that fits (none, then one, then two: a limited discrepancy
/// search), so that a budget spent before the end has tried the
/// combinations nearest the sites' own choices; each whole combination is
/// rated by the sites' mean fragmentation over the window and given back.
/// The best is booked, the old schedule unless one is strictly less
/// fragmented.
fn full(
    now: Time,
    window: (Time, Time),
    placed: &mut [Placed],
    sites: &mut [&mut dyn Site],
    owner: &str,
    budget: usize,
) -> Pass {
    let taken: Vec<usize> = inside(now, window, placed)
        .into_iter()
        .filter(|&i| sites[placed[i].site].cancel(owner, placed[i].reservation).is_ok())
        .collect();
    let jobs: Vec<Placed> = taken.iter().map(|&i| placed[i]).collect();
    let mut out = Pass {
        considered: jobs.len(),
        ..Pass::default()
    };
    if jobs.is_empty() {
        return out;
    }
    let old: Vec<(usize, Time)> = jobs.iter().map(|p| (p.site, p.start)).collect();
    let mut search = Combinations {
        jobs: &jobs,
        now,
        window,
        owner,
        budget,
        made: 0,
        chosen: old.clone(),
        best: None,
    };
    // The schedule that holds is the one to beat.
    if let Some(ids) = book(sites, &jobs, &old, owner) {
        search.made += ids.len();
        search.best = Some((grid_fragmentation(window, sites), old.clone()));
        for (&(site, _), id) in old.iter().zip(ids) {
            let _ = sites[site].cancel(owner, id);
        }
    }
    for away in 0..=jobs.len() {
        search.visit(sites, 0, away);
        if search.made >= budget {
            out.cut_short = true;
            break;
        }
    }
    let choice = search.best.map_or(old.clone(), |(_, c)| c);
    // The switch: the chosen combination whole, or the old schedule.
    let (choice, booked) = match book(sites, &jobs, &choice, owner) {
        Some(ids) => (choice, ids),
        None => {
            let ids = book(sites, &jobs, &old, owner).unwrap_or_default();
            (old, ids)
        }
    };
    for (((&i, j), &(site, start)), id) in taken.iter().zip(&jobs).zip(&choice).zip(booked) {
        if (site, start) != (j.site, j.start) {
            out.moved += 1;
        }
        placed[i] = Placed {
            site,
            reservation: id,
            start,
            end: start + (j.end - j.start),
            ..*j
        };
    }
    out
}

/// Books every job of `jobs` at its place in `choice`, all or none; the
/// reservations in job order.
fn book(
    sites: &mut [&mut dyn Site],
    jobs: &[Placed],
    choice: &[(usize, Time)],
    owner: &str,
) -> Option<Vec<ReservationId>> {
    let mut booked: Vec<(usize, ReservationId)> = Vec::new();
    for (j, &(site, start)) in jobs.iter().zip(choice) {
        match sites[site].reserve(owner, &j.request(start, start), None) {
            Ok(Reply::Granted { id, .. }) => booked.push((site, id)),
            _ => {
                for (site, id) in booked {
                    let _ = sites[site].cancel(owner, id);
                }
                return None;
            }
        }
    }
    Some(booked.into_iter().map(|(_, id)| id).collect())
}

/// A full search's state: the combination being built and the best so far.
struct Combinations<'a> {
    jobs: &'a [Placed],
    now: Time,
    window: (Time, Time),
    owner: &'a str,
    budget: usize,
    /// Trial reservations made.
    made: usize,
    /// The place each job has in the combination being built.
    chosen: Vec<(usize, Time)>,
    /// The least fragmented combination, with its fragmentation.
    best: Option<(f64, Vec<(usize, Time)>)>,
}

impl Combinations<'_> {
    /// Job `j`'s places where the jobs before it are booked now, best
    /// rated first, its old place among them where it fits.
    fn places(&self, sites: &[&mut dyn Site], j: usize) -> Vec<(usize, Time)> {
        let p = &self.jobs[j];
        let (earliest, latest) = bounds(self.now, self.window, p);
        let mut rated: Vec<(f64, usize, Time)> = Vec::new();
        for (k, site) in sites.iter().enumerate() {
            let mut answers = Vec::new();
            if k == p.site {
                answers = site.probe(&p.request(p.start, p.start), 1).unwrap_or_default();
            }
            if latest >= earliest {
                answers.extend(site.probe(&p.request(earliest, latest), CANDIDATES).unwrap_or_default());
            }
            rated.extend(answers.into_iter().map(|c| (c.rating, k, c.start)));
        }
        rated.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut places: Vec<(usize, Time)> = Vec::new();
        for (_, k, start) in rated {
            if !places.contains(&(k, start)) {
                places.push((k, start));
            }
        }
        places
    }

    /// Books job `j` and the jobs after it at each combination of places in
    /// which exactly `away` of them take a place other than their first
    /// that fits, rating each whole combination.
    fn visit(&mut self, sites: &mut [&mut dyn Site], j: usize, away: usize) {
        let left = self.jobs.len() - j;
        if left == 0 {
            let fragmented = grid_fragmentation(self.window, sites);
            if self.best.as_ref().is_none_or(|(f, _)| fragmented < *f) {
                self.best = Some((fragmented, self.chosen.clone()));
            }
            return;
        }
        let mut fitted = false;
        for (site, start) in self.places(sites, j) {
            let moves = usize::from(fitted);
            if moves > away || self.made >= self.budget {
                return;
            }
            self.made += 1;
            let request = self.jobs[j].request(start, start);
            if let Ok(Reply::Granted { id, .. }) = sites[site].reserve(self.owner, &request, None) {
                fitted = true;
                if away - moves < left {
                    self.chosen[j] = (site, start);
                    self.visit(sites, j + 1, away - moves);
                }
                let _ = sites[site].cancel(self.owner, id);
            }
        }
    }
}

/// A search's result, waiting in the sites' shadows for the switch.
#[must_use = "a trial holds the sites' shadows open until it is switched"]
#[derive(Debug)]
pub struct Trial {
    /// The jobs as they were booked before the search.
    before: Vec<Placed>,
    /// What the search did.
    pass: Pass,
    /// Whether it searched in shadows (else its bookings are real already).
    shadowed: bool,
}

/// Opens `owner`'s shadow at every site and runs `search` in them; where a
/// site keeps no shadows, `search` runs on the sites themselves.
fn trial(
    placed: &mut [Placed],
    sites: &mut [&mut dyn Site],
    owner: &str,
    search: impl FnOnce(&mut [Placed], &mut [&mut dyn Site]) -> Pass,
) -> Trial {
    let before = placed.to_vec();
    let mut opened = 0;
    for s in sites.iter_mut() {
        match s.shadows_mut().map(|sh| sh.open_shadow(owner)) {
            Some(Ok(())) => opened += 1,
            _ => break,
        }
    }
    let shadowed = opened == sites.len();
    let pass = if shadowed {
        let mut views: Vec<InShadow> = sites.iter_mut().map(|s| InShadow { site: &mut **s, owner }).collect();
        let mut views: Vec<&mut dyn Site> = views.iter_mut().map(|v| v as &mut dyn Site).collect();
        search(placed, &mut views)
    } else {
        abandon(&mut sites[..opened], owner);
        search(placed, sites)
    };
    Trial { before, pass, shadowed }
}

fn abandon(sites: &mut [&mut dyn Site], owner: &str) {
    for s in sites {
        if let Some(sh) = s.shadows_mut() {
            let _ = sh.abandon_shadow(owner);
        }
    }
}

impl Trial {
    /// Jobs the search took up: none, and the switch has nothing to do.
    pub fn considered(&self) -> usize {
        self.pass.considered
    }

    /// Switches every site to what the search left in `owner`'s shadows by
    /// a two-phase commit: all prepare, then all switch and `placed` takes
    /// the new reservations' ids; if one votes no (or cannot be reached),
    /// all abandon and the jobs `placed` had at the search are as they were
    /// (it may have grown since: jobs booked meanwhile stay as they are).
    pub fn switch(self, placed: &mut [Placed], sites: &mut [&mut dyn Site], owner: &str) -> Pass {
        let mut out = self.pass;
        if !self.shadowed {
            return out;
        }
        let mut ids = Vec::with_capacity(sites.len());
        for s in sites.iter_mut() {
            match s.shadows_mut().map(|sh| sh.prepare_switch(owner)) {
                Some(Ok(map)) => ids.push(map),
                _ => break,
            }
        }
        if ids.len() < sites.len() {
            abandon(sites, owner);
            placed[..self.before.len()].copy_from_slice(&self.before);
            out.moved = 0;
            out.vetoed = true;
            return out;
        }
        for s in sites.iter_mut() {
            // Cannot fail for want of room: prepare booked both schedules.
            if let Some(sh) = s.shadows_mut() {
                let _ = sh.switch(owner);
            }
        }
        for p in placed.iter_mut() {
            if let Some(&(_, id)) = ids[p.site].iter().find(|(trial, _)| *trial == p.reservation) {
                p.reservation = id;
            }
        }
        out
    }
}

/// `owner`'s shadow at a site, as the searches see a site: probes,
/// reservations, cancellations and the rating go to the shadow.
struct InShadow<'a> {
    site: &'a mut dyn Site,
    owner: &'a str,
}

impl InShadow<'_> {
    fn shadows(&self) -> Result<&dyn Shadows, SiteError> {
        self.site.shadows().ok_or_else(|| self.only())
    }

    fn shadows_mut(&mut self) -> Result<&mut dyn Shadows, SiteError> {
        let refused = self.only();
        self.site.shadows_mut().ok_or(refused)
    }

    fn only(&self) -> SiteError {
        SiteError::Refused {
            site: self.site.endpoint().to_string(),
            reason: "a shadow schedule takes only probes, reservations and cancellations".into(),
        }
    }
}

impl Site for InShadow<'_> {
    fn endpoint(&self) -> &str {
        self.site.endpoint()
    }
    fn info(&self) -> Result<ResourceInfo, SiteError> {
        self.site.info()
    }
    fn probe(&self, req: &Request, k: usize) -> Result<Vec<Candidate>, SiteError> {
        self.shadows()?.probe_shadow(self.owner, req, k)
    }
    fn reserve(&mut self, owner: &str, req: &Request, _hold: Option<Time>) -> Result<Reply, SiteError> {
        self.shadows_mut()?.reserve_in_shadow(owner, req)
    }
    fn modify(&mut self, _: &str, _: ReservationId, _: Change) -> Result<Time, SiteError> {
        Err(self.only())
    }
    fn commit(&mut self, _: &str, _: ReservationId) -> Result<(), SiteError> {
        Err(self.only())
    }
    fn cancel(&mut self, owner: &str, id: ReservationId) -> Result<(), SiteError> {
        self.shadows_mut()?.cancel_in_shadow(owner, id)
    }
    fn submit(&mut self, _: &str, _: &Job, _: Option<ReservationId>) -> Result<JobHandle, SiteError> {
        Err(self.only())
    }
    fn fragmentation(&self, window: (Time, Time)) -> f64 {
        match self.shadows().and_then(|s| s.rate_shadow(self.owner, window)) {
            Ok(f) => f,
            Err(_) => self.site.fragmentation(window),
        }
    }
    fn status(&self, _: &JobHandle) -> Result<JobState, SiteError> {
        Err(self.only())
    }
    fn cancel_job(&mut self, _: &str, _: &JobHandle) -> Result<(), SiteError> {
        Err(self.only())
    }
}

#[cfg(test)]
mod tests;
