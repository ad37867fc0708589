//! The member index of a tar shard: where each sample's members lie, so a sample is one
//! ranged read. Tar has no index of its own; this one is built by walking the shard's
//! headers once (a local shard is read header by header, its members' data skipped; an
//! object in a store is streamed once, which also fills the node's object cache) and kept in
//! a small file beside the shard (`<shard>.idx`, what `write_shards` writes) or in a
//! directory of index files.
//!
//! Sample `k` of a shard is the bytes `offsets[k]..offsets[k+1]`: its members with their
//! headers (pax and GNU long-name records included), and any member that is not a field
//! (a directory, a link, an oversized member) up to the next sample. The ranges tile the
//! shard from byte 0 to the end of its last member, so every member is read by exactly one
//! sample and the reading rules ([`super::members`]) apply to it once, as when streaming.
//!
//! The file: `SLWDSIX1`, then little-endian u64s — the shard's size, the `max_member_size`
//! it was built with (it decides which members are fields), the number of samples `n`, and
//! the `n + 1` offsets. One whose size or limit differ from the shard's is not used.

use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use sluice_core::{Error, Result};

use super::members::{broken, classify, Member};
use super::WdsOptions;
use crate::store::{is_url, write_atomic, Blob};

const MAGIC: &[u8; 8] = b"SLWDSIX1";
/// Bytes before the offsets: magic, size, limit, count.
const HEADER: usize = 32;

/// Where each sample of one shard lies.
///
/// ```
/// use sluice_io::webdataset::ShardIndex;
/// let index = ShardIndex { size: 4096, max_member_size: 1 << 30, offsets: vec![0, 1024, 3072] };
/// let bytes = index.to_bytes();
/// assert_eq!(ShardIndex::from_bytes("a.tar.idx", &bytes)?, index);
/// assert_eq!(index.samples(), 2);
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    /// The shard's size in bytes when indexed.
    pub size: u64,
    /// The member size limit the index was built with.
    pub max_member_size: u64,
    /// Sample boundaries: `samples() + 1` of them (none for a shard without samples).
    pub offsets: Vec<u64>,
}

impl ShardIndex {
    /// Samples in the shard.
    pub fn samples(&self) -> u64 {
        self.offsets.len().saturating_sub(1) as u64
    }

    /// The index file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 8 * self.offsets.len());
        out.extend_from_slice(MAGIC);
        for v in [self.size, self.max_member_size, self.samples()] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for o in &self.offsets {
            out.extend_from_slice(&o.to_le_bytes());
        }
        out
    }

    /// Parses an index file (`name` for messages), checking its offsets are in order and
    /// within the shard.
    pub fn from_bytes(name: &str, bytes: &[u8]) -> Result<Self> {
        let bad = |why: &str| Error::data(format!("{name}: not a sluice tar index: {why}"));
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(bad("no SLWDSIX1 header"));
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
        let (size, max_member_size, n) = (word(8), word(16), word(24));
        let want = n
            .checked_add(u64::from(n > 0))
            .and_then(|k| k.checked_mul(8))
            .and_then(|b| b.checked_add(HEADER as u64));
        if want != Some(bytes.len() as u64) {
            return Err(bad(&format!("{} bytes for {n} samples", bytes.len())));
        }
        let offsets: Vec<u64> = (HEADER..bytes.len()).step_by(8).map(word).collect();
        if offsets.windows(2).any(|w| w[0] >= w[1]) || offsets.last().is_some_and(|&e| e > size) {
            return Err(bad("offsets out of order or past the shard's end"));
        }
        Ok(ShardIndex {
            size,
            max_member_size,
            offsets,
        })
    }

    /// Builds the index of `blob` by walking its tar headers.
    pub fn scan(blob: &Arc<Blob>, opts: &WdsOptions) -> Result<Self> {
        let name = blob.name();
        let offsets = if is_url(name) {
            let mut archive = tar::Archive::new(blob.reader()?);
            boundaries(name, archive.entries().map_err(|e| broken(name, e))?, opts)?
        } else {
            let reader = std::io::BufReader::with_capacity(
                64 << 10,
                Ranged::new(blob.clone(), 0..blob.size()),
            );
            let mut archive = tar::Archive::new(reader);
            let entries = archive.entries_with_seek().map_err(|e| broken(name, e))?;
            boundaries(name, entries, opts)?
        };
        Ok(ShardIndex {
            size: blob.size(),
            max_member_size: opts.max_member_size,
            offsets,
        })
    }
}

