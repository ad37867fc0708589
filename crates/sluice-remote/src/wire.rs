//! The chunk wire format: how a [`Chunk`] (all item fields, every [`Value`]) and a stage's
//! reply (its output chunk, or the typed [`Error`]) travel between processes.
//!
//! A frame is `MAGIC, kind, segment name, body`, little-endian, with explicit lengths. Buffers
//! of at least [`ShmConfig::threshold`] bytes (tensors, `bytes` fields) go into one
//! shared-memory segment per frame and the body holds their offset; everything else is inline.
//! A *split* reply ([`encode_reply_split`]) instead hands big buffers back beside the frame
//! as owned [`OutOfBand`] values, so a Ray actor can return them as numpy arrays that the
//! object store carries out of band (pickle protocol 5) with no copy into the frame.
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

use std::path::Path;
use std::sync::Arc;

use sluice_core::exec::{Chunk, Outer, Restart};
use sluice_core::{
    Cursor, DType, Error, ExternalError, Item, Sample, SampleRef, Tensor, TensorData, Value,
};

use crate::shm::{default_dir, Segment, ShmWriter};
#[allow(unused_imports)] // for the doc links
use crate::ShmConfig;

#[cfg(not(target_endian = "little"))]
compile_error!("the sluice wire format sends tensor buffers as little-endian bytes");

/// First bytes of every frame (format version 1).
pub const MAGIC: [u8; 4] = *b"SLW1";

const KIND_CHUNK: u8 = 1;
const KIND_OK: u8 = 2;
const KIND_ERR: u8 = 3;

/// Lists nest at most this deep (a corrupt frame must not overflow the stack).
const MAX_DEPTH: usize = 64;

/// A frame that cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    /// The bytes are not a valid frame (truncated, wrong magic, bad lengths or tags).
    #[error("corrupt frame: {0}")]
    Corrupt(String),
    /// A shared-memory segment could not be created or opened.
    #[error("shared memory segment {name}: {message}")]
    Shm { name: String, message: String },
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        Error::Internal(format!("worker protocol: {e}"))
    }
}

/// Carries the [`Error::External`] errors of one runtime (e.g. Python exceptions) across:
/// the sender turns the error into bytes, the receiver rebuilds an equivalent error.
pub trait ExternalCodec: Send + Sync {
    /// The portable form of `err`, or `None` to send only its message.
    fn encode(&self, err: &ExternalError) -> Option<Vec<u8>>;
    /// The error `payload` describes (`None`: keep just the message).
    fn decode(&self, message: &str, payload: &[u8]) -> Option<ExternalError>;
}

/// An external error that arrived as a message only.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RemoteError(pub String);

/// A stage's answer to one chunk.
pub type Reply = sluice_core::Result<Output>;

/// What a stage made of one chunk.
#[derive(Debug, Default)]
pub struct Output {
    pub chunk: Chunk,
    /// Samples skipped under `on_error="skip"` (added to the main process's stats).
    pub skipped: u64,
}

// ---------------------------------------------------------------------------------------
// Encoding

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

/// Buffers of at least this many bytes leave a split reply out of band: below it, copying
/// into the frame is cheaper than an object per buffer (and Ray inlines small objects).
pub const SPLIT_THRESHOLD: usize = 32 * 1024;

struct Enc<'a> {
    out: Vec<u8>,
    shm: Option<&'a ShmWriter>,
    big: Vec<(u64, &'a [u8])>,
    big_len: u64,
    names: Vec<&'a str>,
    /// Split mode: buffers of at least `oob_threshold` bytes go here instead.
    oob: Option<Vec<OutOfBand>>,
    oob_threshold: usize,
}

