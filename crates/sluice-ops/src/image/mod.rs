//! `sluice.image` ops over `sluice-imgproc` kernels. Images are HWC `uint8` tensors until
//! `normalize`/`to_tensor`, which give float32 CHW (torchvision's conventions). Random ops
//! draw from the per-sample generator of their op id.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_core::{
    Emit, Error, Op, OpContext, OpKind, OpMeta, OpRef, Result, Sample, SampleRng, Tensor,
    TensorData, Value,
};
use sluice_imgproc as ip;

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
fn default_max_pixels() -> u64 {
    ip::DEFAULT_MAX_PIXELS
}

/// A size: an int (a square for crops, the shorter side for `resize`) or `(height, width)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Int(usize),
    Hw(usize, usize),
}

impl Size {
    fn square(self) -> (usize, usize) {
        match self {
            Size::Int(s) => (s, s),
            Size::Hw(h, w) => (h, w),
        }
    }
}

/// The serde form of the `image.*` ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op")]
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
    },
    #[serde(rename = "image.center_crop")]
    CenterCrop {
        size: Size,
        #[serde(default = "image_field")]
        field: String,
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
    },
    #[serde(rename = "image.horizontal_flip")]
    HorizontalFlip {
        #[serde(default = "half")]
        p: f64,
        #[serde(default = "image_field")]
        field: String,
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
    },
    #[serde(rename = "image.grayscale")]
    Grayscale {
        #[serde(default = "one")]
        p: f64,
        #[serde(default = "default_channels")]
        num_output_channels: usize,
        #[serde(default = "image_field")]
        field: String,
    },
    #[serde(rename = "image.gaussian_blur")]
    GaussianBlur {
        kernel_size: Size,
        #[serde(default = "default_sigma")]
        sigma: (f64, f64),
        #[serde(default = "one")]
        p: f64,
        #[serde(default = "image_field")]
        field: String,
    },
    #[serde(rename = "image.normalize")]
    Normalize {
        mean: Vec<f32>,
        std: Vec<f32>,
        #[serde(default = "image_field")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
    #[serde(rename = "image.to_tensor")]
    ToTensor {
        #[serde(default = "image_field")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
    /// `decode` fused with the `random_resized_crop` right after it: made by the planner
    /// ([`Op::fuse_next`]), not by users. The crop is drawn as the crop op draws it (its
    /// generator, `crop_op_id`); a JPEG whose crop shrinks ≥ 3x is then decoded at
    /// 1/2–1/8 scale ([`ip::decode_resized_crop`]), so pixels differ slightly from the
    /// unfused ops'.
    #[serde(rename = "image.decode_random_resized_crop")]
    DecodeRandomResizedCrop {
        /// An `image.decode` spec.
        decode: Box<ImageSpec>,
        /// An `image.random_resized_crop` spec.
        crop: Box<ImageSpec>,
        /// The crop op's id: its random draws come from that op's generator.
        crop_op_id: u64,
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

fn check_p(p: f64) -> Result<()> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(Error::invalid(format!("p must be in [0, 1], got {p}")))
    }
}

fn check_size(s: Size) -> Result<()> {
    let (h, w) = s.square();
    if h == 0 || w == 0 {
        return Err(Error::invalid(format!("size must be positive, got {s:?}")));
    }
    Ok(())
}

/// Builds an `image.*` op, validating its arguments.
pub fn build(spec: &ImageSpec) -> Result<OpRef> {
    match spec {
        ImageSpec::Decode { mode, .. } if mode != "RGB" && mode != "L" => {
            return Err(Error::invalid(format!(
                "mode must be 'RGB' or 'L', got '{mode}'"
            )))
        }
        ImageSpec::Resize {
            size,
            interpolation,
            ..
        } => {
            check_size(*size)?;
            filter(interpolation)?;
        }
        ImageSpec::CenterCrop { size, .. } => check_size(*size)?,
        ImageSpec::RandomResizedCrop {
            size,
            scale,
            ratio,
            interpolation,
            ..
        } => {
            check_size(*size)?;
            filter(interpolation)?;
            if !(0.0 <= scale.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                return Err(Error::invalid(format!(
                    "scale must satisfy 0 <= min <= max <= 1, got {scale:?}"
                )));
            }
            if !(0.0 < ratio.0 && ratio.0 <= ratio.1) {
                return Err(Error::invalid(format!(
                    "ratio must satisfy 0 < min <= max, got {ratio:?}"
                )));
            }
        }
        ImageSpec::HorizontalFlip { p, .. } => check_p(*p)?,
        ImageSpec::ColorJitter {
            brightness,
            contrast,
            saturation,
            hue,
            p,
            ..
        } => {
            check_p(*p)?;
            if [brightness, contrast, saturation].iter().any(|v| **v < 0.0)
                || !(0.0..=0.5).contains(hue)
            {
                return Err(Error::invalid(
                    "color_jitter: brightness/contrast/saturation must be >= 0 and hue in [0, 0.5]",
                ));
            }
        }
        ImageSpec::Grayscale {
            p,
            num_output_channels,
            ..
        } => {
            check_p(*p)?;
            if *num_output_channels != 1 && *num_output_channels != 3 {
                return Err(Error::invalid("num_output_channels must be 1 or 3"));
            }
        }
        ImageSpec::GaussianBlur {
            kernel_size,
            sigma,
            p,
            ..
        } => {
            check_p(*p)?;
            let (kh, kw) = kernel_size.square();
            if kh % 2 == 0 || kw % 2 == 0 || kh == 0 {
                return Err(Error::invalid(format!(
                    "kernel_size must be odd and positive, got {kernel_size:?}"
                )));
            }
            if !(0.0 < sigma.0 && sigma.0 <= sigma.1) {
                return Err(Error::invalid(format!(
                    "sigma must satisfy 0 < min <= max, got {sigma:?}"
                )));
            }
        }
        ImageSpec::Normalize { mean, std, .. }
            if mean.is_empty() || mean.len() != std.len() || std.contains(&0.0) =>
        {
            return Err(Error::invalid(
                "normalize: mean and std need the same non-zero length, std != 0",
            ))
        }
        ImageSpec::DecodeRandomResizedCrop { decode, crop, .. } => {
            match (&**decode, &**crop) {
                (ImageSpec::Decode { out, .. }, ImageSpec::RandomResizedCrop { field, .. })
                    if out == field => {}
                _ => {
                    return Err(Error::invalid(
                        "decode_random_resized_crop needs an image.decode and an \
                         image.random_resized_crop of the decoded field",
                    ))
                }
            }
            build(decode)?;
            build(crop)?;
        }
        _ => {}
    }
    Ok(Arc::new(ImageOp { spec: spec.clone() }))
}

#[derive(Debug)]
struct ImageOp {
    spec: ImageSpec,
}

fn kernel_err(e: ip::ImageError) -> Error {
    Error::data(e.to_string())
}

/// Takes an HWC uint8 image out of `field` (no copy when the buffer is not shared).
fn take_image(s: &mut Sample, field: &str, op: &str) -> Result<ip::Image> {
    match s.take(field, op)? {
        Value::Tensor(t) if t.shape().len() == 3 && matches!(t.data(), TensorData::U8(_)) => {
            let (shape, data) = t.into_parts();
            let TensorData::U8(data) = data else {
                unreachable!("checked above")
            };
            ip::Image::new(shape[0], shape[1], shape[2], data).map_err(kernel_err)
        }
        other => Err(Error::type_error(format!(
            "field '{field}' must be an HWC uint8 image (use image.decode first), got {}",
            match &other {
                Value::Tensor(t) => format!("{:?} {:?}", t.dtype(), t.shape()),
                v => v.kind().to_string(),
            }
        ))),
    }
}

fn image_value(img: ip::Image) -> Result<Value> {
    Ok(Value::Tensor(Tensor::new(
        vec![img.height, img.width, img.channels],
        TensorData::U8(img.data),
    )?))
}

fn chw_value(img: &ip::Image, data: Vec<f32>) -> Result<Value> {
    Ok(Value::Tensor(Tensor::new(
        vec![img.channels, img.height, img.width],
        TensorData::F32(data),
    )?))
}

/// torchvision's `resize` output size for an int size: the shorter side becomes `size`.
fn shorter_side(h: usize, w: usize, size: usize) -> (usize, usize) {
    if h <= w {
        (size, ((size as f64) * w as f64 / h as f64) as usize)
    } else {
        (((size as f64) * h as f64 / w as f64) as usize, size)
    }
}

fn center_crop(img: &ip::Image, ch: usize, cw: usize) -> Result<ip::Image> {
    // torchvision pads with zeros when the crop is larger than the image, and rounds with
    // Python's round (ties to even).
    let top = ((img.height as f64 - ch as f64) / 2.0).round_ties_even() as i64;
    let left = ((img.width as f64 - cw as f64) / 2.0).round_ties_even() as i64;
    ip::crop(img, top, left, ch, cw).map_err(kernel_err)
}

fn require_bytes<'a>(s: &'a Sample, field: &str, op: &str) -> Result<&'a [u8]> {
    let v = s.require(field, op)?;
    v.as_bytes().ok_or_else(|| {
        Error::type_error(format!("field '{field}' must be bytes, got {}", v.kind()))
    })
}

