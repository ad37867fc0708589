//! Batching: stacking samples into one batch sample, and splitting a batch back into samples.
//!
//! Scalars and same-shaped tensors stack into arrays with a leading batch dimension (ints
//! with floats into float64); fields that are ragged by design become lists: strings, bytes,
//! Python lists (with arrays too: a batch of batches), arrays of one dtype but different
//! shapes, and fields with missing values (`None`). A field that mixes kinds (an array and an int) or arrays of different dtypes is
//! an error naming it, unless ragged output was asked for ([`collate_with`] with `ragged`),
//! which makes any field that does not stack a list.

use crate::error::{Error, Result};
use crate::sample::Sample;
use crate::value::{DType, Tensor, TensorData, Value};

/// Stacks `samples` into one batch sample.
///
/// ```
/// use sluice_core::{collate, Sample, Value};
/// let b = collate(&[Sample::from_pairs([("id", Value::Int(1))]),
///                   Sample::from_pairs([("id", Value::Int(2))])]).unwrap();
/// match b.get("id").unwrap() { Value::Tensor(t) => assert_eq!(t.shape(), &[2]), _ => panic!() }
/// ```
pub fn collate(samples: &[Sample]) -> Result<Sample> {
    collate_with(samples, false)
}

/// [`collate`]; with `ragged`, a field whose values do not stack (mixed kinds or dtypes)
/// becomes a list instead of an error.
///
/// ```
/// use sluice_core::{collate::collate_with, Sample, Value};
/// let rows = [Sample::from_pairs([("x", Value::Int(1))]), Sample::from_pairs([("x", Value::from("a"))])];
/// assert!(collate_with(&rows, false).unwrap_err().to_string().contains("'x'"));
/// assert_eq!(collate_with(&rows, true).unwrap().get("x").unwrap().kind(), "list");
/// ```
pub fn collate_with(samples: &[Sample], ragged: bool) -> Result<Sample> {
    collate_fields(samples, ragged, |_, _| None)
}

/// [`collate_with`], where `stack(name, column)` may stack a field itself (`Some`) or leave
/// it to the usual stacking (`None`): how a batch writes an op's output straight into its
/// slots ([`crate::plan::slots`]).
pub(crate) fn collate_fields(
    samples: &[Sample],
    ragged: bool,
    mut stack: impl FnMut(&str, &[&Value]) -> Option<Result<Value>>,
) -> Result<Sample> {
    let Some(first) = samples.first() else {
        return Ok(Sample::new());
    };
    let mut out = Sample::with_capacity(first.len());
    for (name, _) in first.iter() {
        let mut column = Vec::with_capacity(samples.len());
        for s in samples {
            match s.get(name) {
                Some(v) => column.push(v),
                None => {
                    return Err(Error::data(format!(
                        "cannot batch: field '{name}' is missing from some samples \
                         (fields: {})",
                        s.names().collect::<Vec<_>>().join(", ")
                    )))
                }
            }
        }
        let value = match stack(name, &column) {
            Some(v) => v?,
            None => stack_field(name, &column, ragged)?,
        };
        out.set(name.clone(), value);
    }
    Ok(out)
}

