//! The full-size IDCT of a window decode: separable, in `f32`, over the rows that hold
//! coefficients.
//!
//! A block's AC coefficients are added into the row pass as they come out of the entropy
//! decoder (one vector multiply-add each: row `r` of the block gets `x * W[c]`), so the
//! coefficient block is never stored. The column pass then reads only the rows down to the
//! last one that got a coefficient (the entropy decoder knows it from the last zigzag
//! position) — most blocks of a photo have two to four. An 8-point IDCT can also be
//! evaluated at 16 points (`Weights::new(16)`): that is how a component subsampled 2x lands
//! on the full-size grid without a separate upsampling pass (the DCT-domain upsampling
//! libjpeg-turbo uses for its scaled IDCTs).
//!
//! No multiply-add is fused and the order of every sum is fixed, so the bytes are the same
//! on every SIMD path.

use std::sync::LazyLock;

use crate::simd::sat_u8;

/// The 1-D IDCT basis function `k` at output `j` of `points` evenly spaced across one
/// block (8: the samples; 16: also halfway between them), with JPEG's scaling: 1/2, and
/// 1/(2 sqrt 2) for k = 0.
pub(super) fn cosine(k: usize, j: usize, points: usize) -> f64 {
    let ck = if k == 0 { 0.5 / 2f64.sqrt() } else { 0.5 };
    ck * ((2 * j + 1) as f64 * k as f64 * std::f64::consts::PI / (2 * points) as f64).cos()
}

/// `w[k][j]`: [`cosine`]`(k, j, size)` for `size` 8 or 16, in `f32`.
pub(super) struct Weights {
    pub(super) size: usize,
    w: [[f32; 16]; 8],
}

impl Weights {
    fn new(size: usize) -> Weights {
        let mut w = [[0f32; 16]; 8];
        for (k, row) in w.iter_mut().enumerate() {
            for (j, cell) in row.iter_mut().enumerate().take(size) {
                *cell = cosine(k, j, size) as f32;
            }
        }
        Weights { size, w }
    }
}

/// The weights of an 8- or 16-point IDCT, made once per process (not per image).
pub(super) fn weights(size: usize) -> Option<&'static Weights> {
    static ALL: LazyLock<[Weights; 2]> = LazyLock::new(|| [Weights::new(8), Weights::new(16)]);
    ALL.iter().find(|w| w.size == size)
}

/// One block's row pass in progress: `t[r]` is row `r` of the coefficients times the
/// horizontal weights, `SH` pixels wide.
pub(super) struct RowPass<const SH: usize> {
    t: [[f32; SH]; 8],
}

impl<const SH: usize> RowPass<SH> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        RowPass { t: [[0f32; SH]; 8] }
    }

    /// Adds the dequantized coefficient `x` at natural (row-major) position `at`.
    #[inline(always)]
    pub(super) fn add(&mut self, wh: &Weights, at: usize, x: f32) {
        let (r, c) = (at / 8 % 8, at % 8);
        let row = &mut self.t[r];
        for (t, &w) in row.iter_mut().zip(&wh.w[c]) {
            *t += x * w;
        }
    }

    /// The column pass over the first `rows` rows (those below hold no coefficient; one
    /// with none among them adds zeros, which leaves every sum as it was): `SV` rows of
    /// `SH` pixels into `out` (row `j` at `j * stride`), `level` (128 + DC / 8, plus 0.5 to
    /// round) added to every pixel.
    #[inline(always)]
    pub(super) fn write<const SV: usize>(
        &self,
        wv: &Weights,
        level: f32,
        rows: usize,
        out: &mut [u8],
        stride: usize,
    ) {
        // The row count as a constant: the loops over rows unroll, with no exit branch
        // (a per-block count mispredicts it) in each of the output rows.
        match rows {
            0 => self.write_rows::<SV, 0>(wv, level, out, stride),
            1 => self.write_rows::<SV, 1>(wv, level, out, stride),
            2 => self.write_rows::<SV, 2>(wv, level, out, stride),
            3 => self.write_rows::<SV, 3>(wv, level, out, stride),
            4 => self.write_rows::<SV, 4>(wv, level, out, stride),
            5 => self.write_rows::<SV, 5>(wv, level, out, stride),
            6 => self.write_rows::<SV, 6>(wv, level, out, stride),
            7 => self.write_rows::<SV, 7>(wv, level, out, stride),
            _ => self.write_rows::<SV, 8>(wv, level, out, stride),
        }
    }

    #[inline(always)]
    fn write_rows<const SV: usize, const ROWS: usize>(
        &self,
        wv: &Weights,
        level: f32,
        out: &mut [u8],
        stride: usize,
    ) {
        for j in 0..SV {
            let Some(dst) = out.get_mut(j * stride..j * stride + SH) else {
                return;
            };
            let mut acc = [level; SH];
            for (r, row) in self.t.iter().enumerate().take(ROWS) {
                let w = wv.w[r][j];
                for (a, &t) in acc.iter_mut().zip(row) {
                    *a += w * t;
                }
            }
            for (o, &a) in dst.iter_mut().zip(&acc) {
                *o = sat_u8(a);
            }
        }
    }
}

