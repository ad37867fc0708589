//! `decode` + `resize` as one op: a JPEG that the resize shrinks a lot is decoded at a DCT
//! scale (1/2–1/8), so neither the full-size decode nor most of the resize is done.
//!
//! A photo of 50 MP resized to 224 took 104–106 ms of CPU and raised the peak by 167 MB
//! decoded whole; at 1/8 it takes 30 ms and 16 MB (`benchmarks/dct_resize_probe.py`, AMD EPYC
//! family 26 model 2, one thread). Where the scale
//! would be 1 (a shrink under 3x, another format) the two ops run as they are: the same
//! bytes as unfused.

use sluice_core::Result;
use sluice_imgproc as ip;

use super::op::{decode_options, hold_for_decode, kernel_err, resize_target, rgb_transient};
use super::{filter, ImageSpec};

/// Whether `decode` and then `resize` can run as one op: the resize of the decoded field,
/// in place, antialiased, not nearest (the DCT scaling averages, as an antialiased filter
/// does).
pub(super) fn fusable(decode: &ImageSpec, resize: &ImageSpec) -> bool {
    match (decode, resize) {
        (
            ImageSpec::Decode { out, .. },
            ImageSpec::Resize {
                field,
                interpolation,
                antialias,
                ..
            },
        ) => field == out && resize.out() == field && *antialias && interpolation != "nearest",
        _ => false,
    }
}

/// Decodes `bytes` and resizes the image as `resize` says, at a DCT scale when that pays.
/// `decoded` is told, between the two, the bytes the unfused decode would have made (the
/// run's per-op figures charge each op its part).
pub(super) fn run(
    bytes: &[u8],
    decode: &ImageSpec,
    resize: &ImageSpec,
    decoded: impl FnOnce(u64),
) -> Result<ip::Image> {
    let (
        ImageSpec::Decode {
            mode, max_pixels, ..
        },
        ImageSpec::Resize {
            size,
            interpolation,
            max_pixels: out_max,
            ..
        },
    ) = (decode, resize)
    else {
        return Err(sluice_core::Error::Internal(
            "decode_resize: bad spec".into(),
        ));
    };
    let opts = decode_options(mode, *max_pixels);
    let interp = filter(interpolation)?;
    if ip::sniff(bytes) == Some(ip::Format::Jpeg) {
        let (h, w) = ip::jpeg_dimensions(bytes).map_err(kernel_err)?;
        let (oh, ow) = resize_target(size, h, w, *out_max)?;
        let d = ip::dct_denominator(h, w, oh, ow, interp) as usize;
        if d > 1 {
            // A header past max_pixels is refused by the decoder below, with nothing made.
            if (h * w) as u64 <= *max_pixels {
                sluice_core::exec::hold_transient(rgb_transient(h, w, d));
            }
            let part = ip::decode_for_crop(bytes, &opts, 0, 0, h, w, oh, ow, interp)
                .map_err(kernel_err)?;
            decoded((h * w * part.image.channels) as u64);
            return part
                .resized_crop(0, 0, h, w, oh, ow, interp)
                .map_err(kernel_err);
        }
    }
    hold_for_decode(bytes, *max_pixels);
    let img = ip::decode(bytes, &opts).map_err(kernel_err)?;
    decoded(img.data.len() as u64);
    let (oh, ow) = resize_target(size, img.height, img.width, *out_max)?;
    ip::resize(&img, oh, ow, interp, true).map_err(kernel_err)
}
