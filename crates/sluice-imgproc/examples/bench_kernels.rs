//! Per-op timings of the CV hot path on real photos.
//!
//! ```text
//! cargo run --release -p sluice-imgproc --example bench_kernels -- [PATH ...]
//! ```
//! PATH: JPEG files or directories of them (default: the 320x240 fixture).
//! Prints the median time per call of each kernel, averaged over the files,
//! and the throughput of the whole SimCLR-style chain on one core:
//! decode -> RandomResizedCrop(224) -> hflip -> ColorJitter -> grayscale ->
//! GaussianBlur(23) -> normalize.

mod common;

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Instant;

use sluice_imgproc::*;

/// This process's CPU time in ns (Linux `CLOCK_PROCESS_CPUTIME_ID`), so
/// the numbers stay meaningful while other processes compete for the cores
/// and include helper threads a decoder may spawn (jpeg-decoder does for
/// large outputs); wall time elsewhere.
#[cfg(target_os = "linux")]
fn cpu_ns(_start: Instant) -> u64 {
    common::clock_ns(common::PROCESS_CPU)
}

#[cfg(not(target_os = "linux"))]
fn cpu_ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

/// Median per-call CPU time in microseconds: batches of calls long enough
/// (>= ~0.3 ms) to hide the timer's own cost, at least `min_batches` of
/// them and ~40 ms in total.
fn median_us(mut f: impl FnMut(), min_batches: usize) -> f64 {
    let origin = Instant::now();
    f();
    let t = Instant::now();
    f();
    let one = t.elapsed().as_secs_f64();
    let per_batch = ((3e-4 / one.max(1e-9)).ceil() as usize).max(1);
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < min_batches || start.elapsed().as_millis() < 40 {
        let c = cpu_ns(origin);
        for _ in 0..per_batch {
            f();
        }
        samples.push((cpu_ns(origin) - c) as f64 / 1e3 / per_batch as f64);
        if samples.len() > 2000 {
            break;
        }
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[samples.len() / 2]
}

fn files(args: Vec<String>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let args = if args.is_empty() {
        vec![concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/coffee_320x240.jpg"
        )
        .to_string()]
    } else {
        args
    };
    for a in args {
        let p = PathBuf::from(a);
        if p.is_dir() {
            let mut v: Vec<_> = std::fs::read_dir(&p)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "jpg" || e == "jpeg"))
                .collect();
            v.sort();
            out.extend(v);
        } else {
            out.push(p);
        }
    }
    out
}

