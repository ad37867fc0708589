//! Parquet files for the tests of this module's parts.

use std::ops::Range;

use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use sluice_core::{Sample, Value};

use super::cache::{lock, CacheKey, DECODED_KEYS};
use super::ParquetSource;
use crate::arrow_conv::{infer_schema, samples_to_batch};

pub(super) fn write_file(path: &std::path::Path, ids: Range<i64>, rg_rows: usize) {
    let rows: Vec<Sample> = ids
        .map(|i| {
            Sample::from_pairs([
                ("id", Value::Int(i)),
                ("text", Value::from(format!("row {i}"))),
            ])
        })
        .collect();
    let schema = infer_schema(&rows).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(rg_rows))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        schema.clone(),
        Some(props),
    )
    .unwrap();
    w.write(&samples_to_batch(&rows, &schema).unwrap()).unwrap();
    w.close().unwrap();
}

/// The row groups of `src` decoded so far, in order (other tests decode concurrently).
pub(super) fn decoded(src: &ParquetSource) -> Vec<CacheKey> {
    lock(&DECODED_KEYS)
        .iter()
        .filter(|k| k.0 == src.inner.id)
        .copied()
        .collect()
}

/// Two files, ids 0..4000, row groups of 500 rows (8 in all).
pub(super) fn eight_row_groups(dir: &tempfile::TempDir) -> ParquetSource {
    write_file(&dir.path().join("a.parquet"), 0..3000, 500);
    write_file(&dir.path().join("b.parquet"), 3000..4000, 500);
    ParquetSource::open(&[dir.path().display().to_string()], None).unwrap()
}

/// The ids `range` as the batch column a source's columns materialise to.
pub(super) fn ids(range: Range<i64>) -> Value {
    let ids: Vec<i64> = range.collect();
    Value::Tensor(
        sluice_core::Tensor::new(vec![ids.len()], sluice_core::TensorData::I64(ids)).unwrap(),
    )
}
