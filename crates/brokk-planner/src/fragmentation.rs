//! Seed 004's fragmentation measure (section 2.2.3).
//!
//! In one dimension, with free blocks of sizes f_i:
//! `F = 1 - sum(f_i^2) / (sum f_i)^2`, 0 for one free block (or none), `1 - 1/n`
//! for n equal blocks. In two dimensions (time x capacity), for every demanded
//! capacity c in 1..=C the free blocks are the maximal time intervals with at
//! least c free; F is the average of the one-dimensional F over all c, or a
//! weighted average when demand frequencies are known.

/// The one-dimensional measure over free block sizes.
pub fn one_dimensional(blocks: &[i64]) -> f64 {
    let total: f64 = blocks.iter().map(|&b| b as f64).sum();
    if total <= 0.0 {
        return 0.0;
    }
    let squares: f64 = blocks.iter().map(|&b| (b as f64) * (b as f64)).sum();
    1.0 - squares / (total * total)
}

/// The two-dimensional measure over consecutive segments `(length, free)` of a
/// resource of `capacity` units. `weights[c - 1]` weighs demand c; `None` weighs
/// every demand equally.
///
/// F_c only changes at the distinct free amounts, so the demands are swept from
/// high to low: each step switches on the segments with that much free, joins
/// them with active neighbours (union-find) and keeps the sums of block lengths
/// and of their squares, which is O(m log m) for m segments instead of O(m * C).
pub fn two_dimensional(segments: &[(i64, u32)], capacity: u32, weights: Option<&[f64]>) -> f64 {
    if capacity == 0 {
        return 0.0;
    }
    // Weight of the demands in (lo, hi].
    let prefix: Option<Vec<f64>> = weights.map(|w| {
        let mut p = Vec::with_capacity(capacity as usize + 1);
        p.push(0.0);
        for c in 0..capacity as usize {
            let next = p[c] + w.get(c).copied().unwrap_or(0.0);
            p.push(next);
        }
        p
    });
    let span = |lo: u32, hi: u32| match &prefix {
        None => f64::from(hi - lo),
        Some(p) => p[hi as usize] - p[lo as usize],
    };
    let total_weight = span(0, capacity);
    if total_weight <= 0.0 {
        return 0.0;
    }
    let m = segments.len();
    let mut order: Vec<usize> = (0..m).filter(|&i| segments[i].1 > 0 && segments[i].0 > 0).collect();
    order.sort_unstable_by(|&a, &b| segments[b].1.cmp(&segments[a].1));
    let mut parent: Vec<usize> = (0..m).collect();
    let mut block: Vec<f64> = vec![0.0; m];
    let mut active = vec![false; m];
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let (mut s1, mut s2, mut sum) = (0.0f64, 0.0f64, 0.0f64);
    let mut k = 0;
    while k < order.len() {
        let level = segments[order[k]].1.min(capacity);
        while k < order.len() && segments[order[k]].1.min(capacity) == level {
            let i = order[k];
            let len = segments[i].0 as f64;
            active[i] = true;
            block[i] = len;
            s1 += len;
            s2 += len * len;
            for j in [i.wrapping_sub(1), i + 1] {
                if j < m && active[j] {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    if a != b {
                        s2 += 2.0 * block[a] * block[b];
                        parent[b] = a;
                        block[a] += block[b];
                    }
                }
            }
            k += 1;
        }
        let next = order.get(k).map_or(0, |&i| segments[i].1.min(capacity));
        if s1 > 0.0 {
            sum += (1.0 - s2 / (s1 * s1)) * span(next, level);
        }
    }
    sum / total_weight
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_free_block_is_not_fragmented() {
        assert_eq!(one_dimensional(&[100]), 0.0);
        assert_eq!(one_dimensional(&[]), 0.0);
    }

    #[test]
    fn n_equal_blocks_give_one_minus_one_over_n() {
        for n in 1..10usize {
            let f = one_dimensional(&vec![7; n]);
            assert!((f - (1.0 - 1.0 / n as f64)).abs() < 1e-12, "n = {n}: {f}");
        }
    }

    #[test]
    fn larger_blocks_rate_better_than_scattered_small_ones() {
        // Seed 004, Figure 2.7 (c) and (d): same largest block, the scattered rest rates worse.
        assert!(one_dimensional(&[3, 1, 1, 1]) > one_dimensional(&[3, 3]));
    }

    #[test]
    fn two_dimensions_average_over_demands() {
        // Capacity 2: a fully free stretch of 4, then 1 free for 2, then fully free for 4.
        let segs = [(4, 2), (2, 1), (4, 2)];
        // Demand 1: one block of 10 -> 0. Demand 2: two blocks of 4 -> 1/2. Average 1/4.
        assert!((two_dimensional(&segs, 2, None) - 0.25).abs() < 1e-12);
        // Weighing only demand 2 gives its measure alone.
        assert!((two_dimensional(&segs, 2, Some(&[0.0, 1.0])) - 0.5).abs() < 1e-12);
    }

    /// Seed 004's Figure 2.8 taken literally: every demand, every block.
    fn by_definition(segments: &[(i64, u32)], capacity: u32, weights: Option<&[f64]>) -> f64 {
        let (mut sum, mut total) = (0.0, 0.0);
        for c in 1..=capacity {
            let w = weights.map_or(1.0, |w| w[c as usize - 1]);
            let mut blocks = Vec::new();
            let mut run = 0;
            for &(len, free) in segments {
                if free >= c {
                    run += len;
                } else if run > 0 {
                    blocks.push(run);
                    run = 0;
                }
            }
            if run > 0 {
                blocks.push(run);
            }
            sum += w * one_dimensional(&blocks);
            total += w;
        }
        if total > 0.0 {
            sum / total
        } else {
            0.0
        }
    }

    proptest::proptest! {
        #[test]
        fn the_sweep_equals_the_definition(
            segs in proptest::collection::vec((1i64..50, 0u32..9), 0..20),
            weights in proptest::collection::vec(0.0f64..3.0, 8),
        ) {
            let a = two_dimensional(&segs, 8, None);
            let b = by_definition(&segs, 8, None);
            proptest::prop_assert!((a - b).abs() < 1e-9, "{a} vs {b}");
            let a = two_dimensional(&segs, 8, Some(&weights));
            let b = by_definition(&segs, 8, Some(&weights));
            proptest::prop_assert!((a - b).abs() < 1e-9, "{a} vs {b}");
        }
    }
}
