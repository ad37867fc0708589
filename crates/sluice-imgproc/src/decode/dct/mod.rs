//! The own JPEG decoder of baseline files in pure Rust: at 1/2, 1/4 and 1/8 size, and at
//! full size for a window (the part of the picture a crop needs).
//!
//! At 1/d every 8x8 block goes through a *reduced* IDCT straight to the output resolution,
//! so the full-size IDCT, upsampling and colour conversion are never done. The reduced IDCT
//! of a block to s x s pixels is the exact (8/s) x (8/s) box average of its full IDCT (a
//! fixed matrix per size, skipping the zero coefficients most blocks have), which is what
//! libjpeg's `jidctred.c` computes. As in libjpeg-turbo, a component subsampled 2x gets a
//! 2x larger IDCT instead of being upsampled, so every component lands on the same grid: a
//! 1/d decode is the full decode box-filtered by d (up to rounding). At full size the same
//! holds with an 8- or 16-point separable IDCT (`idct.rs`).
//!
//! [`decode_window`] decodes only the MCUs a window touches: the scan stops after the
//! window's last MCU row and the blocks before it outside the window are entropy-decoded
//! and dropped. Each block's pixels depend on that block alone, so a window is the same
//! bytes as that part of the whole image.
//!
//! Scope: what photo datasets hold — baseline/extended Huffman, 8-bit samples, one scan
//! holding all components, 1 (gray) or 3 (YCbCr) components, sampling factors that divide
//! evenly (at full size: 1 and 2 of the largest). Anything else (progressive, CMYK, Adobe
//! RGB, several scans) is `Ok(None)`: the caller decodes another way. Malformed data is an
//! error or garbage pixels (as with libjpeg), never a panic: every access is checked.

use std::cell::RefCell;
use std::mem::MaybeUninit;

use crate::error::{ImageError, Result};
use crate::simd::multiversion;

mod block;
mod frame;
mod huffman;
mod idct;

use block::{basis, decode_scan, Blocks, Kernel, Plane};
use frame::{parse, Component};
use huffman::Scan;
use idct::weights;

/// Natural (row-major) index of the k-th coefficient in zigzag order.
pub(super) const ZIGZAG: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

pub(super) fn corrupt<T>(msg: impl Into<String>) -> Result<T> {
    Err(ImageError::Corrupt(format!("JPEG: {}", msg.into())))
}

/// Blocks read past in one decode from which the skip lookahead is made for a table that
/// lacks it. Making its 4,096 entries took ~17 µs in a one-off timing on the Zen 5 dev
/// machine, about what reading 2,000 blocks with it saves (`examples/decode_hash.rs`:
/// 263 -> 245 µs per crop window, ~1,300 blocks read past in each).
const SKIM_BLOCKS: usize = 2048;

/// A rectangle of a decode's output grid, in the file's stored orientation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) top: usize,
    pub(crate) left: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
}

/// What [`decode_window`] gives: the pixels of a rectangle of the output grid (1 or 3
/// samples per pixel, stored orientation) that holds the window asked for.
#[derive(Debug)]
pub(crate) struct Region {
    pub(crate) samples: Vec<u8>,
    pub(crate) at: Window,
}

/// Decodes a baseline JPEG at 1/`denom` (2, 4 or 8): `(samples, height, width)` with 1
/// (gray) or 3 (RGB) samples per pixel in the stored orientation, `ceil(side / denom)`
/// per side; `Ok(None)` when the file is outside this decoder's scope.
pub(crate) fn decode(data: &[u8], denom: usize) -> Result<Option<(Vec<u8>, usize, usize)>> {
    if !matches!(denom, 2 | 4 | 8) {
        return Ok(None);
    }
    let region = decode_window(data, denom, None)?;
    Ok(region.map(|r| (r.samples, r.at.height, r.at.width)))
}

/// Decodes the part of a baseline JPEG at 1/`denom` (1, 2, 4 or 8) that holds `window` of
/// its output grid (all of it when `None`): the whole MCUs the window touches, cut to the
/// image. The scan stops after the window's last MCU row, and the blocks beside or above
/// the window are only entropy-decoded. At full size a component subsampled 2x is
/// upsampled in the DCT domain (a 16-point IDCT of its 8 coefficients), not by
/// interpolating between blocks, so a block's pixels depend on that block alone and a
/// region is the same bytes as that part of the whole image. `Ok(None)` for files outside
/// the decoder's scope (module docs; at full size also sampling factors other than 1 and
/// 2 relative to the largest) and for a window outside the image.
pub(crate) fn decode_window(
    data: &[u8],
    denom: usize,
    window: Option<Window>,
) -> Result<Option<Region>> {
    decode_region(data, denom, window, SKIM_BLOCKS)
}

