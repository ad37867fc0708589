//! Last-mile relational ops: `sort`, `groupby(...).aggregate(...)` and `repartition(n)`.
//!
//! They are *blocking*: each reads its whole input pipeline before producing anything, so it
//! runs within a memory budget and spills to local disk beyond it. The output is a new
//! random-access source ([`BlockingSource`]), so shuffle, shard, batch and checkpoints work
//! after it; it is the same, row for row, for any thread count and any budget.
//!
//! - [`key`]: comparable keys (one total order; missing values last) and group hashing.
//! - [`spill`]: the spill directory, run files (records of the core value codec,
//!   [`sluice_core::codec`]) and the materialised [`Rows`] served by index.
//! - [`sort`]: stable external merge sort. [`aggregate`]: hash aggregation spilled by
//!   partition. [`repartition`]: equal contiguous partitions.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::*;
//! use sluice_relational::*;
//! let input = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(10)))));
//! let spec = AggregateSpec::try_new(vec![], vec![Agg::new("total", AggFn::Sum, Some("id"))])?;
//! let src = BlockingSource::new(input, BlockingOp::Aggregate(spec), BlockingOptions::default())?;
//! assert_eq!(src.get(0)?.get("total"), Some(&Value::Int(45)));
//! # Ok::<(), sluice_core::Error>(())
//! ```

pub mod aggregate;
pub mod key;
pub mod repartition;
pub mod sort;
pub mod source;
pub mod spill;

pub use aggregate::{Agg, AggFn, AggregateSpec};
pub use repartition::partition_sizes;
pub use sort::SortSpec;
pub use source::{BlockingOp, BlockingOptions, BlockingSource, DEFAULT_MEMORY_BUDGET};
pub use spill::{Rows, SpillReport};
