//! Portable stages: a [`StageWork`] as JSON another process rebuilds and runs.
//!
//! The main process makes a [`RemoteStage`] (the stage's init JSON, and the conversion of
//! chunks to request frames and of reply frames back to chunks); a worker — a process of
//! the pool, a Ray actor — makes a [`StageRunner`] from that JSON and answers frames. Both
//! sides run the same [`StageWork::run_here`], with randomness derived from (seed, epoch,
//! index, op id), so where a chunk runs never changes its output.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::exec::StageWork;
//! use sluice_core::*;
//! use sluice_remote::{RemoteStage, StageRunner};
//! let stats = Arc::new(PipelineStats::new(vec![]));
//! let op = sluice_ops::OpSpec::Select { fields: vec!["id".into()] }.build()?;
//! let work = StageWork {
//!     read: Some(Arc::new(RangeSource::new(10))),
//!     ops: vec![ChainOp { op, mode: ElemMode::Map, on_error: OnError::Raise, op_id: 1 }],
//!     seed: 0, skip: Default::default(), slot: 0, stats,
//! };
//! let main = RemoteStage::new(&work, None)?;
//! let worker = StageRunner::new(main.init(), &|_| Ok(None), None)?; // in another process
//! let items: Vec<Item> = (0..3).map(|i| {
//!     let c = Cursor { epoch: 0, pos: i, ord: 0 };
//!     Item { epoch: 0, index: i, sub: 0, source_index: i, rows: 1, cursor: c,
//!            ..Default::default() }
//! }).collect();
//! let out = main.reply(&worker.run(&main.request(items, None)?), None)?;
//! assert_eq!(out[2].sample.get("id"), Some(&Value::Int(2)));
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::exec::{Chunk, Skip, StageWork};
use sluice_core::stats::StageInfo;
use sluice_core::{ChainOp, ElemMode, Error, OnError, OpRef, PipelineStats, Result};
use sluice_io::store::cache::{adopt_versions, versions_of, KnownVersion};
use sluice_io::SourceSpec;

use crate::shm::{ShmConfig, ShmWriter};
use crate::wire::{self, ExternalCodec, Output, SplitFrame};

/// Version of the init JSON; a worker refuses another.
pub const PACKAGE_VERSION: u32 = 1;

/// One op in portable form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShippedOp {
    /// [`sluice_core::Op::ship`]: a built-in op's spec, or e.g. `{"op": "python", ...}`.
    pub op: serde_json::Value,
    pub mode: ElemMode,
    pub on_error: OnError,
    pub op_id: u64,
}

/// A stage in portable form (the init message of a worker).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagePackage {
    pub version: u32,
    /// The source to read samples from ([`sluice_core::Source::ship`], a serialized
    /// [`SourceSpec`]); `None` when items arrive with their samples.
    pub source: Option<serde_json::Value>,
    pub ops: Vec<ShippedOp>,
    pub seed: u64,
    /// When resuming: outputs already delivered, dropped by the worker.
    #[serde(default)]
    pub skip: Skip,
    /// Where the worker puts big reply buffers (same host only); `None`: inline.
    #[serde(default)]
    pub shm: Option<ShmConfig>,
    /// The stage's name in plans, for messages.
    #[serde(default)]
    pub label: String,
    /// The versions of the source's objects as the job listed them
    /// ([`sluice_io::store::cache::versions_of`]): a worker reads those, whatever it saw of
    /// them before, and they are part of the stage's content (its keys).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<KnownVersion>,
    /// How many of the source's objects the job knew no version of (named by URL, never
    /// listed nor opened): their content is not pinned by the package.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unversioned: u64,
    /// The local files the source names as the job saw them (hash of the path, size,
    /// modification time in ns), once pinned ([`pin_local_files`]): part of the stage's
    /// content, so a job that starts after a file was rewritten gets a stage of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<[u64; 3]>,
}

