//! DCT-scaled decoding: quality vs full decode + resize, and its contract.

mod common;
use common::*;
use sluice_imgproc::*;

#[test]
fn scaled_decode_then_resize_close_to_full_decode_then_resize() {
    // RandomResizedCrop-like use: random crops of the 320x240 photo resized
    // to 48x48 (the sizes are scaled down with the photo; with a 224 px
    // output the same ratios need ~1-2 MP sources).
    let bytes = read("coffee_320x240.jpg");
    let full = decode(&bytes, &DecodeOptions::default()).unwrap();
    let mut s = 0x1234_5678_9ABC_DEF0u64;
    let mut u = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let out: usize = 48;
    let mut psnrs = std::collections::BTreeMap::<u32, Vec<f64>>::new();
    for _ in 0..60 {
        let (t, l, ch, cw) = rrc_params(240, 320, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut u).unwrap();
        let (img, d) = decode_scaled(
            &bytes,
            &DecodeOptions::default(),
            (out * 240).div_ceil(ch),
            (out * 320).div_ceil(cw),
        )
        .unwrap();
        assert_eq!(
            (img.height, img.width),
            (240usize.div_ceil(d as usize), 320usize.div_ceil(d as usize))
        );
        let sd = f64::from(d);
        let cb = CropBox {
            top: t as f64 / sd,
            left: l as f64 / sd,
            height: ch as f64 / sd,
            width: cw as f64 / sd,
        };
        let a = resized_crop_box(&img, cb, out, out, Filter::Bilinear, true).unwrap();
        let b = resized_crop(&full, t, l, ch, cw, out, out, Filter::Bilinear).unwrap();
        psnrs.entry(d).or_default().push(psnr(&a.data, &b.data));
    }
    for (d, v) in &psnrs {
        let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "1/{d}: {} crops, PSNR min {min:.1} mean {mean:.1} dB",
            v.len()
        );
        // 1/2: every crop >= 35 dB. 1/4 and 1/8 start from a tiny 80x60 or
        // 40x30 decode here; a reduced IDCT is a box-like filter, the full
        // path a triangle one, so single crops can dip below 35 dB while
        // the average stays above (README: same on 1-4 MP photos).
        if *d == 2 {
            assert!(min >= 35.0, "1/{d}: PSNR {min}");
        } else {
            assert!(
                mean >= 35.0 && min >= 33.0,
                "1/{d}: PSNR min {min} mean {mean}"
            );
        }
    }
    assert!(
        psnrs.keys().any(|&d| d >= 2),
        "no crop used a scaled decode"
    );
}

#[test]
fn denominator_choice() {
    let bytes = read("coffee_320x240.jpg");
    // Both backends scale a baseline file by 2, 4 and 8.
    let half = 2;
    let cases = [
        (120, 160, half),
        (60, 80, 4),
        (61, 80, half),
        (30, 40, 8),
        (121, 160, 1),
        (1, 161, 1),
        (0, 0, 8),
    ];
    for (h, w, want) in cases {
        let (img, d) = decode_scaled(&bytes, &DecodeOptions::default(), h, w).unwrap();
        assert_eq!(d, want, "{h}x{w}");
        assert!(img.height >= h && img.width >= w);
    }
}

#[test]
fn scaled_crop_maps_coordinates() {
    let bytes = read("coffee_320x240.jpg");
    let full = decode(&bytes, &DecodeOptions::default()).unwrap();
    let (top, left, h, w) = (30usize, 50usize, 160usize, 200usize);
    let (oh, ow) = (40usize, 48usize);
    let (img, d) = decode_scaled(
        &bytes,
        &DecodeOptions::default(),
        (oh * 240).div_ceil(h),
        (ow * 320).div_ceil(w),
    )
    .unwrap();
    // Needs 60x77 of the 240x320 photo: 1/4 (60x80) is the smallest that fits.
    assert_eq!(d, 4);
    let s = d as f64;
    let cb = CropBox {
        top: top as f64 / s,
        left: left as f64 / s,
        height: h as f64 / s,
        width: w as f64 / s,
    };
    let a = resized_crop_box(&img, cb, oh, ow, Filter::Bilinear, true).unwrap();
    let b = resized_crop(&full, top, left, h, w, oh, ow, Filter::Bilinear).unwrap();
    let p = psnr(&a.data, &b.data);
    println!("crop PSNR {p:.1} dB");
    assert!(p >= 33.0, "{p}");
}

