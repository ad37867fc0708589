//! DCT-scaled decoding of baseline JPEGs in pure Rust: 1/2, 1/4 and 1/8 size.
//!
//! Every 8x8 block goes through a *reduced* IDCT straight to the output resolution, so the
//! full-size IDCT, upsampling and colour conversion are never done. The reduced IDCT of a
//! block to s x s pixels is the exact (8/s) x (8/s) box average of its full IDCT (a fixed
//! matrix per size, applied in fixed point and skipping the zero coefficients most blocks
//! have), which is what libjpeg's `jidctred.c` computes. As in libjpeg-turbo, a component
//! subsampled 2x gets a 2x larger IDCT instead of being upsampled, so every component lands
//! on the same grid: a 1/d decode is the full decode box-filtered by d (up to rounding).
//!
//! Scope: what photo datasets hold and where scaling pays — baseline/extended Huffman,
//! 8-bit samples, one scan holding all components, 1 (gray) or 3 (YCbCr) components,
//! sampling factors that divide evenly. Anything else (progressive, CMYK, Adobe RGB,
//! several scans) is `Ok(None)`: the caller decodes another way. Malformed data is an
//! error or garbage pixels (as with libjpeg), never a panic: every access is checked.

use crate::error::{ImageError, Result};
use crate::simd::{multiversion, sat_u8};

mod frame;
mod huffman;

