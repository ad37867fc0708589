//! Ops written straight into a batch: when ops at the end of a chain replace a field by a
//! float32 tensor made from that field alone ([`crate::Op::slot_writer`]: `normalize`,
//! `to_tensor`) and a batch follows, they move into the batch, which writes each sample's
//! output into its slot of the batch as it stacks. One pass from the op's input (a uint8
//! image) to the batch, where the chain wrote a float32 copy per sample and the batch copied
//! it again (on the CV reference pipeline that copy and its fresh pages were a tenth of the
//! CPU; docs/BENCHMARKS.md).
//!
//! The swap is the planner's "slots" rule (`sluice_optimizer::planner`), run on the default
//! lowering or an optimizer's plan, like [`crate::plan::objects::keep_objects`]. It changes no stage boundary,
//! so checkpoints see the same plan either way, and a run that times its ops keeps them in
//! their chain, where each op's cost is measured.
//!
//! An op moves only past ops that leave its field as it is: ops that neither read nor
//! write it, and ops that only select, drop or rename fields ([`crate::Op::moves_fields`])
//! and keep it. Those ops must also give one output per input and raise their failures
//! (no filter, flat_map or skip policy): one that dropped a sample would otherwise decide
//! whether the moved op sees it, and a bad input it dropped would no longer fail. The outputs are the same bytes, and a bad input fails naming the same
//! sample and op (the batch runs the op on each sample first when the inputs differ in
//! shape, as the chain would). What can differ is which of two failures is reported: when
//! a sample fails the moved op and a later sample of the same batch fails an op that now
//! runs before it, the later failure is the one raised.

use crate::plan::logical::{ElemMode, OnError};
use crate::plan::physical::{ChainOp, PhysicalPlan, StageKind};

/// Moves every op that can write straight into the batch right after its chain into that
/// batch. Returns how many ops moved.
///
/// A chain on a worker pool (processes, Ray, a shared service) gives them up too: its reply
/// then carries the op's input — a uint8 image, a quarter of the float32 slot's bytes —
/// across processes or the network, and the batch makes the floats as it stacks, which
/// costs it about what copying the floats in did. A pool's chain keeps one op at least: an
/// empty remote chain would be a round trip for nothing.
pub fn write_into_batches(plan: &mut PhysicalPlan) -> usize {
    let mut moved = 0;
    for i in 1..plan.stages.len() {
        let (before, after) = plan.stages.split_at_mut(i);
        let chain = &mut before[i - 1];
        let StageKind::Batch {
            read: false,
            pad,
            slots,
            ..
        } = &mut after[0].kind
        else {
            continue;
        };
        if !pad.is_empty() {
            continue;
        }
        let pool = chain.variant.is_pool();
        let StageKind::Chain { ops, .. } = &mut chain.kind else {
            continue;
        };
        // From the end back, so each op is checked against all that will run after it.
        let mut k = ops.len();
        while k > 0 && !(pool && ops.len() == 1) {
            k -= 1;
            let after: Vec<&ChainOp> = ops[k + 1..].iter().chain(&*slots).collect();
            if movable(&ops[k], &after) {
                slots.insert(0, ops.remove(k));
                moved += 1;
            }
        }
    }
    moved
}

/// Whether `cop` can run after `after` (the ops that follow it, in order) in the batch.
fn movable(cop: &ChainOp, after: &[&ChainOp]) -> bool {
    let Some(writer) = cop.op.slot_writer() else {
        return false;
    };
    // A skipped failure drops its sample, which a batch cannot do.
    if !one_for_one(cop) {
        return false;
    }
    let field = writer.field().to_string();
    after.iter().all(|next| {
        let (op, meta) = (&next.op, next.op.meta());
        let keeps = op
            .output_fields(std::slice::from_ref(&field))
            .is_some_and(|out| out.contains(&field));
        // An op that may drop or repeat a sample would decide whether the moved op runs on
        // it at all: a bad input it drops would no longer fail.
        one_for_one(next)
            && !meta.python
            && !meta.writes.contains(&field)
            && (!meta.reads.contains(&field) || op.moves_fields())
            && keeps
    })
}

