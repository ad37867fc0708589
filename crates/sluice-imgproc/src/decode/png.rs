//! PNG via the `png` crate, unpacked by hand to reproduce Pillow's
//! `convert("RGB")` / `convert("L")` for every colour type and bit depth.

use std::io::Cursor;

use png::{ColorType, Transformations};

use super::{check_pixels, guarded, DecodeOptions, Mode};
use crate::convert::{gray_to_rgb_buf, rgb_to_l_buf};
use crate::error::{ImageError, Result};
use crate::image::Image;
use crate::orient::{apply_orientation, exif_orientation};

fn map_err(e: png::DecodingError) -> ImageError {
    match e {
        png::DecodingError::IoError(e) => ImageError::Truncated(format!("PNG: {e}")),
        png::DecodingError::Format(f) => ImageError::Corrupt(format!("PNG: {f}")),
        png::DecodingError::Parameter(p) => ImageError::Corrupt(format!("PNG: {p}")),
        png::DecodingError::LimitsExceeded => {
            ImageError::Unsupported("PNG: decoder memory limit exceeded".into())
        }
    }
}

pub(crate) fn decode_png(bytes: &[u8], opts: &DecodeOptions) -> Result<Image> {
    guarded("PNG", || decode_png_inner(bytes, opts))
}

fn decode_png_inner(bytes: &[u8], opts: &DecodeOptions) -> Result<Image> {
    let mut dec = png::Decoder::new(Cursor::new(bytes));
    // Raw samples: we expand palettes, low bit depths and 16-bit samples
    // ourselves so each case can follow Pillow exactly.
    dec.set_transformations(Transformations::IDENTITY);
    {
        let hdr = dec.read_header_info().map_err(map_err)?;
        check_pixels(u64::from(hdr.width), u64::from(hdr.height), opts.max_pixels)?;
    }
    // Ancillary chunks (text, ICC) are bounded too; the pixel buffer is
    // allocated by us below, after the bomb check.
    dec.set_limits(png::Limits { bytes: 64 << 20 });
    let mut reader = dec.read_info().map_err(map_err)?;
    let (color, depth) = reader.output_color_type();
    let (width, height) = {
        let i = reader.info();
        (i.width as usize, i.height as usize)
    };
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| ImageError::Unsupported("PNG too large for memory".into()))?;
    let mut raw = vec![0u8; size];
    let frame = reader.next_frame(&mut raw).map_err(map_err)?;
    let line = frame.line_size;
    let info = reader.info();
    let palette = info.palette.as_ref().map(|p| p.to_vec());
    let mut orientation = info
        .exif_metadata
        .as_ref()
        .map_or(1, |e| exif_orientation(e));
    if info.exif_metadata.is_none() {
        // Pillow also honours an eXIf chunk placed after the image data.
        // A failure here (e.g. missing IEND) is ignored: the pixels are in.
        if reader.finish().is_ok() {
            if let Some(e) = reader.info().exif_metadata.as_ref() {
                orientation = exif_orientation(e);
            }
        }
    }
    let bits = depth as u8 as usize;
    let gray_rgb = unpack(&raw, line, width, height, color, bits, palette.as_deref())?;
    let data = match (gray_rgb, opts.mode) {
        (Unpacked::Gray(g), Mode::L) | (Unpacked::Rgb(g), Mode::Rgb) => g,
        (Unpacked::Gray(g), Mode::Rgb) => gray_to_rgb_buf(&g),
        (Unpacked::Rgb(c), Mode::L) => rgb_to_l_buf(&c),
    };
    let img = Image {
        height,
        width,
        channels: opts.mode.channels(),
        data,
    };
    Ok(apply_orientation(img, orientation))
}

enum Unpacked {
    Gray(Vec<u8>),
    Rgb(Vec<u8>),
}

/// Expands raw scanlines (`line` bytes each) into 8-bit gray or RGB.
fn unpack(
    raw: &[u8],
    line: usize,
    width: usize,
    height: usize,
    color: ColorType,
    bits: usize,
    palette: Option<&[u8]>,
) -> Result<Unpacked> {
    let samples = match color {
        ColorType::Grayscale | ColorType::Indexed => 1,
        ColorType::GrayscaleAlpha => 2,
        ColorType::Rgb => 3,
        ColorType::Rgba => 4,
    };
    let need = (width * samples * bits).div_ceil(8);
    if line < need || raw.len() < line * height {
        return Err(ImageError::Corrupt(
            "PNG scanlines shorter than declared".into(),
        ));
    }
    let rows = raw.chunks_exact(line).take(height);
    let px = width * height;
    match color {
        ColorType::Grayscale => {
            let mut out = Vec::with_capacity(px);
            for row in rows {
                match bits {
                    8 => out.extend_from_slice(&row[..width]),
                    // Pillow opens 16-bit gray as I;16 and clips values
                    // above 255 when converting to L/RGB (it does not
                    // scale). Reproduced deliberately.
                    16 => out.extend(
                        row[..2 * width]
                            .chunks_exact(2)
                            .map(|s| u16::from_be_bytes([s[0], s[1]]).min(255) as u8),
                    ),
                    // 1/2/4-bit gray is scaled to the full range (x255, x85, x17).
                    b => {
                        let scale = (255 / ((1u32 << b) - 1)) as u8;
                        out.extend((0..width).map(|x| sub_byte(row, x, b) * scale));
                    }
                }
            }
            Ok(Unpacked::Gray(out))
        }
        ColorType::GrayscaleAlpha => {
            // 8-bit LA drops alpha; 16-bit LA (opened as RGBA by Pillow)
            // keeps the high byte.
            let step = 2 * bits / 8;
            let mut out = Vec::with_capacity(px);
            for row in rows {
                out.extend(row[..width * step].chunks_exact(step).map(|s| s[0]));
            }
            Ok(Unpacked::Gray(out))
        }
        ColorType::Rgb | ColorType::Rgba => {
            let bps = bits / 8;
            let step = samples * bps;
            let mut out = Vec::with_capacity(px * 3);
            for row in rows {
                for s in row[..width * step].chunks_exact(step) {
                    // High byte of each 16-bit sample (Pillow's RGB;16B).
                    out.extend_from_slice(&[s[0], s[bps], s[2 * bps]]);
                }
            }
            Ok(Unpacked::Rgb(out))
        }
        ColorType::Indexed => {
            let pal = palette.ok_or_else(|| ImageError::Corrupt("PNG palette missing".into()))?;
            // Pillow pads a short palette with black.
            let mut lut = [[0u8; 3]; 256];
            for (i, c) in pal.chunks_exact(3).take(256).enumerate() {
                lut[i] = [c[0], c[1], c[2]];
            }
            let mut out = Vec::with_capacity(px * 3);
            for row in rows {
                for x in 0..width {
                    let idx = if bits == 8 {
                        row[x]
                    } else {
                        sub_byte(row, x, bits)
                    };
                    out.extend_from_slice(&lut[usize::from(idx)]);
                }
            }
            Ok(Unpacked::Rgb(out))
        }
    }
}

/// The `x`-th `bits`-wide sample of a packed row (MSB first).
#[inline]
fn sub_byte(row: &[u8], x: usize, bits: usize) -> u8 {
    let per = 8 / bits;
    let byte = row[x / per];
    let shift = 8 - bits * (x % per + 1);
    (byte >> shift) & ((1u8 << bits) - 1)
}
