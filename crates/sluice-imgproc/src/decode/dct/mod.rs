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
use std::sync::LazyLock;

use crate::error::{ImageError, Result};
use crate::simd::{multiversion, sat_u8};

mod frame;
mod huffman;
mod idct;

use frame::{parse, Component};
use huffman::{Bits, Huffman, Scan, AC_EOB, AC_LONG, AC_ZRL, FAST_BITS, SKIP_BITS, SKIP_EOB};
use idct::{cosine, weights, RowPass, Weights};

/// Natural (row-major) index of the k-th coefficient in zigzag order.
pub(super) const ZIGZAG: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

pub(super) fn corrupt<T>(msg: impl Into<String>) -> Result<T> {
    Err(ImageError::Corrupt(format!("JPEG: {}", msg.into())))
}

/// `w[j][k]`: the average of outputs `j*8/s .. (j+1)*8/s` of the 1-D 8-point IDCT of a
/// unit coefficient `k`.
fn reduced_idct_weights(s: usize) -> [[f64; 8]; 8] {
    let mut m = [[0f64; 8]; 8];
    let group = 8 / s;
    for (j, row) in m.iter_mut().enumerate().take(s) {
        for (k, cell) in row.iter_mut().enumerate() {
            let sum: f64 = (j * group..(j + 1) * group).map(|n| cosine(k, n, 8)).sum();
            *cell = sum / group as f64;
        }
    }
    m
}

/// The reduced IDCT to `sv` x `sh` pixels as basis images: coefficient `(r, c)` (natural
/// order) adds `value * table[(r*8 + c) * sv*sh ..][.. sv*sh]` to the block. The reduced
/// IDCT of a block is the box average of its full IDCT (what libjpeg's `jidctred.c`
/// computes), and blocks are sparse, so summing a few basis images is cheap.
struct Basis {
    sv: usize,
    sh: usize,
    table: Vec<f32>,
}

impl Basis {
    fn new(sv: usize, sh: usize) -> Basis {
        let (wv, wh) = (reduced_idct_weights(sv), reduced_idct_weights(sh));
        let n = sv * sh;
        let mut table = vec![0f32; 64 * n];
        for (rc, img) in table.chunks_exact_mut(n).enumerate() {
            let (r, c) = (rc / 8, rc % 8);
            for j in 0..sv {
                for i in 0..sh {
                    img[j * sh + i] = (wv[j][r] * wh[i][c]) as f32;
                }
            }
        }
        Basis { sv, sh, table }
    }
}

/// The basis images of a reduced IDCT to `sv` x `sh` pixels (each 1, 2, 4 or 8), made once
/// per process (not per image; 58 KB for all sixteen).
fn basis(sv: usize, sh: usize) -> Option<&'static Basis> {
    static ALL: LazyLock<Vec<Basis>> = LazyLock::new(|| {
        let sizes = [1, 2, 4, 8];
        sizes
            .iter()
            .flat_map(|&sv| sizes.iter().map(move |&sh| Basis::new(sv, sh)))
            .collect()
    });
    ALL.iter().find(|b| (b.sv, b.sh) == (sv, sh))
}

/// Blocks read past in one decode from which the skip lookahead is made for a table that
/// lacks it. Making its 4,096 entries took ~17 µs in a one-off timing on the Zen 5 dev
/// machine, about what reading 2,000 blocks with it saves (`examples/decode_hash.rs`:
/// 263 -> 245 µs per crop window, ~1,300 blocks read past in each).
const SKIM_BLOCKS: usize = 2048;