use frame::{parse, Component};
use huffman::{Bits, Huffman, AC_EOB, AC_ZRL, FAST_BITS};

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
/// unit coefficient `k` (JPEG's scaling: 1/2, and 1/(2 sqrt 2) for k = 0).
fn reduced_idct_weights(s: usize) -> [[f64; 8]; 8] {
    let mut m = [[0f64; 8]; 8];
    let group = 8 / s;
    for (j, row) in m.iter_mut().enumerate().take(s) {
        for (k, cell) in row.iter_mut().enumerate() {
            let ck = if k == 0 { 0.5 / 2f64.sqrt() } else { 0.5 };
            let sum: f64 = (j * group..(j + 1) * group)
                .map(|n| ck * ((2 * n + 1) as f64 * k as f64 * std::f64::consts::PI / 16.0).cos())
                .sum();
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

/// Everything a block needs: its tables and where its pixels go.
struct Plane<'t> {
    q: &'t [i32; 64],
    dc: &'t Huffman,
    ac: &'t Huffman,
    basis: &'t Basis,
    pixels: Vec<u8>,
    stride: usize,
    /// Blocks per row of this component's plane.
    blocks_w: usize,
}

/// Coefficients beyond a valid 8-bit JPEG's range (|X| <= 2048) are clamped, so garbage
/// input gives garbage pixels, not overflow.
const MAX_COEF: i32 = 1 << 14;

/// Decodes one block and writes its reduced IDCT (`N` = its pixel count) at block
/// `(bx, by)` of `p`.
#[inline(always)]
fn block<const N: usize>(
    p: &mut Plane<'_>,
    bx: usize,
    by: usize,
    state: &mut Bits<'_>,
    pred: &mut i32,
) -> Result<()> {
    let (sv, sh) = (p.basis.sv, p.basis.sh);
    // A local copy keeps the bit buffer in registers.
    let mut b = *state;
    let bits = &mut b;
    bits.refill();
    let t = u32::from(p.dc.decode(bits)?);
    if t > 15 {
        return corrupt("bad DC code");
    }
    *pred = pred.wrapping_add(bits.receive_extend(t));
    let dc = pred.wrapping_mul(p.q[0]).clamp(-MAX_COEF, MAX_COEF);
    let mut acc = [0f32; N];
    let mut flat = true;
    let mut k = 1;
    while k < 64 {
        if bits.nbits < 32 {
            bits.refill();
        }
        let fast = p.ac.fast_ac[bits.peek(FAST_BITS) as usize];
        let v = if fast != 0 {
            bits.consume((fast & 0xFF) as u32);
            if fast & AC_EOB != 0 {
                break;
            }
            if fast & AC_ZRL != 0 {
                k += 16;
                continue;
            }
            k += ((fast >> 8) & 15) as usize;
            fast >> 16
        } else {
            let rs = p.ac.decode(bits)?;
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
        // A 1x1 output only needs the DC term.
        if N > 1 {
            let x = v.wrapping_mul(p.q[k]).clamp(-MAX_COEF, MAX_COEF) as f32;
            let at = ZIGZAG[k] * N;
            if let Some(img) = p.basis.table.get(at..at + N) {
                for (a, &b) in acc.iter_mut().zip(img) {
                    *a += x * b;
                }
            }
            flat = false;
        }
        k += 1;
    }
    *state = b;
    let at = by * sv * p.stride + bx * sh;
    // The DC basis image is flat: 1/8 everywhere.
    let level = 128.5 + dc as f32 / 8.0;
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

/// [`block`] for the plane's IDCT size.
#[inline(always)]
fn any_block(
    p: &mut Plane<'_>,
    bx: usize,
    by: usize,
    bits: &mut Bits<'_>,
    pred: &mut i32,
) -> Result<()> {
    match p.basis.sv * p.basis.sh {
        1 => block::<1>(p, bx, by, bits, pred),
        2 => block::<2>(p, bx, by, bits, pred),
        4 => block::<4>(p, bx, by, bits, pred),
        8 => block::<8>(p, bx, by, bits, pred),
        16 => block::<16>(p, bx, by, bits, pred),
        32 => block::<32>(p, bx, by, bits, pred),
        _ => block::<64>(p, bx, by, bits, pred),
    }
}

multiversion! {
/// The scan: every MCU (or block, for one component) in order, restart intervals
/// honoured.
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

/// Decodes a baseline JPEG at 1/`denom` (2, 4 or 8): `(samples, height, width)` with 1
/// (gray) or 3 (RGB) samples per pixel in the stored orientation, `ceil(side / denom)`
/// per side; `Ok(None)` when the file is outside this decoder's scope.
pub(crate) fn decode(data: &[u8], denom: usize) -> Result<Option<(Vec<u8>, usize, usize)>> {
    if !matches!(denom, 2 | 4 | 8) {
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
        if fh % denom != 0 || fv % denom != 0 || fh / denom > 8 || fv / denom > 8 {
            return Ok(None);
        }
        sizes.push((fv / denom, fh / denom));
    }
    let (oh, ow) = (f.height.div_ceil(denom), f.width.div_ceil(denom));
    let mcux = f.width.div_ceil(8 * hmax);
    let mcuy = f.height.div_ceil(8 * vmax);
    // A single-component scan is not interleaved: blocks cover the component in raster
    // order, without MCU padding.
    let blocks: Vec<(usize, usize)> = if n == 1 {
        vec![(f.width.div_ceil(8), f.height.div_ceil(8))]
    } else {
        f.comps.iter().map(|c| (mcux * c.h, mcuy * c.v)).collect()
    };
    let mut bases: Vec<Basis> = Vec::new();
    for &(sv, sh) in &sizes {
        if !bases.iter().any(|b| (b.sv, b.sh) == (sv, sh)) {
            bases.push(Basis::new(sv, sh));
        }
    }
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
        let (bw, bh) = blocks[i];
        let basis = bases
            .iter()
            .find(|b| (b.sv, b.sh) == (sv, sh))
            .ok_or_else(|| ImageError::Corrupt("JPEG: no IDCT basis".into()))?;
        planes.push(Plane {
            q,
            dc,
            ac,
            basis,
            pixels: vec![0u8; bw * sh * bh * sv],
            stride: bw * sh,
            blocks_w: bw,
        });
    }
    let mut bits = Bits {
        data,
        pos: f.scan,
        acc: 0,
        nbits: 0,
    };
    let units = if n == 1 {
        blocks[0].0 * blocks[0].1
    } else {
        mcux * mcuy
    };
    decode_scan(&mut planes, &f.comps, units, mcux, f.restart, &mut bits)?;

    // Every plane is on the output grid now; interleave and convert colours.
    let mut out = vec![0u8; oh * ow * n];
    if n == 1 {
        let p = &planes[0];
        for (y, row) in out.chunks_exact_mut(ow).enumerate() {
            row.copy_from_slice(&p.pixels[y * p.stride..y * p.stride + ow]);
        }
    } else {
        for (y, row) in out.chunks_exact_mut(ow * 3).enumerate() {
            let line = |i: usize| &planes[i].pixels[y * planes[i].stride..][..ow];
            ycc_row_to_rgb(line(0), line(1), line(2), row);
        }
    }
    Ok(Some((out, oh, ow)))
}

multiversion! {
/// libjpeg's YCbCr -> RGB (`jdcolor.c`: 16-bit fixed point, rounded) for one row.
fn ycc_row_to_rgb(y: &[u8], cb: &[u8], cr: &[u8], out: &mut [u8]) {
    const B: usize = 64;
    const HALF: i32 = 1 << 15;
    let mut rgb = [[0u8; B]; 3];
    for (((y, cb), cr), out) in y.chunks(B).zip(cb.chunks(B)).zip(cr.chunks(B)).zip(out.chunks_mut(3 * B)) {
        let n = y.len().min(cb.len()).min(cr.len());
        for i in 0..n {
            let (l, u, v) = (i32::from(y[i]), i32::from(cb[i]) - 128, i32::from(cr[i]) - 128);
            rgb[0][i] = (l + ((91_881 * v + HALF) >> 16)).clamp(0, 255) as u8;
            rgb[1][i] = (l + ((-22_554 * u - 46_802 * v + HALF) >> 16)).clamp(0, 255) as u8;
            rgb[2][i] = (l + ((116_130 * u + HALF) >> 16)).clamp(0, 255) as u8;
        }
        for (i, px) in out.chunks_exact_mut(3).take(n).enumerate() {
            px[0] = rgb[0][i];
            px[1] = rgb[1][i];
            px[2] = rgb[2][i];
        }
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
        let mut s = 0x1234_5678u64;
        let mut rnd = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let bases: Vec<Basis> = [1usize, 2, 4, 8]
            .iter()
            .map(|&n| Basis::new(n, n))
            .collect();
        for _ in 0..200 {
            let mut coef = [0i32; 64];
            for (i, c) in coef.iter_mut().enumerate() {
                // Realistic spectra: big low frequencies, small high ones.
                let amp = 600 / (1 + (i / 8 + i % 8) as i64 * 2);
                *c = (rnd() % (2 * amp as u64 + 1)) as i32 - amp as i32;
            }
            let full: Vec<f64> = (0..64)
                .map(|p| {
                    let (y, x) = (p / 8, p % 8);
                    let mut v = 0.0;
                    for u in 0..8 {
                        for w in 0..8 {
                            let cu = if u == 0 { 0.5 / 2f64.sqrt() } else { 0.5 };
                            let cw = if w == 0 { 0.5 / 2f64.sqrt() } else { 0.5 };
                            v += cu
                                * cw
                                * f64::from(coef[u * 8 + w])
                                * ((2 * y + 1) as f64 * u as f64 * std::f64::consts::PI / 16.0)
                                    .cos()
                                * ((2 * x + 1) as f64 * w as f64 * std::f64::consts::PI / 16.0)
                                    .cos();
                        }
                    }
                    v
                })
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
            // The DC basis image is flat 1/8, which `block` relies on.
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
            let path = format!(
                "{}/tests/fixtures/{name}",
                std::env::var("CARGO_MANIFEST_DIR").unwrap()
            );
            let good = std::fs::read(path).unwrap();
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
                }
            }
        }
    }

    #[test]
    fn huffman_codes_decode() {
        // Lengths 2, 3, 3 and one 10-bit code past the lookahead table.
        let mut counts = [0u8; 16];
        counts[1] = 1;
        counts[2] = 2;
        counts[9] = 1;
        let t = Huffman::new(&counts, &[7, 8, 9, 10]).unwrap();
        // Codes: 00 -> 7, 010 -> 8, 011 -> 9, 1000000000 -> 10.
        let stream = [0b0001_0011, 0b1000_0000, 0b0000_0000];
        let mut b = Bits {
            data: &stream,
            pos: 0,
            acc: 0,
            nbits: 0,
        };
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
