//! Full-size decodes of a folder of JPEGs: zune-jpeg's whole-image decode against sluice's
//! own decoder (`decode_for_crop` of the whole image, which takes the window path) and
//! the 1/2 scaled decode, CPU per image, interleaved, medians.
//!
//! ```text
//! cargo run --release -p sluice-imgproc --example window_decode -- DIR [ROUNDS]
//! ```

mod common;

use std::hint::black_box;

use sluice_imgproc::*;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::PathBuf::from(args.first().expect("usage: window_decode DIR [ROUNDS]"));
    let rounds: usize = args.get(1).map_or(5, |s| s.parse().expect("ROUNDS"));
    let files = common::jpegs(&dir);
    let opts = DecodeOptions::default();
    let mut t = [0f64; 3];
    let mut worst = f64::INFINITY;
    let mut dbs = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).unwrap();
        let exact = decode(&bytes, &opts).unwrap();
        let (h, w) = (exact.height, exact.width);
        let own = decode_for_crop(&bytes, &opts, 0, 0, h, w, h, w, Filter::Bilinear).unwrap();
        let db = psnr(&own.image.data, &exact.data);
        worst = worst.min(db);
        dbs.push(db.min(99.0));
        let mut m: [Vec<u64>; 3] = Default::default();
        for _ in 0..rounds {
            let c = common::clock_ns(common::PROCESS_CPU);
            black_box(decode(&bytes, &opts).unwrap());
            let c1 = common::clock_ns(common::PROCESS_CPU);
            black_box(decode_for_crop(&bytes, &opts, 0, 0, h, w, h, w, Filter::Bilinear).unwrap());
            let c2 = common::clock_ns(common::PROCESS_CPU);
            black_box(decode_scaled(&bytes, &opts, h.div_ceil(2), w.div_ceil(2)).unwrap());
            let c3 = common::clock_ns(common::PROCESS_CPU);
            m[0].push(c1 - c);
            m[1].push(c2 - c1);
            m[2].push(c3 - c2);
        }
        for (acc, v) in t.iter_mut().zip(m.iter_mut()) {
            v.sort_unstable();
            *acc += v[v.len() / 2] as f64;
        }
    }
    let n = files.len() as f64;
    dbs.sort_by(f64::total_cmp);
    println!(
        "PSNR own vs zune: worst {worst:.1} dB, 1st percentile {:.1}, median {:.1}, mean {:.1}",
        dbs[dbs.len() / 100],
        dbs[dbs.len() / 2],
        dbs.iter().sum::<f64>() / n
    );
    println!(
        "{} JPEGs: zune full {:.0} µs, own full (window = whole image) {:.0} µs, own 1/2 {:.0} µs per image",
        files.len(),
        t[0] / n / 1e3,
        t[1] / n / 1e3,
        t[2] / n / 1e3
    );
}
