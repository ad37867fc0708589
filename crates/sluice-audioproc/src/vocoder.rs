//! Time stretching by phase vocoder (`librosa.phase_vocoder`).

use std::f64::consts::{PI, TAU};

use realfft::num_complex::Complex32;

use crate::error::{invalid, Result};
use crate::spectrogram::Spectrogram;
use crate::stft::fast_abs;

/// Refuse outputs above this many values: a tiny `rate` would otherwise ask for an
/// arbitrarily large allocation from one bad parameter.
const MAX_OUTPUT_VALUES: f64 = (1u64 << 31) as f64;

/// Validate `rate` and return the output frame count `len(np.arange(0, n, rate))`.
fn output_frames(rows: usize, n: usize, rate: f64) -> Result<usize> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(invalid!(
            "time_stretch rate must be finite and > 0, got {rate}"
        ));
    }
    if n == 0 || rows == 0 {
        return Err(invalid!("time_stretch needs a non-empty spectrogram"));
    }
    let n_out = (n as f64 / rate).ceil();
    if n_out * rows as f64 > MAX_OUTPUT_VALUES {
        return Err(invalid!(
            "time_stretch rate {rate} would make {n_out} frames x {rows} bins"
        ));
    }
    Ok(n_out as usize)
}

/// `(int(step), step % 1)` for every output frame, `step = t * rate` (numpy's float `arange`
/// computes element `t` as `t * rate`, so these are the same float64 values).
fn steps(n_out: usize, rate: f64) -> impl Iterator<Item = (usize, f64)> {
    (0..n_out).map(move |t| {
        let step = t as f64 * rate;
        (step as usize, step % 1.0)
    })
}

/// Stretch a complex STFT in time by `rate` (> 1 faster/shorter, < 1 slower/longer) with
/// librosa's phase vocoder, returning `ceil(frames / rate)` frames.
///
/// This is `librosa.phase_vocoder(D, rate=rate, hop_length=hop_length)` step for step: output
/// frame `t` reads input position `t·rate`; its magnitude is the linear interpolation of the
/// two neighbouring input magnitudes (frames past the end are zeros, librosa's 2-column pad);
/// its phase is an accumulator started at the phase of frame 0 and advanced by the expected
/// advance `hop_length · ω_k` plus the measured deviation wrapped to `[-π, π]`. As in librosa
/// on `complex64` input, the accumulator is `f32` while the advance is computed in `f64`, so
/// results agree with librosa to float rounding (see the crate README for measured error).
/// `n_fft` is taken as `2 · (rows - 1)`, librosa's default.
///
/// When only the magnitude or power of the result is needed (the ASR pipeline takes power
/// next), [`time_stretch_magnitude`] gives the same magnitudes without any trigonometry.
///
/// ```
/// use sluice_audioproc::{time_stretch, Stft, Window};
/// let y: Vec<f32> = (0..16_000).map(|i| (i as f32 * 0.05).sin()).collect();
/// let mut stft = Stft::new(400, 160, None, Window::Hann, true).unwrap();
/// let d = stft.complex(&y).unwrap();
/// let slow = time_stretch(&d, 0.8, 160).unwrap();
/// assert_eq!(slow.shape(), (201, 127)); // ceil(101 / 0.8)
/// ```
pub fn time_stretch(
    spec: &Spectrogram<Complex32>,
    rate: f64,
    hop_length: usize,
) -> Result<Spectrogram<Complex32>> {
    let (rows, n) = spec.shape();
    let n_out = output_frames(rows, n, rate)?;
    if rows < 2 {
        return Err(invalid!(
            "time_stretch needs at least 2 frequency rows (n_fft = 2 * (rows - 1))"
        ));
    }
    if hop_length == 0 {
        return Err(invalid!("hop_length must be positive"));
    }
    let n_fft = 2 * (rows - 1);
    // fft_frequencies(sr=2π, n_fft) = rfftfreq(n_fft, d=1/(2π)), same operation order.
    let val = 1.0 / (n_fft as f64 * (1.0 / (2.0 * PI)));
    let steps: Vec<(usize, f64)> = steps(n_out, rate).collect();

    let mut out = vec![Complex32::new(0.0, 0.0); rows * n_out];
    // Per-row angle and magnitude of the input, with librosa's two zero columns appended;
    // computed once per input frame instead of twice per output frame.
    let mut ang = vec![0.0f32; n + 2];
    let mut mag = vec![0.0f32; n + 2];
    // Per output frame: first the phase increment, then the accumulator value (as f64).
    let mut acc = vec![0.0f64; n_out];
    // Each bin's phase accumulator is independent of the others, so process bin by bin:
    // the input row and output row are both contiguous in the freq-major layout.
    for (f, out_row) in out.chunks_exact_mut(n_out).enumerate() {
        for ((a, m), v) in ang.iter_mut().zip(mag.iter_mut()).zip(spec.row(f)) {
            *a = atan2_f32(v.im, v.re);
            *m = fast_abs(*v);
        }
        let phi_advance = hop_length as f64 * (f as f64 * val);
        // Three passes so only the accumulation itself is serial: (1) the per-step phase
        // increments, independent of each other; (2) librosa's float32 running sum
        // (`phase_acc += phi_advance + dphase`, a float64 add rounded to float32 each step);
        // (3) sin/cos and magnitudes, again independent.
        for (inc, &(i, _)) in acc.iter_mut().zip(&steps) {
            let dphase = f64::from(ang[i + 1] - ang[i]) - phi_advance;
            // np.round rounds half to even.
            let dphase = dphase - 2.0 * PI * round_half_even(dphase / (2.0 * PI));
            *inc = phi_advance + dphase;
        }
        let mut phase_acc: f32 = ang[0];
        for a in acc.iter_mut() {
            let inc = *a;
            *a = f64::from(phase_acc);
            phase_acc = (f64::from(phase_acc) + inc) as f32;
        }
        for ((o, &(i, alpha)), &x) in out_row.iter_mut().zip(&steps).zip(acc.iter()) {
            // librosa: alpha is a float64 scalar, so the magnitude mix is float64.
            let m = (1.0 - alpha) * f64::from(mag[i]) + alpha * f64::from(mag[i + 1]);
            // The accumulator grows to ~1e5 rad in high bins, where f32 sin/cos go through
            // slow large-argument reduction (and f64 `%` is a slow bitwise fmod); reducing
            // the exact f32 value in f64 by multiplication first costs an error of ~1e-11 rad.
            let (s, c) = ((x - round_half_even(x / TAU) * TAU) as f32).sin_cos();
            *o = Complex32::new((f64::from(c) * m) as f32, (f64::from(s) * m) as f32);
        }
    }
    Spectrogram::from_vec(rows, n_out, out)
}

