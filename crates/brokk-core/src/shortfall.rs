//! What a site can no longer hold once part of it is lost: a node down or
//! drained under a resource manager is a foreign occupant as wide as its
//! idle CPUs from now on, and where the site had booked that share already
//! the occupant is mirrored short ([`crate::SiteCore::mirror`]). Which
//! clients' reservations must then move is this rule's answer: those that
//! no longer fit beside the lost share, what runs already, and the
//! reservations kept before them, kept in start order, so the nearest work
//! stays and the later work, which has the most time to find another site,
//! moves ([VRM] 6: a rescue moves what the failure reaches, not more).

use brokk_model::Time;

/// Of the `movable` bookings (key, start, end, amount), those that do not
/// fit in `capacity` beside the `fixed` load ((start, end, amount): the
/// lost share at its full size and what has started), taken in start order
/// (then key) and each kept where it fits beside those kept before it.
pub fn overflowing<K: Copy + Ord>(
    capacity: u32,
    fixed: &[(Time, Time, u32)],
    movable: &[(K, Time, Time, u32)],
) -> Vec<K> {
    let mut order: Vec<&(K, Time, Time, u32)> = movable.iter().collect();
    order.sort_by_key(|&&(k, start, ..)| (start, k));
    let mut kept: Vec<(Time, Time, u32)> = fixed.iter().copied().filter(|&(s, e, _)| e > s).collect();
    let mut moved = Vec::new();
    for &&(k, start, end, amount) in &order {
        if end <= start {
            continue;
        }
        // The load over [start, end) is highest at its start or at a kept
        // booking's start inside it.
        let peak = std::iter::once(start)
            .chain(kept.iter().map(|&(s, ..)| s).filter(|&s| s > start && s < end))
            .map(|t| {
                kept.iter()
                    .filter(|&&(s, e, _)| s <= t && t < e)
                    .map(|&(.., a)| u64::from(a))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        if peak + u64::from(amount) <= u64::from(capacity) {
            kept.push((start, end, amount));
        } else {
            moved.push(k);
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: i64) -> Time {
        Time(s)
    }

    #[test]
    fn a_drained_nodes_share_moves_the_later_reservations_that_no_longer_fit() {
        // 16 CPUs, a node of 8 lost from now on.
        let lost = [(t(0), t(1000), 8)];
        // 8 from 100 fits beside it; 16 from 200 does not; 4 from 300
        // does not either, beside the lost 8 and the 8 kept until 400.
        let bookings = [(1, t(100), t(400), 8), (2, t(200), t(300), 16), (3, t(300), t(500), 4)];
        assert_eq!(overflowing(16, &lost, &bookings), [2, 3]);
        // Without the loss, only the 16 beside the 8 is too much.
        assert_eq!(overflowing(16, &[], &bookings), [2]);
        // Back to back, they never overlap.
        let chained = [(1, t(0), t(10), 8), (2, t(10), t(20), 8)];
        assert_eq!(overflowing(16, &lost, &chained), Vec::<i32>::new());
    }

    #[test]
    fn the_earliest_stays_and_ties_go_by_key() {
        let lost = [(t(0), t(100), 8)];
        let same = [(7, t(10), t(20), 8), (3, t(10), t(20), 8)];
        assert_eq!(overflowing(16, &lost, &same), [7]);
    }

    /// The load of `bookings` at every moment, against `capacity`.
    fn fits(capacity: u32, bookings: &[(Time, Time, u32)]) -> bool {
        bookings.iter().all(|&(s, ..)| {
            bookings
                .iter()
                .filter(|&&(a, b, _)| a <= s && s < b)
                .map(|&(.., x)| u64::from(x))
                .sum::<u64>()
                <= u64::from(capacity)
        })
    }

    proptest! {
        #[test]
        fn what_stays_fits_and_nothing_moved_would_have_fitted_beside_it(
            lost in prop::collection::vec((0i64..50, 1i64..50, 0u32..8), 0..3),
            bookings in prop::collection::vec((0i64..100, 1i64..50, 1u32..10), 0..12),
        ) {
            let capacity = 16;
            let fixed: Vec<(Time, Time, u32)> = lost.iter().map(|&(s, d, a)| (t(s), t(s + d), a)).collect();
            // The lost share fits by itself, as a node's idle CPUs do.
            prop_assume!(fits(capacity, &fixed));
            let movable: Vec<(usize, Time, Time, u32)> = bookings
                .iter()
                .enumerate()
                .map(|(k, &(s, d, a))| (k, t(s), t(s + d), a))
                .collect();
            let moved = overflowing(capacity, &fixed, &movable);
            let kept: Vec<(Time, Time, u32)> = movable
                .iter()
                .filter(|b| !moved.contains(&b.0))
                .map(|&(_, s, e, a)| (s, e, a))
                .collect();
            let all: Vec<(Time, Time, u32)> = fixed.iter().chain(&kept).copied().collect();
            prop_assert!(fits(capacity, &all));
            // Each one moved would overflow beside what stays.
            for &(k, s, e, a) in movable.iter().filter(|b| moved.contains(&b.0)) {
                let mut with: Vec<(Time, Time, u32)> = all.clone();
                with.push((s, e, a));
                prop_assert!(!fits(capacity, &with), "booking {} was moved but fits", k);
            }
        }
    }
}
