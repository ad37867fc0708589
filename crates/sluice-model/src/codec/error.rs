//! [`CodecError`]: bytes that do not decode.

use crate::error::Error;

/// Bytes that do not decode (truncated, bad lengths or tags).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record: {0}")]
pub struct CodecError(pub String);

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Self {
        Error::Internal(e.to_string())
    }
}
