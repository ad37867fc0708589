//! sluice core: logical and physical plans and the executor, on the data model of
//! `sluice-model` (re-exported whole: `sluice_core::Sample` is `sluice_model::Sample`).
//!
//! A pipeline is built as a [`LogicalPlan`] (what the user wrote), lowered to a
//! [`PhysicalPlan`] (stages, variants, queue depths) and run by an [`Execution`].
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::*;
//! let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(100)))));
//! let batched = Arc::new(LogicalPlan::Batch(BatchNode::try_new(src, 32, false)?));
//! let plan = lower(&batched, &LowerOptions::default())?;
//! let batches: Vec<Sample> = Execution::start(&plan, ExecOptions::default())?.collect::<Result<_>>()?;
//! assert_eq!(batches.len(), 4);
//! # Ok::<(), sluice_core::Error>(())
//! ```

pub use sluice_model::{
    clock, codec, cores, error, interrupt, name, order, rng, sample, scratch, value,
};
pub use sluice_model::{field_names, with_tensor_data};

pub mod cache;
pub mod collate;
pub mod exec;
pub mod mix;
pub mod op;
pub mod plan;
pub mod recycle;
pub mod source;
pub mod stats;

pub use collate::{collate, uncollate};
pub use error::{Error, ExternalError, Result, SampleRef};
pub use exec::{Cursor, ExecOptions, Execution, Item, Next};
pub use name::Name;
pub use op::{Emit, Op, OpContext, OpKind, OpMeta, OpRef, SlotWriter};
pub use order::{IndexOrder, Permutation, Position, ShardSpec};
pub use plan::facts::{Consumer, RunContext, RunFacts};
pub use plan::length::Length;
pub use plan::logical::{
    BatchNode, CacheNode, ElemMode, LogicalPlan, MapBatchesNode, MapNode, OnError, PackNode,
    PackSpec, PrefetchNode, RepeatNode, ShardNode, ShuffleBufferNode, ShuffleNode, SourceNode,
    TakeNode,
};
pub use plan::lower::{lower, LowerOptions};
pub use plan::physical::{ChainOp, Delivery, PhysicalPlan, SourceStage, Stage, StageKind, Variant};
pub use rng::{mix64, SampleRng};
pub use sample::Sample;
pub use source::{InputRunner, ItemsSource, RangeSource, SampleStream, Source, SourceRef};
pub use stats::{ConsumerReport, PipelineStats, StageReport, StatsReport};
pub use value::{Column, ColumnData, DType, Object, Owned, Shape, Tensor, TensorData, Value};
