//! WebP, GIF (first frame), BMP and TIFF through the `image` crate (only those decoders are
//! built: `image-webp`, `gif`, `tiff` and its own BMP reader), converted the way Pillow's
//! `convert("RGB")` / `convert("L")` converts them.
//!
//! The header's size is checked against `max_pixels` before anything is allocated, and the
//! decoder's own allocations are capped too (the `image` crate's `Limits`), so a hostile TIFF
//! strip table or WebP chunk cannot make it allocate more than the pixels allowed.

use std::io::Cursor;

use image::{DynamicImage, ImageDecoder, ImageFormat, ImageReader};

use super::{check_pixels, guarded, DecodeOptions, Format, Mode};
use crate::convert::{gray_to_rgb_buf, rgb_to_l_buf};
use crate::error::{ImageError, Result};
use crate::image::Image;
use crate::orient::apply_orientation;

/// The name errors use for `format`.
fn label(format: Format) -> &'static str {
    match format {
        Format::Webp => "WebP",
        Format::Gif => "GIF",
        Format::Bmp => "BMP",
        Format::Tiff => "TIFF",
        Format::Jpeg => "JPEG",
        Format::Png => "PNG",
    }
}

fn map_err(what: &str, e: image::ImageError) -> ImageError {
    use image::ImageError as E;
    match e {
        E::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            ImageError::Truncated(format!("{what}: {e}"))
        }
        E::IoError(e) => ImageError::Corrupt(format!("{what}: {e}")),
        E::Decoding(e) => {
            let msg = e.to_string();
            // The decoders report a short stream as a decoding error mentioning EOF.
            if msg.to_ascii_lowercase().contains("eof") || msg.contains("end of file") {
                ImageError::Truncated(format!("{what}: {msg}"))
            } else {
                ImageError::Corrupt(format!("{what}: {msg}"))
            }
        }
        E::Unsupported(e) => ImageError::Unsupported(format!("{what}: {e}")),
        E::Limits(e) => ImageError::Unsupported(format!("{what}: decoder memory limit ({e})")),
        other => ImageError::Corrupt(format!("{what}: {other}")),
    }
}

/// The `image` crate's decoder of a WebP, GIF, BMP or TIFF file, opened: its header read,
/// nothing decoded and no limit set yet.
fn open<'b>(bytes: &'b [u8], format: Format, what: &str) -> Result<impl ImageDecoder + use<'b>> {
    let image_format = match format {
        Format::Webp => ImageFormat::WebP,
        Format::Gif => ImageFormat::Gif,
        Format::Bmp => ImageFormat::Bmp,
        Format::Tiff => ImageFormat::Tiff,
        Format::Jpeg | Format::Png => {
            return Err(ImageError::Unsupported(format!("{what}: not decoded here")))
        }
    };
    let mut reader = ImageReader::new(Cursor::new(bytes));
    reader.set_format(image_format);
    // Opening reads the header only; a caller that decodes sets limits on what it allocates.
    reader.no_limits();
    reader.into_decoder().map_err(|e| map_err(what, e))
}

/// The stored (height, width) of a WebP, GIF, BMP or TIFF file, from its header alone;
/// `None` when it does not parse (or the parser panics) or for other formats.
pub(crate) fn other_dimensions(bytes: &[u8], format: Format) -> Option<(usize, usize)> {
    let what = label(format);
    let (w, h) = guarded(what, || Ok(open(bytes, format, what)?.dimensions())).ok()?;
    Some((h as usize, w as usize))
}

/// Decodes a WebP, GIF, BMP or TIFF file (`format` from [`super::sniff`]).
pub(crate) fn decode_other(bytes: &[u8], format: Format, opts: &DecodeOptions) -> Result<Image> {
    let what = label(format);
    guarded(what, || decode_inner(bytes, format, what, opts))
}

fn decode_inner(bytes: &[u8], format: Format, what: &str, opts: &DecodeOptions) -> Result<Image> {
    let mut decoder = open(bytes, format, what)?;
    let (width, height) = decoder.dimensions();
    check_pixels(u64::from(height), u64::from(width), opts.max_pixels)?;
    let mut limits = image::Limits::default();
    // The decoded pixels (at most 16 bytes each: 4 channels of f32) plus working room.
    limits.max_alloc = Some(
        (u64::from(height) * u64::from(width))
            .saturating_mul(16)
            .saturating_add(64 << 20),
    );
    decoder.set_limits(limits).map_err(|e| map_err(what, e))?;
    let orientation = decoder.orientation().map_or(1, |o| o.to_exif());
    let decoded = DynamicImage::from_decoder(decoder).map_err(|e| map_err(what, e))?;
    let (gray, rgb) = pillow_pixels(decoded);
    let data = match (gray, rgb, opts.mode) {
        (Some(g), _, Mode::L) => g,
        (Some(g), _, Mode::Rgb) => gray_to_rgb_buf(&g),
        (None, Some(c), Mode::Rgb) => c,
        (None, Some(c), Mode::L) => rgb_to_l_buf(&c),
        (None, None, _) => {
            return Err(ImageError::Unsupported(format!(
                "{what}: pixel format not decoded"
            )))
        }
    };
    let img = Image {
        height: height as usize,
        width: width as usize,
        channels: opts.mode.channels(),
        data,
    };
    Ok(apply_orientation(img, orientation))
}

