//! Last-mile relational ops as `Dataset` methods: `sort`, `groupby(...).aggregate(...)`,
//! `repartition(n)` (see `sluice_relational` for how they run and spill).

use std::sync::Arc;

use sluice_core::{Error, LogicalPlan, Result};
use sluice_relational::{
    Agg, AggregateSpec, BlockingOp, BlockingOptions, BlockingSource, SortSpec,
};

use crate::dataset::Dataset;

/// A dataset grouped by key fields, waiting for its aggregates ([`Dataset::groupby`]).
#[derive(Debug, Clone)]
pub struct GroupedDataset {
    ds: Dataset,
    keys: Vec<String>,
}

impl GroupedDataset {
    /// One row per group: the key fields, then each aggregate, sorted by key (missing keys
    /// last). Reads the whole input (see [`Dataset::sort`] for budget and spilling).
    ///
    /// ```
    /// use sluice::{Agg, AggFn, BlockingOptions, Dataset, IterOptions, Sample, Value};
    /// let rows = (0..6).map(|i| Sample::from_pairs([("k", Value::Int(i % 2)), ("x", Value::Int(i))]));
    /// let ds = Dataset::from_items(rows.collect())
    ///     .groupby(&["k".into()])
    ///     .aggregate(vec![Agg::new("n", AggFn::Count, None), Agg::new("sx", AggFn::Sum, Some("x"))],
    ///                &BlockingOptions::default())?;
    /// let out: Vec<Sample> = ds.iter(&IterOptions::default())?.collect::<Result<_, _>>()?;
    /// assert_eq!(out[1].get("sx"), Some(&Value::Int(1 + 3 + 5)));
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn aggregate(&self, aggs: Vec<Agg>, opts: &BlockingOptions) -> Result<Dataset> {
        let spec = AggregateSpec::try_new(self.keys.clone(), aggs)?;
        self.ds.blocking(BlockingOp::Aggregate(spec), opts)
    }
}

impl Dataset {
    fn blocking(&self, op: BlockingOp, opts: &BlockingOptions) -> Result<Dataset> {
        let source = BlockingSource::new(self.plan().clone(), op, opts.clone())?;
        Ok(Dataset::from_source(Arc::new(source)))
    }

    /// Sorts by the fields `by` (most significant first), stably: equal keys keep their
    /// order. `descending` has one flag per field or one for all (empty: ascending);
    /// missing values (None, NaN) come last either way. Keys must be bool, numbers (ints
    /// and floats compare exactly), str or bytes, one kind per field.
    ///
    /// Blocking: the whole input runs once (seed `opts.seed`) before the first output, held
    /// within `opts.memory_budget` bytes and spilled to sorted runs on local disk beyond it.
    /// The result is a random-access source, the same for any thread count and budget.
    ///
    /// ```
    /// use sluice::{BlockingOptions, Dataset, IterOptions};
    /// let ds = Dataset::range(5).sort(&["id".into()], &[true], &BlockingOptions::default())?;
    /// let ids: Vec<i64> = ds.iter(&IterOptions::default())?
    ///     .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap()).collect();
    /// assert_eq!(ids, [4, 3, 2, 1, 0]);
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn sort(&self, by: &[String], descending: &[bool], opts: &BlockingOptions) -> Result<Self> {
        let spec = SortSpec::try_new(by.to_vec(), descending.to_vec())?;
        self.blocking(BlockingOp::Sort(spec), opts)
    }

    /// Groups by the fields `keys` (none: one group of everything); finish with
    /// [`GroupedDataset::aggregate`].
    pub fn groupby(&self, keys: &[String]) -> GroupedDataset {
        GroupedDataset {
            ds: self.clone(),
            keys: keys.to_vec(),
        }
    }

