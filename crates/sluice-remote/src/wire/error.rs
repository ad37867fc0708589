//! A stage's typed [`Error`] in a reply frame: every variant with its fields, errors in a
//! sample nested inside theirs, and external errors (Python exceptions) carried by the
//! runtime's [`ExternalCodec`].

use std::sync::Arc;

use sluice_core::codec::{In, Out, MAX_DEPTH};
use sluice_core::{Error, ExternalError, SampleRef};

use super::wire_error::{corrupt, WireError};

/// Carries the [`Error::External`] errors of one runtime (e.g. Python exceptions) across:
/// the sender turns the error into bytes, the receiver rebuilds an equivalent error.
pub trait ExternalCodec: Send + Sync {
    /// The portable form of `err`, or `None` to send only its message.
    fn encode(&self, err: &ExternalError) -> Option<Vec<u8>>;
    /// The error `payload` describes (`None`: keep just the message).
    fn decode(&self, message: &str, payload: &[u8]) -> Option<ExternalError>;
}

/// An external error that arrived as a message only.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct RemoteError(pub String);

/// Writes `e`: a tag byte per variant, then its fields.
pub(crate) fn encode_error(out: &mut Out, e: &Error, codec: Option<&dyn ExternalCodec>) {
    match e {
        Error::InvalidArgument(m) => {
            out.u8(0);
            out.str(m);
        }
        Error::Type(m) => {
            out.u8(1);
            out.str(m);
        }
        Error::FileNotFound(m) => {
            out.u8(2);
            out.str(m);
        }
        Error::MissingField {
            field,
            op,
            available,
        } => {
            out.u8(3);
            out.str(field);
            out.str(op);
            out.str(available);
        }
        Error::Io { path, message } => {
            out.u8(4);
            out.str(path);
            out.str(message);
        }
        Error::Data(m) => {
            out.u8(5);
            out.str(m);
        }
        Error::External { message, source } | Error::Interrupted { message, source } => {
            out.u8(if matches!(e, Error::Interrupted { .. }) {
                10
            } else {
                6
            });
            out.str(message);
            match codec.and_then(|c| c.encode(source)) {
                Some(p) => {
                    out.u8(1);
                    out.bytes(&p);
                }
                None => out.u8(0),
            }
        }
        Error::InSample { op, sample, source } => {
            out.u8(7);
            out.str(op);
            out.u64(sample.epoch);
            out.u64(sample.index);
            out.opt_str(sample.path.as_deref());
            encode_error(out, source, codec);
        }
        Error::Cancelled => out.u8(8),
        Error::Internal(m) => {
            out.u8(9);
            out.str(m);
        }
        Error::Resource(m) => {
            out.u8(11);
            out.str(m);
        }
        // Variants added later travel as internal errors with their message.
        #[allow(unreachable_patterns)]
        other => {
            out.u8(9);
            out.str(&other.to_string());
        }
    }
}