/// The 2-D IDCT of `coef` (natural order) at pixel (`y`, `x`) of `points` x `points`
/// across the block, in `f64` straight from the definition: the tests' reference.
#[cfg(test)]
pub(super) fn reference_idct(coef: &[i32; 64], points: usize, y: usize, x: usize) -> f64 {
    let c = |k: usize| if k == 0 { 0.5 / 2f64.sqrt() } else { 0.5 };
    let angle = |p: usize, k: usize| {
        ((2 * p + 1) as f64 * k as f64 * std::f64::consts::PI / (2 * points) as f64).cos()
    };
    let mut v = 0.0;
    for u in 0..8 {
        for k in 0..8 {
            v += c(u) * c(k) * f64::from(coef[u * 8 + k]) * angle(y, u) * angle(x, k);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The separable passes compute the 2-D IDCT (float reference), at 8 points and, for
    /// 16, the same cosine series evaluated halfway between the 8 points.
    #[test]
    fn separable_passes_are_the_2d_idct() {
        let mut rnd = crate::decode::below(0x5EED_1234);
        for size in [8usize, 16] {
            let w = weights(size).unwrap();
            for _ in 0..50 {
                let mut coef = [0i32; 64];
                for (i, c) in coef.iter_mut().enumerate().skip(1) {
                    if rnd(3) == 0 {
                        let amp = 200 / (1 + (i / 8 + i % 8));
                        *c = rnd(2 * amp + 1) as i32 - amp as i32;
                    }
                }
                let dc = rnd(800) as i32 - 400;
                let mut pass = RowPass::<16>::new();
                for (at, &c) in coef.iter().enumerate() {
                    if c != 0 {
                        pass.add(w, at, c as f32);
                    }
                }
                let mut got = vec![0u8; 16 * 16];
                pass.write::<16>(w, 128.5 + dc as f32 / 8.0, 8, &mut got, 16);
                for y in 0..size {
                    for x in 0..size {
                        let v = 128.0 + f64::from(dc) / 8.0 + reference_idct(&coef, size, y, x);
                        let want = v.clamp(0.0, 255.0);
                        let g = f64::from(got[y * 16 + x]);
                        assert!((g - want).abs() <= 0.51, "{size}: ({y},{x}) {g} vs {want}");
                    }
                }
            }
        }
    }

    /// A DC-only block (no row in the column pass) is flat.
    #[test]
    fn a_dc_only_block_is_flat() {
        let w = weights(8).unwrap();
        let pass = RowPass::<8>::new();
        let mut out = [0u8; 64];
        pass.write::<8>(w, 128.5 + 80.0 / 8.0, 0, &mut out, 8);
        assert!(out.iter().all(|&v| v == 138));
    }
}
