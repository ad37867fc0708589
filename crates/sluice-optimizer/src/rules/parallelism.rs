//! Parallelism: workers per stage from the cost model. Aiming at the most the machine can
//! sustain (its cores over the pipeline's CPU per sample) or at `est_throughput`, each
//! parallel stage gets the fewest workers that keep it from being the bottleneck.

use sluice_core::{Result, Variant};

use super::{Draft, Rule};
use crate::model::predict;

/// The parallelism rule.
#[derive(Debug, Default)]
pub struct Parallelism;

impl Rule for Parallelism {
    fn name(&self) -> &'static str {
        "parallelism"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let pred = predict(&d.plan, d.profile, d.cpus, d.cache.as_ref());
        let machine_best = d.cpus as f64 / pred.cpu_per_sample.max(1e-12);
        let target = match d.options.est_throughput {
            Some(t) if t > 0.0 => t.min(machine_best),
            _ => machine_best,
        };
        let mut notes = Vec::new();
        // stages[0] of the prediction is the source thread.
        for (st, sp) in d.plan.stages.iter_mut().zip(pred.stages.iter().skip(1)) {
            let workers = ((target * sp.cpu_per_sample * 1.05).ceil() as usize).clamp(1, d.cpus);
            let threadable = st.kind.is_stateless() && !super::is_python(st);
            match &mut st.variant {
                Variant::Threads { threads } if threadable => {
                    *threads = workers;
                }
                Variant::Pool { workers: w, .. } => *w = workers,
                _ => continue,
            }
            st.queue_depth = st.queue_depth.max(st.variant.min_depth());
            notes.push(format!(
                "{} × {workers} ({:.1} µs CPU/sample)",
                st.kind.label(),
                sp.cpu_per_sample * 1e6
            ));
        }
        d.note(
            "parallelism",
            format!(
                "target {:.0} samples/s{}: {}",
                target,
                if d.options.est_throughput.is_some() {
                    " (est_throughput)"
                } else {
                    " (all cores)"
                },
                notes.join(", ")
            ),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::options::OptimizerOptions;
    use crate::testing::*;
    use sluice_core::{OpKind, Variant};

    #[test]
    fn bottleneck_gets_the_cores_and_a_target_needs_fewer() {
        let plan = pipeline(30, vec![busy_op("work", 400, OpKind::Opaque)]);
        let mut input = OptimizeInput::for_test(&plan, &Default::default());
        input.cpus = 4;
        let full = optimize_physical(&input).unwrap();
        assert_eq!(full.plan.stages[0].variant, Variant::Threads { threads: 4 });
        // ~2500 samples/s per worker: 1000/s needs one, with room for a loaded machine
        // measuring up to twice the CPU per sample.
        let opts = OptimizerOptions {
            est_throughput: Some(1000.0),
            ..Default::default()
        };
        let mut input = OptimizeInput::for_test(&plan, &opts);
        input.cpus = 4;
        let lean = optimize_physical(&input).unwrap();
        assert_eq!(lean.plan.stages[0].variant, Variant::Threads { threads: 1 });
        assert!(
            lean.prediction.throughput >= 1000.0,
            "{:?}",
            lean.prediction
        );
    }
}
