//! uint8 HWC -> float32 CHW conversions (`to_tensor`, `normalize`).

use std::mem::MaybeUninit;

use crate::error::{invalid, Result};
use crate::image::Image;
use crate::simd::{load_rgb, multiversion, BLOCK};

/// Checks `mean`/`std`: one finite value per channel each, no `std` of zero.
fn check_mean_std(mean: &[f32], std: &[f32], channels: usize) -> Result<()> {
    if mean.len() != channels || std.len() != channels {
        return invalid(format!(
            "mean/std need {channels} values, got {} and {}",
            mean.len(),
            std.len()
        ));
    }
    if std.iter().any(|&s| s == 0.0 || !s.is_finite()) || mean.iter().any(|m| !m.is_finite()) {
        return invalid("std must be non-zero and mean/std finite");
    }
    Ok(())
}

/// The 256-entry table `((v * (1/255)) - mean) / std` in float32 — torchvision's
/// `to_dtype(float32, scale=True)` (a multiply by `float32(1/255)`) followed by
/// `normalize` (`sub(mean).div_(std)`), so the table holds exactly the values torch
/// computes.
fn table(mean: f32, std: f32) -> [f32; 256] {
    let inv = (1.0f64 / 255.0) as f32;
    let mut t = [0f32; 256];
    for (v, o) in t.iter_mut().enumerate() {
        *o = (v as f32 * inv - mean) / std;
    }
    t
}

/// Writes `(x/255 - mean[c]) / std[c]` as float32 CHW into `out`
/// (`out.len()` must be `channels * height * width`), e.g. straight into
/// a slot of a batch buffer. `mean`/`std` have one entry per channel.
pub fn normalize_into(img: &Image, mean: &[f32], std: &[f32], out: &mut [f32]) -> Result<()> {
    img.validate()?;
    // SAFETY: `MaybeUninit<f32>` has `f32`'s layout, and only initialised floats are
    // written through the view.
    let out = unsafe { &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>]) };
    normalize_hwc_into(&img.data, img.channels, mean, std, out)
}

/// [`normalize_into`] from an image's HWC bytes (`channels` 1 or 3) into memory not written
/// yet (a slot of a new batch buffer: no zeroing first). On `Ok`, every element of `out` is
/// written.
///
/// ```
/// use std::mem::MaybeUninit;
/// use sluice_imgproc::normalize_hwc_into;
/// let mut out = [MaybeUninit::<f32>::uninit(); 2];
/// normalize_hwc_into(&[0, 255], 1, &[0.5], &[0.5], &mut out).unwrap();
/// // SAFETY: written on Ok.
/// assert_eq!(unsafe { [out[0].assume_init(), out[1].assume_init()] }, [-1.0, 1.0]);
/// ```
pub fn normalize_hwc_into(
    data: &[u8],
    channels: usize,
    mean: &[f32],
    std: &[f32],
    out: &mut [MaybeUninit<f32>],
) -> Result<()> {
    normalize_hwc(data, channels, mean, std, out, true)
}

/// [`normalize_hwc_into`]; `slot`: `out` is a batch's slot, read next after the rest of the
/// batch, so a big one may be written with streaming stores. A sample's own output is read
/// back soon (copied into a batch, serialised into a reply), from the cache.
fn normalize_hwc(
    data: &[u8],
    channels: usize,
    mean: &[f32],
    std: &[f32],
    out: &mut [MaybeUninit<f32>],
    slot: bool,
) -> Result<()> {
    let c = channels;
    if !matches!(c, 1 | 3) || data.len() % c != 0 {
        return invalid(format!(
            "{} bytes are not whole pixels of 1 or 3 channels ({c})",
            data.len()
        ));
    }
    check_mean_std(mean, std, c)?;
    let plane = data.len() / c;
    if out.len() != plane * c {
        return invalid(format!(
            "output has {} floats, need {}",
            out.len(),
            plane * c
        ));
    }
    if c == 1 {
        let t = table(mean[0], std[0]);
        for (o, &v) in out.iter_mut().zip(data) {
            o.write(t[usize::from(v)]);
        }
        return Ok(());
    }
    let (p0, rest) = out.split_at_mut(plane);
    let (p1, p2) = rest.split_at_mut(plane);
    let mean = [mean[0], mean[1], mean[2]];
    let std = [std[0], std[1], std[2]];
    let stores = if slot && out_bytes(plane * 3) >= STREAM_BYTES {
        Stores::streaming()
    } else {
        Stores::Cached
    };
    normalize_rgb_kernel(data, p0, p1, p2, mean, std, stores);
    if stores != Stores::Cached {
        store_fence();
    }
    Ok(())
}

/// How [`normalize_rgb_kernel`] writes its blocks, decided once per image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stores {
    /// Through the cache.
    Cached,
    /// Streaming, 128 bits at a time (SSE: every x86-64 CPU).
    Stream128,
    /// Streaming, 256 bits at a time where a block is 32-byte aligned (AVX).
    Stream256,
}

