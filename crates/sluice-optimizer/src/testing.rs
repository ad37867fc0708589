//! Test ops with known costs and declared fields, shared by the rule tests.
//!
//! Unit tests never time anything: a test op *declares* its CPU cost and [`profiled`] writes
//! the declared costs into a profile whose counts (items, bytes, selectivity) come from a
//! real run. The optimizer's decisions in tests are then the same on any machine, idle or
//! busy; measured costs live in `benchmarks/`.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::*;

use crate::clock::thread_cpu;

/// A configurable op that costs `fixed_us` + `ns_per_byte` × bytes of `img` of CPU (declared,
/// and burned only when `burn` is set), optionally resizes `img` to `out_len` bytes, filters
/// odd ids, or fails at one index.
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
    /// Really spend the declared CPU (for the profiler's own tests).
    pub burn: bool,
    /// Has a portable form (off: like a Python callable without cloudpickle).
    pub ships: bool,
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
            burn: false,
            ships: true,
        }
    }
    /// CPU seconds this op declares for an input whose `img` has `len` bytes.
    pub fn cost_s(&self, len: usize) -> f64 {
        self.fixed_us as f64 * 1e-6 + self.ns_per_byte * 1e-9 * len as f64
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
        serde_json::json!({"op": self.name, "fixed_us": self.fixed_us, "ns_per_byte": self.ns_per_byte})
    }
    fn ship(&self) -> Result<serde_json::Value> {
        if !self.ships {
            return Err(Error::invalid(format!("{} cannot be shipped", self.name)));
        }
        Ok(self.spec())
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
        if self.burn {
            spin(Duration::from_secs_f64(self.cost_s(len)));
        }
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

/// CPU seconds per item the source read declares in a synthetic profile.
pub const SOURCE_COST_S: f64 = 1e-7;

/// A profile of `samples` samples of `plan` (panics on an error) on a 2-core machine: items,
/// bytes and selectivity as the run found them, CPU as the ops declare it (see the module
/// docs), every op scaling linearly.
pub fn profiled(plan: &Arc<LogicalPlan>, samples: u64) -> crate::Profile {
    let mut p = crate::profile::profile(
        plan,
        &crate::ProfileOptions {
            samples,
            ..Default::default()
        },
    )
    .expect("profile");
    p.machine.cores = 2;
    let read = SOURCE_COST_S * p.source.items_in as f64;
    declare(&mut p.source, read);
    let declared: Vec<(u64, serde_json::Value)> = plan
        .chain()
        .iter()
        .filter_map(|node| match &**node {
            LogicalPlan::Map(n) => Some((n.op_id, n.op.spec())),
            _ => None,
        })
        .collect();
    for op in &mut p.ops {
        let spec = declared.iter().find(|(id, _)| Some(*id) == op.op_id);
        let cost = |key: &str| spec.and_then(|(_, s)| s.get(key)?.as_f64()).unwrap_or(0.0);
        // The `img` bytes dominate a test sample; the other fields are a few dozen bytes.
        let cpu = cost("fixed_us") * 1e-6 * op.items_in as f64
            + cost("ns_per_byte") * 1e-9 * op.bytes_in as f64;
        declare(op, cpu);
    }
    p
}

fn declare(op: &mut crate::OpProfile, cpu_s: f64) {
    op.cpu_s = cpu_s;
    op.wall_s = cpu_s;
    op.parallel_efficiency = 1.0;
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

/// A plan's stages on one line, `kind [variant] | ...`: what placement tests compare.
pub fn printed(plan: &PhysicalPlan) -> String {
    plan.stages
        .iter()
        .map(|s| format!("{} [{}]", s.kind.label(), s.variant))
        .collect::<Vec<_>>()
        .join(" | ")
}
