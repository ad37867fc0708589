//! The hash table of groups: each input row's key finds (or makes) its group, whose
//! accumulators take the row; the table tracks an estimate of its memory so the caller can
//! spill it, and turns its groups into output rows sorted by key.

use std::collections::HashMap;

use sluice_core::{Error, Result, Sample, Value};

use super::acc::{keep_extreme, Acc};
use super::spec::{AggFn, AggregateSpec, OP};
use crate::key::{at_row, cmp_keys, encode_group, Key, KeyReader};

/// One group: its key, and an accumulator per aggregate.
pub(super) struct Group {
    pub(super) keys: Vec<Key>,
    /// The key fields' values as first seen.
    pub(super) values: Vec<Value>,
    pub(super) accs: Vec<Acc>,
}

fn accs_bytes(g: &Group) -> u64 {
    g.accs.iter().map(Acc::bytes).sum()
}

/// Groups by canonical key bytes, in first-seen order, with an estimate of their memory.
#[derive(Default)]
pub(super) struct Table {
    pub(super) index: HashMap<Vec<u8>, usize>,
    pub(super) groups: Vec<(Vec<u8>, Group)>,
    pub(super) bytes: u64,
}

impl Table {
    /// Adds a new group; returns its position.
    pub(super) fn insert(&mut self, canon: &[u8], g: Group) -> usize {
        self.bytes += 2 * canon.len() as u64
            + 96
            + g.values.iter().map(|v| 48 + v.nbytes() as u64).sum::<u64>()
            + accs_bytes(&g);
        self.index.insert(canon.to_vec(), self.groups.len());
        self.groups.push((canon.to_vec(), g));
        self.groups.len() - 1
    }
    /// Folds a later partial state of a group into the table.
    pub(super) fn merge(&mut self, canon: &[u8], g: Group) {
        let Some(&i) = self.index.get(canon) else {
            self.insert(canon, g);
            return;
        };
        let slot = &mut self.groups[i].1;
        let before = accs_bytes(slot);
        for (a, b) in slot.accs.iter_mut().zip(g.accs) {
            a.merge(b);
        }
        self.bytes += accs_bytes(slot).saturating_sub(before);
    }
    /// Empties the table (after a spill).
    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.groups.clear();
        self.bytes = 0;
    }
}

/// One aggregation: the spec, and readers checking keys and min/max fields.
pub(super) struct Aggregator<'a> {
    pub(super) spec: &'a AggregateSpec,
    pub(super) keys: KeyReader,
    /// Checks the kinds of min/max fields (one slot per aggregate; others leave theirs unused).
    pub(super) values: KeyReader,
}

impl<'a> Aggregator<'a> {
    pub(super) fn new(spec: &'a AggregateSpec) -> Self {
        let value_fields: Vec<String> = spec
            .aggs
            .iter()
            .map(|a| a.field.clone().unwrap_or_default())
            .collect();
        Aggregator {
            spec,
            keys: KeyReader::new(OP, &spec.keys),
            values: KeyReader::new(OP, &value_fields),
        }
    }

    pub(super) fn new_group(&self, keys: Vec<Key>, values: Vec<Value>) -> Group {
        Group {
            keys,
            values,
            accs: self.spec.aggs.iter().map(|a| Acc::new(a.func)).collect(),
        }
    }

    /// Folds input row `row` into `table`.
    pub(super) fn add_row(
        &mut self,
        table: &mut Table,
        s: &Sample,
        row: u64,
        canon: &mut Vec<u8>,
    ) -> Result<()> {
        let keys = self.keys.read(s, row)?;
        canon.clear();
        encode_group(&keys, canon);
        let gi = match table.index.get(canon.as_slice()) {
            Some(&i) => i,
            None => {
                let values = self
                    .spec
                    .keys
                    .iter()
                    .map(|k| s.get(k).cloned().unwrap_or_default())
                    .collect();
                table.insert(canon, self.new_group(keys, values))
            }
        };
        let spec = self.spec;
        let g = &mut table.groups[gi].1;
        let mut grew = 0u64;
        for (i, (agg, acc)) in spec.aggs.iter().zip(&mut g.accs).enumerate() {
            let Some(field) = &agg.field else {
                if let Acc::Count(n) = acc {
                    *n += 1;
                }
                continue;
            };
            let v = s.require(field, OP).map_err(|e| at_row(OP, row, s, e))?;
            match acc {
                Acc::Count(n) => {
                    let missing =
                        matches!(v, Value::Null) || matches!(v, Value::Float(f) if f.is_nan());
                    *n += u64::from(!missing);
                }
                Acc::Sum(a) | Acc::Mean(a) => {
                    let before = a.floats.len();
                    a.add(v).map_err(|kind| {
                        let msg = format!(
                            "{OP}: {} of field '{field}' needs numbers, got a {kind}",
                            agg.func.name()
                        );
                        at_row(OP, row, s, Error::type_error(msg))
                    })?;
                    grew += 8 * a.floats.len().saturating_sub(before) as u64;
                }
                Acc::Min(m) | Acc::Max(m) => {
                    let k = self.values.check(i, v).map_err(|e| at_row(OP, row, s, e))?;
                    if !matches!(k, Key::Missing) {
                        let want = if agg.func == AggFn::Min {
                            std::cmp::Ordering::Less
                        } else {
                            std::cmp::Ordering::Greater
                        };
                        let old = m.as_ref().map_or(0, |(_, v)| v.nbytes() as u64);
                        keep_extreme(m, Some((k, v.clone())), want);
                        let new = m.as_ref().map_or(0, |(_, v)| v.nbytes() as u64);
                        grew += 2 * new.saturating_sub(old);
                    }
                }
            }
        }
        table.bytes += grew;
        Ok(())
    }

