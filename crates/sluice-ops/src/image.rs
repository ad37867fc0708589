//! `sluice.image` ops.

use serde::{Deserialize, Serialize};
use sluice_core::{Error, OpRef, Result};

/// The serde form of the `image.*` ops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op")]
pub enum ImageSpec {
    /// Placeholder until the family's ops land.
    #[serde(rename = "image.none")]
    None,
}

/// Builds a `image.*` op.
pub fn build(spec: &ImageSpec) -> Result<OpRef> {
    Err(Error::invalid(format!("op {spec:?} is not available")))
}
