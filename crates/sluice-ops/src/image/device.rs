//! `image.device_draws`: a decode + random_resized_crop (+ horizontal_flip) left to a
//! consumer that decodes on its GPU ([`sluice_core::plan::device`]). The host reads only
//! the image's size (a JPEG's header) and makes the draws the host ops would have made,
//! from their generators, so the device makes the same crops.

use sluice_core::{Emit, Error, Op, OpContext, OpRef, Result, Sample, Value};
use sluice_imgproc as ip;

use super::op::{decode_options, kernel_err, require_bytes};
use super::{build, ImageSpec};

/// What a device-bound image starts with: [`MAGIC`], then the draws as 10 little-endian
/// int64 ([`DRAWS`]), then the encoded image. One value in the decoded field, so ops that
/// select, drop or rename fields after it carry it as they would have carried the pixels.
pub const MAGIC: &[u8; 16] = b"sluice-draws-v1\0";

/// The draws, in order: `top, left, height, width` (the crop
/// box in the upright decoded image), `out_height, out_width`, `flip` (1: mirror it),
/// `interpolation` (0 bilinear, 1 bicubic), `channels` (3 RGB, 1 L), `orientation` (a
/// JPEG's EXIF orientation, 1–8, for the device to turn it upright; 1 otherwise).
pub const DRAWS: [&str; 10] = [
    "top",
    "left",
    "height",
    "width",
    "out_height",
    "out_width",
    "flip",
    "interpolation",
    "channels",
    "orientation",
];

/// The header's length: [`MAGIC`] and the draws.
pub const HEADER: usize = MAGIC.len() + 8 * DRAWS.len();

/// The device form of `fused` (a `decode_random_resized_crop`) taking in `next` when it is
/// an in-place `horizontal_flip` of the decoded field.
pub(super) fn device_form(
    fused: &ImageSpec,
    next: Option<(&dyn Op, u64)>,
) -> Option<(OpRef, bool)> {
    let ImageSpec::DecodeRandomResizedCrop { .. } = fused else {
        return None;
    };
    let out = fused.out();
    let flip = next.and_then(|(op, id)| match serde_json::from_value(op.spec()).ok()? {
        spec @ ImageSpec::HorizontalFlip { p, .. } if spec.field() == out && spec.out() == out => {
            Some((p, id))
        }
        _ => None,
    });
    let op = build(&ImageSpec::DeviceDraws {
        fused: Box::new(fused.clone()),
        flip,
    })
    .ok()?;
    Some((op, flip.is_some()))
}

