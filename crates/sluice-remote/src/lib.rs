//! sluice stages away from their pipeline: what the process pool and the Ray backend share.
//!
//! - [`wire`]: the chunk wire format — every item field and [`sluice_core::Value`] losslessly,
//!   big buffers through shared memory ([`shm`]), typed errors both ways.
//! - [`stage`]: a stage's portable form (ops via [`sluice_core::Op::ship`], the source via
//!   [`sluice_core::Source::ship`]) — [`RemoteStage`] on the main side, [`StageRunner`] in a
//!   worker.
//! - [`pool`]: the `processes` backend ([`ProcessBackend`]), and [`place_python_on_processes`],
//!   the plan rewrite that puts GIL-bound stages on it.
//!
//! No Python here: Python UDFs ship and load through hooks the bindings provide
//! ([`stage::OpLoader`], [`wire::ExternalCodec`]).

pub mod pool;
pub mod shm;
pub mod stage;
pub mod wire;

pub use pool::ProcessBackend;
pub use shm::{ShmConfig, ShmWriter};
pub use stage::{RemoteStage, StagePackage, StageRunner};
pub use wire::{ExternalCodec, WireError};

use sluice_core::{PhysicalPlan, StageKind, Variant};

/// Name of the process-pool backend in plans (`Variant::Pool { backend: "processes", .. }`).
pub const PROCESSES: &str = "processes";

/// Puts every chain stage that runs Python code (a UDF holds the GIL, so threads cannot run
/// it in parallel) on the `processes` backend with `workers` workers. Returns how many
/// stages moved. The executor needs a [`ProcessBackend`] registered to run the result.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(4)))));
/// let mut plan = lower(&src, &LowerOptions::default())?;
/// // No Python op: nothing moves.
/// assert_eq!(sluice_remote::place_python_on_processes(&mut plan, 2), 0);
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn place_python_on_processes(plan: &mut PhysicalPlan, workers: usize) -> usize {
    let mut moved = 0;
    for st in &mut plan.stages {
        if let StageKind::Chain { ops, .. } = &st.kind {
            if ops.iter().any(|o| o.op.meta().python) {
                st.variant = Variant::Pool {
                    backend: PROCESSES.into(),
                    workers: workers.max(1),
                };
                moved += 1;
            }
        }
    }
    moved
}
