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

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sluice_core::{Error, Result, Sample, Value};

use crate::key::{at_row, cmp_keys, encode_group, hash_group, Key, KeyReader};
use crate::sort::{merge_runs, FAN_IN};
use crate::spill::{Rows, Run, RunReader, RunWriter, Spill};

/// Partition files a spilled table is split into.
pub const PARTITIONS: usize = 16;
/// Times a partition that is still too big may be split again.
pub const MAX_DEPTH: u64 = 4;

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
    fn name(self) -> &'static str {
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

// ---------------------------------------------------------------------------------------
// Exact float sums

/// Adds `x` to Shewchuk partials (non-overlapping, increasing magnitude): exact.
fn fsum_add(partials: &mut Vec<f64>, mut x: f64) {
    let mut i = 0;
    for j in 0..partials.len() {
        let mut y = partials[j];
        if x.abs() < y.abs() {
            std::mem::swap(&mut x, &mut y);
        }
        let hi = x + y;
        let lo = y - (hi - x);
        if lo != 0.0 {
            partials[i] = lo;
            i += 1;
        }
        x = hi;
    }
    partials.truncate(i);
    partials.push(x);
}

/// The correctly rounded value of the partials' exact sum (Python's `math.fsum` ending).
fn fsum_total(partials: &[f64]) -> f64 {
    let mut n = partials.len();
    if n == 0 {
        return 0.0;
    }
    n -= 1;
    let mut hi = partials[n];
    let mut lo = 0.0;
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    // Round half to even across the remaining partials.
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    hi
}

// ---------------------------------------------------------------------------------------
// Accumulators

/// A sum of numbers: ints exactly in an i128, floats exactly as Shewchuk partials, and
/// infinities apart (they would poison the partials).
#[derive(Debug, Clone, Default, PartialEq)]
struct SumAcc {
    n: u64,
    int: i128,
    floats: Vec<f64>,
    any_float: bool,
    inf: f64,
}

