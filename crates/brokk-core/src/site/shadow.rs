//! Shadow schedules ([VRM] 5.4.1): a client (a broker re-optimizing its
//! admitted work) tries out a new arrangement of its own reservations while
//! the old one stays binding, then switches to it by a two-phase commit
//! across every site it touched.
//!
//! A client's shadow is the site's schedule with the client's changes in
//! it: reservations of its own it took off, and trial ones it made. The
//! shadow answers probes, reservations and a rating against local jobs,
//! other clients' reservations and its own trial ones, never against the
//! old reservations it took off. Everyone else keeps booking against the
//! real schedule meanwhile, and the shadow follows: it is made again from
//! the real schedule and the client's changes whenever the real one has
//! changed. Each client has at most one shadow, so several brokers can
//! optimize at one site at once.
//!
//! Prepare (the first phase) books the shadow's new reservations in the
//! real schedule and, wherever the old ones need capacity the new ones do
//! not cover, holds that too, so that both schedules can be kept until the
//! second phase (the thesis: what the two do not share is booked twice
//! meanwhile). The site votes no, changing nothing, when a new reservation
//! no longer fits beside what others booked since the shadow opened, or an
//! old one has been taken up by a job. Switch (the second phase) ends the
//! old reservations and lets the holds go; it cannot fail for want of
//! room. Abandoning, before or after prepare, leaves the old schedule as it
//! was.
//!
//! A shadow lives in the site's memory only: the new reservations are
//! saved when prepared and the old ones ended when switched, so a site
//! restarted between the phases keeps both, and the client's switch there
//! is refused.

use brokk_model::Time;
use brokk_planner::{BTree, Candidate, Planner, Reply, Request, Reservation, ReservationId};

use super::{not_found, SiteCore};
use crate::effect::{Effect, Ended, Manager};
use crate::error::CoreError;

/// Ids of a shadow's trial reservations start here, far above any the real
/// schedule issues, so that the two never meet.
const SHADOW_IDS: u64 = 1 << 62;

/// One client's shadow of the site's schedule.
#[derive(Debug, Clone)]
pub(super) struct Shadow {
    /// The real schedule with the client's changes in it, as of `synced`.
    schedule: Planner<BTree>,
    /// How many changes the real schedule had when `schedule` was made.
    synced: u64,
    /// The client's reservations taken off, as they were.
    removed: Vec<Reservation>,
    /// Trial reservations made in the shadow, with shadow ids.
    added: Vec<Reservation>,
    /// The next trial's id: none is issued twice, even after one left.
    next_trial: u64,
    /// What the first phase booked, once prepared.
    prepared: Option<Prepared>,
}

/// What a prepared switch holds in the real schedule.
#[derive(Debug, Clone)]
struct Prepared {
    /// The new reservations, by the id each had in the shadow.
    new: Vec<(ReservationId, ReservationId)>,
    /// Capacity the old reservations still need beside the new ones.
    held: Vec<ReservationId>,
}

/// The owner of the capacity a prepared switch holds for `who`'s old
/// reservations: no identity maps to a name in parentheses, so no caller
/// can touch it.
fn holder(who: &str) -> String {
    format!("(switch of {who})")
}

impl Shadow {
    /// `real` with this shadow's changes in it; also the trials that no
    /// longer fit there (left out of it).
    fn made(&self, real: &Planner<BTree>) -> (Planner<BTree>, Vec<ReservationId>) {
        let mut schedule = real.clone();
        schedule.issue_ids_from(self.next_trial);
        for r in &self.removed {
            let _ = schedule.cancel(r.id);
        }
        let misfits = self
            .added
            .iter()
            .filter(|a| schedule.restore(a).is_err())
            .map(|a| a.id)
            .collect();
        (schedule, misfits)
    }

