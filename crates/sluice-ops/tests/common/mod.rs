//! What the image-op tests share: building ops from JSON specs, applying them to one sample,
//! and the committed fixture photos.

#![allow(dead_code)] // each test file uses its own part

use std::path::PathBuf;

use sluice_core::{Emit, OpContext, OpRef, Sample, TensorData, Value};
use sluice_ops::OpSpec;

pub const DECODE: &str = r#"{"op":"image.decode"}"#;

pub fn build(spec: &str) -> OpRef {
    let spec: OpSpec = serde_json::from_str(spec).expect("spec JSON");
    spec.build().expect("valid spec")
}

/// Sample `index`'s context for op `op_id` (seed 11, epoch 0).
pub fn cx(index: u64, op_id: u64) -> OpContext {
    OpContext {
        seed: 11,
        epoch: 0,
        index,
        sub: 0,
        op_id,
    }
}

/// The one sample `op` makes of `s`, or its error.
pub fn try_apply(op: &OpRef, s: Sample, cx: &OpContext) -> sluice_core::Result<Sample> {
    match op.apply(s, cx)? {
        Emit::One(s) => Ok(s),
        other => panic!("{other:?}"),
    }
}

pub fn apply(op: &OpRef, s: Sample, cx: &OpContext) -> Sample {
    try_apply(op, s, cx).expect("op")
}

/// `{"bytes": b}`.
pub fn bytes_sample(b: &[u8]) -> Sample {
    Sample::from_pairs([("bytes", Value::Bytes(b.to_vec().into()))])
}

/// The shape and bytes of the uint8 `image` field.
pub fn pixels(s: &Sample) -> (Vec<usize>, Vec<u8>) {
    match s.get("image") {
        Some(Value::Tensor(t)) => match t.data() {
            TensorData::U8(d) => (t.shape().to_vec(), d.to_vec()),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// The committed fixture photos (320–481 px JPEGs: RGB and grayscale), with their paths.
pub fn photos() -> Vec<(String, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/fixtures/images");
    let mut out = Vec::new();
    for class in std::fs::read_dir(&root).expect("fixture photos") {
        for f in std::fs::read_dir(class.unwrap().path()).unwrap() {
            let p = f.unwrap().path();
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    assert!(out.len() >= 8);
    out
}

/// A file under this crate's folder (`../sluice-imgproc/tests/fixtures/...`).
pub fn fixture(rel: &str) -> Vec<u8> {
    std::fs::read(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}
