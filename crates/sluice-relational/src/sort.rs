//! `sort(key, descending)`: a stable external merge sort.
//!
//! Rows are buffered with their keys until the buffer outgrows the memory budget; the buffer
//! is then sorted (stably) and written out as a *run*. If no run was written the sorted buffer
//! is the output. Otherwise runs are merged [`FAN_IN`] at a time — consecutive runs, with ties
//! going to the earlier run — until one pass can produce the output file. Both steps keep
//! equal keys in input order, so the result is the same as one in-memory stable sort,
//! whatever the budget (and, since the input arrives in order, whatever the thread count).

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use sluice_core::{Error, Result, Sample};

use crate::key::{cmp_keys, Key, KeyReader};
use crate::spill::{io_buffer, sample_bytes, DiskRowsWriter, Rows, Run, RunReader, Spill};

/// Runs merged at once (open files and read buffers are bounded by it).
pub const FAN_IN: usize = 64;

/// What to sort by.
///
/// ```
/// use sluice_relational::SortSpec;
/// let spec = SortSpec::try_new(vec!["label".into(), "score".into()], vec![false, true])?;
/// assert_eq!(spec.descending, [false, true]);
/// assert!(SortSpec::try_new(vec![], vec![]).is_err());
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SortSpec {
    /// Key fields, most significant first.
    pub by: Vec<String>,
    /// Per key field: largest first (missing values stay last either way).
    pub descending: Vec<bool>,
}

impl SortSpec {
    /// Checks the fields; `descending` has one flag per field, or one for all of them.
    pub fn try_new(by: Vec<String>, descending: Vec<bool>) -> Result<Self> {
        if by.is_empty() {
            return Err(Error::invalid("sort needs at least one key field"));
        }
        if let Some(dup) = by.iter().enumerate().find(|(i, f)| by[..*i].contains(f)) {
            return Err(Error::invalid(format!(
                "sort: key field '{}' is given twice",
                dup.1
            )));
        }
        let descending = match descending.len() {
            0 => vec![false; by.len()],
            1 => vec![descending[0]; by.len()],
            n if n == by.len() => descending,
            n => {
                return Err(Error::invalid(format!(
                    "sort: {n} descending flags for {} key fields",
                    by.len()
                )))
            }
        };
        Ok(SortSpec { by, descending })
    }
}

/// A run's current head in the merge heap: smallest key first, then the earliest run.
struct Head {
    keys: Vec<Key>,
    run: usize,
    rec: Vec<u8>,
    descending: Arc<[bool]>,
}

impl Head {
    fn order(&self, other: &Self) -> Ordering {
        cmp_keys(&self.keys, &other.keys, &self.descending).then(self.run.cmp(&other.run))
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        // BinaryHeap is a max-heap: reverse so the smallest head comes out first.
        other.order(self)
    }
}

/// Merges `runs` (each sorted by `by`) in one pass, handing every record, in order, to `out`.
fn merge_pass(
    runs: &[Run],
    by: &[String],
    descending: &Arc<[bool]>,
    buffer: usize,
    out: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    let mut keys = KeyReader::new("sort", by);
    let mut readers = runs
        .iter()
        .map(|r| RunReader::open(r, buffer))
        .collect::<Result<Vec<_>>>()?;
    let mut heap = BinaryHeap::with_capacity(runs.len());
    let mut head = |run: usize, readers: &mut [RunReader], rec: Vec<u8>| -> Result<Option<Head>> {
        let mut rec = rec;
        match readers[run].next_raw(&mut rec)? {
            false => Ok(None),
            true => {
                let s = sluice_core::codec::decode_sample(&rec)
                    .map_err(|e| Error::Internal(format!("spill file: {e}")))?;
                Ok(Some(Head {
                    keys: keys.read(&s, 0)?,
                    run,
                    rec,
                    descending: descending.clone(),
                }))
            }
        }
    };
    for run in 0..runs.len() {
        if let Some(h) = head(run, &mut readers, Vec::new())? {
            heap.push(h);
        }
    }
    while let Some(top) = heap.pop() {
        out(&top.rec)?;
        if let Some(h) = head(top.run, &mut readers, top.rec)? {
            heap.push(h);
        }
    }
    Ok(())
}

