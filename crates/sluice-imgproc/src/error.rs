//! The crate's error type.

use thiserror::Error;

/// Everything that can go wrong in this crate. No function panics on bad
/// input; each reports one of these instead.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ImageError {
    /// The input has no bytes at all.
    #[error("empty input (0 bytes)")]
    Empty,
    /// The stream ends before the image is complete.
    #[error("truncated image data: {0}")]
    Truncated(String),
    /// The stream is malformed (bad markers, bad Huffman codes, bad CRC, ...).
    #[error("corrupt image data: {0}")]
    Corrupt(String),
    /// A valid file using a feature this crate does not decode (unknown
    /// format, arithmetic-coded or lossless JPEG, 12-bit JPEG, ...).
    #[error("unsupported image: {0}")]
    Unsupported(String),
    /// The header declares more pixels than [`crate::DecodeOptions::max_pixels`]
    /// allows (decompression-bomb guard, checked before any pixel buffer is
    /// allocated).
    #[error("image of {height}x{width} pixels exceeds the limit of {max_pixels} pixels")]
    TooLarge {
        /// Declared height.
        height: u64,
        /// Declared width.
        width: u64,
        /// The limit in force.
        max_pixels: u64,
    },
    /// A caller-supplied argument is out of range (crop outside the image,
    /// even blur kernel, wrong channel count, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// Shorthand for `Result<T, ImageError>`.
pub type Result<T> = std::result::Result<T, ImageError>;

pub(crate) fn invalid<T>(msg: impl Into<String>) -> Result<T> {
    Err(ImageError::InvalidArgument(msg.into()))
}
