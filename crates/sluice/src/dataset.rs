//! The chainable, immutable pipeline description.

use std::sync::Arc;

use sluice_core::*;
use sluice_io::{FilesSource, LabelMode, LinesFormat, LinesSource, Utf8Errors};

/// An immutable pipeline; every step returns a new `Dataset`.
///
/// ```
/// use sluice::{Dataset, IterOptions, OpSpec};
/// let ds = Dataset::range(10).map(OpSpec::Noop.build()?, OnError::Raise, None)?.take(3);
/// assert_eq!(ds.iter(&IterOptions::default())?.count(), 3);
/// # use sluice::OnError;
/// # Ok::<(), sluice::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dataset {
    plan: Arc<LogicalPlan>,
}

/// How to run a dataset.
#[derive(Debug, Clone, Default)]
pub struct IterOptions {
    /// The seed all randomness derives from.
    pub seed: u64,
    /// Threads per parallel stage (`None`: the number of cores).
    pub num_threads: Option<usize>,
    /// Items per chunk handed between stages.
    pub chunk_size: Option<usize>,
}

impl IterOptions {
    /// The default lowering options for these settings.
    pub fn lower_options(&self) -> LowerOptions {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut o = LowerOptions {
            num_threads: self.num_threads.unwrap_or(cores),
            seed: self.seed,
            ..LowerOptions::default()
        };
        if let Some(c) = self.chunk_size {
            o.chunk_size = c.max(1);
        }
        o
    }
}

impl Dataset {
    fn wrap(plan: LogicalPlan) -> Self {
        Dataset {
            plan: Arc::new(plan),
        }
    }
    fn input(&self) -> Arc<LogicalPlan> {
        self.plan.clone()
    }
    /// A dataset reading from `source`.
    pub fn from_source(source: SourceRef) -> Self {
        Dataset::wrap(LogicalPlan::Source(SourceNode::new(source)))
    }
    /// `{id: i}` for i in 0..n.
    pub fn range(n: u64) -> Self {
        Dataset::from_source(Arc::new(RangeSource::new(n)))
    }
    /// Samples held in memory.
    pub fn from_items(items: Vec<Sample>) -> Self {
        Dataset::from_source(Arc::new(ItemsSource::new(items)))
    }
    /// `{path, bytes}` per file matched by paths, directories or globs.
    pub fn read_files(entries: &[String]) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(FilesSource::files(entries)?)))
    }
    /// `{path, bytes, label}` per image file.
    pub fn read_images(entries: &[String], labels: LabelMode) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(FilesSource::images(
            entries, labels,
        )?)))
    }
    /// `{text}` per non-empty line.
    pub fn read_text(entries: &[String], errors: Utf8Errors) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(LinesSource::open(
            entries,
            LinesFormat::Text,
            errors,
        )?)))
    }
    /// One sample per JSON object line.
    pub fn read_jsonl(entries: &[String]) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(LinesSource::open(
            entries,
            LinesFormat::Jsonl,
            Utf8Errors::Strict,
        )?)))
    }
    fn elementwise(
        &self,
        op: OpRef,
        mode: ElemMode,
        on_error: OnError,
        keep_position: Option<bool>,
    ) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Map(MapNode::try_new(
            self.input(),
            op,
            mode,
            on_error,
            keep_position,
        )?)))
    }
    /// Applies `op` to every sample.
    pub fn map(&self, op: OpRef, on_error: OnError, keep_position: Option<bool>) -> Result<Self> {
        self.elementwise(op, ElemMode::Map, on_error, keep_position)
    }
    /// Keeps samples for which `op` emits them.
    pub fn filter(&self, op: OpRef) -> Result<Self> {
        self.elementwise(op, ElemMode::Filter, OnError::Raise, None)
    }
    /// Replaces each sample by the samples `op` emits.
    pub fn flat_map(&self, op: OpRef) -> Result<Self> {
        self.elementwise(op, ElemMode::FlatMap, OnError::Raise, None)
    }
    /// Applies `op` to batches of `batch_size`; the dataset continues as samples.
    pub fn map_batches(&self, op: OpRef, batch_size: usize) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::MapBatches(
            MapBatchesNode::try_new(self.input(), op, batch_size)?,
        )))
    }
    /// Stacks samples into batches.
    pub fn batch(&self, size: usize, drop_last: bool) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Batch(BatchNode::try_new(
            self.input(),
            size,
            drop_last,
        )?)))
    }
    /// Global per-epoch shuffle of a random-access pipeline.
    pub fn shuffle(&self, seed: Option<u64>) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Shuffle(ShuffleNode::try_new(
            self.input(),
            seed,
        )?)))
    }
    /// Bounded buffer shuffle (for streams).
    pub fn shuffle_buffer(&self, size: usize, seed: Option<u64>) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::ShuffleBuffer(
            ShuffleBufferNode::try_new(self.input(), size, seed)?,
        )))
    }
    /// This rank's shard.
    pub fn shard(&self, rank: u64, world_size: u64, equal: bool) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Shard(ShardNode::try_new(
            self.input(),
            rank,
            world_size,
            equal,
        )?)))
    }
    /// Repeats for `epochs` (`None`: forever).
    pub fn repeat(&self, epochs: Option<u64>) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Repeat(RepeatNode::try_new(
            self.input(),
            epochs,
        )?)))
    }
    /// Keeps up to `n` outputs ready ahead of the consumer.
    pub fn prefetch(&self, n: usize) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Prefetch(PrefetchNode::try_new(
            self.input(),
            n,
        )?)))
    }
    /// The first `n` outputs.
    pub fn take(&self, n: u64) -> Self {
        Dataset::wrap(LogicalPlan::Take(TakeNode {
            input: self.input(),
            n,
        }))
    }
    /// The logical plan.
    pub fn plan(&self) -> &Arc<LogicalPlan> {
        &self.plan
    }
    /// The physical plan the default lowering gives.
    pub fn physical_plan(&self, opts: &IterOptions) -> Result<PhysicalPlan> {
        lower(&self.plan, &opts.lower_options())
    }
    /// Starts an iteration.
    pub fn iter(&self, opts: &IterOptions) -> Result<Execution> {
        let plan = self.physical_plan(opts)?;
        Execution::start(&plan, ExecOptions { seed: opts.seed })
    }
}
