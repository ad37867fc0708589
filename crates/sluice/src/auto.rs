//! `iter(optimize=…)`: profile, plan and run in one step, for every caller (Python's
//! `ds.iter(optimize=True)`, `sluice run --optimize`, the Rust API).
//!
//! The first such run of a dataset runs the default plan and times its ops as it goes; the
//! plan is made from those step times once it has timed 1% of an epoch (16–100 samples),
//! and later runs with the same options and seed run it. So profiling costs no share of an
//! epoch. A timed run that ended too soon is followed by a profile taken before the next run,
//! as is a run whose stages leave this process (worker processes, a Ray context), whose ops
//! it cannot time. A Ray context's plan is made for that cluster's CPUs and prices each time
//! (the caller fills them into the options) and not kept.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_core::{PipelineStats, Result, RunContext};
use sluice_optimizer::{OptimizerOptions, Plan, ProfileOptions};

use crate::dataset::{Dataset, IterOptions};

/// Source samples a profile for `optimize` takes at most; its share of an epoch is
/// [`EPOCH_SHARE`] (but at least 16 samples).
const PROFILE_SAMPLES: u64 = 100;
const EPOCH_SHARE: f64 = 0.01;
/// Longest a profile taken before a run may take.
const PROFILE_SECONDS: f64 = 5.0;

/// The plans `optimize` made for one dataset (shared by its clones), by (options, seed).
#[derive(Debug, Default)]
pub(crate) struct AutoPlans {
    plans: Mutex<HashMap<Key, Auto>>,
}

/// The optimizer options (as JSON) and the seed a plan is made for.
type Key = (String, u64);

fn key(options: &OptimizerOptions, opts: &IterOptions) -> Key {
    (
        serde_json::to_string(options).unwrap_or_default(),
        opts.seed,
    )
}

#[derive(Debug)]
enum Auto {
    /// The first run is timing its ops: its statistics.
    Timing(Arc<PipelineStats>),
    Planned(Arc<Plan>),
}

/// What is kept for a key, as far as it goes now.
enum Kept {
    Plan(Arc<Plan>),
    /// A run timed its ops, too few yet to plan from.
    TooFew,
    /// Nothing ran with these options and seed.
    Nothing,
}

/// What a run with `optimize` set does: run this plan, or time its ops (the first run).
pub(crate) struct AutoRun {
    pub opts: IterOptions,
    /// The run times its ops for the plan: register its statistics when it starts.
    pub timing: Option<Key>,
}

fn profile_options(seed: u64) -> ProfileOptions {
    ProfileOptions {
        samples: PROFILE_SAMPLES,
        seconds: PROFILE_SECONDS,
        seed,
        epoch_share: EPOCH_SHARE,
    }
}

impl AutoPlans {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Auto>> {
        self.plans.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Dataset {
    /// The options `opts` resolve to when `opts.optimize` is set and no plan is given: the
    /// plan made for these options and seed, or a run timing its ops for one.
    pub(crate) fn auto_run(&self, opts: &IterOptions) -> Result<AutoRun> {
        let run = |plan: Option<Arc<Plan>>, timing: Option<Key>| AutoRun {
            opts: IterOptions {
                plan: plan.or_else(|| opts.plan.clone()),
                time_ops: opts.time_ops || timing.is_some(),
                ..opts.clone()
            },
            timing,
        };
        let (Some(options), None) = (&opts.optimize, &opts.plan) else {
            return Ok(run(None, None));
        };
        if matches!(opts.context, RunContext::Remote { .. }) {
            // Planned for this cluster's CPUs and prices: not kept.
            return Ok(run(
                Some(Arc::new(self.profiled_plan(options, opts)?)),
                None,
            ));
        }
        let key = key(options, opts);
        let mut plans = self.auto_plans().lock();
        let plan = match self.kept(&mut plans, &key, options, opts)? {
            Kept::Plan(plan) => return Ok(run(Some(plan), None)),
            Kept::Nothing if !matches!(opts.context, RunContext::Processes { .. }) => {
                return Ok(run(None, Some(key)));
            }
            // Too short a timed run, or stages in other processes, whose ops this process
            // cannot time: a profile first.
            Kept::TooFew | Kept::Nothing => Arc::new(self.profiled_plan(options, opts)?),
        };
        plans.insert(key, Auto::Planned(plan.clone()));
        Ok(run(Some(plan), None))
    }

    /// Keeps the statistics of the run timing its ops for `key`'s plan.
    pub(crate) fn auto_timing(&self, key: Key, stats: Arc<PipelineStats>) {
        self.auto_plans().lock().insert(key, Auto::Timing(stats));
    }

    /// The optimizer plan a run with `opts` executes: `opts.plan`, or with `opts.optimize`
    /// the one made for these options and seed — from the first run's step times, once it
    /// has timed enough samples (`None` before: that run is the default plan).
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, OptimizerOptions};
    /// let ds = Dataset::range(1000);
    /// let opts = IterOptions { optimize: Some(OptimizerOptions::default()), ..Default::default() };
    /// assert!(ds.auto_plan(&opts)?.is_none()); // nothing run yet
    /// assert_eq!(ds.iter(&opts)?.count(), 1000); // the default plan, timed
    /// assert!(ds.auto_plan(&opts)?.is_some()); // planned from that run
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn auto_plan(&self, opts: &IterOptions) -> Result<Option<Arc<Plan>>> {
        let (Some(options), None) = (&opts.optimize, &opts.plan) else {
            return Ok(opts.plan.clone());
        };
        let key = key(options, opts);
        match self.kept(&mut self.auto_plans().lock(), &key, options, opts)? {
            Kept::Plan(plan) => Ok(Some(plan)),
            Kept::TooFew | Kept::Nothing => Ok(None),
        }
    }