/// `init` with the local files its source names pinned (`files`): their sizes and
/// modification times as this process sees them now. What a shared service's job does
/// before it connects, since the service's stages outlive any one job; one `stat` per file.
///
/// ```
/// use sluice_remote::stage::{pin_local_files, StagePackage, PACKAGE_VERSION};
/// let file = std::env::temp_dir().join("sluice-doc-pin.txt");
/// std::fs::write(&file, "one\n").unwrap();
/// let init = serde_json::json!({"version": PACKAGE_VERSION, "ops": [], "seed": 0,
///     "source": {"source": "read_files", "paths": [file.display().to_string()]}});
/// let pinned = pin_local_files(&init.to_string())?;
/// let files = StagePackage::from_json(&pinned)?.files;
/// assert_eq!((files.len(), files[0][1]), (1, 4)); // one file of 4 bytes
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn pin_local_files(init: &str) -> Result<String> {
    let mut package = StagePackage::from_json(init)?;
    package.files = package.source.as_ref().map(local_files).unwrap_or_default();
    serde_json::to_string(&package)
        .map_err(|e| Error::Internal(format!("cannot serialise the stage: {e}")))
}

/// The local files and directories a shipped source names, with their size and
/// modification time (hash of the path, size, ns); those that do not stat are left out.
pub fn local_files(spec: &serde_json::Value) -> Vec<[u64; 3]> {
    (named_paths(spec).1.into_iter())
        .filter_map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            let mtime = (meta.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            Some([crate::service::key::name_hash(path), meta.len(), mtime])
        })
        .collect()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The objects (URLs) and local paths a shipped source names, as far as its JSON says
/// ([`sluice_core::source::spec_strings`]: its strings, less its object cache's settings).
pub fn named_paths(spec: &serde_json::Value) -> (Vec<&str>, Vec<&str>) {
    sluice_core::source::spec_strings(spec).partition(|s| s.contains("://"))
}

/// Rebuilds ops that are not built-in (e.g. Python UDFs); `Ok(None)` means "not mine".
pub type OpLoader<'a> = dyn Fn(&serde_json::Value) -> Result<Option<OpRef>> + 'a;

/// The stage's name as plans print it (`read+decode+my_udf`).
pub fn stage_label(work: &StageWork) -> String {
    let mut names: Vec<String> = Vec::new();
    if work.read.is_some() {
        names.push("read".into());
    }
    names.extend(work.ops.iter().map(|o| match o.mode {
        ElemMode::Map => o.op.name().to_string(),
        ElemMode::Filter => format!("filter({})", o.op.name()),
        ElemMode::FlatMap => format!("flat_map({})", o.op.name()),
    }));
    names.join("+")
}

impl StagePackage {
    /// The portable form of `work`. Sources that cannot be reopened elsewhere are left out
    /// (the caller reads samples before sending items; see [`RemoteStage`]).
    pub fn of(work: &StageWork) -> Result<StagePackage> {
        let ops = work
            .ops
            .iter()
            .map(|c| {
                Ok(ShippedOp {
                    op: c.op.ship()?,
                    mode: c.mode,
                    on_error: c.on_error,
                    op_id: c.op_id,
                })
            })
            .collect::<Result<_>>()?;
        let source = work.read.as_ref().and_then(|s| s.ship());
        let (versions, unversioned) = match &source {
            Some(spec) => versions_of(named_paths(spec).0),
            None => (Vec::new(), 0),
        };
        Ok(StagePackage {
            version: PACKAGE_VERSION,
            source,
            ops,
            seed: work.seed,
            skip: work.skip.clone(),
            shm: None,
            label: stage_label(work),
            versions,
            unversioned: unversioned as u64,
            files: Vec::new(),
        })
    }

