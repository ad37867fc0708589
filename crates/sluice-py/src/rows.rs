//! Rows read a batch at a time ([`sluice::Next::Rows`]) as the dicts a plain read gives,
//! built column by column straight from the source's Arrow arrays: no sample per row.
//! Each value is the one the row read gives ([`sluice::arrow_value_at`]): the common types
//! are read from their arrays directly, the rest through that function.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};
use sluice::arrow_array::cast::AsArray;
use sluice::arrow_array::types::{
    Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type,
    UInt8Type,
};
use sluice::arrow_array::Array;
use sluice::arrow_schema::DataType;
use sluice::{Error, Sample, Value};

use crate::convert::{key, sample_to_py, value_to_py};
use crate::errors::IntoPy;

/// Dicts made, and the row that could not be made (its index in the batch and why).
pub type Made = (Vec<Py<PyAny>>, Option<(usize, Error)>);

/// Rows `from..to` of `batch` (of `n` rows) as dicts, in order (all rows from `from` on
/// when its columns are not the source's arrays); when a value cannot be turned into one
/// (the row read would fail on it), the rows before it and the failing row's index and
/// error.
pub fn rows_to_py(
    py: Python<'_>,
    batch: &Sample,
    n: usize,
    from: usize,
    to: usize,
) -> PyResult<Made> {
    let arrays: Option<Vec<_>> = batch
        .iter()
        .map(|(name, v)| match v {
            Value::Column(c) => {
                c.0.as_any()
                    .downcast_ref::<sluice::ArrowColumn>()
                    .map(|a| (name.clone(), a.0.clone()))
            }
            _ => None,
        })
        .collect();
    let Some(arrays) = arrays else {
        // Not the source's own arrays: the rows the batch collates.
        let rows = sluice::uncollate(batch.clone()).py()?;
        let dicts = rows
            .into_iter()
            .skip(from)
            .map(|s| sample_to_py(py, s).map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        return Ok((dicts, None));
    };
    if let Some((name, a)) = arrays.iter().find(|(_, a)| a.len() != n) {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "column '{name}' of a batch of {n} rows has {} rows",
            a.len()
        )));
    }
    let mut dicts: Vec<Bound<'_, PyDict>> = (from..to).map(|_| PyDict::new(py)).collect();
    let mut failed = None;
    for (name, array) in &arrays {
        let k = key(py, name);
        if let Some((row, e)) = set_column(py, &dicts, &k, array.as_ref(), from)? {
            // Later columns fill only the rows before it.
            dicts.truncate(row - from);
            failed = Some((row, Error::data(format!("column '{name}': {e}"))));
        }
    }
    Ok((
        dicts.into_iter().map(|d| d.into_any().unbind()).collect(),
        failed,
    ))
}

/// Sets `key` in each dict to its row's value in `a` (the dicts are rows `from..` of it);
/// the first row whose value cannot be made, and why.
fn set_column(
    py: Python<'_>,
    dicts: &[Bound<'_, PyDict>],
    key: &Bound<'_, PyString>,
    a: &dyn Array,
    from: usize,
) -> PyResult<Option<(usize, Error)>> {
    macro_rules! each {
        ($get:expr) => {{
            let get = $get;
            for (row, d) in (from..).zip(dicts) {
                if a.is_null(row) {
                    d.set_item(key, py.None())?;
                } else {
                    d.set_item(key, get(row))?;
                }
            }
        }};
    }
    // Numbers as the row read makes them: every integer an int64, every float a float64.
    macro_rules! primitive {
        ($arrow:ty, $to:ty) => {{
            let v = a.as_primitive::<$arrow>();
            each!(|r| <$to>::from(v.value(r)))
        }};
    }
    match a.data_type() {
        DataType::Utf8 => {
            let s = a.as_string::<i32>();
            each!(|r| PyString::new(py, s.value(r)))
        }
        DataType::LargeUtf8 => {
            let s = a.as_string::<i64>();
            each!(|r| PyString::new(py, s.value(r)))
        }
        DataType::Int64 => primitive!(Int64Type, i64),
        DataType::Int32 => primitive!(Int32Type, i64),
        DataType::Int16 => primitive!(Int16Type, i64),
        DataType::Int8 => primitive!(Int8Type, i64),
        DataType::UInt32 => primitive!(UInt32Type, i64),
        DataType::UInt16 => primitive!(UInt16Type, i64),
        DataType::UInt8 => primitive!(UInt8Type, i64),
        DataType::Float64 => primitive!(Float64Type, f64),
        DataType::Float32 => primitive!(Float32Type, f64),
        DataType::Boolean => {
            let v = a.as_boolean();
            each!(|r| PyBool::new(py, v.value(r)).to_owned())
        }
        // Everything else, and what may fail (uint64 beyond int64), as the row read does.
        _ => {
            for (row, d) in (from..).zip(dicts) {
                match sluice::arrow_value_at(a, row) {
                    Ok(v) => d.set_item(key, value_to_py(py, v)?)?,
                    Err(e) => return Ok(Some((row, e))),
                }
            }
        }
    }
    Ok(None)
}