fn main() {
    let paths = files(std::env::args().skip(1).collect());
    let blobs: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let opts = DecodeOptions::default();
    let mean = [0.485f32, 0.456, 0.406];
    let std = [0.229f32, 0.224, 0.225];
    let mut names: Vec<&str> = Vec::new();
    let mut totals: Vec<f64> = Vec::new();
    let mut add = |name: &'static str, us: f64| {
        if let Some(i) = names.iter().position(|n| *n == name) {
            totals[i] += us;
        } else {
            names.push(name);
            totals.push(us);
        }
    };
    let mut pixels = 0usize;
    for bytes in &blobs {
        let img = decode(bytes, &opts).unwrap();
        pixels += img.pixels();
        let (h, w) = (img.height, img.width);
        add(
            "jpeg_dimensions",
            median_us(
                || {
                    black_box(jpeg_dimensions(bytes).unwrap());
                },
                10,
            ),
        );
        add(
            "decode (full size)",
            median_us(
                || {
                    black_box(decode(bytes, &opts).unwrap());
                },
                10,
            ),
        );
        // A typical RandomResizedCrop draw: ~40% of the area.
        let (ch, cw) = ((h as f64 * 0.63) as usize, (w as f64 * 0.63) as usize);
        add(
            "decode_scaled (req 224/crop)",
            median_us(
                || {
                    black_box(
                        decode_scaled(bytes, &opts, (224 * h).div_ceil(ch), (224 * w).div_ceil(cw))
                            .unwrap(),
                    );
                },
                10,
            ),
        );
        add(
            "decode_scaled 1/2 (forced)",
            median_us(
                || {
                    black_box(decode_scaled(bytes, &opts, h / 2, w / 2).unwrap());
                },
                10,
            ),
        );
        add(
            "decode_scaled 1/4 (forced)",
            median_us(
                || {
                    black_box(decode_scaled(bytes, &opts, h / 4, w / 4).unwrap());
                },
                10,
            ),
        );
        add(
            "decode_scaled 1/8 (forced)",
            median_us(
                || {
                    black_box(decode_scaled(bytes, &opts, h / 8, w / 8).unwrap());
                },
                10,
            ),
        );
        let mut u = common::rng(1);
        add(
            "rrc_params",
            median_us(
                || {
                    black_box(rrc_params(h, w, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut u).unwrap());
                },
                20,
            ),
        );
        add(
            "resized_crop -> 224 (bilinear, AA)",
            median_us(
                || {
                    black_box(
                        resized_crop(&img, 0, 0, ch, cw, 224, 224, Filter::Bilinear).unwrap(),
                    );
                },
                10,
            ),
        );
        let small = resized_crop(&img, 0, 0, ch, cw, 224, 224, Filter::Bilinear).unwrap();
        add(
            "hflip 224",
            median_us(
                || {
                    let mut x = small.clone();
                    hflip(&mut x).unwrap();
                    black_box(x);
                },
                20,
            ),
        );
        add(
            "  (clone 224, included in ops)",
            median_us(
                || {
                    black_box(small.clone());
                },
                20,
            ),
        );
        add(
            "adjust_brightness 224",
            median_us(
                || {
                    let mut x = small.clone();
                    adjust_brightness(&mut x, 1.3).unwrap();
                    black_box(x);
                },
                20,
            ),
        );
        add(
            "adjust_contrast 224",
            median_us(
                || {
                    let mut x = small.clone();
                    adjust_contrast(&mut x, 0.7).unwrap();
                    black_box(x);
                },
                20,
            ),
        );
        add(
            "adjust_saturation 224",
            median_us(
                || {
                    let mut x = small.clone();
                    adjust_saturation(&mut x, 1.4).unwrap();
                    black_box(x);
                },
                20,
            ),
        );
        add(
            "adjust_hue 224",
            median_us(
                || {
                    let mut x = small.clone();
                    adjust_hue(&mut x, 0.1).unwrap();
                    black_box(x);
                },
                10,
            ),
        );
        add(
            "to_grayscale(3) 224",
            median_us(
                || {
                    black_box(to_grayscale(&small, 3).unwrap());
                },
                20,
            ),
        );
        add(
            "gaussian_blur k23 224",
            median_us(
                || {
                    black_box(gaussian_blur(&small, (23, 23), (1.5, 1.5)).unwrap());
                },
                10,
            ),
        );
        add(
            "normalize 224 -> f32 CHW",
            median_us(
                || {
                    black_box(normalize(&small, &mean, &std).unwrap());
                },
                20,
            ),
        );
        let mut u = common::rng(7);
        add(
            "pipeline (full decode)",
            median_us(
                || {
                    black_box(pipeline(bytes, &mut u, false));
                },
                10,
            ),
        );
        let mut u = common::rng(7);
        add(
            "pipeline (decode_scaled)",
            median_us(
                || {
                    black_box(pipeline(bytes, &mut u, true));
                },
                10,
            ),
        );
    }
    let n = blobs.len() as f64;
    println!(
        "{} file(s), mean {:.0} px ({:.2} MP); median CPU us per call, averaged over files",
        blobs.len(),
        pixels as f64 / n,
        pixels as f64 / n / 1e6
    );
    for (name, t) in names.iter().zip(&totals) {
        let us = t / n;
        if name.starts_with("pipeline") {
            println!("{name:<38} {us:>9.1} us  = {:.0} images/s/core", 1e6 / us);
        } else {
            println!("{name:<38} {us:>9.1} us");
        }
    }
}

/// The CV benchmark's per-sample work (SimCLR-style; every random op applied).
fn pipeline(bytes: &[u8], u: &mut dyn FnMut() -> f64, scaled: bool) -> Vec<f32> {
    let opts = DecodeOptions::default();
    let (h, w) = jpeg_dimensions(bytes).unwrap();
    let (t, l, ch, cw) = rrc_params(h, w, (0.08, 1.0), (0.75, 4.0 / 3.0), u).unwrap();
    let mut img = if scaled {
        let (img, d) =
            decode_scaled(bytes, &opts, (224 * h).div_ceil(ch), (224 * w).div_ceil(cw)).unwrap();
        let s = f64::from(d);
        let b = CropBox {
            top: t as f64 / s,
            left: l as f64 / s,
            height: ch as f64 / s,
            width: cw as f64 / s,
        };
        resized_crop_box(&img, b, 224, 224, Filter::Bilinear, true).unwrap()
    } else {
        let img = decode(bytes, &opts).unwrap();
        resized_crop(&img, t, l, ch, cw, 224, 224, Filter::Bilinear).unwrap()
    };
    hflip(&mut img).unwrap();
    let j = color_jitter_params(0.8, 0.8, 0.8, 0.2, u).unwrap();
    apply_jitter(&mut img, &j).unwrap();
    let img = to_grayscale(&img, 3).unwrap();
    let s = blur_sigma(0.1, 2.0, u).unwrap();
    let img = gaussian_blur(&img, (23, 23), (s, s)).unwrap();
    normalize(&img, &[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]).unwrap()
}
