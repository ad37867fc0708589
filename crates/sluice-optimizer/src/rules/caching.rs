//! Caching: when the source is read more than once (several epochs), keep the output of the
//! deterministic prefix (read + ops before the first random, filtering or Python op) in
//! memory — within half the memory budget — and what does not fit on local disk (within
//! `disk_budget`) when reading it back is cheaper than recomputing it; cut where the saving
//! per sample is best.

use sluice_core::{Result, StageKind};

use super::{Draft, Rule};
use crate::model::{after_hit, Flow, CACHE_HIT_S, DISK_BYTES_PER_S};
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
        let chain = d.chain_ops();
        let prefix: Vec<u64> = chain
            .iter()
            .take_while(|o| {
                let m = o.op.meta();
                !m.random && !m.python && o.mode == sluice_core::ElemMode::Map
            })
            .map(|o| o.op_id)
            .collect();
        // The op after each candidate cut (a hit's copy-on-write is charged to it).
        let next: Vec<_> = chain
            .iter()
            .skip(1)
            .map(|o| (o.op.clone(), o.op_id))
            .collect();
        if prefix.is_empty() {
            d.note(
                "caching",
                "not used: the first op is random, a filter or Python",
            );
            return Ok(());
        }
        let budget = d.options.memory_budget / 2;
        let disk_budget = d.options.disk_budget;
        let mut flow = Flow::new(d.profile);
        let mut cost = d.profile.source.cpu_per_item();
        // (saving/sample, ops, bytes/sample, disk bytes)
        let mut best: Option<(f64, usize, f64, u64)> = None;
        for (k, &id) in prefix.iter().enumerate() {
            cost += flow.pass(id);
            let total = (flow.bytes * len).max(1.0);
            let memory = (budget as f64 / total).min(1.0);
            let next_op = next.get(k).map(|(op, id)| (op, *id));
            let hit = CACHE_HIT_S + after_hit(next_op, d.profile, flow.bytes);
            let mut saving = (cost - hit) * memory;
            // The rest on disk, when reading it back beats recomputing it.
            let disk_gain = cost - flow.bytes / DISK_BYTES_PER_S;
            let mut disk = 0u64;
            if memory < 1.0 && disk_budget > 0 && disk_gain > 0.0 {
                let share = (disk_budget as f64 / total).min(1.0 - memory);
                saving += disk_gain * share;
                disk = (share * total) as u64;
            }
            if saving > 0.0 && best.is_none_or(|b| saving > b.0) {
                best = Some((saving, k + 1, flow.bytes, disk));
            }
        }
        let Some((saving, k, bytes, disk)) = best else {
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
        let disk_note = if disk > 0 {
            format!(", {:.1} MiB of it on disk", disk as f64 / (1 << 20) as f64)
        } else {
            String::new()
        };
        d.note(
            "caching",
            format!(
                "read+{} cached from epoch 2 on (≈{:.1} MiB{disk_note}, saves {:.1} µs \
                 CPU/sample)",
                names.join("+"),
                bytes * len / (1 << 20) as f64,
                saving * 1e6
            ),
        );
        d.cache = Some(CachePoint {
            op_ids: cached,
            budget,
            disk_budget: disk,
            expected_bytes: (bytes * len) as u64,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::options::OptimizerOptions;
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
        assert_eq!(cache.disk_budget, 0, "everything fits in memory");
    }

    #[test]
    fn what_does_not_fit_in_memory_goes_to_disk_when_cheaper() {
        // 20 samples of 3000 decoded bytes = 60 kB; a 40 kB memory budget keeps 20 kB.
        let decode = TestOp {
            fixed_us: 200,
            out_len: Some(3000),
            ..TestOp::new("decode", OpKind::Decode)
        };
        let plan = Arc::new(LogicalPlan::Repeat(
            RepeatNode::try_new(pipeline(20, vec![decode]), Some(3)).unwrap(),
        ));
        let small = OptimizerOptions {
            memory_budget: 40_000,
            ..Default::default()
        };
        let memory_only = optimize_physical(&OptimizeInput::for_test(&plan, &small)).unwrap();
        let c = memory_only.cache.expect("partly cached");
        assert_eq!(c.disk_budget, 0);
        let with_disk = OptimizerOptions {
            disk_budget: 1 << 20,
            ..small
        };
        let out = optimize_physical(&OptimizeInput::for_test(&plan, &with_disk)).unwrap();
        let c = out.cache.expect("cached");
        assert!((39_000..=41_000).contains(&c.disk_budget), "{c:?}");
        assert!(out.prediction.throughput > memory_only.prediction.throughput);
        assert!(out.decisions.iter().any(|d| d.contains("on disk")));
    }
}