/// What a plane's blocks turn into.
#[derive(Clone, Copy)]
enum Kernel {
    /// A scaled decode's reduced IDCT, as sums of basis images.
    Basis(&'static Basis),
    /// A full-size decode's separable IDCT (`idct.rs`): vertical, horizontal weights.
    Full(&'static Weights, &'static Weights),
}

/// Blocks of a plane, columns `[x0, x1)` and rows `[y0, y1)`.
#[derive(Clone, Copy)]
struct Blocks {
    x0: usize,
    x1: usize,
    y0: usize,
    y1: usize,
}

/// Everything a block needs: its tables and where its pixels go.
struct Plane<'t> {
    q: &'t [i32; 64],
    dc: &'t Huffman,
    ac: &'t Huffman,
    kernel: Kernel,
    /// Output pixels per block: rows, columns.
    sv: usize,
    sh: usize,
    /// The pixels of the blocks in `keep`, `stride` per row: the first [`Plane::len`]
    /// bytes (the buffer may be longer: a reused one).
    pixels: Vec<u8>,
    stride: usize,
    /// Blocks per row of this component (the raster order of a one-component scan).
    blocks_w: usize,
    /// The blocks whose pixels are wanted. The scan still has to read every block before
    /// the last of them, but the others are only entropy-decoded: no IDCT, no pixels.
    keep: Blocks,
    /// Enough blocks are read past to make the skip lookahead ([`Huffman::skips`]).
    skim: bool,
}

impl Plane<'_> {
    /// Bytes of the plane's pixels: the kept blocks' rows times `stride`.
    fn len(&self) -> usize {
        self.stride * (self.keep.y1 - self.keep.y0) * self.sv
    }
}

/// Coefficients beyond a valid 8-bit JPEG's range (|X| <= 2048) are clamped, so garbage
/// input gives garbage pixels, not overflow.
const MAX_COEF: i32 = 1 << 14;

/// Where a block's AC coefficients go as they are decoded. (A trait, not a closure: its
/// method must be inlined into the decoding loop, which closures were not.)
trait Coefficients {
    /// The coefficients are not wanted: the block is only read past, several symbols at a
    /// time where they fit the skip lookahead ([`Huffman::skips`]) when there is one.
    fn skips<'h>(&self, _: &'h Huffman) -> Option<&'h [u16]> {
        None
    }
    /// The dequantized coefficient `x` at natural (row-major) position `at`.
    fn add(&mut self, at: usize, x: i32);
}

/// A block only read past; with `true`, the skip lookahead is made if it is not yet.
struct Skip(bool);

impl Coefficients for Skip {
    #[inline(always)]
    fn skips<'h>(&self, t: &'h Huffman) -> Option<&'h [u16]> {
        Some(t.skips(self.0))
    }
    #[inline(always)]
    fn add(&mut self, _: usize, _: i32) {}
}

/// A scaled block's pixels as a sum of basis images.
struct BasisSum<'b, const N: usize> {
    basis: &'b Basis,
    acc: [f32; N],
    flat: bool,
}

impl<const N: usize> Coefficients for BasisSum<'_, N> {
    #[inline(always)]
    fn add(&mut self, at: usize, x: i32) {
        // A 1x1 output only needs the DC term.
        if N > 1 {
            let at = at * N;
            if let Some(img) = self.basis.table.get(at..at + N) {
                let x = x as f32;
                for (a, &b) in self.acc.iter_mut().zip(img) {
                    *a += x * b;
                }
            }
            self.flat = false;
        }
    }
}

impl<const SH: usize> Coefficients for (RowPass<SH>, &Weights) {
    #[inline(always)]
    fn add(&mut self, at: usize, x: i32) {
        self.0.add(self.1, at, x as f32);
    }
}

/// `ROWS[k]`: how many rows of a block (from the top) hold the AC coefficients up to
/// zigzag position `k`; 0 for `k` = 0, a block with no AC coefficient.
const ROWS: [u8; 64] = {
    let mut rows = [0u8; 64];
    let mut k = 1;
    let mut most = 0;
    while k < 64 {
        let r = (ZIGZAG[k] / 8 + 1) as u8;
        if r > most {
            most = r;
        }
        rows[k] = most;
        k += 1;
    }
    rows
};

