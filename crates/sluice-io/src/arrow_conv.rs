//! Arrow ↔ sluice values: reading a row of a record batch as a [`Sample`], and building record
//! batches from samples (for the Parquet sink and `to_arrow`).
//!
//! Scalars map one to one (integers → `Int`, floats → `Float`, strings → `Str`, binary →
//! `Bytes`); a list of numbers becomes a 1-d tensor of the matching dtype, other lists
//! `List`s. Dictionary columns read as their values; dates, times, timestamps and decimals
//! read as their text form (so nothing is silently reinterpreted).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::*;
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use sluice_core::{
    uncollate, Column, ColumnData, DType, Error, Result, Sample, Tensor, TensorData, Value,
};

/// Whether sluice can read a column of this type (after [`normalize`]).
pub fn supported(dt: &DataType) -> bool {
    use DataType as D;
    match dt {
        D::Dictionary(_, v) => supported(v),
        D::List(f) | D::LargeList(f) | D::FixedSizeList(f, _) | D::ListView(f) => {
            supported(f.data_type())
        }
        D::Struct(_) | D::Map(_, _) | D::Union(_, _) | D::RunEndEncoded(_, _) => false,
        _ => true,
    }
}

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
    let cast = arrow_cast::cast(&array, &target).map_err(|e| Error::data(e.to_string()))?;
    // A dictionary of temporal values needs a second step.
    normalize(cast)
}

/// Row `row` of `batch` as a sample; `names` are the batch's column names (shared, so no
/// allocation per row).
pub fn row_to_sample(batch: &RecordBatch, names: &[Arc<str>], row: usize) -> Result<Sample> {
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
pub fn rows_to_batch(parts: &[(&RecordBatch, &[usize])], names: &[Arc<str>]) -> Result<Sample> {
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

fn dtype_to_arrow(d: DType) -> DataType {
    match d {
        DType::Bool => DataType::Boolean,
        DType::U8 => DataType::UInt8,
        DType::I8 => DataType::Int8,
        DType::U16 => DataType::UInt16,
        DType::I16 => DataType::Int16,
        DType::U32 => DataType::UInt32,
        DType::I32 => DataType::Int32,
        DType::U64 => DataType::UInt64,
        DType::I64 => DataType::Int64,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
    }
}

fn list_of(item: DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, true)))
}

/// The arrow type of one value; `None` for null (type not known yet).
fn value_type(v: &Value) -> Result<Option<DataType>> {
    Ok(Some(match v {
        Value::Null => return Ok(None),
        Value::Bool(_) => DataType::Boolean,
        Value::Int(_) => DataType::Int64,
        Value::Float(_) => DataType::Float64,
        Value::Str(_) => DataType::Utf8,
        Value::Bytes(_) => DataType::Binary,
        Value::Tensor(t) => {
            if t.shape().len() != 1 {
                return Err(Error::type_error(format!(
                    "tensors of shape {:?} cannot be stored in Arrow/Parquet as-is; \
                     flatten them (1-d) in a map first",
                    t.shape()
                )));
            }
            list_of(dtype_to_arrow(t.dtype()))
        }
        Value::Column(c) => return value_type(&c.to_value()?),
        Value::List(items) => {
            let mut inner = None;
            for it in items {
                inner = merge(inner, value_type(it)?)?;
            }
            list_of(inner.unwrap_or(DataType::Null))
        }
    }))
}

/// The common type of two observed types (ints widen to floats).
fn merge(a: Option<DataType>, b: Option<DataType>) -> Result<Option<DataType>> {
    Ok(match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) if a == b => Some(a),
        (Some(DataType::Int64), Some(DataType::Float64))
        | (Some(DataType::Float64), Some(DataType::Int64)) => Some(DataType::Float64),
        (Some(DataType::List(a)), Some(DataType::List(b)))
            if *a.data_type() == DataType::Null || *b.data_type() == DataType::Null =>
        {
            let item = if *a.data_type() == DataType::Null {
                b
            } else {
                a
            };
            Some(DataType::List(item))
        }
        (Some(a), Some(b)) => {
            return Err(Error::type_error(format!(
                "values of types {a} and {b} in one column"
            )))
        }
    })
}

