//! Grid routers written in Python: a function `route(job, sites, now)`
//! returning the chosen site's position in `sites` (or `None` to leave the
//! job unrouted), or a class whose instances have such a `route` method
//! and may keep state; each simulation gets its own instance. `sites` are
//! what every site publishes at the arrival. The simulator calls them
//! from its threads, taking the interpreter's lock for each call.

use brokk_model::Time;
use brokk_sim::cluster::SimJob;
use brokk_sim::orders::Orders;
use brokk_sim::routers::{GridRouter, SiteView};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::orders::{instance_of, raised, Failure, PyJob};

/// A site as a router sees it at an arrival.
#[pyclass(frozen, name = "Site", module = "brokk")]
pub struct PySite {
    /// Its name.
    #[pyo3(get)]
    name: String,
    /// Processors.
    #[pyo3(get)]
    procs: u32,
    /// Speed against the trace's machine.
    #[pyo3(get)]
    speed: f64,
    /// Processors free now.
    #[pyo3(get)]
    free: u32,
    /// Jobs running.
    #[pyo3(get)]
    running: u32,
    /// Jobs waiting.
    #[pyo3(get)]
    waiting: u32,
    /// The wait a one-processor, one-hour job would see, seconds, or None.
    #[pyo3(get)]
    estimated_wait: Option<i64>,
}

impl From<&SiteView> for PySite {
    fn from(s: &SiteView) -> PySite {
        PySite {
            name: s.name.clone(),
            procs: s.procs,
            speed: s.speed,
            free: s.free,
            running: s.running,
            waiting: s.waiting,
            estimated_wait: s.estimated_wait,
        }
    }
}

/// One simulation's instance of a Python router.
struct PyRouter {
    name: String,
    /// The function, or the instance of the class.
    router: Py<PyAny>,
    /// Whether `router` is an instance with a `route` method.
    instance: bool,
    failed: Failure,
}

impl PyRouter {
    fn fail(&self, py: Python<'_>, e: PyErr) {
        raised(&self.failed, py, &format!("router {}", self.name), e);
    }
}

impl GridRouter for PyRouter {
    fn route(&mut self, job: &SimJob, sites: &[SiteView], now: Time) -> Option<usize> {
        Python::with_gil(|py| {
            let views: Vec<PySite> = sites.iter().map(PySite::from).collect();
            let args = (PyJob::from(job), views, now.0);
            let got = match self.instance {
                true => self.router.call_method1(py, "route", args),
                false => self.router.call1(py, args),
            };
            match got.and_then(|c| c.extract::<Option<usize>>(py)) {
                Ok(c) => c,
                Err(e) => {
                    self.fail(py, e);
                    None
                }
            }
        })
    }
}

/// Makes one simulation's instance of the router `value` (a function or a
/// class) named `name`.
fn make(name: &str, value: &Py<PyAny>, failed: &Failure) -> Box<dyn GridRouter> {
    Python::with_gil(|py| {
        let (router, instance) = instance_of(value.bind(py), &format!("router {name}"), failed);
        Box::new(PyRouter {
            name: name.to_string(),
            router: router.unbind(),
            instance,
            failed: failed.clone(),
        }) as Box<dyn GridRouter>
    })
}

/// `own` with the routers of the dict `routers` (name -> function or
/// class) added; the first error any of them raises goes to `failed`.
pub fn with_dict(mut own: Orders, routers: Option<&Bound<'_, PyDict>>, failed: &Failure) -> PyResult<Orders> {
    for (name, value) in routers.into_iter().flat_map(|d| d.iter()) {
        let name: String = name.extract()?;
        if !value.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "routers[{name:?}]: give a function route(job, sites, now) or a class with a route method"
            )));
        }
        let (value, failed, label) = (value.unbind(), failed.clone(), name.clone());
        own = own.with_router(name, move || make(&label, &value, &failed));
    }
    Ok(own)
}