/// [`decode_window`], with the skip lookahead made from `skim_blocks` blocks read past
/// (the tests make it at once, or never, on small files).
fn decode_region(
    data: &[u8],
    denom: usize,
    window: Option<Window>,
    skim_blocks: usize,
) -> Result<Option<Region>> {
    if !matches!(denom, 1 | 2 | 4 | 8) {
        return Ok(None);
    }
    let Some(f) = parse(data)? else {
        return Ok(None);
    };
    let n = f.comps.len();
    // Three components are YCbCr unless the file says RGB (Adobe transform 0, or the
    // component ids 'R', 'G', 'B' libjpeg also honours).
    if n == 3 && (f.adobe == Some(0) || f.comps.iter().map(|c| c.id).eq(*b"RGB")) {
        return Ok(None);
    }
    let hmax = f.comps.iter().map(|c| c.h).max().unwrap_or(0);
    let vmax = f.comps.iter().map(|c| c.v).max().unwrap_or(0);
    if f.height == 0 || f.width == 0 || hmax == 0 || vmax == 0 {
        return corrupt("bad frame header");
    }
    // Each component's IDCT size: its 8x8 block covers 8*hmax/h image pixels, which at
    // 1/denom are that many over denom output pixels.
    let mut sizes = Vec::with_capacity(n);
    for c in &f.comps {
        if c.h == 0 || c.v == 0 || hmax % c.h != 0 || vmax % c.v != 0 {
            return Ok(None);
        }
        let (fh, fv) = (8 * (hmax / c.h), 8 * (vmax / c.v));
        let fits = if denom == 1 {
            matches!(fh, 8 | 16) && matches!(fv, 8 | 16)
        } else {
            fh % denom == 0 && fv % denom == 0 && fh / denom <= 8 && fv / denom <= 8
        };
        if !fits {
            return Ok(None);
        }
        sizes.push((fv / denom, fh / denom));
    }
    let (oh, ow) = (f.height.div_ceil(denom), f.width.div_ceil(denom));
    let mcux = f.width.div_ceil(8 * hmax);
    let mcuy = f.height.div_ceil(8 * vmax);
    // The scan's unit: an MCU, or one block of a single-component scan, which is not
    // interleaved (blocks cover the component in raster order, without MCU padding).
    let ((units_w, units_h), unit_px) = if n == 1 {
        ((f.width.div_ceil(8), f.height.div_ceil(8)), sizes[0])
    } else {
        ((mcux, mcuy), (8 * vmax / denom, 8 * hmax / denom))
    };
    // Blocks of each component per unit (rows, columns).
    let unit_blocks = |c: &Component| if n == 1 { (1, 1) } else { (c.v, c.h) };
    let w = window.unwrap_or(Window {
        top: 0,
        left: 0,
        height: oh,
        width: ow,
    });
    let (bottom, right) = (
        w.top.saturating_add(w.height).min(oh),
        w.left.saturating_add(w.width).min(ow),
    );
    if w.top >= bottom || w.left >= right {
        return Ok(None);
    }
    let (uy0, uy1) = (w.top / unit_px.0, bottom.div_ceil(unit_px.0).min(units_h));
    let (ux0, ux1) = (w.left / unit_px.1, right.div_ceil(unit_px.1).min(units_w));
    let at = Window {
        top: uy0 * unit_px.0,
        left: ux0 * unit_px.1,
        height: (uy1 * unit_px.0).min(oh) - uy0 * unit_px.0,
        width: (ux1 * unit_px.1).min(ow) - ux0 * unit_px.1,
    };

    let mut planes = Vec::with_capacity(n);
    for (i, c) in f.comps.iter().enumerate() {
        let (Some(q), Some(dc), Some(ac)) = (
            f.qt.get(c.tq).and_then(|q| q.as_ref()),
            f.dc.get(c.td).and_then(|t| t.as_ref()),
            f.ac.get(c.ta).and_then(|t| t.as_ref()),
        ) else {
            return corrupt("scan uses a missing table");
        };
        let (sv, sh) = sizes[i];
        let kernel = match denom {
            1 => weights(sv)
                .zip(weights(sh))
                .map(|(v, h)| Kernel::Full(v, h)),
            _ => basis(sv, sh).map(Kernel::Basis),
        };
        let Some(kernel) = kernel else {
            return corrupt("no IDCT for a block size");
        };
        let (bv, bh) = unit_blocks(c);
        let keep = Blocks {
            x0: ux0 * bh,
            x1: ux1 * bh,
            y0: uy0 * bv,
            y1: uy1 * bv,
        };
        let stride = (keep.x1 - keep.x0) * sh;
        planes.push(Plane {
            q,
            dc,
            ac,
            kernel,
            sv,
            sh,
            pixels: spare_plane(stride * (keep.y1 - keep.y0) * sv),
            stride,
            blocks_w: units_w * bh,
            keep,
            skim: false,
        });
    }
    // Blocks read past: all those of the units scanned, less those kept.
    let per_unit: usize = f.comps.iter().map(unit_blocks).map(|(v, h)| v * h).sum();
    let kept: usize = planes
        .iter()
        .map(|p| (p.keep.x1 - p.keep.x0) * (p.keep.y1 - p.keep.y0))
        .sum();
    let skim = (units_w * uy1 * per_unit).saturating_sub(kept) >= skim_blocks;
    for p in &mut planes {
        p.skim = skim;
    }
    let scan = Scan::new(data, f.scan);
    let mut bits = scan.bits();
    decode_scan(
        &mut planes,
        &f.comps,
        units_w * uy1,
        mcux,
        f.restart,
        &mut bits,
    )?;

    // Every plane is on the output grid now, starting at the region's corner; interleave
    // and convert colours.
    let (rh, rw) = (at.height, at.width);
    // Not zeroed first: every byte is written below, or the Vec is dropped empty.
    let mut out = Vec::with_capacity(rh * rw * n);
    let spare = &mut out.spare_capacity_mut()[..rh * rw * n];
    for (y, row) in spare.chunks_exact_mut(rw * n).enumerate() {
        let line = |i: usize| {
            let p: &Plane<'_> = planes.get(i)?;
            p.pixels.get(..p.len())?.get(y * p.stride..)?.get(..rw)
        };
        match (line(0), line(1), line(2)) {
            (Some(l), None, None) if n == 1 => {
                for (o, &v) in row.iter_mut().zip(l) {
                    o.write(v);
                }
            }
            (Some(l), Some(cb), Some(cr)) => ycc_row_to_rgb(l, cb, cr, row),
            _ => return corrupt("plane smaller than the region"),
        }
    }
    // SAFETY: each of the `rh` rows of `rw * n` bytes was written (a line is `rw` samples
    // or the function returned above).
    unsafe { out.set_len(rh * rw * n) };
    SPARE_PLANES.with_borrow_mut(|spare| {
        spare.extend(
            planes
                .into_iter()
                .map(|p| p.pixels)
                .take(3usize.saturating_sub(spare.len())),
        )
    });
    Ok(Some(Region { samples: out, at }))
}

