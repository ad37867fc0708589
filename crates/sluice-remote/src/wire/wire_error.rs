//! [`WireError`]: a frame that cannot be encoded or decoded, and how the errors of the
//! layers below (the core codec, shared memory) become one.

use sluice_core::codec::CodecError;
use sluice_core::Error;

use crate::shm::ShmError;

/// A frame that cannot be encoded or decoded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    /// The bytes are not a valid frame (truncated, wrong magic, bad lengths or tags).
    #[error("corrupt frame: {0}")]
    Corrupt(String),
    /// A shared-memory segment could not be created or opened.
    #[error("shared memory segment {name}: {message}")]
    Shm { name: String, message: String },
}

impl From<WireError> for Error {
    fn from(e: WireError) -> Self {
        match e {
            // The system's refusal (a full `/dev/shm`, a name another process took), not a
            // bug: the message names the segment and the reason.
            WireError::Shm { .. } => Error::Resource(e.to_string()),
            WireError::Corrupt(_) => Error::Internal(format!("worker protocol: {e}")),
        }
    }
}

impl From<CodecError> for WireError {
    fn from(e: CodecError) -> Self {
        WireError::Corrupt(e.0)
    }
}

impl From<ShmError> for WireError {
    fn from(e: ShmError) -> Self {
        match e {
            ShmError::BadName(_) => WireError::Corrupt(e.to_string()),
            ShmError::Io { name, message } => WireError::Shm { name, message },
        }
    }
}

/// A [`WireError::Corrupt`] saying `what`.
pub(crate) fn corrupt<T>(what: impl Into<String>) -> Result<T, WireError> {
    Err(WireError::Corrupt(what.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_errors_keep_their_message_and_kind() {
        let e = WireError::from(CodecError("bad value tag 9".into()));
        assert_eq!(e.to_string(), "corrupt frame: bad value tag 9");
        let e = WireError::from(ShmError::BadName("../x".into()));
        assert_eq!(e.to_string(), r#"corrupt frame: bad segment name "../x""#);
        let io = ShmError::Io {
            name: "/dev/shm/p-1".into(),
            message: "gone".into(),
        };
        let shm = WireError::from(io);
        assert!(matches!(shm, WireError::Shm { .. }));
        let core = Error::from(shm);
        assert!(matches!(core, Error::Resource(_)), "{core:?}");
        assert!(core.to_string().contains("/dev/shm/p-1: gone"), "{core}");
        let core = Error::from(WireError::Corrupt("x".into()));
        assert!(core.to_string().contains("worker protocol"), "{core}");
    }
}