/// Magnitude-only time stretch: given `|D|` (e.g. [`Stft::power`](crate::Stft::power) with
/// `power = 1.0`), returns `|time_stretch(D, rate, _)|` — the interpolated magnitudes of the
/// phase vocoder, which do not depend on the phase. Square the result for the power
/// spectrogram. No trigonometry, so it is much cheaper than [`time_stretch`].
///
/// Note the order matters: interpolating magnitudes then squaring (this, and librosa) differs
/// from interpolating power.
///
/// ```
/// use sluice_audioproc::{time_stretch_magnitude, Spectrogram};
/// let m = Spectrogram::from_vec(1, 2, vec![1.0f32, 3.0]).unwrap();
/// let s = time_stretch_magnitude(&m, 0.5).unwrap();
/// assert_eq!(s.as_slice(), &[1.0, 2.0, 3.0, 1.5]); // the last frame fades into the pad
/// ```
pub fn time_stretch_magnitude(mag: &Spectrogram<f32>, rate: f64) -> Result<Spectrogram<f32>> {
    stretch_interp(mag, rate, 1.0)
}

/// Power-spectrogram time stretch: given `|D|^power` (e.g. [`Stft::power`](crate::Stft::power)
/// output), returns `|time_stretch(D, rate, _)|^power` — what librosa gives for "phase
/// vocoder on the complex STFT, then power" — without the complex STFT: the `power`-th root
/// recovers `|D|`, the magnitudes are interpolated as the vocoder does, and the result is
/// raised back to `power`. Use this when the pipeline has already taken power.
///
/// Errors unless `power` is finite and positive (and as [`time_stretch_magnitude`]).
///
/// ```
/// use sluice_audioproc::{time_stretch_power, Spectrogram};
/// let p = Spectrogram::from_vec(1, 2, vec![1.0f32, 9.0]).unwrap(); // |D|² of [1, 3]
/// let s = time_stretch_power(&p, 0.5, 2.0).unwrap();
/// assert_eq!(s.as_slice(), &[1.0, 4.0, 9.0, 2.25]); // [1, 2, 3, 1.5]²
/// ```
pub fn time_stretch_power(
    spec: &Spectrogram<f32>,
    rate: f64,
    power: f32,
) -> Result<Spectrogram<f32>> {
    if !(power.is_finite() && power > 0.0) {
        return Err(invalid!("power must be finite and positive, got {power}"));
    }
    stretch_interp(spec, rate, power)
}

