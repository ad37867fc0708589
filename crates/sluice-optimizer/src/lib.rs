//! The sluice optimizer (cedar's profile → plan → run, Pecan's AutoOrder), done so it is safe
//! and explainable:
//!
//! - [`profile`] runs a sample of the pipeline op by op and measures CPU time, bytes and
//!   selectivity per op ([`Profile`], JSON).
//! - [`model`] predicts a physical plan's throughput and bottleneck from a profile.
//! - [`rules`] rewrite the plan (reorder, caching, placement, fusion, parallelism, offload,
//!   prefetch), each in its own module with its tests; [`driver`] runs them and checks invariants.
//! - [`Plan`] is the result as a readable file that a run can load.
//! - [`planner`] is the one path from a pipeline to the physical plan a run executes: the
//!   pure lowering, then a literal list of rules (apply a saved plan, the placement a run
//!   forces ([`RunContext`]), fusion, and the rewrites a consumer calls for), the plan's
//!   invariants checked after each.
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::*;
//! use sluice_optimizer::*;
//! let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(100)))));
//! let input = OptimizeInput {
//!     default: lower(&src, &LowerOptions { fuse_ops: false, ..Default::default() })?,
//!     profile: profile(&src, &ProfileOptions::default())?,
//!     logical: src,
//!     options: OptimizerOptions::default(),
//!     cpus: 2,
//!     pools: vec![],
//! };
//! let out = optimize_physical(&input)?;
//! let plan = out.to_plan(&input.options, 2);
//! assert!(plan.prediction.throughput > 0.0);
//! assert_eq!(plan.apply(&input.default)?.to_string(), out.plan.to_string());
//! # Ok::<(), sluice_core::Error>(())
//! ```

pub use sluice_core::clock;
pub mod driver;
pub mod model;
pub mod options;
pub mod plan;
pub mod planner;
pub mod profile;
pub mod rules;
#[cfg(test)]
mod testing;

pub use driver::{optimize_physical, OptimizeInput, Optimized};
pub use model::{predict, predict_with, RemoteModel};
pub use options::{OptimizerOptions, TransferCosts};
pub use plan::{CachePoint, Plan, PlanStage, Prediction, StagePrediction};
pub use planner::{physical_plan, RunContext};
pub use profile::{profile, Machine, OpProfile, Profile, ProfileOptions};
