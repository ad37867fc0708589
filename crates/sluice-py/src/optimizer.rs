//! Caching, profiling and planning, as module functions taking a dataset. Profiles, options
//! and plans cross as JSON; the Python side (`sluice.optimizer`) wraps them.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sluice::exec::backend::RAY;
use sluice::{OptimizerOptions, Plan, Profile, ProfileOptions};

use crate::dataset::PyDataset;
use crate::errors::IntoPy;
use crate::iter::PyStats;
use crate::options::RunArgs;

fn parse_options(json: &str) -> PyResult<OptimizerOptions> {
    serde_json::from_str(json)
        .map_err(|e| PyValueError::new_err(format!("invalid optimizer options: {e}")))
}

#[pyfunction]
#[pyo3(signature = (ds, budget, disk_budget=0))]
fn cache(ds: &PyDataset, budget: u64, disk_budget: u64) -> PyResult<PyDataset> {
    Ok(PyDataset {
        ds: ds.ds.cache_with(budget, disk_budget).py()?,
    })
}

#[pyfunction]
#[pyo3(signature = (ds, samples, seconds, seed=0, epoch_share=0.0))]
fn profile(
    py: Python<'_>,
    ds: &PyDataset,
    samples: u64,
    seconds: f64,
    seed: u64,
    epoch_share: f64,
) -> PyResult<String> {
    let opts = ProfileOptions {
        samples,
        seconds,
        seed,
        epoch_share,
    };
    // Python UDFs take the GIL per call; the rest runs without it.
    let p = crate::gil::released(py, || ds.ds.profile(&opts))?.py()?;
    Ok(p.to_json())
}

/// A profile (JSON) of `ds` from a run of it that timed its ops (`stats`: its
/// `stats_handle()`), once it has read as many samples as a profile with these settings
/// would run; `None` before.
#[pyfunction]
#[pyo3(signature = (ds, stats, samples, epoch_share=0.0))]
fn run_profile(ds: &PyDataset, stats: &PyStats, samples: u64, epoch_share: f64) -> Option<String> {
    let opts = ProfileOptions {
        samples,
        epoch_share,
        ..Default::default()
    };
    ds.ds
        .run_profile(stats.pipeline(), &opts)
        .map(|p| p.to_json())
}

#[pyfunction]
fn profile_text(json: &str) -> PyResult<String> {
    Ok(Profile::from_json(json).py()?.to_string())
}

/// `ray_factory`: the Ray pool maker of a `sluice.Context`, so the offload rule may place
/// stages on Ray.
#[pyfunction]
#[pyo3(signature = (ds, profile_json, options_json, seed=0, ray_factory=None))]
fn optimize(
    py: Python<'_>,
    ds: &PyDataset,
    profile_json: &str,
    options_json: &str,
    seed: u64,
    ray_factory: Option<Py<PyAny>>,
) -> PyResult<String> {
    let profile = Profile::from_json(profile_json).py()?;
    let options = parse_options(options_json)?;
    // Local runs can always use the process pool, so the placement rule may choose it; on
    // Ray, Python stages run in Ray's worker processes instead.
    let iter = RunArgs {
        seed,
        ray_factory,
        ..Default::default()
    }
    .options(py)?;
    // The planner does not look at the interrupt request: a Ctrl-C is raised when it ends.
    let plan = crate::gil::released(py, || ds.ds.optimize(&profile, &options, &iter))?.py()?;
    Ok(plan.to_json())
}

/// The cost model's prediction (JSON) for `ds` run with `plan_json` under `options_json`.
#[pyfunction]
fn predict(
    py: Python<'_>,
    ds: &PyDataset,
    profile_json: &str,
    plan_json: &str,
    options_json: &str,
) -> PyResult<String> {
    let profile = Profile::from_json(profile_json).py()?;
    let plan = Plan::from_json(plan_json).py()?;
    let options = parse_options(options_json)?;
    let p = crate::gil::released(py, || ds.ds.predict(&profile, &plan, &options))?.py()?;
    serde_json::to_string(&p).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The plan (JSON) a Ray context runs `ds` with when no optimizer plan decides: every
/// element-wise stage that can travel on `actors` Ray actors.
#[pyfunction]
#[pyo3(signature = (ds, actors, seed=0, num_threads=None, plan_json=None))]
fn offload_plan(
    py: Python<'_>,
    ds: &PyDataset,
    actors: usize,
    seed: u64,
    num_threads: Option<usize>,
    plan_json: Option<&str>,
) -> PyResult<String> {
    let opts = RunArgs {
        seed,
        num_threads,
        plan_json,
        ..Default::default()
    }
    .options(py)?;
    // Lowering may read a blocking source's length, which runs its input.
    let plan = crate::gil::released(py, || ds.ds.offload_plan(&opts, RAY, actors))?.py()?;
    Ok(plan.to_json())
}

#[pyfunction]
fn plan_text(json: &str) -> PyResult<String> {
    Ok(Plan::from_json(json).py()?.to_string())
}

#[pyfunction]
fn default_optimizer_options() -> String {
    serde_json::to_string(&OptimizerOptions::default()).unwrap_or_default()
}

/// Adds the functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cache, m)?)?;
    m.add_function(wrap_pyfunction!(profile, m)?)?;
    m.add_function(wrap_pyfunction!(profile_text, m)?)?;
    m.add_function(wrap_pyfunction!(run_profile, m)?)?;
    m.add_function(wrap_pyfunction!(optimize, m)?)?;
    m.add_function(wrap_pyfunction!(predict, m)?)?;
    m.add_function(wrap_pyfunction!(offload_plan, m)?)?;
    m.add_function(wrap_pyfunction!(plan_text, m)?)?;
    m.add_function(wrap_pyfunction!(default_optimizer_options, m)?)?;
    Ok(())
}
