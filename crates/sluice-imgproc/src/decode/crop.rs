//! Decode and resized crop in one call, with DCT scaling when the crop shrinks a lot: the
//! kernel of sluice's fused `decode` + `random_resized_crop`.

use super::dct::{self, Window};
use super::jpeg::{
    decode_jpeg, decode_jpeg_at, parse_checked_header, JpegHeader, SCALED_DENOMINATORS,
};
use super::{decode, guarded, sniff, DecodeOptions, Format};
use crate::error::{ImageError, Result};
use crate::geometry::{resized_crop, resized_subpixel_crop, CropBox, Filter};
use crate::image::Image;
use crate::orient::{reverses_axes, swaps_axes};

/// How much a crop must still shrink *after* a DCT-scaled decode for
/// [`decode_resized_crop`] to use that scale: a 1/d decode is used only when the crop is
/// at least `1.5 * d` times the output on both sides.
///
/// A 1/d decode is the full decode box-filtered by d (the reduced IDCT averages d x d
/// pixels); the full path's antialiased bilinear resize uses a wider triangle filter. While
/// the residual resize still shrinks ≥ 1.5x, its own filter dominates and the two agree
/// closely: on random RandomResizedCrop draws the worst crop measured 40.3 dB PSNR against
/// full decode + resize (README.md, `examples/dct_scaling.rs`), where a residual of
/// 1–1.25x dips to 31.6 dB and 1.25–1.5x to 37.8 dB.
pub const DCT_MIN_RESIDUAL: f64 = 1.5;

/// The DCT scale denominator [`decode_resized_crop`] uses for a `crop_h` x `crop_w` crop
/// resized to `out_h` x `out_w`: the largest available d (8, 4 or 2) with the crop still
/// shrinking at least [`DCT_MIN_RESIDUAL`] times after a 1/d decode, else 1 (full size).
/// Nearest-neighbour resizes always decode at full size (they pick pixels, they do not
/// average them).
///
/// So a 1/2 decode needs a crop ≥ 3x the output, 1/4 ≥ 6x, 1/8 ≥ 12x.
///
/// ```
/// use sluice_imgproc::{dct_denominator, Filter};
/// assert_eq!(dct_denominator(2000, 1800, 224, 224, Filter::Bilinear), 4); // 8.0x: 1/4 leaves 2.0x
/// assert_eq!(dct_denominator(700, 900, 224, 224, Filter::Bilinear), 2); // 3.1x: 1/2 leaves 1.6x
/// assert_eq!(dct_denominator(600, 600, 224, 224, Filter::Bilinear), 1); // 2.7x: decode at full size
/// assert_eq!(dct_denominator(2000, 1800, 224, 224, Filter::Nearest), 1);
/// ```
pub fn dct_denominator(
    crop_h: usize,
    crop_w: usize,
    out_h: usize,
    out_w: usize,
    filter: Filter,
) -> u32 {
    if filter == Filter::Nearest || out_h == 0 || out_w == 0 {
        return 1;
    }
    let shrink = (crop_h as f64 / out_h as f64).min(crop_w as f64 / out_w as f64);
    SCALED_DENOMINATORS
        .iter()
        .find(|&&d| shrink >= DCT_MIN_RESIDUAL * d as f64)
        .map_or(1, |&d| d as u32)
}

