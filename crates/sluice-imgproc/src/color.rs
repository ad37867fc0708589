//! Colour ops with torchvision v2 semantics on uint8 tensors
//! (`torchvision/transforms/v2/functional/_color.py`): every op computes in
//! float32 exactly as the tensor kernel does and converts back with
//! truncation (`.to(uint8)`), so results match torchvision bit for bit up to
//! float rounding at exact integer boundaries.

use crate::error::{invalid, Result};
use crate::image::Image;
use crate::simd::{load_rgb, multiversion, sat_u8, BLOCK};

/// torchvision's luma weights for tensors (`_rgb_to_grayscale_image`).
const WR: f32 = 0.2989;
const WG: f32 = 0.587;
const WB: f32 = 0.114;

/// `r*0.2989 + g*0.587 + b*0.114` in float32, evaluated in torch's order.
#[inline(always)]
pub(crate) fn gray_lane(r: f32, g: f32, b: f32) -> f32 {
    (r * WR + g * WG) + b * WB
}

/// `floor(gray)` of samples in `[0, 255]`, as an integer: a truncating conversion (equal
/// to floor for values >= 0) that vectorises on every x86-64 CPU.
#[inline(always)]
pub(crate) fn gray_floor(r: f32, g: f32, b: f32) -> u32 {
    // SAFETY: for samples in [0, 255] the gray value is in [0, 255].
    (unsafe { gray_lane(r, g, b).to_int_unchecked::<i32>() }) as u32
}

/// torchvision `_blend` for one uint8 sample: `clamp(a*ratio + b*(1-ratio), 0, 255)`
/// in float32, truncated.
#[inline(always)]
fn blend(a: f32, ratio: f32, b_times_one_minus: f32) -> u8 {
    (a * ratio + b_times_one_minus).clamp(0.0, 255.0) as u8
}

pub(crate) fn check_hue(hue_factor: f64) -> Result<()> {
    if !(-0.5..=0.5).contains(&hue_factor) {
        return invalid(format!(
            "hue_factor must be in [-0.5, 0.5], got {hue_factor}"
        ));
    }
    Ok(())
}

/// Contrast's blend `x * ratio + other` for an image whose floored gray values sum to `sum`
/// over `pixels` pixels: `other` is their mean times `1 - factor`, in float32 as torch has it.
pub(crate) fn contrast_blend(sum: u64, pixels: usize, factor: f64) -> (f32, f32) {
    let mean = (sum as f64 / pixels as f64) as f32;
    (factor as f32, mean * (1.0 - factor) as f32)
}

pub(crate) fn check_factor(name: &str, f: f64) -> Result<()> {
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
        floored_gray_sum(&img.data)
    } else {
        img.data.iter().map(|&v| u64::from(v)).sum()
    };
    let (ratio, other) = contrast_blend(sum, img.pixels(), factor);
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
    saturation_kernel(&mut img.data, factor as f32, (1.0 - factor) as f32);
    Ok(())
}

multiversion! {
    /// Sum of `floor(gray)` over interleaved RGB.
    fn floored_gray_sum(data: &[u8]) -> u64 {
        let mut total = 0u64;
        for chunk in data.chunks(3 * BLOCK) {
            let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
            let n = load_rgb(chunk, &mut r, &mut g, &mut b);
            let mut acc = [0u32; BLOCK];
            for i in 0..BLOCK {
                acc[i] = gray_floor(r[i], g[i], b[i]);
            }
            // Integer adds, exact in any order, so the sum vectorises (a float sum is
            // evaluated one dependent add after another).
            total += u64::from(acc[..n].iter().sum::<u32>());
        }
        total
    }
}

multiversion! {
    /// `_blend(img, floor(gray), ratio)` per pixel, in place.
    fn saturation_kernel(data: &mut [u8], ratio: f32, one_minus: f32) {
        for chunk in data.chunks_mut(3 * BLOCK) {
            let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
            load_rgb(chunk, &mut r, &mut g, &mut b);
            for i in 0..BLOCK {
                let t = gray_lane(r[i], g[i], b[i]).floor() * one_minus;
                r[i] = r[i] * ratio + t;
                g[i] = g[i] * ratio + t;
                b[i] = b[i] * ratio + t;
            }
            // Saturating truncation: the clamp(0, 255) of _blend, then `.to(uint8)`.
            store_rgb(chunk, &r, &g, &b);
        }
    }
}

/// Interleaves float arrays back into bytes with saturating truncation.
#[inline(always)]
pub(crate) fn store_rgb(chunk: &mut [u8], r: &[f32; BLOCK], g: &[f32; BLOCK], b: &[f32; BLOCK]) {
    for (p, ((r, g), b)) in chunk
        .chunks_exact_mut(3)
        .zip(r.iter().zip(g.iter()).zip(b.iter()))
    {
        p[0] = sat_u8(*r);
        p[1] = sat_u8(*g);
        p[2] = sat_u8(*b);
    }
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
    check_hue(hue_factor)?;
    img.validate()?;
    if img.channels == 1 {
        return Ok(());
    }
    hue_kernel(&mut img.data, hue_factor as f32);
    Ok(())
}

