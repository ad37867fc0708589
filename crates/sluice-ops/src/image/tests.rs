use sluice_core::{Error, Sample, Tensor, TensorData, Value};

use super::op::center_origin;
use crate::testing::run;
use crate::OpSpec;

fn gradient(h: usize, w: usize) -> Sample {
    let data: Vec<u8> = (0..h * w * 3).map(|i| (i % 251) as u8).collect();
    let t = Tensor::new(vec![h, w, 3], TensorData::U8(data)).unwrap();
    Sample::from_pairs([("image", Value::Tensor(t))])
}

fn shape(s: &Sample, f: &str) -> Vec<usize> {
    match s.get(f) {
        Some(Value::Tensor(t)) => t.shape().to_vec(),
        other => panic!("{other:?}"),
    }
}

fn pixels(s: &Sample, f: &str) -> Vec<u8> {
    match s.get(f).map(|v| match v {
        Value::Tensor(t) => t.data(),
        other => panic!("{other:?}"),
    }) {
        Some(TensorData::U8(v)) => v.clone(),
        other => panic!("{other:?}"),
    }
}

fn build_err(spec: &str) -> Error {
    match OpSpec::from_json(spec) {
        Err(e) => e,
        Ok(s) => s.build().expect_err(spec),
    }
}

#[test]
fn shapes_follow_torchvision_conventions() {
    let s = run(r#"{"op":"image.resize","size":32}"#, gradient(40, 80), 0).unwrap();
    assert_eq!(shape(&s, "image"), [32, 64, 3]);
    let s = run(r#"{"op":"image.center_crop","size":[10,20]}"#, s, 0).unwrap();
    assert_eq!(shape(&s, "image"), [10, 20, 3]);
    let s = run(
        r#"{"op":"image.random_resized_crop","size":8}"#,
        gradient(40, 80),
        0,
    )
    .unwrap();
    assert_eq!(shape(&s, "image"), [8, 8, 3]);
    let s = run(
        r#"{"op":"image.normalize","mean":[0.5,0.5,0.5],"std":[0.2,0.2,0.2]}"#,
        s,
        0,
    )
    .unwrap();
    assert_eq!(shape(&s, "image"), [3, 8, 8]);
    let s = run(
        r#"{"op":"image.grayscale","num_output_channels":1}"#,
        gradient(4, 4),
        0,
    )
    .unwrap();
    assert_eq!(shape(&s, "image"), [4, 4, 1]);
}

#[test]
fn random_ops_are_deterministic_per_index() {
    let spec =
        r#"{"op":"image.color_jitter","brightness":0.4,"contrast":0.4,"saturation":0.4,"hue":0.1}"#;
    let a = run(spec, gradient(16, 16), 5).unwrap();
    let b = run(spec, gradient(16, 16), 5).unwrap();
    let c = run(spec, gradient(16, 16), 6).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn bad_arguments_and_inputs() {
    for bad in [
        r#"{"op":"image.horizontal_flip","p":2}"#,
        r#"{"op":"image.gaussian_blur","kernel_size":4}"#,
        r#"{"op":"image.resize","size":0}"#,
        r#"{"op":"image.decode","mode":"CMYK"}"#,
        r#"{"op":"image.random_resized_crop","size":8,"scale":[0.5,0.1]}"#,
        r#"{"op":"image.resize","size":8,"out":""}"#,
        r#"{"op":"image.color_jitter","brightness":-1}"#,
    ] {
        let e = build_err(bad).to_string();
        assert!(e.starts_with("image."), "{bad}: {e}");
    }
    let s = Sample::from_pairs([("bytes", Value::Bytes(vec![1u8, 2, 3].into()))]);
    let e = run(r#"{"op":"image.decode"}"#, s, 0).unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e}");
    let e = run(r#"{"op":"image.resize","size":4}"#, Sample::new(), 0).unwrap_err();
    assert!(matches!(e, Error::MissingField { .. }));
    let s = Sample::from_pairs([("image", Value::Int(3))]);
    assert!(matches!(
        run(r#"{"op":"image.resize","size":4}"#, s, 0).unwrap_err(),
        Error::Type(_)
    ));
}

/// Every image op checks what it is given: a 1-D array, a 2-channel image and a float image
/// are type errors naming the field and what it got.
#[test]
fn inputs_of_the_wrong_rank_channels_or_dtype_name_the_field() {
    let bad = [
        Tensor::new(vec![12], TensorData::U8(vec![0; 12])).unwrap(),
        Tensor::new(vec![2, 3, 2], TensorData::U8(vec![0; 12])).unwrap(),
        Tensor::new(vec![2, 2, 3], TensorData::F32(vec![0.0; 12])).unwrap(),
        Tensor::new(vec![1, 2, 2, 3], TensorData::U8(vec![0; 12])).unwrap(),
    ];
    for spec in [
        r#"{"op":"image.resize","size":4}"#,
        r#"{"op":"image.center_crop","size":1}"#,
        r#"{"op":"image.random_resized_crop","size":4}"#,
        r#"{"op":"image.horizontal_flip","p":1}"#,
        r#"{"op":"image.color_jitter","brightness":0.5}"#,
        r#"{"op":"image.grayscale"}"#,
        r#"{"op":"image.gaussian_blur","kernel_size":3}"#,
        r#"{"op":"image.normalize","mean":[0.5],"std":[0.5]}"#,
        r#"{"op":"image.to_tensor","field":"px"}"#,
    ] {
        for t in &bad {
            let field = if spec.contains("\"px\"") {
                "px"
            } else {
                "image"
            };
            let s = Sample::from_pairs([(field, Value::Tensor(t.clone()))]);
            let e = run(spec, s, 0).unwrap_err();
            assert!(matches!(e, Error::Type(_)), "{spec} {t:?}: {e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("field '{field}'"))
                    && msg.contains(&format!("{:?}", t.shape())),
                "{spec}: {msg}"
            );
        }
    }
    // normalize's mean/std must match the image's channels.
    let e = run(
        r#"{"op":"image.normalize","mean":[0.5],"std":[0.5]}"#,
        gradient(2, 2),
        0,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("1 values but field 'image' has 3 channel"),
        "{e}"
    );
}

/// Absurd sizes are refused when the op is made, naming the op and the argument; sizes
/// that only the data makes absurd fail the sample before anything is allocated.
#[test]
fn output_sizes_are_checked_against_max_pixels() {
    for (spec, want) in [
        (
            r#"{"op":"image.resize","size":1000000}"#,
            "image.resize: size=1000000 sets the shorter side",
        ),
        (
            r#"{"op":"image.resize","size":[100000,100000]}"#,
            "image.resize: size=(100000, 100000) makes 100000x100000",
        ),
        (
            r#"{"op":"image.center_crop","size":100000}"#,
            "image.center_crop: size=100000 makes",
        ),
        (
            r#"{"op":"image.random_resized_crop","size":[10,2000],"max_pixels":10000}"#,
            "image.random_resized_crop: size=(10, 2000) makes 10x2000 = 20000 pixels",
        ),
    ] {
        let e = build_err(spec);
        assert!(matches!(e, Error::InvalidArgument(_)), "{spec}: {e:?}");
        assert!(e.to_string().starts_with(want), "{spec}: {e}");
        assert!(e.to_string().contains("max_pixels="), "{e}");
    }
    // A raised limit lets the same size through.
    OpSpec::from_json(r#"{"op":"image.center_crop","size":100000,"max_pixels":10000000000}"#)
        .unwrap()
        .build()
        .unwrap();
    // resize(20) of a 1x1000 strip: 20 x 20000 pixels.
    let strip = gradient(1, 1000);
    let e = run(
        r#"{"op":"image.resize","size":20,"max_pixels":100000}"#,
        strip.clone(),
        0,
    )
    .unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("size=20 (the shorter side) on a 1x1000 image makes 20x20000 pixels"),
        "{e}"
    );
    assert!(run(r#"{"op":"image.resize","size":2}"#, strip.clone(), 0).is_ok());
    let e = run(r#"{"op":"image.to_tensor","max_pixels":999}"#, strip, 0).unwrap_err();
    assert!(e.to_string().contains("above max_pixels=999"), "{e}");
}

/// torchvision pads a crop larger than the image with `(c - n) // 2` zeros before and the
/// rest after, and centres a smaller crop at `int(round((n - c) / 2))`.
#[test]
fn center_crop_pads_and_rounds_as_torchvision() {
    assert_eq!(center_origin(3, 6), -1); // pad 1 before, 2 after
    assert_eq!(center_origin(4, 7), -1);
    assert_eq!(center_origin(5, 6), 0); // pad 0 before, 1 after
    assert_eq!(center_origin(6, 3), 2); // round(1.5) = 2
    assert_eq!(center_origin(7, 4), 2); // round(1.5) = 2
    assert_eq!(center_origin(6, 5), 0); // round(0.5) = 0 (ties to even)
    assert_eq!(center_origin(8, 5), 2); // round(1.5) = 2
    assert_eq!(center_origin(9, 4), 2); // round(2.5) = 2
                                        // A 1x3 gray row [1 2 3] cropped to 4x4: rows pad 1 before, 2 after; columns 0 and 1.
    let t = Tensor::new(vec![1, 3, 1], TensorData::U8(vec![1, 2, 3])).unwrap();
    let s = Sample::from_pairs([("image", Value::Tensor(t))]);
    let s = run(r#"{"op":"image.center_crop","size":4}"#, s, 0).unwrap();
    #[rustfmt::skip]
    let want = [
        0, 0, 0, 0,
        1, 2, 3, 0,
        0, 0, 0, 0,
        0, 0, 0, 0,
    ];
    assert_eq!(pixels(&s, "image"), want);
}

/// `out=` writes the result elsewhere and leaves the input as it was; the read/write sets say
/// so. Same draws either way.
#[test]
fn out_leaves_the_input_field_untouched() {
    for spec in [
        r#"{"op":"image.resize","size":8}"#,
        r#"{"op":"image.center_crop","size":5}"#,
        r#"{"op":"image.random_resized_crop","size":6}"#,
        r#"{"op":"image.horizontal_flip","p":1}"#,
        r#"{"op":"image.color_jitter","brightness":0.5,"hue":0.2}"#,
        r#"{"op":"image.grayscale","num_output_channels":3}"#,
        r#"{"op":"image.gaussian_blur","kernel_size":[3,5]}"#,
        r#"{"op":"image.normalize","mean":[0.5,0.5,0.5],"std":[0.2,0.2,0.2]}"#,
        r#"{"op":"image.to_tensor"}"#,
    ] {
        let with_out = spec.replace('}', r#","out":"aug"}"#);
        let input = gradient(12, 10);
        let a = run(&with_out, input.clone(), 4).unwrap();
        let b = run(spec, input.clone(), 4).unwrap();
        assert_eq!(a.get("image"), input.get("image"), "{spec}");
        assert_eq!(a.get("aug"), b.get("image"), "{spec}");
        let op = OpSpec::from_json(&with_out).unwrap().build().unwrap();
        let meta = op.meta();
        assert_ne!(
            meta.kind,
            sluice_core::OpKind::SizeReducing,
            "{spec}: the sample grows"
        );
        assert_eq!(
            (meta.reads, meta.writes),
            (vec!["image".to_string()], vec!["aug".to_string()])
        );
        // The spec keeps `out` and round-trips.
        let back = OpSpec::from_value(op.spec()).unwrap();
        assert_eq!(back.build().unwrap().spec(), op.spec());
    }
    // Without `out` the serialized spec is what it was before `out` existed.
    let op = OpSpec::from_json(r#"{"op":"image.resize","size":8}"#)
        .unwrap()
        .build()
        .unwrap();
    assert!(op.spec().get("out").is_none() && op.spec().get("max_pixels").is_none());
}

/// `kernel_size=(kx, ky)` is (width, height), as torchvision: a (1, 5) kernel blurs along
/// columns only, so a vertical stripe pattern is left alone.
#[test]
fn gaussian_blur_kernel_size_is_kx_ky() {
    let (h, w) = (9, 9);
    let cols: Vec<u8> = (0..h * w)
        .map(|i| if (i % w) % 2 == 0 { 200 } else { 10 })
        .collect();
    let t = Tensor::new(vec![h, w, 1], TensorData::U8(cols.clone())).unwrap();
    let s = Sample::from_pairs([("image", Value::Tensor(t))]);
    // ky = 5 blurs vertically: each column is constant, so nothing changes.
    let v = run(
        r#"{"op":"image.gaussian_blur","kernel_size":[1,5],"sigma":[1.5,1.5]}"#,
        s.clone(),
        0,
    )
    .unwrap();
    assert_eq!(pixels(&v, "image"), cols);
    // kx = 5 blurs horizontally, across the stripes.
    let x = run(
        r#"{"op":"image.gaussian_blur","kernel_size":[5,1],"sigma":[1.5,1.5]}"#,
        s,
        0,
    )
    .unwrap();
    assert_ne!(pixels(&x, "image"), cols);
    let e = build_err(r#"{"op":"image.gaussian_blur","kernel_size":1000001}"#).to_string();
    assert!(e.contains("at most 65535"), "{e}");
}

/// A crop writing another field is not fused with the decode before it (the decoded image
/// must stay).
#[test]
fn decode_fuses_only_with_an_in_place_crop() {
    let decode = OpSpec::from_json(r#"{"op":"image.decode"}"#)
        .unwrap()
        .build()
        .unwrap();
    let crop = OpSpec::from_json(r#"{"op":"image.random_resized_crop","size":8}"#)
        .unwrap()
        .build()
        .unwrap();
    let fused = decode.fuse_next(&*crop, 7).expect("fused");
    assert_eq!(fused.name(), "decode_random_resized_crop");
    let crop_out = OpSpec::from_json(r#"{"op":"image.random_resized_crop","size":8,"out":"c"}"#)
        .unwrap()
        .build()
        .unwrap();
    assert!(decode.fuse_next(&*crop_out, 7).is_none());
}

#[test]
fn what_a_decode_asks_the_memory_gate_for_comes_from_the_header() {
    use super::op::decoded_bytes;
    let fixtures = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sluice-imgproc/tests/fixtures/"
    );
    let jpeg = std::fs::read(format!("{fixtures}coffee_320x240.jpg")).unwrap();
    // Twice the decoded image: the decoder's and the next ops' buffers.
    assert_eq!(decoded_bytes(&jpeg, u64::MAX), Some(2 * 3 * 320 * 240));
    // PNG: IHDR's width and height (12 x 9 here), at up to 8 bytes a pixel while it
    // converts, twice.
    let png = std::fs::read(format!("{fixtures}gray8.png")).unwrap();
    assert_eq!(decoded_bytes(&png, u64::MAX), Some(2 * 8 * 12 * 9));
    // Past max_pixels the decoder refuses it without making anything: nothing to ask for.
    assert_eq!(decoded_bytes(&jpeg, 320 * 240 - 1), None);
    // WebP, GIF, BMP, TIFF: the header the `image` crate reads; a BMP at 14 bytes a pixel.
    // Here a 24-bit BMP's headers for 1000 x 800 pixels with none of them.
    let bmp = std::fs::read(format!("{fixtures}header_only_1000x800.bmp")).unwrap();
    assert_eq!(decoded_bytes(&bmp, u64::MAX), Some(14 * 1000 * 800));
    // A cut header.
    assert_eq!(decoded_bytes(&png[..20], u64::MAX), None);
    assert_eq!(decoded_bytes(&bmp[..20], u64::MAX), None);
    assert_eq!(decoded_bytes(b"GIF89a\x01\x00\x01\x00", u64::MAX), None);
    assert_eq!(decoded_bytes(b"", u64::MAX), None);
}
