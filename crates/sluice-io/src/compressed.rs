//! Compressed inputs, recognised by extension: `.gz`/`.tgz` (gzip, concatenated members too),
//! `.zst`/`.zstd` (Zstandard, any number of frames) and `.bz2` (bzip2, concatenated streams
//! too). Text, JSON lines, CSV and WebDataset tar shards read them transparently, locally and
//! from object stores.
//!
//! A compressed stream cannot be seeked, so random access works this way: the text, JSONL and
//! CSV sources decompress each compressed file once, when the source is opened, into an
//! unlinked temporary file (under `TMPDIR`) while they build their record-offset index from
//! the same pass ([`Input`]); `get` then reads that record from the temporary file. Memory
//! stays what it is for plain files (the index: a few bytes per record); disk use is the
//! decompressed size, released when the source is dropped. Shuffle, sharding and resuming
//! therefore work exactly as for plain files. A worker process that reopens the source
//! decompresses it again. WebDataset shards stream anyway: a `.tar.gz` is decompressed as it
//! is read.
//!
//! Damaged input (a truncated file, corrupt data) is an [`Error::Data`] naming the file and
//! the codec, raised by the scan at open, never a silently shorter file.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;
use sluice_core::{Error, Result};

use crate::store::{expand as expand_all, is_url, Blob};

/// A compression format sluice decompresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Gzip,
    Zstd,
    Bzip2,
}

/// File extensions of compressed files (lower case, no dot).
pub const EXTENSIONS: &[&str] = &["gz", "tgz", "zst", "zstd", "bz2"];

impl Codec {
    /// The codec `path`'s extension names (case-insensitive), if any.
    ///
    /// ```
    /// use sluice_io::compressed::Codec;
    /// assert_eq!(Codec::of("a/train.jsonl.GZ"), Some(Codec::Gzip));
    /// assert_eq!(Codec::of("s3://b/x.csv.zst"), Some(Codec::Zstd));
    /// assert_eq!(Codec::of("x.csv"), None);
    /// ```
    pub fn of(path: &str) -> Option<Codec> {
        match extension(path)?.as_str() {
            "gz" | "tgz" => Some(Codec::Gzip),
            "zst" | "zstd" => Some(Codec::Zstd),
            "bz2" => Some(Codec::Bzip2),
            _ => None,
        }
    }

    /// The codec's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Gzip => "gzip",
            Codec::Zstd => "zstd",
            Codec::Bzip2 => "bzip2",
        }
    }

    /// `input` decompressed. Errors from the decoder read as [`read_error`] turns them into
    /// data errors naming `path` and the codec.
    pub fn decoder(self, path: &str, input: Box<dyn Read + Send>) -> Result<Box<dyn Read + Send>> {
        let inner: Box<dyn Read + Send> = match self {
            Codec::Gzip => Box::new(flate2::read::MultiGzDecoder::new(input)),
            Codec::Zstd => {
                Box::new(zstd::stream::read::Decoder::new(input).map_err(|e| Error::io(path, e))?)
            }
            Codec::Bzip2 => Box::new(bzip2::read::MultiBzDecoder::new(input)),
        };
        Ok(Box::new(Decoded { codec: self, inner }))
    }
}

/// The last extension of `path` (lower case), ignoring a URL's query.
fn extension(path: &str) -> Option<String> {
    let path = if is_url(path) {
        path.split(['?', '#']).next().unwrap_or(path)
    } else {
        path
    };
    let name = path.rsplit('/').next().unwrap_or(path);
    let (_, ext) = name.rsplit_once('.')?;
    Some(ext.to_ascii_lowercase())
}

/// `path`'s extension under its compression: `x.csv.gz` → `csv`, `x.csv` → `csv`.
///
/// ```
/// assert_eq!(sluice_io::compressed::inner_extension("d/x.CSV.bz2").as_deref(), Some("csv"));
/// assert_eq!(sluice_io::compressed::inner_extension("d/x.tar").as_deref(), Some("tar"));
/// assert_eq!(sluice_io::compressed::inner_extension("d/x.gz"), None);
/// ```
pub fn inner_extension(path: &str) -> Option<String> {
    match Codec::of(path) {
        None => extension(path),
        Some(_) if extension(path).as_deref() == Some("tgz") => Some("tar".into()),
        Some(_) => {
            let name = path.rsplit('/').next().unwrap_or(path);
            let stem = &name[..name.rfind('.')?];
            stem.contains('.').then(|| extension(stem)).flatten()
        }
    }
}

