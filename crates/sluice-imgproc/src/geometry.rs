//! Crop, flip and resize.

use std::cell::RefCell;

use fast_image_resize as fr;

use crate::error::{invalid, ImageError, Result};
use crate::image::{checked_len, Image};

/// Crops rows `top..top+height` and columns `left..left+width`.
///
/// Like torchvision's `crop`, the box may extend past the image (or start
/// at negative coordinates); the part outside is filled with zeros. Use
/// this for `center_crop` of an image smaller than the crop.
///
/// ```
/// use sluice_imgproc::{crop, Image};
/// let img = Image::new(2, 2, 1, vec![1, 2, 3, 4]).unwrap();
/// assert_eq!(crop(&img, 1, 0, 1, 2).unwrap().data, vec![3, 4]);
/// assert_eq!(crop(&img, -1, 1, 2, 2).unwrap().data, vec![0, 0, 2, 0]);
/// ```
pub fn crop(img: &Image, top: i64, left: i64, height: usize, width: usize) -> Result<Image> {
    img.validate()?;
    let c = img.channels;
    let len = checked_len(height, width, c)?;
    let inside = top >= 0
        && left >= 0
        && (top as u64).saturating_add(height as u64) <= img.height as u64
        && (left as u64).saturating_add(width as u64) <= img.width as u64;
    if inside {
        // Fast path: straight row copies.
        let (t, l) = (top as usize, left as usize);
        let mut data = Vec::with_capacity(len);
        let stride = img.stride();
        for y in t..t + height {
            let s = y * stride + l * c;
            data.extend_from_slice(&img.data[s..s + width * c]);
        }
        return Image::new(height, width, c, data);
    }
    let mut data = vec![0u8; len];
    for oy in 0..height {
        let sy = top + oy as i64;
        if sy < 0 || sy >= img.height as i64 {
            continue;
        }
        // Columns of the output that map inside the source.
        let x0 = (-left).clamp(0, width as i64) as usize;
        let x1 = (img.width as i64 - left).clamp(0, width as i64) as usize;
        if x0 >= x1 {
            continue;
        }
        let sx0 = (left + x0 as i64) as usize;
        let src = &img.data[(sy as usize * img.width + sx0) * c..][..(x1 - x0) * c];
        data[(oy * width + x0) * c..(oy * width + x1) * c].copy_from_slice(src);
    }
    Image::new(height, width, c, data)
}

/// Mirrors the image left-right in place (torchvision `hflip`).
///
/// ```
/// use sluice_imgproc::{hflip, Image};
/// let mut img = Image::new(1, 3, 1, vec![1, 2, 3]).unwrap();
/// hflip(&mut img).unwrap();
/// assert_eq!(img.data, vec![3, 2, 1]);
/// ```
pub fn hflip(img: &mut Image) -> Result<()> {
    img.validate()?;
    let stride = img.stride();
    if stride == 0 {
        return Ok(());
    }
    match img.channels {
        1 => img.data.chunks_exact_mut(stride).for_each(|r| r.reverse()),
        _ => {
            // RGB (`validate`): each row is mirrored from a copy; 16 bytes of slack let the
            // vector path read its last 5 pixels with one 16-byte load.
            let mut copy = vec![0u8; stride + 16];
            for row in img.data.chunks_exact_mut(stride) {
                copy[..stride].copy_from_slice(row);
                mirror_rgb_row(&copy, row);
            }
        }
    }
    Ok(())
}

/// Writes the RGB pixels of `src` (a row, then at least 16 bytes of slack) into `dst` in
/// reverse order. Byte reversal then a scalar swap of R and B per pixel took 19.5 µs per
/// 224² image (`examples/bench_kernels.rs`); SSSE3's byte shuffle moves 5 pixels per load and
/// store (5.9 µs).
fn mirror_rgb_row(src: &[u8], dst: &mut [u8]) {
    let w = dst.len() / 3;
    let mut x = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::use_avx2() {
        // SAFETY: the CPU has AVX2, so SSSE3.
        x = unsafe { mirror_rgb_ssse3(src, dst) };
    }
    for x in x..w {
        let s = 3 * (w - 1 - x);
        dst[3 * x..3 * x + 3].copy_from_slice(&src[s..s + 3]);
    }
}