/// Pads each `(field, value)` along its first axis to the longest in `samples`, so ragged
/// sequences (token ids, masks) stack into one array. Other axes must agree.
///
/// ```
/// use sluice_core::{collate::pad_to_longest, Sample, Tensor, TensorData, Value};
/// let ids = |v: Vec<i64>| Sample::from_pairs([("ids", Value::Tensor(Tensor::new(vec![v.len()], TensorData::I64(v)).unwrap()))]);
/// let mut batch = vec![ids(vec![1, 2, 3]), ids(vec![4])];
/// pad_to_longest(&mut batch, &[("ids".into(), 0.0)])?;
/// let b = sluice_core::collate(&batch)?;
/// match b.get("ids") { Some(Value::Tensor(t)) => assert_eq!(t.shape(), &[2, 3]), _ => unreachable!() }
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn pad_to_longest(samples: &mut [Sample], pads: &[(String, f64)]) -> Result<()> {
    for (field, value) in pads {
        let mut longest = 0;
        for s in samples.iter() {
            match s.get(field) {
                Some(Value::Tensor(t)) if !t.shape().is_empty() => {
                    longest = longest.max(t.shape()[0])
                }
                Some(other) => {
                    return Err(Error::type_error(format!(
                        "batch(pad=...): field '{field}' must be an array with at least one \
                         dimension, got {}",
                        other.kind()
                    )))
                }
                None => {
                    return Err(Error::data(format!(
                        "batch(pad=...): field '{field}' is missing from some samples"
                    )))
                }
            }
        }
        for s in samples.iter_mut() {
            let Some(Value::Tensor(t)) = s.get_mut(field) else {
                continue;
            };
            let len = t.shape()[0];
            if len == longest {
                continue;
            }
            let row: usize = t.shape()[1..].iter().product();
            let extra = (longest - len) * row;
            let mut shape = t.shape().to_vec();
            shape[0] = longest;
            let mut data = t.data().clone();
            let v = *value;
            match &mut data {
                TensorData::Bool(d) => d.extend(std::iter::repeat_n(v != 0.0, extra)),
                TensorData::U8(d) => d.extend(std::iter::repeat_n(v as u8, extra)),
                TensorData::I8(d) => d.extend(std::iter::repeat_n(v as i8, extra)),
                TensorData::U16(d) => d.extend(std::iter::repeat_n(v as u16, extra)),
                TensorData::I16(d) => d.extend(std::iter::repeat_n(v as i16, extra)),
                TensorData::U32(d) => d.extend(std::iter::repeat_n(v as u32, extra)),
                TensorData::I32(d) => d.extend(std::iter::repeat_n(v as i32, extra)),
                TensorData::U64(d) => d.extend(std::iter::repeat_n(v as u64, extra)),
                TensorData::I64(d) => d.extend(std::iter::repeat_n(v as i64, extra)),
                TensorData::F32(d) => d.extend(std::iter::repeat_n(v as f32, extra)),
                TensorData::F64(d) => d.extend(std::iter::repeat_n(v, extra)),
            }
            *t = Tensor::new(shape, data)?;
        }
    }
    Ok(())
}

/// One field's values over a batch, stacked as [`collate`] does: ints, floats and bools into
/// 1-d arrays, same-shape tensors along a new first axis, strings, bytes, lists, ragged
/// tensors and columns with missing values into a list; mixed kinds or dtypes are an error.
///
/// ```
/// use sluice_core::{collate::stack_column, Value};
/// let v = stack_column(&[&Value::Int(1), &Value::Float(0.5)]).unwrap();
/// assert_eq!(v.kind(), "tensor");
/// ```
pub fn stack_column(column: &[&Value]) -> Result<Value> {
    stack_field("?", column, false)
}

/// [`stack_column`] for the field `name` (named in errors); with `ragged`, values that do
/// not stack become a list whatever they are.
pub fn stack_field(name: &str, column: &[&Value], ragged: bool) -> Result<Value> {
    if let Some(v) = stack_uniform(column)? {
        return Ok(v);
    }
    if !ragged {
        check_listable(name, column)?;
    }
    Ok(Value::List(column.iter().map(|v| (*v).clone()).collect()))
}

/// A column's values stacked into one tensor if they are all numbers, all bools or tensors
/// of one dtype and shape (the common case, checked first).
fn stack_uniform(column: &[&Value]) -> Result<Option<Value>> {
    let n = column.len();
    let all = |f: fn(&Value) -> bool| column.iter().all(|v| f(v));
    if all(|v| matches!(v, Value::Int(_))) {
        let data = column.iter().map(|v| v.as_int().unwrap_or(0)).collect();
        return Ok(Some(Value::Tensor(Tensor::new(
            vec![n],
            TensorData::I64(data),
        )?)));
    }
    if all(|v| matches!(v, Value::Int(_) | Value::Float(_))) {
        let data = column
            .iter()
            .map(|v| match v {
                Value::Int(i) => *i as f64,
                Value::Float(f) => *f,
                _ => 0.0,
            })
            .collect();
        return Ok(Some(Value::Tensor(Tensor::new(
            vec![n],
            TensorData::F64(data),
        )?)));
    }
    if all(|v| matches!(v, Value::Bool(_))) {
        let data = column
            .iter()
            .map(|v| matches!(v, Value::Bool(true)))
            .collect();
        return Ok(Some(Value::Tensor(Tensor::new(
            vec![n],
            TensorData::Bool(data),
        )?)));
    }
    Ok(stack_tensors(column)?.map(Value::Tensor))
}

