//! Struct columns read as their fields, one column each, named `parent.child` — as
//! `pyarrow.Table.flatten()` and Hugging Face's `Dataset.flatten()` name them (an `Image()`
//! column `image` arrives as `image.bytes` and `image.path`). A sample is flat (sluice has no
//! nested-dict value), so every read path — rows, batches, Arrow columns, `to_arrow`, worker
//! processes — carries the fields as any other column.

use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef, RecordBatch, StructArray};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, FieldRef, Schema};
use sluice_core::{Error, Result};

use super::normalize;
use crate::show::show;

/// The fields a record batch of `schema` reads as, structs flattened (recursively); an error
/// when two of them end up with one name (a column `a.b` beside a struct `a` with a field
/// `b`).
pub fn read_fields(schema: &Schema) -> Result<Vec<FieldRef>> {
    let mut out = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        flat_field(f, String::new(), false, &mut out);
    }
    for (i, f) in out.iter().enumerate() {
        if out[..i].iter().any(|g| g.name() == f.name()) {
            return Err(Error::invalid(format!(
                "two columns read as '{}' (a struct's field is read as 'struct.field'); \
                 leave one of them out",
                show(f.name())
            )));
        }
    }
    Ok(out)
}

fn flat_field(f: &FieldRef, prefix: String, nullable: bool, out: &mut Vec<FieldRef>) {
    let name = format!("{prefix}{}", f.name());
    match f.data_type() {
        DataType::Struct(children) => {
            for c in children {
                flat_field(c, format!("{name}."), nullable || f.is_nullable(), out);
            }
        }
        _ if prefix.is_empty() => out.push(f.clone()),
        dt => out.push(Arc::new(
            Field::new(name, dt.clone(), nullable || f.is_nullable())
                .with_metadata(f.metadata().clone()),
        )),
    }
}

/// `batch` as sluice reads it: structs flattened (a null struct makes each of its fields
/// null in that row), then every column [`normalize`]d.
pub fn read_batch(batch: &RecordBatch) -> Result<RecordBatch> {
    let mut columns = Vec::with_capacity(batch.num_columns());
    for c in batch.columns() {
        flat_column(c.clone(), None, &mut columns);
    }
    let columns = columns
        .into_iter()
        .map(normalize)
        .collect::<Result<Vec<_>>>()?;
    let fields: Vec<Field> = read_fields(&batch.schema())?
        .iter()
        .zip(&columns)
        .map(|(f, c)| {
            f.as_ref()
                .clone()
                .with_data_type(c.data_type().clone())
                .with_nullable(f.is_nullable() || c.null_count() > 0)
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::Internal(e.to_string()))
}

fn flat_column(a: ArrayRef, parent_nulls: Option<&NullBuffer>, out: &mut Vec<ArrayRef>) {
    let a = match parent_nulls {
        Some(p) => with_nulls(a, p),
        None => a,
    };
    let Some(s) = a.as_any().downcast_ref::<StructArray>() else {
        out.push(a);
        return;
    };
    // A struct's fields keep their own validity; the struct's is carried down to them.
    for c in s.columns() {
        flat_column(c.clone(), s.nulls(), out);
    }
}

/// `a` with the rows null where `extra` says so too.
fn with_nulls(a: ArrayRef, extra: &NullBuffer) -> ArrayRef {
    let nulls = NullBuffer::union(a.nulls(), Some(extra));
    let data = a.to_data().into_builder().nulls(nulls);
    // SAFETY: only validity is added, to an array that was valid: every slot of it is a
    // valid value whether or not it is marked null.
    make_array(unsafe { data.build_unchecked() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrow_conv::{row_to_sample, value_at};
    use arrow_array::{BinaryArray, Int32Array, StringArray};
    use arrow_schema::Fields;
    use sluice_core::Value;

    /// An HF `Image()` column: struct {bytes: binary, path: string}, the second row null.
    fn image_column() -> ArrayRef {
        let fields = Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Utf8, true),
        ]);
        let bytes: ArrayRef = Arc::new(BinaryArray::from(vec![
            Some(&b"\x89PNG"[..]),
            Some(&b"junk"[..]),
            None,
        ]));
        let path: ArrayRef = Arc::new(StringArray::from(vec![Some("a.png"), Some("b"), None]));
        Arc::new(StructArray::new(
            fields,
            vec![bytes, path],
            Some(NullBuffer::from(vec![true, false, true])),
        ))
    }

    #[test]
    fn struct_fields_read_as_dotted_columns_with_the_structs_nulls() {
        let batch = RecordBatch::try_from_iter([
            (
                "label",
                Arc::new(Int32Array::from(vec![1, 2, 3])) as ArrayRef,
            ),
            ("image", image_column()),
        ])
        .unwrap();
        let read = read_batch(&batch).unwrap();
        let names: Vec<_> = read_fields(&batch.schema())
            .unwrap()
            .iter()
            .map(|f| f.name().as_str().into())
            .collect::<Vec<sluice_core::Name>>();
        assert_eq!(
            read.schema()
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>(),
            ["label", "image.bytes", "image.path"]
        );
        let row = row_to_sample(&read, &names, 0).unwrap();
        assert_eq!(
            row.get("image.bytes"),
            Some(&Value::Bytes(b"\x89PNG"[..].into()))
        );
        assert_eq!(row.get("image.path"), Some(&Value::from("a.png")));
        // The struct is null in row 1: its fields are too, whatever they hold.
        assert_eq!(value_at(read.column(1).as_ref(), 1).unwrap(), Value::Null);
        assert_eq!(value_at(read.column(2).as_ref(), 1).unwrap(), Value::Null);
        // Sliced batches keep their rows.
        let sliced = read_batch(&batch.slice(1, 2)).unwrap();
        assert_eq!(value_at(sliced.column(1).as_ref(), 0).unwrap(), Value::Null);
        assert_eq!(
            value_at(sliced.column(0).as_ref(), 1).unwrap(),
            Value::Int(3)
        );
    }

    #[test]
    fn a_flattened_name_taken_twice_is_refused() {
        let batch = RecordBatch::try_from_iter([
            ("image", image_column()),
            (
                "image.path",
                Arc::new(StringArray::from(vec!["x", "y", "z"])) as ArrayRef,
            ),
        ])
        .unwrap();
        let e = read_batch(&batch).unwrap_err().to_string();
        assert!(e.contains("'image.path'"), "{e}");
    }
}