/// The vector part of [`mirror_rgb_row`]: 5 pixels per step, each step's 16-byte store
/// spilling one byte that the next step overwrites; returns the pixels written.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
unsafe fn mirror_rgb_ssse3(src: &[u8], dst: &mut [u8]) -> usize {
    use std::arch::x86_64::{_mm_loadu_si128, _mm_setr_epi8, _mm_shuffle_epi8, _mm_storeu_si128};
    let w = dst.len() / 3;
    assert!(src.len() >= 3 * w + 16);
    // Output pixel k of a step is input pixel 4 - k; byte 15 is spill (zeroed).
    let rev = _mm_setr_epi8(12, 13, 14, 9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2, -128);
    let mut x = 0;
    // A step stores dst[3x..3x+16], which must stay inside the row.
    while 3 * x + 16 <= 3 * w {
        let s = 3 * (w - 5 - x);
        // SAFETY: 3x + 16 <= 3w gives x + 5 <= w, so s + 16 <= 3w + 1 <= src.len()
        // (asserted), and the store ends inside the row: unaligned, in bounds.
        unsafe {
            let v = _mm_loadu_si128(src.as_ptr().add(s).cast());
            _mm_storeu_si128(dst.as_mut_ptr().add(3 * x).cast(), _mm_shuffle_epi8(v, rev));
        }
        x += 5;
    }
    x
}

/// Resampling filter for [`resize`] and friends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Filter {
    /// Nearest neighbour (Pillow `NEAREST`).
    Nearest,
    /// Triangle filter (Pillow `BILINEAR`; torchvision's default).
    #[default]
    Bilinear,
    /// Keys cubic with a = -0.5 (Pillow `BICUBIC`).
    Bicubic,
}

/// A sub-pixel source rectangle for [`resized_crop_box`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CropBox {
    /// First row (may be fractional).
    pub top: f64,
    /// First column.
    pub left: f64,
    /// Rows covered.
    pub height: f64,
    /// Columns covered.
    pub width: f64,
}

thread_local! {
    // A Resizer keeps scratch buffers; one per thread avoids reallocating
    // them for every image in a data-loading worker.
    static RESIZER: RefCell<fr::Resizer> = RefCell::new(fr::Resizer::new());
}

/// Resizes to `out_h` x `out_w` with Pillow's separable convolution
/// (`Image.resize`), via `fast_image_resize` (SIMD, fixed-point like
/// Pillow). With `antialias` (torchvision's default for RandomResizedCrop
/// and Resize) the filter support widens when downscaling; without it the
/// filter keeps its unit support, like `interpolate(..., antialias=False)`.
/// `antialias` is ignored for [`Filter::Nearest`] and when upscaling.
///
/// ```
/// use sluice_imgproc::{resize, Filter, Image};
/// let img = Image::zeros(48, 64, 3).unwrap();
/// let small = resize(&img, 24, 32, Filter::Bilinear, true).unwrap();
/// assert_eq!((small.height, small.width, small.channels), (24, 32, 3));
/// ```
pub fn resize(
    img: &Image,
    out_h: usize,
    out_w: usize,
    filter: Filter,
    antialias: bool,
) -> Result<Image> {
    let b = CropBox {
        top: 0.0,
        left: 0.0,
        height: img.height as f64,
        width: img.width as f64,
    };
    resized_crop_box(img, b, out_h, out_w, filter, antialias)
}

/// Crops `(top, left, height, width)` and resizes it to `out_h` x `out_w`
/// in one pass (torchvision `resized_crop`; with [`Filter::Bilinear`] and
/// antialiasing this is the RandomResizedCrop kernel). Exactly `crop` then
/// [`resize`]: the filter reads only pixels inside the crop and clamps at its
/// edges, but the crop is never copied.
///
/// ```
/// use sluice_imgproc::{crop, resize, resized_crop, Filter, Image};
/// let img = Image::new(4, 4, 1, (0..16).map(|v| v * 16).collect()).unwrap();
/// let out = resized_crop(&img, 1, 1, 2, 3, 1, 2, Filter::Bilinear).unwrap();
/// let two_step = resize(&crop(&img, 1, 1, 2, 3).unwrap(), 1, 2, Filter::Bilinear, true).unwrap();
/// assert_eq!(out, two_step);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn resized_crop(
    img: &Image,
    top: usize,
    left: usize,
    height: usize,
    width: usize,
    out_h: usize,
    out_w: usize,
    filter: Filter,
) -> Result<Image> {
    img.validate()?;
    let inside = top.checked_add(height).is_some_and(|b| b <= img.height)
        && left.checked_add(width).is_some_and(|r| r <= img.width);
    if !inside || height == 0 || width == 0 {
        return invalid(format!(
            "crop (top {top}, left {left}, {height}x{width}) not inside a {}x{} image",
            img.height, img.width
        ));
    }
    let win = Window {
        top,
        left,
        height,
        width,
    };
    let b = CropBox {
        top: 0.0,
        left: 0.0,
        height: height as f64,
        width: width as f64,
    };
    resample(img, win, b, out_h, out_w, filter, true)
}

