//! Gaussian blur with torchvision's kernel, padding and rounding.

use crate::error::{invalid, Result};
use crate::image::Image;
use crate::simd::{multiversion, round_even_small, sat_u8};

/// torchvision's 1-D Gaussian (`_get_gaussian_kernel1d`): `softmax(-(x/σ)²)`
/// over `x = linspace(-lim, lim, k)`, `lim = (k-1)/(2√2)`, i.e.
/// `exp(-i²/(2σ²))` at integer offsets `i`, normalised to sum 1.
pub fn gaussian_kernel1d(ksize: usize, sigma: f64) -> Result<Vec<f32>> {
    if ksize == 0 || ksize % 2 == 0 {
        return invalid(format!("kernel size must be odd and positive, got {ksize}"));
    }
    if !(sigma.is_finite() && sigma > 0.0) {
        return invalid(format!("sigma must be finite and > 0, got {sigma}"));
    }
    let lim = (ksize as f64 - 1.0) / (2.0 * std::f64::consts::SQRT_2);
    let step = if ksize > 1 {
        2.0 * lim / (ksize as f64 - 1.0)
    } else {
        0.0
    };
    let e: Vec<f64> = (0..ksize)
        .map(|i| {
            let x = -lim + step * i as f64;
            -(x / sigma).powi(2)
        })
        .collect();
    let m = e.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let ex: Vec<f64> = e.iter().map(|v| (v - m).exp()).collect();
    let s: f64 = ex.iter().sum();
    Ok(ex.iter().map(|v| (v / s) as f32).collect())
}

/// torch `reflect` padding index (edge pixel not repeated), generalised to
/// pads wider than the image by bouncing back and forth. torchvision raises
/// there instead; bouncing keeps tiny images usable.
#[inline]
fn reflect(i: isize, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let period = 2 * (n as isize - 1);
    let m = i.rem_euclid(period);
    (if m < n as isize { m } else { period - m }) as usize
}

/// Separable Gaussian blur matching torchvision `gaussian_blur` on uint8:
/// reflect padding, float32 convolution, round-half-to-even back to uint8.
/// `kernel` and `sigma` are `(height, width)` / `(sigma_y, sigma_x)` —
/// note torchvision's own argument order is `[kx, ky]`.
///
/// Cost is `O(kh + kw)` per sample: a horizontal pass into a float32
/// scratch image, then a vertical pass, each a contiguous multiply-add over
/// whole rows that the compiler vectorises (symmetric taps are folded so
/// each pass does about half the multiplies).
///
/// ```
/// use sluice_imgproc::{gaussian_blur, Image};
/// let img = Image::new(3, 3, 1, vec![0, 0, 0, 0, 255, 0, 0, 0, 0]).unwrap();
/// let b = gaussian_blur(&img, (3, 3), (1.0, 1.0)).unwrap();
/// assert!(b.pixel(1, 1)[0] < 255 && b.pixel(0, 0)[0] > 0);
/// ```
pub fn gaussian_blur(img: &Image, kernel: (usize, usize), sigma: (f64, f64)) -> Result<Image> {
    img.validate()?;
    let ky = gaussian_kernel1d(kernel.0, sigma.0)?;
    let kx = gaussian_kernel1d(kernel.1, sigma.1)?;
    let (h, w, c) = (img.height, img.width, img.channels);
    if img.data.is_empty() {
        return Ok(img.clone());
    }
    let (kx, ky) = (significant_taps(&kx), significant_taps(&ky));
    // Worth the check and the copies only when the kernel is not tiny.
    if c == 3 && kx.len() + ky.len() > 6 && is_replicated_gray(&img.data) {
        // Typical after RandomGrayscale(num_output_channels=3): the three
        // channels would go through identical float ops, so blur one and
        // copy it (bit-identical, a third of the work).
        let gray: Vec<u8> = img.data.iter().step_by(3).copied().collect();
        let mut out = vec![0u8; gray.len()];
        blur_kernel(&gray, h, w, 1, kx, ky, &mut out);
        return Image::new(h, w, 3, crate::convert::gray_to_rgb_buf(&out));
    }
    let mut data = vec![0u8; img.data.len()];
    blur_kernel(&img.data, h, w, c, kx, ky, &mut data);
    Image::new(h, w, c, data)
}

