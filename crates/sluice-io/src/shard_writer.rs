//! `write_shards`: a pipeline's output converted once into shards made for fast reading —
//! WebDataset tar shards with their member indexes (`part-00000.tar` + `part-00000.tar.idx`,
//! read back with `read_webdataset(dir, index=True)`: random access, global shuffle) or
//! Parquet files (`part-00000.parquet`, random access through their footers) — each about
//! `shard_bytes` long, then `index.json` listing them.
//!
//! Every file appears atomically (a temporary renamed into place locally, one completed
//! upload in a store); a shard's index file appears before its shard. `index.json` comes
//! first saying the folder is being written (`"complete": false`) and last naming the shards,
//! so a reader that finds it complete finds every shard it names complete, and one that finds
//! it incomplete knows the conversion is running or died ([`crate::manifest`]). Shards are cut
//! from the samples in order, so a deterministic pipeline writes the same files byte for
//! byte. Finished shards are synced or uploaded on background threads (at most
//! [`PUBLISHING`] at once) while the next one is written.
//!
//! In a tar shard a sample's fields are members `<key>.<field>`: the key is the sample's
//! `__key__` when it has one (a WebDataset read back), else its position (`0000000042`).
//! Bytes are written as they are, text as UTF-8, numbers as decimal text (WebDataset's
//! `.cls` convention), arrays as `.npy` (`<field>.npy`), lists as JSON (`<field>.json`).

use std::io::Write;
use std::sync::mpsc::{sync_channel, SyncSender};

use sluice_core::{Error, Result, Sample, Value};

use crate::show::show;
use crate::sink::{
    part_name, prepare_dir, remove_stale, value_to_json, write_parquet_parts, SinkOptions, Staging,
};
use crate::store::write_atomic;
use crate::webdataset::ShardIndex;

/// Shards published (synced or uploaded) at once, behind the one being written.
pub const PUBLISHING: usize = 3;

/// The format `write_shards` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardFormat {
    /// Tar shards with member indexes.
    Webdataset,
    /// Parquet files (zstd).
    Parquet,
}

impl ShardFormat {
    /// The name `write_shards(format=...)` takes and the manifest records.
    ///
    /// ```
    /// use sluice_io::shard_writer::ShardFormat;
    /// assert_eq!("parquet".parse::<ShardFormat>()?.name(), "parquet");
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ShardFormat::Webdataset => "webdataset",
            ShardFormat::Parquet => "parquet",
        }
    }
}

impl std::str::FromStr for ShardFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match [ShardFormat::Webdataset, ShardFormat::Parquet]
            .into_iter()
            .find(|f| f.name() == s)
        {
            Some(f) => Ok(f),
            None => Err(Error::invalid(format!(
                "format must be 'webdataset' or 'parquet', got '{}'",
                show(s)
            ))),
        }
    }
}

/// How `write_shards` cuts its output.
#[derive(Debug, Clone, Copy)]
pub struct ShardOptions {
    pub format: ShardFormat,
    /// A shard is closed once it holds this many bytes (so it passes them by at most its
    /// last sample).
    pub shard_bytes: u64,
}

/// One shard listed in `index.json`.
#[derive(Debug, Clone, serde::Serialize)]
struct Listed {
    /// Where it was written (what `write_shards` returns).
    #[serde(skip)]
    path: String,
    /// Its name in the directory.
    file: String,
    samples: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
}

/// Writes `samples` into `dir` as shards of `opts.format`; returns the shard files written.
///
/// ```
/// use sluice_core::{Sample, Value};
/// use sluice_io::shard_writer::{write_shards, ShardFormat, ShardOptions};
/// let dir = std::env::temp_dir().join("sluice-doc-shards");
/// let rows = (0..3).map(|i| Ok(Sample::from_pairs([("txt", Value::Str(format!("row {i}").into()))])));
/// let opts = ShardOptions { format: ShardFormat::Webdataset, shard_bytes: 1 << 20 };
/// let files = write_shards(rows, &dir.display().to_string(), &opts)?;
/// assert!(files[0].ends_with("part-00000.tar"));
/// assert!(dir.join("part-00000.tar.idx").exists() && dir.join("index.json").exists());
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn write_shards(
    samples: impl Iterator<Item = Result<Sample>>,
    dir: &str,
    opts: &ShardOptions,
) -> Result<Vec<String>> {
    if opts.shard_bytes == 0 {
        return Err(Error::invalid("shard_size must be > 0 bytes"));
    }
    prepare_dir(dir)?;
    let manifest_path = crate::manifest::path_in(dir);
    let format = opts.format.name();
    let json = |v: serde_json::Value| {
        serde_json::to_vec_pretty(&v).map_err(|e| Error::Internal(e.to_string()))
    };
    // Before any shard, over an earlier run's manifest (which must not name shards this run
    // replaces): one that says the folder is being written, which readers refuse until the
    // last one replaces it — or, if this run dies, until a run finishes.
    let writing = serde_json::json!({ "format": format, "complete": false });
    write_atomic(&manifest_path, json(writing)?)?;
    let listed = match opts.format {
        ShardFormat::Webdataset => write_tar_shards(samples, dir, opts.shard_bytes)?,
        ShardFormat::Parquet => write_parquet_shards(samples, dir, opts.shard_bytes)?,
    };
    let manifest = serde_json::json!({
        "format": format,
        "complete": true,
        "samples": listed.iter().map(|l| l.samples).sum::<u64>(),
        "shards": listed,
    });
    write_atomic(&manifest_path, json(manifest)?)?;
    Ok(listed.into_iter().map(|l| l.path).collect())
}

