//! The chunk wire format: how a [`Chunk`] (all item fields, every [`sluice_core::Value`])
//! and a stage's reply (its output chunk, or the typed [`Error`]) travel between processes.
//!
//! A frame is `MAGIC, kind, segment name, body`, little-endian, with explicit lengths; the
//! samples in the body are written by the core codec ([`sluice_core::codec`]). Buffers of at
//! least [`ShmConfig::threshold`] bytes (tensors, `bytes` fields) go into one shared-memory
//! segment per frame and the body holds their offset; everything else is inline. A *split*
//! reply ([`encode_reply_split`]) instead hands big buffers back beside the frame as owned
//! [`OutOfBand`] values, so a Ray actor can return them as numpy arrays that the object store
//! carries out of band (pickle protocol 5) with no copy into the frame.
//! Decoding checks every length against what is left before allocating, so a corrupt frame
//! gives a [`WireError`], never a panic or a huge allocation.
//!
//! ```
//! use sluice_core::{Cursor, Item, Sample, Value};
//! use sluice_remote::wire;
//! let mut s = Sample::new();
//! s.set("id", Value::Int(7));
//! let item = Item { epoch: 0, index: 7, sub: 0, source_index: 7, rows: 1,
//!     cursor: Cursor { epoch: 0, pos: 7, ord: 0 }, sample: s, ..Default::default() };
//! let frame = wire::encode_chunk(&[item], None).unwrap();
//! let back = wire::decode_chunk(&frame).unwrap();
//! assert_eq!(back[0].sample.get("id"), Some(&Value::Int(7)));
//! ```

mod error;
#[cfg(test)]
mod fixtures;
mod frame;
mod split;
mod wire_error;

use std::path::Path;

use sluice_core::exec::Chunk;
use sluice_core::Error;

pub use error::{ExternalCodec, RemoteError};
pub use frame::MAGIC;
pub use split::{OutOfBand, SplitFrame, SPLIT_THRESHOLD};
pub use wire_error::WireError;

#[allow(unused_imports)] // for the doc links
use crate::shm::ShmConfig;
use crate::shm::{default_dir, ShmWriter};
use frame::{Dec, Enc, FrameSink};
use split::SplitSink;
use wire_error::corrupt;

const KIND_CHUNK: u8 = 1;
const KIND_OK: u8 = 2;
const KIND_ERR: u8 = 3;

/// A stage's answer to one chunk.
pub type Reply = sluice_core::Result<Output>;

/// What a stage made of one chunk.
#[derive(Debug, Default)]
pub struct Output {
    pub chunk: Chunk,
    /// Samples skipped under `on_error="skip"` (added to the main process's stats).
    pub skipped: u64,
}

/// Encodes `chunk` as a request frame; large buffers go through `shm` when given.
pub fn encode_chunk(
    chunk: &[sluice_core::Item],
    shm: Option<&ShmWriter>,
) -> Result<Vec<u8>, WireError> {
    let mut e = Enc::new(FrameSink::shm(shm));
    e.chunk(chunk);
    Ok(e.finish(KIND_CHUNK)?.0)
}

/// Items in a request frame, read from its header (the shared service charges a chunk by
/// them before running it).
pub fn chunk_len(frame: &[u8]) -> Result<usize, WireError> {
    if frame.get(4) != Some(&KIND_CHUNK) {
        return corrupt("not a chunk frame");
    }
    Dec::chunk_len(frame)
}

/// An error reply with no buffers.
fn error_frame(err: &Error, codec: Option<&dyn ExternalCodec>) -> Result<Vec<u8>, WireError> {
    let mut e = Enc::new(FrameSink::Inline);
    e.error(err, codec);
    Ok(e.finish(KIND_ERR)?.0)
}

/// Encodes a stage's reply. An output that cannot be encoded (no space for the segment)
/// becomes an error reply, so the receiver always gets an answer.
pub fn encode_reply(
    reply: &Reply,
    shm: Option<&ShmWriter>,
    codec: Option<&dyn ExternalCodec>,
) -> Vec<u8> {
    let encoded = match reply {
        Ok(out) => {
            let mut e = Enc::new(FrameSink::shm(shm));
            e.out().u64(out.skipped);
            e.chunk(&out.chunk);
            e.finish(KIND_OK).map(|(frame, _)| frame)
        }
        Err(err) => error_frame(err, codec),
    };
    encoded.unwrap_or_else(|w| error_frame(&Error::from(w), None).unwrap_or_default())
}

