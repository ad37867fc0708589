//! A `Plan`: the optimizer's output as a file a person can read and a run can load — stages
//! with their op order, variants, parallelism and queue depths, the cache point, the model's
//! predicted throughput and bottleneck, and why each rule decided what it did.
//!
//! A plan names ops by their ids in the pipeline; applying it to another pipeline fails (the
//! fingerprint differs), and applying it rebuilds the physical plan from the pipeline's own
//! ops, so no code travels in the file.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::cache::CachedSource;
use sluice_core::{ChainOp, Error, PhysicalPlan, Result, Stage, StageKind, Variant};

use crate::options::OptimizerOptions;

/// What the model predicts for one stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagePrediction {
    pub label: String,
    pub variant: String,
    /// CPU seconds per source sample spent in this stage.
    pub cpu_per_sample: f64,
    /// Source samples per second this stage alone could sustain with its workers.
    pub capacity: f64,
}

/// What the model predicts for a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// Source samples per second.
    pub throughput: f64,
    /// What limits it: a stage label, `cores`, `gil` or `consumer`.
    pub bottleneck: String,
    pub stages: Vec<StagePrediction>,
    /// Total CPU seconds per source sample.
    pub cpu_per_sample: f64,
}

/// Where the deterministic prefix is cached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachePoint {
    /// Ops computed once and cached (in pipeline order), by id.
    pub op_ids: Vec<u64>,
    /// Bytes the cache may hold in memory.
    pub budget: u64,
    /// Bytes it may hold on local disk beyond that.
    #[serde(default)]
    pub disk_budget: u64,
    /// Expected bytes for the whole source (from the profile).
    pub expected_bytes: u64,
}

/// One stage of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanStage {
    /// Readable label (`read+decode+random_resized_crop`, `batch(256)`).
    pub label: String,
    /// For a chain: whether it reads the source, and its ops by id in run order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_ids: Vec<u64>,
    #[serde(flatten)]
    pub variant: Variant,
    pub queue_depth: usize,
}

/// An optimized plan for one pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub version: u32,
    /// Fingerprint of the pipeline it was made for.
    pub pipeline: String,
    /// Cores it was planned for.
    pub cpus: usize,
    pub chunk_size: usize,
    pub stages: Vec<PlanStage>,
    #[serde(default)]
    pub cache: Option<CachePoint>,
    /// Tune stage parallelism at run time.
    #[serde(default)]
    pub controller: bool,
    /// What the cost model expects.
    pub prediction: Prediction,
    /// Why: one line per decision.
    pub decisions: Vec<String>,
    pub options: OptimizerOptions,
}

/// Most workers one stage of a loaded plan may ask for: far above any machine's cores, low
/// enough that an edited plan file cannot make a run spawn threads until memory runs out.
pub const MAX_STAGE_WORKERS: usize = 1024;

/// Most chunks one queue of a loaded plan may hold (a queue's slots are allocated when the
/// run starts, so an absurd depth would abort it instead of failing).
pub const MAX_QUEUE_DEPTH: usize = 1 << 16;

impl Plan {
    /// The current format version.
    pub const VERSION: u32 = 1;

    /// Describes `phys` (an optimized physical plan) as a plan file.
    pub fn describe(
        phys: &PhysicalPlan,
        cache: Option<CachePoint>,
        prediction: Prediction,
        decisions: Vec<String>,
        options: &OptimizerOptions,
        cpus: usize,
    ) -> Plan {
        let stages = phys
            .stages
            .iter()
            .map(|st| {
                let (read, op_ids) = match &st.kind {
                    StageKind::Chain { read, ops } => {
                        (Some(*read), ops.iter().map(|o| o.op_id).collect())
                    }
                    _ => (None, vec![]),
                };
                PlanStage {
                    label: st.kind.label(),
                    read,
                    op_ids,
                    variant: st.variant.clone(),
                    queue_depth: st.queue_depth,
                }
            })
            .collect();
        Plan {
            version: Self::VERSION,
            pipeline: String::new(),
            cpus,
            chunk_size: phys.source.chunk_size,
            stages,
            cache,
            controller: options.enable_controller,
            prediction,
            decisions,
            options: options.clone(),
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses a saved plan.
    pub fn from_json(text: &str) -> Result<Plan> {
        let p: Plan = serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("not a sluice plan: {e}")))?;
        if p.version != Self::VERSION {
            return Err(Error::invalid(format!(
                "plan version {} is not supported (expected {})",
                p.version,
                Self::VERSION
            )));
        }
        Ok(p)
    }

