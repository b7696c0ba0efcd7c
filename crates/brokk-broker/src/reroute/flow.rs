//! The maximum concurrent flow over given paths ([VRM] 5.6.1): the largest
//! ratio `λ` such that every commodity can carry `λ` times its demand at
//! once, links within their capacity. Solved approximately with Garg and
//! Könemann's scheme in Fleischer's phases, the method the thesis used:
//! every link gets a length that grows with the flow routed over it, and
//! each phase routes every commodity's whole demand along its shortest
//! path under those lengths, so flow drifts to the links that are least
//! loaded relative to their capacity.
//!
//! The paths are each commodity's candidates (the network manager's `k`
//! shortest), not every path of the graph: a reservation must end on one
//! of them. The answer is scaled to fit the capacities exactly, whatever
//! the approximation's own bound, so it is always a feasible flow and its
//! ratio never overstates what the links can carry.

/// One commodity: a demand and the paths it may use (each a list of
/// directed link indices).
#[derive(Debug, Clone, Copy)]
pub struct Commodity<'a> {
    /// Bandwidth to carry.
    pub demand: f64,
    /// Candidate paths.
    pub paths: &'a [Vec<usize>],
}

/// A feasible concurrent flow.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcurrentFlow {
    /// Every commodity carries at least this times its demand.
    pub ratio: f64,
    /// Flow per commodity per path, within the links' capacities.
    pub flows: Vec<Vec<f64>>,
    /// Phases the scheme ran.
    pub phases: usize,
}

/// The maximum concurrent flow of `commodities` over links of capacities
/// `caps`, within a factor of about `1 - epsilon` of the optimum (over the
/// given paths) where the demands fit together, as the reservations a
/// network already carries do. A commodity with no usable path makes the
/// ratio 0.
pub fn max_concurrent_flow(caps: &[f64], commodities: &[Commodity<'_>], epsilon: f64) -> ConcurrentFlow {
    let eps = epsilon.clamp(1e-3, 0.5);
    let mut flows: Vec<Vec<f64>> = commodities.iter().map(|c| vec![0.0; c.paths.len()]).collect();
    let live: Vec<usize> = (0..commodities.len())
        .filter(|&j| commodities[j].demand > 0.0)
        .collect();
    if live.is_empty() {
        return ConcurrentFlow {
            ratio: f64::INFINITY,
            flows,
            phases: 0,
        };
    }
    // Each commodity's paths over links that have capacity, with their
    // bottlenecks: read once, not at every step of the phases.
    let routes: Vec<Vec<(usize, f64)>> = commodities
        .iter()
        .map(|c| {
            c.paths
                .iter()
                .enumerate()
                .filter(|(_, p)| !p.is_empty() && p.iter().all(|&e| caps.get(e).is_some_and(|&c| c > 0.0)))
                .map(|(i, p)| (i, p.iter().map(|&e| caps[e]).fold(f64::INFINITY, f64::min)))
                .collect()
        })
        .collect();
    if live.iter().any(|&j| routes[j].is_empty()) {
        return ConcurrentFlow {
            ratio: 0.0,
            flows,
            phases: 0,
        };
    }
    // The links any path touches: only they take part.
    let mut touched: Vec<usize> = live
        .iter()
        .flat_map(|&j| {
            routes[j]
                .iter()
                .flat_map(move |&(i, _)| commodities[j].paths[i].iter().copied())
        })
        .collect();
    touched.sort_unstable();
    touched.dedup();
    let m = touched.len() as f64;
    // The demands as given: a network manager asks for the reservations it
    // already carries, so the optimum is at least 1, where the scheme's
    // bound holds. Demands that do not fit end it early with a ratio
    // below 1, which the caller refuses anyway.
    let mut scale = 1.0;
    let delta = (m / (1.0 - eps)).powf(-1.0 / eps);
    let mut length = vec![0.0; caps.len()];
    for &e in &touched {
        length[e] = delta / caps[e];
    }
    let mut volume: f64 = touched.iter().map(|&e| caps[e] * length[e]).sum();
    // Fleischer: if the optimum were below 2, this many phases would end
    // the scheme; if they do not, the optimum is at least 2, and doubling
    // the demands keeps the phases' count independent of it.
    let per_doubling = (2.0 * (1.0 / delta).ln() / (1.0 + eps).ln()).ceil() as usize;
    let mut phases = 0;
    let mut since_doubling = 0;
    'phases: while volume < 1.0 {
        if since_doubling == per_doubling {
            scale *= 2.0;
            since_doubling = 0;
        }
        for &j in &live {
            let c = &commodities[j];
            let mut left = c.demand * scale;
            while left > 0.0 {
                if volume >= 1.0 {
                    break 'phases;
                }
                let (p, bottleneck, _) = routes[j]
                    .iter()
                    .map(|&(i, b)| (i, b, c.paths[i].iter().map(|&e| length[e]).sum::<f64>()))
                    .fold(
                        (usize::MAX, 0.0, f64::INFINITY),
                        |best, x| if x.2 < best.2 { x } else { best },
                    );
                let path = &c.paths[p];
                let u = left.min(bottleneck);
                flows[j][p] += u;
                left -= u;
                for &e in path {
                    let before = length[e];
                    length[e] *= 1.0 + eps * u / caps[e];
                    volume += caps[e] * (length[e] - before);
                }
            }
        }
        phases += 1;
        since_doubling += 1;
    }
    // Scaled to fit: the most congested link carries exactly its capacity.
    let mut load = vec![0.0; caps.len()];
    for (j, c) in commodities.iter().enumerate() {
        for (p, path) in c.paths.iter().enumerate() {
            for &e in path {
                if let Some(l) = load.get_mut(e) {
                    *l += flows[j][p];
                }
            }
        }
    }
    let congestion = touched.iter().map(|&e| load[e] / caps[e]).fold(0.0, f64::max);
    if congestion > 0.0 {
        for f in flows.iter_mut().flatten() {
            *f /= congestion;
        }
    }
    let ratio = live
        .iter()
        .map(|&j| flows[j].iter().sum::<f64>() / commodities[j].demand)
        .fold(f64::INFINITY, f64::min);
    ConcurrentFlow { ratio, flows, phases }
}
