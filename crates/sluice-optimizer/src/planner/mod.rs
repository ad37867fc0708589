//! The one planner: the physical plan a run executes, whoever starts it (`Dataset::iter`,
//! `explain()`, the CLI, `optimize`, a Ray `sluice.Context`, a blocking step's input). It
//! runs a literal list of rules ([`RULES`]) on the pure lowering of the pipeline and checks
//! the plan's invariants after every rule ([`invariants`]), so a rule that breaks a plan fails
//! loudly instead of changing results. The executor then runs exactly the plan it is given.
//!
//! ```text
//! prepare a blocking source's input (planned here too) → lower (pure) → apply a saved plan
//!   → offload (forced) → fuse ops → decode on device → processes (forced) → objects → slots
//!   → rows → first chunk
//! ```
//!
//! Costed placement and offload are the optimizer's rules ([`crate::rules`], run by
//! [`crate::driver`] when `optimize` makes a plan); here a saved plan is applied, and a run
//! that names a place ([`RunContext`]) gets the rules' forced modes, which read no profile.
//! Each rule's logic lives in its own file with before/after tests; the list below says
//! when each applies.

use std::sync::Arc;

use sluice_core::plan::device::decode_on_device;
use sluice_core::plan::{fuse::fuse_ops, objects, rows, slots};
use sluice_core::{lower, Error, InputRunner, LogicalPlan, PhysicalPlan, Result, RunFacts};

pub use sluice_core::RunContext;

use crate::options::OptimizerOptions;
use crate::plan::{Plan, Prediction};
use crate::rules::offload::Offload;
use crate::rules::placement::Placement;

pub mod invariants;

/// What the rules work on: the plan so far and what they decide from.
pub struct Planning<'a> {
    pub plan: PhysicalPlan,
    pub facts: &'a RunFacts,
    pub logical: &'a Arc<LogicalPlan>,
    /// A plan `optimize` made for this pipeline.
    pub saved: Option<&'a Plan>,
    /// Why stages went where (the forced offload's lines, for `offload_plan`).
    pub decisions: Vec<String>,
}

impl Planning<'_> {
    fn forced_offload(&self) -> Option<(&str, usize)> {
        forced_offload(self.facts, self.saved)
    }

    /// A saved plan or a forced offload sets every stage's placement after the lowering.
    fn placed(&self) -> bool {
        self.saved.is_some() || self.forced_offload().is_some()
    }
}

/// The remote backend and its workers when the context forces the offload: a remote
/// context, unless the saved plan was made with `enable_offload` (the cost model placed its
/// stages already, and it runs as it is).
fn forced_offload<'a>(facts: &'a RunFacts, saved: Option<&Plan>) -> Option<(&'a str, usize)> {
    match &facts.context {
        RunContext::Remote { backend, workers }
            if !saved.is_some_and(|p| p.options.enable_offload) =>
        {
            Some((backend.as_str(), *workers))
        }
        _ => None,
    }
}

