//! Stages in other processes: `ChainWorker` (what a pool process or a Ray actor hosts), the
//! worker loop of `python -m sluice._worker`, and the `processes` backend registration.
//! Translation only: the protocol, the pool and the stage rebuild live in `sluice-remote`;
//! here are the Python pieces they need (unpickling UDFs, carrying exceptions).
//!
//! The entry points release the GIL with a plain `py.detach`, not [`crate::gil::released`]:
//! they run the stage's Python functions on the calling thread on purpose, so a SIGINT aimed
//! at a pool worker interrupts the function itself (see `sluice._worker`) and the run stops
//! with that `KeyboardInterrupt` in the consumer; run on a helper thread, it would reach the
//! waiting thread instead, which cannot stop a stage runner. A call runs one chunk, and the
//! loop ends with its input: stopping a worker is its parent's job.

use std::os::fd::FromRawFd;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use sluice::{ElemMode, Error, ExternalError, OpRef, Result};
use sluice_remote::pool::serve;
use sluice_remote::{ExternalCodec, ProcessBackend, StageRunner};

use crate::errors::{from_py, IntoPy, PyErrBox};
use crate::udf::PyUdf;

/// Rebuilds a shipped Python UDF (`{"op": "python", "pickle": …}`) by unpickling it.
pub(crate) fn load_udf(shipped: &serde_json::Value) -> Result<Option<OpRef>> {
    if shipped.get("op").and_then(|o| o.as_str()) != Some("python") {
        return Ok(None);
    }
    let field = |k: &str| {
        shipped
            .get(k)
            .cloned()
            .ok_or_else(|| Error::Internal(format!("shipped Python op lacks '{k}'")))
    };
    let name = field("name")?.as_str().unwrap_or("udf").to_string();
    let mode: ElemMode = serde_json::from_value(field("mode")?)
        .map_err(|e| Error::Internal(format!("shipped Python op: {e}")))?;
    let wants_rng = field("wants_rng")?.as_bool().unwrap_or(false);
    let pickle = field("pickle")?;
    let pickle = pickle.as_str().unwrap_or_default();
    let func = Python::attach(|py| {
        py.import("sluice._worker")?
            .call_method1("loads", (pickle,))
            .map(Bound::unbind)
    })
    .map_err(|e| match from_py(e) {
        Error::External { message, source } => Error::External {
            message: format!("cannot load the function '{name}' in a worker process: {message}"),
            source,
        },
        other => other,
    })?;
    Ok(Some(Arc::new(PyUdf {
        func,
        name,
        mode,
        wants_rng,
        digest: None,
        keep_objects: false,
    })))
}

/// Carries Python exceptions between processes by pickling them (type, args and the
/// worker's traceback as a note), so the main process raises the same exception class.
struct PyExceptions;

impl ExternalCodec for PyExceptions {
    fn encode(&self, err: &ExternalError) -> Option<Vec<u8>> {
        let boxed = err.downcast_ref::<PyErrBox>()?;
        Python::attach(|py| {
            let out = py
                .import("sluice._worker")
                .and_then(|m| m.call_method1("dump_exception", (boxed.0.value(py),)))
                .ok()?;
            out.extract::<Vec<u8>>().ok()
        })
    }
    fn decode(&self, _message: &str, payload: &[u8]) -> Option<ExternalError> {
        Python::attach(|py| {
            let exc = py
                .import("sluice._worker")
                .and_then(|m| m.call_method1("load_exception", (PyBytes::new(py, payload),)))
                .ok()?;
            if exc.is_none() {
                return None;
            }
            let err: ExternalError = Arc::new(PyErrBox(PyErr::from_value(exc)));
            Some(err)
        })
    }
}

pub(crate) fn codec() -> Arc<dyn ExternalCodec> {
    Arc::new(PyExceptions)
}

/// Runs one stage of a pipeline on chunks sent by another process.
///
/// `init` is the stage's JSON (ops, source, seed) that the main process made; `run` takes a
/// request frame and returns the reply frame (the output chunk, or the stage's error —
/// the same typed error a local run raises).
#[pyclass(name = "ChainWorker", module = "sluice._native", frozen)]
pub struct ChainWorker {
    runner: StageRunner,
}

