//! EXIF orientation: parsing the tag and applying it like
//! `PIL.ImageOps.exif_transpose`.

use crate::image::Image;

/// Reads the Orientation tag (0x0112) from a TIFF-structured EXIF block (the
/// payload after `Exif\0\0` in a JPEG APP1, or a PNG `eXIf` chunk).
///
/// Returns 1 ("as stored") when the block is malformed or the tag is
/// missing or outside 1..=8, which is what Pillow's `exif_transpose` does
/// in effect: it leaves such images alone.
pub(crate) fn exif_orientation(tiff: &[u8]) -> u8 {
    parse_orientation(tiff)
        .filter(|o| (1..=8).contains(o))
        .unwrap_or(1)
}

fn parse_orientation(t: &[u8]) -> Option<u8> {
    let le = match t.get(0..4)? {
        [b'I', b'I', 42, 0] => true,
        [b'M', b'M', 0, 42] => false,
        _ => return None,
    };
    let u16_at = |i: usize| -> Option<u16> {
        let b = t.get(i..i.checked_add(2)?)?;
        Some(if le {
            u16::from_le_bytes([b[0], b[1]])
        } else {
            u16::from_be_bytes([b[0], b[1]])
        })
    };
    let u32_at = |i: usize| -> Option<u32> {
        let b = t.get(i..i.checked_add(4)?)?;
        let a = [b[0], b[1], b[2], b[3]];
        Some(if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        })
    };
    let ifd0 = u32_at(4)? as usize;
    let count = u16_at(ifd0)? as usize;
    for k in 0..count {
        let e = ifd0.checked_add(2 + 12 * k)?;
        if u16_at(e)? == 0x0112 {
            let typ = u16_at(e + 2)?;
            // SHORT is the only legal type; tolerate LONG/BYTE writers.
            let v = match typ {
                3 => u32::from(u16_at(e + 8)?),
                4 => u32_at(e + 8)?,
                1 => u32::from(*t.get(e + 8)?),
                _ => return None,
            };
            return u8::try_from(v).ok();
        }
    }
    None
}

/// Which upright axes (rows, columns) run backwards through the stored image under
/// orientation `o` (see the source pixel mapping in [`apply_orientation`]).
pub(crate) fn reverses_axes(o: u8) -> (bool, bool) {
    (matches!(o, 3 | 4 | 7 | 8), matches!(o, 2 | 3 | 6 | 7))
}

/// True when orientation `o` swaps width and height (transpose, rotations
/// by 90/270 degrees).
pub(crate) fn swaps_axes(o: u8) -> bool {
    (5..=8).contains(&o)
}

/// Applies EXIF orientation `o` (1..=8) so the result is upright, exactly as
/// Pillow's `exif_transpose` (2: mirror, 3: rotate 180, 4: flip, 5:
/// transpose, 6: rotate 270 (PIL), 7: transverse, 8: rotate 90 (PIL)).
/// Pure index shuffling: no pixel value changes.
pub(crate) fn apply_orientation(img: Image, o: u8) -> Image {
    if !(2..=8).contains(&o) {
        return img;
    }
    let (h, w, c) = (img.height, img.width, img.channels);
    let (oh, ow) = if swaps_axes(o) { (w, h) } else { (h, w) };
    let mut out = vec![0u8; img.data.len()];
    // For every output pixel (y, x) find the source pixel (sy, sx).
    for y in 0..oh {
        let row = &mut out[y * ow * c..(y + 1) * ow * c];
        for x in 0..ow {
            let (sy, sx) = match o {
                2 => (y, w - 1 - x),
                3 => (h - 1 - y, w - 1 - x),
                4 => (h - 1 - y, x),
                5 => (x, y),
                6 => (h - 1 - x, y),
                7 => (h - 1 - x, w - 1 - y),
                _ => (x, w - 1 - y), // 8
            };
            let s = (sy * w + sx) * c;
            row[x * c..x * c + c].copy_from_slice(&img.data[s..s + c]);
        }
    }
    Image {
        height: oh,
        width: ow,
        channels: c,
        data: out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiff(le: bool, tag_type: u16, value: u16) -> Vec<u8> {
        let mut t = Vec::new();
        let p16 = |t: &mut Vec<u8>, v: u16| {
            t.extend_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() })
        };
        let p32 = |t: &mut Vec<u8>, v: u32| {
            t.extend_from_slice(&if le { v.to_le_bytes() } else { v.to_be_bytes() })
        };
        t.extend_from_slice(if le { b"II" } else { b"MM" });
        p16(&mut t, 42);
        p32(&mut t, 8);
        p16(&mut t, 1);
        p16(&mut t, 0x0112);
        p16(&mut t, tag_type);
        p32(&mut t, 1);
        p16(&mut t, value);
        p16(&mut t, 0);
        p32(&mut t, 0);
        t
    }

    #[test]
    fn parses_both_byte_orders() {
        for o in 1..=8 {
            assert_eq!(exif_orientation(&tiff(true, 3, o)), o as u8);
            assert_eq!(exif_orientation(&tiff(false, 3, o)), o as u8);
        }
    }

    #[test]
    fn garbage_means_upright() {
        assert_eq!(exif_orientation(&[]), 1);
        assert_eq!(exif_orientation(b"II*\0\xff\xff\xff\xff"), 1);
        assert_eq!(exif_orientation(&tiff(true, 3, 9)), 1);
        assert_eq!(exif_orientation(&tiff(true, 7, 6)), 1);
        let mut t = tiff(true, 3, 6);
        t.truncate(12);
        assert_eq!(exif_orientation(&t), 1);
    }

    #[test]
    fn rotations_compose() {
        // 2x3 gray image 0..6
        let img = Image::new(2, 3, 1, (0..6).collect()).unwrap();
        // PIL ROTATE_270 (orientation 6) = rotate clockwise.
        let r = apply_orientation(img.clone(), 6);
        assert_eq!((r.height, r.width), (3, 2));
        assert_eq!(r.data, vec![3, 0, 4, 1, 5, 2]);
        let r8 = apply_orientation(img.clone(), 8);
        assert_eq!(r8.data, vec![2, 5, 1, 4, 0, 3]);
        let t = apply_orientation(img.clone(), 5);
        assert_eq!(t.data, vec![0, 3, 1, 4, 2, 5]);
        let m = apply_orientation(img.clone(), 2);
        assert_eq!(m.data, vec![2, 1, 0, 5, 4, 3]);
        let r3 = apply_orientation(img, 3);
        assert_eq!(r3.data, vec![5, 4, 3, 2, 1, 0]);
    }
}
