//! The logical plan: what the user wrote, as an enum of node structs. Each node is built by a
//! checking constructor that validates arguments and derives the output fields, so a bad
//! pipeline fails when it is built, not mid-epoch.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::op::OpRef;
use crate::order::ShardSpec;
use crate::source::SourceRef;

/// How an element-wise op's result is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElemMode {
    /// One sample in, one out.
    Map,
    /// Keep or drop the sample.
    Filter,
    /// One sample in, zero or more out.
    FlatMap,
}

/// What to do when an op fails on a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Stop the iteration with an error naming the sample and the op.
    #[default]
    Raise,
    /// Drop the sample and count it in `stats()`.
    Skip,
}

impl std::str::FromStr for OnError {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "raise" => Ok(OnError::Raise),
            "skip" => Ok(OnError::Skip),
            other => Err(Error::invalid(format!(
                "on_error must be 'raise' or 'skip', got '{other}'"
            ))),
        }
    }
}

/// Field names known at build time (`None` after an op with unknown output, e.g. a UDF).
pub type Schema = Option<Arc<Vec<String>>>;

/// A source.
#[derive(Debug, Clone)]
pub struct SourceNode {
    pub source: SourceRef,
    pub schema: Schema,
}

/// `map` / `filter` / `flat_map` with one op.
#[derive(Debug, Clone)]
pub struct MapNode {
    pub input: Arc<LogicalPlan>,
    pub op: OpRef,
    pub mode: ElemMode,
    pub on_error: OnError,
    /// Pins the op in place (`Some(true)`), or allows moving a UDF (`Some(false)`).
    pub keep_position: Option<bool>,
    /// Stable id: randomness derives from it, so reordering never changes an op's draws.
    pub op_id: u64,
    pub schema: Schema,
}

/// `map_batches(fn, batch_size)`: the op sees batches; the dataset continues as samples.
#[derive(Debug, Clone)]
pub struct MapBatchesNode {
    pub input: Arc<LogicalPlan>,
    pub op: OpRef,
    pub batch_size: usize,
    pub op_id: u64,
}

/// `batch(size, drop_last)`.
#[derive(Debug, Clone)]
pub struct BatchNode {
    pub input: Arc<LogicalPlan>,
    pub size: usize,
    pub drop_last: bool,
    /// Fields padded along their first axis to the longest in the batch, with a value.
    pub pad: Vec<(String, f64)>,
    /// Fields that do not stack (mixed kinds or dtypes) become lists instead of an error.
    pub ragged: bool,
    pub schema: Schema,
}

/// `shuffle(seed)`: a global per-epoch permutation of a random-access source.
#[derive(Debug, Clone)]
pub struct ShuffleNode {
    pub input: Arc<LogicalPlan>,
    /// `None`: derive from the iteration seed.
    pub seed: Option<u64>,
    /// A new permutation every epoch (the default); false keeps one for every epoch.
    pub reshuffle_each_epoch: bool,
}

/// `shuffle_buffer(size)`: a bounded, seeded buffer shuffle for streams.
#[derive(Debug, Clone)]
pub struct ShuffleBufferNode {
    pub input: Arc<LogicalPlan>,
    pub size: usize,
    pub seed: Option<u64>,
    pub op_id: u64,
}

/// `shard(rank, world_size, equal)`.
#[derive(Debug, Clone)]
pub struct ShardNode {
    pub input: Arc<LogicalPlan>,
    pub shard: ShardSpec,
}

/// `repeat(epochs)`; `None` repeats forever.
#[derive(Debug, Clone)]
pub struct RepeatNode {
    pub input: Arc<LogicalPlan>,
    pub epochs: Option<u64>,
}

/// `prefetch(n)`: keep up to `n` outputs ready ahead of the consumer.
#[derive(Debug, Clone)]
pub struct PrefetchNode {
    pub input: Arc<LogicalPlan>,
    pub depth: usize,
}

/// `take(n)`: the first `n` outputs.
#[derive(Debug, Clone)]
pub struct TakeNode {
    pub input: Arc<LogicalPlan>,
    pub n: u64,
}

/// `pack(length)`: concatenate a token field across samples (with a separator after each) and
/// cut it into blocks of `length` tokens, GPT-style.
#[derive(Debug, Clone)]
pub struct PackNode {
    pub input: Arc<LogicalPlan>,
    pub spec: PackSpec,
    pub schema: Schema,
}

