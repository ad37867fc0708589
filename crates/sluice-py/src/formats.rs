//! Bindings of the data-at-rest API: Arrow import and export (the Arrow C stream interface, as
//! PyCapsules) and the Parquet / JSONL sinks (the readers are in `sources`).
//! Translation only; every long call runs with the GIL released, checking for Ctrl-C
//! ([`crate::gil::released`]).

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use sluice::arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use sluice::arrow_array::{RecordBatch, RecordBatchReader};
use sluice::{Dataset, Error, SinkOptions};

use crate::dataset::PyDataset;
use crate::errors::IntoPy;
use crate::gil::released;
use crate::options::RunArgs;

const STREAM: &std::ffi::CStr = c"arrow_array_stream";

fn py_ds(
    py: Python<'_>,
    f: impl FnOnce() -> sluice::Result<Dataset> + Send,
) -> PyResult<PyDataset> {
    released(py, f)?.py().map(|ds| PyDataset { ds })
}

/// A dataset over the batches of an Arrow C stream capsule (`obj.__arrow_c_stream__()`).
#[pyfunction]
fn from_arrow_stream(py: Python<'_>, capsule: &Bound<'_, PyCapsule>) -> PyResult<PyDataset> {
    let ptr = capsule.pointer_checked(Some(STREAM))?;
    // SAFETY: the capsule is named `arrow_array_stream`, so by the Arrow PyCapsule protocol it
    // holds an `ArrowArrayStream`; `from_raw` moves it out and leaves a released stream behind.
    let reader = unsafe { ArrowArrayStreamReader::from_raw(ptr.as_ptr().cast()) }
        .map_err(|e| Error::invalid(format!("not an Arrow stream: {e}")))
        .py()?;
    py_ds(py, move || {
        let batches = reader
            .collect::<Result<Vec<RecordBatch>, _>>()
            .map_err(|e| Error::data(e.to_string()))?;
        Dataset::from_arrow(batches)
    })
}

#[pyfunction]
#[pyo3(signature = (ds, dir, rows_per_file, rows_per_group, seed=0, num_threads=None))]
fn write_parquet(
    py: Python<'_>,
    ds: &PyDataset,
    dir: String,
    rows_per_file: usize,
    rows_per_group: usize,
    seed: u64,
    num_threads: Option<usize>,
) -> PyResult<Vec<String>> {
    let sink = SinkOptions {
        rows_per_file,
        rows_per_group,
    };
    let opts = RunArgs {
        seed,
        num_threads,
        ..Default::default()
    }
    .options(py)?;
    released(py, || ds.ds.write_parquet(&dir, &sink, &opts))?.py()
}

#[pyfunction]
#[pyo3(signature = (ds, dir, rows_per_file, seed=0, num_threads=None))]
fn write_jsonl(
    py: Python<'_>,
    ds: &PyDataset,
    dir: String,
    rows_per_file: usize,
    seed: u64,
    num_threads: Option<usize>,
) -> PyResult<Vec<String>> {
    let sink = SinkOptions {
        rows_per_file,
        ..Default::default()
    };
    let opts = RunArgs {
        seed,
        num_threads,
        ..Default::default()
    }
    .options(py)?;
    released(py, || ds.ds.write_jsonl(&dir, &sink, &opts))?.py()
}

/// `format`: `"webdataset"` or `"parquet"`; `shard_bytes`: a shard's size; `ray_factory` and
/// `actors`: a Ray context's, to run the pipeline's element-wise stages on Ray.
#[pyfunction]
#[pyo3(signature = (ds, dir, format, shard_bytes, seed=0, num_threads=None, ray_factory=None, actors=None))]
#[allow(clippy::too_many_arguments)]
fn write_shards(
    py: Python<'_>,
    ds: &PyDataset,
    dir: String,
    format: &str,
    shard_bytes: u64,
    seed: u64,
    num_threads: Option<usize>,
    ray_factory: Option<Py<PyAny>>,
    actors: Option<usize>,
) -> PyResult<Vec<String>> {
    let shards = sluice::ShardOptions {
        format: format.parse().py()?,
        shard_bytes,
    };
    let opts = RunArgs {
        seed,
        num_threads,
        ray_factory,
        actors,
        ..Default::default()
    }
    .options(py)?;
    released(py, || ds.ds.write_shards(&dir, &shards, &opts))?.py()
}

/// Pulls each batch with the GIL released (the consumer, pyarrow, may hold it while Python
/// UDFs in the pipeline need it), checking for Ctrl-C while the pipeline makes it. A Ctrl-C
/// stops the run and ends the stream with an error naming the `KeyboardInterrupt`: the Arrow
/// C stream interface carries only a message, so the consumer raises its own exception type
/// (pyarrow: `ArrowInvalid`). (The first batch is made by `to_arrow_stream`, which raises the
/// `KeyboardInterrupt` itself.)
struct Detached<R>(R);

impl<R: RecordBatchReader + Send> Iterator for Detached<R> {
    type Item = <R as Iterator>::Item;
    fn next(&mut self) -> Option<Self::Item> {
        Python::attach(|py| match released(py, || self.0.next()) {
            Ok(next) => next,
            Err(e) => {
                let ty = e.get_type(py).name().map(|n| n.to_string());
                let why = format!("interrupted ({})", ty.unwrap_or_default());
                Some(Err(sluice::arrow_schema::ArrowError::ExternalError(
                    why.into(),
                )))
            }
        })
    }
}

impl<R: RecordBatchReader + Send> RecordBatchReader for Detached<R> {
    fn schema(&self) -> sluice::arrow_schema::SchemaRef {
        self.0.schema()
    }
}

/// The dataset's outputs as an Arrow C stream capsule of record batches of `batch_rows` rows.
#[pyfunction]
#[pyo3(signature = (ds, batch_rows, seed=0, num_threads=None))]
fn to_arrow_stream<'py>(
    py: Python<'py>,
    ds: &PyDataset,
    batch_rows: usize,
    seed: u64,
    num_threads: Option<usize>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let opts = RunArgs {
        seed,
        num_threads,
        ..Default::default()
    }
    .options(py)?;
    let batches = released(py, || ds.ds.arrow_batches(batch_rows, &opts))?.py()?;
    let stream = FFI_ArrowArrayStream::new(Box::new(Detached(batches)));
    PyCapsule::new_with_value(py, stream, STREAM)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(from_arrow_stream, m)?)?;
    m.add_function(wrap_pyfunction!(write_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(write_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(write_shards, m)?)?;
    m.add_function(wrap_pyfunction!(to_arrow_stream, m)?)?;
    Ok(())
}