/// The sample boundaries of a shard's members: a sample starts where the member of a new key
/// starts (its extension headers included) and the last ends with the last member.
fn boundaries<R: Read>(
    name: &str,
    entries: tar::Entries<'_, R>,
    opts: &WdsOptions,
) -> Result<Vec<u64>> {
    let mut offsets = vec![0u64];
    let mut key: Option<String> = None;
    let mut end = 0u64;
    for entry in entries {
        let entry = entry.map_err(|e| broken(name, e))?;
        let start = end;
        let size = entry.size();
        end = entry.raw_file_position() + size.div_ceil(512) * 512;
        let raw = entry.path_bytes();
        let path = String::from_utf8_lossy(&raw);
        let kind = entry.header().entry_type();
        if let Member::Field { key: k, .. } = classify(kind, &raw, &path, size, opts) {
            if key.as_deref() != Some(k) {
                if key.is_some() {
                    offsets.push(start);
                }
                key = Some(k.to_string());
            }
        }
    }
    if key.is_none() {
        return Ok(Vec::new());
    }
    offsets.push(end);
    Ok(offsets)
}

/// Where the index of `shard` is kept: beside it, or in `dir` under its file name.
pub(super) fn index_path(shard: &str, dir: Option<&str>) -> String {
    match dir {
        None => format!("{shard}.idx"),
        Some(dir) => {
            let file = shard.rsplit('/').next().unwrap_or(shard);
            format!("{}/{file}.idx", dir.trim_end_matches('/'))
        }
    }
}

/// The index of `shard`: its index file when there is one that matches it, else built by a
/// scan — and, with `dir`, written there for the next reader.
pub(super) fn load_or_build(
    shard: &str,
    dir: Option<&str>,
    opts: &WdsOptions,
) -> Result<(Arc<Blob>, ShardIndex)> {
    if crate::compressed::Codec::of(shard).is_some() {
        return Err(Error::invalid(format!(
            "{shard}: index= needs uncompressed tar shards (a compressed one has no random \
             access); read it without index=, or convert it once with write_shards"
        )));
    }
    let blob = Arc::new(Blob::open(shard)?);
    let path = index_path(shard, dir);
    let stored = Blob::open(&path)
        .and_then(|b| b.read_at(0, b.size() as usize))
        .and_then(|bytes| ShardIndex::from_bytes(&path, &bytes))
        .ok()
        .filter(|i| i.size == blob.size() && i.max_member_size == opts.max_member_size);
    if let Some(index) = stored {
        return Ok((blob, index));
    }
    let index = ShardIndex::scan(&blob, opts)?;
    if let Some(dir) = dir {
        if !is_url(dir) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        write_atomic(&path, index.to_bytes())?;
    }
    Ok((blob, index))
}

/// A byte range of a blob as a seekable reader: positional reads, so members skipped by a
/// tar walk are never read.
pub(super) struct Ranged {
    blob: Arc<Blob>,
    range: std::ops::Range<u64>,
    pos: u64,
}

impl Ranged {
    pub(super) fn new(blob: Arc<Blob>, range: std::ops::Range<u64>) -> Self {
        let pos = range.start;
        Ranged { blob, range, pos }
    }
}

impl Read for Ranged {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.range.end.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let got = self
            .blob
            .read_at(self.pos, n)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        buf[..got.len()].copy_from_slice(&got);
        self.pos += got.len() as u64;
        Ok(got.len())
    }
}

impl Seek for Ranged {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let rel = |base: u64, d: i64| base.checked_add_signed(d);
        let target = match to {
            SeekFrom::Start(o) => self.range.start.checked_add(o),
            SeekFrom::Current(d) => rel(self.pos, d),
            SeekFrom::End(d) => rel(self.range.end, d),
        }
        .filter(|&t| t >= self.range.start)
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek out of range")
        })?;
        self.pos = target;
        Ok(target - self.range.start)
    }
}