    /// The output rows of `table`'s groups, sorted by key.
    pub(super) fn finish_table(&self, table: Table) -> Result<Vec<Sample>> {
        let mut groups: Vec<Group> = table.groups.into_iter().map(|(_, g)| g).collect();
        groups.sort_by(|a, b| cmp_keys(&a.keys, &b.keys, &[]));
        groups
            .into_iter()
            .map(|g| {
                let mut s = Sample::with_capacity(self.spec.keys.len() + self.spec.aggs.len());
                for (k, v) in self.spec.keys.iter().zip(g.values) {
                    s.set(k.as_str(), v);
                }
                for (a, acc) in self.spec.aggs.iter().zip(&g.accs) {
                    let v = acc
                        .finish()
                        .map_err(|m| Error::data(format!("{OP}: aggregate '{}': {m}", a.name)))?;
                    s.set(a.name.as_str(), v);
                }
                Ok(s)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::fixtures::{add, spec};

    #[test]
    fn rows_fold_into_their_group_and_finish_sorted_by_key() {
        let spec = spec();
        let mut agg = Aggregator::new(&spec);
        let mut table = Table::default();
        let rows = [
            (Value::Int(2), Value::Int(5)),
            (Value::Null, Value::Int(1)),
            (Value::Int(1), Value::Null),
            (Value::Int(2), Value::Int(7)),
        ];
        add(&mut agg, &mut table, rows).unwrap();
        assert_eq!(table.groups.len(), 3, "first-seen order, one per key");
        assert!(table.bytes > 0);
        let out = agg.finish_table(table).unwrap();
        let keys: Vec<_> = out.iter().map(|s| s.get("k").cloned().unwrap()).collect();
        assert_eq!(
            keys,
            [Value::Int(1), Value::Int(2), Value::Null],
            "missing last"
        );
        let two = &out[1];
        assert_eq!(
            ["n", "nx", "s", "hi"].map(|f| two.get(f).cloned().unwrap()),
            [Value::Int(2), Value::Int(2), Value::Int(12), Value::Int(7)]
        );
        // Key 1 saw only a missing x: counted as a row, not as a value.
        assert_eq!(
            ["n", "nx", "s", "hi"].map(|f| out[0].get(f).cloned().unwrap()),
            [Value::Int(1), Value::Int(0), Value::Null, Value::Null]
        );
    }

    #[test]
    fn merging_a_partial_state_grows_the_estimate_and_keeps_one_group() {
        let spec = spec();
        let mut agg = Aggregator::new(&spec);
        let (mut a, mut b) = (Table::default(), Table::default());
        add(&mut agg, &mut a, [(Value::Int(1), Value::Float(0.5))]).unwrap();
        add(&mut agg, &mut b, [(Value::Int(1), Value::Float(0.25))]).unwrap();
        let before = a.bytes;
        let (canon, g) = b.groups.pop().unwrap();
        a.merge(&canon, g);
        assert_eq!(a.groups.len(), 1);
        assert!(a.bytes >= before);
        let out = agg.finish_table(a).unwrap();
        assert_eq!(out[0].get("s"), Some(&Value::Float(0.75)));
        assert_eq!(out[0].get("n"), Some(&Value::Int(2)));
    }

    #[test]
    fn a_non_number_in_a_sum_is_a_type_error_at_its_row() {
        let spec = spec();
        let mut agg = Aggregator::new(&spec);
        let mut table = Table::default();
        let rows = [
            (Value::Int(1), Value::Int(1)),
            (Value::Int(1), Value::from("two")),
        ];
        let e = add(&mut agg, &mut table, rows).unwrap_err();
        assert!(matches!(e.root(), Error::Type(_)), "{e}");
        assert!(e.to_string().contains("'x'"), "{e}");
    }
}
