//! A sample: an ordered map from field name to [`Value`].
//!
//! Samples have a handful of fields, so a vector with linear lookup beats a hash map here.

use crate::name::Name;

use crate::error::{Error, Result};
use crate::value::{Object, Value};

/// Declares shared field names, so sources do not allocate a name per sample:
/// `field_names!(ID = "id");` then `s.set(ID.clone(), v)`.
#[macro_export]
macro_rules! field_names {
    ($($name:ident = $text:literal),* $(,)?) => {
        $(static $name: std::sync::LazyLock<$crate::Name> =
            std::sync::LazyLock::new(|| $crate::Name::new($text));)*
    };
}

field_names!(OBJECT = "object");

/// An ordered map of named fields.
///
/// ```
/// use sluice_model::{Sample, Value};
/// let mut s = Sample::new();
/// s.set("id", Value::Int(3));
/// assert_eq!(s.get("id"), Some(&Value::Int(3)));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    fields: Vec<(Name, Value)>,
}

impl Sample {
    /// An empty sample.
    pub fn new() -> Self {
        Sample { fields: Vec::new() }
    }
    /// An empty sample with room for `n` fields.
    pub fn with_capacity(n: usize) -> Self {
        Sample {
            fields: Vec::with_capacity(n),
        }
    }
    /// Builds a sample from `(name, value)` pairs; later duplicates overwrite earlier ones.
    pub fn from_pairs<K: Into<Name>>(pairs: impl IntoIterator<Item = (K, Value)>) -> Self {
        let mut s = Sample::new();
        for (k, v) in pairs {
            s.set(k, v);
        }
        s
    }
    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v)
    }
    /// A mutable reference to the value of `name`, if present.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Value> {
        self.fields
            .iter_mut()
            .find(|(k, _)| &**k == name)
            .map(|(_, v)| v)
    }
    /// The value of `name`, or a [`Error::MissingField`] naming `op`.
    pub fn require(&self, name: &str, op: &str) -> Result<&Value> {
        self.get(name).ok_or_else(|| self.missing(name, op))
    }
    /// Removes and returns `name`, or a [`Error::MissingField`] naming `op`.
    pub fn take(&mut self, name: &str, op: &str) -> Result<Value> {
        match self.fields.iter().position(|(k, _)| &**k == name) {
            Some(i) => Ok(std::mem::take(&mut self.fields[i].1)),
            None => Err(self.missing(name, op)),
        }
    }
    fn missing(&self, name: &str, op: &str) -> Error {
        Error::MissingField {
            field: name.to_string(),
            op: op.to_string(),
            available: self.names().collect::<Vec<_>>().join(", "),
        }
    }
    /// Sets `name`, keeping its position if it exists, appending otherwise.
    pub fn set(&mut self, name: impl Into<Name>, value: Value) {
        let name = name.into();
        match self.fields.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((name, value)),
        }
    }
    /// Appends `name`, which the caller knows is not a field yet (a dict's keys): no search.
    pub fn push_new(&mut self, name: Name, value: Value) {
        debug_assert!(self.get(&name).is_none(), "field '{name}' set twice");
        self.fields.push((name, value));
    }
    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &str) -> Option<Value> {
        let i = self.fields.iter().position(|(k, _)| &**k == name)?;
        Some(self.fields.remove(i).1)
    }
    /// Field names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(k, _)| &**k)
    }
    /// `(name, value)` pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Name, &Value)> {
        self.fields.iter().map(|(k, v)| (k, v))
    }
    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }
    /// Whether the sample has no fields.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
    /// Approximate payload size in bytes.
    pub fn nbytes(&self) -> usize {
        self.fields.iter().map(|(_, v)| v.nbytes()).sum()
    }
    /// A sample that is an object of the bindings' own ([`Object`]), handed on unconverted.
    pub fn from_object(o: Object) -> Self {
        Sample {
            fields: vec![(OBJECT.clone(), Value::Object(o))],
        }
    }
    /// The object this sample is (see [`Sample::from_object`]), or the sample back.
    pub fn into_object(mut self) -> std::result::Result<Object, Sample> {
        if let [(_, Value::Object(_))] = self.fields.as_slice() {
            if let Some((_, Value::Object(o))) = self.fields.pop() {
                return Ok(o);
            }
        }
        Err(self)
    }
    /// The `path` field as text, used to name a sample in errors.
    pub fn path(&self) -> Option<String> {
        self.get("path").and_then(Value::as_str).map(str::to_string)
    }
}

impl IntoIterator for Sample {
    type Item = (Name, Value);
    type IntoIter = std::vec::IntoIter<(Name, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.fields.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keeps_order_and_overwrites() {
        let mut s = Sample::new();
        s.set("b", Value::Int(1));
        s.set("a", Value::Int(2));
        s.set("b", Value::Int(3));
        assert_eq!(s.names().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(s.get("b"), Some(&Value::Int(3)));
    }

    #[test]
    fn missing_field_names_op_and_fields() {
        let s = Sample::from_pairs([("x", Value::Int(1))]);
        let e = s.require("image", "decode").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("'image'") && msg.contains("decode") && msg.contains('x'),
            "{msg}"
        );
    }
}
