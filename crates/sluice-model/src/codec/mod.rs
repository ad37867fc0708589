//! The engine's lossless value codec: every [`Value`] of a [`Sample`] as bytes and back.
//! Caches' disk tier and blocking ops' spill files store samples as records of it, and the
//! worker wire format (`sluice-remote`) wraps samples written by it in its frames.
//!
//! Everything is little-endian with explicit lengths. A sample is its field count (u32)
//! then, per field, its name (tag 0 + string the first time an [`Encoder`] meets it, tag 1 +
//! its number after) and its value: a tag byte (0 null, 1 bool, 2 int, 3 float, 4 str,
//! 5 bytes, 6 tensor, 7 list) then the body. `bytes` values and tensor elements are
//! *buffers*: written through a [`BufferSink`] and read through a [`BufferSource`], so a
//! transport can move big ones out of line (shared memory, buffers beside a frame); the
//! records here keep them [`Inline`]. The format never changes silently: a test decodes bytes
//! captured from an earlier encoder (`testdata/codec`).
//!
//! Decoding checks every length against what is left before allocating, so corrupt bytes
//! give a [`CodecError`], never a panic or a huge allocation.
//!
//! ```
//! use sluice_model::{codec, Sample, Value};
//! let s = Sample::from_pairs([("k", Value::from("a")), ("x", Value::Float(0.5))]);
//! let mut rec = Vec::new();
//! codec::encode_sample(&s, &mut rec);
//! assert_eq!(codec::decode_sample(&rec).unwrap(), s);
//! ```

mod buffers;
mod bytes;
mod decode;
mod encode;
mod error;
mod tensor;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use buffers::{Buffer, BufferSink, BufferSource, Inline, INLINE};
pub use bytes::{In, Out};
pub use decode::{Decoder, MAX_DEPTH};
pub use encode::Encoder;
pub use error::CodecError;
pub use tensor::{dtype_code, tensor_bytes};

use crate::sample::Sample;
#[allow(unused_imports)] // for the doc links
use crate::value::Value;

/// Appends `sample` to `out` as a self-contained record (field names and every buffer
/// inline), read back by [`decode_sample`].
pub fn encode_sample(sample: &Sample, out: &mut Vec<u8>) {
    let mut e = Encoder::new(std::mem::take(out), Inline);
    e.sample(sample);
    *out = e.into_parts().0;
}

/// Decodes a record made by [`encode_sample`] (the whole of `record`).
pub fn decode_sample(record: &[u8]) -> Result<Sample, CodecError> {
    let mut d = Decoder::new(In::new(record), Inline);
    let s = d.sample()?;
    d.input().end()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::testing::{every_value, same_bytes, unhex};
    use super::*;
    use crate::error::Error;

    #[test]
    fn records_round_trip_every_value_and_refuse_corruption() {
        let s = every_value();
        let mut rec = Vec::new();
        encode_sample(&s, &mut rec);
        let back = decode_sample(&rec).unwrap();
        assert_eq!(
            back.names().collect::<Vec<_>>(),
            s.names().collect::<Vec<_>>()
        );
        same_bytes(&back, &s);
        for cut in 0..rec.len() {
            assert!(decode_sample(&rec[..cut]).is_err(), "truncated at {cut}");
        }
        let mut longer = rec.clone();
        longer.push(0);
        assert!(decode_sample(&longer).is_err(), "trailing bytes");
    }

    /// Bytes captured from the encoder before the codec moved here from `sluice-remote`:
    /// caches and spill files written before must still decode, and the encoder must not
    /// drift.
    #[test]
    fn the_format_is_byte_identical_to_the_captured_one() {
        let golden = unhex(include_str!("../../testdata/codec/every_value.sample.hex"));
        let mut rec = Vec::new();
        encode_sample(&every_value(), &mut rec);
        assert_eq!(rec, golden);
        same_bytes(&decode_sample(&golden).unwrap(), &every_value());
    }

    #[test]
    fn records_append_and_errors_name_the_problem() {
        let s = Sample::from_pairs([("a", Value::Int(1))]);
        let mut rec = vec![0xAB];
        encode_sample(&s, &mut rec);
        assert_eq!(rec[0], 0xAB);
        assert_eq!(decode_sample(&rec[1..]).unwrap(), s);
        let err = Error::from(decode_sample(&rec).unwrap_err());
        assert!(err.to_string().contains("corrupt record"), "{err}");
    }
}
