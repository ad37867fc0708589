//! Tar members into samples: which members are fields, and grouping a shard's members by
//! key. The streaming reader, the indexed reader and the index scan share these rules, so a
//! sample is the same whichever way it is read.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use sluice_core::{Error, OnError, Result, Sample, Value};

use super::WdsOptions;
use crate::show::show;

/// Bytes reserved for a member before reading it: its declared size up to this. Larger
/// members grow their buffer as their bytes actually arrive, so a header that lies about the
/// size costs nothing up front.
const RESERVE_LIMIT: u64 = 8 << 20;

/// What a tar entry is to a sample.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Member<'n> {
    /// Carries no field and is passed over silently: a directory, a pax global header, a
    /// file name without an extension.
    Ignored,
    /// Cannot be a field; `why` completes "member 'name' ...".
    Bad(String),
    /// The field `ext` of the sample `key`.
    Field { key: &'n str, ext: &'n str },
}

/// Classifies a member by its header alone (nothing of its data is read).
pub(super) fn classify<'n>(
    kind: tar::EntryType,
    raw_name: &[u8],
    name: &'n str,
    size: u64,
    opts: &WdsOptions,
) -> Member<'n> {
    if kind.is_dir() || kind.is_pax_global_extensions() {
        return Member::Ignored;
    }
    if unsafe_path(raw_name) {
        return Member::Bad("has an absolute or '..' path; refusing it".into());
    }
    if let Some(what) = not_a_file(kind) {
        return Member::Bad(format!("is {what}; only regular files are read"));
    }
    let Some((key, ext)) = split_key(name) else {
        return Member::Ignored;
    };
    if size > opts.max_member_size {
        return Member::Bad(format!(
            "declares {size} bytes, over max_member_size ({})",
            opts.max_member_size
        ));
    }
    Member::Field { key, ext }
}

/// Splits a member path into (key, extension); `None` for names without an extension.
pub(super) fn split_key(path: &str) -> Option<(&str, &str)> {
    let base_start = path.rfind('/').map_or(0, |i| i + 1);
    let dot = path[base_start..].find('.')? + base_start;
    Some((&path[..dot], &path[dot + 1..]))
}

/// Whether a member name leaves the shard's tree: absolute (`/x`, `\\x`, `C:x`) or with a
/// `..` component. Checked on the raw bytes, the same on every platform.
fn unsafe_path(name: &[u8]) -> bool {
    let absolute = matches!(name.first(), Some(b'/' | b'\\'))
        || (name.len() >= 2 && name[1] == b':' && name[0].is_ascii_alphabetic());
    absolute || name.split(|&b| b == b'/' || b == b'\\').any(|c| c == b"..")
}

/// Why a member cannot be a field, or `None` if it is a regular file.
fn not_a_file(kind: tar::EntryType) -> Option<&'static str> {
    use tar::EntryType as T;
    match kind {
        T::Regular | T::Continuous => None,
        T::Symlink => Some("a symbolic link"),
        T::Link => Some("a hard link"),
        T::Fifo => Some("a FIFO"),
        T::Char => Some("a character device"),
        T::Block => Some("a block device"),
        _ => Some("not a regular file"),
    }
}

/// Damage to the tar structure: fatal under every policy.
pub(super) fn broken(shard: &str, e: std::io::Error) -> Error {
    Error::data(format!(
        "{shard}: not a readable tar shard: {}",
        show(&e.to_string())
    ))
}

struct Pending {
    key: String,
    fields: BTreeMap<String, Arc<[u8]>>,
}

/// Groups a shard's members, in order, into samples: adjacent members with one key are one
/// sample (`{__key__, __url__, <ext>: bytes}`).
pub(super) struct Grouper<'a> {
    shard: &'a str,
    opts: WdsOptions,
    skipped: &'a AtomicU64,
    pending: Option<Pending>,
}

impl<'a> Grouper<'a> {
    pub(super) fn new(shard: &'a str, opts: WdsOptions, skipped: &'a AtomicU64) -> Self {
        Grouper {
            shard,
            opts,
            skipped,
            pending: None,
        }
    }

