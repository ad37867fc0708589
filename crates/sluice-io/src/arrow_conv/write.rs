//! Samples → Arrow: inferring a schema from sluice values and building record batches.

use std::sync::Arc;

use arrow_array::*;
use arrow_buffer::{NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use sluice_core::{DType, Error, Result, Sample, Tensor, TensorData, Value};

pub(super) fn dtype_to_arrow(d: DType) -> DataType {
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
        Value::Object(_) => {
            return Err(Error::type_error(
                "an object handed through unconverted has no Arrow type",
            ))
        }
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

pub(super) fn tensor_array(data: TensorData) -> ArrayRef {
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

pub(super) fn build_array(vals: &[&Value], dt: &DataType) -> Result<ArrayRef> {
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
