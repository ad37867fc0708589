//! Log compression: decibels (librosa's `power_to_db` / `amplitude_to_db`) and natural log.
//!
//! All functions work in place on a flat slice (any spectrogram's `as_mut_slice()`), so the
//! last step of a feature pipeline allocates nothing.

use crate::error::{invalid, Result};

/// The reference level that maps to 0 dB.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DbRef {
    /// A fixed reference (`ref=1.0` is librosa's default); its absolute value is used.
    Value(f32),
    /// The maximum of the input (`ref=np.max`), so the loudest bin is 0 dB.
    Max,
}

impl Default for DbRef {
    /// librosa's default, `ref=1.0`.
    fn default() -> Self {
        DbRef::Value(1.0)
    }
}

impl DbRef {
    fn resolve(self, x: &[f32], amplitude: bool) -> f32 {
        match self {
            DbRef::Value(v) => v.abs(),
            DbRef::Max => {
                let m = x.iter().fold(f32::NEG_INFINITY, |m, &v| {
                    m.max(if amplitude { v.abs() } else { v })
                });
                if m.is_finite() {
                    m
                } else {
                    0.0
                }
            }
        }
    }
}

/// Power to decibels in place, as `librosa.power_to_db(S, ref=reference, amin=amin,
/// top_db=top_db)`:
/// `10·log10(max(amin, S)) - 10·log10(max(amin, ref))`, then, if `top_db` is given, values
/// more than `top_db` below the maximum are raised to `max - top_db`. Computed in `f32` like
/// librosa on `float32` input. librosa's defaults are `DbRef::Value(1.0)`, `amin = 1e-10`,
/// `top_db = Some(80.0)`.
///
/// Errors when `amin <= 0` or `top_db < 0` (librosa's `ParameterError`s).
///
/// ```
/// use sluice_audioproc::{power_to_db, DbRef};
/// let mut s = vec![1.0f32, 100.0, 1e-12];
/// power_to_db(&mut s, DbRef::Value(1.0), 1e-10, Some(80.0)).unwrap();
/// assert_eq!(s, vec![0.0, 20.0, -60.0]); // -100 dB clipped to max - 80
/// ```
pub fn power_to_db(x: &mut [f32], reference: DbRef, amin: f32, top_db: Option<f32>) -> Result<()> {
    check(amin, top_db)?;
    let ref_value = reference.resolve(x, false);
    db_in_place(x, ref_value, amin, top_db);
    Ok(())
}

/// Amplitude (magnitude) to decibels in place, as `librosa.amplitude_to_db(S, ref=reference,
/// amin=amin, top_db=top_db)`: `power_to_db(|S|², ref², amin², top_db)`, i.e.
/// `20·log10(max(amin, |S|) / ref)`. librosa's defaults are `DbRef::Value(1.0)`,
/// `amin = 1e-5`, `top_db = Some(80.0)`.
///
/// ```
/// use sluice_audioproc::{amplitude_to_db, DbRef};
/// let mut s = vec![10.0f32, -0.1];
/// amplitude_to_db(&mut s, DbRef::Value(1.0), 1e-5, None).unwrap();
/// assert!((s[0] - 20.0).abs() < 1e-5 && (s[1] + 20.0).abs() < 1e-5);
/// ```
pub fn amplitude_to_db(
    x: &mut [f32],
    reference: DbRef,
    amin: f32,
    top_db: Option<f32>,
) -> Result<()> {
    check(amin, top_db)?;
    let ref_value = reference.resolve(x, true);
    for v in x.iter_mut() {
        *v = *v * *v;
    }
    db_in_place(x, ref_value * ref_value, amin * amin, top_db);
    Ok(())
}

/// Natural log in place: `x ← ln(x + eps)`.
///
/// The usual final step of ASR features (e.g. `torch.log(mel + 1e-6)`); `eps > 0` keeps
/// masked (zero) bins finite. Unlike the dB functions it has no clipping and no reference.
/// Errors unless `eps` is finite and `>= 0` (with `eps = 0` zeros become `-inf`).
///
/// ```
/// let mut s = vec![0.0f32, std::f32::consts::E - 1e-6];
/// sluice_audioproc::log(&mut s, 1e-6).unwrap();
/// assert!((s[0] - (1e-6f32).ln()).abs() < 1e-4 && (s[1] - 1.0).abs() < 1e-6);
/// ```
pub fn log(x: &mut [f32], eps: f32) -> Result<()> {
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(invalid!("log eps must be finite and >= 0, got {eps}"));
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: this CPU has AVX2 (checked just above).
        unsafe { ln_avx2(x, eps) };
        return Ok(());
    }
    ln_in_place(x, eps);
    Ok(())
}