    /// A member that cannot be a field: skipped and counted, or the error.
    fn bad_member(&self, name: &str, why: &str) -> Result<()> {
        match self.opts.on_error {
            OnError::Skip => {
                self.skipped.fetch_add(1, Relaxed);
                Ok(())
            }
            OnError::Raise => Err(Error::data(format!(
                "{}: member '{}' {why}; pass on_error=\"skip\" to leave such members out",
                self.shard,
                show(name)
            ))),
        }
    }

    /// Takes the next member; returns the sample it completes (when it starts another). With
    /// `within` — the bytes the archive is read from, in memory — a field's data is sliced
    /// from them (one copy) rather than read out of the entry into a buffer first.
    pub(super) fn push<R: Read>(
        &mut self,
        mut entry: tar::Entry<'_, R>,
        within: Option<&[u8]>,
    ) -> Result<Option<Sample>> {
        let kind = entry.header().entry_type();
        let raw_name = entry.path_bytes().into_owned();
        let name = String::from_utf8_lossy(&raw_name).into_owned();
        let size = entry.size();
        let (key, ext) = match classify(kind, &raw_name, &name, size, &self.opts) {
            Member::Ignored => return Ok(None),
            Member::Bad(why) => return self.bad_member(&name, &why).map(|()| None),
            Member::Field { key, ext } => (key, ext),
        };
        let (data, have): (Option<Arc<[u8]>>, u64) = match within {
            Some(all) => {
                let start = (entry.raw_file_position() as usize).min(all.len());
                let end = start.saturating_add(size as usize);
                (
                    all.get(start..end).map(Arc::from),
                    (all.len() - start) as u64,
                )
            }
            None => {
                let mut buf = Vec::with_capacity(size.min(RESERVE_LIMIT) as usize);
                entry
                    .read_to_end(&mut buf)
                    .map_err(|e| broken(self.shard, e))?;
                let have = buf.len() as u64;
                ((have >= size).then(|| Arc::from(buf)), have)
            }
        };
        let Some(data) = data else {
            return Err(Error::data(format!(
                "{}: member '{}' is cut short ({have} of {size} bytes): the shard is truncated",
                self.shard,
                show(&name),
            )));
        };
        if let Some(p) = self.pending.as_mut().filter(|p| p.key == key) {
            if p.fields.contains_key(ext) {
                self.bad_member(&name, &format!("is a second '{}' of its sample", show(ext)))?;
            } else {
                p.fields.insert(ext.to_string(), data);
            }
            return Ok(None);
        }
        let done = self.pending.take().map(|p| self.sample(p));
        self.pending = Some(Pending {
            key: key.to_string(),
            fields: BTreeMap::from([(ext.to_string(), data)]),
        });
        Ok(done)
    }

    /// The last sample, once every member was pushed.
    pub(super) fn finish(mut self) -> Option<Sample> {
        self.pending.take().map(|p| self.sample(p))
    }

    fn sample(&self, p: Pending) -> Sample {
        sluice_core::field_names!(KEY = "__key__", URL = "__url__");
        let mut s = Sample::with_capacity(p.fields.len() + 2);
        s.set(KEY.clone(), Value::Str(p.key.into()));
        s.set(URL.clone(), Value::Str(self.shard.into()));
        for (ext, data) in p.fields {
            s.set(ext, Value::Bytes(data));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_classified_by_header_alone() {
        let opts = WdsOptions {
            max_member_size: 10,
            ..Default::default()
        };
        let c = |kind, name: &'static str, size| classify(kind, name.as_bytes(), name, size, &opts);
        use tar::EntryType as T;
        assert_eq!(
            c(T::Regular, "d/001.seg.png", 3),
            Member::Field {
                key: "d/001",
                ext: "seg.png"
            }
        );
        assert_eq!(c(T::Directory, "d/", 0), Member::Ignored);
        assert_eq!(c(T::Regular, "README", 1), Member::Ignored);
        assert!(matches!(c(T::Regular, "../x.jpg", 1), Member::Bad(_)));
        assert!(matches!(c(T::Symlink, "x.jpg", 0), Member::Bad(_)));
        assert!(matches!(c(T::Regular, "x.jpg", 11), Member::Bad(w) if w.contains("11 bytes")));
    }
}
