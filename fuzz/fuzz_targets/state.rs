//! Checkpoints (`load_state_dict`): a JSON `IterState` loaded into one of the fixed pipelines
//! with `Dataset::iter_from`, then up to 64 outputs pulled; or (top bit of the first byte)
//! one checkpoint per line merged with `elastic_state` and the result loaded into a sharded
//! pipeline. The fingerprint, seed and version are set to the pipeline's unless bit 6 is set,
//! so the fuzzer reaches the tree walk instead of stopping at the fingerprint check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::IterState;
use sluice_fuzz::pipelines::{options, pipeline};

fuzz_target!(
    init: {
        // `seed.sh` sets this to have real states written as seeds.
        if let Ok(dir) = std::env::var("SLUICE_FUZZ_SEEDS") {
            sluice_fuzz::pipelines::write_seeds("state", dir.as_ref()).expect("seeds");
        }
    },
    |data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let keep = flags & 0x40 != 0;
    let opts = options((flags >> 4) as usize);
    let patch = |st: &mut IterState, ds: &sluice::Dataset| {
        if !keep {
            st.version = IterState::VERSION;
            st.pipeline = ds.fingerprint();
            st.seed = opts.seed;
        }
    };
    let state = if flags & 0x80 == 0 {
        let Ok(mut st) = serde_json::from_str::<IterState>(text) else {
            return;
        };
        let ds = pipeline(flags as usize & 0x0f);
        patch(&mut st, ds);
        Some((ds, st))
    } else {
        let ds = pipeline(4 + (flags as usize & 0x0f) % 6);
        let mut states: Vec<IterState> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        for st in &mut states {
            patch(st, ds);
        }
        sluice::elastic_state(&states).ok().map(|st| (ds, st))
    };
    if let Some((ds, st)) = state {
        let _ = serde_json::to_string(&st);
        if let Ok(exec) = ds.iter_from(&opts, Some(&st)) {
            sluice_fuzz::drain(exec, 64);
        }
    }
});
