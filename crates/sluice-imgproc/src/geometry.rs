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
            for row in img.data.chunks_exact_mut(stride) {
                // Reversing the bytes (a fast vectorised memory op) mirrors
                // the pixels but also turns RGB into BGR; swap R and B back.
                row.reverse();
                for p in row.chunks_exact_mut(3) {
                    p.swap(0, 2);
                }
            }
        }
    }
    Ok(())
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
/// antialiasing this is the RandomResizedCrop kernel). Only the source
/// pixels under the filter are read.
///
/// ```
/// use sluice_imgproc::{resized_crop, Filter, Image};
/// let img = Image::zeros(300, 400, 3).unwrap();
/// let out = resized_crop(&img, 10, 20, 200, 150, 224, 224, Filter::Bilinear).unwrap();
/// assert_eq!((out.height, out.width), (224, 224));
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
    let b = CropBox {
        top: top as f64,
        left: left as f64,
        height: height as f64,
        width: width as f64,
    };
    resized_crop_box(img, b, out_h, out_w, filter, true)
}

/// The general form of [`resized_crop`]: a fractional source box (e.g. a
/// full-resolution crop divided by the [`decode_scaled`](crate::decode_scaled)
/// denominator) and explicit antialiasing. The box must lie inside the image.
pub fn resized_crop_box(
    img: &Image,
    b: CropBox,
    out_h: usize,
    out_w: usize,
    filter: Filter,
    antialias: bool,
) -> Result<Image> {
    img.validate()?;
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
    if out_h == 0 || out_w == 0 {
        return invalid("output size must be positive");
    }
    let len = checked_len(out_h, out_w, img.channels)?;
    if filter == Filter::Nearest {
        return Ok(nearest(img, b, out_h, out_w, len));
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
    let alg = match filter {
        Filter::Nearest => unreachable!("handled above"),
        Filter::Bilinear | Filter::Bicubic => {
            let ft = if filter == Filter::Bilinear {
                fr::FilterType::Bilinear
            } else {
                fr::FilterType::CatmullRom
            };
            if antialias {
                fr::ResizeAlg::Convolution(ft)
            } else {
                fr::ResizeAlg::Interpolation(ft)
            }
        }
    };
    let src = fr::images::ImageRef::new(iw, ih, &img.data, pt)
        .map_err(|e| ImageError::InvalidArgument(format!("resize source: {e}")))?;
    let mut dst = fr::images::Image::from_vec_u8(ow, oh, vec![0u8; len], pt)
        .map_err(|e| ImageError::InvalidArgument(format!("resize destination: {e}")))?;
    let opts = fr::ResizeOptions::new()
        .resize_alg(alg)
        .crop(b.left, b.top, b.width, b.height);
    RESIZER
        .with(|r| r.borrow_mut().resize(&src, &mut dst, &opts))
        .map_err(|e| ImageError::InvalidArgument(format!("resize: {e}")))?;
    Image::new(out_h, out_w, img.channels, dst.into_vec())
}

/// Pillow's nearest-neighbour resize (`ImagingScaleAffine`): source
/// coordinate `box0 + (i + 0.5) * scale`, accumulated in f64 exactly as
/// Pillow does, truncated. fast_image_resize's nearest rounds differently.
fn nearest(img: &Image, b: CropBox, out_h: usize, out_w: usize, len: usize) -> Image {
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
    let xs = table(b.left, b.width, out_w, img.width);
    let ys = table(b.top, b.height, out_h, img.height);
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
        for (w, c) in [(1, 3), (2, 3), (5, 3), (4, 1), (7, 1)] {
            let img = ramp(3, w, c);
            let mut f = img.clone();
            hflip(&mut f).unwrap();
            for y in 0..3 {
                for x in 0..w {
                    assert_eq!(f.pixel(y, x), img.pixel(y, w - 1 - x));
                }
            }
            hflip(&mut f).unwrap();
            assert_eq!(f, img);
        }
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