    /// The plan kept for `key`, made now from its timed run if that has timed enough.
    fn kept(
        &self,
        plans: &mut HashMap<Key, Auto>,
        key: &Key,
        options: &OptimizerOptions,
        opts: &IterOptions,
    ) -> Result<Kept> {
        let plan = match plans.get(key) {
            Some(Auto::Planned(plan)) => return Ok(Kept::Plan(plan.clone())),
            Some(Auto::Timing(stats)) => match self.plan_from_run(stats, options, opts)? {
                Some(plan) => plan,
                None => return Ok(Kept::TooFew),
            },
            None => return Ok(Kept::Nothing),
        };
        plans.insert(key.clone(), Auto::Planned(plan.clone()));
        Ok(Kept::Plan(plan))
    }

    /// The plan from a timed run's step times, once it has timed enough samples.
    fn plan_from_run(
        &self,
        stats: &PipelineStats,
        options: &OptimizerOptions,
        opts: &IterOptions,
    ) -> Result<Option<Arc<Plan>>> {
        let Some(profile) = self.run_profile(stats, &profile_options(opts.seed)) else {
            return Ok(None);
        };
        Ok(Some(Arc::new(self.optimize(&profile, options, opts)?)))
    }

    /// A profile taken now, and the plan made from it.
    fn profiled_plan(&self, options: &OptimizerOptions, opts: &IterOptions) -> Result<Plan> {
        let profile = self.profile(&profile_options(opts.seed))?;
        self.optimize(&profile, options, opts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::OnError;
    use sluice_ops::OpSpec;

    fn optimizing(options: OptimizerOptions) -> IterOptions {
        IterOptions {
            optimize: Some(options),
            num_threads: Some(2),
            ..Default::default()
        }
    }

    fn pipeline() -> Dataset {
        Dataset::range(2000)
            .map(OpSpec::Noop.build().unwrap(), OnError::Raise, None)
            .unwrap()
            .batch(10, false)
            .unwrap()
    }

    #[test]
    fn the_first_run_is_timed_and_later_runs_run_its_plan() {
        let ds = pipeline();
        let opts = optimizing(OptimizerOptions::default());
        let first = ds.auto_run(&opts).unwrap();
        assert!(first.opts.time_ops && first.opts.plan.is_none());
        assert_eq!(ds.iter(&opts).unwrap().count(), 200);
        let plan = ds
            .auto_plan(&opts)
            .unwrap()
            .expect("planned from the timed run");
        let later = ds.auto_run(&opts).unwrap();
        assert!(!later.opts.time_ops && later.timing.is_none());
        assert_eq!(later.opts.plan.as_deref(), Some(&*plan));
        assert_eq!(ds.iter(&opts).unwrap().count(), 200);
        // Clones share the plans; another seed or other options plan anew.
        assert!(ds.clone().auto_plan(&opts).unwrap().is_some());
        let other_seed = IterOptions {
            seed: 1,
            ..opts.clone()
        };
        assert!(ds.auto_plan(&other_seed).unwrap().is_none());
        let other = optimizing(OptimizerOptions::baseline());
        assert!(ds.auto_plan(&other).unwrap().is_none());
    }

    #[test]
    fn a_run_too_short_to_time_is_followed_by_a_profile() {
        let ds = pipeline();
        // In the consumer's thread, ops run only as outputs are taken: none here.
        let opts = IterOptions {
            num_threads: Some(0),
            ..optimizing(OptimizerOptions::default())
        };
        drop(ds.iter(&opts).unwrap());
        assert!(ds.auto_plan(&opts).unwrap().is_none());
        let second = ds.auto_run(&opts).unwrap();
        assert!(second.opts.plan.is_some(), "profiled before the run");
        assert!(ds.auto_plan(&opts).unwrap().is_some());
    }

    #[test]
    fn worker_processes_and_a_given_plan_are_not_timed() {
        let ds = pipeline();
        let procs = IterOptions {
            context: RunContext::Processes { workers: 2 },
            ..optimizing(OptimizerOptions::default())
        };
        let run = ds.auto_run(&procs).unwrap();
        assert!(run.opts.plan.is_some() && !run.opts.time_ops);
        let plain = IterOptions::default();
        assert!(ds.auto_run(&plain).unwrap().opts.plan.is_none());
        assert!(ds.auto_plan(&plain).unwrap().is_none());
    }
}
