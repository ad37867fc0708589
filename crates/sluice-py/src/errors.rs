//! The one place sluice errors become Python exceptions (and Python exceptions become errors).

use std::fmt;
use std::sync::Arc;

use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyError, PyOSError, PyRuntimeError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use sluice::Error;

pyo3::create_exception!(
    _native,
    SluiceError,
    PyRuntimeError,
    "Base class of sluice errors."
);
pyo3::create_exception!(
    _native,
    PipelineError,
    SluiceError,
    "An op failed on a sample; the message names both, `__cause__` is the original error."
);

/// A Python exception carried through the engine as an [`Error::External`] source.
#[derive(Debug)]
pub struct PyErrBox(pub PyErr);

impl fmt::Display for PyErrBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Python::attach(|py| {
            let e = self.0.value(py);
            let ty = e
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            write!(
                f,
                "{ty}: {}",
                e.str().map(|s| s.to_string()).unwrap_or_default()
            )
        })
    }
}

impl std::error::Error for PyErrBox {}

/// Wraps a Python exception raised by user code; `KeyboardInterrupt` and the other
/// `BaseException`s that are not `Exception`s become [`Error::Interrupted`].
pub fn from_py(err: PyErr) -> Error {
    let interrupt = Python::attach(|py| !err.is_instance_of::<pyo3::exceptions::PyException>(py));
    let boxed = PyErrBox(err);
    let (message, source) = (boxed.to_string(), Arc::new(boxed));
    if interrupt {
        Error::Interrupted { message, source }
    } else {
        Error::External { message, source }
    }
}

/// The original Python exception inside an error, if any.
fn original(py: Python<'_>, e: &Error) -> Option<PyErr> {
    match e.root() {
        Error::External { source, .. } | Error::Interrupted { source, .. } => {
            source.downcast_ref::<PyErrBox>().map(|b| b.0.clone_ref(py))
        }
        _ => None,
    }
}

/// Converts an error to the matching Python exception.
pub fn to_py(e: Error) -> PyErr {
    Python::attach(|py| {
        let msg = e.to_string();
        let err = match (&e, e.root()) {
            (_, Error::Interrupted { .. }) => {
                if let Some(orig) = original(py, &e) {
                    return orig;
                }
                pyo3::exceptions::PyKeyboardInterrupt::new_err(msg)
            }
            (_, Error::InvalidArgument(_)) => PyValueError::new_err(msg),
            (_, Error::Type(_)) => PyTypeError::new_err(msg),
            (_, Error::FileNotFound(_)) => PyFileNotFoundError::new_err(msg),
            (_, Error::MissingField { .. }) => PyKeyError::new_err(msg),
            (Error::InSample { .. }, _) => PipelineError::new_err(msg),
            (_, Error::External { .. }) => {
                if let Some(orig) = original(py, &e) {
                    return orig;
                }
                SluiceError::new_err(msg)
            }
            (_, Error::Io { .. }) => PyOSError::new_err(msg),
            _ => SluiceError::new_err(msg),
        };
        if let Some(cause) = original(py, &e) {
            err.set_cause(py, Some(cause));
        }
        err
    })
}

/// Shorthand for mapping a `sluice::Result` into a `PyResult`.
pub trait IntoPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for sluice::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
