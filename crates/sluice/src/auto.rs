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
    plans: Mutex<HashMap<(String, u64), Auto>>,
}

#[derive(Debug)]
enum Auto {
    /// The first run is timing its ops: its statistics.
    Timing(Arc<PipelineStats>),
    Planned(Arc<Plan>),
}

/// What a run with `optimize` set does: run this plan, or time its ops (the first run).
pub(crate) struct AutoRun {
    pub opts: IterOptions,
    /// The run times its ops for the plan: register its statistics when it starts.
    pub timing: Option<(String, u64)>,
}

fn profile_options(seed: u64) -> ProfileOptions {
    ProfileOptions {
        samples: PROFILE_SAMPLES,
        seconds: PROFILE_SECONDS,
        seed,
        epoch_share: EPOCH_SHARE,
    }
}

impl Dataset {
    /// The options `opts` resolve to when `opts.optimize` is set and no plan is given: the
    /// plan made for these options and seed, or a run timing its ops for one.
    pub(crate) fn auto_run(&self, opts: &IterOptions) -> Result<AutoRun> {
        let (Some(options), None) = (&opts.optimize, &opts.plan) else {
            return Ok(AutoRun {
                opts: opts.clone(),
                timing: None,
            });
        };
        let planned = |plan: Arc<Plan>| IterOptions {
            plan: Some(plan),
            ..opts.clone()
        };
        if matches!(opts.context, RunContext::Remote { .. }) {
            // Planned for this cluster's CPUs and prices: not kept.
            let plan = Arc::new(self.profiled_plan(options, opts)?);
            return Ok(AutoRun {
                opts: planned(plan),
                timing: None,
            });
        }
        let key = (
            serde_json::to_string(options).unwrap_or_default(),
            opts.seed,
        );
        let mut plans = self
            .auto_plans()
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let plan = match plans.get(&key) {
            Some(Auto::Planned(plan)) => plan.clone(),
            Some(Auto::Timing(stats)) => match self.plan_from_run(stats, options, opts)? {
                Some(plan) => plan,
                None => Arc::new(self.profiled_plan(options, opts)?),
            },
            None if matches!(opts.context, RunContext::Processes { .. }) => {
                Arc::new(self.profiled_plan(options, opts)?)
            }
            None => {
                return Ok(AutoRun {
                    opts: IterOptions {
                        time_ops: true,
                        ..opts.clone()
                    },
                    timing: Some(key),
                })
            }
        };
        plans.insert(key, Auto::Planned(plan.clone()));
        Ok(AutoRun {
            opts: planned(plan),
            timing: None,
        })
    }

    /// Keeps the statistics of the run timing its ops for `key`'s plan.
    pub(crate) fn auto_timing(&self, key: (String, u64), stats: Arc<PipelineStats>) {
        let mut plans = self
            .auto_plans()
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        plans.insert(key, Auto::Timing(stats));
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
        let key = (
            serde_json::to_string(options).unwrap_or_default(),
            opts.seed,
        );
        let mut plans = self
            .auto_plans()
            .plans
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let plan = match plans.get(&key) {
            Some(Auto::Planned(plan)) => return Ok(Some(plan.clone())),
            Some(Auto::Timing(stats)) => self.plan_from_run(stats, options, opts)?,
            None => None,
        };
        if let Some(plan) = &plan {
            plans.insert(key, Auto::Planned(plan.clone()));
        }
        Ok(plan)
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
