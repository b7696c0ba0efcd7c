//! The genetic search of [VRM] 4.5: every task is probed at every site able
//! to run it for up to five candidate starts inside the workflow's window,
//! each the site's first free slot from one of its predecessors' candidate
//! ends (with the transfer between two sites), so that candidates chain as
//! a schedule would rather than spread over the window;
//! a co-allocated task is probed for its class's window and for frames
//! twice as long (Fig. 4.5), so that members at sites whose free times
//! differ can still start together where their frames overlap;
//! a chromosome picks one candidate per task; its fitness is the number of
//! violated constraints (precedence with transfer time at the mean
//! bandwidth, a co-allocated task whose frame does not hold its class's
//! one window, more processors at a site than it
//! has among the chosen candidates, or than it publishes free where chosen
//! candidates overlap), plus a bound on the ratings, when it
//! violates any, else the sum of the candidates' ratings (the fragmentation
//! each leaves). The first string without violations is booked task by
//! task with its transfers; a booking the sites refuse (their local load
//! moved on since the probe) rejects the workflow.
//!
//! HEFTSync's plan seeds the population, as the thesis seeds its own: it
//! is made first (and given back), each task's place in it becomes one
//! more candidate, and the first string is that plan; a chosen string the
//! sites refuse is repaired by HEFTSync's own booking instead (made again
//! as it was made first), so the search admits every workflow HEFTSync
//! would admit in its place.
//!
//! Operators, where the thesis leaves them open: a population of 50,
//! tournaments of two, uniform crossover with probability 0.9, each gene
//! mutated with probability 1/|J| to a random candidate, one elite; a
//! budget of generations instead of wall time, so runs repeat exactly: at
//! most 200 until a string without violations, then 20 more for a better
//! rating. Stopping at the first such string rejected more workflows than
//! HEFTSync at low load (7.1% against 5.5% in Brokk's Fig. 4.10 runs); the
//! 20 more, about 45 times HEFTSync's time, reject at most as many at every
//! load, as the thesis finds with 20 times HEFTSync's time.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use brokk_model::{Availability, Time};

use super::booking::Booking;
use super::RejectReason;

const POPULATION: usize = 50;
const CANDIDATES: usize = 5;
const CROSSOVER: f64 = 0.9;
/// Generations the search goes on after its first string without
/// violations, for a better rating.
const REFINE: usize = 20;
/// A co-allocated task is also probed for frames this many times its
/// class's window ([VRM] Fig. 4.5): two sites rarely offer the very same
/// start, but longer frames that overlap by the window hold the
/// co-allocation where they overlap.
const STRETCH: i64 = 2;

/// One candidate placement of a task.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    site: usize,
    start: i64,
    duration: i64,
    rating: f64,
    /// How long the site holds free from `start`: `duration`, or a longer
    /// frame inside which a co-allocated task may start later.
    frame: i64,
}

/// Where and how long the chosen candidates (`at`) run: each from its own
/// start for its own length; a co-allocation's members in one window, from
/// the latest of their starts ([VRM] Fig. 4.5: where their frames overlap)
/// for the longest of their lengths. With the number of members whose
/// frame does not hold that window.
fn placements(classes: &[Vec<usize>], n: usize, at: impl Fn(usize) -> Candidate) -> (Vec<(i64, i64)>, usize) {
    let mut placed: Vec<(i64, i64)> = (0..n).map(|t| (at(t).start, at(t).duration)).collect();
    let mut outside = 0;
    for members in classes.iter().filter(|m| m.len() > 1) {
        let together = members.iter().map(|&m| at(m).start).max().unwrap_or(0);
        let length = members.iter().map(|&m| at(m).duration).max().unwrap_or(0);
        for &m in members {
            let x = at(m);
            outside += usize::from(x.start + x.frame < together + length);
            placed[m] = (together, length);
        }
    }
    (placed, outside)
}

