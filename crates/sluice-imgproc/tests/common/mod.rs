//! Shared helpers for the integration tests: fixture access and error stats.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("tests/fixtures")
        .join(name)
}

pub fn read(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn manifest() -> serde_json::Value {
    serde_json::from_slice(&read("manifest.json")).unwrap()
}

pub fn shape(v: &serde_json::Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

pub fn read_f32(name: &str) -> Vec<f32> {
    read(name)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// (mean |a-b|, max |a-b|, fraction identical)
pub fn diff(a: &[u8], b: &[u8]) -> (f64, u8, f64) {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let mut sum = 0u64;
    let mut max = 0u8;
    let mut same = 0usize;
    for (&x, &y) in a.iter().zip(b) {
        let d = x.abs_diff(y);
        sum += u64::from(d);
        max = max.max(d);
        same += usize::from(d == 0);
    }
    (
        sum as f64 / a.len().max(1) as f64,
        max,
        same as f64 / a.len().max(1) as f64,
    )
}