/// Encodes a stage's reply as a [`SplitFrame`]: buffers of at least `threshold` bytes are
/// not copied into the frame but returned beside it (the caller drops `reply` afterwards, so
/// the buffers are then owned by the split frame alone). Errors travel in the frame.
///
/// ```
/// use sluice_core::{Item, Sample, Tensor, TensorData, Value};
/// use sluice_remote::wire::{self, Output, OutOfBand};
/// let t = Tensor::new(vec![256, 256], TensorData::U8(vec![7; 65536])).unwrap();
/// let item = Item { sample: Sample::from_pairs([("img", Value::Tensor(t))]), ..Default::default() };
/// let reply = Ok(Output { chunk: vec![item], skipped: 0 });
/// let split = wire::encode_reply_split(&reply, 1024, None);
/// assert!(split.frame.len() < 200 && split.buffers.len() == 1);
/// let OutOfBand::Tensor(t) = &split.buffers[0] else { unreachable!() };
/// let TensorData::U8(bytes) = t.data() else { unreachable!() };
/// let back = wire::decode_reply_split(&split.frame, &[bytes], None).unwrap().unwrap();
/// assert_eq!(back.chunk[0].sample, reply.unwrap().chunk[0].sample);
/// ```
pub fn encode_reply_split(
    reply: &Reply,
    threshold: usize,
    codec: Option<&dyn ExternalCodec>,
) -> SplitFrame {
    let Ok(out) = reply else {
        return SplitFrame {
            frame: encode_reply(reply, None, codec),
            buffers: vec![],
        };
    };
    let mut e = Enc::new(FrameSink::Split(SplitSink::new(threshold)));
    e.out().u64(out.skipped);
    e.chunk(&out.chunk);
    match e.finish(KIND_OK) {
        Ok((frame, buffers)) => SplitFrame { frame, buffers },
        Err(w) => SplitFrame {
            frame: encode_reply(&Err(Error::from(w)), None, codec),
            buffers: vec![],
        },
    }
}

/// Decodes a request frame made by [`encode_chunk`].
pub fn decode_chunk(frame: &[u8]) -> Result<Chunk, WireError> {
    decode_chunk_in(frame, &default_dir())
}

/// [`decode_chunk`] with segments in `dir`.
pub fn decode_chunk_in(frame: &[u8], dir: &Path) -> Result<Chunk, WireError> {
    let (mut d, kind) = Dec::open(frame, dir, &[])?;
    if kind != KIND_CHUNK {
        return corrupt(format!("expected a chunk frame, got kind {kind}"));
    }
    let chunk = d.chunk()?;
    d.end()?;
    Ok(chunk)
}

/// Decodes a reply frame made by [`encode_reply`]: the outer `Result` is the frame's
/// validity, the inner one the stage's outcome.
pub fn decode_reply(frame: &[u8], codec: Option<&dyn ExternalCodec>) -> Result<Reply, WireError> {
    decode_reply_split(frame, &[], codec)
}

