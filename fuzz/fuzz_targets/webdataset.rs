//! `read_webdataset` on one tar shard: open, then stream every sample to the end. The shard is
//! read twice: as given, and with the checksum of every 512-byte block recomputed, so the
//! fuzzer gets past the header checksum (which it rarely guesses) to the sizes, names and
//! extension headers behind it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::Source;

fn read_shard(data: &[u8]) {
    let shard = sluice_fuzz::ScratchFile::new("tar", data);
    let Ok(src) = sluice_io::WebDatasetSource::open(&[shard.0.clone()], None) else {
        return;
    };
    if let Ok(stream) = src.stream() {
        // The stream ends after an error; the bound only guards against a runaway reader.
        sluice_fuzz::drain(stream, 100_000);
    }
}

/// Sets the ustar checksum field (bytes 148..156) of every non-zero 512-byte block.
fn fix_checksums(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    for block in out.chunks_exact_mut(512) {
        if block.iter().all(|&b| b == 0) {
            continue;
        }
        block[148..156].fill(b' ');
        let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
        block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    }
    out
}

fuzz_target!(|data: &[u8]| {
    read_shard(data);
    let fixed = fix_checksums(data);
    if fixed != data {
        read_shard(&fixed);
    }
});
