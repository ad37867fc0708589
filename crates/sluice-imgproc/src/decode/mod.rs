//! Decoding JPEG, PNG, WebP, GIF, BMP and TIFF into [`Image`]s with Pillow-compatible
//! results.

mod crop;
#[cfg(not(feature = "turbojpeg"))]
mod dct;
mod jpeg;
mod markers;
mod other;
mod png;

use crate::error::{ImageError, Result};
use crate::image::Image;

pub use crop::{
    dct_denominator, decode_for_crop, decode_resized_crop, DecodedForCrop, DCT_MIN_RESIDUAL,
};
pub use jpeg::{decode_scaled, jpeg_dimensions, jpeg_orientation};

/// Pillow's `Image.MAX_IMAGE_PIXELS` (1024 * 1024 * 1024 // 4 // 3). Pillow
/// warns above it and refuses at twice it; sluice refuses above it, since
/// a training sample of ~90 MP is almost certainly a mistake or an attack.
pub const DEFAULT_MAX_PIXELS: u64 = 89_478_485;

/// Output pixel layout of [`decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// 3 channels, like Pillow's `convert("RGB")`.
    #[default]
    Rgb,
    /// 1 channel, like Pillow's `convert("L")` (ITU-R 601-2 luma with
    /// Pillow's integer rounding).
    L,
}

impl Mode {
    /// Samples per pixel of this mode.
    pub fn channels(self) -> usize {
        match self {
            Mode::Rgb => 3,
            Mode::L => 1,
        }
    }
}

/// Options for [`decode`] and [`decode_scaled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Output layout.
    pub mode: Mode,
    /// Decompression-bomb guard: images whose header declares more than
    /// this many pixels (height * width, before any scaling) are rejected
    /// with [`ImageError::TooLarge`] before any pixel buffer is allocated.
    pub max_pixels: u64,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            mode: Mode::Rgb,
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

/// Container formats recognised by [`sniff`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JPEG/JFIF/EXIF (starts `FF D8 FF`).
    Jpeg,
    /// PNG (8-byte signature).
    Png,
    /// WebP, lossy or lossless (`RIFF....WEBP`).
    Webp,
    /// GIF 87a/89a; the first frame is decoded.
    Gif,
    /// Windows bitmap (`BM`).
    Bmp,
    /// TIFF, little- or big-endian (`II*\0`, `MM\0*`).
    Tiff,
}

/// The stored (height, width) of an image file of any format [`decode`] reads, from its
/// header alone (before any EXIF rotation); `None` for a header that does not parse.
///
/// ```
/// let png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x01\x00\0\0\0\x80\x08\x02\0\0\0";
/// assert_eq!(sluice_imgproc::image_dimensions(png), Some((128, 256)));
/// assert_eq!(sluice_imgproc::image_dimensions(b"%PDF-1.4"), None);
/// ```
pub fn image_dimensions(bytes: &[u8]) -> Option<(usize, usize)> {
    match sniff(bytes)? {
        Format::Jpeg => jpeg_dimensions(bytes).ok(),
        Format::Png => {
            // IHDR is the first chunk: width and height, big-endian, at bytes 16 and 20.
            let be = |at: usize| {
                Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize)
            };
            Some((be(20)?, be(16)?))
        }
        other => other::other_dimensions(bytes, other),
    }
}

/// Guesses the format from magic bytes; `None` for anything else.
///
/// ```
/// use sluice_imgproc::{sniff, Format};
/// assert_eq!(sniff(b"\x89PNG\r\n\x1a\n...."), Some(Format::Png));
/// assert_eq!(sniff(b"\xff\xd8\xff\xe0"), Some(Format::Jpeg));
/// assert_eq!(sniff(b"GIF89a"), Some(Format::Gif));
/// assert_eq!(sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 "), Some(Format::Webp));
/// assert_eq!(sniff(b"II*\x00"), Some(Format::Tiff));
/// assert_eq!(sniff(b"BM\x00\x00"), Some(Format::Bmp));
/// assert_eq!(sniff(b"%PDF-1.4"), None);
/// ```
pub fn sniff(bytes: &[u8]) -> Option<Format> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some(Format::Webp)
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some(Format::Gif)
    } else if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") {
        Some(Format::Tiff)
    } else if bytes.starts_with(b"BM") {
        Some(Format::Bmp)
    } else {
        None
    }
}

