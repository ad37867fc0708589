//! `repartition(n)`: materialise the input into `n` equal, contiguous partitions.
//!
//! The rows keep their order; partition `p` holds rows `[start_p, start_p + size_p)`, and the
//! sizes differ by at most one (the first `len % n` partitions get the extra row). Sinks
//! write one file per partition. Rows stay in memory while they fit the budget, and move to
//! one data file on disk beyond it.

use sluice_core::{Error, Result, Sample};

use crate::spill::{Rows, RowsBuilder, Spill};

/// Sizes of `n` contiguous partitions of `len` rows, differing by at most one.
///
/// ```
/// assert_eq!(sluice_relational::partition_sizes(10, 4), [3, 3, 2, 2]);
/// assert_eq!(sluice_relational::partition_sizes(2, 3), [1, 1, 0]);
/// ```
pub fn partition_sizes(len: u64, n: usize) -> Vec<u64> {
    let n = n.max(1) as u64;
    (0..n).map(|p| len / n + u64::from(p < len % n)).collect()
}

/// Most partitions `repartition(n)` makes.
pub const MAX_PARTITIONS: usize = 1 << 20;

/// Checks a partition count.
pub fn check_partitions(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid("repartition needs n >= 1 partitions"));
    }
    // Partition sizes are a list of n, and sinks write a file per partition.
    if n > MAX_PARTITIONS {
        return Err(Error::invalid(format!(
            "repartition: at most {MAX_PARTITIONS} partitions, got {n}"
        )));
    }
    Ok(())
}

/// Materialises `input` into rows and the sizes of its `n` partitions.
pub fn repartition(
    input: impl Iterator<Item = Result<Sample>>,
    n: usize,
    spill: &mut Spill,
) -> Result<(Rows, Vec<u64>)> {
    check_partitions(n)?;
    let mut rows = RowsBuilder::new();
    for s in input {
        rows.push(s?, spill)?;
        spill.report.rows_in += 1;
    }
    let rows = rows.finish(spill)?;
    let sizes = partition_sizes(rows.len(), n);
    Ok((rows, sizes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Value;

    #[test]
    fn partitions_are_equal_and_cover_everything() {
        for (len, n) in [(0, 3), (7, 1), (7, 7), (100, 6), (5, 8)] {
            let sizes = partition_sizes(len, n);
            assert_eq!(sizes.len(), n);
            assert_eq!(sizes.iter().sum::<u64>(), len);
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= 1, "{sizes:?}");
        }
    }

    #[test]
    fn rows_keep_their_order_in_memory_and_spilled() {
        let input = || (0..300).map(|i| Ok(Sample::from_pairs([("id", Value::Int(i))])));
        for budget in [1 << 30, 1_000] {
            let mut spill = Spill::new("repartition", budget, None);
            let (rows, sizes) = repartition(input(), 4, &mut spill).unwrap();
            assert_eq!(sizes, [75, 75, 75, 75]);
            assert_eq!(spill.report.spilled, budget < 1 << 30);
            let ids: Vec<i64> = (0..rows.len())
                .map(|i| rows.get(i).unwrap().get("id").unwrap().as_int().unwrap())
                .collect();
            assert_eq!(ids, (0..300).collect::<Vec<_>>());
        }
        assert!(repartition(input(), 0, &mut Spill::new("r", 1, None)).is_err());
    }
}