multiversion! {
    fn hue_kernel(data: &mut [u8], hf: f32) {
        let inv255 = (1.0f64 / 255.0) as f32;
        for chunk in data.chunks_mut(3 * BLOCK) {
            let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
            load_rgb(chunk, &mut r, &mut g, &mut b);
            for i in 0..BLOCK {
                let (ro, go, bo) = hue_lane(r[i] * inv255, g[i] * inv255, b[i] * inv255, hf);
                r[i] = ro;
                g[i] = go;
                b[i] = bo;
            }
            store_rgb(chunk, &r, &g, &b);
        }
    }
}

/// One pixel of torchvision's `_rgb_to_hsv` / hue shift / `_hsv_to_rgb`,
/// with the same float32 operations in the same order, written branch-free
/// (every candidate computed, then selected) so blocks vectorise. Returns
/// the output scaled by 255.999, ready for the truncating cast.
#[inline(always)]
pub(crate) fn hue_lane(r: f32, g: f32, b: f32, hf: f32) -> (f32, f32, f32) {
    // Compare-and-select instead of `f32::max`/`min`, whose NaN rule costs a compare and a
    // blend per call; the inputs are never NaN (nor -0), so the values are the same.
    let max = |a: f32, b: f32| if a > b { a } else { b };
    let min = |a: f32, b: f32| if a < b { a } else { b };
    let maxc = max(max(r, g), b);
    let minc = min(min(r, g), b);
    let eqc = maxc == minc;
    let cr = maxc - minc;
    let s = cr / if eqc { 1.0 } else { maxc };
    let crd = if eqc { 1.0 } else { cr };
    // torch computes rc, gc, bc = (maxc - r|g|b) / crd and keeps one of bc - gc,
    // (rc + 2) - bc, (gc + 4) - rc. Selecting the two numerators first gives the same
    // quotients with two divisions instead of three (adding 0.0 to a quotient >= 0 is exact).
    let (x1, x2, off) = if maxc == r {
        (b, g, 0.0)
    } else if maxc == g {
        (r, b, 2.0)
    } else {
        (g, r, 4.0)
    };
    let h = ((maxc - x1) / crd + off) - (maxc - x2) / crd;
    let h = fmod1(h * (1.0f64 / 6.0) as f32 + 1.0);
    // h.add_(hue_factor).remainder_(1.0): torch's remainder takes the sign
    // of the divisor.
    let h = remainder1(h + hf);
    let v = maxc;
    let h6 = h * 6.0;
    let fi = h6.floor();
    let f = h6 - fi;
    let sxf = s * f;
    let one_minus_s = 1.0 - s;
    let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
    let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
    let p = (one_minus_s * v).clamp(0.0, 1.0);
    // i = floor(h6) mod 6 with h in [0, 1]: 6 wraps to 0.
    let i = if fi >= 6.0 { 0.0 } else { fi };
    // r: [v,q,p,p,t,v]  g: [t,v,v,q,p,p]  b: [p,p,t,v,v,q]
    let ro = if i == 1.0 {
        q
    } else if i == 2.0 || i == 3.0 {
        p
    } else if i == 4.0 {
        t
    } else {
        v
    };
    let go = if i == 0.0 {
        t
    } else if i == 3.0 {
        q
    } else if i >= 4.0 {
        p
    } else {
        v
    };
    let bo = if i <= 1.0 {
        p
    } else if i == 2.0 {
        t
    } else if i == 5.0 {
        q
    } else {
        v
    };
    // to_dtype(float -> uint8, scale=True): x * (255 + 1 - 1e-3), truncated.
    const SCALE: f32 = (255.0f64 + 1.0 - 1e-3) as f32;
    (ro * SCALE, go * SCALE, bo * SCALE)
}

/// C `fmodf(x, 1.0)`: the fractional part keeps the sign of `x` and is
/// exactly representable, so `x - trunc(x)` is exact (and vectorises,
/// unlike the libm call `%` compiles to).
#[inline(always)]
fn fmod1(x: f32) -> f32 {
    x - x.trunc()
}

