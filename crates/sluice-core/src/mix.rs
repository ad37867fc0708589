//! `mix(datasets, weights, seed)`: a deterministic weighted interleave of random-access
//! sources, itself a random-access source (so shuffle, shard, repeat and exact resume work on
//! top of it unchanged).
//!
//! Selection is smooth weighted round-robin over integer weights, not coin flips: after any
//! prefix of n positions, each child has been picked within one of n × weight, so realised
//! proportions track the weights tightly even over short windows. The seed sets the starting
//! offsets, so different seeds give different (equally balanced) interleavings.
//!
//! Each child keeps its own order ([`ChildOrder`]: its shuffle, shard and repeat — how Grain
//! and tf.data users mix already-shuffled inputs). The j-th sample the mix takes from a child
//! is the j-th of that child's own sequence, epochs one after another: epoch `j / epoch_len`,
//! position `j % epoch_len` of the child's [`IndexOrder`]. So the mix is a pure function of
//! (position → child, j → source index), both computed without state, and random access and
//! resume stay exact. A child that restarts (`StopPolicy::Restart`) continues into its next
//! epoch — a fresh permutation when it is shuffled.
//!
//! Position → (child, index) is computed from a saved scheduler state every
//! [`CHECKPOINT_EVERY`] positions plus a few steps, so memory is O(len / 256), not O(len).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, SampleRef};
use crate::op::{Emit, OpContext};
use crate::order::{IndexOrder, ShardSpec};
use crate::plan::physical::ChainOp;
use crate::rng::{combine, mix64};
use crate::sample::Sample;
use crate::source::{Source, SourceRef};

/// Positions between saved scheduler states.
pub const CHECKPOINT_EVERY: u64 = 256;
/// Weights are scaled to integers of this resolution (exact, platform-independent).
const SCALE: f64 = 1e6;

/// When a mix ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopPolicy {
    /// As soon as one child would be asked for more than it has.
    #[default]
    FirstExhausted,
    /// When every child is used up; exhausted children drop out and the others keep their
    /// relative weights.
    AllExhausted,
    /// When every child has been used up at least once; exhausted children start over.
    Restart,
}

impl StopPolicy {
    /// The name [`StopPolicy::from_str`] parses.
    pub fn name(self) -> &'static str {
        match self {
            StopPolicy::FirstExhausted => "first_exhausted",
            StopPolicy::AllExhausted => "all_exhausted",
            StopPolicy::Restart => "restart",
        }
    }
}

impl std::str::FromStr for StopPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "first_exhausted" => Ok(StopPolicy::FirstExhausted),
            "all_exhausted" => Ok(StopPolicy::AllExhausted),
            "restart" => Ok(StopPolicy::Restart),
            other => Err(Error::invalid(format!(
                "stop must be 'first_exhausted', 'all_exhausted' or 'restart', got '{other}'"
            ))),
        }
    }
}

/// One mixed dataset: a random-access source, its own order, and the deterministic maps
/// applied to it.
#[derive(Clone)]
pub struct MixChild {
    pub source: SourceRef,
    pub ops: Vec<ChainOp>,
    pub order: ChildOrder,
}

impl MixChild {
    /// A child read in its source's order, once.
    pub fn new(source: SourceRef, ops: Vec<ChainOp>) -> Self {
        MixChild {
            source,
            ops,
            order: ChildOrder::default(),
        }
    }
}

impl fmt::Debug for MixChild {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MixChild")
            .field("source", &self.source.name())
            .field(
                "ops",
                &self.ops.iter().map(|o| o.op.name()).collect::<Vec<_>>(),
            )
            .field("order", &self.order)
            .finish()
    }
}

/// A child's own index steps (`shuffle`, `shard`, `repeat` before it was mixed): the order
/// it has when iterated alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChildOrder {
    /// Permutation seed (reseeded per child epoch), if shuffled.
    pub shuffle: Option<u64>,
    /// One permutation for every child epoch (`reshuffle_each_epoch=False`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fixed_shuffle: bool,
    pub shard: Option<ShardSpec>,
    /// Epochs of the child; `None`: forever (only with a finite child to end the mix).
    pub epochs: Option<u64>,
}

