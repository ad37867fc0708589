//! What reaches the consumer, or the next op, unconverted: the two decisions a run makes
//! from what follows each step, here side by side.
//!
//! Objects: when the consumer takes the bindings' own objects (the Python iterator), the
//! ops at the end of a plan whose results nothing reads are swapped for forms that leave
//! their results unconverted ([`crate::Op::keeping_objects`]). A `map` with a Python
//! function then hands its dict to the loop as the function returned it: no conversion
//! into a sample and back into a new dict per output. The swap is the planner's "objects"
//! rule (`sluice_optimizer::planner`), run on the default lowering or an optimizer's plan
//! for a consumer that takes objects, and changes no stage boundary, so checkpoints and statistics see the same plan either way.
//!
//! Columns: a batch that reads a columnar source keeps the source's arrays
//! ([`crate::Column`]) when what follows it takes them ([`columns_pass`]).

use crate::plan::logical::ElemMode;
use crate::plan::physical::{PhysicalPlan, Stage, StageKind};

/// Swaps, from the end of `plan` back, every op that can leave objects for its object form,
/// stopping at the first step that reads values: an op without such a form, a batch, an
/// unbatch, a pack, or a stage on a worker pool (whose results travel between processes
/// as samples). `take` and `shuffle_buffer` only move samples, so objects pass them.
/// Returns how many ops were swapped.
pub fn keep_objects(plan: &mut PhysicalPlan) -> usize {
    let mut swapped = 0;
    for stage in plan.stages.iter_mut().rev() {
        match &mut stage.kind {
            StageKind::Take { .. } | StageKind::ShuffleBuffer { .. } => {}
            StageKind::Chain { ops, .. } if !stage.variant.is_pool() => {
                for op in ops.iter_mut().rev() {
                    match op.op.keeping_objects() {
                        Some(kept) => {
                            op.op = kept;
                            swapped += 1;
                        }
                        None => return swapped,
                    }
                }
            }
            _ => return swapped,
        }
    }
    swapped
}