/// Decodes one block's Huffman codes: the DC difference into `pred`, then each nonzero AC
/// coefficient, dequantized, into `ac`. Returns the dequantized DC and the zigzag position
/// of the last coefficient (0 when there is none).
#[inline(always)]
fn entropy<C: Coefficients>(
    q: &[i32; 64],
    dc: &Huffman,
    ac_table: &Huffman,
    state: &mut Bits<'_>,
    pred: &mut i32,
    ac: &mut C,
) -> Result<(i32, usize)> {
    // A local copy keeps the bit buffer in registers.
    let mut b = *state;
    let bits = &mut b;
    bits.refill();
    // A DC size is an AC symbol of run 0 (size 0 reads as end of block, value 0), so the
    // AC lookahead decodes the code and its value bits at once when they fit.
    let e = dc.fast_ac[bits.peek(FAST_BITS) as usize];
    let diff = if e != 0 && e & (AC_ZRL | AC_LONG | 0xF00) == 0 {
        bits.consume((e & 0xFF) as u32);
        e >> 16
    } else {
        let t = u32::from(dc.decode(bits)?);
        if t > 15 {
            return corrupt("bad DC code");
        }
        bits.receive_extend(t)
    };
    *pred = pred.wrapping_add(diff);
    let dc = pred.wrapping_mul(q[0]).clamp(-MAX_COEF, MAX_COEF);
    let skips = ac.skips(ac_table);
    let mut k = 1;
    let mut last = 0;
    while k < 64 {
        bits.refill();
        if let Some(skips) = skips {
            if let Some(&e) = skips.get(bits.peek(SKIP_BITS) as usize) {
                let passed = usize::from(e >> 4 & 0x7F);
                let end = e & SKIP_EOB != 0;
                // Only while the block goes on past them: a block whose coefficients reach
                // position 63 ends there, with no end-of-block code, and the one-symbol
                // path reads its last symbols (and gives a bad one's error).
                if e != 0 && k + passed <= 63 {
                    bits.consume(u32::from(e & 15));
                    k += passed;
                    if end {
                        break;
                    }
                    continue;
                }
            }
        }
        let fast = ac_table.fast_ac[bits.peek(FAST_BITS) as usize];
        let v = if fast != 0 {
            bits.consume((fast & 0xFF) as u32);
            k += ((fast >> 8) & 15) as usize;
            if fast & (AC_EOB | AC_ZRL | AC_LONG) == 0 {
                fast >> 16
            } else if fast & AC_LONG != 0 {
                bits.receive_extend((fast >> 16) as u32)
            } else if fast & AC_EOB != 0 {
                break;
            } else {
                k += 16;
                continue;
            }
        } else {
            let rs = ac_table.decode(bits)?;
            let (r, s) = (usize::from(rs >> 4), u32::from(rs & 15));
            if s == 0 {
                if r != 15 {
                    break; // end of block
                }
                k += 16;
                continue;
            }
            k += r;
            bits.receive_extend(s)
        };
        if k > 63 {
            return corrupt("coefficient index out of range");
        }
        ac.add(ZIGZAG[k], v.wrapping_mul(q[k]).clamp(-MAX_COEF, MAX_COEF));
        last = k;
        k += 1;
    }
    *state = b;
    Ok((dc, last))
}

/// A block of a scaled decode: its reduced IDCT (`N` = its pixel count), written at `at`.
#[inline(always)]
fn basis_block<const N: usize>(
    p: &mut Plane<'_>,
    basis: &Basis,
    at: usize,
    bits: &mut Bits<'_>,
    pred: &mut i32,
) -> Result<()> {
    let mut sum = BasisSum::<N> {
        basis,
        acc: [0f32; N],
        flat: true,
    };
    let (dc, _) = entropy(p.q, p.dc, p.ac, bits, pred, &mut sum)?;
    let (acc, flat) = (sum.acc, sum.flat);
    // The DC basis image is flat: 1/8 everywhere.
    let level = 128.5 + dc as f32 / 8.0;
    let (sv, sh) = (p.sv, p.sh);
    for j in 0..sv {
        let Some(row) = p.pixels.get_mut(at + j * p.stride..at + j * p.stride + sh) else {
            break;
        };
        if flat {
            row.fill(sat_u8(level));
        } else {
            for (o, &a) in row.iter_mut().zip(&acc[j * sh..]) {
                *o = sat_u8(a + level);
            }
        }
    }
    Ok(())
}

