//! JPEG: our own header walk (dimensions, components, Adobe transform, EXIF
//! orientation, truncation check), full decodes with `zune-jpeg`, DCT-scaled
//! decodes with our reduced-IDCT decoder (`dct.rs`) or `jpeg-decoder`.

use zune_core::bytestream::ZCursor;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions as ZuneOptions;
use zune_jpeg::errors::DecodeErrors;
use zune_jpeg::JpegDecoder;

use super::markers::{has_eoi_after, starts_with_soi, Marker, Markers, Sof, WalkError};
use super::{check_pixels, guarded, DecodeOptions, Mode};
use crate::convert::{adobe_cmyk_to_rgb_buf, gray_to_rgb_buf, rgb_to_l_buf, ycck_to_rgb_buf};
use crate::error::{ImageError, Result};
use crate::image::Image;
use crate::orient::{apply_orientation, exif_orientation, swaps_axes};

/// What the markers before the first scan tell us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JpegHeader {
    pub height: u16,
    pub width: u16,
    pub components: u8,
    /// `Some(t)` if an Adobe APP14 segment is present (0 = none/CMYK,
    /// 1 = YCbCr, 2 = YCCK).
    pub adobe_transform: Option<u8>,
    /// EXIF orientation 1..=8 (1 if absent or unreadable).
    pub orientation: u8,
    pub progressive: bool,
    /// Where the SOF's height field is in the file.
    pub height_at: usize,
    /// Pixel rows per MCU row (8 × the largest vertical sampling factor).
    pub mcu_rows: u16,
}

fn corrupt<T>(msg: impl Into<String>) -> Result<T> {
    Err(ImageError::Corrupt(msg.into()))
}
fn truncated<T>(msg: impl Into<String>) -> Result<T> {
    Err(ImageError::Truncated(msg.into()))
}

/// [`parse_header`], refusing files over the pixel limit (a decompression bomb) before any
/// decoder allocates for them.
pub(crate) fn parse_checked_header(data: &[u8], opts: &DecodeOptions) -> Result<JpegHeader> {
    let header = parse_header(data)?;
    check_pixels(
        u64::from(header.height),
        u64::from(header.width),
        opts.max_pixels,
    )?;
    Ok(header)
}

/// Walks the marker segments up to the first SOS.
///
/// Besides giving dimensions without decoding, it rejects what the
/// decoders handle badly (or Pillow would not decode) with precise errors:
/// missing SOF, 12/16-bit precision, lossless and arithmetic coding,
/// component counts other than 1, 3 and 4, and streams with no EOI after
/// the scans (truncated files, which libjpeg/Pillow refuse but zune-jpeg
/// would pad with gray).
pub(crate) fn parse_header(data: &[u8]) -> Result<JpegHeader> {
    if data.is_empty() {
        return Err(ImageError::Empty);
    }
    if data.len() < 4 || !starts_with_soi(data) {
        return corrupt("not a JPEG (no SOI marker)");
    }
    let mut markers = Markers::after_soi(data);
    let mut sof: Option<JpegHeader> = None;
    let mut adobe: Option<u8> = None;
    let mut orientation: Option<u8> = None;
    loop {
        let seg = match markers.next_marker() {
            Ok(Marker::Segment(seg)) => seg,
            Ok(Marker::Standalone(0xD8)) => {
                return corrupt("second SOI marker before the first scan")
            }
            Ok(Marker::Standalone(0xD9)) => return corrupt("EOI marker before the first scan"),
            Ok(Marker::Standalone(_)) => continue,
            Err(WalkError::End) => return truncated("stream ends before the first scan"),
            Err(WalkError::NoLength(_)) => return truncated("stream ends inside a marker length"),
            Err(WalkError::BadLength(marker, len)) => {
                return corrupt(format!("marker 0x{marker:02X} has length {len}"))
            }
            Err(WalkError::PastEnd(marker)) => {
                return truncated(format!("stream ends inside marker 0x{marker:02X}"))
            }
        };
        let (marker, payload) = (seg.marker, seg.payload);
        match marker {
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                if sof.is_some() {
                    return corrupt("more than one SOF marker");
                }
                sof = Some(read_sof(marker, payload, seg.at)?);
            }
            0xE1 if orientation.is_none() && payload.starts_with(b"Exif\0\0") => {
                // Pillow reads the first EXIF APP1 only.
                orientation = Some(exif_orientation(&payload[6..]));
            }
            0xEE if payload.len() >= 12 && payload.starts_with(b"Adobe") => {
                adobe = Some(payload[11]);
            }
            0xDA => {
                let Some(mut h) = sof else {
                    return corrupt("scan before any SOF marker");
                };
                // From the SOS's length field on, as the search has always started.
                if !has_eoi_after(data, seg.at - 2) {
                    return truncated("no EOI marker after the scans (file cut short?)");
                }
                h.adobe_transform = adobe;
                h.orientation = orientation.unwrap_or(1);
                return Ok(h);
            }
            _ => {}
        }
    }
}

