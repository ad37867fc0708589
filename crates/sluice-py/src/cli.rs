//! The `sluice` command line inside the extension: the wheel's console script
//! (`sluice.cli:main`) runs the Rust CLI through here, so the wheel ships no second binary.

use std::ffi::OsString;

use pyo3::prelude::*;

/// Runs the `sluice` command line on `argv` (program name first) and returns its exit status.
/// The GIL is released for the run: the CLI may take minutes and other Python threads go on.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<OsString>) -> i32 {
    py.detach(|| sluice_ml_cli::main_from(argv))
}
