//! `Dataset` and `Op`: one-line forwards to the Rust API.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyList;
use sluice::{Dataset, ElemMode, IterOptions, Length, OnError, OpRef, OpSpec};

use crate::convert::py_to_sample;
use crate::errors::IntoPy;
use crate::iter::PyIter;
use crate::options::RunArgs;
use crate::udf::{code_digest, PyUdf};

/// A built-in op, from its serde form.
#[pyclass(name = "Op", module = "sluice._native", frozen)]
pub struct PyOp {
    pub op: OpRef,
}

#[pymethods]
impl PyOp {
    #[new]
    fn new(spec_json: &str) -> PyResult<Self> {
        let spec = OpSpec::from_json(spec_json).py()?;
        Ok(PyOp {
            op: spec.build().py()?,
        })
    }
    #[getter]
    fn name(&self) -> String {
        self.op.name().to_string()
    }
    fn spec_json(&self) -> String {
        self.op.spec().to_string()
    }
    fn __repr__(&self) -> String {
        // A spec may carry a whole tokenizer's JSON: show its start, not megabytes.
        const SHOWN: usize = 200;
        let spec = self.op.spec().to_string();
        match spec.char_indices().nth(SHOWN) {
            Some((cut, _)) => format!("Op({}… ({} chars))", &spec[..cut], spec.len()),
            None => format!("Op({spec})"),
        }
    }
}

fn on_error(s: &str) -> PyResult<OnError> {
    s.parse().py()
}

#[pyclass(name = "Dataset", module = "sluice._native", frozen)]
pub struct PyDataset {
    pub ds: Dataset,
}

fn wrap(ds: sluice::Result<Dataset>) -> PyResult<PyDataset> {
    ds.map(|ds| PyDataset { ds }).py()
}