impl<'a> Enc<'a> {
    fn new(shm: Option<&'a ShmWriter>) -> Self {
        Enc {
            out: Vec::with_capacity(256),
            shm,
            big: Vec::new(),
            big_len: 0,
            names: Vec::new(),
            oob: None,
            oob_threshold: usize::MAX,
        }
    }
    /// In split mode, takes a buffer of `len` bytes out of band (`make` gives its owner) and
    /// writes its index; returns false when it stays in the frame.
    fn out_of_band(&mut self, len: usize, make: impl FnOnce() -> OutOfBand) -> bool {
        let Some(oob) = self.oob.as_mut() else {
            return false;
        };
        if len < self.oob_threshold {
            return false;
        }
        let index = oob.len() as u32;
        oob.push(make());
        self.u8(2);
        self.u32(index);
        true
    }
    fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.out.extend_from_slice(s.as_bytes());
    }
    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
    /// A buffer: inline, or (when large and shared memory is on) an offset into the segment.
    fn blob(&mut self, b: &'a [u8]) {
        match self.shm {
            Some(w) if b.len() >= w.config.threshold.max(1) => {
                // 64-byte aligned offsets keep the copies out on cache-line boundaries.
                let off = self.big_len.div_ceil(64) * 64;
                self.big.push((off, b));
                self.big_len = off + b.len() as u64;
                self.u8(1);
                self.u64(off);
                self.u64(b.len() as u64);
            }
            _ => {
                self.u8(0);
                self.u64(b.len() as u64);
                self.out.extend_from_slice(b);
            }
        }
    }
    /// Field names repeat in every sample: later occurrences refer back to the first.
    fn name(&mut self, n: &'a str) {
        if let Some(i) = self.names.iter().position(|&m| m == n) {
            self.u8(1);
            self.u32(i as u32);
        } else {
            self.u8(0);
            self.str(n);
            self.names.push(n);
        }
    }
    fn value(&mut self, v: &'a Value) {
        match v {
            Value::Null => self.u8(0),
            Value::Bool(b) => {
                self.u8(1);
                self.u8(*b as u8);
            }
            Value::Int(i) => {
                self.u8(2);
                self.u64(*i as u64);
            }
            Value::Float(f) => {
                self.u8(3);
                self.u64(f.to_bits());
            }
            Value::Str(s) => {
                self.u8(4);
                self.str(s);
            }
            Value::Bytes(b) => {
                self.u8(5);
                if !self.out_of_band(b.len(), || OutOfBand::Bytes(b.clone())) {
                    self.blob(b);
                }
            }
            Value::Tensor(t) => {
                self.u8(6);
                self.u8(dtype_code(t.dtype()));
                self.u32(t.shape().len() as u32);
                for &d in t.shape() {
                    self.u64(d as u64);
                }
                if !self.out_of_band(t.nbytes(), || OutOfBand::Tensor(t.clone())) {
                    self.blob(tensor_bytes(t.data()));
                }
            }
            Value::List(items) => {
                self.u8(7);
                self.u64(items.len() as u64);
                for it in items {
                    self.value(it);
                }
            }
            // Columns are only made at a plan's end, so none is sent today; one sent anyway
            // travels as its values, encoded inline (they live only here).
            Value::Column(c) => {
                let values = c.to_value().unwrap_or_default();
                let mut inline = Enc::new(None);
                inline.value(&values);
                self.out.extend_from_slice(&inline.out);
            }
        }
    }
    fn sample(&mut self, s: &'a Sample) {
        self.u32(s.len() as u32);
        for (k, v) in s.iter() {
            self.name(k);
            self.value(v);
        }
    }
    fn item(&mut self, it: &'a Item) {
        for v in [it.epoch, it.index, it.sub, it.source_index, it.rows] {
            self.u64(v);
        }
        self.cursor(&it.cursor);
        self.outer(&it.outer);
        self.opt_str(it.path.as_deref());
        self.sample(&it.sample);
    }
    fn cursor(&mut self, c: &Cursor) {
        self.u64(c.epoch);
        self.u64(c.pos);
        self.u64(c.ord);
    }
    fn outer(&mut self, outer: &Outer) {
        let records = outer.as_deref().unwrap_or_default();
        self.u64(records.len() as u64);
        for r in records {
            self.u64(r.slot as u64);
            self.cursor(&r.input);
            self.u64(r.input_index);
            self.u64(r.counter);
        }
    }
    fn chunk(&mut self, chunk: &'a [Item]) {
        self.u64(chunk.len() as u64);
        for it in chunk {
            self.item(it);
        }
    }
    fn error(&mut self, e: &Error, codec: Option<&dyn ExternalCodec>) {
        match e {
            Error::InvalidArgument(m) => {
                self.u8(0);
                self.str(m);
            }
            Error::Type(m) => {
                self.u8(1);
                self.str(m);
            }
            Error::FileNotFound(m) => {
                self.u8(2);
                self.str(m);
            }
            Error::MissingField {
                field,
                op,
                available,
            } => {
                self.u8(3);
                self.str(field);
                self.str(op);
                self.str(available);
            }
            Error::Io { path, message } => {
                self.u8(4);
                self.str(path);
                self.str(message);
            }
            Error::Data(m) => {
                self.u8(5);
                self.str(m);
            }
            Error::External { message, source } | Error::Interrupted { message, source } => {
                self.u8(if matches!(e, Error::Interrupted { .. }) {
                    10
                } else {
                    6
                });
                self.str(message);
                match codec.and_then(|c| c.encode(source)) {
                    Some(p) => {
                        self.u8(1);
                        self.u64(p.len() as u64);
                        self.out.extend_from_slice(&p);
                    }
                    None => self.u8(0),
                }
            }
            Error::InSample { op, sample, source } => {
                self.u8(7);
                self.str(op);
                self.u64(sample.epoch);
                self.u64(sample.index);
                self.opt_str(sample.path.as_deref());
                self.error(source, codec);
            }
            Error::Cancelled => self.u8(8),
            Error::Internal(m) => {
                self.u8(9);
                self.str(m);
            }
            // Variants added later travel as internal errors with their message.
            #[allow(unreachable_patterns)]
            other => {
                self.u8(9);
                self.str(&other.to_string());
            }
        }
    }
    /// The frame: header (with the segment's name, if any) then body.
    fn finish(self, kind: u8) -> Result<Vec<u8>, WireError> {
        let name = match (self.shm, self.big.is_empty()) {
            (Some(w), false) => w.write(self.big_len, &self.big)?,
            _ => String::new(),
        };
        let mut frame = Vec::with_capacity(self.out.len() + 13 + name.len());
        frame.extend_from_slice(&MAGIC);
        frame.push(kind);
        frame.extend_from_slice(&(name.len() as u64).to_le_bytes());
        frame.extend_from_slice(name.as_bytes());
        frame.extend_from_slice(&self.out);
        Ok(frame)
    }
}

