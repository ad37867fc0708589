//! Lowering: the default translation of a logical plan into a physical plan. Index-level steps
//! (shuffle, shard, repeat) fold into the source's [`IndexOrder`]; adjacent element-wise ops
//! fuse into chains, split where GIL-bound Python ops meet GIL-free Rust ops; stateful steps
//! become their own stages. The optimizer rewrites the result further.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::order::IndexOrder;
use crate::plan::logical::{ElemMode, LogicalPlan, OnError};
use crate::plan::physical::{ChainOp, PhysicalPlan, SourceStage, Stage, StageKind, Variant};
use crate::source::SourceRef;

/// Knobs of the default lowering.
#[derive(Debug, Clone)]
pub struct LowerOptions {
    /// Threads per parallel stage.
    pub num_threads: usize,
    /// Items per chunk from the source (the first chunks). 1 by default: until the stages
    /// have measured what an item costs, a chunk of 16 two-second Python calls would hold the
    /// first output back 32 s; cheap items double their chunks per chunk from there.
    pub chunk_size: usize,
    /// Chunks may grow to this many items when items are cheap (see [`SourceStage`]).
    pub max_chunk: usize,
    /// Queue depth (in chunks) between stages.
    pub queue_depth: usize,
    /// Batches kept ready for the consumer (overridden by `prefetch(n)`).
    pub prefetch: usize,
    /// Seed of the iteration (for `shuffle()` without a seed).
    pub seed: u64,
    /// Fuse adjacent ops that offer a fused form ([`crate::Op::fuse_next`]; see
    /// [`crate::plan::fuse`]). Plans made or applied by the optimizer need it off.
    pub fuse_ops: bool,
    /// Run every stage in the consumer's thread ([`Variant::Inline`]; `num_threads=0` in
    /// Python, like PyTorch's `num_workers=0`); the source is still read on a thread of its
    /// own. Python ops then run in the thread that already holds the GIL: no GIL hand-off
    /// per chunk, no second thread taking turns with the loop. The default, background
    /// threads, is what overlaps data work with a training step that releases the GIL
    /// (waiting for the accelerator, I/O, numpy) and lets a function that releases the GIL
    /// itself (sleep, I/O) run ahead, so this is opt-in. Stages are not merged, so a
    /// checkpoint taken with threads resumes here and the other way round.
    pub in_consumer: bool,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            num_threads: 2,
            chunk_size: 1,
            max_chunk: 1024,
            queue_depth: 4,
            prefetch: 2,
            seed: 0,
            fuse_ops: true,
            in_consumer: false,
        }
    }
}

/// Most threads per parallel stage: far above any machine's cores, low enough that a typo
/// (`num_threads = 100000`) is an error rather than a run that spawns threads until memory
/// runs out.
pub const MAX_THREADS: usize = 1024;

/// The seed of a `shuffle` or `shuffle_buffer` step: its own, or the iteration's when it has
/// none. Decided here only; the physical plan carries the result, so the executor never
/// falls back to a seed of its own.
fn shuffle_seed(own: Option<u64>, opts: &LowerOptions) -> u64 {
    own.unwrap_or(opts.seed)
}

/// Lowers `plan` with the default rules: the index-level steps folded into the source's
/// order, then a stage per step, then the plan-wide defaults (inline stages, prefetch,
/// fusion).
pub fn lower(plan: &Arc<LogicalPlan>, opts: &LowerOptions) -> Result<PhysicalPlan> {
    if opts.num_threads == 0 || opts.num_threads > MAX_THREADS {
        return Err(Error::invalid(format!(
            "num_threads must be in 1..={MAX_THREADS}, got {}",
            opts.num_threads
        )));
    }
    let nodes = plan.chain();
    // Pure: it plans, never runs. A blocking source (sort, groupby, repartition) has run its
    // input before, as the planner placed it (`Source::prepare_with`); one that has not
    // runs it when its length is first asked for.
    let folded = fold_index_steps(&nodes, nodes[0].source().clone(), opts)?;
    let mut b = Stages {
        stages: Vec::new(),
        needs_read: folded.order.is_some(),
        source: folded.source,
        per_epoch: folded.repeat_after_batch,
        opts,
    };
    for node in &nodes {
        b.push(node)?;
    }
    let Stages {
        mut stages,
        needs_read,
        source,
        ..
    } = b;
    if needs_read {
        stages.push(new_stage(opts, read_only(), threads(opts)));
    }
    finish(&mut stages, &nodes, opts);
    Ok(PhysicalPlan {
        source: SourceStage {
            source,
            order: folded.order,
            stream_epochs: folded.stream_epochs,
            chunk_size: opts.chunk_size,
            max_chunk: opts.max_chunk.max(opts.chunk_size),
            queue_depth: opts.queue_depth,
        },
        stages,
        delivery: Default::default(),
    })
}

