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

/// Source indices of a reflect-padded axis: entry `j` is `reflect(j - r, n)`, for
/// `j` in `0..n + 2r`. Computed once per call: `reflect` divides, and doing that per row
/// and tap cost about as much as a quarter of the convolution.
fn reflect_table(n: usize, r: usize) -> Vec<usize> {
    (0..n + 2 * r)
        .map(|j| reflect(j as isize - r as isize, n))
        .collect()
}

/// Horizontal pass into a float32 scratch image, then the vertical pass. The row
/// kernels are dispatched (and so compiled) each on its own: as separate functions their
/// slice arguments are known not to overlap (inlined into one multiversioned function,
/// row loops ran scalar code behind overlap checks), and the u8 -> f32 widening of a row
/// is vectorised with them.
fn blur_kernel(src: &[u8], h: usize, w: usize, c: usize, kx: &[f32], ky: &[f32], dst: &mut [u8]) {
    let (rw, rh) = (kx.len() / 2, ky.len() / 2);
    let stride = w * c;
    let xs = reflect_table(w, rw);
    let ys = reflect_table(h, rh);
    // The scratch image (600 KB for a 224 px RGB image) is this thread's last one: every
    // row is written before it is read, so it needs no zeroing, nor (as a fresh block this
    // size would) pages from the kernel each time.
    let mut tmp = SCRATCH.with_borrow_mut(std::mem::take);
    if tmp.len() < h * stride {
        tmp.resize(h * stride, 0.0);
    }
    let mut padded = vec![0f32; (w + 2 * rw) * c];
    // The margins' source columns: the left ones, then the right ones.
    let margins: Vec<usize> = xs[..rw].iter().chain(&xs[rw + w..]).copied().collect();
    for (row, out) in src.chunks_exact(stride).zip(tmp.chunks_exact_mut(stride)) {
        horizontal_row(row, &margins, c, kx, &mut padded, out);
    }
    let mut acc = vec![0f32; stride];
    let mut rows = vec![0usize; ky.len()];
    for (y, out) in dst.chunks_exact_mut(stride).enumerate() {
        for (r, &sy) in rows.iter_mut().zip(&ys[y..]) {
            *r = sy * stride;
        }
        vertical_row(&tmp, &rows, ky, &mut acc, out);
    }
    SCRATCH.set(tmp);
}

thread_local! {
    /// [`blur_kernel`]'s scratch image, kept for the thread's next call.
    static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

multiversion! {
    /// One row of the horizontal pass: `row` widened to float32 into `padded` with
    /// reflected margins (source columns `margins`, left then right), then
    /// `out[i] = Σ_k k[k] * padded[i + k*c]` ([`fold_taps`]).
    fn horizontal_row(
        row: &[u8],
        margins: &[usize],
        c: usize,
        k: &[f32],
        padded: &mut [f32],
        out: &mut [f32],
    ) {
        let r = k.len() / 2;
        let w = row.len() / c;
        for (p, &v) in padded[r * c..(r + w) * c].iter_mut().zip(row) {
            *p = f32::from(v);
        }
        for (x, &sx) in margins.iter().enumerate() {
            let at = if x < r { x } else { x + w } * c;
            for ch in 0..c {
                padded[at + ch] = f32::from(row[sx * c + ch]);
            }
        }
        let padded = &*padded;
        fold_taps(k, |t, i| &padded[t * c + i..], out);
    }
}

/// Outputs accumulated together in registers (four AVX-512 vectors, eight AVX2 ones:
/// independent add chains, so the loop is not bound by an add's latency).
const LANES: usize = 32;

/// `out[i] = k[r] * src(r, i)[0] + Σ_{j<r} k[j] * (src(j, i)[0] + src(2r - j, i)[0])`: a
/// symmetric kernel with its mirrored taps folded, `src(t, i)` being tap `t`'s samples from
/// output `i` on. Centre first, then outer to inner pairs, in the blocks and in the tail.
#[inline(always)]
fn fold_taps<'a>(k: &[f32], src: impl Fn(usize, usize) -> &'a [f32], out: &mut [f32]) {
    let r = k.len() / 2;
    let n = out.len();
    let kc = k[r];
    let mut i = 0;
    while i + LANES <= n {
        let mut acc = [0f32; LANES];
        let cv = &src(r, i)[..LANES];
        for l in 0..LANES {
            acc[l] = kc * cv[l];
        }
        for (j, &kk) in k.iter().enumerate().take(r) {
            let (a, b) = (&src(j, i)[..LANES], &src(2 * r - j, i)[..LANES]);
            for l in 0..LANES {
                acc[l] += kk * (a[l] + b[l]);
            }
        }
        out[i..i + LANES].copy_from_slice(&acc);
        i += LANES;
    }
    for (idx, o) in out.iter_mut().enumerate().skip(i) {
        let mut a = kc * src(r, idx)[0];
        for (j, &kk) in k.iter().enumerate().take(r) {
            a += kk * (src(j, idx)[0] + src(2 * r - j, idx)[0]);
        }
        *o = a;
    }
}

