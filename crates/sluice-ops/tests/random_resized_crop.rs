//! `image.random_resized_crop` at the op level: the distribution of the crops it draws through
//! the engine's per-sample generator, and its fusion with `image.decode`
//! (`decode_random_resized_crop`): same crops, pixels within 35 dB of the unfused ops.

mod common;

use common::{apply, build, bytes_sample, cx, fixture, photos, pixels, DECODE};
use sluice_core::{OpRef, Sample, Tensor, TensorData, Value};
use sluice_imgproc::psnr;
use sluice_ops::OpSpec;

const CROP: &str = r#"{"op":"image.random_resized_crop","size":32}"#;
const DECODE_ID: u64 = 1;
const CROP_ID: u64 = 2;

/// Recovers the crop box from the resized crop of a coordinate image (R = column,
/// G = row): along the middle output row R rises by `crop_w / out` per pixel, along the
/// middle column G by `crop_h / out` (a linear ramp stays linear under the resize filter).
fn crop_extent(img: &[u8], out: usize) -> (f64, f64) {
    let slope = |vals: &[f64]| {
        let n = vals.len() as f64;
        let mx = (n - 1.0) / 2.0;
        let my = vals.iter().sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for (i, v) in vals.iter().enumerate() {
            sxy += (i as f64 - mx) * (v - my);
            sxx += (i as f64 - mx).powi(2);
        }
        sxy / sxx
    };
    // The middle half, away from the image border where the filter support is clipped.
    let mid = out / 2;
    let (lo, hi) = (out / 4, 3 * out / 4);
    let row: Vec<f64> = (lo..hi)
        .map(|x| f64::from(img[(mid * out + x) * 3]))
        .collect();
    let col: Vec<f64> = (lo..hi)
        .map(|y| f64::from(img[(y * out + mid) * 3 + 1]))
        .collect();
    (slope(&col) * out as f64, slope(&row) * out as f64)
}

/// torchvision's RandomResizedCrop draws area ~ U(0.08, 1) and log-ratio ~ U(log 3/4,
/// log 4/3), retrying draws that do not fit. On a square image every draw with area ≤ 0.75
/// fits, so there both must be uniform; checked over 2,500 samples drawn through the op
/// (the engine's generator of each sample and op id) with Kolmogorov–Smirnov distances
/// (the 1% critical value for ~2,000 draws is 0.036).
#[test]
fn random_resized_crop_draws_torchvision_scale_and_ratio() {
    let n = 256usize;
    let out = 64usize;
    let mut data = Vec::with_capacity(n * n * 3);
    for y in 0..n {
        for x in 0..n {
            data.extend_from_slice(&[x as u8, y as u8, 0]);
        }
    }
    let coords = Tensor::new(vec![n, n, 3], TensorData::U8(data)).unwrap();
    let op = build(&format!(
        r#"{{"op":"image.random_resized_crop","size":{out}}}"#
    ));
    let (mut scales, mut log_ratios) = (Vec::new(), Vec::new());
    let mut all = 0usize;
    for index in 0..2500 {
        let s = Sample::from_pairs([("image", Value::Tensor(coords.clone()))]);
        let got = apply(&op, s, &cx(index, CROP_ID));
        let (shape, img) = pixels(&got);
        assert_eq!(shape, [out, out, 3]);
        let (h, w) = crop_extent(&img, out);
        let scale = h * w / (n * n) as f64;
        assert!(
            (0.07..=1.02).contains(&scale),
            "sample {index}: scale {scale}"
        );
        all += 1;
        // Recovered sizes carry ~1% error: keep clearly-first-try draws only.
        if scale <= 0.72 {
            scales.push((scale - 0.08) / (0.72 - 0.08));
            log_ratios.push(((w / h).ln() - 0.75f64.ln()) / (4.0f64 / 3.0).ln() * 0.5);
        }
    }
    let ks = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let m = v.len() as f64;
        v.iter()
            .enumerate()
            .map(|(i, &x)| {
                let x = x.clamp(0.0, 1.0);
                (x - i as f64 / m).abs().max((x - (i + 1) as f64 / m).abs())
            })
            .fold(0.0, f64::max)
    };
    let kept = scales.len();
    // Draws above 0.72 are rejected when the ratio makes them overflow, so
    // P(area <= 0.72) is 0.808 (0.64 / (0.64 + 0.149)), not 0.696.
    let frac = kept as f64 / all as f64;
    assert!(
        (0.77..0.85).contains(&frac),
        "fraction of small crops {frac}"
    );
    let (ds, dr) = (ks(&mut scales), ks(&mut log_ratios));
    println!("{kept}/{all} draws <= 0.72; KS scale {ds:.4}, log-ratio {dr:.4}");
    assert!(ds < 0.045, "scale vs U(0.08, 0.72): KS {ds} over {kept}");
    assert!(
        dr < 0.045,
        "log-ratio vs U(log 3/4, log 4/3): KS {dr} over {kept}"
    );
}

