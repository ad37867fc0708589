//! `render_report`: the HTML report page (`sluice::report`) for `sluice.report`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

fn parse(what: &str, json: &str) -> PyResult<serde_json::Value> {
    serde_json::from_str(json)
        .map_err(|e| PyValueError::new_err(format!("render_report: {what} is not JSON: {e}")))
}

/// The report page of one run from its statistics (`Stats.to_dict()` as JSON), the logical
/// plan's text and the optimizer plan's JSON when there is one.
#[pyfunction]
#[pyo3(signature = (stats_json, logical_plan, plan_json=None, title=sluice::report::DEFAULT_TITLE))]
pub fn render_report(
    stats_json: &str,
    logical_plan: &str,
    plan_json: Option<&str>,
    title: &str,
) -> PyResult<String> {
    let stats = parse("the statistics", stats_json)?;
    let plan = plan_json.map(|p| parse("the plan", p)).transpose()?;
    Ok(sluice::report::render_report(
        &stats,
        logical_plan,
        plan.as_ref(),
        title,
    ))
}

/// Writes a page atomically (`sluice::report::write_report`).
#[pyfunction]
pub fn write_report(py: Python<'_>, path: &str, html: &str) -> PyResult<()> {
    crate::gil::released(py, || sluice::report::write_report(path, html))?.py()
}
