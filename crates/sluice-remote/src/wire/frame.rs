//! Frames: the header (magic, kind, segment name) and the items of a chunk around the
//! samples the core codec writes, with big buffers in a shared-memory segment or beside the
//! frame.

use std::path::Path;
use std::sync::Arc;

use sluice_core::codec::{Buffer, BufferSink, BufferSource, CodecError, Decoder, Encoder, In, Out};
use sluice_core::exec::{Chunk, Outer, Restart};
use sluice_core::{Cursor, Error, Item};

use super::error::{decode_error, encode_error, ExternalCodec};
use super::split::{OutOfBand, SplitSink, OOB_TAG};
use super::wire_error::{corrupt, WireError};
use crate::shm::{Segment, ShmSink, ShmWriter, SHM_TAG};

/// First bytes of every frame (format version 1).
pub const MAGIC: [u8; 4] = *b"SLW1";

/// Where an encoding frame puts its big buffers.
pub(crate) enum FrameSink<'a> {
    /// In the frame.
    Inline,
    /// In one shared-memory segment per frame.
    Shm(ShmSink<'a>),
    /// Beside the frame (a split reply).
    Split(SplitSink),
}

impl<'a> FrameSink<'a> {
    /// Shared memory when a writer is given, else inline.
    pub(crate) fn shm(shm: Option<&'a ShmWriter>) -> Self {
        shm.map_or(FrameSink::Inline, |w| FrameSink::Shm(ShmSink::new(w)))
    }
}

impl<'a> BufferSink<'a> for FrameSink<'a> {
    fn store(&mut self, buf: Buffer<'a>, out: &mut Out) -> bool {
        match self {
            FrameSink::Inline => false,
            FrameSink::Shm(s) => s.store(buf, out),
            FrameSink::Split(s) => s.store(buf, out),
        }
    }
}

/// Encodes one frame.
pub(crate) struct Enc<'a> {
    e: Encoder<'a, FrameSink<'a>>,
}

impl<'a> Enc<'a> {
    pub(crate) fn new(sink: FrameSink<'a>) -> Self {
        Enc {
            e: Encoder::new(Vec::with_capacity(256), sink),
        }
    }
    pub(crate) fn out(&mut self) -> &mut Out {
        self.e.out()
    }
    fn item(&mut self, it: &'a Item) {
        let out = self.e.out();
        for v in [it.epoch, it.index, it.sub, it.source_index, it.rows] {
            out.u64(v);
        }
        cursor(out, &it.cursor);
        outer(out, &it.outer);
        out.opt_str(it.path.as_deref());
        self.e.sample(&it.sample);
    }
    /// The chunk's length then its items.
    pub(crate) fn chunk(&mut self, chunk: &'a [Item]) {
        self.e.out().u64(chunk.len() as u64);
        for it in chunk {
            self.item(it);
        }
    }
    /// An error body.
    pub(crate) fn error(&mut self, e: &Error, codec: Option<&dyn ExternalCodec>) {
        encode_error(self.e.out(), e, codec);
    }
    /// The frame (header with the segment's name, if any, then the body) and the buffers a
    /// split sink took.
    pub(crate) fn finish(self, kind: u8) -> Result<(Vec<u8>, Vec<OutOfBand>), WireError> {
        let (body, sink) = self.e.into_parts();
        let (name, buffers) = match sink {
            FrameSink::Inline => (String::new(), Vec::new()),
            FrameSink::Shm(s) => (s.finish()?, Vec::new()),
            FrameSink::Split(s) => (String::new(), s.buffers),
        };
        let mut frame = Vec::with_capacity(body.len() + 13 + name.len());
        frame.extend_from_slice(&MAGIC);
        frame.push(kind);
        frame.extend_from_slice(&(name.len() as u64).to_le_bytes());
        frame.extend_from_slice(name.as_bytes());
        frame.extend_from_slice(&body);
        Ok((frame, buffers))
    }
}

