//! The crate's single error type.

use thiserror::Error;

/// Every way an audio kernel can fail.
///
/// Kernels never panic on bad data or bad parameters; they return one of these instead so the
/// engine can name the failing sample and op and apply its error policy (fail or skip).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AudioError {
    /// The input held no bytes, or decoded to zero audio frames.
    #[error("empty audio input")]
    Empty,
    /// The container or bitstream is malformed or truncated.
    #[error("corrupt or truncated audio: {0}")]
    Corrupt(String),
    /// The container format or codec is not recognised or not compiled in.
    #[error("unsupported audio format or codec: {0}")]
    Unsupported(String),
    /// A parameter is out of range (zero FFT size, non-positive rate, ...) or an input has the
    /// wrong shape for the configured kernel.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The resampler failed (construction or processing); carries rubato's message.
    #[error("resampling failed: {0}")]
    Resample(String),
}

/// Shorthand for results of this crate.
pub type Result<T, E = AudioError> = std::result::Result<T, E>;

/// Build an [`AudioError::InvalidArgument`] from a format string.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::error::AudioError::InvalidArgument(format!($($arg)*))
    };
}
pub(crate) use invalid;
