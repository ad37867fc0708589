//! JPEG through `image.decode` (RGB, L) and the fused `decode_random_resized_crop` (the
//! DCT-scaled decoder), plus `decode_scaled`. Inputs that are not JPEG are skipped.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: sluice_fuzz::tolerate_backstopped_upstream_panics(),
    |data: &[u8]| {
        if sluice_imgproc::sniff(data) == Some(sluice_imgproc::Format::Jpeg) {
            sluice_fuzz::media::decode_image(data);
        }
    }
);
