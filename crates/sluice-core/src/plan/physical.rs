//! The physical plan: how a pipeline runs. A source stage computes positions (or streams
//! samples); then stages, each a fused chain of element-wise ops or one stateful step, with a
//! variant (inline in the consumer, or a pool of N threads) and a queue depth.
//!
//! It is separate from the logical plan so the optimizer can rewrite it (reorder, fuse, set
//! parallelism) and new variants (process pool, Ray) can plug in without touching the API.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

use crate::op::OpRef;
use crate::order::IndexOrder;
use crate::plan::logical::{ElemMode, OnError};
use crate::source::SourceRef;

/// Where a stage runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "variant", rename_all = "snake_case")]
pub enum Variant {
    /// In the consumer's thread, when it pulls (no hand-off; best for GIL-bound UDFs).
    Inline,
    /// A pool of `threads` worker threads; output order is restored by sequence number.
    Threads { threads: usize },
    /// `workers` workers of a named [`crate::exec::Backend`] (e.g. `processes` for Python
    /// UDFs, `ray` for remote actors); order is restored the same way as for threads.
    Pool { backend: String, workers: usize },
}

/// Chunks a parallel chain stage's output queue holds per worker, at least. Outputs leave
/// in order, so a worker preempted mid-chunk holds the queue's head while the others run
/// ahead until it is full. On the 2-vCPU reference VM the NLP two-thread plan kept the cores
/// 1.78–1.80 busy with 4 chunks, 1.86 with 8 and 1.89 with 12 (+10% lines/s and 5% less CPU
/// per line: fewer parked workers to wake); its cached plan went from 1.62 M to 1.75 M
/// lines/s. Memory stays bounded: chunks carry ~1 ms of work and at most 8 MiB.
pub const WINDOW_PER_WORKER: usize = 6;

impl Variant {
    /// The output queue depth a chain stage on this variant needs at least (none inline).
    pub fn min_depth(&self) -> usize {
        match self {
            Variant::Inline => 1,
            _ => WINDOW_PER_WORKER * self.workers(),
        }
    }
    /// How many chunks this variant works on at once.
    pub fn workers(&self) -> usize {
        match self {
            Variant::Inline => 1,
            Variant::Threads { threads } => (*threads).max(1),
            Variant::Pool { workers, .. } => (*workers).max(1),
        }
    }
    /// Whether the stage runs on a named backend.
    pub fn is_pool(&self) -> bool {
        matches!(self, Variant::Pool { .. })
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Inline => write!(f, "inline"),
            Variant::Threads { threads } => write!(f, "threads={threads}"),
            Variant::Pool { backend, workers } => write!(f, "{backend}={workers}"),
        }
    }
}

/// One op of a fused chain.
#[derive(Debug, Clone)]
pub struct ChainOp {
    pub op: OpRef,
    pub mode: ElemMode,
    pub on_error: OnError,
    pub op_id: u64,
}

impl Serialize for ChainOp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("ChainOp", 4)?;
        st.serialize_field("spec", &self.op.spec())?;
        st.serialize_field("mode", &self.mode)?;
        st.serialize_field("on_error", &self.on_error)?;
        st.serialize_field("op_id", &self.op_id)?;
        st.end()
    }
}

/// What a stage does.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StageKind {
    /// Element-wise ops fused into one pass. With `read`, each item's sample is first read
    /// from the source at its source index (so reading runs in parallel too).
    Chain { read: bool, ops: Vec<ChainOp> },
    /// Stack samples into batches; with `per_epoch`, a batch never spans two epochs.
    Batch {
        size: usize,
        drop_last: bool,
        per_epoch: bool,
        /// Fields padded to the longest in the batch (name, pad value).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pad: Vec<(String, f64)>,
        /// The batch reads its rows from a columnar source itself ([`crate::Source::get_batch`]),
        /// when it follows the source directly: no per-row samples are made.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        read: bool,
        /// Fields that do not stack become lists instead of an error (`batch(ragged=True)`,
        /// and map_batches' input, whose function takes what it gets).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        ragged: bool,
        /// Ops moved here from the end of the chain before, each writing its field's output
        /// straight into the batch as it stacks ([`crate::plan::slots`]); set when a run
        /// starts, never by lowering.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        slots: Vec<ChainOp>,
    },
    /// Split batches back into samples.
    Unbatch,
    /// Keep the first `n` items.
    Take { n: u64 },
    /// Bounded buffer shuffle.
    ShuffleBuffer {
        size: usize,
        /// The step's seed, or the iteration's when it has none (decided when lowering).
        seed: u64,
        op_id: u64,
    },
    /// Concatenate a token field across items and cut fixed-length blocks.
    Pack(crate::plan::logical::PackSpec),
}