thread_local! {
    /// Plane buffers of this thread's last decode, for the next: every kept block writes
    /// all its pixels, so a buffer needs no zeroing (nor fresh pages) to be reused.
    static SPARE_PLANES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A plane buffer of at least `len` bytes (the blocks are written at their offsets and
/// the rows read by them, so a longer one serves), reused when one is spare: only its
/// growth is zeroed.
fn spare_plane(len: usize) -> Vec<u8> {
    let mut buf = SPARE_PLANES.with_borrow_mut(Vec::pop).unwrap_or_default();
    if buf.len() < len {
        buf.resize(len, 0);
    }
    buf
}

multiversion! {
/// libjpeg's YCbCr -> RGB (`jdcolor.c`: 16-bit fixed point, rounded) for one row.
fn ycc_row_to_rgb(y: &[u8], cb: &[u8], cr: &[u8], out: &mut [MaybeUninit<u8>]) {
    const HALF: i32 = 1 << 15;
    // One pass, pixel by pixel: LLVM vectorizes the three interleaved stores as one
    // shuffled store group (a separate interleaving pass stayed scalar).
    for (((px, &l), &u), &v) in out.chunks_exact_mut(3).zip(y).zip(cb).zip(cr) {
        let (l, u, v) = (i32::from(l), i32::from(u) - 128, i32::from(v) - 128);
        px[0].write((l + ((91_881 * v + HALF) >> 16)).clamp(0, 255) as u8);
        px[1].write((l + ((-22_554 * u - 46_802 * v + HALF) >> 16)).clamp(0, 255) as u8);
        px[2].write((l + ((116_130 * u + HALF) >> 16)).clamp(0, 255) as u8);
    }
}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Corrupt files give errors or garbage, never a panic (debug builds also trap
    /// arithmetic overflow): random byte changes and cuts of baseline fixtures.
    /// (Callers check the header and the pixel limit first.)
    #[test]
    fn mutated_files_never_panic() {
        let mut s = 0x00C0_FFEEu64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for name in [
            "photo_420.jpg",
            "photo_restart.jpg",
            "photo_gray.jpg",
            "photo_422.jpg",
        ] {
            let good = crate::decode::fixture(name);
            assert!(decode(&good, 4).unwrap().is_some(), "{name}");
            for i in 0..400 {
                let mut bad = good.clone();
                for _ in 0..1 + i % 4 {
                    let at = rnd() as usize % bad.len();
                    bad[at] = rnd() as u8;
                }
                if i % 5 == 0 {
                    bad.truncate(rnd() as usize % bad.len());
                }
                // As in use: the header walk (size limit, truncation) comes first.
                let small = super::super::jpeg::parse_header(&bad)
                    .is_ok_and(|h| usize::from(h.height) * usize::from(h.width) <= 1 << 20);
                if small {
                    for d in [2, 4, 8] {
                        let _ = decode(&bad, d);
                    }
                    let win = Window {
                        top: 5,
                        left: 7,
                        height: 30,
                        width: 20,
                    };
                    let _ = decode_window(&bad, 1, Some(win));
                    let _ = decode_window(&bad, 1, None);
                }
            }
        }
    }

    /// A window's region is those pixels of the whole image's full-size decode, byte for
    /// byte, on every SIMD path: the blocks beside and above it are read past, the rows
    /// below never read, and a block's pixels depend on that block alone.
    #[test]
    fn a_window_is_that_part_of_the_whole_decode() {
        let mut rnd = crate::decode::below(0x0B5E_55ED);
        let mut decoded = 0;
        for name in [
            "photo_420.jpg",
            "photo_422.jpg",
            "photo_444.jpg",
            "photo_gray.jpg",
            "photo_restart.jpg",
            "photo_odd.jpg",
            "coffee_320x240.jpg",
        ] {
            let bytes = crate::decode::fixture(name);
            let Some(whole) = decode_window(&bytes, 1, None).unwrap() else {
                continue;
            };
            decoded += 1;
            let (h, w) = (whole.at.height, whole.at.width);
            let n = whole.samples.len() / (h * w);
            crate::simd::for_each_path(|path| {
                for _ in 0..30 {
                    let (top, left) = (rnd(h), rnd(w));
                    let win = Window {
                        top,
                        left,
                        height: 1 + rnd(h - top),
                        width: 1 + rnd(w - left),
                    };
                    let r = decode_window(&bytes, 1, Some(win)).unwrap().unwrap();
                    let a = r.at;
                    assert!(a.top <= top && a.left <= left, "{name}");
                    assert!(a.top + a.height >= top + win.height, "{name}");
                    assert!(a.left + a.width >= left + win.width, "{name}");
                    assert!(a.top + a.height <= h && a.left + a.width <= w, "{name}");
                    for y in 0..a.height {
                        let got = &r.samples[y * a.width * n..][..a.width * n];
                        let want = &whole.samples[((a.top + y) * w + a.left) * n..][..a.width * n];
                        assert_eq!(got, want, "{name} ({path}): row {} of {win:?}", a.top + y);
                    }
                }
            });
        }
        assert!(decoded >= 5, "{decoded}");
        // Nothing to decode: out of the image, or empty.
        let bytes = crate::decode::fixture("photo_420.jpg");
        for win in [
            Window {
                top: 1 << 20,
                left: 0,
                height: 4,
                width: 4,
            },
            Window {
                top: 0,
                left: 0,
                height: 0,
                width: 4,
            },
        ] {
            assert!(decode_window(&bytes, 1, Some(win)).unwrap().is_none());
        }
    }

    /// Blocks read past one symbol at a time (a fresh thread, so no table of its Huffman
    /// cache has a skip lookahead, and none is made) and several at a time (the lookahead
    /// made at once): the same bytes, for windows everywhere in every fixture.
    #[test]
    fn blocks_read_past_decode_alike_one_or_several_symbols_at_a_time() {
        let mut rnd = crate::decode::below(0x5C1A_0001);
        for name in [
            "photo_420.jpg",
            "photo_422.jpg",
            "photo_gray.jpg",
            "photo_restart.jpg",
            "coffee_320x240.jpg",
        ] {
            let bytes = crate::decode::fixture(name);
            let whole = decode_window(&bytes, 1, None).unwrap().unwrap().at;
            for _ in 0..30 {
                let (top, left) = (rnd(whole.height), rnd(whole.width));
                let win = Window {
                    top,
                    left,
                    height: 1 + rnd(whole.height - top),
                    width: 1 + rnd(whole.width - left),
                };
                let plain = std::thread::scope(|s| {
                    s.spawn(|| decode_region(&bytes, 1, Some(win), usize::MAX))
                        .join()
                        .unwrap()
                })
                .unwrap()
                .unwrap();
                let skimmed = decode_region(&bytes, 1, Some(win), 0).unwrap().unwrap();
                assert_eq!(
                    (plain.at, plain.samples),
                    (skimmed.at, skimmed.samples),
                    "{name}"
                );
            }
        }
    }
}