#[test]
fn decode_fuses_only_with_a_crop_of_its_output() {
    let decode = build(DECODE);
    let fused = decode
        .fuse_next(build(CROP).as_ref(), CROP_ID)
        .expect("fuses");
    assert_eq!(fused.name(), "decode_random_resized_crop");
    let meta = fused.meta();
    assert_eq!(
        (meta.reads, meta.writes),
        (vec!["bytes".into()], vec!["image".into()])
    );
    assert!(meta.random);
    // It ships (to worker processes, Ray actors) as a spec that rebuilds it.
    let shipped: OpSpec = serde_json::from_value(fused.ship().unwrap()).unwrap();
    assert_eq!(shipped.build().unwrap().spec(), fused.spec());
    assert_eq!(fused.spec()["crop_op_id"], CROP_ID);
    for (first, next) in [
        (r#"{"op":"image.decode","out":"img"}"#, CROP),
        (
            DECODE,
            r#"{"op":"image.random_resized_crop","size":32,"interpolation":"nearest"}"#,
        ),
        (CROP, CROP),
        (DECODE, r#"{"op":"noop"}"#),
    ] {
        assert!(
            build(first)
                .fuse_next(build(next).as_ref(), CROP_ID)
                .is_none(),
            "{first} + {next}"
        );
    }
    let custom = build(r#"{"op":"image.decode","field":"jpg","out":"img"}"#).fuse_next(
        build(r#"{"op":"image.random_resized_crop","size":8,"field":"img"}"#).as_ref(),
        CROP_ID,
    );
    let custom = custom.expect("fuses on custom fields");
    assert_eq!(custom.meta().reads, ["jpg"]);
    assert_eq!(custom.meta().writes, ["img"]);
    // A hand-written fused spec must pair a decode with a crop of its output.
    let bad: OpSpec = serde_json::from_str(
        r#"{"op":"image.decode_random_resized_crop","decode":{"op":"image.decode","out":"x"},
            "crop":{"op":"image.random_resized_crop","size":8},"crop_op_id":2}"#,
    )
    .unwrap();
    assert!(bad.build().is_err());
}

/// Fused vs `decode` then `random_resized_crop`, sample by sample on the fixture photos:
/// same crop (shape, PSNR), crops shrunk ≥ 2x within 35 dB, the others byte-identical.
#[test]
fn fused_decode_crop_picks_the_same_crops_within_35_db() {
    let (decode, crop) = (build(DECODE), build(CROP));
    let fused = decode.fuse_next(crop.as_ref(), CROP_ID).unwrap();
    let (mut scaled, mut total, mut worst) = (0, 0, f64::INFINITY);
    for (path, bytes) in photos() {
        for index in 0..24 {
            let unfused = apply(
                &crop,
                apply(&decode, bytes_sample(&bytes), &cx(index, DECODE_ID)),
                &cx(index, CROP_ID),
            );
            let got = apply(&fused, bytes_sample(&bytes), &cx(index, DECODE_ID));
            assert_eq!(
                got.names().collect::<Vec<_>>(),
                unfused.names().collect::<Vec<_>>()
            );
            let ((sa, a), (sb, b)) = (pixels(&got), pixels(&unfused));
            assert_eq!(sa, sb, "{path}");
            total += 1;
            if a != b {
                scaled += 1;
                let p = psnr(&a, &b);
                worst = worst.min(p);
                assert!(p >= 35.0, "{path} sample {index}: PSNR {p:.1} dB");
            }
        }
    }
    println!("{scaled}/{total} crops took the scaled decode; worst PSNR {worst:.1} dB");
    assert!(
        scaled * 10 >= total,
        "only {scaled} of {total} used DCT scaling"
    );
}

#[test]
fn fused_png_small_crops_and_errors_follow_the_unfused_path() {
    let (decode, crop) = (build(DECODE), build(CROP));
    let fused = decode.fuse_next(crop.as_ref(), CROP_ID).unwrap();
    // A PNG always takes the full decode: byte-identical to the unfused ops.
    let png = fixture("../sluice-imgproc/tests/fixtures/rgb8_pillow.png");
    // A crop to 224 px never shrinks a 320–481 px photo 3x: a full-size decode of the
    // crop's MCUs, close to the unfused ops (the chroma upsampled in the DCT domain).
    let big_crop = build(r#"{"op":"image.random_resized_crop","size":224}"#);
    let fused_big = decode.fuse_next(big_crop.as_ref(), CROP_ID).unwrap();
    let jpeg = &photos()[0].1;
    for index in 0..8 {
        let run_both = |f: &OpRef, c: &OpRef, bytes: &[u8]| {
            let unfused = apply(
                c,
                apply(&decode, bytes_sample(bytes), &cx(index, DECODE_ID)),
                &cx(index, CROP_ID),
            );
            (
                apply(f, bytes_sample(bytes), &cx(index, DECODE_ID)),
                unfused,
            )
        };
        let (a, b) = run_both(&fused, &crop, &png);
        assert_eq!(a, b);
        let (a, b) = run_both(&fused_big, &big_crop, jpeg);
        let ((sa, a), (sb, b)) = (pixels(&a), pixels(&b));
        assert_eq!(sa, sb);
        assert!(psnr(&a, &b) >= 35.0, "sample {index}");
    }
    // Bad bytes fail as the decode would, as a data error.
    let mut cut = jpeg.clone();
    cut.truncate(cut.len() / 3);
    for bad in [cut, b"\xff\xd8\xff garbage".to_vec(), Vec::new()] {
        let e = fused
            .apply(bytes_sample(&bad), &cx(0, DECODE_ID))
            .unwrap_err();
        let u = decode
            .apply(bytes_sample(&bad), &cx(0, DECODE_ID))
            .unwrap_err();
        assert_eq!(e.to_string(), u.to_string());
    }
}
