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
use sluice::arrow_array::{Array, ArrayRef};
use sluice::arrow_schema::DataType;
use sluice::{Error, Sample, Value};

use crate::convert::{key, sample_to_py, value_to_py};
use crate::errors::IntoPy;

/// Dicts made, and the row that could not be made (its index in the batch and why).
pub type Taken = (Vec<Py<PyAny>>, Option<(usize, Error)>);

/// A batch of rows read together ([`sluice::Next::Rows`]), made into dicts a few rows at a
/// time: its columns, each with its interned name, and the first row not made yet.
pub struct RowBatch {
    columns: Vec<(Py<PyString>, sluice::Name, ArrayRef)>,
    n: usize,
    next: usize,
}

/// What a batch of rows gives: its columns to make dicts from, or (when its columns are not
/// the source's arrays) its rows already made, as collating them again gives them.
pub enum Rows {
    Columns(RowBatch),
    Made(Vec<Py<PyAny>>),
}

impl RowBatch {
    /// The `n` rows of `batch`.
    pub fn of(py: Python<'_>, batch: Sample, n: usize) -> PyResult<Rows> {
        let arrays: Option<Vec<(sluice::Name, ArrayRef)>> = batch
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
            let rows = sluice::uncollate(batch).py()?;
            let made = rows
                .into_iter()
                .map(|s| sample_to_py(py, s).map(Bound::unbind));
            return Ok(Rows::Made(made.collect::<PyResult<_>>()?));
        };
        if let Some((name, a)) = arrays.iter().find(|(_, a)| a.len() != n) {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "column '{name}' of a batch of {n} rows has {} rows",
                a.len()
            )));
        }
        let columns = arrays
            .into_iter()
            .map(|(name, a)| (key(py, &name).unbind(), name, a))
            .collect();
        Ok(Rows::Columns(RowBatch {
            columns,
            n,
            next: 0,
        }))
    }

    /// The next `k` rows (fewer at the end, none when all are made) as dicts, in order;
    /// when a value cannot be turned into one (the row read would fail on it), the rows
    /// before it and the failing row's index in the batch and error.
    pub fn take(&mut self, py: Python<'_>, k: usize) -> PyResult<Taken> {
        let (from, to) = (self.next, (self.next + k).min(self.n));
        let mut dicts: Vec<Bound<'_, PyDict>> = (from..to).map(|_| PyDict::new(py)).collect();
        let mut failed = None;
        for (key, name, array) in &self.columns {
            if let Some((row, e)) = set_column(py, &dicts, key.bind(py), array.as_ref(), from)? {
                // Later columns fill only the rows before it.
                dicts.truncate(row - from);
                failed = Some((row, Error::data(format!("column '{name}': {e}"))));
            }
        }
        self.next = if failed.is_some() { self.n } else { to };
        let made = dicts.into_iter().map(|d| d.into_any().unbind()).collect();
        Ok((made, failed))
    }
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