fn cursor(out: &mut Out, c: &Cursor) {
    out.u64(c.epoch);
    out.u64(c.pos);
    out.u64(c.ord);
}

fn outer(out: &mut Out, outer: &Outer) {
    let records = outer.as_deref().unwrap_or_default();
    out.u64(records.len() as u64);
    for r in records {
        out.u64(r.slot as u64);
        cursor(out, &r.input);
        out.u64(r.input_index);
        out.u64(r.counter);
    }
}

/// Where a decoding frame finds its big buffers: its segment and the buffers given beside
/// it, by index.
pub(crate) struct FrameBuffers<'a> {
    seg: Option<Segment>,
    oob: &'a [&'a [u8]],
}

impl BufferSource for FrameBuffers<'_> {
    fn load(&self, tag: u8, inp: &mut In<'_>) -> Result<&[u8], CodecError> {
        let bad = |m: String| Err(CodecError(m));
        match tag {
            SHM_TAG => {
                let (off, len) = (inp.u64()?, inp.u64()?);
                let Some(seg) = &self.seg else {
                    return bad("buffer in shared memory but the frame names no segment".into());
                };
                let bytes = seg.bytes();
                match off.checked_add(len).filter(|&e| e <= bytes.len() as u64) {
                    Some(end) => Ok(&bytes[off as usize..end as usize]),
                    None => bad(format!(
                        "buffer [{off}, +{len}) outside the segment of {} bytes",
                        bytes.len()
                    )),
                }
            }
            OOB_TAG => {
                let i = inp.u32()? as usize;
                match self.oob.get(i) {
                    Some(b) => Ok(b),
                    None => bad(format!(
                        "out-of-band buffer {i} of {} received",
                        self.oob.len()
                    )),
                }
            }
            t => bad(format!("bad buffer tag {t}")),
        }
    }
}

/// Decodes one frame.
pub(crate) struct Dec<'a> {
    d: Decoder<'a, FrameBuffers<'a>>,
}

impl<'a> Dec<'a> {
    /// Checks the header and maps the frame's segment (unlinking it); `oob` are the buffers
    /// given beside it. Returns the frame's kind too.
    pub(crate) fn open(
        frame: &'a [u8],
        dir: &Path,
        oob: &'a [&'a [u8]],
    ) -> Result<(Dec<'a>, u8), WireError> {
        if frame.len() < 5 || frame[..4] != MAGIC {
            return corrupt("not a sluice frame (bad magic)");
        }
        let mut inp = In::new(frame);
        inp.take(5)?;
        let name = inp.bytes()?;
        let mut seg = None;
        if !name.is_empty() {
            let name =
                std::str::from_utf8(name).or_else(|_| corrupt("segment name is not UTF-8"))?;
            seg = Some(Segment::open(dir, name)?);
        }
        let d = Decoder::new(inp, FrameBuffers { seg, oob });
        Ok((Dec { d }, frame[4]))
    }
    /// Items in a chunk frame, from its header alone: nothing mapped, nothing decoded.
    pub(crate) fn chunk_len(frame: &[u8]) -> Result<usize, WireError> {
        if frame.len() < 5 || frame[..4] != MAGIC {
            return corrupt("not a sluice frame (bad magic)");
        }
        let mut inp = In::new(frame);
        inp.take(5)?;
        inp.bytes()?;
        Ok(inp.count(69)?)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, WireError> {
        Ok(self.d.input().u64()?)
    }
    fn item(&mut self) -> Result<Item, WireError> {
        let inp = self.d.input();
        let (epoch, index, sub, source_index, rows) =
            (inp.u64()?, inp.u64()?, inp.u64()?, inp.u64()?, inp.u64()?);
        let cursor = read_cursor(inp)?;
        let outer = read_outer(inp)?;
        let path = inp.opt_str()?.map(Arc::from);
        let sample = self.d.sample()?;
        Ok(Item {
            epoch,
            index,
            sub,
            source_index,
            rows,
            cursor,
            outer,
            path,
            sample,
            // Batches of rows for the consumer are made in its own process, never sent.
            rows_at: None,
        })
    }
    /// A chunk as [`Enc::chunk`] wrote it.
    pub(crate) fn chunk(&mut self) -> Result<Chunk, WireError> {
        // An item takes at least 8 u64s + 1 option tag + a u32 field count.
        let n = self.d.input().count(69)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.item()?);
        }
        Ok(items)
    }
    /// An error body.
    pub(crate) fn error(&mut self, codec: Option<&dyn ExternalCodec>) -> Result<Error, WireError> {
        decode_error(self.d.input(), codec, 0)
    }
    /// Fails unless the whole frame was read.
    pub(crate) fn end(&mut self) -> Result<(), WireError> {
        Ok(self.d.input().end()?)
    }
}

