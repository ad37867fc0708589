//! Bindings of the relational ops (`sort`, `groupby().aggregate()`, `repartition`).
//! Translation only. Building one runs nothing; the work happens when an iteration is
//! planned, which the iteration bindings do with the GIL released.

use std::path::PathBuf;

use pyo3::prelude::*;
use sluice::{Agg, AggFn, BlockingOptions, DEFAULT_MEMORY_BUDGET};

use crate::dataset::PyDataset;
use crate::errors::IntoPy;

fn options(memory_budget: Option<u64>, spill_dir: Option<PathBuf>, seed: u64) -> BlockingOptions {
    BlockingOptions {
        memory_budget: memory_budget.unwrap_or(DEFAULT_MEMORY_BUDGET),
        spill_dir,
        seed,
        num_threads: None,
    }
}

#[pyfunction]
#[pyo3(signature = (ds, by, descending, memory_budget=None, spill_dir=None, seed=0))]
fn sort(
    ds: &PyDataset,
    by: Vec<String>,
    descending: Vec<bool>,
    memory_budget: Option<u64>,
    spill_dir: Option<PathBuf>,
    seed: u64,
) -> PyResult<PyDataset> {
    let opts = options(memory_budget, spill_dir, seed);
    let ds = ds.ds.sort(&by, &descending, &opts).py()?;
    Ok(PyDataset { ds })
}

/// `aggs`: `(output name, function, input field or None)` triples.
#[pyfunction]
#[pyo3(signature = (ds, keys, aggs, memory_budget=None, spill_dir=None, seed=0))]
fn aggregate(
    ds: &PyDataset,
    keys: Vec<String>,
    aggs: Vec<(String, String, Option<String>)>,
    memory_budget: Option<u64>,
    spill_dir: Option<PathBuf>,
    seed: u64,
) -> PyResult<PyDataset> {
    let aggs = aggs
        .into_iter()
        .map(|(name, func, field)| Ok(Agg::new(name, func.parse::<AggFn>()?, field.as_deref())))
        .collect::<sluice::Result<Vec<_>>>()
        .py()?;
    let opts = options(memory_budget, spill_dir, seed);
    let ds = ds.ds.groupby(&keys).aggregate(aggs, &opts).py()?;
    Ok(PyDataset { ds })
}

#[pyfunction]
#[pyo3(signature = (ds, n, memory_budget=None, spill_dir=None, seed=0))]
fn repartition(
    ds: &PyDataset,
    n: usize,
    memory_budget: Option<u64>,
    spill_dir: Option<PathBuf>,
    seed: u64,
) -> PyResult<PyDataset> {
    let opts = options(memory_budget, spill_dir, seed);
    let ds = ds.ds.repartition(n, &opts).py()?;
    Ok(PyDataset { ds })
}

/// Adds the functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sort, m)?)?;
    m.add_function(wrap_pyfunction!(aggregate, m)?)?;
    m.add_function(wrap_pyfunction!(repartition, m)?)?;
    Ok(())
}
