//! The planner's rules. Each rewrites a [`Draft`] and records why; the driver
//! ([`crate::driver`]) runs them in order and checks the plan's invariants after each.

pub mod caching;
pub mod fusion;
pub mod offload;
pub mod parallelism;
pub mod placement;
pub mod prefetch;
pub mod reorder;

use std::collections::HashSet;

use sluice_core::{ChainOp, PhysicalPlan, Result, Stage, StageKind, Variant};

use crate::options::OptimizerOptions;
use crate::plan::CachePoint;
use crate::profile::Profile;

/// A plan being rewritten, with what the rules need to decide.
#[derive(Debug, Clone)]
pub struct Draft<'a> {
    pub plan: PhysicalPlan,
    pub profile: &'a Profile,
    pub options: &'a OptimizerOptions,
    /// Cores the plan may use.
    pub cpus: usize,
    /// Ops that must keep their position (pinned by the user, or Python not marked movable).
    pub pinned: HashSet<u64>,
    /// Worker pools available besides threads (e.g. `processes`).
    pub pools: Vec<String>,
    pub cache: Option<CachePoint>,
    /// What each rule did and why, in plain words (shown in the plan).
    pub decisions: Vec<String>,
}

impl Draft<'_> {
    /// Records a decision.
    pub fn note(&mut self, rule: &str, text: impl Into<String>) {
        self.decisions.push(format!("{rule}: {}", text.into()));
    }
    /// The ops of every chain stage, in order.
    pub fn chain_ops(&self) -> Vec<&ChainOp> {
        self.plan
            .stages
            .iter()
            .flat_map(|s| match &s.kind {
                StageKind::Chain { ops, .. } => ops.iter().collect(),
                _ => vec![],
            })
            .collect()
    }
}

/// A rewrite of the plan.
pub trait Rule {
    /// Name shown in decisions and errors.
    fn name(&self) -> &'static str;
    /// Rewrites `draft`.
    fn apply(&self, draft: &mut Draft<'_>) -> Result<()>;
}

/// Whether a chain stage runs Python code.
pub(crate) fn is_python(st: &Stage) -> bool {
    matches!(&st.kind, StageKind::Chain { ops, .. } if ops.iter().any(|o| o.op.meta().python))
}

/// Splits every chain into one stage per op (the read gets its own stage), all inline: the
/// unoptimised starting point that fusion merges back.
pub fn unfuse(plan: &mut PhysicalPlan) {
    let mut out = Vec::with_capacity(plan.stages.len());
    for st in plan.stages.drain(..) {
        match st.kind {
            StageKind::Chain { read, ops } => {
                if read {
                    out.push(Stage {
                        kind: StageKind::Chain {
                            read: true,
                            ops: vec![],
                        },
                        variant: Variant::Inline,
                        queue_depth: st.queue_depth,
                    });
                }
                for op in ops {
                    out.push(Stage {
                        kind: StageKind::Chain {
                            read: false,
                            ops: vec![op],
                        },
                        variant: Variant::Inline,
                        queue_depth: st.queue_depth,
                    });
                }
            }
            kind => out.push(Stage {
                kind,
                variant: Variant::Inline,
                queue_depth: st.queue_depth,
            }),
        }
    }
    plan.stages = out;
}
