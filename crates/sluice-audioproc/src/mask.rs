//! SpecAugment masking (`torchaudio.functional.mask_along_axis` semantics).
//!
//! Randomness is supplied by the caller as a source of uniform `[0, 1)` draws, so the engine
//! decides determinism (a generator derived from seed, epoch, sample and op).

use std::ops::Range;

use crate::spectrogram::Spectrogram;

/// Draw one uniform value and force it into `[0, 1)`: a misbehaving source (NaN, 1.0,
/// negatives) must not produce an out-of-range mask.
fn draw(u: &mut dyn FnMut() -> f64) -> f64 {
    let v = u();
    if v.is_nan() || v <= 0.0 {
        0.0
    } else if v >= 1.0 {
        1.0 - f64::EPSILON / 2.0
    } else {
        v
    }
}

/// Pick the masked range on an axis of `size` entries, as torchaudio does:
/// `value = u₁·max_width` (clamped to `size`), `start = ⌊u₂·(size − value)⌋`,
/// `end = start + ⌊value⌋`. So the width is `⌊u₁·max_width⌋ ≤ min(max_width, size)` and the
/// range always lies inside the axis. Always consumes exactly two draws, whatever the sizes,
/// so the random stream's position never depends on the data.
pub fn mask_range(size: usize, max_width: usize, u: &mut dyn FnMut() -> f64) -> Range<usize> {
    let value = (draw(u) * max_width as f64).min(size as f64);
    let min_value = draw(u) * (size as f64 - value);
    let start = min_value as usize;
    let end = (start + value as usize).min(size);
    start..end
}

/// Time masking (`torchaudio.transforms.TimeMasking(max_width)`): set a run of up to
/// `max_width` consecutive frames (columns of a freq × time spectrogram) to `fill` in every
/// bin. Returns the masked frame range (possibly empty).
///
/// Apply it before the log (torchaudio's usual placement, and the ASR reference pipeline's)
/// with `fill = 0.0`; after a log, fill with the mean or minimum instead.
///
/// ```
/// use sluice_audioproc::{time_mask, Spectrogram};
/// let mut s = Spectrogram::from_vec(2, 10, vec![1.0f32; 20]).unwrap();
/// let mut draws = [0.5, 0.25].into_iter();
/// let r = time_mask(&mut s, 4, 0.0, &mut || draws.next().unwrap());
/// assert_eq!(r, 2..4); // width ⌊0.5·4⌋ = 2, start ⌊0.25·(10 − 2)⌋ = 2
/// assert_eq!(s.row(1), &[1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
/// ```
pub fn time_mask(
    spec: &mut Spectrogram<f32>,
    max_width: usize,
    fill: f32,
    u: &mut dyn FnMut() -> f64,
) -> Range<usize> {
    let r = mask_range(spec.cols(), max_width, u);
    if !r.is_empty() {
        for f in 0..spec.rows() {
            spec.row_mut(f)[r.clone()].fill(fill);
        }
    }
    r
}

/// Frequency masking (`torchaudio.transforms.FrequencyMasking(max_width)`): set a run of up
/// to `max_width` consecutive bins (rows) to `fill` in every frame. Returns the masked bin
/// range (possibly empty). See [`time_mask`] for the drawing rule and placement advice.
///
/// ```
/// use sluice_audioproc::{freq_mask, Spectrogram};
/// let mut s = Spectrogram::from_vec(4, 2, vec![1.0f32; 8]).unwrap();
/// let mut draws = [0.99, 0.0].into_iter();
/// let r = freq_mask(&mut s, 27, 0.0, &mut || draws.next().unwrap());
/// assert_eq!(r, 0..4); // width clamped to the 4 available bins
/// assert!(s.as_slice().iter().all(|&v| v == 0.0));
/// ```
pub fn freq_mask(
    spec: &mut Spectrogram<f32>,
    max_width: usize,
    fill: f32,
    u: &mut dyn FnMut() -> f64,
) -> Range<usize> {
    let r = mask_range(spec.rows(), max_width, u);
    let cols = spec.cols();
    if !r.is_empty() {
        spec.as_mut_slice()[r.start * cols..r.end * cols].fill(fill);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's per-sample generator, as the ops pass it in.
    fn uniform(seed: u64) -> impl FnMut() -> f64 {
        let mut r = sluice_core::SampleRng::from_key(seed);
        move || r.uniform()
    }

    #[test]
    fn ranges_stay_in_bounds_and_under_width() {
        let mut u = uniform(7);
        let mut max_seen = 0;
        for size in [0usize, 1, 5, 80, 301] {
            for max_width in [0usize, 1, 27, 80, 1000] {
                for _ in 0..200 {
                    let r = mask_range(size, max_width, &mut u);
                    assert!(
                        r.start <= r.end && r.end <= size,
                        "{size} {max_width} {r:?}"
                    );
                    assert!(r.len() <= max_width.min(size));
                    max_seen = max_seen.max(r.len());
                }
            }
        }
        assert!(max_seen > 200, "wide masks should occur");
    }

    #[test]
    fn deterministic_for_same_draws_and_masks_whole_axis() {
        let base =
            Spectrogram::from_vec(80, 120, (0..9600).map(|i| i as f32 + 1.0).collect()).unwrap();
        let run = |seed| {
            let mut s = base.clone();
            let mut u = uniform(seed);
            let t = time_mask(&mut s, 80, 0.0, &mut u);
            let f = freq_mask(&mut s, 27, 0.0, &mut u);
            (s, t, f)
        };
        let (a, ta, fa) = run(3);
        let (b, tb, fb) = run(3);
        assert_eq!((&a, &ta, &fa), (&b, &tb, &fb));
        for r in 0..80 {
            for c in 0..120 {
                let masked = ta.contains(&c) || fa.contains(&r);
                let v = *a.get(r, c).unwrap();
                assert_eq!(v == 0.0, masked, "({r},{c})");
            }
        }
        let (c, tc, fc) = run(4);
        assert!(c != a || tc != ta || fc != fa);
    }

    #[test]
    fn bad_draws_are_clamped_and_two_are_consumed() {
        let mut n = 0;
        let mut bad = || {
            n += 1;
            [f64::NAN, 7.0, -3.0, 1.0][n % 4]
        };
        for size in [0usize, 3, 10] {
            let r = mask_range(size, 5, &mut bad);
            assert!(r.end <= size);
        }
        assert_eq!(n, 6);
        let mut s = Spectrogram::from_vec(3, 0, Vec::new()).unwrap();
        let mut one = || 0.5;
        assert!(time_mask(&mut s, 10, 0.0, &mut one).is_empty());
        assert!(freq_mask(&mut s, 10, 0.0, &mut one).len() <= 3);
    }
}
