//! Sources: where samples come from. Random-access sources let shuffle and shard work on
//! indices (O(1) memory, no reading ahead); streaming sources only iterate.

use std::fmt;
use std::sync::Arc;

use crate::error::Result;
use crate::sample::Sample;

/// An iterator over a streaming source's samples.
pub type SampleStream = Box<dyn Iterator<Item = Result<Sample>> + Send>;

/// Starts the iteration of an input pipeline a source reads whole ([`Source::prepare_with`]):
/// the logical plan, its seed and threads per parallel stage.
pub type InputRunner<'a> =
    dyn Fn(&Arc<crate::LogicalPlan>, u64, usize) -> Result<crate::Execution> + 'a;

/// A source of samples.
///
/// ```
/// use sluice_core::{RangeSource, Source};
/// let r = RangeSource::new(5);
/// assert_eq!(r.len(), Some(5));
/// assert_eq!(r.get(3).unwrap().get("id").unwrap().as_int(), Some(3));
/// ```
// `len` is `Option`al (streams have none), so an `is_empty` would be ambiguous.
#[allow(clippy::len_without_is_empty)]
pub trait Source: Send + Sync + fmt::Debug {
    /// The API name (`range`, `read_images`, ...).
    fn name(&self) -> &str;
    /// How the source prints: plans show it, checkpoints fingerprint it, caches key on it.
    /// For a reopenable source, the summary of its [`Source::ship`] spec (counts rather than
    /// file lists: `sluice_io::SourceSpec::summary`); in-memory sources describe themselves.
    fn spec(&self) -> serde_json::Value;
    /// Number of samples, when known without reading everything.
    fn len(&self) -> Option<u64>;
    /// [`Source::len`] when it is known without running anything: what `len(ds)` reports.
    /// The same as `len` except for a blocking source (sort, groupby), whose `len` runs its
    /// input; it answers from its input's plan, or not at all.
    fn planned_len(&self) -> Option<u64> {
        self.len()
    }
    /// The class names a `label` field indexes (`read_images(labels="parent_dir")`: the
    /// sorted parent-directory names), when the source assigns labels.
    fn class_names(&self) -> Option<Vec<String>> {
        None
    }
    /// Whether [`Source::get`] works (the format allows random access).
    fn random_access(&self) -> bool {
        self.len().is_some()
    }
    /// Field names every sample has, when known (used to check pipelines at build time).
    fn fields(&self) -> Option<Vec<String>> {
        None
    }
    /// Sample `index` (0-based) of a random-access source.
    fn get(&self, index: u64) -> Result<Sample>;
    /// A hint: the samples at `indices` were just queued and will be read soon (by
    /// [`Source::get_many`], in a worker). Sources whose reads wait on a network (objects in a
    /// bucket) start fetching them now; the default does nothing. It must not block.
    fn will_need(&self, indices: &[u64]) {
        let _ = indices;
    }
    /// How many items past those already queued [`Source::will_need`] should name. Sources
    /// whose items are small parts of one request (Parquet rows of a row group) ask for more
    /// than the queues hold, so their requests start a latency ahead of need. Default 0.
    fn will_need_ahead(&self) -> u64 {
        0
    }
    /// Samples at `indices`, in that order (one result each). Readers call this with a
    /// chunk's indices; sources that decode in blocks (Parquet row groups) override it to
    /// look each block up once per run of neighbouring indices instead of once per sample.
    fn get_many(&self, indices: &[u64]) -> Vec<Result<Sample>> {
        indices.iter().map(|&i| self.get(i)).collect()
    }
    /// Whether [`Source::get_batch`] builds batches column by column (from columnar
    /// storage), cheaper than collating rows: a `batch()` straight after such a source then
    /// reads its rows itself and no per-row sample is made.
    fn columnar(&self) -> bool {
        false
    }
    /// The batch of the samples at `indices`: exactly what collating [`Source::get_many`]'s
    /// rows gives ([`crate::collate`]). Columnar sources override it.
    fn get_batch(&self, indices: &[u64]) -> Result<Sample> {
        let rows = self
            .get_many(indices)
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        crate::collate(&rows)
    }
    /// [`Source::get_batch`] for a batch that goes straight to the consumer: columnar sources
    /// may return [`crate::Column`]s (their decoded arrays, no value per row).
    fn get_columns(&self, indices: &[u64]) -> Result<Sample> {
        self.get_batch(indices)
    }
    /// The whole source in order as batches of at most `rows` rows holding its own columns
    /// ([`crate::Column`]s, as [`Source::get_columns`] gives), read ahead by `threads`
    /// threads — or `None` if it has no such scan. A pipeline that is only this source and
    /// goes to Arrow (`to_arrow`) uses it: no executor stages, no per-batch hand-offs.
    fn scan_columns(&self, _threads: usize, _rows: usize) -> Option<SampleStream> {
        None
    }
    /// All samples in order; sources without random access override this.
    fn stream(&self) -> Result<SampleStream> {
        let n = self.len().unwrap_or(0);
        let this = self.clone_arc();
        Ok(Box::new((0..n).map(move |i| this.get(i))))
    }
    /// The stream of epoch `epoch` of an iteration seeded with `seed`. Sources whose order
    /// varies per epoch (WebDataset's shard-order shuffle) override this; it must be a pure
    /// function of (seed, epoch), so resuming re-reads the same prefix.
    fn stream_epoch(&self, seed: u64, epoch: u64) -> Result<SampleStream> {
        let _ = (seed, epoch);
        self.stream()
    }
    /// Does the blocking work a source needs before it can serve samples (a sort runs its
    /// whole input here), with `num_threads` threads per parallel stage of that work. Called
    /// when an iteration is planned, so its errors surface there; sources that need nothing
    /// keep the default. It must be idempotent (later calls return at once).
    fn prepare(&self, num_threads: usize) -> Result<()> {
        let _ = num_threads;
        Ok(())
    }
    /// [`Source::prepare`], running the pipeline the source reads whole (a sort's input)
    /// through `run` rather than on threads of its own: the caller plans and starts it as it
    /// does the run that asked (its processes, Ray actors, thread count), with the seed and
    /// thread count the source gives. Sources without such an input keep the default.
    /// The pipeline this source reads whole before serving samples (a sort's input), if any.
    fn input(&self) -> Option<Arc<crate::LogicalPlan>> {
        None
    }
    fn prepare_with(&self, num_threads: usize, run: &InputRunner<'_>) -> Result<()> {
        let _ = run;
        self.prepare(num_threads)
    }
    /// Samples left out when the source was opened (malformed records under
    /// `on_error="skip"`); `stats()` reports them as the source stage's skips.
    fn skipped(&self) -> u64 {
        0
    }
    /// Records a streaming source left out while reading (under `on_error="skip"`: tar
    /// members it cannot make fields of), counted over every stream of this source and its
    /// clones so far. An iteration's `stats()` reports what it added (and the bindings warn
    /// at its end); [`Source::skipped`] is for what was left out at open.
    fn skipped_reading(&self) -> u64 {
        0
    }
    /// Sizes of the contiguous partitions the samples form, when the source defines them
    /// (`repartition(n)`): sinks then write one file per partition.
    fn partitions(&self) -> Option<Vec<u64>> {
        None
    }
    /// What the source did before serving samples (a sort's runs, bytes spilled), for
    /// `stats()`; `None` when there is nothing to say.
    fn report(&self) -> Option<serde_json::Value> {
        None
    }
    /// A shared handle to this source (for streaming over `get`).
    fn clone_arc(&self) -> SourceRef;
    /// Rank `rank` of `world_size`'s part of a stream made of several files: whole files per
    /// rank, so ranks are disjoint but not equal in length. `None`: it cannot be split.
    fn shard_files(&self, _rank: u64, _world_size: u64) -> Option<Result<SourceRef>> {
        None
    }
    /// The spec another process reopens this source from — a worker process or a Ray actor
    /// then reads samples itself and items travel as indices; a pickled dataset and a
    /// pipeline file's `[source]` use it too. It is a serialized `sluice_io::SourceSpec`
    /// (this crate cannot name that type) and only `sluice_io::SourceSpec::open` reads it.
    /// `None` when the data lives only here (`from_items`, `from_arrow`, a sort's rows): it
    /// cannot be reopened and samples must be sent.
    fn ship(&self) -> Option<serde_json::Value> {
        None
    }
    /// A digest of which data the source reads, in which order — the files and objects its
    /// [`Source::ship`] names, with its other text options, less its object cache's settings
    /// — so a checkpoint is not resumed over a listing whose positions name other samples (a
    /// file added and another removed leave the count the same). `None` when it cannot tell.
    fn data_digest(&self) -> Option<String> {
        self.ship().map(|spec| strings_digest(&spec))
    }
}

