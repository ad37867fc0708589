//! The iterator: waits for outputs with the GIL released, checking for Ctrl-C in between.

use std::time::Duration;

use pyo3::prelude::*;
use sluice::{Dataset, Execution, IterOptions, IterState, Next, PipelineStats};
use std::sync::Arc;

use crate::convert::sample_to_py;
use crate::errors::{to_py, IntoPy};

const POLL: Duration = Duration::from_millis(50);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

#[pyclass(name = "Iterator", module = "sluice._native", weakref)]
pub struct PyIter {
    exec: Option<Execution>,
    stats: Arc<PipelineStats>,
    ds: Dataset,
    opts: IterOptions,
    /// The checkpoint when the execution ended (so `state_dict` works after exhaustion).
    last_state: Option<IterState>,
    /// Outputs delivered so far.
    count: u64,
}

impl PyIter {
    pub fn new(exec: Execution, ds: Dataset, opts: IterOptions) -> Self {
        let stats = exec.stats_handle();
        PyIter {
            exec: Some(exec),
            stats,
            ds,
            opts,
            last_state: None,
            count: 0,
        }
    }
}

impl PyIter {
    /// What a streaming source left out while this run read it (`on_error="skip"`), as a
    /// warning at the end: the readers that check at open warn then.
    fn warn_skips(&self, py: Python<'_>) -> PyResult<()> {
        let n = self.stats.source_read_skips();
        if n == 0 {
            return Ok(());
        }
        let source = self.ds.plan().source().name().to_string();
        let msg = std::ffi::CString::new(format!(
            "{source} left out {n} record(s) it could not read (on_error=\"skip\"); \
             stats() counts them as the source's skips"
        ))
        .unwrap_or_default();
        PyErr::warn(
            py,
            &py.get_type::<pyo3::exceptions::PyUserWarning>(),
            &msg,
            1,
        )
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
            // Outputs already computed need no wait: skip releasing and retaking the GIL.
            if let Some(s) = exec.try_ready() {
                self.count += 1;
                return Ok(Some(sample_to_py(py, s)?.into_any()));
            }
            match py.detach(|| exec.next_timeout(POLL)) {
                Next::Item(s) => {
                    self.count += 1;
                    return Ok(Some(sample_to_py(py, s)?.into_any()));
                }
                Next::Timeout => {
                    if let Err(e) = py.check_signals() {
                        self.close(py);
                        return Err(e);
                    }
                }
                Next::End => {
                    self.close(py);
                    self.warn_skips(py)?;
                    return Ok(None);
                }
                Next::Err(e) => {
                    self.close(py);
                    return Err(to_py(e));
                }
            }
        }
    }

    /// A handle on this iteration's statistics that outlives the iterator.
    fn stats_handle(&self) -> PyStats {
        PyStats {
            stats: self.stats.clone(),
        }
    }

    /// Outputs delivered so far.
    #[getter]
    fn count(&self) -> u64 {
        self.count
    }

    /// Stops the pipeline's threads and waits for them (with the GIL released).
    fn close(&mut self, py: Python<'_>) {
        if let Some(mut exec) = self.exec.take() {
            self.last_state = self.ds.state(&self.opts, &exec).ok();
            py.detach(|| exec.close(CLOSE_TIMEOUT));
        }
    }

    /// The checkpoint after the last output delivered, as JSON text.
    fn state_dict_json(&self) -> PyResult<String> {
        let state = match &self.exec {
            Some(exec) => self.ds.state(&self.opts, exec).py()?,
            None => match &self.last_state {
                Some(s) => s.clone(),
                None => return self.ds.check_resumable().map(|_| String::new()).py(),
            },
        };
        serde_json::to_string(&state)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    }

    /// Restarts the iteration right after the checkpointed output.
    fn load_state_dict_json(&mut self, py: Python<'_>, state: &str) -> PyResult<()> {
        let state: IterState = serde_json::from_str(state)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid state: {e}")))?;
        let exec = py
            .detach(|| self.ds.iter_from(&self.opts, Some(&state)))
            .py()?;
        self.close(py);
        self.stats = exec.stats_handle();
        self.exec = Some(exec);
        self.last_state = None;
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(&mut self, py: Python<'_>, _a: Py<PyAny>, _b: Py<PyAny>, _c: Py<PyAny>) {
        self.close(py);
    }
}

/// Merges every rank's checkpoint (JSON texts) into one elastic checkpoint (JSON text).
#[pyfunction]
pub fn elastic_state_json(states: Vec<String>) -> PyResult<String> {
    let states = states
        .iter()
        .map(|s| serde_json::from_str::<IterState>(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid state: {e}")))?;
    let merged = sluice::elastic_state(&states).py()?;
    serde_json::to_string(&merged)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

impl Drop for PyIter {
    /// A dropped iterator (a `for` loop left with `break`) stops and joins its threads, with
    /// the GIL released so a worker waiting for it can finish.
    fn drop(&mut self) {
        if let Some(mut exec) = self.exec.take() {
            Python::attach(|py| py.detach(|| exec.close(CLOSE_TIMEOUT)));
        }
    }
}

/// An iteration's statistics, kept by its dataset after the iterator is gone.
#[pyclass(name = "Stats", module = "sluice._native", frozen)]
pub struct PyStats {
    stats: Arc<PipelineStats>,
}

#[pymethods]
impl PyStats {
    /// Per-stage and consumer statistics, as JSON text.
    fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats.report()).unwrap_or_default()
    }
    /// The statistics as a printable table.
    fn stats_text(&self) -> String {
        self.stats.report().to_string()
    }
}
