//! The genetic search of [VRM] 4.5: every task is probed at every site able
//! to run it for up to five candidate starts inside the workflow's window;
//! a chromosome picks one candidate per task; its fitness is the number of
//! violated constraints (precedence with transfer time at the mean
//! bandwidth, co-allocated tasks apart, more processors at a site than it
//! has among the chosen candidates), plus a bound on the ratings, when it
//! violates any, else the sum of the candidates' ratings (the fragmentation
//! each leaves). The first string without violations is booked task by
//! task with its transfers; a booking the sites refuse (their local load
//! moved on since the probe) rejects the workflow.
//!
//! Operators, where the thesis leaves them open: a population of 50,
//! tournaments of two, uniform crossover with probability 0.9, each gene
//! mutated with probability 1/|J| to a random candidate, one elite; a
//! budget of generations instead of wall time, so runs repeat exactly.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::booking::Booking;
use super::RejectReason;

const POPULATION: usize = 50;
const CANDIDATES: usize = 5;
const CROSSOVER: f64 = 0.9;

/// One candidate placement of a task.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    site: usize,
    start: i64,
    duration: i64,
    rating: f64,
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
    let mut options: Vec<Vec<Candidate>> = Vec::with_capacity(n);
    for t in 0..n {
        let class = dag.nodes[t].class;
        let mut mine = Vec::new();
        for site in 0..b.site_count() {
            let Some(own) = b.duration(t, site) else { continue };
            let d = if dag.classes[class].len() > 1 {
                window[class]
            } else {
                own
            };
            let latest = b.latest_start(d);
            for (start, rating) in b.probe_many(t, site, d, b.earliest.0, latest, CANDIDATES) {
                mine.push(Candidate {
                    site,
                    start,
                    duration: d,
                    rating,
                });
            }
        }
        if mine.is_empty() {
            b.failure = Some(RejectReason::NoRoom {
                task: dag.nodes[t].id.clone(),
            });
            return false;
        }
        options.push(mine);
    }
    let edges: Vec<(usize, usize, i64)> = (0..n)
        .flat_map(|c| dag.nodes[c].parents.iter().map(move |&(p, bytes)| (p, c, bytes)))
        .map(|(p, c, bytes)| (p, c, b.topo.mean_transfer(bytes).ceil() as i64))
        .collect();
    let pairs: Vec<(usize, usize)> = dag
        .classes
        .iter()
        .filter(|m| m.len() > 1)
        .flat_map(|m| m.windows(2).map(|w| (w[0], w[1])))
        .collect();
    let capacity: Vec<u32> = (0..b.site_count()).map(|s| b.topo.sites[s].capacity).collect();
    let violations = |genes: &[usize]| -> usize {
        let at = |t: usize| options[t][genes[t]];
        let mut v = 0;
        for &(p, c, move_time) in &edges {
            let (a, z) = (at(p), at(c));
            let gap = if a.site == z.site { 0 } else { move_time };
            v += usize::from(a.start + a.duration + gap > z.start);
        }
        for &(x, y) in &pairs {
            v += usize::from(at(x).start != at(y).start);
        }
        // Processors at each chosen start, summed over the chosen tasks at
        // that site running then.
        for t in 0..n {
            let me = at(t);
            let used: u32 = (0..n)
                .filter(|&o| {
                    let x = at(o);
                    x.site == me.site && x.start <= me.start && me.start < x.start + x.duration
                })
                .map(|o| dag.nodes[o].cores)
                .sum();
            v += usize::from(used > capacity[me.site]);
        }
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
    // The earliest candidate of every task is the first string: a list
    // schedule's guess; the rest are random.
    let mut population: Vec<Vec<usize>> = (0..POPULATION)
        .map(|i| {
            (0..n)
                .map(|t| if i == 0 { 0 } else { rng.gen_range(0..options[t].len()) })
                .collect()
        })
        .collect();
    let mut scores: Vec<f64> = population.iter().map(|g| fitness(g)).collect();
    let mut found = None;
    for _ in 0..=generations {
        let best = (0..POPULATION)
            .min_by(|&x, &y| scores[x].total_cmp(&scores[y]))
            .unwrap_or(0);
        if scores[best] < bound {
            found = Some(population[best].clone());
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
    let Some(genes) = found else {
        b.failure = Some(RejectReason::NoRoom {
            task: dag.nodes[0].id.clone(),
        });
        return false;
    };
    book(b, &options, &genes)
}

/// Books the chosen candidates in dependency order with their data.
fn book(b: &mut Booking, options: &[Vec<Candidate>], genes: &[usize]) -> bool {
    let dag = b.dag;
    for c in dag.topological(|c| -(c as f64)) {
        for &t in &dag.classes[c] {
            let x = options[t][genes[t]];
            let placed = b.book_inputs(t, x.site, x.start, x.start).is_some()
                && b.reserve_task(t, x.site, x.duration, x.start, x.start).is_some()
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