#[pymethods]
impl ChainWorker {
    #[new]
    fn new(py: Python<'_>, init: &str) -> PyResult<Self> {
        let runner = py
            .detach(|| StageRunner::new(init, &load_udf, Some(codec())))
            .py()?;
        Ok(ChainWorker { runner })
    }

    /// Runs the stage on one request frame; returns the reply frame. A `SystemExit` or
    /// `KeyboardInterrupt` raised in the stage's Python code (Ray ending this actor) is raised
    /// here rather than answered, so the chunk runs again on another actor.
    fn run<'py>(&self, py: Python<'py>, chunk: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let out = py
            .detach(|| self.runner.run_or_interrupted(chunk))
            .map_err(crate::errors::to_py)?;
        Ok(PyBytes::new(py, &out))
    }

    /// Runs the stage on one request frame; returns `(frame, buffers)`: buffers of at least
    /// `threshold` bytes are not in the frame but in `buffers`, as uint8 numpy arrays that
    /// own the output's memory (no copy), which pickle protocol 5 — and so Ray's object
    /// store — carries out of band. Interruptions are raised as [`ChainWorker::run`] raises
    /// them.
    #[pyo3(signature = (chunk, threshold=sluice_remote::wire::SPLIT_THRESHOLD))]
    fn run_split<'py>(
        &self,
        py: Python<'py>,
        chunk: &[u8],
        threshold: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyList>)> {
        let split = py
            .detach(|| self.runner.run_split_or_interrupted(chunk, threshold))
            .map_err(crate::errors::to_py)?;
        let buffers = PyList::empty(py);
        for b in split.buffers {
            buffers.append(crate::convert::out_of_band_to_py(py, b)?)?;
        }
        Ok((PyBytes::new(py, &split.frame), buffers))
    }
}

/// The loop of a pool process: the first frame is the stage's init JSON, then request
/// frames until end of input, each answered with a reply frame. The GIL is held only while
/// Python code runs.
#[pyfunction]
fn _serve_worker(py: Python<'_>, fd_in: i32, fd_out: i32) -> PyResult<()> {
    // SAFETY: the caller hands these descriptors over (dups made for the protocol alone).
    let (mut input, mut output) = unsafe {
        (
            std::fs::File::from_raw_fd(fd_in),
            std::fs::File::from_raw_fd(fd_out),
        )
    };
    py.detach(|| serve(&mut input, &mut output, &load_udf, Some(codec())))
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))
}

/// The `processes` backend: each worker runs `sys.executable -m sluice._worker`, seeing
/// this sluice package and this interpreter's `sys.path` (so functions pickled by reference
/// import there too).
pub fn process_backend(py: Python<'_>) -> PyResult<Arc<ProcessBackend>> {
    let sys = py.import("sys")?;
    let exe: String = sys.getattr("executable")?.extract()?;
    let path: Vec<String> = sys
        .getattr("path")?
        .try_iter()?
        .filter_map(|p| p.ok()?.extract::<String>().ok())
        .collect();
    let os = py.import("os")?;
    let sep: String = os.getattr("pathsep")?.extract()?;
    let file: String = py.import("sluice")?.getattr("__file__")?.extract()?;
    let root = std::path::Path::new(&file)
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let pythonpath = match std::env::var("PYTHONPATH") {
        Ok(old) if !old.is_empty() => format!("{root}{sep}{old}"),
        _ => root,
    };
    Ok(Arc::new(ProcessBackend::new(
        vec![exe, "-m".into(), "sluice._worker".into()],
        vec![
            ("PYTHONPATH".into(), pythonpath),
            ("SLUICE_SYS_PATH".into(), path.join(&sep)),
        ],
        Some(codec()),
    )))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChainWorker>()?;
    m.add_function(wrap_pyfunction!(_serve_worker, m)?)?;
    Ok(())
}