multiversion! {
    /// One output row of the vertical pass: `rows[j]` is where the scratch row for tap `j`
    /// starts; the same order of operations as [`horizontal_row`], then torch's
    /// `round_().to(uint8)` (half to even).
    fn vertical_row(tmp: &[f32], rows: &[usize], k: &[f32], acc: &mut [f32], out: &mut [u8]) {
        fold_taps(k, |t, i| &tmp[rows[t] + i..], acc);
        for (o, &a) in out.iter_mut().zip(acc.iter()) {
            *o = sat_u8(round_even_small(a));
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

    /// Per-sample transcription: reflect each tap's index, centre first, then the folded
    /// pairs outer to inner, horizontal then vertical, half-to-even rounding.
    fn direct(img: &Image, kernel: (usize, usize), sigma: (f64, f64)) -> Vec<u8> {
        let ky = gaussian_kernel1d(kernel.0, sigma.0).unwrap();
        let kx = gaussian_kernel1d(kernel.1, sigma.1).unwrap();
        let (kx, ky) = (significant_taps(&kx), significant_taps(&ky));
        let (h, w, c) = (img.height, img.width, img.channels);
        let fold = |k: &[f32], at: &dyn Fn(isize) -> f32| {
            let r = k.len() / 2;
            let mut a = k[r] * at(0);
            for (j, &kk) in k.iter().enumerate().take(r) {
                let d = (r - j) as isize;
                a += kk * (at(-d) + at(d));
            }
            a
        };
        let mut tmp = vec![0f32; h * w * c];
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    tmp[(y * w + x) * c + ch] = fold(kx, &|d| {
                        f32::from(img.data[(y * w + reflect(x as isize + d, w)) * c + ch])
                    });
                }
            }
        }
        let mut out = vec![0u8; h * w * c];
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    let v = fold(ky, &|d| tmp[(reflect(y as isize + d, h) * w + x) * c + ch]);
                    out[(y * w + x) * c + ch] = v.round_ties_even().clamp(0.0, 255.0) as u8;
                }
            }
        }
        out
    }

    #[test]
    fn row_kernels_match_direct_reference() {
        let shapes = [
            (1, 1, 1),
            (1, 1, 3),
            (2, 3, 1),
            (5, 7, 3),
            (13, 37, 3),
            (40, 45, 1),
        ];
        let kernels = [
            ((23, 23), (2.0, 0.7)),
            ((1, 5), (1.0, 1.5)),
            ((3, 1), (0.4, 1.0)),
        ];
        for &(h, w, c) in &shapes {
            let data: Vec<u8> = (0..h * w * c)
                .map(|i| ((i * 97 + 13) % 256) as u8)
                .collect();
            let img = Image::new(h, w, c, data).unwrap();
            for &(k, s) in &kernels {
                let want = direct(&img, k, s);
                crate::simd::for_each_path(|path| {
                    let got = gaussian_blur(&img, k, s).unwrap();
                    assert_eq!(got.data, want, "{h}x{w}x{c} {k:?} {s:?} {path}");
                });
            }
        }
    }

    #[test]
    fn constant_image_unchanged_and_tiny_images_ok() {
        let img = Image::new(4, 5, 3, vec![123; 60]).unwrap();
        assert_eq!(gaussian_blur(&img, (23, 23), (3.0, 3.0)).unwrap(), img);
        let one = Image::new(1, 1, 1, vec![9]).unwrap();
        assert_eq!(gaussian_blur(&one, (23, 23), (3.0, 3.0)).unwrap(), one);
    }
}