/// torch `remainder(x, 1.0)` for float: fmod, then shift negatives up.
#[inline(always)]
fn remainder1(x: f32) -> f32 {
    let m = fmod1(x);
    if m < 0.0 {
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
    let px = img.pixels();
    if img.channels == 1 {
        let data = if num_output_channels == 1 {
            img.data.clone()
        } else {
            crate::convert::gray_to_rgb_buf(&img.data)
        };
        return Image::new(img.height, img.width, num_output_channels, data);
    }
    let mut out = vec![0u8; px * num_output_channels];
    grayscale_kernel(&img.data, &mut out, num_output_channels);
    Image::new(img.height, img.width, num_output_channels, out)
}

multiversion! {
    /// trunc(gray) of interleaved RGB into 1 or 3 output channels.
    fn grayscale_kernel(data: &[u8], out: &mut [u8], nout: usize) {
        for (chunk, o) in data.chunks(3 * BLOCK).zip(out.chunks_mut(nout * BLOCK)) {
            let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
            load_rgb(chunk, &mut r, &mut g, &mut b);
            let mut y = [0u8; BLOCK];
            for i in 0..BLOCK {
                y[i] = sat_u8(gray_lane(r[i], g[i], b[i]));
            }
            if nout == 1 {
                let n = o.len();
                o.copy_from_slice(&y[..n]);
            } else {
                for (p, &v) in o.chunks_exact_mut(3).zip(y.iter()) {
                    p[0] = v;
                    p[1] = v;
                    p[2] = v;
                }
            }
        }
    }
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

    /// Straightforward per-pixel transcription of torchvision's formulas.
    fn reference(img: &Image, op: &str, f: f64) -> Vec<u8> {
        let g = |p: &[u8]| (f32::from(p[0]) * WR + f32::from(p[1]) * WG) + f32::from(p[2]) * WB;
        let mut out = img.data.clone();
        match op {
            "saturation" => {
                for p in out.chunks_exact_mut(3) {
                    let t = g(p).floor() * (1.0 - f) as f32;
                    for v in p.iter_mut() {
                        *v = (f32::from(*v) * f as f32 + t).clamp(0.0, 255.0) as u8;
                    }
                }
            }
            "gray" => return img.data.chunks_exact(3).map(|p| g(p) as u8).collect(),
            _ => {
                // hue, with branches and libm fmod as written in torch
                for p in out.chunks_exact_mut(3) {
                    let inv = (1.0f64 / 255.0) as f32;
                    let (r, gg, b) = (
                        f32::from(p[0]) * inv,
                        f32::from(p[1]) * inv,
                        f32::from(p[2]) * inv,
                    );
                    let maxc = r.max(gg).max(b);
                    let minc = r.min(gg).min(b);
                    let eqc = maxc == minc;
                    let cr = maxc - minc;
                    let s = cr / if eqc { 1.0 } else { maxc };
                    let crd = if eqc { 1.0 } else { cr };
                    let (rc, gc, bc) = ((maxc - r) / crd, (maxc - gg) / crd, (maxc - b) / crd);
                    let h = if maxc == r {
                        bc - gc
                    } else if maxc == gg {
                        (rc + 2.0) - bc
                    } else {
                        (gc + 4.0) - rc
                    };
                    let h = (h * (1.0f64 / 6.0) as f32 + 1.0) % 1.0;
                    let mut h = (h + f as f32) % 1.0;
                    if h < 0.0 {
                        h += 1.0;
                    }
                    let h6 = h * 6.0;
                    let i = h6.floor();
                    let fr = h6 - i;
                    let (sxf, oms) = (s * fr, 1.0 - s);
                    let q = ((1.0 - sxf) * maxc).clamp(0.0, 1.0);
                    let t = ((sxf + oms) * maxc).clamp(0.0, 1.0);
                    let pp = (oms * maxc).clamp(0.0, 1.0);
                    let v = maxc;
                    let (ro, go, bo) = match (i as i32).rem_euclid(6) {
                        0 => (v, t, pp),
                        1 => (q, v, pp),
                        2 => (pp, v, t),
                        3 => (pp, q, v),
                        4 => (t, pp, v),
                        _ => (v, pp, q),
                    };
                    let sc = (255.0f64 + 1.0 - 1e-3) as f32;
                    p.copy_from_slice(&[(ro * sc) as u8, (go * sc) as u8, (bo * sc) as u8]);
                }
            }
        }
        out
    }

    #[test]
    fn blocked_kernels_match_scalar_reference_on_both_paths() {
        // 7x11 = 77 pixels: one full 64-pixel block plus a tail.
        let mut s = 12345u32;
        let data: Vec<u8> = (0..7 * 11 * 3)
            .map(|_| {
                s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (s >> 16) as u8
            })
            .collect();
        let img = Image::new(7, 11, 3, data).unwrap();
        crate::simd::for_each_path(|path| {
            for f in [0.0, 0.35, 1.7] {
                let mut x = img.clone();
                adjust_saturation(&mut x, f).unwrap();
                assert_eq!(
                    x.data,
                    reference(&img, "saturation", f),
                    "saturation {f} {path}"
                );
            }
            for hf in [-0.5, -0.13, 0.0, 0.26, 0.5] {
                let mut x = img.clone();
                adjust_hue(&mut x, hf).unwrap();
                assert_eq!(x.data, reference(&img, "hue", hf), "hue {hf} {path}");
            }
            assert_eq!(
                to_grayscale(&img, 1).unwrap().data,
                reference(&img, "gray", 0.0)
            );
            let mut x = img.clone();
            adjust_contrast(&mut x, 0.5).unwrap();
            let sum: u64 = img
                .data
                .chunks_exact(3)
                .map(|p| {
                    ((f32::from(p[0]) * WR + f32::from(p[1]) * WG) + f32::from(p[2]) * WB).floor()
                        as u64
                })
                .sum();
            assert_eq!(floored_gray_sum(&img.data), sum);
        });
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
