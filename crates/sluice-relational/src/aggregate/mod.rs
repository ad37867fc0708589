//! `groupby(keys).aggregate(...)`: count, sum, mean, min and max per group, by hash
//! aggregation that spills by partition.
//!
//! Rows update a hash table of per-group accumulators. When the table outgrows the memory
//! budget, each group's *partial* state goes to one of [`PARTITIONS`] files chosen by a hash of
//! its key, and the table starts over. At the end, each partition file is reduced on its own
//! (a group lives in exactly one partition, so it fits unless one partition holds too many
//! groups — then it is split again with a different hash, up to [`MAX_DEPTH`] levels); each
//! reduced partition is sorted by key into a run, and the runs are merged into the output.
//!
//! Output rows are sorted by key (ascending, missing keys last), one per group, with the key
//! fields then the aggregates. Results do not depend on the budget or the thread count:
//! partial states merge in input order (min/max keep the first of equal values) and float
//! sums are exact until the final rounding (Shewchuk's algorithm, as in Python's
//! `math.fsum`), so regrouping the additions cannot change a bit.
//!
//! Missing values (`None`, NaN) are skipped, as in pandas: `count(field)` counts present
//! values, `count()` counts rows; an aggregate over no present values is `None`.
//!
//! Modules: `spec` (what to compute), `acc` (per-group accumulators; exact float sums in
//! `fsum`), `table` (the hash table of groups) and `partition` (spilling by partition and
//! reducing the partition files).

mod acc;
#[cfg(test)]
mod fixtures;
mod fsum;
mod partition;
mod spec;
mod table;

use sluice_core::{Result, Sample};

pub use spec::{Agg, AggFn, AggregateSpec};

use crate::sort::{merge_runs, FAN_IN};
use crate::spill::{Rows, RunWriter, Spill};
use table::{Aggregator, Table};

pub use partition::{MAX_DEPTH, PARTITIONS};

/// Groups `input` by `spec.keys` and computes `spec.aggs`, within `spill.budget` bytes of
/// table memory.
pub fn aggregate(
    input: impl Iterator<Item = Result<Sample>>,
    spec: &AggregateSpec,
    spill: &mut Spill,
) -> Result<Rows> {
    let mut agg = Aggregator::new(spec);
    let mut table = Table::default();
    let mut parts: Option<Vec<RunWriter>> = None;
    let mut canon = Vec::new();
    for (row, s) in input.enumerate() {
        let s = s?;
        agg.add_row(&mut table, &s, row as u64, &mut canon)?;
        spill.report.rows_in += 1;
        if table.bytes > spill.budget {
            let p = match &mut parts {
                Some(p) => p,
                None => parts.insert(Aggregator::partition_writers(spill)?),
            };
            Aggregator::spill_table(&mut table, p, 0)?;
        }
    }
    let Some(mut parts) = parts else {
        if spec.keys.is_empty() && table.groups.is_empty() {
            // A global aggregate has one row even over no input (count 0, others None).
            table.insert(&[], agg.new_group(Vec::new(), Vec::new()));
        }
        return Ok(Rows::Memory(agg.finish_table(table)?));
    };
    Aggregator::spill_table(&mut table, &mut parts, 0)?;
    drop(table);
    let mut runs = Vec::new();
    for w in parts {
        let run = w.finish()?;
        spill.count(&run);
        if run.rows > 0 {
            agg.reduce(run, 1, spill, &mut runs)?;
        } else {
            run.remove();
        }
    }
    merge_runs(runs, &spec.keys, &[], FAN_IN, spill)
}

#[cfg(test)]
mod tests {
    use sluice_core::{Error, Value};

    use super::fsum::fsum;
    use super::spec::OP;
    use super::*;

    fn rows(n: i64) -> Vec<Sample> {
        (0..n)
            .map(|i| {
                let g = (i * 7919) % 97;
                let key = if i % 41 == 0 {
                    Value::Null
                } else {
                    Value::Int(g)
                };
                let x = if i % 13 == 0 {
                    Value::Null
                } else {
                    Value::Float(i as f64 * 0.1 - 3.0)
                };
                Sample::from_pairs([
                    ("g", key),
                    ("h", Value::from(if i % 2 == 0 { "even" } else { "odd" })),
                    ("x", x),
                    ("i", Value::Int(i)),
                ])
            })
            .collect()
    }

    fn spec() -> AggregateSpec {
        AggregateSpec::try_new(
            vec!["g".into(), "h".into()],
            vec![
                Agg::new("n", AggFn::Count, None),
                Agg::new("nx", AggFn::Count, Some("x")),
                Agg::new("sx", AggFn::Sum, Some("x")),
                Agg::new("si", AggFn::Sum, Some("i")),
                Agg::new("mx", AggFn::Mean, Some("x")),
                Agg::new("lo", AggFn::Min, Some("x")),
                Agg::new("hi", AggFn::Max, Some("i")),
            ],
        )
        .unwrap()
    }

