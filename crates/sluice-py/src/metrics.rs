//! The live-metrics endpoint (`sluice::stats::endpoint`) and the Prometheus text, for
//! `sluice.metrics`: translation only.

use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use sluice::stats::endpoint::{EndpointError, Limits, MetricsEndpoint};

use crate::iter::PyStats;

/// A running endpoint serving an iteration's statistics on 127.0.0.1; closed by `close()`
/// or when collected.
///
/// ```python
/// server = _native.MetricsServer(it.stats_handle(), 0)
/// host, port = server.address
/// server.close()
/// ```
#[pyclass(name = "MetricsServer", module = "sluice._native", frozen)]
pub struct PyMetricsServer {
    endpoint: MetricsEndpoint,
}

fn os_error(e: EndpointError) -> PyErr {
    match e.source.raw_os_error() {
        Some(errno) => PyOSError::new_err((errno, e.to_string())),
        None => PyOSError::new_err(e.to_string()),
    }
}

#[pymethods]
impl PyMetricsServer {
    #[new]
    #[pyo3(signature = (stats, port, max_connections = 16, idle_timeout_s = 5.0))]
    fn new(
        stats: &PyStats,
        port: u16,
        max_connections: usize,
        idle_timeout_s: f64,
    ) -> PyResult<Self> {
        let idle_timeout = Duration::try_from_secs_f64(idle_timeout_s).map_err(|_| {
            PyValueError::new_err(format!(
                "idle_timeout_s must be a duration in seconds, got {idle_timeout_s}"
            ))
        })?;
        let limits = Limits {
            max_connections,
            idle_timeout,
        };
        let endpoint = MetricsEndpoint::serve(port, limits, stats.shared()).map_err(os_error)?;
        Ok(PyMetricsServer { endpoint })
    }

    /// (host, port) the endpoint listens on.
    #[getter]
    fn address(&self) -> (String, u16) {
        let a = self.endpoint.address();
        (a.ip().to_string(), a.port())
    }

    /// Connections served now (0 once closed).
    fn connections(&self) -> usize {
        self.endpoint.connections()
    }

    /// Serves these statistics from now on (a checkpoint load starts a new run).
    fn follow(&self, stats: &PyStats) {
        self.endpoint.follow(stats.shared());
    }

    /// Stops the endpoint and waits for its threads, which never need the GIL.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.endpoint.stop());
    }
}

/// The statistics in the Prometheus text format.
#[pyfunction]
fn prometheus_text(py: Python<'_>, stats: &PyStats) -> String {
    py.detach(|| sluice::stats::prometheus::prometheus_text(&stats.pipeline().report()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMetricsServer>()?;
    m.add_function(wrap_pyfunction!(prometheus_text, m)?)?;
    Ok(())
}
