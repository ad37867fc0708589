//! AutoOrder (Pecan): reorder element-wise ops when their declared read/write sets and kinds
//! make the move safe, choosing the order the cost model says is cheapest.
//!
//! An op `b` may move ahead of an op `a` when neither is pinned, neither is a `flat_map`
//! (downstream randomness depends on the sub-index it assigns), and either
//! - they touch disjoint fields (they commute exactly, randomness included, because every
//!   op's generator derives from its own op id, not its position), or
//! - not in exact mode, `b` is size-reducing and `a` pixel-wise or geometric on the same
//!   field: crop-before-jitter gives samples from the same distribution, not the same bytes.
//!
//! Runs of at most [`EXHAUSTIVE_MAX`] movable ops are searched exhaustively; longer runs
//! greedily bubble ops earlier while the model says it pays.
//!
//! Op fusion ([`sluice_core::plan::fuse`], e.g. `decode` + `random_resized_crop`) is not
//! modelled here: it runs after the plan is applied, on the ops adjacent then. Moving a crop
//! ahead of a jitter puts it next to its decode, which the run then fuses; among near-ties
//! the written order wins, so a written `decode → crop` pair is never split for nothing
//! (`crates/sluice/tests/op_fusion.rs`).

use std::collections::HashSet;

use sluice_core::{ChainOp, ElemMode, OpKind, Result, Stage, StageKind, Variant};

use super::{Draft, Rule};
use crate::model::chain_cost;

/// Longest run of movable ops searched exhaustively (7! = 5040 orders).
pub const EXHAUSTIVE_MAX: usize = 7;

/// The AutoOrder rule.
#[derive(Debug, Default)]
pub struct Reorder;

fn overlaps(a: &[String], b: &[String]) -> bool {
    a.iter().any(|x| b.contains(x))
}

/// Whether `b` (after `a` as written) may run before `a`.
pub fn may_precede(b: &ChainOp, a: &ChainOp, pinned: &HashSet<u64>, exact: bool) -> bool {
    if pinned.contains(&a.op_id) || pinned.contains(&b.op_id) {
        return false;
    }
    if a.mode == ElemMode::FlatMap || b.mode == ElemMode::FlatMap {
        return false;
    }
    let (ma, mb) = (a.op.meta(), b.op.meta());
    let conflict = overlaps(&mb.reads, &ma.writes)
        || overlaps(&mb.writes, &ma.reads)
        || overlaps(&mb.writes, &ma.writes);
    if !conflict {
        return true;
    }
    !exact
        && mb.kind == OpKind::SizeReducing
        && matches!(ma.kind, OpKind::PixelWise | OpKind::Geometric)
        && a.mode == ElemMode::Map
        && b.mode == ElemMode::Map
}

/// Whether `order` (indices into `ops`) only inverts pairs that may be inverted.
fn valid(order: &[usize], ops: &[ChainOp], pinned: &HashSet<u64>, exact: bool) -> bool {
    for (i, &x) in order.iter().enumerate() {
        for &y in &order[i + 1..] {
            // y runs after x; if y was written first, x moved ahead of it.
            if y < x && !may_precede(&ops[x], &ops[y], pinned, exact) {
                return false;
            }
        }
    }
    true
}

fn inversions(order: &[usize]) -> usize {
    (0..order.len())
        .map(|i| order[i + 1..].iter().filter(|&&y| y < order[i]).count())
        .sum()
}

fn permutations(n: usize, f: &mut impl FnMut(&[usize])) {
    fn go(k: usize, p: &mut Vec<usize>, f: &mut impl FnMut(&[usize])) {
        if k == p.len() {
            f(p);
            return;
        }
        for i in k..p.len() {
            p.swap(k, i);
            go(k + 1, p, f);
            p.swap(k, i);
        }
    }
    go(0, &mut (0..n).collect(), f);
}

impl Rule for Reorder {
    fn name(&self) -> &'static str {
        "reorder"
    }

    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let exact = d.options.exact;
        // Runs of consecutive chain stages form the segments ops may move within.
        let mut i = 0;
        while i < d.plan.stages.len() {
            let start = i;
            while i < d.plan.stages.len()
                && matches!(d.plan.stages[i].kind, StageKind::Chain { .. })
            {
                i += 1;
            }
            if i > start {
                self.segment(d, start, i, exact);
            }
            i += 1;
        }
        Ok(())
    }
}