/// A block of a full-size decode: `SV` x `SH` pixels (16 along an axis the component is
/// subsampled 2x on), written at `at`.
#[inline(always)]
fn full_block<const SV: usize, const SH: usize>(
    p: &mut Plane<'_>,
    (wv, wh): (&Weights, &Weights),
    at: usize,
    bits: &mut Bits<'_>,
    pred: &mut i32,
) -> Result<()> {
    let mut sink = (RowPass::<SH>::new(), wh);
    let (dc, last) = entropy(p.q, p.dc, p.ac, bits, pred, &mut sink)?;
    let pass = sink.0;
    if let Some(out) = p.pixels.get_mut(at..) {
        let rows = usize::from(ROWS[last & 63]);
        pass.write::<SV>(wv, 128.5 + dc as f32 / 8.0, rows, out, p.stride);
    }
    Ok(())
}

/// Block `(bx, by)` of `p`: decoded into its pixels if it is one of those kept, else only
/// read past.
#[inline(always)]
fn any_block(
    p: &mut Plane<'_>,
    bx: usize,
    by: usize,
    bits: &mut Bits<'_>,
    pred: &mut i32,
) -> Result<()> {
    let k = p.keep;
    if bx < k.x0 || bx >= k.x1 || by < k.y0 || by >= k.y1 {
        return entropy(p.q, p.dc, p.ac, bits, pred, &mut Skip(p.skim)).map(drop);
    }
    let at = (by - k.y0) * p.sv * p.stride + (bx - k.x0) * p.sh;
    match p.kernel {
        Kernel::Basis(b) => match p.sv * p.sh {
            1 => basis_block::<1>(p, b, at, bits, pred),
            2 => basis_block::<2>(p, b, at, bits, pred),
            4 => basis_block::<4>(p, b, at, bits, pred),
            8 => basis_block::<8>(p, b, at, bits, pred),
            16 => basis_block::<16>(p, b, at, bits, pred),
            32 => basis_block::<32>(p, b, at, bits, pred),
            _ => basis_block::<64>(p, b, at, bits, pred),
        },
        Kernel::Full(wv, wh) => match (p.sv, p.sh) {
            (8, 8) => full_block::<8, 8>(p, (wv, wh), at, bits, pred),
            (8, _) => full_block::<8, 16>(p, (wv, wh), at, bits, pred),
            (_, 8) => full_block::<16, 8>(p, (wv, wh), at, bits, pred),
            _ => full_block::<16, 16>(p, (wv, wh), at, bits, pred),
        },
    }
}

