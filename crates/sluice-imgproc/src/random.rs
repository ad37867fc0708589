//! Random parameter samplers with torchvision's algorithms. They are pure:
//! the caller passes `u`, a source of uniform draws in `[0, 1)`, so the
//! engine decides seeding and determinism (one generator per sample/op).
//! The sequence of draws is documented per function and stable across
//! releases.

use crate::error::{invalid, Result};

/// One draw, clamped into `[0, 1)` so a misbehaving source cannot push an
/// index out of range.
fn draw(u: &mut dyn FnMut() -> f64) -> f64 {
    let v = u();
    if v.is_nan() || v < 0.0 {
        0.0
    } else if v >= 1.0 {
        1.0 - f64::EPSILON
    } else {
        v
    }
}

/// `torch.randint(0, n)` from one uniform draw: `floor(u * n)`.
fn randint(n: usize, u: &mut dyn FnMut() -> f64) -> usize {
    ((draw(u) * n as f64) as usize).min(n.saturating_sub(1))
}

/// Python's `round()` (half to even), as torchvision uses it.
fn pyround(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// Crop box `(top, left, height, width)` for RandomResizedCrop, following
/// torchvision's `RandomResizedCrop.get_params` exactly: up to 10 attempts
/// of `area = H*W*U(scale)`, `ratio = exp(U(log ratio))`,
/// `w = round(sqrt(area*ratio))`, `h = round(sqrt(area/ratio))`, accepted if
/// `0 < w <= W` and `0 < h <= H`, then `top = randint(0, H-h+1)`,
/// `left = randint(0, W-w+1)`; otherwise a centre crop with the ratio
/// clamped into range.
///
/// Draw order: 2 per attempt (scale, log-ratio) + 2 on success (top,
/// left). Arithmetic is float64 (torchvision draws float32), so identical
/// uniforms can round differently at exact .5 boundaries.
///
/// ```
/// use sluice_imgproc::rrc_params;
/// let mut seq = [0.5, 0.5, 0.0, 0.999].into_iter();
/// let mut u = move || seq.next().unwrap();
/// let (top, left, h, w) = rrc_params(200, 300, (0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0), &mut u).unwrap();
/// assert_eq!((h, w), (180, 180)); // area 0.54 * 60000, ratio 1
/// assert_eq!((top, left), (0, 120)); // floor(0 * 21), floor(0.999 * 121)
/// ```
pub fn rrc_params(
    height: usize,
    width: usize,
    scale: (f64, f64),
    ratio: (f64, f64),
    u: &mut dyn FnMut() -> f64,
) -> Result<(usize, usize, usize, usize)> {
    if height == 0 || width == 0 {
        return invalid("rrc_params on an empty image");
    }
    if !(scale.0.is_finite() && scale.1.is_finite() && 0.0 <= scale.0 && scale.0 <= scale.1) {
        return invalid(format!("scale must satisfy 0 <= min <= max, got {scale:?}"));
    }
    if !(ratio.0.is_finite() && ratio.1.is_finite() && 0.0 < ratio.0 && ratio.0 <= ratio.1) {
        return invalid(format!("ratio must satisfy 0 < min <= max, got {ratio:?}"));
    }
    let (hf, wf) = (height as f64, width as f64);
    let area = hf * wf;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * (scale.0 + draw(u) * (scale.1 - scale.0));
        let aspect = (lr0 + draw(u) * (lr1 - lr0)).exp();
        let w = pyround((target * aspect).sqrt());
        let h = pyround((target / aspect).sqrt());
        if 0 < w && w <= width as i64 && 0 < h && h <= height as i64 {
            let (h, w) = (h as usize, w as usize);
            let top = randint(height - h + 1, u);
            let left = randint(width - w + 1, u);
            return Ok((top, left, h, w));
        }
    }
    // Fallback to a centre crop.
    let in_ratio = wf / hf;
    let (h, w) = if in_ratio < ratio.0 {
        (pyround(wf / ratio.0), width as i64)
    } else if in_ratio > ratio.1 {
        (height as i64, pyround(hf * ratio.1))
    } else {
        (height as i64, width as i64)
    };
    // torchvision would produce an empty crop for absurd ratios on 1-pixel
    // images; keep at least one pixel.
    let h = (h.max(1) as usize).min(height);
    let w = (w.max(1) as usize).min(width);
    Ok(((height - h) / 2, (width - w) / 2, h, w))
}

