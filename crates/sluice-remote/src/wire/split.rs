//! Split replies: a reply's big buffers handed back beside its frame as owned [`OutOfBand`]
//! values, so a Ray actor can return them as numpy arrays that the object store carries out
//! of band (pickle protocol 5) with no copy into the frame.

use std::sync::Arc;

use sluice_core::codec::{tensor_bytes, Buffer, BufferSink, Out};
use sluice_core::Tensor;

/// Buffer tag of a buffer handed beside the frame: its index (u32) follows.
pub const OOB_TAG: u8 = 2;

/// Buffers of at least this many bytes leave a split reply out of band: below it, copying
/// into the frame is cheaper than an object per buffer (and Ray inlines small objects).
pub const SPLIT_THRESHOLD: usize = 32 * 1024;

/// A big buffer of a split reply, owned: the tensor (whose buffer the reply shared, so once
/// the reply is dropped [`Tensor::into_parts`] takes it without a copy) or a `bytes` value.
#[derive(Debug, Clone)]
pub enum OutOfBand {
    Tensor(Tensor),
    Bytes(Arc<[u8]>),
}

impl OutOfBand {
    /// Size of the buffer in bytes.
    pub fn len(&self) -> usize {
        match self {
            OutOfBand::Tensor(t) => t.nbytes(),
            OutOfBand::Bytes(b) => b.len(),
        }
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The buffer's bytes (little-endian elements for a tensor), as the frame expects them.
    pub fn bytes(&self) -> &[u8] {
        match self {
            OutOfBand::Tensor(t) => tensor_bytes(t.data()),
            OutOfBand::Bytes(b) => b,
        }
    }
}

/// A reply frame whose big buffers travel beside it, in order of their index in the frame.
#[derive(Debug, Default, Clone)]
pub struct SplitFrame {
    pub frame: Vec<u8>,
    pub buffers: Vec<OutOfBand>,
}

/// Takes buffers of at least `threshold` bytes out of the frame, sharing their owners.
#[derive(Debug)]
pub(crate) struct SplitSink {
    pub(crate) buffers: Vec<OutOfBand>,
    threshold: usize,
}

impl SplitSink {
    pub(crate) fn new(threshold: usize) -> Self {
        SplitSink {
            buffers: Vec::new(),
            threshold: threshold.max(1),
        }
    }
}

impl BufferSink<'_> for SplitSink {
    fn store(&mut self, buf: Buffer<'_>, out: &mut Out) -> bool {
        if buf.len() < self.threshold {
            return false;
        }
        let index = self.buffers.len() as u32;
        self.buffers.push(match buf {
            Buffer::Bytes(b) => OutOfBand::Bytes(b.clone()),
            Buffer::Tensor(t) => OutOfBand::Tensor(t.clone()),
        });
        out.u8(OOB_TAG);
        out.u32(index);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sink_numbers_buffers_in_order_and_keeps_small_ones_inline() {
        let bytes = |b: &[u8]| -> Arc<[u8]> { Arc::from(b) };
        let (a, b, small) = (bytes(&[1u8; 4]), bytes(&[2u8; 4]), bytes(&[3u8]));
        let mut sink = SplitSink::new(2);
        let mut out = Out::default();
        assert!(sink.store(Buffer::Bytes(&a), &mut out));
        assert!(!sink.store(Buffer::Bytes(&small), &mut out));
        assert!(sink.store(Buffer::Bytes(&b), &mut out));
        assert_eq!(out.into_vec(), [2, 0, 0, 0, 0, 2, 1, 0, 0, 0]);
        assert_eq!(sink.buffers.len(), 2);
        assert_eq!(sink.buffers[1].bytes().as_ptr(), b.as_ptr(), "shared");
    }
}