impl Stores {
    /// The widest streaming stores this CPU takes (none off x86-64).
    fn streaming() -> Stores {
        #[cfg(target_arch = "x86_64")]
        if crate::simd::use_avx2() {
            return Stores::Stream256;
        }
        if cfg!(target_arch = "x86_64") {
            Stores::Stream128
        } else {
            Stores::Cached
        }
    }
}

/// Batch slots at least this big are written with streaming (non-temporal) stores. A
/// batch's float32 224² image is 602 KB, written once and read next by the consumer after
/// the rest of its 38.5 MB batch: through the cache, each line was first read from memory
/// only to be overwritten, and `normalize` took 7.4 % of the CV pipeline's CPU. A small slot
/// is read back soon, from the cache, so it is stored normally.
const STREAM_BYTES: usize = 256 << 10;

fn out_bytes(floats: usize) -> usize {
    floats * std::mem::size_of::<f32>()
}

/// Writes `v` to `o` with streaming stores when `o` is a whole block starting on a boundary
/// the stores take (a plane at an odd offset falls back to plain stores); `false` if not
/// written.
#[inline(always)]
fn stream_block(o: &mut [MaybeUninit<f32>], v: &[f32; BLOCK], stores: Stores) -> bool {
    let p = o.as_mut_ptr().cast::<f32>();
    if o.len() != BLOCK || stores == Stores::Cached || p as usize % 16 != 0 {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm256_loadu_ps, _mm256_stream_ps, _mm_loadu_ps, _mm_stream_ps};
        if stores == Stores::Stream256 && p as usize % 32 == 0 {
            for i in (0..BLOCK).step_by(8) {
                // SAFETY: `Stream256` is only chosen on a CPU with AVX; `p + i .. p + i + 8`
                // lies in `o` (BLOCK long) and is 32-byte aligned.
                unsafe { _mm256_stream_ps(p.add(i), _mm256_loadu_ps(v.as_ptr().add(i))) };
            }
        } else {
            for i in (0..BLOCK).step_by(4) {
                // SAFETY: SSE is part of x86-64; `p + i .. p + i + 4` lies in `o` and is
                // 16-byte aligned.
                unsafe { _mm_stream_ps(p.add(i), _mm_loadu_ps(v.as_ptr().add(i))) };
            }
        }
        #[cfg(test)]
        tests::STREAMED.with(|n| n.set(n.get() + 1));
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = v;
        false
    }
}

/// Orders streaming stores before what follows: the batch is handed to another thread
/// through a channel, whose release ordering does not cover them.
fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

multiversion! {
    /// The same float ops as the tables, on 64-pixel blocks so the
    /// de-interleave and the divisions vectorise (a table lookup per
    /// sample does not). `stores`: how the blocks are written.
    fn normalize_rgb_kernel(
        data: &[u8],
        p0: &mut [MaybeUninit<f32>],
        p1: &mut [MaybeUninit<f32>],
        p2: &mut [MaybeUninit<f32>],
        mean: [f32; 3],
        std: [f32; 3],
        stores: Stores,
    ) {
        let inv = (1.0f64 / 255.0) as f32;
        let planes = p0
            .chunks_mut(BLOCK)
            .zip(p1.chunks_mut(BLOCK))
            .zip(p2.chunks_mut(BLOCK));
        for (chunk, ((o0, o1), o2)) in data.chunks(3 * BLOCK).zip(planes) {
            let (mut r, mut g, mut b) = ([0f32; BLOCK], [0f32; BLOCK], [0f32; BLOCK]);
            load_rgb(chunk, &mut r, &mut g, &mut b);
            for i in 0..BLOCK {
                r[i] = (r[i] * inv - mean[0]) / std[0];
                g[i] = (g[i] * inv - mean[1]) / std[1];
                b[i] = (b[i] * inv - mean[2]) / std[2];
            }
            for (o, v) in [(o0, &r), (o1, &g), (o2, &b)] {
                if stream_block(o, v, stores) {
                    continue;
                }
                for (o, &v) in o.iter_mut().zip(v) {
                    o.write(v);
                }
            }
        }
    }
}

/// float32 CHW `(x/255 - mean) / std` (torchvision `to_dtype(float32,
/// scale=True)` then `normalize`).
///
/// ```
/// use sluice_imgproc::{normalize, Image};
/// let img = Image::new(1, 2, 3, vec![0, 255, 51, 255, 0, 51]).unwrap();
/// let t = normalize(&img, &[0.5, 0.5, 0.5], &[0.5, 0.5, 0.5]).unwrap();
/// assert_eq!(t[..2], [-1.0, 1.0]); // channel 0 plane
/// assert_eq!(t[2..4], [1.0, -1.0]); // channel 1 plane
/// ```
pub fn normalize(img: &Image, mean: &[f32], std: &[f32]) -> Result<Vec<f32>> {
    img.validate()?;
    let n = img.data.len();
    // Not zeroed first: every float is written.
    let mut out = Vec::with_capacity(n);
    normalize_hwc(
        &img.data,
        img.channels,
        mean,
        std,
        &mut out.spare_capacity_mut()[..n],
        false,
    )?;
    // SAFETY: `normalize_hwc` wrote all `n` floats.
    unsafe { out.set_len(n) };
    Ok(out)
}