multiversion! {
/// The scan: the first `units` MCUs (or blocks, for one component) in order, restart
/// intervals honoured.
fn decode_scan(planes: &mut [Plane<'_>], comps: &[Component], units: usize, mcux: usize, restart: usize, bits: &mut Bits<'_>) -> Result<()> {
    let mut pred = [0i32; 3];
    for u in 0..units {
        if restart > 0 && u > 0 && u % restart == 0 {
            bits.restart();
            pred = [0; 3];
        }
        if planes.len() == 1 {
            let bw = planes[0].blocks_w;
            any_block(&mut planes[0], u % bw, u / bw, bits, &mut pred[0])?;
        } else {
            let (mx, my) = (u % mcux, u / mcux);
            for (ci, (c, p)) in comps.iter().zip(planes.iter_mut()).enumerate() {
                for y in 0..c.v {
                    for x in 0..c.h {
                        any_block(p, mx * c.h + x, my * c.v + y, bits, &mut pred[ci])?;
                    }
                }
            }
        }
    }
    Ok(())
}
}

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

    /// The reduced IDCT is the box average of the full one: check against a float 8x8 IDCT
    /// on random blocks.
    #[test]
    fn reduced_idct_is_the_box_average_of_the_full_idct() {
        let mut rnd = crate::decode::below(0x1234_5678);
        let bases: Vec<&Basis> = [1, 2, 4, 8].iter().map(|&n| basis(n, n).unwrap()).collect();
        for _ in 0..200 {
            let mut coef = [0i32; 64];
            for (i, c) in coef.iter_mut().enumerate() {
                // Realistic spectra: big low frequencies, small high ones.
                let amp = 600 / (1 + (i / 8 + i % 8) * 2);
                *c = rnd(2 * amp + 1) as i32 - amp as i32;
            }
            let full: Vec<f64> = (0..64)
                .map(|p| idct::reference_idct(&coef, 8, p / 8, p % 8))
                .collect();
            for b in &bases {
                let size = b.sv;
                let n = size * size;
                let g = 8 / size;
                for j in 0..size {
                    for i in 0..size {
                        let got: f64 = (0..64)
                            .map(|rc| {
                                f64::from(coef[rc]) * f64::from(b.table[rc * n + j * size + i])
                            })
                            .sum();
                        let mut avg = 0.0;
                        for y in j * g..(j + 1) * g {
                            for x in i * g..(i + 1) * g {
                                avg += full[y * 8 + x];
                            }
                        }
                        let want = avg / (g * g) as f64;
                        assert!(
                            (got - want).abs() < 0.01,
                            "{size}x{size} ({j},{i}): {got} vs {want}"
                        );
                    }
                }
            }
            // The DC basis image is flat 1/8, which `basis_block` relies on.
            for b in &bases {
                assert!(b.table[..b.sv * b.sh]
                    .iter()
                    .all(|&v| (v - 0.125).abs() < 1e-7));
            }
        }
    }

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

    /// A code that fits the lookahead while its value bits do not (`AC_LONG`) decodes to
    /// the same coefficient as any other: its run, then its value bits read next.
    #[test]
    fn a_short_code_with_long_value_bits_decodes() {
        let mut dc_counts = [0u8; 16];
        dc_counts[0] = 1; // "0" -> DC size 0
        let dc = Huffman::new(&dc_counts, &[0]).unwrap();
        let mut ac_counts = [0u8; 16];
        ac_counts[1] = 3; // "00" -> run 0 size 9, "01" -> end of block, "10" -> run 2 size 1
        let ac = Huffman::new(&ac_counts, &[0x09, 0x00, 0x21]).unwrap();
        assert_eq!(ac.fast_ac[0], AC_LONG | (9 << 16) | 2);
        assert_eq!(ac.fast_ac[1 << (FAST_BITS - 2)], AC_EOB | 2);
        // DC "0"; "00" + 100000101 (261) at k = 1; "10" + "1" (1) at k = 4; "01" ends.
        let stream = [0b0001_0000, 0b0101_1010, 0b1000_0000];
        let scan = Scan::new(&stream, 0);
        let mut bits = scan.bits();
        struct Seen(Vec<(usize, i32)>);
        impl Coefficients for Seen {
            fn add(&mut self, at: usize, x: i32) {
                self.0.push((at, x));
            }
        }
        let mut seen = Seen(Vec::new());
        let mut pred = 0;
        let (dc, last) = entropy(&[1; 64], &dc, &ac, &mut bits, &mut pred, &mut seen).unwrap();
        assert_eq!((dc, last), (0, 4));
        assert_eq!(seen.0, [(ZIGZAG[1], 261), (ZIGZAG[4], 1)]);
    }

    #[test]
    fn huffman_codes_decode() {
        // Lengths 2, 3, 3 and one 11-bit code past the lookahead table.
        assert_eq!(FAST_BITS, 10);
        let mut counts = [0u8; 16];
        counts[1] = 1;
        counts[2] = 2;
        counts[10] = 1;
        let t = Huffman::new(&counts, &[7, 8, 9, 10]).unwrap();
        // Codes: 00 -> 7, 010 -> 8, 011 -> 9, 10000000000 -> 10.
        let stream = [0b0001_0011, 0b1000_0000, 0b0000_0000];
        let scan = Scan::new(&stream, 0);
        let mut b = scan.bits();
        b.refill();
        let got: Vec<u8> = (0..4).map(|_| t.decode(&mut b).unwrap()).collect();
        assert_eq!(got, [7, 8, 9, 10]);
        assert!(Huffman::new(
            &[3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            &[1, 2, 3]
        )
        .is_err());
    }
}