/// A decoder error: its message says which codec found the data damaged.
#[derive(Debug)]
struct CodecError {
    codec: Codec,
    message: String,
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "corrupt or truncated {} data ({})",
            self.codec.name(),
            self.message
        )
    }
}

impl std::error::Error for CodecError {}

/// A decoder whose errors are marked as damaged data (rather than a failing disk or network).
struct Decoded {
    codec: Codec,
    inner: Box<dyn Read + Send>,
}

impl Read for Decoded {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(out).map_err(|e| {
            // Errors of the underlying reader (disk, network) pass as they are.
            if e.get_ref().is_some_and(|i| i.is::<Passthrough>()) {
                return e;
            }
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                CodecError {
                    codec: self.codec,
                    message: e.to_string(),
                },
            )
        })
    }
}

/// Marks an error of the compressed input itself, so [`Decoded`] does not call it damage.
#[derive(Debug)]
struct Passthrough(std::io::Error);

impl std::fmt::Display for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Passthrough {}

/// Wraps the compressed input's errors in [`Passthrough`].
struct Raw(Box<dyn Read + Send>);

impl Read for Raw {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.0
            .read(out)
            .map_err(|e| std::io::Error::new(e.kind(), Passthrough(e)))
    }
}

/// The sluice error for a failed read of `path` through [`reader`]: damaged compressed data
/// is [`Error::Data`] ("`path`: corrupt or truncated gzip data (...)"), anything else
/// [`Error::Io`].
pub fn read_error(path: &str, e: std::io::Error) -> Error {
    match e.get_ref() {
        Some(inner) if inner.is::<CodecError>() => Error::data(format!("{path}: {inner}")),
        Some(inner) if inner.is::<Passthrough>() => Error::Io {
            path: path.to_string(),
            message: inner.to_string(),
        },
        _ => Error::io(path, e),
    }
}

/// `blob`'s bytes in order, decompressed when its extension names a codec.
pub fn reader(blob: &Arc<Blob>) -> Result<Box<dyn Read + Send>> {
    let raw = blob.reader()?;
    match Codec::of(blob.name()) {
        None => Ok(raw),
        Some(codec) => codec.decoder(blob.name(), Box::new(Raw(raw))),
    }
}

/// Whether `entry` names a folder whose files a listing gives: a local directory, or a bucket
/// prefix ([`crate::store::is_prefix`]).
///
/// ```
/// assert!(sluice_io::compressed::is_folder(&std::env::temp_dir().display().to_string()));
/// assert!(sluice_io::compressed::is_folder("s3://bucket/shards"));
/// assert!(!sluice_io::compressed::is_folder("s3://bucket/shards/*.tar"));
/// ```
pub fn is_folder(entry: &str) -> bool {
    match is_url(entry) {
        true => crate::store::is_prefix(entry),
        false => !entry.contains(['*', '?', '[']) && std::path::Path::new(entry).is_dir(),
    }
}

/// [`crate::store::expand`], where a directory or prefix listing filtered by `extensions`
/// also keeps those files compressed (`x.csv.gz` for `csv`). Files named directly or
/// matched by a glob are kept whatever their extension.
pub fn expand(entries: &[String], extensions: Option<&[&str]>) -> Result<Vec<String>> {
    let Some(exts) = extensions else {
        return expand_all(entries, None);
    };
    let with_codecs: Vec<&str> = exts.iter().chain(EXTENSIONS).copied().collect();
    let mut out = Vec::new();
    for entry in entries {
        if !is_folder(entry) {
            out.extend(expand_all(std::slice::from_ref(entry), Some(exts))?);
            continue;
        }
        let found: Vec<String> = expand_all(std::slice::from_ref(entry), Some(&with_codecs))?
            .into_iter()
            .filter(|p| inner_extension(p).is_some_and(|e| exts.contains(&e.as_str())))
            .collect();
        if found.is_empty() {
            return Err(Error::FileNotFound(format!("{entry}: matched no files")));
        }
        out.extend(found);
    }
    Ok(out)
}

