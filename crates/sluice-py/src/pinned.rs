//! `pin_buffers` and `pin_stats`: page-locked batch buffers while a device consumes the
//! batches, forwarded to `sluice::recycle::pinned`. Translation only.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sluice::recycle::pinned::{RegisterFn, UnregisterFn};
use sluice::recycle::{Pinner, Pinning};

use crate::errors::IntoPy;

/// Batch buffers are page-locked while this is open (``close()`` or the ``with`` block's end).
#[pyclass(name = "PinGuard", module = "sluice._native")]
pub struct PyPinGuard(Option<Pinning>);

#[pymethods]
impl PyPinGuard {
    /// Stops locking new buffers; those locked stay so until freed.
    fn close(&mut self) {
        self.0 = None;
    }
    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }
    fn __exit__(&mut self, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) {
        self.close();
    }
}

/// Starts page-locking batch buffers: ``"mlock"``, or ``(register, unregister)``, the
/// addresses of a CUDA runtime's ``cudaHostRegister`` and ``cudaHostUnregister``.
#[pyfunction]
fn pin_buffers(pinner: &Bound<'_, PyAny>) -> PyResult<PyPinGuard> {
    let pinner = if let Ok(name) = pinner.extract::<String>() {
        match name.as_str() {
            "mlock" => Pinner::Mlock,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "pin_buffers: pinner must be \"mlock\" or (cudaHostRegister, \
                     cudaHostUnregister) addresses, got {name:?}"
                )))
            }
        }
    } else {
        let (register, unregister): (usize, usize) = pinner.extract().map_err(|_| {
            PyValueError::new_err(format!(
                "pin_buffers: pinner must be \"mlock\" or (cudaHostRegister, \
                 cudaHostUnregister) addresses, got {pinner}"
            ))
        })?;
        if register == 0 || unregister == 0 {
            return Err(PyValueError::new_err(
                "pin_buffers: a null function address",
            ));
        }
        // SAFETY: the caller (sluice.pytorch) passes the addresses of the CUDA runtime's
        // two functions, resolved with ctypes from the library torch loaded; their C
        // signatures are RegisterFn's and UnregisterFn's.
        unsafe {
            Pinner::Cuda {
                register: std::mem::transmute::<usize, RegisterFn>(register),
                unregister: std::mem::transmute::<usize, UnregisterFn>(unregister),
            }
        }
    };
    Ok(PyPinGuard(Some(Pinning::start(pinner).py()?)))
}

/// The process's page-locked buffers: ``locked``, ``locked_bytes`` now, ``locks``,
/// ``unlocks``, ``failed`` since it started, ``last_error``.
#[pyfunction]
fn pin_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = sluice::recycle::pin_stats();
    let d = PyDict::new(py);
    d.set_item("locked", s.locked)?;
    d.set_item("locked_bytes", s.locked_bytes)?;
    d.set_item("locks", s.locks)?;
    d.set_item("unlocks", s.unlocks)?;
    d.set_item("failed", s.failed)?;
    d.set_item("last_error", s.last_error)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyPinGuard>()?;
    m.add_function(wrap_pyfunction!(pin_buffers, m)?)?;
    m.add_function(wrap_pyfunction!(pin_stats, m)?)
}
