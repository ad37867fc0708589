//! The iterator: waits for outputs with the GIL released, checking for Ctrl-C in between.

use std::time::Duration;

use pyo3::prelude::*;
use sluice::{Execution, Next, PipelineStats};
use std::sync::Arc;

use crate::convert::sample_to_py;
use crate::errors::to_py;

const POLL: Duration = Duration::from_millis(50);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

#[pyclass(name = "Iterator", module = "sluice._native")]
pub struct PyIter {
    exec: Option<Execution>,
    stats: Arc<PipelineStats>,
}

impl PyIter {
    pub fn new(exec: Execution) -> Self {
        let stats = exec.stats_handle();
        PyIter {
            exec: Some(exec),
            stats,
        }
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        loop {
            let Some(exec) = self.exec.as_mut() else {
                return Ok(None);
            };
            match py.detach(|| exec.next_timeout(POLL)) {
                Next::Item(s) => return Ok(Some(sample_to_py(py, s)?.into_any())),
                Next::Timeout => {
                    if let Err(e) = py.check_signals() {
                        self.close(py);
                        return Err(e);
                    }
                }
                Next::End => {
                    self.close(py);
                    return Ok(None);
                }
                Next::Err(e) => {
                    self.close(py);
                    return Err(to_py(e));
                }
            }
        }
    }

    /// Stops the pipeline's threads and waits for them (with the GIL released).
    fn close(&mut self, py: Python<'_>) {
        if let Some(mut exec) = self.exec.take() {
            py.detach(|| exec.close(CLOSE_TIMEOUT));
        }
    }

    /// Per-stage and consumer statistics, as JSON text.
    fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats.report()).unwrap_or_default()
    }

    /// The statistics as a printable table.
    fn stats_text(&self) -> String {
        self.stats.report().to_string()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(&mut self, py: Python<'_>, _a: Py<PyAny>, _b: Py<PyAny>, _c: Py<PyAny>) {
        self.close(py);
    }
}
