//! `read_tfrecord`: one sample per TFRecord record, with random access through a
//! record-offset index.
//!
//! A TFRecord file is a sequence of frames: the data's length (u64, little-endian), the masked
//! CRC32C of those 8 bytes, the data, the masked CRC32C of the data. Opening finds where
//! every frame starts — from index files when given (the `tfrecord` pip package's format: one
//! `offset length` line per record, `length` the whole frame), else by hopping from frame
//! header to frame header (positional reads of 64 KiB windows for a local file, so the data of
//! large records is skipped; a bucket's object is streamed once) — and checks each length's CRC on the way. `get(i)` is then one
//! positional read of the frame, whose both CRCs are checked; a mismatch is a data error
//! naming the file, the record and its byte offset.
//!
//! Compressed files (`compression="gzip"`, or `.gz`/`.zst`/`.bz2` by extension) are
//! decompressed once at open into a temporary file that the index points into
//! ([`crate::compressed`]); index files are for uncompressed files only.
//!
//! Records are parsed as `tf.train.Example` ([`example`]): each feature becomes a field
//! (`features` keeps only those named; a named feature a record lacks is `None`). With
//! `parse = false` a sample is the raw `{record: bytes}`.

pub mod example;

use std::io::Read;
use std::sync::Arc;

use prost::Message;
use sluice_core::{Error, Result, Sample, Source, SourceRef, Value};

use crate::compressed::{expand, read_error, Codec, Input};
use crate::spec::SourceSpec;
use crate::store::Blob;

/// Extensions directory and prefix listings keep (also compressed: `x.tfrecord.gz`); files
/// named directly or matched by a glob (`train-*-of-01024`) are read whatever their name.
pub const EXTENSIONS: &[&str] = &["tfrecord", "tfrecords", "tfr"];

/// Bytes of a frame that are not data: length, its CRC, the data's CRC.
const FRAME_OVERHEAD: u64 = 16;

/// TFRecord's masked CRC32C (`crc32c` rotated right by 15 bits plus a constant), so a CRC
/// stored next to data does not CRC to a fixed value.
///
/// ```
/// // CRC32C of nothing is 0: masked, the constant alone.
/// assert_eq!(sluice_io::tfrecord::masked_crc(b""), 0xa282_ead8);
/// ```
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// How to read TFRecord files (the default: by extension, no index files, every feature,
/// parsed).
#[derive(Debug, Clone, PartialEq)]
pub struct TfrecordOptions {
    /// `Some("gzip")`: every file is gzip-compressed; `None`: by extension.
    pub compression: Option<String>,
    /// Index files, one per data file in the order the paths expand to.
    pub index: Option<Vec<String>>,
    /// Features to keep (others are not converted); `None`: all.
    pub features: Option<Vec<String>>,
    /// `false`: samples are `{record: bytes}`, not parsed.
    pub parse: bool,
}

impl Default for TfrecordOptions {
    fn default() -> Self {
        TfrecordOptions {
            compression: None,
            index: None,
            features: None,
            parse: true,
        }
    }
}

#[derive(Debug)]
struct Index {
    files: Vec<Input>,
    /// (file, frame offset, frame length) per record.
    records: Vec<(u32, u64, u64)>,
}

/// TFRecord files as samples.
///
/// ```
/// use sluice_core::Source;
/// use sluice_io::tfrecord::{masked_crc, TfrecordOptions, TfrecordSource};
/// let mut file = Vec::new();
/// for data in [&b"first"[..], b"second"] {
///     let len = (data.len() as u64).to_le_bytes();
///     file.extend(len);
///     file.extend(masked_crc(&len).to_le_bytes());
///     file.extend(data);
///     file.extend(masked_crc(data).to_le_bytes());
/// }
/// let p = std::env::temp_dir().join("sluice-doc.tfrecord");
/// std::fs::write(&p, file).unwrap();
/// let opts = TfrecordOptions { parse: false, ..Default::default() };
/// let src = TfrecordSource::open(&[p.display().to_string()], &opts)?;
/// assert_eq!(src.len(), Some(2));
/// assert_eq!(src.get(1)?.get("record").unwrap().as_bytes(), Some(&b"second"[..]));
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TfrecordSource {
    index: Arc<Index>,
    opts: Arc<TfrecordOptions>,
}

