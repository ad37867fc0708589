//! Checking an `image.*` spec's arguments before it runs: sizes, probabilities, fields and
//! the pairs a fused op is made of.

use sluice_core::{Error, Result};

use super::{decode_center_crop, decode_resize, filter, ImageSpec, Size};
use crate::limits::{product, refuse, MAX_KERNEL_SIZE};

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
        return Err(Error::invalid(format!(
            "size must be positive, got {}",
            s.shown()
        )));
    }
    Ok(())
}

/// Refuses a fixed output size (a crop) above `max_pixels`.
fn check_output_size(op: &str, s: Size, max_pixels: u64) -> Result<()> {
    let (h, w) = s.square();
    let n = product(&[h as u64, w as u64]);
    if n > max_pixels {
        return Err(refuse(
            op,
            &format!("size={} makes {h}x{w} = {n} pixels", s.shown()),
            "max_pixels",
            max_pixels,
        ));
    }
    Ok(())
}

fn check_field(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!(
            "{what} must be a non-empty field name"
        )));
    }
    Ok(())
}

pub(super) fn validate(spec: &ImageSpec) -> Result<()> {
    let op = format!("image.{}", spec.name());
    check_field("field", spec.field())?;
    check_field("out", spec.out())?;
    match spec {
        ImageSpec::Decode { mode, .. } if mode != "RGB" && mode != "L" => {
            return Err(Error::invalid(format!(
                "mode must be 'RGB' or 'L', got '{mode}'"
            )))
        }
        ImageSpec::Resize {
            size,
            interpolation,
            max_pixels,
            ..
        } => {
            check_size(*size)?;
            filter(interpolation)?;
            if let Size::Int(s) = size {
                // The shorter side is `s`, so the output has at least s x s pixels.
                let n = product(&[*s as u64, *s as u64]);
                if n > *max_pixels {
                    return Err(refuse(
                        &op,
                        &format!(
                            "size={s} sets the shorter side, so the output has at least \
                             {s}x{s} = {n} pixels"
                        ),
                        "max_pixels",
                        *max_pixels,
                    ));
                }
            } else {
                check_output_size(&op, *size, *max_pixels)?;
            }
        }
        ImageSpec::CenterCrop {
            size, max_pixels, ..
        } => {
            check_size(*size)?;
            check_output_size(&op, *size, *max_pixels)?;
        }
        ImageSpec::RandomResizedCrop {
            size,
            scale,
            ratio,
            interpolation,
            max_pixels,
            ..
        } => {
            check_size(*size)?;
            check_output_size(&op, *size, *max_pixels)?;
            filter(interpolation)?;
            if !(0.0 <= scale.0 && scale.0 <= scale.1 && scale.1 <= 1.0) {
                return Err(Error::invalid(format!(
                    "scale must satisfy 0 <= min <= max <= 1, got {scale:?}"
                )));
            }
            if !(0.0 < ratio.0 && ratio.0 <= ratio.1 && ratio.1.is_finite()) {
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
            for (name, v) in [
                ("brightness", brightness),
                ("contrast", contrast),
                ("saturation", saturation),
            ] {
                if !(v.is_finite() && *v >= 0.0) {
                    return Err(Error::invalid(format!(
                        "{name} must be finite and >= 0, got {v}"
                    )));
                }
            }
            if !(0.0..=0.5).contains(hue) {
                return Err(Error::invalid(format!(
                    "hue must be in [0, 0.5], got {hue}"
                )));
            }
        }
        ImageSpec::Grayscale {
            p,
            num_output_channels,
            ..
        } => {
            check_p(*p)?;
            if *num_output_channels != 1 && *num_output_channels != 3 {
                return Err(Error::invalid(format!(
                    "num_output_channels must be 1 or 3, got {num_output_channels}"
                )));
            }
        }
        ImageSpec::GaussianBlur {
            kernel_size,
            sigma,
            p,
            ..
        } => {
            check_p(*p)?;
            let (kx, ky) = kernel_size.square();
            if kx % 2 == 0 || ky % 2 == 0 || kx > MAX_KERNEL_SIZE || ky > MAX_KERNEL_SIZE {
                return Err(Error::invalid(format!(
                    "kernel_size must be odd, positive and at most {MAX_KERNEL_SIZE}, got {}",
                    kernel_size.shown()
                )));
            }
            if !(0.0 < sigma.0 && sigma.0 <= sigma.1 && sigma.1.is_finite()) {
                return Err(Error::invalid(format!(
                    "sigma must satisfy 0 < min <= max, got {sigma:?}"
                )));
            }
        }
        ImageSpec::Normalize { mean, std, .. } => {
            if mean.is_empty() || mean.len() != std.len() {
                return Err(Error::invalid(format!(
                    "mean and std need the same non-zero length, got {} and {}",
                    mean.len(),
                    std.len()
                )));
            }
            if std.iter().any(|&s| s == 0.0 || !s.is_finite())
                || mean.iter().any(|m| !m.is_finite())
            {
                return Err(Error::invalid(format!(
                    "std must be non-zero and mean/std finite, got mean={mean:?}, std={std:?}"
                )));
            }
        }
        ImageSpec::DecodeRandomResizedCrop { decode, crop, .. } => {
            match (&**decode, &**crop) {
                (ImageSpec::Decode { out, .. }, ImageSpec::RandomResizedCrop { field, .. })
                    if out == field && crop.out() == field => {}
                _ => {
                    return Err(Error::invalid(
                        "decode_random_resized_crop needs an image.decode and an \
                         image.random_resized_crop of the decoded field, in place",
                    ))
                }
            }
            validate(decode)?;
            validate(crop)?;
        }
        ImageSpec::DecodeResize { decode, resize, .. } => {
            if !decode_resize::fusable(decode, resize) {
                return Err(Error::invalid(
                    "decode_resize needs an image.decode and an antialiased image.resize \
                     (bilinear or bicubic) of the decoded field, in place",
                ));
            }
            validate(decode)?;
            validate(resize)?;
        }
        ImageSpec::DecodeCenterCrop { decode, crop, .. } => {
            if !decode_center_crop::fusable(decode, crop) {
                return Err(Error::invalid(
                    "decode_center_crop needs an image.decode and an image.center_crop of the \
                     decoded field, in place",
                ));
            }
            validate(decode)?;
            validate(crop)?;
        }
        ImageSpec::DeviceDraws { fused, flip } => {
            if !matches!(**fused, ImageSpec::DecodeRandomResizedCrop { .. }) {
                return Err(Error::invalid(
                    "device_draws needs an image.decode_random_resized_crop",
                ));
            }
            if flip.is_some_and(|(p, _)| !(0.0..=1.0).contains(&p)) {
                return Err(Error::invalid(format!(
                    "device_draws: the flip's p must be in [0, 1], got {flip:?}"
                )));
            }
            validate(fused)?;
        }
        _ => {}
    }
    Ok(())
}
