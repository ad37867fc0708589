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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_parse_by_name_and_unknown_ones_list_the_choices() {
        for (s, f) in [("count", AggFn::Count), ("max", AggFn::Max)] {
            assert_eq!(s.parse::<AggFn>().unwrap(), f);
            assert_eq!(f.name(), s);
        }
        let e = "median".parse::<AggFn>().unwrap_err();
        assert!(
            e.to_string().contains("count, sum, mean, min or max"),
            "{e}"
        );
    }

    #[test]
    fn specs_are_checked_and_list_their_fields() {
        let ok = AggregateSpec::try_new(
            vec!["k".into()],
            vec![
                Agg::new("a", AggFn::Sum, Some("x")),
                Agg::new("b", AggFn::Max, Some("x")),
                Agg::new("k2", AggFn::Min, Some("k")),
            ],
        )
        .unwrap();
        assert_eq!(ok.input_fields(), ["k", "x"], "each field once");
        assert_eq!(ok.output_fields(), ["k", "a", "b", "k2"]);
        assert!(AggregateSpec::try_new(vec!["k".into()], vec![]).is_err());
        let clash = vec![Agg::new("k", AggFn::Count, None)];
        assert!(AggregateSpec::try_new(vec!["k".into()], clash).is_err());
        let twice = vec![
            Agg::new("a", AggFn::Count, None),
            Agg::new("a", AggFn::Count, None),
        ];
        assert!(AggregateSpec::try_new(vec![], twice).is_err());
    }

    #[test]
    fn specs_serialise_by_lowercase_name_and_refuse_unknown_fields() {
        let a = Agg::new("m", AggFn::Mean, Some("x"));
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(json, r#"{"name":"m","func":"mean","field":"x"}"#);
        assert_eq!(serde_json::from_str::<Agg>(&json).unwrap(), a);
        let extra = r#"{"name":"m","func":"mean","field":"x","bogus":1}"#;
        assert!(serde_json::from_str::<Agg>(extra).is_err());
        let count: Agg = serde_json::from_str(r#"{"name":"n","func":"count"}"#).unwrap();
        assert_eq!(count.field, None);
    }
}
