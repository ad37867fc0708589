//! Colour ops with torchvision v2 semantics on uint8 tensors
//! (`torchvision/transforms/v2/functional/_color.py`): every op computes in
//! float32 exactly as the tensor kernel does and converts back with
//! truncation (`.to(uint8)`), so results match torchvision bit for bit up to
//! float rounding at exact integer boundaries.

use crate::error::{invalid, Result};
use crate::image::Image;

/// torchvision's luma weights for tensors (`_rgb_to_grayscale_image`).
const WR: f32 = 0.2989;
const WG: f32 = 0.587;
const WB: f32 = 0.114;

/// `r*0.2989 + g*0.587 + b*0.114` in float32, evaluated in torch's order.
#[inline(always)]
fn gray_f32(r: u8, g: u8, b: u8) -> f32 {
    (f32::from(r) * WR + f32::from(g) * WG) + f32::from(b) * WB
}

/// torchvision `_blend` for one uint8 sample: `clamp(a*ratio + b*(1-ratio), 0, 255)`
/// in float32, truncated.
#[inline(always)]
fn blend(a: f32, ratio: f32, b_times_one_minus: f32) -> u8 {
    (a * ratio + b_times_one_minus).clamp(0.0, 255.0) as u8
}

fn check_factor(name: &str, f: f64) -> Result<()> {
    if !(f.is_finite() && f >= 0.0) {
        return invalid(format!("{name} factor must be finite and >= 0, got {f}"));
    }
    Ok(())
}

fn apply_lut(img: &mut Image, lut: &[u8; 256]) {
    for v in img.data.iter_mut() {
        *v = lut[usize::from(*v)];
    }
}

/// Multiplies every sample by `factor` (torchvision `adjust_brightness`:
/// `clamp(x * f, 0, 255)`, truncated). Works on 1 or 3 channels; a 256-entry
/// lookup table makes it one load per byte.
///
/// ```
/// use sluice_imgproc::{adjust_brightness, Image};
/// let mut img = Image::new(1, 1, 3, vec![10, 100, 200]).unwrap();
/// adjust_brightness(&mut img, 1.5).unwrap();
/// assert_eq!(img.data, vec![15, 150, 255]);
/// ```
pub fn adjust_brightness(img: &mut Image, factor: f64) -> Result<()> {
    check_factor("brightness", factor)?;
    img.validate()?;
    let f = factor as f32;
    let mut lut = [0u8; 256];
    for (v, o) in lut.iter_mut().enumerate() {
        *o = (v as f32 * f).clamp(0.0, 255.0) as u8;
    }
    apply_lut(img, &lut);
    Ok(())
}

/// Blends with the mean of the grayscale image (torchvision
/// `adjust_contrast`: the mean of `floor(gray)` over all pixels, then
/// `_blend(img, mean, factor)`). One pass for the mean, one LUT pass.
///
/// ```
/// use sluice_imgproc::{adjust_contrast, Image};
/// let mut img = Image::new(1, 2, 1, vec![0, 200]).unwrap();
/// adjust_contrast(&mut img, 0.5).unwrap();
/// assert_eq!(img.data, vec![50, 150]);
/// ```
pub fn adjust_contrast(img: &mut Image, factor: f64) -> Result<()> {
    check_factor("contrast", factor)?;
    img.validate()?;
    if img.data.is_empty() {
        return Ok(());
    }
    // The grayscale values are integers (floored), so an integer sum is
    // exact; torch's float32 mean agrees to the last bit or so.
    let sum: u64 = if img.channels == 3 {
        img.data
            .chunks_exact(3)
            .map(|p| gray_f32(p[0], p[1], p[2]).floor() as u64)
            .sum()
    } else {
        img.data.iter().map(|&v| u64::from(v)).sum()
    };
    let mean = (sum as f64 / img.pixels() as f64) as f32;
    let ratio = factor as f32;
    let other = mean * (1.0 - factor) as f32;
    let mut lut = [0u8; 256];
    for (v, o) in lut.iter_mut().enumerate() {
        *o = blend(v as f32, ratio, other);
    }
    apply_lut(img, &lut);
    Ok(())
}