impl TfrecordSource {
    /// Indexes every file matched by `entries` (paths, directories, globs, URLs; directories
    /// and prefixes list the files with [`EXTENSIONS`]).
    pub fn open(entries: &[String], opts: &TfrecordOptions) -> Result<Self> {
        let forced = match opts.compression.as_deref() {
            None => None,
            Some("gzip") => Some(Codec::Gzip),
            Some(other) => {
                return Err(Error::invalid(format!(
                    "compression must be None or 'gzip', got '{other}'"
                )))
            }
        };
        let paths = expand(entries, Some(EXTENSIONS))?;
        if let Some(index) = &opts.index {
            if index.len() != paths.len() {
                return Err(Error::invalid(format!(
                    "index names {} file(s) for {} TFRecord file(s); give one per file, in \
                     the order the paths expand to",
                    index.len(),
                    paths.len()
                )));
            }
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut records = Vec::new();
        for (fi, path) in paths.iter().enumerate() {
            let (input, scan) = Input::open_as(path, forced.or(Codec::of(path)))?;
            let frames = match &opts.index {
                Some(index) if input.is_decompressed() => {
                    return Err(Error::invalid(format!(
                        "{}: index files describe uncompressed TFRecord files; {path} is \
                         compressed (its index is built when it is decompressed)",
                        index[fi]
                    )))
                }
                Some(index) => read_index(&index[fi], &input)?,
                None if input.is_decompressed() || !input.is_local() => scan_stream(path, scan)?,
                None => scan_local(&input)?,
            };
            records.extend(frames.into_iter().map(|(o, l)| (fi as u32, o, l)));
            files.push(input);
        }
        Ok(TfrecordSource {
            index: Arc::new(Index { files, records }),
            opts: Arc::new(opts.clone()),
        })
    }

    /// The data of record `index`, both CRCs checked.
    pub fn record(&self, index: u64) -> Result<bytes::Bytes> {
        let (fi, offset, len) = *self
            .index
            .records
            .get(index as usize)
            .ok_or_else(|| Error::invalid(format!("record {index} out of range")))?;
        let input = &self.index.files[fi as usize];
        let bad = |what: String| {
            Error::data(format!(
                "{}: record {index} at byte {offset}: {what}",
                input.name()
            ))
        };
        let frame = input.read_at(offset, len as usize)?;
        let data_len = u64::from_le_bytes(frame[..8].try_into().unwrap_or_default());
        if data_len != len - FRAME_OVERHEAD {
            return Err(bad(format!(
                "length field says {data_len} bytes, the index {}",
                len - FRAME_OVERHEAD
            )));
        }
        check_crc(&frame[..8], &frame[8..12], "length").map_err(bad)?;
        let end = frame.len() - 4;
        check_crc(&frame[12..end], &frame[end..], "data").map_err(bad)?;
        Ok(frame.slice(12..end))
    }

    /// The spec that reopens these files with these options.
    pub fn source_spec(&self) -> SourceSpec {
        let paths: Vec<String> = self
            .index
            .files
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        SourceSpec::ReadTfrecord {
            cache: crate::store::cache::spec_of(&paths),
            paths,
            compression: self.opts.compression.clone(),
            index: self.opts.index.clone(),
            features: self.opts.features.clone(),
            parse: self.opts.parse,
        }
    }
}

fn check_crc(data: &[u8], stored: &[u8], what: &str) -> std::result::Result<(), String> {
    let stored = u32::from_le_bytes(stored.try_into().unwrap_or_default());
    let actual = masked_crc(data);
    if stored == actual {
        Ok(())
    } else {
        Err(format!(
            "{what} CRC mismatch (stored {stored:#010x}, computed {actual:#010x}): the file is \
             corrupt"
        ))
    }
}

/// The frame length of the frame whose 12-byte header is `header` at `offset` of `path`.
fn frame_len(path: &str, offset: u64, header: &[u8]) -> Result<u64> {
    let data_len = u64::from_le_bytes(header[..8].try_into().unwrap_or_default());
    check_crc(&header[..8], &header[8..12], "length")
        .map_err(|m| Error::data(format!("{path}: record at byte {offset}: {m}")))?;
    data_len
        .checked_add(FRAME_OVERHEAD)
        .ok_or_else(|| Error::data(format!("{path}: record at byte {offset}: absurd length")))
}

fn truncated(path: &str, offset: u64, need: u64, have: u64) -> Error {
    Error::data(format!(
        "{path}: record at byte {offset} is cut short ({have} of {need} bytes): the file is \
         truncated"
    ))
}

/// Bytes read at a time while hopping through a local file's headers: many small records per
/// read, and little data read past for large ones.
const SCAN_WINDOW: u64 = 64 << 10;

/// Frames of a local file, hopping from header to header.
fn scan_local(input: &Input) -> Result<Vec<(u64, u64)>> {
    let size = input.size()?;
    let mut frames = Vec::new();
    let mut offset = 0;
    let (mut window, mut window_start) = (bytes::Bytes::new(), 0u64);
    while offset < size {
        if size - offset < 12 {
            return Err(truncated(input.name(), offset, 12, size - offset));
        }
        if offset < window_start || offset + 12 > window_start + window.len() as u64 {
            window = input.read_at(offset, (size - offset).min(SCAN_WINDOW) as usize)?;
            window_start = offset;
        }
        let at = (offset - window_start) as usize;
        let len = frame_len(input.name(), offset, &window[at..at + 12])?;
        if len > size - offset {
            return Err(truncated(input.name(), offset, len, size - offset));
        }
        frames.push((offset, len));
        offset += len;
    }
    Ok(frames)
}

/// Frames of a stream read once to its end (a remote object, or a compressed file being
/// decompressed into its temporary copy).
fn scan_stream(path: &str, scan: Box<dyn Read + Send>) -> Result<Vec<(u64, u64)>> {
    let mut input = std::io::BufReader::with_capacity(1 << 20, scan);
    let mut frames = Vec::new();
    let mut offset = 0;
    let mut header = [0u8; 12];
    loop {
        let mut got = 0;
        while got < 12 {
            match input.read(&mut header[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(read_error(path, e)),
            }
        }
        match got {
            0 => return Ok(frames),
            12 => {}
            _ => return Err(truncated(path, offset, 12, got as u64)),
        }
        let len = frame_len(path, offset, &header)?;
        let body = len - 12;
        let copied = std::io::copy(&mut (&mut input).take(body), &mut std::io::sink())
            .map_err(|e| read_error(path, e))?;
        if copied < body {
            return Err(truncated(path, offset, len, 12 + copied));
        }
        frames.push((offset, len));
        offset += len;
    }
}

/// Frames an index file lists (`offset length` per line), checked against `input`'s size.
fn read_index(index: &str, input: &Input) -> Result<Vec<(u64, u64)>> {
    let blob = Arc::new(Blob::open(index)?);
    let mut text = String::new();
    blob.reader()?
        .read_to_string(&mut text)
        .map_err(|e| Error::io(index, e))?;
    let size = input.size()?;
    let mut frames = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| {
            Error::data(format!(
                "{index}:{}: {what} (want 'offset length', the frame's byte offset and \
                 length in {})",
                n + 1,
                input.name()
            ))
        };
        let mut parts = line.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(offset)), Some(Ok(len)), None) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not two integers"));
        };
        if len < FRAME_OVERHEAD || offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(bad(&format!(
                "frame {offset}+{len} does not fit the file ({size} bytes)"
            )));
        }
        frames.push((offset, len));
    }
    Ok(frames)
}

