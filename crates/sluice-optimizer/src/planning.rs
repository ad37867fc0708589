//! The one planning path: the physical plan a run uses, whoever starts it (`Dataset::iter`,
//! `explain()`, the CLI, `optimize`, a Ray `sluice.Context`).
//!
//! ```text
//! lower (core)  →  Plan::apply, if a plan  →  forced offload  →  fuse_ops (core)  →  forced processes
//! ```
//!
//! Every placement decision is an optimizer rule's: by the cost model when `optimize` makes
//! a plan ([`crate::rules::placement`], [`crate::rules::offload`]), or in the rule's forced
//! mode when the run names a place ([`RunContext`]): `processes=N` puts every Python stage
//! on the process pool, a Ray context every element-wise stage that can travel on actors.
//! Forced modes read no profile.
//!
//! It lives here, not in core, because applying a plan and the rules are the optimizer's;
//! the `sluice` facade and the CLI only call it.

use std::sync::Arc;

use sluice_core::plan::fuse::fuse_ops;
use sluice_core::{lower, Error, LogicalPlan, LowerOptions, PhysicalPlan, Result};

use crate::options::OptimizerOptions;
use crate::plan::{Plan, Prediction};
use crate::rules::offload::Offload;
use crate::rules::placement::Placement;

/// Where a run asks its stages to go, besides what a plan says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RunContext {
    /// This process: the default lowering's threads, or the plan's placement.
    #[default]
    Local,
    /// `processes=N`: every stage of Python code on the `processes` backend with `workers`
    /// worker processes (the placement rule's forced mode).
    Processes { workers: usize },
    /// A remote context (a Ray `sluice.Context`): every element-wise stage whose ops can
    /// travel on `backend` with `workers` workers (the offload rule's forced mode) — unless
    /// the plan was made with `enable_offload`: the cost model placed its stages already,
    /// and it runs as it is.
    Remote { backend: String, workers: usize },
}

/// The run's settings a physical plan depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    /// The iteration seed (an unseeded shuffle takes it, see [`LowerOptions::seed`]).
    pub seed: u64,
    /// Threads per parallel stage (`None`: the number of cores; `Some(0)`: every stage in
    /// the consumer's thread, [`LowerOptions::in_consumer`]).
    pub num_threads: Option<usize>,
    /// Items per chunk handed between stages (`None`: adaptive).
    pub chunk_size: Option<usize>,
    /// Fuse ops that offer a faster fused form ([`sluice_core::Op::fuse_next`]). Plans made
    /// with `exact` never fuse.
    pub fuse_ops: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            seed: 0,
            num_threads: None,
            chunk_size: None,
            fuse_ops: true,
        }
    }
}

impl PlanOptions {
    /// Threads per parallel stage: `num_threads`, or the number of cores (at least one).
    pub fn threads(&self) -> usize {
        let cores = sluice_core::cores::cores();
        self.num_threads.unwrap_or(cores).max(1)
    }

    /// The lowering. `placed`: a plan (or a forced offload) places the stages after it, so
    /// it neither fuses (plans name the unfused ops; they fuse after) nor runs in the
    /// consumer (the plan sets every variant).
    pub fn lower_options(&self, placed: bool) -> LowerOptions {
        let mut o = LowerOptions {
            num_threads: self.threads(),
            seed: self.seed,
            fuse_ops: self.fuse_ops && !placed,
            in_consumer: self.num_threads == Some(0) && !placed,
            ..LowerOptions::default()
        };
        if let Some(c) = self.chunk_size {
            o.chunk_size = c.max(1);
            o.max_chunk = o.chunk_size;
        }
        o
    }

    /// The default lowering without op fusion: what plans are made from and applied to
    /// (they name the pipeline's own ops).
    pub fn unfused_lowering(&self, logical: &Arc<LogicalPlan>) -> Result<PhysicalPlan> {
        lower(logical, &self.lower_options(true))
    }
}