/// `resized_crop(&decode(bytes, opts)?, top, left, height, width, out_h, out_w, filter)`,
/// with less decoding: a JPEG is decoded at 1/d scale when the crop shrinks a lot
/// ([`dct_denominator`]; reduced IDCTs, so the full-size IDCT, upsampling, colour
/// conversion and most of the resize are skipped) and the crop, divided by d, is resized
/// from that; otherwise (d = 1) a baseline JPEG is decoded at full size only where the
/// crop is (see [`decode_for_crop`]). Returns the output and d.
///
/// The crop is in the upright (EXIF-oriented) full-size frame, as [`jpeg_dimensions`]
/// gives it. Pixels differ slightly from the two-step call: ≥ 40 dB PSNR on the scaled
/// crops measured (see [`DCT_MIN_RESIDUAL`]), ≥ 35 dB at full size (chroma
/// upsampled in the DCT domain instead of zune-jpeg's interpolation). PNGs, progressive
/// and CMYK JPEGs and the other files the own decoder does not take (see
/// [`decode_scaled`](crate::decode_scaled)) take the two-step path, byte for byte;
/// errors are the full path's for the same bytes (header errors, the pixel limit) or the
/// own decoder's (corrupt scan data). The rows below the crop are not decoded, so corrupt
/// scan data there goes unnoticed.
///
/// [`jpeg_dimensions`]: crate::jpeg_dimensions
///
/// ```
/// use sluice_imgproc::*;
/// let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coffee_320x240.jpg")).unwrap();
/// let opts = DecodeOptions::default();
/// // A 240x300 crop to 24x24: 10x smaller, so 1/4 scale (2.5x left to resize).
/// let (img, d) = decode_resized_crop(&f, &opts, 0, 10, 240, 300, 24, 24, Filter::Bilinear).unwrap();
/// assert_eq!((img.height, img.width, d), (24, 24, 4));
/// let full = resized_crop(&decode(&f, &opts).unwrap(), 0, 10, 240, 300, 24, 24, Filter::Bilinear).unwrap();
/// assert!(psnr(&img.data, &full.data) > 35.0);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn decode_resized_crop(
    bytes: &[u8],
    opts: &DecodeOptions,
    top: usize,
    left: usize,
    height: usize,
    width: usize,
    out_h: usize,
    out_w: usize,
    filter: Filter,
) -> Result<(Image, u32)> {
    let decoded = decode_for_crop(bytes, opts, top, left, height, width, out_h, out_w, filter)?;
    let out = decoded.resized_crop(top, left, height, width, out_h, out_w, filter)?;
    Ok((out, decoded.d))
}

/// The decode [`decode_resized_crop`] makes for a `height` x `width` crop at (`top`,
/// `left`), resized to `out_h` x `out_w`, before the crop: its two halves apart, so a
/// caller can tell what each costs.
///
/// * A JPEG is decoded at 1/d scale when [`dct_denominator`] allows, else at full size.
/// * A baseline JPEG the own decoder takes (1 or 3 components, sampling factors 1 and 2:
///   nearly every photo) is decoded only where the crop is: the MCUs the crop touches, at
///   that scale. The scan stops after the crop's last MCU row, and the blocks above and
///   beside the crop are read past without their IDCT, upsampling or colour conversion.
///   The image is then that part of the picture (any EXIF orientation), and
///   [`DecodedForCrop::resized_crop`] knows where it lies. At 1/d the part is the whole
///   scaled decode's pixels, byte for byte.
/// * Other JPEGs (progressive, CMYK; at 1/4 and 1/8 through jpeg-decoder) are decoded
///   whole, or, baseline without EXIF rotation, down to the crop's last row (two rows
///   more, rounded up to whole MCU rows; those rows are the whole decode's, byte for byte);
///   other formats whole.
///
/// ```
/// use sluice_imgproc::*;
/// let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coffee_320x240.jpg")).unwrap();
/// let opts = DecodeOptions::default();
/// let decoded = decode_for_crop(&f, &opts, 0, 10, 240, 300, 24, 24, Filter::Bilinear).unwrap();
/// assert_eq!((decoded.image.width, decoded.d), (80, 4));
/// let img = decoded.resized_crop(0, 10, 240, 300, 24, 24, Filter::Bilinear).unwrap();
/// assert_eq!(img, decode_resized_crop(&f, &opts, 0, 10, 240, 300, 24, 24, Filter::Bilinear).unwrap().0);
/// // A 100x100 crop at (20, 30) of this 4:2:0 file, to 64x64: full size, and only the
/// // 16x16 MCUs it touches, rows 16..128 and columns 16..144.
/// let part = decode_for_crop(&f, &opts, 20, 30, 100, 100, 64, 64, Filter::Bilinear).unwrap();
/// assert_eq!((part.d, part.image.height, part.image.width), (1, 112, 128));
/// let img = part.resized_crop(20, 30, 100, 100, 64, 64, Filter::Bilinear).unwrap();
/// let full = resized_crop(&decode(&f, &opts).unwrap(), 20, 30, 100, 100, 64, 64, Filter::Bilinear).unwrap();
/// assert!(psnr(&img.data, &full.data) > 38.0);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn decode_for_crop(
    bytes: &[u8],
    opts: &DecodeOptions,
    top: usize,
    left: usize,
    height: usize,
    width: usize,
    out_h: usize,
    out_w: usize,
    filter: Filter,
) -> Result<DecodedForCrop> {
    if sniff(bytes) != Some(Format::Jpeg) {
        return Ok(DecodedForCrop::whole(decode(bytes, opts)?, 1, (0, 0)));
    }
    let header = parse_checked_header(bytes, opts)?;
    let d = dct_denominator(height, width, out_h, out_w, filter) as usize;
    #[cfg(not(feature = "turbojpeg"))]
    if let Some(part) = decode_jpeg_window(bytes, &header, opts, d, top, left, height, width)? {
        return Ok(part);
    }
    let rows = top.saturating_add(height);
    if d > 1 {
        let image = match decode_jpeg_top(bytes, &header, opts, rows, d)? {
            Some(image) => Some(image),
            None => decode_jpeg_at(bytes, &header, opts, d)?,
        };
        if let Some(image) = image {
            return Ok(DecodedForCrop::whole(image, d, grid_shift(&header, d)));
        }
    }
    let image = match decode_jpeg_top(bytes, &header, opts, rows, 1)? {
        Some(image) => image,
        None => decode(bytes, opts)?,
    };
    Ok(DecodedForCrop::whole(image, 1, (0, 0)))
}