#[pymethods]
impl PyDataset {
    #[staticmethod]
    fn range(n: u64) -> PyDataset {
        PyDataset {
            ds: Dataset::range(n),
        }
    }
    #[staticmethod]
    fn from_items(items: &Bound<'_, PyList>) -> PyResult<PyDataset> {
        let samples = items
            .iter()
            .map(|it| py_to_sample(&it, "each item"))
            .collect::<sluice::Result<Vec<_>>>()
            .py()?;
        Ok(PyDataset {
            ds: Dataset::from_items(samples),
        })
    }
    /// The spec JSON ([`sluice::SourceSpec`]) this dataset reopens from when it is only a
    /// reopenable source (no steps, data not held in memory); `None` otherwise.
    fn source_spec(&self) -> Option<String> {
        match &**self.ds.plan() {
            sluice::LogicalPlan::Source(n) => n.source.ship().map(|s| s.to_string()),
            _ => None,
        }
    }
    #[pyo3(signature = (op, on_error="raise", keep_position=None))]
    fn map_op(
        &self,
        op: &PyOp,
        on_error: &str,
        keep_position: Option<bool>,
    ) -> PyResult<PyDataset> {
        wrap(
            self.ds
                .map(op.op.clone(), self::on_error(on_error)?, keep_position),
        )
    }
    #[pyo3(signature = (func, name, mode, wants_rng=false, on_error="raise", keep_position=None))]
    fn map_udf(
        &self,
        func: Bound<'_, PyAny>,
        name: String,
        mode: &str,
        wants_rng: bool,
        on_error: &str,
        keep_position: Option<bool>,
    ) -> PyResult<PyDataset> {
        let mode = match mode {
            "map" => ElemMode::Map,
            "filter" => ElemMode::Filter,
            "flat_map" => ElemMode::FlatMap,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "bad mode {other}"
                )))
            }
        };
        let digest = Some(code_digest(func.py(), &func)?);
        let op: OpRef = Arc::new(PyUdf {
            func: func.unbind(),
            name,
            mode,
            wants_rng,
            digest,
            keep_objects: false,
        });
        let on_error = self::on_error(on_error)?;
        wrap(match mode {
            ElemMode::Map => self.ds.map(op, on_error, keep_position),
            ElemMode::Filter => self.ds.filter(op),
            ElemMode::FlatMap => self.ds.flat_map(op),
        })
    }
    fn map_batches_udf(
        &self,
        py: Python<'_>,
        func: Py<PyAny>,
        name: String,
        batch_size: usize,
    ) -> PyResult<PyDataset> {
        let digest = Some(code_digest(py, func.bind(py))?);
        let op: OpRef = Arc::new(PyUdf {
            func,
            name,
            mode: ElemMode::Map,
            wants_rng: false,
            digest,
            keep_objects: false,
        });
        wrap(self.ds.map_batches(op, batch_size))
    }
    #[pyo3(signature = (size, drop_last, pad=None, ragged=false))]
    fn batch(
        &self,
        size: usize,
        drop_last: bool,
        pad: Option<Vec<(String, f64)>>,
        ragged: bool,
    ) -> PyResult<PyDataset> {
        wrap(
            self.ds
                .batch_with(size, drop_last, pad.unwrap_or_default(), ragged),
        )
    }
    #[pyo3(signature = (seed=None, reshuffle_each_epoch=true))]
    fn shuffle(&self, seed: Option<u64>, reshuffle_each_epoch: bool) -> PyResult<PyDataset> {
        wrap(self.ds.shuffle_with(seed, reshuffle_each_epoch))
    }
    #[pyo3(signature = (size, seed=None))]
    fn shuffle_buffer(&self, size: usize, seed: Option<u64>) -> PyResult<PyDataset> {
        wrap(self.ds.shuffle_buffer(size, seed))
    }
    #[pyo3(signature = (rank, world_size, equal, block=1))]
    fn shard(&self, rank: u64, world_size: u64, equal: bool, block: u64) -> PyResult<PyDataset> {
        wrap(self.ds.shard_in_blocks(rank, world_size, equal, block))
    }
    /// (whether the pipeline is sharded where a shard can go, the size of a batch right
    /// after that place): [`Dataset::split_point`].
    fn split_point(&self) -> (bool, Option<u64>) {
        let p = self.ds.split_point();
        (p.sharded, p.block)
    }
    /// [`Dataset::with_shards`], each shard as (rank, world_size, equal, block).
    fn with_shards(&self, shards: Vec<(u64, u64, bool, u64)>) -> PyResult<PyDataset> {
        let specs = shards
            .into_iter()
            .map(|(rank, world_size, equal, block)| {
                sluice::ShardSpec::try_new(rank, world_size, equal)?.with_block(block)
            })
            .collect::<sluice::Result<Vec<_>>>()
            .py()?;
        wrap(self.ds.with_shards(&specs))
    }
    #[pyo3(signature = (epochs=None))]
    fn repeat(&self, epochs: Option<u64>) -> PyResult<PyDataset> {
        wrap(self.ds.repeat(epochs))
    }
    fn prefetch(&self, n: usize) -> PyResult<PyDataset> {
        wrap(self.ds.prefetch(n))
    }
    #[pyo3(signature = (length, field, separator=None, drop_remainder=false, pad_id=0))]
    fn pack(
        &self,
        length: usize,
        field: String,
        separator: Option<i64>,
        drop_remainder: bool,
        pad_id: i64,
    ) -> PyResult<PyDataset> {
        wrap(self.ds.pack(sluice::PackSpec {
            length,
            field,
            separator,
            drop_remainder,
            pad_id,
        }))
    }
    fn limit(&self, n: u64) -> PyDataset {
        PyDataset {
            ds: self.ds.take(n),
        }
    }
    fn source_len(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        // A blocking source (sort, groupby) runs its input here, maybe Python code; a Ctrl-C
        // during it is raised, not taken for "no length".
        crate::gil::released(py, || self.ds.plan().source().len())
    }
    /// `len(ds)`: the number of outputs the plan knows; a `TypeError` saying why it does
    /// not (a filter, a stream, a repeat forever) otherwise.
    fn length(&self) -> PyResult<u64> {
        match self.ds.length() {
            Length::Known(n) => Ok(n),
            other => Err(PyTypeError::new_err(other.to_string())),
        }
    }
    /// `ds.count()`: the known length, or a run that counts the outputs (never converting
    /// them to Python objects), interruptible by Ctrl-C.
    #[pyo3(signature = (seed=0, num_threads=None, processes=None))]
    fn count(
        &self,
        py: Python<'_>,
        seed: u64,
        num_threads: Option<usize>,
        processes: Option<usize>,
    ) -> PyResult<u64> {
        let opts = RunArgs {
            seed,
            num_threads,
            processes,
            ..Default::default()
        }
        .options(py)?;
        crate::gil::released(py, || self.ds.count(&opts))?.py()
    }
    /// The field names the plan knows (`None` after a Python function).
    fn field_names(&self) -> Option<Vec<String>> {
        self.ds.field_names()
    }
    /// The class names a `read_images(labels="parent_dir")` source's labels index.
    fn class_names(&self) -> Option<Vec<String>> {
        self.ds.class_names()
    }
    fn logical_plan(&self) -> String {
        self.ds.plan().to_string()
    }
    /// The physical plan `iter` with these arguments runs, printed (`Dataset.explain`).
    #[pyo3(signature = (seed=0, num_threads=None, chunk_size=None, plan_json=None, processes=None, fuse_ops=true, actors=None))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of `Dataset.explain`
    fn physical_plan(
        &self,
        py: Python<'_>,
        seed: u64,
        num_threads: Option<usize>,
        chunk_size: Option<usize>,
        plan_json: Option<&str>,
        processes: Option<usize>,
        fuse_ops: bool,
        actors: Option<usize>,
    ) -> PyResult<String> {
        let opts = RunArgs {
            seed,
            num_threads,
            chunk_size,
            plan_json,
            processes,
            fuse_ops,
            ray_factory: None,
            actors,
            ..Default::default()
        }
        .options(py)?;
        crate::gil::released(py, || self.ds.physical_plan(&opts))?
            .map(|p| p.to_string())
            .py()
    }
    /// Starts a run at `epoch` (the Python layer resolves `epoch=None` to the dataset's next
    /// epoch). With a Ray context, `ray_factory` makes the `ray` backend's pools and
    /// `actors` says how many per stage (see [`RunArgs`]). `time_ops`: time each op as the
    /// run goes, for `run_profile`. `optimize_json`: `OptimizerOptions` for `optimize=True`
    /// (the facade's auto module; the iterator's `plan()` says which plan it runs).
    /// `device_decode`: the consumer decodes and crops images on its GPU.
    #[pyo3(signature = (seed=0, num_threads=None, chunk_size=None, plan_json=None, processes=None, fuse_ops=true, ray_factory=None, actors=None, epoch=0, time_ops=false, optimize_json=None, memory_limit=None, device_decode=false))]
    #[allow(clippy::too_many_arguments)]
    fn iter(
        &self,
        py: Python<'_>,
        seed: u64,
        num_threads: Option<usize>,
        chunk_size: Option<usize>,
        plan_json: Option<&str>,
        processes: Option<usize>,
        fuse_ops: bool,
        ray_factory: Option<Py<PyAny>>,
        actors: Option<usize>,
        epoch: u64,
        time_ops: bool,
        optimize_json: Option<&str>,
        memory_limit: Option<u64>,
        device_decode: bool,
    ) -> PyResult<PyIter> {
        let optimize = optimize_json
            .map(serde_json::from_str::<sluice::OptimizerOptions>)
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("optimizer options: {e}")))?;
        let opts = IterOptions {
            optimize,
            columns: true,
            objects: true,
            row_batches: true,
            device_decode,
            epoch,
            time_ops,
            ..RunArgs {
                seed,
                num_threads,
                chunk_size,
                plan_json,
                processes,
                fuse_ops,
                ray_factory,
                actors,
                memory_limit,
            }
            .options(py)?
        };
        let exec = crate::gil::released(py, || self.ds.iter(&opts))?.py()?;
        Ok(PyIter::new(exec, self.ds.clone(), opts))
    }
}
