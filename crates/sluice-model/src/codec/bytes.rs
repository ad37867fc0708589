//! The codec's primitives: little-endian integers and length-prefixed strings, written to an
//! [`Out`] and read back from an [`In`] that checks every length against what is left before
//! it slices or allocates.

use super::error::CodecError;

/// The bytes being written.
#[derive(Debug, Default)]
pub struct Out {
    buf: Vec<u8>,
}

impl Out {
    /// Writes after what `buf` already holds.
    pub fn new(buf: Vec<u8>) -> Self {
        Out { buf }
    }
    /// The bytes written (with what the buffer held before).
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }
    /// Bytes held so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// One byte.
    #[inline]
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Four bytes, little-endian.
    #[inline]
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Eight bytes, little-endian.
    #[inline]
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// `b` as it is, with no length.
    #[inline]
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    /// `b` after its length (a u64).
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.raw(b);
    }
    /// A string as its UTF-8 [`Out::bytes`].
    #[inline]
    pub fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    /// Tag 0 for `None`, else tag 1 and the string.
    pub fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
}

/// The bytes being read.
#[derive(Debug, Clone)]
pub struct In<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn corrupt<T>(what: impl Into<String>) -> Result<T, CodecError> {
    Err(CodecError(what.into()))
}

impl<'a> In<'a> {
    /// Reads `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Self {
        In { buf, pos: 0 }
    }
    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// The next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return corrupt(format!(
                "truncated: needs {n} bytes at offset {}, frame has {}",
                self.pos,
                self.buf.len()
            ));
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    /// A little-endian u32.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    /// A little-endian u64.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    /// A count (u64) of elements that each take at least `min_size` bytes of what is left:
    /// a corrupt count fails here instead of reserving memory for it.
    pub fn count(&mut self, min_size: usize) -> Result<usize, CodecError> {
        let n = self.u64()?;
        if n.saturating_mul(min_size as u64) > self.left() as u64 {
            return corrupt(format!("count {n} exceeds the frame"));
        }
        Ok(n as usize)
    }
    /// Bytes after their length, as [`Out::bytes`] wrote them.
    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let n = self.u64()?;
        let n = usize::try_from(n).or_else(|_| corrupt("length overflows"))?;
        self.take(n)
    }
    /// A string as [`Out::str`] wrote it.
    #[inline]
    pub fn str(&mut self) -> Result<&'a str, CodecError> {
        std::str::from_utf8(self.bytes()?).or_else(|_| corrupt("string is not UTF-8"))
    }
    /// An optional string as [`Out::opt_str`] wrote it.
    pub fn opt_str(&mut self) -> Result<Option<&'a str>, CodecError> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.str()?)),
            t => corrupt(format!("bad option tag {t}")),
        }
    }
    /// Fails unless everything was read.
    pub fn end(&self) -> Result<(), CodecError> {
        match self.left() {
            0 => Ok(()),
            n => corrupt(format!("{n} trailing bytes after the frame")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip_little_endian() {
        let mut o = Out::new(vec![9]);
        o.u8(1);
        o.u32(0x0403_0201);
        o.u64(u64::MAX - 1);
        o.str("hé");
        o.opt_str(None);
        o.opt_str(Some(""));
        let buf = o.into_vec();
        assert_eq!(&buf[..6], &[9, 1, 1, 2, 3, 4]);
        let mut i = In::new(&buf);
        assert_eq!(i.u8().unwrap(), 9);
        assert_eq!(i.u8().unwrap(), 1);
        assert_eq!(i.u32().unwrap(), 0x0403_0201);
        assert_eq!(i.u64().unwrap(), u64::MAX - 1);
        assert_eq!(i.str().unwrap(), "hé");
        assert_eq!(i.opt_str().unwrap(), None);
        assert_eq!(i.opt_str().unwrap(), Some(""));
        i.end().unwrap();
    }

    #[test]
    fn lengths_are_checked_before_slicing_or_allocating() {
        let mut o = Out::default();
        o.u64(u64::MAX);
        let buf = o.into_vec();
        assert!(In::new(&buf).bytes().is_err(), "length beyond the input");
        assert!(In::new(&buf).count(1).is_err(), "count beyond the input");
        assert!(In::new(&buf[..7]).u64().is_err(), "truncated");
        let mut zero = Out::default();
        zero.u64(3);
        let zero = zero.into_vec();
        assert_eq!(In::new(&zero).count(0).unwrap(), 3, "zero-size elements");
        assert!(In::new(&[2]).opt_str().is_err(), "bad tag");
        assert!(In::new(&[1, 0, 0, 0, 0, 0, 0, 0, 0xff]).str().is_err());
        let mut left = In::new(&[1, 2]);
        left.u8().unwrap();
        assert!(left.end().is_err(), "trailing byte");
    }
}