    /// Rebuilds the planned physical plan from `default` (the pipeline's default lowering):
    /// its ops are looked up by id and its stateful stages must match the plan's, so a plan
    /// made for another pipeline is refused.
    pub fn apply(&self, default: &PhysicalPlan) -> Result<PhysicalPlan> {
        let mismatch = |why: String| {
            Error::invalid(format!(
                "this plan was made for a different pipeline ({why}); re-run optimize()"
            ))
        };
        let mut ops: HashMap<u64, ChainOp> = HashMap::new();
        let mut others = Vec::new();
        for st in &default.stages {
            match &st.kind {
                StageKind::Chain { ops: o, .. } => {
                    ops.extend(o.iter().map(|c| (c.op_id, c.clone())));
                }
                kind => others.push(kind.clone()),
            }
        }
        let mut take = |id: u64| {
            ops.remove(&id)
                .ok_or_else(|| mismatch(format!("op {id} is not in this pipeline or used twice")))
        };
        let mut plan = PhysicalPlan {
            source: default.source.clone(),
            stages: Vec::new(),
            delivery: default.delivery,
        };
        plan.source.chunk_size = self.chunk_size.max(1);
        plan.source.max_chunk = plan.source.max_chunk.max(plan.source.chunk_size);
        if let Some(c) = &self.cache {
            let cached = c
                .op_ids
                .iter()
                .map(|&id| take(id))
                .collect::<Result<Vec<_>>>()?;
            plan.source.source = Arc::new(CachedSource::new(
                default.source.source.clone(),
                cached,
                c.budget,
                c.disk_budget,
            )?);
        }
        let mut others = others.into_iter();
        for ps in &self.stages {
            // Plans are files a person may edit: bound what the run will allocate and spawn.
            if ps.variant.workers() > MAX_STAGE_WORKERS || ps.queue_depth > MAX_QUEUE_DEPTH {
                return Err(Error::invalid(format!(
                    "plan stage {}: {} workers and a queue of {} chunks; a stage may have at \
                     most {MAX_STAGE_WORKERS} workers and {MAX_QUEUE_DEPTH} chunks",
                    ps.label,
                    ps.variant.workers(),
                    ps.queue_depth
                )));
            }
            let kind = match ps.read {
                Some(read) => StageKind::Chain {
                    read,
                    ops: ps
                        .op_ids
                        .iter()
                        .map(|&id| take(id))
                        .collect::<Result<_>>()?,
                },
                None => {
                    let kind = others
                        .next()
                        .ok_or_else(|| mismatch(format!("extra stage {}", ps.label)))?;
                    if kind.label() != ps.label {
                        return Err(mismatch(format!(
                            "stage {} where the plan has {}",
                            kind.label(),
                            ps.label
                        )));
                    }
                    kind
                }
            };
            plan.stages.push(Stage {
                kind,
                variant: ps.variant.clone(),
                queue_depth: ps.queue_depth.max(1),
            });
        }
        if let Some(k) = others.next() {
            return Err(mismatch(format!("stage {} is missing", k.label())));
        }
        if let Some(id) = ops.keys().next() {
            return Err(mismatch(format!("op {id} is missing from the plan")));
        }
        Ok(plan)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plan for pipeline {} on {} cores: predicted {:.0} samples/s, bottleneck: {}",
            self.pipeline, self.cpus, self.prediction.throughput, self.prediction.bottleneck
        )?;
        if let Some(c) = &self.cache {
            writeln!(
                f,
                "cache: ops {:?} in memory (≈{:.1} MiB of {} MiB)",
                c.op_ids,
                c.expected_bytes as f64 / (1 << 20) as f64,
                c.budget >> 20
            )?;
        }
        for (i, s) in self.stages.iter().enumerate() {
            let pred = self.prediction.stages.get(i + 1);
            writeln!(
                f,
                "stage {i}: {:<44} [{}, queue={}]{}",
                s.label,
                s.variant,
                s.queue_depth,
                pred.map_or(String::new(), |p| format!(
                    "  {:.1} µs/sample, capacity {:.0}/s",
                    p.cpu_per_sample * 1e6,
                    p.capacity
                ))
            )?;
        }
        for d in &self.decisions {
            writeln!(f, "  - {d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{lower, BatchNode, LogicalPlan, LowerOptions, RangeSource, SourceNode};

    fn default_and_plan() -> (PhysicalPlan, Plan) {
        let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
            RangeSource::new(10),
        ))));
        let batch = Arc::new(LogicalPlan::Batch(
            BatchNode::try_new(src, 4, false).unwrap(),
        ));
        let phys = lower(&batch, &LowerOptions::default()).unwrap();
        let prediction = Prediction {
            throughput: 1.0,
            bottleneck: "cores".into(),
            stages: vec![],
            cpu_per_sample: 1.0,
        };
        let plan = Plan::describe(&phys, None, prediction, vec![], &Default::default(), 2);
        (phys, plan)
    }

    #[test]
    fn absurd_queue_depth_or_worker_count_is_refused() {
        // Found by fuzzing (fuzz/ target `plan`): a plan stage with queue_depth 10^15 made the
        // run allocate that many queue slots up front and abort; 100000 threads ran out of
        // memory spawning them.
        let (phys, plan) = default_and_plan();
        assert!(plan.apply(&phys).is_ok());
        let mut deep = plan.clone();
        deep.stages[0].queue_depth = 1_000_000_000_000_000;
        let e = deep.apply(&phys).unwrap_err().to_string();
        assert!(e.contains("queue of 1000000000000000 chunks"), "{e}");
        let mut wide = plan.clone();
        wide.stages[0].variant = Variant::Threads { threads: 100_000 };
        let e = wide.apply(&phys).unwrap_err().to_string();
        assert!(e.contains("100000 workers"), "{e}");
        // The same through the file form, as `sluice run --plan` and `iter(plan=...)` load it.
        let mut v: serde_json::Value = serde_json::from_str(&plan.to_json()).unwrap();
        v["stages"][0]["queue_depth"] = 99_999_999.into();
        let e = Plan::from_json(&v.to_string())
            .unwrap()
            .apply(&phys)
            .unwrap_err();
        assert!(e.to_string().contains("at most"), "{e}");
    }
}
