//! ColorJitter's adjustments fused into one or two passes over an RGB image.
//!
//! Run one after another, the four adjustments cost four de-interleaves, four
//! re-interleaves and, for contrast, a fifth pass for the mean. Here each 64-pixel block is
//! loaded once and goes through the adjustments in the sampled order, with the uint8
//! truncation between them kept (clamp, then truncate, as a value in f32), so the bytes are
//! those of the separate ops. Contrast needs the mean of the image as the adjustments
//! before it leave it: the first pass applies those and sums the gray values, the second
//! applies contrast and the rest.

use crate::color::{
    adjust_brightness, adjust_contrast, check_factor, check_hue, contrast_blend, gray_floor,
    hue_lane, store_rgb,
};
use crate::error::Result;
use crate::image::Image;
use crate::random::{JitterOp, JitterParams};
use crate::simd::{load_rgb, multiversion, BLOCK};

/// One adjustment with its float32 constants resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// `x * f`.
    Brightness(f32),
    /// `x * ratio + other`, `other = mean * (1 - ratio)`; `other` is known once the mean is.
    Contrast { ratio: f32, other: f32 },
    /// `x * ratio + floor(gray) * one_minus`.
    Saturation { ratio: f32, one_minus: f32 },
    /// Hue rotation by `f32` turns.
    Hue(f32),
}

/// `trunc(clamp(x, 0, 255))` as a float: the value a uint8 store and reload would give.
#[inline(always)]
fn quantize(x: f32) -> f32 {
    // `max` first: it turns NaN into 0 before the unchecked conversion.
    #[allow(clippy::manual_clamp)]
    let c = x.max(0.0).min(255.0);
    // SAFETY: `c` is finite and in [0, 255].
    (unsafe { c.to_int_unchecked::<i32>() }) as f32
}

/// Applies sampled ColorJitter parameters ([`crate::color_jitter_params`]) in their order:
/// the bytes of [`adjust_brightness`], [`adjust_contrast`], [`crate::adjust_saturation`] and
/// [`crate::adjust_hue`] run one after another, in one or two passes over the pixels.
pub fn apply_jitter(img: &mut Image, p: &JitterParams) -> Result<()> {
    img.validate()?;
    for (name, f) in [
        ("brightness", p.brightness),
        ("contrast", p.contrast),
        ("saturation", p.saturation),
    ] {
        f.map(|f| check_factor(name, f)).transpose()?;
    }
    p.hue.map(check_hue).transpose()?;
    if img.channels == 1 {
        // Saturation and hue leave gray images as they are; the other two are table
        // lookups already.
        for op in p.order {
            match op {
                JitterOp::Brightness => p.brightness.map(|f| adjust_brightness(img, f)),
                JitterOp::Contrast => p.contrast.map(|f| adjust_contrast(img, f)),
                JitterOp::Saturation | JitterOp::Hue => None,
            }
            .transpose()?;
        }
        return Ok(());
    }
    let steps: Vec<Step> = p
        .order
        .iter()
        .filter_map(|op| match op {
            JitterOp::Brightness => p.brightness.map(|f| Step::Brightness(f as f32)),
            JitterOp::Contrast => p.contrast.map(|f| Step::Contrast {
                ratio: f as f32,
                other: 0.0,
            }),
            JitterOp::Saturation => p.saturation.map(|f| Step::Saturation {
                ratio: f as f32,
                one_minus: (1.0 - f) as f32,
            }),
            JitterOp::Hue => p.hue.map(|f| Step::Hue(f as f32)),
        })
        .collect();
    if img.data.is_empty() || steps.is_empty() {
        return Ok(());
    }
    let Some(k) = steps
        .iter()
        .position(|s| matches!(s, Step::Contrast { .. }))
    else {
        jitter_pass(&mut img.data, &steps, false);
        return Ok(());
    };
    let sum = jitter_pass(&mut img.data, &steps[..k], true);
    let (ratio, other) = contrast_blend(sum, img.pixels(), p.contrast.unwrap_or(1.0));
    let mut rest = steps[k..].to_vec();
    rest[0] = Step::Contrast { ratio, other };
    jitter_pass(&mut img.data, &rest, false);
    Ok(())
}