/// Blends each pixel with its own gray value (torchvision
/// `adjust_saturation`: `_blend(img, floor(gray), factor)`). 1-channel
/// images are left unchanged, as in torchvision.
///
/// ```
/// use sluice_imgproc::{adjust_saturation, Image};
/// let mut img = Image::new(1, 1, 3, vec![200, 100, 0]).unwrap();
/// adjust_saturation(&mut img, 0.0).unwrap();
/// assert_eq!(img.data, vec![118, 118, 118]);
/// ```
pub fn adjust_saturation(img: &mut Image, factor: f64) -> Result<()> {
    check_factor("saturation", factor)?;
    img.validate()?;
    if img.channels == 1 {
        return Ok(());
    }
    let ratio = factor as f32;
    let one_minus = (1.0 - factor) as f32;
    // Per-value tables: x*ratio and gray*(1-ratio) (gray is an integer after
    // the floor), plus the three weighted channels of the gray value.
    let mut scaled = [0f32; 256];
    let mut gterm = [0f32; 256];
    let (mut lr, mut lg, mut lb) = ([0f32; 256], [0f32; 256], [0f32; 256]);
    for v in 0..256 {
        let x = v as f32;
        scaled[v] = x * ratio;
        gterm[v] = x * one_minus;
        lr[v] = x * WR;
        lg[v] = x * WG;
        lb[v] = x * WB;
    }
    for p in img.data.chunks_exact_mut(3) {
        let (r, g, b) = (usize::from(p[0]), usize::from(p[1]), usize::from(p[2]));
        let gray = ((lr[r] + lg[g]) + lb[b]).floor();
        // gray is in [0, 255] (weights sum to 1.0 in float32 within ulps).
        let t = gterm[(gray as usize).min(255)];
        p[0] = (scaled[r] + t).clamp(0.0, 255.0) as u8;
        p[1] = (scaled[g] + t).clamp(0.0, 255.0) as u8;
        p[2] = (scaled[b] + t).clamp(0.0, 255.0) as u8;
    }
    Ok(())
}

/// Rotates hue by `hue_factor` turns, `hue_factor` in `[-0.5, 0.5]`
/// (torchvision `adjust_hue`: uint8 -> float32 /255 -> HSV -> shift ->
/// RGB -> `x * 255.999` truncated). 1-channel images are left unchanged.
///
/// ```
/// use sluice_imgproc::{adjust_hue, Image};
/// let mut img = Image::new(1, 1, 3, vec![255, 0, 0]).unwrap();
/// adjust_hue(&mut img, 1.0 / 3.0).unwrap(); // red -> green
/// assert_eq!(img.data, vec![0, 255, 0]);
/// ```
pub fn adjust_hue(img: &mut Image, hue_factor: f64) -> Result<()> {
    if !(-0.5..=0.5).contains(&hue_factor) {
        return invalid(format!(
            "hue_factor must be in [-0.5, 0.5], got {hue_factor}"
        ));
    }
    img.validate()?;
    if img.channels == 1 {
        return Ok(());
    }
    let hf = hue_factor as f32;
    let inv255 = (1.0f64 / 255.0) as f32;
    let mut lut = [0f32; 256];
    for (v, o) in lut.iter_mut().enumerate() {
        *o = v as f32 * inv255;
    }
    for p in img.data.chunks_exact_mut(3) {
        let rgb = hue_pixel(
            lut[usize::from(p[0])],
            lut[usize::from(p[1])],
            lut[usize::from(p[2])],
            hf,
        );
        p.copy_from_slice(&rgb);
    }
    Ok(())
}

/// One pixel of torchvision's `_rgb_to_hsv` / hue shift / `_hsv_to_rgb`,
/// written with the same float32 operations in the same order.
#[inline(always)]
fn hue_pixel(r: f32, g: f32, b: f32, hf: f32) -> [u8; 3] {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    let eqc = maxc == minc;
    let cr = maxc - minc;
    let s = cr / if eqc { 1.0 } else { maxc };
    let crd = if eqc { 1.0 } else { cr };
    let rc = (maxc - r) / crd;
    let gc = (maxc - g) / crd;
    let bc = (maxc - b) / crd;
    let h = if maxc == r {
        bc - gc
    } else if maxc == g {
        (rc + 2.0) - bc
    } else {
        (gc + 4.0) - rc
    };
    let h = fmod1(h * (1.0f64 / 6.0) as f32 + 1.0);
    // h.add_(hue_factor).remainder_(1.0): torch's remainder takes the sign
    // of the divisor.
    let h = remainder1(h + hf);
    let v = maxc;
    let h6 = h * 6.0;
    let i = h6.floor();
    let f = h6 - i;
    let sxf = s * f;
    let one_minus_s = 1.0 - s;
    let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
    let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
    let p = (one_minus_s * v).clamp(0.0, 1.0);
    let (ro, go, bo) = match (i as i32).rem_euclid(6) {
        0 => (v, t, p),
        1 => (q, v, p),
        2 => (p, v, t),
        3 => (p, q, v),
        4 => (t, p, v),
        _ => (v, p, q),
    };
    // to_dtype(float -> uint8, scale=True): x * (255 + 1 - 1e-3), truncated.
    const SCALE: f32 = (255.0f64 + 1.0 - 1e-3) as f32;
    [(ro * SCALE) as u8, (go * SCALE) as u8, (bo * SCALE) as u8]
}