impl StageKind {
    /// Whether items can be processed independently (so a pool of threads may run it).
    pub fn is_stateless(&self) -> bool {
        matches!(self, StageKind::Chain { .. } | StageKind::Unbatch)
    }
    /// A short name for plans and stats.
    pub fn label(&self) -> String {
        match self {
            StageKind::Chain { read, ops } => {
                let mut names: Vec<String> = Vec::new();
                if *read {
                    names.push("read".into());
                }
                names.extend(ops.iter().map(|o| match o.mode {
                    ElemMode::Map => o.op.name().to_string(),
                    ElemMode::Filter => format!("filter({})", o.op.name()),
                    ElemMode::FlatMap => format!("flat_map({})", o.op.name()),
                }));
                names.join("+")
            }
            StageKind::Batch {
                size, read: true, ..
            } => format!("read+batch({size})"),
            StageKind::Batch { size, slots, .. } if !slots.is_empty() => {
                let names: Vec<&str> = slots.iter().map(|o| o.op.name()).collect();
                format!("batch({size}) writing {}", names.join("+"))
            }
            StageKind::Batch { size, .. } => format!("batch({size})"),
            StageKind::Unbatch => "unbatch".into(),
            StageKind::Take { n } => format!("take({n})"),
            StageKind::ShuffleBuffer { size, .. } => format!("shuffle_buffer({size})"),
            StageKind::Pack(p) => format!("pack({})", p.length),
        }
    }
}

/// One stage of the physical plan.
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    pub kind: StageKind,
    pub variant: Variant,
    /// Capacity of the stage's output queue (in chunks); bounds memory.
    pub queue_depth: usize,
}

/// How the source produces work.
#[derive(Debug, Clone)]
pub struct SourceStage {
    pub source: SourceRef,
    /// For a random-access source: the order of positions (shuffle, shard, epochs).
    pub order: Option<IndexOrder>,
    /// For a streaming source: how many epochs (`None` = forever).
    pub stream_epochs: Option<u64>,
    /// Items per chunk handed to the next stage (amortises hand-off cost): the first chunks'
    /// size.
    pub chunk_size: usize,
    /// Chunks grow up to this many items while each carries little downstream CPU work
    /// (cheap items travel in big chunks, costly ones in small chunks); equal to
    /// `chunk_size`, chunks have a fixed size.
    pub max_chunk: usize,
    pub queue_depth: usize,
}

impl Serialize for SourceStage {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("SourceStage", 6)?;
        st.serialize_field("spec", &self.source.spec())?;
        st.serialize_field("order", &self.order)?;
        st.serialize_field("stream_epochs", &self.stream_epochs)?;
        st.serialize_field("chunk_size", &self.chunk_size)?;
        st.serialize_field("max_chunk", &self.max_chunk)?;
        st.serialize_field("queue_depth", &self.queue_depth)?;
        st.end()
    }
}

/// A runnable pipeline.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::{lower, LogicalPlan, LowerOptions, RangeSource, SourceNode, BatchNode};
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(10)))));
/// let plan = Arc::new(LogicalPlan::Batch(BatchNode::try_new(src, 4, false).unwrap()));
/// let phys = lower(&plan, &LowerOptions::default()).unwrap();
/// assert!(phys.to_string().contains("batch(4)"));
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct PhysicalPlan {
    pub source: SourceStage,
    pub stages: Vec<Stage>,
    /// What the planner decided for the run's consumer and measurements.
    #[serde(skip_serializing_if = "Delivery::is_plain")]
    pub delivery: Delivery,
}

/// How a plan hands its outputs over and whether it measures itself: decided by the planner
/// from the run's facts ([`crate::plan::facts::RunFacts`]), read by the executor, which
/// never reads the run's options for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// Batches that read a columnar source hand over the source's arrays
    /// ([`crate::Column`]s) when what follows takes them.
    pub columns: bool,
    /// The plan's one stage reads rows in bulk ([`crate::plan::rows::read_rows_in_batches`]):
    /// the consumer gets [`crate::exec::Next::Rows`].
    pub rows: bool,
    /// Each op and the source read are timed as the run goes ([`crate::stats::ops`]).
    pub timed: bool,
}

impl Delivery {
    fn is_plain(&self) -> bool {
        *self == Delivery::default()
    }
}

/// Items per chunk a run starts with when chunks adapt and a stage runs on Ray actors: each
/// chunk pays a round trip of a millisecond or more there, which the chunk sizer would count
/// as the items' cost and never grow past one item. Threads and processes (a round trip of
/// ~0.1 ms) start at one item, so a slow function's first output is not held back.
pub const POOL_FIRST_CHUNK: usize = 16;

