//! Queue orders written in Python: a function `key(job, now) -> float`
//! (lower goes first), or a class whose instances have a `key` method and,
//! if they account for use, `started(job, now)` and `ended(job, start,
//! now)`; each simulated cluster gets its own instance. The simulator calls
//! them from its threads, taking the interpreter's lock for each call.

use std::sync::{Arc, Mutex};

use brokk_model::Time;
use brokk_sim::cluster::SimJob;
use brokk_sim::orders::{Orders, QueueOrder};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple, PyType};

/// A waiting job as an order sees it.
#[pyclass(frozen, name = "Job", module = "brokk")]
pub struct PyJob {
    /// The trace's job number.
    #[pyo3(get)]
    id: i64,
    /// Arrival, seconds.
    #[pyo3(get)]
    submit: i64,
    /// Processors.
    #[pyo3(get)]
    size: u32,
    /// What the scheduler believes the run time is, seconds.
    #[pyo3(get)]
    estimate: i64,
    /// The submitting user (SWF field 12), -1 if unknown.
    #[pyo3(get)]
    user: i64,
    /// The trace's queue number (SWF field 15), -1 if unknown.
    #[pyo3(get)]
    queue: i64,
    /// The trace's partition (SWF field 16), -1 if unknown.
    #[pyo3(get)]
    partition: i64,
}

impl From<&SimJob> for PyJob {
    fn from(j: &SimJob) -> PyJob {
        PyJob {
            id: j.id,
            submit: j.submit.0,
            size: j.size,
            estimate: j.estimate.0,
            user: j.user,
            queue: j.queue,
            partition: j.partition,
        }
    }
}

/// The first error an order raised in a run, with its order's name: the
/// trait has no way to return it, so the run goes on (the failing job last)
/// and the caller raises it after.
pub type Failure = Arc<Mutex<Option<String>>>;

/// One cluster's instance of a Python order.
struct PyOrder {
    name: String,
    /// The function, or the instance of the class.
    order: Py<PyAny>,
    /// Whether `order` is an instance with a `key` method.
    instance: bool,
    hooks: (bool, bool),
    failed: Failure,
}

impl PyOrder {
    fn fail(&self, py: Python<'_>, e: PyErr) {
        raised(&self.failed, py, &format!("queue order {}", self.name), e);
    }

    fn call<'py>(&self, py: Python<'py>, method: &str, args: impl IntoPyObject<'py, Target = PyTuple>) {
        if let Err(e) = self.order.call_method1(py, method, args) {
            self.fail(py, e);
        }
    }
}

impl QueueOrder for PyOrder {
    fn key(&self, job: &SimJob, now: Time) -> f64 {
        Python::with_gil(|py| {
            let args = (PyJob::from(job), now.0);
            let got = match self.instance {
                true => self.order.call_method1(py, "key", args),
                false => self.order.call1(py, args),
            };
            match got.and_then(|k| k.extract::<f64>(py)) {
                Ok(k) if !k.is_nan() => k,
                Ok(_) => {
                    self.fail(py, pyo3::exceptions::PyValueError::new_err("key returned NaN"));
                    f64::INFINITY
                }
                Err(e) => {
                    self.fail(py, e);
                    f64::INFINITY
                }
            }
        })
    }

    fn started(&mut self, job: &SimJob, now: Time) {
        if self.hooks.0 {
            Python::with_gil(|py| self.call(py, "started", (PyJob::from(job), now.0)));
        }
    }

    fn ended(&mut self, job: &SimJob, start: Time, now: Time) {
        if self.hooks.1 {
            Python::with_gil(|py| self.call(py, "ended", (PyJob::from(job), start.0, now.0)));
        }
    }
}

/// Keeps `e`, which the policy `what` raised, with its traceback, unless
/// an earlier error is kept already: the run raises the first.
pub fn raised(failed: &Failure, py: Python<'_>, what: &str, e: PyErr) {
    let mut f = failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if f.is_none() {
        let at = e.traceback(py).and_then(|t| t.format().ok()).unwrap_or_default();
        *f = Some(format!("{what}: {e}\n{at}"));
    }
}

/// What a policy written in Python is called with: `value` itself when it
/// is a function, or a new instance when it is a class (a class whose
/// construction raises leaves its error, under `what`, in `failed`, and
/// `value` in its place). Returns it and whether it is an instance.
pub fn instance_of<'py>(value: &Bound<'py, PyAny>, what: &str, failed: &Failure) -> (Bound<'py, PyAny>, bool) {
    if !value.is_instance_of::<PyType>() {
        return (value.clone(), false);
    }
    match value.call0() {
        Ok(o) => (o, true),
        Err(e) => {
            let mut f = failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            f.get_or_insert_with(|| format!("{what}: {e}"));
            (value.clone(), false)
        }
    }
}

/// Makes one cluster's instance of the order `value` (a function or a
/// class) named `name`.
fn make(name: &str, value: &Py<PyAny>, failed: &Failure) -> Box<dyn QueueOrder> {
    Python::with_gil(|py| {
        let (order, instance) = instance_of(value.bind(py), &format!("queue order {name}"), failed);
        let has = |m: &str| instance && order.hasattr(m).unwrap_or(false);
        Box::new(PyOrder {
            name: name.to_string(),
            hooks: (has("started"), has("ended")),
            instance,
            order: order.unbind(),
            failed: failed.clone(),
        }) as Box<dyn QueueOrder>
    })
}

/// The orders of the dict `orders` (name -> function or class), and where
/// the first error any of them raises is kept.
pub fn from_dict(orders: Option<&Bound<'_, PyDict>>) -> PyResult<(Orders, Failure)> {
    let failed: Failure = Arc::new(Mutex::new(None));
    let mut out = Orders::new();
    for (name, value) in orders.into_iter().flat_map(|d| d.iter()) {
        let name: String = name.extract()?;
        if !value.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "orders[{name:?}]: give a function key(job, now) or a class with a key method"
            )));
        }
        let (value, failed, label) = (value.unbind(), failed.clone(), name.clone());
        out = out.with(name, move || make(&label, &value, &failed));
    }
    Ok((out, failed))
}
