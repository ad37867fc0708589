//! How many outputs a pipeline yields, read off its logical plan without running it
//! (`len(ds)`). Index steps count as the lowering folds them: `shuffle` keeps the length,
//! `shard` applies per epoch wherever it stands, `repeat(e)` multiplies what comes before it;
//! `batch` rounds (up, or down with `drop_last`) over what reaches it — per epoch when the
//! repeat comes after it, across epochs when before; `take(n)` caps. Steps whose output
//! count depends on the data (`filter`, `flat_map`, `map(on_error="skip")`, `map_batches`,
//! `pack`) make it unknown.

use std::fmt;

use crate::plan::logical::{ElemMode, LogicalPlan, OnError};

/// The number of outputs of a pipeline, as far as its plan tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Length {
    /// Exactly this many outputs (batches after `batch`).
    Known(u64),
    /// The pipeline repeats forever.
    Infinite,
    /// Only running the pipeline tells; the text says which step makes it so.
    Unknown(String),
}

impl Length {
    /// The count, when known.
    pub fn known(&self) -> Option<u64> {
        match self {
            Length::Known(n) => Some(*n),
            _ => None,
        }
    }
}

impl fmt::Display for Length {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Length::Known(n) => write!(f, "{n}"),
            Length::Infinite => write!(
                f,
                "the pipeline repeats forever (repeat() without epochs): it has no length; \
                 take(n) after the repeat bounds it"
            ),
            Length::Unknown(why) => write!(
                f,
                "the number of outputs is not known without running the pipeline: {why}; \
                 count() runs it and counts them"
            ),
        }
    }
}

impl LogicalPlan {
    /// The number of outputs this pipeline yields, from the plan alone (nothing runs; a
    /// blocking source answers from its input's plan, see [`crate::Source::planned_len`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use sluice_core::*;
    /// use sluice_core::plan::length::Length;
    /// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(10)))));
    /// let batched = LogicalPlan::Batch(BatchNode::try_new(src, 4, false)?);
    /// assert_eq!(batched.length(), Length::Known(3));
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn length(&self) -> Length {
        let mut nodes: Vec<&LogicalPlan> = vec![self];
        let mut cur = self;
        while let Some(input) = cur.input() {
            cur = input.as_ref();
            nodes.push(cur);
        }
        nodes.reverse();
        let source = self.source();
        let Some(total) = source.planned_len() else {
            return Length::Unknown(format!(
                "'{}' has no length before it is read",
                source.name()
            ));
        };
        // A shard applies to every epoch, wherever it stands (it folds into the source order);
        // a second one splits the first one's share.
        let mut per_epoch = total;
        for node in &nodes {
            if let LogicalPlan::Shard(s) = node {
                if !source.random_access() {
                    return Length::Unknown(format!(
                        "shard() of the stream '{}' deals whole files to ranks",
                        source.name()
                    ));
                }
                per_epoch = s.shard.len(per_epoch);
            }
        }
        let mut out = Length::Known(per_epoch);
        for node in &nodes[1..] {
            out = step(node, out);
        }
        out
    }
}