/// Decodes a reply made by [`encode_reply_split`], given its buffers in order (each copied
/// once, into the tensor it belongs to). A plain [`encode_reply`] frame decodes too.
pub fn decode_reply_split(
    frame: &[u8],
    buffers: &[&[u8]],
    codec: Option<&dyn ExternalCodec>,
) -> Result<Reply, WireError> {
    let (mut d, kind) = Dec::open(frame, &default_dir(), buffers)?;
    let reply = match kind {
        KIND_OK => {
            let skipped = d.u64()?;
            Ok(Output {
                chunk: d.chunk()?,
                skipped,
            })
        }
        KIND_ERR => Err(d.error(codec)?),
        k => return corrupt(format!("expected a reply frame, got kind {k}")),
    };
    d.end()?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;
    use sluice_core::codec::tensor_bytes;
    use sluice_core::codec::testing::{every_value, unhex};
    use sluice_core::{Sample, Tensor, TensorData, Value};

    use super::*;
    use crate::ShmConfig;
    use fixtures::{in_sample_error, item, same};

    /// Frames captured from the encoder before the codec moved to `sluice-core`: frames in
    /// flight across an upgrade must still decode, and the encoder must not drift.
    #[test]
    fn the_format_is_byte_identical_to_the_captured_one() {
        let chunk: Chunk = (0..2).map(|i| item(i, every_value())).collect();
        let golden = unhex(include_str!("../../testdata/wire/chunk.hex"));
        assert_eq!(encode_chunk(&chunk, None).unwrap(), golden);
        same(&decode_chunk(&golden).unwrap(), &chunk);

        let reply: Reply = Ok(Output {
            chunk: chunk.clone(),
            skipped: 3,
        });
        let split = encode_reply_split(&reply, 4, None);
        let golden = unhex(include_str!("../../testdata/wire/split_reply.hex"));
        assert_eq!(split.frame, golden);
        let bufs: Vec<&[u8]> = split.buffers.iter().map(OutOfBand::bytes).collect();
        let back = decode_reply_split(&golden, &bufs, None).unwrap().unwrap();
        assert_eq!(back.skipped, 3);
        same(&back.chunk, &chunk);

        // Removed when the test ends (a named folder per run was left in the temp dir).
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let w = ShmWriter::new(ShmConfig {
            dir: dir.clone(),
            prefix: "g-".into(),
            threshold: 4,
        });
        let golden = unhex(include_str!("../../testdata/wire/shm_chunk.hex"));
        assert_eq!(encode_chunk(&chunk, Some(&w)).unwrap(), golden);
        let segment = unhex(include_str!("../../testdata/wire/shm_segment.hex"));
        assert_eq!(std::fs::read(dir.join("g-0")).unwrap(), segment);
        same(&decode_chunk_in(&golden, &dir).unwrap(), &chunk);

        let err = in_sample_error();
        let golden = unhex(include_str!("../../testdata/wire/error_reply.hex"));
        assert_eq!(encode_reply(&Err(err.clone()), None, None), golden);
        let back = decode_reply(&golden, None).unwrap().unwrap_err();
        assert_eq!(back.to_string(), err.to_string());
    }

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
    fn empty_chunk_round_trips() {
        let frame = encode_chunk(&[], None).unwrap();
        assert!(decode_chunk(&frame).unwrap().is_empty());
        let reply = encode_reply(&Ok(Output::default()), None, None);
        assert!(decode_reply(&reply, None)
            .unwrap()
            .unwrap()
            .chunk
            .is_empty());
    }

    #[test]
    fn big_tensors_go_through_shared_memory_and_are_unlinked() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let cfg = ShmConfig {
            dir: dir.clone(),
            prefix: "t-".into(),
            threshold: 1024,
        };
        let w = ShmWriter::new(cfg);
        let big: Vec<f32> = (0..1_000_000).map(|i| i as f32).collect();
        let s = Sample::from_pairs([
            (
                "x",
                Value::Tensor(Tensor::new(vec![1000, 1000], TensorData::F32(big)).unwrap()),
            ),
            ("small", Value::Bytes(Arc::from(&b"abc"[..]))),
            ("blob", Value::Bytes(Arc::from(vec![7u8; 5000]))),
        ]);
        let chunk = vec![item(0, s.clone()), item(1, s)];
        let frame = encode_chunk(&chunk, Some(&w)).unwrap();
        assert!(frame.len() < 1000, "big buffers must not be inline");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let back = decode_chunk_in(&frame, &dir).unwrap();
        assert_eq!(back[1].sample, chunk[1].sample);
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "segment unlinked"
        );
        // The segment is gone: decoding the same frame again is an error, not a panic.
        assert!(matches!(
            decode_chunk_in(&frame, &dir),
            Err(WireError::Shm { .. })
        ));
    }

    #[test]
    fn a_chunk_frame_tells_its_length_from_the_header() {
        let chunk: Chunk = (0..3).map(|i| item(i, every_value())).collect();
        let frame = encode_chunk(&chunk, None).unwrap();
        assert_eq!(chunk_len(&frame).unwrap(), 3);
        assert_eq!(chunk_len(&encode_chunk(&[], None).unwrap()).unwrap(), 0);
        assert!(chunk_len(b"nope").is_err());
        assert!(chunk_len(&frame[..6]).is_err());
        let reply = encode_reply(&Ok(Output { chunk, skipped: 0 }), None, None);
        assert!(chunk_len(&reply).is_err(), "a reply is not a chunk");
    }

    #[test]
    fn corrupt_frames_are_errors() {
        let chunk: Chunk = (0..2).map(|i| item(i, every_value())).collect();
        let frame = encode_chunk(&chunk, None).unwrap();
        for cut in 0..frame.len() {
            assert!(decode_chunk(&frame[..cut]).is_err(), "truncated at {cut}");
        }
        let mut trailing = frame.clone();
        trailing.push(0);
        assert!(decode_chunk(&trailing).is_err());
        assert!(
            decode_reply(&frame, None).is_err(),
            "a chunk is not a reply"
        );
        // A segment name that escapes the directory is refused before any file access.
        let mut evil = MAGIC.to_vec();
        evil.push(KIND_CHUNK);
        evil.extend_from_slice(&9u64.to_le_bytes());
        evil.extend_from_slice(b"../passwd");
        assert!(matches!(decode_chunk(&evil), Err(WireError::Corrupt(_))));
    }

    proptest! {
        #[test]
        fn flipped_bytes_never_panic(pos in 0usize..4000, byte in any::<u8>()) {
            let chunk: Chunk = (0..2).map(|i| item(i, every_value())).collect();
            let mut frame = encode_chunk(&chunk, None).unwrap();
            let p = pos % frame.len();
            frame[p] = byte;
            let _ = decode_chunk(&frame);
            let _ = decode_reply(&frame, None);
        }

        #[test]
        fn random_samples_round_trip(
            ints in proptest::collection::vec(any::<i64>(), 0..20),
            text in ".{0,40}",
            floats in proptest::collection::vec(any::<f32>(), 0..50),
        ) {
            let n = floats.len();
            let s = Sample::from_pairs([
                ("ints", Value::List(ints.iter().map(|&i| Value::Int(i)).collect())),
                ("text", Value::from(text.as_str())),
                ("f", Value::Tensor(Tensor::new(vec![n], TensorData::F32(floats)).unwrap())),
            ]);
            let chunk = vec![item(3, s)];
            let back = decode_chunk(&encode_chunk(&chunk, None).unwrap()).unwrap();
            same(&chunk, &back);
        }
    }
}