/// Merges sorted `runs` into the output rows, in as many passes as [`FAN_IN`] (`fan_in`)
/// requires; consumed runs are deleted.
pub fn merge_runs(
    mut runs: Vec<Run>,
    by: &[String],
    descending: &[bool],
    fan_in: usize,
    spill: &mut Spill,
) -> Result<Rows> {
    let fan_in = fan_in.max(2);
    let descending: Arc<[bool]> = descending.into();
    let buffer = io_buffer(spill.budget, 2 * fan_in as u64);
    while runs.len() > fan_in {
        spill.report.merge_passes += 1;
        let mut next = Vec::with_capacity(runs.len().div_ceil(fan_in));
        let mut rest = runs.into_iter().peekable();
        while rest.peek().is_some() {
            let group: Vec<Run> = rest.by_ref().take(fan_in).collect();
            if group.len() == 1 {
                next.extend(group);
                continue;
            }
            let mut w = spill.run_writer("merged", 4)?;
            merge_pass(&group, by, &descending, buffer, &mut |rec| w.push_raw(rec))?;
            let run = w.finish()?;
            spill.count(&run);
            next.push(run);
            group.into_iter().for_each(Run::remove);
        }
        runs = next;
    }
    spill.report.merge_passes += 1;
    let out_buffer = io_buffer(spill.budget, 4);
    let mut w = DiskRowsWriter::create(spill.dir()?, out_buffer)?;
    merge_pass(&runs, by, &descending, buffer, &mut |rec| w.push_raw(rec))?;
    spill.report.spill_files += 1;
    spill.report.spill_bytes += w.bytes();
    runs.into_iter().for_each(Run::remove);
    Ok(Rows::Disk(w.finish()?))
}

/// Writes the (sorted) rows of `buf` as one run, emptying it.
fn write_run(buf: &mut Vec<(Vec<Key>, Sample)>, spill: &mut Spill) -> Result<Run> {
    let mut w = spill.run_writer("run", 4)?;
    for (_, s) in buf.drain(..) {
        w.push(&s)?;
    }
    let run = w.finish()?;
    spill.count(&run);
    Ok(run)
}

/// Sorts `input` by `spec` within `spill.budget` bytes of buffered rows.
pub fn sort(
    input: impl Iterator<Item = Result<Sample>>,
    spec: &SortSpec,
    spill: &mut Spill,
) -> Result<Rows> {
    sort_with_fan_in(input, spec, spill, FAN_IN)
}

