//! Messages for the user that are not errors (records a reader skipped) go to Python's
//! `logging.getLogger("sluice")`, where a training script filters and routes them with its
//! own log lines — not to `warnings`, which prints once per call site and mixes with them.

use pyo3::prelude::*;

/// Logs `msg` at WARNING level on the `sluice` logger.
pub fn warning(py: Python<'_>, msg: &str) -> PyResult<()> {
    py.import("logging")?
        .call_method1("getLogger", ("sluice",))?
        .call_method1("warning", (msg,))?;
    Ok(())
}
