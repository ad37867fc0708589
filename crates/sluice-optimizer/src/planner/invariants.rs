//! What every planning rule must preserve, checked after each one ([`super::planned`]): the
//! steps the user wrote that hold state, in their order; the source's order of positions
//! (shuffle, shards, epochs); the ops (a rule may drop an op only by merging it into another,
//! and reorder ops only when it says so); the source read once, before the first op; sizes
//! the executor can run.
//!
//! The optimizer's own rules, which reorder and cache by a cost model, have finer checks in
//! [`crate::driver`]; a saved plan made there is checked again here as a whole.

use std::collections::HashSet;

use sluice_core::plan::lower::MAX_THREADS;
use sluice_core::{PhysicalPlan, RunFacts, StageKind, Variant};

use super::Rule;

/// The parts of a plan the rules must keep.
#[derive(Debug, Clone, PartialEq)]
pub struct Shape {
    /// The stateful steps' labels in order (a batch's ops written into it left out; a read
    /// in bulk the rows rule made is not a step).
    steps: Vec<String>,
    /// Op ids in the order they run (chains, then ops written into batches).
    ops: Vec<u64>,
    /// The source's order of positions, as JSON.
    order: String,
}

impl Shape {
    /// The shape of `plan`.
    pub fn of(plan: &PhysicalPlan) -> Shape {
        let mut steps = Vec::new();
        let mut ops = Vec::new();
        for (i, st) in plan.stages.iter().enumerate() {
            match &st.kind {
                StageKind::Chain { ops: chain, .. } => ops.extend(chain.iter().map(|o| o.op_id)),
                StageKind::Batch { read: true, .. } if plan.delivery.rows && i == 0 => {}
                StageKind::Batch {
                    size,
                    drop_last,
                    slots,
                    ..
                } => {
                    ops.extend(slots.iter().map(|o| o.op_id));
                    steps.push(format!("batch({size}, drop_last={drop_last})"));
                }
                other => steps.push(other.label()),
            }
        }
        Shape {
            steps,
            ops,
            order: serde_json::to_string(&plan.source.order).unwrap_or_default(),
        }
    }

    /// Checks `plan`, the result of `rule` on a plan of this shape; returns its shape.
    pub fn check(
        &self,
        rule: &Rule,
        plan: &PhysicalPlan,
        facts: &RunFacts,
    ) -> Result<Shape, String> {
        let now = Shape::of(plan);
        if now.steps != self.steps {
            return Err(format!("steps changed: {:?} → {:?}", self.steps, now.steps));
        }
        if now.order != self.order {
            return Err(format!(
                "the source order changed: {} → {}",
                self.order, now.order
            ));
        }
        let mut seen = HashSet::new();
        if let Some(id) = now.ops.iter().find(|id| !seen.insert(**id)) {
            return Err(format!("op {id} runs twice"));
        }
        let before: HashSet<u64> = self.ops.iter().copied().collect();
        if let Some(id) = now.ops.iter().find(|id| !before.contains(id)) {
            return Err(format!("op {id} appeared"));
        }
        if !rule.merges && now.ops.len() != self.ops.len() {
            return Err(format!("ops lost: {:?} → {:?}", self.ops, now.ops));
        }
        if !rule.reorders && !is_subsequence(&now.ops, &self.ops) {
            return Err(format!("ops reordered: {:?} → {:?}", self.ops, now.ops));
        }
        reads_once(plan)?;
        sizes(plan)?;
        if plan.delivery.rows && (facts.elastic || !facts.consumer.rows) {
            return Err("rows in bulk for a run that does not take them".into());
        }
        Ok(now)
    }
}

fn is_subsequence(short: &[u64], long: &[u64]) -> bool {
    let mut it = long.iter();
    short.iter().all(|x| it.any(|y| y == x))
}

/// A random-access source is read by exactly one stage, before any op; a stream by none.
fn reads_once(plan: &PhysicalPlan) -> Result<(), String> {
    let reads: Vec<usize> = plan
        .stages
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            matches!(
                s.kind,
                StageKind::Chain { read: true, .. } | StageKind::Batch { read: true, .. }
            )
        })
        .map(|(i, _)| i)
        .collect();
    if plan.source.order.is_none() {
        return match reads.is_empty() {
            true => Ok(()),
            false => Err("a stream cannot be read by index".into()),
        };
    }
    let first_op = plan
        .stages
        .iter()
        .position(|s| matches!(&s.kind, StageKind::Chain { ops, .. } if !ops.is_empty()));
    if reads.len() != 1 || first_op.is_some_and(|f| f < reads[0]) {
        return Err(format!(
            "the source must be read once, before the first op (read by stages {reads:?})"
        ));
    }
    Ok(())
}

