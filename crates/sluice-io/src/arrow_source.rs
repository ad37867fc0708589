//! `from_arrow`: in-memory Arrow record batches as a random-access source.

use std::sync::Arc;

use arrow_array::RecordBatch;
use sluice_core::{Error, Result, Sample, Source, SourceRef};

use crate::arrow_conv::{read_batch, read_fields, row_to_sample, supported};
use crate::show::show;

/// The rows of record batches that share one schema.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::Source;
/// use arrow_array::{Int64Array, RecordBatch};
/// let b = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(vec![7, 8])) as _)]).unwrap();
/// let src = sluice_io::ArrowSource::new(vec![b]).unwrap();
/// assert_eq!(src.get(1).unwrap().get("id").unwrap().as_int(), Some(8));
/// ```
#[derive(Debug, Clone)]
pub struct ArrowSource {
    batches: Arc<Vec<RecordBatch>>,
    /// Cumulative rows at the start of each batch (plus the total at the end).
    starts: Arc<Vec<u64>>,
    names: Arc<Vec<sluice_core::Name>>,
}

impl ArrowSource {
    /// A source over `batches` (read once, up front: structs flattened, columns normalized;
    /// see [`read_batch`]).
    pub fn new(batches: Vec<RecordBatch>) -> Result<Self> {
        let schema = batches
            .first()
            .map(|b| b.schema())
            .ok_or_else(|| Error::invalid("from_arrow needs at least one record batch"))?;
        for f in schema.fields() {
            if !supported(f.data_type()) {
                return Err(Error::type_error(format!(
                    "column '{}' has type {}, which sluice cannot read; leave it out \
                     (from_huggingface(ds, columns=[...]), or select the other columns of \
                     the table)",
                    show(f.name()),
                    f.data_type()
                )));
            }
        }
        let names = read_fields(&schema)?
            .iter()
            .map(|f| f.name().as_str().into())
            .collect();
        let mut starts = vec![0u64];
        let mut read = Vec::with_capacity(batches.len());
        for b in batches {
            if b.schema().fields() != schema.fields() {
                return Err(Error::invalid("record batches with different schemas"));
            }
            starts.push(starts.last().copied().unwrap_or(0) + b.num_rows() as u64);
            read.push(read_batch(&b)?);
        }
        Ok(ArrowSource {
            batches: Arc::new(read),
            starts: Arc::new(starts),
            names: Arc::new(names),
        })
    }
}

impl Source for ArrowSource {
    fn name(&self) -> &str {
        "from_arrow"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"source": "from_arrow", "rows": self.starts.last()})
    }
    fn len(&self) -> Option<u64> {
        self.starts.last().copied()
    }
    fn fields(&self) -> Option<Vec<String>> {
        Some(self.names.iter().map(|n| n.to_string()).collect())
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let b = self.starts.partition_point(|&s| s <= index) - 1;
        row_to_sample(
            &self.batches[b],
            &self.names,
            (index - self.starts[b]) as usize,
        )
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}
