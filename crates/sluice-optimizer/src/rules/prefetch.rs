//! Prefetch: queue depths within the memory budget. The output queue holds a few ready
//! batches so a bursty consumer never waits; inter-stage queues hold enough chunks to keep
//! every worker busy (a parallel chain [`sluice_core::plan::physical::WINDOW_PER_WORKER`]
//! per worker); all of it must fit the budget.

use sluice_core::{Result, StageKind};

use super::{Draft, Rule};
use crate::model::{steady_chunk, Flow};

/// Ready outputs kept at most (more only hides longer consumer stalls at a memory cost).
pub const MAX_READY: usize = 8;

/// The prefetch rule.
#[derive(Debug, Default)]
pub struct Prefetch;

impl Rule for Prefetch {
    fn name(&self) -> &'static str {
        "prefetch"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let budget = d.options.memory_budget as f64;
        let n = d.plan.stages.len();
        // Bytes per item after each stage (and whether it is a batch), and what chunks the
        // executor will grow to: queued units are chunks of items until a batch.
        let mut flow = Flow::new(d.profile);
        let mut batch = 1.0;
        let (mut work, mut largest) = (0.0, flow.bytes);
        let mut per_item = Vec::with_capacity(n);
        for st in &d.plan.stages {
            match &st.kind {
                StageKind::Chain { ops, .. } => {
                    for o in ops {
                        work += flow.pass(o.op_id);
                        largest = largest.max(flow.bytes);
                    }
                }
                StageKind::Batch { size, .. } => batch = *size as f64,
                StageKind::Unbatch => batch = 1.0,
                _ => {}
            }
            per_item.push((flow.bytes, batch));
        }
        let chunk = steady_chunk(&d.plan, work, largest);
        let unit: Vec<f64> = per_item
            .iter()
            .map(|&(bytes, batch)| (bytes * if batch > 1.0 { batch } else { chunk }).max(1.0))
            .collect();
        // Half the budget for inter-stage queues, half for ready outputs.
        let per_queue = budget / 2.0 / n.max(1) as f64;
        for (i, st) in d.plan.stages.iter_mut().enumerate() {
            let want = match &st.kind {
                _ if i + 1 == n => MAX_READY,
                StageKind::Chain { .. } => st.variant.min_depth(),
                _ => 2 * st.variant.workers() + 2,
            };
            let fits = if i + 1 == n {
                (budget / 2.0 / unit[i]) as usize
            } else {
                (per_queue / unit[i]) as usize
            };
            st.queue_depth = want.min(fits).max(1);
        }
        let last = d.plan.stages.last().map_or(0, |s| s.queue_depth);
        d.note(
            "prefetch",
            format!(
                "{last} outputs ready ahead (≈{:.1} MiB each); queues sized to {} MiB",
                unit.last().copied().unwrap_or(0.0) / (1 << 20) as f64,
                d.options.memory_budget >> 20
            ),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::options::OptimizerOptions;
    use crate::testing::*;
    use sluice_core::{BatchNode, LogicalPlan, OpKind};
    use std::sync::Arc;

    #[test]
    fn ready_batches_shrink_to_fit_the_budget() {
        let plan = pipeline(20, vec![busy_op("a", 1, OpKind::Opaque)]);
        let plan = Arc::new(LogicalPlan::Batch(
            BatchNode::try_new(plan, 10, false).unwrap(),
        ));
        let roomy =
            optimize_physical(&OptimizeInput::for_test(&plan, &Default::default())).unwrap();
        assert_eq!(
            roomy.plan.stages.last().unwrap().queue_depth,
            super::MAX_READY
        );
        // A batch is ~10 KB and half of a 50 KB budget is for ready batches: 2 fit.
        let tight = OptimizerOptions {
            memory_budget: 50_000,
            ..Default::default()
        };
        let tight = optimize_physical(&OptimizeInput::for_test(&plan, &tight)).unwrap();
        assert_eq!(tight.plan.stages.last().unwrap().queue_depth, 2);
    }
}