/// One rewrite: its name (in errors and `explain`), what it may change besides placement
/// and sizes (checked after it runs), and what it does.
pub struct Rule {
    pub name: &'static str,
    /// It may put ops in another order (a saved plan's reorder).
    pub reorders: bool,
    /// It may merge ops into one (fusion, a saved plan's cache point).
    pub merges: bool,
    pub apply: fn(&mut Planning<'_>) -> Result<()>,
}

/// The rules, in the order they run; each sees the plan the ones before it made.
pub const RULES: &[Rule] = &[
    // A saved plan (from `optimize`) replaces the default stages: its op order, placement,
    // cache point and chunk size. Made for this pipeline only.
    Rule {
        name: "apply saved plan",
        reorders: true,
        merges: true,
        apply: apply_saved,
    },
    // A remote context puts every element-wise stage whose ops can travel on its workers.
    Rule {
        name: "offload",
        reorders: false,
        merges: false,
        apply: |p| {
            if let Some((backend, workers)) = p.forced_offload() {
                let (backend, workers) = (backend.to_string(), workers);
                p.decisions = Offload::force(&mut p.plan, &backend, workers);
            }
            Ok(())
        },
    },
    // Ops that offer a faster fused form fuse. After a saved plan, so ops its reorder made
    // adjacent fuse too; the plain lowering fused already. Exact plans promise the unfused
    // ops' bytes: they never fuse.
    Rule {
        name: "fuse ops",
        reorders: false,
        merges: true,
        apply: |p| {
            let exact = p.saved.is_some_and(|s| s.options.exact);
            if p.placed() && p.facts.fuse_ops && !exact {
                fuse_ops(&mut p.plan.stages);
            }
            Ok(())
        },
    },
    // A consumer that decodes on its GPU: a decode + random_resized_crop (+ flip) whose
    // pixels nothing on the host reads before a batch become their draws, and the device
    // does the pixel work (decode and crop are two thirds of the host's CPU per image on
    // the CV reference pipeline). Not in a timed run: its measurements are the host ops'.
    Rule {
        name: "decode on device",
        reorders: false,
        merges: true,
        apply: |p| {
            if p.facts.consumer.device_decode && !p.facts.timed {
                for name in decode_on_device(&mut p.plan) {
                    p.decisions
                        .push(format!("{name}: decode and crop on the consumer's GPU"));
                }
            }
            Ok(())
        },
    },
    // `processes=N`: every stage of Python code on the process pool.
    Rule {
        name: "processes",
        reorders: false,
        merges: false,
        apply: |p| {
            if let RunContext::Processes { workers } = p.facts.context {
                Placement::force(&mut p.plan, workers);
            }
            Ok(())
        },
    },
    // A consumer that takes the bindings' objects: the ops at the end whose results nothing
    // reads leave them unconverted.
    Rule {
        name: "objects",
        reorders: false,
        merges: false,
        apply: |p| {
            if p.facts.consumer.objects {
                objects::keep_objects(&mut p.plan);
            }
            p.plan.delivery.columns = p.facts.consumer.columns;
            Ok(())
        },
    },
    // Ops that make a batch's float32 slot from one field write straight into the batch,
    // unless the run times its ops (each is measured in its chain). Such an op moves past
    // the ops after it that leave its field as it is (`slots::write_into_batches` checks).
    Rule {
        name: "slots",
        reorders: true,
        merges: false,
        apply: |p| {
            if !p.facts.timed {
                slots::write_into_batches(&mut p.plan);
            }
            p.plan.delivery.timed = p.facts.timed;
            Ok(())
        },
    },
    // A consumer that takes rows in bulk: a lone read of a local columnar source reads 1,024
    // rows at a time — a fusion of the read with the output, so not without `fuse_ops`, and
    // not when finishing an elastic epoch, whose dropped rows the plain read skips one by one.
    Rule {
        name: "rows",
        reorders: false,
        merges: false,
        apply: |p| {
            if p.facts.consumer.rows && p.facts.fuse_ops && !p.facts.elastic {
                rows::read_rows_in_batches(&mut p.plan);
            }
            Ok(())
        },
    },
    // The first chunk: one item until costs are measured, more when a stage runs on Ray
    // (each chunk pays a round trip there).
    Rule {
        name: "first chunk",
        reorders: false,
        merges: false,
        apply: |p| {
            p.plan.source.chunk_size = p.plan.first_chunk();
            Ok(())
        },
    },
];

fn apply_saved(p: &mut Planning<'_>) -> Result<()> {
    let Some(saved) = p.saved else {
        return Ok(());
    };
    let here = fingerprint(p.logical);
    if saved.pipeline != here {
        return Err(Error::invalid(format!(
            "this plan was made for pipeline {}, not this one ({here}); re-run optimize()",
            saved.pipeline
        )));
    }
    p.plan = saved.apply(&p.plan)?;
    Ok(())
}

/// The physical plan a run of `logical` with `facts` executes: a blocking source's input
/// run first (through `run_input`, which plans it here too, with the run's context; without
/// one the source runs it on threads of its own), the pure lowering, then [`RULES`], the
/// invariants checked after each.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_optimizer::planner::physical_plan;
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(8)))));
/// let facts = RunFacts { num_threads: Some(2), ..Default::default() };
/// let here = physical_plan(&src, &facts, None, None)?;
/// assert_eq!(here.stages[0].variant, Variant::Threads { threads: 2 });
/// let ray = RunFacts {
///     context: RunContext::Remote { backend: "ray".into(), workers: 3 },
///     ..facts
/// };
/// let there = physical_plan(&src, &ray, None, None)?;
/// assert_eq!(there.stages[0].variant, Variant::Pool { backend: "ray".into(), workers: 3 });
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn physical_plan(
    logical: &Arc<LogicalPlan>,
    facts: &RunFacts,
    saved: Option<&Plan>,
    run_input: Option<&InputRunner<'_>>,
) -> Result<PhysicalPlan> {
    Ok(planned(logical, facts, saved, run_input, RULES)?.plan)
}