/// The header an SOF segment (`marker`, payload at offset `at`) describes, refusing the
/// coding processes, precisions and component counts the decoders handle badly.
fn read_sof(marker: u8, payload: &[u8], at: usize) -> Result<JpegHeader> {
    match marker {
        0xC0..=0xC2 => {}
        0xC3 | 0xC7 | 0xCB | 0xCF => return Err(ImageError::Unsupported("lossless JPEG".into())),
        0xC9..=0xCB | 0xCD..=0xCF => {
            return Err(ImageError::Unsupported("arithmetic-coded JPEG".into()))
        }
        _ => {
            return Err(ImageError::Unsupported(format!(
                "hierarchical JPEG (SOF 0x{marker:02X})"
            )))
        }
    }
    let Some(sof) = Sof::read(payload) else {
        return corrupt("SOF segment too short");
    };
    let (precision, components) = (sof.precision, sof.count);
    if precision != 8 {
        return Err(ImageError::Unsupported(format!(
            "{precision}-bit JPEG samples"
        )));
    }
    if !matches!(components, 1 | 3 | 4) {
        return Err(ImageError::Unsupported(format!(
            "JPEG with {components} components"
        )));
    }
    let Some(specs) = sof.components(payload) else {
        return corrupt("SOF segment too short for its components");
    };
    let mut max_v = 1;
    for c in specs {
        if !(1..=4).contains(&c.h) || !(1..=4).contains(&c.v) {
            return corrupt(format!("bad sampling factors {}x{}", c.h, c.v));
        }
        max_v = max_v.max(u16::from(c.v));
    }
    if sof.height == 0 {
        // Height defined later by a DNL marker: legal but rare, and neither decoder
        // supports it.
        return Err(ImageError::Unsupported("JPEG height set by DNL".into()));
    }
    if sof.width == 0 {
        return corrupt("SOF declares width 0");
    }
    Ok(JpegHeader {
        height: sof.height,
        width: sof.width,
        components,
        adobe_transform: None,
        orientation: 1,
        progressive: marker == 0xC2,
        height_at: at + 1,
        mcu_rows: 8 * max_v,
    })
}

/// Returns `(height, width)` of a JPEG as it will be after EXIF orientation
/// is applied (i.e. what [`decode`](crate::decode) returns), reading only
/// the header. Use it to pick a crop (and a DCT scale) before decoding.
///
/// ```
/// use sluice_imgproc::jpeg_dimensions;
/// let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/orient_6.jpg")).unwrap();
/// // stored 16 rows x 24 columns, rotated by EXIF orientation 6
/// assert_eq!(jpeg_dimensions(&f).unwrap(), (24, 16));
/// ```
pub fn jpeg_dimensions(bytes: &[u8]) -> Result<(usize, usize)> {
    parse_header(bytes).map(|h| h.upright())
}

impl JpegHeader {
    /// Height and width of the upright image (after the EXIF orientation).
    pub(crate) fn upright(&self) -> (usize, usize) {
        let (h, w) = (usize::from(self.height), usize::from(self.width));
        if swaps_axes(self.orientation) {
            (w, h)
        } else {
            (h, w)
        }
    }
}

/// A JPEG's EXIF orientation (1–8; 1 when it has none), read from its header: what a
/// decoder that does not apply it (nvJPEG) leaves to its caller.
///
/// ```
/// use sluice_imgproc::jpeg_orientation;
/// let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/orient_6.jpg")).unwrap();
/// assert_eq!(jpeg_orientation(&f).unwrap(), 6);
/// ```
pub fn jpeg_orientation(bytes: &[u8]) -> Result<u8> {
    Ok(parse_header(bytes)?.orientation)
}

