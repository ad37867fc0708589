//! `decode` + `center_crop` as one op: a JPEG whose centre crop is at most half of it is
//! decoded only where the crop is (the MCUs it touches; the blocks above and beside it are
//! read past without their inverse DCT, upsampling or colour conversion), so a 256-pixel
//! centre of a 50 MP photo never makes the 150 MB image.
//!
//! The window is decoded by the crate's own JPEG decoder, within 35 dB of the whole decode
//! (`tests/decode_center_crop.rs`), as for the fused random crop. Where the crop is more than
//! half the image, does not fit in it (`center_crop` then pads), or the file is not a JPEG,
//! the two ops run as they are: the same bytes as unfused.

use sluice_core::Result;
use sluice_imgproc as ip;

use super::op::{
    center_crop, center_origin, decode_options, hold_for_decode, kernel_err, rgb_transient,
};
use super::ImageSpec;

/// Whether `decode` and then `crop` can run as one op: a centre crop of the decoded field,
/// in place.
pub(super) fn fusable(decode: &ImageSpec, crop: &ImageSpec) -> bool {
    match (decode, crop) {
        (ImageSpec::Decode { out, .. }, ImageSpec::CenterCrop { field, .. }) => {
            field == out && crop.out() == field
        }
        _ => false,
    }
}

/// Decodes `bytes` and takes the centre crop `crop` says, decoding only the window when that
/// pays. `decoded` is told, between the two, the bytes the unfused decode would have made
/// (the run's per-op figures charge each op its part).
pub(super) fn run(
    bytes: &[u8],
    decode: &ImageSpec,
    crop: &ImageSpec,
    decoded: impl FnOnce(u64),
) -> Result<ip::Image> {
    let (
        ImageSpec::Decode {
            mode, max_pixels, ..
        },
        ImageSpec::CenterCrop { size, .. },
    ) = (decode, crop)
    else {
        return Err(sluice_core::Error::Internal(
            "decode_center_crop: bad spec".into(),
        ));
    };
    let opts = decode_options(mode, *max_pixels);
    let (ch, cw) = size.square();
    if ip::sniff(bytes) == Some(ip::Format::Jpeg) {
        // The header's size is the upright one, as the unfused crop sees the decoded image.
        let (h, w) = ip::jpeg_dimensions(bytes).map_err(kernel_err)?;
        if ch <= h && cw <= w && 2 * ch * cw <= h * w {
            let (top, left) = (center_origin(h, ch) as usize, center_origin(w, cw) as usize);
            // A header past max_pixels is refused by the decoder below, with nothing made.
            if (h * w) as u64 <= *max_pixels {
                sluice_core::exec::hold_transient(rgb_transient(ch, cw, 1));
            }
            let filter = ip::Filter::Bilinear; // at full size (out = crop): never used
            let window = ip::decode_for_crop(bytes, &opts, top, left, ch, cw, ch, cw, filter)
                .map_err(kernel_err)?;
            decoded((h * w * window.image.channels) as u64);
            return window.crop(top, left, ch, cw).map_err(kernel_err);
        }
    }
    hold_for_decode(bytes, *max_pixels);
    let img = ip::decode(bytes, &opts).map_err(kernel_err)?;
    decoded(img.data.len() as u64);
    center_crop(&img, ch, cw)
}
