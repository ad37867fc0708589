//! Python callables as ops. The GIL is taken once per chunk, not per sample.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple};
use sluice::{ElemMode, Emit, Error, Op, OpContext, OpMeta, Result, Sample};

use crate::convert::{as_dict, object_sample, py_to_sample, sample_to_py};
use crate::errors::from_py;

/// `numpy.random.default_rng`, looked up once rather than per sample.
static DEFAULT_RNG: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// A Python function used by `map`, `filter`, `flat_map` or `map_batches`.
#[derive(Debug)]
pub struct PyUdf {
    pub func: Py<PyAny>,
    pub name: String,
    pub mode: ElemMode,
    /// The function declares an `rng` parameter: pass a numpy Generator seeded for
    /// (seed, epoch, sample, op).
    pub wants_rng: bool,
    /// `sluice._fingerprint.digest` of the function (for checkpoints); `None` in worker
    /// processes, which never checkpoint.
    pub digest: Option<String>,
    /// Results stay the Python objects the function returned (nothing after it reads them:
    /// [`Op::keeping_objects`]); otherwise they become samples.
    pub keep_objects: bool,
}

/// The digest of `func`'s code and captured values (`sluice._fingerprint.digest`).
pub fn code_digest(py: Python<'_>, func: &Bound<'_, PyAny>) -> PyResult<String> {
    py.import("sluice._fingerprint")?
        .call_method1("digest", (func,))?
        .extract()
}

/// A one-element argument tuple holding `arg`: `reuse` again when nothing else holds it (as
/// CPython's own `map` does), so a chunk's calls make no tuple each; a new one otherwise.
fn one_arg<'py>(
    reuse: &mut Option<Bound<'py, PyTuple>>,
    arg: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyTuple>> {
    match reuse.take() {
        // SAFETY: reading the count of an object we hold a reference to.
        Some(t) if unsafe { pyo3::ffi::Py_REFCNT(t.as_ptr()) } == 1 => {
            // SAFETY: a tuple only we hold may be written; SetItem takes `arg`'s reference
            // and releases the previous item's.
            unsafe { pyo3::ffi::PyTuple_SetItem(t.as_ptr(), 0, arg.into_ptr()) };
            Ok(t)
        }
        _ => PyTuple::new(arg.py(), [arg]),
    }
}

impl PyUdf {
    fn call<'py>(
        &self,
        py: Python<'py>,
        s: Sample,
        cx: &OpContext,
        args: &mut Option<Bound<'py, PyTuple>>,
    ) -> Result<Emit> {
        let keep = (self.mode == ElemMode::Filter).then(|| s.clone());
        let arg = sample_to_py(py, s).map_err(from_py)?;
        let func = self.func.bind(py);
        let tuple = one_arg(args, arg.into_any()).map_err(from_py)?;
        let out = if self.wants_rng {
            let seed = cx.rng().next_u64();
            let rng = DEFAULT_RNG
                .import(py, "numpy.random", "default_rng")
                .and_then(|f| f.call1((seed,)))
                .map_err(from_py)?;
            let kwargs = PyDict::new(py);
            kwargs.set_item("rng", rng).map_err(from_py)?;
            func.call(&tuple, Some(&kwargs))
        } else {
            func.call1(&tuple)
        };
        *args = Some(tuple);
        let out = out.map_err(from_py)?;
        let result = |item: Bound<'py, PyAny>, what: &str| {
            if self.keep_objects {
                // The same check as a conversion makes, so a plan never changes what is valid.
                as_dict(&item, what)?;
                Ok(object_sample(item))
            } else {
                py_to_sample(&item, what)
            }
        };
        match self.mode {
            ElemMode::Map => Ok(Emit::One(result(out, "the map function's result")?)),
            ElemMode::Filter => {
                let keep_it = out.is_truthy().map_err(from_py)?;
                Ok(if keep_it {
                    Emit::One(keep.unwrap_or_default())
                } else {
                    Emit::Drop
                })
            }
            ElemMode::FlatMap => {
                let iter = out.try_iter().map_err(from_py)?;
                let mut samples = Vec::new();
                for item in iter {
                    let item = item.map_err(from_py)?;
                    samples.push(result(item, "each flat_map output")?);
                }
                Ok(Emit::Many(samples))
            }
        }
    }
}

impl Op for PyUdf {
    fn name(&self) -> &str {
        &self.name
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "python", "name": self.name})
    }
    fn meta(&self) -> OpMeta {
        OpMeta {
            random: self.wants_rng,
            ..OpMeta::opaque(true)
        }
    }
    fn code_digest(&self) -> Option<String> {
        self.digest.clone()
    }
    /// Columns reach the function as Python lists and arrays made straight from the
    /// source's buffers (`convert::value_to_py`).
    fn takes_columns(&self) -> bool {
        true
    }
    fn keeping_objects(&self) -> Option<sluice::OpRef> {
        Some(Arc::new(PyUdf {
            func: Python::attach(|py| self.func.clone_ref(py)),
            name: self.name.clone(),
            mode: self.mode,
            wants_rng: self.wants_rng,
            digest: self.digest.clone(),
            keep_objects: true,
        }))
    }
    /// The function pickled with cloudpickle (so lambdas and closures travel too), for a
    /// worker process or a Ray actor to rebuild the op.
    fn ship(&self) -> Result<serde_json::Value> {
        let pickled: String = crate::gil::attach(|py| {
            py.import("sluice._worker")?
                .call_method1("dumps", (self.func.bind(py),))?
                .extract()
        })
        .map_err(|e| {
            Error::invalid(format!(
                "the function '{}' cannot be sent to worker processes (it must be picklable \
                 by cloudpickle): {}",
                self.name,
                from_py(e)
            ))
        })?;
        Ok(serde_json::json!({
            "op": "python",
            "name": self.name,
            "mode": self.mode,
            "wants_rng": self.wants_rng,
            "pickle": pickled,
        }))
    }
    fn apply(&self, s: Sample, cx: &OpContext) -> Result<Emit> {
        crate::gil::attach(|py| self.call(py, s, cx, &mut None))
    }
    fn apply_many(&self, inputs: Vec<(Sample, OpContext)>) -> Vec<Result<Emit>> {
        crate::gil::attach(|py| {
            let mut interrupted = false;
            let mut args = None;
            inputs
                .into_iter()
                .map(|(s, cx)| {
                    // After Ctrl-C, or once the run is stopped (the consumer was interrupted,
                    // failed or closed), the rest of the chunk is not run: a worker finishes
                    // the call in progress and exits.
                    if interrupted || sluice::exec::cancelled() {
                        interrupted = true;
                        return Err(Error::Cancelled);
                    }
                    let r = self.call(py, s, &cx, &mut args);
                    interrupted = matches!(r, Err(Error::Interrupted { .. }));
                    r
                })
                .collect()
        })
    }
}
