//! The `sluice` command line inside the extension: the wheel's console script
//! (`sluice.cli:main`) runs the Rust CLI through here, so the wheel ships no second binary.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the `sluice` command line on `argv` (program name first) and returns its exit status.
/// The GIL is released for the run: the CLI may take minutes and other Python threads go on.
/// Called from Python with Python's SIGINT handler in place (`sluice.cli.main(argv)`), a
/// Ctrl-C stops the pipeline it runs and raises `KeyboardInterrupt` (the console script
/// restores the default handler, which ends the process).
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> PyResult<i32> {
    crate::gil::released(py, || sluice_ml_cli::main_from(argv))
}
