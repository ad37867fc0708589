//! Runtime CPU dispatch for the hot loops.
//!
//! The kernels are plain Rust loops written so LLVM can vectorise them
//! (branch-free, structure-of-arrays blocks). Compiled for the x86-64
//! baseline they only get SSE2, and `floor`/`round` become libm calls; the
//! `multiversion!` macro compiles the same body twice more, with AVX2 and with
//! AVX-512 (twice the lanes; on a core with full-width AVX-512 units, such as AMD
//! Zen 5, the hue kernel takes ~40% less time than with AVX2), and picks one at run
//! time. No `mul_add` is used anywhere, so every version rounds identically
//! (LLVM does not contract float ops on its own) and results do not depend on the
//! CPU.

/// Defines `fn $name(args) -> ret` three times (baseline, AVX2+FMA,
/// AVX-512) and dispatches on the running CPU.
macro_rules! multiversion {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn inner($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    inner($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    inner($($arg),*)
                }
                if $crate::simd::use_avx512() {
                    // SAFETY: the CPU supports the features `avx512` was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if $crate::simd::use_avx2() {
                    // SAFETY: the CPU supports the features `avx2` was compiled for.
                    return unsafe { avx2($($arg),*) };
                }
            }
            inner($($arg),*)
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
thread_local! {
    /// Tests flip this to run the baseline versions on an AVX2 machine.
    pub(crate) static FORCE_BASELINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests flip this to run the AVX2 versions on an AVX-512 machine.
    pub(crate) static FORCE_AVX2: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` once per code path this CPU can take (AVX-512, AVX2, baseline), named, for
/// tests that check every path gives the same bytes.
#[cfg(test)]
pub(crate) fn for_each_path(mut f: impl FnMut(&str)) {
    for (name, avx2, baseline) in [
        ("best", false, false),
        ("avx2", true, false),
        ("baseline", false, true),
    ] {
        FORCE_AVX2.with(|c| c.set(avx2));
        FORCE_BASELINE.with(|c| c.set(baseline));
        f(name);
    }
    FORCE_AVX2.with(|c| c.set(false));
    FORCE_BASELINE.with(|c| c.set(false));
}

/// The widest kernels this process may take: what the CPU has, capped by the `SLUICE_SIMD`
/// environment variable (`avx512`, `avx2` or `baseline`), read once. Every kernel gives the
/// same bytes on every path, so the cap changes speed only: one machine can run what a CPU
/// without AVX-512 (or AVX2) runs, to measure that path. Only these image kernels take
/// AVX-512; the JPEG and MP3 decoders, the FFTs and the audio `log` take AVX2 at most and
/// dispatch on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Simd {
    /// The x86-64 baseline (SSE2).
    Baseline,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 (F, BW, VL, DQ).
    Avx512,
}

/// The cap `SLUICE_SIMD` sets for this process (read on the first call).
///
/// ```
/// assert!(sluice_imgproc::simd_ceiling() >= sluice_imgproc::Simd::Baseline);
/// ```
pub fn simd_ceiling() -> Simd {
    static CEILING: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
    *CEILING.get_or_init(|| parse_ceiling(std::env::var("SLUICE_SIMD").ok().as_deref()))
}

/// The cap a value of `SLUICE_SIMD` sets; unset, empty or unknown (said once on stderr):
/// none.
fn parse_ceiling(value: Option<&str>) -> Simd {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("avx512") => Simd::Avx512,
        Some("avx2") => Simd::Avx2,
        Some("baseline") | Some("sse2") => Simd::Baseline,
        Some(other) => {
            eprintln!("sluice: SLUICE_SIMD=\"{other}\" is not avx512, avx2 or baseline; ignored");
            Simd::Avx512
        }
    }
}

/// Whether to take the AVX2+FMA versions (cached by std's detection), unless
/// [`simd_ceiling`] is lower.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn use_avx2() -> bool {
    #[cfg(test)]
    if FORCE_BASELINE.with(|f| f.get()) {
        return false;
    }
    simd_ceiling() >= Simd::Avx2
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
}

