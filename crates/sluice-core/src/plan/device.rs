//! Images decoded on the consumer's GPU: for a consumer that says it decodes on its device
//! ([`crate::Consumer::device_decode`]: `iter_torch_batches(device="cuda")` where nvJPEG is
//! at hand), a chain's `decode` + `random_resized_crop` (+ the `horizontal_flip` after them)
//! become their random draws ([`crate::Op::device_draws`]): the decoded field gets the
//! encoded image behind the crop box and flip the host ops would have picked (from the same
//! generators: the same (seed, epoch, index, op) draws), and the consumer decodes, crops,
//! resizes and flips the batch on the device. On the CV reference pipeline
//! decode and crop are two thirds of the host's CPU per image (docs/BENCHMARKS.md).
//!
//! The planner's "decode on device" rule (`sluice_optimizer::planner`). It applies only
//! where the pixels are not needed on the host: no op after the chain's draws reads the
//! field (or may read anything: a Python function) before a batch, and a batch follows,
//! since the device decodes a batch at a time. Not in a run that times its ops, whose
//! measurements are the host ops'.

use crate::op::OpRef;
use crate::plan::logical::ElemMode;
use crate::plan::physical::{ChainOp, PhysicalPlan, StageKind};

/// Replaces each chain's ops that a device can do by their draws, where nothing after them
/// reads the pixels before a batch. Returns the names of the ops made.
pub fn decode_on_device(plan: &mut PhysicalPlan) -> Vec<String> {
    let mut made = Vec::new();
    for i in 0..plan.stages.len() {
        let mut k = 0;
        while let StageKind::Chain { ops, .. } = &plan.stages[i].kind {
            if k >= ops.len() {
                break;
            }
            let Some((draws, taken)) = draws_at(ops, k) else {
                k += 1;
                continue;
            };
            // The field whose pixels the host no longer makes.
            let field = draws.meta().writes.first().cloned().unwrap_or_default();
            if !unread_until_batch(plan, i, k + taken, &field) {
                k += 1;
                continue;
            }
            let StageKind::Chain { ops, .. } = &mut plan.stages[i].kind else {
                unreachable!("checked above");
            };
            let first = &ops[k];
            let op = ChainOp {
                op: draws,
                mode: first.mode,
                on_error: first.on_error,
                op_id: first.op_id,
            };
            made.push(op.op.name().to_string());
            ops.splice(k..k + taken, [op]);
            k += 1;
        }
    }
    made
}

/// The draws op for `ops[k]` (fused with `ops[k + 1]` first when they fuse: a run without
/// `fuse_ops` leaves decode and its crop apart) and how many ops it replaces.
fn draws_at(ops: &[ChainOp], k: usize) -> Option<(OpRef, usize)> {
    let along = |a: &ChainOp, b: &ChainOp| {
        a.mode == ElemMode::Map && b.mode == ElemMode::Map && a.on_error == b.on_error
    };
    let first = &ops[k];
    if first.mode != ElemMode::Map {
        return None;
    }
    let (op, used) = match ops.get(k + 1) {
        Some(next) if along(first, next) => match first.op.fuse_next(&*next.op, next.op_id) {
            Some(fused) => (fused, 2),
            None => (first.op.clone(), 1),
        },
        _ => (first.op.clone(), 1),
    };
    let next = ops
        .get(k + used)
        .filter(|n| along(first, n))
        .map(|n| (&*n.op, n.op_id));
    let (draws, took_next) = op.device_draws(next)?;
    Some((draws, used + usize::from(took_next)))
}