    /// Materialises the outputs into `n` equal contiguous partitions (sizes differ by at
    /// most one, order kept); `write_parquet`/`write_jsonl` then write one file per
    /// partition. Blocking, within `opts.memory_budget` (beyond it the rows go to disk).
    ///
    /// ```
    /// use sluice::{BlockingOptions, Dataset, Source};
    /// let ds = Dataset::range(10).repartition(4, &BlockingOptions::default())?;
    /// assert_eq!(ds.plan().source().partitions(), Some(vec![3, 3, 2, 2]));
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn repartition(&self, n: usize, opts: &BlockingOptions) -> Result<Self> {
        self.blocking(BlockingOp::Repartition { n }, opts)
    }

    /// The partition sizes when the outputs are the partitions of a `repartition` (only
    /// element-wise steps after it); an error if a step after it moves rows across
    /// partitions; `None` without repartition.
    pub(crate) fn output_partitions(&self, what: &str) -> Result<Option<Vec<u64>>> {
        let Some(sizes) = self.plan().source().partitions() else {
            return Ok(None);
        };
        let chain = self.plan().chain();
        if let Some(bad) = chain[1..]
            .iter()
            .find(|n| !matches!(&***n, LogicalPlan::Map(_) | LogicalPlan::Prefetch(_)))
        {
            return Err(Error::invalid(format!(
                "{what} after repartition(n) writes one file per partition, so only \
                 map/filter/flat_map may come between them, not {}",
                bad.describe()
            )));
        }
        Ok(Some(sizes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IterOptions, OpSpec};
    use sluice_core::{OnError, Sample, Value};
    use sluice_relational::AggFn;

    fn rows(ds: &Dataset, threads: usize) -> Vec<Sample> {
        let opts = IterOptions {
            num_threads: Some(threads),
            ..Default::default()
        };
        ds.iter(&opts).unwrap().collect::<Result<_>>().unwrap()
    }

    fn tiny() -> BlockingOptions {
        BlockingOptions {
            memory_budget: 2_000,
            ..Default::default()
        }
    }

    #[test]
    fn shuffle_shard_batch_and_resume_work_after_sort() {
        let ds = Dataset::range(100)
            .sort(&["id".into()], &[true], &tiny())
            .unwrap()
            .shuffle(Some(3))
            .unwrap()
            .shard(1, 2, true)
            .unwrap()
            .batch(7, false)
            .unwrap();
        let full = rows(&ds, 2);
        assert_eq!(full.len(), 8);
        let opts = IterOptions::default();
        let mut it = ds.iter(&opts).unwrap();
        it.next().unwrap().unwrap();
        let state = ds.state(&opts, &it).unwrap();
        let rest: Vec<Sample> = ds
            .iter_from(&opts, Some(&state))
            .unwrap()
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(rest, full[1..]);
        let report = it.stats().source.expect("source report");
        assert_eq!(report["op"], "sort");
        assert_eq!(report["spilled"], true);
    }

    #[test]
    fn groupby_after_a_map_and_errors_at_iteration() {
        let ds = Dataset::range(10)
            .map(OpSpec::Noop.build().unwrap(), OnError::Raise, None)
            .unwrap();
        let e = ds
            .sort(&["nope".into()], &[], &BlockingOptions::default())
            .unwrap_err();
        assert!(matches!(e, Error::MissingField { .. }), "{e}");
        let out = ds
            .groupby(&[])
            .aggregate(
                vec![sluice_relational::Agg::new("m", AggFn::Max, Some("id"))],
                &BlockingOptions::default(),
            )
            .unwrap();
        assert_eq!(rows(&out, 1)[0].get("m"), Some(&Value::Int(9)));
    }

    #[test]
    fn partitions_survive_maps_but_not_shuffles() {
        let ds = Dataset::range(10)
            .repartition(3, &BlockingOptions::default())
            .unwrap();
        assert_eq!(ds.output_partitions("w").unwrap(), Some(vec![4, 3, 3]));
        let mapped = ds
            .map(OpSpec::Noop.build().unwrap(), OnError::Raise, None)
            .unwrap();
        assert!(mapped.output_partitions("w").unwrap().is_some());
        let e = ds.shuffle(None).unwrap().output_partitions("write_parquet");
        assert!(e.unwrap_err().to_string().contains("shuffle"));
        assert_eq!(Dataset::range(3).output_partitions("w").unwrap(), None);
    }
}
