//! `image.decode` fused with the `image.center_crop` after it (`decode_center_crop`): a JPEG
//! whose centre crop is at most half of it is decoded only where the crop is, within 35 dB
//! of the unfused ops; anything else gives the unfused ops' bytes.

mod common;

use common::{apply, build, bytes_sample, cx, fixture, photos, pixels, try_apply, DECODE};
use sluice_core::{OpRef, Sample};
use sluice_imgproc::psnr;
use sluice_ops::OpSpec;

const CROP_ID: u64 = 2;

fn run(op: &OpRef, bytes: &[u8]) -> sluice_core::Result<Sample> {
    try_apply(op, bytes_sample(bytes), &cx(0, 1))
}

fn crop(size: &str) -> OpRef {
    build(&format!(r#"{{"op":"image.center_crop","size":{size}}}"#))
}

/// An image's shape and pixels.
type Pixels = (Vec<usize>, Vec<u8>);

/// The fused op and the two ops it stands for, on one file.
fn both(decode: &str, size: &str, bytes: &[u8]) -> (Pixels, Pixels) {
    let (decode, crop) = (build(decode), crop(size));
    let fused = decode.fuse_next(crop.as_ref(), CROP_ID).expect("fuses");
    let unfused = apply(&crop, run(&decode, bytes).unwrap(), &cx(0, CROP_ID));
    (pixels(&run(&fused, bytes).unwrap()), pixels(&unfused))
}

#[test]
fn decode_fuses_only_with_a_center_crop_of_its_output_in_place() {
    let center = r#"{"op":"image.center_crop","size":32}"#;
    let fused = build(DECODE)
        .fuse_next(build(center).as_ref(), CROP_ID)
        .expect("fuses");
    assert_eq!(fused.name(), "decode_center_crop");
    let meta = fused.meta();
    assert_eq!(
        (meta.reads, meta.writes),
        (vec!["bytes".into()], vec!["image".into()])
    );
    assert!(!meta.random);
    assert_eq!(fused.fused_second(), Some(CROP_ID));
    // It ships (to worker processes, Ray actors) as a spec that rebuilds it.
    let shipped: OpSpec = serde_json::from_value(fused.ship().unwrap()).unwrap();
    assert_eq!(shipped.build().unwrap().spec(), fused.spec());
    for (first, next) in [
        (r#"{"op":"image.decode","out":"img"}"#, center),
        (
            DECODE,
            r#"{"op":"image.center_crop","size":32,"out":"small"}"#,
        ),
        (center, center),
    ] {
        assert!(
            build(first)
                .fuse_next(build(next).as_ref(), CROP_ID)
                .is_none(),
            "{first} + {next}"
        );
    }
    // A hand-written fused spec must pair a decode with an in-place crop of its output.
    let bad: OpSpec = serde_json::from_str(
        r#"{"op":"image.decode_center_crop","decode":{"op":"image.decode","out":"x"},
            "crop":{"op":"image.center_crop","size":8},"crop_op_id":2}"#,
    )
    .unwrap();
    let err = bad.build().unwrap_err().to_string();
    assert!(err.contains("decode_center_crop needs"), "{err}");
}

/// Fused vs `decode` then `center_crop` on the fixture photos (320–481 px, RGB and gray), the
/// eight EXIF orientations and the sampling layouts: the same shapes; crops of at most half
/// the image (decoded as a window) within 35 dB, the rest byte-identical — including a crop
/// bigger than the image, which pads.
#[test]
fn fused_decode_center_crop_matches_the_unfused_ops_within_35_db() {
    let mut files: Vec<(String, Vec<u8>)> = photos();
    for name in (1..=8).map(|o| format!("orient_{o}.jpg")).chain(
        [
            "photo_420.jpg",
            "photo_422.jpg",
            "photo_444.jpg",
            "photo_odd.jpg",
        ]
        .map(String::from),
    ) {
        let path = format!("../sluice-imgproc/tests/fixtures/{name}");
        files.push((name, fixture(&path)));
    }
    let (mut windowed, mut same, mut worst) = (0, 0, f64::INFINITY);
    for size in ["16", "[40, 57]", "101", "224", "[300, 200]", "600"] {
        for decode in [DECODE, r#"{"op":"image.decode","mode":"L"}"#] {
            for (path, bytes) in &files {
                let ((sa, a), (sb, b)) = both(decode, size, bytes);
                assert_eq!(sa, sb, "{path} {size}");
                if a == b {
                    same += 1;
                } else {
                    windowed += 1;
                    let p = psnr(&a, &b);
                    worst = worst.min(p);
                    assert!(p >= 35.0, "{path} {size} {decode}: PSNR {p:.1} dB");
                }
            }
        }
    }
    println!("{windowed} windowed decodes (worst {worst:.1} dB), {same} byte-identical");
    assert!(
        windowed > 0 && same > 0,
        "{windowed} windowed, {same} identical"
    );
}

#[test]
fn a_png_a_progressive_jpeg_and_bad_input_take_the_unfused_path() {
    // Outside the own decoder's scope the decode is the whole one (down to the crop's rows):
    // the unfused bytes.
    for name in ["rgb8_pillow.png", "photo_prog.jpg", "photo_cmyk.jpg"] {
        let bytes = fixture(&format!("../sluice-imgproc/tests/fixtures/{name}"));
        let (fused, unfused) = both(DECODE, "8", &bytes);
        assert_eq!(fused, unfused, "{name}");
    }
    let fused = build(DECODE)
        .fuse_next(crop("4").as_ref(), CROP_ID)
        .unwrap();
    // Not an image: the decode's error, naming the op.
    let err = run(&fused, b"not an image").unwrap_err().to_string();
    assert!(err.contains("unknown image format"), "{err}");
    // A cut JPEG fails rather than giving a partial image.
    let jpeg = fixture("../sluice-imgproc/tests/fixtures/coffee_320x240.jpg");
    assert!(run(&fused, &jpeg[..200]).is_err());
    // A header past max_pixels is refused before anything is decoded.
    let small = build(r#"{"op":"image.decode","max_pixels":1000}"#)
        .fuse_next(crop("4").as_ref(), CROP_ID)
        .unwrap();
    let err = run(&small, &jpeg).unwrap_err().to_string();
    let unfused = run(&build(r#"{"op":"image.decode","max_pixels":1000}"#), &jpeg);
    assert_eq!(err, unfused.unwrap_err().to_string());
    assert!(err.contains("exceeds the limit of 1000 pixels"), "{err}");
}
