//! `image.decode` fused with the `image.resize` after it (`decode_resize`): a JPEG that the
//! resize shrinks ≥ 3x is decoded at a DCT scale, within 35 dB of the unfused ops; anything
//! else gives the unfused ops' bytes.

mod common;

use common::{apply, build, bytes_sample, cx, fixture, photos, pixels, try_apply, DECODE};
use sluice_core::{OpRef, Sample};
use sluice_imgproc::psnr;
use sluice_ops::OpSpec;

const RESIZE_ID: u64 = 2;

fn run(op: &OpRef, bytes: &[u8]) -> sluice_core::Result<Sample> {
    try_apply(op, bytes_sample(bytes), &cx(0, 1))
}

#[test]
fn decode_fuses_only_with_an_antialiased_resize_of_its_output_in_place() {
    let resize = r#"{"op":"image.resize","size":32}"#;
    let fused = build(DECODE)
        .fuse_next(build(resize).as_ref(), RESIZE_ID)
        .expect("fuses");
    assert_eq!(fused.name(), "decode_resize");
    let meta = fused.meta();
    assert_eq!(
        (meta.reads, meta.writes),
        (vec!["bytes".into()], vec!["image".into()])
    );
    assert!(!meta.random);
    assert_eq!(fused.fused_second(), Some(RESIZE_ID));
    // It ships (to worker processes, Ray actors) as a spec that rebuilds it.
    let shipped: OpSpec = serde_json::from_value(fused.ship().unwrap()).unwrap();
    assert_eq!(shipped.build().unwrap().spec(), fused.spec());
    for (first, next) in [
        (r#"{"op":"image.decode","out":"img"}"#, resize),
        (
            DECODE,
            r#"{"op":"image.resize","size":32,"interpolation":"nearest"}"#,
        ),
        (
            DECODE,
            r#"{"op":"image.resize","size":32,"antialias":false}"#,
        ),
        (DECODE, r#"{"op":"image.resize","size":32,"out":"small"}"#),
        (resize, resize),
    ] {
        assert!(
            build(first)
                .fuse_next(build(next).as_ref(), RESIZE_ID)
                .is_none(),
            "{first} + {next}"
        );
    }
    // A hand-written fused spec must pair a decode with an in-place resize of its output.
    let bad: OpSpec = serde_json::from_str(
        r#"{"op":"image.decode_resize","decode":{"op":"image.decode","out":"x"},
            "resize":{"op":"image.resize","size":8},"resize_op_id":2}"#,
    )
    .unwrap();
    assert!(bad.build().is_err());
}

/// Fused vs `decode` then `resize` on the fixture photos (320–481 px JPEGs, RGB and gray) at
/// several sizes: the same shapes; shrinks under 3x byte-identical, the others within 35 dB.
#[test]
fn fused_decode_resize_matches_the_unfused_ops_within_35_db() {
    let photos: Vec<Vec<u8>> = photos().into_iter().map(|(_, b)| b).collect();
    let (mut scaled, mut same) = (0, 0);
    for size in [16, 40, 64, 150, 224] {
        for spec in [
            format!(r#"{{"op":"image.resize","size":{size}}}"#),
            format!(
                r#"{{"op":"image.resize","size":[{size},{}],"interpolation":"bicubic"}}"#,
                size + 7
            ),
        ] {
            let (decode, resize) = (build(DECODE), build(&spec));
            let fused = decode.fuse_next(resize.as_ref(), RESIZE_ID).unwrap();
            for bytes in &photos {
                let unfused = apply(&resize, run(&decode, bytes).unwrap(), &cx(0, RESIZE_ID));
                let ((sa, a), (sb, b)) = (pixels(&run(&fused, bytes).unwrap()), pixels(&unfused));
                assert_eq!(sa, sb, "{spec}");
                if a == b {
                    same += 1;
                } else {
                    scaled += 1;
                    let p = psnr(&a, &b);
                    assert!(p >= 35.0, "{spec}: PSNR {p:.1} dB");
                }
            }
        }
    }
    println!("{scaled} scaled decodes, {same} byte-identical");
    assert!(scaled > 0 && same > 0, "{scaled} scaled, {same} identical");
}

#[test]
fn a_png_and_bad_input_take_the_unfused_path() {
    let fused = build(DECODE)
        .fuse_next(
            build(r#"{"op":"image.resize","size":4}"#).as_ref(),
            RESIZE_ID,
        )
        .unwrap();
    let png = fixture("../sluice-imgproc/tests/fixtures/rgb8_pillow.png");
    let resize = build(r#"{"op":"image.resize","size":4}"#);
    let unfused = apply(
        &resize,
        run(&build(DECODE), &png).unwrap(),
        &cx(0, RESIZE_ID),
    );
    assert_eq!(pixels(&run(&fused, &png).unwrap()), pixels(&unfused));
    // Not an image: the decode's error, naming the op.
    let err = run(&fused, b"not an image").unwrap_err().to_string();
    assert!(err.contains("unknown image format"), "{err}");
    // A cut JPEG fails rather than giving a partial image.
    let jpeg = fixture("../sluice-imgproc/tests/fixtures/coffee_320x240.jpg");
    assert!(run(&fused, &jpeg[..200]).is_err());
}
