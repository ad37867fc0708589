//! A spec and rows for the aggregation unit tests.

use sluice_core::{Result, Sample, Value};

use super::spec::{Agg, AggFn, AggregateSpec};
use super::table::{Aggregator, Table};

/// Groups by `k`; counts rows and present `x`s, sums `x`, takes its min and max.
pub(super) fn spec() -> AggregateSpec {
    AggregateSpec::try_new(
        vec!["k".into()],
        vec![
            Agg::new("n", AggFn::Count, None),
            Agg::new("nx", AggFn::Count, Some("x")),
            Agg::new("s", AggFn::Sum, Some("x")),
            Agg::new("lo", AggFn::Min, Some("x")),
            Agg::new("hi", AggFn::Max, Some("x")),
        ],
    )
    .expect("a valid spec")
}

/// Adds rows `{k, x}` to `table`, numbered from 0.
pub(super) fn add(
    agg: &mut Aggregator<'_>,
    table: &mut Table,
    rows: impl IntoIterator<Item = (Value, Value)>,
) -> Result<()> {
    let mut canon = Vec::new();
    for (row, (k, x)) in rows.into_iter().enumerate() {
        let s = Sample::from_pairs([("k", k), ("x", x)]);
        agg.add_row(table, &s, row as u64, &mut canon)?;
    }
    Ok(())
}
