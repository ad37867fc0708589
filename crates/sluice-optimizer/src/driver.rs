//! The driver: runs the enabled rules in order on the unfused default plan and checks the
//! plan's invariants after every rule, so a buggy rule fails loudly instead of silently
//! changing results.
//!
//! Order: reorder (on single-op stages, so any order is expressible) → caching (takes the
//! deterministic prefix out of the chains) → placement (threads, inline or processes) →
//! fusion (merges neighbours placed alike) → parallelism (sizes the merged stages) →
//! offload (moves stages to Ray when it pays, re-sizing the rest) → prefetch (queue depths
//! for the final shape).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use sluice_core::{
    ChainOp, ElemMode, Error, LogicalPlan, PhysicalPlan, Result, StageKind, Variant,
};

use crate::model::{predict_with, RemoteModel};
use crate::options::OptimizerOptions;
use crate::plan::{CachePoint, Plan, Prediction};
use crate::profile::Profile;
use crate::rules::{self, Draft, Rule};

/// What the optimizer works from.
#[derive(Debug, Clone)]
pub struct OptimizeInput {
    /// The pipeline as written.
    pub logical: Arc<LogicalPlan>,
    /// Its default lowering (the optimizer reshapes this), with `fuse_ops: false`: plans
    /// name the pipeline's own ops, and op fusion runs after a plan is applied.
    pub default: PhysicalPlan,
    pub profile: Profile,
    pub options: OptimizerOptions,
    /// Cores of this machine (`options.available_local_cpus` overrides).
    pub cpus: usize,
    /// Worker pools available besides threads (e.g. `processes`).
    pub pools: Vec<String>,
}

impl OptimizeInput {
    /// An input for tests: default lowering, a profile with the test ops' declared costs, 2
    /// cores, no pools.
    #[cfg(test)]
    pub fn for_test(logical: &Arc<LogicalPlan>, options: &OptimizerOptions) -> Self {
        let profile = crate::testing::profiled(logical, 64);
        OptimizeInput {
            logical: logical.clone(),
            default: sluice_core::lower(
                logical,
                &sluice_core::LowerOptions {
                    fuse_ops: false,
                    ..Default::default()
                },
            )
            .expect("lower"),
            profile,
            // Rule tests look at what the rules make; the fallback has tests of its own.
            options: OptimizerOptions {
                enable_fallback: false,
                ..options.clone()
            },
            cpus: 2,
            pools: vec![],
        }
    }
}

/// The optimizer's result.
#[derive(Debug, Clone)]
pub struct Optimized {
    pub plan: PhysicalPlan,
    pub cache: Option<CachePoint>,
    pub prediction: Prediction,
    pub decisions: Vec<String>,
    /// The plan is the default plan (see [`MIN_GAIN`]): it runs as a run without a plan
    /// does, so without the runtime controller whatever the options say.
    pub fell_back: bool,
}

impl Optimized {
    /// The plan file for this result.
    pub fn to_plan(&self, options: &OptimizerOptions, cpus: usize) -> Plan {
        let mut plan = Plan::describe(
            &self.plan,
            self.cache.clone(),
            self.prediction.clone(),
            self.decisions.clone(),
            options,
            cpus,
        );
        plan.controller &= !self.fell_back;
        plan
    }
}

/// Ops the user pinned, and — unless marked movable (`keep_position=False`) — Python ops and
/// ops that declare no fields (nothing says what they touch).
fn pinned_ops(logical: &Arc<LogicalPlan>) -> HashSet<u64> {
    logical
        .chain()
        .iter()
        .filter_map(|n| match &**n {
            LogicalPlan::Map(m) => {
                let meta = m.op.meta();
                let undeclared = meta.reads.is_empty() && meta.writes.is_empty();
                let pinned = match m.keep_position {
                    Some(keep) => keep,
                    None => meta.python || undeclared,
                };
                pinned.then_some(m.op_id)
            }
            _ => None,
        })
        .collect()
}

