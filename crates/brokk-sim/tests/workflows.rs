//! The workflow generator: its graphs are acyclic workflows that keep the
//! level structure the parameters ask for, and a seed fixes them.

use brokk_sim::workflows::{generate, WorkflowParams};
use proptest::prelude::*;

fn level(id: &str) -> usize {
    id[1..id.find('.').unwrap()].parse().unwrap()
}

fn params(tasks: usize, width: usize, regularity: f64, density: f64, max_jump: usize, co: f64) -> WorkflowParams {
    WorkflowParams {
        tasks,
        width,
        regularity,
        density,
        max_jump,
        coallocation_density: co,
        max_size: 32,
        bytes_per_cpu_second: 1e6,
        bandwidth_per_cpu: 1e6,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn generated_workflows_keep_their_levels(
        tasks in 1usize..120,
        width in 1usize..12,
        regularity in 0.0f64..=1.0,
        density in 0.0f64..=1.0,
        max_jump in 1usize..4,
        co in 0.0f64..=0.5,
        seed in 0u64..1000,
    ) {
        let p = params(tasks, width, regularity, density, max_jump, co);
        let w = generate(&p, "g", seed).unwrap();
        // A valid workflow: ids unique, edges known, no cycle, co-allocated
        // tasks independent.
        let text = serde_json::to_string(&w).unwrap();
        prop_assert!(brokk_jdl::workflow::check("g.json", &text, &w).is_ok());
        prop_assert_eq!(w.tasks.len(), tasks);
        let levels = w.tasks.iter().map(|t| level(&t.id)).max().unwrap() + 1;
        for l in 0..levels {
            let n = w.tasks.iter().filter(|t| level(&t.id) == l).count();
            prop_assert!(n >= 1 && n <= width);
        }
        for e in &w.edges {
            let (from, to) = (level(&e.parent), level(&e.child));
            prop_assert!(from < to && to - from <= max_jump, "{:?}", e);
        }
        // Every task after the first level waits for something.
        for t in w.tasks.iter().filter(|t| level(&t.id) > 0) {
            prop_assert!(w.edges.iter().any(|e| e.child == t.id));
        }
        for c in &w.coallocations {
            prop_assert_eq!(level(&c.a), level(&c.b));
        }
        prop_assert!(w.tasks.iter().all(|t| t.cores >= 1 && t.cores <= 32 && t.runtime.0 >= 1));
        prop_assert_eq!(generate(&p, "g", seed).unwrap(), w);
    }
}

#[test]
fn full_density_and_single_jumps_give_bulk_synchronous_levels() {
    let w = generate(&params(20, 5, 1.0, 1.0, 1, 0.0), "bsp", 3).unwrap();
    // Four levels of five, each task waiting for all five of the level before.
    assert_eq!(w.edges.len(), 3 * 5 * 5);
    assert!(w.coallocations.is_empty());
    // Density 0 leaves one parent each: a forest hung on the first level.
    let w = generate(&params(20, 5, 1.0, 0.0, 1, 1.0), "sparse", 3).unwrap();
    assert_eq!(w.edges.len(), 15);
    // Co-allocation density 1: every pair within a level, 4 levels x 10 pairs.
    assert_eq!(w.coallocations.len(), 40);
    assert!(generate(&params(0, 5, 1.0, 0.5, 1, 0.0), "none", 1).is_err());
    assert!(generate(&params(5, 5, 1.5, 0.5, 1, 0.0), "bad", 1).is_err());
}