/// A fingerprint of the pipeline, so a plan or a checkpoint is never applied to another
/// pipeline. A shard's rank and world size are left out (a checkpoint's `shard` node carries
/// them), so an elastic checkpoint fits every rank of a new world size. Ops count with their
/// spec (a built-in op's arguments); a Python function by its name.
pub fn fingerprint(logical: &Arc<LogicalPlan>) -> String {
    let text: String = logical
        .chain()
        .iter()
        .map(|n| match &**n {
            LogicalPlan::Shard(s) => format!("shard(equal={})\n", s.shard.equal),
            LogicalPlan::Map(m) => format!("{} {}\n", n.describe(), m.op.spec()),
            LogicalPlan::MapBatches(m) => format!("{} {}\n", n.describe(), m.op.spec()),
            other => format!("{}\n", other.describe()),
        })
        .collect();
    let h = text
        .bytes()
        .fold(0x5eed_u64, |h, b| sluice_core::rng::combine(h, b as u64));
    format!("{h:016x}")
}

/// The physical plan of a run of `logical`: its default lowering, or `plan` (made for this
/// pipeline) applied to it, with the placement `context` forces.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_optimizer::planning::{physical_plan, PlanOptions, RunContext};
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(8)))));
/// let opts = PlanOptions { num_threads: Some(2), ..Default::default() };
/// let here = physical_plan(&src, &opts, None, &RunContext::Local)?;
/// assert_eq!(here.stages[0].variant, Variant::Threads { threads: 2 });
/// let ray = RunContext::Remote { backend: "ray".into(), workers: 3 };
/// let there = physical_plan(&src, &opts, None, &ray)?;
/// assert_eq!(there.stages[0].variant, Variant::Pool { backend: "ray".into(), workers: 3 });
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn physical_plan(
    logical: &Arc<LogicalPlan>,
    options: &PlanOptions,
    plan: Option<&Plan>,
    context: &RunContext,
) -> Result<PhysicalPlan> {
    let offload = match context {
        RunContext::Remote { backend, workers }
            if !plan.is_some_and(|p| p.options.enable_offload) =>
        {
            Some((backend.as_str(), *workers))
        }
        _ => None,
    };
    let (mut phys, _) = placed(logical, options, plan, offload)?;
    // Fusion comes after the plan, so it also fuses ops the plan's reorder made adjacent.
    // Exact plans promise the unfused ops' bytes: no approximate fusion.
    let exact = plan.is_some_and(|p| p.options.exact);
    if (plan.is_some() || offload.is_some()) && options.fuse_ops && !exact {
        fuse_ops(&mut phys.stages);
    }
    if let RunContext::Processes { workers } = context {
        Placement::force(&mut phys, *workers);
    }
    Ok(phys)
}

/// The plan a remote context runs when no optimizer plan decides (see
/// [`RunContext::Remote`]), as a plan file: every element-wise stage of `logical` (under
/// `plan`, if given) whose ops can travel on `backend` with `workers` workers, and the
/// decisions saying which stage went where and why a stage stayed. Its stages name the
/// unfused ops, like every plan's.
pub fn offload_plan(
    logical: &Arc<LogicalPlan>,
    options: &PlanOptions,
    plan: Option<&Plan>,
    backend: &str,
    workers: usize,
) -> Result<Plan> {
    let (phys, decisions) = placed(logical, options, plan, Some((backend, workers)))?;
    let prediction = Prediction {
        throughput: 0.0,
        bottleneck: "not modelled: explicit offload without a profile (the optimizer's \
                     enable_offload decides with the cost model)"
            .into(),
        stages: vec![],
        cpu_per_sample: 0.0,
    };
    let optimizer = plan.map_or_else(OptimizerOptions::default, |p| p.options.clone());
    let cpus = sluice_core::cores::cores();
    let mut out = Plan::describe(
        &phys,
        plan.and_then(|p| p.cache.clone()),
        prediction,
        decisions,
        &optimizer,
        cpus,
    );
    out.pipeline = fingerprint(logical);
    Ok(out)
}