/// Weight below which a tap pair is dropped. torchvision keeps all taps of
/// the requested size, but for small sigmas the outer weights are ~1e-12:
/// their contribution (< 255 * 2 * 1e-10 = 5e-8 levels) is far below the
/// float32 resolution of the sums, so dropping them can only change a
/// result that lands within 5e-8 of a rounding boundary. It makes
/// sigma = 0.5 with kernel 23 cost like kernel 7.
const NEGLIGIBLE_TAP: f32 = 1e-10;

/// The centred sub-slice of a symmetric kernel without negligible ends.
fn significant_taps(k: &[f32]) -> &[f32] {
    let r = k.len() / 2;
    let drop = k
        .iter()
        .take(r)
        .take_while(|&&v| v < NEGLIGIBLE_TAP)
        .count();
    &k[drop..k.len() - drop]
}

/// True if every pixel has R == G == B.
fn is_replicated_gray(data: &[u8]) -> bool {
    data.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2])
}

multiversion! {
    fn blur_kernel(src: &[u8], h: usize, w: usize, c: usize, kx: &[f32], ky: &[f32], dst: &mut [u8]) {
        let rw = kx.len() / 2;
        let rh = ky.len() / 2;
        let stride = w * c;

        // Horizontal pass: u8 row -> padded f32 row -> f32 scratch row.
        let mut tmp = vec![0f32; h * stride];
        let mut padded = vec![0f32; (w + 2 * rw) * c];
        for (row, out) in src.chunks_exact(stride).zip(tmp.chunks_exact_mut(stride)) {
            // Interior: a straight conversion; only the margins reflect.
            for (p, &v) in padded[rw * c..(rw + w) * c].iter_mut().zip(row) {
                *p = f32::from(v);
            }
            for x in 0..rw {
                let l = reflect(x as isize - rw as isize, w);
                let r = reflect((w + x) as isize, w);
                for ch in 0..c {
                    padded[x * c + ch] = f32::from(row[l * c + ch]);
                    padded[(rw + w + x) * c + ch] = f32::from(row[r * c + ch]);
                }
            }
            convolve_row(&padded, kx, c, out);
        }

        // Vertical pass: for each output row gather the source rows once,
        // then accumulate LANES columns at a time in registers.
        let mut rows_up = vec![0usize; rh];
        let mut rows_dn = vec![0usize; rh];
        for (y, out) in dst.chunks_exact_mut(stride).enumerate() {
            for k in 0..rh {
                let d = (rh - k) as isize;
                rows_up[k] = reflect(y as isize - d, h) * stride;
                rows_dn[k] = reflect(y as isize + d, h) * stride;
            }
            let centre = y * stride;
            let kc = ky[rh];
            let mut i = 0;
            while i + LANES <= stride {
                let mut acc = [0f32; LANES];
                let cv = &tmp[centre + i..centre + i + LANES];
                for l in 0..LANES {
                    acc[l] = kc * cv[l];
                }
                for k in 0..rh {
                    let kk = ky[k];
                    let u = &tmp[rows_up[k] + i..rows_up[k] + i + LANES];
                    let dv = &tmp[rows_dn[k] + i..rows_dn[k] + i + LANES];
                    for l in 0..LANES {
                        acc[l] += kk * (u[l] + dv[l]);
                    }
                }
                let o = &mut out[i..i + LANES];
                for l in 0..LANES {
                    // torch: output.round_().to(uint8), half to even.
                    o[l] = sat_u8(round_even_small(acc[l]));
                }
                i += LANES;
            }
            for (l, o) in out.iter_mut().enumerate().skip(i) {
                let mut a = kc * tmp[centre + l];
                for k in 0..rh {
                    a += ky[k] * (tmp[rows_up[k] + l] + tmp[rows_dn[k] + l]);
                }
                *o = sat_u8(round_even_small(a));
            }
        }
    }
}

/// Columns accumulated together in registers (two AVX2 vectors).
const LANES: usize = 16;