impl Default for ChildOrder {
    fn default() -> Self {
        ChildOrder {
            shuffle: None,
            fixed_shuffle: false,
            shard: None,
            epochs: Some(1),
        }
    }
}

impl ChildOrder {
    fn index_order(&self, len: u64) -> IndexOrder {
        IndexOrder {
            len,
            shuffle: self.shuffle,
            fixed_shuffle: self.fixed_shuffle,
            shard: self.shard,
            part: None,
            epochs: self.epochs,
            first_epoch: 0,
            elastic: None,
        }
    }
}

/// Smooth weighted round-robin state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sched {
    current: Vec<i64>,
    counts: Vec<u64>,
}

/// The mixed source.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_core::mix::{MixChild, MixSource, StopPolicy};
/// let child = |n| MixChild::new(Arc::new(RangeSource::new(n)), vec![]);
/// let m = MixSource::new(vec![child(100), child(100)], &[3.0, 1.0], 0, StopPolicy::FirstExhausted)?;
/// // Child 0 runs out after ~133 positions (100 of them are its).
/// assert!((132..=134).contains(&m.len().unwrap()));
/// let first: Vec<i64> = (0..8).map(|p| m.get(p).unwrap().get("id").unwrap().as_int().unwrap()).collect();
/// assert_eq!(first.len(), 8);
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Clone)]
pub struct MixSource {
    children: Vec<MixChild>,
    /// Each child's order over its source.
    orders: Vec<IndexOrder>,
    /// Samples each child has (`u64::MAX`: it repeats forever).
    lens: Vec<u64>,
    weights: Vec<i64>,
    seed: u64,
    stop: StopPolicy,
    len: u64,
    checkpoints: Arc<Vec<Sched>>,
}

impl fmt::Debug for MixSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MixSource")
            .field("children", &self.children)
            .field("weights", &self.weights)
            .field("stop", &self.stop)
            .field("len", &self.len)
            .finish()
    }
}

impl MixSource {
    /// Mixes `children` with `weights` (any positive numbers; normalised).
    pub fn new(
        children: Vec<MixChild>,
        weights: &[f64],
        seed: u64,
        stop: StopPolicy,
    ) -> Result<Self> {
        if children.is_empty() {
            return Err(Error::invalid("mix needs at least one dataset"));
        }
        if weights.len() != children.len() {
            return Err(Error::invalid(format!(
                "mix: {} datasets but {} weights",
                children.len(),
                weights.len()
            )));
        }
        if weights.iter().any(|w| !w.is_finite() || *w <= 0.0) {
            return Err(Error::invalid("mix: weights must be positive numbers"));
        }
        let mut lens = Vec::with_capacity(children.len());
        let mut orders = Vec::with_capacity(children.len());
        let cores = crate::cores::cores();
        for (i, c) in children.iter().enumerate() {
            // A blocking child (sort, groupby) runs here; its errors are the ones to report.
            c.source.prepare(cores)?;
            let Some(n) = c.source.len().filter(|_| c.source.random_access()) else {
                return Err(Error::invalid(format!(
                    "mix needs random-access datasets; '{}' is a stream",
                    c.source.name()
                )));
            };
            let order = c.order.index_order(n);
            lens.push(match order.epochs {
                Some(e) => e.saturating_mul(order.epoch_len()),
                None if order.epoch_len() == 0 => 0,
                None => u64::MAX,
            });
            orders.push(order);
            if let Some(o) = c
                .ops
                .iter()
                .find(|o| o.op.meta().random || o.mode != crate::ElemMode::Map)
            {
                return Err(Error::invalid(format!(
                    "mix: '{}' is random, a filter or a flat_map; apply it after mix()",
                    o.op.name()
                )));
            }
            if lens[i] == u64::MAX && stop != StopPolicy::FirstExhausted {
                return Err(Error::invalid(format!(
                    "mix: dataset {i} repeats forever, so stop='{}' would never end the mix; \
                     give its repeat() a count, or use stop='first_exhausted' with a finite \
                     dataset",
                    stop.name()
                )));
            }
        }
        if lens.iter().all(|&n| n == u64::MAX) {
            return Err(Error::invalid(
                "mix: every dataset repeats forever, so the mix would never end; give one \
                 repeat() a count (or none), or repeat() the mix instead",
            ));
        }
        let total: f64 = weights.iter().sum();
        let weights: Vec<i64> = weights
            .iter()
            .map(|w| ((w / total) * SCALE).round().max(1.0) as i64)
            .collect();
        let mut m = MixSource {
            children,
            orders,
            lens,
            weights,
            seed,
            stop,
            len: 0,
            checkpoints: Arc::new(Vec::new()),
        };
        m.plan();
        Ok(m)
    }