impl Source for TfrecordSource {
    fn name(&self) -> &str {
        "read_tfrecord"
    }
    fn spec(&self) -> serde_json::Value {
        self.source_spec().summary(self.len(), 0)
    }
    fn len(&self) -> Option<u64> {
        Some(self.index.records.len() as u64)
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.source_spec().to_json())
    }
    fn fields(&self) -> Option<Vec<String>> {
        if !self.opts.parse {
            return Some(vec!["record".into()]);
        }
        self.opts.features.clone()
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let data = self.record(index)?;
        if !self.opts.parse {
            sluice_core::field_names!(RECORD = "record");
            let mut s = Sample::with_capacity(1);
            s.set(RECORD.clone(), Value::Bytes(data.to_vec().into()));
            return Ok(s);
        }
        let (fi, offset, _) = self.index.records[index as usize];
        let ex = example::Example::decode(&data[..]).map_err(|e| {
            Error::data(format!(
                "{}: record {index} at byte {offset}: not a tf.train.Example ({e}); pass \
                 parse=False for the raw bytes",
                self.index.files[fi as usize].name()
            ))
        })?;
        let mut all = ex.features.map(|f| f.feature).unwrap_or_default();
        let mut s = Sample::with_capacity(all.len());
        match &self.opts.features {
            None => {
                for (name, f) in all {
                    s.set(name, example::feature_value(f));
                }
            }
            Some(keep) => {
                for name in keep {
                    let v = all.remove(name).map_or(Value::Null, example::feature_value);
                    s.set(name.clone(), v);
                }
            }
        }
        Ok(s)
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests;
