//! `sluice.image` ops over `sluice-imgproc` kernels. Images are HWC `uint8` tensors (`[h, w, 1]`
//! or `[h, w, 3]`) until `normalize`/`to_tensor`, which give float32 CHW (torchvision's
//! conventions). Random ops draw from the per-sample generator of their op id. Every op reads
//! `field` and writes `out` (default: `field`); ops that make an image of a size their
//! arguments set check it against `max_pixels` ([`crate::limits`]).

mod decode_center_crop;
mod decode_resize;
mod device;
mod op;
#[cfg(test)]
mod tests;
mod validate;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::{Error, OpRef, Result};
use sluice_imgproc as ip;

use crate::limits::{default_max_pixels, is_default_max_pixels};
pub use device::{DRAWS, HEADER, MAGIC};
use op::ImageOp;

fn bytes_field() -> String {
    "bytes".into()
}
fn image_field() -> String {
    "image".into()
}
fn one() -> f64 {
    1.0
}
fn half() -> f64 {
    0.5
}
fn yes() -> bool {
    true
}
fn rgb() -> String {
    "RGB".into()
}
fn bilinear() -> String {
    "bilinear".into()
}
fn default_scale() -> (f64, f64) {
    (0.08, 1.0)
}
fn default_ratio() -> (f64, f64) {
    (3.0 / 4.0, 4.0 / 3.0)
}
fn default_sigma() -> (f64, f64) {
    (0.1, 2.0)
}
fn default_channels() -> usize {
    1
}

/// A size: an int (a square for crops, the shorter side for `resize`) or `(height, width)`.
/// For `gaussian_blur`'s `kernel_size` a pair is `(kx, ky)` — (width, height), as torchvision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "expected an int or a [height, width] pair of ints >= 0"
)]
pub enum Size {
    Int(usize),
    Hw(usize, usize),
}

impl Size {
    /// `(height, width)`; an int is a square.
    pub(crate) fn square(self) -> (usize, usize) {
        match self {
            Size::Int(s) => (s, s),
            Size::Hw(h, w) => (h, w),
        }
    }
    /// The value as the user wrote it, for messages.
    fn shown(self) -> String {
        match self {
            Size::Int(s) => s.to_string(),
            Size::Hw(a, b) => format!("({a}, {b})"),
        }
    }
}