/// Full-size pixels the 1/`d` grid starts before the upright image (rows, columns). Scaled
/// pixel i covers stored pixels [i*d, (i+1)*d); the last one is partial when a side is not
/// a multiple of d. Along an axis the EXIF orientation reverses, that partial pixel comes
/// first in the upright image, shifting the grid.
fn grid_shift(header: &JpegHeader, d: usize) -> (usize, usize) {
    let (uh, uw) = header.upright();
    let (rev_y, rev_x) = reverses_axes(header.orientation);
    let shift = |n: usize, rev: bool| if rev { n.div_ceil(d) * d - n } else { 0 };
    (shift(uh, rev_y), shift(uw, rev_x))
}

/// The first `rows` rows of the upright image (at 1/`denom` scale, one of 1 and
/// [`SCALED_DENOMINATORS`]: its first `ceil(rows / denom)` rows), decoded to them and no
/// further, or `None`
/// when that saves nothing or cannot be done exactly (the image is no taller than `rows`
/// and one MCU row of margin; progressive files, whose scans each cover the whole image;
/// an EXIF orientation other than 1, which puts the upright rows elsewhere in the file).
/// The rows are the full decode's, byte for byte: the file is decoded as if its SOF said it
/// were `rows` and two rows more tall, rounded up to whole MCU rows, so the last rows kept
/// are upsampled with the real chroma below them; a baseline scan's data for the rows after
/// is never read.
///
/// `RandomResizedCrop` keeps a box at a random height: every row under it is work saved.
pub(crate) fn decode_jpeg_top(
    bytes: &[u8],
    header: &JpegHeader,
    opts: &DecodeOptions,
    rows: usize,
    denom: usize,
) -> Result<Option<Image>> {
    let mcu = usize::from(header.mcu_rows);
    // A row's chroma is interpolated from the chroma rows next to it: with vertical
    // subsampling up to 2, the two rows below hold them; beyond that, a whole MCU row.
    let margin = if mcu <= 16 { 2 } else { mcu };
    let keep = (rows + margin).div_ceil(mcu) * mcu;
    if header.progressive || header.orientation != 1 || keep >= usize::from(header.height) {
        return Ok(None);
    }
    let mut short = bytes.to_vec();
    short[header.height_at..header.height_at + 2].copy_from_slice(&(keep as u16).to_be_bytes());
    if denom == 1 {
        return decode_jpeg(&short, opts).map(Some);
    }
    let header = JpegHeader {
        height: keep as u16,
        ..header.clone()
    };
    decode_jpeg_at(&short, &header, opts, denom)
}

