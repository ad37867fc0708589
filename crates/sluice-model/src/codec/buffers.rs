//! Where large buffers go. The codec writes every `bytes` value and tensor buffer through a
//! [`BufferSink`] and reads it back through a [`BufferSource`]; the plain ones ([`Inline`])
//! keep buffers in the bytes themselves. A transport plugs in its own (shared-memory
//! segments, buffers handed beside a frame) without the codec knowing about it.
//!
//! A buffer is written as a tag byte then the tag's body: tag [`INLINE`] is the length and
//! the bytes; other tags belong to the sink that wrote them and the source that reads them.

use std::sync::Arc;

use super::bytes::{In, Out};
use super::error::CodecError;
use super::tensor::tensor_bytes;
use crate::value::Tensor;

/// Tag of a buffer held inline: its length then its bytes.
pub const INLINE: u8 = 0;

/// A large buffer about to be written: a `bytes` value or a tensor's elements. The owner is
/// given (not just the bytes) so a sink can keep the buffer alive without copying it.
#[derive(Debug, Clone, Copy)]
pub enum Buffer<'a> {
    Bytes(&'a Arc<[u8]>),
    Tensor(&'a Tensor),
}

impl<'a> Buffer<'a> {
    /// The bytes the format carries (little-endian elements for a tensor).
    pub fn bytes(self) -> &'a [u8] {
        match self {
            Buffer::Bytes(b) => b,
            Buffer::Tensor(t) => tensor_bytes(t.data()),
        }
    }
    /// Size in bytes.
    pub fn len(self) -> usize {
        match self {
            Buffer::Bytes(b) => b.len(),
            Buffer::Tensor(t) => t.nbytes(),
        }
    }
    /// Whether the buffer is empty.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// Takes buffers out of line while encoding. `'a` is the lifetime of the values encoded, so
/// a sink may keep borrowed buffers until the encoding is finished.
pub trait BufferSink<'a> {
    /// Stores `buf` elsewhere and writes its tag (not [`INLINE`]) and reference to `out`,
    /// or returns false, writing nothing, to keep it inline.
    fn store(&mut self, buf: Buffer<'a>, out: &mut Out) -> bool;
}

/// Finds the buffers a [`BufferSink`] stored.
pub trait BufferSource {
    /// The bytes of the buffer under `tag` (never [`INLINE`]) whose reference `inp` holds
    /// next. An unknown tag or a reference to nothing is a [`CodecError`].
    fn load(&self, tag: u8, inp: &mut In<'_>) -> Result<&[u8], CodecError>;
}

/// Keeps every buffer inline (the spill and cache format).
#[derive(Debug, Clone, Copy, Default)]
pub struct Inline;

impl BufferSink<'_> for Inline {
    #[inline]
    fn store(&mut self, _: Buffer<'_>, _: &mut Out) -> bool {
        false
    }
}

impl BufferSource for Inline {
    fn load(&self, tag: u8, _: &mut In<'_>) -> Result<&[u8], CodecError> {
        Err(CodecError(format!("bad buffer tag {tag}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::TensorData;

    #[test]
    fn a_buffer_is_its_bytes() {
        let b: Arc<[u8]> = Arc::from(&b"abc"[..]);
        assert_eq!(Buffer::Bytes(&b).bytes(), b"abc");
        let t = Tensor::new(vec![2], TensorData::I16(vec![1, -1])).unwrap();
        let buf = Buffer::Tensor(&t);
        assert_eq!((buf.len(), buf.bytes()), (4, &[1u8, 0, 255, 255][..]));
        assert!(!buf.is_empty());
    }

    #[test]
    fn inline_stores_nothing_and_loads_nothing() {
        let b: Arc<[u8]> = Arc::from(&b"x"[..]);
        let mut out = Out::default();
        assert!(!Inline.store(Buffer::Bytes(&b), &mut out));
        assert!(out.is_empty());
        let err = Inline.load(1, &mut In::new(&[])).unwrap_err();
        assert!(err.to_string().contains("bad buffer tag 1"), "{err}");
    }
}