/// `out[i] = Σ_k k[k] * padded[i + k*c]` for a symmetric kernel, folding
/// the mirrored taps (`k[j] * (a + b)`) and keeping [`LANES`] outputs in
/// registers across all taps. The summation order (centre first, then
/// outer to inner pairs) is the same in the vector and tail paths.
#[inline(always)]
fn convolve_row(padded: &[f32], k: &[f32], c: usize, out: &mut [f32]) {
    let r = k.len() / 2;
    let n = out.len();
    let kc = k[r];
    let mut i = 0;
    while i + LANES <= n {
        let mut acc = [0f32; LANES];
        let cv = &padded[r * c + i..r * c + i + LANES];
        for l in 0..LANES {
            acc[l] = kc * cv[l];
        }
        for (j, &kk) in k.iter().enumerate().take(r) {
            let a = &padded[j * c + i..j * c + i + LANES];
            let b = &padded[(2 * r - j) * c + i..(2 * r - j) * c + i + LANES];
            for l in 0..LANES {
                acc[l] += kk * (a[l] + b[l]);
            }
        }
        out[i..i + LANES].copy_from_slice(&acc);
        i += LANES;
    }
    for (idx, o) in out.iter_mut().enumerate().skip(i) {
        let mut a = kc * padded[r * c + idx];
        for (j, &kk) in k.iter().enumerate().take(r) {
            a += kk * (padded[j * c + idx] + padded[(2 * r - j) * c + idx]);
        }
        *o = a;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_matches_torchvision_values() {
        // torchvision _get_gaussian_kernel1d(3, 1.0) = [0.2741, 0.4519, 0.2741]
        let k = gaussian_kernel1d(3, 1.0).unwrap();
        assert!((k[0] - 0.274_068_6).abs() < 1e-6, "{k:?}");
        assert!((k[1] - 0.451_862_8).abs() < 1e-6);
        let k = gaussian_kernel1d(23, 2.0).unwrap();
        assert!((k.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        assert_eq!(k[0], k[22]);
        assert!(gaussian_kernel1d(4, 1.0).is_err());
        assert!(gaussian_kernel1d(0, 1.0).is_err());
        assert!(gaussian_kernel1d(3, 0.0).is_err());
    }

    #[test]
    fn trimming_and_gray_shortcut() {
        let k = gaussian_kernel1d(23, 0.5).unwrap();
        let t = significant_taps(&k);
        assert!(t.len() < 23 && t.len() % 2 == 1 && t[t.len() / 2] == k[11]);
        let k2 = gaussian_kernel1d(23, 2.0).unwrap();
        assert_eq!(significant_taps(&k2).len(), 23);
        // Gray replicated into RGB takes the one-channel path; same result
        // as blurring the gray image.
        let g: Vec<u8> = (0..11 * 9).map(|i| ((i * 37) % 256) as u8).collect();
        let gray = Image::new(11, 9, 1, g.clone()).unwrap();
        let rgb = Image::new(11, 9, 3, crate::convert::gray_to_rgb_buf(&g)).unwrap();
        let a = gaussian_blur(&gray, (5, 7), (1.1, 2.0)).unwrap();
        let b = gaussian_blur(&rgb, (5, 7), (1.1, 2.0)).unwrap();
        assert_eq!(crate::convert::gray_to_rgb_buf(&a.data), b.data);
    }

    #[test]
    fn reflect_indices() {
        let r: Vec<usize> = (-3..8).map(|i| reflect(i, 5)).collect();
        assert_eq!(r, vec![3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1]);
        assert_eq!(reflect(-7, 1), 0);
        assert_eq!(reflect(-5, 2), 1);
    }

    #[test]
    fn every_code_path_agrees() {
        let data: Vec<u8> = (0..13 * 37 * 3).map(|i| ((i * 97) % 256) as u8).collect();
        let img = Image::new(13, 37, 3, data).unwrap();
        let a = gaussian_blur(&img, (23, 9), (3.0, 1.2)).unwrap();
        crate::simd::for_each_path(|path| {
            let b = gaussian_blur(&img, (23, 9), (3.0, 1.2)).unwrap();
            assert_eq!(a, b, "{path}");
        });
    }

    #[test]
    fn constant_image_unchanged_and_tiny_images_ok() {
        let img = Image::new(4, 5, 3, vec![123; 60]).unwrap();
        assert_eq!(gaussian_blur(&img, (23, 23), (3.0, 3.0)).unwrap(), img);
        let one = Image::new(1, 1, 1, vec![9]).unwrap();
        assert_eq!(gaussian_blur(&one, (23, 23), (3.0, 3.0)).unwrap(), one);
    }
}
