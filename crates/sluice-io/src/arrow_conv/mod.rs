//! Arrow ↔ sluice values: reading a row of a record batch as a [`Sample`], and building record
//! batches from samples (for the Parquet sink and `to_arrow`).
//!
//! Scalars map one to one (integers → `Int`, floats → `Float`, strings → `Str`, binary →
//! `Bytes`); a list of numbers becomes a 1-d tensor of the matching dtype, other lists
//! `List`s. Dictionary columns read as their values; dates, times, timestamps and decimals
//! read as their text form (so nothing is silently reinterpreted); struct columns read as
//! their fields, `parent.child` ([`read_batch`]).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::*;
use arrow_schema::DataType;
use sluice_core::{Column, ColumnData, Error, Result, Sample, Tensor, TensorData, Value};

mod flatten;
mod records;
mod write;

pub use flatten::{read_batch, read_fields};
pub use records::Records;
pub use write::{infer_schema, samples_to_batch};

/// Whether sluice can read a column of this type (after [`read_batch`]): a struct when it
/// has fields and sluice can read each (it is read as its fields).
pub fn supported(dt: &DataType) -> bool {
    match dt {
        DataType::Struct(fields) => {
            !fields.is_empty() && fields.iter().all(|f| supported(f.data_type()))
        }
        dt => value_supported(dt),
    }
}

/// Whether sluice has a value for one of this type (a struct inside a list has none).
fn value_supported(dt: &DataType) -> bool {
    use DataType as D;
    match dt {
        D::Dictionary(_, v) => value_supported(v),
        D::List(f) | D::LargeList(f) | D::FixedSizeList(f, _) | D::ListView(f) => {
            value_supported(f.data_type())
        }
        D::Struct(_) | D::Map(_, _) | D::Union(_, _) | D::RunEndEncoded(_, _) => false,
        _ => true,
    }
}

/// How [`normalize`] writes temporal values: arrow's defaults, except that an aware timestamp
/// ends in a numeric offset (`+00:00`) as Python's `isoformat()` writes it, never `Z` (which
/// `datetime.fromisoformat` reads only from Python 3.11). Named zones ("UTC",
/// "Europe/Paris") need arrow's `chrono-tz`.
const TEXT: arrow_cast::CastOptions<'static> = arrow_cast::CastOptions {
    safe: true,
    format_options: arrow_cast::display::FormatOptions::new()
        .with_timestamp_tz_format(Some("%Y-%m-%dT%H:%M:%S%.f%:z")),
};

/// Casts columns sluice has no direct value for: dictionaries to their values, temporal and
/// decimal types to text, half floats to `f32`.
pub fn normalize(array: ArrayRef) -> Result<ArrayRef> {
    use DataType as D;
    let target = match array.data_type() {
        D::Dictionary(_, v) => (**v).clone(),
        D::Float16 => D::Float32,
        D::Date32
        | D::Date64
        | D::Timestamp(_, _)
        | D::Time32(_)
        | D::Time64(_)
        | D::Duration(_)
        | D::Interval(_)
        | D::Decimal32(_, _)
        | D::Decimal64(_, _)
        | D::Decimal128(_, _)
        | D::Decimal256(_, _) => D::Utf8,
        _ => return Ok(array),
    };
    let cast = arrow_cast::cast_with_options(&array, &target, &TEXT)
        .map_err(|e| Error::data(e.to_string()))?;
    // A dictionary of temporal values needs a second step.
    normalize(cast)
}

/// Row `row` of `batch` as a sample; `names` are the batch's column names (shared, so no
/// allocation per row).
pub fn row_to_sample(
    batch: &RecordBatch,
    names: &[sluice_core::Name],
    row: usize,
) -> Result<Sample> {
    let mut s = Sample::with_capacity(names.len());
    for (name, col) in names.iter().zip(batch.columns()) {
        let v = value_at(col.as_ref(), row)
            .map_err(|e| Error::data(format!("column '{name}': {e}")))?;
        s.set(name.clone(), v);
    }
    Ok(s)
}

