//! Caching, profiling and optimizing a [`Dataset`]: profile → plan → run.

use std::sync::Arc;

use sluice_core::{CacheNode, LogicalPlan, PipelineStats, Result};
use sluice_optimizer::{
    optimize_physical, predict_with, OptimizeInput, OptimizerOptions, Plan, Prediction, Profile,
    ProfileOptions, RemoteModel,
};

use crate::dataset::{Dataset, IterOptions};

impl Dataset {
    /// Computes the steps so far once per source sample and keeps the results in memory (up
    /// to `budget` bytes) for later epochs and iterations. Only deterministic maps over a
    /// random-access source may come before it.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions};
    /// let ds = Dataset::range(100).cache(1 << 20)?.repeat(Some(3))?;
    /// assert_eq!(ds.iter(&IterOptions::default())?.count(), 300);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn cache(&self, budget: u64) -> Result<Self> {
        self.cache_with(budget, 0)
    }

    /// Like [`Dataset::cache`], keeping what does not fit in `budget` bytes of memory in up to
    /// `disk_budget` bytes of a temporary file (removed with the cache).
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions};
    /// // 100 samples, memory for about 10: the other 90 come back from disk.
    /// let ds = Dataset::range(100).cache_with(500, 1 << 20)?.repeat(Some(2))?;
    /// assert_eq!(ds.iter(&IterOptions::default())?.count(), 200);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn cache_with(&self, budget: u64, disk_budget: u64) -> Result<Self> {
        Ok(Dataset::from_plan(Arc::new(LogicalPlan::Cache(
            CacheNode::try_new(self.plan().clone(), budget, disk_budget)?,
        ))))
    }

    /// Runs a sample of the pipeline op by op in this thread and measures each op.
    ///
    /// ```
    /// use sluice::{Dataset, OpSpec, OnError};
    /// use sluice_optimizer::ProfileOptions;
    /// let ds = Dataset::range(100).map(OpSpec::Noop.build()?, OnError::Raise, None)?;
    /// let p = ds.profile(&ProfileOptions { samples: 10, ..Default::default() })?;
    /// assert_eq!((p.samples, p.ops.len()), (10, 1));
    /// assert_eq!(p.pipeline, ds.fingerprint());
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn profile(&self, opts: &ProfileOptions) -> Result<Profile> {
        let mut p = sluice_optimizer::profile(self.plan(), opts)?;
        p.pipeline = self.fingerprint();
        Ok(p)
    }

    /// A profile of this pipeline from the step times of a run of it that timed its ops
    /// ([`IterOptions::time_ops`]; `stats` is its [`Execution::stats_handle`]), with no run
    /// of its own; `None` until the run has read as many samples as a profile with `opts`
    /// would run and reached every op it profiles.
    ///
    /// [`Execution::stats_handle`]: sluice_core::Execution::stats_handle
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, OpSpec, OnError};
    /// use sluice_optimizer::ProfileOptions;
    /// let ds = Dataset::range(100).map(OpSpec::Noop.build()?, OnError::Raise, None)?;
    /// let mut run = ds.iter(&IterOptions { time_ops: true, ..Default::default() })?;
    /// assert_eq!(run.by_ref().count(), 100);
    /// let opts = ProfileOptions { samples: 50, ..Default::default() };
    /// let p = ds.run_profile(&run.stats_handle(), &opts).unwrap();
    /// assert_eq!((p.samples, p.ops.len(), p.ops[0].items_in), (100, 1, 100));
    /// assert_eq!(p.pipeline, ds.fingerprint());
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn run_profile(&self, stats: &PipelineStats, opts: &ProfileOptions) -> Option<Profile> {
        let times = stats.op_times()?.steps();
        let min = opts.samples_of(self.plan().source().len());
        let mut p = Profile::from_run(self.plan(), &times, stats.elapsed(), min)?;
        p.pipeline = self.fingerprint();
        Some(p)
    }

    /// Plans how to run this pipeline from `profile` (taken on this pipeline). `iter` is the
    /// run's options (seed, backends available for pools).
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions};
    /// use sluice_optimizer::{OptimizerOptions, ProfileOptions};
    /// let ds = Dataset::range(100).batch(10, false)?;
    /// let prof = ds.profile(&ProfileOptions::default())?;
    /// let plan = ds.optimize(&prof, &OptimizerOptions::default(), &IterOptions::default())?;
    /// let opts = IterOptions { plan: Some(plan.into()), ..Default::default() };
    /// assert_eq!(ds.iter(&opts)?.count(), 10);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn optimize(
        &self,
        profile: &Profile,
        options: &OptimizerOptions,
        iter: &IterOptions,
    ) -> Result<Plan> {
        if !profile.pipeline.is_empty() && profile.pipeline != self.fingerprint() {
            return Err(sluice_core::Error::invalid(
                "this profile was taken on a different pipeline; profile this one",
            ));
        }
        // Plans name ops by id and are applied to an unfused lowering (ops fuse after).
        let input = OptimizeInput {
            logical: self.plan().clone(),
            default: sluice_optimizer::planner::unfused_lowering(self.plan(), &iter.facts(false))?,
            profile: profile.clone(),
            options: options.clone(),
            cpus: sluice_core::cores::cores(),
            pools: iter.backends.names(),
        };
        let out = optimize_physical(&input)?;
        let mut plan = out.to_plan(options, options.cpus(input.cpus));
        plan.pipeline = self.fingerprint();
        Ok(plan)
    }

    /// What the cost model predicts for running this pipeline with `plan` (e.g. one made by
    /// hand, or [`Dataset::offload_plan`]'s), with the remote cluster and transfer terms of
    /// `options`: how a measured run validates the model.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, OpSpec, OnError};
    /// use sluice_optimizer::{OptimizerOptions, ProfileOptions};
    /// let ds = Dataset::range(100).map(OpSpec::Noop.build()?, OnError::Raise, None)?;
    /// let prof = ds.profile(&ProfileOptions { samples: 20, ..Default::default() })?;
    /// let plan = ds.offload_plan(&IterOptions::default(), "ray", 2)?;
    /// let o = OptimizerOptions { remote_cpus: Some(2.0), ..Default::default() };
    /// assert!(ds.predict(&prof, &plan, &o)?.throughput > 0.0);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn predict(
        &self,
        profile: &Profile,
        plan: &Plan,
        options: &OptimizerOptions,
    ) -> Result<Prediction> {
        // Plans name the unfused ops (as `optimize` makes them); a fused lowering would not
        // have them all.
        let default =
            sluice_optimizer::planner::unfused_lowering(self.plan(), &Default::default())?;
        let phys = plan.apply(&default)?;
        let cpus = options.cpus(sluice_core::cores::cores());
        let cache = plan.cache.as_ref();
        let remote = RemoteModel::from_options(options);
        Ok(predict_with(&phys, profile, cpus, cache, remote.as_ref()))
    }

    /// The plan a remote context runs without an optimizer plan, as a plan file: this
    /// dataset's run under `opts` (its default lowering, or `opts.plan`) with every
    /// element-wise stage whose ops can travel on `backend` with `workers` workers; stateful
    /// steps stay local, and so do stages with an op that cannot travel. Which stages to
    /// offload by cost is the optimizer's offload rule (`enable_offload`); this is its
    /// forced mode ([`sluice_optimizer::RunContext::Remote`]).
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
        sluice_optimizer::planner::offload_plan(
            self.plan(),
            &opts.facts(false),
            opts.plan.as_deref(),
            backend,
            workers,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::OnError;
    use sluice_ops::OpSpec;
    use sluice_optimizer::RunContext;

    #[test]
    fn a_remote_context_moves_chains_and_stateful_steps_stay() {
        let ds = Dataset::range(20)
            .shuffle(Some(1))
            .unwrap()
            .map(OpSpec::Noop.build().unwrap(), OnError::Raise, None)
            .unwrap()
            .batch(4, false)
            .unwrap();
        let opts = IterOptions::default();
        let plan = ds.offload_plan(&opts, "pool", 2).unwrap();
        assert!(
            plan.decisions[0].contains("pool (2 workers)"),
            "{:?}",
            plan.decisions
        );
        let off = IterOptions {
            context: RunContext::Remote {
                backend: "pool".into(),
                workers: 2,
            },
            ..IterOptions::default()
        };
        let phys = ds.physical_plan(&off).unwrap();
        assert!(phys.stages[0].variant.is_pool());
        assert!(!phys.stages[1].variant.is_pool());
        // Without the pool registered the run fails clearly, naming it.
        let err = ds.iter(&off).err().unwrap().to_string();
        assert!(err.contains("pool"), "{err}");
        // The plan file runs the same stages as the context.
        let planned = IterOptions {
            plan: Some(Arc::new(plan)),
            ..IterOptions::default()
        };
        assert_eq!(
            ds.physical_plan(&planned).unwrap().to_string(),
            phys.to_string()
        );
    }
}
