//! A chain: fused element-wise ops (map, filter, flat_map), applied op by op over a whole
//! chunk, after reading each item's sample from a random-access source when the chain reads.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::exec::item::{is_interrupt, Chunk, Item, Partial, Transform};
use crate::exec::resume::Skip;
use crate::op::Emit;
use crate::plan::logical::OnError;
use crate::plan::physical::ChainOp;
use crate::rng::combine;
use crate::source::SourceRef;
use crate::stats::ops::ChunkTimer;
use crate::stats::PipelineStats;

/// Reads each item's sample from a random-access source; a failure names the sample, and
/// the items before it are kept.
pub(crate) fn read_items(src: &SourceRef, mut items: Chunk) -> Partial {
    let indices: Vec<u64> = items.iter().map(|it| it.source_index).collect();
    // In place: an item is moved only to hand it on.
    for (i, res) in src.get_many(&indices).into_iter().enumerate() {
        match res {
            Ok(sample) => items[i].set_sample(sample),
            Err(e) => {
                let err = items[i].failed_in(src.name(), e);
                items.truncate(i);
                return (items, Some(err));
            }
        }
    }
    (items, None)
}

/// Fused element-wise ops, applied op by op over the whole chunk (so ops that pay a
/// per-call cost, like taking the GIL, pay it once per chunk).
pub(crate) struct Chain {
    read: Option<SourceRef>,
    ops: Vec<ChainOp>,
    /// The fields each op writes (what a timed run counts as its `bytes_written`).
    writes: Vec<Vec<String>>,
    seed: u64,
    stats: Arc<PipelineStats>,
    stage: usize,
    /// When resuming: outputs already delivered.
    skip: Skip,
}

impl Chain {
    pub(crate) fn new(
        read: Option<SourceRef>,
        ops: Vec<ChainOp>,
        seed: u64,
        stats: Arc<PipelineStats>,
        stage: usize,
        skip: Skip,
    ) -> Self {
        Chain {
            read,
            writes: ops.iter().map(|c| c.op.meta().writes).collect(),
            ops,
            seed,
            stats,
            stage,
            skip,
        }
    }
}

impl Chain {
    pub(crate) fn run(&self, items: Chunk) -> Result<Chunk> {
        match self.run_partial(items) {
            (items, None) => Ok(items),
            (_, Some(e)) => Err(e),
        }
    }

    /// Runs the chunk; when an item fails, the outputs of the items before it (through every
    /// op) and the failure, so a failing sample loses no output that precedes it.
    pub(crate) fn run_partial(&self, mut items: Chunk) -> Partial {
        // A big buffer an op made for this chunk ([`crate::exec::hold_transient`]) is held
        // until the ops after it are done with it too.
        let _ops = crate::exec::transient::ChunkOps::start();
        let mut failed = None;
        // A chunk is timed through all its steps or not at all (while its first step wants it).
        let first = match &self.read {
            Some(_) => None,
            None => self.ops.first().map(|c| c.op_id),
        };
        let mut timer = self
            .stats
            .op_times()
            .filter(|t| t.wants(first))
            .map(ChunkTimer::start);
        if let Some(src) = &self.read {
            (items, failed) = read_items(src, items);
            if let Some(t) = &mut timer {
                t.read(items.iter().map(|it| &it.sample));
            }
        }
        for (k, cop) in self.ops.iter().enumerate() {
            if items.is_empty() {
                break;
            }
            let before = timer
                .as_mut()
                .map(|t| t.before(items.iter().map(|it| &it.sample)));
            let (out, err) = self.apply(cop, items);
            items = out;
            if let (Some(t), Some(before)) = (&mut timer, before) {
                let last = k + 1 == self.ops.len();
                t.op(
                    cop,
                    &self.writes[k],
                    before,
                    items.iter().map(|it| &it.sample),
                    last,
                );
            }
            if let Some(e) = err {
                if is_interrupt(&e) {
                    return (Vec::new(), Some(e));
                }
                // A later op failing on the items left fails on an earlier sample.
                failed = Some(e);
            }
        }
        // A failed chunk's outputs stop at the failure: its counts would not match.
        if let (Some(t), None) = (timer, &failed) {
            t.finish();
        }
        // A position's outputs never span chunks, so ordinals can be counted per chunk.
        let mut prev: Option<(u64, u64)> = None;
        let mut ord = 0;
        for it in &mut items {
            let key = (it.cursor.epoch, it.cursor.pos);
            ord = if prev == Some(key) { ord + 1 } else { 0 };
            prev = Some(key);
            it.cursor.ord = ord;
        }
        if !self.skip.is_empty() {
            items.retain(|it| self.skip.keeps(&it.cursor));
        }
        let (bytes, biggest) = items
            .iter()
            .map(|it| it.sample.nbytes())
            .fold((0usize, 0usize), |(sum, max), b| (sum + b, max.max(b)));
        let c = self.stats.counters(self.stage);
        c.bytes_out.fetch_add(bytes as u64, Relaxed);
        c.max_item_bytes.fetch_max(biggest as u64, Relaxed);
        (items, failed)
    }