/// Syncs or uploads one finished shard.
type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// Publishes finished shards on [`PUBLISHING`] threads; the first failure is reported by
/// [`Publisher::finish`] (or by the next [`Publisher::send`]).
struct Publisher {
    tx: Option<SyncSender<Job>>,
    threads: Vec<std::thread::JoinHandle<Result<()>>>,
}

impl Publisher {
    fn new() -> Result<Self> {
        let (tx, rx) = sync_channel::<Job>(1);
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let threads = (0..PUBLISHING)
            .map(|_| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name("sluice-publish".into())
                    .spawn(move || loop {
                        let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        match job {
                            Ok(job) => job()?,
                            Err(_) => return Ok(()),
                        }
                    })
                    .map_err(|e| Error::no_thread("a shard publisher", e))
            })
            .collect::<Result<_>>()?;
        Ok(Publisher {
            tx: Some(tx),
            threads,
        })
    }

    fn send(&mut self, job: Job) -> Result<()> {
        let failed = self.tx.as_ref().is_none_or(|tx| tx.send(job).is_err());
        if failed {
            // Every thread stopped on an error: report it.
            self.finish()?;
            return Err(Error::Internal("shard publishers stopped".into()));
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.tx = None;
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            let r = t
                .join()
                .unwrap_or_else(|_| Err(Error::Internal("a shard publisher panicked".into())));
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// A writer that counts the bytes through it: where the next tar member starts.
struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct TarShard {
    dest: String,
    builder: tar::Builder<Counting<Staging>>,
    offsets: Vec<u64>,
}

impl TarShard {
    fn new(dest: String) -> Result<Self> {
        let mut builder = tar::Builder::new(Counting {
            inner: Staging::new(&dest)?,
            n: 0,
        });
        builder.mode(tar::HeaderMode::Deterministic);
        Ok(TarShard {
            dest,
            builder,
            offsets: vec![0],
        })
    }

    fn at(&self) -> u64 {
        self.builder.get_ref().n
    }

    fn add(&mut self, members: &[(String, Vec<u8>)]) -> Result<()> {
        for (name, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(0);
            self.builder
                .append_data(&mut h, name, &data[..])
                .map_err(|e| Error::io(&self.dest, e))?;
        }
        self.offsets.push(self.at());
        Ok(())
    }

    /// Ends the archive; returns the job that publishes it (its index first) and its listing.
    fn close(self) -> Result<(Job, Listed)> {
        let dest = self.dest;
        let counting = self.builder.into_inner().map_err(|e| Error::io(&dest, e))?;
        let index = ShardIndex {
            size: counting.n,
            max_member_size: crate::spec::DEFAULT_MAX_MEMBER_SIZE,
            offsets: self.offsets,
        };
        let listed = Listed {
            file: dest.rsplit('/').next().unwrap_or(&dest).to_string(),
            path: dest.clone(),
            samples: index.samples(),
            bytes: Some(counting.n),
        };
        let staging = counting.inner;
        let job = Box::new(move || {
            write_atomic(&format!("{dest}.idx"), index.to_bytes())?;
            staging.publish(&dest)
        });
        Ok((job, listed))
    }
}

fn write_tar_shards(
    samples: impl Iterator<Item = Result<Sample>>,
    dir: &str,
    shard_bytes: u64,
) -> Result<Vec<Listed>> {
    let mut publisher = Publisher::new()?;
    let mut listed = Vec::new();
    let mut shard: Option<TarShard> = None;
    let mut prev_key: Option<String> = None;
    for (position, s) in samples.enumerate() {
        let s = s?;
        let key = key_of(&s, position as u64, prev_key.as_deref())?;
        let members = members_of(&s, &key, position as u64)?;
        let open = match &mut shard {
            Some(sh) => sh,
            None => shard.insert(TarShard::new(part_name(dir, listed.len(), "tar"))?),
        };
        open.add(&members)?;
        prev_key = Some(key);
        if let Some(full) = shard.take_if(|sh| sh.at() >= shard_bytes) {
            let (job, l) = full.close()?;
            publisher.send(job)?;
            listed.push(l);
        }
    }
    if let Some(open) = shard.take() {
        let (job, l) = open.close()?;
        publisher.send(job)?;
        listed.push(l);
    }
    publisher.finish()?;
    let files: Vec<String> = listed.iter().map(|l| l.path.clone()).collect();
    remove_stale(dir, &files, "tar")?;
    let indexes: Vec<String> = files.iter().map(|f| format!("{f}.idx")).collect();
    remove_stale(dir, &indexes, "tar.idx")?;
    Ok(listed)
}

/// The member key of the sample at `position`: its `__key__`, checked to name tar members
/// that read back as this one sample, else the position.
fn key_of(s: &Sample, position: u64, prev: Option<&str>) -> Result<String> {
    let Some(v) = s.get("__key__") else {
        return Ok(format!("{position:010}"));
    };
    let Value::Str(key) = v else {
        return Err(Error::type_error(format!(
            "sample {position}: __key__ must be a string"
        )));
    };
    let last = key.rsplit('/').next().unwrap_or(key);
    let why = if key.is_empty() || last.is_empty() {
        Some("it is empty")
    } else if last.contains('.') {
        Some("its file name has a dot, which would split it")
    } else if key.starts_with('/') || key.split('/').any(|c| c == "..") || key.contains('\0') {
        Some("it is absolute, has a '..' or a NUL")
    } else if prev == Some(&**key) {
        Some("the sample before has it too, so they would read back as one")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::invalid(format!(
            "sample {position}: __key__ '{}' cannot name tar members: {why}; drop the \
             __key__ field to number the samples",
            show(key)
        ))),
        None => Ok(key.to_string()),
    }
}

/// A sample's fields as tar members `<key>.<ext>` (nulls left out).
fn members_of(s: &Sample, key: &str, position: u64) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::with_capacity(s.len());
    for (name, value) in s.iter() {
        let name: &str = name.as_ref();
        if name == "__key__" || name == "__url__" {
            continue;
        }
        if name.is_empty() || name.contains('/') || name.contains('\0') {
            return Err(Error::invalid(format!(
                "sample {position}: field '{}' cannot be a tar member's extension",
                show(name)
            )));
        }
        let (ext, data) = match value {
            Value::Null => continue,
            Value::Bytes(b) => (name.to_string(), b.to_vec()),
            Value::Str(t) => (name.to_string(), t.as_bytes().to_vec()),
            Value::Int(i) => (name.to_string(), i.to_string().into_bytes()),
            Value::Float(f) => (name.to_string(), f.to_string().into_bytes()),
            Value::Bool(b) => (name.to_string(), u8::from(*b).to_string().into_bytes()),
            Value::Tensor(t) => (format!("{name}.npy"), crate::npy::encode(t)),
            Value::Column(c) => match c.to_value()? {
                Value::Tensor(t) => (format!("{name}.npy"), crate::npy::encode(&t)),
                other => (format!("{name}.json"), json_bytes(&other, position, name)?),
            },
            other => (format!("{name}.json"), json_bytes(other, position, name)?),
        };
        out.push((format!("{key}.{ext}"), data));
    }
    Ok(out)
}

