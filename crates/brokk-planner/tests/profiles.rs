//! The B+ tree profile against the treap, operation by operation: random
//! spans added and removed over a long horizon, with small fan-outs so that
//! leaves and inner nodes split, empty and the tree grows and shrinks, and
//! every query of the `Profile` trait compared after each change. And the
//! flat profile's one-pass `add_at_earliest` against a search then an add.

use brokk_planner::{BTree, FreeList, Profile, Steps};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Add {
        start: i64,
        len: i64,
        amount: i32,
    },
    /// Removes the live span at this index (modulo their count).
    Remove(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0i64..2_000, 1i64..400, 1i32..8).prop_map(|(start, len, amount)| Op::Add { start, len, amount }),
        2 => any::<usize>().prop_map(Op::Remove),
    ]
}

fn compare(b: &BTree, f: &FreeList, probe: (i32, i64, i64, i64)) -> Result<(), TestCaseError> {
    let (thr, d, e, w) = probe;
    prop_assert_eq!(b.segments(-10, 2_600), f.segments(-10, 2_600));
    prop_assert_eq!(
        b.earliest_fit(thr, d, e, e + w),
        f.earliest_fit(thr, d, e, e + w),
        "earliest fit"
    );
    prop_assert_eq!(
        b.latest_fit(thr, d, e, e + w),
        f.latest_fit(thr, d, e, e + w),
        "latest fit"
    );
    prop_assert_eq!(b.max_used(e, e + d), f.max_used(e, e + d), "max used");
    Ok(())
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(300), ..ProptestConfig::default() })]

    #[test]
    fn the_b_tree_answers_as_the_treap(
        ops in prop::collection::vec(op(), 1..400),
        probes in prop::collection::vec((0i32..30, 1i64..300, -50i64..2_500, 0i64..600), 1..8),
        fanout in prop_oneof![(2usize..8, 2usize..6), Just((128, 32))],
    ) {
        let mut b = BTree::with_fanout(fanout.0, fanout.1);
        let mut f = FreeList::new();
        let mut live: Vec<(i64, i64, i32)> = Vec::new();
        for (k, op) in ops.iter().enumerate() {
            match *op {
                Op::Add { start, len, amount } => {
                    b.add(start, start + len, amount);
                    f.add(start, start + len, amount);
                    live.push((start, start + len, amount));
                }
                Op::Remove(i) if !live.is_empty() => {
                    let (s, e, a) = live.swap_remove(i % live.len());
                    b.remove(s, e, a);
                    f.remove(s, e, a);
                }
                Op::Remove(_) => {}
            }
            b.check_invariants();
            compare(&b, &f, probes[k % probes.len()])?;
        }
        // Everything removed: the profile is empty again.
        for (s, e, a) in live.drain(..) {
            b.remove(s, e, a);
        }
        b.check_invariants();
        prop_assert_eq!(b.segments(-10, 2_600), vec![(-10, 2_600, 0)]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(500), ..ProptestConfig::default() })]

    #[test]
    fn adding_at_the_earliest_fit_in_one_pass_is_a_search_then_an_add(
        ops in prop::collection::vec(op(), 1..200),
        fits in prop::collection::vec((0i32..30, 1i64..300, -50i64..2_500, 0i64..600, 1i32..8), 1..40),
    ) {
        let mut flat = Steps::new();
        let mut live: Vec<(i64, i64, i32)> = Vec::new();
        for op in &ops {
            match *op {
                Op::Add { start, len, amount } => {
                    flat.add(start, start + len, amount);
                    live.push((start, start + len, amount));
                }
                Op::Remove(i) if !live.is_empty() => {
                    let (s, e, a) = live.swap_remove(i % live.len());
                    flat.remove(s, e, a);
                }
                Op::Remove(_) => {}
            }
        }
        let mut reference = FreeList::new();
        for &(s, e, a) in &live {
            reference.add(s, e, a);
        }
        // Fits on top, one after another, as a queue is planned.
        for &(thr, d, e, w, amount) in &fits {
            let expected = reference.earliest_fit(thr, d, e, e + w);
            if let Some(t) = expected {
                reference.add(t, t + d, amount);
            }
            prop_assert_eq!(flat.add_at_earliest(thr, d, e, e + w, amount), expected);
            flat.check_invariants();
            prop_assert_eq!(flat.segments(-60, 3_500), reference.segments(-60, 3_500));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(500), ..ProptestConfig::default() })]

    #[test]
    fn a_sum_of_spans_is_their_additions(
        spans in prop::collection::vec((0i64..2_000, 0i64..400, 0i32..8), 0..60),
    ) {
        let mut added = Steps::new();
        for &(s, len, a) in &spans {
            added.add(s, s + len, a);
        }
        let mut summed = Steps::new();
        summed.add(5, 10, 3); // replaced, not added to
        summed.set_sum(spans.iter().map(|&(s, len, a)| (s, s + len, a)));
        summed.check_invariants();
        prop_assert_eq!(summed.segments(-10, 2_500), added.segments(-10, 2_500));
    }
}
