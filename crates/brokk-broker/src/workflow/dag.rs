//! A workflow prepared for scheduling: tasks by index, their parents and
//! children with the data on each edge, co-allocation classes (tasks that
//! must share start and duration, [VRM] 2.3.2) and the orders the list
//! schedulers walk.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use brokk_model::workflow::Workflow;

use super::{Rejection, Topology};

/// One task as the schedulers see it.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// The workflow's id for it.
    pub id: String,
    /// Seconds on the reference resource (speed 1).
    pub runtime: i64,
    /// Processors.
    pub cores: u32,
    /// Parents with the bytes each hands over.
    pub parents: Vec<(usize, u64)>,
    /// Children with the bytes handed to each.
    pub children: Vec<(usize, u64)>,
    /// Its co-allocation class.
    pub class: usize,
}

/// The prepared workflow.
#[derive(Debug, Clone)]
pub(crate) struct Dag {
    pub nodes: Vec<Node>,
    /// Co-allocation classes; a task co-allocated with nothing is a class of
    /// its own. Members longest (reference run time) first.
    pub classes: Vec<Vec<usize>>,
    /// Co-allocated pairs with the bytes per second they exchange.
    pub streams: Vec<(usize, usize, u64)>,
    /// Per class, the classes whose members have an edge into its members.
    class_parents: Vec<Vec<usize>>,
    /// Per class, the classes its members have edges into.
    class_children: Vec<Vec<usize>>,
}

impl Dag {
    /// Indexes `wf`; refuses unknown task names, empty tasks and a cycle
    /// through dependencies and co-allocations.
    pub fn new(wf: &Workflow) -> Result<Dag, Rejection> {
        if wf.tasks.is_empty() {
            return Err(Rejection::invalid("the workflow has no tasks"));
        }
        let index: std::collections::HashMap<&str, usize> =
            wf.tasks.iter().enumerate().map(|(i, t)| (t.id.as_str(), i)).collect();
        if index.len() != wf.tasks.len() {
            return Err(Rejection::invalid("two tasks share an id"));
        }
        let find = |id: &str| {
            index
                .get(id)
                .copied()
                .ok_or_else(|| Rejection::invalid(format!("no task `{id}`")))
        };
        let mut nodes: Vec<Node> = wf
            .tasks
            .iter()
            .map(|t| Node {
                id: t.id.clone(),
                runtime: t.runtime.0.max(1),
                cores: t.cores,
                parents: Vec::new(),
                children: Vec::new(),
                class: 0,
            })
            .collect();
        if let Some(t) = nodes.iter().find(|n| n.cores == 0) {
            return Err(Rejection::invalid(format!("task `{}` asks for no processors", t.id)));
        }
        for e in &wf.edges {
            let (p, c) = (find(&e.parent)?, find(&e.child)?);
            nodes[p].children.push((c, e.bytes));
            nodes[c].parents.push((p, e.bytes));
        }
        // Union-find over co-allocation pairs.
        let mut up: Vec<usize> = (0..nodes.len()).collect();
        fn root(up: &mut [usize], mut i: usize) -> usize {
            while up[i] != i {
                up[i] = up[up[i]];
                i = up[i];
            }
            i
        }
        let mut streams = Vec::new();
        for c in &wf.coallocations {
            let (a, b) = (find(&c.a)?, find(&c.b)?);
            let (ra, rb) = (root(&mut up, a), root(&mut up, b));
            up[ra.max(rb)] = ra.min(rb);
            if a != b {
                streams.push((a, b, c.bandwidth));
            }
        }
        let mut class_of_root = vec![usize::MAX; nodes.len()];
        let mut classes: Vec<Vec<usize>> = Vec::new();
        for (i, node) in nodes.iter_mut().enumerate() {
            let r = root(&mut up, i);
            if class_of_root[r] == usize::MAX {
                class_of_root[r] = classes.len();
                classes.push(Vec::new());
            }
            node.class = class_of_root[r];
            classes[class_of_root[r]].push(i);
        }
        for members in &mut classes {
            members.sort_by(|&a, &b| nodes[b].runtime.cmp(&nodes[a].runtime).then(a.cmp(&b)));
        }
        let linked = |side: fn(&Node) -> &Vec<(usize, u64)>| -> Vec<Vec<usize>> {
            (0..classes.len())
                .map(|c| {
                    let mut out: Vec<usize> = classes[c]
                        .iter()
                        .flat_map(|&m| side(&nodes[m]).iter().map(|&(o, _)| nodes[o].class))
                        .filter(|&o| o != c)
                        .collect();
                    out.sort_unstable();
                    out.dedup();
                    out
                })
                .collect()
        };
        let (class_parents, class_children) = (linked(|n| &n.parents), linked(|n| &n.children));
        let dag = Dag {
            nodes,
            classes,
            streams,
            class_parents,
            class_children,
        };
        if dag.topological(|_| 0.0).len() != dag.classes.len() {
            return Err(Rejection::invalid(
                "the dependencies form a cycle (counting co-allocated tasks as one)",
            ));
        }
        Ok(dag)
    }

