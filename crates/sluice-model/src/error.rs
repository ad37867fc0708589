//! Typed errors. User errors (bad arguments, bad data, failing UDFs) are separate from
//! `Internal` (a bug in sluice), so the bindings can map each to the right Python exception.

use std::fmt;
use std::sync::Arc;

/// Result alias used across sluice.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from an external component (e.g. a Python exception raised by a UDF).
///
/// The bindings downcast it back to recover the original exception for chaining.
pub type ExternalError = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Which sample an error happened on: its index in the epoch, and its path when it has one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRef {
    /// Epoch the sample belongs to.
    pub epoch: u64,
    /// Position of the sample in the epoch's order (before filtering).
    pub index: u64,
    /// The sample's `path` field, when it has one.
    pub path: Option<String>,
}

impl fmt::Display for SampleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "sample {} ({p})", self.index),
            None => write!(f, "sample {}", self.index),
        }
    }
}

/// Every error sluice reports.
///
/// ```
/// use sluice_model::Error;
/// let e = Error::invalid("batch size must be > 0, got 0");
/// assert!(e.to_string().contains("batch size"));
/// ```
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A bad argument or pipeline, detected when the pipeline is built (Python: ValueError).
    #[error("{0}")]
    InvalidArgument(String),
    /// A value of the wrong type (Python: TypeError).
    #[error("{0}")]
    Type(String),
    /// A path or glob that matches nothing (Python: FileNotFoundError).
    #[error("{0}")]
    FileNotFound(String),
    /// A sample lacks a field an op reads (Python: KeyError).
    #[error("field '{field}' not found (op '{op}'; available: {available})")]
    MissingField {
        field: String,
        op: String,
        available: String,
    },
    /// An I/O failure while reading `path`.
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// Malformed input data (a corrupt file, invalid JSON, ...).
    #[error("{0}")]
    Data(String),
    /// An error from outside Rust, kept whole so it can be chained (e.g. a Python exception).
    #[error("{message}")]
    External {
        message: String,
        source: ExternalError,
    },
    /// An op failed on a sample; names both and wraps the cause.
    #[error("op '{op}' failed on {sample}: {source}")]
    InSample {
        op: String,
        sample: SampleRef,
        #[source]
        source: Box<Error>,
    },
    /// The iteration was cancelled (the consumer went away).
    #[error("cancelled")]
    Cancelled,
    /// User code was interrupted (Python: `KeyboardInterrupt`, `SystemExit`): not a failure
    /// of the sample, so it is never skipped nor wrapped, and the original is re-raised.
    #[error("{message}")]
    Interrupted {
        message: String,
        source: ExternalError,
    },
    /// The system refused a resource the run needs: a thread, memory or a file descriptor
    /// past a limit (`ulimit -u`/`-v`/`-n`, a cgroup), or a name another process holds
    /// (Python: `SluiceError`, a `RuntimeError`). Not a bug: the message says what to change.
    #[error("{0}")]
    Resource(String),
    /// A bug in sluice.
    #[error("internal error (a sluice bug, please report): {0}")]
    Internal(String),
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }
    /// Shorthand for [`Error::Type`].
    pub fn type_error(msg: impl Into<String>) -> Self {
        Error::Type(msg.into())
    }
    /// Shorthand for [`Error::Data`].
    pub fn data(msg: impl Into<String>) -> Self {
        Error::Data(msg.into())
    }
    /// An I/O error on `path`.
    pub fn io(path: impl fmt::Display, err: std::io::Error) -> Self {
        if err.kind() == std::io::ErrorKind::NotFound {
            return Error::FileNotFound(format!("{path}: no such file"));
        }
        Error::Io {
            path: path.to_string(),
            message: err.to_string(),
        }
    }
    /// A thread for `what` that the system would not start (`err`, usually "Resource
    /// temporarily unavailable"): a [`Error::Resource`] saying which limit to look at.
    ///
    /// ```
    /// use sluice_model::Error;
    /// let e = Error::no_thread("stage 'map'", std::io::Error::from_raw_os_error(11));
    /// assert!(e.to_string().contains("ulimit -u"), "{e}");
    /// assert!(matches!(e, Error::Resource(_)));
    /// ```
    pub fn no_thread(what: impl fmt::Display, err: std::io::Error) -> Self {
        Error::Resource(format!(
            "cannot start a thread for {what}: {err}; the system's limit on threads or memory \
             is reached (ulimit -u, ulimit -v, a cgroup's pids.max): use fewer threads \
             (num_threads=, processes=) or raise the limit"
        ))
    }
    /// The innermost error, below any [`Error::InSample`] wrappers.
    pub fn root(&self) -> &Error {
        match self {
            Error::InSample { source, .. } => source.root(),
            e => e,
        }
    }
}