#[test]
fn scaled_decode_handles_orientation_gray_cmyk_and_png() {
    // Orientation 6 swaps axes: a request in upright terms.
    let o = read("orient_6.jpg");
    let (img, d) = decode_scaled(&o, &DecodeOptions::default(), 6, 4).unwrap();
    assert_eq!(d, 4);
    assert_eq!((img.height, img.width), (6, 4));
    for name in [
        "photo_gray.jpg",
        "photo_cmyk.jpg",
        "photo_ycck.jpg",
        "photo_prog.jpg",
    ] {
        let bytes = read(name);
        let full = decode(&bytes, &DecodeOptions::default()).unwrap();
        let (img, d) = decode_scaled(&bytes, &DecodeOptions::default(), 9, 12).unwrap();
        assert_eq!(d, 4, "{name}");
        let b = resize(&full, img.height, img.width, Filter::Bilinear, true).unwrap();
        let p = psnr(&img.data, &b.data);
        println!("{name}: 1/4 vs full+resize PSNR {p:.1}");
        // 48x36 photos cut to 12x9: most energy is in the detail a reduced
        // IDCT drops, so only gross errors (wrong colours, shifts) fail.
        // The YCCK file is CMYK data relabelled, i.e. extreme chroma, which
        // the YCC->RGB matrix amplifies; exact conversion is unit-tested.
        let floor = if name == "photo_ycck.jpg" { 22.0 } else { 28.0 };
        assert!(p >= floor, "{name}: {p}");
        let (l, _) = decode_scaled(
            &bytes,
            &DecodeOptions {
                mode: Mode::L,
                ..Default::default()
            },
            18,
            24,
        )
        .unwrap();
        assert_eq!(l.channels, 1);
    }
    let (img, d) = decode_scaled(&read("rgb8.png"), &DecodeOptions::default(), 1, 1).unwrap();
    assert_eq!((d, img.width), (1, 12));
}