    /// Parses an init message.
    pub fn from_json(text: &str) -> Result<StagePackage> {
        let p: StagePackage = serde_json::from_str(text)
            .map_err(|e| Error::Internal(format!("bad stage package: {e}")))?;
        if p.version != PACKAGE_VERSION {
            return Err(Error::Internal(format!(
                "stage package version {} (this worker speaks {PACKAGE_VERSION}): \
                 the worker runs another sluice version",
                p.version
            )));
        }
        Ok(p)
    }

    /// Rebuilds the stage in this process, with its own statistics (stage slot 0).
    pub fn open(&self, load_op: &OpLoader) -> Result<StageWork> {
        let read = self
            .source
            .as_ref()
            .map(|spec| SourceSpec::from_json(spec)?.open())
            .transpose()?;
        if let Some(spec) = &self.source {
            // After the source opened (which notes or forgets versions of its own): a worker
            // that outlives its jobs reads what this job listed, not what it saw for another.
            adopt_versions(named_paths(spec).0, &self.versions);
        }
        let ops = self
            .ops
            .iter()
            .map(|s| {
                Ok(ChainOp {
                    op: open_op(&s.op, load_op)?,
                    mode: s.mode,
                    on_error: s.on_error,
                    op_id: s.op_id,
                })
            })
            .collect::<Result<_>>()?;
        Ok(StageWork {
            read,
            ops,
            seed: self.seed,
            skip: self.skip.clone(),
            slot: 0,
            stats: Arc::new(stage_stats(&self.label)),
        })
    }
}

fn stage_stats(label: &str) -> PipelineStats {
    PipelineStats::new(vec![StageInfo {
        name: label.to_string(),
        threads: 1,
        inline: true,
        queue_capacity: 0,
        pool: None,
    }])
}

/// Rebuilds an op: by `load_op` if it claims it, else as a built-in [`sluice_ops::OpSpec`].
pub fn open_op(shipped: &serde_json::Value, load_op: &OpLoader) -> Result<OpRef> {
    if let Some(op) = load_op(shipped)? {
        return Ok(op);
    }
    let spec: sluice_ops::OpSpec = serde_json::from_value(shipped.clone())
        .map_err(|e| Error::invalid(format!("cannot rebuild op {shipped}: {e}")))?;
    spec.build()
}

/// The main process's side of a stage that runs elsewhere: the init JSON for its workers,
/// and chunks to request frames and reply frames back to chunks (with the stage's skip
/// counts added to the pipeline's statistics).
pub struct RemoteStage {
    package: StagePackage,
    init: String,
    /// Reads samples here first when the source cannot be reopened by workers.
    local_read: Option<StageWork>,
    work: StageWork,
}

impl RemoteStage {
    /// Prepares `work` for remote workers; with `shm`, workers put big reply buffers in
    /// shared memory under that prefix (each worker adds its own pid).
    pub fn new(work: &StageWork, shm: Option<ShmConfig>) -> Result<RemoteStage> {
        let mut package = StagePackage::of(work)?;
        package.shm = shm;
        let local_read = match (&work.read, &package.source) {
            (Some(_), None) => Some(StageWork {
                ops: vec![],
                skip: Default::default(),
                ..work.clone()
            }),
            _ => None,
        };
        let init = serde_json::to_string(&package)
            .map_err(|e| Error::Internal(format!("cannot serialise the stage: {e}")))?;
        Ok(RemoteStage {
            package,
            init,
            local_read,
            work: work.clone(),
        })
    }
    /// The init message every worker of the stage receives.
    pub fn init(&self) -> &str {
        &self.init
    }
    /// The stage's name, for messages.
    pub fn label(&self) -> &str {
        &self.package.label
    }
    /// The request frame for `chunk` (reading its samples here when workers cannot).
    pub fn request(&self, chunk: Chunk, shm: Option<&ShmWriter>) -> Result<Vec<u8>> {
        let chunk = match &self.local_read {
            Some(read) => read.run_here(chunk)?,
            None => chunk,
        };
        Ok(wire::encode_chunk(&chunk, shm)?)
    }
    /// The chunk (or the stage's typed error) in a reply frame.
    pub fn reply(&self, frame: &[u8], codec: Option<&dyn ExternalCodec>) -> Result<Chunk> {
        self.reply_split(frame, &[], codec)
    }
    /// The chunk in a split reply ([`StageRunner::run_split_or_interrupted`]): its frame and
    /// its buffers.
    pub fn reply_split(
        &self,
        frame: &[u8],
        buffers: &[&[u8]],
        codec: Option<&dyn ExternalCodec>,
    ) -> Result<Chunk> {
        let out = wire::decode_reply_split(frame, buffers, codec)??;
        if out.skipped > 0 {
            self.work
                .stats
                .counters(self.work.slot)
                .skipped
                .fetch_add(out.skipped, Relaxed);
        }
        Ok(out.chunk)
    }
}

