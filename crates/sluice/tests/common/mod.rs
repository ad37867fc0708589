//! Test pieces shared by the facade's integration tests: a stream source and a random op.

use std::sync::Arc;

use sluice::*;

/// A stream (no random access) of `n` `{id}` samples: resuming re-reads it.
#[derive(Debug, Clone)]
pub struct Stream(pub u64);

impl Source for Stream {
    fn name(&self) -> &str {
        "stream"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"source": "stream", "n": self.0})
    }
    fn len(&self) -> Option<u64> {
        None
    }
    fn get(&self, _: u64) -> Result<Sample> {
        Err(Error::invalid("a stream"))
    }
    fn stream(&self) -> Result<SampleStream> {
        Ok(Box::new((0..self.0).map(|i| {
            Ok(Sample::from_pairs([("id", Value::Int(i as i64))]))
        })))
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

/// Adds a seeded random number `r` per sample, so resumes and epochs must reproduce (or
/// change) random draws too.
#[derive(Debug)]
pub struct Noise;

impl Op for Noise {
    fn name(&self) -> &str {
        "noise"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "noise"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta {
            random: true,
            ..OpMeta::opaque(false)
        }
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        s.set("r", Value::Int(cx.rng().below(1 << 30) as i64));
        Ok(Emit::One(s))
    }
}