/// What a value is, for telling a field that is ragged by design (one kind throughout, or
/// missing values) from one that mixes kinds. Arrays and lists are both sequences (a batch
/// of batches holds arrays, and lists where an inner batch was ragged).
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Int(_) | Value::Float(_) => "number",
        Value::Tensor(_) | Value::List(_) => "sequence",
        other => other.kind(),
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Tensor(t) => {
            let dtype = t.dtype().name();
            let article = if dtype.starts_with(['i', 'u']) {
                "an"
            } else {
                "a"
            };
            format!("{article} {dtype} array of shape {:?}", t.shape())
        }
        Value::Int(_) => "an int".into(),
        Value::Str(_) => "a string".into(),
        Value::Bytes(_) => "bytes".into(),
        other => format!("a {}", other.kind()),
    }
}

/// Refuses a column that would become a list although it is not ragged by design: values
/// of different kinds, or arrays of different dtypes. Missing values (`None`) are allowed.
fn check_listable(name: &str, column: &[&Value]) -> Result<()> {
    let present = || {
        column
            .iter()
            .enumerate()
            .filter(|(_, v)| !matches!(v, Value::Null))
    };
    let Some((i, first)) = present().next() else {
        return Ok(());
    };
    let first_array = present().find(|(_, v)| matches!(v, Value::Tensor(_)));
    for (j, v) in present() {
        // The first value it conflicts with: the first array of another dtype, or the first
        // value of another kind.
        let (i, first) = match (v, first_array) {
            (Value::Tensor(t), Some((a, Value::Tensor(f)))) if t.dtype() != f.dtype() => {
                (a, column[a])
            }
            _ if kind_of(v) != kind_of(first) => (i, *first),
            _ => continue,
        };
        return Err(Error::type_error(format!(
            "cannot batch field '{name}': row {i} of the batch holds {} and row {j} {}; \
             make them one kind and dtype in a map (e.g. arr.astype(...)), or ask for lists \
             with batch(size, ragged=True)",
            describe(first),
            describe(v)
        )));
    }
    Ok(())
}

/// Stacks tensors of one dtype and shape; `None` if the column is not such tensors.
fn stack_tensors(column: &[&Value]) -> Result<Option<Tensor>> {
    let Some(Value::Tensor(first)) = column.first() else {
        return Ok(None);
    };
    let (dtype, shape): (DType, &[usize]) = (first.dtype(), first.shape());
    let uniform = column.iter().all(|v| match v {
        Value::Tensor(t) => t.dtype() == dtype && t.shape() == shape,
        _ => false,
    });
    if !uniform {
        return Ok(None);
    }
    let per = first.data().len();
    let mut data = match dtype {
        // Float32 and uint8 batches are what the consumer frees and gives back
        // (crate::recycle), page-locked while a device consumes them.
        DType::F32 => TensorData::F32(crate::recycle::take_f32(per * column.len())),
        DType::U8 => TensorData::U8(crate::recycle::take_u8(per * column.len())),
        _ => TensorData::with_capacity(dtype, per * column.len()),
    };
    for v in column {
        if let Value::Tensor(t) = v {
            data.extend_from(t.data())?;
        }
    }
    let mut full = Vec::with_capacity(shape.len() + 1);
    full.push(column.len());
    full.extend_from_slice(shape);
    Ok(Some(Tensor::new(full, data)?))
}

/// Splits a batch sample into its rows: tensors along their first dimension, lists by item.
///
/// ```
/// use sluice_core::{collate, uncollate, Sample, Value};
/// let rows = vec![Sample::from_pairs([("id", Value::Int(1))]), Sample::from_pairs([("id", Value::Int(2))])];
/// let b = collate(&rows).unwrap();
/// assert_eq!(uncollate(b).unwrap(), rows);
/// ```
pub fn uncollate(batch: Sample) -> Result<Vec<Sample>> {
    let mut rows: Option<Vec<Sample>> = None;
    for (name, value) in batch {
        let parts = split_value(&name, value)?;
        let rows = rows.get_or_insert_with(|| vec![Sample::new(); parts.len()]);
        if parts.len() != rows.len() {
            return Err(Error::data(format!(
                "batch fields have different lengths: '{name}' has {}, others {}",
                parts.len(),
                rows.len()
            )));
        }
        for (row, part) in rows.iter_mut().zip(parts) {
            row.set(name.clone(), part);
        }
    }
    Ok(rows.unwrap_or_default())
}