/// Shared body of the magnitude/power stretches: interpolate `|x|^(1/power)` like the phase
/// vocoder's magnitudes, then raise back to `power`.
fn stretch_interp(mag: &Spectrogram<f32>, rate: f64, power: f32) -> Result<Spectrogram<f32>> {
    let (rows, n) = mag.shape();
    let n_out = output_frames(rows, n, rate)?;
    let steps: Vec<(usize, f64)> = steps(n_out, rate).collect();
    let mut out = vec![0.0f32; rows * n_out];
    // The row plus librosa's two zero columns, so the inner loop has no bounds logic.
    let mut padded = vec![0.0f32; n + 2];
    for (f, out_row) in out.chunks_exact_mut(n_out).enumerate() {
        for (p, v) in padded.iter_mut().zip(mag.row(f)) {
            *p = root(v.abs(), power);
        }
        for (o, &(i, alpha)) in out_row.iter_mut().zip(&steps) {
            let (a, b) = (padded[i], padded[i + 1]);
            *o = ((1.0 - alpha) * f64::from(a) + alpha * f64::from(b)) as f32;
        }
        if power != 1.0 {
            for o in out_row.iter_mut() {
                *o = raise(*o, power);
            }
        }
    }
    Spectrogram::from_vec(rows, n_out, out)
}

/// `atan2(y, x)` in `f32`, within 2 ULP of the correctly rounded value (≤ 2.4e-7 rad), about
/// 4× faster than libm's `atan2f`, which dominated the phase vocoder's run time.
///
/// Octant reduction to a ratio in `[0, 1]`, then the Cephes `atanf` kernel (a further
/// reduction at tan(π/8) and a degree-9 odd polynomial). Zeros, infinities and NaNs take the
/// libm path so every IEEE special case (signed zeros, `atan2(0, -1) = π`) stays exact.
#[inline]
pub(crate) fn atan2_f32(y: f32, x: f32) -> f32 {
    use std::f32::consts::{FRAC_PI_2, FRAC_PI_4, PI as PI32};
    let (ax, ay) = (x.abs(), y.abs());
    if !(ax.is_normal() && ay.is_normal()) {
        return y.atan2(x);
    }
    // t = min/max ∈ (0, 1].
    let swap = ay > ax;
    let t = if swap { ax / ay } else { ay / ax };
    // Cephes atanf: shift by π/4 above tan(π/8) so the polynomial argument is ≤ 0.4142.
    let (base, u) = if t > 0.414_213_57 {
        (FRAC_PI_4, (t - 1.0) / (t + 1.0))
    } else {
        (0.0, t)
    };
    let z = u * u;
    let p =
        (((8.053_744_5e-2 * z - 1.387_768_6e-1) * z + 1.997_771_1e-1) * z - 3.333_295e-1) * z * u
            + u;
    let mut a = base + p;
    if swap {
        a = FRAC_PI_2 - a;
    }
    if x < 0.0 {
        a = PI32 - a;
    }
    a.copysign(y)
}

/// Round to nearest, ties to even (`np.round`), for `|x| < 2^51`; larger values (only reached
/// by absurd inputs) are returned unchanged, which is also what rounding does to them at
/// that magnitude up to 1. Inline arithmetic instead of the libm `rint` call the baseline
/// x86-64 target (no SSE4.1) would emit.
#[inline]
fn round_half_even(x: f64) -> f64 {
    // Adding 1.5·2^52 pushes the fraction bits out under the default round-to-nearest-even
    // mode; subtracting it back leaves the rounded integer.
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    if x.abs() < 2_251_799_813_685_248.0 {
        (x + SHIFT) - SHIFT
    } else {
        x
    }
}

/// `x^(1/p)` with the common exponents special-cased.
#[inline]
fn root(x: f32, p: f32) -> f32 {
    if p == 1.0 {
        x
    } else if p == 2.0 {
        x.sqrt()
    } else {
        x.powf(1.0 / p)
    }
}