/// [`ln_in_place`] compiled for AVX2: 8 values per instruction instead of SSE's 4. No FMA,
/// so the results are the same bits as on a CPU without AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn ln_avx2(x: &mut [f32], eps: f32) {
    ln_in_place(x, eps)
}

/// `x ← ln(x + eps)`. Positive normal numbers take [`ln_normal`], in a plain loop that
/// vectorises; a slice holding a zero, subnormal, negative, infinity or NaN (after adding
/// eps) takes the library's `ln` throughout. The test is one pass without branches: positive
/// and normal means a biased exponent of 1..=254 and the sign bit clear.
#[inline(always)]
fn ln_in_place(x: &mut [f32], eps: f32) {
    let special = x.iter().fold(false, |any, v| {
        any | ((*v + eps).to_bits().wrapping_sub(0x0080_0000) >= 0x7f00_0000)
    });
    if special {
        for v in x.iter_mut() {
            *v = (*v + eps).ln();
        }
    } else {
        for v in x.iter_mut() {
            *v = ln_normal(*v + eps);
        }
    }
}

/// `ln(x)` for a positive normal `x`, within 2 ulp of the correctly rounded value (Cephes'
/// `logf`: `x = m·2^e` with `m` in [√½, √2), `ln(1+f)` for `f = m − 1` by a degree-9
/// polynomial, `e·ln 2` added in two parts). Branch-free, so [`log`]'s loop compiles to
/// SIMD instead of a library call per value.
#[inline(always)]
fn ln_normal(x: f32) -> f32 {
    const SQRT_HALF: f32 = std::f32::consts::FRAC_1_SQRT_2;
    let bits = x.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126;
    // The mantissa as a number in [0.5, 1).
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000);
    let small = m < SQRT_HALF;
    e -= i32::from(small);
    m = if small { m + m } else { m };
    let f = m - 1.0;
    let e = e as f32;
    let z = f * f;
    let mut y = 7.037_683_6e-2_f32;
    y = y * f - 1.151_461e-1;
    y = y * f + 1.167_699_9e-1;
    y = y * f - 1.242_014_1e-1;
    y = y * f + 1.424_932_3e-1;
    y = y * f - 1.666_805_8e-1;
    y = y * f + 2.000_071_5e-1;
    y = y * f - 2.499_999_4e-1;
    y = y * f + 3.333_333e-1;
    y *= f * z;
    y += -2.121_944_4e-4 * e;
    y += -0.5 * z;
    f + y + 0.693_359_4 * e
}

fn check(amin: f32, top_db: Option<f32>) -> Result<()> {
    if !(amin.is_finite() && amin > 0.0) {
        return Err(invalid!("amin must be strictly positive, got {amin}"));
    }
    if let Some(t) = top_db {
        if t.is_nan() || t < 0.0 {
            return Err(invalid!("top_db must be non-negative, got {t}"));
        }
    }
    Ok(())
}

