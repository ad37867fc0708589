//! What ops report about their own work ([`crate::Op::counters`]), per run: e.g. how many
//! lines `text.tokenize` encoded through its fast path and how many it handed to
//! `tokenizers`. An op keeps its counters for its lifetime (a dataset reuses its ops every
//! epoch), so a run reports the change since it started.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::OpRef;

/// One op's figures over a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpReport {
    /// The stage the op runs in.
    pub stage: String,
    /// The op's name.
    pub op: String,
    /// Each counter's change over the run.
    pub counts: BTreeMap<String, u64>,
}

struct OpWatch {
    stage: String,
    op: OpRef,
    base: BTreeMap<&'static str, u64>,
}

/// The ops of a run that keep counters, with their values when it started.
pub(crate) struct OpWatches(Vec<OpWatch>);

impl std::fmt::Debug for OpWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|w| (&w.stage, w.op.name())))
            .finish()
    }
}

impl OpWatches {
    pub(crate) fn new(ops: impl IntoIterator<Item = (String, OpRef)>) -> Self {
        OpWatches(
            ops.into_iter()
                .filter_map(|(stage, op)| {
                    let base: BTreeMap<_, _> = op.counters().into_iter().collect();
                    (!base.is_empty()).then_some(OpWatch { stage, op, base })
                })
                .collect(),
        )
    }

    pub(crate) fn report(&self) -> Vec<OpReport> {
        self.0
            .iter()
            .map(|w| OpReport {
                stage: w.stage.clone(),
                op: w.op.name().to_string(),
                counts: w
                    .op
                    .counters()
                    .into_iter()
                    .map(|(k, v)| {
                        let base = w.base.get(k).copied().unwrap_or(0);
                        (k.to_string(), v.saturating_sub(base))
                    })
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;

    use super::*;
    use crate::{Emit, Op, OpContext, OpMeta, Result, Sample};

    #[derive(Debug, Default)]
    struct Counting(AtomicU64);
    impl Op for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({})
        }
        fn meta(&self) -> OpMeta {
            OpMeta::opaque(false)
        }
        fn apply(&self, sample: Sample, _: &OpContext) -> Result<Emit> {
            self.0.fetch_add(1, Relaxed);
            Ok(Emit::One(sample))
        }
        fn counters(&self) -> Vec<(&'static str, u64)> {
            vec![("applied", self.0.load(Relaxed))]
        }
    }

    #[test]
    fn a_run_reports_what_its_ops_counted_since_it_started() {
        let op = Arc::new(Counting::default());
        op.0.store(10, Relaxed); // an earlier epoch's
        let quiet: OpRef = Arc::new(crate::plan::test_ops::Keep);
        let watches = OpWatches::new([
            ("map".to_string(), op.clone() as OpRef),
            ("map".into(), quiet),
        ]);
        op.0.fetch_add(3, Relaxed);
        let report = watches.report();
        assert_eq!(report.len(), 1, "ops without counters are left out");
        assert_eq!(report[0].op, "counting");
        assert_eq!(
            report[0].counts,
            BTreeMap::from([("applied".to_string(), 3)])
        );
    }
}