/// Resizes the fractional source box `b` to `out_h` x `out_w` the way Pillow's
/// `Image.resize(size, box=b)` does: the filter reads real pixels beyond the
/// box's edges where its support overlaps them. The box must lie inside the
/// image. For crop-then-resize semantics use [`resized_crop`] or
/// [`resized_subpixel_crop`].
pub fn resized_crop_box(
    img: &Image,
    b: CropBox,
    out_h: usize,
    out_w: usize,
    filter: Filter,
    antialias: bool,
) -> Result<Image> {
    img.validate()?;
    check_box(img, b)?;
    let win = Window {
        top: 0,
        left: 0,
        height: img.height,
        width: img.width,
    };
    resample(img, win, b, out_h, out_w, filter, antialias)
}

/// Crop-then-resize for a fractional box (a full-resolution crop divided by a
/// [`decode_scaled`](crate::decode_scaled) denominator): the filter reads only
/// the pixels the box touches — its integer hull, the pixels a crop of that
/// box would keep — and clamps at the hull's edges, as [`resized_crop`] does
/// at the crop's. The box must lie inside the image.
pub fn resized_subpixel_crop(
    img: &Image,
    b: CropBox,
    out_h: usize,
    out_w: usize,
    filter: Filter,
    antialias: bool,
) -> Result<Image> {
    img.validate()?;
    check_box(img, b)?;
    // Within the tolerance `check_box` allows, the box may end a hair past the image.
    let hull = |start: f64, extent: f64, n: usize| {
        let lo = (start.floor() as usize).min(n.saturating_sub(1));
        let hi = ((start + extent - 1e-9).ceil() as usize).clamp(lo + 1, n);
        (lo, hi - lo)
    };
    let (top, height) = hull(b.top, b.height, img.height);
    let (left, width) = hull(b.left, b.width, img.width);
    let win = Window {
        top,
        left,
        height,
        width,
    };
    let rel = CropBox {
        top: b.top - top as f64,
        left: b.left - left as f64,
        height: b.height.min(height as f64 - (b.top - top as f64)),
        width: b.width.min(width as f64 - (b.left - left as f64)),
    };
    resample(img, win, rel, out_h, out_w, filter, antialias)
}

/// The whole-pixel part of an image a resize may read.
#[derive(Debug, Clone, Copy)]
struct Window {
    top: usize,
    left: usize,
    height: usize,
    width: usize,
}

fn check_box(img: &Image, b: CropBox) -> Result<()> {
    let finite = [b.top, b.left, b.height, b.width]
        .iter()
        .all(|v| v.is_finite());
    if !finite
        || b.top < 0.0
        || b.left < 0.0
        || b.height <= 0.0
        || b.width <= 0.0
        || b.top + b.height > img.height as f64 + 1e-9
        || b.left + b.width > img.width as f64 + 1e-9
    {
        return invalid(format!(
            "crop box {b:?} not inside a {}x{} image",
            img.height, img.width
        ));
    }
    Ok(())
}