    fn start(&self) -> Sched {
        let total: i64 = self.weights.iter().sum();
        Sched {
            current: (0..self.weights.len())
                .map(|k| (mix64(combine(self.seed, k as u64)) % total as u64) as i64)
                .collect(),
            counts: vec![0; self.weights.len()],
        }
    }

    /// One scheduling step: the child picked and its use count before this pick, or `None`
    /// when the mix has ended.
    fn step(&self, s: &mut Sched) -> Option<(usize, u64)> {
        let exhausted = |k: usize, s: &Sched| s.counts[k] >= self.lens[k];
        let live = |k: usize, s: &Sched| match self.stop {
            StopPolicy::AllExhausted => !exhausted(k, s),
            _ => self.lens[k] > 0,
        };
        if self.stop == StopPolicy::Restart && (0..self.lens.len()).all(|k| exhausted(k, s)) {
            return None;
        }
        let mut total = 0;
        let mut best: Option<usize> = None;
        for k in 0..self.weights.len() {
            if !live(k, s) {
                continue;
            }
            s.current[k] += self.weights[k];
            total += self.weights[k];
            if best.is_none_or(|b| s.current[k] > s.current[b]) {
                best = Some(k);
            }
        }
        let k = best?;
        if self.stop == StopPolicy::FirstExhausted && exhausted(k, s) {
            return None;
        }
        s.current[k] -= total;
        let j = s.counts[k];
        s.counts[k] += 1;
        Some((k, j))
    }

    /// Runs the scheduler once to find the length, saving its state periodically.
    fn plan(&mut self) {
        let mut s = self.start();
        let mut saved = Vec::new();
        let mut n = 0u64;
        loop {
            if n.is_multiple_of(CHECKPOINT_EVERY) {
                saved.push(s.clone());
            }
            if self.step(&mut s).is_none() {
                break;
            }
            n += 1;
        }
        self.len = n;
        self.checkpoints = Arc::new(saved);
    }

    /// Which child and which of its source's samples position `p` reads.
    pub fn locate(&self, p: u64) -> Result<(usize, u64)> {
        if p >= self.len {
            return Err(Error::invalid(format!(
                "mix: position {p} is past the end ({})",
                self.len
            )));
        }
        let mut s = self.checkpoints[(p / CHECKPOINT_EVERY) as usize].clone();
        for _ in 0..p % CHECKPOINT_EVERY {
            self.step(&mut s);
        }
        let (k, j) = self
            .step(&mut s)
            .ok_or_else(|| Error::Internal("mix schedule ended early".into()))?;
        Ok((k, self.child_index(k, j)))
    }

    /// The source index of the `j`-th sample child `k` gives: position `j` of its own order,
    /// epochs one after another (past its last epoch when it restarts).
    fn child_index(&self, k: usize, j: u64) -> u64 {
        let order = &self.orders[k];
        let per_epoch = order.epoch_len().max(1);
        order.position(j / per_epoch, j % per_epoch).source_index
    }
}

/// Applies deterministic maps to sample `index` of `source` (as a cache or mix reads it).
pub(crate) fn read_mapped(source: &SourceRef, ops: &[ChainOp], index: u64) -> Result<Sample> {
    let mut s = source.get(index)?;
    for o in ops {
        let cx = OpContext {
            seed: 0,
            epoch: 0,
            index,
            sub: 0,
            op_id: o.op_id,
        };
        let path = s.path();
        s = match o.op.apply(s, &cx) {
            Ok(Emit::One(s)) => s,
            Ok(_) => {
                return Err(Error::Internal(format!(
                    "op '{}' did not return exactly one sample",
                    o.op.name()
                )))
            }
            Err(e) => {
                return Err(Error::InSample {
                    op: o.op.name().to_string(),
                    sample: SampleRef {
                        epoch: 0,
                        index,
                        path,
                    },
                    source: Box::new(e),
                })
            }
        };
    }
    Ok(s)
}