fn map_zune_err(e: DecodeErrors) -> ImageError {
    match e {
        DecodeErrors::ExhaustedData => ImageError::Truncated("JPEG data exhausted".into()),
        DecodeErrors::Unsupported(s) => ImageError::Unsupported(format!("JPEG: {s:?}")),
        DecodeErrors::IoErrors(e) => ImageError::Truncated(format!("JPEG: {e:?}")),
        other => ImageError::Corrupt(format!("JPEG: {other}")),
    }
}

/// Converts decoded samples (1, 3 or 4 per pixel, as produced by either
/// decoder with colour conversion limited to YCbCr->RGB) into the requested
/// mode, then applies the orientation.
pub(super) fn finish(
    header: &JpegHeader,
    samples: Vec<u8>,
    height: usize,
    width: usize,
    four: Option<FourChannel>,
    mode: Mode,
) -> Result<Image> {
    let px = height * width;
    let per = if four.is_some() {
        4
    } else {
        samples.len() / px.max(1)
    };
    if samples.len() != px * per || !(per == 1 || per == 3 || per == 4) {
        return corrupt(format!(
            "decoder returned {} bytes for {height}x{width}",
            samples.len()
        ));
    }
    let rgb_or_gray = match four {
        Some(FourChannel::Cmyk) => adobe_cmyk_to_rgb_buf(&samples),
        Some(FourChannel::Ycck) => ycck_to_rgb_buf(&samples),
        None => samples,
    };
    let is_gray = per == 1;
    let data = match (mode, is_gray) {
        (Mode::Rgb, false) | (Mode::L, true) => rgb_or_gray,
        (Mode::Rgb, true) => gray_to_rgb_buf(&rgb_or_gray),
        (Mode::L, false) => rgb_to_l_buf(&rgb_or_gray),
    };
    let img = Image {
        height,
        width,
        channels: mode.channels(),
        data,
    };
    Ok(apply_orientation(img, header.orientation))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FourChannel {
    Cmyk,
    Ycck,
}

fn four_channel_kind(header: &JpegHeader) -> Option<FourChannel> {
    if header.components != 4 {
        return None;
    }
    // libjpeg: 4 components are YCCK only with Adobe transform 2.
    Some(if header.adobe_transform == Some(2) {
        FourChannel::Ycck
    } else {
        FourChannel::Cmyk
    })
}

pub(crate) fn decode_jpeg(bytes: &[u8], opts: &DecodeOptions) -> Result<Image> {
    let header = parse_checked_header(bytes, opts)?;
    let four = four_channel_kind(&header);
    #[cfg(feature = "turbojpeg")]
    if four.is_none() {
        let (samples, h, w) = tj::decode(bytes, &header, 1)?;
        return finish(&header, samples, h, w, None, opts.mode);
    }
    let decoded = guarded("JPEG", || {
        let out_cs = match (header.components, four) {
            (1, _) => ColorSpace::Luma,
            // Raw 4-channel data; we do the CMYK/YCCK conversion ourselves
            // with Pillow's arithmetic.
            (_, Some(FourChannel::Cmyk)) => ColorSpace::CMYK,
            (_, Some(FourChannel::Ycck)) => ColorSpace::YCCK,
            _ => ColorSpace::RGB,
        };
        let zopts = ZuneOptions::default()
            .set_max_width(usize::from(u16::MAX))
            .set_max_height(usize::from(u16::MAX))
            .jpeg_set_out_colorspace(out_cs);
        let mut dec = JpegDecoder::new_with_options(ZCursor::new(bytes), zopts);
        dec.decode_headers().map_err(map_zune_err)?;
        let info = dec
            .info()
            .ok_or_else(|| ImageError::Corrupt("JPEG headers unreadable".into()))?;
        let (h, w) = (usize::from(info.height), usize::from(info.width));
        if (h, w) != (usize::from(header.height), usize::from(header.width)) {
            return corrupt("JPEG decoder disagrees with the SOF dimensions");
        }
        // Only decode what zune classified the way libjpeg would; anything
        // else (e.g. an RGB file with Adobe transform 0, which zune treats
        // as an unknown multi-band image) goes to jpeg-decoder below.
        let expected = match (header.components, four) {
            (1, _) => matches!(dec.input_colorspace(), Some(ColorSpace::Luma)),
            (_, Some(FourChannel::Cmyk)) => dec.input_colorspace() == Some(ColorSpace::CMYK),
            (_, Some(FourChannel::Ycck)) => dec.input_colorspace() == Some(ColorSpace::YCCK),
            _ => matches!(
                dec.input_colorspace(),
                Some(ColorSpace::YCbCr | ColorSpace::RGB)
            ),
        };
        if !expected {
            return Ok(None);
        }
        let samples = dec.decode().map_err(map_zune_err)?;
        Ok(Some((samples, h, w)))
    })?;
    match decoded {
        Some((samples, h, w)) => finish(&header, samples, h, w, four, opts.mode),
        None => decode_jd_full(bytes, &header, opts),
    }
}

/// Full-size decode with jpeg-decoder, for the colour-space corner cases
/// zune-jpeg does not classify like libjpeg.
fn decode_jd_full(bytes: &[u8], header: &JpegHeader, opts: &DecodeOptions) -> Result<Image> {
    let four = four_channel_kind(header);
    let samples = guarded("JPEG", || {
        let mut dec = jpeg_decoder::Decoder::new(bytes);
        jd_setup_four(&mut dec, four);
        dec.decode().map_err(map_jd_err)
    })?;
    let (samples, four) = match four {
        Some(_) => (jd_four_to_stored_cmyk(samples), Some(FourChannel::Cmyk)),
        None => (samples, None),
    };
    finish(
        header,
        samples,
        usize::from(header.height),
        usize::from(header.width),
        four,
        opts.mode,
    )
}

/// Decodes a JPEG at the smallest DCT scale (1/8, 1/4, 1/2) whose upright
/// output is still at least `min_h` x `min_w`, or at full size, and returns
/// the image with the scale denominator used (1, 2, 4 or 8). Output sides
/// are `ceil(side / denominator)`, as in libjpeg.
///
/// Reduced-size IDCTs skip most of the dequantise/IDCT/upsample/colour work
/// and shrink everything downstream (crop/resize), which is the saving when
/// a random crop of a large photo is resized to 224 px. Backends:
/// * default (pure Rust): our own reduced-IDCT decoder for baseline JPEGs
///   with 1 or 3 components (nearly every photo); the `jpeg-decoder` crate's
///   `Decoder::scale` at 1/4 and 1/8 for the rest (progressive, CMYK), which
///   at 1/2 falls back to a full decode (numbers in README.md);
/// * feature `turbojpeg`: libjpeg-turbo for 1- and 3-component files.
///
/// Anything else (denominator 1, PNG input) is a plain
/// [`decode`](crate::decode). `min_h`/`min_w` are in the upright
/// (EXIF-oriented) frame, like [`jpeg_dimensions`].
///
/// To resize a crop `(top, left, h, w)` of the full image to `out_h x out_w`,
/// ask for `min_h = ceil(out_h * H / h)` (likewise for width) and divide
/// the crop box by the returned denominator:
///
/// ```
/// use sluice_imgproc::{decode_scaled, jpeg_dimensions, resized_crop_box, CropBox, DecodeOptions, Filter};
/// let f = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/coffee_320x240.jpg")).unwrap();
/// let (hh, ww) = jpeg_dimensions(&f).unwrap();
/// let (top, left, h, w) = (20, 40, 200, 260); // full-resolution crop
/// let min_h = (40 * hh).div_ceil(h);
/// let min_w = (40 * ww).div_ceil(w);
/// let (img, d) = decode_scaled(&f, &DecodeOptions::default(), min_h, min_w).unwrap();
/// assert_eq!(d, 4); // 60x80 still covers the 48x50 the crop needs
/// let s = d as f64;
/// let b = CropBox { top: top as f64 / s, left: left as f64 / s, height: h as f64 / s, width: w as f64 / s };
/// let out = resized_crop_box(&img, b, 40, 40, Filter::Bilinear, true).unwrap();
/// assert_eq!((out.height, out.width), (40, 40));
/// ```
pub fn decode_scaled(
    bytes: &[u8],
    opts: &DecodeOptions,
    min_h: usize,
    min_w: usize,
) -> Result<(Image, u32)> {
    if super::sniff(bytes) != Some(super::Format::Jpeg) {
        return super::decode(bytes, opts).map(|i| (i, 1));
    }
    let header = parse_checked_header(bytes, opts)?;
    let (sh, sw) = (usize::from(header.height), usize::from(header.width));
    // The request is upright; the file is stored unrotated.
    let (req_h, req_w) = if swaps_axes(header.orientation) {
        (min_w, min_h)
    } else {
        (min_h, min_w)
    };
    let denom = SCALED_DENOMINATORS
        .iter()
        .copied()
        .find(|&d| sh.div_ceil(d) >= req_h.max(1) && sw.div_ceil(d) >= req_w.max(1));
    if let Some(denom) = denom {
        if let Some(img) = decode_jpeg_at(bytes, &header, opts, denom)? {
            return Ok((img, denom as u32));
        }
    }
    decode_jpeg(bytes, opts).map(|i| (i, 1))
}

/// Decodes a JPEG whose header is `header` (already checked against `max_pixels`) at
/// 1/`denom` scale, one of [`SCALED_DENOMINATORS`]: `ceil(side / denom)` per side,
/// upright. `None` when the backend cannot give exactly that size (tiny images).
pub(crate) fn decode_jpeg_at(
    bytes: &[u8],
    header: &JpegHeader,
    opts: &DecodeOptions,
    denom: usize,
) -> Result<Option<Image>> {
    let (sh, sw) = (usize::from(header.height), usize::from(header.width));
    let (oh, ow) = (sh.div_ceil(denom), sw.div_ceil(denom));
    let four = four_channel_kind(header);
    #[cfg(feature = "turbojpeg")]
    if four.is_none() {
        let (samples, h, w) = tj::decode(bytes, header, denom)?;
        if (h, w) == (oh, ow) {
            return finish(header, samples, h, w, None, opts.mode).map(Some);
        }
        return Err(ImageError::Corrupt(
            "libjpeg-turbo returned an unexpected size".into(),
        ));
    }
    #[cfg(not(feature = "turbojpeg"))]
    if four.is_none() {
        if let Some((samples, h, w)) = guarded("JPEG", || super::dct::decode(bytes, denom))? {
            if (h, w) != (oh, ow) {
                return corrupt("scaled decoder returned an unexpected size");
            }
            return finish(header, samples, h, w, None, opts.mode).map(Some);
        }
        // Outside the scaled decoder's scope (progressive, Adobe RGB, ...): jpeg-decoder,
        // whose 1/2 decode costs more than a full one.
        if denom == 2 {
            return Ok(None);
        }
    }
    let scaled = guarded("JPEG", || {
        let mut dec = jpeg_decoder::Decoder::new(bytes);
        jd_setup_four(&mut dec, four);
        let got = dec.scale(ow as u16, oh as u16).map_err(map_jd_err)?;
        if (usize::from(got.1), usize::from(got.0)) != (oh, ow) {
            // The crate picked another scale (tiny images).
            return Ok(None);
        }
        let samples = dec.decode().map_err(map_jd_err)?;
        Ok(Some(samples))
    })?;
    let Some(samples) = scaled else {
        return Ok(None);
    };
    let (samples, four) = match four {
        Some(_) => (jd_four_to_stored_cmyk(samples), Some(FourChannel::Cmyk)),
        None => (samples, None),
    };
    finish(header, samples, oh, ow, four, opts.mode).map(Some)
}

/// Sets up jpeg-decoder for a 4-component file. Its "no transform" path
/// writes component rows one after another instead of interleaving them,
/// so we let it convert explicitly (CMYK: `255 - x`; YCCK: YCbCr->RGB and
/// `255 - K`) and undo that with [`jd_four_to_stored_cmyk`].
fn jd_setup_four(dec: &mut jpeg_decoder::Decoder<&[u8]>, four: Option<FourChannel>) {
    match four {
        Some(FourChannel::Cmyk) => dec.set_color_transform(jpeg_decoder::ColorTransform::CMYK),
        Some(FourChannel::Ycck) => dec.set_color_transform(jpeg_decoder::ColorTransform::YCCK),
        None => {}
    }
}

/// jpeg-decoder's converted 4-channel output -> CMYK as stored in an Adobe
/// file (the input [`crate::convert`] expects). In both cases that is
/// `255 - x` per sample: for YCCK the stored C is `255 - R` (as libjpeg's
/// `ycck_cmyk_convert` computes it) and jpeg-decoder returns `255 - K`.
fn jd_four_to_stored_cmyk(mut samples: Vec<u8>) -> Vec<u8> {
    samples.iter_mut().for_each(|v| *v = 255 - *v);
    samples
}

/// Denominators [`decode_scaled`] may use, largest first. (jpeg-decoder, the
/// fallback for progressive and CMYK files, is only used at 1/4 and 1/8: its
/// Huffman decoding is slower than zune-jpeg's, so its 1/2 decode costs more
/// CPU than a full zune decode.)
pub(crate) const SCALED_DENOMINATORS: [usize; 3] = [8, 4, 2];

fn map_jd_err(e: jpeg_decoder::Error) -> ImageError {
    match e {
        jpeg_decoder::Error::Unsupported(u) => ImageError::Unsupported(format!("JPEG: {u:?}")),
        jpeg_decoder::Error::Io(e) => ImageError::Truncated(format!("JPEG: {e}")),
        other => ImageError::Corrupt(format!("JPEG: {other}")),
    }
}

/// The optional libjpeg-turbo backend (feature `turbojpeg`): the decoder
/// Pillow itself uses, with the same defaults (accurate integer IDCT, fancy
/// upsampling), so full-size decodes match Pillow exactly; its scaled IDCTs
/// are also the fastest option measured (README.md).
#[cfg(feature = "turbojpeg")]
mod tj {
    use std::cell::RefCell;

    use super::{JpegHeader, Result};
    use crate::error::ImageError;

    thread_local! {
        // A TurboJPEG handle per thread, reused across images.
        static DEC: RefCell<Option<turbojpeg::Decompressor>> = const { RefCell::new(None) };
    }

    /// Decodes a 1- or 3-component JPEG at 1/`denom` scale into gray or RGB.
    pub(super) fn decode(
        bytes: &[u8],
        header: &JpegHeader,
        denom: usize,
    ) -> Result<(Vec<u8>, usize, usize)> {
        let err = |e: turbojpeg::Error| ImageError::Corrupt(format!("JPEG (libjpeg-turbo): {e}"));
        DEC.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(turbojpeg::Decompressor::new().map_err(err)?);
            }
            let Some(dec) = slot.as_mut() else {
                return Err(ImageError::Corrupt("libjpeg-turbo unavailable".into()));
            };
            let factor = turbojpeg::ScalingFactor::new(1, denom);
            dec.set_scaling_factor(factor).map_err(err)?;
            let hdr = dec.read_header(bytes).map_err(err)?;
            if (hdr.height, hdr.width) != (usize::from(header.height), usize::from(header.width)) {
                return Err(ImageError::Corrupt(
                    "libjpeg-turbo disagrees with the SOF size".into(),
                ));
            }
            let (h, w) = (factor.scale(hdr.height), factor.scale(hdr.width));
            let (format, per) = if header.components == 1 {
                (turbojpeg::PixelFormat::GRAY, 1)
            } else {
                (turbojpeg::PixelFormat::RGB, 3)
            };
            let mut pixels = vec![0u8; h * w * per];
            let image = turbojpeg::Image {
                pixels: pixels.as_mut_slice(),
                width: w,
                pitch: w * per,
                height: h,
                format,
            };
            dec.decompress(bytes, image).map_err(err)?;
            Ok((pixels, h, w))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal(markers: &[u8]) -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8];
        v.extend_from_slice(markers);
        v
    }

    #[test]
    fn header_rejects_garbage() {
        assert_eq!(parse_header(&[]), Err(ImageError::Empty));
        assert!(matches!(
            parse_header(b"\xff\xd8"),
            Err(ImageError::Corrupt(_))
        ));
        assert!(matches!(
            parse_header(&minimal(&[0xFF, 0xE0, 0x00])),
            Err(ImageError::Truncated(_))
        ));
        assert!(matches!(
            parse_header(&minimal(&[0xFF, 0xE0, 0x00, 0x01, 0, 0])),
            Err(ImageError::Corrupt(_))
        ));
        // SOS before SOF
        assert!(matches!(
            parse_header(&minimal(&[0xFF, 0xDA, 0x00, 0x02, 0xFF, 0xD9])),
            Err(ImageError::Corrupt(_))
        ));
        // 12-bit precision
        let sof12 = [0xFF, 0xC0, 0, 11, 12, 0, 8, 0, 8, 1, 1, 0x11, 0, 0xFF, 0xDA];
        assert!(matches!(
            parse_header(&minimal(&sof12)),
            Err(ImageError::Unsupported(_))
        ));
        // arithmetic
        let sof9 = [0xFF, 0xC9, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0, 0xFF, 0xDA];
        assert!(matches!(
            parse_header(&minimal(&sof9)),
            Err(ImageError::Unsupported(_))
        ));
    }

    /// The walk's failures keep the errors callers (and users) have always seen.
    #[test]
    fn header_walk_errors() {
        let t = |m: &str| Err(ImageError::Truncated(m.into()));
        let c = |m: &str| Err(ImageError::Corrupt(m.into()));
        let cases: [(&[u8], Result<JpegHeader>); 8] = [
            (b"\xff\xd9\xff\xd8", c("not a JPEG (no SOI marker)")),
            (b"\xff\xd8\xff", c("not a JPEG (no SOI marker)")),
            (
                b"\xff\xd8\xff\xe0\x00",
                t("stream ends inside a marker length"),
            ),
            (b"\xff\xd8\xff\xe0\x00\x01", c("marker 0xE0 has length 1")),
            (
                b"\xff\xd8\xff\xe0\x00\x09\x01",
                t("stream ends inside marker 0xE0"),
            ),
            (
                b"\xff\xd8\xff\xff\x01\xff\xd3\xff\xff",
                t("stream ends before the first scan"),
            ),
            (
                b"\xff\xd8\xff\xd8\x00\x02",
                c("second SOI marker before the first scan"),
            ),
            (
                b"\xff\xd8\xff\xd9\x00\x02",
                c("EOI marker before the first scan"),
            ),
        ];
        for (data, want) in cases {
            assert_eq!(parse_header(data), want, "{data:x?}");
        }
    }

    #[test]
    fn header_reads_sof_and_requires_eoi() {
        let mut f = minimal(&[0xFF, 0xC0, 0, 11, 8, 0, 5, 0, 7, 1, 1, 0x11, 0]);
        f.extend_from_slice(&[0xFF, 0xDA, 0, 2, 1, 2, 3]);
        assert!(matches!(parse_header(&f), Err(ImageError::Truncated(_))));
        f.extend_from_slice(&[0xFF, 0xD9]);
        let h = parse_header(&f).unwrap();
        assert_eq!((h.height, h.width, h.components), (5, 7, 1));
        assert_eq!(
            (&f[h.height_at..h.height_at + 2], h.mcu_rows),
            (&[0u8, 5][..], 8)
        );
    }
}

