//! Fusion: adjacent chain stages with the same variant become one stage, so a sample passes
//! through all their ops in one hand-off (cedar's fusion). GIL-bound Python ops and GIL-free
//! Rust ops stay apart: fused, the Rust ops would wait for the GIL with the Python ones.
//!
//! Fusing two *ops* into one (an op's [`sluice_core::Op::fuse_next`]) is another step, applied
//! when the plan runs ([`sluice_core::plan::fuse`]): plans name the unfused ops.

use sluice_core::{Result, StageKind};

use super::{is_python, Draft, Rule};

/// The fusion rule.
#[derive(Debug, Default)]
pub struct Fusion;

impl Rule for Fusion {
    fn name(&self) -> &'static str {
        "fusion"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let before = d.plan.stages.len();
        let mut out: Vec<sluice_core::Stage> = Vec::with_capacity(before);
        for st in d.plan.stages.drain(..) {
            if let Some(prev) = out.last_mut() {
                if prev.variant == st.variant && is_python(prev) == is_python(&st) {
                    if let (StageKind::Chain { ops: a, .. }, StageKind::Chain { read, ops: b }) =
                        (&mut prev.kind, &st.kind)
                    {
                        // A read can only start a chain: it must happen before any op.
                        if !read {
                            a.extend(b.iter().cloned());
                            continue;
                        }
                    }
                }
            }
            out.push(st);
        }
        d.plan.stages = out;
        let after = d.plan.stages.len();
        if after < before {
            d.note(
                "fusion",
                format!("{before} stages → {after} (adjacent stages with the same variant)"),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::options::OptimizerOptions;
    use crate::testing::*;
    use sluice_core::OpKind;

    #[test]
    fn fuses_same_variant_neighbours_but_not_python_with_rust() {
        let plan = pipeline(
            20,
            vec![
                busy_op("a", 10, OpKind::Opaque),
                busy_op("b", 10, OpKind::Opaque),
                TestOp {
                    python: true,
                    ..busy_op("py", 10, OpKind::Opaque)
                },
            ],
        );
        let on = optimize_physical(&OptimizeInput::for_test(&plan, &Default::default())).unwrap();
        let labels: Vec<String> = on.plan.stages.iter().map(|s| s.kind.label()).collect();
        assert_eq!(labels, ["read+a+b", "py"]);
        let off = OptimizerOptions {
            enable_fusion: false,
            ..Default::default()
        };
        let off = optimize_physical(&OptimizeInput::for_test(&plan, &off)).unwrap();
        assert_eq!(off.plan.stages.len(), 4);
    }
}
