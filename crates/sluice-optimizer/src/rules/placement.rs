//! Placement: where each stage runs. GIL-bound Python stages go to a process pool when they
//! dominate the work and a pool is available; otherwise they run on one background thread
//! (more threads only contend for the GIL; a background thread still works while a training
//! step has released the GIL, which inline execution in the consumer would not). Rust stages
//! go on threads (the parallelism rule sizes them).

use sluice_core::{Result, StageKind, Variant};

use super::{is_python, Draft, Rule};

/// Share of the pipeline's CPU a Python stage must have to be worth a process pool.
pub const PYTHON_SHARE: f64 = 0.25;

/// The placement rule.
#[derive(Debug, Default)]
pub struct Placement;

impl Rule for Placement {
    fn name(&self) -> &'static str {
        "placement"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let total = d.profile.cpu_per_sample().max(1e-12);
        let pool =
            d.options.enable_processes && d.cpus > 1 && d.pools.iter().any(|p| p == "processes");
        let mut notes = Vec::new();
        let n = d.plan.stages.len();
        for i in (0..n).rev() {
            let st = &d.plan.stages[i];
            let python = is_python(st);
            let cpu: f64 = match &st.kind {
                StageKind::Chain { ops, .. } => ops
                    .iter()
                    .filter_map(|o| d.profile.op(o.op_id))
                    .map(|p| p.cpu_s / d.profile.samples.max(1) as f64)
                    .sum(),
                _ => 0.0,
            };
            let variant = if python && pool && cpu / total >= PYTHON_SHARE {
                notes.push(format!(
                    "{} → process pool ({:.0}% of CPU, GIL-bound)",
                    st.kind.label(),
                    100.0 * cpu / total
                ));
                Variant::Pool {
                    backend: "processes".into(),
                    workers: d.cpus,
                }
            } else {
                Variant::Threads { threads: 1 }
            };
            let last = i + 1 == n && matches!(st.kind, StageKind::Take { .. });
            d.plan.stages[i].variant = if last { Variant::Inline } else { variant };
        }
        for n in notes.into_iter().rev() {
            d.note("placement", n);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::testing::*;
    use sluice_core::{OpKind, Variant};

    #[test]
    fn a_dominant_python_stage_goes_to_processes_when_available() {
        let plan = pipeline(
            20,
            vec![
                busy_op("decode", 20, OpKind::Decode),
                TestOp {
                    python: true,
                    ..busy_op("py", 200, OpKind::Opaque)
                },
            ],
        );
        let mut input = OptimizeInput::for_test(&plan, &Default::default());
        input.cpus = 2;
        let local = optimize_physical(&input).unwrap();
        assert_eq!(
            local.plan.stages.last().unwrap().variant,
            Variant::Threads { threads: 1 },
            "without a pool: one background thread"
        );
        input.pools = vec!["processes".into()];
        let pooled = optimize_physical(&input).unwrap();
        assert!(matches!(
            pooled.plan.stages.last().unwrap().variant,
            Variant::Pool { .. }
        ));
        assert!(pooled.decisions.iter().any(|d| d.contains("process pool")));
    }
}
