//! Generic field ops: `noop`, `select`, `drop`, `rename`.

use std::sync::Arc;

use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, OpRef, Result, Sample};

use crate::OpSpec;

#[derive(Debug)]
struct FieldOp {
    spec: OpSpec,
}

pub(crate) fn build(spec: &OpSpec) -> Result<OpRef> {
    match spec {
        OpSpec::Select { fields } | OpSpec::Drop { fields } if fields.is_empty() => {
            return Err(Error::invalid("select/drop need at least one field"))
        }
        OpSpec::Rename { from, to } if from.is_empty() || to.is_empty() => {
            return Err(Error::invalid("rename needs non-empty field names"))
        }
        OpSpec::Image(_) | OpSpec::Audio(_) | OpSpec::Text(_) => {
            return Err(Error::Internal("not a generic op".into()))
        }
        _ => {}
    }
    Ok(Arc::new(FieldOp { spec: spec.clone() }))
}

impl Op for FieldOp {
    fn name(&self) -> &str {
        match self.spec {
            OpSpec::Noop => "noop",
            OpSpec::Select { .. } => "select",
            OpSpec::Drop { .. } => "drop",
            OpSpec::Rename { .. } => "rename",
            // `build` only makes FieldOps of generic specs.
            OpSpec::Image(_) | OpSpec::Audio(_) | OpSpec::Text(_) => "?",
        }
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
    fn meta(&self) -> OpMeta {
        let (reads, writes) = match &self.spec {
            OpSpec::Noop => (vec![], vec![]),
            OpSpec::Select { fields } | OpSpec::Drop { fields } => (fields.clone(), vec![]),
            OpSpec::Rename { from, to } => (vec![from.clone()], vec![to.clone()]),
            OpSpec::Image(_) | OpSpec::Audio(_) | OpSpec::Text(_) => (vec![], vec![]),
        };
        OpMeta {
            reads,
            writes,
            kind: OpKind::Opaque,
            random: false,
            python: false,
        }
    }
    fn moves_fields(&self) -> bool {
        true
    }
    fn output_fields(&self, input: &[String]) -> Option<Vec<String>> {
        Some(match &self.spec {
            OpSpec::Select { fields } => fields.clone(),
            OpSpec::Drop { fields } => input
                .iter()
                .filter(|f| !fields.contains(f))
                .cloned()
                .collect(),
            // The value moves to `to`: in `to`'s place if it exists, else at the end.
            OpSpec::Rename { from, to } => {
                let mut out: Vec<String> = input.iter().filter(|f| *f != from).cloned().collect();
                if !out.contains(to) {
                    out.push(to.clone());
                }
                out
            }
            OpSpec::Noop | OpSpec::Image(_) | OpSpec::Audio(_) | OpSpec::Text(_) => input.to_vec(),
        })
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        match &self.spec {
            OpSpec::Noop | OpSpec::Image(_) | OpSpec::Audio(_) | OpSpec::Text(_) => {}
            OpSpec::Select { fields } => {
                let mut out = Sample::with_capacity(fields.len());
                for f in fields {
                    out.set(f.as_str(), s.take(f, "select")?);
                }
                s = out;
            }
            OpSpec::Drop { fields } => {
                for f in fields {
                    s.take(f, "drop")?;
                    s.remove(f);
                }
            }
            OpSpec::Rename { from, to } => {
                let v = s.take(from, "rename")?;
                s.remove(from);
                s.set(to.as_str(), v);
            }
        }
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{cx, one};
    use sluice_core::Value;

    #[test]
    fn select_drop_rename() {
        let s = Sample::from_pairs([("a", Value::Int(1)), ("b", Value::Int(2))]);
        let sel = build(&OpSpec::Select {
            fields: vec!["b".into()],
        })
        .unwrap();
        assert_eq!(
            one(sel.apply(s.clone(), &cx(0, 0)).unwrap())
                .names()
                .collect::<Vec<_>>(),
            ["b"]
        );
        let drop = build(&OpSpec::Drop {
            fields: vec!["a".into()],
        })
        .unwrap();
        assert_eq!(
            one(drop.apply(s.clone(), &cx(0, 0)).unwrap())
                .names()
                .collect::<Vec<_>>(),
            ["b"]
        );
        let ren = build(&OpSpec::Rename {
            from: "a".into(),
            to: "z".into(),
        })
        .unwrap();
        assert_eq!(
            one(ren.apply(s.clone(), &cx(0, 0)).unwrap())
                .names()
                .collect::<Vec<_>>(),
            ["b", "z"]
        );
        let e = sel.apply(Sample::new(), &cx(0, 0)).unwrap_err();
        assert!(matches!(e, Error::MissingField { .. }));
    }

    /// The fields a plan derives for each op are the names its output really has.
    #[test]
    fn output_fields_match_what_apply_gives() {
        let s = Sample::from_pairs([("a", Value::Int(1)), ("b", Value::Int(2))]);
        let input = ["a".to_string(), "b".to_string()];
        let specs = [
            OpSpec::Noop,
            OpSpec::Select {
                fields: vec!["b".into(), "a".into()],
            },
            OpSpec::Drop {
                fields: vec!["a".into()],
            },
            OpSpec::Rename {
                from: "a".into(),
                to: "z".into(),
            },
            OpSpec::Rename {
                from: "a".into(),
                to: "b".into(),
            },
        ];
        for spec in specs {
            let op = build(&spec).unwrap();
            let out = one(op.apply(s.clone(), &cx(0, 0)).unwrap());
            let names: Vec<String> = out.names().map(str::to_string).collect();
            assert_eq!(op.output_fields(&input).unwrap(), names, "{spec:?}");
        }
    }

    #[test]
    fn spec_round_trips() {
        let spec = OpSpec::Rename {
            from: "a".into(),
            to: "b".into(),
        };
        let op = build(&spec).unwrap();
        let back: OpSpec = serde_json::from_value(op.spec()).unwrap();
        assert_eq!(back, spec);
    }
}

#[cfg(test)]
mod spec_tests {
    use crate::OpSpec;

    #[test]
    fn unknown_op_names_are_rejected() {
        assert!(serde_json::from_str::<OpSpec>(r#"{"op": "nope"}"#).is_err());
        assert!(serde_json::from_str::<OpSpec>(r#"{"op": "noop"}"#).is_ok());
    }
}
