//! Python bindings of Brokk's simulator: run an experiment (a TOML file, or
//! one built in Python and passed as JSON) and hand back its summary JSON and
//! its `jobs.csv`, from which the `brokk` Python package builds pandas
//! DataFrames. The simulations run without holding the interpreter's lock.

use std::path::{Path, PathBuf};

use brokk_sim::experiment::{load_with, prepare_with, run_points, Experiment, Prepared};
use brokk_sim::{export, report};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

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

/// Runs the experiment file at `path`.
#[pyfunction]
#[pyo3(signature = (path, sweep=false, threads=None, traces=None, out=None))]
fn run_file(
    py: Python<'_>,
    path: PathBuf,
    sweep: bool,
    threads: Option<usize>,
    traces: Option<PathBuf>,
    out: Option<PathBuf>,
) -> PyResult<(String, String)> {
    py.allow_threads(|| {
        let prepared = load_with(&path, traces.as_deref()).map_err(|e| e.to_string())?;
        run(&prepared, sweep, threads, out.as_deref())
    })
    .map_err(PyValueError::new_err)
}

/// Runs an experiment given as JSON (the TOML file's keys), trace paths
/// relative to `base`.
#[pyfunction]
#[pyo3(signature = (spec, base, sweep=false, threads=None, traces=None, out=None))]
fn run_spec(
    py: Python<'_>,
    spec: &str,
    base: PathBuf,
    sweep: bool,
    threads: Option<usize>,
    traces: Option<PathBuf>,
    out: Option<PathBuf>,
) -> PyResult<(String, String)> {
    let spec = spec.to_string();
    py.allow_threads(|| {
        let spec: Experiment = serde_json::from_str(&spec).map_err(|e| format!("experiment: {e}"))?;
        let prepared = prepare_with(spec, &base, traces.as_deref()).map_err(|e| e.to_string())?;
        run(&prepared, sweep, threads, out.as_deref())
    })
    .map_err(PyValueError::new_err)
}

/// The native part of the `brokk` package.
#[pymodule]
fn _brokk(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run_file, m)?)?;
    m.add_function(wrap_pyfunction!(run_spec, m)?)?;
    Ok(())
}