/// Rows of record batches (`(batch, rows in it)`, in order) as one batch sample, column by
/// column: exactly what collating [`row_to_sample`] of each row gives. Columns of the common
/// types without nulls are read straight from their buffers; the rest go through row values.
pub fn rows_to_batch(
    parts: &[(&RecordBatch, &[usize])],
    names: &[sluice_core::Name],
) -> Result<Sample> {
    let n: usize = parts.iter().map(|(_, rows)| rows.len()).sum();
    let mut out = Sample::with_capacity(names.len());
    if n == 0 {
        return Ok(out);
    }
    for (c, name) in names.iter().enumerate() {
        let arrays: Vec<(&dyn Array, &[usize])> = parts
            .iter()
            .map(|(b, rows)| (b.column(c).as_ref(), *rows))
            .collect();
        let v =
            column_values(&arrays, n).map_err(|e| Error::data(format!("column '{name}': {e}")))?;
        out.set(name.clone(), v);
    }
    Ok(out)
}

fn column_values(arrays: &[(&dyn Array, &[usize])], n: usize) -> Result<Value> {
    use DataType as D;
    if arrays.iter().any(|(a, _)| a.null_count() > 0) {
        return generic_column(arrays, n);
    }
    // Each array is downcast once, then its rows read in a plain loop.
    macro_rules! gather {
        ($($cast:tt)+) => {{
            let mut out = Vec::with_capacity(n);
            for (a, rows) in arrays {
                let a = a.$($cast)+;
                out.extend(rows.iter().map(|&r| a.value(r)));
            }
            out
        }};
    }
    let tensor = |data| Ok::<_, Error>(Value::Tensor(Tensor::new(vec![n], data)?));
    macro_rules! ints {
        ($t:ty) => {
            tensor(TensorData::I64(
                gather!(as_primitive::<$t>())
                    .into_iter()
                    .map(|v| v as i64)
                    .collect(),
            ))?
        };
    }
    macro_rules! list {
        ($wrap:ident, $($cast:tt)+) => {
            Value::List(gather!($($cast)+).into_iter().map(|v| Value::$wrap(v.into())).collect())
        };
    }
    Ok(match arrays[0].0.data_type() {
        D::Int8 => ints!(Int8Type),
        D::Int16 => ints!(Int16Type),
        D::Int32 => ints!(Int32Type),
        D::Int64 => tensor(TensorData::I64(gather!(as_primitive::<Int64Type>())))?,
        D::UInt8 => ints!(UInt8Type),
        D::UInt16 => ints!(UInt16Type),
        D::UInt32 => ints!(UInt32Type),
        D::Float32 => tensor(TensorData::F64(
            gather!(as_primitive::<Float32Type>())
                .into_iter()
                .map(f64::from)
                .collect(),
        ))?,
        D::Float64 => tensor(TensorData::F64(gather!(as_primitive::<Float64Type>())))?,
        D::Boolean => tensor(TensorData::Bool(gather!(as_boolean())))?,
        D::Utf8 => list!(Str, as_string::<i32>()),
        D::LargeUtf8 => list!(Str, as_string::<i64>()),
        D::Utf8View => list!(Str, as_string_view()),
        D::Binary => list!(Bytes, as_binary::<i32>()),
        D::LargeBinary => list!(Bytes, as_binary::<i64>()),
        _ => generic_column(arrays, n)?,
    })
}

/// A column through its row values and the generic stacking (nulls, lists, uint64, ...).
fn generic_column(arrays: &[(&dyn Array, &[usize])], n: usize) -> Result<Value> {
    let mut values = Vec::with_capacity(n);
    for (a, rows) in arrays {
        for &r in *rows {
            values.push(value_at(*a, r)?);
        }
    }
    let refs: Vec<&Value> = values.iter().collect();
    sluice_core::collate::stack_column(&refs)
}