fn decode_options(mode: &str, max_pixels: u64) -> ip::DecodeOptions {
    ip::DecodeOptions {
        mode: if mode == "L" {
            ip::Mode::L
        } else {
            ip::Mode::Rgb
        },
        max_pixels,
    }
}

impl ImageOp {
    fn field(&self) -> &str {
        match &self.spec {
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
            ImageSpec::DecodeRandomResizedCrop { decode, .. } => match &**decode {
                ImageSpec::Decode { field, .. } => field,
                _ => "bytes",
            },
        }
    }
    fn out(&self) -> &str {
        match &self.spec {
            ImageSpec::Decode { out, .. } => out,
            ImageSpec::DecodeRandomResizedCrop { crop, .. } => match &**crop {
                ImageSpec::RandomResizedCrop { field, .. } => field,
                _ => "image",
            },
            ImageSpec::Normalize { out: Some(o), .. }
            | ImageSpec::ToTensor { out: Some(o), .. } => o,
            _ => self.field(),
        }
    }

    fn run(&self, s: &mut Sample, rng: &mut SampleRng) -> Result<()> {
        let name = self.name();
        let field = self.field();
        let mut u = || rng.uniform();
        let img = match &self.spec {
            ImageSpec::Decode {
                mode, max_pixels, ..
            } => {
                let bytes = require_bytes(s, field, name)?;
                ip::decode(bytes, &decode_options(mode, *max_pixels)).map_err(kernel_err)?
            }
            ImageSpec::DecodeRandomResizedCrop { decode, crop, .. } => {
                let (
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
                ) = (&**decode, &**crop)
                else {
                    return Err(Error::Internal(
                        "decode_random_resized_crop: bad spec".into(),
                    ));
                };
                let bytes = require_bytes(s, field, name)?;
                let opts = decode_options(mode, *max_pixels);
                let (oh, ow) = size.square();
                let interp = filter(interpolation)?;
                if ip::sniff(bytes) == Some(ip::Format::Jpeg) {
                    // The crop op's draw, from the header's (upright) size: the same box
                    // the unfused ops pick from the decoded image.
                    let (h, w) = ip::jpeg_dimensions(bytes).map_err(kernel_err)?;
                    let (top, left, ch, cw) =
                        ip::rrc_params(h, w, *scale, *ratio, &mut u).map_err(kernel_err)?;
                    ip::decode_resized_crop(bytes, &opts, top, left, ch, cw, oh, ow, interp)
                        .map_err(kernel_err)?
                        .0
                } else {
                    let img = ip::decode(bytes, &opts).map_err(kernel_err)?;
                    let (top, left, ch, cw) =
                        ip::rrc_params(img.height, img.width, *scale, *ratio, &mut u)
                            .map_err(kernel_err)?;
                    ip::resized_crop(&img, top, left, ch, cw, oh, ow, interp).map_err(kernel_err)?
                }
            }
            ImageSpec::Resize {
                size,
                interpolation,
                antialias,
                ..
            } => {
                let img = take_image(s, field, name)?;
                let (h, w) = match size {
                    Size::Int(n) => shorter_side(img.height, img.width, *n),
                    Size::Hw(h, w) => (*h, *w),
                };
                ip::resize(&img, h, w, filter(interpolation)?, *antialias).map_err(kernel_err)?
            }
            ImageSpec::CenterCrop { size, .. } => {
                let img = take_image(s, field, name)?;
                let (h, w) = size.square();
                center_crop(&img, h, w)?
            }
            ImageSpec::RandomResizedCrop {
                size,
                scale,
                ratio,
                interpolation,
                ..
            } => {
                let img = take_image(s, field, name)?;
                let (top, left, h, w) =
                    ip::rrc_params(img.height, img.width, *scale, *ratio, &mut u)
                        .map_err(kernel_err)?;
                let (oh, ow) = size.square();
                ip::resized_crop(&img, top, left, h, w, oh, ow, filter(interpolation)?)
                    .map_err(kernel_err)?
            }
            ImageSpec::HorizontalFlip { p, .. } => {
                let mut img = take_image(s, field, name)?;
                if u() < *p {
                    ip::hflip(&mut img).map_err(kernel_err)?;
                }
                img
            }
            ImageSpec::ColorJitter {
                brightness,
                contrast,
                saturation,
                hue,
                p,
                ..
            } => {
                let mut img = take_image(s, field, name)?;
                if u() < *p {
                    let params =
                        ip::color_jitter_params(*brightness, *contrast, *saturation, *hue, &mut u)
                            .map_err(kernel_err)?;
                    ip::apply_jitter(&mut img, &params).map_err(kernel_err)?;
                }
                img
            }
            ImageSpec::Grayscale {
                p,
                num_output_channels,
                ..
            } => {
                let img = take_image(s, field, name)?;
                if u() < *p {
                    ip::to_grayscale(&img, *num_output_channels).map_err(kernel_err)?
                } else {
                    img
                }
            }
            ImageSpec::GaussianBlur {
                kernel_size,
                sigma,
                p,
                ..
            } => {
                let img = take_image(s, field, name)?;
                if u() < *p {
                    let sig = ip::blur_sigma(sigma.0, sigma.1, &mut u).map_err(kernel_err)?;
                    ip::gaussian_blur(&img, kernel_size.square(), (sig, sig)).map_err(kernel_err)?
                } else {
                    img
                }
            }
            ImageSpec::Normalize { mean, std, .. } => {
                let img = take_image(s, field, name)?;
                let data = ip::normalize(&img, mean, std).map_err(kernel_err)?;
                s.set(self.out(), chw_value(&img, data)?);
                return Ok(());
            }
            ImageSpec::ToTensor { .. } => {
                let img = take_image(s, field, name)?;
                let data = ip::to_tensor(&img).map_err(kernel_err)?;
                s.set(self.out(), chw_value(&img, data)?);
                return Ok(());
            }
        };
        s.set(self.out(), image_value(img)?);
        Ok(())
    }
}