/// Whether to take the AVX-512 versions.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn use_avx512() -> bool {
    #[cfg(test)]
    if FORCE_AVX2.with(|f| f.get()) {
        return false;
    }
    use_avx2()
        && simd_ceiling() >= Simd::Avx512
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512dq")
}

/// Round half to even for `0 <= x < 2^22` (torch's `round_`) without a
/// libm call: adding 1.5 * 2^23 leaves no fraction bits, so the FPU's
/// default round-to-nearest-even does the rounding.
#[inline(always)]
pub(crate) fn round_even_small(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (x + MAGIC) - MAGIC
}

/// `x as u8` (truncate toward zero, saturate to 0..=255, NaN -> 0) in a
/// form LLVM vectorises: the saturating `as` cast from f32 to u8 is
/// scalarised (one min/max/convert/insert per lane), clamp-then-convert
/// becomes a handful of vector instructions.
#[inline(always)]
pub(crate) fn sat_u8(x: f32) -> u8 {
    // Not `clamp`: that keeps NaN, and NaN must become 0 before the
    // unchecked conversion. `max` returns the non-NaN operand.
    #[allow(clippy::manual_clamp)]
    let c = x.max(0.0).min(255.0);
    // SAFETY: `c` is finite and in [0, 255], representable in i32.
    (unsafe { c.to_int_unchecked::<i32>() }) as u8
}

/// Pixels per structure-of-arrays block in the colour kernels.
pub(crate) const BLOCK: usize = 64;

/// De-interleaves up to [`BLOCK`] RGB pixels into three float arrays;
/// returns the pixel count.
#[inline(always)]
pub(crate) fn load_rgb(
    chunk: &[u8],
    r: &mut [f32; BLOCK],
    g: &mut [f32; BLOCK],
    b: &mut [f32; BLOCK],
) -> usize {
    let mut n = 0;
    for (p, ((r, g), b)) in chunk
        .chunks_exact(3)
        .zip(r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()))
    {
        *r = f32::from(p[0]);
        *g = f32::from(p[1]);
        *b = f32::from(p[2]);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sluice_simd_values_set_the_cap_and_unknown_ones_set_none() {
        assert_eq!(parse_ceiling(None), Simd::Avx512);
        assert_eq!(parse_ceiling(Some("")), Simd::Avx512);
        assert_eq!(parse_ceiling(Some("AVX512")), Simd::Avx512);
        assert_eq!(parse_ceiling(Some(" avx2 ")), Simd::Avx2);
        assert_eq!(parse_ceiling(Some("baseline")), Simd::Baseline);
        assert_eq!(parse_ceiling(Some("sse2")), Simd::Baseline);
        assert_eq!(parse_ceiling(Some("neon")), Simd::Avx512);
        assert!(Simd::Baseline < Simd::Avx2 && Simd::Avx2 < Simd::Avx512);
    }

    #[test]
    fn sat_u8_matches_as_cast() {
        for x in [
            -1e30f32, -300.0, -1.0, -0.5, 0.0, 0.3, 1.999, 127.5, 254.99, 255.0, 255.5, 1e9,
        ] {
            assert_eq!(sat_u8(x), x as u8, "{x}");
        }
        assert_eq!(sat_u8(f32::NAN), 0);
        assert_eq!(sat_u8(f32::INFINITY), 255);
        assert_eq!(sat_u8(f32::NEG_INFINITY), 0);
    }

    #[test]
    fn round_even_matches_std() {
        for i in -20..600 {
            let x = i as f32 * 0.5;
            assert_eq!(round_even_small(x), x.round_ties_even(), "{x}");
            let y = i as f32 * 0.37 + 0.001;
            assert_eq!(round_even_small(y), y.round_ties_even(), "{y}");
        }
    }
}