fn read_cursor(inp: &mut In<'_>) -> Result<Cursor, WireError> {
    Ok(Cursor {
        epoch: inp.u64()?,
        pos: inp.u64()?,
        ord: inp.u64()?,
    })
}

fn read_outer(inp: &mut In<'_>) -> Result<Outer, WireError> {
    let n = inp.u64()?;
    if n == 0 {
        return Ok(None);
    }
    if n > 64 {
        return corrupt(format!("{n} restart records"));
    }
    let mut v = Vec::with_capacity(n as usize);
    for _ in 0..n {
        v.push(Restart {
            slot: inp.u64()? as usize,
            input: read_cursor(inp)?,
            input_index: inp.u64()?,
            counter: inp.u64()?,
        });
    }
    Ok(Some(v.into()))
}

#[cfg(test)]
mod tests {
    use sluice_core::codec::testing::every_value;
    use sluice_core::Value;

    use super::*;
    use crate::wire::fixtures::{item, same};

    fn round_trip(chunk: &[Item]) -> Chunk {
        let mut e = Enc::new(FrameSink::Inline);
        e.chunk(chunk);
        let (frame, buffers) = e.finish(1).unwrap();
        assert!(buffers.is_empty());
        let (mut d, kind) = Dec::open(&frame, Path::new("/nonexistent"), &[]).unwrap();
        assert_eq!(kind, 1);
        let back = d.chunk().unwrap();
        d.end().unwrap();
        back
    }

    #[test]
    fn every_item_field_and_value_round_trips() {
        let chunk: Chunk = (0..3).map(|i| item(i, every_value())).collect();
        let back = round_trip(&chunk);
        same(&chunk, &back);
        match back[0].sample.get("float") {
            Some(Value::Float(f)) => assert!(f.is_nan()),
            other => panic!("{other:?}"),
        }
        assert_eq!(back[1].sample.get("list"), chunk[1].sample.get("list"));
        assert!(back[1].outer.is_some() && back[0].path.is_some());
    }

    #[test]
    fn restart_records_are_bounded() {
        let mut out = Out::default();
        out.u64(65);
        let buf = out.into_vec();
        assert!(read_outer(&mut In::new(&buf)).is_err());
    }

    #[test]
    fn buffer_references_outside_what_was_received_are_errors() {
        let fb = FrameBuffers {
            seg: None,
            oob: &[b"ab"],
        };
        let mut out = Out::default();
        out.u32(0);
        out.u32(1);
        let buf = out.into_vec();
        let mut inp = In::new(&buf);
        assert_eq!(fb.load(OOB_TAG, &mut inp).unwrap(), b"ab");
        assert!(fb.load(OOB_TAG, &mut inp).is_err(), "buffer 1 of 1");
        let mut refs = Out::default();
        refs.u64(0);
        refs.u64(1);
        let refs = refs.into_vec();
        let err = fb.load(SHM_TAG, &mut In::new(&refs)).unwrap_err();
        assert!(err.to_string().contains("no segment"), "{err}");
        assert!(fb.load(3, &mut In::new(&[])).is_err());
    }
}