/// Sets the decoded field to the draws and the encoded image ([`MAGIC`]); the bytes' own
/// field stays as the host decode leaves it.
pub(super) fn draws(spec: &ImageSpec, mut s: Sample, cx: &OpContext) -> Result<Emit> {
    let ImageSpec::DeviceDraws { fused, flip } = spec else {
        return Err(Error::Internal("device_draws: bad spec".into()));
    };
    let dc = fused.decode_crop()?;
    let (bytes_field, out) = (fused.field(), fused.out());
    let bytes = require_bytes(&s, bytes_field, spec.name())?;
    let mut orientation = 1;
    let (h, w) = if ip::sniff(bytes) == Some(ip::Format::Jpeg) {
        let (h, w) = ip::jpeg_dimensions(bytes).map_err(kernel_err)?;
        orientation = ip::jpeg_orientation(bytes).map_err(kernel_err)?;
        // The decode's own limit, checked where it would have been.
        if (h as u64).saturating_mul(w as u64) > dc.max_pixels {
            return Err(Error::data(format!(
                "a {h}x{w} JPEG is {} pixels, over max_pixels={}",
                h as u64 * w as u64,
                dc.max_pixels
            )));
        }
        (h, w)
    } else {
        // Other formats carry their size in headers of their own: decoded here for it.
        let img = ip::decode(bytes, &decode_options(dc.mode, dc.max_pixels)).map_err(kernel_err)?;
        (img.height, img.width)
    };
    let mut crop_rng = OpContext {
        op_id: dc.crop_op_id,
        ..*cx
    }
    .rng();
    let (top, left, ch, cw) =
        ip::rrc_params(h, w, dc.scale, dc.ratio, &mut || crop_rng.uniform()).map_err(kernel_err)?;
    let flipped = flip.is_some_and(|(p, op_id)| OpContext { op_id, ..*cx }.rng().uniform() < p);
    let (oh, ow) = dc.size.square();
    let values = [
        top,
        left,
        ch,
        cw,
        oh,
        ow,
        usize::from(flipped),
        usize::from(dc.interpolation == "bicubic"),
        if dc.mode == "L" { 1 } else { 3 },
        usize::from(orientation),
    ];
    let mut record = Vec::with_capacity(HEADER + bytes.len());
    record.extend_from_slice(MAGIC);
    for v in values {
        record.extend_from_slice(&(v as i64).to_le_bytes());
    }
    record.extend_from_slice(bytes);
    s.set(out, Value::Bytes(record.into()));
    Ok(Emit::One(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image_op(spec: &serde_json::Value) -> Result<OpRef> {
        crate::OpSpec::from_json(&spec.to_string())?.build()
    }

    /// A committed fixture photo, and its size.
    fn photo() -> (Vec<u8>, usize, usize) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../examples/fixtures/images/everyday/chelsea.jpg"
        );
        let bytes = std::fs::read(path).unwrap();
        let (h, w) = ip::jpeg_dimensions(&bytes).unwrap();
        (bytes, h, w)
    }

    fn cx(index: u64) -> OpContext {
        OpContext {
            seed: 7,
            epoch: 0,
            index,
            sub: 0,
            op_id: 1,
        }
    }

    #[test]
    fn the_draws_are_the_host_ops_draws() {
        let spec = |s: serde_json::Value| image_op(&s).unwrap();
        let decode = spec(serde_json::json!({"op": "image.decode"}));
        let crop = spec(serde_json::json!({"op": "image.random_resized_crop", "size": 24}));
        let flip = spec(serde_json::json!({"op": "image.horizontal_flip", "p": 0.5}));
        let fused = decode.fuse_next(&*crop, 2).unwrap();
        let (draws, took) = fused.device_draws(Some((&*flip, 3))).unwrap();
        assert!(took);
        let (bytes, ph, pw) = photo();
        let mut flips = 0;
        for i in 0..40 {
            let c = cx(i);
            let sample = || Sample::from_pairs([("bytes", Value::Bytes(bytes.clone().into()))]);
            let Emit::One(d) = draws.apply(sample(), &c).unwrap() else {
                panic!()
            };
            // The decoded field gets the draws and the encoded image; theirs keeps it.
            assert_eq!(d.get("bytes").and_then(|v| v.as_bytes()), Some(&bytes[..]));
            let record = d.get("image").and_then(|v| v.as_bytes()).unwrap();
            assert_eq!((&record[..16], &record[HEADER..]), (&MAGIC[..], &bytes[..]));
            let v: Vec<i64> = record[16..HEADER]
                .chunks(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            // The host's crop of this sample, drawn by the crop op's generator: same box.
            let mut rng = OpContext { op_id: 2, ..c }.rng();
            let (top, left, h, w) =
                ip::rrc_params(ph, pw, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut || {
                    rng.uniform()
                })
                .unwrap();
            assert_eq!(v[..6], [top, left, h, w, 24, 24].map(|x| x as i64));
            let flipped = OpContext { op_id: 3, ..c }.rng().uniform() < 0.5;
            assert_eq!(v[6..], [i64::from(flipped), 0, 3, 1]);
            flips += usize::from(flipped);
        }
        assert!((5..35).contains(&flips), "{flips} of 40 flipped");
    }

    #[test]
    fn only_the_decoded_fields_own_flip_goes_to_the_device() {
        let spec = |s: serde_json::Value| image_op(&s).unwrap();
        let crop = spec(serde_json::json!({"op": "image.random_resized_crop", "size": 24}));
        let decode = spec(serde_json::json!({"op": "image.decode"}));
        let fused = decode.fuse_next(&*crop, 2).unwrap();
        let (draws, _) = fused.device_draws(None).unwrap();
        assert_eq!(draws.meta().reads, ["bytes"]);
        assert_eq!(draws.meta().writes, ["image"]);
        // A flip of another field stays on the host.
        let other = spec(serde_json::json!({"op": "image.horizontal_flip", "field": "mask"}));
        let (_, took) = fused.device_draws(Some((&*other, 3))).unwrap();
        assert!(!took);
        // The ops alone have no device form.
        assert!(decode.device_draws(None).is_none());
        assert!(crop.device_draws(None).is_none());
    }

    #[test]
    fn bad_bytes_and_absurd_sizes_fail_naming_the_op() {
        let decode =
            image_op(&serde_json::json!({"op": "image.decode", "max_pixels": 100})).unwrap();
        let crop =
            image_op(&serde_json::json!({"op": "image.random_resized_crop", "size": 8})).unwrap();
        let (draws, _) = decode
            .fuse_next(&*crop, 2)
            .unwrap()
            .device_draws(None)
            .unwrap();
        let run = |v: Value| draws.apply(Sample::from_pairs([("bytes", v)]), &cx(0));
        let err = run(Value::Bytes(photo().0.into())).unwrap_err().to_string();
        assert!(err.contains("max_pixels=100"), "{err}");
        assert!(run(Value::Bytes(vec![1, 2, 3].into())).is_err());
        let err = run(Value::Int(3)).unwrap_err().to_string();
        assert!(err.contains("must be bytes"), "{err}");
    }
}
