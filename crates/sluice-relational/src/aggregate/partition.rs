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