/// The length after `node`, given the length of its input.
fn step(node: &LogicalPlan, input: Length) -> Length {
    let changes = |what: &str| Length::Unknown(format!("{} {what}", node.describe()));
    match (node, input) {
        (_, Length::Unknown(why)) => Length::Unknown(why),
        (LogicalPlan::Map(m), _) if m.mode != ElemMode::Map => {
            changes("changes the number of samples")
        }
        (LogicalPlan::Map(m), _) if m.on_error == OnError::Skip => {
            changes("drops the samples it fails on")
        }
        (LogicalPlan::MapBatches(_), _) => changes("may return batches of another size"),
        (LogicalPlan::Pack(_), _) => changes("makes as many blocks as the tokens fill"),
        (LogicalPlan::Take(t), Length::Infinite) => Length::Known(t.n),
        (LogicalPlan::Take(t), Length::Known(n)) => Length::Known(n.min(t.n)),
        (LogicalPlan::Repeat(r), Length::Known(n)) => match r.epochs {
            None => Length::Infinite,
            Some(e) => n
                .checked_mul(e)
                .map_or_else(|| changes("overflows a 64-bit count"), Length::Known),
        },
        (LogicalPlan::Batch(b), Length::Known(n)) => {
            let size = b.size as u64;
            Length::Known(if b.drop_last {
                n / size
            } else {
                n.div_ceil(size)
            })
        }
        // Shuffles, shards (counted per epoch above), maps, prefetch and cache keep it.
        (_, other) => other,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::plan::logical::*;
    use crate::source::{RangeSource, SourceRef};

    use crate::plan::test_ops::Keep;

    type Node = Arc<LogicalPlan>;

    fn range(n: u64) -> Node {
        let src: SourceRef = Arc::new(RangeSource::new(n));
        Arc::new(LogicalPlan::Source(SourceNode::new(src)))
    }
    fn map(input: Node, mode: ElemMode, on_error: OnError) -> Node {
        let op = Arc::new(Keep);
        Arc::new(LogicalPlan::Map(
            MapNode::try_new(input, op, mode, on_error, None).unwrap(),
        ))
    }
    fn batch(input: Node, size: usize, drop_last: bool) -> Node {
        Arc::new(LogicalPlan::Batch(
            BatchNode::try_new(input, size, drop_last).unwrap(),
        ))
    }
    fn repeat(input: Node, epochs: Option<u64>) -> Node {
        Arc::new(LogicalPlan::Repeat(
            RepeatNode::try_new(input, epochs).unwrap(),
        ))
    }
    fn shard(input: Node, rank: u64, world: u64, equal: bool) -> Node {
        Arc::new(LogicalPlan::Shard(
            ShardNode::try_new(input, rank, world, equal).unwrap(),
        ))
    }
    fn take(input: Node, n: u64) -> Node {
        Arc::new(LogicalPlan::Take(TakeNode { input, n }))
    }

    #[test]
    fn batches_round_up_or_down() {
        assert_eq!(batch(range(10), 4, false).length(), Length::Known(3));
        assert_eq!(batch(range(10), 4, true).length(), Length::Known(2));
        assert_eq!(batch(range(0), 4, false).length(), Length::Known(0));
        assert_eq!(batch(range(8), 4, false).length(), Length::Known(2));
    }

    #[test]
    fn repeat_multiplies_and_batches_per_epoch_only_when_it_comes_after() {
        // 10 per epoch: batch then repeat gives 3 batches an epoch (the last one short) ...
        assert_eq!(
            repeat(batch(range(10), 4, false), Some(2)).length(),
            Length::Known(6)
        );
        // ... repeat then batch spans epochs: 20 samples in 5 batches.
        assert_eq!(
            batch(repeat(range(10), Some(2)), 4, false).length(),
            Length::Known(5)
        );
        assert_eq!(repeat(range(10), None).length(), Length::Infinite);
        assert_eq!(
            take(batch(repeat(range(10), None), 4, false), 7).length(),
            Length::Known(7)
        );
        assert_eq!(take(range(10), 70).length(), Length::Known(10));
    }

    #[test]
    fn shards_count_per_epoch_wherever_they_stand() {
        assert_eq!(shard(range(10), 0, 3, true).length(), Length::Known(3));
        assert_eq!(shard(range(10), 0, 3, false).length(), Length::Known(4));
        assert_eq!(shard(range(10), 2, 3, false).length(), Length::Known(3));
        assert_eq!(shard(range(2), 2, 3, true).length(), Length::Known(0));
        // repeat(2) then shard(0, 2, equal=False) of 5: 3 a epoch, not half of 10.
        assert_eq!(
            shard(repeat(range(5), Some(2)), 0, 2, false).length(),
            Length::Known(6)
        );
    }

    #[test]
    fn a_second_shard_splits_the_first_ones_share() {
        // range(11).shard(0, 2): 5 a epoch; then worker 0 of 2 in runs of 2: [0,1] and [4].
        let spec = crate::ShardSpec::try_new(0, 2, false)
            .unwrap()
            .with_block(2)
            .unwrap();
        let nested = Arc::new(LogicalPlan::Shard(
            ShardNode::with_spec(shard(range(11), 0, 2, true), spec).unwrap(),
        ));
        assert_eq!(nested.length(), Length::Known(3));
        assert_eq!(batch(nested, 2, false).length(), Length::Known(2));
    }

    #[test]
    fn data_dependent_steps_make_it_unknown_and_say_which() {
        let f = map(range(10), ElemMode::Filter, OnError::Raise);
        match batch(f, 2, false).length() {
            Length::Unknown(why) => assert!(why.contains("filter(keep)"), "{why}"),
            other => panic!("{other:?}"),
        }
        let skip = map(range(10), ElemMode::Map, OnError::Skip);
        assert!(matches!(skip.length(), Length::Unknown(w) if w.contains("fails on")));
        let flat = map(range(10), ElemMode::FlatMap, OnError::Raise);
        assert!(matches!(take(flat, 3).length(), Length::Unknown(_)));
        let forever = map(repeat(range(3), None), ElemMode::Filter, OnError::Raise);
        assert!(matches!(take(forever, 3).length(), Length::Unknown(_)));
        let kept = map(range(10), ElemMode::Map, OnError::Raise);
        assert_eq!(kept.length(), Length::Known(10));
        let msg = Length::Unknown("x".into()).to_string();
        assert!(msg.contains("count()"), "{msg}");
    }
}