/// One of the four ColorJitter adjustments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitterOp {
    /// [`crate::adjust_brightness`]
    Brightness,
    /// [`crate::adjust_contrast`]
    Contrast,
    /// [`crate::adjust_saturation`]
    Saturation,
    /// [`crate::adjust_hue`]
    Hue,
}

/// Sampled ColorJitter parameters: an order and the factors (`None` = that
/// adjustment is disabled, as when torchvision's range collapses to the
/// identity).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterParams {
    /// Order in which to apply the adjustments (a random permutation).
    pub order: [JitterOp; 4],
    /// Brightness factor.
    pub brightness: Option<f64>,
    /// Contrast factor.
    pub contrast: Option<f64>,
    /// Saturation factor.
    pub saturation: Option<f64>,
    /// Hue shift in turns.
    pub hue: Option<f64>,
}

/// Samples ColorJitter parameters like torchvision v2 `ColorJitter`:
/// ranges `[max(0, 1-b), 1+b]` for brightness, contrast and saturation,
/// `[-h, h]` for hue (`h <= 0.5`); a strength of 0 disables that
/// adjustment. Draw order: 3 draws for a Fisher–Yates permutation of the
/// four ops, then one per enabled factor in the order brightness, contrast,
/// saturation, hue.
///
/// ```
/// use sluice_imgproc::{color_jitter_params, JitterOp};
/// let mut u = || 0.5;
/// let p = color_jitter_params(0.4, 0.4, 0.0, 0.1, &mut u).unwrap();
/// assert_eq!(p.brightness, Some(1.0));
/// assert_eq!(p.saturation, None);
/// assert_eq!(p.hue, Some(0.0));
/// assert_eq!(p.order.len(), 4);
/// ```
pub fn color_jitter_params(
    brightness: f64,
    contrast: f64,
    saturation: f64,
    hue: f64,
    u: &mut dyn FnMut() -> f64,
) -> Result<JitterParams> {
    for (name, v) in [
        ("brightness", brightness),
        ("contrast", contrast),
        ("saturation", saturation),
        ("hue", hue),
    ] {
        if !(v.is_finite() && v >= 0.0) {
            return invalid(format!("{name} must be finite and >= 0, got {v}"));
        }
    }
    if hue > 0.5 {
        return invalid(format!("hue must be <= 0.5, got {hue}"));
    }
    let mut order = [
        JitterOp::Brightness,
        JitterOp::Contrast,
        JitterOp::Saturation,
        JitterOp::Hue,
    ];
    for i in (1..4).rev() {
        let j = randint(i + 1, u);
        order.swap(i, j);
    }
    let mut factor = |strength: f64, lo: f64, hi: f64| {
        if strength == 0.0 {
            None
        } else {
            Some(lo + draw(u) * (hi - lo))
        }
    };
    let brightness = factor(brightness, (1.0 - brightness).max(0.0), 1.0 + brightness);
    let contrast = factor(contrast, (1.0 - contrast).max(0.0), 1.0 + contrast);
    let saturation = factor(saturation, (1.0 - saturation).max(0.0), 1.0 + saturation);
    let hue = factor(hue, -hue, hue);
    Ok(JitterParams {
        order,
        brightness,
        contrast,
        saturation,
        hue,
    })
}