fn tensor<T: ArrowPrimitiveType>(
    a: &PrimitiveArray<T>,
    wrap: fn(Vec<T::Native>) -> TensorData,
) -> Result<Value> {
    Ok(Value::Tensor(Tensor::new(
        vec![a.len()],
        wrap(a.values().to_vec()),
    )?))
}

/// A numeric array without nulls as a 1-d tensor; `None` for anything else.
fn as_tensor(a: &dyn Array) -> Result<Option<Value>> {
    if a.null_count() > 0 {
        return Ok(None);
    }
    use DataType as D;
    let v = match a.data_type() {
        D::Int8 => tensor(a.as_primitive::<Int8Type>(), TensorData::I8)?,
        D::Int16 => tensor(a.as_primitive::<Int16Type>(), TensorData::I16)?,
        D::Int32 => tensor(a.as_primitive::<Int32Type>(), TensorData::I32)?,
        D::Int64 => tensor(a.as_primitive::<Int64Type>(), TensorData::I64)?,
        D::UInt8 => tensor(a.as_primitive::<UInt8Type>(), TensorData::U8)?,
        D::UInt16 => tensor(a.as_primitive::<UInt16Type>(), TensorData::U16)?,
        D::UInt32 => tensor(a.as_primitive::<UInt32Type>(), TensorData::U32)?,
        D::UInt64 => tensor(a.as_primitive::<UInt64Type>(), TensorData::U64)?,
        D::Float32 => tensor(a.as_primitive::<Float32Type>(), TensorData::F32)?,
        D::Float64 => tensor(a.as_primitive::<Float64Type>(), TensorData::F64)?,
        D::Boolean => {
            let b = a.as_boolean();
            Value::Tensor(Tensor::new(
                vec![b.len()],
                TensorData::Bool(b.iter().map(|x| x.unwrap_or(false)).collect()),
            )?)
        }
        _ => return Ok(None),
    };
    Ok(Some(v))
}

fn list_value(items: ArrayRef) -> Result<Value> {
    let items = normalize(items)?;
    if let Some(t) = as_tensor(items.as_ref())? {
        return Ok(t);
    }
    (0..items.len())
        .map(|i| value_at(items.as_ref(), i))
        .collect::<Result<Vec<_>>>()
        .map(Value::List)
}

/// The value at `row` of `a` (a normalized array).
pub fn value_at(a: &dyn Array, row: usize) -> Result<Value> {
    if a.is_null(row) {
        return Ok(Value::Null);
    }
    use DataType as D;
    Ok(match a.data_type() {
        D::Null => Value::Null,
        D::Boolean => Value::Bool(a.as_boolean().value(row)),
        D::Int8 => Value::Int(a.as_primitive::<Int8Type>().value(row) as i64),
        D::Int16 => Value::Int(a.as_primitive::<Int16Type>().value(row) as i64),
        D::Int32 => Value::Int(a.as_primitive::<Int32Type>().value(row) as i64),
        D::Int64 => Value::Int(a.as_primitive::<Int64Type>().value(row)),
        D::UInt8 => Value::Int(a.as_primitive::<UInt8Type>().value(row) as i64),
        D::UInt16 => Value::Int(a.as_primitive::<UInt16Type>().value(row) as i64),
        D::UInt32 => Value::Int(a.as_primitive::<UInt32Type>().value(row) as i64),
        D::UInt64 => {
            let v = a.as_primitive::<UInt64Type>().value(row);
            Value::Int(
                i64::try_from(v)
                    .map_err(|_| Error::data(format!("uint64 value {v} does not fit an int64")))?,
            )
        }
        D::Float32 => Value::Float(a.as_primitive::<Float32Type>().value(row) as f64),
        D::Float64 => Value::Float(a.as_primitive::<Float64Type>().value(row)),
        D::Utf8 => Value::Str(a.as_string::<i32>().value(row).into()),
        D::LargeUtf8 => Value::Str(a.as_string::<i64>().value(row).into()),
        D::Utf8View => Value::Str(a.as_string_view().value(row).into()),
        D::Binary => Value::Bytes(a.as_binary::<i32>().value(row).into()),
        D::LargeBinary => Value::Bytes(a.as_binary::<i64>().value(row).into()),
        D::BinaryView => Value::Bytes(a.as_binary_view().value(row).into()),
        D::FixedSizeBinary(_) => Value::Bytes(a.as_fixed_size_binary().value(row).into()),
        D::List(_) => list_value(a.as_list::<i32>().value(row))?,
        D::LargeList(_) => list_value(a.as_list::<i64>().value(row))?,
        D::FixedSizeList(_, _) => list_value(a.as_fixed_size_list().value(row))?,
        other => {
            return Err(Error::type_error(format!(
                "arrow type {other} is not supported; select other columns"
            )))
        }
    })
}