/// Lowers `logical`, applies `plan` and runs the offload rule's forced mode when `offload`
/// names a backend and its workers; no op fusion yet. Returns the plan and the offload's
/// decisions.
fn placed(
    logical: &Arc<LogicalPlan>,
    options: &PlanOptions,
    plan: Option<&Plan>,
    offload: Option<(&str, usize)>,
) -> Result<(PhysicalPlan, Vec<String>)> {
    let placed = plan.is_some() || offload.is_some();
    let default = lower(logical, &options.lower_options(placed))?;
    let mut phys = match plan {
        None => default,
        Some(plan) => {
            let here = fingerprint(logical);
            if plan.pipeline != here {
                return Err(Error::invalid(format!(
                    "this plan was made for pipeline {}, not this one ({here}); re-run optimize()",
                    plan.pipeline
                )));
            }
            plan.apply(&default)?
        }
    };
    let decisions = match offload {
        Some((backend, workers)) => Offload::force(&mut phys, backend, workers),
        None => vec![],
    };
    Ok((phys, decisions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use sluice_core::exec::backend::{PROCESSES, RAY};
    use sluice_core::OpKind;

    fn mixed() -> Arc<LogicalPlan> {
        let py = |name| TestOp {
            python: true,
            ..busy_op(name, 1, OpKind::Opaque)
        };
        pipeline(
            12,
            vec![
                busy_op("a", 1, OpKind::Opaque),
                py("udf"),
                busy_op("b", 1, OpKind::Opaque),
            ],
        )
    }

    fn two_threads() -> PlanOptions {
        PlanOptions {
            num_threads: Some(2),
            ..Default::default()
        }
    }

    #[test]
    fn contexts_force_their_placement() {
        let logical = mixed();
        let o = two_threads();
        let at = |c: &RunContext| printed(&physical_plan(&logical, &o, None, c).unwrap());
        assert_eq!(
            at(&RunContext::Local),
            "read+a [threads=2] | udf [threads=2] | b [threads=2]"
        );
        let procs = RunContext::Processes { workers: 4 };
        assert_eq!(
            at(&procs),
            format!("read+a [threads=2] | udf [{PROCESSES}=4] | b [threads=2]")
        );
        let ray = RunContext::Remote {
            backend: RAY.into(),
            workers: 2,
        };
        assert_eq!(at(&ray), "read+a+udf+b [ray=2]");
        let zero = PlanOptions {
            num_threads: Some(0),
            ..two_threads()
        };
        let inline = physical_plan(&logical, &zero, None, &RunContext::Local).unwrap();
        assert!(inline
            .stages
            .iter()
            .all(|s| s.variant == sluice_core::Variant::Inline));
    }

    #[test]
    fn plans_must_be_for_this_pipeline_and_offload_plans_run_as_they_are() {
        let logical = mixed();
        let o = two_threads();
        let off = offload_plan(&logical, &o, None, RAY, 3).unwrap();
        assert_eq!(off.pipeline, fingerprint(&logical));
        assert_eq!(
            off.decisions,
            [
                "read+a → ray (3 workers)",
                "udf fused into the previous ray stage",
                "b fused into the previous ray stage"
            ]
        );
        let phys = physical_plan(&logical, &o, Some(&off), &RunContext::Local).unwrap();
        assert_eq!(printed(&phys), "read+a+udf+b [ray=3]");
        // A plan the cost model placed (enable_offload) is not placed again by a context.
        let decided = Plan {
            options: OptimizerOptions {
                enable_offload: true,
                ..Default::default()
            },
            ..off.clone()
        };
        let ray = RunContext::Remote {
            backend: RAY.into(),
            workers: 7,
        };
        let phys = physical_plan(&logical, &o, Some(&decided), &ray).unwrap();
        assert_eq!(printed(&phys), "read+a+udf+b [ray=3]");
        // Another pipeline's plan is refused, naming both fingerprints.
        let other = pipeline(12, vec![busy_op("a", 1, OpKind::Opaque)]);
        let err = physical_plan(&other, &o, Some(&off), &RunContext::Local)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&off.pipeline) && err.contains("re-run optimize()"),
            "{err}"
        );
    }
}