#[test]
fn decode_resized_crop_agrees_with_decode_then_resized_crop() {
    let opts = DecodeOptions::default();
    let mut s = 0x0DDB_1A5E_5BAD_5EEDu64;
    let mut u = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    // The second file is 157x117 stored, EXIF orientation 7 (transposed, both axes
    // reversed): scaled pixels start with the partial block on both upright axes. Its
    // 30x40 1/4-scale decode resized to 12x12 is a harsher test (33 dB; without the
    // grid shift the worst crop falls to 21 dB).
    for (name, out, floor) in [
        ("coffee_320x240.jpg", 24, 35.0),
        ("coffee_157x117_o7.jpg", 12, 33.0),
    ] {
        let bytes = read(name);
        let full = decode(&bytes, &opts).unwrap();
        let (h, w) = (full.height, full.width);
        assert_eq!(jpeg_dimensions(&bytes).unwrap(), (h, w));
        let mut worst = f64::INFINITY;
        let mut scaled = 0;
        for _ in 0..80 {
            let (t, l, ch, cw) = rrc_params(h, w, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut u).unwrap();
            let (a, d) =
                decode_resized_crop(&bytes, &opts, t, l, ch, cw, out, out, Filter::Bilinear)
                    .unwrap();
            assert_eq!(d, dct_denominator(ch, cw, out, out, Filter::Bilinear));
            let b = resized_crop(&full, t, l, ch, cw, out, out, Filter::Bilinear).unwrap();
            if d == 1 {
                assert!(psnr(&a.data, &b.data) >= 35.0, "{name}: a full-size crop");
            } else {
                scaled += 1;
                worst = worst.min(psnr(&a.data, &b.data));
            }
        }
        println!("{name}: {scaled}/80 crops scaled, worst PSNR {worst:.1} dB");
        assert!(scaled >= 10, "{name}: {scaled}");
        assert!(worst >= floor, "{name}: PSNR {worst}");
    }
    // Crops that shrink less decode at full size, only the MCUs they touch: close to the
    // two-step call (the chroma is upsampled in the DCT domain, not interpolated).
    let bytes = read("coffee_320x240.jpg");
    let full = decode(&bytes, &opts).unwrap();
    let mut worst = f64::INFINITY;
    for _ in 0..80 {
        let (t, l, ch, cw) = rrc_params(240, 320, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut u).unwrap();
        let (a, d) =
            decode_resized_crop(&bytes, &opts, t, l, ch, cw, 96, 96, Filter::Bilinear).unwrap();
        let b = resized_crop(&full, t, l, ch, cw, 96, 96, Filter::Bilinear).unwrap();
        if d == 1 {
            worst = worst.min(psnr(&a.data, &b.data));
        }
    }
    println!("coffee_320x240.jpg at full size: worst PSNR {worst:.1} dB");
    assert!((38.0..f64::INFINITY).contains(&worst), "{worst}");
    // PNG (no DCT) and nearest (picks pixels) always take the full path.
    let png = read("rgb8_pillow.png");
    let img = decode(&png, &opts).unwrap();
    let (a, d) = decode_resized_crop(
        &png,
        &opts,
        0,
        0,
        img.height,
        img.width,
        1,
        1,
        Filter::Bilinear,
    )
    .unwrap();
    assert_eq!(d, 1);
    assert_eq!(
        a,
        resized_crop(&img, 0, 0, img.height, img.width, 1, 1, Filter::Bilinear).unwrap()
    );
    let bytes = read("coffee_320x240.jpg");
    let (_, d) = decode_resized_crop(&bytes, &opts, 0, 0, 240, 320, 8, 8, Filter::Nearest).unwrap();
    assert_eq!(d, 1);
    // Errors are the full decode's: the pixel limit, corrupt headers.
    let small = DecodeOptions {
        max_pixels: 1000,
        ..opts
    };
    assert!(matches!(
        decode_resized_crop(&bytes, &small, 0, 0, 240, 320, 8, 8, Filter::Bilinear),
        Err(ImageError::TooLarge { .. })
    ));
    assert_eq!(
        decode_resized_crop(
            b"\xff\xd8\xff",
            &opts,
            0,
            0,
            240,
            320,
            8,
            8,
            Filter::Bilinear
        )
        .unwrap_err(),
        decode(b"\xff\xd8\xff", &opts).unwrap_err()
    );
}

/// A 1/d decode of a baseline JPEG is the full decode box-filtered by d (the reduced IDCT
/// averages d x d pixels), up to rounding and chroma upsampling.
#[test]
fn scaled_decode_is_the_box_filtered_full_decode() {
    fn box_filter(img: &Image, d: usize) -> Vec<u8> {
        let (oh, ow, c) = (img.height.div_ceil(d), img.width.div_ceil(d), img.channels);
        let mut out = vec![0u8; oh * ow * c];
        for y in 0..oh {
            for x in 0..ow {
                for ch in 0..c {
                    let (mut sum, mut n) = (0u32, 0u32);
                    for yy in y * d..((y + 1) * d).min(img.height) {
                        for xx in x * d..((x + 1) * d).min(img.width) {
                            sum += u32::from(img.pixel(yy, xx)[ch]);
                            n += 1;
                        }
                    }
                    out[(y * ow + x) * c + ch] = ((sum + n / 2) / n) as u8;
                }
            }
        }
        out
    }
    for name in [
        "coffee_320x240.jpg",
        "photo_420.jpg",
        "photo_422.jpg",
        "photo_444.jpg",
        "photo_gray.jpg",
        "photo_odd.jpg",
        "photo_restart.jpg",
        "orient_6.jpg",
    ] {
        let bytes = read(name);
        for mode in [Mode::Rgb, Mode::L] {
            let opts = DecodeOptions {
                mode,
                ..Default::default()
            };
            let full = decode(&bytes, &opts).unwrap();
            for d in [2usize, 4, 8] {
                let (img, got) = decode_scaled(
                    &bytes,
                    &opts,
                    full.height.div_ceil(d),
                    full.width.div_ceil(d),
                )
                .unwrap();
                assert_eq!(got as usize, d, "{name} 1/{d}");
                let want = box_filter(&full, d);
                let p = psnr(&img.data, &want);
                println!("{name} {mode:?} 1/{d}: PSNR vs box-filtered full decode {p:.1} dB");
                assert!(p >= 34.0, "{name} {mode:?} 1/{d}: {p:.1} dB");
            }
        }
    }
}