fn dtype_code(d: DType) -> u8 {
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

fn tensor_bytes(d: &TensorData) -> &[u8] {
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

/// Encodes `chunk` as a request frame; large buffers go through `shm` when given.
pub fn encode_chunk(chunk: &[Item], shm: Option<&ShmWriter>) -> Result<Vec<u8>, WireError> {
    let mut e = Enc::new(shm);
    e.chunk(chunk);
    e.finish(KIND_CHUNK)
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
            let mut e = Enc::new(shm);
            e.u64(out.skipped);
            e.chunk(&out.chunk);
            e.finish(KIND_OK)
        }
        Err(err) => {
            let mut e = Enc::new(None);
            e.error(err, codec);
            e.finish(KIND_ERR)
        }
    };
    encoded.unwrap_or_else(|w| {
        let mut e = Enc::new(None);
        e.error(&Error::from(w), None);
        e.finish(KIND_ERR).unwrap_or_default()
    })
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
    let mut e = Enc::new(None);
    e.oob = Some(Vec::new());
    e.oob_threshold = threshold.max(1);
    e.u64(out.skipped);
    e.chunk(&out.chunk);
    let buffers = e.oob.take().unwrap_or_default();
    match e.finish(KIND_OK) {
        Ok(frame) => SplitFrame { frame, buffers },
        Err(w) => SplitFrame {
            frame: encode_reply(&Err(Error::from(w)), None, codec),
            buffers: vec![],
        },
    }
}