/// A file as the record indexes read it: a plain file (local or remote) read in place, or a
/// compressed one read from its decompressed copy in an unlinked temporary file.
#[derive(Debug)]
pub struct Input {
    blob: Arc<Blob>,
    spill: Option<File>,
}

impl Input {
    /// Opens `path`, and the reader the index scan reads it through (every byte, to the end):
    /// for a compressed file the scan decompresses it and fills the temporary copy as it
    /// goes, so the file is read once. Read errors from the reader become sluice errors
    /// through [`read_error`].
    pub fn open(path: &str) -> Result<(Input, Box<dyn Read + Send>)> {
        Self::open_as(path, Codec::of(path))
    }

    /// [`Input::open`] with the codec given (`None`: not compressed) rather than taken from
    /// the extension.
    pub fn open_as(path: &str, codec: Option<Codec>) -> Result<(Input, Box<dyn Read + Send>)> {
        let blob = Arc::new(Blob::open(path)?);
        let Some(codec) = codec else {
            // A plain object in a bucket is kept as a local copy while the scan reads it, so
            // records are not a request each (see `Blob::reader_keeping_copy`).
            let scan = blob.reader_keeping_copy()?;
            return Ok((Input { blob, spill: None }, scan));
        };
        let spill = tempfile::tempfile().map_err(|e| {
            Error::io(
                path,
                std::io::Error::new(
                    e.kind(),
                    format!("cannot create a temporary file to decompress into (TMPDIR): {e}"),
                ),
            )
        })?;
        let writer = spill.try_clone().map_err(|e| Error::io(path, e))?;
        let scan = Box::new(Tee {
            inner: codec.decoder(path, Box::new(Raw(blob.reader()?)))?,
            out: Some(BufWriter::with_capacity(1 << 20, writer)),
        });
        Ok((
            Input {
                blob,
                spill: Some(spill),
            },
            scan,
        ))
    }

    /// Whether reads go to a local file (plain, or the decompressed copy): cheap enough to
    /// walk through record headers with positional reads.
    pub fn is_local(&self) -> bool {
        self.spill.is_some() || !is_url(self.blob.name())
    }

    /// Whether the content is a decompressed copy.
    pub fn is_decompressed(&self) -> bool {
        self.spill.is_some()
    }

    /// The path or URL it was opened with.
    pub fn name(&self) -> &str {
        self.blob.name()
    }

    /// Whether the local file changed since it was opened ([`Blob::changed`]; a
    /// decompressed copy never does).
    pub fn changed(&self) -> bool {
        self.spill.is_none() && self.blob.changed()
    }

    /// Size in bytes of the (decompressed) content; for a compressed file, known once the
    /// scan has read it to the end.
    pub fn size(&self) -> Result<u64> {
        match &self.spill {
            None => Ok(self.blob.size()),
            Some(file) => Ok(file
                .metadata()
                .map_err(|e| Error::io(self.name(), e))?
                .len()),
        }
    }

    /// `len` bytes at `offset` of the (decompressed) content.
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        match &self.spill {
            None => self.blob.read_at(offset, len),
            Some(file) => {
                let mut buf = vec![0u8; len];
                file.read_exact_at(&mut buf, offset)
                    .map_err(|e| Error::io(self.name(), e))?;
                Ok(Bytes::from(buf))
            }
        }
    }
}

/// Passes the decompressed bytes on and writes them to the temporary copy; flushes it at the
/// end of the input, so a failed flush (a full disk) fails the scan.
struct Tee {
    inner: Box<dyn Read + Send>,
    out: Option<BufWriter<File>>,
}