impl SumAcc {
    fn add(&mut self, v: &Value) -> std::result::Result<(), &'static str> {
        match v {
            Value::Null => return Ok(()),
            Value::Float(f) if f.is_nan() => return Ok(()),
            Value::Int(i) => self.int += *i as i128,
            Value::Bool(b) => self.int += *b as i128,
            Value::Float(f) => {
                self.any_float = true;
                if f.is_infinite() {
                    self.inf += f;
                } else {
                    fsum_add(&mut self.floats, *f);
                }
            }
            other => return Err(other.kind()),
        }
        self.n += 1;
        Ok(())
    }
    fn merge(&mut self, o: &SumAcc) {
        self.n += o.n;
        self.int += o.int;
        self.any_float |= o.any_float;
        self.inf += o.inf;
        for &p in &o.floats {
            fsum_add(&mut self.floats, p);
        }
    }
    fn float_total(&self) -> f64 {
        if self.inf != 0.0 || self.inf.is_nan() {
            return self.inf;
        }
        let mut p = self.floats.clone();
        // The int part is exact; its one rounding to f64 is the same however rows grouped.
        fsum_add(&mut p, self.int as f64);
        fsum_total(&p)
    }
    fn sum(&self) -> std::result::Result<Value, String> {
        if self.n == 0 {
            return Ok(Value::Null);
        }
        if self.any_float {
            return Ok(Value::Float(self.float_total()));
        }
        i64::try_from(self.int)
            .map(Value::Int)
            .map_err(|_| format!("sum {} overflows int64", self.int))
    }
    fn mean(&self) -> Value {
        if self.n == 0 {
            return Value::Null;
        }
        Value::Float(self.float_total() / self.n as f64)
    }
    fn to_value(&self) -> Value {
        Value::List(vec![
            Value::Int(self.n as i64),
            Value::Int((self.int >> 64) as i64),
            Value::Int(self.int as i64),
            Value::Bool(self.any_float),
            Value::Float(self.inf),
            Value::List(self.floats.iter().map(|&f| Value::Float(f)).collect()),
        ])
    }
    fn from_value(v: &Value) -> Option<SumAcc> {
        let Value::List(l) = v else { return None };
        match l.as_slice() {
            [Value::Int(n), Value::Int(hi), Value::Int(lo), Value::Bool(any), Value::Float(inf), Value::List(fl)] => {
                Some(SumAcc {
                    n: *n as u64,
                    int: ((*hi as i128) << 64) | (*lo as u64 as i128),
                    any_float: *any,
                    inf: *inf,
                    floats: fl
                        .iter()
                        .map(|f| match f {
                            Value::Float(f) => Some(*f),
                            _ => None,
                        })
                        .collect::<Option<_>>()?,
                })
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Acc {
    Count(u64),
    Sum(SumAcc),
    Mean(SumAcc),
    /// The extreme so far: its key (to compare) and its original value.
    Min(Option<(Key, Value)>),
    Max(Option<(Key, Value)>),
}

impl Acc {
    fn new(f: AggFn) -> Acc {
        match f {
            AggFn::Count => Acc::Count(0),
            AggFn::Sum => Acc::Sum(SumAcc::default()),
            AggFn::Mean => Acc::Mean(SumAcc::default()),
            AggFn::Min => Acc::Min(None),
            AggFn::Max => Acc::Max(None),
        }
    }
    fn bytes(&self) -> u64 {
        64 + match self {
            Acc::Sum(s) | Acc::Mean(s) => 8 * s.floats.len() as u64,
            Acc::Min(Some((_, v))) | Acc::Max(Some((_, v))) => 2 * v.nbytes() as u64,
            _ => 0,
        }
    }
    /// Folds `other` (a later partial state of the same group) into this one.
    fn merge(&mut self, other: Acc) {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::Sum(a), Acc::Sum(b)) | (Acc::Mean(a), Acc::Mean(b)) => a.merge(&b),
            (Acc::Min(a), Acc::Min(b)) => keep_extreme(a, b, std::cmp::Ordering::Less),
            (Acc::Max(a), Acc::Max(b)) => keep_extreme(a, b, std::cmp::Ordering::Greater),
            _ => {}
        }
    }
    fn finish(&self) -> std::result::Result<Value, String> {
        Ok(match self {
            Acc::Count(n) => Value::Int(*n as i64),
            Acc::Sum(s) => s.sum()?,
            Acc::Mean(s) => s.mean(),
            Acc::Min(m) | Acc::Max(m) => m.as_ref().map_or(Value::Null, |(_, v)| v.clone()),
        })
    }
    fn to_value(&self) -> Value {
        match self {
            Acc::Count(n) => Value::Int(*n as i64),
            Acc::Sum(s) | Acc::Mean(s) => s.to_value(),
            Acc::Min(m) | Acc::Max(m) => Value::List(m.iter().map(|(_, v)| v.clone()).collect()),
        }
    }
    /// A partial state read back from a spill file (`f` says which kind).
    fn from_value(f: AggFn, v: &Value, keys: &mut KeyReader, i: usize) -> Result<Acc> {
        let bad = || Error::Internal(format!("spill file: bad {} state {v:?}", f.name()));
        Ok(match f {
            AggFn::Count => Acc::Count(v.as_int().ok_or_else(bad)? as u64),
            AggFn::Sum => Acc::Sum(SumAcc::from_value(v).ok_or_else(bad)?),
            AggFn::Mean => Acc::Mean(SumAcc::from_value(v).ok_or_else(bad)?),
            AggFn::Min | AggFn::Max => {
                let Value::List(l) = v else { return Err(bad()) };
                let m = match l.first() {
                    None => None,
                    Some(x) => Some((keys.check(i, x)?, x.clone())),
                };
                if f == AggFn::Min {
                    Acc::Min(m)
                } else {
                    Acc::Max(m)
                }
            }
        })
    }
}

/// Keeps `a` unless `b` is strictly beyond it in direction `want` (ties keep the earlier).
fn keep_extreme(a: &mut Option<(Key, Value)>, b: Option<(Key, Value)>, want: std::cmp::Ordering) {
    if let Some((bk, bv)) = b {
        let replace = match a {
            None => true,
            Some((ak, _)) => crate::key::cmp_key(&bk, ak) == want,
        };
        if replace {
            *a = Some((bk, bv));
        }
    }
}

// ---------------------------------------------------------------------------------------
// The table

struct Group {
    keys: Vec<Key>,
    /// The key fields' values as first seen.
    values: Vec<Value>,
    accs: Vec<Acc>,
}

fn accs_bytes(g: &Group) -> u64 {
    g.accs.iter().map(Acc::bytes).sum()
}

/// Groups by canonical key bytes, in first-seen order, with an estimate of their memory.
#[derive(Default)]
struct Table {
    index: HashMap<Vec<u8>, usize>,
    groups: Vec<(Vec<u8>, Group)>,
    bytes: u64,
}

impl Table {
    fn insert(&mut self, canon: &[u8], g: Group) -> usize {
        self.bytes += 2 * canon.len() as u64
            + 96
            + g.values.iter().map(|v| 48 + v.nbytes() as u64).sum::<u64>()
            + accs_bytes(&g);
        self.index.insert(canon.to_vec(), self.groups.len());
        self.groups.push((canon.to_vec(), g));
        self.groups.len() - 1
    }
    /// Folds a later partial state of a group into the table.
    fn merge(&mut self, canon: &[u8], g: Group) {
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
    fn clear(&mut self) {
        self.index.clear();
        self.groups.clear();
        self.bytes = 0;
    }
}

const OP: &str = "groupby";

/// One aggregation: the spec, and readers checking keys and min/max fields.
struct Aggregator<'a> {
    spec: &'a AggregateSpec,
    keys: KeyReader,
    /// Checks the kinds of min/max fields (one slot per aggregate; others leave theirs unused).
    values: KeyReader,
}

impl<'a> Aggregator<'a> {
    fn new(spec: &'a AggregateSpec) -> Self {
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

    fn new_group(&self, keys: Vec<Key>, values: Vec<Value>) -> Group {
        Group {
            keys,
            values,
            accs: self.spec.aggs.iter().map(|a| Acc::new(a.func)).collect(),
        }
    }

    /// Folds input row `row` into `table`.
    fn add_row(
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
    fn spill_table(table: &mut Table, parts: &mut [RunWriter], salt: u64) -> Result<()> {
        for (canon, g) in &table.groups {
            let p = (hash_group(canon, salt) % parts.len() as u64) as usize;
            parts[p].push(&Self::encode_partial(g))?;
        }
        table.clear();
        Ok(())
    }

    /// The output rows of `table`'s groups, sorted by key.
    fn finish_table(&self, table: Table) -> Result<Vec<Sample>> {
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

    fn partition_writers(spill: &mut Spill) -> Result<Vec<RunWriter>> {
        (0..PARTITIONS)
            .map(|_| spill.run_writer("part", 2 * PARTITIONS as u64))
            .collect()
    }

    /// Reduces one partition file into a sorted run (or, if its groups do not fit, splits it
    /// again with salt `depth` and reduces the pieces), appended to `out`.
    fn reduce(
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
    use super::*;

    fn fsum(xs: &[f64]) -> f64 {
        let mut p = Vec::new();
        for &x in xs {
            fsum_add(&mut p, x);
        }
        fsum_total(&p)
    }

    #[test]
    fn float_sums_are_exact_whatever_the_order() {
        assert_eq!(fsum(&[1e100, 1.0, -1e100]), 1.0);
        assert_eq!(fsum(&[0.1; 10]), 1.0);
        let xs: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f64 * 1.1e-3 - 0.37)
            .collect();
        let mut rev = xs.clone();
        rev.reverse();
        assert_eq!(fsum(&xs).to_bits(), fsum(&rev).to_bits());
        // Merged halves equal one pass.
        let (mut a, mut b) = (SumAcc::default(), SumAcc::default());
        for x in &xs[..300] {
            a.add(&Value::Float(*x)).unwrap();
        }
        for x in &xs[300..] {
            b.add(&Value::Float(*x)).unwrap();
        }
        b.merge(&a);
        assert_eq!(b.float_total().to_bits(), fsum(&xs).to_bits());
    }

    #[test]
    fn sum_states_round_trip() {
        let mut a = SumAcc::default();
        for v in [
            Value::Int(i64::MAX),
            Value::Int(i64::MAX),
            Value::Float(0.25),
            Value::Null,
        ] {
            a.add(&v).unwrap();
        }
        assert_eq!(SumAcc::from_value(&a.to_value()), Some(a.clone()));
        assert_eq!(a.n, 3);
        let mut ints = SumAcc::default();
        ints.add(&Value::Int(i64::MAX)).unwrap();
        ints.add(&Value::Int(1)).unwrap();
        assert!(ints.sum().is_err(), "int64 overflow must be reported");
        assert!(ints.clone().add(&Value::from("x")).is_err());
    }

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
