//! Worker pools implemented in Python (the `ray` backend): translation only.
//!
//! The Rust side of a pooled stage is [`RemoteStage`] (init message, chunks to request frames,
//! reply frames back to chunks — the same wire format the process pool uses); the Python side
//! is any object made by `factory(init, workers, label)` with a `parallelism` attribute, a
//! `run(frame: bytes) -> bytes` method and `shutdown()` (`sluice.ray_backend.RayPool`). The
//! placement itself is [`sluice::Dataset::offload_plan`].

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice::exec::{Backend, Backends, Chunk, StageWork, Workers};
use sluice::{IterOptions, Result};
use sluice_remote::RemoteStage;

use crate::dataset::PyDataset;
use crate::errors::{from_py, IntoPy};
use crate::iter::PyIter;

/// A backend whose workers a Python factory makes.
#[derive(Debug)]
struct PyPoolBackend {
    name: String,
    factory: Py<PyAny>,
}

impl Backend for PyPoolBackend {
    fn name(&self) -> &str {
        &self.name
    }
    fn start(&self, work: StageWork, workers: usize) -> Result<Box<dyn Workers>> {
        let stage = RemoteStage::new(&work, None)?;
        let (pool, parallelism) = Python::attach(|py| -> PyResult<_> {
            let pool =
                self.factory
                    .bind(py)
                    .call1((stage.init(), workers, stage.label().to_string()))?;
            let parallelism: usize = pool.getattr("parallelism")?.extract()?;
            Ok((pool.unbind(), parallelism))
        })
        .map_err(from_py)?;
        Ok(Box::new(PyPoolWorkers {
            stage,
            pool,
            parallelism,
        }))
    }
}

struct PyPoolWorkers {
    stage: RemoteStage,
    pool: Py<PyAny>,
    parallelism: usize,
}

impl Workers for PyPoolWorkers {
    fn parallelism(&self) -> usize {
        self.parallelism.max(1)
    }
    fn run(&self, chunk: Chunk) -> Result<Chunk> {
        let frame = self.stage.request(chunk, None)?;
        // The pool waits for its actor with the GIL released (Ray's get does).
        let reply = Python::attach(|py| -> PyResult<Vec<u8>> {
            let out = self
                .pool
                .bind(py)
                .call_method1("run", (PyBytes::new(py, &frame),))?;
            Ok(out.cast::<PyBytes>()?.as_bytes().to_vec())
        })
        .map_err(from_py)?;
        self.stage.reply(&reply, Some(&*crate::worker::codec()))
    }
    fn shutdown(&self) {
        Python::attach(|py| {
            // A pool whose cluster is already gone has nothing left to stop.
            let _ = self.pool.bind(py).call_method0("shutdown");
        })
    }
}

fn options(
    seed: u64,
    num_threads: Option<usize>,
    chunk_size: Option<usize>,
    plan_json: Option<&str>,
    fuse_ops: bool,
) -> PyResult<IterOptions> {
    Ok(IterOptions {
        seed,
        num_threads,
        chunk_size,
        plan: crate::optimizer::parse_plan(plan_json)?,
        fuse_ops,
        ..Default::default()
    })
}

/// The offload plan (JSON) of `ds`: element-wise stages on `backend` with `workers` workers.
#[pyfunction]
#[pyo3(signature = (ds, seed, num_threads, chunk_size, backend, workers, plan_json=None))]
fn offload_plan(
    ds: &PyDataset,
    seed: u64,
    num_threads: Option<usize>,
    chunk_size: Option<usize>,
    backend: &str,
    workers: usize,
    plan_json: Option<&str>,
) -> PyResult<String> {
    let opts = options(seed, num_threads, chunk_size, plan_json, true)?;
    Ok(ds.ds.offload_plan(&opts, backend, workers).py()?.to_json())
}

/// Starts `ds` with its element-wise stages on the pool `factory` makes (as `backend`).
#[pyfunction]
#[pyo3(signature = (ds, seed, num_threads, chunk_size, backend, factory, workers, plan_json=None, fuse_ops=true))]
#[allow(clippy::too_many_arguments)]
fn iter_offloaded(
    py: Python<'_>,
    ds: &PyDataset,
    seed: u64,
    num_threads: Option<usize>,
    chunk_size: Option<usize>,
    backend: String,
    factory: Py<PyAny>,
    workers: usize,
    plan_json: Option<&str>,
    fuse_ops: bool,
) -> PyResult<PyIter> {
    let pool = Arc::new(PyPoolBackend {
        name: backend.clone(),
        factory,
    });
    let opts = IterOptions {
        backends: Backends::default().with(pool),
        ..options(seed, num_threads, chunk_size, plan_json, fuse_ops)?
    };
    let opts = ds.ds.offloaded(&opts, &backend, workers).py()?;
    let exec = py.detach(|| ds.ds.iter(&opts)).py()?;
    Ok(PyIter::new(exec, ds.ds.clone(), opts))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(offload_plan, m)?)?;
    m.add_function(wrap_pyfunction!(iter_offloaded, m)?)?;
    Ok(())
}
