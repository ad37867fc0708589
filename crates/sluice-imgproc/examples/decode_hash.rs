//! A JPEG decoder change, checked and timed: hashes of what sluice's own decoder makes of a
//! folder of photos (whole images, half-size windows, 1/2–1/8 scaled decodes, and 18,000
//! randomly corrupted copies of the test fixtures: pixels or error text), then the wall
//! time per whole-image decode and per RandomResizedCrop-like window (area 8–100 %,
//! aspect 3/4–4/3, anywhere; the crop's own size, so no DCT scaling), one thread.
//!
//! ```text
//! cargo run --release -p sluice-imgproc --example decode_hash -- DIR [SECONDS]
//! ```
//!
//! Equal hashes before and after a change mean the same bytes for every one of those
//! decodes; the times say what it saved (docs/BENCHMARKS.md, "CV: decoding less").

mod common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::hint::black_box;
use std::time::Instant;

use sluice_imgproc::*;

/// Wall seconds per call of `decode` over `items`, passes until `secs`.
fn per_call<T>(items: &[T], secs: f64, mut decode: impl FnMut(&T)) -> f64 {
    let t = Instant::now();
    let mut n = 0;
    while t.elapsed().as_secs_f64() < secs {
        items.iter().for_each(&mut decode);
        n += items.len();
    }
    t.elapsed().as_secs_f64() / n as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::PathBuf::from(args.first().expect("usage: decode_hash DIR [SECONDS]"));
    let secs: f64 = args.get(1).map_or(5.0, |s| s.parse().expect("SECONDS"));
    let files: Vec<Vec<u8>> = common::jpegs(&dir)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let opts = DecodeOptions::default();
    let sizes: Vec<(usize, usize)> = files
        .iter()
        .map(|b| {
            let i = decode(b, &opts).unwrap();
            (i.height, i.width)
        })
        .collect();

    let mut h = DefaultHasher::new();
    for (i, (b, &(hh, ww))) in files.iter().zip(&sizes).enumerate() {
        let whole = decode_for_crop(b, &opts, 0, 0, hh, ww, hh, ww, Filter::Bilinear).unwrap();
        whole.image.data.hash(&mut h);
        let (t, l) = (i * 7 % (hh / 2), i * 13 % (ww / 2));
        let (ch, cw) = (hh / 2, ww / 2);
        let half = decode_for_crop(b, &opts, t, l, ch, cw, ch, cw, Filter::Bilinear).unwrap();
        half.image.data.hash(&mut h);
        for d in [2, 4, 8] {
            let (img, _) = decode_scaled(b, &opts, hh.div_ceil(d), ww.div_ceil(d)).unwrap();
            img.data.hash(&mut h);
        }
    }
    println!(
        "{} photos: whole, window and scaled decodes hash {:016x}",
        files.len(),
        h.finish()
    );

    let mut h = DefaultHasher::new();
    let mut unit = common::rng(0x00C0_FFEE);
    let mut below = move |n: usize| (unit() * n as f64) as usize;
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    for name in [
        "photo_420.jpg",
        "photo_restart.jpg",
        "photo_gray.jpg",
        "photo_422.jpg",
        "photo_444.jpg",
        "coffee_320x240.jpg",
    ] {
        let good = std::fs::read(format!("{fixtures}{name}")).unwrap();
        for i in 0..3000 {
            let mut bad = good.clone();
            for _ in 0..1 + i % 4 {
                let at = below(bad.len());
                bad[at] = below(256) as u8;
            }
            if i % 5 == 0 {
                bad.truncate(below(bad.len()));
            }
            for d in [1usize, 2, 4] {
                let (oh, ow) = (60 / d, 70 / d);
                match decode_for_crop(&bad, &opts, 3, 5, 60, 70, oh, ow, Filter::Bilinear) {
                    Ok(x) => x.image.data.hash(&mut h),
                    Err(e) => e.to_string().hash(&mut h),
                }
            }
        }
    }
    println!("18,000 corrupted fixtures: hash {:016x}", h.finish());

    let mut unit = common::rng(0x1234_5678);
    let crops: Vec<(&[u8], [usize; 4])> = files
        .iter()
        .zip(&sizes)
        .map(|(b, &(h, w))| {
            let area = (0.08 + 0.92 * unit()) * (h * w) as f64;
            let ratio = (0.75f64.ln() + unit() * (16.0f64 / 9.0).ln()).exp();
            let cw = ((area * ratio).sqrt() as usize).clamp(1, w);
            let ch = ((area / ratio).sqrt() as usize).clamp(1, h);
            let top = (unit() * (h - ch + 1) as f64) as usize;
            let left = (unit() * (w - cw + 1) as f64) as usize;
            (b.as_slice(), [top, left, ch, cw])
        })
        .collect();
    let mut h = DefaultHasher::new();
    for &(b, [t, l, ch, cw]) in &crops {
        let part = decode_for_crop(b, &opts, t, l, ch, cw, ch, cw, Filter::Bilinear).unwrap();
        part.image.data.hash(&mut h);
    }
    println!("crop windows: hash {:016x}", h.finish());

    let whole: Vec<(&[u8], (usize, usize))> = files
        .iter()
        .map(Vec::as_slice)
        .zip(sizes.iter().copied())
        .collect();
    let t_whole = per_call(&whole, secs, |&(b, (h, w))| {
        black_box(decode_for_crop(b, &opts, 0, 0, h, w, h, w, Filter::Bilinear).unwrap());
    });
    let t_crop = per_call(&crops, secs, |&(b, [t, l, ch, cw])| {
        black_box(decode_for_crop(b, &opts, t, l, ch, cw, ch, cw, Filter::Bilinear).unwrap());
    });
    println!(
        "per decode: whole image {:.1} µs, crop window {:.1} µs",
        t_whole * 1e6,
        t_crop * 1e6
    );
}