/// The longest `pack` block, in tokens (2^24, the text ops' default `max_tokens`): a block's
/// buffers are allocated whole, so an absurd length is refused when the pipeline is built.
pub const MAX_PACK_LENGTH: usize = 1 << 24;

/// What `pack` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PackSpec {
    /// Tokens per block.
    pub length: usize,
    /// The 1-D integer field to pack (also the output field).
    pub field: String,
    /// Token appended after each sample's tokens (e.g. EOS), if any.
    pub separator: Option<i64>,
    /// The last, short block of an epoch: dropped, or padded with `pad_id` (mask 0).
    pub drop_remainder: bool,
    pub pad_id: i64,
}

impl PackNode {
    /// Checks `length > 0` and that `field` exists when the fields are known; the output
    /// fields are the packed field, `attention_mask` and `segment_ids`.
    pub fn try_new(input: Arc<LogicalPlan>, spec: PackSpec) -> Result<Self> {
        if spec.length == 0 {
            return Err(Error::invalid("pack: length must be > 0"));
        }
        if spec.length > MAX_PACK_LENGTH {
            return Err(Error::invalid(format!(
                "pack: length={} makes blocks of {} tokens, above the limit of {MAX_PACK_LENGTH}",
                spec.length, spec.length
            )));
        }
        if let Some(fields) = input.schema() {
            if !fields.contains(&spec.field) {
                return Err(Error::MissingField {
                    field: spec.field.clone(),
                    op: "pack".into(),
                    available: fields.join(", "),
                });
            }
        }
        let schema = Some(Arc::new(vec![
            spec.field.clone(),
            "attention_mask".into(),
            "segment_ids".into(),
        ]));
        Ok(PackNode {
            input,
            spec,
            schema,
        })
    }
}

/// `cache(budget)`: compute the steps before it once per source sample and keep the results
/// in memory (up to `budget` bytes) for later epochs and iterations.
#[derive(Debug, Clone)]
pub struct CacheNode {
    pub input: Arc<LogicalPlan>,
    /// Bytes kept in memory.
    pub budget: u64,
    /// Bytes kept on local disk beyond that (0: none), as records of [`crate::codec`].
    pub disk_budget: u64,
}

impl CacheNode {
    /// Checks that everything before the cache is a random-access source followed by
    /// deterministic one-to-one maps (and index-level steps), so a cached sample depends on
    /// its source index alone.
    pub fn try_new(input: Arc<LogicalPlan>, budget: u64, disk_budget: u64) -> Result<Self> {
        if !input.source().random_access() {
            return Err(Error::invalid(
                "cache() needs a random-access source; a stream has no stable sample index",
            ));
        }
        for node in input.chain() {
            match &*node {
                LogicalPlan::Map(n) if n.mode == ElemMode::Map && !n.op.meta().random => {}
                LogicalPlan::Map(n) => {
                    return Err(Error::invalid(format!(
                        "cache() can only follow deterministic maps, but '{}' is random, a \
                         filter or a flat_map; put cache() before it",
                        n.op.name()
                    )))
                }
                LogicalPlan::Source(_)
                | LogicalPlan::Shuffle(_)
                | LogicalPlan::Shard(_)
                | LogicalPlan::Repeat(_)
                | LogicalPlan::Prefetch(_) => {}
                other => {
                    return Err(Error::invalid(format!(
                        "cache() must come before {}",
                        other.describe()
                    )))
                }
            }
        }
        if input.find(|n| matches!(n, LogicalPlan::Cache(_))) {
            return Err(Error::invalid("cache() may appear once in a pipeline"));
        }
        Ok(CacheNode {
            input,
            budget,
            disk_budget,
        })
    }
}

/// A pipeline, from its last step back to its source.
#[derive(Debug, Clone)]
pub enum LogicalPlan {
    Source(SourceNode),
    Map(MapNode),
    MapBatches(MapBatchesNode),
    Batch(BatchNode),
    Shuffle(ShuffleNode),
    ShuffleBuffer(ShuffleBufferNode),
    Shard(ShardNode),
    Repeat(RepeatNode),
    Prefetch(PrefetchNode),
    Take(TakeNode),
    Cache(CacheNode),
    Pack(PackNode),
}

impl SourceNode {
    /// A source node; its schema comes from the source.
    pub fn new(source: SourceRef) -> Self {
        let schema = source.fields().map(Arc::new);
        SourceNode { source, schema }
    }
}