fn db_in_place(x: &mut [f32], ref_value: f32, amin: f32, top_db: Option<f32>) {
    let offset = 10.0 * amin.max(ref_value).log10();
    let mut max = f32::NEG_INFINITY;
    for v in x.iter_mut() {
        *v = 10.0 * amin.max(*v).log10() - offset;
        max = max.max(*v);
    }
    if let Some(t) = top_db {
        let floor = max - t;
        for v in x.iter_mut() {
            *v = v.max(floor);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "timing: cargo test -p sluice-audioproc --profile dev-release -- --ignored --nocapture"]
    fn log_speed() {
        let mut x: Vec<f32> = (0..33_000).map(|i| 1e-3 + i as f32 * 0.37).collect();
        let t = std::time::Instant::now();
        for _ in 0..1000 {
            log(&mut x, 1e-6).unwrap();
            x.iter_mut().for_each(|v| *v = v.abs() + 1.0);
        }
        let fast = t.elapsed().as_secs_f64() / 33e6 * 1e9;
        let t = std::time::Instant::now();
        for _ in 0..1000 {
            x.iter_mut().for_each(|v| *v = (*v + 1e-6).ln().abs() + 1.0);
        }
        let lib = t.elapsed().as_secs_f64() / 33e6 * 1e9;
        println!("log: {fast:.2} ns per value (incl. a refill pass); f32::ln loop {lib:.2} ns");
    }

    #[test]
    fn log_matches_the_library_ln_within_two_ulp_everywhere() {
        // Every exponent, many mantissas, and the special values the fast path leaves to
        // `f32::ln` (zero, subnormal, negative, infinite, NaN) mixed into the same chunks.
        let mut xs: Vec<f32> = (0..200_000u32)
            .map(|i| f32::from_bits(0x0080_0000 + i.wrapping_mul(10_651)))
            .filter(|v| v.is_finite())
            .collect();
        let specials = [
            0.0,
            -0.0,
            1e-45,
            1e-39,
            -1.0,
            f32::INFINITY,
            f32::NAN,
            1.0,
            2.0,
            0.5,
        ];
        // Positive normal values alone take the polynomial; with a special value in the
        // slice, the library's ln throughout.
        let mut got = xs.clone();
        log(&mut got, 0.0).unwrap();
        let mut with_specials = xs.clone();
        with_specials.extend(specials);
        let mut got_lib = with_specials.clone();
        log(&mut got_lib, 0.0).unwrap();
        assert!(xs
            .iter()
            .zip(&got_lib)
            .all(|(x, g)| g.to_bits() == x.ln().to_bits()));
        xs.extend(specials);
        got.extend(&got_lib[got.len()..]);
        for (&x, &g) in xs.iter().zip(&got) {
            let want = x.ln();
            if want.is_nan() {
                assert!(g.is_nan(), "ln({x:e}) = {g}, want NaN");
            } else if want.is_infinite() || want == 0.0 {
                assert_eq!(g, want, "ln({x:e})");
            } else {
                let ulp = (g.to_bits() as i64 - want.to_bits() as i64).abs();
                assert!(
                    ulp <= 2,
                    "ln({x:e}) = {g:e}, library {want:e}: {ulp} ulp apart"
                );
            }
        }
        // eps is added before the log, on the fast path and the remainder alike.
        let mut v = vec![0.0f32; 19];
        log(&mut v, 1e-6).unwrap();
        assert!(v.iter().all(|&y| (y - 1e-6f32.ln()).abs() <= 2e-6), "{v:?}");
    }

    #[test]
    fn power_to_db_reference_and_clipping() {
        let mut s = vec![4.0f32, 2.0, 0.0];
        power_to_db(&mut s, DbRef::Max, 1e-10, None).unwrap();
        assert!((s[0]).abs() < 1e-6);
        assert!((s[1] + 3.0103).abs() < 1e-3);
        assert!((s[2] + 106.0206).abs() < 1e-3); // 10 log10(1e-10 / 4)
        let mut s = vec![1.0f32, 0.0];
        power_to_db(&mut s, DbRef::Value(1.0), 1e-10, Some(30.0)).unwrap();
        assert_eq!(s, vec![0.0, -30.0]);
        // A reference below amin is floored to amin.
        let mut s = vec![1.0f32];
        power_to_db(&mut s, DbRef::Value(0.0), 1e-10, None).unwrap();
        assert!((s[0] - 100.0).abs() < 1e-3);
    }

    #[test]
    fn amplitude_is_twenty_log() {
        let mut a = vec![0.5f32, 2.0, 0.0];
        let mut p: Vec<f32> = a.iter().map(|v| v * v).collect();
        amplitude_to_db(&mut a, DbRef::Value(2.0), 1e-5, Some(80.0)).unwrap();
        power_to_db(&mut p, DbRef::Value(4.0), 1e-10, Some(80.0)).unwrap();
        for (x, y) in a.iter().zip(&p) {
            assert!((x - y).abs() < 1e-5);
        }
        assert!((a[0] + 12.0412).abs() < 1e-3);
    }

    #[test]
    fn parameter_errors() {
        let mut s = vec![1.0f32];
        assert!(power_to_db(&mut s, DbRef::Max, 0.0, None).is_err());
        assert!(power_to_db(&mut s, DbRef::Max, 1e-10, Some(-1.0)).is_err());
        assert!(power_to_db(&mut s, DbRef::Max, 1e-10, Some(f32::NAN)).is_err());
        assert!(amplitude_to_db(&mut s, DbRef::Max, -1.0, None).is_err());
        assert!(log(&mut s, -1.0).is_err());
        assert!(log(&mut s, f32::INFINITY).is_err());
        // Empty input is fine.
        power_to_db(&mut [], DbRef::Max, 1e-10, Some(80.0)).unwrap();
    }

    #[test]
    fn natural_log() {
        let mut s = vec![1.0f32, 0.0];
        log(&mut s, 0.0).unwrap();
        assert_eq!(s[0], 0.0);
        assert_eq!(s[1], f32::NEG_INFINITY);
    }
}
