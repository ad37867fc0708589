//! `Dataset::mix`: a deterministic weighted interleave of datasets.

use std::sync::Arc;

use sluice_core::mix::{MixChild, MixSource, StopPolicy};
use sluice_core::{ChainOp, Error, LogicalPlan, Result};

use crate::dataset::Dataset;

impl Dataset {
    /// Interleaves `datasets` in proportion to `weights` (equal if `None`), deterministically
    /// and tightly balanced (smooth weighted round-robin; `seed` picks the phase). Each dataset
    /// must be a random-access source followed only by deterministic maps; shuffle, shard,
    /// repeat and random augmentations go after the mix.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, StopPolicy};
    /// let ds = Dataset::mix(&[Dataset::range(6), Dataset::range(3)], Some(&[2.0, 1.0]), 0,
    ///                       StopPolicy::AllExhausted)?;
    /// assert_eq!(ds.iter(&IterOptions::default())?.count(), 9);
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
            .map(|(i, ds)| child(i, ds))
            .collect::<Result<Vec<_>>>()?;
        let equal = vec![1.0; datasets.len()];
        let source = MixSource::new(children, weights.unwrap_or(&equal), seed, stop)?;
        Ok(Dataset::from_source(Arc::new(source)))
    }
}

fn child(i: usize, ds: &Dataset) -> Result<MixChild> {
    let mut ops = Vec::new();
    for node in ds.plan().chain() {
        match &*node {
            LogicalPlan::Source(_) => {}
            LogicalPlan::Map(m) => ops.push(ChainOp {
                op: m.op.clone(),
                mode: m.mode,
                on_error: m.on_error,
                op_id: m.op_id,
            }),
            other => {
                return Err(Error::invalid(format!(
                    "mix: dataset {i} has {}; mix sources (and deterministic maps), then \
                     shuffle/shard/repeat/batch the mix",
                    other.describe()
                )))
            }
        }
    }
    Ok(MixChild {
        source: ds.plan().source().clone(),
        ops,
    })
}