    /// The shadow as it stands against `real`: its own copy while the
    /// real schedule has not changed since it was made, else made again.
    fn current(&self, real: &Planner<BTree>) -> std::borrow::Cow<'_, Planner<BTree>> {
        match self.synced == real.changes() {
            true => std::borrow::Cow::Borrowed(&self.schedule),
            false => std::borrow::Cow::Owned(self.made(real).0),
        }
    }
}

impl SiteCore {
    /// Opens `who`'s shadow schedule: a copy of the schedule now, in which
    /// `who` may take off its own reservations and try others. One already
    /// open and not prepared is replaced.
    pub fn shadow_open(&mut self, now: Time, who: &str) -> Result<(), CoreError> {
        self.expire(now);
        if self.shadows.get(who).is_some_and(|s| s.prepared.is_some()) {
            return Err(prepared_already(who));
        }
        let shadow = Shadow {
            schedule: {
                let mut s = self.planner.clone();
                s.issue_ids_from(SHADOW_IDS);
                s
            },
            synced: self.planner.changes(),
            removed: Vec::new(),
            added: Vec::new(),
            next_trial: SHADOW_IDS,
            prepared: None,
        };
        self.shadows.insert(who.to_string(), shadow);
        Ok(())
    }

    /// Candidates for `req` in `who`'s shadow (at most `k`, clamped to
    /// 1..=100); none when its window closes within the site's lead.
    pub fn shadow_probe(&self, now: Time, who: &str, req: &Request, k: usize) -> Result<Vec<Candidate>, CoreError> {
        let shadow = self.open_shadow(who)?;
        let Ok(req) = self.after_lead(now, req) else {
            return Ok(Vec::new());
        };
        let answer = shadow.current(&self.planner).probe(&req, k.clamp(1, 100));
        answer.map_err(|reason| CoreError::NotGranted(Reply::Never { reason }))
    }

    /// A trial reservation for `req` in `who`'s shadow; binding only once
    /// switched to.
    pub fn shadow_reserve(&mut self, now: Time, who: &str, req: &Request) -> Result<Reservation, CoreError> {
        self.sync_shadow(now, who)?;
        let req = self.after_lead(now, req).map_err(CoreError::NotGranted)?;
        let shadow = self.unprepared_shadow(who)?;
        match shadow.schedule.reserve(who, &req, None) {
            Reply::Granted { id, .. } => {
                let r = shadow.schedule.get(id).ok_or_else(|| not_found(id))?;
                shadow.next_trial = id.0 + 1;
                shadow.added.push(r.clone());
                Ok(r)
            }
            other => Err(CoreError::NotGranted(other)),
        }
    }

    /// Takes reservation `id` off `who`'s shadow: a trial one goes, and
    /// one of the real schedule's is left out of the shadow (it stays
    /// binding until the switch). One a job has taken up cannot go.
    pub fn shadow_cancel(&mut self, now: Time, who: &str, id: ReservationId) -> Result<(), CoreError> {
        self.sync_shadow(now, who)?;
        let real = match self.unprepared_shadow(who)?.added.iter().any(|a| a.id == id) {
            true => None,
            false => {
                let r = self.owned(who, id)?;
                self.free_of_jobs(id, "in use by")?;
                Some(r)
            }
        };
        let shadow = self.unprepared_shadow(who)?;
        match real {
            None => shadow.added.retain(|a| a.id != id),
            Some(r) if shadow.removed.iter().any(|x| x.id == id) => return Err(not_found(r.id)),
            Some(r) => shadow.removed.push(r),
        }
        shadow.schedule.cancel(id).map(|_| ()).map_err(|_| not_found(id))
    }

    /// How fragmented `who`'s shadow is over `window` ([VRM] 2.2.3): the
    /// rating of the shadow the thesis's broker asks for.
    pub fn shadow_fragmentation(&self, who: &str, window: (Time, Time)) -> Result<f64, CoreError> {
        let shadow = self.open_shadow(who)?;
        Ok(shadow.current(&self.planner).fragmentation(window.0, window.1))
    }

