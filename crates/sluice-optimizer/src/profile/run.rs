//! A profile made from a run's own step times ([`sluice_core::stats::ops`]): what
//! `iter(optimize=True)` plans from, so the first epoch runs the default plan at full speed
//! instead of waiting for a profile of its own samples.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::stats::ops::StepTime;
use sluice_core::LogicalPlan;

use super::{profiled_steps, Machine, OpProfile, OutputShape, Profile};

impl Profile {
    /// A profile of `plan` from the step times a run of it recorded (`times`, keyed by op
    /// id, `None` the source read) over `elapsed`. `None` until the source was timed on
    /// `min_samples` samples and every profiled op on at least one item (an op the run has
    /// not reached yet, or one fused without saying how to split its cost).
    ///
    /// A run times its steps as they go, so when it is read mid-run the ops downstream have
    /// seen fewer of the samples read so far than the source has; each op's totals are scaled
    /// to the source's samples (by the items the ops before it let through per sample), as
    /// a profile, which runs every sample through every op, has them.
    ///
    /// Scaling with cores is not measured (every op keeps an efficiency of 1.0, as in a
    /// profile too short to measure it): cores that slow each other down show in the run's
    /// CPU per item instead.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use sluice_core::*;
    /// use sluice_optimizer::Profile;
    /// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(100)))));
    /// let timed = RunFacts { timed: true, ..Default::default() };
    /// let plan = sluice_optimizer::physical_plan(&src, &timed, None, None)?;
    /// let mut exec = Execution::start(&plan, ExecOptions::default())?;
    /// assert_eq!(exec.by_ref().count(), 100);
    /// let stats = exec.stats_handle();
    /// let times = stats.op_times().unwrap().steps();
    /// let p = Profile::from_run(&src, &times, stats.elapsed(), 16).unwrap();
    /// assert_eq!((p.samples, p.source.items_out), (100, 100));
    /// assert!(Profile::from_run(&src, &times, stats.elapsed(), 1000).is_none());
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn from_run(
        plan: &Arc<LogicalPlan>,
        times: &BTreeMap<Option<u64>, StepTime>,
        elapsed: Duration,
        min_samples: u64,
    ) -> Option<Profile> {
        let read = times
            .get(&None)
            .filter(|t| t.items_in >= min_samples.max(1))?;
        let samples = read.items_in;
        let source = filled(OpProfile::new(None, plan.source().name()), read, 1.0);
        let mut ops = Vec::new();
        let mut output = OutputShape::default();
        // Items reaching the next op per source sample.
        let mut reaching = 1.0;
        for step in profiled_steps(plan) {
            let t = times.get(&Some(step.op_id)).filter(|t| t.items_in > 0)?;
            let scale = samples as f64 * reaching / t.items_in as f64;
            let op = filled(OpProfile::for_op(&step.op, step.op_id), t, scale);
            reaching *= op.selectivity();
            output = OutputShape {
                items: t.shaped,
                fields: t.fields_out,
                objects: t.objects_out,
            };
            ops.push(op);
        }
        Some(Profile {
            version: Profile::VERSION,
            pipeline: String::new(),
            machine: Machine::here(),
            samples,
            elapsed_s: elapsed.as_secs_f64(),
            source,
            ops,
            output,
        })
    }
}