/// The fused path crops then resizes, as the exact path does: its edge rows and columns read
/// only the scaled pixels the crop touches. Resampling the crop's box out of the whole scaled
/// image (Pillow's `resize(box=)`, what it did before) also reads pixels beyond the crop, so
/// its edges are further from the exact result.
#[test]
fn scaled_crop_edges_read_only_the_crop() {
    let opts = DecodeOptions::default();
    let bytes = read("coffee_320x240.jpg");
    let full = decode(&bytes, &opts).unwrap();
    let edge_error = |a: &Image, b: &Image| {
        let (h, w) = (a.height, a.width);
        let (mut sum, mut n) = (0.0, 0);
        for y in 0..h {
            for x in 0..w {
                if y == 0 || x == 0 || y == h - 1 || x == w - 1 {
                    let d = a.pixel(y, x).iter().zip(b.pixel(y, x));
                    sum += d.map(|(p, q)| f64::from(p.abs_diff(*q))).sum::<f64>();
                    n += a.channels;
                }
            }
        }
        sum / n as f64
    };
    let (mut fused_total, mut box_total) = (0.0, 0.0);
    for (t, l, ch, cw, out) in [
        (40, 64, 120, 160, 8),
        (60, 106, 123, 165, 10),
        (35, 38, 160, 213, 12),
        (13, 77, 101, 131, 16),
        (50, 21, 150, 150, 24),
        (7, 150, 90, 120, 20),
    ] {
        let (fused, d) =
            decode_resized_crop(&bytes, &opts, t, l, ch, cw, out, out, Filter::Bilinear).unwrap();
        assert!(
            d > 1,
            "{t} {l} {ch} {cw} {out}: the crop should be DCT-scaled"
        );
        let exact = resized_crop(&full, t, l, ch, cw, out, out, Filter::Bilinear).unwrap();
        // The same 1/d decode the fused path resized from (the file has no EXIF rotation).
        let dd = d as usize;
        let (scaled, d2) = decode_scaled(
            &bytes,
            &opts,
            full.height.div_ceil(dd),
            full.width.div_ceil(dd),
        )
        .unwrap();
        assert_eq!(d2, d);
        let s = d as f64;
        let b = CropBox {
            top: t as f64 / s,
            left: l as f64 / s,
            height: ch as f64 / s,
            width: cw as f64 / s,
        };
        let boxed = resized_crop_box(&scaled, b, out, out, Filter::Bilinear, true).unwrap();
        let (fe, be) = (edge_error(&fused, &exact), edge_error(&boxed, &exact));
        println!("{ch}x{cw} -> {out} at 1/{d}: edge error {fe:.2} (box resize {be:.2})");
        assert!(fe <= be + 0.05, "{fe} > {be}");
        fused_total += fe;
        box_total += be;
    }
    assert!(
        fused_total < 0.8 * box_total,
        "{fused_total} vs {box_total}"
    );
}
