//! Output-size limits: an absurd size is an error, never an out-of-memory abort.
//!
//! Every op whose output size follows from its arguments takes a limit argument with a default
//! below, in the unit of its family, and travels with it (the limit is part of the spec, so a
//! sample fails or passes the same way in every worker and process):
//!
//! | family | argument | counts | default |
//! |---|---|---|---|
//! | `image.*` | `max_pixels` | height × width of an image the op makes | 89,478,485 (Pillow's) |
//! | `audio.*` | `max_samples` | float32 values of a buffer the op makes for one sample | 2^29 (2 GiB) |
//! | `text.*` | `max_tokens` | ids of a sequence the op makes | 2^24 |
//!
//! Where the arguments alone exceed the limit (`resize(10**6)`: at least 10^12 pixels) the op
//! is refused when it is made ([`Error::InvalidArgument`], Python `ValueError`). Otherwise the
//! op checks each sample's output size before allocating — one comparison — and fails that
//! sample ([`Error::Data`], wrapped with the sample and the op: Python `PipelineError`).
//! Kernel sizes that are not outputs have fixed caps: [`MAX_KERNEL_SIZE`], [`MAX_N_FFT`].

use sluice_core::{Error, Result};

/// Default `max_pixels` of the image ops: Pillow's decompression-bomb limit, as `image.decode`.
pub const DEFAULT_MAX_PIXELS: u64 = sluice_imgproc::DEFAULT_MAX_PIXELS;
/// Default `max_samples` of the audio ops: 2^29 float32 values (2 GiB); over an hour of 48 kHz
/// stereo audio.
pub const DEFAULT_MAX_SAMPLES: u64 = 1 << 29;
/// Default `max_tokens` of the text ops (and the most tokens a `pack` block may hold): 2^24.
pub const DEFAULT_MAX_TOKENS: u64 = 1 << 24;
/// The largest `image.gaussian_blur` kernel side (taps of a 1-D Gaussian).
pub const MAX_KERNEL_SIZE: usize = (1 << 16) - 1;
/// The largest `audio.spectrogram` FFT size (`n_fft`, `win_length`): 2^24 points, six minutes
/// at 44.1 kHz in one frame.
pub const MAX_N_FFT: usize = 1 << 24;

pub(crate) fn default_max_pixels() -> u64 {
    DEFAULT_MAX_PIXELS
}
pub(crate) fn default_max_samples() -> u64 {
    DEFAULT_MAX_SAMPLES
}
pub(crate) fn default_max_tokens() -> u64 {
    DEFAULT_MAX_TOKENS
}
pub(crate) fn is_default_max_pixels(v: &u64) -> bool {
    *v == DEFAULT_MAX_PIXELS
}
pub(crate) fn is_default_max_samples(v: &u64) -> bool {
    *v == DEFAULT_MAX_SAMPLES
}
pub(crate) fn is_default_max_tokens(v: &u64) -> bool {
    *v == DEFAULT_MAX_TOKENS
}

/// `a * b` (and more factors), saturating: sizes are compared, never allocated, here.
pub(crate) fn product(dims: &[u64]) -> u64 {
    dims.iter().fold(1u64, |acc, &d| acc.saturating_mul(d))
}

/// Refuses an op at build time: its arguments alone make an output of `size` units, above
/// `limit`. `what` names the argument(s) and the output, e.g. `"size=1000000 makes at least
/// 1000000x1000000 pixels"`.
pub(crate) fn refuse(op: &str, what: &str, limit_name: &str, limit: u64) -> Error {
    Error::invalid(format!(
        "{op}: {what}, above {limit_name}={limit} (pass a larger {limit_name} to allow it)"
    ))
}

/// Fails the sample when `size` exceeds `limit`; `what` (called only then) describes the
/// output and the argument it came from.
#[inline]
pub(crate) fn check(
    size: u64,
    limit: u64,
    limit_name: &str,
    what: impl FnOnce() -> String,
) -> Result<()> {
    if size <= limit {
        return Ok(());
    }
    Err(Error::data(format!(
        "{} = {size}, above {limit_name}={limit} (the op's {limit_name} argument raises it)",
        what()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn products_saturate_and_checks_name_the_limit() {
        assert_eq!(product(&[3, 4, 5]), 60);
        assert_eq!(product(&[u64::MAX, 2]), u64::MAX);
        assert!(check(10, 10, "max_pixels", || unreachable!()).is_ok());
        let e = check(11, 10, "max_pixels", || "a 1x11 image".into()).unwrap_err();
        assert!(matches!(e, Error::Data(_)));
        assert!(
            e.to_string()
                .contains("a 1x11 image = 11, above max_pixels=10"),
            "{e}"
        );
        let e = refuse("image.resize", "size=9 makes 81 pixels", "max_pixels", 10);
        assert!(matches!(e, Error::InvalidArgument(_)));
        assert!(e.to_string().starts_with("image.resize: size=9"), "{e}");
    }
}