/// The source (a stream sharded by files) and the order of its positions, with the
/// index-level steps (shuffle, shard, repeat) folded in.
struct Folded {
    source: SourceRef,
    order: Option<IndexOrder>,
    stream_epochs: Option<u64>,
    /// A `repeat` after a batch: batches restart every epoch.
    repeat_after_batch: bool,
}

/// Folds the index-level steps of `nodes` into the source's order.
fn fold_index_steps(
    nodes: &[Arc<LogicalPlan>],
    mut source: SourceRef,
    opts: &LowerOptions,
) -> Result<Folded> {
    let mut order = source
        .len()
        .filter(|_| source.random_access())
        .map(|len| IndexOrder {
            len,
            shuffle: None,
            fixed_shuffle: false,
            shard: None,
            part: None,
            epochs: Some(1),
            first_epoch: 0,
            elastic: None,
        });
    let mut stream_epochs = Some(1);
    let mut repeat_after_batch = false;
    let mut seen_batch = false;
    for node in nodes {
        match &**node {
            LogicalPlan::Shuffle(n) => {
                let o = order
                    .as_mut()
                    .ok_or_else(|| Error::invalid("shuffle needs random access"))?;
                o.shuffle = Some(shuffle_seed(n.seed, opts));
                o.fixed_shuffle = !n.reshuffle_each_epoch;
            }
            LogicalPlan::Shard(n) => match order.as_mut() {
                // A second shard splits the first one's positions (DataLoader workers within
                // a rank); a third has no use.
                Some(o) => match (o.shard, o.part) {
                    (None, _) => o.shard = Some(n.shard),
                    (Some(_), None) => o.part = Some(n.shard),
                    (Some(_), Some(_)) => {
                        return Err(Error::invalid(
                            "shard: at most two shard() steps (ranks, then workers within a \
                             rank) can split one source",
                        ))
                    }
                },
                // A stream has no positions to stride over: its files are dealt to ranks.
                None if n.shard.equal => {
                    return Err(Error::invalid(format!(
                        "shard(equal=True) needs random access to give every rank the same \
                         number of samples; '{}' streams. Pass equal=False to deal its files \
                         to ranks (whole files per rank; ranks may differ in length)",
                        source.name()
                    )))
                }
                None => {
                    source = source
                        .shard_files(n.shard.rank, n.shard.world_size)
                        .unwrap_or_else(|| {
                            Err(Error::invalid(format!(
                                "'{}' streams and cannot be split by file; read it with a \
                                 random-access reader to shard it",
                                source.name()
                            )))
                        })?
                }
            },
            LogicalPlan::Repeat(n) => {
                if let Some(o) = order.as_mut() {
                    o.epochs = n.epochs;
                }
                stream_epochs = n.epochs;
                repeat_after_batch = seen_batch;
            }
            LogicalPlan::Batch(_) | LogicalPlan::MapBatches(_) => seen_batch = true,
            _ => {}
        }
    }

    Ok(Folded {
        source,
        order,
        stream_epochs,
        repeat_after_batch,
    })
}

/// A chain that only reads the source.
fn read_only() -> StageKind {
    StageKind::Chain {
        read: true,
        ops: vec![],
    }
}

fn threads(opts: &LowerOptions) -> Variant {
    Variant::Threads {
        threads: opts.num_threads,
    }
}

fn one_thread() -> Variant {
    Variant::Threads { threads: 1 }
}

