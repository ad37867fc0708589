//! Spilling by partition: a full table's groups go, as partial states, to one of
//! [`PARTITIONS`] files chosen by a hash of their key; each file is then reduced on its own
//! into a sorted run (split again with another hash if its groups still do not fit).

use sluice_core::{Error, Result, Sample, Value};

use super::acc::Acc;
use super::table::{Aggregator, Group, Table};
use crate::key::{encode_group, hash_group, Key};
use crate::spill::{Run, RunReader, RunWriter, Spill};

/// Partition files a spilled table is split into.
pub const PARTITIONS: usize = 16;
/// Times a partition that is still too big may be split again.
pub const MAX_DEPTH: u64 = 4;

impl Aggregator<'_> {
    /// A group's partial state as a sample: `{k: [key values], a: [states]}`.
    fn encode_partial(g: &Group) -> Sample {
        Sample::from_pairs([
            ("k", Value::List(g.values.clone())),
            ("a", Value::List(g.accs.iter().map(Acc::to_value).collect())),
        ])
    }

    /// The key part of a partial state: its canonical bytes (into `canon`) and key tuple.
    fn partial_keys<'s>(
        &mut self,
        s: &'s Sample,
        canon: &mut Vec<u8>,
    ) -> Result<(&'s [Value], Vec<Key>)> {
        let Some(Value::List(values)) = s.get("k") else {
            return Err(Error::Internal("spill file: bad partial group".into()));
        };
        let keys = values
            .iter()
            .enumerate()
            .map(|(i, v)| self.keys.check(i, v))
            .collect::<Result<Vec<_>>>()?;
        canon.clear();
        encode_group(&keys, canon);
        Ok((values, keys))
    }

    /// Reads a partial state back (its canonical key into `canon`).
    fn decode_partial(&mut self, s: &Sample, canon: &mut Vec<u8>) -> Result<Group> {
        let (values, keys) = self.partial_keys(s, canon)?;
        let Some(Value::List(states)) = s.get("a") else {
            return Err(Error::Internal("spill file: bad partial group".into()));
        };
        if values.len() != self.spec.keys.len() || states.len() != self.spec.aggs.len() {
            return Err(Error::Internal("spill file: bad partial group".into()));
        }
        let accs = self
            .spec
            .aggs
            .iter()
            .zip(states)
            .enumerate()
            .map(|(i, (a, v))| Acc::from_value(a.func, v, &mut self.values, i))
            .collect::<Result<Vec<_>>>()?;
        Ok(Group {
            keys,
            values: values.to_vec(),
            accs,
        })
    }

    /// Writes every group of `table` to its partition (hashed with `salt`), in table order,
    /// and empties the table.
    pub(super) fn spill_table(table: &mut Table, parts: &mut [RunWriter], salt: u64) -> Result<()> {
        for (canon, g) in &table.groups {
            let p = (hash_group(canon, salt) % parts.len() as u64) as usize;
            parts[p].push(&Self::encode_partial(g))?;
        }
        table.clear();
        Ok(())
    }

    pub(super) fn partition_writers(spill: &mut Spill) -> Result<Vec<RunWriter>> {
        (0..PARTITIONS)
            .map(|_| spill.run_writer("part", 2 * PARTITIONS as u64))
            .collect()
    }

    /// Reduces one partition file into a sorted run (or, if its groups do not fit, splits it
    /// again with salt `depth` and reduces the pieces), appended to `out`.
    pub(super) fn reduce(
        &mut self,
        part: Run,
        depth: u64,
        spill: &mut Spill,
        out: &mut Vec<Run>,
    ) -> Result<()> {
        let mut reader = RunReader::open(&part, crate::spill::io_buffer(spill.budget, 8))?;
        let (mut rec, mut canon) = (Vec::new(), Vec::new());
        let mut table = Table::default();
        let mut split: Option<Vec<RunWriter>> = None;
        while let Some(s) = reader.next_sample(&mut rec)? {
            if let Some(parts) = &mut split {
                // Already split: route the rest straight through, after the table's states.
                self.partial_keys(&s, &mut canon)?;
                let p = (hash_group(&canon, depth) % PARTITIONS as u64) as usize;
                parts[p].push(&s)?;
                continue;
            }
            let g = self.decode_partial(&s, &mut canon)?;
            table.merge(&canon, g);
            if table.bytes > spill.budget && depth < MAX_DEPTH {
                let mut parts = Self::partition_writers(spill)?;
                Self::spill_table(&mut table, &mut parts, depth)?;
                split = Some(parts);
            }
        }
        drop(reader);
        part.remove();
        if let Some(parts) = split {
            for w in parts {
                let run = w.finish()?;
                spill.count(&run);
                if run.rows > 0 {
                    self.reduce(run, depth + 1, spill, out)?;
                } else {
                    run.remove();
                }
            }
            return Ok(());
        }
        if table.groups.is_empty() {
            return Ok(());
        }
        let rows = self.finish_table(table)?;
        let mut w = spill.run_writer("reduced", 4)?;
        for r in &rows {
            w.push(r)?;
        }
        let run = w.finish()?;
        spill.count(&run);
        out.push(run);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::fixtures::{add, spec};

    fn table_of(agg: &mut Aggregator<'_>, rows: &[(i64, f64)]) -> Table {
        let mut table = Table::default();
        let rows = rows.iter().map(|&(k, x)| (Value::Int(k), Value::Float(x)));
        add(agg, &mut table, rows).unwrap();
        table
    }

    #[test]
    fn partial_states_round_trip_through_their_sample_form() {
        let spec = spec();
        let mut agg = Aggregator::new(&spec);
        let table = table_of(&mut agg, &[(1, 0.5), (2, -1.0), (1, 0.25)]);
        let mut canon = Vec::new();
        for (key, g) in &table.groups {
            let back = agg
                .decode_partial(&Aggregator::encode_partial(g), &mut canon)
                .unwrap();
            assert_eq!(&canon, key, "same canonical key");
            assert_eq!(
                (back.values.clone(), back.accs.clone()),
                (g.values.clone(), g.accs.clone())
            );
        }
    }

    #[test]
    fn malformed_partial_states_are_errors() {
        let spec = spec();
        let mut agg = Aggregator::new(&spec);
        let mut canon = Vec::new();
        let bad = [
            Sample::new(),
            Sample::from_pairs([("k", Value::List(vec![Value::Int(1)]))]),
            // One state for five aggregates.
            Sample::from_pairs([
                ("k", Value::List(vec![Value::Int(1)])),
                ("a", Value::List(vec![Value::Int(1)])),
            ]),
            // A count state that is not an int.
            Sample::from_pairs([
                ("k", Value::List(vec![Value::Int(1)])),
                (
                    "a",
                    Value::List(vec![Value::from("x"), Value::Null, Value::Null]),
                ),
            ]),
        ];
        for s in &bad {
            assert!(agg.decode_partial(s, &mut canon).is_err(), "{s:?}");
        }
    }

    #[test]
    fn a_spilled_table_puts_each_group_in_one_partition_and_empties() {
        let spec = spec();
        let mut agg = Aggregator::new(&spec);
        let rows: Vec<(i64, f64)> = (0..200).map(|i| (i % 50, i as f64)).collect();
        let mut table = table_of(&mut agg, &rows);
        let mut spill = Spill::new("groupby", 1 << 20, None);
        let mut parts = Aggregator::partition_writers(&mut spill).unwrap();
        assert_eq!(parts.len(), PARTITIONS);
        Aggregator::spill_table(&mut table, &mut parts, 0).unwrap();
        assert!(table.groups.is_empty() && table.index.is_empty() && table.bytes == 0);
        let mut seen = std::collections::HashSet::new();
        let mut used = 0;
        for w in parts {
            let run = w.finish().unwrap();
            used += usize::from(run.rows > 0);
            let mut r = RunReader::open(&run, 1 << 16).unwrap();
            let (mut rec, mut canon) = (Vec::new(), Vec::new());
            while let Some(s) = r.next_sample(&mut rec).unwrap() {
                agg.decode_partial(&s, &mut canon).unwrap();
                assert!(seen.insert(canon.clone()), "a group in two partitions");
            }
        }
        assert_eq!(seen.len(), 50);
        assert!(used > 1, "the hash spreads groups over partitions");
    }
}