/// The schema of `samples`: fields in first-seen order, types from their values.
///
/// ```
/// use sluice_core::{Sample, Value};
/// let s = Sample::from_pairs([("id", Value::Int(1)), ("text", Value::from("hi"))]);
/// let schema = sluice_io::arrow_conv::infer_schema(&[s]).unwrap();
/// assert_eq!(schema.field(1).name(), "text");
/// ```
pub fn infer_schema(samples: &[Sample]) -> Result<SchemaRef> {
    let mut cols: Vec<(String, Option<DataType>)> = Vec::new();
    for s in samples {
        for (name, v) in s.iter() {
            let t = value_type(v).map_err(|e| Error::type_error(format!("field '{name}': {e}")))?;
            match cols.iter_mut().find(|(n, _)| n.as_str() == &**name) {
                Some((_, dt)) => {
                    *dt = merge(dt.take(), t)
                        .map_err(|e| Error::type_error(format!("field '{name}': {e}")))?
                }
                None => cols.push((name.to_string(), t)),
            }
        }
    }
    Ok(Arc::new(Schema::new(
        cols.into_iter()
            .map(|(n, t)| Field::new(n, t.unwrap_or(DataType::Null), true))
            .collect::<Vec<_>>(),
    )))
}

/// A record batch of `samples` with `schema` (from [`infer_schema`]); a missing field is null.
pub fn samples_to_batch(samples: &[Sample], schema: &SchemaRef) -> Result<RecordBatch> {
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            let vals: Vec<&Value> = samples
                .iter()
                .map(|s| s.get(f.name()).unwrap_or(&Value::Null))
                .collect();
            build_array(&vals, f.data_type())
                .map_err(|e| Error::type_error(format!("field '{}': {e}", f.name())))
        })
        .collect::<Result<Vec<_>>>()?;
    for s in samples {
        if let Some(extra) = s.names().find(|n| schema.field_with_name(n).is_err()) {
            return Err(Error::type_error(format!(
                "field '{extra}' is not in the schema of the first rows ({}); every sample \
                 must have the same fields",
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    let opts = RecordBatchOptions::new().with_row_count(Some(samples.len()));
    RecordBatch::try_new_with_options(schema.clone(), columns, &opts)
        .map_err(|e| Error::Internal(e.to_string()))
}

fn mismatch(expected: &DataType, v: &Value) -> Error {
    Error::type_error(format!("expected {expected}, got a {} value", v.kind()))
}

fn tensor_array(data: TensorData) -> ArrayRef {
    match data {
        TensorData::Bool(v) => Arc::new(BooleanArray::from(v)),
        TensorData::U8(v) => Arc::new(UInt8Array::from(v)),
        TensorData::I8(v) => Arc::new(Int8Array::from(v)),
        TensorData::U16(v) => Arc::new(UInt16Array::from(v)),
        TensorData::I16(v) => Arc::new(Int16Array::from(v)),
        TensorData::U32(v) => Arc::new(UInt32Array::from(v)),
        TensorData::I32(v) => Arc::new(Int32Array::from(v)),
        TensorData::U64(v) => Arc::new(UInt64Array::from(v)),
        TensorData::I64(v) => Arc::new(Int64Array::from(v)),
        TensorData::F32(v) => Arc::new(Float32Array::from(v)),
        TensorData::F64(v) => Arc::new(Float64Array::from(v)),
    }
}

fn build_array(vals: &[&Value], dt: &DataType) -> Result<ArrayRef> {
    if vals.iter().any(|v| matches!(v, Value::Column(_))) {
        let owned = vals
            .iter()
            .map(|v| (*v).clone().materialized())
            .collect::<Result<Vec<_>>>()?;
        return build_array(&owned.iter().collect::<Vec<_>>(), dt);
    }
    macro_rules! scalars {
        ($arr:ty, $($pat:pat => $e:expr),*) => {{
            let v = vals
                .iter()
                .map(|v| match v {
                    Value::Null => Ok(None),
                    $($pat => Ok(Some($e)),)*
                    other => Err(mismatch(dt, other)),
                })
                .collect::<Result<Vec<_>>>()?;
            Arc::new(<$arr>::from(v)) as ArrayRef
        }};
    }
    Ok(match dt {
        DataType::Null => Arc::new(NullArray::new(vals.len())),
        DataType::Boolean => scalars!(BooleanArray, Value::Bool(b) => *b),
        DataType::Int64 => scalars!(Int64Array, Value::Int(i) => *i),
        DataType::Float64 => {
            scalars!(Float64Array, Value::Float(f) => *f, Value::Int(i) => *i as f64)
        }
        DataType::Utf8 => scalars!(StringArray, Value::Str(s) => &**s),
        DataType::Binary => scalars!(BinaryArray, Value::Bytes(b) => &**b),
        DataType::List(item) => {
            let mut offsets = Vec::with_capacity(vals.len() + 1);
            offsets.push(0i32);
            let mut valid = Vec::with_capacity(vals.len());
            let child: ArrayRef = match vals.iter().find_map(|v| match v {
                Value::Tensor(t) => Some(t.dtype()),
                _ => None,
            }) {
                // Tensors: one concatenated buffer, no per-element values.
                Some(d) if dtype_to_arrow(d) == *item.data_type() => {
                    let mut data = TensorData::with_capacity(d, 0);
                    for v in vals {
                        match v {
                            Value::Tensor(t) => data.extend_from(t.data())?,
                            Value::Null => {}
                            other => return Err(mismatch(dt, other)),
                        }
                        valid.push(!matches!(v, Value::Null));
                        offsets.push(data.len() as i32);
                    }
                    tensor_array(data)
                }
                Some(d) => {
                    return Err(mismatch(
                        dt,
                        &Value::Tensor(Tensor::new(vec![0], TensorData::with_capacity(d, 0))?),
                    ))
                }
                None => {
                    let mut items: Vec<&Value> = Vec::new();
                    for v in vals {
                        match v {
                            Value::List(l) => items.extend(l.iter()),
                            Value::Null => {}
                            other => return Err(mismatch(dt, other)),
                        }
                        valid.push(!matches!(v, Value::Null));
                        offsets.push(items.len() as i32);
                    }
                    build_array(&items, item.data_type())?
                }
            };
            let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
            Arc::new(
                ListArray::try_new(
                    item.clone(),
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    child,
                    nulls,
                )
                .map_err(|e| Error::Internal(e.to_string()))?,
            )
        }
        other => {
            return Err(Error::type_error(format!(
                "cannot build an arrow column of type {other}"
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
pub fn rows_to_columns(parts: &[(&RecordBatch, &[usize])], names: &[Arc<str>]) -> Result<Sample> {
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

type ToRecords = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// Record batches of a pipeline's outputs with the schema the row path infers from the first
/// batch's rows (what `to_arrow` exports): built from samples, `rows` at a time, or from
/// batches (collated samples, possibly holding a source's Arrow [`Column`]s) one to one.
pub struct Records {
    schema: SchemaRef,
    first: Option<RecordBatch>,
    rest: ToRecords,
}

impl Records {
    /// Samples, `rows` per record batch; the first batch is read here to learn the schema.
    pub fn from_samples<I>(samples: I, rows: usize) -> Result<Self>
    where
        I: Iterator<Item = Result<Sample>> + Send + 'static,
    {
        let mut samples = samples.peekable();
        let rows = rows.max(1);
        let chunk = samples.by_ref().take(rows).collect::<Result<Vec<_>>>()?;
        let schema = infer_schema(&chunk)?;
        let first = (!chunk.is_empty())
            .then(|| samples_to_batch(&chunk, &schema))
            .transpose()?;
        let to = schema.clone();
        let rest = std::iter::from_fn(move || {
            samples.peek()?;
            let chunk = samples.by_ref().take(rows).collect::<Result<Vec<_>>>();
            Some(chunk.and_then(|c| samples_to_batch(&c, &to)))
        });
        Ok(Records {
            schema,
            first,
            rest: Box::new(rest),
        })
    }

    /// Batches, one record batch each, with no per-row sample made where their columns are
    /// Arrow arrays, 1-d/2-d arrays or lists; the first is read here to learn the schema.
    pub fn from_batches<I>(mut batches: I) -> Result<Self>
    where
        I: Iterator<Item = Result<Sample>> + Send + 'static,
    {
        let first = batches.next().transpose()?;
        let schema = match &first {
            Some(b) => match columns_schema(b) {
                Some(schema) => schema,
                None => infer_schema(&uncollate(b.clone())?)?,
            },
            None => infer_schema(&[])?,
        };
        let first = first.map(|b| batch_to_record(b, &schema)).transpose()?;
        let to = schema.clone();
        let rest = batches.map(move |b| b.and_then(|b| batch_to_record(b, &to)));
        Ok(Records {
            schema,
            first,
            rest: Box::new(rest),
        })
    }
}

impl Iterator for Records {
    type Item = std::result::Result<RecordBatch, arrow_schema::ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let batch = match self.first.take() {
            Some(b) => Ok(b),
            None => self.rest.next()?,
        };
        Some(batch.map_err(|e| arrow_schema::ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for Records {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// The type the row path gives the values of an Arrow column of type `dt` (see
/// [`infer_schema`]); `None` for types whose values it types otherwise (lists, ...).
fn row_type(dt: &DataType) -> Option<DataType> {
    use DataType as D;
    Some(match dt {
        D::Int8 | D::Int16 | D::Int32 | D::Int64 | D::UInt8 | D::UInt16 | D::UInt32 => D::Int64,
        D::Float32 | D::Float64 => D::Float64,
        D::Boolean => D::Boolean,
        D::Utf8 | D::LargeUtf8 | D::Utf8View => D::Utf8,
        D::Binary | D::LargeBinary => D::Binary,
        _ => return None,
    })
}

/// The schema [`infer_schema`] gives the rows of `batch`, read off its Arrow columns' types
/// without making the rows; `None` unless every field is such a column.
fn columns_schema(batch: &Sample) -> Option<SchemaRef> {
    let fields = batch
        .iter()
        .map(|(name, v)| {
            let Value::Column(c) = v else { return None };
            let a = &c.0.as_any().downcast_ref::<ArrowColumn>()?.0;
            let dt = if a.null_count() == a.len() {
                DataType::Null
            } else {
                row_type(a.data_type())?
            };
            Some(Field::new(name.to_string(), dt, true))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Arc::new(Schema::new(fields)))
}

/// One batch sample as a record batch of `schema`: 1-d arrays become primitive columns,
/// `[n, k]` arrays list columns of k items, lists go through the row path's builder. A field
/// that fits none of these converts through its rows, exactly as [`samples_to_batch`] would.
fn batch_to_record(batch: Sample, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let column = match (batch.get(field.name()), field.data_type()) {
            (Some(Value::Column(c)), dt) => {
                match c.0.as_any().downcast_ref::<ArrowColumn>() {
                    Some(a) if a.0.data_type() == dt => Some(a.0.clone()),
                    // Widening (int32 → int64, float32 → float64), as the row path's values.
                    Some(a) if row_type(a.0.data_type()).as_ref() == Some(dt) => {
                        arrow_cast::cast(&a.0, dt).ok()
                    }
                    _ => None,
                }
            }
            (Some(Value::Tensor(t)), dt)
                if t.shape().len() == 1 && dtype_to_arrow(t.dtype()) == *dt =>
            {
                Some(tensor_array(t.data().clone()))
            }
            (Some(Value::Tensor(t)), DataType::List(item))
                if t.shape().len() == 2 && dtype_to_arrow(t.dtype()) == *item.data_type() =>
            {
                let (n, k) = (t.shape()[0], t.shape()[1]);
                let offsets = (0..=n)
                    .map(|i| i32::try_from(i * k))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|_| Error::data("batch too large for an Arrow list column"))?;
                ListArray::try_new(
                    item.clone(),
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    tensor_array(t.data().clone()),
                    None,
                )
                .ok()
                .map(|a| Arc::new(a) as ArrayRef)
            }
            (Some(Value::List(values)), dt) => {
                let refs: Vec<&Value> = values.iter().collect();
                build_array(&refs, dt).ok()
            }
            _ => None,
        };
        match column {
            Some(c) => columns.push(c),
            None => return samples_to_batch(&uncollate(batch)?, schema),
        }
    }
    RecordBatch::try_new(schema.clone(), columns)
        .or_else(|_| samples_to_batch(&uncollate(batch)?, schema))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let names: Vec<Arc<str>> = schema
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
}