/// `p` with the counts of `t`, scaled by `scale` (rounded: counts stay whole).
fn filled(mut p: OpProfile, t: &StepTime, scale: f64) -> OpProfile {
    let n = |v: u64| (v as f64 * scale).round() as u64;
    p.items_in = n(t.items_in);
    p.items_out = n(t.items_out);
    p.cpu_s = t.cpu_ns as f64 * 1e-9 * scale;
    p.wall_s = t.wall_ns as f64 * 1e-9 * scale;
    p.bytes_in = n(t.bytes_in);
    p.bytes_out = n(t.bytes_out);
    p.bytes_written = n(t.bytes_written);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{busy_op, keep_even, pipeline};
    use sluice_core::{ExecOptions, Execution, OpKind};

    /// Runs `plan` to the end with its steps timed, on `threads` threads.
    fn timed_run(plan: &Arc<LogicalPlan>, threads: usize) -> BTreeMap<Option<u64>, StepTime> {
        let facts = sluice_core::RunFacts {
            num_threads: Some(threads),
            timed: true,
            ..Default::default()
        };
        let timed = crate::physical_plan(plan, &facts, None, None).unwrap();
        let mut exec = Execution::start(&timed, ExecOptions::default()).unwrap();
        for out in exec.by_ref() {
            out.unwrap();
        }
        exec.stats_handle().op_times().unwrap().steps()
    }

    #[test]
    fn a_runs_times_give_the_counts_a_profile_of_the_same_samples_gives() {
        let ops = vec![
            busy_op("before", 1, OpKind::PixelWise),
            keep_even(),
            busy_op("after", 1, OpKind::PixelWise),
        ];
        let plan = pipeline(100, ops);
        for threads in [1, 2] {
            let times = timed_run(&plan, threads);
            let p = Profile::from_run(&plan, &times, Duration::from_secs(1), 16).unwrap();
            let whole = super::super::profile(
                &plan,
                &crate::ProfileOptions {
                    samples: 100,
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(p.samples, 100);
            assert_eq!(p.ops.len(), 3);
            for (live, ran) in p.ops.iter().zip(&whole.ops) {
                assert_eq!(live.name, ran.name);
                assert_eq!(
                    (live.items_in, live.items_out),
                    (ran.items_in, ran.items_out)
                );
                assert_eq!(
                    (live.bytes_in, live.bytes_out),
                    (ran.bytes_in, ran.bytes_out)
                );
                assert_eq!(live.bytes_written, ran.bytes_written);
                assert_eq!(live.parallel_efficiency, 1.0);
            }
            assert_eq!(p.ops[1].selectivity(), 0.5);
            assert_eq!(p.output, whole.output);
            assert_eq!(p.source.items_out, 100);
        }
    }

    #[test]
    fn ops_read_mid_run_are_scaled_to_the_sources_samples() {
        let plan = pipeline(100, vec![keep_even(), busy_op("b", 1, OpKind::PixelWise)]);
        let mut times = timed_run(&plan, 1);
        let ids: Vec<u64> = profiled_steps(&plan).iter().map(|s| s.op_id).collect();
        // As if the source had read 100 samples but the ops had only seen the first 60.
        for id in &ids {
            let t = times.get_mut(&Some(*id)).unwrap();
            let f = 0.6;
            t.items_in = (t.items_in as f64 * f) as u64;
            t.items_out = (t.items_out as f64 * f) as u64;
            t.cpu_ns = (t.cpu_ns as f64 * f) as u64;
            t.bytes_in = (t.bytes_in as f64 * f) as u64;
        }
        let cpu_b = times[&Some(ids[1])].cpu_ns as f64;
        let p = Profile::from_run(&plan, &times, Duration::from_secs(1), 16).unwrap();
        assert_eq!((p.ops[0].items_in, p.ops[0].items_out), (100, 50));
        assert_eq!(p.ops[1].items_in, 50);
        assert!((p.ops[1].cpu_s - cpu_b * 1e-9 / 0.6).abs() <= 1e-9 * (1.0 + cpu_b));
    }

    #[test]
    fn no_profile_before_every_step_was_timed() {
        let plan = pipeline(100, vec![busy_op("a", 1, OpKind::PixelWise)]);
        let mut times = timed_run(&plan, 1);
        assert!(Profile::from_run(&plan, &times, Duration::ZERO, 101).is_none());
        let op = profiled_steps(&plan)[0].op_id;
        times.remove(&Some(op));
        assert!(Profile::from_run(&plan, &times, Duration::ZERO, 16).is_none());
        assert!(Profile::from_run(&plan, &BTreeMap::new(), Duration::ZERO, 0).is_none());
    }
}
