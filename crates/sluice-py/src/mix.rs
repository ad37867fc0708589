//! `sluice.mix`: forwards to `Dataset::mix`.

use pyo3::prelude::*;
use sluice::{Dataset, StopPolicy};

use crate::dataset::PyDataset;
use crate::errors::IntoPy;

#[pyfunction]
#[pyo3(signature = (datasets, weights, seed, stop))]
fn mix(
    py: Python<'_>,
    datasets: Vec<PyRef<'_, PyDataset>>,
    weights: Option<Vec<f64>>,
    seed: u64,
    stop: &str,
) -> PyResult<PyDataset> {
    let stop: StopPolicy = stop.parse().py()?;
    let children: Vec<Dataset> = datasets.iter().map(|d| d.ds.clone()).collect();
    // Mixing reads the inputs' lengths: a blocking input (sort, groupby) runs then.
    let ds = crate::gil::released(py, || {
        Dataset::mix(&children, weights.as_deref(), seed, stop)
    })?
    .py()?;
    Ok(PyDataset { ds })
}

/// Adds `mix` to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mix, m)?)
}
