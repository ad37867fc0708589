//! Arrays as `.npy` files (numpy's format, version 1.0): what `write_shards` stores for an
//! array field of a WebDataset sample, so `numpy.load` — and WebDataset's own decoders —
//! read it back with its dtype and shape.

use sluice_core::{Tensor, TensorData};

/// The `.npy` bytes of `t` (little-endian, C order).
///
/// ```
/// use sluice_core::{Tensor, TensorData};
/// let t = Tensor::new(vec![2, 3], TensorData::U8(vec![1, 2, 3, 4, 5, 6])).unwrap();
/// let npy = sluice_io::npy::encode(&t);
/// assert_eq!(&npy[..6], b"\x93NUMPY");
/// assert_eq!(npy.len() % 64, 6 % 64); // a 64-byte aligned header, then the 6 bytes
/// ```
pub fn encode(t: &Tensor) -> Vec<u8> {
    let descr = match t.data() {
        TensorData::Bool(_) => "|b1",
        TensorData::U8(_) => "|u1",
        TensorData::I8(_) => "|i1",
        TensorData::U16(_) => "<u2",
        TensorData::I16(_) => "<i2",
        TensorData::U32(_) => "<u4",
        TensorData::I32(_) => "<i4",
        TensorData::U64(_) => "<u8",
        TensorData::I64(_) => "<i8",
        TensorData::F32(_) => "<f4",
        TensorData::F64(_) => "<f8",
    };
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    let shape = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    // Magic (6) + version (2) + length (2) + header + newline: a multiple of 64.
    let pad = (64 - (10 + header.len() + 1) % 64) % 64;
    header.extend(std::iter::repeat_n(' ', pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + t.nbytes());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match t.data() {
        TensorData::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        TensorData::U8(v) => out.extend_from_slice(v),
        TensorData::I8(v) => le!(v),
        TensorData::U16(v) => le!(v),
        TensorData::I16(v) => le!(v),
        TensorData::U32(v) => le!(v),
        TensorData::I32(v) => le!(v),
        TensorData::U64(v) => le!(v),
        TensorData::I64(v) => le!(v),
        TensorData::F32(v) => le!(v),
        TensorData::F64(v) => le!(v),
    }
    out
}
