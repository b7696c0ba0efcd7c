//! Python bindings of Brokk's simulator: run an experiment (a TOML file, or
//! one built in Python and passed as JSON) and hand back its summary JSON and
//! its `jobs.csv`, from which the `brokk` Python package builds pandas
//! DataFrames. The simulations run without holding the interpreter's lock;
//! queue orders written in Python ([`orders`]) take it for each call.

mod orders;
mod routers;

use std::path::{Path, PathBuf};

use brokk_sim::admission::{self, AdmissionExperiment};
use brokk_sim::experiment::{load_with_orders, prepare_with_orders, run_points, Experiment, Prepared};
use brokk_sim::timing;
use brokk_sim::{export, report};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What a run's Python orders raised, as the run's error.
fn checked(r: Result<(String, String), String>, failed: &orders::Failure) -> Result<(String, String), String> {
    let raised = failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    match raised {
        Some(e) => Err(e),
        None => r,
    }
}

/// Runs every point (a sweep) or each policy's first point, writes the
/// reports into `out` if given, and returns (summary JSON, jobs CSV).
fn run(
    prepared: &Prepared,
    sweep: bool,
    threads: Option<usize>,
    out: Option<&Path>,
) -> Result<(String, String), String> {
    let points = if sweep {
        prepared.points()
    } else {
        prepared.single_points()
    };
    let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let results = run_points(prepared, &points, threads, &|| {}).map_err(|e| e.to_string())?;
    let baseline = prepared.as_recorded();
    if let Some(dir) = out {
        report::write_all(dir, prepared, &results, baseline.as_ref())
            .map_err(|e| format!("writing {}: {e}", dir.display()))?;
    }
    let summary =
        serde_json::to_string(&report::report(prepared, &results, baseline.as_ref())).map_err(|e| e.to_string())?;
    Ok((summary, export::jobs_csv(prepared, &results, baseline.as_ref())))
}

/// Runs the experiment file at `path`, whose policies may name the queue
/// orders of `orders` and whose routings the grid routers of `routers`
/// (each name -> function or class).
#[pyfunction]
#[pyo3(signature = (path, sweep=false, threads=None, traces=None, out=None, orders=None, routers=None))]
#[allow(clippy::too_many_arguments)]
fn run_file(
    py: Python<'_>,
    path: PathBuf,
    sweep: bool,
    threads: Option<usize>,
    traces: Option<PathBuf>,
    out: Option<PathBuf>,
    orders: Option<&Bound<'_, PyDict>>,
    routers: Option<&Bound<'_, PyDict>>,
) -> PyResult<(String, String)> {
    let (own, failed) = orders::from_dict(orders)?;
    let own = routers::with_dict(own, routers, &failed)?;
    let r = py.allow_threads(|| {
        let prepared = load_with_orders(&path, traces.as_deref(), &own).map_err(|e| e.to_string())?;
        run(&prepared, sweep, threads, out.as_deref())
    });
    checked(r, &failed).map_err(PyValueError::new_err)
}

/// Runs an experiment given as JSON (the TOML file's keys), trace paths
/// relative to `base`, with the queue orders of `orders` and the grid
/// routers of `routers`.
#[pyfunction]
#[pyo3(signature = (spec, base, sweep=false, threads=None, traces=None, out=None, orders=None, routers=None))]
#[allow(clippy::too_many_arguments)]
fn run_spec(
    py: Python<'_>,
    spec: &str,
    base: PathBuf,
    sweep: bool,
    threads: Option<usize>,
    traces: Option<PathBuf>,
    out: Option<PathBuf>,
    orders: Option<&Bound<'_, PyDict>>,
    routers: Option<&Bound<'_, PyDict>>,
) -> PyResult<(String, String)> {
    let spec = spec.to_string();
    let (own, failed) = orders::from_dict(orders)?;
    let own = routers::with_dict(own, routers, &failed)?;
    let r = py.allow_threads(|| {
        let spec: Experiment = serde_json::from_str(&spec).map_err(|e| format!("experiment: {e}"))?;
        let prepared = prepare_with_orders(spec, &base, traces.as_deref(), &own).map_err(|e| e.to_string())?;
        run(&prepared, sweep, threads, out.as_deref())
    });
    checked(r, &failed).map_err(PyValueError::new_err)
}

/// Runs the workflow admission experiment file at `path` ([VRM] 4.6):
/// its summary as JSON and each run's scheduler time as CSV.
#[pyfunction]
#[pyo3(signature = (path, threads=None, out=None))]
fn run_admission(
    py: Python<'_>,
    path: PathBuf,
    threads: Option<usize>,
    out: Option<PathBuf>,
) -> PyResult<(String, String)> {
    let r = py.allow_threads(|| {
        let (exp, _) = AdmissionExperiment::load(&path).map_err(|e| e.to_string())?;
        let threads = threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let (report, times) = exp.sweep_timed(threads, &|| {}).map_err(|e| e.to_string())?;
        if let Some(dir) = &out {
            admission::write_all(dir, &report, &times).map_err(|e| format!("writing {}: {e}", dir.display()))?;
        }
        let summary = serde_json::to_string(&report).map_err(|e| e.to_string())?;
        Ok::<_, String>((summary, timing::csv(&admission::timed(&report, &times))))
    });
    r.map_err(PyValueError::new_err)
}

/// The native part of the `brokk` package.
#[pymodule]
fn _brokk(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_file, m)?)?;
    m.add_function(wrap_pyfunction!(run_spec, m)?)?;
    m.add_function(wrap_pyfunction!(run_admission, m)?)?;
    m.add_class::<orders::PyJob>()?;
    m.add_class::<routers::PySite>()?;
    Ok(())
}