impl Source for MixSource {
    fn name(&self) -> &str {
        "mix"
    }
    fn spec(&self) -> serde_json::Value {
        let children: Vec<serde_json::Value> = self
            .children
            .iter()
            .map(|c| {
                let ops: Vec<serde_json::Value> = c.ops.iter().map(|o| o.op.spec()).collect();
                let mut spec = serde_json::json!({"source": c.source.spec(), "ops": ops});
                // Only when not the plain order, so fingerprints of earlier mixes stand.
                if c.order != ChildOrder::default() {
                    spec["order"] = serde_json::to_value(c.order).unwrap_or_default();
                }
                spec
            })
            .collect();
        serde_json::json!({"source": "mix", "children": children, "weights": self.weights,
                           "seed": self.seed, "stop": self.stop})
    }
    fn len(&self) -> Option<u64> {
        Some(self.len)
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let (k, j) = self.locate(index)?;
        let c = &self.children[k];
        read_mapped(&c.source, &c.ops, j)
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::RangeSource;

    fn child(n: u64) -> MixChild {
        MixChild::new(Arc::new(RangeSource::new(n)), vec![])
    }

    fn ordered(n: u64, order: ChildOrder) -> MixChild {
        MixChild { order, ..child(n) }
    }

    /// Source indices of child `k` in the order the mix reads them.
    fn taken(m: &MixSource, k: usize) -> Vec<u64> {
        picks(m)
            .into_iter()
            .filter(|p| p.0 == k)
            .map(|p| p.1)
            .collect()
    }

    fn picks(m: &MixSource) -> Vec<(usize, u64)> {
        (0..m.len().unwrap())
            .map(|p| m.locate(p).unwrap())
            .collect()
    }

    #[test]
    fn proportions_track_the_weights_at_every_prefix() {
        let w = [0.5, 0.3, 0.2];
        let m = MixSource::new(vec![child(10_000); 3], &w, 7, StopPolicy::FirstExhausted).unwrap();
        let mut counts = [0f64; 3];
        for (n, (k, _)) in picks(&m).into_iter().enumerate() {
            counts[k] += 1.0;
            for i in 0..3 {
                let ideal = (n + 1) as f64 * w[i];
                assert!(
                    (counts[i] - ideal).abs() <= 1.5,
                    "n={n} child {i}: {counts:?}"
                );
            }
        }
    }

    #[test]
    fn each_child_index_is_used_once_in_order_and_lengths_follow_the_policy() {
        let kids = || vec![child(30), child(10)];
        let first = MixSource::new(kids(), &[1.0, 1.0], 1, StopPolicy::FirstExhausted).unwrap();
        assert!(
            (19..=21).contains(&first.len().unwrap()),
            "{}",
            first.len().unwrap()
        );
        let all = MixSource::new(kids(), &[1.0, 1.0], 1, StopPolicy::AllExhausted).unwrap();
        assert_eq!(all.len(), Some(40));
        let mut seen: Vec<(usize, u64)> = picks(&all);
        let per_child: Vec<Vec<u64>> = (0..2)
            .map(|k| seen.iter().filter(|p| p.0 == k).map(|p| p.1).collect())
            .collect();
        assert_eq!(per_child[0], (0..30).collect::<Vec<_>>());
        assert_eq!(per_child[1], (0..10).collect::<Vec<_>>());
        let restart = MixSource::new(kids(), &[1.0, 1.0], 1, StopPolicy::Restart).unwrap();
        assert!((59..=61).contains(&restart.len().unwrap()));
        seen = picks(&restart);
        assert!(seen.iter().filter(|p| p.0 == 1).all(|p| p.1 < 10));
    }

    #[test]
    fn seeds_change_the_order_but_not_the_balance() {
        let mk = |seed| {
            MixSource::new(
                vec![child(500); 3],
                &[0.5, 0.3, 0.2],
                seed,
                StopPolicy::AllExhausted,
            )
            .unwrap()
        };
        let (a, b) = (mk(1), mk(2));
        assert_eq!(picks(&a), picks(&mk(1)));
        let head = |m: &MixSource| (0..50).map(|p| m.locate(p).unwrap().0).collect::<Vec<_>>();
        assert_ne!(head(&a), head(&b));
        for m in [&a, &b] {
            let zeros = head(m).iter().filter(|&&k| k == 0).count();
            assert!((24..=26).contains(&zeros), "{zeros}");
        }
    }

    #[test]
    fn each_child_keeps_its_own_shuffle_shard_and_repeat() {
        let shuffled = ChildOrder {
            shuffle: Some(1),
            ..Default::default()
        };
        let sharded = ChildOrder {
            shuffle: Some(2),
            shard: Some(ShardSpec::try_new(1, 3, true).unwrap()),
            epochs: Some(2),
            ..Default::default()
        };
        let m = MixSource::new(
            vec![ordered(50, shuffled), ordered(30, sharded)],
            &[1.0, 1.0],
            3,
            StopPolicy::AllExhausted,
        )
        .unwrap();
        assert_eq!(m.len(), Some(50 + 2 * 10));
        let alone = |o: ChildOrder, n: u64| {
            let order = o.index_order(n);
            (0..o.epochs.unwrap())
                .flat_map(|e| (0..order.epoch_len()).map(move |p| (e, p)))
                .map(|(e, p)| order.position(e, p).source_index)
                .collect::<Vec<_>>()
        };
        assert_eq!(taken(&m, 0), alone(shuffled, 50));
        assert_eq!(taken(&m, 1), alone(sharded, 30));
        assert_ne!(taken(&m, 0), (0..50).collect::<Vec<_>>(), "shuffled");
        // Its two epochs are two different rank-1 thirds (the shard strides over each
        // epoch's permutation), each without repeats.
        let two = taken(&m, 1);
        assert_ne!(two[..10], two[10..]);
        for epoch in two.chunks(10) {
            let mut e = epoch.to_vec();
            e.sort_unstable();
            e.dedup();
            assert_eq!(e.len(), 10);
        }
    }

    #[test]
    fn a_restarted_child_reshuffles_and_a_forever_child_needs_a_finite_one() {
        let shuffled = ChildOrder {
            shuffle: Some(5),
            ..Default::default()
        };
        let m = MixSource::new(
            vec![ordered(10, shuffled), child(40)],
            &[1.0, 1.0],
            0,
            StopPolicy::Restart,
        )
        .unwrap();
        let a = taken(&m, 0);
        assert!(a.len() >= 30, "{}", a.len());
        assert_ne!(a[..10], a[10..20], "the second pass is another permutation");
        let forever = ChildOrder {
            epochs: None,
            ..shuffled
        };
        let m = MixSource::new(
            vec![ordered(10, forever), child(40)],
            &[1.0, 1.0],
            0,
            StopPolicy::FirstExhausted,
        )
        .unwrap();
        assert_eq!(taken(&m, 1).len(), 40);
        assert!(taken(&m, 0).len() >= 39);
        for stop in [StopPolicy::AllExhausted, StopPolicy::Restart] {
            let e = MixSource::new(vec![ordered(10, forever), child(4)], &[1.0, 1.0], 0, stop)
                .unwrap_err();
            assert!(e.to_string().contains("repeats forever"), "{e}");
        }
        let e = MixSource::new(
            vec![ordered(10, forever)],
            &[1.0],
            0,
            StopPolicy::FirstExhausted,
        )
        .unwrap_err();
        assert!(e.to_string().contains("never end"), "{e}");
    }

    #[test]
    fn bad_arguments_are_clear_errors() {
        assert!(MixSource::new(vec![], &[], 0, StopPolicy::Restart).is_err());
        assert!(MixSource::new(vec![child(3)], &[1.0, 2.0], 0, StopPolicy::Restart).is_err());
        assert!(MixSource::new(vec![child(3)], &[-1.0], 0, StopPolicy::Restart).is_err());
        assert!("sometimes".parse::<StopPolicy>().is_err());
        let m = MixSource::new(vec![child(3)], &[1.0], 0, StopPolicy::Restart).unwrap();
        assert!(m.locate(3).is_err());
    }
}