#[cfg(test)]
mod decoder_agreement {
    use super::*;
    use crate::decode::fixture;

    /// The jpeg-decoder path (used for scaled decodes and colour-space
    /// corner cases) must agree with the zune path at full size, including
    /// the CMYK/YCCK inversion dance.
    #[test]
    fn jpeg_decoder_full_matches_zune() {
        for name in [
            "photo_420.jpg",
            "photo_gray.jpg",
            "photo_cmyk.jpg",
            "photo_ycck.jpg",
            "photo_prog.jpg",
            "orient_6.jpg",
        ] {
            let bytes = fixture(name);
            let h = parse_header(&bytes).unwrap();
            for mode in [Mode::Rgb, Mode::L] {
                let opts = DecodeOptions {
                    mode,
                    ..Default::default()
                };
                let a = decode_jd_full(&bytes, &h, &opts).unwrap();
                let b = decode_jpeg(&bytes, &opts).unwrap();
                assert_eq!(
                    (a.height, a.width, a.channels),
                    (b.height, b.width, b.channels)
                );
                let mean = a
                    .data
                    .iter()
                    .zip(&b.data)
                    .map(|(&x, &y)| f64::from(x.abs_diff(y)))
                    .sum::<f64>()
                    / a.data.len() as f64;
                assert!(mean < 1.0, "{name} {mode:?}: mean |d| {mean}");
            }
        }
    }
}