/// Appends one sample to `out` as a self-contained record (field names inline, every buffer
/// inline): the spill format of blocking ops, read back by [`decode_sample`].
///
/// ```
/// use sluice_core::{Sample, Value};
/// use sluice_remote::wire;
/// let s = Sample::from_pairs([("k", Value::from("a")), ("x", Value::Float(0.5))]);
/// let mut rec = Vec::new();
/// wire::encode_sample(&s, &mut rec);
/// assert_eq!(wire::decode_sample(&rec).unwrap(), s);
/// ```
pub fn encode_sample(sample: &Sample, out: &mut Vec<u8>) {
    let mut e = Enc {
        out: std::mem::take(out),
        ..Enc::new(None)
    };
    e.sample(sample);
    *out = e.out;
}

/// Decodes a record made by [`encode_sample`] (the whole of `record`).
pub fn decode_sample(record: &[u8]) -> Result<Sample, WireError> {
    let mut d = Dec {
        buf: record,
        pos: 0,
        seg: None,
        names: Vec::new(),
        oob: &[],
    };
    let s = d.sample()?;
    d.end()?;
    Ok(s)
}

// ---------------------------------------------------------------------------------------
// Decoding

struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
    seg: Option<Segment>,
    names: Vec<Arc<str>>,
    /// The buffers of a split reply, by index.
    oob: &'a [&'a [u8]],
}

fn corrupt<T>(what: impl Into<String>) -> Result<T, WireError> {
    Err(WireError::Corrupt(what.into()))
}

