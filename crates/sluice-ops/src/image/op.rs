//! Running the `image.*` ops.

use std::borrow::Cow;

use sluice_core::stats::ops::FirstPart;
use sluice_core::{
    Emit, Error, Op, OpContext, OpKind, OpMeta, OpRef, Result, Sample, SampleRng, SlotWriter,
    Tensor, TensorData, Value,
};
use sluice_imgproc as ip;

use super::{build, filter, ImageSpec, Size};
use crate::limits::{check, product};

#[derive(Debug)]
pub(super) struct ImageOp {
    spec: ImageSpec,
}

pub(super) fn kernel_err(e: ip::ImageError) -> Error {
    Error::data(e.to_string())
}

/// About how many bytes decoding `bytes` makes and the ops after it hold while they work,
/// from its header: what a memory cap's gate for big buffers
/// ([`sluice_core::exec::hold_transient`]) is asked for. Twice the decoded image: a 50 MP
/// JPEG decoded whole and resized raised the peak 167 MB for its 150 MB of pixels
/// (`benchmarks/dct_resize_probe.py`, unfused). The other formats as
/// `benchmarks/decode_peak_probe.py` measured them (a 16 MP image decoded and resized, the
/// file's own bytes left out): WebP ~6 bytes a pixel, BMP ~9, PNG ~12, TIFF ~12.5 (up to 4
/// channels of 16 bits while they convert), GIF ~14 (its canvas, its frame and the RGB); the
/// CPU is RELIABILITY.md's. `None` for a header that does not parse or declares more than
/// `max_pixels` (the decoder reports those without making anything).
pub(super) fn decoded_bytes(bytes: &[u8], max_pixels: u64) -> Option<u64> {
    let format = ip::sniff(bytes)?;
    let (h, w) = ip::image_dimensions(bytes)?;
    let pixels = (h as u64).saturating_mul(w as u64);
    if pixels > max_pixels {
        return None;
    }
    Some(match format {
        ip::Format::Jpeg => rgb_transient(h, w, 1),
        ip::Format::Webp => 8 * pixels,
        ip::Format::Bmp => 14 * pixels,
        ip::Format::Png | ip::Format::Tiff | ip::Format::Gif => 16 * pixels,
    })
}

/// Asks the memory gate for room to decode `bytes` whole ([`decoded_bytes`]); nothing to
/// ask for when the header does not say.
pub(super) fn hold_for_decode(bytes: &[u8], max_pixels: u64) {
    if let Some(n) = decoded_bytes(bytes, max_pixels) {
        sluice_core::exec::hold_transient(n);
    }
}

/// What decoding `h` x `w` RGB pixels at 1/`d` scale asks the memory gate for: twice the
/// decoded image (the decoder's buffers, then the next ops').
pub(super) fn rgb_transient(h: usize, w: usize, d: usize) -> u64 {
    2 * 3 * (h as u64 * w as u64) / (d * d) as u64
}

/// A per-channel mean or std: the op's own, or made for `to_tensor`.
type MeanStd<'a> = Cow<'a, [f32]>;

/// Whether `t` is what the image ops take: an HWC uint8 image with 1 or 3 channels.
fn is_image(t: &Tensor) -> bool {
    matches!(t.shape(), [_, _, 1 | 3]) && matches!(t.data(), TensorData::U8(_))
}

