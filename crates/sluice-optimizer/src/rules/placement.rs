//! Placement: where each stage runs. GIL-bound Python stages go to a process pool when they
//! dominate the work and a pool is available; otherwise they run on one background thread
//! (more threads only contend for the GIL; a background thread still works while a training
//! step has released the GIL, which inline execution in the consumer would not). Rust stages
//! go on threads (the parallelism rule sizes them).
//!
//! Forced mode ([`Placement::force`], what `iter(processes=N)` runs): every stage of Python
//! code goes on the process pool with N workers, whatever it costs; no profile is read and
//! the other stages keep their variants.

use sluice_core::exec::backend::PROCESSES;
use sluice_core::{PhysicalPlan, Result, StageKind, Variant};

use super::{is_python, Draft, Rule};

/// Share of the pipeline's CPU a Python stage must have to be worth a process pool.
pub const PYTHON_SHARE: f64 = 0.25;

/// The placement rule.
#[derive(Debug, Default)]
pub struct Placement;

impl Placement {
    /// Forced mode: puts every chain stage that runs Python code (a UDF holds the GIL, so
    /// threads cannot run it in parallel) on the process pool with `workers` workers.
    /// Returns one decision per stage moved. The executor needs the `processes` backend
    /// registered to run the result.
    pub fn force(plan: &mut PhysicalPlan, workers: usize) -> Vec<String> {
        let workers = workers.max(1);
        let mut moved = Vec::new();
        for st in &mut plan.stages {
            if is_python(st) {
                st.variant = Variant::Pool {
                    backend: PROCESSES.into(),
                    workers,
                };
                moved.push(format!(
                    "{} → {PROCESSES} ({workers} workers)",
                    st.kind.label()
                ));
            }
        }
        moved
    }
}

impl Rule for Placement {
    fn name(&self) -> &'static str {
        "placement"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let total = d.profile.cpu_per_sample().max(1e-12);
        let pool =
            d.options.enable_processes && d.cpus > 1 && d.pools.iter().any(|p| p == PROCESSES);
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
                    backend: PROCESSES.into(),
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
    use super::Placement;
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::testing::*;
    use sluice_core::exec::backend::PROCESSES;
    use sluice_core::{lower, LowerOptions, OpKind, Variant};

    #[test]
    fn forced_mode_puts_every_python_stage_on_processes_without_a_profile() {
        let py = |name| TestOp {
            python: true,
            ..busy_op(name, 1, OpKind::Opaque)
        };
        let logical = pipeline(
            10,
            vec![busy_op("decode", 1, OpKind::Decode), py("a"), py("b")],
        );
        let mut plan = lower(&logical, &LowerOptions::default()).unwrap();
        assert_eq!(
            printed(&plan),
            "read+decode [threads=2] | a+b [threads=2]",
            "the lowering splits Rust from Python ops"
        );
        let moved = Placement::force(&mut plan, 3);
        assert_eq!(
            printed(&plan),
            "read+decode [threads=2] | a+b [processes=3]"
        );
        assert_eq!(moved, ["a+b → processes (3 workers)"]);
        // No Python op: nothing moves; zero workers still means one.
        let mut rust = lower(
            &pipeline(10, vec![busy_op("x", 1, OpKind::Opaque)]),
            &LowerOptions::default(),
        )
        .unwrap();
        assert!(Placement::force(&mut rust, 2).is_empty());
        let mut one = lower(&logical, &LowerOptions::default()).unwrap();
        Placement::force(&mut one, 0);
        assert_eq!(one.stages[1].variant.workers(), 1);
    }

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
        input.pools = vec![PROCESSES.into()];
        let pooled = optimize_physical(&input).unwrap();
        assert!(matches!(
            pooled.plan.stages.last().unwrap().variant,
            Variant::Pool { .. }
        ));
        assert!(pooled.decisions.iter().any(|d| d.contains("process pool")));
    }
}