/// The serde form of the `image.*` ops. `out: None` writes back to `field`; limits at their
/// defaults and absent `out`s are left out of the serialized form.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub enum ImageSpec {
    #[serde(rename = "image.decode")]
    Decode {
        #[serde(default = "bytes_field")]
        field: String,
        #[serde(default = "image_field")]
        out: String,
        #[serde(default = "rgb")]
        mode: String,
        #[serde(default = "default_max_pixels")]
        max_pixels: u64,
    },
    #[serde(rename = "image.resize")]
    Resize {
        size: Size,
        #[serde(default = "bilinear")]
        interpolation: String,
        #[serde(default = "yes")]
        antialias: bool,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
        #[serde(
            default = "default_max_pixels",
            skip_serializing_if = "is_default_max_pixels"
        )]
        max_pixels: u64,
    },
    #[serde(rename = "image.center_crop")]
    CenterCrop {
        size: Size,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
        #[serde(
            default = "default_max_pixels",
            skip_serializing_if = "is_default_max_pixels"
        )]
        max_pixels: u64,
    },
    #[serde(rename = "image.random_resized_crop")]
    RandomResizedCrop {
        size: Size,
        #[serde(default = "default_scale")]
        scale: (f64, f64),
        #[serde(default = "default_ratio")]
        ratio: (f64, f64),
        #[serde(default = "bilinear")]
        interpolation: String,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
        #[serde(
            default = "default_max_pixels",
            skip_serializing_if = "is_default_max_pixels"
        )]
        max_pixels: u64,
    },
    #[serde(rename = "image.horizontal_flip")]
    HorizontalFlip {
        #[serde(default = "half")]
        p: f64,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    #[serde(rename = "image.color_jitter")]
    ColorJitter {
        #[serde(default)]
        brightness: f64,
        #[serde(default)]
        contrast: f64,
        #[serde(default)]
        saturation: f64,
        #[serde(default)]
        hue: f64,
        #[serde(default = "one")]
        p: f64,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    #[serde(rename = "image.grayscale")]
    Grayscale {
        #[serde(default = "one")]
        p: f64,
        #[serde(default = "default_channels")]
        num_output_channels: usize,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    /// torchvision's `GaussianBlur`: `kernel_size` is `k` or `(kx, ky)` (width, height), and
    /// one sigma drawn uniformly from `sigma = (min, max)` blurs both axes.
    #[serde(rename = "image.gaussian_blur")]
    GaussianBlur {
        kernel_size: Size,
        #[serde(default = "default_sigma")]
        sigma: (f64, f64),
        #[serde(default = "one")]
        p: f64,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    #[serde(rename = "image.normalize")]
    Normalize {
        mean: Vec<f32>,
        std: Vec<f32>,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default)]
        out: Option<String>,
        #[serde(
            default = "default_max_pixels",
            skip_serializing_if = "is_default_max_pixels"
        )]
        max_pixels: u64,
    },
    #[serde(rename = "image.to_tensor")]
    ToTensor {
        #[serde(default = "image_field")]
        field: String,
        #[serde(default)]
        out: Option<String>,
        #[serde(
            default = "default_max_pixels",
            skip_serializing_if = "is_default_max_pixels"
        )]
        max_pixels: u64,
    },
    /// `decode` fused with the `random_resized_crop` right after it: made by the planner
    /// ([`sluice_core::Op::fuse_next`]), not by users. The crop is drawn as the crop op draws
    /// it (its generator, `crop_op_id`); a JPEG whose crop shrinks ≥ 3x is then decoded at
    /// 1/2–1/8 scale ([`ip::decode_resized_crop`]), so pixels differ slightly from the
    /// unfused ops'; otherwise only the rows down to the crop's are decoded, the same bytes.
    #[serde(rename = "image.decode_random_resized_crop")]
    DecodeRandomResizedCrop {
        /// An `image.decode` spec.
        decode: Box<ImageSpec>,
        /// An `image.random_resized_crop` spec (writing its own field).
        crop: Box<ImageSpec>,
        /// The crop op's id: its random draws come from that op's generator.
        crop_op_id: u64,
    },
    /// `decode` fused with the in-place, antialiased `resize` right after it: made by the
    /// planner, not by users. A JPEG that the resize shrinks ≥ 3x is decoded at 1/2–1/8 scale
    /// ([`ip::decode_for_crop`] of the whole image), so pixels differ slightly from the
    /// unfused ops' (what that saves: `decode_resize.rs`); anything else runs the
    /// two ops as they are, the same bytes.
    #[serde(rename = "image.decode_resize")]
    DecodeResize {
        /// An `image.decode` spec.
        decode: Box<ImageSpec>,
        /// An `image.resize` spec (in place).
        resize: Box<ImageSpec>,
        /// The resize op's id, for the run's per-op timings.
        resize_op_id: u64,
    },
    /// `decode` fused with the in-place `center_crop` right after it: made by the planner,
    /// not by users. A JPEG whose centre crop is at most half of it is decoded only where the
    /// crop is, so pixels differ slightly from the unfused ops' (`decode_center_crop.rs`);
    /// anything else runs the two ops as they are, the same bytes.
    #[serde(rename = "image.decode_center_crop")]
    DecodeCenterCrop {
        /// An `image.decode` spec.
        decode: Box<ImageSpec>,
        /// An `image.center_crop` spec (in place).
        crop: Box<ImageSpec>,
        /// The crop op's id, for the run's per-op timings.
        crop_op_id: u64,
    },
    /// `decode_random_resized_crop` (and the in-place `horizontal_flip` after it) left to a
    /// consumer that decodes on its GPU: made by the planner for one
    /// ([`sluice_core::plan::device`]), not by users. The decoded field gets the draws the
    /// host ops would have made and the encoded image ([`device::MAGIC`]).
    #[serde(rename = "image.device_draws")]
    DeviceDraws {
        /// A `decode_random_resized_crop` spec.
        fused: Box<ImageSpec>,
        /// The flip's `p` and op id (its generator), when the flip was taken in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flip: Option<(f64, u64)>,
    },
}

fn filter(name: &str) -> Result<ip::Filter> {
    match name {
        "bilinear" => Ok(ip::Filter::Bilinear),
        "bicubic" => Ok(ip::Filter::Bicubic),
        "nearest" => Ok(ip::Filter::Nearest),
        other => Err(Error::invalid(format!(
            "interpolation must be bilinear, bicubic or nearest, got '{other}'"
        ))),
    }
}