/// `x^p` with the common exponents special-cased.
#[inline]
fn raise(x: f32, p: f32) -> f32 {
    if p == 2.0 {
        x * x
    } else {
        x.powf(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp_spec(rows: usize, cols: usize) -> Spectrogram<Complex32> {
        let data = (0..rows * cols)
            .map(|i| Complex32::from_polar(1.0 + (i % 7) as f32, i as f32 * 0.37))
            .collect();
        Spectrogram::from_vec(rows, cols, data).unwrap()
    }

    #[test]
    fn output_lengths_follow_arange() {
        let d = ramp_spec(5, 10);
        assert_eq!(time_stretch(&d, 0.8, 2).unwrap().cols(), 13); // ceil(12.5)
        assert_eq!(time_stretch(&d, 1.0, 2).unwrap().cols(), 10);
        assert_eq!(time_stretch(&d, 2.0, 2).unwrap().cols(), 5);
        assert_eq!(time_stretch(&d, 3.0, 2).unwrap().cols(), 4);
        assert_eq!(time_stretch(&d, 100.0, 2).unwrap().cols(), 1);
    }

    #[test]
    fn rate_one_keeps_magnitudes_and_first_phase() {
        let d = ramp_spec(9, 6);
        let s = time_stretch(&d, 1.0, 4).unwrap();
        for f in 0..9 {
            for t in 0..6 {
                let (a, b) = (d.get(f, t).unwrap(), s.get(f, t).unwrap());
                assert!((a.norm() - b.norm()).abs() < 1e-5);
            }
            let (a, b) = (d.get(f, 0).unwrap(), s.get(f, 0).unwrap());
            assert!((a - b).norm() < 1e-5);
        }
    }

    #[test]
    fn magnitude_version_matches_complex_magnitudes() {
        let d = ramp_spec(11, 17);
        let m = d.map(|v| v.norm());
        for rate in [0.8, 1.3, 0.5, 2.5] {
            let full = time_stretch(&d, rate, 5).unwrap();
            let fast = time_stretch_magnitude(&m, rate).unwrap();
            assert_eq!(full.shape(), fast.shape());
            for (a, b) in full.as_slice().iter().zip(fast.as_slice()) {
                assert!((a.norm() - b).abs() <= 1e-5 * (1.0 + b), "{rate}");
            }
        }
    }

    #[test]
    fn fast_atan2_is_accurate_and_exact_on_special_cases() {
        let mut worst = 0.0f64;
        let mut s = 0x1234_5678_9abc_def0u64;
        for i in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Mix of scales, signs, and exact axis/diagonal cases.
            let a = ((s >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32;
            let b = (((s >> 3) & 0xffff) as f32 / 65536.0 - 0.5) * 10f32.powi((i % 7) - 3);
            let (y, x) = match i % 50 {
                0 => (a, a),
                1 => (a, -a),
                _ => (a, b),
            };
            let got = f64::from(atan2_f32(y, x));
            let want = f64::from(y).atan2(f64::from(x));
            worst = worst.max((got - want).abs());
        }
        println!("fast atan2 worst error {worst:e} rad");
        assert!(worst < 5e-7, "worst error {worst}");
        for (y, x) in [
            (0.0f32, 0.0f32),
            (-0.0, 0.0),
            (0.0, -0.0),
            (-0.0, -0.0),
            (0.0, -1.0),
            (-0.0, -1.0),
            (1.0, 0.0),
            (-1.0, 0.0),
            (f32::INFINITY, 1.0),
            (1.0, f32::NEG_INFINITY),
            (1e-40, 1.0),
        ] {
            assert_eq!(
                atan2_f32(y, x).to_bits(),
                y.atan2(x).to_bits(),
                "({y}, {x})"
            );
        }
        assert!(atan2_f32(f32::NAN, 1.0).is_nan());
    }

    #[test]
    fn round_half_even_matches_std() {
        for x in [
            0.0,
            0.5,
            1.5,
            2.5,
            -0.5,
            -1.5,
            -2.5,
            0.49999999999999994,
            1e10 + 0.5,
            -7.3,
            123456.789,
            3e15,
            -1e300,
            2.4999999,
        ] {
            assert_eq!(round_half_even(x), x.round_ties_even(), "{x}");
        }
    }

    #[test]
    fn power_version_matches_complex_power() {
        let d = ramp_spec(11, 17);
        for p in [2.0f32, 1.0, 0.5, 3.0] {
            let spec = d.map(|v| v.norm().powf(p));
            for rate in [0.8, 1.3] {
                let full = time_stretch(&d, rate, 5).unwrap();
                let fast = time_stretch_power(&spec, rate, p).unwrap();
                for (a, b) in full.as_slice().iter().zip(fast.as_slice()) {
                    let want = a.norm().powf(p);
                    assert!((want - b).abs() <= 1e-5 * (1.0 + want), "p={p} rate={rate}");
                }
            }
        }
        let spec = d.map(|v| v.norm());
        assert!(time_stretch_power(&spec, 1.0, 0.0).is_err());
        assert!(time_stretch_power(&spec, 1.0, f32::NAN).is_err());
    }

    #[test]
    fn bad_inputs_are_errors() {
        let d = ramp_spec(5, 4);
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-300] {
            assert!(time_stretch(&d, rate, 2).is_err(), "{rate}");
            assert!(time_stretch_magnitude(&d.map(|v| v.norm()), rate).is_err());
        }
        assert!(time_stretch(&d, 1.0, 0).is_err());
        assert!(time_stretch(&ramp_spec(1, 4), 1.0, 2).is_err());
        assert!(time_stretch(&Spectrogram::default(), 1.0, 2).is_err());
        assert!(time_stretch_magnitude(&Spectrogram::default(), 1.0).is_err());
    }
}
