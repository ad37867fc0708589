//! Explicit offload: a plan that runs *every* element-wise stage whose ops can travel on a
//! named worker pool (Ray actors, processes) while stateful steps (batch, shuffle buffer,
//! take) stay local — what a Ray `sluice.Context` does when no optimizer plan decides.
//!
//! Deciding *which* stages to offload and with how many actors is the optimizer's offload
//! rule (`sluice_optimizer::rules::offload`, `OptimizerOptions::enable_offload`); a plan it
//! made is run as it is.
//!
//! It is a [`Plan`] like the optimizer's, so it prints, saves and resumes the same way, and
//! its decisions say which stage went where and why a stage stayed.

use std::sync::Arc;

use sluice_core::{PhysicalPlan, Result, Stage, StageKind, Variant};
use sluice_optimizer::{OptimizerOptions, Plan, Prediction};

use crate::dataset::{Dataset, IterOptions};

impl Dataset {
    /// The plan of this dataset's run under `opts` (its default lowering, or `opts.plan`)
    /// with every element-wise stage whose ops can travel moved onto `backend` with
    /// `workers` workers. Ops that cannot travel keep their stage local.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, OnError, OpSpec, Variant};
    /// let ds = Dataset::range(10).map(OpSpec::Noop.build()?, OnError::Raise, None)?.batch(5, false)?;
    /// let plan = ds.offload_plan(&IterOptions::default(), "ray", 3)?;
    /// assert_eq!(plan.stages[0].variant, Variant::Pool { backend: "ray".into(), workers: 3 });
    /// assert_eq!(plan.stages[1].variant, Variant::Threads { threads: 1 }); // batch stays
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn offload_plan(&self, opts: &IterOptions, backend: &str, workers: usize) -> Result<Plan> {
        // A plan names the unfused ops; the run fuses them after applying it.
        let unfused = IterOptions {
            fuse_ops: false,
            ..opts.clone()
        };
        let mut phys = self.physical_plan(&unfused)?;
        let decisions = place(&mut phys, backend, workers.max(1));
        let options = opts
            .plan
            .as_ref()
            .map_or_else(OptimizerOptions::default, |p| p.options.clone());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let prediction = Prediction {
            throughput: 0.0,
            bottleneck: "not modelled: explicit offload without a profile (the optimizer's \
                         enable_offload decides with the cost model)"
                .into(),
            stages: vec![],
            cpu_per_sample: 0.0,
        };
        let mut plan = Plan::describe(
            &phys,
            opts.plan.as_ref().and_then(|p| p.cache.clone()),
            prediction,
            decisions,
            &options,
            cpus,
        );
        plan.pipeline = self.fingerprint();
        Ok(plan)
    }

    /// `opts` with [`Dataset::offload_plan`] as its plan — unless `opts.plan` is an optimizer
    /// plan made with `enable_offload`: its placement (which stages went to `backend`, with
    /// how many workers, and which stayed) is then run as it is.
    pub fn offloaded(
        &self,
        opts: &IterOptions,
        backend: &str,
        workers: usize,
    ) -> Result<IterOptions> {
        if opts.plan.as_ref().is_some_and(|p| p.options.enable_offload) {
            return Ok(opts.clone());
        }
        let plan = self.offload_plan(opts, backend, workers)?;
        Ok(IterOptions {
            plan: Some(Arc::new(plan)),
            ..opts.clone()
        })
    }
}

/// Moves the chains of `phys` onto the pool; returns one decision line per chain.
fn place(phys: &mut PhysicalPlan, backend: &str, workers: usize) -> Vec<String> {
    let mut decisions = Vec::new();
    let mut placed: Vec<Stage> = Vec::with_capacity(phys.stages.len());
    for mut stage in std::mem::take(&mut phys.stages) {
        let StageKind::Chain { ops, .. } = &stage.kind else {
            placed.push(stage);
            continue;
        };
        let label = stage.kind.label();
        // An op that cannot describe itself portably (e.g. a Python callable without
        // cloudpickle) would fail on the worker: the stage stays here instead.
        if let Some(bad) = ops.iter().find(|o| o.op.ship().is_err()) {
            decisions.push(format!(
                "{label} stays local: op {} cannot be shipped to {backend}",
                bad.op.name()
            ));
            placed.push(stage);
            continue;
        }
        // Locally, chains split where GIL-free ops meet Python ones; an actor is a process
        // of its own, so adjacent offloaded chains fuse: one round trip instead of several.
        if let Some(Stage {
            kind: StageKind::Chain { ops: prev, .. },
            variant: Variant::Pool { .. },
            ..
        }) = placed.last_mut()
        {
            if let StageKind::Chain { read: false, ops } = &stage.kind {
                prev.extend(ops.iter().cloned());
                decisions.push(format!("{label} fused into the previous {backend} stage"));
                continue;
            }
        }
        stage.variant = Variant::Pool {
            backend: backend.to_string(),
            workers,
        };
        decisions.push(format!("{label} → {backend} ({workers} workers)"));
        placed.push(stage);
    }
    phys.stages = placed;
    decisions
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::OnError;
    use sluice_ops::OpSpec;

    #[test]
    fn chains_move_stateful_steps_stay_and_the_plan_applies() {
        let ds = Dataset::range(20)
            .shuffle(Some(1))
            .unwrap()
            .map(OpSpec::Noop.build().unwrap(), OnError::Raise, None)
            .unwrap()
            .batch(4, false)
            .unwrap();
        let opts = IterOptions::default();
        let off = ds.offloaded(&opts, "pool", 2).unwrap();
        let plan = off.plan.as_ref().unwrap();
        assert!(
            plan.decisions[0].contains("pool (2 workers)"),
            "{:?}",
            plan.decisions
        );
        let phys = ds.physical_plan(&off).unwrap();
        assert!(phys.stages[0].variant.is_pool());
        assert!(!phys.stages[1].variant.is_pool());
        // Without the pool registered the run fails clearly, naming it.
        let err = ds.iter(&off).err().unwrap().to_string();
        assert!(err.contains("pool"), "{err}");
        // A plan whose offload the optimizer decided runs as it is.
        let decided = Plan {
            options: OptimizerOptions {
                enable_offload: true,
                ..Default::default()
            },
            ..ds.offload_plan(&opts, "pool", 5).unwrap()
        };
        let opts = IterOptions {
            plan: Some(Arc::new(decided.clone())),
            ..IterOptions::default()
        };
        assert_eq!(
            ds.offloaded(&opts, "pool", 2).unwrap().plan.as_deref(),
            Some(&decided)
        );
    }
}
