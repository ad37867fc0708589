//! Optimizer plans (`Plan::from_json`, then `Plan::apply` through `Dataset::iter`): a plan
//! file loaded for one of the fixed pipelines, then up to 64 outputs pulled. The pipeline
//! fingerprint is set to the pipeline's unless bit 6 of the first byte is set.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sluice_fuzz::pipelines::{options, pipeline};
use sluice_optimizer::Plan;

fuzz_target!(
    init: {
        // `seed.sh` sets this to have real plans written as seeds.
        if let Ok(dir) = std::env::var("SLUICE_FUZZ_SEEDS") {
            sluice_fuzz::pipelines::write_seeds("plan", dir.as_ref()).expect("seeds");
        }
    },
    |data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let Ok(mut plan) = Plan::from_json(text) else {
        return;
    };
    let _ = (plan.to_string(), plan.to_json());
    let ds = pipeline(flags as usize & 0x0f);
    if flags & 0x40 == 0 {
        plan.pipeline = ds.fingerprint();
    }
    let mut opts = options((flags >> 4) as usize);
    opts.plan = Some(Arc::new(plan));
    if let Ok(phys) = ds.physical_plan(&opts) {
        let _ = (phys.to_string(), phys.to_json());
    }
    if let Ok(exec) = ds.iter(&opts) {
        sluice_fuzz::drain(exec, 64);
    }
});