/// The strings of a shipped source spec, in order, less those under a `cache` key (the object
/// cache's settings: where copies live, not which data): the paths and URLs it names and its
/// text options.
///
/// ```
/// use serde_json::json;
/// let spec = json!({"source": "read_files", "paths": ["a.jpg", "s3://b/c.jpg"], "cache": {"dir": "/x"}});
/// let got: Vec<&str> = sluice_core::source::spec_strings(&spec).collect();
/// assert_eq!(got, ["a.jpg", "s3://b/c.jpg", "read_files"]);
/// ```
pub fn spec_strings(spec: &serde_json::Value) -> impl Iterator<Item = &str> {
    let mut stack = vec![spec];
    std::iter::from_fn(move || {
        while let Some(v) = stack.pop() {
            match v {
                serde_json::Value::String(s) => return Some(s.as_str()),
                serde_json::Value::Array(items) => stack.extend(items.iter().rev()),
                serde_json::Value::Object(map) => stack.extend(
                    (map.iter().rev())
                        .filter(|(k, _)| k.as_str() != "cache")
                        .map(|(_, v)| v),
                ),
                _ => {}
            }
        }
        None
    })
}

/// A 64-bit digest (hex) of [`spec_strings`]: what [`Source::data_digest`] compares. Numbers
/// are left out: a rank or a world size may change between a checkpoint and its elastic
/// resume.
///
/// ```
/// use sluice_core::source::strings_digest;
/// use serde_json::json;
/// let a = json!({"paths": ["a.jpg", "b.jpg"], "cache": {"dir": "/x"}, "rank": 0});
/// let b = json!({"paths": ["a.jpg", "b.jpg"], "cache": {"dir": "/y"}, "rank": 1});
/// let c = json!({"paths": ["a.jpg", "c.jpg"], "cache": {"dir": "/x"}, "rank": 0});
/// assert_eq!(strings_digest(&a), strings_digest(&b));
/// assert_ne!(strings_digest(&a), strings_digest(&c));
/// ```
pub fn strings_digest(spec: &serde_json::Value) -> String {
    let h = spec_strings(spec).fold(0x5eed_da7a_u64, |mut h, s| {
        // The length first, so ["ab", "c"] and ["a", "bc"] differ.
        h = crate::rng::combine(h, s.len() as u64);
        for chunk in s.as_bytes().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            h = crate::rng::combine(h, u64::from_le_bytes(word));
        }
        h
    });
    format!("{h:016x}")
}