/// Resizes box `b` (in the coordinates of `win`) of the `win` part of `img`; the filter
/// reads only pixels inside `win`, clamping at its edges (Pillow's coefficient clipping, with
/// `win` as the whole image).
fn resample(
    img: &Image,
    win: Window,
    b: CropBox,
    out_h: usize,
    out_w: usize,
    filter: Filter,
    antialias: bool,
) -> Result<Image> {
    if out_h == 0 || out_w == 0 {
        return invalid("output size must be positive");
    }
    let len = checked_len(out_h, out_w, img.channels)?;
    if filter == Filter::Nearest {
        return Ok(nearest(img, win, b, out_h, out_w, len));
    }
    let (ow, oh, iw, ih) = (
        u32_of(out_w)?,
        u32_of(out_h)?,
        u32_of(img.width)?,
        u32_of(img.height)?,
    );
    let pt = if img.channels == 3 {
        fr::PixelType::U8x3
    } else {
        fr::PixelType::U8
    };
    let ft = if filter == Filter::Bilinear {
        fr::FilterType::Bilinear
    } else {
        fr::FilterType::CatmullRom
    };
    let alg = if antialias {
        fr::ResizeAlg::Convolution(ft)
    } else {
        fr::ResizeAlg::Interpolation(ft)
    };
    let src = fr::images::ImageRef::new(iw, ih, &img.data, pt)
        .map_err(|e| ImageError::InvalidArgument(format!("resize source: {e}")))?;
    let view = fr::images::CroppedImage::new(
        &src,
        u32_of(win.left)?,
        u32_of(win.top)?,
        u32_of(win.width)?,
        u32_of(win.height)?,
    )
    .map_err(|e| ImageError::InvalidArgument(format!("resize window: {e}")))?;
    let mut dst = fr::images::Image::from_vec_u8(ow, oh, vec![0u8; len], pt)
        .map_err(|e| ImageError::InvalidArgument(format!("resize destination: {e}")))?;
    let opts = fr::ResizeOptions::new()
        .resize_alg(alg)
        .crop(b.left, b.top, b.width, b.height);
    RESIZER
        .with(|r| r.borrow_mut().resize(&view, &mut dst, &opts))
        .map_err(|e| ImageError::InvalidArgument(format!("resize: {e}")))?;
    Image::new(out_h, out_w, img.channels, dst.into_vec())
}

/// Pillow's nearest-neighbour resize (`ImagingScaleAffine`): source
/// coordinate `box0 + (i + 0.5) * scale`, accumulated in f64 exactly as
/// Pillow does, truncated. fast_image_resize's nearest rounds differently.
fn nearest(img: &Image, win: Window, b: CropBox, out_h: usize, out_w: usize, len: usize) -> Image {
    let c = img.channels;
    let table = |start: f64, extent: f64, n: usize, limit: usize| -> Vec<usize> {
        let step = extent / n as f64;
        let mut pos = start + step * 0.5;
        (0..n)
            .map(|_| {
                let i = if pos < 0.0 {
                    0
                } else {
                    (pos as usize).min(limit - 1)
                };
                pos += step;
                i
            })
            .collect()
    };
    let xs: Vec<usize> = table(b.left, b.width, out_w, win.width)
        .into_iter()
        .map(|x| x + win.left)
        .collect();
    let ys: Vec<usize> = table(b.top, b.height, out_h, win.height)
        .into_iter()
        .map(|y| y + win.top)
        .collect();
    let mut data = Vec::with_capacity(len);
    for &sy in &ys {
        let row = &img.data[sy * img.stride()..(sy + 1) * img.stride()];
        for &sx in &xs {
            data.extend_from_slice(&row[sx * c..sx * c + c]);
        }
    }
    Image {
        height: out_h,
        width: out_w,
        channels: c,
        data,
    }
}

