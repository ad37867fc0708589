//! Pillow-exact colour-space conversions used by the decoders and by
//! [`crate::rgb_to_l`].

use crate::error::{invalid, Result};
use crate::image::Image;

/// Pillow's `L24` luma (ITU-R 601-2 weights in 16.16 fixed point, rounded):
/// `L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16`.
#[inline(always)]
pub(crate) fn l24(r: u8, g: u8, b: u8) -> u8 {
    ((u32::from(r) * 19595 + u32::from(g) * 38470 + u32::from(b) * 7471 + 0x8000) >> 16) as u8
}

/// Converts interleaved RGB to gray with Pillow's `convert("L")` arithmetic.
pub(crate) fn rgb_to_l_buf(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3).map(|p| l24(p[0], p[1], p[2])).collect()
}

/// Converts an RGB image to one channel exactly as Pillow's
/// `Image.convert("L")` does (`L = (19595 R + 38470 G + 7471 B + 32768) >> 16`).
/// A 1-channel image is returned unchanged.
///
/// This is the conversion [`crate::decode`] uses for [`crate::Mode::L`]; the
/// torchvision tensor op is [`crate::to_grayscale`], which truncates
/// instead of rounding and may differ by one level.
///
/// ```
/// use sluice_imgproc::{rgb_to_l, Image};
/// let img = Image::new(1, 1, 3, vec![255, 128, 0]).unwrap();
/// assert_eq!(rgb_to_l(&img).unwrap().data, vec![151]);
/// ```
pub fn rgb_to_l(img: &Image) -> Result<Image> {
    img.validate()?;
    match img.channels {
        1 => Ok(img.clone()),
        3 => Ok(Image {
            height: img.height,
            width: img.width,
            channels: 1,
            data: rgb_to_l_buf(&img.data),
        }),
        c => invalid(format!("rgb_to_l needs 1 or 3 channels, got {c}")),
    }
}

/// Replicates a gray buffer into RGB (Pillow's `L -> RGB`).
pub(crate) fn gray_to_rgb_buf(gray: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(gray.len() * 3);
    for &v in gray {
        out.extend_from_slice(&[v, v, v]);
    }
    out
}

/// Pillow's `MULDIV255`: `a * b / 255`, rounded, in integer arithmetic.
#[inline(always)]
fn muldiv255(a: i32, b: i32) -> i32 {
    let t = a * b + 128;
    ((t >> 8) + t) >> 8
}

/// One Adobe-convention CMYK pixel (as stored in the file, i.e. inverted,
/// which is what Pillow assumes for every CMYK JPEG: rawmode `CMYK;I`) to
/// RGB with Pillow's `cmyk2rgb`.
#[inline(always)]
fn adobe_cmyk_to_rgb(c: u8, m: u8, y: u8, k: u8) -> [u8; 3] {
    // Pillow first inverts (CMYK;I) then computes nk - c*nk/255 with
    // nk = 255 - k; with inverted inputs nk is the stored K.
    let nk = i32::from(k);
    let f = |v: u8| (nk - muldiv255(255 - i32::from(v), nk)).clamp(0, 255) as u8;
    [f(c), f(m), f(y)]
}

/// Stored (Adobe-inverted) CMYK, 4 bytes per pixel, to RGB like Pillow.
pub(crate) fn adobe_cmyk_to_rgb_buf(cmyk: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(cmyk.len() / 4 * 3);
    for p in cmyk.chunks_exact(4) {
        out.extend_from_slice(&adobe_cmyk_to_rgb(p[0], p[1], p[2], p[3]));
    }
    out
}

/// libjpeg's YCbCr->RGB fixed-point constants (jdcolor.c, SCALEBITS = 16).
const FIX_1_40200: i32 = 91881;
const FIX_1_77200: i32 = 116130;
const FIX_0_71414: i32 = 46802;
const FIX_0_34414: i32 = 22554;
const ONE_HALF: i32 = 1 << 15;

/// Raw YCCK samples (4 bytes per pixel, Adobe transform 2) to RGB the way
/// libjpeg (`ycck_cmyk_convert`) and then Pillow (`CMYK;I` + `cmyk2rgb`) do.
pub(crate) fn ycck_to_rgb_buf(ycck: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ycck.len() / 4 * 3);
    for p in ycck.chunks_exact(4) {
        let y = i32::from(p[0]);
        let cb = i32::from(p[1]) - 128;
        let cr = i32::from(p[2]) - 128;
        let r = y + ((FIX_1_40200 * cr + ONE_HALF) >> 16);
        let g = y + ((-FIX_0_34414 * cb + ONE_HALF - FIX_0_71414 * cr) >> 16);
        let b = y + ((FIX_1_77200 * cb + ONE_HALF) >> 16);
        // libjpeg emits C = 255 - R (range-limited) etc.; K passes through.
        let c = (255 - r).clamp(0, 255) as u8;
        let m = (255 - g).clamp(0, 255) as u8;
        let yy = (255 - b).clamp(0, 255) as u8;
        out.extend_from_slice(&adobe_cmyk_to_rgb(c, m, yy, p[3]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn l24_matches_pillow_examples() {
        // Values checked against Pillow 13 Image.convert("L").
        assert_eq!(l24(255, 255, 255), 255);
        assert_eq!(l24(0, 0, 0), 0);
        assert_eq!(l24(255, 0, 0), 76);
        assert_eq!(l24(0, 255, 0), 150);
        assert_eq!(l24(0, 0, 255), 29);
    }

    #[test]
    fn cmyk_white_and_black() {
        // Adobe-inverted storage: 255 means "no ink".
        assert_eq!(adobe_cmyk_to_rgb(255, 255, 255, 255), [255, 255, 255]);
        assert_eq!(adobe_cmyk_to_rgb(255, 255, 255, 0), [0, 0, 0]);
        assert_eq!(adobe_cmyk_to_rgb(0, 255, 255, 255), [0, 255, 255]);
    }

    #[test]
    fn rgb_to_l_checks_channels() {
        let bad = Image {
            height: 1,
            width: 1,
            channels: 2,
            data: vec![0, 0],
        };
        assert!(rgb_to_l(&bad).is_err());
    }
}
