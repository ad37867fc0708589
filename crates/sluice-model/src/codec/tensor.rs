//! Tensor buffers as bytes: the dtype codes of the format and the little-endian element
//! bytes of a [`TensorData`], borrowed on the way out and copied once on the way in.

use super::error::CodecError;
use crate::value::{DType, TensorData};

#[cfg(not(target_endian = "little"))]
compile_error!("the sluice codec sends tensor buffers as little-endian bytes");

/// The format's code for `d`.
pub fn dtype_code(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::U8 => 1,
        DType::I8 => 2,
        DType::U16 => 3,
        DType::I16 => 4,
        DType::U32 => 5,
        DType::I32 => 6,
        DType::U64 => 7,
        DType::I64 => 8,
        DType::F32 => 9,
        DType::F64 => 10,
    }
}

/// Element size of dtype `code`.
fn code_size(code: u8) -> Result<usize, CodecError> {
    Ok(match code {
        0..=2 => 1,
        3 | 4 => 2,
        5 | 6 | 9 => 4,
        7 | 8 | 10 => 8,
        c => return Err(CodecError(format!("bad dtype code {c}"))),
    })
}

/// Plain numeric element types: every bit pattern is a valid value, no padding.
trait Plain: Copy {}
impl Plain for u8 {}
impl Plain for i8 {}
impl Plain for u16 {}
impl Plain for i16 {}
impl Plain for u32 {}
impl Plain for i32 {}
impl Plain for u64 {}
impl Plain for i64 {}
impl Plain for f32 {}
impl Plain for f64 {}

fn plain_bytes<T: Plain>(v: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` has no padding, so its memory is `size_of_val(v)` initialised bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

fn plain_vec<T: Plain>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let mut v: Vec<T> = Vec::with_capacity(n);
    // SAFETY: the capacity is n elements = bytes.len() bytes (the caller checked divisibility);
    // any bit pattern is a valid `T: Plain`, so after the copy all n elements are initialised.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast::<u8>(), bytes.len());
        v.set_len(n);
    }
    v
}

/// The buffer of `d` as the bytes the format carries (no copy).
pub fn tensor_bytes(d: &TensorData) -> &[u8] {
    match d {
        // SAFETY: `bool` is one byte holding 0 or 1, so its buffer reads as `u8`s.
        TensorData::Bool(v) => unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), v.len()) },
        TensorData::U8(v) => plain_bytes(v),
        TensorData::I8(v) => plain_bytes(v),
        TensorData::U16(v) => plain_bytes(v),
        TensorData::I16(v) => plain_bytes(v),
        TensorData::U32(v) => plain_bytes(v),
        TensorData::I32(v) => plain_bytes(v),
        TensorData::U64(v) => plain_bytes(v),
        TensorData::I64(v) => plain_bytes(v),
        TensorData::F32(v) => plain_bytes(v),
        TensorData::F64(v) => plain_bytes(v),
    }
}

/// The `n` elements of dtype `code` that `b` holds (copied out); `shape` names the tensor in
/// errors.
pub(super) fn tensor_data(
    code: u8,
    n: usize,
    shape: &[usize],
    b: &[u8],
) -> Result<TensorData, CodecError> {
    let size = code_size(code)?;
    if n.checked_mul(size) != Some(b.len()) {
        return Err(CodecError(format!(
            "tensor shape {shape:?} needs {n} elements, buffer has {} bytes",
            b.len()
        )));
    }
    Ok(match code {
        0 => {
            if b.iter().any(|&x| x > 1) {
                return Err(CodecError(
                    "bool tensor holds a byte other than 0 or 1".into(),
                ));
            }
            TensorData::Bool(b.iter().map(|&x| x == 1).collect())
        }
        1 => TensorData::U8(b.to_vec()),
        2 => TensorData::I8(plain_vec(b)),
        3 => TensorData::U16(plain_vec(b)),
        4 => TensorData::I16(plain_vec(b)),
        5 => TensorData::U32(plain_vec(b)),
        6 => TensorData::I32(plain_vec(b)),
        7 => TensorData::U64(plain_vec(b)),
        8 => TensorData::I64(plain_vec(b)),
        9 => TensorData::F32(plain_vec(b)),
        _ => TensorData::F64(plain_vec(b)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_dtype() -> Vec<TensorData> {
        vec![
            TensorData::Bool(vec![true, false]),
            TensorData::U8(vec![1, 255]),
            TensorData::I8(vec![-1]),
            TensorData::U16(vec![0x0102]),
            TensorData::I16(vec![-2]),
            TensorData::U32(vec![0x0102_0304]),
            TensorData::I32(vec![-3]),
            TensorData::U64(vec![u64::MAX]),
            TensorData::I64(vec![i64::MIN]),
            TensorData::F32(vec![1.5]),
            TensorData::F64(vec![-0.25]),
        ]
    }

    #[test]
    fn every_dtype_round_trips_through_its_bytes() {
        for (code, d) in every_dtype().into_iter().enumerate() {
            assert_eq!(dtype_code(d.dtype()), code as u8);
            let b = tensor_bytes(&d);
            assert_eq!(b.len(), d.len() * d.dtype().size());
            let back = tensor_data(code as u8, d.len(), &[d.len()], b).unwrap();
            assert_eq!(back, d);
        }
        // Little-endian elements.
        assert_eq!(tensor_bytes(&TensorData::U16(vec![0x0102])), &[2, 1]);
    }

    #[test]
    fn bad_codes_sizes_and_bools_are_errors() {
        assert!(tensor_data(11, 0, &[0], &[]).is_err(), "unknown dtype");
        assert!(tensor_data(6, 2, &[2], &[0; 7]).is_err(), "size mismatch");
        assert!(tensor_data(6, usize::MAX, &[usize::MAX], &[]).is_err());
        assert!(tensor_data(0, 1, &[1], &[2]).is_err(), "bool byte 2");
    }
}