/// A batch column that is an Arrow array as its source decoded it: the bindings turn string
/// arrays into Python lists straight from its buffers and Arrow export hands it over as is.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::{Column, ColumnData, Value};
/// let c = sluice_io::arrow_conv::ArrowColumn(Arc::new(arrow_array::StringArray::from(vec!["a", "b"])));
/// assert_eq!(c.to_value().unwrap(), Value::List(vec![Value::from("a"), Value::from("b")]));
/// ```
#[derive(Debug)]
pub struct ArrowColumn(pub ArrayRef);

impl ColumnData for ArrowColumn {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn nbytes(&self) -> usize {
        self.0.to_data().get_slice_memory_size().unwrap_or(0)
    }
    fn to_value(&self) -> Result<Value> {
        let rows: Vec<usize> = (0..self.0.len()).collect();
        column_values(&[(self.0.as_ref(), &rows)], rows.len())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Rows of record batches (`(batch, rows in it)`, in order) as one batch of [`ArrowColumn`]s:
/// a run of consecutive rows is a zero-copy slice, other rows are gathered, runs from several
/// record batches are concatenated.
pub fn rows_to_columns(
    parts: &[(&RecordBatch, &[usize])],
    names: &[sluice_core::Name],
) -> Result<Sample> {
    let mut out = Sample::with_capacity(names.len());
    if parts.iter().all(|(_, rows)| rows.is_empty()) {
        return Ok(out);
    }
    for (c, name) in names.iter().enumerate() {
        let pieces = parts
            .iter()
            .map(|(b, rows)| {
                let a = b.column(c);
                let first = rows.first().copied().unwrap_or(0);
                if rows.iter().enumerate().all(|(i, &r)| r == first + i) {
                    Ok(a.slice(first, rows.len()))
                } else {
                    let idx = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
                    arrow_select::take::take(a.as_ref(), &idx, None)
                }
            })
            .collect::<std::result::Result<Vec<ArrayRef>, _>>()
            .map_err(|e| Error::data(format!("column '{name}': {e}")))?;
        let column = match pieces.as_slice() {
            [one] => one.clone(),
            many => {
                let refs: Vec<&dyn Array> = many.iter().map(|a| a.as_ref()).collect();
                arrow_select::concat::concat(&refs)
                    .map_err(|e| Error::data(format!("column '{name}': {e}")))?
            }
        };
        out.set(
            name.clone(),
            Value::Column(Column(Arc::new(ArrowColumn(column)))),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::SchemaRef;
    use sluice_core::uncollate;

    fn sample(id: i64, text: Option<&str>, v: Vec<f32>) -> Sample {
        let mut s = Sample::new();
        s.set("id", Value::Int(id));
        s.set("text", text.map_or(Value::Null, Value::from));
        s.set(
            "v",
            Value::Tensor(Tensor::new(vec![v.len()], TensorData::F32(v)).unwrap()),
        );
        s.set("tags", Value::List(vec![Value::from("a")]));
        s
    }

    #[test]
    fn records_from_batches_equal_records_from_their_rows() {
        // Stacked 1-d/2-d arrays, lists with nulls, and Arrow columns (one all null).
        let rows: Vec<Sample> = (0..10)
            .map(|i| sample(i, (i % 3 != 0).then_some("t"), vec![i as f32, 0.5]))
            .collect();
        let arrow_col = |a: ArrayRef| Value::Column(Column(Arc::new(ArrowColumn(a))));
        let batches: Vec<Result<Sample>> = rows
            .chunks(4)
            .map(|c| {
                let mut b = sluice_core::collate(c).unwrap();
                let n = c.len();
                b.set(
                    "w",
                    arrow_col(Arc::new(Int32Array::from_iter_values(0..n as i32))),
                );
                b.set("none", arrow_col(Arc::new(StringArray::new_null(n))));
                Ok(b)
            })
            .collect();
        let flat: Vec<Result<Sample>> = batches
            .iter()
            .flat_map(|b| uncollate(b.as_ref().unwrap().clone()).unwrap())
            .map(Ok)
            .collect();
        let read = |r: Records| -> (SchemaRef, Vec<RecordBatch>) {
            let schema = r.schema();
            (schema, r.map(Result::unwrap).collect())
        };
        let (fast_schema, fast) = read(Records::from_batches(batches.into_iter()).unwrap());
        let (slow_schema, slow) = read(Records::from_samples(flat.into_iter(), 4).unwrap());
        assert_eq!(fast_schema, slow_schema);
        assert_eq!(fast, slow);
        assert_eq!(
            fast_schema.field_with_name("w").unwrap().data_type(),
            &DataType::Int64
        );
    }

    #[test]
    fn samples_round_trip_through_a_batch() {
        let rows = vec![
            sample(1, Some("x"), vec![1.0, 2.0]),
            sample(2, None, vec![3.0]),
        ];
        let schema = infer_schema(&rows).unwrap();
        let batch = samples_to_batch(&rows, &schema).unwrap();
        let names: Vec<sluice_core::Name> = schema
            .fields()
            .iter()
            .map(|f| f.name().as_str().into())
            .collect();
        for (i, want) in rows.iter().enumerate() {
            assert_eq!(&row_to_sample(&batch, &names, i).unwrap(), want);
        }
    }

    #[test]
    fn mixed_types_name_the_field() {
        let a = Sample::from_pairs([("x", Value::Int(1))]);
        let b = Sample::from_pairs([("x", Value::from("one"))]);
        let e = infer_schema(&[a.clone(), b.clone()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("'x'"), "{e}");
        let schema = infer_schema(&[a]).unwrap();
        let e = samples_to_batch(&[b], &schema).unwrap_err().to_string();
        assert!(e.contains("'x'") && e.contains("str"), "{e}");
    }

    #[test]
    fn dictionary_and_dates_normalize() {
        let dict: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let n = normalize(Arc::new(dict)).unwrap();
        assert_eq!(value_at(n.as_ref(), 2).unwrap(), Value::from("a"));
        let dates = Date32Array::from(vec![0]);
        let n = normalize(Arc::new(dates)).unwrap();
        assert_eq!(value_at(n.as_ref(), 0).unwrap(), Value::from("1970-01-01"));
    }

    #[test]
    fn timestamps_in_a_named_zone_read_as_iso_text_in_that_zone() {
        // 2024-01-01T00:00:00Z, as pandas and pyarrow store an aware timestamp.
        let at = 1_704_067_200_000_000i64;
        for (tz, want) in [
            (None, "2024-01-01T00:00:00"),
            (Some("UTC"), "2024-01-01T00:00:00+00:00"),
            (Some("Europe/Paris"), "2024-01-01T01:00:00+01:00"),
            (Some("America/New_York"), "2023-12-31T19:00:00-05:00"),
            (Some("+05:30"), "2024-01-01T05:30:00+05:30"),
        ] {
            let a = TimestampMicrosecondArray::from(vec![at]).with_timezone_opt(tz);
            let n = normalize(Arc::new(a)).unwrap();
            assert_eq!(
                value_at(n.as_ref(), 0).unwrap(),
                Value::from(want),
                "{tz:?}"
            );
        }
    }
}