/// Takes an HWC uint8 image with 1 or 3 channels out of `field` (no copy when the buffer is
/// not shared).
fn take_image(s: &mut Sample, field: &str, op: &str) -> Result<ip::Image> {
    match s.take(field, op)? {
        Value::Tensor(t) if is_image(&t) => {
            let (shape, data) = t.into_parts();
            let TensorData::U8(data) = data else {
                unreachable!("checked above")
            };
            ip::Image::new(shape[0], shape[1], shape[2], data).map_err(kernel_err)
        }
        other => Err(Error::type_error(format!(
            "field '{field}' must be an HWC uint8 image [height, width, 1 or 3] (use \
             image.decode first), got {}",
            match &other {
                Value::Tensor(t) => format!("{} {:?}", t.dtype().name(), t.shape()),
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

/// The size `size` resizes a `height` x `width` image to (the shorter side, or both),
/// checked against `max_pixels`.
pub(super) fn resize_target(
    size: &Size,
    height: usize,
    width: usize,
    max_pixels: u64,
) -> Result<(usize, usize)> {
    match size {
        Size::Int(n) => {
            let (h, w) = shorter_side(height, width, *n);
            check(
                product(&[h as u64, w as u64]),
                max_pixels,
                "max_pixels",
                || {
                    format!(
                        "size={n} (the shorter side) on a {height}x{width} image makes {h}x{w} \
                         pixels"
                    )
                },
            )?;
            Ok((h, w))
        }
        Size::Hw(h, w) => Ok((*h, *w)),
    }
}

/// torchvision's `center_crop` origin along one axis of `n` pixels for a crop of `c`: a crop
/// larger than the image pads `(c - n) // 2` zeros before and the rest (the odd one) after;
/// a smaller one starts at `int(round((n - c) / 2))`, Python's round (ties to even).
pub(super) fn center_origin(n: usize, c: usize) -> i64 {
    if c > n {
        -(((c - n) / 2) as i64)
    } else {
        ((n - c) as f64 / 2.0).round_ties_even() as i64
    }
}

pub(super) fn center_crop(img: &ip::Image, ch: usize, cw: usize) -> Result<ip::Image> {
    let top = center_origin(img.height, ch);
    let left = center_origin(img.width, cw);
    ip::crop(img, top, left, ch, cw).map_err(kernel_err)
}

pub(super) fn require_bytes<'a>(s: &'a Sample, field: &str, op: &str) -> Result<&'a [u8]> {
    let v = s.require(field, op)?;
    v.as_bytes().ok_or_else(|| {
        Error::type_error(format!("field '{field}' must be bytes, got {}", v.kind()))
    })
}

pub(super) fn decode_options(mode: &str, max_pixels: u64) -> ip::DecodeOptions {
    ip::DecodeOptions {
        mode: if mode == "L" {
            ip::Mode::L
        } else {
            ip::Mode::Rgb
        },
        max_pixels,
    }
}

/// An in-place kernel on `img`, or on a copy when the input must stay (`keep`).
fn in_place(
    img: ip::Image,
    keep: bool,
    f: impl FnOnce(&mut ip::Image) -> Result<()>,
) -> Result<(Option<ip::Image>, ip::Image)> {
    if keep {
        let mut copy = img.clone();
        f(&mut copy)?;
        Ok((Some(img), copy))
    } else {
        let mut img = img;
        f(&mut img)?;
        Ok((None, img))
    }
}

impl ImageOp {
    pub(super) fn new(spec: ImageSpec) -> Self {
        ImageOp { spec }
    }

    /// The decoding ops: bytes in `field` → an image.
    fn decode(&self, s: &Sample, u: &mut dyn FnMut() -> f64) -> Result<ip::Image> {
        let (name, field) = (self.name(), self.spec.field());
        match &self.spec {
            ImageSpec::Decode {
                mode, max_pixels, ..
            } => {
                let bytes = require_bytes(s, field, name)?;
                hold_for_decode(bytes, *max_pixels);
                ip::decode(bytes, &decode_options(mode, *max_pixels)).map_err(kernel_err)
            }
            ImageSpec::DecodeRandomResizedCrop { .. } => {
                let dc = self.spec.decode_crop()?;
                let bytes = require_bytes(s, field, name)?;
                let opts = decode_options(dc.mode, dc.max_pixels);
                let (oh, ow) = dc.size.square();
                let interp = filter(dc.interpolation)?;
                // The decode is the first op's part of the cost, the crop the second's: a
                // run timing its ops charges each its own (`FirstPart`), with the bytes the
                // unfused decode would have handed on.
                let part = FirstPart::start();
                if ip::sniff(bytes) == Some(ip::Format::Jpeg) {
                    // The crop op's draw, from the header's (upright) size: the same box
                    // the unfused ops pick from the decoded image.
                    let (h, w) = ip::jpeg_dimensions(bytes).map_err(kernel_err)?;
                    let (top, left, ch, cw) =
                        ip::rrc_params(h, w, dc.scale, dc.ratio, u).map_err(kernel_err)?;
                    // Only the crop's window is decoded, at the scale the crop allows.
                    let d = ip::dct_denominator(ch, cw, oh, ow, interp) as usize;
                    sluice_core::exec::hold_transient(rgb_transient(ch, cw, d));
                    let decoded =
                        ip::decode_for_crop(bytes, &opts, top, left, ch, cw, oh, ow, interp)
                            .map_err(kernel_err)?;
                    part.end((h * w * decoded.image.channels) as u64);
                    decoded
                        .resized_crop(top, left, ch, cw, oh, ow, interp)
                        .map_err(kernel_err)
                } else {
                    hold_for_decode(bytes, dc.max_pixels);
                    let img = ip::decode(bytes, &opts).map_err(kernel_err)?;
                    part.end(img.data.len() as u64);
                    let (top, left, ch, cw) =
                        ip::rrc_params(img.height, img.width, dc.scale, dc.ratio, u)
                            .map_err(kernel_err)?;
                    ip::resized_crop(&img, top, left, ch, cw, oh, ow, interp).map_err(kernel_err)
                }
            }
            ImageSpec::DecodeResize { decode, resize, .. } => {
                let bytes = require_bytes(s, field, name)?;
                // The decode is the first op's part of the cost (`FirstPart`), as above.
                let part = FirstPart::start();
                super::decode_resize::run(bytes, decode, resize, |made| part.end(made))
            }
            ImageSpec::DecodeCenterCrop { decode, crop, .. } => {
                let bytes = require_bytes(s, field, name)?;
                let part = FirstPart::start();
                super::decode_center_crop::run(bytes, decode, crop, |made| part.end(made))
            }
            _ => Err(Error::Internal(format!("{name} is not a decoding op"))),
        }
    }

    /// An image → image op on `img`. Returns the input back when `keep` (the op writes
    /// another field), and the output.
    fn transform(
        &self,
        img: ip::Image,
        keep: bool,
        u: &mut dyn FnMut() -> f64,
    ) -> Result<(Option<ip::Image>, ip::Image)> {
        let keep_input = |img: ip::Image| keep.then_some(img);
        let out = match &self.spec {
            ImageSpec::Resize {
                size,
                interpolation,
                antialias,
                max_pixels,
                ..
            } => {
                let (h, w) = resize_target(size, img.height, img.width, *max_pixels)?;
                ip::resize(&img, h, w, filter(interpolation)?, *antialias).map_err(kernel_err)?
            }
            ImageSpec::CenterCrop { size, .. } => {
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
                let (top, left, h, w) =
                    ip::rrc_params(img.height, img.width, *scale, *ratio, u).map_err(kernel_err)?;
                let (oh, ow) = size.square();
                ip::resized_crop(&img, top, left, h, w, oh, ow, filter(interpolation)?)
                    .map_err(kernel_err)?
            }
            ImageSpec::HorizontalFlip { p, .. } => {
                let flip = u() < *p;
                return in_place(img, keep, |img| {
                    if flip {
                        ip::hflip(img).map_err(kernel_err)?;
                    }
                    Ok(())
                });
            }
            ImageSpec::ColorJitter {
                brightness,
                contrast,
                saturation,
                hue,
                p,
                ..
            } => {
                let params = if u() < *p {
                    Some(
                        ip::color_jitter_params(*brightness, *contrast, *saturation, *hue, u)
                            .map_err(kernel_err)?,
                    )
                } else {
                    None
                };
                return in_place(img, keep, |img| match params {
                    Some(params) => ip::apply_jitter(img, &params).map_err(kernel_err),
                    None => Ok(()),
                });
            }
            ImageSpec::Grayscale {
                p,
                num_output_channels,
                ..
            } => {
                if u() < *p {
                    ip::to_grayscale(&img, *num_output_channels).map_err(kernel_err)?
                } else {
                    return in_place(img, keep, |_| Ok(()));
                }
            }
            ImageSpec::GaussianBlur {
                kernel_size,
                sigma,
                p,
                ..
            } => {
                if u() < *p {
                    let sig = ip::blur_sigma(sigma.0, sigma.1, u).map_err(kernel_err)?;
                    // torchvision's kernel_size is (kx, ky); the kernel takes (rows, columns).
                    let (kx, ky) = kernel_size.square();
                    ip::gaussian_blur(&img, (ky, kx), (sig, sig)).map_err(kernel_err)?
                } else {
                    return in_place(img, keep, |_| Ok(()));
                }
            }
            _ => {
                return Err(Error::Internal(format!(
                    "{} is not image → image",
                    self.name()
                )))
            }
        };
        Ok((keep_input(img), out))
    }

    /// `normalize` / `to_tensor`: HWC uint8 → float32 CHW.
    fn to_chw(&self, img: &ip::Image) -> Result<Vec<f32>> {
        let (mean, std) = self.chw_constants(img.height, img.width, img.channels)?;
        ip::normalize(img, &mean, &std).map_err(kernel_err)
    }

    /// What `normalize` / `to_tensor` write an `h` x `w` image of `c` channels with, once
    /// it passed their checks: `(x/255 - mean) / std` per channel (`to_tensor`: mean 0, std
    /// 1). The one place both the per-sample path and the batch's slots take them from.
    fn chw_constants(&self, h: usize, w: usize, c: usize) -> Result<(MeanStd<'_>, MeanStd<'_>)> {
        let max_pixels = match &self.spec {
            ImageSpec::Normalize { max_pixels, .. } | ImageSpec::ToTensor { max_pixels, .. } => {
                *max_pixels
            }
            _ => {
                let name = self.name();
                return Err(Error::Internal(format!("{name} is not a tensor op")));
            }
        };
        // The float32 copy is within `max_pixels`.
        check(
            product(&[h as u64, w as u64]),
            max_pixels,
            "max_pixels",
            || format!("a float32 copy of a {h}x{w} image"),
        )?;
        match &self.spec {
            ImageSpec::Normalize { mean, .. } if mean.len() != c => {
                Err(Error::type_error(format!(
                    "mean and std have {} values but field '{}' has {c} channel(s) \
                     (shape [{h}, {w}, {c}])",
                    mean.len(),
                    self.spec.field(),
                )))
            }
            ImageSpec::Normalize { mean, std, .. } => Ok((Cow::Borrowed(mean), Cow::Borrowed(std))),
            _ => Ok((Cow::Owned(vec![0.0; c]), Cow::Owned(vec![1.0; c]))),
        }
    }

    fn run(&self, s: &mut Sample, rng: &mut SampleRng) -> Result<()> {
        let (name, field, out) = (self.name(), self.spec.field(), self.spec.out());
        let mut u = || rng.uniform();
        match &self.spec {
            ImageSpec::Decode { .. }
            | ImageSpec::DecodeRandomResizedCrop { .. }
            | ImageSpec::DecodeResize { .. }
            | ImageSpec::DecodeCenterCrop { .. } => {
                let img = self.decode(s, &mut u)?;
                s.set(out, image_value(img)?);
            }
            ImageSpec::Normalize { .. } | ImageSpec::ToTensor { .. } => {
                let img = take_image(s, field, name)?;
                let chw = self.to_chw(&img);
                let value = chw.and_then(|data| chw_value(&img, data));
                if out != field {
                    s.set(field, image_value(img)?);
                }
                s.set(out, value?);
            }
            _ => {
                let img = take_image(s, field, name)?;
                let (input, img) = self.transform(img, out != field, &mut u)?;
                if let Some(input) = input {
                    s.set(field, image_value(input)?);
                }
                s.set(out, image_value(img)?);
            }
        }
        Ok(())
    }
}

/// `normalize` and `to_tensor` in place write straight into a batch: the float32 output of
/// an HWC uint8 image that passes their checks ([`ImageOp::chw_constants`]), with the same
/// float ops as [`ImageOp::to_chw`]; anything else goes the per-sample way, to its error.
// SAFETY: `normalize_hwc_into` writes all of `out` when it returns Ok.
unsafe impl SlotWriter for ImageOp {
    fn field(&self) -> &str {
        self.spec.field()
    }
    fn slot_shape(&self, input: &Value) -> Option<Vec<usize>> {
        let Value::Tensor(t) = input else {
            return None;
        };
        let (true, &[h, w, c]) = (is_image(t), t.shape()) else {
            return None;
        };
        self.chw_constants(h, w, c).ok()?;
        Some(vec![c, h, w])
    }
    fn write_slot(
        &self,
        input: &Value,
        _cx: &OpContext,
        out: &mut [std::mem::MaybeUninit<f32>],
    ) -> Result<()> {
        let Value::Tensor(t) = input else {
            return Err(Error::Internal(format!("{}: not an image", self.name())));
        };
        let (TensorData::U8(data), &[h, w, c]) = (t.data(), t.shape()) else {
            return Err(Error::Internal(format!(
                "{}: not an HWC uint8 image",
                self.name()
            )));
        };
        let (mean, std) = self.chw_constants(h, w, c)?;
        ip::normalize_hwc_into(data, c, &mean, &std, out).map_err(kernel_err)
    }
}

impl Op for ImageOp {
    fn slot_writer(&self) -> Option<&dyn SlotWriter> {
        let in_place = self.spec.out() == self.spec.field();
        let tensor = matches!(
            self.spec,
            ImageSpec::Normalize { .. } | ImageSpec::ToTensor { .. }
        );
        (in_place && tensor).then_some(self as &dyn SlotWriter)
    }
    fn name(&self) -> &str {
        self.spec.name()
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
    fn meta(&self) -> OpMeta {
        let (kind, random) = match self.spec {
            ImageSpec::Decode { .. }
            | ImageSpec::DecodeResize { .. }
            | ImageSpec::DecodeCenterCrop { .. } => (OpKind::Decode, false),
            ImageSpec::DecodeRandomResizedCrop { .. } => (OpKind::Decode, true),
            // It adds a field: the sample grows.
            ImageSpec::DeviceDraws { .. } => (OpKind::Opaque, true),
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
        // Writing another field keeps the input: the sample grows, whatever the op.
        let kind = if kind == OpKind::SizeReducing && self.spec.out() != self.spec.field() {
            OpKind::Opaque
        } else {
            kind
        };
        OpMeta {
            reads: vec![self.spec.field().to_string()],
            writes: vec![self.spec.out().to_string()],
            kind,
            random,
            python: false,
        }
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        if let ImageSpec::DeviceDraws { .. } = self.spec {
            return super::device::draws(&self.spec, s, cx);
        }
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
    fn fused_second(&self) -> Option<u64> {
        match self.spec {
            ImageSpec::DecodeRandomResizedCrop { crop_op_id, .. } => Some(crop_op_id),
            ImageSpec::DecodeResize { resize_op_id, .. } => Some(resize_op_id),
            ImageSpec::DecodeCenterCrop { crop_op_id, .. } => Some(crop_op_id),
            _ => None,
        }
    }
    fn device_draws(&self, next: Option<(&dyn Op, u64)>) -> Option<(OpRef, bool)> {
        super::device::device_form(&self.spec, next)
    }
    /// `decode` + the in-place `random_resized_crop` of its output field (bilinear or
    /// bicubic) become `decode_random_resized_crop`, + an in-place antialiased `resize`,
    /// `decode_resize`, and + an in-place `center_crop`, `decode_center_crop`. An op writing
    /// another field keeps the decoded image too, so it is not fused.
    fn fuse_next(&self, next: &dyn Op, next_op_id: u64) -> Option<OpRef> {
        let ImageSpec::Decode { out, .. } = &self.spec else {
            return None;
        };
        let next_spec: ImageSpec = serde_json::from_value(next.spec()).ok()?;
        if super::decode_resize::fusable(&self.spec, &next_spec) {
            return build(&ImageSpec::DecodeResize {
                decode: Box::new(self.spec.clone()),
                resize: Box::new(next_spec),
                resize_op_id: next_op_id,
            })
            .ok();
        }
        if super::decode_center_crop::fusable(&self.spec, &next_spec) {
            return build(&ImageSpec::DecodeCenterCrop {
                decode: Box::new(self.spec.clone()),
                crop: Box::new(next_spec),
                crop_op_id: next_op_id,
            })
            .ok();
        }
        let crop = next_spec;
        match &crop {
            ImageSpec::RandomResizedCrop {
                field,
                interpolation,
                ..
            } if field == out && crop.out() == field && interpolation != "nearest" => {}
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
