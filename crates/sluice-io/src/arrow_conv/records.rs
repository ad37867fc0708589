//! [`Records`]: a pipeline's outputs as a stream of record batches (`to_arrow`, the sinks).

use std::sync::Arc;

use arrow_array::*;
use arrow_buffer::{OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use sluice_core::{uncollate, Error, Result, Sample, Value};

use super::write::{build_array, dtype_to_arrow, infer_schema, samples_to_batch, tensor_array};
use super::ArrowColumn;

type ToRecords = Box<dyn Iterator<Item = Result<RecordBatch>> + Send>;

/// Record batches of a pipeline's outputs with the schema the row path infers from the first
/// batch's rows (what `to_arrow` exports): built from samples, `rows` at a time, or from
/// batches (collated samples, possibly holding a source's Arrow [`sluice_core::Column`]s) one to one.
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