fn new_stage(opts: &LowerOptions, kind: StageKind, variant: Variant) -> Stage {
    Stage {
        queue_depth: match kind {
            StageKind::Chain { .. } => opts.queue_depth.max(variant.min_depth()),
            _ => opts.queue_depth,
        },
        kind,
        variant,
    }
}

/// The stages made so far, a step at a time.
struct Stages<'a> {
    stages: Vec<Stage>,
    /// A random-access source not read yet: the first chain reads it, in parallel.
    needs_read: bool,
    /// The source, which a `cache` step replaces by a cached one.
    source: SourceRef,
    /// Batches restart every epoch (a `repeat` after them).
    per_epoch: bool,
    opts: &'a LowerOptions,
}

impl Stages<'_> {
    fn add(&mut self, kind: StageKind, variant: Variant) {
        self.stages.push(new_stage(self.opts, kind, variant));
    }

    fn push(&mut self, node: &LogicalPlan) -> Result<()> {
        if let LogicalPlan::Map(n) = node {
            self.push_op(ChainOp {
                op: n.op.clone(),
                mode: n.mode,
                on_error: n.on_error,
                op_id: n.op_id,
            });
            return Ok(());
        }
        // A batch straight after a columnar source reads it column by column (a fusion:
        // plans the optimizer makes or applies, lowered unfused, keep the read in its own
        // stage).
        let batch_reads = self.needs_read
            && self.opts.fuse_ops
            && matches!(node, LogicalPlan::Batch(_) | LogicalPlan::MapBatches(_))
            && self.source.columnar();
        if self.needs_read && !matches!(node, LogicalPlan::Source(_)) && is_stage(node) {
            if !batch_reads {
                self.add(read_only(), threads(self.opts));
            }
            self.needs_read = false;
        }
        self.push_step(node, batch_reads)
    }

    /// Adds an op to the last chain, or a new chain where GIL-bound Python ops meet
    /// GIL-free Rust ops.
    fn push_op(&mut self, op: ChainOp) {
        let python = op.op.meta().python;
        if let Some(Stage {
            kind: StageKind::Chain { ops, .. },
            ..
        }) = self.stages.last_mut()
        {
            let last_python = ops.last().map(|o| o.op.meta().python);
            if last_python.is_none() || last_python == Some(python) {
                ops.push(op);
                return;
            }
        }
        // Reading needs no GIL: it gets its own stage so the thread holding the GIL spends
        // it on Python only.
        if python && self.needs_read {
            self.needs_read = false;
            self.add(read_only(), threads(self.opts));
        }
        let read = std::mem::take(&mut self.needs_read);
        self.add(
            StageKind::Chain {
                read,
                ops: vec![op],
            },
            threads(self.opts),
        );
    }

    /// The stage(s) of a step other than a `map`.
    fn push_step(&mut self, node: &LogicalPlan, batch_reads: bool) -> Result<()> {
        match node {
            LogicalPlan::Batch(n) => self.add(
                StageKind::Batch {
                    size: n.size,
                    drop_last: n.drop_last,
                    per_epoch: self.per_epoch,
                    pad: n.pad.clone(),
                    read: batch_reads,
                    ragged: n.ragged,
                    slots: Vec::new(),
                },
                one_thread(),
            ),
            LogicalPlan::MapBatches(n) => {
                let batch = StageKind::Batch {
                    size: n.batch_size,
                    drop_last: false,
                    per_epoch: true,
                    pad: Vec::new(),
                    read: batch_reads,
                    ragged: true,
                    slots: Vec::new(),
                };
                self.add(batch, one_thread());
                let ops = vec![ChainOp {
                    op: n.op.clone(),
                    mode: ElemMode::Map,
                    on_error: OnError::Raise,
                    op_id: n.op_id,
                }];
                self.add(StageKind::Chain { read: false, ops }, threads(self.opts));
                self.add(StageKind::Unbatch, one_thread());
            }
            LogicalPlan::ShuffleBuffer(n) => self.add(
                StageKind::ShuffleBuffer {
                    size: n.size,
                    seed: shuffle_seed(n.seed, self.opts),
                    op_id: n.op_id,
                },
                one_thread(),
            ),
            LogicalPlan::Cache(n) => {
                // Everything so far is maps over the source (checked when the node was
                // built): they move into the cached source.
                let ops: Vec<ChainOp> = self
                    .stages
                    .drain(..)
                    .flat_map(|s| match s.kind {
                        StageKind::Chain { ops, .. } => ops,
                        _ => vec![],
                    })
                    .collect();
                self.source = Arc::new(crate::cache::CachedSource::new(
                    self.source.clone(),
                    ops,
                    n.budget,
                    n.disk_budget,
                )?);
                self.needs_read = true;
            }
            LogicalPlan::Take(n) => self.add(StageKind::Take { n: n.n }, one_thread()),
            LogicalPlan::Pack(n) => self.add(StageKind::Pack(n.spec.clone()), one_thread()),
            LogicalPlan::Prefetch(n) => {
                if let Some(last) = self.stages.last_mut() {
                    last.queue_depth = n.depth;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// The plan-wide defaults once every step has its stage: a final `take` inline, every stage
/// in the consumer when asked, the prefetch depth of a final batch, op fusion.
fn finish(stages: &mut [Stage], nodes: &[Arc<LogicalPlan>], opts: &LowerOptions) {
    // Python stages run on a background thread like the rest, not inline in the consumer:
    // a training step releases the GIL while the accelerator works, and that is when a
    // background thread prepares the next batch. With chunks sized to the work (see
    // `ChunkSizer`), handing a chunk to that thread costs about what running it inline does.
    // A final `take` is counted where outputs are delivered.
    if let Some(last) = stages.last_mut() {
        if matches!(last.kind, StageKind::Take { .. }) {
            last.variant = Variant::Inline;
        }
    }
    let explicit_prefetch = nodes
        .iter()
        .any(|n| matches!(**n, LogicalPlan::Prefetch(_)));
    if opts.in_consumer {
        for s in stages.iter_mut() {
            s.variant = Variant::Inline;
        }
    }
    if let Some(last) = stages.last_mut() {
        if !explicit_prefetch && matches!(last.kind, StageKind::Batch { .. }) {
            last.queue_depth = opts.prefetch;
        }
    }
    if opts.fuse_ops {
        crate::plan::fuse::fuse_ops(stages);
    }
}

fn is_stage(node: &LogicalPlan) -> bool {
    matches!(
        node,
        LogicalPlan::Batch(_)
            | LogicalPlan::MapBatches(_)
            | LogicalPlan::ShuffleBuffer(_)
            | LogicalPlan::Take(_)
            | LogicalPlan::Pack(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::logical::{ShuffleBufferNode, ShuffleNode, SourceNode};
    use crate::source::RangeSource;

    /// The seeds a lowering gives `shuffle(seed=own)` then `shuffle_buffer(4, seed=own)`
    /// under the iteration seed `iteration`: (the source order's, the stage's).
    fn seeds(own: Option<u64>, iteration: u64) -> (Option<u64>, u64) {
        let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
            RangeSource::new(10),
        ))));
        let shuffled = Arc::new(LogicalPlan::Shuffle(
            ShuffleNode::try_new(src, own).unwrap(),
        ));
        let buffered = Arc::new(LogicalPlan::ShuffleBuffer(
            ShuffleBufferNode::try_new(shuffled, 4, own).unwrap(),
        ));
        let opts = LowerOptions {
            seed: iteration,
            ..LowerOptions::default()
        };
        let plan = lower(&buffered, &opts).unwrap();
        let order = plan.source.order.expect("random access").shuffle;
        match plan.stages.last().map(|s| &s.kind) {
            Some(StageKind::ShuffleBuffer { seed, .. }) => (order, *seed),
            other => panic!("expected a shuffle_buffer stage, got {other:?}"),
        }
    }

    #[test]
    fn unseeded_shuffles_take_the_iteration_seed_when_lowered() {
        assert_eq!(seeds(None, 7), (Some(7), 7));
        assert_eq!(seeds(None, 0), (Some(0), 0));
        // A step's own seed wins over the iteration's, also when it is 0.
        assert_eq!(seeds(Some(3), 7), (Some(3), 3));
        assert_eq!(seeds(Some(0), 7), (Some(0), 0));
    }
}
