//! What to compute: [`AggregateSpec`] (group keys and [`Agg`]s, checked by name) and the
//! aggregate functions ([`AggFn`]).

use serde::{Deserialize, Serialize};
use sluice_core::{Error, Result};

/// The op's name in errors.
pub(super) const OP: &str = "groupby";

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AggFn {
    Count,
    Sum,
    Mean,
    Min,
    Max,
}

impl std::str::FromStr for AggFn {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "count" => AggFn::Count,
            "sum" => AggFn::Sum,
            "mean" => AggFn::Mean,
            "min" => AggFn::Min,
            "max" => AggFn::Max,
            other => {
                return Err(Error::invalid(format!(
                    "unknown aggregate '{other}' (use count, sum, mean, min or max)"
                )))
            }
        })
    }
}

impl AggFn {
    pub(crate) fn name(self) -> &'static str {
        match self {
            AggFn::Count => "count",
            AggFn::Sum => "sum",
            AggFn::Mean => "mean",
            AggFn::Min => "min",
            AggFn::Max => "max",
        }
    }
}

/// One output column: `name = func(field)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agg {
    /// Output field name.
    pub name: String,
    pub func: AggFn,
    /// Input field; `None` only for `count` (count rows).
    #[serde(default)]
    pub field: Option<String>,
}

impl Agg {
    /// `name = func(field)`.
    pub fn new(name: impl Into<String>, func: AggFn, field: Option<&str>) -> Self {
        Agg {
            name: name.into(),
            func,
            field: field.map(str::to_string),
        }
    }
}

/// Group keys and aggregates.
///
/// ```
/// use sluice_relational::{Agg, AggFn, AggregateSpec};
/// let spec = AggregateSpec::try_new(vec!["label".into()], vec![
///     Agg::new("n", AggFn::Count, None),
///     Agg::new("mean_len", AggFn::Mean, Some("len")),
/// ])?;
/// assert_eq!(spec.output_fields(), ["label", "n", "mean_len"]);
/// assert!(AggregateSpec::try_new(vec!["k".into()], vec![Agg::new("s", AggFn::Sum, None)]).is_err());
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AggregateSpec {
    /// Group key fields (none: one group of every row).
    pub keys: Vec<String>,
    pub aggs: Vec<Agg>,
}

impl AggregateSpec {
    /// Checks names: at least one aggregate, output names unique, a field for all but count.
    pub fn try_new(keys: Vec<String>, aggs: Vec<Agg>) -> Result<Self> {
        if aggs.is_empty() {
            return Err(Error::invalid("aggregate needs at least one aggregate"));
        }
        let mut names: Vec<&str> = Vec::new();
        for n in keys.iter().chain(aggs.iter().map(|a| &a.name)) {
            if names.contains(&n.as_str()) {
                return Err(Error::invalid(format!(
                    "groupby: output field '{n}' is given twice (key fields and aggregate \
                     names must differ)"
                )));
            }
            names.push(n);
        }
        if let Some(a) = aggs
            .iter()
            .find(|a| a.field.is_none() && a.func != AggFn::Count)
        {
            return Err(Error::invalid(format!(
                "aggregate '{}': {} needs a field",
                a.name,
                a.func.name()
            )));
        }
        Ok(AggregateSpec { keys, aggs })
    }
    /// The output fields: keys, then aggregate names.
    pub fn output_fields(&self) -> Vec<String> {
        self.keys
            .iter()
            .cloned()
            .chain(self.aggs.iter().map(|a| a.name.clone()))
            .collect()
    }
    /// Input fields read (keys and aggregated fields).
    pub fn input_fields(&self) -> Vec<String> {
        let mut out = self.keys.clone();
        for f in self.aggs.iter().filter_map(|a| a.field.as_ref()) {
            if !out.contains(f) {
                out.push(f.clone());
            }
        }
        out
    }
}
