//! `sluice._native`: the Python bindings. Translation only — every method forwards to the
//! Rust API; conversions live in `convert`, error mapping in `errors`, releasing the GIL
//! (with Ctrl-C checks) in `gil`.

mod cli;
mod convert;
mod dataset;
mod errors;
mod formats;
mod gil;
mod iter;
mod log;
mod metrics;
mod mix;
mod optimizer;
mod options;
mod pinned;
mod placement;
mod relational;
mod remote;
mod report;
mod rows;
mod service;
mod sources;
mod udf;
mod user_source;
mod worker;

use pyo3::prelude::*;

// Samples are made and freed on different threads: see `sluice::alloc` for the allocator.
#[global_allocator]
static ALLOC: sluice::alloc::MiMalloc = sluice::alloc::MiMalloc;

/// The cores this process may run on (its affinity and CPU quota): what every default
/// thread count of the engine takes, so Python's own sizing agrees with it.
#[pyfunction]
fn cores() -> usize {
    sluice::cores::cores()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<dataset::PyDataset>()?;
    m.add_class::<dataset::PyOp>()?;
    m.add_class::<iter::PyIter>()?;
    m.add_class::<iter::PyStats>()?;
    m.add_function(wrap_pyfunction!(iter::elastic_state_json, m)?)?;
    m.add_function(wrap_pyfunction!(iter::join_stopped, m)?)?;
    m.add_function(wrap_pyfunction!(cores, m)?)?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(report::render_report, m)?)?;
    m.add_function(wrap_pyfunction!(report::write_report, m)?)?;
    worker::register(m)?;
    formats::register(m)?;
    sources::register(m)?;
    user_source::register(m)?;
    optimizer::register(m)?;
    mix::register(m)?;
    metrics::register(m)?;
    relational::register(m)?;
    placement::register(m)?;
    pinned::register(m)?;
    remote::register(m)?;
    service::register(m)?;
    m.add("SluiceError", m.py().get_type::<errors::SluiceError>())?;
    m.add("PipelineError", m.py().get_type::<errors::PipelineError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
