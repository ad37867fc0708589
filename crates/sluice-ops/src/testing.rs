//! Test helpers shared by the op families' tests.

use sluice_core::{Emit, OpContext, Result, Sample};

/// The context of sample `index` under `seed` (epoch 0, op id 3).
pub(crate) fn cx(seed: u64, index: u64) -> OpContext {
    OpContext {
        seed,
        epoch: 0,
        index,
        sub: 0,
        op_id: 3,
    }
}

/// The single output of a map.
pub(crate) fn one(e: Emit) -> Sample {
    match e {
        Emit::One(s) => s,
        other => panic!("expected one output, got {other:?}"),
    }
}

/// Builds the op of a JSON spec and applies it to `s` as sample `index` (seed 1).
pub(crate) fn run(spec: &str, s: Sample, index: u64) -> Result<Sample> {
    let spec: crate::OpSpec = serde_json::from_str(spec).expect("valid spec JSON");
    Ok(one(spec.build()?.apply(s, &cx(1, index))?))
}
