//! # sluice-imgproc
//!
//! Pure image kernels for sluice's image ops: decoding, geometry and
//! torchvision-compatible augmentations on 8-bit HWC [`Image`]s. No Python,
//! no global state, no threads of its own (except jpeg-decoder's helper
//! threads, for scaled decodes of progressive/CMYK files): every function is
//! safe to call from many worker threads at once (with the GIL released),
//! and every failure is an [`ImageError`] — malformed input never panics.
//!
//! ## What matches what
//! * [`decode`]: Pillow's `exif_transpose(Image.open(f)).convert("RGB"|"L")`
//!   for JPEG, PNG, WebP, GIF (first frame), BMP and TIFF (JPEG decode
//!   within a fraction of a level on average of libjpeg-turbo; lossy WebP
//!   within rounding of libwebp; the lossless formats exact).
//! * [`resize`], [`resized_crop`]: Pillow's `Image.resize` convolution
//!   (bilinear with antialias is torchvision's RandomResizedCrop on PIL
//!   images and on uint8 tensors with `antialias=True`).
//! * Colour ops, [`to_grayscale`], [`gaussian_blur`], [`normalize`]:
//!   torchvision v2 tensor kernels on uint8 (float32 arithmetic, truncating
//!   casts), re-implemented from `torchvision/transforms/v2/functional`.
//! * Samplers ([`rrc_params`], [`color_jitter_params`], [`blur_sigma`]):
//!   torchvision's algorithms, fed by a caller-supplied uniform source so
//!   the engine controls determinism.
//!
//! ## JPEG backends and DCT-scaled decoding
//! [`decode_scaled`] decodes at 1/2, 1/4 or 1/8 size when the crop that
//! will be resized still has enough pixels, and [`decode_resized_crop`]
//! (sluice's fused `decode` + `random_resized_crop`) picks that scale itself.
//! zune-jpeg (full-size decodes; the fastest pure-Rust decoder here) has no
//! reduced IDCT, so:
//! * default build (pure Rust, no system packages): baseline JPEGs with 1 or
//!   3 components (nearly every photo) go through this crate's own scaled
//!   decoder — Huffman decoding, then per-block reduced IDCTs straight to the
//!   output grid (the exact box average of the full IDCT, chroma scaled by a
//!   larger IDCT instead of upsampled, as libjpeg-turbo does); progressive
//!   and CMYK files use the `jpeg-decoder` crate's `Decoder::scale` at 1/4
//!   and 1/8 (at 1/2 it costs more than a full zune-jpeg decode);
//! * feature `turbojpeg` (needs `cmake` and `nasm` to build libjpeg-turbo):
//!   1- and 3-component JPEGs decode with libjpeg-turbo at every scale —
//!   bit-exact with Pillow and ~25% faster at full size.
//!
//! README.md has the measurements behind this choice.
//!
//! ## Example: a SimCLR-style augmentation chain
//! ```
//! use sluice_imgproc::*;
//! let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coffee_320x240.jpg")).unwrap();
//! // Any uniform [0, 1) source; the engine derives one per sample and op.
//! let mut state = 0x2545F4914F6CDD1Du64;
//! let mut u = move || { state ^= state << 13; state ^= state >> 7; state ^= state << 17; (state >> 11) as f64 / (1u64 << 53) as f64 };
//!
//! let (h, w) = jpeg_dimensions(&bytes).unwrap();
//! let (top, left, ch, cw) = rrc_params(h, w, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0), &mut u).unwrap();
//! let img = decode(&bytes, &DecodeOptions::default()).unwrap();
//! let mut img = resized_crop(&img, top, left, ch, cw, 224, 224, Filter::Bilinear).unwrap();
//! hflip(&mut img).unwrap();
//! let jitter = color_jitter_params(0.8, 0.8, 0.8, 0.2, &mut u).unwrap();
//! apply_jitter(&mut img, &jitter).unwrap();
//! let img = to_grayscale(&img, 3).unwrap();
//! let sigma = blur_sigma(0.1, 2.0, &mut u).unwrap();
//! let img = gaussian_blur(&img, (23, 23), (sigma, sigma)).unwrap();
//! let chw = normalize(&img, &[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]).unwrap();
//! assert_eq!(chw.len(), 3 * 224 * 224);
//! ```
#![deny(missing_docs)]

mod blur;
mod color;
mod convert;
mod decode;
mod error;
mod geometry;
mod image;
mod jitter;
mod orient;
mod quality;
mod random;
mod simd;
mod tensor;

pub use blur::{gaussian_blur, gaussian_kernel1d};
pub use color::{adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, to_grayscale};
pub use convert::rgb_to_l;
pub use decode::{
    dct_denominator, decode, decode_for_crop, decode_resized_crop, decode_scaled, image_dimensions,
    jpeg_dimensions, jpeg_orientation, sniff, DecodeOptions, DecodedForCrop, Format, Mode,
    DCT_MIN_RESIDUAL, DEFAULT_MAX_PIXELS,
};
pub use error::{ImageError, Result};
pub use geometry::{
    crop, hflip, resize, resized_crop, resized_crop_box, resized_subpixel_crop, CropBox, Filter,
};
pub use image::Image;
pub use jitter::apply_jitter;
pub use quality::psnr;
pub use random::{blur_sigma, color_jitter_params, rrc_params, JitterOp, JitterParams};
pub use simd::{simd_ceiling, Simd};
pub use tensor::{normalize, normalize_hwc_into, normalize_into, to_tensor};