impl Read for Tee {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let spill_error = |e: std::io::Error| {
            std::io::Error::new(
                e.kind(),
                Passthrough(std::io::Error::new(
                    e.kind(),
                    format!("writing the decompressed copy (TMPDIR): {e}"),
                )),
            )
        };
        if let Some(out) = &mut self.out {
            out.write_all(&buf[..n]).map_err(spill_error)?;
            if n == 0 && !buf.is_empty() {
                let mut done = self.out.take().expect("present");
                done.flush().map_err(spill_error)?;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const TEXT: &[u8] = b"first line\nsecond\n\nthird \xc3\xa9\n";

    fn compress(codec: Codec, data: &[u8]) -> Vec<u8> {
        match codec {
            Codec::Gzip => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
            Codec::Zstd => zstd::encode_all(data, 3).unwrap(),
            Codec::Bzip2 => {
                let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
                e.write_all(data).unwrap();
                e.finish().unwrap()
            }
        }
    }

    const CODECS: [(Codec, &str); 3] = [
        (Codec::Gzip, "gz"),
        (Codec::Zstd, "zst"),
        (Codec::Bzip2, "bz2"),
    ];

    #[test]
    fn every_codec_reads_back_and_spills_for_random_access() {
        let dir = tempfile::tempdir().unwrap();
        for (codec, ext) in CODECS {
            let p = dir.path().join(format!("x.txt.{ext}"));
            // Two members/frames/streams back to back: all of them are read.
            let mut data = compress(codec, &TEXT[..11]);
            data.extend(compress(codec, &TEXT[11..]));
            std::fs::write(&p, data).unwrap();
            let path = p.display().to_string();
            let (input, mut scan) = Input::open(&path).unwrap();
            let mut got = Vec::new();
            scan.read_to_end(&mut got).unwrap();
            assert_eq!(got, TEXT, "{codec:?}");
            assert_eq!(&input.read_at(11, 6).unwrap()[..], b"second", "{codec:?}");
            assert_eq!(input.name(), path);
        }
    }

    #[test]
    fn truncated_or_corrupt_data_is_a_data_error_naming_file_and_codec() {
        let dir = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        for (codec, ext) in CODECS {
            let full = compress(codec, &big);
            let mut corrupt = full.clone();
            let mid = corrupt.len() / 2;
            for b in &mut corrupt[mid..mid + 64] {
                *b ^= 0x5a;
            }
            for (what, data) in [("cut", &full[..full.len() / 2]), ("corrupt", &corrupt[..])] {
                let p = dir.path().join(format!("{what}.txt.{ext}"));
                std::fs::write(&p, data).unwrap();
                let path = p.display().to_string();
                let (_input, mut scan) = Input::open(&path).unwrap();
                let e = scan.read_to_end(&mut Vec::new()).unwrap_err();
                let e = read_error(&path, e);
                let msg = e.to_string();
                assert!(matches!(e, Error::Data(_)), "{codec:?} {what}: {e:?}");
                assert!(
                    msg.contains(&path) && msg.contains(codec.name()),
                    "{codec:?} {what}: {msg}"
                );
            }
        }
    }

    #[test]
    fn extensions_and_listing() {
        assert_eq!(Codec::of("x.tar.zstd"), Some(Codec::Zstd));
        assert_eq!(Codec::of("https://h/x.bz2?sig=1"), Some(Codec::Bzip2));
        assert_eq!(Codec::of("dir.gz/x"), None);
        assert_eq!(inner_extension("x.tar.gz").as_deref(), Some("tar"));
        assert_eq!(inner_extension("x.tgz").as_deref(), Some("tar"));
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.csv", "b.csv.gz", "c.txt.gz", "d.gz", "e.tsv.zst"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let d = dir.path().display().to_string();
        let found = expand(std::slice::from_ref(&d), Some(&["csv", "tsv"])).unwrap();
        let names: Vec<_> = found
            .iter()
            .map(|p| p.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(names, ["a.csv", "b.csv.gz", "e.tsv.zst"]);
        // A file named directly is read whatever its extension.
        let named = format!("{d}/d.gz");
        assert_eq!(
            expand(std::slice::from_ref(&named), Some(&["csv"])).unwrap(),
            [named]
        );
        let e = expand(&[d], Some(&["parquet"])).unwrap_err();
        assert!(matches!(e, Error::FileNotFound(_)), "{e}");
    }

    /// Each source reads a compressed file exactly as the plain one.
    #[test]
    fn sources_read_compressed_files_like_plain_ones() {
        use crate::{CsvSource, LinesFormat, LinesSource, Utf8Errors, WebDatasetSource};
        use sluice_core::Source;
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name).display().to_string();
        let jsonl = b"{\"a\": 1}\n\n{\"a\": 2, \"t\": \"x\"}\n{\"a\": 3}\n";
        let csv = b"id,name\n1,\"a, b\"\n2,\"two\nlines\"\n3,c\n";
        let mut tar = tar::Builder::new(Vec::new());
        for (name, data) in [("a.txt", &b"hi"[..]), ("a.cls", b"1"), ("b.txt", b"yo")] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_cksum();
            tar.append_data(&mut h, name, data).unwrap();
        }
        let tar = tar.into_inner().unwrap();
        std::fs::write(at("plain.jsonl"), jsonl).unwrap();
        std::fs::write(at("plain.csv"), csv).unwrap();
        std::fs::write(at("plain.tar"), &tar).unwrap();
        let rows = |src: &dyn Source| -> Vec<String> {
            match src.len() {
                Some(n) => (0..n)
                    .map(|i| format!("{:?}", src.get(i).unwrap()))
                    .collect(),
                None => src
                    .stream()
                    .unwrap()
                    .map(|s| {
                        let mut s = s.unwrap();
                        s.remove("__url__");
                        format!("{s:?}")
                    })
                    .collect(),
            }
        };
        let lines = |p: String| LinesSource::open(&[p], LinesFormat::Jsonl, Utf8Errors::Strict);
        let want_jsonl = rows(&lines(at("plain.jsonl")).unwrap());
        let want_csv = rows(&CsvSource::open(&[at("plain.csv")], &Default::default()).unwrap());
        let want_tar = rows(&WebDatasetSource::open(&[at("plain.tar")], None).unwrap());
        assert_eq!(
            (want_jsonl.len(), want_csv.len(), want_tar.len()),
            (3, 3, 2)
        );
        for (codec, ext) in CODECS {
            std::fs::write(at(&format!("x.jsonl.{ext}")), compress(codec, jsonl)).unwrap();
            std::fs::write(at(&format!("x.csv.{ext}")), compress(codec, csv)).unwrap();
            std::fs::write(at(&format!("x.tar.{ext}")), compress(codec, &tar)).unwrap();
            let src = lines(at(&format!("x.jsonl.{ext}"))).unwrap();
            assert_eq!(rows(&src), want_jsonl, "{codec:?}");
            // Random access reads the decompressed copy, in any order.
            assert_eq!(
                src.get(2).unwrap().get("a"),
                Some(&sluice_core::Value::Int(3))
            );
            let csv = CsvSource::open(&[at(&format!("x.csv.{ext}"))], &Default::default());
            assert_eq!(rows(&csv.unwrap()), want_csv, "{codec:?}");
            let wds = WebDatasetSource::open(&[at(&format!("x.tar.{ext}"))], None).unwrap();
            assert_eq!(rows(&wds), want_tar, "{codec:?}");
        }
        // Directories list the compressed files with the plain ones.
        let d = dir.path().display().to_string();
        let all = CsvSource::open(std::slice::from_ref(&d), &Default::default()).unwrap();
        assert_eq!(all.len(), Some(12));
        let shards = WebDatasetSource::open(std::slice::from_ref(&d), None).unwrap();
        assert_eq!(rows(&shards).len(), 8);
    }

    #[test]
    fn damaged_compressed_sources_fail_naming_the_file() {
        use crate::{CsvSource, LinesFormat, LinesSource, Utf8Errors, WebDatasetSource};
        use sluice_core::Source;
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..50_000u32)
            .flat_map(|i| format!("{i},x{i}\n").into_bytes())
            .collect();
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_cksum();
        tar.append_data(&mut h, "big.txt", &body[..]).unwrap();
        let tar = tar.into_inner().unwrap();
        for name in ["t.txt.gz", "t.csv.gz", "t.tar.gz"] {
            let full = compress(Codec::Gzip, if name == "t.tar.gz" { &tar } else { &body });
            let p = dir.path().join(name);
            std::fs::write(&p, &full[..full.len() / 2]).unwrap();
            let p = p.display().to_string();
            let e = match name {
                "t.txt.gz" => LinesSource::open(
                    std::slice::from_ref(&p),
                    LinesFormat::Text,
                    Utf8Errors::Strict,
                )
                .unwrap_err(),
                "t.csv.gz" => {
                    CsvSource::open(std::slice::from_ref(&p), &Default::default()).unwrap_err()
                }
                _ => WebDatasetSource::open(std::slice::from_ref(&p), None)
                    .unwrap()
                    .stream()
                    .unwrap()
                    .find_map(|s| s.err())
                    .unwrap(),
            };
            let msg = e.to_string();
            assert!(matches!(e, Error::Data(_)), "{name}: {e:?}");
            assert!(msg.contains(&p) && msg.contains("gzip"), "{name}: {msg}");
        }
    }
}