impl MapNode {
    /// Checks that the fields the op reads exist (when known) and derives the output fields.
    pub fn try_new(
        input: Arc<LogicalPlan>,
        op: OpRef,
        mode: ElemMode,
        on_error: OnError,
        keep_position: Option<bool>,
    ) -> Result<Self> {
        let meta = op.meta();
        let in_schema = input.schema();
        if let Some(fields) = &in_schema {
            if let Some(missing) = meta.reads.iter().find(|r| !fields.contains(r)) {
                return Err(Error::MissingField {
                    field: missing.clone(),
                    op: op.name().to_string(),
                    available: fields.join(", "),
                });
            }
        }
        let schema = match (mode, in_schema) {
            (ElemMode::Filter, s) => s,
            (_, Some(fields)) => op.output_fields(&fields).map(Arc::new),
            _ => None,
        };
        Ok(MapNode {
            op_id: input.depth(),
            input,
            op,
            mode,
            on_error,
            keep_position,
            schema,
        })
    }
}

impl MapBatchesNode {
    /// Checks `batch_size > 0`.
    pub fn try_new(input: Arc<LogicalPlan>, op: OpRef, batch_size: usize) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::invalid("map_batches: batch_size must be > 0"));
        }
        Ok(MapBatchesNode {
            op_id: input.depth(),
            input,
            op,
            batch_size,
        })
    }
}

impl BatchNode {
    /// Checks `size > 0` and that the input is not already batched twice over by mistake.
    pub fn try_new(input: Arc<LogicalPlan>, size: usize, drop_last: bool) -> Result<Self> {
        if size == 0 {
            return Err(Error::invalid("batch: size must be > 0, got 0"));
        }
        let schema = input.schema();
        Ok(BatchNode {
            input,
            size,
            drop_last,
            pad: Vec::new(),
            ragged: false,
            schema,
        })
    }
    /// Pads `fields` (name, value) to the longest in each batch before stacking.
    pub fn with_pad(mut self, pad: Vec<(String, f64)>) -> Self {
        self.pad = pad;
        self
    }
    /// Makes fields that do not stack lists instead of an error ([`crate::collate_with`]).
    pub fn with_ragged(mut self, ragged: bool) -> Self {
        self.ragged = ragged;
        self
    }
}

impl ShuffleNode {
    /// Checks the input keeps random access (only a source, maps, shard and repeat below).
    pub fn try_new(input: Arc<LogicalPlan>, seed: Option<u64>) -> Result<Self> {
        if !input.random_access() {
            return Err(Error::invalid(
                "shuffle() needs a random-access input (a source with a known length, \
                 followed only by map/shard/repeat); this pipeline streams. \
                 Use shuffle_buffer(size) to shuffle a stream.",
            ));
        }
        Ok(ShuffleNode {
            input,
            seed,
            reshuffle_each_epoch: true,
        })
    }
    /// With `false`, every epoch (and every iteration) uses the same permutation — the
    /// one of data epoch 0 — instead of a new one derived from (seed, epoch).
    pub fn with_reshuffle_each_epoch(mut self, reshuffle: bool) -> Self {
        self.reshuffle_each_epoch = reshuffle;
        self
    }
}

impl ShuffleBufferNode {
    /// Checks `size > 0`.
    pub fn try_new(input: Arc<LogicalPlan>, size: usize, seed: Option<u64>) -> Result<Self> {
        if size == 0 {
            return Err(Error::invalid("shuffle_buffer: size must be > 0"));
        }
        Ok(ShuffleBufferNode {
            op_id: input.depth(),
            input,
            size,
            seed,
        })
    }
}

impl ShardNode {
    /// Checks the arguments and that the input has random access.
    pub fn try_new(
        input: Arc<LogicalPlan>,
        rank: u64,
        world_size: u64,
        equal: bool,
    ) -> Result<Self> {
        Self::with_spec(input, ShardSpec::try_new(rank, world_size, equal)?)
    }
    /// A shard node for a checked [`ShardSpec`] (one with runs of `block` positions).
    pub fn with_spec(input: Arc<LogicalPlan>, shard: ShardSpec) -> Result<Self> {
        let equal = shard.equal;
        if !input.random_access() {
            // A stream straight from its source can be dealt out by file (unequally).
            let straight = !input.find(|n| {
                !(matches!(n, LogicalPlan::Source(_) | LogicalPlan::Prefetch(_))
                    || matches!(n, LogicalPlan::Map(m) if m.mode == ElemMode::Map))
            });
            if straight && equal {
                return Err(Error::invalid(
                    "shard(equal=True) needs random access to give every rank the same number \
                     of samples, and this source streams; pass equal=False to deal its files to \
                     ranks (whole files per rank; ranks may differ in length)",
                ));
            }
            if !straight {
                return Err(Error::invalid(
                    "shard() needs a random-access input (a source with a known length, \
                     followed only by map/shuffle) or a stream straight from its source; put \
                     shard() right after the source",
                ));
            }
        }
        Ok(ShardNode { input, shard })
    }
}