    /// The first phase of the switch to `who`'s shadow: books its new
    /// reservations in the real schedule beside the old ones and answers
    /// each one's id there, by its id in the shadow; or votes no, with the
    /// reason, and nothing changes.
    pub fn shadow_prepare(&mut self, now: Time, who: &str) -> Result<Vec<(ReservationId, ReservationId)>, CoreError> {
        self.expire(now);
        let shadow = self.open_shadow(who)?;
        if shadow.prepared.is_some() {
            return Err(prepared_already(who));
        }
        let (removed, added) = (shadow.removed.clone(), shadow.added.clone());
        for r in &removed {
            if self.planner.get(r.id).is_some() {
                self.free_of_jobs(r.id, "now taken up by")?;
            }
        }
        // The switch moves nothing that has begun, and to nothing past.
        if let Some(r) = removed.iter().chain(&added).find(|r| r.start < now) {
            return Err(CoreError::Conflict(format!(
                "the shadow moves a reservation from or to {}, which has passed",
                r.start
            )));
        }
        // The old reservations come off the real schedule, the new ones go
        // in at their exact places, and the old ones' capacity the new do
        // not cover is held again.
        let old: Vec<Reservation> = removed.iter().filter_map(|r| self.planner.get(r.id)).collect();
        for r in &old {
            let _ = self.planner.cancel(r.id);
        }
        let mut new = Vec::new();
        let mut refused = None;
        for a in &added {
            // Placed only where free as it stands: a switch moves no one
            // else's reservation.
            match self.place_exactly(who, a.amount, a.start, a.end) {
                Some(id) => new.push((a.id, id)),
                None => {
                    refused = Some(a);
                    break;
                }
            }
        }
        let mut held = Vec::new();
        if refused.is_none() {
            for (start, end, amount) in uncovered(&old, &added) {
                // Always free: the old reservations fitted there.
                held.extend(self.place_exactly(&holder(who), amount, start, end));
            }
        }
        if let Some(a) = refused {
            for id in new.iter().map(|&(_, id)| id).chain(held) {
                let _ = self.planner.cancel(id);
            }
            for r in &old {
                let _ = self.planner.restore(r);
            }
            return Err(CoreError::Conflict(format!(
                "the shadow's reservation of {} from {} to {} no longer fits beside what was booked since it \
                 opened",
                a.amount, a.start, a.end
            )));
        }
        for &(_, id) in &new {
            self.out.push(Effect::SaveReservation(id));
            self.out.push(Effect::Manager(Manager::Reserve(id)));
        }
        if let Some(s) = self.shadows.get_mut(who) {
            s.prepared = Some(Prepared { new: new.clone(), held });
            s.removed = old;
        }
        Ok(new)
    }

    /// The second phase: `who`'s old reservations end and the new ones
    /// prepared stand alone.
    pub fn shadow_switch(&mut self, now: Time, who: &str) -> Result<(), CoreError> {
        let (removed, p) = match self.shadows.remove(who) {
            None => return Err(no_shadow(who)),
            Some(Shadow {
                removed,
                prepared: Some(p),
                ..
            }) => (removed, p),
            Some(unprepared) => {
                self.shadows.insert(who.to_string(), unprepared);
                return Err(CoreError::Conflict(format!(
                    "{who}'s shadow is not prepared: prepare it first"
                )));
            }
        };
        for id in p.held {
            let _ = self.planner.cancel(id);
        }
        let old: Vec<ReservationId> = removed.iter().map(|r| r.id).collect();
        if !old.is_empty() {
            self.end(old.clone(), Ended::Cancelled);
            self.out.push(Effect::Manager(Manager::Release(old)));
        }
        self.compress(now);
        Ok(())
    }

