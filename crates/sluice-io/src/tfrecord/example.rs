//! `tf.train.Example` (tensorflow/core/example/{example,feature}.proto) as prost messages,
//! written by hand so the build needs no `protoc`, and their conversion to sample values.

use std::collections::BTreeMap;

use sluice_core::{Tensor, TensorData, Value};

/// `message BytesList { repeated bytes value = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct BytesList {
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub value: Vec<Vec<u8>>,
}

/// `message FloatList { repeated float value = 1 [packed = true]; }` (prost reads packed and
/// unpacked encodings alike).
#[derive(Clone, PartialEq, prost::Message)]
pub struct FloatList {
    #[prost(float, repeated, tag = "1")]
    pub value: Vec<f32>,
}

/// `message Int64List { repeated int64 value = 1 [packed = true]; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    pub value: Vec<i64>,
}

/// `message Feature { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
/// Int64List int64_list = 3; } }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Feature {
    #[prost(oneof = "Kind", tags = "1, 2, 3")]
    pub kind: Option<Kind>,
}

/// `Feature.kind`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Kind {
    #[prost(message, tag = "1")]
    BytesList(BytesList),
    #[prost(message, tag = "2")]
    FloatList(FloatList),
    #[prost(message, tag = "3")]
    Int64List(Int64List),
}

/// `message Features { map<string, Feature> feature = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Features {
    #[prost(btree_map = "string, message", tag = "1")]
    pub feature: BTreeMap<String, Feature>,
}

/// `message Example { Features features = 1; }`
#[derive(Clone, PartialEq, prost::Message)]
pub struct Example {
    #[prost(message, optional, tag = "1")]
    pub features: Option<Features>,
}

/// A feature's value: `bytes_list` → bytes (one value) or a list of bytes; `int64_list` →
/// an int (one value) or a 1-d int64 tensor; `float_list` → a 1-d float32 tensor always (a
/// scalar would lose float32); a feature with no kind set → `None`.
pub fn feature_value(feature: Feature) -> Value {
    match feature.kind {
        None => Value::Null,
        Some(Kind::BytesList(b)) => {
            let mut v = b.value;
            if v.len() == 1 {
                Value::Bytes(v.pop().unwrap_or_default().into())
            } else {
                Value::List(v.into_iter().map(|b| Value::Bytes(b.into())).collect())
            }
        }
        Some(Kind::Int64List(i)) if i.value.len() == 1 => Value::Int(i.value[0]),
        Some(Kind::Int64List(i)) => tensor(i.value.len(), TensorData::I64(i.value)),
        Some(Kind::FloatList(f)) => tensor(f.value.len(), TensorData::F32(f.value)),
    }
}

fn tensor(n: usize, data: TensorData) -> Value {
    // A 1-d shape always matches its data's length.
    Tensor::new(vec![n], data).map_or(Value::Null, Value::Tensor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn round_trips_and_converts() {
        let mut feature = BTreeMap::new();
        let f = |k| Feature { kind: Some(k) };
        feature.insert(
            "img".into(),
            f(Kind::BytesList(BytesList {
                value: vec![b"\x89PNG".to_vec()],
            })),
        );
        feature.insert(
            "tags".into(),
            f(Kind::BytesList(BytesList {
                value: vec![b"a".to_vec(), b"b".to_vec()],
            })),
        );
        feature.insert(
            "label".into(),
            f(Kind::Int64List(Int64List { value: vec![-7] })),
        );
        feature.insert(
            "ids".into(),
            f(Kind::Int64List(Int64List {
                value: vec![1, 2, 3],
            })),
        );
        feature.insert(
            "emb".into(),
            f(Kind::FloatList(FloatList {
                value: vec![0.5, -1.25],
            })),
        );
        let ex = Example {
            features: Some(Features { feature }),
        };
        let back = Example::decode(&ex.encode_to_vec()[..]).unwrap();
        assert_eq!(back, ex);
        let mut values = back.features.unwrap().feature.into_iter();
        let mut next = || feature_value(values.next().unwrap().1);
        assert!(matches!(next(), Value::Tensor(t) if t.shape() == [2])); // emb
        assert!(matches!(next(), Value::Tensor(t) if t.shape() == [3])); // ids
        assert_eq!(next(), Value::Bytes(b"\x89PNG"[..].into())); // img
        assert_eq!(next(), Value::Int(-7)); // label
        assert!(matches!(next(), Value::List(l) if l.len() == 2)); // tags
        assert_eq!(feature_value(Feature { kind: None }), Value::Null);
    }
}