multiversion! {
    /// Applies `steps` to interleaved RGB in place; with `sum`, returns the sum of the
    /// floored gray values of the result (0 otherwise). No steps and `sum`: only the sum.
    fn jitter_pass(data: &mut [u8], steps: &[Step], sum: bool) -> u64 {
        let inv255 = (1.0f64 / 255.0) as f32;
        let mut total = 0u64;
        for chunk in data.chunks_mut(3 * BLOCK) {
            let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
            let n = load_rgb(chunk, &mut r, &mut g, &mut b);
            for step in steps {
                match *step {
                    Step::Brightness(f) => {
                        for i in 0..BLOCK {
                            r[i] = quantize(r[i] * f);
                            g[i] = quantize(g[i] * f);
                            b[i] = quantize(b[i] * f);
                        }
                    }
                    Step::Contrast { ratio, other } => {
                        for i in 0..BLOCK {
                            r[i] = quantize(r[i] * ratio + other);
                            g[i] = quantize(g[i] * ratio + other);
                            b[i] = quantize(b[i] * ratio + other);
                        }
                    }
                    Step::Saturation { ratio, one_minus } => {
                        for i in 0..BLOCK {
                            let t = gray_floor(r[i], g[i], b[i]) as f32 * one_minus;
                            r[i] = quantize(r[i] * ratio + t);
                            g[i] = quantize(g[i] * ratio + t);
                            b[i] = quantize(b[i] * ratio + t);
                        }
                    }
                    Step::Hue(hf) => {
                        for i in 0..BLOCK {
                            let (ro, go, bo) =
                                hue_lane(r[i] * inv255, g[i] * inv255, b[i] * inv255, hf);
                            r[i] = quantize(ro);
                            g[i] = quantize(go);
                            b[i] = quantize(bo);
                        }
                    }
                }
            }
            if sum {
                let mut acc = [0u32; BLOCK];
                for i in 0..BLOCK {
                    acc[i] = gray_floor(r[i], g[i], b[i]);
                }
                // Integer adds, exact in any order, so the sum vectorises (a float sum is
                // evaluated one dependent add after another: a fifth of the pass's time).
                // Lanes past `n` may hold contrast's offset: left out.
                total += u64::from(acc[..n].iter().sum::<u32>());
            }
            if !steps.is_empty() {
                store_rgb(chunk, &r, &g, &b);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::color::{adjust_hue, adjust_saturation};

    /// The adjustments one after another, as the ops apply them.
    fn sequential(img: &mut Image, p: &JitterParams) {
        for op in p.order {
            match op {
                JitterOp::Brightness => p.brightness.map(|f| adjust_brightness(img, f)),
                JitterOp::Contrast => p.contrast.map(|f| adjust_contrast(img, f)),
                JitterOp::Saturation => p.saturation.map(|f| adjust_saturation(img, f)),
                JitterOp::Hue => p.hue.map(|f| adjust_hue(img, f)),
            }
            .transpose()
            .unwrap();
        }
    }

    fn noise(h: usize, w: usize, c: usize, seed: u32) -> Image {
        let mut s = seed;
        let data = (0..h * w * c)
            .map(|_| {
                s = s.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (s >> 16) as u8
            })
            .collect();
        Image::new(h, w, c, data).unwrap()
    }

    fn all_orders() -> Vec<[JitterOp; 4]> {
        use JitterOp::*;
        let ops = [Brightness, Contrast, Saturation, Hue];
        let mut out = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..4 {
                    for d in 0..4 {
                        let idx = [a, b, c, d];
                        let mut seen = [false; 4];
                        idx.iter().for_each(|&i| seen[i] = true);
                        if seen.iter().all(|&s| s) {
                            out.push(idx.map(|i| ops[i]));
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn fused_matches_sequential_for_every_order_and_shape() {
        let factors = [
            (Some(1.31), Some(0.67), Some(1.22), Some(-0.07)),
            (Some(0.6), Some(1.4), Some(0.6), Some(0.1)),
            (None, Some(1.9), None, Some(0.5)),
            (Some(2.5), None, Some(0.0), None),
            (None, None, None, None),
            (Some(0.0), Some(0.0), Some(3.0), Some(-0.5)),
        ];
        // 1x1, odd sizes, one full block plus a tail, gray.
        let shapes = [
            (1, 1, 3),
            (1, 1, 1),
            (3, 5, 3),
            (7, 11, 3),
            (9, 13, 1),
            (16, 16, 3),
        ];
        crate::simd::for_each_path(|path| {
            for (si, &(h, w, c)) in shapes.iter().enumerate() {
                let img = noise(h, w, c, si as u32 + 1);
                for order in all_orders() {
                    for &(brightness, contrast, saturation, hue) in &factors {
                        let p = JitterParams {
                            order,
                            brightness,
                            contrast,
                            saturation,
                            hue,
                        };
                        let mut want = img.clone();
                        sequential(&mut want, &p);
                        let mut got = img.clone();
                        apply_jitter(&mut got, &p).unwrap();
                        assert_eq!(
                            got.data, want.data,
                            "{p:?} {h}x{w}x{c} {path} src={:?}",
                            img.data
                        );
                    }
                }
            }
        });
    }

    #[test]
    fn bad_factors_are_rejected_before_any_change() {
        let img = noise(2, 3, 3, 9);
        let p = JitterParams {
            order: all_orders()[0],
            brightness: Some(1.5),
            contrast: Some(f64::NAN),
            saturation: None,
            hue: None,
        };
        let mut x = img.clone();
        assert!(apply_jitter(&mut x, &p).is_err());
        assert_eq!(x, img);
        let p = JitterParams {
            contrast: None,
            hue: Some(0.6),
            ..p
        };
        assert!(apply_jitter(&mut x, &p).is_err());
        let mut empty = Image::zeros(0, 4, 3).unwrap();
        let p = JitterParams {
            hue: Some(0.2),
            ..p
        };
        assert!(apply_jitter(&mut empty, &p).is_ok());
    }
}
