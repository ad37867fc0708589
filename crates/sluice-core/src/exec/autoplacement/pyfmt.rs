//! Numbers written the way Python's format specs write them (`.1f`, `+.1%`, `.0%`, `g`), so
//! the reasons of [`super::Decision`]s read exactly as they did when the state machine was
//! Python: users grep logs and stats for them.

/// `format(x, f".{prec}f")`. Rust already rounds half to even on the exact binary value, as
/// Python does; only NaN is spelt differently.
pub(super) fn fixed(x: f64, prec: usize) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    format!("{x:.prec$}")
}

/// `format(x, f"+.{prec}f")`: always a sign (Python writes `+nan`, Rust `NaN`).
fn signed(x: f64, prec: usize) -> String {
    if x.is_nan() {
        return "+nan".into();
    }
    format!("{x:+.prec$}")
}

/// `format(x, f".{prec}%")`: Python multiplies by 100 in floating point first, as here.
pub(super) fn percent(x: f64, prec: usize) -> String {
    format!("{}%", fixed(x * 100.0, prec))
}

/// `format(x, f"+.{prec}%")`.
pub(super) fn signed_percent(x: f64, prec: usize) -> String {
    format!("{}%", signed(x * 100.0, prec))
}

/// `format(x, "g")`: 6 significant digits, fixed notation for exponents in -4..6, else
/// `d.ddde+XX`; trailing zeros (and a bare point) removed.
pub(super) fn general(x: f64) -> String {
    const DIGITS: i32 = 6;
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // The exponent after rounding to 6 digits decides the notation (999999.5 is 1e+06).
    let sci = format!("{x:.prec$e}", prec = (DIGITS - 1) as usize);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..DIGITS).contains(&exp) {
        let prec = (DIGITS - 1 - exp) as usize;
        return strip_zeros(&format!("{x:.prec$}")).to_string();
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.unsigned_abs())
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// `round(x, 4)`: correctly rounded to 4 decimals, half to even on the exact binary value.
pub(super) fn round4(x: f64) -> f64 {
    format!("{x:.4}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected strings are what CPython 3 prints for the same format spec.
    #[test]
    fn fixed_and_percent_match_python() {
        assert_eq!(fixed(100.0, 1), "100.0");
        assert_eq!(fixed(0.25, 1), "0.2");
        assert_eq!(fixed(0.35, 1), "0.3");
        assert_eq!(fixed(2.5, 0), "2");
        assert_eq!(fixed(-0.04, 1), "-0.0");
        assert_eq!(fixed(f64::NAN, 1), "nan");
        assert_eq!(fixed(f64::INFINITY, 1), "inf");
        assert_eq!(fixed(0.4275, 3), "0.427");
        assert_eq!(percent(0.03, 0), "3%");
        assert_eq!(percent(0.10, 0), "10%");
        assert_eq!(percent(0.125, 0), "12%");
        assert_eq!(signed_percent(0.0, 1), "+0.0%");
        assert_eq!(signed_percent(-0.0001, 1), "-0.0%");
        assert_eq!(signed_percent(1.0, 1), "+100.0%");
        assert_eq!(signed_percent(-0.25, 1), "-25.0%");
        assert_eq!(signed_percent(f64::NAN, 1), "+nan%");
        assert_eq!(signed_percent(f64::INFINITY, 1), "+inf%");
    }

    #[test]
    fn general_matches_python() {
        for (x, want) in [
            (250.0, "250"),
            (100.0, "100"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1234567.0, "1.23457e+06"),
            (123456.5, "123456"),
            (999999.5, "1e+06"),
            (-2.5e-7, "-2.5e-07"),
            (0.0, "0"),
            (-0.0, "-0"),
            (f64::NAN, "nan"),
            (f64::NEG_INFINITY, "-inf"),
        ] {
            assert_eq!(general(x), want, "{x}");
        }
    }

    #[test]
    fn round4_rounds_like_python() {
        assert_eq!(round4(0.106_75), 0.1067); // 0.10675 is just below the tie in binary
        assert_eq!(round4(0.053375), 0.0534);
        assert_eq!(round4(2.0), 2.0);
        assert!(round4(f64::NAN).is_nan());
    }
}
