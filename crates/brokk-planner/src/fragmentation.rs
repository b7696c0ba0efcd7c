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
pub fn two_dimensional(segments: &[(i64, u32)], capacity: u32, weights: Option<&[f64]>) -> f64 {
    if capacity == 0 {
        return 0.0;
    }
    let weight = |c: u32| weights.map_or(1.0, |w| w.get(c as usize - 1).copied().unwrap_or(0.0));
    let total_weight: f64 = match weights {
        None => f64::from(capacity),
        Some(_) => (1..=capacity).map(weight).sum(),
    };
    if total_weight <= 0.0 {
        return 0.0;
    }
    // F_c only changes at the distinct free amounts: demands in (prev, level] see
    // the same blocks, those of the segments with at least `level` free.
    let mut levels: Vec<u32> = segments.iter().map(|s| s.1.min(capacity)).filter(|&f| f > 0).collect();
    levels.sort_unstable();
    levels.dedup();
    let mut sum = 0.0;
    let mut prev = 0u32;
    let mut blocks = Vec::new();
    for level in levels {
        blocks.clear();
        let mut run = 0i64;
        for &(len, free) in segments {
            if free >= level {
                run += len;
            } else if run > 0 {
                blocks.push(run);
                run = 0;
            }
        }
        if run > 0 {
            blocks.push(run);
        }
        let f = one_dimensional(&blocks);
        let w: f64 = match weights {
            None => f64::from(level - prev),
            Some(_) => (prev + 1..=level).map(weight).sum(),
        };
        sum += f * w;
        prev = level;
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
}
