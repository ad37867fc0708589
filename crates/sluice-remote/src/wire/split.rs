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
#[derive(Debug, Default)]
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
    use sluice_core::codec::testing::every_value;
    use sluice_core::exec::Chunk;
    use sluice_core::{Error, Value};

    use super::*;
    use crate::wire::fixtures::{item, same};
    use crate::wire::{decode_reply, decode_reply_split, encode_reply_split, Output, Reply};

    #[test]
    fn split_replies_carry_big_buffers_beside_the_frame_without_copying_them() {
        let chunk: Chunk = (0..3).map(|i| item(i, every_value())).collect();
        let reply: Reply = Ok(Output { chunk, skipped: 2 });
        // Threshold 1: every non-empty tensor and bytes value leaves the frame.
        let split = encode_reply_split(&reply, 1, None);
        let Ok(out) = &reply else { unreachable!() };
        let own = out.chunk[0].sample.get("f64").unwrap();
        let (Value::Tensor(t), true) = (own, !split.buffers.is_empty()) else {
            panic!("no buffers");
        };
        // The split frame shares the reply's buffers (no copy on the sending side).
        let shared = split
            .buffers
            .iter()
            .any(|b| b.bytes().as_ptr() == tensor_bytes(t.data()).as_ptr());
        assert!(shared);
        let bufs: Vec<&[u8]> = split.buffers.iter().map(OutOfBand::bytes).collect();
        let back = decode_reply_split(&split.frame, &bufs, None)
            .unwrap()
            .unwrap();
        assert_eq!(back.skipped, 2);
        same(&back.chunk, &out.chunk);
        // Small buffers stay inline under the default threshold.
        let inline = encode_reply_split(&reply, SPLIT_THRESHOLD, None);
        assert!(inline.buffers.is_empty());
        let back = decode_reply(&inline.frame, None).unwrap().unwrap();
        same(&back.chunk, &out.chunk);
        // A frame that names a buffer it was not given is corrupt, not a panic.
        let err = decode_reply_split(&split.frame, &bufs[..1], None).unwrap_err();
        assert!(err.to_string().contains("out-of-band"), "{err}");
        // Errors travel in the frame.
        let e: Reply = Err(Error::Data("bad".into()));
        let split = encode_reply_split(&e, 1, None);
        assert!(split.buffers.is_empty());
        assert!(decode_reply_split(&split.frame, &[], None)
            .unwrap()
            .is_err());
    }

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