/// The upright full-size `height` x `width` crop at (`top`, `left`) of a baseline JPEG,
/// decoded at 1/`d` as the MCUs it touches and no others (`dct::decode_window`): those
/// MCUs as an upright image, where its first pixel lies in the upright 1/`d` grid, and
/// that grid's shift (see [`DecodedForCrop`]). `None` outside that decoder's scope or for a
/// crop outside the image.
///
/// The crop is mapped through the EXIF orientation to the stored frame, decoded there and
/// turned upright, so a rotated photo skips the same work. (Not with the libjpeg-turbo
/// backend, whose point is Pillow's exact full-size pixels.)
#[cfg(not(feature = "turbojpeg"))]
#[allow(clippy::too_many_arguments)]
fn decode_jpeg_window(
    bytes: &[u8],
    header: &JpegHeader,
    opts: &DecodeOptions,
    d: usize,
    top: usize,
    left: usize,
    height: usize,
    width: usize,
) -> Result<Option<DecodedForCrop>> {
    let (uh, uw) = header.upright();
    if d == 0
        || height == 0
        || width == 0
        || top.saturating_add(height) > uh
        || left.saturating_add(width) > uw
    {
        return Ok(None);
    }
    let swap = swaps_axes(header.orientation);
    let (rev_y, rev_x) = reverses_axes(header.orientation);
    let shift = grid_shift(header, d);
    let (nh, nw) = (uh.div_ceil(d), uw.div_ceil(d));
    // Upright full-size pixels [a, b) -> the upright scaled pixels that cover them.
    let scaled = |(a, b): (usize, usize), s: usize| ((a + s) / d, (b + s).div_ceil(d));
    // An interval of an upright axis of `n` scaled pixels as it lies along its stored axis,
    // and back (the map is its own inverse).
    let along = |(a, b): (usize, usize), n: usize, rev: bool| {
        if rev {
            (n - b, n - a)
        } else {
            (a, b)
        }
    };
    let ys = along(scaled((top, top + height), shift.0), nh, rev_y);
    let xs = along(scaled((left, left + width), shift.1), nw, rev_x);
    let (rows, cols) = if swap { (xs, ys) } else { (ys, xs) };
    let window = Window {
        top: rows.0,
        left: cols.0,
        height: rows.1 - rows.0,
        width: cols.1 - cols.0,
    };
    let Some(region) = guarded("JPEG", || dct::decode_window(bytes, d, Some(window)))? else {
        return Ok(None);
    };
    let at = region.at;
    let (rows, cols) = ((at.top, at.top + at.height), (at.left, at.left + at.width));
    let (ys, xs) = if swap { (cols, rows) } else { (rows, cols) };
    let origin = (along(ys, nh, rev_y).0, along(xs, nw, rev_x).0);
    let image = super::jpeg::finish(header, region.samples, at.height, at.width, None, opts.mode)?;
    Ok(Some(DecodedForCrop {
        image,
        d: d as u32,
        shift,
        origin,
    }))
}

/// An image [`decode_for_crop`] decoded: at 1/`d` of the full size (1: full size).
#[derive(Debug, Clone)]
pub struct DecodedForCrop {
    /// The decoded image.
    pub image: Image,
    /// Its scale denominator.
    pub d: u32,
    /// Full-size pixels the scaled grid starts before the upright image (rows, columns).
    shift: (usize, usize),
    /// Where the image's first pixel lies in the upright 1/`d` grid (rows, columns): not
    /// at (0, 0) when only the part around the crop was decoded.
    origin: (usize, usize),
}

impl DecodedForCrop {
    /// The whole image at 1/`d`, on a grid shifted by `shift`.
    fn whole(image: Image, d: usize, shift: (usize, usize)) -> DecodedForCrop {
        DecodedForCrop {
            image,
            d: d as u32,
            shift,
            origin: (0, 0),
        }
    }