#[cfg(test)]
impl PhysicalPlan {
    /// A plan of `stages` (each queue one chunk deep) over a range of 8, for the tests of
    /// the planner's rewrites.
    pub(crate) fn of_stages(stages: Vec<(StageKind, Variant)>) -> Self {
        PhysicalPlan {
            source: SourceStage {
                source: std::sync::Arc::new(crate::source::RangeSource::new(8)),
                order: None,
                stream_epochs: Some(1),
                chunk_size: 4,
                max_chunk: 4,
                queue_depth: 1,
            },
            stages: stages
                .into_iter()
                .map(|(kind, variant)| Stage {
                    kind,
                    variant,
                    queue_depth: 1,
                })
                .collect(),
            delivery: Default::default(),
        }
    }
}

impl PhysicalPlan {
    /// Items in the source's first chunk: its own, or at least [`POOL_FIRST_CHUNK`] when
    /// chunks adapt (`max_chunk` above it) and a stage runs on Ray.
    ///
    /// ```
    /// use sluice_core::{lower, LogicalPlan, LowerOptions, RangeSource, SourceNode};
    /// use std::sync::Arc;
    /// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(9)))));
    /// let plan = lower(&src, &LowerOptions::default()).unwrap();
    /// assert_eq!(plan.first_chunk(), 1); // threads only: one item until costs are measured
    /// ```
    pub fn first_chunk(&self) -> usize {
        let own = self.source.chunk_size.max(1);
        let pooled = self.stages.iter().any(
            |s| matches!(&s.variant, Variant::Pool { backend, .. } if backend == crate::exec::backend::RAY),
        );
        if pooled && self.source.max_chunk > own {
            own.max(POOL_FIRST_CHUNK.min(self.source.max_chunk))
        } else {
            own
        }
    }

    /// The plan as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }
}

impl fmt::Display for PhysicalPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let src = &self.source;
        write!(f, "source: {}", src.source.name())?;
        if let Some(o) = &src.order {
            write!(f, " len={}", o.len)?;
            if o.shuffle.is_some() {
                write!(f, " shuffled")?;
                if o.fixed_shuffle {
                    write!(f, " (same permutation every epoch)")?;
                }
            }
            for s in o.shard.iter().chain(&o.part) {
                write!(f, " shard={}/{}", s.rank, s.world_size)?;
                if s.block > 1 {
                    write!(f, " (runs of {})", s.block)?;
                }
            }
            write!(f, " epochs={:?}", o.epochs)?;
        } else {
            write!(f, " (streaming) epochs={:?}", src.stream_epochs)?;
        }
        if src.max_chunk > src.chunk_size {
            writeln!(f, " chunk={}..{}", src.chunk_size, src.max_chunk)?;
        } else {
            writeln!(f, " chunk={}", src.chunk_size)?;
        }
        for (i, st) in self.stages.iter().enumerate() {
            writeln!(
                f,
                "stage {i}: {} [{}, queue={}]",
                st.kind.label(),
                st.variant,
                st.queue_depth
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::logical::{BatchNode, SourceNode};
    use crate::{lower, LogicalPlan, LowerOptions, RangeSource};
    use std::sync::Arc;

    /// `range(9).batch(3)`: one stage to place.
    fn batched() -> PhysicalPlan {
        let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
            RangeSource::new(9),
        ))));
        let batch = LogicalPlan::Batch(BatchNode::try_new(src, 3, false).unwrap());
        lower(&Arc::new(batch), &LowerOptions::default()).unwrap()
    }

    #[test]
    fn ray_starts_with_bigger_chunks_than_threads_and_processes_unless_the_size_is_fixed() {
        let mut plan = batched();
        assert_eq!(plan.first_chunk(), 1);
        plan.stages[0].variant = Variant::Pool {
            backend: "processes".into(),
            workers: 2,
        };
        assert_eq!(plan.first_chunk(), 1, "a process's round trip is cheap");
        plan.stages[0].variant = Variant::Pool {
            backend: crate::exec::backend::RAY.into(),
            workers: 2,
        };
        assert_eq!(plan.first_chunk(), POOL_FIRST_CHUNK);
        plan.source.max_chunk = 4;
        assert_eq!(plan.first_chunk(), 4, "never past the largest chunk");
        plan.source.chunk_size = 3;
        plan.source.max_chunk = 3;
        assert_eq!(plan.first_chunk(), 3, "a fixed chunk_size= stays");
    }
}