    /// One op over the chunk ([`apply_op`]), counting the failures it skipped.
    fn apply(&self, cop: &ChainOp, items: Chunk) -> Partial {
        let (out, err, skipped) = apply_op(cop, self.seed, items);
        if skipped > 0 {
            self.stats
                .counters(self.stage)
                .skipped
                .fetch_add(skipped, Relaxed);
        }
        (out, err)
    }
}

/// One op over `items` under the iteration seed `seed`: the outputs up to the first failure
/// raised (not skipped), that failure, and how many failures were skipped.
pub(crate) fn apply_op(cop: &ChainOp, seed: u64, mut items: Chunk) -> (Chunk, Option<Error>, u64) {
    let inputs = items
        .iter_mut()
        .map(|it| {
            let cx = it.op_context(seed, cop.op_id);
            (std::mem::take(&mut it.sample), cx)
        })
        .collect();
    let results = cop.op.apply_many(inputs);
    // One output per input (a map): the items stay where they are.
    if results.iter().all(|r| matches!(r, Ok(Emit::One(_)))) {
        for (it, res) in items.iter_mut().zip(results) {
            if let Ok(Emit::One(s)) = res {
                it.sample = s;
            }
        }
        return (items, None, 0);
    }
    let mut out = Vec::with_capacity(items.len());
    let mut skipped = 0;
    for (mut it, res) in items.into_iter().zip(results) {
        match res {
            Ok(Emit::One(s)) => {
                it.sample = s;
                out.push(it);
            }
            Ok(Emit::Drop) => {}
            Ok(Emit::Many(samples)) => {
                for (j, s) in samples.into_iter().enumerate() {
                    out.push(Item {
                        sub: combine(it.sub, j as u64 + 1),
                        sample: s,
                        ..it.clone()
                    });
                }
            }
            Err(e) if is_interrupt(&e) => return (Vec::new(), Some(e), skipped),
            Err(e) => match cop.on_error {
                OnError::Skip => skipped += 1,
                OnError::Raise => {
                    let err = it.failed_in(cop.op.name(), e);
                    return (out, Some(err), skipped);
                }
            },
        }
    }
    (out, None, skipped)
}

impl Transform for Chain {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let (items, failed) = self.run_partial(chunk);
        out.push(items);
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::resume::Cursor;
    use crate::op::{Op, OpContext, OpMeta};
    use crate::plan::logical::ElemMode;
    use crate::sample::Sample;
    use crate::stats::StageInfo;
    use crate::value::Value;

    /// By `id % 3`: two outputs, one, none; fails on `fail_at`.
    #[derive(Debug)]
    struct Fan {
        fail_at: Option<i64>,
    }

    impl Op for Fan {
        fn name(&self) -> &str {
            "fan"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": "fan"})
        }
        fn meta(&self) -> crate::op::OpMeta {
            OpMeta::opaque(false)
        }
        fn apply(&self, sample: Sample, _cx: &OpContext) -> Result<Emit> {
            let id = sample.require("id", "fan")?.as_int().unwrap_or(-1);
            if Some(id) == self.fail_at {
                return Err(Error::invalid(format!("fan fails on {id}")));
            }
            let s = |v: i64| Sample::from_pairs([("id", Value::Int(v))]);
            Ok(match id % 3 {
                0 => Emit::Many(vec![s(id * 10), s(id * 10 + 1)]),
                1 => Emit::One(s(id * 10)),
                _ => Emit::Drop,
            })
        }
    }

    fn chain(fail_at: Option<i64>, on_error: OnError, skip: Skip) -> Chain {
        let info = StageInfo {
            name: "chain".into(),
            threads: 1,
            inline: true,
            queue_capacity: 1,
            pool: None,
        };
        let op = ChainOp {
            op: Arc::new(Fan { fail_at }),
            mode: ElemMode::FlatMap,
            on_error,
            op_id: 1,
        };
        let stats = Arc::new(PipelineStats::new(vec![info.clone(), info]));
        Chain::new(None, vec![op], 0, stats, 1, skip)
    }

    fn items(n: u64) -> Chunk {
        (0..n)
            .map(|p| {
                let cursor = Cursor {
                    epoch: 0,
                    pos: p,
                    ord: 0,
                };
                Item::at(0, p, p, cursor)
                    .with_sample(Sample::from_pairs([("id", Value::Int(p as i64))]))
            })
            .collect()
    }

    fn outputs(items: &Chunk) -> Vec<(u64, u64, i64)> {
        items
            .iter()
            .map(|it| {
                let id = it.sample.get("id").and_then(Value::as_int).unwrap();
                (it.cursor.pos, it.cursor.ord, id)
            })
            .collect()
    }

