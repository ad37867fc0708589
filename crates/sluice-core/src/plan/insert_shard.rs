//! Where a `shard()` can go in a pipeline, and the pipeline with shards put there: what
//! `Dataset::split` and the PyTorch adapter (one shard per rank, then per DataLoader worker)
//! build their parts from.
//!
//! A shard belongs where the pipeline still has random access, so everything after it (a
//! filter, a batch) runs on the shard alone and the parts are disjoint and equal. That place is
//! found on the logical chain: a blocking step (sort, groupby, repartition) is the chain's
//! source, its input a separate plan, so a shard never goes before one (each rank would sort
//! only its share).

use std::sync::Arc;

use crate::error::Result;
use crate::order::ShardSpec;
use crate::plan::logical::{ElemMode, LogicalPlan, OnError, ShardNode};

/// Where [`insert_shards`] puts its shards.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_core::plan::insert_shard::{split_point, SplitPoint};
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(8)))));
/// let shuffled = Arc::new(LogicalPlan::Shuffle(ShuffleNode::try_new(src, None)?));
/// let batched = Arc::new(LogicalPlan::Batch(BatchNode::try_new(shuffled, 4, false)?));
/// assert_eq!(split_point(&batched), SplitPoint { at: 2, sharded: false, block: Some(4) });
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPoint {
    /// Nodes of the chain (source first) before the insert point: the source and the steps
    /// after it that keep positions.
    pub at: usize,
    /// One of those is a shard: the pipeline is sharded already.
    pub sharded: bool,
    /// The size of a batch right after the insert point: dealing runs of that many positions
    /// gives each part the whole batches a single consumer would make.
    pub block: Option<u64>,
}

/// Whether sample `i` after `node` is still sample `i`'s (or a permutation's) image: a step
/// that moves or deals positions, or a 1:1 map that cannot drop a sample.
fn keeps_positions(node: &LogicalPlan) -> bool {
    match node {
        LogicalPlan::Shuffle(_)
        | LogicalPlan::Shard(_)
        | LogicalPlan::Repeat(_)
        | LogicalPlan::Prefetch(_) => true,
        LogicalPlan::Map(m) => m.mode == ElemMode::Map && m.on_error != OnError::Skip,
        _ => false,
    }
}

/// Where a shard can go in `plan`: after its source and the steps that keep positions.
/// See [`SplitPoint`].
pub fn split_point(plan: &Arc<LogicalPlan>) -> SplitPoint {
    let chain = plan.chain();
    let at = 1 + chain[1..].iter().take_while(|n| keeps_positions(n)).count();
    // A shard before a blocking step (a sort of one rank's shard) counts too: sharding
    // again after it would leave each rank a part of its part.
    let sharded = chain[..at]
        .iter()
        .any(|n| matches!(**n, LogicalPlan::Shard(_)))
        || chain[0]
            .source()
            .input()
            .is_some_and(|i| sharded_anywhere(&i));
    let block = match chain.get(at).map(|n| &**n) {
        Some(LogicalPlan::Batch(b)) => Some(b.size as u64),
        _ => None,
    };
    SplitPoint { at, sharded, block }
}

/// Whether `plan`, or the input of a blocking source it reads, has a shard step.
fn sharded_anywhere(plan: &Arc<LogicalPlan>) -> bool {
    let chain = plan.chain();
    chain.iter().any(|n| matches!(**n, LogicalPlan::Shard(_)))
        || chain[0]
            .source()
            .input()
            .is_some_and(|i| sharded_anywhere(&i))
}