    fn run(budget: u64) -> (Vec<Sample>, Spill) {
        let mut spill = Spill::new(OP, budget, None);
        let out = aggregate(rows(3000).into_iter().map(Ok), &spec(), &mut spill).unwrap();
        ((0..out.len()).map(|i| out.get(i).unwrap()).collect(), spill)
    }

    #[test]
    fn spilled_aggregation_equals_in_memory() {
        let (mem, s0) = run(1 << 30);
        assert!(!s0.report.spilled);
        // 97 × 2 groups + nulls; sorted by (g, h) with the null key last.
        assert_eq!(mem.len(), 97 * 2 + 2);
        assert_eq!(mem[0].get("g"), Some(&Value::Int(0)));
        assert_eq!(mem.last().unwrap().get("g"), Some(&Value::Null));
        let total: i64 = mem
            .iter()
            .map(|s| s.get("n").unwrap().as_int().unwrap())
            .sum();
        assert_eq!(total, 3000);
        for budget in [20_000, 3_000] {
            let (spilled, s1) = run(budget);
            assert!(s1.report.spilled, "budget {budget}: {:?}", s1.report);
            assert_eq!(spilled, mem, "budget {budget}");
        }
    }

    #[test]
    fn tiny_budget_splits_partitions_again() {
        let (spilled, s) = run(500);
        assert!(
            s.report.spill_files > 2 * PARTITIONS as u64,
            "{:?}",
            s.report
        );
        assert_eq!(spilled, run(1 << 30).0);
    }

    #[test]
    fn aggregates_match_a_direct_computation() {
        let (out, _) = run(1 << 30);
        let g5_even = out
            .iter()
            .find(|s| {
                s.get("g") == Some(&Value::Int(5)) && s.get("h").unwrap().as_str() == Some("even")
            })
            .unwrap();
        let members: Vec<Sample> = rows(3000)
            .into_iter()
            .filter(|s| {
                s.get("g") == Some(&Value::Int(5)) && s.get("h").unwrap().as_str() == Some("even")
            })
            .collect();
        let xs: Vec<f64> = members
            .iter()
            .filter_map(|s| match s.get("x") {
                Some(Value::Float(f)) => Some(*f),
                _ => None,
            })
            .collect();
        assert_eq!(g5_even.get("n"), Some(&Value::Int(members.len() as i64)));
        assert_eq!(g5_even.get("nx"), Some(&Value::Int(xs.len() as i64)));
        assert_eq!(g5_even.get("sx"), Some(&Value::Float(fsum(&xs))));
        assert_eq!(
            g5_even.get("mx"),
            Some(&Value::Float(fsum(&xs) / xs.len() as f64))
        );
        let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        assert_eq!(g5_even.get("lo"), Some(&Value::Float(lo)));
        let hi = members
            .iter()
            .map(|s| s.get("i").unwrap().as_int().unwrap())
            .max();
        assert_eq!(g5_even.get("hi").and_then(Value::as_int), hi);
    }

    #[test]
    fn global_aggregate_and_empty_input() {
        let spec = AggregateSpec::try_new(
            vec![],
            vec![
                Agg::new("n", AggFn::Count, None),
                Agg::new("s", AggFn::Sum, Some("x")),
            ],
        )
        .unwrap();
        let mut spill = Spill::new(OP, 1 << 20, None);
        let out = aggregate(std::iter::empty(), &spec, &mut spill).unwrap();
        assert_eq!(out.len(), 1);
        let row = out.get(0).unwrap();
        assert_eq!(
            (row.get("n"), row.get("s")),
            (Some(&Value::Int(0)), Some(&Value::Null))
        );
        let keyed = AggregateSpec::try_new(vec!["k".into()], spec.aggs.clone()).unwrap();
        assert!(aggregate(std::iter::empty(), &keyed, &mut spill)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn bad_values_are_type_errors_naming_the_field() {
        let spec =
            AggregateSpec::try_new(vec!["k".into()], vec![Agg::new("s", AggFn::Sum, Some("x"))])
                .unwrap();
        let bad = [Sample::from_pairs([
            ("k", Value::Int(1)),
            ("x", Value::from("3")),
        ])];
        let mut spill = Spill::new(OP, 1 << 20, None);
        let e = aggregate(bad.into_iter().map(Ok), &spec, &mut spill).unwrap_err();
        assert!(matches!(e.root(), Error::Type(_)), "{e}");
        assert!(e.to_string().contains("'x'"), "{e}");
        let missing = [Sample::from_pairs([("k", Value::Int(1))])];
        let e = aggregate(missing.into_iter().map(Ok), &spec, &mut spill).unwrap_err();
        assert!(
            matches!(e.root(), Error::MissingField { field, .. } if field == "x"),
            "{e}"
        );
    }
}