pub(crate) fn sort_with_fan_in(
    input: impl Iterator<Item = Result<Sample>>,
    spec: &SortSpec,
    spill: &mut Spill,
    fan_in: usize,
) -> Result<Rows> {
    let mut keys = KeyReader::new("sort", &spec.by);
    let mut buf: Vec<(Vec<Key>, Sample)> = Vec::new();
    let mut bytes = 0u64;
    let mut runs = Vec::new();
    let by_key =
        |a: &(Vec<Key>, Sample), b: &(Vec<Key>, Sample)| cmp_keys(&a.0, &b.0, &spec.descending);
    for (row, s) in input.enumerate() {
        let s = s?;
        let k = keys.read(&s, row as u64)?;
        bytes += sample_bytes(&s) + 32 * k.len() as u64;
        buf.push((k, s));
        spill.report.rows_in += 1;
        if bytes > spill.budget {
            // `sort_by` is stable: equal keys keep their input order within the run.
            buf.sort_by(by_key);
            runs.push(write_run(&mut buf, spill)?);
            bytes = 0;
        }
    }
    buf.sort_by(by_key);
    if runs.is_empty() {
        return Ok(Rows::Memory(buf.into_iter().map(|(_, s)| s).collect()));
    }
    if !buf.is_empty() {
        runs.push(write_run(&mut buf, spill)?);
    }
    drop(buf);
    merge_runs(runs, &spec.by, &spec.descending, fan_in, spill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Value;

    /// Rows with few distinct keys (many ties) and a tag recording input order.
    fn rows(n: i64) -> Vec<Sample> {
        (0..n)
            .map(|i| {
                let k = (i * 7919) % 13;
                let key = if i % 17 == 0 {
                    Value::Null
                } else if i % 5 == 0 {
                    Value::Float(k as f64 + 0.5)
                } else {
                    Value::Int(k)
                };
                Sample::from_pairs([
                    ("k", key),
                    ("s", Value::from(format!("{}", (i * 31) % 7))),
                    ("tag", Value::Int(i)),
                ])
            })
            .collect()
    }

    fn run(spec: &SortSpec, budget: u64, fan_in: usize) -> (Vec<Sample>, Spill) {
        let mut spill = Spill::new("sort", budget, None);
        let input = rows(500).into_iter().map(Ok);
        let out = sort_with_fan_in(input, spec, &mut spill, fan_in).unwrap();
        let all = (0..out.len()).map(|i| out.get(i).unwrap()).collect();
        (all, spill)
    }

    fn reference(spec: &SortSpec) -> Vec<Sample> {
        let mut keys = KeyReader::new("sort", &spec.by);
        let mut v: Vec<(Vec<Key>, Sample)> = rows(500)
            .into_iter()
            .enumerate()
            .map(|(i, s)| (keys.read(&s, i as u64).unwrap(), s))
            .collect();
        v.sort_by(|a, b| cmp_keys(&a.0, &b.0, &spec.descending));
        v.into_iter().map(|(_, s)| s).collect()
    }

    #[test]
    fn spilled_sort_equals_in_memory_stable_sort() {
        for desc in [vec![false, false], vec![true, false], vec![false, true]] {
            let spec = SortSpec::try_new(vec!["k".into(), "s".into()], desc).unwrap();
            let want = reference(&spec);
            let (mem, s0) = run(&spec, 1 << 30, FAN_IN);
            assert!(!s0.report.spilled);
            assert_eq!(mem, want);
            // ~20 runs; fan-in 3 forces several merge passes.
            let (spilled, s1) = run(&spec, 4_000, 3);
            assert!(
                s1.report.spilled && s1.report.spill_files > 10,
                "{:?}",
                s1.report
            );
            assert!(s1.report.merge_passes >= 3, "{:?}", s1.report);
            assert_eq!(spilled, want, "spec {spec:?}");
        }
    }

    #[test]
    fn missing_keys_are_last_and_ties_keep_input_order() {
        let spec = SortSpec::try_new(vec!["k".into()], vec![true]).unwrap();
        let (out, _) = run(&spec, 3_000, 4);
        let tail: Vec<_> = out
            .iter()
            .rev()
            .take_while(|s| s.get("k") == Some(&Value::Null))
            .collect();
        assert_eq!(tail.len(), 30); // i % 17 == 0 for i < 500
        for w in out.windows(2) {
            if w[0].get("k") == w[1].get("k") {
                assert!(w[0].get("tag").unwrap().as_int() < w[1].get("tag").unwrap().as_int());
            }
        }
    }

    #[test]
    fn spill_files_are_removed_with_the_spill() {
        let spec = SortSpec::try_new(vec!["k".into()], vec![]).unwrap();
        let mut spill = Spill::new("sort", 2_000, None);
        let out = sort(rows(200).into_iter().map(Ok), &spec, &mut spill).unwrap();
        let dir = spill.dir().unwrap().path().to_path_buf();
        // Merged runs are gone; only the output (data + index) is left.
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        drop(out);
        drop(spill);
        assert!(!dir.exists());
    }

    #[test]
    fn empty_input_and_bad_keys() {
        let spec = SortSpec::try_new(vec!["k".into()], vec![]).unwrap();
        let mut spill = Spill::new("sort", 100, None);
        assert!(sort(std::iter::empty(), &spec, &mut spill)
            .unwrap()
            .is_empty());
        let bad = vec![
            Sample::from_pairs([("k", Value::Int(1))]),
            Sample::from_pairs([("k", Value::from("x"))]),
        ];
        let e = sort(bad.into_iter().map(Ok), &spec, &mut spill).unwrap_err();
        assert!(matches!(e.root(), Error::Type(_)), "{e}");
        assert!(SortSpec::try_new(vec!["a".into(), "a".into()], vec![]).is_err());
        assert!(SortSpec::try_new(vec!["a".into()], vec![true, false]).is_err());
    }
}
