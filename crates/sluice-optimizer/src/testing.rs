//! Test ops with known costs and declared fields, shared by the rule tests.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::*;

use crate::clock::thread_cpu;

/// A configurable op: burns `fixed_us` + `ns_per_byte` × bytes of `img` of CPU, optionally
/// resizes `img` to `out_len` bytes, filters odd ids, or fails at one index.
#[derive(Debug, Clone)]
pub struct TestOp {
    pub name: String,
    pub kind: OpKind,
    pub fixed_us: u64,
    pub ns_per_byte: f64,
    pub out_len: Option<usize>,
    pub mode: ElemMode,
    pub python: bool,
    pub random: bool,
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    pub fail_at: Option<u64>,
    pub keep_position: Option<bool>,
}

impl TestOp {
    pub fn new(name: &str, kind: OpKind) -> Self {
        TestOp {
            name: name.into(),
            kind,
            fixed_us: 0,
            ns_per_byte: 0.0,
            out_len: None,
            mode: ElemMode::Map,
            python: false,
            random: false,
            reads: vec!["img".into()],
            writes: vec!["img".into()],
            fail_at: None,
            keep_position: None,
        }
    }
}

fn spin(d: Duration) {
    let t0 = thread_cpu();
    while thread_cpu() - t0 < d {
        std::hint::spin_loop();
    }
}

impl Op for TestOp {
    fn name(&self) -> &str {
        &self.name
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": self.name})
    }
    fn meta(&self) -> OpMeta {
        OpMeta {
            reads: self.reads.clone(),
            writes: self.writes.clone(),
            kind: self.kind,
            random: self.random,
            python: self.python,
        }
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        if self.fail_at == Some(cx.index) {
            return Err(Error::invalid("boom"));
        }
        let len = s
            .get("img")
            .and_then(|v| v.as_bytes())
            .map_or(0, <[u8]>::len);
        let ns = self.fixed_us as f64 * 1e3 + self.ns_per_byte * len as f64;
        spin(Duration::from_nanos(ns as u64));
        if let Some(n) = self.out_len {
            s.set("img", Value::Bytes(vec![cx.index as u8; n].into()));
        }
        if self.mode == ElemMode::Filter {
            let id = s.get("id").and_then(Value::as_int).unwrap_or(0);
            return Ok(if id % 2 == 0 {
                Emit::One(s)
            } else {
                Emit::Drop
            });
        }
        Ok(Emit::One(s))
    }
}

/// An op burning `us` µs per sample.
pub fn busy_op(name: &str, us: u64, kind: OpKind) -> TestOp {
    TestOp {
        fixed_us: us,
        ..TestOp::new(name, kind)
    }
}

/// A filter keeping even ids.
pub fn keep_even() -> TestOp {
    TestOp {
        mode: ElemMode::Filter,
        reads: vec!["id".into()],
        writes: vec![],
        ..TestOp::new("keep_even", OpKind::Opaque)
    }
}

/// An op failing at sample `index`.
pub fn fail_at(index: u64) -> TestOp {
    TestOp {
        fail_at: Some(index),
        ..TestOp::new("fail_at", OpKind::Opaque)
    }
}

/// A source of `n` samples `{id, img}` with `img_len` bytes each.
pub fn images(n: usize, img_len: usize) -> Arc<LogicalPlan> {
    let items = (0..n)
        .map(|i| {
            Sample::from_pairs([
                ("id", Value::Int(i as i64)),
                ("img", Value::Bytes(vec![i as u8; img_len].into())),
            ])
        })
        .collect();
    Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
        ItemsSource::new(items),
    ))))
}

/// A profile of `samples` samples of `plan` (panics on an error).
pub fn profiled(plan: &Arc<LogicalPlan>, samples: u64) -> crate::Profile {
    crate::profile::profile(
        plan,
        &crate::ProfileOptions {
            samples,
            ..Default::default()
        },
    )
    .expect("profile")
}

/// `images(n, 1000)` followed by `ops`.
pub fn pipeline(n: usize, ops: Vec<TestOp>) -> Arc<LogicalPlan> {
    then(images(n, 1000), ops)
}

/// `plan` followed by `ops`.
pub fn then(mut plan: Arc<LogicalPlan>, ops: Vec<TestOp>) -> Arc<LogicalPlan> {
    for op in ops {
        let (mode, keep) = (op.mode, op.keep_position);
        plan = Arc::new(LogicalPlan::Map(
            MapNode::try_new(plan, Arc::new(op), mode, OnError::Raise, keep).unwrap(),
        ));
    }
    plan
}