/// Runs the rules and returns the optimized physical plan.
pub fn optimize_physical(input: &OptimizeInput) -> Result<Optimized> {
    let o = &input.options;
    let cpus = o.cpus(input.cpus);
    let mut draft = Draft {
        plan: input.default.clone(),
        profile: &input.profile,
        options: o,
        cpus,
        pinned: pinned_ops(&input.logical),
        pools: input.pools.clone(),
        cache: None,
        decisions: Vec::new(),
    };
    rules::unfuse(&mut draft.plan);
    let reference = Snapshot::of(&draft);
    let mut order: Vec<Box<dyn Rule>> = Vec::new();
    if o.enable_reorder {
        order.push(Box::new(rules::reorder::Reorder));
    }
    if o.enable_caching {
        order.push(Box::new(rules::caching::Caching));
    }
    if o.enable_local_parallelism {
        order.push(Box::new(rules::placement::Placement));
    }
    if o.enable_fusion {
        order.push(Box::new(rules::fusion::Fusion));
    }
    if o.enable_local_parallelism {
        order.push(Box::new(rules::parallelism::Parallelism));
    }
    if o.enable_offload {
        order.push(Box::new(rules::offload::Offload));
    }
    if o.enable_prefetch {
        order.push(Box::new(rules::prefetch::Prefetch));
    }
    for rule in order {
        rule.apply(&mut draft)?;
        reference.check(&draft, input).map_err(|why| {
            Error::Internal(format!(
                "optimizer rule '{}' broke the plan: {why}",
                rule.name()
            ))
        })?;
    }
    let remote = RemoteModel::from_options(o);
    let prediction = predict_with(
        &draft.plan,
        &input.profile,
        cpus,
        draft.cache.as_ref(),
        remote.as_ref(),
    );
    let optimized = Optimized {
        plan: draft.plan,
        cache: draft.cache,
        prediction,
        decisions: draft.decisions,
        fell_back: false,
    };
    if !o.enable_fallback {
        return Ok(optimized);
    }
    let default = predict_with(&input.default, &input.profile, cpus, None, remote.as_ref());
    Ok(keep_default_unless_faster(
        optimized,
        &input.default,
        default,
    ))
}

/// Least predicted gain over the default plan for the optimized plan to be run: below it,
/// the cost model's error (within 20% per plan, partly shared by two plans of one profile)
/// and a new plan's start-up (no fused decode+crop when reordered, fresh threads) can turn a
/// predicted win into a loss.
pub const MIN_GAIN: f64 = 0.10;

/// The optimizer earns its keep or stands aside: `optimized` is run only when the model
/// predicts it at least [`MIN_GAIN`] faster than `default` (the run without a plan,
/// predicted from the same profile); otherwise the default is the plan, and its decisions
/// say why.
fn keep_default_unless_faster(
    optimized: Optimized,
    default_plan: &PhysicalPlan,
    default: Prediction,
) -> Optimized {
    let (new, old) = (optimized.prediction.throughput, default.throughput);
    let mut decisions = optimized.decisions;
    // A default the model cannot price (no throughput) gives nothing to compare against.
    let gain = (old.is_finite() && old > 0.0).then(|| new / old - 1.0);
    if gain.is_none_or(|g| g >= MIN_GAIN) {
        decisions.push(format!(
            "fallback: kept the optimized plan: predicted {new:.0}/s against the default \
             plan's {old:.0}/s ({})",
            gain.map_or("no default to compare".into(), |g| format!(
                "{:+.0}%",
                g * 100.0
            ))
        ));
        return Optimized {
            decisions,
            ..optimized
        };
    }
    decisions.push(format!(
        "fallback: ran the default plan: the optimized plan was predicted at {new:.0}/s \
         against the default's {old:.0}/s ({:+.0}%, below the {:.0}% gain a new plan must \
         show); the decisions above are what it would have done",
        gain.unwrap_or_default() * 100.0,
        MIN_GAIN * 100.0
    ));
    Optimized {
        plan: default_plan.clone(),
        cache: None,
        prediction: default,
        decisions,
        fell_back: true,
    }
}

/// What every rule must preserve, taken from the unfused default plan.
struct Snapshot {
    ops: BTreeSet<u64>,
    /// The ops in the order written.
    original: Vec<u64>,
    others: Vec<String>,
    /// For each op that must not move relative to others: the ops before it.
    fixed: Vec<(u64, BTreeSet<u64>)>,
    reads_source: bool,
}

