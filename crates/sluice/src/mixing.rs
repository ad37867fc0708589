//! `Dataset::mix`: a deterministic weighted interleave of datasets.

use std::sync::Arc;

use sluice_core::mix::{ChildOrder, MixChild, MixSource, StopPolicy};
use sluice_core::rng::combine;
use sluice_core::{ChainOp, Error, LogicalPlan, Result};

use crate::dataset::Dataset;

impl Dataset {
    /// Interleaves `datasets` in proportion to `weights` (equal if `None`), deterministically
    /// and tightly balanced (smooth weighted round-robin; `seed` picks the phase). Each dataset
    /// is a random-access source with deterministic maps and its own `shuffle`, `shard` and
    /// `repeat`, which it keeps: the mix takes each dataset's samples in that dataset's own
    /// order. A `shuffle()` without a seed in a dataset draws its seed from `seed` and the
    /// dataset's place in the list (a source has no iteration seed). Random maps, filters and
    /// batches go after the mix.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, StopPolicy};
    /// let ds = Dataset::mix(&[Dataset::range(6), Dataset::range(3)], Some(&[2.0, 1.0]), 0,
    ///                       StopPolicy::AllExhausted)?;
    /// assert_eq!(ds.iter(&IterOptions::default())?.count(), 9);
    /// // Already-shuffled inputs keep their own order.
    /// let a = Dataset::range(6).shuffle(Some(1))?;
    /// let b = Dataset::range(3).shuffle(Some(2))?.repeat(Some(2))?;
    /// let ds = Dataset::mix(&[a, b], None, 0, StopPolicy::AllExhausted)?;
    /// assert_eq!(ds.iter(&IterOptions::default())?.count(), 12);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn mix(
        datasets: &[Dataset],
        weights: Option<&[f64]>,
        seed: u64,
        stop: StopPolicy,
    ) -> Result<Dataset> {
        let children = datasets
            .iter()
            .enumerate()
            .map(|(i, ds)| child(i, ds, seed))
            .collect::<Result<Vec<_>>>()?;
        let equal = vec![1.0; datasets.len()];
        let source = MixSource::new(children, weights.unwrap_or(&equal), seed, stop)?;
        Ok(Dataset::from_source(Arc::new(source)))
    }
}

/// Key of the shuffle seeds of datasets shuffled without one, with the mix seed and the
/// dataset's index.
const CHILD_SHUFFLE: u64 = 0x4d49_585f_5348_5546; // "MIX_SHUF"

fn child(i: usize, ds: &Dataset, seed: u64) -> Result<MixChild> {
    let mut ops = Vec::new();
    let mut order = ChildOrder::default();
    // Index steps fold into the order wherever they sit among the maps, as when the dataset
    // is iterated alone (maps here are deterministic, so they commute with them).
    for node in ds.plan().chain() {
        match &*node {
            LogicalPlan::Source(_) => {}
            LogicalPlan::Map(m) => ops.push(ChainOp {
                op: m.op.clone(),
                mode: m.mode,
                on_error: m.on_error,
                op_id: m.op_id,
            }),
            LogicalPlan::Shuffle(n) => {
                order.shuffle = Some(
                    n.seed
                        .unwrap_or_else(|| combine(combine(CHILD_SHUFFLE, seed), i as u64)),
                );
                order.fixed_shuffle = !n.reshuffle_each_epoch;
            }
            LogicalPlan::Shard(n) if order.shard.is_none() => order.shard = Some(n.shard),
            LogicalPlan::Shard(_) => {
                return Err(Error::invalid(format!(
                    "mix: dataset {i} has two shard() steps; shard the mix instead"
                )))
            }
            LogicalPlan::Repeat(n) => order.epochs = n.epochs,
            other => {
                return Err(Error::invalid(format!(
                    "mix: dataset {i} has {}; a mixed dataset may have maps, shuffle, shard \
                     and repeat — batch, filter, take or buffer-shuffle the mix",
                    other.describe()
                )))
            }
        }
    }
    Ok(MixChild {
        source: ds.plan().source().clone(),
        ops,
        order,
    })
}
