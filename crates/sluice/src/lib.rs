//! sluice for Rust: a chainable [`Dataset`] builder over the engine, and [`PipelineSpec`], the
//! file form of a pipeline of built-in ops (what `sluice run pipeline.toml` reads).
//!
//! ```
//! use sluice::{Dataset, IterOptions};
//! let ds = Dataset::range(100).shuffle(Some(1))?.batch(10, false)?;
//! let batches: Vec<_> = ds.iter(&IterOptions::default())?.collect::<Result<_, _>>()?;
//! assert_eq!(batches.len(), 10);
//! # Ok::<(), sluice::Error>(())
//! ```

pub mod alloc;
mod auto;
mod dataset;
mod formats;
mod inspect;
mod mixing;
mod optimize;
mod relational;
pub mod report;
mod spec;
mod state;

pub use dataset::{Dataset, IterOptions};
pub use relational::GroupedDataset;
pub use sluice_core::mix::StopPolicy;
pub use sluice_core::plan::insert_shard::SplitPoint;
// The engine's types a user of the Rust API meets: samples and values, errors, the ops and
// sources one implements, the plans `physical_plan` shows, a run and its statistics. The
// engine's internals (lowering, codec, orders, scratch files) stay behind `sluice_core`.
pub use sluice_core::{
    collate, uncollate, ChainOp, Column, ColumnData, Consumer, ConsumerReport, Cursor, DType,
    Delivery, ElemMode, Emit, Error, ExecOptions, Execution, ExternalError, Item, ItemsSource,
    Length, LogicalPlan, Name, Next, Object, OnError, Op, OpContext, OpKind, OpMeta, OpRef, Owned,
    PackSpec, PhysicalPlan, PipelineStats, RangeSource, Result, RunContext, RunFacts, Sample,
    SampleRef, SampleStream, Shape, ShardSpec, SlotWriter, Source, SourceRef, SourceStage, Stage,
    StageKind, StageReport, StatsReport, Tensor, TensorData, Value, Variant,
};
// What the bindings and tools build on: the cores a default thread count takes, the
// executor's backends and controls, statistics and their endpoint, the engine's interrupt
// flag, recycled batch buffers, the field-name and tensor-data macros.
pub use sluice_core::{cores, exec, field_names, interrupt, recycle, stats, with_tensor_data};
pub use sluice_io::shard_writer::{ShardFormat, ShardOptions};
pub use sluice_io::store::cache::flush_writes as flush_cache_writes;
pub use sluice_io::store::{configure_storage, CacheSpec};
pub use sluice_io::{
    arrow_array, arrow_conv::value_at as arrow_value_at, arrow_conv::ArrowColumn,
    arrow_conv::Records, arrow_schema, CsvOnError, CsvOptions, CsvSource, CsvType, SinkOptions,
};
pub use sluice_io::{
    csv_options, JsonlOptions, LabelMode, LinesFormat, LinesSource, ShardShuffle, ShuffleShards,
    SourceSpec, TfrecordOptions, Utf8Errors, WdsIndex, WdsOptions, DEFAULT_MAX_MEMBER_SIZE,
};
pub use sluice_ops::OpSpec;
pub use sluice_optimizer::{OptimizerOptions, Plan, Profile, ProfileOptions};
pub use sluice_relational::{
    Agg, AggFn, AggregateSpec, BlockingOptions, SortSpec, SpillReport, DEFAULT_MEMORY_BUDGET,
};
pub use spec::{read_small_file, spec_vocabulary, PipelineSpec, StepSpec};
pub use state::{elastic_state, node_name, Elastic, FunctionCode, IterState, NodeState};