/// Whether a batch's columns may go on to `following` (the stages after it): to the consumer
/// past `take`s, or into a first op that takes columns ([`crate::Op::takes_columns`]) and
/// makes new samples of its own.
pub(crate) fn columns_pass(following: &[Stage]) -> bool {
    for s in following {
        match &s.kind {
            StageKind::Take { .. } => {}
            StageKind::Chain { read: false, ops } => {
                // A filter would pass its input, columns and all, on to what follows.
                return ops
                    .first()
                    .is_some_and(|o| o.mode != ElemMode::Filter && o.op.takes_columns());
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::error::Result;
    use crate::op::{Emit, Op, OpContext, OpMeta, OpRef};
    use crate::plan::logical::{ElemMode, OnError};
    use crate::plan::physical::{ChainOp, SourceStage, Stage, Variant};
    use crate::sample::Sample;
    use crate::source::RangeSource;

    /// An op that has an object form when `can`; `kept` marks the swapped form.
    #[derive(Debug)]
    struct Udf {
        can: bool,
        kept: bool,
    }
    impl Op for Udf {
        fn name(&self) -> &str {
            if self.kept {
                "kept"
            } else {
                "udf"
            }
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": self.name()})
        }
        fn meta(&self) -> OpMeta {
            OpMeta::opaque(self.can)
        }
        fn apply(&self, s: Sample, _cx: &OpContext) -> Result<Emit> {
            Ok(Emit::One(s))
        }
        fn takes_columns(&self) -> bool {
            self.can
        }
        fn keeping_objects(&self) -> Option<OpRef> {
            self.can.then(|| {
                Arc::new(Udf {
                    can: true,
                    kept: true,
                }) as OpRef
            })
        }
    }

    fn chain(can: &[bool], variant: Variant) -> Stage {
        let ops = can
            .iter()
            .enumerate()
            .map(|(i, &can)| ChainOp {
                op: Arc::new(Udf { can, kept: false }),
                mode: ElemMode::Map,
                on_error: OnError::Raise,
                op_id: i as u64,
            })
            .collect();
        Stage {
            kind: StageKind::Chain { read: false, ops },
            variant,
            queue_depth: 1,
        }
    }

    fn plan(stages: Vec<Stage>) -> PhysicalPlan {
        PhysicalPlan {
            source: SourceStage {
                source: Arc::new(RangeSource::new(4)),
                order: None,
                stream_epochs: Some(1),
                chunk_size: 1,
                max_chunk: 1,
                queue_depth: 1,
            },
            stages,
            delivery: Default::default(),
        }
    }

    fn names(p: &PhysicalPlan) -> Vec<Vec<String>> {
        p.stages
            .iter()
            .map(|s| match &s.kind {
                StageKind::Chain { ops, .. } => {
                    ops.iter().map(|o| o.op.name().to_string()).collect()
                }
                k => vec![k.label()],
            })
            .collect()
    }

    #[test]
    fn swaps_the_trailing_ops_that_can_until_one_cannot() {
        let mut p = plan(vec![
            chain(&[true], Variant::Inline),
            chain(&[true, false, true, true], Variant::Threads { threads: 2 }),
            Stage {
                kind: StageKind::Take { n: 3 },
                variant: Variant::Inline,
                queue_depth: 1,
            },
        ]);
        assert_eq!(keep_objects(&mut p), 2);
        assert_eq!(
            names(&p),
            [
                vec!["udf"],
                vec!["udf", "udf", "kept", "kept"],
                vec!["take(3)"]
            ]
        );
    }

    #[test]
    fn passes_whole_stages_of_object_ops_and_shuffle_buffers() {
        let mut p = plan(vec![
            chain(&[true], Variant::Threads { threads: 1 }),
            Stage {
                kind: StageKind::ShuffleBuffer {
                    size: 8,
                    seed: 0,
                    op_id: 9,
                },
                variant: Variant::Inline,
                queue_depth: 1,
            },
            chain(&[true], Variant::Inline),
        ]);
        assert_eq!(keep_objects(&mut p), 2);
        assert_eq!(names(&p)[0], ["kept"]);
    }

    #[test]
    fn stops_at_a_batch_and_at_a_worker_pool() {
        let batch = Stage {
            kind: StageKind::Batch {
                size: 2,
                drop_last: false,
                per_epoch: false,
                pad: vec![],
                read: false,
                ragged: false,
                slots: Vec::new(),
            },
            variant: Variant::Inline,
            queue_depth: 1,
        };
        let mut p = plan(vec![chain(&[true], Variant::Inline), batch]);
        assert_eq!(keep_objects(&mut p), 0);
        let pool = Variant::Pool {
            backend: "processes".into(),
            workers: 2,
        };
        let mut p = plan(vec![chain(&[true], Variant::Inline), chain(&[true], pool)]);
        assert_eq!(keep_objects(&mut p), 0);
        assert_eq!(names(&p), [vec!["udf"], vec!["udf"]]);
    }

    #[test]
    fn columns_go_to_the_consumer_past_takes_or_into_an_op_that_takes_them() {
        let stage = |kind| Stage {
            kind,
            variant: Variant::Inline,
            queue_depth: 1,
        };
        let take = || stage(StageKind::Take { n: 3 });
        let with_mode = |mode| {
            let mut s = chain(&[true], Variant::Inline);
            if let StageKind::Chain { ops, .. } = &mut s.kind {
                ops[0].mode = mode;
            }
            s
        };
        assert!(columns_pass(&[]));
        assert!(columns_pass(&[take(), take()]));
        assert!(columns_pass(&[take(), chain(&[true], Variant::Inline)]));
        assert!(columns_pass(&[
            with_mode(ElemMode::FlatMap),
            stage(StageKind::Unbatch)
        ]));
        assert!(!columns_pass(&[chain(&[false], Variant::Inline)]));
        // A filter hands its input, columns and all, to what follows.
        assert!(!columns_pass(&[with_mode(ElemMode::Filter)]));
        assert!(!columns_pass(&[stage(StageKind::Unbatch)]));
    }
}