impl RepeatNode {
    /// Checks `epochs > 0` and that repeat is not already below.
    pub fn try_new(input: Arc<LogicalPlan>, epochs: Option<u64>) -> Result<Self> {
        if epochs == Some(0) {
            return Err(Error::invalid(
                "repeat: epochs must be > 0 (or None for forever)",
            ));
        }
        if input.find(|p| matches!(p, LogicalPlan::Repeat(_))) {
            return Err(Error::invalid("repeat: the pipeline is already repeated"));
        }
        if input.find(|p| matches!(p, LogicalPlan::Take(_))) {
            return Err(Error::invalid(
                "repeat after take is not supported; take after repeat",
            ));
        }
        Ok(RepeatNode { input, epochs })
    }
}

impl PrefetchNode {
    /// Checks `depth > 0`.
    pub fn try_new(input: Arc<LogicalPlan>, depth: usize) -> Result<Self> {
        if depth == 0 {
            return Err(Error::invalid("prefetch: n must be > 0"));
        }
        Ok(PrefetchNode { input, depth })
    }
}

impl LogicalPlan {
    /// The node this one reads from (`None` for a source).
    pub fn input(&self) -> Option<&Arc<LogicalPlan>> {
        match self {
            LogicalPlan::Source(_) => None,
            LogicalPlan::Map(n) => Some(&n.input),
            LogicalPlan::MapBatches(n) => Some(&n.input),
            LogicalPlan::Batch(n) => Some(&n.input),
            LogicalPlan::Shuffle(n) => Some(&n.input),
            LogicalPlan::ShuffleBuffer(n) => Some(&n.input),
            LogicalPlan::Shard(n) => Some(&n.input),
            LogicalPlan::Repeat(n) => Some(&n.input),
            LogicalPlan::Prefetch(n) => Some(&n.input),
            LogicalPlan::Take(n) => Some(&n.input),
            LogicalPlan::Cache(n) => Some(&n.input),
            LogicalPlan::Pack(n) => Some(&n.input),
        }
    }
    /// This node reading from `input` instead, all else (op id, fields, arguments) kept as
    /// built: for rewrites that put a step below it that changes neither the fields nor
    /// random access (a shard), so the checks the node passed still hold. A source has no
    /// input and comes back as it is.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use sluice_core::*;
    /// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(8)))));
    /// let batch = LogicalPlan::Batch(BatchNode::try_new(src.clone(), 2, false)?);
    /// let shard = Arc::new(LogicalPlan::Shard(ShardNode::try_new(src, 0, 2, true)?));
    /// let moved = batch.with_input(shard);
    /// assert_eq!(moved.describe(), "batch(2, drop_last=false)");
    /// assert_eq!(moved.input().unwrap().describe(), "shard(0, 2, equal=true)");
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn with_input(&self, input: Arc<LogicalPlan>) -> LogicalPlan {
        let mut out = self.clone();
        match &mut out {
            LogicalPlan::Source(_) => {}
            LogicalPlan::Map(n) => n.input = input,
            LogicalPlan::MapBatches(n) => n.input = input,
            LogicalPlan::Batch(n) => n.input = input,
            LogicalPlan::Shuffle(n) => n.input = input,
            LogicalPlan::ShuffleBuffer(n) => n.input = input,
            LogicalPlan::Shard(n) => n.input = input,
            LogicalPlan::Repeat(n) => n.input = input,
            LogicalPlan::Prefetch(n) => n.input = input,
            LogicalPlan::Take(n) => n.input = input,
            LogicalPlan::Cache(n) => n.input = input,
            LogicalPlan::Pack(n) => n.input = input,
        }
        out
    }
    /// Number of nodes below this one (the source has depth 0).
    pub fn depth(&self) -> u64 {
        self.input().map_or(0, |i| i.depth() + 1)
    }
    /// The source at the bottom.
    pub fn source(&self) -> &SourceRef {
        match self {
            LogicalPlan::Source(s) => &s.source,
            other => other
                .input()
                .expect("non-source node has an input")
                .source(),
        }
    }
    /// Field names of this node's output, when known.
    pub fn schema(&self) -> Option<Arc<Vec<String>>> {
        match self {
            LogicalPlan::Source(n) => n.schema.clone(),
            LogicalPlan::Map(n) => n.schema.clone(),
            LogicalPlan::Batch(n) => n.schema.clone(),
            LogicalPlan::MapBatches(_) => None,
            LogicalPlan::Pack(n) => n.schema.clone(),
            other => other.input().and_then(|i| i.schema()),
        }
    }
    /// Whether output position `i` can be computed directly (source + 1:1 steps only).
    pub fn random_access(&self) -> bool {
        match self {
            LogicalPlan::Source(s) => s.source.random_access(),
            LogicalPlan::Map(n) => n.mode == ElemMode::Map && n.input.random_access(),
            LogicalPlan::Shuffle(n) => n.input.random_access(),
            LogicalPlan::Shard(n) => n.input.random_access(),
            LogicalPlan::Repeat(n) => n.input.random_access(),
            LogicalPlan::Prefetch(n) => n.input.random_access(),
            LogicalPlan::Cache(n) => n.input.random_access(),
            _ => false,
        }
    }
    /// Whether any node at or below this one matches `pred`.
    pub fn find(&self, pred: impl Fn(&LogicalPlan) -> bool + Copy) -> bool {
        pred(self) || self.input().is_some_and(|i| i.find(pred))
    }
    /// Nodes from the source up to this one.
    pub fn chain(self: &Arc<Self>) -> Vec<Arc<LogicalPlan>> {
        let mut out = vec![self.clone()];
        while let Some(i) = out.last().and_then(|n| n.input().cloned()) {
            out.push(i);
        }
        out.reverse();
        out
    }
    /// One line describing this node alone.
    pub fn describe(&self) -> String {
        match self {
            LogicalPlan::Source(n) => format!("{} {}", n.source.name(), n.source.spec()),
            LogicalPlan::Map(n) => {
                let verb = match n.mode {
                    ElemMode::Map => "map",
                    ElemMode::Filter => "filter",
                    ElemMode::FlatMap => "flat_map",
                };
                let mut s = format!("{verb}({})", n.op.name());
                if n.on_error == OnError::Skip {
                    s.push_str(" on_error=skip");
                }
                if n.keep_position == Some(true) {
                    s.push_str(" keep_position");
                }
                s
            }
            LogicalPlan::MapBatches(n) => {
                format!("map_batches({}, batch_size={})", n.op.name(), n.batch_size)
            }
            LogicalPlan::Batch(n) => {
                let mut s = format!("batch({}, drop_last={}", n.size, n.drop_last);
                if !n.pad.is_empty() {
                    s.push_str(&format!(", pad={:?}", n.pad));
                }
                if n.ragged {
                    s.push_str(", ragged=true");
                }
                s + ")"
            }
            // The flag shows only when off, so fingerprints of earlier pipelines stand.
            LogicalPlan::Shuffle(n) if !n.reshuffle_each_epoch => {
                format!("shuffle(seed={:?}, reshuffle_each_epoch=false)", n.seed)
            }
            LogicalPlan::Shuffle(n) => format!("shuffle(seed={:?})", n.seed),
            LogicalPlan::ShuffleBuffer(n) => format!("shuffle_buffer({})", n.size),
            LogicalPlan::Shard(n) => format!(
                "shard({}, {}, equal={}{})",
                n.shard.rank,
                n.shard.world_size,
                n.shard.equal,
                match n.shard.block {
                    1 => String::new(),
                    b => format!(", block={b}"),
                }
            ),
            LogicalPlan::Repeat(n) => format!("repeat({:?})", n.epochs),
            LogicalPlan::Prefetch(n) => format!("prefetch({})", n.depth),
            LogicalPlan::Take(n) => format!("take({})", n.n),
            LogicalPlan::Cache(n) => format!("cache(budget={})", n.budget),
            LogicalPlan::Pack(n) => format!(
                "pack({}, field={}, separator={:?}, drop_remainder={}, pad_id={})",
                n.spec.length, n.spec.field, n.spec.separator, n.spec.drop_remainder, n.spec.pad_id
            ),
        }
    }
}

impl fmt::Display for LogicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(input) = self.input() {
            writeln!(f, "{input}")?;
            write!(f, "  -> ")?;
        }
        write!(f, "{}", self.describe())
    }
}
