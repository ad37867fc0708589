//! Sort and group keys: the comparable part of a sample, with one total order.
//!
//! A key field holds `bool`, numbers (`int` and `float` compare with each other exactly),
//! `str` (code-point order, like Python) or `bytes`; one field must keep one of these kinds
//! across the whole input. `None` and NaN are *missing*: they sort after every value in both
//! directions (pandas' `na_position="last"`) and form one group. Tensors and lists are not
//! comparable.

use std::cmp::Ordering;
use std::sync::Arc;

use sluice_core::{Error, Result, Sample, SampleRef, Value};

/// One comparable value.
#[derive(Debug, Clone, PartialEq)]
pub enum Key {
    /// `None` or NaN.
    Missing,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
}

/// What kinds of values compare with each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Bool,
    Number,
    Str,
    Bytes,
}

impl Key {
    /// The key of `v`, or the kind of value that has none.
    fn of(v: &Value) -> std::result::Result<Key, &'static str> {
        Ok(match v {
            Value::Null => Key::Missing,
            Value::Float(f) if f.is_nan() => Key::Missing,
            Value::Bool(b) => Key::Bool(*b),
            Value::Int(i) => Key::Int(*i),
            Value::Float(f) => Key::Float(*f),
            Value::Str(s) => Key::Str(s.clone()),
            Value::Bytes(b) => Key::Bytes(b.clone()),
            other => return Err(other.kind()),
        })
    }
    fn class(&self) -> Option<Class> {
        match self {
            Key::Missing => None,
            Key::Bool(_) => Some(Class::Bool),
            Key::Int(_) | Key::Float(_) => Some(Class::Number),
            Key::Str(_) => Some(Class::Str),
            Key::Bytes(_) => Some(Class::Bytes),
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            Key::Missing => "null",
            Key::Bool(_) => "bool",
            Key::Int(_) => "int",
            Key::Float(_) => "float",
            Key::Str(_) => "str",
            Key::Bytes(_) => "bytes",
        }
    }
}

/// `i` against `f` exactly (no rounding of `i` to a float); `f` is not NaN.
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    // 2^63 as f64 is exact; every f64 in [-2^63, 2^63) truncates to an i64 exactly.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f >= LIMIT {
        return Ordering::Less;
    }
    if f < -LIMIT {
        return Ordering::Greater;
    }
    let t = f.trunc();
    match i.cmp(&(t as i64)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - t)).unwrap_or(Ordering::Equal),
        o => o,
    }
}

