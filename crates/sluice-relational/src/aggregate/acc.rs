//! Per-group accumulators: their state while rows are added, merged with a later partial
//! state of the same group, written to a spill file as a value and read back, and finished
//! into the output value.

use sluice_core::{Error, Result, Value};

use super::fsum::{fsum_add, fsum_total};
use super::spec::AggFn;
use crate::key::{Key, KeyReader};

/// A sum of numbers: ints exactly in an i128, floats exactly as Shewchuk partials, and
/// infinities apart (they would poison the partials).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct SumAcc {
    n: u64,
    int: i128,
    pub(super) floats: Vec<f64>,
    any_float: bool,
    inf: f64,
}

impl SumAcc {
    pub(super) fn add(&mut self, v: &Value) -> std::result::Result<(), &'static str> {
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
pub(super) enum Acc {
    Count(u64),
    Sum(SumAcc),
    Mean(SumAcc),
    /// The extreme so far: its key (to compare) and its original value.
    Min(Option<(Key, Value)>),
    Max(Option<(Key, Value)>),
}

impl Acc {
    pub(super) fn new(f: AggFn) -> Acc {
        match f {
            AggFn::Count => Acc::Count(0),
            AggFn::Sum => Acc::Sum(SumAcc::default()),
            AggFn::Mean => Acc::Mean(SumAcc::default()),
            AggFn::Min => Acc::Min(None),
            AggFn::Max => Acc::Max(None),
        }
    }
    pub(super) fn bytes(&self) -> u64 {
        64 + match self {
            Acc::Sum(s) | Acc::Mean(s) => 8 * s.floats.len() as u64,
            Acc::Min(Some((_, v))) | Acc::Max(Some((_, v))) => 2 * v.nbytes() as u64,
            _ => 0,
        }
    }
    /// Folds `other` (a later partial state of the same group) into this one.
    pub(super) fn merge(&mut self, other: Acc) {
        match (self, other) {
            (Acc::Count(a), Acc::Count(b)) => *a += b,
            (Acc::Sum(a), Acc::Sum(b)) | (Acc::Mean(a), Acc::Mean(b)) => a.merge(&b),
            (Acc::Min(a), Acc::Min(b)) => keep_extreme(a, b, std::cmp::Ordering::Less),
            (Acc::Max(a), Acc::Max(b)) => keep_extreme(a, b, std::cmp::Ordering::Greater),
            _ => {}
        }
    }
    pub(super) fn finish(&self) -> std::result::Result<Value, String> {
        Ok(match self {
            Acc::Count(n) => Value::Int(*n as i64),
            Acc::Sum(s) => s.sum()?,
            Acc::Mean(s) => s.mean(),
            Acc::Min(m) | Acc::Max(m) => m.as_ref().map_or(Value::Null, |(_, v)| v.clone()),
        })
    }
    pub(super) fn to_value(&self) -> Value {
        match self {
            Acc::Count(n) => Value::Int(*n as i64),
            Acc::Sum(s) | Acc::Mean(s) => s.to_value(),
            Acc::Min(m) | Acc::Max(m) => Value::List(m.iter().map(|(_, v)| v.clone()).collect()),
        }
    }
    /// A partial state read back from a spill file (`f` says which kind).
    pub(super) fn from_value(f: AggFn, v: &Value, keys: &mut KeyReader, i: usize) -> Result<Acc> {
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
pub(super) fn keep_extreme(
    a: &mut Option<(Key, Value)>,
    b: Option<(Key, Value)>,
    want: std::cmp::Ordering,
) {
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

#[cfg(test)]
mod tests {
    use super::super::fsum::fsum;
    use super::*;

    #[test]
    fn merged_halves_equal_one_pass() {
        let xs: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919) % 1000) as f64 * 1.1e-3 - 0.37)
            .collect();
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
}