fn json_bytes(v: &Value, position: u64, field: &str) -> Result<Vec<u8>> {
    let j = value_to_json(v).map_err(|e| {
        Error::type_error(format!("sample {position}, field '{}': {e}", show(field)))
    })?;
    serde_json::to_vec(&j).map_err(|e| Error::Internal(e.to_string()))
}

/// Rows a Parquet row group holds: about 32 MiB of them (the writer's memory), as the first
/// sample's size says.
const ROW_GROUP_BYTES: u64 = 32 << 20;

fn write_parquet_shards(
    samples: impl Iterator<Item = Result<Sample>>,
    dir: &str,
    shard_bytes: u64,
) -> Result<Vec<Listed>> {
    let mut samples = samples.peekable();
    let first = match samples.peek() {
        Some(Ok(s)) => (s.nbytes() as u64).max(1),
        _ => 1,
    };
    let rows_per_group = (ROW_GROUP_BYTES / first).clamp(1, 1 << 14) as usize;
    let mut counts: Vec<u64> = Vec::new();
    let (mut part, mut bytes) = (0usize, 0u64);
    let tagged = samples.map(|s| {
        let s = s?;
        // A part is closed once it holds `shard_bytes` (of values, before compression).
        if bytes >= shard_bytes {
            (part, bytes) = (part + 1, 0);
        }
        bytes += s.nbytes() as u64;
        if counts.len() <= part {
            counts.push(0);
        }
        counts[part] += 1;
        Ok((part, s))
    });
    let opts = SinkOptions {
        rows_per_file: usize::MAX,
        rows_per_group,
    };
    let files = write_parquet_parts(tagged, dir, &opts)?;
    Ok(files
        .iter()
        .zip(counts)
        .map(|(f, samples)| Listed {
            file: f.rsplit('/').next().unwrap_or(f).to_string(),
            path: f.clone(),
            samples,
            bytes: std::fs::metadata(f).ok().map(|m| m.len()),
        })
        .collect())
}

#[cfg(test)]
#[path = "shard_writer_tests.rs"]
mod tests;