    /// The crop (in the upright full-size frame) at full size, pixel for pixel: for a
    /// decode at 1/1 (`d == 1`) whose part holds it.
    ///
    /// ```
    /// use sluice_imgproc::*;
    /// let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coffee_320x240.jpg")).unwrap();
    /// let opts = DecodeOptions::default();
    /// // The 64 x 64 centre: only the MCUs it touches are decoded.
    /// let part = decode_for_crop(&f, &opts, 88, 128, 64, 64, 64, 64, Filter::Bilinear).unwrap();
    /// assert!(part.image.height < 240 && part.image.width < 320);
    /// let img = part.crop(88, 128, 64, 64).unwrap();
    /// assert_eq!((img.height, img.width), (64, 64));
    /// let whole = decode_for_crop(&f, &opts, 0, 0, 240, 320, 240, 320, Filter::Bilinear).unwrap();
    /// assert_eq!(img, whole.crop(88, 128, 64, 64).unwrap());
    /// ```
    pub fn crop(&self, top: usize, left: usize, height: usize, width: usize) -> Result<Image> {
        let (oy, ox) = self.origin;
        let inside = |at: Option<usize>, n: usize, of: usize| at.is_some_and(|a| a + n <= of);
        let (t, l) = (top.checked_sub(oy), left.checked_sub(ox));
        // `crate::crop` pads what lies outside; a part that does not hold the crop is a
        // caller's error, not black pixels.
        if self.d != 1
            || !inside(t, height, self.image.height)
            || !inside(l, width, self.image.width)
        {
            return Err(ImageError::InvalidArgument(format!(
                "an exact crop needs a full-size part holding it: the crop at row {top}, \
                 column {left} ({height}x{width}) against a part at 1/{} from row {oy}, \
                 column {ox} ({}x{})",
                self.d, self.image.height, self.image.width
            )));
        }
        let (t, l) = (t.unwrap_or(0) as i64, l.unwrap_or(0) as i64);
        crate::crop(&self.image, t, l, height, width)
    }

