//! sluice's data model: what flows through a pipeline ([`Value`], [`Sample`]), how it
//! crosses a process boundary ([`codec`]), the typed [`Error`], the order of a source's
//! positions ([`order`]: shuffles, shards, epochs), the seeds every random choice derives
//! from ([`rng`]), and the small OS helpers the layers above share (`cores`, `clock`,
//! `scratch`, `interrupt`). It knows nothing of plans or execution: `sluice-core` builds
//! those on it and re-exports it whole, so `sluice_core::Sample` is this crate's.
//!
//! ```
//! use sluice_model::{Sample, Value};
//! let mut s = Sample::new();
//! s.set("id", Value::Int(7));
//! assert_eq!(s.get("id"), Some(&Value::Int(7)));
//! ```

pub mod clock;
pub mod codec;
pub mod cores;
pub mod error;
pub mod interrupt;
pub mod name;
pub mod order;
pub mod rng;
pub mod sample;
pub mod scratch;
pub mod value;

pub use error::{Error, ExternalError, Result, SampleRef};
pub use name::Name;
pub use order::{IndexOrder, Permutation, Position, ShardSpec};
pub use rng::{mix64, SampleRng};
pub use sample::Sample;
pub use value::{Column, ColumnData, DType, Object, Owned, Shape, Tensor, TensorData, Value};