impl<'a> Dec<'a> {
    /// Checks the header and maps the frame's segment (unlinking it).
    fn open(frame: &'a [u8], dir: &Path) -> Result<(Dec<'a>, u8), WireError> {
        if frame.len() < 5 || frame[..4] != MAGIC {
            return corrupt("not a sluice frame (bad magic)");
        }
        let mut d = Dec {
            buf: frame,
            pos: 5,
            seg: None,
            names: Vec::new(),
            oob: &[],
        };
        let name = d.bytes_inline()?;
        if !name.is_empty() {
            let name = std::str::from_utf8(name)
                .or_else(|_| corrupt("segment name is not UTF-8"))?
                .to_string();
            d.seg = Some(Segment::open(dir, &name)?);
        }
        Ok((d, frame[4]))
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return corrupt(format!(
                "truncated: needs {n} bytes at offset {}, frame has {}",
                self.pos,
                self.buf.len()
            ));
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    /// A count of elements that each take at least `min_size` bytes of what is left.
    fn count(&mut self, min_size: usize) -> Result<usize, WireError> {
        let n = self.u64()?;
        let left = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_size as u64) > left {
            return corrupt(format!("count {n} exceeds the frame"));
        }
        Ok(n as usize)
    }
    fn bytes_inline(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u64()?;
        let n = usize::try_from(n).or_else(|_| corrupt("length overflows"))?;
        self.take(n)
    }
    fn str(&mut self) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.bytes_inline()?).or_else(|_| corrupt("string is not UTF-8"))
    }
    fn opt_str(&mut self) -> Result<Option<&'a str>, WireError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.str()?)),
            t => corrupt(format!("bad option tag {t}")),
        }
    }
    /// A buffer, inline or from the segment, handed to `f` (which copies it out).
    fn blob<T>(&mut self, f: impl FnOnce(&[u8]) -> Result<T, WireError>) -> Result<T, WireError> {
        match self.u8()? {
            0 => {
                let b = self.bytes_inline()?;
                f(b)
            }
            1 => {
                let (off, len) = (self.u64()?, self.u64()?);
                let Some(seg) = &self.seg else {
                    return corrupt("buffer in shared memory but the frame names no segment");
                };
                let bytes = seg.bytes();
                let end = off.checked_add(len).filter(|&e| e <= bytes.len() as u64);
                match end {
                    Some(end) => f(&bytes[off as usize..end as usize]),
                    None => corrupt(format!(
                        "buffer [{off}, +{len}) outside the segment of {} bytes",
                        bytes.len()
                    )),
                }
            }
            2 => {
                let i = self.u32()? as usize;
                match self.oob.get(i) {
                    Some(b) => f(b),
                    None => corrupt(format!(
                        "out-of-band buffer {i} of {} received",
                        self.oob.len()
                    )),
                }
            }
            t => corrupt(format!("bad buffer tag {t}")),
        }
    }
    fn name(&mut self) -> Result<Arc<str>, WireError> {
        match self.u8()? {
            0 => {
                let n: Arc<str> = self.str()?.into();
                self.names.push(n.clone());
                Ok(n)
            }
            1 => {
                let i = self.u32()? as usize;
                match self.names.get(i) {
                    Some(n) => Ok(n.clone()),
                    None => corrupt(format!("field name reference {i} out of range")),
                }
            }
            t => corrupt(format!("bad field name tag {t}")),
        }
    }
    fn value(&mut self, depth: usize) -> Result<Value, WireError> {
        Ok(match self.u8()? {
            0 => Value::Null,
            1 => match self.u8()? {
                b @ (0 | 1) => Value::Bool(b == 1),
                b => return corrupt(format!("bad bool {b}")),
            },
            2 => Value::Int(self.u64()? as i64),
            3 => Value::Float(f64::from_bits(self.u64()?)),
            4 => Value::Str(self.str()?.into()),
            5 => Value::Bytes(self.blob(|b| Ok(Arc::from(b)))?),
            6 => Value::Tensor(self.tensor()?),
            7 => {
                if depth >= MAX_DEPTH {
                    return corrupt("lists nested too deeply");
                }
                let n = self.count(1)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::List(items)
            }
            t => return corrupt(format!("bad value tag {t}")),
        })
    }
    fn tensor(&mut self) -> Result<Tensor, WireError> {
        let code = self.u8()?;
        let ndim = self.u32()? as usize;
        if ndim > 64 {
            return corrupt(format!("tensor with {ndim} dimensions"));
        }
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            shape.push(usize::try_from(self.u64()?).or_else(|_| corrupt("dimension overflows"))?);
        }
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| WireError::Corrupt(format!("tensor shape {shape:?} overflows")))?;
        let data = self.blob(|b| {
            let size = match code {
                0..=2 => 1,
                3 | 4 => 2,
                5 | 6 | 9 => 4,
                7 | 8 | 10 => 8,
                c => return corrupt(format!("bad dtype code {c}")),
            };
            if n.checked_mul(size) != Some(b.len()) {
                return corrupt(format!(
                    "tensor shape {shape:?} needs {n} elements, buffer has {} bytes",
                    b.len()
                ));
            }
            Ok(match code {
                0 => {
                    if b.iter().any(|&x| x > 1) {
                        return corrupt("bool tensor holds a byte other than 0 or 1");
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
        })?;
        Tensor::new(shape, data).or_else(|e| corrupt(e.to_string()))
    }
    fn sample(&mut self) -> Result<Sample, WireError> {
        let n = self.u32()? as usize;
        if n > self.buf.len() - self.pos {
            return corrupt(format!("sample with {n} fields exceeds the frame"));
        }
        let mut s = Sample::with_capacity(n);
        for _ in 0..n {
            let k = self.name()?;
            let v = self.value(0)?;
            s.set(k, v);
        }
        Ok(s)
    }
    fn item(&mut self) -> Result<Item, WireError> {
        let (epoch, index, sub, source_index, rows) = (
            self.u64()?,
            self.u64()?,
            self.u64()?,
            self.u64()?,
            self.u64()?,
        );
        let cursor = self.cursor()?;
        let outer = self.outer()?;
        let path = self.opt_str()?.map(Arc::from);
        let sample = self.sample()?;
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
        })
    }
    fn cursor(&mut self) -> Result<Cursor, WireError> {
        Ok(Cursor {
            epoch: self.u64()?,
            pos: self.u64()?,
            ord: self.u64()?,
        })
    }
    fn outer(&mut self) -> Result<Outer, WireError> {
        let n = self.u64()?;
        if n == 0 {
            return Ok(None);
        }
        if n > 64 {
            return corrupt(format!("{n} restart records"));
        }
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(Restart {
                slot: self.u64()? as usize,
                input: self.cursor()?,
                input_index: self.u64()?,
                counter: self.u64()?,
            });
        }
        Ok(Some(v.into()))
    }
    fn chunk(&mut self) -> Result<Chunk, WireError> {
        // An item takes at least 8 u64s + 1 option tag + a u32 field count.
        let n = self.count(69)?;
        let mut items = Vec::with_capacity(n);
        for _ in 0..n {
            items.push(self.item()?);
        }
        Ok(items)
    }
    fn error(
        &mut self,
        codec: Option<&dyn ExternalCodec>,
        depth: usize,
    ) -> Result<Error, WireError> {
        Ok(match self.u8()? {
            0 => Error::InvalidArgument(self.str()?.into()),
            1 => Error::Type(self.str()?.into()),
            2 => Error::FileNotFound(self.str()?.into()),
            3 => Error::MissingField {
                field: self.str()?.into(),
                op: self.str()?.into(),
                available: self.str()?.into(),
            },
            4 => Error::Io {
                path: self.str()?.into(),
                message: self.str()?.into(),
            },
            5 => Error::Data(self.str()?.into()),
            tag @ (6 | 10) => {
                let message = self.str()?.to_string();
                let payload = match self.u8()? {
                    0 => None,
                    1 => Some(self.bytes_inline()?),
                    t => return corrupt(format!("bad payload tag {t}")),
                };
                let source = payload
                    .and_then(|p| codec.and_then(|c| c.decode(&message, p)))
                    .unwrap_or_else(|| Arc::new(RemoteError(message.clone())));
                if tag == 10 {
                    Error::Interrupted { message, source }
                } else {
                    Error::External { message, source }
                }
            }
            7 => {
                if depth >= MAX_DEPTH {
                    return corrupt("errors nested too deeply");
                }
                let op = self.str()?.to_string();
                let sample = SampleRef {
                    epoch: self.u64()?,
                    index: self.u64()?,
                    path: self.opt_str()?.map(str::to_string),
                };
                let source = Box::new(self.error(codec, depth + 1)?);
                Error::InSample { op, sample, source }
            }
            8 => Error::Cancelled,
            9 => Error::Internal(self.str()?.into()),
            t => return corrupt(format!("bad error tag {t}")),
        })
    }
    fn end(&self) -> Result<(), WireError> {
        if self.pos != self.buf.len() {
            return corrupt(format!(
                "{} trailing bytes after the frame",
                self.buf.len() - self.pos
            ));
        }
        Ok(())
    }
}

