//! Test helpers for crates whose formats wrap the codec (feature `testing`).

use std::sync::Arc;

use super::buffers::Inline;
use super::encode::Encoder;
use crate::sample::Sample;
use crate::value::{Tensor, TensorData, Value};

/// A sample with a field of every value kind and every tensor dtype (NaN, empty and 0-d
/// tensors, nested lists, non-ASCII text included).
pub fn every_value() -> Sample {
    let t = |d: TensorData, shape: Vec<usize>| Value::Tensor(Tensor::new(shape, d).unwrap());
    Sample::from_pairs([
        ("null", Value::Null),
        ("bool", Value::Bool(true)),
        ("int", Value::Int(-5)),
        ("float", Value::Float(f64::NAN)),
        ("str", Value::from("héllo")),
        ("bytes", Value::Bytes(Arc::from(&b"\x00\xff"[..]))),
        ("b", t(TensorData::Bool(vec![true, false]), vec![2])),
        ("u8", t(TensorData::U8(vec![1, 2, 3, 4]), vec![2, 2])),
        ("i8", t(TensorData::I8(vec![-1]), vec![1])),
        ("u16", t(TensorData::U16(vec![65535]), vec![1])),
        ("i16", t(TensorData::I16(vec![-300, 2]), vec![2, 1])),
        ("u32", t(TensorData::U32(vec![]), vec![0, 3])),
        ("i32", t(TensorData::I32(vec![7]), vec![])),
        ("u64", t(TensorData::U64(vec![u64::MAX]), vec![1])),
        ("i64", t(TensorData::I64(vec![i64::MIN, 0]), vec![2])),
        ("f32", t(TensorData::F32(vec![1.5, -0.0]), vec![2])),
        ("f64", t(TensorData::F64(vec![1e300]), vec![1, 1])),
        (
            "list",
            Value::List(vec![
                Value::Int(1),
                Value::List(vec![Value::from("x"), Value::Null]),
            ]),
        ),
    ])
}

/// Asserts two samples encode to the same bytes (`PartialEq` says NaN != NaN).
pub fn same_bytes(a: &Sample, b: &Sample) {
    let bytes = |s: &Sample| {
        let mut e = Encoder::new(Vec::new(), Inline);
        e.sample(s);
        e.into_parts().0
    };
    assert_eq!(bytes(a), bytes(b));
}

/// The bytes a hex string (surrounding whitespace ignored) spells.
pub fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digits"))
        .collect()
}