/// Whether `cop` gives exactly one output for each input or fails the run.
fn one_for_one(cop: &ChainOp) -> bool {
    cop.mode == ElemMode::Map && cop.on_error == OnError::Raise
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;
    use std::sync::Arc;

    use super::*;
    use crate::error::Result;
    use crate::op::{Emit, Op, OpContext, OpMeta, SlotWriter};
    use crate::plan::physical::Variant;
    use crate::sample::Sample;
    use crate::value::Value;

    /// `Write(f)` writes field `f` in place and can write it into a batch; `Touch(r, w)`
    /// reads `r` and writes `w`; `Keep(f)` selects `f`, `Drop(f)` drops it.
    #[derive(Debug)]
    enum T {
        Write(&'static str),
        Touch(&'static str, &'static str),
        Keep(&'static str),
        Drop(&'static str),
        Python,
    }

    // SAFETY: only `slot_shape` runs in these tests.
    unsafe impl SlotWriter for T {
        fn field(&self) -> &str {
            match self {
                T::Write(f) => f,
                _ => "",
            }
        }
        fn slot_shape(&self, _: &Value) -> Option<Vec<usize>> {
            Some(vec![1])
        }
        fn write_slot(&self, _: &Value, _: &OpContext, _: &mut [MaybeUninit<f32>]) -> Result<()> {
            Err(crate::error::Error::Internal("not run".into()))
        }
    }

    impl Op for T {
        fn name(&self) -> &str {
            match self {
                T::Write(_) => "write",
                T::Touch(..) => "touch",
                T::Keep(_) => "select",
                T::Drop(_) => "drop",
                T::Python => "udf",
            }
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": self.name()})
        }
        fn meta(&self) -> OpMeta {
            let (reads, writes) = match self {
                T::Write(f) => (vec![f.to_string()], vec![f.to_string()]),
                T::Touch(r, w) => (vec![r.to_string()], vec![w.to_string()]),
                T::Keep(f) | T::Drop(f) => (vec![f.to_string()], vec![]),
                T::Python => return OpMeta::opaque(true),
            };
            OpMeta {
                reads,
                writes,
                ..OpMeta::opaque(false)
            }
        }
        fn output_fields(&self, input: &[String]) -> Option<Vec<String>> {
            match self {
                T::Keep(f) => Some(vec![f.to_string()]),
                T::Drop(f) => Some(input.iter().filter(|x| x != f).cloned().collect()),
                T::Python => None,
                _ => Some(input.to_vec()),
            }
        }
        fn moves_fields(&self) -> bool {
            matches!(self, T::Keep(_) | T::Drop(_))
        }
        fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
            Ok(Emit::One(s))
        }
        fn slot_writer(&self) -> Option<&dyn SlotWriter> {
            matches!(self, T::Write(_)).then_some(self as &dyn SlotWriter)
        }
    }

    fn plan(ops: Vec<(T, OnError)>, pad: bool, variant: Variant) -> PhysicalPlan {
        let ops = ops
            .into_iter()
            .enumerate()
            .map(|(i, (t, on_error))| ChainOp {
                op: Arc::new(t),
                mode: ElemMode::Map,
                on_error,
                op_id: i as u64,
            })
            .collect();
        let batch = StageKind::Batch {
            size: 4,
            drop_last: false,
            per_epoch: false,
            pad: if pad { vec![("x".into(), 0.0)] } else { vec![] },
            read: false,
            ragged: false,
            slots: vec![],
        };
        PhysicalPlan::of_stages(vec![
            (StageKind::Chain { read: true, ops }, variant),
            (batch, Variant::Threads { threads: 1 }),
        ])
    }

    /// The chain's op ids left, and the batch's.
    fn split(p: &PhysicalPlan) -> (Vec<u64>, Vec<u64>) {
        let ids = |ops: &[ChainOp]| ops.iter().map(|o| o.op_id).collect();
        match (&p.stages[0].kind, &p.stages[1].kind) {
            (StageKind::Chain { ops, .. }, StageKind::Batch { slots, .. }) => {
                (ids(ops), ids(slots))
            }
            _ => unreachable!(),
        }
    }

    fn moved(ops: Vec<(T, OnError)>) -> (Vec<u64>, Vec<u64>) {
        let mut p = plan(ops, false, Variant::Threads { threads: 2 });
        write_into_batches(&mut p);
        split(&p)
    }

    #[test]
    fn moves_past_ops_that_keep_its_field() {
        use OnError::Raise;
        let ops = vec![
            (T::Touch("x", "x"), Raise),
            (T::Write("x"), Raise),
            (T::Touch("y", "z"), Raise),
            (T::Keep("x"), Raise),
        ];
        assert_eq!(moved(ops), (vec![0, 2, 3], vec![1]));
        let mut p = plan(vec![(T::Write("x"), Raise)], false, Variant::Inline);
        assert_eq!(write_into_batches(&mut p), 1);
        assert_eq!(p.stages[1].kind.label(), "batch(4) writing write");
        // Two fields move, keeping their order.
        let two = vec![(T::Write("x"), Raise), (T::Write("y"), Raise)];
        assert_eq!(moved(two), (vec![], vec![0, 1]));
    }

    #[test]
    fn stays_before_what_reads_drops_or_rewrites_its_field() {
        use OnError::{Raise, Skip};
        for after in [
            T::Touch("x", "y"),
            T::Touch("y", "x"),
            T::Drop("x"),
            T::Python,
            T::Write("x"),
        ] {
            // A second writer of `x` moves itself; the first stays before it.
            let second: Vec<u64> = match after {
                T::Write(_) => vec![1],
                _ => vec![],
            };
            let (chain, slots) = moved(vec![(T::Write("x"), Raise), (after, Raise)]);
            assert_eq!(chain.len() + slots.len(), 2);
            assert_eq!((chain[0], slots), (0, second));
        }
        // A skip policy drops samples; a pad keeps the op in its chain.
        assert_eq!(moved(vec![(T::Write("x"), Skip)]), (vec![0], vec![]));
        // So does an op after it that may drop or repeat its sample (skipping its failures,
        // a filter, a flat_map), even on another field: a bad input it drops must still fail.
        let other = || vec![(T::Write("x"), Raise), (T::Touch("y", "z"), Raise)];
        assert_eq!(moved(other()), (vec![1], vec![0]));
        let skips = vec![(T::Write("x"), Raise), (T::Touch("y", "z"), Skip)];
        assert_eq!(moved(skips), (vec![0, 1], vec![]));
        for mode in [ElemMode::Filter, ElemMode::FlatMap] {
            let mut p = plan(other(), false, Variant::Inline);
            if let StageKind::Chain { ops, .. } = &mut p.stages[0].kind {
                ops[1].mode = mode;
            }
            assert_eq!(write_into_batches(&mut p), 0, "{mode:?}");
        }
        let mut padded = plan(vec![(T::Write("x"), Raise)], true, Variant::Inline);
        assert_eq!(write_into_batches(&mut padded), 0);
        let pool = Variant::Pool {
            backend: "processes".into(),
            workers: 2,
        };
        // A worker pool's chain gives its slot writer up (its reply carries the smaller
        // input), but keeps one op: a chain of none would ship samples for nothing.
        let mut alone = plan(vec![(T::Write("x"), Raise)], false, pool.clone());
        assert_eq!(write_into_batches(&mut alone), 0);
        let mut pooled = plan(
            vec![(T::Touch("y", "z"), Raise), (T::Write("x"), Raise)],
            false,
            pool,
        );
        assert_eq!(write_into_batches(&mut pooled), 1);
        let StageKind::Chain { ops, .. } = &pooled.stages[0].kind else {
            unreachable!()
        };
        assert_eq!(ops.len(), 1);
    }
}
