//! Geometry vs Pillow and colour/blur/normalize ops vs a numpy float32 port
//! of torchvision v2 (tests/fixtures/gen_fixtures.py).

mod common;
use common::*;
use sluice_imgproc::*;

fn photo() -> Image {
    // Pillow's decode of photo_444.jpg: the source of the resize references.
    let m = manifest();
    let sh = shape(&m["photo_444.jpg"]["rgb"]);
    Image::new(sh[0], sh[1], 3, read("photo_444.jpg.rgb.bin")).unwrap()
}

fn ops_src() -> Image {
    let sh = shape(&manifest()["ops_src"]);
    Image::new(sh[0], sh[1], 3, read("ops_src.bin")).unwrap()
}

#[test]
fn resize_matches_pillow() {
    let src = photo();
    let m = manifest();
    for r in m["resize"].as_array().unwrap() {
        let (w, h) = (
            r["w"].as_u64().unwrap() as usize,
            r["h"].as_u64().unwrap() as usize,
        );
        let filter = match r["filter"].as_str().unwrap() {
            "bilinear" => Filter::Bilinear,
            "bicubic" => Filter::Bicubic,
            _ => Filter::Nearest,
        };
        let out = if r["box"].is_null() {
            resize(&src, h, w, filter, true).unwrap()
        } else {
            let b: Vec<f64> = r["box"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            // Pillow box = (left, top, right, bottom)
            let cb = CropBox {
                top: b[1],
                left: b[0],
                height: b[3] - b[1],
                width: b[2] - b[0],
            };
            resized_crop_box(&src, cb, h, w, filter, true).unwrap()
        };
        let file = r["file"].as_str().unwrap();
        let (mean, max, same) = diff(&out.data, &read(file));
        println!(
            "{file}: mean {mean:.3} max {max} identical {:.1}%",
            same * 100.0
        );
        let limit = if filter == Filter::Nearest { 0.0 } else { 1.5 };
        assert!(mean <= limit, "{file}: mean |d| {mean}");
    }
}

#[test]
fn resized_crop_equals_crop_then_resize() {
    let src = photo();
    let a = resized_crop(&src, 5, 7, 30, 25, 16, 20, Filter::Bilinear).unwrap();
    let c = crop(&src, 5, 7, 30, 25).unwrap();
    let b = resize(&c, 16, 20, Filter::Bilinear, true).unwrap();
    // torchvision's crop then resize: the one pass reads nothing beyond the crop.
    assert_eq!(a, b);
    for filter in [Filter::Nearest, Filter::Bicubic] {
        let a = resized_crop(&src, 11, 3, 17, 40, 9, 13, filter).unwrap();
        let b = resize(&crop(&src, 11, 3, 17, 40).unwrap(), 9, 13, filter, true).unwrap();
        assert_eq!(a, b, "{filter:?}");
    }
}

#[test]
fn flip_and_crop_exact() {
    let src = photo();
    let mut f = src.clone();
    hflip(&mut f).unwrap();
    for y in 0..src.height {
        for x in 0..src.width {
            assert_eq!(f.pixel(y, x), src.pixel(y, src.width - 1 - x));
        }
    }
    let c = crop(&src, 3, 4, 10, 11).unwrap();
    assert_eq!(c.pixel(0, 0), src.pixel(3, 4));
    assert_eq!(c.pixel(9, 10), src.pixel(12, 14));
}

#[test]
fn grayscale_vs_pillow_l() {
    let src = photo();
    let pil_l = decode(
        &read("photo_444.jpg"),
        &DecodeOptions {
            mode: Mode::L,
            ..Default::default()
        },
    )
    .unwrap();
    // Our Pillow-L conversion of the same decoded pixels must be exact...
    let l = rgb_to_l(&decode(&read("photo_444.jpg"), &DecodeOptions::default()).unwrap()).unwrap();
    assert_eq!(l, pil_l);
    // ...and torchvision's truncating gray within 1 level of Pillow's L.
    let g = to_grayscale(&src, 1).unwrap();
    let want = read("photo_444.jpg.rgb.bin");
    let pillow: Vec<u8> = want
        .chunks_exact(3)
        .map(|p| {
            ((19595 * p[0] as u32 + 38470 * p[1] as u32 + 7471 * p[2] as u32 + 0x8000) >> 16) as u8
        })
        .collect();
    let (_, max, _) = diff(&g.data, &pillow);
    assert!(max <= 1);
}

#[test]
fn torchvision_ops_match_reference() {
    let src = ops_src();
    let m = manifest();
    for op in m["ops"].as_array().unwrap() {
        let file = op["file"].as_str().unwrap();
        let kind = op["op"].as_str().unwrap();
        let factor = op.get("factor").and_then(|v| v.as_f64());
        let got: Vec<u8> = match kind {
            "brightness" | "contrast" | "saturation" | "hue" => {
                let mut x = src.clone();
                let f = factor.unwrap();
                match kind {
                    "brightness" => adjust_brightness(&mut x, f),
                    "contrast" => adjust_contrast(&mut x, f),
                    "saturation" => adjust_saturation(&mut x, f),
                    _ => adjust_hue(&mut x, f),
                }
                .unwrap();
                x.data
            }
            "grayscale" => to_grayscale(&src, 1).unwrap().data,
            "blur" => {
                let k: Vec<usize> = op["kernel"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as usize)
                    .collect();
                let s: Vec<f64> = op["sigma"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap())
                    .collect();
                gaussian_blur(&src, (k[0], k[1]), (s[0], s[1]))
                    .unwrap()
                    .data
            }
            "normalize" | "totensor" => {
                let got = if kind == "normalize" {
                    let f = |k: &str| -> Vec<f32> {
                        op[k]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| v.as_f64().unwrap() as f32)
                            .collect()
                    };
                    normalize(&src, &f("mean"), &f("std")).unwrap()
                } else {
                    to_tensor(&src).unwrap()
                };
                let want = read_f32(file);
                assert_eq!(got.len(), want.len());
                let max = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                println!("{file}: max |d| {max:e}");
                assert!(max <= 1e-5, "{file}: {max}");
                continue;
            }
            other => panic!("unknown op {other}"),
        };
        let (mean, max, same) = diff(&got, &read(file));
        println!(
            "{file}: mean {mean:.4} max {max} identical {:.2}%",
            same * 100.0
        );
        // Same float32 formulas: identical except where float rounding
        // lands exactly on an integer boundary (blur sums in another order).
        assert!(max <= 1, "{file}: max |d| {max}");
        assert!(same >= 0.99, "{file}: only {:.2}% identical", same * 100.0);
    }
}
