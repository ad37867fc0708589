//! Built-in ops. Every op has a serde form in [`OpSpec`] (a tagged enum), so pipelines print,
//! save, load and travel to workers the same way; [`OpSpec::build`] turns a spec into a
//! runnable op. Op families live in their own modules.
//!
//! The contract every built-in op keeps:
//! * a bad argument fails when the op is made, naming the op, the argument and the value
//!   ([`OpSpec::from_json`], then [`OpSpec::build`]);
//! * an op that makes an output whose size follows from its arguments checks that size
//!   against its limit argument (`max_pixels`, `max_samples`, `max_tokens`; see [`limits`])
//!   before allocating: at build time when the arguments alone exceed it, else per sample;
//! * it checks the dtype and rank of the fields it reads, naming the field;
//! * it reads `field` and writes `out` (default: `field`), and declares exactly that.

pub mod audio;
pub mod generic;
pub mod image;
pub mod limits;
mod spec;
pub mod text;

#[cfg(test)]
mod testing;

use serde::Serialize;
use sluice_core::{OpRef, Result};

/// The serde form of every built-in op, tagged by its API name. It deserializes through
/// [`OpSpec::from_value`], whose errors name the op, the argument and its value.
///
/// ```
/// let spec: sluice_ops::OpSpec = serde_json::from_str(r#"{"op": "select", "fields": ["id"]}"#).unwrap();
/// let op = spec.build().unwrap();
/// assert_eq!(op.name(), "select");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpSpec {
    /// Passes samples through unchanged (engine-overhead benchmarks, placeholders).
    Noop,
    /// Keeps only `fields`, in that order.
    Select { fields: Vec<String> },
    /// Removes `fields`.
    Drop { fields: Vec<String> },
    /// Renames field `from` to `to`.
    Rename { from: String, to: String },
    /// `sluice.image` ops (tags `image.*`).
    #[serde(untagged)]
    Image(image::ImageSpec),
    /// `sluice.audio` ops (tags `audio.*`).
    #[serde(untagged)]
    Audio(audio::AudioSpec),
    /// `sluice.text` ops (tags `text.*`).
    #[serde(untagged)]
    Text(text::TextSpec),
}

impl OpSpec {
    /// Builds the op, validating its arguments.
    pub fn build(&self) -> Result<OpRef> {
        match self {
            OpSpec::Image(spec) => image::build(spec),
            OpSpec::Audio(spec) => audio::build(spec),
            OpSpec::Text(spec) => text::build(spec),
            other => generic::build(other),
        }
    }
}