    #[test]
    fn a_positions_outputs_take_ordinals_and_a_resume_drops_those_delivered() {
        let out = chain(None, OnError::Raise, Skip::default())
            .run(items(5))
            .unwrap();
        assert_eq!(
            outputs(&out),
            [
                (0, 0, 0),
                (0, 1, 1),
                (1, 0, 10),
                (3, 0, 30),
                (3, 1, 31),
                (4, 0, 40)
            ]
        );
        assert_ne!(out[0].sub, out[1].sub, "a flat_map's outputs draw apart");
        let delivered = Skip {
            upto: Some(out[3].cursor),
            partial: vec![],
        };
        let rest = chain(None, OnError::Raise, delivered)
            .run(items(5))
            .unwrap();
        assert_eq!(outputs(&rest), [(3, 1, 31), (4, 0, 40)]);
    }

    #[test]
    fn a_failing_sample_keeps_the_outputs_before_it_and_is_named() {
        let (out, err) = chain(Some(3), OnError::Raise, Skip::default()).run_partial(items(5));
        assert_eq!(outputs(&out), [(0, 0, 0), (0, 1, 1), (1, 0, 10)]);
        match err {
            Some(Error::InSample { op, sample, .. }) => {
                assert_eq!((op.as_str(), sample.index), ("fan", 3));
            }
            other => panic!("expected the failure of sample 3, got {other:?}"),
        }
        let skipping = chain(Some(3), OnError::Skip, Skip::default());
        let out = skipping.run(items(5)).unwrap();
        assert_eq!(
            outputs(&out),
            [(0, 0, 0), (0, 1, 1), (1, 0, 10), (4, 0, 40)]
        );
        assert_eq!(skipping.stats.counters(1).skipped.load(Relaxed), 1);
    }

    /// Doubles `id` in two parts, saying the first made `PART_BYTES` bytes: what a fused op
    /// of the ops with ids 1 and 7 does.
    #[derive(Debug)]
    struct TwoParts;
    const PART_BYTES: u64 = 100;

    impl Op for TwoParts {
        fn name(&self) -> &str {
            "first+second"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": "two_parts"})
        }
        fn meta(&self) -> OpMeta {
            OpMeta {
                writes: vec!["id".into()],
                ..OpMeta::opaque(false)
            }
        }
        fn fused_second(&self) -> Option<u64> {
            Some(7)
        }
        fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
            let part = crate::stats::ops::FirstPart::start();
            let id = s.require("id", "two_parts")?.as_int().unwrap_or(0);
            part.end(PART_BYTES);
            s.set("id", Value::Int(id * 2));
            Ok(Emit::One(s))
        }
    }

    #[test]
    fn a_timed_run_records_each_op_and_a_fused_ops_two_parts() {
        let fan = chain(None, OnError::Raise, Skip::default());
        let mut ops = fan.ops.clone();
        ops.push(ChainOp {
            op: Arc::new(TwoParts),
            mode: ElemMode::Map,
            on_error: OnError::Raise,
            op_id: 3,
        });
        let timed = Chain::new(None, ops, 0, fan.stats.clone(), 1, Skip::default());
        // Not timing: nothing is recorded, and a fused op's parts cost a thread-local read.
        timed.run(items(6)).unwrap();
        assert!(timed.stats.op_times().is_none());
        timed.stats.time_ops();
        let out = timed.run(items(6)).unwrap();
        assert_eq!(out.len(), 6); // fan: 0 → 2 outputs, 1 → 1, 2 → 0, ...
        let steps = timed.stats.op_times().unwrap().steps();
        let keys: Vec<Option<u64>> = steps.keys().copied().collect();
        assert_eq!(keys, [Some(1), Some(3), Some(7)]);
        let (fan, first, second) = (&steps[&Some(1)], &steps[&Some(3)], &steps[&Some(7)]);
        assert_eq!((fan.items_in, fan.items_out), (6, 6));
        assert_eq!((first.items_in, first.items_out), (6, 6));
        assert_eq!((second.items_in, second.items_out), (6, 6));
        // The first part handed on what it said it made; the second made the outputs.
        assert_eq!(first.bytes_written, 6 * PART_BYTES);
        assert_eq!(second.bytes_in, first.bytes_out);
        assert_eq!(second.bytes_out, fan.bytes_out);
        // Only the chain's last op counts what it hands on.
        assert_eq!((fan.shaped, first.shaped, second.shaped), (0, 0, 6));
        assert_eq!(second.fields_out, 6);
    }

    #[test]
    fn a_step_is_timed_up_to_its_share_of_items() {
        let times = crate::stats::ops::OpTimes::default();
        assert!(times.wants(Some(1)));
        let t = crate::stats::ops::StepTime {
            items_in: crate::stats::ops::TIMED_ITEMS,
            ..Default::default()
        };
        times.record(Some(1), &t);
        assert!(!times.wants(Some(1)) && times.wants(None));
    }
}
