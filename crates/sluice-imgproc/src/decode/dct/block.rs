//! One block of a baseline scan — its Huffman codes read, dequantized, and turned into
//! pixels by a reduced (1/d) or full-size IDCT, or only read past — and the scan of every
//! block in order ([`decode_scan`]). The planes, windows and colour conversion around it are
//! `mod.rs`'s.

use std::sync::LazyLock;

use super::frame::Component;
use super::huffman::{Bits, Huffman, AC_EOB, AC_LONG, AC_ZRL, FAST_BITS, SKIP_BITS, SKIP_EOB};
use super::idct::{cosine, RowPass, Weights};
use super::{corrupt, ZIGZAG};
use crate::error::Result;
use crate::simd::{multiversion, sat_u8};

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
pub(super) struct Basis {
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
pub(super) fn basis(sv: usize, sh: usize) -> Option<&'static Basis> {
    static ALL: LazyLock<Vec<Basis>> = LazyLock::new(|| {
        let sizes = [1, 2, 4, 8];
        sizes
            .iter()
            .flat_map(|&sv| sizes.iter().map(move |&sh| Basis::new(sv, sh)))
            .collect()
    });
    ALL.iter().find(|b| (b.sv, b.sh) == (sv, sh))
}

/// What a plane's blocks turn into.
#[derive(Clone, Copy)]
pub(super) enum Kernel {
    /// A scaled decode's reduced IDCT, as sums of basis images.
    Basis(&'static Basis),
    /// A full-size decode's separable IDCT (`idct.rs`): vertical, horizontal weights.
    Full(&'static Weights, &'static Weights),
}

/// Blocks of a plane, columns `[x0, x1)` and rows `[y0, y1)`.
#[derive(Clone, Copy)]
pub(super) struct Blocks {
    pub(super) x0: usize,
    pub(super) x1: usize,
    pub(super) y0: usize,
    pub(super) y1: usize,
}

/// Everything a block needs: its tables and where its pixels go.
pub(super) struct Plane<'t> {
    pub(super) q: &'t [i32; 64],
    pub(super) dc: &'t Huffman,
    pub(super) ac: &'t Huffman,
    pub(super) kernel: Kernel,
    /// Output pixels per block: rows, columns.
    pub(super) sv: usize,
    pub(super) sh: usize,
    /// The pixels of the blocks in `keep`, `stride` per row: the first [`Plane::len`]
    /// bytes (the buffer may be longer: a reused one).
    pub(super) pixels: Vec<u8>,
    pub(super) stride: usize,
    /// Blocks per row of this component (the raster order of a one-component scan).
    pub(super) blocks_w: usize,
    /// The blocks whose pixels are wanted. The scan still has to read every block before
    /// the last of them, but the others are only entropy-decoded: no IDCT, no pixels.
    pub(super) keep: Blocks,
    /// Enough blocks are read past to make the skip lookahead ([`Huffman::skips`]).
    pub(super) skim: bool,
}

impl Plane<'_> {
    /// Bytes of the plane's pixels: the kept blocks' rows times `stride`.
    pub(super) fn len(&self) -> usize {
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
pub(super) fn decode_scan(planes: &mut [Plane<'_>], comps: &[Component], units: usize, mcux: usize, restart: usize, bits: &mut Bits<'_>) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::super::huffman::Scan;
    use super::super::idct;
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
