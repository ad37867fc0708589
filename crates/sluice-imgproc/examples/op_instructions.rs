//! One CV augmentation, run a fixed number of times on fixed 224x224 crops, for instruction
//! counts: timings on a shared machine are noisy, callgrind's counts are not.
//!
//! ```text
//! cargo build --profile dev-release -p sluice-imgproc --example op_instructions
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*measured*' \
//!     $CARGO_TARGET_DIR/dev-release/examples/op_instructions OP DIR [IMAGES]
//! ```
//! OP: `decode` (full size), `fused` (`decode_resized_crop` with a RandomResizedCrop draw:
//! the DCT-scaled decode the engine fuses decode + crop into), `rrc` (decoded image -> 224,
//! bilinear AA), `flip`, `jitter` (ColorJitter(0.4, 0.4,
//! 0.4, 0.1), always applied), `brightness`, `contrast`, `saturation`, `hue`, `gray`
//! (3 output channels), `blur` (kernel 23, sigma U(0.1, 2.0), always applied),
//! `normalize`. DIR: JPEGs (the first IMAGES, default 16, in name order). Divide the count
//! of `measured` by IMAGES for instructions per image. Parameters come from a fixed
//! generator, so two builds see the same work. A fourth argument REPS (outside valgrind)
//! also prints the median thread CPU time per image over REPS runs; `hash` instead prints
//! a hash of the outputs, equal for two builds that compute the same bytes.
//!
//! valgrind hides AVX-512 from the program, so the counts are those of the AVX2 code;
//! the times are those of the best code the CPU runs. The example uses the system
//! allocator, not the engine's mimalloc: ops that allocate big outputs pay page faults
//! here that they do not in the engine.

mod common;

use std::hint::black_box;
use std::path::PathBuf;

use sluice_imgproc::*;

#[inline(never)]
fn measured(
    op: &str,
    blobs: &[Vec<u8>],
    full: &[Image],
    crops: &[Image],
    u: &mut dyn FnMut() -> f64,
    mut hash: Option<&mut u64>,
) {
    let mut sink = |b: &mut dyn Iterator<Item = u8>| {
        if let Some(h) = hash.as_deref_mut() {
            for v in b {
                *h = (*h ^ u64::from(v)).wrapping_mul(0x100_0000_01b3);
            }
        }
    };
    let opts = DecodeOptions::default();
    for ((bytes, img), crop) in blobs.iter().zip(full).zip(crops) {
        let mut x = crop.clone();
        match op {
            "decode" => x = decode(bytes, &opts).unwrap(),
            "fused" => {
                let (t, l, h, w) =
                    rrc_params(img.height, img.width, (0.08, 1.0), (0.75, 4.0 / 3.0), u).unwrap();
                x = decode_resized_crop(bytes, &opts, t, l, h, w, 224, 224, Filter::Bilinear)
                    .unwrap()
                    .0;
            }
            "rrc" => {
                let (t, l, h, w) =
                    rrc_params(img.height, img.width, (0.08, 1.0), (0.75, 4.0 / 3.0), u).unwrap();
                x = resized_crop(img, t, l, h, w, 224, 224, Filter::Bilinear).unwrap();
            }
            "flip" => hflip(&mut x).unwrap(),
            "jitter" => {
                let p = color_jitter_params(0.4, 0.4, 0.4, 0.1, u).unwrap();
                apply_jitter(&mut x, &p).unwrap();
            }
            "brightness" => adjust_brightness(&mut x, 0.6 + 0.8 * u()).unwrap(),
            "contrast" => adjust_contrast(&mut x, 0.6 + 0.8 * u()).unwrap(),
            "saturation" => adjust_saturation(&mut x, 0.6 + 0.8 * u()).unwrap(),
            "hue" => adjust_hue(&mut x, 0.2 * u() - 0.1).unwrap(),
            "gray" => x = to_grayscale(&x, 3).unwrap(),
            "blur" => {
                let s = blur_sigma(0.1, 2.0, u).unwrap();
                x = gaussian_blur(&x, (23, 23), (s, s)).unwrap();
            }
            "normalize" => {
                let t = normalize(&x, &[0.485, 0.456, 0.406], &[0.229, 0.224, 0.225]).unwrap();
                sink(&mut t.iter().flat_map(|v| v.to_le_bytes()));
            }
            other => panic!("unknown op {other}"),
        }
        sink(&mut x.data.iter().copied());
        black_box(x);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (op, dir) = (&args[0], PathBuf::from(&args[1]));
    let n: usize = args.get(2).map_or(16, |v| v.parse().unwrap());
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
        .collect();
    paths.sort();
    paths.truncate(n);
    let mut u = common::rng(7);
    let blobs: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let full: Vec<Image> = blobs
        .iter()
        .map(|b| decode(b, &DecodeOptions::default()).unwrap())
        .collect();
    let crops: Vec<Image> = full
        .iter()
        .map(|img| {
            let (t, l, h, w) = rrc_params(
                img.height,
                img.width,
                (0.08, 1.0),
                (0.75, 4.0 / 3.0),
                &mut u,
            )
            .unwrap();
            resized_crop(img, t, l, h, w, 224, 224, Filter::Bilinear).unwrap()
        })
        .collect();
    if args.get(3).is_some_and(|a| a == "hash") {
        // The output bytes' FNV-1a hash: equal for two builds that compute the same bytes.
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        measured(op, &blobs, &full, &crops, &mut u, Some(&mut hash));
        println!("{op}: output hash {hash:016x}");
        return;
    }
    measured(op, &blobs, &full, &crops, &mut u, None);
    if let Some(reps) = args.get(3).map(|v| v.parse::<usize>().unwrap()) {
        let mut per_image: Vec<f64> = (0..reps)
            .map(|_| {
                let t = thread_cpu_ns();
                measured(op, &blobs, &full, &crops, &mut u, None);
                (thread_cpu_ns() - t) as f64 / 1e3 / full.len() as f64
            })
            .collect();
        per_image.sort_by(f64::total_cmp);
        println!(
            "{op}: {:.1} us per image (median of {reps})",
            per_image[reps / 2]
        );
    }
}

/// This thread's CPU time in ns: other processes on the cores do not count.
fn thread_cpu_ns() -> u64 {
    common::clock_ns(common::THREAD_CPU)
}
