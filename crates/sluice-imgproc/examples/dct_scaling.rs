//! DCT-scaled decoding: quality and speed on a folder of JPEGs.
//!
//! ```text
//! cargo run --release -p sluice-imgproc --example dct_scaling -- DIR [OUT] [CROPS]
//! ```
//! For every JPEG under DIR (recursively) it draws CROPS (default 40) RandomResizedCrop
//! boxes (scale 0.08–1, ratio 3/4–4/3) resized to OUT x OUT (default 224) and prints:
//! * quality: PSNR of the crop resized from each 1/d decode (d = 2, 4, 8) against full
//!   decode + resize, binned by the shrink left after the 1/d decode (`decode_resized_crop`
//!   uses d only when that is ≥ `DCT_MIN_RESIDUAL` = 1.5);
//! * speed: process CPU per image of a full decode and of 1/2, 1/4, 1/8 decodes
//!   (interleaved, medians, as ratios), and of decode + crop unfused (`decode`,
//!   `resized_crop`) vs fused (`decode_resized_crop`), with the scales it picked.

mod common;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};

use sluice_imgproc::*;

/// This process's CPU time in ns (helper threads included).
#[cfg(target_os = "linux")]
fn cpu_ns() -> u64 {
    common::clock_ns(common::PROCESS_CPU)
}

#[cfg(not(target_os = "linux"))]
fn cpu_ns() -> u64 {
    use std::sync::OnceLock;
    static T0: OnceLock<std::time::Instant> = OnceLock::new();
    T0.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

fn jpegs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(jpegs(&p));
        } else if p
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("jpg") || x.eq_ignore_ascii_case("jpeg"))
        {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().expect("usage: dct_scaling DIR [OUT] [CROPS]"));
    let out: usize = args.get(1).map_or(224, |s| s.parse().expect("OUT"));
    let crops: usize = args.get(2).map_or(40, |s| s.parse().expect("CROPS"));
    let files = jpegs(&dir);
    let opts = DecodeOptions::default();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut u = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let edges = [1.0, 1.25, DCT_MIN_RESIDUAL, 2.0, 3.0, f64::INFINITY];
    let mut bins: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    let mut decode_cpu = [0f64; 4];
    let (mut unfused_cpu, mut fused_cpu) = (0f64, 0f64);
    let mut used = BTreeMap::<u32, usize>::new();
    let mut n = 0;
    for path in &files {
        let bytes = std::fs::read(path).expect("read");
        let Ok(full) = decode(&bytes, &opts) else {
            continue;
        };
        n += 1;
        let (h, w) = (full.height, full.width);
        // Speed of the decodes alone: 5 interleaved rounds, medians.
        let mut t: [Vec<f64>; 4] = Default::default();
        for _ in 0..5 {
            for (i, d) in [1usize, 2, 4, 8].into_iter().enumerate() {
                let c = cpu_ns();
                if d == 1 {
                    black_box(decode(&bytes, &opts).unwrap());
                } else {
                    black_box(decode_scaled(&bytes, &opts, h.div_ceil(d), w.div_ceil(d)).unwrap());
                }
                t[i].push((cpu_ns() - c) as f64);
            }
        }
        for (acc, v) in decode_cpu.iter_mut().zip(t.iter_mut()) {
            *acc += median(v);
        }
        let scaled: Vec<(usize, Image)> = [2usize, 4, 8]
            .into_iter()
            .filter_map(|d| {
                let (img, got) = decode_scaled(&bytes, &opts, h.div_ceil(d), w.div_ceil(d)).ok()?;
                (got as usize == d).then_some((d, img))
            })
            .collect();
        for _ in 0..crops {
            let (top, left, ch, cw) =
                rrc_params(h, w, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut u).unwrap();
            let c0 = cpu_ns();
            let reference = resized_crop(
                &decode(&bytes, &opts).unwrap(),
                top,
                left,
                ch,
                cw,
                out,
                out,
                Filter::Bilinear,
            )
            .unwrap();
            let c1 = cpu_ns();
            let (_, d) =
                decode_resized_crop(&bytes, &opts, top, left, ch, cw, out, out, Filter::Bilinear)
                    .unwrap();
            let c2 = cpu_ns();
            unfused_cpu += (c1 - c0) as f64;
            fused_cpu += (c2 - c1) as f64;
            *used.entry(d).or_default() += 1;
            let shrink = (ch as f64 / out as f64).min(cw as f64 / out as f64);
            for (d, img) in &scaled {
                let residual = shrink / *d as f64;
                if residual < 1.0 {
                    continue;
                }
                let s = *d as f64;
                let b = CropBox {
                    top: top as f64 / s,
                    left: left as f64 / s,
                    height: ch as f64 / s,
                    width: cw as f64 / s,
                };
                let a = resized_crop_box(img, b, out, out, Filter::Bilinear, true).unwrap();
                let bin = edges.iter().rposition(|&e| residual >= e).unwrap_or(0);
                bins.entry((*d, bin))
                    .or_default()
                    .push(psnr(&a.data, &reference.data).min(99.0)); // a finite mean
            }
        }
    }
    if n == 0 {
        eprintln!("no decodable JPEGs under {}", dir.display());
        std::process::exit(1);
    }
    println!(
        "{n} JPEGs under {}, {crops} RandomResizedCrop draws each, {out}x{out} output\n",
        dir.display()
    );
    println!("quality vs full decode + resize, by the shrink left after the 1/d decode:");
    for ((d, bin), v) in &mut bins {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let p1 = {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 100]
        };
        println!(
            "  1/{d}, residual {:.2}–{:.2}x: {:5} crops, PSNR min {min:.1}, 1st pct {p1:.1}, mean {mean:.1} dB{}",
            edges[*bin],
            edges[bin + 1],
            v.len(),
            if edges[*bin] >= DCT_MIN_RESIDUAL { "  (used)" } else { "" },
        );
    }
    let full = decode_cpu[0];
    println!(
        "\ndecode CPU: full {:.0} µs/image; 1/2 {:.2}x, 1/4 {:.2}x, 1/8 {:.2}x of full",
        full / n as f64 / 1e3,
        decode_cpu[1] / full,
        decode_cpu[2] / full,
        decode_cpu[3] / full
    );
    println!(
        "decode + crop: unfused {:.0} µs, fused {:.0} µs per crop: {:.2}x; scales used {used:?}",
        unfused_cpu / (n * crops) as f64 / 1e3,
        fused_cpu / (n * crops) as f64 / 1e3,
        unfused_cpu / fused_cpu
    );
}