/// `plan` with a shard node for each of `shards` (in order: a rank's, then a worker's within
/// it) at its [`split_point`]. The steps after it are the same nodes reading the shards (their
/// op ids, and so their random draws, unchanged).
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_core::plan::insert_shard::insert_shards;
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(8)))));
/// let batched = Arc::new(LogicalPlan::Batch(BatchNode::try_new(src, 2, false)?));
/// let part = insert_shards(&batched, &[ShardSpec::try_new(1, 2, true)?])?;
/// assert_eq!(part.input().unwrap().describe(), "shard(1, 2, equal=true)");
/// assert_eq!(part.describe(), "batch(2, drop_last=false)");
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn insert_shards(plan: &Arc<LogicalPlan>, shards: &[ShardSpec]) -> Result<Arc<LogicalPlan>> {
    if shards.is_empty() {
        return Ok(plan.clone());
    }
    let chain = plan.chain();
    let at = split_point(plan).at;
    let mut top = chain[at - 1].clone();
    for spec in shards {
        top = Arc::new(LogicalPlan::Shard(ShardNode::with_spec(top, *spec)?));
    }
    // A shard changes neither the fields nor random access, so the later nodes' checks hold.
    for node in &chain[at..] {
        top = Arc::new(node.with_input(top));
    }
    Ok(top)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::logical::*;
    use crate::source::{RangeSource, Source, SourceRef};
    use crate::Sample;

    use crate::plan::test_ops::Keep;

    /// Stands in for a blocking step's source (sluice-relational's): a random-access source
    /// whose input is a plan of its own.
    #[derive(Debug, Clone)]
    struct Sorted(Node);
    impl Source for Sorted {
        fn name(&self) -> &str {
            "sort"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"input": self.0.to_string()})
        }
        fn len(&self) -> Option<u64> {
            self.0.source().len()
        }
        fn get(&self, index: u64) -> Result<Sample> {
            self.0.source().get(index)
        }
        fn clone_arc(&self) -> SourceRef {
            Arc::new(self.clone())
        }
    }

    type Node = Arc<LogicalPlan>;

    fn source(src: SourceRef) -> Node {
        Arc::new(LogicalPlan::Source(SourceNode::new(src)))
    }
    fn range(n: u64) -> Node {
        source(Arc::new(RangeSource::new(n)))
    }
    fn map(input: Node, mode: ElemMode, on_error: OnError) -> Node {
        Arc::new(LogicalPlan::Map(
            MapNode::try_new(input, Arc::new(Keep), mode, on_error, None).unwrap(),
        ))
    }
    fn shuffle(input: Node) -> Node {
        Arc::new(LogicalPlan::Shuffle(
            ShuffleNode::try_new(input, Some(1)).unwrap(),
        ))
    }
    fn shard(input: Node, rank: u64, world: u64) -> Node {
        Arc::new(LogicalPlan::Shard(
            ShardNode::try_new(input, rank, world, true).unwrap(),
        ))
    }
    fn batch(input: Node, size: usize) -> Node {
        Arc::new(LogicalPlan::Batch(
            BatchNode::try_new(input, size, false).unwrap(),
        ))
    }
    /// The chain as one line, the source by its name.
    fn steps(plan: &Node) -> String {
        plan.chain()
            .iter()
            .map(|n| match &**n {
                LogicalPlan::Source(s) => s.source.name().to_string(),
                other => other.describe(),
            })
            .collect::<Vec<_>>()
            .join(" -> ")
    }
    fn rank(r: u64, w: u64) -> ShardSpec {
        ShardSpec::try_new(r, w, true).unwrap()
    }
    fn op_ids(plan: &Node) -> Vec<u64> {
        plan.chain()
            .iter()
            .filter_map(|n| match &**n {
                LogicalPlan::Map(m) => Some(m.op_id),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn shards_after_shuffle_and_maps_before_the_batch() {
        let plan = batch(map(shuffle(range(10)), ElemMode::Map, OnError::Raise), 4);
        let point = split_point(&plan);
        assert_eq!(
            point,
            SplitPoint {
                at: 3,
                sharded: false,
                block: Some(4)
            }
        );
        let part = insert_shards(&plan, &[rank(1, 2)]).unwrap();
        assert_eq!(
            steps(&part),
            "range -> shuffle(seed=Some(1)) -> map(keep) -> shard(1, 2, equal=true) \
             -> batch(4, drop_last=false)"
        );
        assert_eq!(op_ids(&part), op_ids(&plan));
        assert_eq!(part.length().known(), Some(2));
    }

    #[test]
    fn a_map_that_may_skip_samples_stops_the_cut() {
        let skip = map(shuffle(range(10)), ElemMode::Map, OnError::Skip);
        let plan = map(skip, ElemMode::Map, OnError::Raise);
        let point = split_point(&plan);
        assert_eq!((point.at, point.block), (2, None));
        let part = insert_shards(&plan, &[rank(0, 2)]).unwrap();
        assert_eq!(
            steps(&part),
            "range -> shuffle(seed=Some(1)) -> shard(0, 2, equal=true) -> map(keep) \
             on_error=skip -> map(keep)"
        );
        // The maps keep the op ids of the pipeline as written: the same random draws.
        assert_eq!(op_ids(&part), op_ids(&plan));
    }

    #[test]
    fn a_filter_stops_the_cut() {
        let plan = batch(map(range(9), ElemMode::Filter, OnError::Raise), 2);
        assert_eq!(split_point(&plan).at, 1);
        let part = insert_shards(&plan, &[rank(2, 3)]).unwrap();
        assert_eq!(
            steps(&part),
            "range -> shard(2, 3, equal=true) -> filter(keep) -> batch(2, drop_last=false)"
        );
        let flat = map(range(9), ElemMode::FlatMap, OnError::Raise);
        assert_eq!(split_point(&flat).at, 1);
    }

    #[test]
    fn shards_after_a_blocking_source_not_inside_its_input() {
        let input = batch(map(range(6), ElemMode::Filter, OnError::Raise), 2);
        let plan = batch(shuffle(source(Arc::new(Sorted(input)))), 3);
        assert_eq!(
            split_point(&plan),
            SplitPoint {
                at: 2,
                sharded: false,
                block: Some(3)
            }
        );
        let part = insert_shards(&plan, &[rank(0, 2)]).unwrap();
        assert_eq!(
            steps(&part),
            "sort -> shuffle(seed=Some(1)) -> shard(0, 2, equal=true) -> batch(3, drop_last=false)"
        );
        // The blocking source itself is shared, not rebuilt: its input runs once.
        assert!(Arc::ptr_eq(&part.chain()[0], &plan.chain()[0]));
    }

    #[test]
    fn a_shard_before_the_cut_is_reported() {
        let plan = map(
            shard(shuffle(range(8)), 0, 2),
            ElemMode::Filter,
            OnError::Raise,
        );
        let point = split_point(&plan);
        assert_eq!((point.at, point.sharded, point.block), (3, true, None));
        // A shard after a map that may skip samples is past the cut: it does not count.
        let late = shard(map(range(8), ElemMode::Map, OnError::Skip), 0, 2);
        assert_eq!(split_point(&late).at, 1);
        assert!(!split_point(&late).sharded);
    }

    #[test]
    fn a_rank_then_a_worker_in_blocks() {
        let plan = batch(shuffle(range(20)), 3);
        let block = split_point(&plan).block.unwrap();
        let worker = ShardSpec::try_new(1, 2, false)
            .unwrap()
            .with_block(block)
            .unwrap();
        let part = insert_shards(&plan, &[rank(1, 2), worker]).unwrap();
        assert_eq!(
            steps(&part),
            "range -> shuffle(seed=Some(1)) -> shard(1, 2, equal=true) \
             -> shard(1, 2, equal=false, block=3) -> batch(3, drop_last=false)"
        );
        // Rank 1 has 10 positions, dealt [3, 3, 3, 1] to workers 0, 1, 0, 1: 4 of them here.
        assert_eq!(part.input().unwrap().length().known(), Some(4));
    }

    #[test]
    fn a_bare_source_gets_the_shard_on_top() {
        let plan = range(5);
        assert_eq!(
            split_point(&plan),
            SplitPoint {
                at: 1,
                sharded: false,
                block: None
            }
        );
        let part = insert_shards(&plan, &[rank(0, 2)]).unwrap();
        assert_eq!(steps(&part), "range -> shard(0, 2, equal=true)");
        assert!(Arc::ptr_eq(&insert_shards(&plan, &[]).unwrap(), &plan));
    }
}