/// float32 CHW `x / 255` (torchvision `ToImage` + `ToDtype(float32, scale=True)`,
/// the modern `ToTensor`).
///
/// ```
/// use sluice_imgproc::{to_tensor, Image};
/// let img = Image::new(1, 1, 3, vec![0, 255, 51]).unwrap();
/// // 51 * float32(1/255), as torch computes it
/// assert_eq!(to_tensor(&img).unwrap(), vec![0.0, 1.0, 0.20000002]);
/// ```
pub fn to_tensor(img: &Image) -> Result<Vec<f32>> {
    let zeros = vec![0f32; img.channels];
    let ones = vec![1f32; img.channels];
    normalize(img, &zeros, &ones)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Blocks written by streaming stores on this thread.
        pub(super) static STREAMED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn kernel_equals_tables() {
        let data: Vec<u8> = (0..=255u8).cycle().take(3 * 150).collect();
        let img = Image::new(10, 15, 3, data).unwrap();
        let (m, s) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
        let t: Vec<[f32; 256]> = (0..3).map(|c| table(m[c], s[c])).collect();
        crate::simd::for_each_path(|path| {
            let got = normalize(&img, &m, &s).unwrap();
            for (i, px) in img.data.chunks_exact(3).enumerate() {
                for c in 0..3 {
                    assert_eq!(got[c * 150 + i], t[c][usize::from(px[c])], "{path}");
                }
            }
        });
    }

    /// A batch-sized output takes the streaming stores: same floats as the tables, on every
    /// code path, whether the planes start on a 16-byte boundary (224²) or not (225²: planes
    /// 1 and 2 are 4 bytes off, so their blocks fall back to plain stores), into a slot
    /// written in place.
    #[test]
    fn streamed_outputs_equal_the_tables() {
        let (m, s) = ([0.485f32, 0.456, 0.406], [0.229f32, 0.224, 0.225]);
        let t: Vec<[f32; 256]> = (0..3).map(|c| table(m[c], s[c])).collect();
        for (side, off) in [(224usize, 0usize), (225, 0), (224, 1)] {
            let n = side * side;
            assert!(out_bytes(3 * n) >= STREAM_BYTES);
            let data: Vec<u8> = (0..3 * n).map(|i| (i * 7 + i / 3) as u8).collect();
            let img = Image::new(side, side, 3, data).unwrap();
            crate::simd::for_each_path(|path| {
                let mut slot = vec![f32::NAN; 3 * n + 2];
                let aligned = (slot.as_ptr() as usize + 4 * off) % 16 == 0;
                STREAMED.with(|s| s.set(0));
                normalize_into(&img, &m, &s, &mut slot[off..off + 3 * n]).unwrap();
                for (i, px) in img.data.chunks_exact(3).enumerate() {
                    for c in 0..3 {
                        let got = slot[off + c * n + i];
                        assert_eq!(got, t[c][usize::from(px[c])], "{side} {path} {i} {c}");
                    }
                }
                assert!(slot[off + 3 * n].is_nan(), "nothing written past the slot");
                let streamed = STREAMED.with(|s| s.get());
                // 224²: every plane is whole blocks on 16-byte boundaries; 225²: only
                // plane 0 starts on one (its last block is short).
                let expect = match (aligned, side) {
                    (false, _) => 0,
                    (true, 224) => 3 * n / BLOCK,
                    (true, _) => n / BLOCK,
                };
                if cfg!(target_arch = "x86_64") {
                    assert_eq!(streamed, expect, "{side} {off} {path}");
                }
                // A sample's own output is read back soon: never streamed.
                let own = normalize(&img, &m, &s).unwrap();
                assert_eq!(own, slot[off..off + 3 * n], "{side} {off} {path}");
                assert_eq!(STREAMED.with(|s| s.get()), streamed, "{side} {off} {path}");
            });
        }
    }

    #[test]
    fn bad_arguments() {
        let img = Image::zeros(2, 2, 3).unwrap();
        assert!(normalize(&img, &[0.0; 2], &[1.0; 2]).is_err());
        assert!(normalize(&img, &[0.0; 3], &[1.0, 0.0, 1.0]).is_err());
        let mut small = vec![0f32; 5];
        assert!(normalize_into(&img, &[0.0; 3], &[1.0; 3], &mut small).is_err());
        let gray = Image::zeros(2, 2, 1).unwrap();
        assert_eq!(normalize(&gray, &[0.5], &[0.5]).unwrap(), vec![-1.0; 4]);
    }
}