/// C `fmodf(x, 1.0)`.
#[inline(always)]
fn fmod1(x: f32) -> f32 {
    x % 1.0
}

/// torch `remainder(x, 1.0)` for float: fmod, then shift negatives up.
#[inline(always)]
fn remainder1(x: f32) -> f32 {
    let m = x % 1.0;
    if m != 0.0 && m < 0.0 {
        m + 1.0
    } else {
        m
    }
}

/// torchvision `rgb_to_grayscale` on a uint8 tensor:
/// `trunc(0.2989 R + 0.587 G + 0.114 B)` in float32, with 1 or 3 output
/// channels (3 = the gray value repeated). A 1-channel input is copied or
/// repeated. For Pillow's rounding `convert("L")` use [`crate::rgb_to_l`].
///
/// ```
/// use sluice_imgproc::{to_grayscale, Image};
/// let img = Image::new(1, 1, 3, vec![255, 128, 0]).unwrap();
/// assert_eq!(to_grayscale(&img, 1).unwrap().data, vec![151]);
/// assert_eq!(to_grayscale(&img, 3).unwrap().data, vec![151, 151, 151]);
/// ```
pub fn to_grayscale(img: &Image, num_output_channels: usize) -> Result<Image> {
    img.validate()?;
    if num_output_channels != 1 && num_output_channels != 3 {
        return invalid(format!(
            "num_output_channels must be 1 or 3, got {num_output_channels}"
        ));
    }
    let gray: Vec<u8> = if img.channels == 1 {
        img.data.clone()
    } else {
        img.data
            .chunks_exact(3)
            .map(|p| gray_f32(p[0], p[1], p[2]) as u8)
            .collect()
    };
    let data = if num_output_channels == 1 {
        gray
    } else {
        crate::convert::gray_to_rgb_buf(&gray)
    };
    Image::new(img.height, img.width, num_output_channels, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_are_validated() {
        let mut img = Image::zeros(2, 2, 3).unwrap();
        assert!(adjust_brightness(&mut img, -0.1).is_err());
        assert!(adjust_contrast(&mut img, f64::NAN).is_err());
        assert!(adjust_saturation(&mut img, f64::INFINITY).is_err());
        assert!(adjust_hue(&mut img, 0.51).is_err());
        assert!(adjust_hue(&mut img, -0.5).is_ok());
        assert!(to_grayscale(&img, 2).is_err());
    }

    #[test]
    fn identity_factors_keep_pixels() {
        let data: Vec<u8> = (0..=255u8).chain(0..=255).chain(0..=255).collect();
        let img = Image::new(16, 16, 3, data).unwrap();
        for op in [adjust_brightness, adjust_contrast, adjust_saturation] {
            let mut x = img.clone();
            op(&mut x, 1.0).unwrap();
            assert_eq!(x, img);
        }
        let mut x = img.clone();
        adjust_hue(&mut x, 0.0).unwrap();
        // hue 0 round-trips through HSV; torchvision's x*255.999 truncation
        // makes it exact for uint8.
        assert_eq!(x, img);
    }

    #[test]
    fn gray_inputs_pass_through_colour_ops() {
        let img = Image::new(1, 3, 1, vec![0, 100, 255]).unwrap();
        let mut x = img.clone();
        adjust_saturation(&mut x, 0.2).unwrap();
        adjust_hue(&mut x, 0.3).unwrap();
        assert_eq!(x, img);
    }
}
