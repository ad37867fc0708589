//! Content keys: what decides that two jobs may share a stage or a chunk's reply.
//!
//! A **stage key** digests a stage's init message ([`crate::stage::StagePackage`]) without
//! what does not change its output — its display label and the shared-memory settings of
//! one host. Two jobs get the same key exactly when they ship the same source, the same ops
//! (built-in specs, Python functions as their pickles), the same seed and the same resume
//! skip; a worker then hosts one engine for both. A **frame digest** names one request
//! frame, so (stage key, frame digest) names one reply: the stage is deterministic given its
//! input — randomness derives from (seed, epoch, index, op) — so equal keys mean equal bytes.
//!
//! SHA-256, not the 64-bit plan fingerprint: a collision here would hand one job another's
//! data, and a Python function is keyed by its pickle, not by its name.
//!
//! ```
//! use sluice_remote::service::key::stage_key;
//! use sluice_remote::stage::PACKAGE_VERSION as V;
//! let a = format!(r#"{{"version":{V},"source":null,"ops":[],"seed":7,"label":"a"}}"#);
//! let b = format!(r#"{{"version":{V},"source":null,"ops":[],"seed":7,"label":"b"}}"#);
//! let c = format!(r#"{{"version":{V},"source":null,"ops":[],"seed":8,"label":"a"}}"#);
//! assert_eq!(stage_key(&a)?, stage_key(&b)?); // the label is not content
//! assert_ne!(stage_key(&a)?, stage_key(&c)?); // the seed is
//! # Ok::<(), sluice_core::Error>(())
//! ```

use sha2::{Digest, Sha256};
use sluice_core::{Error, Result};

use crate::stage::StagePackage;

/// The stage key of an init message: 32 hex digits (128 bits of SHA-256).
pub fn stage_key(init: &str) -> Result<String> {
    let mut package = StagePackage::from_json(init)?;
    package.label.clear();
    package.shm = None;
    // serde_json's maps are sorted (no `preserve_order`), so equal content prints equally.
    let canonical =
        serde_json::to_vec(&package).map_err(|e| Error::Internal(format!("stage package: {e}")))?;
    Ok(content_key(&canonical))
}

/// A content key: 32 hex digits (128 bits of SHA-256) of `bytes`.
pub fn content_key(bytes: &[u8]) -> String {
    Sha256::digest(bytes)[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A stable 64-bit hash of a name, the same in every process (Python's `hash` of a string
/// is not): what rendezvous hashing ranks workers and cache shards by.
pub fn name_hash(name: &str) -> u64 {
    (name.bytes()).fold(0x6a09_e667_f3bc_c908, |h, b| {
        sluice_core::rng::combine(h, b as u64)
    })
}

/// The digest of one request frame (128 bits of SHA-256).
pub fn frame_digest(frame: &[u8]) -> u128 {
    let digest = Sha256::digest(frame);
    let mut lane = [0u8; 16];
    lane.copy_from_slice(&digest[..16]);
    u128::from_le_bytes(lane)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::PACKAGE_VERSION;

    fn init(seed: u64, label: &str, shm: bool, op_name: &str) -> String {
        let shm = if shm {
            r#","shm":{"dir":"/dev/shm","prefix":"p","threshold":1}"#
        } else {
            ""
        };
        format!(
            r#"{{"version":{PACKAGE_VERSION},"source":{{"kind":"range","n":10}},"ops":[{{"op":{{"op":"python","name":"{op_name}","pickle":"AAA"}},"mode":"map","on_error":"raise","op_id":3}}],"seed":{seed},"label":"{label}"{shm}}}"#
        )
    }

    #[test]
    fn label_and_shared_memory_are_not_content() {
        let a = stage_key(&init(1, "read+f", false, "f")).unwrap();
        assert_eq!(a.len(), 32);
        assert_eq!(a, stage_key(&init(1, "other", false, "f")).unwrap());
        assert_eq!(a, stage_key(&init(1, "read+f", true, "f")).unwrap());
    }

    #[test]
    fn seed_and_ops_are_content() {
        let a = stage_key(&init(1, "x", false, "f")).unwrap();
        assert_ne!(a, stage_key(&init(2, "x", false, "f")).unwrap());
        assert_ne!(a, stage_key(&init(1, "x", false, "g")).unwrap());
    }

    #[test]
    fn key_order_in_the_message_does_not_matter() {
        let a = init(1, "x", false, "f");
        let b = a.replace(r#"{"kind":"range","n":10}"#, r#"{"n":10,"kind":"range"}"#);
        assert_ne!(a, b);
        assert_eq!(stage_key(&a).unwrap(), stage_key(&b).unwrap());
    }

    #[test]
    fn bad_messages_are_errors() {
        assert!(stage_key("not json").is_err());
        let old = init(1, "x", false, "f")
            .replace(&format!(r#""version":{PACKAGE_VERSION}"#), r#""version":0"#);
        let err = stage_key(&old).unwrap_err().to_string();
        assert!(err.contains("version"), "{err}");
    }

    #[test]
    fn frames_differ_by_content() {
        assert_eq!(frame_digest(b"abc"), frame_digest(b"abc"));
        assert_ne!(frame_digest(b"abc"), frame_digest(b"abd"));
    }
}