/// Sizes the executor can run: chunks of 1..=max items, queues of at least one chunk,
/// 1..=MAX_THREADS workers per stage.
fn sizes(plan: &PhysicalPlan) -> Result<(), String> {
    let src = &plan.source;
    if src.chunk_size == 0 || src.chunk_size > src.max_chunk || src.queue_depth == 0 {
        return Err(format!(
            "source chunks of {}..{} items, queue {}",
            src.chunk_size, src.max_chunk, src.queue_depth
        ));
    }
    for st in &plan.stages {
        let workers = st.variant.workers();
        let bad_workers = st.variant != Variant::Inline && !(1..=MAX_THREADS).contains(&workers);
        if st.queue_depth == 0 || bad_workers {
            return Err(format!(
                "stage {}: {workers} workers, queue {}",
                st.kind.label(),
                st.queue_depth
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use sluice_core::OpKind;

    fn rule(merges: bool, reorders: bool) -> Rule {
        Rule {
            name: "test",
            reorders,
            merges,
            apply: |_| Ok(()),
        }
    }

    fn lowered() -> PhysicalPlan {
        let logical = pipeline(
            12,
            vec![
                busy_op("a", 1, OpKind::Opaque),
                busy_op("b", 1, OpKind::Opaque),
            ],
        );
        sluice_core::lower(&logical, &Default::default()).unwrap()
    }

    fn chain_ops(plan: &mut PhysicalPlan) -> &mut Vec<sluice_core::ChainOp> {
        match &mut plan.stages[0].kind {
            StageKind::Chain { ops, .. } => ops,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_plan_left_alone_passes() {
        let plan = lowered();
        let shape = Shape::of(&plan);
        assert_eq!(
            shape.check(&rule(false, false), &plan, &Default::default()),
            Ok(shape)
        );
    }

    #[test]
    fn a_lost_op_is_refused_unless_the_rule_merges() {
        let plan = lowered();
        let shape = Shape::of(&plan);
        let mut merged = plan.clone();
        chain_ops(&mut merged).pop();
        let facts = Default::default();
        let err = shape
            .check(&rule(false, false), &merged, &facts)
            .unwrap_err();
        assert!(err.starts_with("ops lost"), "{err}");
        assert!(shape.check(&rule(true, false), &merged, &facts).is_ok());
    }

    #[test]
    fn a_reorder_is_refused_unless_the_rule_reorders() {
        let plan = lowered();
        let shape = Shape::of(&plan);
        let mut swapped = plan.clone();
        chain_ops(&mut swapped).swap(0, 1);
        let facts = Default::default();
        let err = shape
            .check(&rule(false, false), &swapped, &facts)
            .unwrap_err();
        assert!(err.starts_with("ops reordered"), "{err}");
        assert!(shape.check(&rule(false, true), &swapped, &facts).is_ok());
    }

    #[test]
    fn a_duplicated_op_a_lost_step_and_a_changed_order_are_refused() {
        let plan = lowered();
        let shape = Shape::of(&plan);
        let facts = Default::default();
        let any = rule(true, true);
        let mut twice = plan.clone();
        let first = chain_ops(&mut twice)[0].clone();
        chain_ops(&mut twice).push(first);
        let err = shape.check(&any, &twice, &facts).unwrap_err();
        assert!(err.contains("runs twice"), "{err}");
        let mut reordered = plan.clone();
        reordered.source.order.as_mut().unwrap().shuffle = Some(9);
        let err = shape.check(&any, &reordered, &facts).unwrap_err();
        assert!(err.contains("source order"), "{err}");
        let mut unread = plan.clone();
        if let StageKind::Chain { read, .. } = &mut unread.stages[0].kind {
            *read = false;
        }
        let err = shape.check(&any, &unread, &facts).unwrap_err();
        assert!(err.contains("read once"), "{err}");
        let mut empty_queue = plan;
        empty_queue.stages[0].queue_depth = 0;
        let err = shape.check(&any, &empty_queue, &facts).unwrap_err();
        assert!(err.contains("queue 0"), "{err}");
    }
}
