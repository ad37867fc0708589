//! Caching: when the source is read more than once (several epochs), keep the output of the
//! deterministic prefix (read + ops before the first random, filtering or Python op) in
//! memory, cut where the saving per byte is best, within half the memory budget.

use sluice_core::{Result, StageKind};

use super::{Draft, Rule};
use crate::model::{Flow, COPY_BYTES_PER_S};
use crate::plan::CachePoint;

/// The caching rule.
#[derive(Debug, Default)]
pub struct Caching;

impl Rule for Caching {
    fn name(&self) -> &'static str {
        "caching"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let Some(order) = &d.plan.source.order else {
            return Ok(()); // a stream has no stable index to cache by
        };
        if order.epochs == Some(1) {
            d.note("caching", "not used: the source is read once (no repeat)");
            return Ok(());
        }
        let len = order.len as f64;
        // The deterministic prefix: leading one-to-one, non-random, non-Python maps.
        let prefix: Vec<u64> = d
            .chain_ops()
            .into_iter()
            .take_while(|o| {
                let m = o.op.meta();
                !m.random && !m.python && o.mode == sluice_core::ElemMode::Map
            })
            .map(|o| o.op_id)
            .collect();
        if prefix.is_empty() {
            d.note(
                "caching",
                "not used: the first op is random, a filter or Python",
            );
            return Ok(());
        }
        let budget = d.options.memory_budget / 2;
        let mut flow = Flow::new(d.profile);
        let mut cost = d.profile.source.cpu_per_item();
        let mut best: Option<(f64, usize, f64)> = None; // (saving/sample, ops, bytes/sample)
        for (k, &id) in prefix.iter().enumerate() {
            cost += flow.pass(id);
            let total = flow.bytes * len;
            let share = if total <= budget as f64 {
                1.0
            } else {
                budget as f64 / total
            };
            let saving = (cost - flow.bytes / COPY_BYTES_PER_S) * share;
            if saving > 0.0 && best.is_none_or(|b| saving > b.0) {
                best = Some((saving, k + 1, flow.bytes));
            }
        }
        let Some((saving, k, bytes)) = best else {
            d.note(
                "caching",
                "not used: recomputing is as cheap as copying from memory",
            );
            return Ok(());
        };
        let cached: Vec<u64> = prefix[..k].to_vec();
        for st in &mut d.plan.stages {
            if let StageKind::Chain { ops, .. } = &mut st.kind {
                ops.retain(|o| !cached.contains(&o.op_id));
            }
        }
        d.plan.stages.retain(
            |s| !matches!(&s.kind, StageKind::Chain { read: false, ops } if ops.is_empty()),
        );
        let names: Vec<String> = d
            .profile
            .ops
            .iter()
            .filter(|o| o.op_id.is_some_and(|id| cached.contains(&id)))
            .map(|o| o.name.clone())
            .collect();
        d.note(
            "caching",
            format!(
                "read+{} cached in memory from epoch 2 on (≈{:.1} MiB, saves {:.1} µs CPU/sample)",
                names.join("+"),
                bytes * len / (1 << 20) as f64,
                saving * 1e6
            ),
        );
        d.cache = Some(CachePoint {
            op_ids: cached,
            budget,
            expected_bytes: (bytes * len) as u64,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::testing::*;
    use sluice_core::{LogicalPlan, OpKind, RepeatNode};
    use std::sync::Arc;

    #[test]
    fn caches_the_deterministic_prefix_only_when_re_read() {
        let decode = TestOp {
            fixed_us: 200,
            out_len: Some(3000),
            ..TestOp::new("decode", OpKind::Decode)
        };
        let crop = TestOp {
            random: true,
            out_len: Some(100),
            ..TestOp::new("crop", OpKind::SizeReducing)
        };
        let once = pipeline(20, vec![decode.clone(), crop.clone()]);
        let out = optimize_physical(&OptimizeInput::for_test(&once, &Default::default())).unwrap();
        assert!(out.cache.is_none());
        let twice = Arc::new(LogicalPlan::Repeat(
            RepeatNode::try_new(once, Some(3)).unwrap(),
        ));
        let out = optimize_physical(&OptimizeInput::for_test(&twice, &Default::default())).unwrap();
        let cache = out.cache.expect("decode is cached");
        assert_eq!(cache.op_ids.len(), 1);
        let labels: Vec<String> = out.plan.stages.iter().map(|s| s.kind.label()).collect();
        assert_eq!(labels, ["read+crop"]);
    }
}
