//! Worker pools implemented in Python, and the `ray` backend: translation only.
//!
//! The Rust side of a pooled stage is [`RemoteStage`] (init message, chunks to request frames,
//! reply frames back to chunks — the same wire format the process pool uses). A backend here
//! calls a Python `factory(init, workers, label)`. When it returns a native
//! `sluice._native.ActorPool` (what `sluice.Context` makes: `sluice.ray_backend.ray_pool`),
//! the stage runs on [`sluice_remote::ActorPool`] — all the scheduling in Rust, Ray's calls
//! through the shim ([`ray_pool`]). Any other object is a pool of its own: a `parallelism`
//! attribute, a `run(frame: bytes, items: int)` method returning the reply frame or a split
//! reply `(frame, [uint8 arrays])`, and `shutdown()`. Which stages run on the backend is the
//! optimizer's offload rule: by cost in a plan, or forced by a Ray context
//! ([`sluice::RunContext::Remote`]).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice::exec::{Backend, Chunk, StageWork, Workers};
use sluice::Result;
use sluice_remote::RemoteStage;

use crate::errors::from_py;

#[path = "ray_pool.rs"]
mod ray_pool;

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
        let made = Python::attach(|py| -> PyResult<_> {
            let pool =
                self.factory
                    .bind(py)
                    .call1((stage.init(), workers, stage.label().to_string()))?;
            if let Ok(native) = pool.cast::<ray_pool::PyActorPool>() {
                return Ok(Made::Native(native.clone().unbind()));
            }
            let parallelism: usize = pool.getattr("parallelism")?.extract()?;
            Ok(Made::Python(pool.unbind(), parallelism))
        })
        .map_err(from_py)?;
        match made {
            // Started without the GIL: the actors' readiness arrives through Ray's thread.
            Made::Native(pool) => ray_pool::start(&pool, stage, work),
            Made::Python(pool, parallelism) => Ok(Box::new(PyPoolWorkers {
                stage,
                pool,
                parallelism,
            })),
        }
    }
}

/// What a factory made.
enum Made {
    Native(Py<ray_pool::PyActorPool>),
    Python(Py<PyAny>, usize),
}

/// A backend named `name` whose pools `factory` makes (for plans that place stages on it).
pub(crate) fn python_backend(name: &str, factory: Py<PyAny>) -> Arc<dyn Backend> {
    Arc::new(PyPoolBackend {
        name: name.to_string(),
        factory,
    })
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
        let items = chunk.len();
        let frame = self.stage.request(chunk, None)?;
        Python::attach(|py| -> Result<Chunk> {
            // The pool waits for its actor with the GIL released (Ray's get does).
            let out = self
                .pool
                .bind(py)
                .call_method1("run", (PyBytes::new(py, &frame), items))
                .map_err(from_py)?;
            decode(py, &self.stage, &out)
        })
    }
    fn shutdown(&self) {
        Python::attach(|py| {
            // A pool whose cluster is already gone has nothing left to stop.
            let _ = self.pool.bind(py).call_method0("shutdown");
        })
    }
}

/// The chunk in a pool's reply: a frame (`bytes`), or a split reply `(frame, [uint8 arrays])`
/// whose buffers are read where they are (a Ray object on this node is shared memory) and
/// copied once, into the tensors.
fn decode(py: Python<'_>, stage: &RemoteStage, out: &Bound<'_, PyAny>) -> Result<Chunk> {
    let codec = crate::worker::codec();
    if let Ok(bytes) = out.cast::<PyBytes>() {
        let bytes = bytes.as_bytes();
        return py.detach(|| stage.reply(bytes, Some(&*codec)));
    }
    let (head, bufs): (Bound<'_, PyBytes>, Vec<numpy::PyReadonlyArray1<'_, u8>>) =
        out.extract().map_err(|e: PyErr| {
            from_py(pyo3::exceptions::PyTypeError::new_err(format!(
                "a pool's run() must return bytes or (bytes, [uint8 arrays]): {e}"
            )))
        })?;
    let slices = bufs
        .iter()
        .map(crate::convert::u8_array_bytes)
        .collect::<PyResult<Vec<&[u8]>>>()
        .map_err(from_py)?;
    let head = head.as_bytes();
    py.detach(|| stage.reply_split(head, &slices, Some(&*codec)))
}

/// Adds `ActorPool` (the `ray` backend's pool) to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ray_pool::PyActorPool>()
}
