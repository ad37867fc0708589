//! The user's own data as sources: `from_source(obj)` reads `obj[i]` of any Python object
//! with `__len__` and `__getitem__` (random access, so ordering, shards and checkpoints stay
//! in core and O(1)), `from_generator(fn)` streams `fn()`'s iterator. Items are read when
//! the pipeline asks, on the engine's source and reader threads, with the GIL taken once per
//! chunk. Neither can be reopened elsewhere (`ship` is `None`): like `from_items`, their
//! samples travel to worker processes and Ray actors with the chunks.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator};
use sluice::{Dataset, Error, Result, Sample, SampleRef, SampleStream, Source, SourceRef};

use crate::convert::{py_to_sample, py_to_value};
use crate::dataset::PyDataset;
use crate::errors::from_py;

/// A Python exception raised by the user's object, its message prefixed with where it came
/// from (the object and the index): the original stays attached for chaining.
fn user_error(e: PyErr, what: impl FnOnce() -> String) -> Error {
    match from_py(e) {
        Error::External { message, source } => Error::External {
            message: format!("{} raised {message}", what()),
            source,
        },
        // KeyboardInterrupt and the like are not failures of the sample: passed on as is.
        other => other,
    }
}

/// An item as a sample: a dict as it is, anything else as `{field: value}`.
fn to_sample(item: &Bound<'_, PyAny>, field: &sluice::Name, what: &str) -> Result<Sample> {
    if item.is_instance_of::<PyDict>() {
        return py_to_sample(item, what);
    }
    let value = py_to_value(item).map_err(|e| Error::type_error(format!("{what}: {e}")))?;
    let mut s = Sample::with_capacity(1);
    s.set(field.clone(), value);
    Ok(s)
}

/// `from_source(obj)`: sample `i` is `obj[i]`, for `i` below the length read when the
/// dataset was made.
#[derive(Debug, Clone)]
pub struct MapSource {
    obj: Arc<Py<PyAny>>,
    field: sluice::Name,
    len: u64,
    type_name: String,
}

impl MapSource {
    fn read(&self, py: Python<'_>, index: u64) -> Result<Sample> {
        let what = || format!("from_source({})[{index}]", self.type_name);
        let item = self
            .obj
            .bind(py)
            .get_item(index)
            .map_err(|e| user_error(e, what))?;
        to_sample(&item, &self.field, &what())
    }
}

impl Source for MapSource {
    fn name(&self) -> &str {
        "from_source"
    }
    /// Length and type name: all a checkpoint can check of an object it cannot hash, so a
    /// checkpoint loads into a changed object of the same type and length.
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"source": "from_source", "type": self.type_name, "len": self.len})
    }
    fn len(&self) -> Option<u64> {
        Some(self.len)
    }
    fn get(&self, index: u64) -> Result<Sample> {
        crate::gil::attach(|py| self.read(py, index))
    }
    fn get_many(&self, indices: &[u64]) -> Vec<Result<Sample>> {
        crate::gil::attach(|py| {
            indices
                .iter()
                .map(|&i| {
                    // A stopped run (closed, broken out of, failed) reads no more of the
                    // chunk: `obj[i]` may be slow, and the GIL is the training loop's.
                    if sluice::exec::cancelled() {
                        return Err(Error::Cancelled);
                    }
                    self.read(py, i)
                })
                .collect()
        })
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

/// `from_generator(fn)`: a stream, `fn()` called anew for each epoch.
#[derive(Debug, Clone)]
pub struct GeneratorSource {
    func: Arc<Py<PyAny>>,
    field: sluice::Name,
    fn_name: String,
}

/// One run of the generator function.
struct GenStream {
    it: Py<PyIterator>,
    field: sluice::Name,
    fn_name: String,
    epoch: u64,
    next: u64,
    done: bool,
}

/// A stream's error as the failure of sample `index` of `epoch`: the executor hands stream
/// errors on as they are, and this names the source and the sample (Python: `PipelineError`
/// with the original exception as its cause).
fn in_stream(e: Error, epoch: u64, index: u64) -> Error {
    match e {
        Error::Interrupted { .. } | Error::Cancelled => e,
        e => Error::InSample {
            op: "from_generator".into(),
            sample: SampleRef {
                epoch,
                index,
                path: None,
            },
            source: Box::new(e),
        },
    }
}

impl Iterator for GenStream {
    type Item = Result<Sample>;
    fn next(&mut self) -> Option<Result<Sample>> {
        if self.done {
            return None;
        }
        let index = self.next;
        self.next += 1;
        let what = || format!("from_generator({}) item {index}", self.fn_name);
        let out = crate::gil::attach(|py| {
            let item = self.it.bind(py).clone().next()?;
            Some(
                item.map_err(|e| user_error(e, what))
                    .and_then(|item| to_sample(&item, &self.field, &what())),
            )
        })
        .map(|r| r.map_err(|e| in_stream(e, self.epoch, index)));
        // An error ends the stream: the generator cannot go on after raising.
        self.done = !matches!(out, Some(Ok(_)));
        out
    }
}

impl Source for GeneratorSource {
    fn name(&self) -> &str {
        "from_generator"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"source": "from_generator", "fn": self.fn_name})
    }
    fn len(&self) -> Option<u64> {
        None
    }
    fn random_access(&self) -> bool {
        false
    }
    fn get(&self, _index: u64) -> Result<Sample> {
        Err(Error::Internal(
            "from_generator is a stream: it has no random access".into(),
        ))
    }
    fn stream(&self) -> Result<SampleStream> {
        self.stream_epoch(0, 0)
    }
    /// `fn()` again: its iterator is the epoch's stream (the seed is not the generator's).
    fn stream_epoch(&self, _seed: u64, epoch: u64) -> Result<SampleStream> {
        let it = crate::gil::attach(|py| -> Result<Py<PyIterator>> {
            let what = || format!("from_generator({}): fn()", self.fn_name);
            let out = self
                .func
                .bind(py)
                .call0()
                .map_err(|e| in_stream(user_error(e, what), epoch, 0))?;
            let it = out.try_iter().map_err(|_| {
                let ty = out.get_type().name().map(|n| n.to_string());
                Error::type_error(format!(
                    "from_generator({}): fn() must return an iterable, got {}",
                    self.fn_name,
                    ty.unwrap_or_default()
                ))
            })?;
            Ok(it.unbind())
        })?;
        Ok(Box::new(GenStream {
            it,
            field: self.field.clone(),
            fn_name: self.fn_name.clone(),
            epoch,
            next: 0,
            done: false,
        }))
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

/// `obj` (checked by the Python side: it has `__getitem__`, `len` is its length) as a
/// random-access dataset; `type_name` names it in errors and checkpoints.
#[pyfunction]
fn from_source(obj: Py<PyAny>, len: u64, field: String, type_name: String) -> PyDataset {
    let src = MapSource {
        obj: Arc::new(obj),
        field: field.into(),
        len,
        type_name,
    };
    PyDataset {
        ds: Dataset::from_source(Arc::new(src)),
    }
}

/// A stream of the items of the iterators `func()` returns, one call per epoch.
#[pyfunction]
fn from_generator(func: Py<PyAny>, field: String, fn_name: String) -> PyDataset {
    let src = GeneratorSource {
        func: Arc::new(func),
        field: field.into(),
        fn_name,
    };
    PyDataset {
        ds: Dataset::from_source(Arc::new(src)),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(from_source, m)?)?;
    m.add_function(wrap_pyfunction!(from_generator, m)?)?;
    Ok(())
}
