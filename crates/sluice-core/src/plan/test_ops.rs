//! Ops for the plan modules' tests.

use crate::error::Result;
use crate::{Emit, Op, OpContext, OpMeta, Sample};

/// A Rust op that passes its sample on and declares nothing.
#[derive(Debug)]
pub(crate) struct Keep;

impl Op for Keep {
    fn name(&self) -> &str {
        "keep"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "keep"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, s: Sample, _cx: &OpContext) -> Result<Emit> {
        Ok(Emit::One(s))
    }
}
