//! Writing values and samples (see the format in [`super`]).

use super::buffers::{Buffer, BufferSink, Inline, INLINE};
use super::bytes::Out;
use super::tensor::dtype_code;
use crate::sample::Sample;
use crate::value::Value;

/// Writes values and samples, with their big buffers through the sink `S`. Field names are
/// written once per encoder: later occurrences refer back to the first, so a frame of many
/// samples with the same fields carries each name once.
#[derive(Debug, Default)]
pub struct Encoder<'a, S = Inline> {
    out: Out,
    names: Vec<&'a str>,
    sink: S,
}

impl<'a, S: BufferSink<'a>> Encoder<'a, S> {
    /// An encoder appending to `buf`.
    pub fn new(buf: Vec<u8>, sink: S) -> Self {
        Encoder {
            out: Out::new(buf),
            names: Vec::new(),
            sink,
        }
    }
    /// Where the primitives go (for a format that wraps values in its own records).
    pub fn out(&mut self) -> &mut Out {
        &mut self.out
    }
    /// The sink.
    pub fn sink(&mut self) -> &mut S {
        &mut self.sink
    }
    /// The bytes written and the sink.
    pub fn into_parts(self) -> (Vec<u8>, S) {
        (self.out.into_vec(), self.sink)
    }
    fn buffer(&mut self, buf: Buffer<'a>) {
        if !self.sink.store(buf, &mut self.out) {
            self.out.u8(INLINE);
            self.out.bytes(buf.bytes());
        }
    }
    /// A field name: tag 0 and the name the first time, tag 1 and its number after.
    pub fn name(&mut self, n: &'a str) {
        if let Some(i) = self.names.iter().position(|&m| m == n) {
            self.out.u8(1);
            self.out.u32(i as u32);
        } else {
            self.out.u8(0);
            self.out.str(n);
            self.names.push(n);
        }
    }
    /// One value: a tag byte, then its body.
    pub fn value(&mut self, v: &'a Value) {
        let out = &mut self.out;
        match v {
            Value::Null => out.u8(0),
            Value::Bool(b) => {
                out.u8(1);
                out.u8(*b as u8);
            }
            Value::Int(i) => {
                out.u8(2);
                out.u64(*i as u64);
            }
            Value::Float(f) => {
                out.u8(3);
                out.u64(f.to_bits());
            }
            Value::Str(s) => {
                out.u8(4);
                out.str(s);
            }
            Value::Bytes(b) => {
                out.u8(5);
                self.buffer(Buffer::Bytes(b));
            }
            Value::Tensor(t) => {
                out.u8(6);
                out.u8(dtype_code(t.dtype()));
                out.u32(t.shape().len() as u32);
                for &d in t.shape() {
                    out.u64(d as u64);
                }
                self.buffer(Buffer::Tensor(t));
            }
            Value::List(items) => {
                out.u8(7);
                out.u64(items.len() as u64);
                for it in items {
                    self.value(it);
                }
            }
            // Columns are only made at a plan's end, so none is encoded today; one encoded
            // anyway travels as its values, inline (they live only here, so no sink can
            // keep them).
            Value::Column(c) => {
                let values = c.to_value().unwrap_or_default();
                let mut inline = Encoder::new(Vec::new(), Inline);
                inline.value(&values);
                out.raw(&inline.into_parts().0);
            }
            // Objects pass only steps after the last one that ships or stores samples
            // (`plan::objects::keep_objects`), so none is ever encoded.
            Value::Object(_) => {
                debug_assert!(false, "an Object reached the sample codec");
                out.u8(0)
            }
        }
    }
    /// A sample: its field count (u32), then each field's name and value.
    pub fn sample(&mut self, s: &'a Sample) {
        self.out.u32(s.len() as u32);
        for (k, v) in s.iter() {
            self.name(k);
            self.value(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::codec::bytes::In;
    use crate::value::{Column, ColumnData, Tensor, TensorData};

    /// A sink that takes every buffer of at least two bytes and writes tag 9 and its size.
    #[derive(Default)]
    struct Taker<'a>(Vec<&'a [u8]>);
    impl<'a> BufferSink<'a> for Taker<'a> {
        fn store(&mut self, buf: Buffer<'a>, out: &mut Out) -> bool {
            if buf.len() < 2 {
                return false;
            }
            self.0.push(buf.bytes());
            out.u8(9);
            out.u64(buf.len() as u64);
            true
        }
    }

    #[test]
    fn the_sink_decides_which_buffers_leave() {
        let t = Tensor::new(vec![3], TensorData::U8(vec![1, 2, 3])).unwrap();
        let s = Sample::from_pairs([
            ("t", Value::Tensor(t)),
            ("small", Value::Bytes(Arc::from(&b"x"[..]))),
        ]);
        let mut e = Encoder::new(Vec::new(), Taker::default());
        e.sample(&s);
        let (buf, sink) = e.into_parts();
        assert_eq!(sink.0, vec![&[1u8, 2, 3][..]]);
        let mut i = In::new(&buf);
        assert_eq!(i.u32().unwrap(), 2);
        assert_eq!((i.u8().unwrap(), i.str().unwrap()), (0, "t"));
        assert_eq!((i.u8().unwrap(), i.u8().unwrap()), (6, 1), "tensor, u8");
        assert_eq!((i.u32().unwrap(), i.u64().unwrap()), (1, 3), "shape [3]");
        assert_eq!((i.u8().unwrap(), i.u64().unwrap()), (9, 3), "taken");
        assert_eq!((i.u8().unwrap(), i.str().unwrap()), (0, "small"));
        assert_eq!((i.u8().unwrap(), i.u8().unwrap()), (5, INLINE));
        assert_eq!(i.bytes().unwrap(), b"x");
        i.end().unwrap();
    }

    #[test]
    fn names_repeat_by_reference() {
        let s = Sample::from_pairs([("a", Value::Null)]);
        let mut e = Encoder::new(vec![7], Inline);
        e.sample(&s);
        e.sample(&s);
        let buf = e.into_parts().0;
        // Appended after the 7; the second sample names field 0.
        assert_eq!(buf[0], 7);
        assert_eq!(&buf[buf.len() - 10..], &[1, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
    }

    #[derive(Debug)]
    struct Ints(Vec<i64>);
    impl ColumnData for Ints {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn nbytes(&self) -> usize {
            8 * self.0.len()
        }
        fn to_value(&self) -> crate::Result<Value> {
            Ok(Value::List(self.0.iter().map(|&i| Value::Int(i)).collect()))
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn a_column_is_written_as_its_values() {
        let col = Value::Column(Column(Arc::new(Ints(vec![1, 2]))));
        let values = col.clone().materialized().unwrap();
        let enc = |v: &Value| {
            let mut e = Encoder::new(Vec::new(), Taker::default());
            e.value(v);
            e.into_parts().0
        };
        assert_eq!(enc(&col), enc(&values));
    }
}