/// How many of the `chosen` tasks (site, start, duration, cores) start at a
/// moment when the chosen tasks running at their site then (start <= t <
/// end) use more processors than it has. The cores of those started by
/// then less those ended by then, each read from a sorted list with its
/// running sum: n log n for a string of n tasks, not n^2 (a thousand-task
/// workflow once took 20 s to admit).
fn over_capacity(chosen: &[(usize, i64, i64, u32)], capacity: &[u32]) -> usize {
    let mut starts: Vec<Vec<(i64, u64)>> = vec![Vec::new(); capacity.len()];
    let mut ends: Vec<Vec<(i64, u64)>> = vec![Vec::new(); capacity.len()];
    for &(site, start, duration, cores) in chosen {
        starts[site].push((start, u64::from(cores)));
        ends[site].push((start + duration, u64::from(cores)));
    }
    let summed = |mut edges: Vec<(i64, u64)>| -> (Vec<i64>, Vec<u64>) {
        edges.sort_unstable();
        let mut total = 0;
        edges
            .into_iter()
            .map(|(time, cores)| {
                total += cores;
                (time, total)
            })
            .unzip()
    };
    let starts: Vec<(Vec<i64>, Vec<u64>)> = starts.into_iter().map(summed).collect();
    let ends: Vec<(Vec<i64>, Vec<u64>)> = ends.into_iter().map(summed).collect();
    // The running sum over the entries at or before `time`.
    let by = |(times, sums): &(Vec<i64>, Vec<u64>), time: i64| -> u64 {
        match times.partition_point(|&x| x <= time) {
            0 => 0,
            k => sums[k - 1],
        }
    };
    chosen
        .iter()
        .filter(|&&(site, start, _, _)| by(&starts[site], start) - by(&ends[site], start) > u64::from(capacity[site]))
        .count()
}

/// How many stretches of time at a site see two or more of the `chosen`
/// tasks (site, start, duration, cores) together use more processors than
/// the site publishes free there (`free[site]`, its capacity beyond what
/// it publishes). Each candidate alone fits where it was probed, so only
/// where chosen tasks overlap can they fail together: the thesis's check
/// against free capacity, which the total capacity above cannot make.
fn over_free(chosen: &[(usize, i64, i64, u32)], free: &[Option<(Availability, u32)>]) -> usize {
    let mut count = 0;
    for (site, published) in free.iter().enumerate() {
        let Some((av, capacity)) = published else { continue };
        let mut edges: Vec<(i64, i64)> = chosen
            .iter()
            .filter(|c| c.0 == site && c.2 > 0)
            .flat_map(|&(_, start, d, cores)| [(start, i64::from(cores)), (start + d, -i64::from(cores))])
            .collect();
        if edges.len() < 4 {
            continue;
        }
        edges.sort_unstable();
        let (mut load, mut active) = (0i64, 0usize);
        for (i, &(t, delta)) in edges.iter().enumerate() {
            load += delta;
            active = if delta > 0 { active + 1 } else { active - 1 };
            let next = edges.get(i + 1).map_or(t, |e| e.0);
            if active >= 2 && next > t && load > i64::from(av.least_free(Time(t), Time(next), *capacity)) {
                count += 1;
            }
        }
    }
    count
}

