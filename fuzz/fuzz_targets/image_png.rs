//! PNG through `image.decode` (RGB, L) and the fused `decode_random_resized_crop` (full
//! decode, then crop). Inputs that are not PNG are skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: sluice_fuzz::tolerate_backstopped_upstream_panics(),
    |data: &[u8]| {
        if sluice_imgproc::sniff(data) == Some(sluice_imgproc::Format::Png) {
            sluice_fuzz::media::decode_image(data);
        }
    }
);