/// Runs `rules` after the lowering, checking the invariants after each.
fn planned<'a>(
    logical: &'a Arc<LogicalPlan>,
    facts: &'a RunFacts,
    saved: Option<&'a Plan>,
    run_input: Option<&InputRunner<'_>>,
    rules: &[Rule],
) -> Result<Planning<'a>> {
    let source = logical.chain()[0].source().clone();
    match run_input {
        Some(run) => source.prepare_with(facts.threads(), run)?,
        None => source.prepare(facts.threads())?,
    }
    let placed = saved.is_some() || forced_offload(facts, saved).is_some();
    let mut p = Planning {
        plan: lower(logical, &facts.lower_options(placed))?,
        facts,
        logical,
        saved,
        decisions: Vec::new(),
    };
    let mut before = invariants::Shape::of(&p.plan);
    for rule in rules {
        (rule.apply)(&mut p)?;
        before = before.check(rule, &p.plan, facts).map_err(|why| {
            Error::Internal(format!("plan rule '{}' broke the plan: {why}", rule.name))
        })?;
    }
    Ok(p)
}

/// The default lowering without op fusion, for `facts`: what plans are made from and
/// applied to (they name the pipeline's own ops).
pub fn unfused_lowering(logical: &Arc<LogicalPlan>, facts: &RunFacts) -> Result<PhysicalPlan> {
    lower(logical, &facts.lower_options(true))
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

/// The plan a remote context runs when no optimizer plan decides (see
/// [`RunContext::Remote`]), as a plan file: every element-wise stage of `logical` (under
/// `plan`, if given) whose ops can travel on `backend` with `workers` workers, and the
/// decisions saying which stage went where and why a stage stayed. Its stages name the
/// unfused ops, like every plan's.
pub fn offload_plan(
    logical: &Arc<LogicalPlan>,
    facts: &RunFacts,
    plan: Option<&Plan>,
    backend: &str,
    workers: usize,
) -> Result<Plan> {
    let facts = RunFacts {
        context: RunContext::Remote {
            backend: backend.into(),
            workers,
        },
        ..facts.clone()
    };
    // The saved plan, then the offload whatever the plan says; no fusion (plan files name
    // unfused ops) and none of the run's rewrites.
    let mut p = planned(logical, &facts, plan, None, &RULES[..1])?;
    p.decisions = Offload::force(&mut p.plan, backend, workers);
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
        &p.plan,
        plan.and_then(|p| p.cache.clone()),
        prediction,
        p.decisions,
        &optimizer,
        cpus,
    );
    out.pipeline = fingerprint(logical);
    Ok(out)
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

    fn two_threads() -> RunFacts {
        RunFacts {
            num_threads: Some(2),
            ..Default::default()
        }
    }

    fn at(
        logical: &Arc<LogicalPlan>,
        o: &RunFacts,
        plan: Option<&Plan>,
        c: &RunContext,
    ) -> Result<PhysicalPlan> {
        let facts = RunFacts {
            context: c.clone(),
            ..o.clone()
        };
        physical_plan(logical, &facts, plan, None)
    }

    #[test]
    fn contexts_force_their_placement() {
        let logical = mixed();
        let o = two_threads();
        let printed_at = |c: &RunContext| printed(&at(&logical, &o, None, c).unwrap());
        assert_eq!(
            printed_at(&RunContext::Local),
            "read+a [threads=2] | udf [threads=2] | b [threads=2]"
        );
        let procs = RunContext::Processes { workers: 4 };
        assert_eq!(
            printed_at(&procs),
            format!("read+a [threads=2] | udf [{PROCESSES}=4] | b [threads=2]")
        );
        let ray = RunContext::Remote {
            backend: RAY.into(),
            workers: 2,
        };
        assert_eq!(printed_at(&ray), "read+a+udf+b [ray=2]");
        let zero = RunFacts {
            num_threads: Some(0),
            ..two_threads()
        };
        let inline = at(&logical, &zero, None, &RunContext::Local).unwrap();
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
        let phys = at(&logical, &o, Some(&off), &RunContext::Local).unwrap();
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
        let phys = at(&logical, &o, Some(&decided), &ray).unwrap();
        assert_eq!(printed(&phys), "read+a+udf+b [ray=3]");
        // Another pipeline's plan is refused, naming both fingerprints.
        let other = pipeline(12, vec![busy_op("a", 1, OpKind::Opaque)]);
        let err = at(&other, &o, Some(&off), &RunContext::Local)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&off.pipeline) && err.contains("re-run optimize()"),
            "{err}"
        );
    }
}
