//! Gaussian blur with torchvision's kernel, padding and rounding.

use crate::error::{invalid, Result};
use crate::image::Image;

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
    let rw = kx.len() / 2;
    let rh = ky.len() / 2;
    let stride = w * c;

    // Horizontal pass: u8 row -> padded f32 row -> f32 scratch row.
    let mut tmp = vec![0f32; h * stride];
    let mut padded = vec![0f32; (w + 2 * rw) * c];
    let xmap: Vec<usize> = (0..w + 2 * rw)
        .map(|x| reflect(x as isize - rw as isize, w))
        .collect();
    for (y, out) in tmp.chunks_exact_mut(stride).enumerate() {
        let row = &img.data[y * stride..(y + 1) * stride];
        for (px, &sx) in xmap.iter().enumerate() {
            for ch in 0..c {
                padded[px * c + ch] = f32::from(row[sx * c + ch]);
            }
        }
        convolve_row(&padded, &kx, c, out);
    }

    // Vertical pass over whole rows of the scratch image.
    let mut data = vec![0u8; h * stride];
    let mut acc = vec![0f32; stride];
    for (y, out) in data.chunks_exact_mut(stride).enumerate() {
        let centre = &tmp[y * stride..(y + 1) * stride];
        let kc = ky[rh];
        for (a, &v) in acc.iter_mut().zip(centre) {
            *a = kc * v;
        }
        for k in 0..rh {
            let d = (rh - k) as isize;
            let up = reflect(y as isize - d, h);
            let dn = reflect(y as isize + d, h);
            let (ru, rd) = (
                &tmp[up * stride..(up + 1) * stride],
                &tmp[dn * stride..(dn + 1) * stride],
            );
            let kk = ky[k];
            for ((a, &u), &dv) in acc.iter_mut().zip(ru).zip(rd) {
                *a += kk * (u + dv);
            }
        }
        for (o, &a) in out.iter_mut().zip(&acc) {
            // torch: output.round_().to(uint8); round half to even.
            *o = a.round_ties_even().clamp(0.0, 255.0) as u8;
        }
    }
    Image::new(h, w, c, data)
}

/// `out[i] = Σ_k k[k] * padded[i + k*c]` for a symmetric kernel.
fn convolve_row(padded: &[f32], k: &[f32], c: usize, out: &mut [f32]) {
    let r = k.len() / 2;
    let n = out.len();
    let centre = &padded[r * c..r * c + n];
    let kc = k[r];
    for (o, &v) in out.iter_mut().zip(centre) {
        *o = kc * v;
    }
    for j in 0..r {
        let left = &padded[j * c..j * c + n];
        let right = &padded[(2 * r - j) * c..(2 * r - j) * c + n];
        let kk = k[j];
        for ((o, &a), &b) in out.iter_mut().zip(left).zip(right) {
            *o += kk * (a + b);
        }
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
    fn reflect_indices() {
        let r: Vec<usize> = (-3..8).map(|i| reflect(i, 5)).collect();
        assert_eq!(r, vec![3, 2, 1, 0, 1, 2, 3, 4, 3, 2, 1]);
        assert_eq!(reflect(-7, 1), 0);
        assert_eq!(reflect(-5, 2), 1);
    }

    #[test]
    fn constant_image_unchanged_and_tiny_images_ok() {
        let img = Image::new(4, 5, 3, vec![123; 60]).unwrap();
        assert_eq!(gaussian_blur(&img, (23, 23), (3.0, 3.0)).unwrap(), img);
        let one = Image::new(1, 1, 1, vec![9]).unwrap();
        assert_eq!(gaussian_blur(&one, (23, 23), (3.0, 3.0)).unwrap(), one);
    }
}
