//! Feeds arbitrary bytes to every decoding entry point. Any panic (including
//! one inside zune-jpeg, jpeg-decoder or png, which the library's
//! catch_unwind backstop would hide in production) aborts the fuzzer, so
//! the run shows what the decoders really do with hostile input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_imgproc::{
    decode, decode_resized_crop, decode_scaled, jpeg_dimensions, DecodeOptions, Filter, Mode,
};

fuzz_target!(|data: &[u8]| {
    // Small limit: keeps allocations bounded while still exercising the
    // limit check itself.
    let opts = DecodeOptions { mode: Mode::Rgb, max_pixels: 1 << 22 };
    if let Ok(img) = decode(data, &opts) {
        assert_eq!(img.data.len(), img.height * img.width * img.channels);
    }
    let l = DecodeOptions { mode: Mode::L, ..opts };
    let _ = decode(data, &l);
    let _ = jpeg_dimensions(data);
    if let Ok((img, d)) = decode_scaled(data, &opts, 8, 8) {
        assert!(matches!(d, 1 | 2 | 4 | 8));
        assert_eq!(img.data.len(), img.height * img.width * 3);
    }
    // The fused decode + resized crop (the baseline-JPEG scaled decoder): a crop of the
    // whole declared image down to 8x8, so every scale is tried.
    if let Ok((h, w)) = jpeg_dimensions(data) {
        if h > 0 && w > 0 && h * w <= 1 << 22 {
            if let Ok((img, _)) = decode_resized_crop(data, &opts, 0, 0, h, w, 8, 8, Filter::Bilinear) {
                assert_eq!((img.height, img.width), (8, 8));
                assert_eq!(img.data.len(), 8 * 8 * 3);
            }
        }
    }
});
