//! The image and audio decode ops as a pipeline runs them: built from their specs, applied to
//! a sample whose `bytes` field holds the input.

use std::sync::{Arc, OnceLock};

use sluice_core::{OpContext, OpRef, Sample, Value};
use sluice_ops::OpSpec;

fn op(json: &str) -> OpRef {
    serde_json::from_str::<OpSpec>(json)
        .expect("op spec")
        .build()
        .expect("op")
}

/// `image.decode` (RGB and L) and the planner's fused `decode_random_resized_crop` (made by
/// `fuse_next`, as the planner makes it), whose JPEG path decodes at 1/2–1/8 scale.
fn image_ops() -> &'static [OpRef] {
    static OPS: OnceLock<Vec<OpRef>> = OnceLock::new();
    OPS.get_or_init(|| {
        // max_pixels bounds the work per input; the default (89 MP) only makes bombs slower.
        let rgb = op(r#"{"op": "image.decode", "max_pixels": 4194304}"#);
        let l = op(r#"{"op": "image.decode", "mode": "L", "max_pixels": 4194304}"#);
        let crop8 = op(r#"{"op": "image.random_resized_crop", "size": 8}"#);
        let crop_small = op(
            r#"{"op": "image.random_resized_crop", "size": [16, 12], "scale": [0.01, 0.2],
                "interpolation": "bicubic"}"#,
        );
        let fused_rgb = rgb.fuse_next(&*crop8, 2).expect("decode + crop fuse");
        let fused_l = l.fuse_next(&*crop_small, 3).expect("decode + crop fuse");
        vec![rgb, l, fused_rgb, fused_l]
    })
}

fn context(data: &[u8], op_id: u64) -> OpContext {
    OpContext {
        seed: data.iter().take(16).fold(0u64, |h, &b| h.rotate_left(5) ^ b as u64),
        epoch: 0,
        index: data.len() as u64,
        sub: 0,
        op_id,
    }
}

/// Runs every image decode op, and the public `decode_scaled`, on `data`.
pub fn decode_image(data: &[u8]) {
    let bytes: Arc<[u8]> = data.into();
    for (i, op) in image_ops().iter().enumerate() {
        let s = Sample::from_pairs([("bytes", Value::Bytes(bytes.clone()))]);
        let _ = op.apply(s, &context(data, i as u64 + 1));
    }
    let opts = sluice_imgproc::DecodeOptions {
        mode: sluice_imgproc::Mode::Rgb,
        max_pixels: 1 << 22,
    };
    if let Ok((img, _)) = sluice_imgproc::decode_scaled(data, &opts, 8, 8) {
        assert_eq!(img.data.len(), img.height * img.width * img.channels);
    }
}

/// `audio.decode` (mono and every channel), with a `path` whose extension hints the format.
pub fn decode_audio(data: &[u8], path: &str) {
    static OPS: OnceLock<Vec<OpRef>> = OnceLock::new();
    let ops = OPS.get_or_init(|| {
        vec![
            op(r#"{"op": "audio.decode"}"#),
            op(r#"{"op": "audio.decode", "mono": false}"#),
        ]
    });
    let bytes: Arc<[u8]> = data.into();
    for (i, op) in ops.iter().enumerate() {
        let s = Sample::from_pairs([
            ("bytes", Value::Bytes(bytes.clone())),
            ("path", Value::Str(path.into())),
        ]);
        let _ = op.apply(s, &context(data, i as u64 + 1));
    }
}
