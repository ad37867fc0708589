//! Image quality against a reference: how the scaled (DCT) decode paths are held to their
//! 35 dB bound in tests, examples and benchmarks.

/// Peak signal-to-noise ratio of 8-bit pixels `a` against `b`, in dB (infinite when equal).
///
/// ```
/// use sluice_imgproc::psnr;
/// assert_eq!(psnr(&[10, 20], &[10, 20]), f64::INFINITY);
/// assert!((psnr(&[0, 0], &[0, 1]) - 51.14).abs() < 0.01);
/// ```
///
/// # Panics
/// If the buffers differ in length.
pub fn psnr(a: &[u8], b: &[u8]) -> f64 {
    assert_eq!(a.len(), b.len(), "psnr of buffers of different lengths");
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / a.len().max(1) as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}