fn u32_of(v: usize) -> Result<u32> {
    u32::try_from(v).map_or_else(|_| invalid(format!("dimension {v} too large")), Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(h: usize, w: usize, c: usize) -> Image {
        Image::new(h, w, c, (0..h * w * c).map(|i| (i % 251) as u8).collect()).unwrap()
    }

    #[test]
    fn hflip_twice_is_identity_and_mirrors() {
        // Widths around the vector path's 5-pixel steps and its one-byte spill, on every path.
        let widths = [1, 2, 4, 5, 6, 7, 9, 10, 11, 15, 16, 224, 225, 227];
        crate::simd::for_each_path(|path| {
            for (w, c) in widths.iter().map(|&w| (w, 3)).chain([(4, 1), (7, 1)]) {
                let img = ramp(3, w, c);
                let mut f = img.clone();
                hflip(&mut f).unwrap();
                for y in 0..3 {
                    for x in 0..w {
                        assert_eq!(f.pixel(y, x), img.pixel(y, w - 1 - x), "{w}x{c} {path}");
                    }
                }
                hflip(&mut f).unwrap();
                assert_eq!(f, img, "{w}x{c} {path}");
            }
        });
    }

    #[test]
    fn crop_inside_and_padded() {
        let img = ramp(5, 6, 3);
        let c = crop(&img, 1, 2, 3, 4).unwrap();
        for y in 0..3 {
            for x in 0..4 {
                assert_eq!(c.pixel(y, x), img.pixel(y + 1, x + 2));
            }
        }
        let p = crop(&img, -1, 4, 3, 4).unwrap();
        assert_eq!(p.pixel(0, 0), &[0, 0, 0]);
        assert_eq!(p.pixel(1, 0), img.pixel(0, 4));
        assert_eq!(p.pixel(1, 1), img.pixel(0, 5));
        assert_eq!(p.pixel(1, 2), &[0, 0, 0]);
        let far = crop(&img, 100, -100, 2, 2).unwrap();
        assert!(far.data.iter().all(|&v| v == 0));
        assert!(crop(&img, 0, 0, usize::MAX, 2).is_err());
    }

    #[test]
    fn resize_rejects_bad_boxes() {
        let img = ramp(10, 10, 1);
        let bad = |b| resized_crop_box(&img, b, 5, 5, Filter::Bilinear, true).is_err();
        assert!(bad(CropBox {
            top: 0.0,
            left: 0.0,
            height: 11.0,
            width: 5.0
        }));
        assert!(bad(CropBox {
            top: -1.0,
            left: 0.0,
            height: 5.0,
            width: 5.0
        }));
        assert!(bad(CropBox {
            top: 0.0,
            left: 0.0,
            height: 0.0,
            width: 5.0
        }));
        assert!(bad(CropBox {
            top: f64::NAN,
            left: 0.0,
            height: 1.0,
            width: 5.0
        }));
        assert!(resize(&img, 0, 5, Filter::Bilinear, true).is_err());
    }

    /// A crop of black pixels inside a white frame resizes to pure black: the filter reads
    /// nothing beyond the crop (torchvision crops, then resizes). Pillow's box resize does.
    #[test]
    fn resized_crop_reads_only_the_crop() {
        let (h, w) = (40, 50);
        let mut img = Image::new(h, w, 3, vec![255; h * w * 3]).unwrap();
        for y in 10..30 {
            for x in 12..37 {
                let i = (y * w + x) * 3;
                img.data[i..i + 3].fill(0);
            }
        }
        for f in [Filter::Bilinear, Filter::Bicubic, Filter::Nearest] {
            for (oh, ow) in [(7, 9), (33, 41)] {
                let out = resized_crop(&img, 10, 12, 20, 25, oh, ow, f).unwrap();
                assert!(out.data.iter().all(|&v| v == 0), "{f:?} {oh}x{ow}");
            }
        }
        let b = CropBox {
            top: 10.0,
            left: 12.0,
            height: 20.0,
            width: 25.0,
        };
        let pillow = resized_crop_box(&img, b, 7, 9, Filter::Bilinear, true).unwrap();
        assert!(pillow.data.iter().any(|&v| v > 0));
        // A fractional box reads its integer hull: rows 10..30 and columns 12..37 here too.
        let b = CropBox {
            top: 10.25,
            left: 12.5,
            height: 19.5,
            width: 24.0,
        };
        let sub = resized_subpixel_crop(&img, b, 7, 9, Filter::Bilinear, true).unwrap();
        assert!(sub.data.iter().all(|&v| v == 0));
        // A box ending a hair past the image is clamped to it.
        let edge = CropBox {
            top: 0.5,
            left: 0.0,
            height: h as f64 - 0.5 + 1e-12,
            width: w as f64,
        };
        assert!(resized_subpixel_crop(&img, edge, 4, 4, Filter::Bilinear, true).is_ok());
        assert!(resized_crop(&img, 30, 0, 11, 5, 4, 4, Filter::Bilinear).is_err());
        assert!(resized_crop(&img, 0, 0, 0, 5, 4, 4, Filter::Bilinear).is_err());
    }

    #[test]
    fn resize_identity_and_constant() {
        let img = ramp(7, 9, 3);
        for f in [Filter::Nearest, Filter::Bilinear, Filter::Bicubic] {
            assert_eq!(resize(&img, 7, 9, f, true).unwrap(), img);
        }
        let flat = Image::new(8, 8, 3, vec![77; 192]).unwrap();
        let r = resize(&flat, 3, 5, Filter::Bicubic, true).unwrap();
        assert!(r.data.iter().all(|&v| v == 77));
    }
}