/// Whether nothing from `ops[from..]` of stage `stage` on reads `field`'s pixels before a
/// batch, and a batch comes. Ops that only select, drop or rename fields carry it (under its
/// new name after a rename).
fn unread_until_batch(plan: &PhysicalPlan, stage: usize, from: usize, field: &str) -> bool {
    let mut field = field.to_string();
    // Whether `cop` reads the field's pixels; follows the field through `cop` otherwise.
    let mut reads = |cop: &ChainOp| {
        let meta = cop.op.meta();
        if meta.python {
            return true;
        }
        if !meta.reads.contains(&field) {
            return false;
        }
        if !cop.op.moves_fields() {
            return true;
        }
        let before = [field.clone()];
        match cop.op.output_fields(&before).as_deref() {
            Some(out) if out.contains(&field) => false,
            // Renamed.
            Some([one]) => {
                field = one.clone();
                false
            }
            // Dropped: nothing after can read it.
            Some([]) => false,
            _ => true,
        }
    };
    for (i, st) in plan.stages.iter().enumerate().skip(stage) {
        match &st.kind {
            StageKind::Chain { ops, .. } => {
                let start = if i == stage { from } else { 0 };
                if ops[start.min(ops.len())..].iter().any(&mut reads) {
                    return false;
                }
            }
            StageKind::Batch { slots, .. } => return !slots.iter().any(&mut reads),
            StageKind::Take { .. } | StageKind::ShuffleBuffer { .. } => {}
            StageKind::Unbatch | StageKind::Pack(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::error::Result;
    use crate::op::{Emit, Op, OpContext, OpKind, OpMeta};
    use crate::plan::logical::OnError;
    use crate::plan::physical::Variant;
    use crate::sample::Sample;

    /// An op named `name` reading `reads`; "decode" takes "crop" in when they fuse, a
    /// "decode+crop" op gives its draws (taking "flip" in too).
    #[derive(Debug)]
    struct Fake {
        name: &'static str,
        reads: &'static str,
        python: bool,
    }

    fn fake(name: &'static str, reads: &'static str) -> ChainOp {
        op(Fake {
            name,
            reads,
            python: false,
        })
    }

    fn op(f: Fake) -> ChainOp {
        ChainOp {
            op: Arc::new(f),
            mode: ElemMode::Map,
            on_error: OnError::Raise,
            op_id: 0,
        }
    }

    impl Op for Fake {
        fn name(&self) -> &str {
            self.name
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({ "op": self.name })
        }
        fn meta(&self) -> OpMeta {
            OpMeta {
                reads: vec![self.reads.into()],
                writes: vec![self.reads.into()],
                kind: OpKind::Opaque,
                random: false,
                python: self.python,
            }
        }
        fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
            Ok(Emit::One(s))
        }
        fn fuse_next(&self, next: &dyn Op, _: u64) -> Option<OpRef> {
            (self.name == "decode" && next.name() == "crop")
                .then(|| fake("decode+crop", "image").op)
        }
        fn device_draws(&self, next: Option<(&dyn Op, u64)>) -> Option<(OpRef, bool)> {
            (self.name == "decode+crop").then(|| {
                let flip = next.is_some_and(|(n, _)| n.name() == "flip");
                (fake("draws", "image").op, flip)
            })
        }
    }

    fn plan(chain: Vec<ChainOp>, then: Vec<StageKind>) -> PhysicalPlan {
        let first = StageKind::Chain {
            read: true,
            ops: chain,
        };
        let stages = std::iter::once(first).chain(then);
        PhysicalPlan::of_stages(
            stages
                .map(|k| (k, Variant::Threads { threads: 1 }))
                .collect(),
        )
    }

    fn batch() -> StageKind {
        StageKind::Batch {
            size: 4,
            drop_last: false,
            per_epoch: false,
            pad: vec![],
            read: false,
            ragged: false,
            slots: vec![],
        }
    }

    fn names(p: &PhysicalPlan) -> Vec<String> {
        match &p.stages[0].kind {
            StageKind::Chain { ops, .. } => ops.iter().map(|o| o.op.name().to_string()).collect(),
            _ => vec![],
        }
    }

    #[test]
    fn decode_crop_and_flip_become_draws_when_nothing_reads_the_pixels_before_a_batch() {
        let chain = || {
            vec![
                fake("decode", "image"),
                fake("crop", "image"),
                fake("flip", "image"),
                fake("label", "label"),
            ]
        };
        let mut p = plan(chain(), vec![batch()]);
        assert_eq!(decode_on_device(&mut p), ["draws"]);
        assert_eq!(names(&p), ["draws", "label"]);
        // Already fused (the default lowering): the same.
        let mut fused = chain();
        fused.splice(0..2, [fake("decode+crop", "image")]);
        let mut p = plan(fused, vec![batch()]);
        assert_eq!(decode_on_device(&mut p), ["draws"]);
        assert_eq!(names(&p), ["draws", "label"]);
    }

    #[test]
    fn pixels_read_on_the_host_or_no_batch_keep_the_host_ops() {
        let reads_after = vec![
            fake("decode", "image"),
            fake("crop", "image"),
            fake("jitter", "image"),
        ];
        let python_after = vec![
            fake("decode", "image"),
            fake("crop", "image"),
            op(Fake {
                name: "udf",
                reads: "other",
                python: true,
            }),
        ];
        let plain = || vec![fake("decode", "image"), fake("crop", "image")];
        for (chain, then) in [
            (reads_after, vec![batch()]),
            (python_after, vec![batch()]),
            (plain(), vec![]),
            (plain(), vec![StageKind::Unbatch, batch()]),
            // Decode alone has no device form here.
            (vec![fake("decode", "image")], vec![batch()]),
        ] {
            let mut p = plan(chain, then);
            let before = names(&p);
            assert!(decode_on_device(&mut p).is_empty(), "{before:?}");
            assert_eq!(names(&p), before);
        }
        // A later stage reading the field counts too.
        let mut p = plan(
            plain(),
            vec![
                StageKind::Chain {
                    read: false,
                    ops: vec![fake("normalize", "image")],
                },
                batch(),
            ],
        );
        assert!(decode_on_device(&mut p).is_empty());
    }
}