/// A shared source.
pub type SourceRef = Arc<dyn Source>;

/// `range(n)`: samples `{id: i}` for i in 0..n.
#[derive(Debug, Clone)]
pub struct RangeSource {
    n: u64,
}

impl RangeSource {
    /// A range of `n` samples.
    pub fn new(n: u64) -> Self {
        RangeSource { n }
    }
}

impl Source for RangeSource {
    fn name(&self) -> &str {
        "range"
    }
    fn spec(&self) -> serde_json::Value {
        // `sluice_io::SourceSpec::Range`'s form (a test there pins it): too short to summarise.
        serde_json::json!({"source": "range", "n": self.n})
    }
    fn len(&self) -> Option<u64> {
        Some(self.n)
    }
    fn fields(&self) -> Option<Vec<String>> {
        Some(vec!["id".into()])
    }
    fn ship(&self) -> Option<serde_json::Value> {
        Some(self.spec())
    }
    fn get(&self, index: u64) -> Result<Sample> {
        crate::field_names!(ID = "id");
        let mut s = Sample::with_capacity(1);
        s.push_new(ID.clone(), crate::Value::Int(index as i64));
        Ok(s)
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

/// `from_items(items)`: samples held in memory.
#[derive(Debug, Clone)]
pub struct ItemsSource {
    items: Arc<Vec<Sample>>,
}

impl ItemsSource {
    /// A source over `items`.
    pub fn new(items: Vec<Sample>) -> Self {
        ItemsSource {
            items: Arc::new(items),
        }
    }
}

impl Source for ItemsSource {
    fn name(&self) -> &str {
        "from_items"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"source": "from_items", "len": self.items.len()})
    }
    fn len(&self) -> Option<u64> {
        Some(self.items.len() as u64)
    }
    fn fields(&self) -> Option<Vec<String>> {
        let first = self.items.first()?;
        let names: Vec<String> = first.names().map(str::to_string).collect();
        let same = self
            .items
            .iter()
            .all(|s| s.len() == names.len() && s.names().zip(&names).all(|(a, b)| a == b));
        same.then_some(names)
    }
    fn get(&self, index: u64) -> Result<Sample> {
        Ok(self.items[index as usize].clone())
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}