/// Searches for `generations` generations (seeded by `seed`) and books the
/// first string without violations.
pub(super) fn schedule(b: &mut Booking, generations: usize, seed: u64) -> bool {
    let dag = b.dag;
    let n = dag.nodes.len();
    // Co-allocated tasks are probed for one window, their class's longest
    // duration anywhere, so equal starts give equal windows.
    let shared: &Booking = b;
    let window: Vec<i64> = dag
        .classes
        .iter()
        .map(|members| {
            members
                .iter()
                .flat_map(|&m| (0..shared.site_count()).filter_map(move |s| shared.duration(m, s)))
                .max()
                .unwrap_or(1)
        })
        .collect();
    let seed_plan = heftsync_plan(b);
    let transfer = |bytes: u64| b.topo.mean_transfer(bytes).ceil() as i64;
    let mut options: Vec<Vec<Candidate>> = vec![Vec::new(); n];
    // Classes after their parents: a task's candidate starts follow from
    // its predecessors' candidate ends (with the transfer where the two
    // sites differ), each the first free slot the site has from there on.
    for class in dag.topological(|c| -(c as f64)) {
        let members = &dag.classes[class];
        for site in 0..b.site_count() {
            // The parents of every member: co-allocated tasks are probed
            // from the same times, so that their candidates can coincide.
            let parents: Vec<(usize, i64)> = members
                .iter()
                .flat_map(|&m| dag.nodes[m].parents.iter().map(|&(p, bytes)| (p, transfer(bytes))))
                .collect();
            let gap = |c: &Candidate, move_time: i64| if c.site == site { 0 } else { move_time };
            // No start before every parent can have ended.
            let bound = parents
                .iter()
                .map(|&(p, move_time)| {
                    options[p]
                        .iter()
                        .map(|c| c.start + c.duration + gap(c, move_time))
                        .min()
                        .unwrap_or(b.earliest.0)
                })
                .max()
                .unwrap_or(b.earliest.0)
                .max(b.earliest.0);
            let mut anchors: Vec<i64> = parents
                .iter()
                .flat_map(|&(p, move_time)| {
                    options[p]
                        .iter()
                        .map(move |c| (c.start + c.duration + gap(c, move_time)).max(bound))
                })
                .chain([bound])
                .collect();
            anchors.sort_unstable();
            anchors.dedup();
            // At most CANDIDATES of them, spread from the first to the last.
            let picked: Vec<i64> = match anchors.len() {
                k if k <= CANDIDATES => anchors,
                k => (0..CANDIDATES)
                    .map(|i| anchors[i * (k - 1) / (CANDIDATES - 1)])
                    .collect(),
            };
            for &t in members {
                let Some(own) = b.duration(t, site) else { continue };
                let d = if members.len() > 1 { window[class] } else { own };
                let latest = b.latest_start(d);
                // A co-allocated task: its window, and longer frames.
                let frames: &[i64] = if members.len() > 1 { &[d, STRETCH * d] } else { &[d] };
                for &frame in frames {
                    let mut starts: Vec<i64> = Vec::new();
                    for &from in &picked {
                        for (start, rating) in b.probe_many(t, site, frame, from, latest, 1) {
                            if !starts.contains(&start) {
                                starts.push(start);
                                options[t].push(Candidate {
                                    site,
                                    start,
                                    duration: d,
                                    rating,
                                    frame,
                                });
                            }
                        }
                    }
                }
            }
        }
    }
    for (t, mine) in options.iter_mut().enumerate() {
        if let Some(&(site, start, duration)) = seed_plan.as_ref().and_then(|p| p.get(t)) {
            // Rated as the site rates that very start.
            let rated = b.probe_many(t, site, duration, start, start, 1);
            let rating = rated.first().map_or(0.0, |r| r.1);
            mine.push(Candidate {
                site,
                start,
                duration,
                rating,
                frame: duration,
            });
        }
        if mine.is_empty() {
            b.failure = Some(RejectReason::NoRoom {
                task: dag.nodes[t].id.clone(),
            });
            return false;
        }
    }
    let edges: Vec<(usize, usize, i64)> = (0..n)
        .flat_map(|c| dag.nodes[c].parents.iter().map(move |&(p, bytes)| (p, c, bytes)))
        .map(|(p, c, bytes)| (p, c, transfer(bytes)))
        .collect();
    let capacity: Vec<u32> = (0..b.site_count()).map(|s| b.topo.sites[s].capacity).collect();
    // What each site publishes free, once for the whole search.
    let free: Vec<Option<(Availability, u32)>> = (0..b.site_count())
        .map(|s| b.published_free(s).map(|av| (av, capacity[s])))
        .collect();
    let violations = |genes: &[usize]| -> usize {
        let at = |t: usize| options[t][genes[t]];
        // Co-allocated tasks start together, each inside its frame.
        let (placed, outside) = placements(&dag.classes, n, at);
        let mut v = outside;
        for &(p, c, move_time) in &edges {
            let gap = if at(p).site == at(c).site { 0 } else { move_time };
            v += usize::from(placed[p].0 + placed[p].1 + gap > placed[c].0);
        }
        let chosen: Vec<(usize, i64, i64, u32)> = (0..n)
            .map(|t| (at(t).site, placed[t].0, placed[t].1, dag.nodes[t].cores))
            .collect();
        v += over_capacity(&chosen, &capacity);
        v += over_free(&chosen, &free);
        v
    };
    let bound = n as f64 + 1.0;
    let fitness = |genes: &[usize]| -> f64 {
        match violations(genes) {
            0 => genes.iter().enumerate().map(|(t, &g)| options[t][g].rating).sum(),
            v => v as f64 + bound,
        }
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // HEFTSync's plan (each task's last candidate) is the first string,
    // the earliest candidate of every task the next (a list schedule's
    // guess); the rest are random.
    let seeded = usize::from(seed_plan.is_some());
    let mut population: Vec<Vec<usize>> = (0..POPULATION)
        .map(|i| {
            (0..n)
                .map(|t| match i {
                    0 if seeded == 1 => options[t].len() - 1,
                    i if i == seeded => 0,
                    _ => rng.gen_range(0..options[t].len()),
                })
                .collect()
        })
        .collect();
    let mut scores: Vec<f64> = population.iter().map(|g| fitness(g)).collect();
    let mut found = None;
    let mut until = generations;
    for generation in 0..=generations {
        let best = (0..POPULATION)
            .min_by(|&x, &y| scores[x].total_cmp(&scores[y]))
            .unwrap_or(0);
        if scores[best] < bound {
            // Feasible: the search goes on a while, for a better rating.
            if found.is_none() {
                until = (generation + REFINE).min(generations);
            }
            found = Some(population[best].clone());
        }
        if generation >= until {
            break;
        }
        let pick = |rng: &mut ChaCha8Rng| {
            let (x, y) = (rng.gen_range(0..POPULATION), rng.gen_range(0..POPULATION));
            if scores[x] <= scores[y] {
                x
            } else {
                y
            }
        };
        let mut next = vec![population[best].clone()];
        while next.len() < POPULATION {
            let (ma, pa) = (pick(&mut rng), pick(&mut rng));
            let mut child = population[ma].clone();
            if rng.gen_bool(CROSSOVER) {
                for (t, gene) in child.iter_mut().enumerate() {
                    if rng.gen_bool(0.5) {
                        *gene = population[pa][t];
                    }
                }
            }
            for (t, gene) in child.iter_mut().enumerate() {
                if rng.gen_bool(1.0 / n as f64) {
                    *gene = rng.gen_range(0..options[t].len());
                }
            }
            next.push(child);
        }
        population = next;
        scores = population.iter().map(|g| fitness(g)).collect();
    }
    // HEFTSync's plan, where there is one, is what a string the sites
    // refuse, or a search that found none, falls back on: the checks
    // above read transfers at the mean bandwidth, where HEFTSync booked
    // each on its links, so they may fault a plan that holds.
    let seed_genes: Option<Vec<usize>> = seed_plan.map(|_| options.iter().map(|o| o.len() - 1).collect());
    let mark = b.mark();
    if let Some(genes) = &found {
        if book(b, &options, genes) {
            return true;
        }
        b.rollback(mark);
    }
    if let Some(genes) = &seed_genes {
        if found.as_ref() != Some(genes) {
            // HEFTSync's own booking, made again as it was made first (the
            // sites are as they were): its transfers on the links it chose,
            // which booking its plan's starts anew may not find.
            b.failure = None;
            if super::heft::schedule(b, false) {
                return true;
            }
            b.rollback(mark);
        }
    }
    if found.is_none() && b.failure.is_none() {
        let best = scores.iter().copied().fold(f64::INFINITY, f64::min);
        b.failure = Some(RejectReason::SearchExhausted {
            candidates: CANDIDATES,
            generations,
            conflicts: (best - bound).max(0.0) as usize,
        });
    }
    false
}

/// HEFTSync's placement of every task as (site, start, duration), made
/// and then given back; `None` when it finds no plan.
fn heftsync_plan(b: &mut Booking) -> Option<Vec<(usize, i64, i64)>> {
    let mark = b.mark();
    let planned = super::heft::schedule(b, false);
    let plan = planned
        .then(|| {
            b.tasks
                .iter()
                .map(|p| p.as_ref().map(|p| (p.site, p.start.0, (p.end - p.start).0)))
                .collect::<Option<Vec<_>>>()
        })
        .flatten();
    b.rollback(mark);
    b.failure = None;
    plan
}

/// Books the chosen candidates in dependency order with their data, a
/// co-allocation's members where their frames overlap.
fn book(b: &mut Booking, options: &[Vec<Candidate>], genes: &[usize]) -> bool {
    let dag = b.dag;
    let (placed, _) = placements(&dag.classes, dag.nodes.len(), |t| options[t][genes[t]]);
    for c in dag.topological(|c| -(c as f64)) {
        for &t in &dag.classes[c] {
            let x = options[t][genes[t]];
            let (start, length) = placed[t];
            let placed = b.book_inputs(t, x.site, start, start).is_some()
                && b.reserve_task(t, x.site, length, start, start).is_some()
                && b.book_streams(t);
            if !placed {
                if b.failure.is_none() {
                    b.failure = Some(RejectReason::NoRoom {
                        task: dag.nodes[t].id.clone(),
                    });
                }
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{over_capacity, over_free, placements, Candidate};
    use brokk_model::{Availability, FreeRange, Time};
    use proptest::prelude::*;

    /// 4 free on [0, 10), 2 on [10, 20), nothing on [20, 30), published to 40.
    fn published() -> Availability {
        let range = |start, end, free| FreeRange {
            start: Time(start),
            end: Time(end),
            free,
        };
        Availability {
            computed_at: Time(0),
            until: Time(40),
            ranges: vec![range(0, 10, 4), range(10, 20, 2), range(30, 40, 8)],
        }
    }

    #[test]
    fn a_coallocation_starts_together_where_its_members_frames_overlap() {
        let c = |start, duration, frame| Candidate {
            site: 0,
            start,
            duration,
            rating: 0.0,
            frame,
        };
        // Tasks 0 and 2 are co-allocated; 1 is alone.
        let classes = vec![vec![0, 2], vec![1]];
        // 0 free from 10 for 40 (a frame twice its 20), 2 from 25 for 20:
        // together from 25 for 20, which 0's frame still holds.
        let chosen = [c(10, 20, 40), c(5, 7, 7), c(25, 20, 20)];
        assert_eq!(
            placements(&classes, 3, |t| chosen[t]),
            (vec![(25, 20), (5, 7), (25, 20)], 0)
        );
        // From 35 it would not: 0's frame ends at 50, before 35 + 20.
        let late = [c(10, 20, 40), c(5, 7, 7), c(35, 20, 20)];
        assert_eq!(
            placements(&classes, 3, |t| late[t]),
            (vec![(35, 20), (5, 7), (35, 20)], 1)
        );
        // Exact windows must start at the same time, as before.
        let exact = [c(10, 20, 20), c(5, 7, 7), c(11, 20, 20)];
        assert_eq!(placements(&classes, 3, |t| exact[t]).1, 1);
        // One window for all: the longest, which a shorter exact window
        // (HEFTSync's own length) does not hold.
        let mixed = [c(10, 20, 40), c(5, 7, 7), c(10, 10, 10)];
        assert_eq!(
            placements(&classes, 3, |t| mixed[t]),
            (vec![(10, 20), (5, 7), (10, 20)], 1)
        );
    }

    #[test]
    fn overlapping_candidates_are_held_to_what_the_site_publishes_free() {
        let free = vec![Some((published(), 8)), None];
        // Two tasks of 2 over [0, 10): 4 free, they fit together.
        assert_eq!(over_free(&[(0, 0, 10, 2), (0, 5, 5, 2)], &free), 0);
        // Into [10, 20), where 2 are free: together they do not.
        assert_eq!(over_free(&[(0, 5, 10, 2), (0, 8, 10, 2)], &free), 1);
        // Back to back they never overlap.
        assert_eq!(over_free(&[(0, 10, 5, 2), (0, 15, 5, 2)], &free), 0);
        // A site that publishes nothing is left to the capacity check.
        assert_eq!(over_free(&[(1, 0, 10, 5), (1, 0, 10, 5)], &free), 0);
    }

    /// The definition, task by task against every other.
    fn naive(chosen: &[(usize, i64, i64, u32)], capacity: &[u32]) -> usize {
        chosen
            .iter()
            .filter(|&&(site, start, _, _)| {
                let used: u32 = chosen
                    .iter()
                    .filter(|&&(s, x, d, _)| s == site && x <= start && start < x + d)
                    .map(|c| c.3)
                    .sum();
                used > capacity[site]
            })
            .count()
    }

    proptest! {
        #[test]
        fn the_sweep_counts_what_the_definition_counts(
            chosen in prop::collection::vec((0usize..3, 0i64..20, 0i64..8, 1u32..4), 0..40),
            capacity in prop::collection::vec(1u32..8, 3),
        ) {
            prop_assert_eq!(over_capacity(&chosen, &capacity), naive(&chosen, &capacity));
        }
    }
}
