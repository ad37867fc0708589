//! Pipeline files (`sluice run pipeline.toml`): `PipelineSpec::parse` (TOML, or JSON when bit 0
//! of the first byte is set), `build`, then up to 32 outputs pulled. Before building, the spec
//! is kept inside the sandbox (`sluice_fuzz::spec::confine`): data paths point at small
//! fixtures, tokenizer paths nowhere, and `range` sources hold at most 1000 samples.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::PipelineSpec;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let format = if flags & 1 == 0 { "toml" } else { "json" };
    let Ok(spec) = PipelineSpec::parse(text, format) else {
        return;
    };
    let Some(spec) = sluice_fuzz::spec::confine(&spec) else {
        return;
    };
    let Ok((ds, opts)) = spec.build() else {
        return;
    };
    let _ = (ds.plan().to_string(), ds.fingerprint());
    if let Ok(phys) = ds.physical_plan(&opts) {
        let _ = phys.to_string();
    }
    if let Ok(exec) = ds.iter(&opts) {
        sluice_fuzz::drain(exec, 32);
    }
});