/// The 8-bit gray or RGB pixels Pillow converts from: alpha is dropped (Pillow's
/// `convert("RGB")` does not composite), 16-bit gray is clipped at 255 (Pillow opens it as
/// `I;16` and clips when converting, as for PNG), other 16-bit samples keep their high byte.
fn pillow_pixels(img: DynamicImage) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    use DynamicImage as D;
    match img {
        D::ImageLuma8(g) => (Some(g.into_raw()), None),
        D::ImageLumaA8(g) => (
            Some(g.into_raw().chunks_exact(2).map(|p| p[0]).collect()),
            None,
        ),
        D::ImageLuma16(g) => (
            Some(g.into_raw().iter().map(|&v| v.min(255) as u8).collect()),
            None,
        ),
        D::ImageLumaA16(g) => (
            Some(
                g.into_raw()
                    .chunks_exact(2)
                    .map(|p| (p[0] >> 8) as u8)
                    .collect(),
            ),
            None,
        ),
        D::ImageRgb8(c) => (None, Some(c.into_raw())),
        D::ImageRgba8(c) => (
            None,
            Some(
                c.into_raw()
                    .chunks_exact(4)
                    .flat_map(|p| [p[0], p[1], p[2]])
                    .collect(),
            ),
        ),
        D::ImageRgb16(c) => (
            None,
            Some(c.into_raw().iter().map(|&v| (v >> 8) as u8).collect()),
        ),
        D::ImageRgba16(c) => (
            None,
            Some(
                c.into_raw()
                    .chunks_exact(4)
                    .flat_map(|p| [(p[0] >> 8) as u8, (p[1] >> 8) as u8, (p[2] >> 8) as u8])
                    .collect(),
            ),
        ),
        other => (None, Some(other.to_rgb8().into_raw())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode, sniff};
    use super::*;

    /// A 3x2 RGB image as an uncompressed 24-bit BMP (rows bottom-up, BGR, padded to 4).
    fn bmp() -> Vec<u8> {
        let px: [[u8; 3]; 6] = [
            [255, 0, 0],
            [0, 255, 0],
            [0, 0, 255],
            [10, 20, 30],
            [40, 50, 60],
            [70, 80, 90],
        ];
        let row = 12; // 3 px * 3 bytes = 9, padded to 12
        let mut out = Vec::new();
        out.extend(b"BM");
        out.extend(((54 + row * 2) as u32).to_le_bytes());
        out.extend([0u8; 4]);
        out.extend(54u32.to_le_bytes());
        out.extend(40u32.to_le_bytes());
        out.extend(3i32.to_le_bytes());
        out.extend(2i32.to_le_bytes());
        out.extend(1u16.to_le_bytes());
        out.extend(24u16.to_le_bytes());
        out.extend([0u8; 24]);
        for y in [1usize, 0] {
            for x in 0..3 {
                let [r, g, b] = px[y * 3 + x];
                out.extend([b, g, r]);
            }
            out.extend([0u8; 3]);
        }
        out
    }

    /// The header's size for every format the `image` crate decodes here, as its encoders
    /// write it; garbage after the magic is `None`.
    #[test]
    fn dimensions_come_from_the_header() {
        let img = DynamicImage::ImageRgb8(image::RgbImage::new(37, 23));
        for format in [
            ImageFormat::WebP,
            ImageFormat::Gif,
            ImageFormat::Bmp,
            ImageFormat::Tiff,
        ] {
            let mut out = Cursor::new(Vec::new());
            img.write_to(&mut out, format).unwrap();
            let bytes = out.into_inner();
            let sniffed = sniff(&bytes).unwrap();
            assert_eq!(
                other_dimensions(&bytes, sniffed),
                Some((23, 37)),
                "{format:?}"
            );
            assert_eq!(
                super::super::image_dimensions(&bytes),
                Some((23, 37)),
                "{format:?}"
            );
            assert_eq!(other_dimensions(&bytes[..8], sniffed), None, "{format:?}");
        }
        assert_eq!(other_dimensions(&bmp(), Format::Bmp), Some((2, 3)));
        assert_eq!(other_dimensions(b"GIF89a\xff", Format::Gif), None);
    }

    #[test]
    fn bmp_decodes_to_rgb_and_gray() {
        let b = bmp();
        assert_eq!(sniff(&b), Some(Format::Bmp));
        let img = decode(&b, &DecodeOptions::default()).unwrap();
        assert_eq!((img.height, img.width, img.channels), (2, 3, 3));
        assert_eq!(&img.data[..6], &[255, 0, 0, 0, 255, 0]);
        assert_eq!(&img.data[15..], &[70, 80, 90]);
        let gray = decode(
            &b,
            &DecodeOptions {
                mode: Mode::L,
                ..Default::default()
            },
        )
        .unwrap();
        // Pillow's L of pure red: (255 * 19595 + 32768) >> 16.
        assert_eq!((gray.channels, gray.data[0]), (1, 76));
    }

    #[test]
    fn size_is_checked_from_the_header_before_decoding() {
        let mut b = bmp();
        // Declare 20000 x 20000 pixels: refused as too large, not allocated.
        b[18..22].copy_from_slice(&20_000i32.to_le_bytes());
        b[22..26].copy_from_slice(&20_000i32.to_le_bytes());
        let e = decode(&b, &DecodeOptions::default()).unwrap_err();
        assert!(matches!(e, ImageError::TooLarge { .. }), "{e}");
    }

    #[test]
    fn truncated_and_corrupt_files_are_errors_naming_the_format() {
        let b = bmp();
        let e = decode(&b[..60], &DecodeOptions::default()).unwrap_err();
        assert!(
            matches!(&e, ImageError::Truncated(m) | ImageError::Corrupt(m) if m.starts_with("BMP")),
            "{e:?}"
        );
        for (bytes, name) in [
            (&b"GIF89a\x01\x00"[..], "GIF"),
            (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "WebP"),
            (b"II*\x00\x08\x00\x00\x00\xff\xff", "TIFF"),
        ] {
            let e = decode(bytes, &DecodeOptions::default()).unwrap_err();
            assert!(e.to_string().contains(name), "{name}: {e}");
        }
    }
}