fn split_value(name: &str, value: Value) -> Result<Vec<Value>> {
    match value.materialized()? {
        Value::List(items) => Ok(items),
        Value::Tensor(t) => {
            let shape = t.shape().to_vec();
            let Some((&n, inner)) = shape.split_first() else {
                return Err(Error::data(format!(
                    "batch field '{name}' is a 0-d tensor; expected a leading batch dimension"
                )));
            };
            let per: usize = inner.iter().product();
            let data = t.data();
            (0..n)
                .map(|i| {
                    let part = data.slice(i * per, (i + 1) * per);
                    if inner.is_empty() {
                        Ok(scalar_of(&part))
                    } else {
                        Ok(Value::Tensor(Tensor::new(inner.to_vec(), part)?))
                    }
                })
                .collect()
        }
        other => Err(Error::type_error(format!(
            "batch field '{name}' is a {}; expected an array or a list",
            other.kind()
        ))),
    }
}

/// A one-element buffer as a scalar value (batched ints/floats/bools go back to scalars).
fn scalar_of(part: &TensorData) -> Value {
    match part {
        TensorData::Bool(v) => Value::Bool(v[0]),
        TensorData::F32(v) => Value::Float(v[0] as f64),
        TensorData::F64(v) => Value::Float(v[0]),
        TensorData::U64(v) => Value::Int(v[0] as i64),
        other => {
            let as_i64 = match other {
                TensorData::U8(v) => v[0] as i64,
                TensorData::I8(v) => v[0] as i64,
                TensorData::U16(v) => v[0] as i64,
                TensorData::I16(v) => v[0] as i64,
                TensorData::U32(v) => v[0] as i64,
                TensorData::I32(v) => v[0] as i64,
                TensorData::I64(v) => v[0],
                _ => 0,
            };
            Value::Int(as_i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(v: u8) -> Value {
        Value::Tensor(Tensor::new(vec![2, 2], TensorData::U8(vec![v; 4])).unwrap())
    }

    #[test]
    fn a_float32_batch_is_written_into_a_buffer_given_back() {
        let _run = crate::recycle::Active::new();
        let row = |v: f32| {
            let t = Tensor::new(vec![1 << 17], TensorData::F32(vec![v; 1 << 17])).unwrap();
            Sample::from_pairs([("x", Value::Tensor(t))])
        };
        let given: Vec<f32> = Vec::with_capacity(1 << 18);
        let at = given.as_ptr();
        crate::recycle::give_f32(given);
        let batch = collate(&[row(1.0), row(2.0)]).unwrap();
        let Some(Value::Tensor(t)) = batch.get("x") else {
            panic!("not stacked")
        };
        let TensorData::F32(v) = t.data() else {
            panic!("not float32")
        };
        assert_eq!((v.as_ptr(), v[0], v[(1 << 18) - 1]), (at, 1.0, 2.0));
    }

    #[test]
    fn stacks_tensors_and_scalars() {
        let rows: Vec<Sample> = (0..3)
            .map(|i| {
                Sample::from_pairs([
                    ("image", img(i as u8)),
                    ("label", Value::Int(i)),
                    ("path", Value::from(format!("p{i}"))),
                ])
            })
            .collect();
        let b = collate(&rows).unwrap();
        let Value::Tensor(t) = b.get("image").unwrap() else {
            panic!()
        };
        assert_eq!(t.shape(), &[3, 2, 2]);
        assert!(matches!(b.get("path"), Some(Value::List(l)) if l.len() == 3));
        assert_eq!(uncollate(b).unwrap(), rows);
    }

    #[test]
    fn mixed_kinds_and_dtypes_are_errors_unless_ragged() {
        let t = |d: TensorData| Value::Tensor(Tensor::new(vec![2], d).unwrap());
        let rows = |a: Value, b: Value| {
            [
                Sample::from_pairs([("x", a)]),
                Sample::from_pairs([("x", b)]),
            ]
        };
        let cases = [
            (
                t(TensorData::F32(vec![0.0; 2])),
                t(TensorData::I64(vec![0; 2])),
                "float32",
            ),
            (t(TensorData::U8(vec![0; 2])), Value::Int(3), "an int"),
            (Value::from("a"), Value::Int(3), "a string"),
            (Value::Bool(true), Value::Int(3), "a bool"),
            (Value::from("a"), Value::Bytes(vec![1u8].into()), "bytes"),
            (Value::List(vec![]), Value::from("a"), "a list"),
        ];
        for (a, b, says) in cases {
            let r = rows(a, b);
            let e = collate(&r).unwrap_err();
            let msg = e.to_string();
            assert!(matches!(e, Error::Type(_)), "{msg}");
            assert!(
                msg.contains("'x'") && msg.contains(says) && msg.contains("ragged=True"),
                "{msg}"
            );
            assert_eq!(
                collate_with(&r, true).unwrap().get("x").unwrap().kind(),
                "list"
            );
        }
        let e = collate(&rows(
            t(TensorData::F32(vec![0.0; 2])),
            t(TensorData::I64(vec![0; 2])),
        ));
        let msg = e.unwrap_err().to_string();
        assert!(
            msg.contains("float32 array of shape [2]") && msg.contains("int64 array of shape [2]"),
            "{msg}"
        );
    }

    #[test]
    fn ragged_by_design_fields_stay_lists() {
        let strs = [
            Sample::from_pairs([("s", Value::from("a")), ("n", Value::Null)]),
            Sample::from_pairs([("s", Value::from("bc")), ("n", Value::Int(1))]),
        ];
        let b = collate(&strs).unwrap();
        assert_eq!(b.get("s").unwrap().kind(), "list");
        assert_eq!(b.get("n").unwrap().kind(), "list", "missing values");
        let lists = [
            Sample::from_pairs([("l", Value::List(vec![Value::Int(1)]))]),
            Sample::from_pairs([("l", Value::List(vec![]))]),
        ];
        assert_eq!(collate(&lists).unwrap().get("l").unwrap().kind(), "list");
        // A batch of batches: arrays, and a list where an inner batch was ragged.
        let t = |d: TensorData| Value::Tensor(Tensor::new(vec![1], d).unwrap());
        let nested = [
            Sample::from_pairs([("b", t(TensorData::I64(vec![1])))]),
            Sample::from_pairs([("b", Value::List(vec![t(TensorData::I64(vec![2]))]))]),
            Sample::from_pairs([("b", t(TensorData::I64(vec![3])))]),
        ];
        assert_eq!(collate(&nested).unwrap().get("b").unwrap().kind(), "list");
        // ... but arrays of another dtype among them are still an error.
        let mut bad = nested.to_vec();
        bad.push(Sample::from_pairs([("b", t(TensorData::F32(vec![3.0])))]));
        let msg = collate(&bad).unwrap_err().to_string();
        assert!(
            msg.contains("row 0 of the batch holds an int64 array")
                && msg.contains("row 3 a float32"),
            "{msg}"
        );
        let nums = [
            Sample::from_pairs([("f", Value::Int(1))]),
            Sample::from_pairs([("f", Value::Float(0.5))]),
        ];
        assert_eq!(collate(&nums).unwrap().get("f").unwrap().kind(), "tensor");
    }

    #[test]
    fn ragged_tensors_become_lists() {
        let a = Value::Tensor(Tensor::new(vec![1], TensorData::I32(vec![1])).unwrap());
        let b = Value::Tensor(Tensor::new(vec![2], TensorData::I32(vec![1, 2])).unwrap());
        let batch = collate(&[
            Sample::from_pairs([("x", a)]),
            Sample::from_pairs([("x", b)]),
        ])
        .unwrap();
        assert!(matches!(batch.get("x"), Some(Value::List(l)) if l.len() == 2));
    }

    #[test]
    fn missing_field_is_an_error() {
        let e = collate(&[
            Sample::from_pairs([("x", Value::Int(1))]),
            Sample::from_pairs([("y", Value::Int(1))]),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("'x'"));
    }

    #[test]
    fn uncollate_checks_lengths() {
        let b = Sample::from_pairs([
            ("a", Value::List(vec![Value::Int(1)])),
            ("b", Value::List(vec![Value::Int(1), Value::Int(2)])),
        ]);
        assert!(uncollate(b).is_err());
    }
}
