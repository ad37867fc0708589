//! Reading values and samples back (see the format in [`super`]).

use std::sync::Arc;

use super::buffers::{BufferSource, Inline, INLINE};
use super::bytes::In;
use super::error::CodecError;
use super::tensor::tensor_data;
use crate::name::Name;
use crate::sample::Sample;
use crate::value::{Tensor, Value};

/// Lists go at most this deep (and the errors a transport nests should too): corrupt bytes
/// must not overflow the stack.
pub const MAX_DEPTH: usize = 64;

fn corrupt<T>(what: impl Into<String>) -> Result<T, CodecError> {
    Err(CodecError(what.into()))
}

/// Reads what an [`super::Encoder`] wrote, with out-of-line buffers from the source `S`.
#[derive(Debug)]
pub struct Decoder<'a, S = Inline> {
    inp: In<'a>,
    names: Vec<Name>,
    source: S,
}

impl<'a, S: BufferSource> Decoder<'a, S> {
    /// A decoder reading on from `inp`.
    pub fn new(inp: In<'a>, source: S) -> Self {
        Decoder {
            inp,
            names: Vec::new(),
            source,
        }
    }
    /// Where the primitives come from (for a format that wraps values in its own records).
    pub fn input(&mut self) -> &mut In<'a> {
        &mut self.inp
    }
    /// A buffer, inline or from the source, handed to `f` (which copies it out).
    fn buffer<T>(
        &mut self,
        f: impl FnOnce(&[u8]) -> Result<T, CodecError>,
    ) -> Result<T, CodecError> {
        match self.inp.u8()? {
            INLINE => f(self.inp.bytes()?),
            tag => f(self.source.load(tag, &mut self.inp)?),
        }
    }
    /// A field name as [`super::Encoder::name`] wrote it.
    pub fn name(&mut self) -> Result<Name, CodecError> {
        match self.inp.u8()? {
            0 => {
                let n = Name::new(self.inp.str()?);
                self.names.push(n.clone());
                Ok(n)
            }
            1 => {
                let i = self.inp.u32()? as usize;
                match self.names.get(i) {
                    Some(n) => Ok(n.clone()),
                    None => corrupt(format!("field name reference {i} out of range")),
                }
            }
            t => corrupt(format!("bad field name tag {t}")),
        }
    }
    /// One value (`depth`: how many lists it is inside).
    pub fn value(&mut self, depth: usize) -> Result<Value, CodecError> {
        Ok(match self.inp.u8()? {
            0 => Value::Null,
            1 => match self.inp.u8()? {
                b @ (0 | 1) => Value::Bool(b == 1),
                b => return corrupt(format!("bad bool {b}")),
            },
            2 => Value::Int(self.inp.u64()? as i64),
            3 => Value::Float(f64::from_bits(self.inp.u64()?)),
            4 => Value::Str(self.inp.str()?.into()),
            5 => Value::Bytes(self.buffer(|b| Ok(Arc::from(b)))?),
            6 => Value::Tensor(self.tensor()?),
            7 => {
                if depth >= MAX_DEPTH {
                    return corrupt("lists nested too deeply");
                }
                let n = self.inp.count(1)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                Value::List(items)
            }
            t => return corrupt(format!("bad value tag {t}")),
        })
    }
    fn tensor(&mut self) -> Result<Tensor, CodecError> {
        let code = self.inp.u8()?;
        let ndim = self.inp.u32()? as usize;
        if ndim > 64 {
            return corrupt(format!("tensor with {ndim} dimensions"));
        }
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            let d = self.inp.u64()?;
            shape.push(usize::try_from(d).or_else(|_| corrupt("dimension overflows"))?);
        }
        let n = shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(|| CodecError(format!("tensor shape {shape:?} overflows")))?;
        let data = self.buffer(|b| tensor_data(code, n, &shape, b))?;
        Tensor::new(shape, data).or_else(|e| corrupt(e.to_string()))
    }
    /// A sample as [`super::Encoder::sample`] wrote it.
    pub fn sample(&mut self) -> Result<Sample, CodecError> {
        let n = self.inp.u32()? as usize;
        if n > self.inp.left() {
            return corrupt(format!("sample with {n} fields exceeds the frame"));
        }
        let mut s = Sample::with_capacity(n);
        for _ in 0..n {
            let k = self.name()?;
            let v = self.value(0)?;
            s.set(k, v);
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::buffers::{Buffer, BufferSink};
    use crate::codec::bytes::Out;
    use crate::codec::encode::Encoder;
    use crate::value::TensorData;

    /// Buffers by number, as a transport that hands them beside the bytes would.
    struct Numbered<'b>(Vec<&'b [u8]>);
    impl<'b> BufferSink<'b> for Numbered<'b> {
        fn store(&mut self, buf: Buffer<'b>, out: &mut Out) -> bool {
            out.u8(4);
            out.u32(self.0.len() as u32);
            self.0.push(buf.bytes());
            true
        }
    }
    impl BufferSource for Numbered<'_> {
        fn load(&self, tag: u8, inp: &mut In<'_>) -> Result<&[u8], CodecError> {
            let i = inp.u32()? as usize;
            match (tag, self.0.get(i)) {
                (4, Some(b)) => Ok(b),
                _ => corrupt(format!("no buffer {i} under tag {tag}")),
            }
        }
    }

    #[test]
    fn buffers_come_back_from_the_source_that_holds_them() {
        let t = Tensor::new(vec![2], TensorData::F32(vec![0.5, -1.0])).unwrap();
        let s = Sample::from_pairs([
            ("t", Value::Tensor(t)),
            ("b", Value::Bytes(Arc::from(&b"yz"[..]))),
        ]);
        let mut e = Encoder::new(Vec::new(), Numbered(Vec::new()));
        e.sample(&s);
        let (buf, sink) = e.into_parts();
        assert_eq!(sink.0.len(), 2);
        let mut d = Decoder::new(In::new(&buf), Numbered(sink.0.clone()));
        assert_eq!(d.sample().unwrap(), s);
        d.input().end().unwrap();
        // Without the buffers the reference is an error, and an inline reader refuses it.
        let mut d = Decoder::new(In::new(&buf), Numbered(vec![]));
        assert!(d.sample().is_err());
        assert!(Decoder::new(In::new(&buf), Inline).sample().is_err());
    }

    #[test]
    fn corrupt_bodies_are_errors() {
        let dec = |b: &[u8]| Decoder::new(In::new(b), Inline).value(0);
        assert!(dec(&[1, 2]).is_err(), "bool 2");
        assert!(dec(&[8]).is_err(), "value tag 8");
        // A tensor of 2^40 x 2^40 elements, and one with 65 dimensions.
        let mut big = vec![6, 1, 2, 0, 0, 0];
        big.extend_from_slice(&(1u64 << 40).to_le_bytes());
        big.extend_from_slice(&(1u64 << 40).to_le_bytes());
        assert!(dec(&big).unwrap_err().to_string().contains("overflows"));
        assert!(dec(&[6, 1, 65, 0, 0, 0]).is_err());
        // Lists nested deeper than MAX_DEPTH.
        let mut deep = Vec::new();
        for _ in 0..=MAX_DEPTH {
            deep.push(7);
            deep.extend_from_slice(&1u64.to_le_bytes());
        }
        deep.push(0);
        assert!(dec(&deep).unwrap_err().to_string().contains("deeply"));
        // A name reference to a name never sent.
        let one = Sample::from_pairs([("a", Value::Null)]);
        let mut e = Encoder::new(Vec::new(), Inline);
        e.sample(&one);
        let mut rec = e.into_parts().0;
        rec[4] = 1;
        assert!(Decoder::new(In::new(&rec), Inline).sample().is_err());
    }
}