impl Op for ImageOp {
    fn name(&self) -> &str {
        match self.spec {
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
        }
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
    fn meta(&self) -> OpMeta {
        let (kind, random) = match self.spec {
            ImageSpec::Decode { .. } => (OpKind::Decode, false),
            ImageSpec::DecodeRandomResizedCrop { .. } => (OpKind::Decode, true),
            ImageSpec::Resize { .. } | ImageSpec::CenterCrop { .. } => {
                (OpKind::SizeReducing, false)
            }
            ImageSpec::RandomResizedCrop { .. } => (OpKind::SizeReducing, true),
            ImageSpec::HorizontalFlip { .. } => (OpKind::Geometric, true),
            ImageSpec::Normalize { .. } | ImageSpec::ToTensor { .. } => (OpKind::PixelWise, false),
            ImageSpec::ColorJitter { .. }
            | ImageSpec::Grayscale { .. }
            | ImageSpec::GaussianBlur { .. } => (OpKind::PixelWise, true),
        };
        OpMeta {
            reads: vec![self.field().to_string()],
            writes: vec![self.out().to_string()],
            kind,
            random,
            python: false,
        }
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        let mut rng = match self.spec {
            // Draw with the crop op's generator, as the unfused crop does.
            ImageSpec::DecodeRandomResizedCrop { crop_op_id, .. } => OpContext {
                op_id: crop_op_id,
                ..*cx
            }
            .rng(),
            _ => cx.rng(),
        };
        self.run(&mut s, &mut rng)?;
        Ok(Emit::One(s))
    }
    /// `decode` + the `random_resized_crop` of its output field (bilinear or bicubic)
    /// become `decode_random_resized_crop`.
    fn fuse_next(&self, next: &dyn Op, next_op_id: u64) -> Option<OpRef> {
        let ImageSpec::Decode { out, .. } = &self.spec else {
            return None;
        };
        let crop: ImageSpec = serde_json::from_value(next.spec()).ok()?;
        match &crop {
            ImageSpec::RandomResizedCrop {
                field,
                interpolation,
                ..
            } if field == out && interpolation != "nearest" => {}
            _ => return None,
        }
        build(&ImageSpec::DecodeRandomResizedCrop {
            decode: Box::new(self.spec.clone()),
            crop: Box::new(crop),
            crop_op_id: next_op_id,
        })
        .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::run;

    fn gradient(h: usize, w: usize) -> Sample {
        let data: Vec<u8> = (0..h * w * 3).map(|i| (i % 251) as u8).collect();
        let t = Tensor::new(vec![h, w, 3], TensorData::U8(data)).unwrap();
        Sample::from_pairs([("image", Value::Tensor(t))])
    }

    fn shape(s: &Sample, f: &str) -> Vec<usize> {
        match s.get(f) {
            Some(Value::Tensor(t)) => t.shape().to_vec(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn shapes_follow_torchvision_conventions() {
        let s = run(r#"{"op":"image.resize","size":32}"#, gradient(40, 80), 0).unwrap();
        assert_eq!(shape(&s, "image"), [32, 64, 3]);
        let s = run(r#"{"op":"image.center_crop","size":[10,20]}"#, s, 0).unwrap();
        assert_eq!(shape(&s, "image"), [10, 20, 3]);
        let s = run(
            r#"{"op":"image.random_resized_crop","size":8}"#,
            gradient(40, 80),
            0,
        )
        .unwrap();
        assert_eq!(shape(&s, "image"), [8, 8, 3]);
        let s = run(
            r#"{"op":"image.normalize","mean":[0.5,0.5,0.5],"std":[0.2,0.2,0.2]}"#,
            s,
            0,
        )
        .unwrap();
        assert_eq!(shape(&s, "image"), [3, 8, 8]);
        let s = run(
            r#"{"op":"image.grayscale","num_output_channels":1}"#,
            gradient(4, 4),
            0,
        )
        .unwrap();
        assert_eq!(shape(&s, "image"), [4, 4, 1]);
    }

    #[test]
    fn random_ops_are_deterministic_per_index() {
        let spec = r#"{"op":"image.color_jitter","brightness":0.4,"contrast":0.4,"saturation":0.4,"hue":0.1}"#;
        let a = run(spec, gradient(16, 16), 5).unwrap();
        let b = run(spec, gradient(16, 16), 5).unwrap();
        let c = run(spec, gradient(16, 16), 6).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn bad_arguments_and_inputs() {
        for bad in [
            r#"{"op":"image.horizontal_flip","p":2}"#,
            r#"{"op":"image.gaussian_blur","kernel_size":4}"#,
            r#"{"op":"image.resize","size":0}"#,
            r#"{"op":"image.decode","mode":"CMYK"}"#,
            r#"{"op":"image.random_resized_crop","size":8,"scale":[0.5,0.1]}"#,
        ] {
            let spec: crate::OpSpec = serde_json::from_str(bad).unwrap();
            assert!(spec.build().is_err(), "{bad}");
        }
        let s = Sample::from_pairs([("bytes", Value::Bytes(vec![1u8, 2, 3].into()))]);
        let e = run(r#"{"op":"image.decode"}"#, s, 0).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e}");
        let e = run(r#"{"op":"image.resize","size":4}"#, Sample::new(), 0).unwrap_err();
        assert!(matches!(e, Error::MissingField { .. }));
        let s = Sample::from_pairs([("image", Value::Int(3))]);
        assert!(matches!(
            run(r#"{"op":"image.resize","size":4}"#, s, 0).unwrap_err(),
            Error::Type(_)
        ));
    }
}