impl ImageSpec {
    /// The API name (`resize`, `random_resized_crop`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            ImageSpec::Decode { .. } => "decode",
            ImageSpec::Resize { .. } => "resize",
            ImageSpec::CenterCrop { .. } => "center_crop",
            ImageSpec::RandomResizedCrop { .. } => "random_resized_crop",
            ImageSpec::HorizontalFlip { .. } => "horizontal_flip",
            ImageSpec::ColorJitter { .. } => "color_jitter",
            ImageSpec::Grayscale { .. } => "grayscale",
            ImageSpec::GaussianBlur { .. } => "gaussian_blur",
            ImageSpec::Normalize { .. } => "normalize",
            ImageSpec::ToTensor { .. } => "to_tensor",
            ImageSpec::DecodeRandomResizedCrop { .. } => "decode_random_resized_crop",
            ImageSpec::DecodeResize { .. } => "decode_resize",
            ImageSpec::DecodeCenterCrop { .. } => "decode_center_crop",
            ImageSpec::DeviceDraws { .. } => "device_draws",
        }
    }

    /// The field the op reads.
    pub(crate) fn field(&self) -> &str {
        match self {
            ImageSpec::Decode { field, .. }
            | ImageSpec::Resize { field, .. }
            | ImageSpec::CenterCrop { field, .. }
            | ImageSpec::RandomResizedCrop { field, .. }
            | ImageSpec::HorizontalFlip { field, .. }
            | ImageSpec::ColorJitter { field, .. }
            | ImageSpec::Grayscale { field, .. }
            | ImageSpec::GaussianBlur { field, .. }
            | ImageSpec::Normalize { field, .. }
            | ImageSpec::ToTensor { field, .. } => field,
            ImageSpec::DecodeRandomResizedCrop { decode, .. }
            | ImageSpec::DecodeResize { decode, .. }
            | ImageSpec::DecodeCenterCrop { decode, .. } => decode.field(),
            ImageSpec::DeviceDraws { fused, .. } => fused.field(),
        }
    }

    /// The field the op writes (`out`, else `field`).
    pub(crate) fn out(&self) -> &str {
        match self {
            ImageSpec::Decode { out, .. } => out,
            ImageSpec::DecodeRandomResizedCrop { crop, .. } => crop.out(),
            ImageSpec::DecodeResize { resize, .. } => resize.out(),
            ImageSpec::DecodeCenterCrop { crop, .. } => crop.out(),
            ImageSpec::DeviceDraws { fused, .. } => fused.out(),
            ImageSpec::Resize { out, field, .. }
            | ImageSpec::CenterCrop { out, field, .. }
            | ImageSpec::RandomResizedCrop { out, field, .. }
            | ImageSpec::HorizontalFlip { out, field, .. }
            | ImageSpec::ColorJitter { out, field, .. }
            | ImageSpec::Grayscale { out, field, .. }
            | ImageSpec::GaussianBlur { out, field, .. }
            | ImageSpec::Normalize { out, field, .. }
            | ImageSpec::ToTensor { out, field, .. } => out.as_deref().unwrap_or(field),
        }
    }
}

/// The arguments of a `decode_random_resized_crop` that the ops running it (on the host, or
/// its draws for a device) read.
pub(super) struct DecodeCrop<'a> {
    pub mode: &'a str,
    pub max_pixels: u64,
    pub size: Size,
    pub scale: (f64, f64),
    pub ratio: (f64, f64),
    pub interpolation: &'a str,
    /// The crop op's id: its generator draws the box.
    pub crop_op_id: u64,
}

impl ImageSpec {
    /// This `decode_random_resized_crop`'s arguments.
    pub(super) fn decode_crop(&self) -> Result<DecodeCrop<'_>> {
        let bad = || Error::Internal("decode_random_resized_crop: bad spec".into());
        let ImageSpec::DecodeRandomResizedCrop {
            decode,
            crop,
            crop_op_id,
        } = self
        else {
            return Err(bad());
        };
        match (&**decode, &**crop) {
            (
                ImageSpec::Decode {
                    mode, max_pixels, ..
                },
                ImageSpec::RandomResizedCrop {
                    size,
                    scale,
                    ratio,
                    interpolation,
                    ..
                },
            ) => Ok(DecodeCrop {
                mode,
                max_pixels: *max_pixels,
                size: *size,
                scale: *scale,
                ratio: *ratio,
                interpolation,
                crop_op_id: *crop_op_id,
            }),
            _ => Err(bad()),
        }
    }
}

/// Builds an `image.*` op, validating its arguments: a bad one is an error naming the op.
pub fn build(spec: &ImageSpec) -> Result<OpRef> {
    validate::validate(spec).map_err(|e| match e {
        Error::InvalidArgument(m) if !m.starts_with("image.") => {
            Error::InvalidArgument(format!("image.{}: {m}", spec.name()))
        }
        other => other,
    })?;
    Ok(Arc::new(ImageOp::new(spec.clone())))
}