    /// The crop (in the upright full-size frame) resized to `out_h` x `out_w`: the second
    /// half of [`decode_resized_crop`].
    #[allow(clippy::too_many_arguments)]
    pub fn resized_crop(
        &self,
        top: usize,
        left: usize,
        height: usize,
        width: usize,
        out_h: usize,
        out_w: usize,
        filter: Filter,
    ) -> Result<Image> {
        if self.d == 1 {
            let (Some(t), Some(l)) = (
                top.checked_sub(self.origin.0),
                left.checked_sub(self.origin.1),
            ) else {
                let (oy, ox) = self.origin;
                return Err(ImageError::InvalidArgument(format!(
                    "the crop at row {top}, column {left} starts before the part decoded for \
                     it (from row {oy}, column {ox})"
                )));
            };
            return resized_crop(&self.image, t, l, height, width, out_h, out_w, filter);
        }
        let s = self.d as f64;
        // The part decoded starts `origin` scaled pixels into the upright scaled grid.
        let b = CropBox {
            top: (top + self.shift.0) as f64 / s - self.origin.0 as f64,
            left: (left + self.shift.1) as f64 / s - self.origin.1 as f64,
            height: height as f64 / s,
            width: width as f64 / s,
        };
        // Crop-then-resize, as the full path: only pixels the crop touches are read.
        resized_subpixel_crop(&self.image, b, out_h, out_w, filter, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::jpeg::parse_header;
    use crate::decode::{fixture, Mode};

    /// A crop decoded as the MCUs it touches, on every EXIF orientation: the upright
    /// pixels at the origin given are those of the whole upright image decoded the same
    /// way, byte for byte; and that whole image is close to the exact (zune-jpeg) decode.
    #[test]
    #[cfg(not(feature = "turbojpeg"))]
    fn a_crop_window_is_the_upright_crop() {
        let mut rnd = crate::decode::below(0x5EED_0F0D);
        let opts = DecodeOptions::default();
        let mut names: Vec<String> = (1..=8).map(|o| format!("orient_{o}.jpg")).collect();
        names.extend(
            [
                "coffee_157x117_o7.jpg",
                "photo_420.jpg",
                "photo_422.jpg",
                "photo_gray.jpg",
            ]
            .map(String::from),
        );
        for name in &names {
            let bytes = fixture(name);
            let header = parse_header(&bytes).unwrap();
            let exact = decode_jpeg(&bytes, &opts).unwrap();
            let (uh, uw) = (exact.height, exact.width);
            let window = |d, t, l, h, w| decode_jpeg_window(&bytes, &header, &opts, d, t, l, h, w);
            let whole = window(1, 0, 0, uh, uw).unwrap().unwrap();
            assert_eq!((whole.origin, whole.shift), ((0, 0), (0, 0)));
            let whole = whole.image;
            assert_eq!(
                (whole.height, whole.width, whole.channels),
                (uh, uw, exact.channels)
            );
            let db = crate::psnr(&whole.data, &exact.data);
            assert!(db >= 40.0, "{name}: {db:.1} dB against the exact decode");
            let c = whole.channels;
            for _ in 0..40 {
                let (t, l) = (rnd(uh), rnd(uw));
                let (h, w) = (1 + rnd(uh - t), 1 + rnd(uw - l));
                let part = window(1, t, l, h, w).unwrap().unwrap();
                let (img, (oy, ox)) = (&part.image, part.origin);
                assert!(oy <= t && ox <= l && oy + img.height >= t + h && ox + img.width >= l + w);
                for y in t..t + h {
                    let got = &img.data[((y - oy) * img.width + (l - ox)) * c..][..w * c];
                    let want = &whole.data[(y * uw + l) * c..][..w * c];
                    assert_eq!(
                        got, want,
                        "{name}: row {y} of the crop at ({t}, {l}) {h}x{w}"
                    );
                }
                // At 1/2, 1/4, 1/8: the crop resized from the part decoded is the crop
                // resized from the whole image's scaled decode, byte for byte.
                for d in [2, 4, 8] {
                    let Some(scaled) = decode_jpeg_at(&bytes, &header, &opts, d).unwrap() else {
                        continue;
                    };
                    let part = window(d, t, l, h, w).unwrap().unwrap();
                    let whole = DecodedForCrop::whole(scaled, d, grid_shift(&header, d));
                    let (oh, ow) = (1 + h / (2 * d), 1 + w / (2 * d));
                    let crop = |x: &DecodedForCrop| {
                        x.resized_crop(t, l, h, w, oh, ow, Filter::Bilinear)
                            .unwrap()
                    };
                    assert_eq!(
                        crop(&part),
                        crop(&whole),
                        "{name} 1/{d}: ({t}, {l}) {h}x{w}"
                    );
                }
            }
            // A crop past the image is not this path's to decode.
            assert!(window(1, 0, 1, uh, uw).unwrap().is_none());
        }
    }

    /// The top rows decoded alone are the full decode's rows, byte for byte, for every
    /// height cut (4:2:0, 4:2:2 and 4:4:4 colour, CMYK, YCCK, gray); and what cannot be cut
    /// is not.
    #[test]
    fn the_top_rows_alone_are_the_full_decodes() {
        for name in [
            "photo_420.jpg",
            "photo_422.jpg",
            "photo_444.jpg",
            "photo_gray.jpg",
            "photo_cmyk.jpg",
            "photo_ycck.jpg",
            "coffee_320x240.jpg",
        ] {
            let bytes = fixture(name);
            let header = parse_header(&bytes).unwrap();
            let height = usize::from(header.height);
            for mode in [Mode::Rgb, Mode::L] {
                let opts = DecodeOptions {
                    mode,
                    ..Default::default()
                };
                for denom in [1, 2, 4, 8] {
                    let full = match denom {
                        1 => decode_jpeg(&bytes, &opts).unwrap(),
                        d => match decode_jpeg_at(&bytes, &header, &opts, d).unwrap() {
                            Some(img) => img,
                            None => continue,
                        },
                    };
                    let row = full.width * full.channels;
                    let mut cut = 0;
                    for rows in 1..height {
                        let Some(top) =
                            decode_jpeg_top(&bytes, &header, &opts, rows, denom).unwrap()
                        else {
                            continue;
                        };
                        cut += 1;
                        let want = rows.div_ceil(denom);
                        assert!(top.height >= want && top.height < full.height, "{name}");
                        assert_eq!(top.width, full.width);
                        assert_eq!(
                            top.data[..want * row],
                            full.data[..want * row],
                            "{name} {mode:?} 1/{denom}: the first {want} rows"
                        );
                    }
                    assert!(cut > 0, "{name} 1/{denom}: never cut");
                    let whole = decode_jpeg_top(&bytes, &header, &opts, height, denom).unwrap();
                    assert!(whole.is_none());
                }
            }
        }
        let opts = DecodeOptions::default();
        for name in ["photo_prog.jpg", "orient_6.jpg"] {
            let bytes = fixture(name);
            let header = parse_header(&bytes).unwrap();
            assert!(
                decode_jpeg_top(&bytes, &header, &opts, 1, 1)
                    .unwrap()
                    .is_none(),
                "{name}"
            );
            assert!(
                decode_jpeg_top(&bytes, &header, &opts, 1, 2)
                    .unwrap()
                    .is_none(),
                "{name}"
            );
        }
    }
}