/// Ascending order of two present keys of one class; missing keys go last.
pub fn cmp_key(a: &Key, b: &Key) -> Ordering {
    use Key::*;
    match (a, b) {
        (Missing, Missing) => Ordering::Equal,
        (Missing, _) => Ordering::Greater,
        (_, Missing) => Ordering::Less,
        (Bool(x), Bool(y)) => x.cmp(y),
        (Int(x), Int(y)) => x.cmp(y),
        // -0.0 == 0.0, as in Python; NaN never gets here.
        (Float(x), Float(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Int(x), Float(y)) => cmp_int_float(*x, *y),
        (Float(x), Int(y)) => cmp_int_float(*y, *x).reverse(),
        (Str(x), Str(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bytes(x), Bytes(y)) => x.cmp(y),
        // Mixed classes are refused when keys are extracted; keep the order total anyway.
        (x, y) => x.class().map(|c| c as u8).cmp(&y.class().map(|c| c as u8)),
    }
}

/// Compares key tuples field by field; `descending[i]` reverses field `i` except that missing
/// keys stay last.
pub fn cmp_keys(a: &[Key], b: &[Key], descending: &[bool]) -> Ordering {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let o = cmp_key(x, y);
        let present = !matches!(x, Key::Missing) && !matches!(y, Key::Missing);
        let o = if present && descending.get(i).copied().unwrap_or(false) {
            o.reverse()
        } else {
            o
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// Appends a canonical encoding of `keys`: equal keys (under [`cmp_key`]) encode equally, so
/// the bytes serve as a hash-map key for grouping. An integral float encodes as its int.
pub fn encode_group(keys: &[Key], out: &mut Vec<u8>) {
    for k in keys {
        match k {
            Key::Missing => out.push(0),
            Key::Bool(b) => out.extend_from_slice(&[1, *b as u8]),
            Key::Int(i) => {
                out.push(2);
                out.extend_from_slice(&i.to_le_bytes());
            }
            Key::Float(f) => {
                let integral = f.fract() == 0.0
                    && *f >= -9.223_372_036_854_776e18
                    && *f < 9.223_372_036_854_776e18;
                if integral {
                    out.push(2);
                    out.extend_from_slice(&(*f as i64).to_le_bytes());
                } else {
                    out.push(3);
                    out.extend_from_slice(&f.to_bits().to_le_bytes());
                }
            }
            Key::Str(s) => {
                out.push(4);
                out.extend_from_slice(&(s.len() as u64).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Key::Bytes(b) => {
                out.push(5);
                out.extend_from_slice(&(b.len() as u64).to_le_bytes());
                out.extend_from_slice(b);
            }
        }
    }
}

/// A deterministic hash of canonical key bytes (no per-process random state), salted so a
/// partition that is split again spreads over new sub-partitions.
pub fn hash_group(bytes: &[u8], salt: u64) -> u64 {
    let mut h = sluice_core::mix64(salt ^ 0x5eed_9e37_79b9_7f4a);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = sluice_core::rng::combine(h, u64::from_le_bytes(w));
    }
    let mut w = [0u8; 8];
    w[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    sluice_core::rng::combine(h, u64::from_le_bytes(w) ^ ((bytes.len() as u64) << 56))
}

/// Wraps a per-row error with the op and the row's position in the input.
pub fn at_row(op: &str, row: u64, sample: &Sample, e: Error) -> Error {
    Error::InSample {
        op: op.to_string(),
        sample: SampleRef {
            epoch: 0,
            index: row,
            path: sample.path(),
        },
        source: Box::new(e),
    }
}

/// Extracts key tuples from samples, checking that each field exists and keeps one
/// comparable kind across the input (errors name the op, the field and the row).
#[derive(Debug)]
pub struct KeyReader {
    op: &'static str,
    fields: Vec<String>,
    /// Per field: the class seen first, and the kind that had it (for messages).
    seen: Vec<Option<(Class, &'static str)>>,
}

impl KeyReader {
    /// A reader of `fields` for `op` (used in errors).
    pub fn new(op: &'static str, fields: &[String]) -> Self {
        KeyReader {
            op,
            fields: fields.to_vec(),
            seen: vec![None; fields.len()],
        }
    }
    /// The key fields.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }
    /// The key tuple of `s`, row `row` of the input.
    pub fn read(&mut self, s: &Sample, row: u64) -> Result<Vec<Key>> {
        let mut keys = Vec::with_capacity(self.fields.len());
        for i in 0..self.fields.len() {
            let v = s
                .require(&self.fields[i], self.op)
                .map_err(|e| at_row(self.op, row, s, e))?;
            keys.push(self.check(i, v).map_err(|e| at_row(self.op, row, s, e))?);
        }
        Ok(keys)
    }
    /// The key of value `v` of field `i`, checking it against the kind seen before.
    pub fn check(&mut self, i: usize, v: &Value) -> Result<Key> {
        let field = &self.fields[i];
        let key = Key::of(v).map_err(|kind| {
            Error::type_error(format!(
                "{}: field '{field}' holds a {kind}, which cannot be compared; keys must be \
                 bool, int, float, str or bytes",
                self.op
            ))
        })?;
        if let Some(class) = key.class() {
            match self.seen[i] {
                None => self.seen[i] = Some((class, key.kind())),
                Some((c, first)) if c != class => {
                    return Err(Error::type_error(format!(
                        "{}: field '{field}' mixes {first} and {} values, which cannot be \
                         compared (ints and floats may mix; convert the field to one type)",
                        self.op,
                        key.kind()
                    )))
                }
                Some(_) => {}
            }
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(v: Value) -> Key {
        Key::of(&v).unwrap()
    }

    #[test]
    fn ints_and_floats_compare_exactly() {
        assert_eq!(cmp_key(&Key::Int(1), &Key::Float(1.5)), Ordering::Less);
        assert_eq!(cmp_key(&Key::Int(2), &Key::Float(1.5)), Ordering::Greater);
        assert_eq!(cmp_key(&Key::Int(-2), &Key::Float(-1.5)), Ordering::Less);
        assert_eq!(cmp_key(&Key::Int(3), &Key::Float(3.0)), Ordering::Equal);
        // 2^53 + 1 is not a float: rounding it would call these equal.
        let big = (1i64 << 53) + 1;
        assert_eq!(
            cmp_key(&Key::Int(big), &Key::Float((1u64 << 53) as f64)),
            Ordering::Greater
        );
        assert_eq!(
            cmp_key(&Key::Int(i64::MAX), &Key::Float(1e19)),
            Ordering::Less
        );
        assert_eq!(
            cmp_key(&Key::Float(0.0), &Key::Float(-0.0)),
            Ordering::Equal
        );
    }

    #[test]
    fn missing_keys_go_last_in_both_directions() {
        let a = [k(Value::Int(1))];
        let none = [k(Value::Null)];
        let nan = [k(Value::Float(f64::NAN))];
        assert_eq!(cmp_keys(&a, &none, &[false]), Ordering::Less);
        assert_eq!(cmp_keys(&a, &none, &[true]), Ordering::Less);
        assert_eq!(cmp_keys(&nan, &none, &[true]), Ordering::Equal);
        assert_eq!(
            cmp_keys(&[Key::Int(1)], &[Key::Int(2)], &[true]),
            Ordering::Greater
        );
    }

    #[test]
    fn strings_sort_by_code_point() {
        let (a, b) = (k(Value::from("Z")), k(Value::from("a")));
        assert_eq!(cmp_key(&a, &b), Ordering::Less);
        let (a, b) = (k(Value::from("é")), k(Value::from("z")));
        assert_eq!(cmp_key(&a, &b), Ordering::Greater);
    }

    #[test]
    fn equal_keys_encode_equally() {
        let enc = |keys: &[Key]| {
            let mut v = Vec::new();
            encode_group(keys, &mut v);
            v
        };
        assert_eq!(enc(&[Key::Int(3)]), enc(&[Key::Float(3.0)]));
        assert_ne!(enc(&[Key::Int(3)]), enc(&[Key::Float(3.5)]));
        assert_eq!(enc(&[Key::Float(-0.0)]), enc(&[Key::Float(0.0)]));
        // Field boundaries are part of the encoding: ("ab", "c") ≠ ("a", "bc").
        let s = |x: &str| Key::Str(x.into());
        assert_ne!(enc(&[s("ab"), s("c")]), enc(&[s("a"), s("bc")]));
        let h = |keys: &[Key]| hash_group(&enc(keys), 1);
        assert_eq!(h(&[Key::Int(7)]), h(&[Key::Float(7.0)]));
        assert_ne!(
            hash_group(&enc(&[Key::Int(7)]), 1),
            hash_group(&enc(&[Key::Int(7)]), 2)
        );
    }

    #[test]
    fn reader_names_missing_fields_and_mixed_kinds() {
        let mut r = KeyReader::new("sort", &["x".to_string()]);
        let row = |v: Value| Sample::from_pairs([("x", v)]);
        r.read(&row(Value::Int(1)), 0).unwrap();
        r.read(&row(Value::Float(2.5)), 1).unwrap();
        r.read(&row(Value::Null), 2).unwrap();
        let e = r.read(&row(Value::from("a")), 3).unwrap_err();
        assert!(matches!(e.root(), Error::Type(_)), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("'x'") && msg.contains("sample 3") && msg.contains("str"),
            "{msg}"
        );
        let e = r
            .read(&Sample::from_pairs([("y", Value::Int(1))]), 4)
            .unwrap_err();
        assert!(
            matches!(e.root(), Error::MissingField { field, .. } if field == "x"),
            "{e}"
        );
        let t = sluice_core::Tensor::new(vec![1], sluice_core::TensorData::U8(vec![1])).unwrap();
        let e = r.read(&row(Value::Tensor(t)), 5).unwrap_err().to_string();
        assert!(
            e.contains("tensor") && e.contains("cannot be compared"),
            "{e}"
        );
    }
}