impl Reorder {
    fn segment(&self, d: &mut Draft<'_>, start: usize, end: usize, exact: bool) {
        let ops: Vec<ChainOp> = d.plan.stages[start..end]
            .iter()
            .flat_map(|s| match &s.kind {
                StageKind::Chain { ops, .. } => ops.clone(),
                _ => vec![],
            })
            .collect();
        if ops.len() < 2 {
            return;
        }
        // Ops before and after the segment, for whole-pipeline costs.
        let ids_before: Vec<u64> = d.plan.stages[..start]
            .iter()
            .flat_map(|s| match &s.kind {
                StageKind::Chain { ops, .. } => ops.iter().map(|o| o.op_id).collect(),
                _ => vec![],
            })
            .collect();
        let cost = |order: &[usize]| {
            let ids: Vec<u64> = ids_before
                .iter()
                .copied()
                .chain(order.iter().map(|&k| ops[k].op_id))
                .collect();
            chain_cost(d.profile, &ids)
        };
        let written: Vec<usize> = (0..ops.len()).collect();
        let base = cost(&written);
        let mut cands: Vec<(f64, Vec<usize>)> = Vec::new();
        if ops.len() <= EXHAUSTIVE_MAX {
            permutations(ops.len(), &mut |p| {
                if valid(p, &ops, &d.pinned, exact) {
                    cands.push((cost(p), p.to_vec()));
                }
            });
        } else {
            let mut order = written.clone();
            let mut cur = base;
            let mut improved = true;
            while improved {
                improved = false;
                for k in 1..order.len() {
                    let mut cand = order.clone();
                    cand.swap(k - 1, k);
                    let c = cost(&cand);
                    if valid(&cand, &ops, &d.pinned, exact) && c < cur * 0.97 {
                        (order, cur, improved) = (cand, c, true);
                    }
                }
            }
            cands.push((cur, order));
        }
        // Among the cheapest orders (within 3%), the one closest to what the user wrote; and
        // only if it beats the written order by a margin, so noise never reorders for nothing.
        let min = cands.iter().map(|c| c.0).fold(base, f64::min);
        let best = cands
            .into_iter()
            .filter(|c| c.0 <= min * 1.03)
            .min_by_key(|c| inversions(&c.1))
            .filter(|c| c.0 < base * 0.97)
            .unwrap_or((base, written.clone()));
        if best.1 == written {
            return;
        }
        let names = |o: &[usize]| {
            o.iter()
                .map(|&k| ops[k].op.name().to_string())
                .collect::<Vec<_>>()
                .join(" → ")
        };
        d.note(
            "reorder",
            format!(
                "{} instead of {} (model: {:.1} → {:.1} µs CPU per sample{})",
                names(&best.1),
                names(&written),
                base * 1e6,
                best.0 * 1e6,
                if exact {
                    ""
                } else {
                    "; approximate moves allowed"
                }
            ),
        );
        // Rebuild the segment: a read-only stage stays first, then one stage per op in the
        // new order (fusion merges them afterwards).
        let template = d.plan.stages[start].clone();
        let read = matches!(
            &d.plan.stages[start].kind,
            StageKind::Chain { read: true, .. }
        );
        let mut stages: Vec<Stage> = Vec::new();
        if read {
            stages.push(Stage {
                kind: StageKind::Chain {
                    read: true,
                    ops: vec![],
                },
                ..template.clone()
            });
        }
        for &k in &best.1 {
            stages.push(Stage {
                kind: StageKind::Chain {
                    read: false,
                    ops: vec![ops[k].clone()],
                },
                variant: Variant::Inline,
                ..template.clone()
            });
        }
        d.plan.stages.splice(start..end, stages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::options::OptimizerOptions;
    use crate::testing::*;

    fn jitter() -> TestOp {
        TestOp {
            ns_per_byte: 100.0,
            random: true,
            ..TestOp::new("jitter", OpKind::PixelWise)
        }
    }
    fn crop() -> TestOp {
        TestOp {
            ns_per_byte: 5.0,
            out_len: Some(100),
            random: true,
            ..TestOp::new("crop", OpKind::SizeReducing)
        }
    }
    fn order(opts: OptimizerOptions, ops: Vec<TestOp>) -> Vec<String> {
        let plan = pipeline(40, ops);
        let input = OptimizeInput::for_test(&plan, &opts);
        let out = optimize_physical(&input).unwrap();
        out.plan
            .stages
            .iter()
            .flat_map(|s| match &s.kind {
                StageKind::Chain { ops, .. } => {
                    ops.iter().map(|o| o.op.name().to_string()).collect()
                }
                _ => vec![],
            })
            .collect()
    }

    #[test]
    fn crop_moves_before_jitter_unless_exact_or_pinned() {
        assert_eq!(
            order(Default::default(), vec![jitter(), crop()]),
            ["crop", "jitter"]
        );
        let exact = OptimizerOptions {
            exact: true,
            ..Default::default()
        };
        assert_eq!(order(exact, vec![jitter(), crop()]), ["jitter", "crop"]);
        let pinned = TestOp {
            keep_position: Some(true),
            ..crop()
        };
        assert_eq!(
            order(Default::default(), vec![jitter(), pinned]),
            ["jitter", "crop"]
        );
    }

    #[test]
    fn never_crosses_a_decode_a_flat_map_or_an_unmarked_python_op() {
        let decode = TestOp {
            fixed_us: 50,
            out_len: Some(1000),
            ..TestOp::new("decode", OpKind::Decode)
        };
        assert_eq!(
            order(Default::default(), vec![decode, crop()]),
            ["decode", "crop"]
        );
        let py = TestOp {
            python: true,
            ns_per_byte: 100.0,
            ..TestOp::new("udf", OpKind::Opaque)
        };
        assert_eq!(order(Default::default(), vec![py, crop()]), ["udf", "crop"]);
        let fm = TestOp {
            mode: ElemMode::FlatMap,
            ..jitter()
        };
        assert_eq!(
            order(Default::default(), vec![fm, crop()]),
            ["jitter", "crop"]
        );
    }

    #[test]
    fn disjoint_fields_commute_even_in_exact_mode() {
        let label = TestOp {
            fixed_us: 1,
            reads: vec!["id".into()],
            writes: vec!["label".into()],
            ..TestOp::new("label", OpKind::Opaque)
        };
        let filter = TestOp {
            reads: vec!["id".into()],
            ..keep_even()
        };
        let exact = OptimizerOptions {
            exact: true,
            ..Default::default()
        };
        // The expensive jitter runs on half the samples once the filter goes before it.
        let got = order(exact, vec![jitter(), label, filter]);
        let at = |n: &str| got.iter().position(|x| x == n).unwrap();
        assert!(at("keep_even") < at("jitter"), "{got:?}");
    }

    #[test]
    fn long_chains_are_reordered_greedily() {
        // Ten movable ops (more than EXHAUSTIVE_MAX): eight cheap ones on fields of their own,
        // then the expensive jitter and the crop on the image.
        let mut ops: Vec<TestOp> = (0..8)
            .map(|i| TestOp {
                fixed_us: 1,
                reads: vec![],
                writes: vec![format!("f{i}")],
                ..TestOp::new(&format!("tag{i}"), OpKind::Opaque)
            })
            .collect();
        ops.push(jitter());
        ops.push(crop());
        assert!(ops.len() > EXHAUSTIVE_MAX);
        let got = order(Default::default(), ops);
        let at = |n: &str| got.iter().position(|x| x == n).unwrap();
        assert!(at("crop") < at("jitter"), "{got:?}");
        assert_eq!(got.len(), 10);
    }

    #[test]
    fn a_python_op_moves_only_when_marked_movable() {
        // An expensive-to-follow filter written after the jitter: moving it first halves the
        // jitter's work, but a Python op stays put unless keep_position=False.
        let py_filter = |movable: Option<bool>| TestOp {
            python: true,
            reads: vec!["id".into()],
            keep_position: movable,
            ..keep_even()
        };
        let fixed = order(Default::default(), vec![jitter(), py_filter(None)]);
        assert_eq!(fixed, ["jitter", "keep_even"]);
        let moved = order(Default::default(), vec![jitter(), py_filter(Some(false))]);
        assert_eq!(moved, ["keep_even", "jitter"]);
    }

    #[test]
    fn validity_checks_every_inverted_pair() {
        let ops: Vec<ChainOp> = [jitter(), crop(), jitter()]
            .into_iter()
            .enumerate()
            .map(|(i, o)| ChainOp {
                op: std::sync::Arc::new(o),
                mode: ElemMode::Map,
                on_error: sluice_core::OnError::Raise,
                op_id: i as u64,
            })
            .collect();
        let none = HashSet::new();
        assert!(valid(&[1, 0, 2], &ops, &none, false));
        // A pixel-wise op never moves before another pixel-wise op on the same field.
        assert!(!valid(&[2, 1, 0], &ops, &none, false));
        assert!(!valid(&[1, 0, 2], &ops, &none, true));
        let mut n = 0;
        permutations(4, &mut |_| n += 1);
        assert_eq!(n, 24);
    }
}
