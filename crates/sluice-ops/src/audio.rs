//! `sluice.audio` ops.

use serde::{Deserialize, Serialize};
use sluice_core::{Error, OpRef, Result};

/// The serde form of the `audio.*` ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum AudioSpec {
    /// Placeholder until the family's ops land.
    #[serde(rename = "audio.none")]
    None,
}

/// Builds a `audio.*` op.
pub fn build(spec: &AudioSpec) -> Result<OpRef> {
    Err(Error::invalid(format!("op {spec:?} is not available")))
}