/// Decodes a request frame made by [`encode_chunk`].
pub fn decode_chunk(frame: &[u8]) -> Result<Chunk, WireError> {
    decode_chunk_in(frame, &default_dir())
}

/// [`decode_chunk`] with segments in `dir`.
pub fn decode_chunk_in(frame: &[u8], dir: &Path) -> Result<Chunk, WireError> {
    let (mut d, kind) = Dec::open(frame, dir)?;
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
    let (mut d, kind) = Dec::open(frame, &default_dir())?;
    d.oob = buffers;
    let reply = match kind {
        KIND_OK => {
            let skipped = d.u64()?;
            Ok(Output {
                chunk: d.chunk()?,
                skipped,
            })
        }
        KIND_ERR => Err(d.error(codec, 0)?),
        k => return corrupt(format!("expected a reply frame, got kind {k}")),
    };
    d.end()?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ShmConfig;
    use proptest::prelude::*;

    fn item(i: u64, sample: Sample) -> Item {
        Item {
            epoch: 2,
            index: i,
            sub: i * 3,
            source_index: 100 + i,
            rows: 1,
            cursor: Cursor {
                epoch: 2,
                pos: i,
                ord: 1,
            },
            path: i
                .is_multiple_of(2)
                .then(|| Arc::from(format!("/data/{i}.jpg").as_str())),
            // Restart records and batch starts travel too (resume after re-sequencing stages).
            outer: (i % 3 == 1).then(|| {
                vec![Restart {
                    slot: 2,
                    input: Cursor {
                        epoch: 2,
                        pos: i + 7,
                        ord: 0,
                    },
                    input_index: i,
                    counter: 4 * i,
                }]
                .into()
            }),
            sample,
        }
    }

    fn every_value() -> Sample {
        let t = |d: TensorData, shape: Vec<usize>| Value::Tensor(Tensor::new(shape, d).unwrap());
        Sample::from_pairs([
            ("null", Value::Null),
            ("bool", Value::Bool(true)),
            ("int", Value::Int(-5)),
            ("float", Value::Float(f64::NAN)),
            ("str", Value::from("héllo")),
            ("bytes", Value::Bytes(Arc::from(&b"\x00\xff"[..]))),
            ("b", t(TensorData::Bool(vec![true, false]), vec![2])),
            ("u8", t(TensorData::U8(vec![1, 2, 3, 4]), vec![2, 2])),
            ("i8", t(TensorData::I8(vec![-1]), vec![1])),
            ("u16", t(TensorData::U16(vec![65535]), vec![1])),
            ("i16", t(TensorData::I16(vec![-300, 2]), vec![2, 1])),
            ("u32", t(TensorData::U32(vec![]), vec![0, 3])),
            ("i32", t(TensorData::I32(vec![7]), vec![])),
            ("u64", t(TensorData::U64(vec![u64::MAX]), vec![1])),
            ("i64", t(TensorData::I64(vec![i64::MIN, 0]), vec![2])),
            ("f32", t(TensorData::F32(vec![1.5, -0.0]), vec![2])),
            ("f64", t(TensorData::F64(vec![1e300]), vec![1, 1])),
            (
                "list",
                Value::List(vec![
                    Value::Int(1),
                    Value::List(vec![Value::from("x"), Value::Null]),
                ]),
            ),
        ])
    }

    /// Compares by wire bytes (NaN != NaN under `PartialEq`).
    fn same(a: &[Item], b: &[Item]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert_eq!(
                (
                    x.epoch,
                    x.index,
                    x.sub,
                    x.source_index,
                    x.rows,
                    x.cursor,
                    &x.path
                ),
                (
                    y.epoch,
                    y.index,
                    y.sub,
                    y.source_index,
                    y.rows,
                    y.cursor,
                    &y.path
                )
            );
            assert_eq!(x.outer, y.outer);
            assert_eq!(
                encode_chunk(std::slice::from_ref(x), None).unwrap(),
                encode_chunk(std::slice::from_ref(y), None).unwrap()
            );
        }
    }

    #[test]
    fn every_value_round_trips() {
        let chunk: Chunk = (0..3).map(|i| item(i, every_value())).collect();
        let back = decode_chunk(&encode_chunk(&chunk, None).unwrap()).unwrap();
        same(&chunk, &back);
        match back[0].sample.get("float") {
            Some(Value::Float(f)) => assert!(f.is_nan()),
            other => panic!("{other:?}"),
        }
        assert_eq!(back[1].sample.get("list"), chunk[1].sample.get("list"));
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
        let dir = tempfile_dir("big");
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

    fn tempfile_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sluice-wire-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn errors_round_trip_with_their_sample() {
        let err = Error::InSample {
            op: "my_udf".into(),
            sample: SampleRef {
                epoch: 1,
                index: 42,
                path: Some("/a.jpg".into()),
            },
            source: Box::new(Error::External {
                message: "ValueError: boom".into(),
                source: Arc::new(RemoteError("ValueError: boom".into())),
            }),
        };
        let frame = encode_reply(&Err(err.clone()), None, None);
        let back = decode_reply(&frame, None).unwrap().unwrap_err();
        assert_eq!(back.to_string(), err.to_string());
        assert!(matches!(back.root(), Error::External { .. }));
        for e in [
            Error::invalid("a"),
            Error::type_error("b"),
            Error::FileNotFound("c".into()),
            Error::MissingField {
                field: "f".into(),
                op: "o".into(),
                available: "x, y".into(),
            },
            Error::Io {
                path: "p".into(),
                message: "m".into(),
            },
            Error::data("d"),
            Error::Cancelled,
            Error::Internal("i".into()),
        ] {
            let back = decode_reply(&encode_reply(&Err(e.clone()), None, None), None).unwrap();
            let back = back.unwrap_err();
            assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&e));
            assert_eq!(back.to_string(), e.to_string());
        }
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

    #[test]
    fn sample_records_round_trip_every_value_and_refuse_corruption() {
        let s = every_value();
        let mut rec = Vec::new();
        encode_sample(&s, &mut rec);
        let back = decode_sample(&rec).unwrap();
        assert_eq!(
            back.names().collect::<Vec<_>>(),
            s.names().collect::<Vec<_>>()
        );
        same(&[item(0, s.clone())], &[item(0, back)]);
        assert!(decode_sample(&rec[..rec.len() - 1]).is_err());
        let mut longer = rec.clone();
        longer.push(0);
        assert!(decode_sample(&longer).is_err(), "trailing bytes");
    }

    fn unhex(s: &str) -> Vec<u8> {
        let s = s.trim();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bytes captured from the encoder before the codec moved to `sluice-core`: spilled files
    /// and stage frames written before must still decode, and the encoder must not drift.
    #[test]
    fn the_format_is_byte_identical_to_the_captured_one() {
        let sample_rec = unhex(include_str!(
            "../../sluice-core/testdata/codec/every_value.sample.hex"
        ));
        let mut rec = Vec::new();
        encode_sample(&every_value(), &mut rec);
        assert_eq!(rec, sample_rec);
        let s = decode_sample(&sample_rec).unwrap();
        same(&[item(0, s)], &[item(0, every_value())]);

        let chunk: Chunk = (0..2).map(|i| item(i, every_value())).collect();
        let golden = unhex(include_str!("../testdata/wire/chunk.hex"));
        assert_eq!(encode_chunk(&chunk, None).unwrap(), golden);
        same(&decode_chunk(&golden).unwrap(), &chunk);

        let reply: Reply = Ok(Output {
            chunk: chunk.clone(),
            skipped: 3,
        });
        let split = encode_reply_split(&reply, 4, None);
        let golden = unhex(include_str!("../testdata/wire/split_reply.hex"));
        assert_eq!(split.frame, golden);
        let bufs: Vec<&[u8]> = split.buffers.iter().map(OutOfBand::bytes).collect();
        let back = decode_reply_split(&golden, &bufs, None).unwrap().unwrap();
        assert_eq!(back.skipped, 3);
        same(&back.chunk, &chunk);

        let dir = tempfile_dir("golden");
        let w = ShmWriter::new(ShmConfig {
            dir: dir.clone(),
            prefix: "g-".into(),
            threshold: 4,
        });
        let golden = unhex(include_str!("../testdata/wire/shm_chunk.hex"));
        assert_eq!(encode_chunk(&chunk, Some(&w)).unwrap(), golden);
        let segment = unhex(include_str!("../testdata/wire/shm_segment.hex"));
        assert_eq!(std::fs::read(dir.join("g-0")).unwrap(), segment);
        same(&decode_chunk_in(&golden, &dir).unwrap(), &chunk);

        let err = Error::InSample {
            op: "my_udf".into(),
            sample: SampleRef {
                epoch: 1,
                index: 42,
                path: Some("/a.jpg".into()),
            },
            source: Box::new(Error::External {
                message: "ValueError: boom".into(),
                source: Arc::new(RemoteError("ValueError: boom".into())),
            }),
        };
        let golden = unhex(include_str!("../testdata/wire/error_reply.hex"));
        assert_eq!(encode_reply(&Err(err.clone()), None, None), golden);
        let back = decode_reply(&golden, None).unwrap().unwrap_err();
        assert_eq!(back.to_string(), err.to_string());
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