fn op_order(d: &Draft<'_>) -> Vec<u64> {
    let mut ids: Vec<u64> = d.cache.iter().flat_map(|c| c.op_ids.clone()).collect();
    ids.extend(d.chain_ops().iter().map(|o| o.op_id));
    ids
}

impl Snapshot {
    fn of(d: &Draft<'_>) -> Snapshot {
        let order = op_order(d);
        let fixed = d
            .chain_ops()
            .iter()
            .filter(|o| d.pinned.contains(&o.op_id) || o.mode == ElemMode::FlatMap)
            .map(|o| {
                let at = order.iter().position(|&x| x == o.op_id).unwrap_or(0);
                (o.op_id, order[..at].iter().copied().collect())
            })
            .collect();
        Snapshot {
            ops: order.iter().copied().collect(),
            original: order.clone(),
            others: others(&d.plan),
            fixed,
            reads_source: d.plan.source.order.is_some(),
        }
    }

    fn check(&self, d: &Draft<'_>, input: &OptimizeInput) -> std::result::Result<(), String> {
        let order = op_order(d);
        let set: BTreeSet<u64> = order.iter().copied().collect();
        if set != self.ops || set.len() != order.len() {
            return Err(format!("ops changed: {:?} → {order:?}", self.ops));
        }
        if others(&d.plan) != self.others {
            return Err(format!(
                "stateful stages changed: {:?} → {:?}",
                self.others,
                others(&d.plan)
            ));
        }
        for (id, before) in &self.fixed {
            let at = order.iter().position(|x| x == id).unwrap_or(0);
            let now: BTreeSet<u64> = order[..at].iter().copied().collect();
            if &now != before {
                return Err(format!("pinned op {id} moved"));
            }
        }
        // Determinism: the cache holds only what is the same every epoch, and every pair of
        // ops the plan swapped may be swapped (exactly, under `exact`).
        let chain_of = |p: &PhysicalPlan| -> Vec<ChainOp> {
            p.stages
                .iter()
                .flat_map(|s| match &s.kind {
                    StageKind::Chain { ops, .. } => ops.clone(),
                    _ => vec![],
                })
                .collect()
        };
        let all = chain_of(&input.default);
        let op = |id: u64| all.iter().find(|o| o.op_id == id);
        if let Some(c) = &d.cache {
            for id in &c.op_ids {
                if let Some(o) = op(*id) {
                    let m = o.op.meta();
                    if m.random || m.python || o.mode != ElemMode::Map {
                        return Err(format!("op {id} is cached but random, Python or not a map"));
                    }
                }
            }
        }
        let was = |id: u64| self.original.iter().position(|&x| x == id);
        for (i, &x) in order.iter().enumerate() {
            for &y in &order[i + 1..] {
                // x now runs before y although it was written after it.
                if let (Some(px), Some(py), Some(ox), Some(oy)) = (was(x), was(y), op(x), op(y)) {
                    if px > py && !rules::reorder::may_precede(ox, oy, &d.pinned, d.options.exact) {
                        return Err(format!("op {x} moved before op {y}, which is not safe"));
                    }
                }
            }
        }
        // The source is read exactly once, before any op runs.
        let reads: Vec<usize> = d
            .plan
            .stages
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.kind, StageKind::Chain { read: true, .. }))
            .map(|(i, _)| i)
            .collect();
        if self.reads_source {
            let first_op =
                d.plan.stages.iter().position(
                    |s| matches!(&s.kind, StageKind::Chain { ops, .. } if !ops.is_empty()),
                );
            if reads.len() != 1 || first_op.is_some_and(|f| f < reads[0]) {
                return Err("the source must be read once, before the first op".into());
            }
        } else if !reads.is_empty() {
            return Err("a stream cannot be read by index".into());
        }
        // Every op's declared inputs exist when it runs (while fields are known).
        if let Some(mut fields) = input.logical.source().fields() {
            let chain = d.chain_ops();
            let by_id = |id: u64| chain.iter().find(|o| o.op_id == id).map(|o| o.op.meta());
            let cached: Vec<_> = input
                .default
                .stages
                .iter()
                .flat_map(|s| match &s.kind {
                    StageKind::Chain { ops, .. } => ops.clone(),
                    _ => vec![],
                })
                .collect();
            for id in order {
                let meta = by_id(id)
                    .or_else(|| cached.iter().find(|o| o.op_id == id).map(|o| o.op.meta()));
                let Some(meta) = meta else { continue };
                if meta.python {
                    break; // a UDF may add any field
                }
                if let Some(r) = meta.reads.iter().find(|r| !fields.contains(r)) {
                    return Err(format!("op {id} reads '{r}' before it exists"));
                }
                fields.extend(meta.writes.iter().cloned());
            }
        }
        // A pool stage must name a backend that exists.
        for s in &d.plan.stages {
            if let Variant::Pool { backend, .. } = &s.variant {
                if !d.pools.contains(backend) {
                    return Err(format!("stage on unavailable backend {backend}"));
                }
            }
        }
        Ok(())
    }
}

