//! Queue orders an experiment can name, after its local policy: `easy+sjf`,
//! `fcfs+wfp`, `conservative+fairshare:86400`. Built in: `sjf`, `ljf`, `wfp`,
//! `fairshare[:HALF_LIFE_S]` (a week by default, Slurm's) and `priority` (by
//! the experiment's `[priorities]` table of queue numbers). A Rust program
//! adds its own [`QueueOrder`] with [`Orders::with`] and prepares the
//! experiment with [`crate::experiment::prepare_with_orders`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use brokk_core::order::ByPriority;
pub use brokk_core::order::QueueOrder;

type Make = dyn Fn() -> Box<dyn QueueOrder> + Send + Sync;

/// Makes a fresh queue order for each simulated cluster (orders that account
/// for use keep state, so clusters and points never share one).
#[derive(Clone)]
pub struct OrderMaker {
    name: String,
    make: Arc<Make>,
}

impl OrderMaker {
    /// An order named `name`, made by `make`.
    pub fn new(name: impl Into<String>, make: impl Fn() -> Box<dyn QueueOrder> + Send + Sync + 'static) -> Self {
        OrderMaker {
            name: name.into(),
            make: Arc::new(make),
        }
    }

    /// A fresh order.
    pub fn make(&self) -> Box<dyn QueueOrder> {
        (self.make)()
    }

    /// The name the experiment used.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Debug for OrderMaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OrderMaker").field(&self.name).finish()
    }
}

/// A program's own queue orders and grid routers by name, beside the
/// built-in ones.
#[derive(Clone, Debug, Default)]
pub struct Orders {
    own: Vec<OrderMaker>,
    routers: Vec<crate::routers::RouterMaker>,
}

impl Orders {
    /// No user-defined orders.
    pub fn new() -> Self {
        Orders::default()
    }

    /// Adds an order the experiment can name `name` (a built-in name is
    /// shadowed).
    pub fn with(
        mut self,
        name: impl Into<String>,
        make: impl Fn() -> Box<dyn QueueOrder> + Send + Sync + 'static,
    ) -> Self {
        self.own.push(OrderMaker::new(name, make));
        self
    }

    /// Adds a grid router the experiment's `routings` can name `name`
    /// ([`crate::routers`]); a built-in routing's name cannot be taken.
    pub fn with_router(
        mut self,
        name: impl Into<String>,
        make: impl Fn() -> Box<dyn crate::routers::GridRouter> + Send + Sync + 'static,
    ) -> Self {
        self.routers.push(crate::routers::RouterMaker::new(name, make));
        self
    }

    /// The router named `name`, if the program gave one.
    pub fn router(&self, name: &str) -> Option<&crate::routers::RouterMaker> {
        self.routers.iter().find(|r| r.name() == name)
    }

    /// The order `name` names (`ORDER` or `ORDER:PARAMETER`), with queue
    /// priorities for `priority`; an error says what is wrong.
    pub fn find(&self, name: &str, priorities: &BTreeMap<String, f64>) -> Result<OrderMaker, String> {
        if let Some(m) = self.own.iter().find(|m| m.name == name) {
            return Ok(m.clone());
        }
        let (base, parameter) = match name.split_once(':') {
            Some((b, p)) => (b, Some(p)),
            None => (name, None),
        };
        match base {
            "sjf" | "ljf" | "wfp" | "fairshare" => {
                let named: brokk_core::order::Named = name.parse()?;
                Ok(OrderMaker::new(name, move || named.make()))
            }
            "priority" => {
                if priorities.is_empty() {
                    return Err("queue order \"priority\" needs a [priorities] table (queue number = priority)".into());
                }
                let mut table = Vec::new();
                for (queue, &p) in priorities {
                    let q = queue
                        .parse::<i64>()
                        .map_err(|_| format!("priorities: {queue:?} is not a queue number"))?;
                    table.push((q, p));
                }
                match parameter {
                    None => Ok(OrderMaker::new(name, move || Box::new(ByPriority::new(table.clone())))),
                    Some(_) => Err(format!("queue order {base:?} takes no parameter")),
                }
            }
            _ => Err(format!(
                "unknown queue order {name:?} (sjf, ljf, wfp, fairshare[:HALF_LIFE_S], priority{})",
                self.own.iter().map(|m| format!(", {}", m.name)).collect::<String>()
            )),
        }
    }
}
