//! Bindings of the data-at-rest API: Parquet / CSV / JSONL / text / WebDataset readers, Arrow import and
//! export (the Arrow C stream interface, as PyCapsules), and the Parquet / JSONL sinks.
//! Translation only; every long call runs with the GIL released.

use std::collections::BTreeMap;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use sluice::arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use sluice::arrow_array::{RecordBatch, RecordBatchReader};
use sluice::{
    csv_options, CsvSource, Dataset, Error, JsonlOptions, LinesFormat, LinesSource, ShardShuffle,
    SinkOptions, WdsOptions, DEFAULT_MAX_MEMBER_SIZE,
};

use crate::dataset::PyDataset;
use crate::errors::IntoPy;
use crate::options::RunArgs;

const STREAM: &std::ffi::CStr = c"arrow_array_stream";

fn py_ds(
    py: Python<'_>,
    f: impl FnOnce() -> sluice::Result<Dataset> + Send,
) -> PyResult<PyDataset> {
    py.detach(f).py().map(|ds| PyDataset { ds })
}

#[pyfunction]
#[pyo3(signature = (paths, columns=None))]
fn read_parquet(
    py: Python<'_>,
    paths: Vec<String>,
    columns: Option<Vec<String>>,
) -> PyResult<PyDataset> {
    py_ds(py, || Dataset::read_parquet(&paths, columns.as_deref()))
}

/// Returns the dataset and the number of malformed records skipped.
#[pyfunction]
#[pyo3(signature = (paths, schema, delimiter=None, has_header=true, on_error="raise"))]
fn read_csv(
    py: Python<'_>,
    paths: Vec<String>,
    schema: BTreeMap<String, String>,
    delimiter: Option<char>,
    has_header: bool,
    on_error: &str,
) -> PyResult<(PyDataset, u64)> {
    let opts = csv_options(&schema, delimiter, has_header, on_error.parse().py()?).py()?;
    let src = py.detach(|| CsvSource::open(&paths, &opts)).py()?;
    let skipped = src.skipped();
    Ok((
        PyDataset {
            ds: Dataset::from_source(Arc::new(src)),
        },
        skipped,
    ))
}

/// Returns the dataset and the number of invalid lines skipped.
#[pyfunction]
#[pyo3(signature = (paths, schema, on_error="raise", errors="strict"))]
fn read_jsonl(
    py: Python<'_>,
    paths: Vec<String>,
    schema: BTreeMap<String, String>,
    on_error: &str,
    errors: &str,
) -> PyResult<(PyDataset, u64)> {
    let opts = JsonlOptions::from_names(&schema, on_error, errors).py()?;
    let ds = py.detach(|| Dataset::read_jsonl_with(&paths, &opts)).py()?;
    let skipped = ds.plan().source().skipped();
    Ok((PyDataset { ds }, skipped))
}

/// Returns the dataset and the number of lines skipped (`on_error="skip"`: not UTF-8).
#[pyfunction]
#[pyo3(signature = (paths, on_error="raise", errors="strict"))]
fn read_text(
    py: Python<'_>,
    paths: Vec<String>,
    on_error: &str,
    errors: &str,
) -> PyResult<(PyDataset, u64)> {
    let opts = JsonlOptions::from_names(&BTreeMap::new(), on_error, errors).py()?;
    let src = py
        .detach(|| LinesSource::open_with(&paths, LinesFormat::Text, &opts))
        .py()?;
    let skipped = src.skipped();
    let ds = Dataset::from_source(Arc::new(src));
    Ok((PyDataset { ds }, skipped))
}

/// `shuffle_shards`: shuffle the shard order per epoch; `shuffle_seed`: from this seed
/// rather than the iteration's. `on_error` and `max_member_size`: [`WdsOptions`].
#[pyfunction]
#[pyo3(signature = (paths, rank=None, world_size=None, shuffle_shards=false, shuffle_seed=None,
                    on_error="raise", max_member_size=DEFAULT_MAX_MEMBER_SIZE))]
#[allow(clippy::too_many_arguments)]
fn read_webdataset(
    py: Python<'_>,
    paths: Vec<String>,
    rank: Option<u64>,
    world_size: Option<u64>,
    shuffle_shards: bool,
    shuffle_seed: Option<u64>,
    on_error: &str,
    max_member_size: u64,
) -> PyResult<PyDataset> {
    let ranks = match (rank, world_size) {
        (Some(r), Some(n)) => Some((r, n)),
        (None, None) => None,
        _ => {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "give both rank and world_size, or neither",
            ))
        }
    };
    let shuffle = match (shuffle_shards, shuffle_seed) {
        (false, _) => None,
        (true, None) => Some(ShardShuffle::IterationSeed),
        (true, Some(s)) => Some(ShardShuffle::Seed(s)),
    };
    let opts = WdsOptions {
        on_error: on_error.parse().py()?,
        max_member_size,
    };
    py_ds(py, || {
        Dataset::read_webdataset_with(&paths, ranks, shuffle, opts)
    })
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
    py.detach(|| ds.ds.write_parquet(&dir, &sink, &opts)).py()
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
    py.detach(|| ds.ds.write_jsonl(&dir, &sink, &opts)).py()
}

/// Pulls each batch with the GIL released: the consumer (pyarrow) may hold it while Python
/// UDFs in the pipeline need it.
struct Detached<R>(R);

impl<R: RecordBatchReader + Send> Iterator for Detached<R> {
    type Item = <R as Iterator>::Item;
    fn next(&mut self) -> Option<Self::Item> {
        Python::attach(|py| py.detach(|| self.0.next()))
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
    let batches = py.detach(|| ds.ds.arrow_batches(batch_rows, &opts)).py()?;
    let stream = FFI_ArrowArrayStream::new(Box::new(Detached(batches)));
    PyCapsule::new_with_value(py, stream, STREAM)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(read_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(read_text, m)?)?;
    m.add_function(wrap_pyfunction!(read_webdataset, m)?)?;
    m.add_function(wrap_pyfunction!(from_arrow_stream, m)?)?;
    m.add_function(wrap_pyfunction!(write_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(write_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(to_arrow_stream, m)?)?;
    Ok(())
}