fn others(plan: &PhysicalPlan) -> Vec<String> {
    plan.stages
        .iter()
        .filter(|s| !matches!(s.kind, StageKind::Chain { .. }))
        .map(|s| s.kind.label())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use sluice_core::{lower, LowerOptions};
    use sluice_core::{ExecOptions, Execution, OpKind, Sample};

    fn run(plan: &PhysicalPlan) -> Vec<Sample> {
        Execution::start(plan, ExecOptions::default())
            .unwrap()
            .collect::<Result<Vec<_>>>()
            .unwrap()
    }

    /// A pixel-wise op costing 20 ns per byte.
    fn costly_jitter() -> TestOp {
        TestOp {
            ns_per_byte: 20.0,
            ..TestOp::new("jitter", OpKind::PixelWise)
        }
    }

    #[test]
    fn exact_plans_give_the_same_samples_as_the_default() {
        let plan = pipeline(
            50,
            vec![
                costly_jitter(),
                keep_even(),
                TestOp {
                    out_len: Some(10),
                    ..TestOp::new("crop", OpKind::SizeReducing)
                },
            ],
        );
        let exact = OptimizerOptions {
            exact: true,
            ..Default::default()
        };
        let input = OptimizeInput::for_test(&plan, &exact);
        let out = optimize_physical(&input).unwrap();
        assert!(
            out.decisions.iter().any(|d| d.starts_with("reorder")),
            "{:?}",
            out.decisions
        );
        assert_eq!(run(&out.plan), run(&input.default));
        // The plan file rebuilds the same physical plan from the pipeline's default lowering.
        let file = out.to_plan(&exact, 2);
        let back = Plan::from_json(&file.to_json()).unwrap();
        let rebuilt = back.apply(&input.default).unwrap();
        assert_eq!(rebuilt.to_string(), out.plan.to_string());
        assert_eq!(run(&rebuilt), run(&input.default));
    }

    #[test]
    fn a_plan_for_another_pipeline_is_refused() {
        let a = pipeline(10, vec![busy_op("a", 1, OpKind::Opaque)]);
        let b = pipeline(
            10,
            vec![
                busy_op("a", 1, OpKind::Opaque),
                busy_op("b", 1, OpKind::Opaque),
            ],
        );
        let pa = optimize_physical(&OptimizeInput::for_test(&a, &Default::default()))
            .unwrap()
            .to_plan(&Default::default(), 2);
        let lowered_b = lower(&b, &LowerOptions::default()).unwrap();
        let err = pa.apply(&lowered_b).unwrap_err().to_string();
        assert!(err.contains("different pipeline"), "{err}");
    }

    #[test]
    fn the_driver_refuses_unsafe_swaps_and_random_caches() {
        let jitter = TestOp {
            random: true,
            ..TestOp::new("jitter", OpKind::PixelWise)
        };
        let crop = TestOp {
            out_len: Some(10),
            ..TestOp::new("crop", OpKind::SizeReducing)
        };
        let plan = pipeline(20, vec![jitter, crop]);
        let exact = OptimizerOptions {
            exact: true,
            ..Default::default()
        };
        let input = OptimizeInput::for_test(&plan, &exact);
        let mut draft = Draft {
            plan: input.default.clone(),
            profile: &input.profile,
            options: &exact,
            cpus: 2,
            pinned: HashSet::new(),
            pools: vec![],
            cache: None,
            decisions: vec![],
        };
        rules::unfuse(&mut draft.plan);
        let snapshot = Snapshot::of(&draft);
        assert!(snapshot.check(&draft, &input).is_ok());
        // A rule that put the crop before the jitter in exact mode broke determinism.
        let swap = |d: &mut Draft<'_>| {
            let mut ops: Vec<ChainOp> = d.chain_ops().into_iter().cloned().collect();
            ops.reverse();
            let mut it = ops.into_iter();
            for st in &mut d.plan.stages {
                if let StageKind::Chain { ops, .. } = &mut st.kind {
                    for o in ops.iter_mut() {
                        *o = it.next().unwrap();
                    }
                }
            }
        };
        swap(&mut draft);
        let err = snapshot.check(&draft, &input).unwrap_err();
        assert!(err.contains("not safe"), "{err}");
        swap(&mut draft);
        // Caching a random op would freeze one epoch's randomness.
        let first = draft.chain_ops()[0].op_id;
        for st in &mut draft.plan.stages {
            if let StageKind::Chain { ops, .. } = &mut st.kind {
                ops.retain(|o| o.op_id != first);
            }
        }
        draft.cache = Some(CachePoint {
            op_ids: vec![first],
            budget: 1 << 20,
            disk_budget: 0,
            expected_bytes: 0,
        });
        let err = snapshot.check(&draft, &input).unwrap_err();
        assert!(err.contains("cached but random"), "{err}");
    }

    /// An input whose optimizer falls back (the rule tests' inputs do not).
    fn with_fallback(plan: &Arc<LogicalPlan>) -> OptimizeInput {
        let mut input = OptimizeInput::for_test(plan, &Default::default());
        input.options.enable_fallback = true;
        input
    }

    #[test]
    fn a_plan_predicted_no_faster_than_the_default_runs_the_default() {
        // One cheap op: nothing to reorder, cache or re-place that the default lacks.
        let plan = pipeline(40, vec![busy_op("a", 1, OpKind::Opaque)]);
        let input = with_fallback(&plan);
        let out = optimize_physical(&input).unwrap();
        assert_eq!(out.plan.to_string(), input.default.to_string());
        assert!(out.cache.is_none());
        let last = out.decisions.last().unwrap();
        assert!(last.starts_with("fallback: ran the default plan"), "{last}");
        assert!(last.contains("below the 10% gain"), "{last}");
        // The plan file of the fallback rebuilds the default and runs its samples, without
        // the controller a run without a plan does not start either.
        let asked = OptimizerOptions {
            enable_controller: true,
            ..input.options.clone()
        };
        let file = out.to_plan(&asked, 2);
        assert!(!file.controller);
        let rebuilt = Plan::from_json(&file.to_json())
            .unwrap()
            .apply(&input.default)
            .unwrap();
        assert_eq!(rebuilt.to_string(), input.default.to_string());
        assert_eq!(run(&rebuilt), run(&input.default));
    }

    #[test]
    fn a_plan_predicted_faster_is_kept_and_says_by_how_much() {
        // An expensive pixel-wise op written before a crop to a tenth: moving the crop first
        // is predicted far faster than the default order.
        let plan = pipeline(
            50,
            vec![
                costly_jitter(),
                TestOp {
                    out_len: Some(10),
                    ..TestOp::new("crop", OpKind::SizeReducing)
                },
            ],
        );
        let input = with_fallback(&plan);
        let out = optimize_physical(&input).unwrap();
        let last = out.decisions.last().unwrap();
        assert!(
            last.starts_with("fallback: kept the optimized plan"),
            "{last}"
        );
        assert_ne!(out.plan.to_string(), input.default.to_string());
        let default = predict_with(&input.default, &input.profile, 2, None, None);
        assert!(out.prediction.throughput >= default.throughput * (1.0 + MIN_GAIN));
    }

    #[test]
    fn baseline_runs_everything_inline() {
        let plan = pipeline(
            10,
            vec![
                busy_op("a", 1, OpKind::Opaque),
                busy_op("b", 1, OpKind::Opaque),
            ],
        );
        let out = optimize_physical(&OptimizeInput::for_test(
            &plan,
            &OptimizerOptions::baseline(),
        ))
        .unwrap();
        assert_eq!(out.plan.stages.len(), 3);
        assert!(out.plan.stages.iter().all(|s| s.variant == Variant::Inline));
    }
}