/// Decodes a JPEG, PNG, WebP, GIF, BMP or TIFF (format sniffed from the
/// magic bytes) into an upright 8-bit image, matching Pillow's
/// `ImageOps.exif_transpose(Image.open(f)).convert(mode)`:
///
/// * JPEG: baseline, extended and progressive Huffman; gray, YCbCr,
///   CMYK and YCCK (Adobe-inverted CMYK, as Pillow assumes) -> RGB; EXIF
///   orientation applied. Decoded with `zune-jpeg`, which agrees with
///   Pillow's libjpeg-turbo to a fraction of a level on average.
/// * PNG: every colour type and bit depth; 16-bit samples keep their high
///   byte, except 16-bit grayscale, which Pillow opens as `I;16` and
///   *clips* to 255 on conversion (reproduced as is); alpha and `tRNS` are
///   dropped, palettes expanded; an `eXIf` orientation is applied.
/// * WebP (lossless exactly, lossy within rounding of libwebp's YUV->RGB),
///   GIF (first frame, palette expanded), BMP and TIFF (8-bit, and 16-bit
///   as for PNG) through the `image` crate; alpha dropped; a TIFF
///   orientation tag or WebP EXIF orientation applied.
///
/// The decompression-bomb limit is checked from the header first.
///
/// ```
/// use sluice_imgproc::{decode, DecodeOptions, ImageError, Mode};
/// let png = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/rgb8.png")).unwrap();
/// let img = decode(&png, &DecodeOptions::default()).unwrap();
/// assert_eq!((img.height, img.width, img.channels), (9, 12, 3));
/// let gray = decode(&png, &DecodeOptions { mode: Mode::L, ..Default::default() }).unwrap();
/// assert_eq!(gray.channels, 1);
/// assert_eq!(decode(b"", &DecodeOptions::default()), Err(ImageError::Empty));
/// ```
pub fn decode(bytes: &[u8], opts: &DecodeOptions) -> Result<Image> {
    if bytes.is_empty() {
        return Err(ImageError::Empty);
    }
    match sniff(bytes) {
        Some(Format::Jpeg) => jpeg::decode_jpeg(bytes, opts),
        Some(Format::Png) => png::decode_png(bytes, opts),
        Some(f) => other::decode_other(bytes, f, opts),
        None => Err(ImageError::Unsupported(format!(
            "unknown image format (first bytes {:02x?})",
            &bytes[..bytes.len().min(8)]
        ))),
    }
}

/// A file of `tests/fixtures`, for the decoders' tests.
#[cfg(test)]
pub(crate) fn fixture(name: &str) -> Vec<u8> {
    let dir = env!("CARGO_MANIFEST_DIR");
    std::fs::read(format!("{dir}/tests/fixtures/{name}")).unwrap()
}

/// Fixed pseudo-random numbers below `n` (xorshift from `seed`), for the decoders' tests.
#[cfg(test)]
pub(crate) fn below(seed: u64) -> impl FnMut(usize) -> usize {
    let mut s = seed;
    move |n| {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s % n as u64) as usize
    }
}

pub(crate) fn check_pixels(height: u64, width: u64, max_pixels: u64) -> Result<()> {
    if height.saturating_mul(width) > max_pixels {
        return Err(ImageError::TooLarge {
            height,
            width,
            max_pixels,
        });
    }
    if height == 0 || width == 0 {
        return Err(ImageError::Corrupt(format!(
            "header declares a {height}x{width} image"
        )));
    }
    Ok(())
}

/// Runs a third-party decoder, turning a panic inside it into
/// [`ImageError::Corrupt`]. Both decoders are pure Rust and fuzzed
/// upstream, but a data loader must survive any file; this is the backstop
/// behind our own header validation, not the main defence.
pub(crate) fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => Err(ImageError::Corrupt(format!(
            "{what} decoder panicked on this input"
        ))),
    }
}