/// GaussianBlur's sigma: `U(min, max)` from one draw (torchvision v2 uses one
/// sigma for both axes).
///
/// ```
/// use sluice_imgproc::blur_sigma;
/// assert_eq!(blur_sigma(0.1, 2.0, &mut || 0.5).unwrap(), 1.05);
/// ```
pub fn blur_sigma(min: f64, max: f64, u: &mut dyn FnMut() -> f64) -> Result<f64> {
    if !(min.is_finite() && max.is_finite() && 0.0 < min && min <= max) {
        return invalid(format!(
            "sigma range must satisfy 0 < min <= max, got ({min}, {max})"
        ));
    }
    Ok(min + draw(u) * (max - min))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{apply_jitter, Image};

    /// The engine's per-sample generator, as the ops pass it in.
    fn rng(seed: u64) -> impl FnMut() -> f64 {
        let mut r = sluice_core::SampleRng::from_key(seed);
        move || r.uniform()
    }

    #[test]
    fn rrc_statistics_within_torchvision_ranges() {
        let mut u = rng(7);
        let (hh, ww) = (375usize, 500usize);
        let (scale, ratio) = ((0.08, 1.0), (3.0 / 4.0, 4.0 / 3.0));
        let n = 20_000;
        let mut sum_area = 0.0;
        let mut small = 0;
        for _ in 0..n {
            let (t, l, h, w) = rrc_params(hh, ww, scale, ratio, &mut u).unwrap();
            assert!(t + h <= hh && l + w <= ww && h > 0 && w > 0);
            let a = (h * w) as f64 / (hh * ww) as f64;
            // Rounding to whole pixels can leave the range by a hair.
            assert!(a > 0.075 && a <= 1.0, "area fraction {a}");
            let r = w as f64 / h as f64;
            let fallback = (h, w) == (hh, ww);
            assert!(fallback || (r > 0.74 && r < 1.35), "ratio {r}");
            sum_area += a;
            if a < 0.3 {
                small += 1;
            }
        }
        // Accepted areas are uniform in [0.08, 1] but large ones get rejected
        // more often (they do not fit), so the mean sits below 0.54.
        let mean = sum_area / n as f64;
        assert!(mean > 0.40 && mean < 0.54, "mean area {mean}");
        assert!(small > n / 5, "{small}");
    }

    #[test]
    fn rrc_fallback_and_validation() {
        // Always-failing draws: scale 1.0, extreme ratio on a tall image.
        let mut one = || 0.999_999_999;
        let (t, l, h, w) = rrc_params(400, 100, (1.0, 1.0), (2.0, 3.0), &mut one).unwrap();
        // in_ratio 0.25 < 2 -> w = W, h = round(100 / 2) = 50, centred.
        assert_eq!((t, l, h, w), (175, 0, 50, 100));
        let mut z = || 0.0;
        assert!(rrc_params(0, 5, (0.1, 1.0), (1.0, 1.0), &mut z).is_err());
        assert!(rrc_params(5, 5, (0.9, 0.1), (1.0, 1.0), &mut z).is_err());
        assert!(rrc_params(5, 5, (0.1, 0.9), (0.0, 1.0), &mut z).is_err());
        // Out-of-range draws are clamped, not trusted.
        let mut bad = || f64::NAN;
        assert!(rrc_params(5, 5, (0.1, 0.9), (1.0, 1.0), &mut bad).is_ok());
        let mut big = || 7.0;
        let (t, l, h, w) = rrc_params(50, 50, (0.1, 0.2), (1.0, 1.0), &mut big).unwrap();
        assert!(t + h <= 50 && l + w <= 50);
    }

    #[test]
    fn jitter_ranges_and_permutations() {
        let mut u = rng(3);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..2000 {
            let p = color_jitter_params(0.8, 0.8, 0.8, 0.2, &mut u).unwrap();
            let b = p.brightness.unwrap();
            assert!((0.2..=1.8).contains(&b));
            assert!((-0.2..=0.2).contains(&p.hue.unwrap()));
            let mut o: Vec<_> = p.order.iter().map(|x| *x as u8).collect();
            seen.insert(o.clone());
            o.sort();
            assert_eq!(o, vec![0, 1, 2, 3]);
        }
        assert_eq!(seen.len(), 24, "all permutations reachable");
        let p = color_jitter_params(1.5, 0.0, 0.0, 0.0, &mut u).unwrap();
        assert!(p.brightness.unwrap() >= 0.0);
        assert!(color_jitter_params(0.1, 0.1, 0.1, 0.6, &mut u).is_err());
        assert!(color_jitter_params(-0.1, 0.1, 0.1, 0.1, &mut u).is_err());
    }

    #[test]
    fn apply_jitter_runs_all() {
        let mut img = Image::new(
            2,
            2,
            3,
            vec![10, 200, 30, 40, 50, 60, 70, 80, 90, 250, 1, 2],
        )
        .unwrap();
        let p = JitterParams {
            order: [
                JitterOp::Hue,
                JitterOp::Saturation,
                JitterOp::Contrast,
                JitterOp::Brightness,
            ],
            brightness: Some(1.2),
            contrast: Some(0.8),
            saturation: Some(1.3),
            hue: Some(-0.1),
        };
        let before = img.clone();
        apply_jitter(&mut img, &p).unwrap();
        assert_ne!(img, before);
    }
}
