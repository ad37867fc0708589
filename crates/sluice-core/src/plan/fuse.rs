//! Op fusion: within a chain stage, an op and the op right after it become one op when the
//! first knows how to run both faster ([`crate::Op::fuse_next`], e.g. `decode` followed by
//! `random_resized_crop` becomes a DCT-scaled `decode_random_resized_crop`).
//!
//! This is the last step before a physical plan runs: the default lowering applies it
//! ([`crate::LowerOptions::fuse_ops`]), and a run under an optimizer plan applies it after the
//! plan (plans name the unfused ops by id, so they are made from and applied to unfused plans).

use crate::plan::logical::ElemMode;
use crate::plan::physical::{ChainOp, Stage, StageKind};

/// Fuses adjacent ops in every chain of `stages` where [`crate::Op::fuse_next`] offers a fused op;
/// returns the fused ops' names. Only two `map`s with the same error policy fuse (a filter
/// or flat_map changes what the next op sees per input; a skip policy counts per op).
pub fn fuse_ops(stages: &mut [Stage]) -> Vec<String> {
    let mut fused_names = Vec::new();
    for stage in stages {
        let StageKind::Chain { ops, .. } = &mut stage.kind else {
            continue;
        };
        let mut out: Vec<ChainOp> = Vec::with_capacity(ops.len());
        for next in ops.drain(..) {
            if let Some(prev) = out.last_mut() {
                if let Some(op) = fusable(prev, &next) {
                    fused_names.push(op.name().to_string());
                    prev.op = op;
                    continue;
                }
            }
            out.push(next);
        }
        *ops = out;
    }
    fused_names
}

fn fusable(prev: &ChainOp, next: &ChainOp) -> Option<crate::op::OpRef> {
    if prev.mode != ElemMode::Map || next.mode != ElemMode::Map || prev.on_error != next.on_error {
        return None;
    }
    prev.op.fuse_next(next.op.as_ref(), next.op_id)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::error::Result;
    use crate::op::{Emit, Op, OpContext, OpMeta, OpRef};
    use crate::plan::logical::OnError;
    use crate::plan::physical::Variant;
    use crate::sample::Sample;
    use crate::value::Value;

    /// `add(k)` adds k to `id`; `add(a)` then `add(b)` fuse into `add(a+b)`.
    #[derive(Debug)]
    struct Add(i64);
    impl Op for Add {
        fn name(&self) -> &str {
            "add"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": "add", "k": self.0})
        }
        fn meta(&self) -> OpMeta {
            OpMeta::opaque(false)
        }
        fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
            let v = s.require("id", "add")?.as_int().unwrap_or(0);
            s.set("id", Value::Int(v + self.0));
            Ok(Emit::One(s))
        }
        fn fuse_next(&self, next: &dyn Op, _next_op_id: u64) -> Option<OpRef> {
            let k = next.spec().get("k")?.as_i64()?;
            (next.name() == "add").then(|| Arc::new(Add(self.0 + k)) as OpRef)
        }
    }

    fn chain(ops: Vec<(i64, ElemMode, OnError)>) -> Vec<Stage> {
        let ops = ops
            .into_iter()
            .enumerate()
            .map(|(i, (k, mode, on_error))| ChainOp {
                op: Arc::new(Add(k)),
                mode,
                on_error,
                op_id: i as u64,
            })
            .collect();
        vec![Stage {
            kind: StageKind::Chain { read: true, ops },
            variant: Variant::Threads { threads: 1 },
            queue_depth: 1,
        }]
    }

    fn specs(stages: &[Stage]) -> Vec<(serde_json::Value, u64)> {
        match &stages[0].kind {
            StageKind::Chain { ops, .. } => ops.iter().map(|o| (o.op.spec(), o.op_id)).collect(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn fuses_runs_of_maps_keeping_the_first_id() {
        use ElemMode::Map;
        let mut st = chain(vec![
            (1, Map, OnError::Raise),
            (2, Map, OnError::Raise),
            (4, Map, OnError::Raise),
        ]);
        assert_eq!(fuse_ops(&mut st), ["add", "add"]);
        assert_eq!(specs(&st), [(serde_json::json!({"op": "add", "k": 7}), 0)]);
    }

    #[test]
    fn keeps_filters_and_different_error_policies_apart() {
        use ElemMode::{Filter, Map};
        let mut st = chain(vec![
            (1, Map, OnError::Raise),
            (2, Filter, OnError::Raise),
            (4, Map, OnError::Raise),
            (8, Map, OnError::Skip),
        ]);
        assert!(fuse_ops(&mut st).is_empty());
        assert_eq!(specs(&st).len(), 4);
    }
}