    /// Closes `who`'s shadow without switching: a prepared one's new
    /// reservations go and the old ones are as they were.
    pub fn shadow_abandon(&mut self, now: Time, who: &str) -> Result<(), CoreError> {
        let Some(shadow) = self.shadows.remove(who) else {
            return Err(no_shadow(who));
        };
        if let Some(p) = shadow.prepared {
            let new: Vec<ReservationId> = p.new.iter().map(|&(_, id)| id).collect();
            for &id in new.iter().chain(&p.held) {
                let _ = self.planner.cancel(id);
            }
            for r in &shadow.removed {
                let _ = self.planner.restore(r);
            }
            if !new.is_empty() {
                self.end(new.clone(), Ended::Cancelled);
                self.out.push(Effect::Manager(Manager::Release(new)));
            }
            self.compress(now);
        }
        Ok(())
    }

    /// A committed reservation of `who` over exactly `[start, end)`, made
    /// only where that is free now.
    fn place_exactly(&mut self, who: &str, amount: u32, start: Time, end: Time) -> Option<ReservationId> {
        if !self.planner.is_free(amount, start, end - start) {
            return None;
        }
        match self.planner.reserve(who, &exactly(amount, start, end), None) {
            Reply::Granted { id, .. } => Some(id),
            _ => None,
        }
    }

    fn open_shadow(&self, who: &str) -> Result<&Shadow, CoreError> {
        self.shadows.get(who).ok_or_else(|| no_shadow(who))
    }

    fn unprepared_shadow(&mut self, who: &str) -> Result<&mut Shadow, CoreError> {
        match self.shadows.get_mut(who) {
            None => Err(no_shadow(who)),
            Some(s) if s.prepared.is_some() => Err(prepared_already(who)),
            Some(s) => Ok(s),
        }
    }

    /// Makes `who`'s shadow again from the real schedule where that has
    /// changed since; a trial reservation that no longer fits leaves it.
    fn sync_shadow(&mut self, now: Time, who: &str) -> Result<(), CoreError> {
        self.expire(now);
        let changes = self.planner.changes();
        let shadow = self.shadows.get_mut(who).ok_or_else(|| no_shadow(who))?;
        if shadow.synced != changes && shadow.prepared.is_none() {
            let (schedule, misfits) = shadow.made(&self.planner);
            shadow.added.retain(|a| !misfits.contains(&a.id));
            shadow.schedule = schedule;
            shadow.synced = changes;
        }
        Ok(())
    }
}

/// A request for `amount` over exactly `[start, end)`.
fn exactly(amount: u32, start: Time, end: Time) -> Request {
    Request {
        amount,
        duration: end - start,
        earliest: start,
        latest: start,
        flexible: false,
    }
}

/// Where the reservations `old` need more than `new` give, as (start, end,
/// amount) spans in time order.
fn uncovered(old: &[Reservation], new: &[Reservation]) -> Vec<(Time, Time, u32)> {
    let mut cuts: Vec<Time> = old.iter().chain(new).flat_map(|r| [r.start, r.end]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let at = |rs: &[Reservation], t: Time| -> i64 {
        rs.iter()
            .filter(|r| r.start <= t && t < r.end)
            .map(|r| i64::from(r.amount))
            .sum()
    };
    let mut spans: Vec<(Time, Time, u32)> = Vec::new();
    for w in cuts.windows(2) {
        let short = at(old, w[0]) - at(new, w[0]);
        if short <= 0 {
            continue;
        }
        let amount = short as u32;
        match spans.last_mut() {
            Some(last) if last.1 == w[0] && last.2 == amount => last.1 = w[1],
            _ => spans.push((w[0], w[1], amount)),
        }
    }
    spans
}

fn no_shadow(who: &str) -> CoreError {
    CoreError::NotFound(format!("a shadow schedule of {who}"))
}

fn prepared_already(who: &str) -> CoreError {
    CoreError::Conflict(format!(
        "{who}'s shadow is prepared to switch: switch or abandon it first"
    ))
}

#[cfg(test)]
mod tests;
