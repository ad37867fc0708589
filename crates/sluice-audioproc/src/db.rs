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
    for v in x.iter_mut() {
        *v = (*v + eps).ln();
    }
    Ok(())
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