/// A worker's side: rebuilds the stage from its init message and answers request frames.
pub struct StageRunner {
    work: StageWork,
    shm: Option<ShmWriter>,
    codec: Option<Arc<dyn ExternalCodec>>,
}

impl StageRunner {
    /// Rebuilds the stage described by `init` ([`RemoteStage::init`]).
    pub fn new(
        init: &str,
        load_op: &OpLoader,
        codec: Option<Arc<dyn ExternalCodec>>,
    ) -> Result<StageRunner> {
        let package = StagePackage::from_json(init)?;
        let work = package.open(load_op)?;
        let shm = package.shm.as_ref().map(|c| {
            ShmWriter::new(c.with_prefix(format!("{}w{}-", c.prefix, std::process::id())))
        });
        Ok(StageRunner { work, shm, codec })
    }
    /// Runs the stage on a request frame; the reply frame carries the output chunk or the
    /// typed error (never fails itself, so the main process always gets an answer).
    pub fn run(&self, frame: &[u8]) -> Vec<u8> {
        wire::encode_reply(
            &self.answer(frame, |work, chunk| work.run_here(chunk)),
            self.shm.as_ref(),
            self.codec.as_deref(),
        )
    }
    /// [`StageRunner::run`], except that a chunk interrupted by this worker's own end (a
    /// Python `SystemExit` or `KeyboardInterrupt` raised in it: Ray stopping the actors of a
    /// node being drained, a task cancelled) is the error returned rather than an answer: the
    /// actor that raises it dies, and the main process runs the chunk again on another, as
    /// for any lost actor. Answered, it failed the run as if the sample were bad. (A process
    /// pool's worker answers it: there it is the user's Ctrl-C, for the consumer to raise.)
    pub fn run_or_interrupted(&self, frame: &[u8]) -> Result<Vec<u8>> {
        let reply =
            Self::unless_interrupted(self.answer(frame, |work, chunk| work.run_here(chunk)))?;
        Ok(wire::encode_reply(
            &reply,
            self.shm.as_ref(),
            self.codec.as_deref(),
        ))
    }
    /// [`StageRunner::run_or_interrupted`] with buffers of at least `threshold` bytes handed
    /// back beside the frame instead of copied into it (what a Ray actor returns: the object
    /// store then carries them out of band).
    pub fn run_split_or_interrupted(&self, frame: &[u8], threshold: usize) -> Result<SplitFrame> {
        self.run_split_with(frame, threshold, |work, chunk| work.run_here(chunk))
    }
    fn unless_interrupted(reply: wire::Reply) -> Result<wire::Reply> {
        match reply {
            Err(e) if matches!(e.root(), Error::Interrupted { .. }) => Err(e),
            reply => Ok(reply),
        }
    }
    /// [`StageRunner::run_split_or_interrupted`] with the chunk run by `run` (the shared
    /// service runs a cached prefix of the ops apart from the rest) on the stage's work with
    /// fresh counters. A service worker is a Ray actor too: an interruption ends it.
    pub fn run_split_with(
        &self,
        frame: &[u8],
        threshold: usize,
        run: impl FnOnce(&StageWork, Chunk) -> Result<Chunk>,
    ) -> Result<SplitFrame> {
        let reply = Self::unless_interrupted(self.answer(frame, run))?;
        Ok(wire::encode_reply_split(
            &reply,
            threshold,
            self.codec.as_deref(),
        ))
    }
    /// The stage as rebuilt here.
    pub fn work(&self) -> &StageWork {
        &self.work
    }
    fn answer(
        &self,
        frame: &[u8],
        run: impl FnOnce(&StageWork, Chunk) -> Result<Chunk>,
    ) -> wire::Reply {
        wire::decode_chunk(frame)
            .map_err(Error::from)
            .and_then(|chunk| {
                // Fresh counters per chunk, so concurrent calls report their own skips.
                let stats = Arc::new(stage_stats(""));
                let work = StageWork {
                    stats: stats.clone(),
                    ..self.work.clone()
                };
                let chunk = run(&work, chunk)?;
                Ok(Output {
                    chunk,
                    skipped: stats.counters(0).skipped.load(Relaxed),
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Item, RangeSource, Sample, SourceRef, Value};
    use sluice_ops::OpSpec;

    fn items(range: std::ops::Range<u64>) -> Chunk {
        range
            .map(|i| Item {
                epoch: 0,
                index: i,
                sub: 0,
                source_index: i,
                rows: 1,
                cursor: sluice_core::Cursor {
                    epoch: 0,
                    pos: i,
                    ord: 0,
                },
                ..Default::default()
            })
            .collect()
    }

    fn work(read: SourceRef, ops: Vec<OpSpec>) -> StageWork {
        StageWork {
            read: Some(read),
            ops: ops
                .into_iter()
                .enumerate()
                .map(|(i, s)| ChainOp {
                    op: s.build().unwrap(),
                    mode: ElemMode::Map,
                    on_error: OnError::Raise,
                    op_id: i as u64,
                })
                .collect(),
            seed: 5,
            skip: Default::default(),
            slot: 1,
            stats: Arc::new(stage_stats_n(2)),
        }
    }

    fn stage_stats_n(n: usize) -> PipelineStats {
        let info = || StageInfo {
            name: "s".into(),
            threads: 1,
            inline: false,
            queue_capacity: 1,
            pool: None,
        };
        PipelineStats::new((0..n).map(|_| info()).collect())
    }

    #[test]
    fn remote_run_equals_local_run() {
        let w = work(Arc::new(RangeSource::new(20)), vec![OpSpec::Noop]);
        let local = w.run_here(items(0..20)).unwrap();
        let main = RemoteStage::new(&w, None).unwrap();
        assert!(main.init().contains("\"range\""), "range reopens remotely");
        let runner = StageRunner::new(main.init(), &|_| Ok(None), None).unwrap();
        let frame = main.request(items(0..20), None).unwrap();
        assert!(frame.len() < 20 * 80, "items travel as indices");
        let remote = main.reply(&runner.run(&frame), None).unwrap();
        assert_eq!(
            local.iter().map(|i| &i.sample).collect::<Vec<_>>(),
            remote.iter().map(|i| &i.sample).collect::<Vec<_>>()
        );
    }

    /// Every reopenable source kind reads on the worker (a Parquet or CSV source used to be
    /// refused there: "cannot reopen source ... unknown variant").
    #[test]
    fn file_sources_reopen_on_the_worker() {
        let dir = tempfile::tempdir().unwrap();
        let d = |p: &str| dir.path().join(p).display().to_string();
        std::fs::write(d("a.csv"), "x,y\n1,\"p,q\"\n2,r\n3,s\n").unwrap();
        let rows = (0..3).map(|i| Ok(Sample::from_pairs([("x", Value::Int(i))])));
        sluice_io::sink::write_parquet(rows, &d("pq"), &Default::default()).unwrap();
        std::fs::write(d("a.jsonl"), "{\"x\": 1}\n{\"x\": 2}\n{\"x\": 3}\n").unwrap();
        let sources: [SourceRef; 3] = [
            Arc::new(sluice_io::CsvSource::open(&[d("a.csv")], &Default::default()).unwrap()),
            Arc::new(sluice_io::ParquetSource::open(&[d("pq")], None).unwrap()),
            Arc::new(
                sluice_io::LinesSource::open(
                    &[d("a.jsonl")],
                    sluice_io::LinesFormat::Jsonl,
                    Default::default(),
                )
                .unwrap(),
            ),
        ];
        for src in sources {
            let name = src.name().to_string();
            let select = OpSpec::Select {
                fields: vec!["x".into()],
            };
            let w = work(src, vec![select]);
            let main = RemoteStage::new(&w, None).unwrap();
            assert!(main.init().contains(&name), "{name} reopens remotely");
            let runner = StageRunner::new(main.init(), &|_| Ok(None), None).unwrap();
            let frame = main.request(items(0..3), None).unwrap();
            let remote = main.reply(&runner.run(&frame), None).unwrap();
            let local = w.run_here(items(0..3)).unwrap();
            assert_eq!(
                local.iter().map(|i| &i.sample).collect::<Vec<_>>(),
                remote.iter().map(|i| &i.sample).collect::<Vec<_>>(),
                "{name}"
            );
        }
    }

    #[test]
    fn split_replies_equal_framed_replies() {
        let samples = (0..4u8)
            .map(|i| {
                let t = sluice_core::Tensor::new(
                    vec![100, 1000],
                    sluice_core::TensorData::U8(vec![i; 100_000]),
                );
                Sample::from_pairs([("img", Value::Tensor(t.unwrap()))])
            })
            .collect();
        let w = work(
            Arc::new(sluice_core::ItemsSource::new(samples)),
            vec![OpSpec::Noop],
        );
        let main = RemoteStage::new(&w, None).unwrap();
        let runner = StageRunner::new(main.init(), &|_| Ok(None), None).unwrap();
        let frame = main.request(items(0..4), None).unwrap();
        let framed = main.reply(&runner.run(&frame), None).unwrap();
        let split = runner.run_split_or_interrupted(&frame, 1).unwrap();
        assert_eq!(split.buffers.len(), 4);
        assert!(
            split.frame.len() < 4 * 1000,
            "tensors travel beside the frame"
        );
        let bufs: Vec<&[u8]> = split.buffers.iter().map(|b| b.bytes()).collect();
        let got = main.reply_split(&split.frame, &bufs, None).unwrap();
        assert_eq!(
            framed.iter().map(|i| &i.sample).collect::<Vec<_>>(),
            got.iter().map(|i| &i.sample).collect::<Vec<_>>()
        );
    }

    #[test]
    fn unshippable_sources_are_read_in_the_main_process() {
        let samples = (0..4)
            .map(|i| Sample::from_pairs([("x", Value::Int(i * 10))]))
            .collect();
        let w = work(Arc::new(sluice_core::ItemsSource::new(samples)), vec![]);
        let main = RemoteStage::new(&w, None).unwrap();
        let runner = StageRunner::new(main.init(), &|_| Ok(None), None).unwrap();
        let out = main
            .reply(&runner.run(&main.request(items(0..4), None).unwrap()), None)
            .unwrap();
        assert_eq!(out[3].sample.get("x"), Some(&Value::Int(30)));
    }

    #[test]
    fn errors_come_back_typed_with_op_and_sample() {
        let w = work(
            Arc::new(RangeSource::new(3)),
            vec![OpSpec::Select {
                fields: vec!["nope".into()],
            }],
        );
        let main = RemoteStage::new(&w, None).unwrap();
        let runner = StageRunner::new(main.init(), &|_| Ok(None), None).unwrap();
        let local = w.run_here(items(0..3)).unwrap_err();
        let remote = main
            .reply(&runner.run(&main.request(items(0..3), None).unwrap()), None)
            .unwrap_err();
        assert_eq!(local.to_string(), remote.to_string());
        assert!(matches!(remote, Error::InSample { .. }));
        assert!(matches!(remote.root(), Error::MissingField { .. }));
    }

    #[test]
    fn bad_init_is_a_clear_error() {
        assert!(StageRunner::new("{}", &|_| Ok(None), None).is_err());
        let mut p = StagePackage::of(&work(Arc::new(RangeSource::new(1)), vec![])).unwrap();
        p.ops.push(ShippedOp {
            op: serde_json::json!({"op": "python", "name": "f"}),
            mode: ElemMode::Map,
            on_error: OnError::Raise,
            op_id: 0,
        });
        let text = serde_json::to_string(&p).unwrap();
        let err = StageRunner::new(&text, &|_| Ok(None), None).err().unwrap();
        assert!(err.to_string().contains("python"), "{err}");
    }

    #[test]
    fn named_paths_leave_out_the_object_caches_settings() {
        let spec = serde_json::json!({"source": "read_files",
            "paths": ["s3://b/x.bin", "/data/y.bin"], "cache": {"dir": "/cache"}});
        assert_eq!(
            named_paths(&spec),
            (vec!["s3://b/x.bin"], vec!["/data/y.bin", "read_files"])
        );
    }

    /// A worker that saw one version of an object reads the one the job listed: it adopts the
    /// package's versions when it opens the stage, and forgets what it saw of the objects the
    /// job knew nothing of.
    #[test]
    fn a_worker_takes_the_jobs_versions_of_its_objects() {
        use sluice_io::store::cache::{saw, versions_of};
        let (a, b) = ("s3://versions-test/a.bin", "s3://versions-test/b.bin");
        saw(a, 5, Some("\"listed\""));
        let (listed, unknown) = versions_of([a, b]);
        assert_eq!((listed.len(), unknown), (1, 1));
        // In the worker's process (here the same one): it saw other versions of both.
        saw(a, 5, Some("\"older\""));
        saw(b, 7, Some("\"older\""));
        let package = StagePackage {
            version: PACKAGE_VERSION,
            source: Some(serde_json::json!({"source": "read_files", "paths": [a, b],
                "cache": {"limit": 0}})),
            ops: vec![],
            seed: 0,
            skip: Default::default(),
            shm: None,
            label: "read".into(),
            versions: listed.clone(),
            unversioned: 1,
            files: vec![],
        };
        let shipped = serde_json::to_string(&package).unwrap();
        StagePackage::from_json(&shipped)
            .unwrap()
            .open(&|_| Ok(None))
            .unwrap();
        assert_eq!(versions_of([a, b]), (listed, 1));
    }

    /// A service's job pins the local files it reads: the same files give the same stage
    /// key; a file rewritten (here with the same size) gives another.
    #[test]
    fn pinned_local_files_are_part_of_the_stage_key() {
        use crate::service::key::stage_key;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\n").unwrap();
        let init = serde_json::json!({"version": PACKAGE_VERSION, "ops": [], "seed": 0,
            "source": {"source": "read_files", "paths": [file.display().to_string()]}})
        .to_string();
        let pinned = pin_local_files(&init).unwrap();
        assert_eq!(StagePackage::from_json(&pinned).unwrap().files.len(), 1);
        let key = stage_key(&pinned).unwrap();
        assert_eq!(stage_key(&pin_local_files(&init).unwrap()).unwrap(), key);
        assert_ne!(stage_key(&init).unwrap(), key);
        std::fs::write(&file, "two\n").unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(later)
            .unwrap();
        assert_ne!(stage_key(&pin_local_files(&init).unwrap()).unwrap(), key);
    }
}