    /// Classes in an order where every class comes after its parents; among
    /// the ready ones the highest `priority` first (ties: lower index).
    /// Shorter than the class count when there is a cycle.
    pub fn topological(&self, priority: impl Fn(usize) -> f64) -> Vec<usize> {
        self.walk(priority, &self.class_parents, &self.class_children)
    }

    /// Classes in an order where every class comes after its children
    /// (the backward walk of HLST).
    pub fn reverse_topological(&self, priority: impl Fn(usize) -> f64) -> Vec<usize> {
        self.walk(priority, &self.class_children, &self.class_parents)
    }

    fn walk(&self, priority: impl Fn(usize) -> f64, before: &[Vec<usize>], after: &[Vec<usize>]) -> Vec<usize> {
        let mut waiting: Vec<usize> = before.iter().map(Vec::len).collect();
        let mut ready: BinaryHeap<Ready> = waiting
            .iter()
            .enumerate()
            .filter(|(_, &w)| w == 0)
            .map(|(c, _)| Ready(priority(c), c))
            .collect();
        let mut order = Vec::with_capacity(self.classes.len());
        while let Some(Ready(_, c)) = ready.pop() {
            order.push(c);
            for &n in &after[c] {
                waiting[n] -= 1;
                if waiting[n] == 0 {
                    ready.push(Ready(priority(n), n));
                }
            }
        }
        order
    }

    /// HEFT's upward rank (b-level) of every class: its longest member's
    /// mean duration over the sites able to run it, plus the most expensive
    /// way to an exit through mean transfer times ([VRM] 4.4.3).
    pub fn upward_ranks(&self, topo: &Topology) -> Vec<f64> {
        self.ranks(topo, self.reverse_topological(|_| 0.0), |n| &n.children)
    }

    /// HLST's rank (t-level with the class's own duration): the most
    /// expensive way from an entry to the class's end.
    pub fn downward_ranks(&self, topo: &Topology) -> Vec<f64> {
        self.ranks(topo, self.topological(|_| 0.0), |n| &n.parents)
    }

    /// Each class's mean duration plus the costliest way through `side`
    /// (children or parents), in an `order` that ranks that side first.
    fn ranks(&self, topo: &Topology, order: Vec<usize>, side: fn(&Node) -> &Vec<(usize, u64)>) -> Vec<f64> {
        let w = self.mean_durations(topo);
        let mut rank = vec![0.0; self.classes.len()];
        for c in order {
            let tail = self.classes[c]
                .iter()
                .flat_map(|&m| side(&self.nodes[m]).iter())
                .filter(|&&(o, _)| self.nodes[o].class != c)
                .map(|&(o, bytes)| topo.mean_transfer(bytes) + rank[self.nodes[o].class])
                .fold(0.0, f64::max);
            rank[c] = w[c] + tail;
        }
        rank
    }

    /// A class's duration at the mean speed of the sites able to run each
    /// member (the longest member counts).
    fn mean_durations(&self, topo: &Topology) -> Vec<f64> {
        self.classes
            .iter()
            .map(|members| {
                members
                    .iter()
                    .map(|&m| {
                        let n = &self.nodes[m];
                        n.runtime as f64 / topo.mean_speed(n.cores)
                    })
                    .fold(0.0, f64::max)
            })
            .collect()
    }
}

/// A ready class in the walk's heap: highest priority first, then lowest index.
struct Ready(f64, usize);

impl PartialEq for Ready {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ready {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}