/// Reads an error [`encode_error`] wrote (`depth`: how many errors it is inside).
pub(crate) fn decode_error(
    inp: &mut In<'_>,
    codec: Option<&dyn ExternalCodec>,
    depth: usize,
) -> Result<Error, WireError> {
    Ok(match inp.u8()? {
        0 => Error::InvalidArgument(inp.str()?.into()),
        1 => Error::Type(inp.str()?.into()),
        2 => Error::FileNotFound(inp.str()?.into()),
        3 => Error::MissingField {
            field: inp.str()?.into(),
            op: inp.str()?.into(),
            available: inp.str()?.into(),
        },
        4 => Error::Io {
            path: inp.str()?.into(),
            message: inp.str()?.into(),
        },
        5 => Error::Data(inp.str()?.into()),
        tag @ (6 | 10) => {
            let message = inp.str()?.to_string();
            let payload = match inp.u8()? {
                0 => None,
                1 => Some(inp.bytes()?),
                t => return corrupt(format!("bad payload tag {t}")),
            };
            let source = payload
                .and_then(|p| codec.and_then(|c| c.decode(&message, p)))
                .unwrap_or_else(|| Arc::new(RemoteError(message.clone())));
            if tag == 10 {
                Error::Interrupted { message, source }
            } else {
                Error::External { message, source }
            }
        }
        7 => {
            if depth >= MAX_DEPTH {
                return corrupt("errors nested too deeply");
            }
            let op = inp.str()?.to_string();
            let sample = SampleRef {
                epoch: inp.u64()?,
                index: inp.u64()?,
                path: inp.opt_str()?.map(str::to_string),
            };
            let source = Box::new(decode_error(inp, codec, depth + 1)?);
            Error::InSample { op, sample, source }
        }
        8 => Error::Cancelled,
        9 => Error::Internal(inp.str()?.into()),
        11 => Error::Resource(inp.str()?.into()),
        t => return corrupt(format!("bad error tag {t}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fixtures::in_sample_error;

    fn round_trip(e: &Error, codec: Option<&dyn ExternalCodec>) -> Error {
        let mut out = Out::default();
        encode_error(&mut out, e, codec);
        let buf = out.into_vec();
        let mut inp = In::new(&buf);
        let back = decode_error(&mut inp, codec, 0).unwrap();
        inp.end().unwrap();
        back
    }

    #[test]
    fn errors_round_trip_with_their_sample() {
        let err = in_sample_error();
        let back = round_trip(&err, None);
        assert_eq!(back.to_string(), err.to_string());
        assert!(matches!(back.root(), Error::External { .. }));
        for e in [
            Error::invalid("a"),
            Error::type_error("b"),
            Error::FileNotFound("c".into()),
            Error::MissingField {
                field: "f".into(),
                op: "o".into(),
                available: "x, y".into(),
            },
            Error::Io {
                path: "p".into(),
                message: "m".into(),
            },
            Error::data("d"),
            Error::Cancelled,
            Error::Internal("i".into()),
        ] {
            let back = round_trip(&e, None);
            assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&e));
            assert_eq!(back.to_string(), e.to_string());
        }
    }

    /// Payloads are the message reversed, so a test can tell a rebuilt error from a bare one.
    struct Reverse;
    impl ExternalCodec for Reverse {
        fn encode(&self, err: &ExternalError) -> Option<Vec<u8>> {
            Some(err.to_string().bytes().rev().collect())
        }
        fn decode(&self, _: &str, payload: &[u8]) -> Option<ExternalError> {
            let text: String = payload.iter().rev().map(|&b| b as char).collect();
            Some(Arc::new(RemoteError(format!("rebuilt {text}"))))
        }
    }

    #[test]
    fn external_errors_travel_through_the_codec_and_nesting_is_bounded() {
        let e = Error::Interrupted {
            message: "KeyboardInterrupt".into(),
            source: Arc::new(RemoteError("ki".into())),
        };
        let back = round_trip(&e, Some(&Reverse));
        let Error::Interrupted { source, .. } = &back else {
            panic!("{back:?}");
        };
        assert_eq!(source.to_string(), "rebuilt ki");
        // Without the codec only the message is kept.
        let back = round_trip(&e, None);
        assert_eq!(back.to_string(), e.to_string());
        // Errors nested deeper than MAX_DEPTH are corrupt, not a stack overflow.
        let mut deep = Error::Cancelled;
        for i in 0..=MAX_DEPTH as u64 {
            deep = Error::InSample {
                op: "o".into(),
                sample: SampleRef {
                    epoch: 0,
                    index: i,
                    path: None,
                },
                source: Box::new(deep),
            };
        }
        let mut out = Out::default();
        encode_error(&mut out, &deep, None);
        let buf = out.into_vec();
        assert!(decode_error(&mut In::new(&buf), None, 0).is_err());
        assert!(
            decode_error(&mut In::new(&[11]), None, 0).is_err(),
            "bad tag"
        );
    }
}
