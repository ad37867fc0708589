//! The JPEG entropy decoder: Huffman tables (with a 10-bit lookahead) and the bit reader.

use super::corrupt;
use crate::error::Result;

/// A Huffman table: a [`FAST_BITS`]-bit lookahead table for short codes, the canonical-code
/// limits for the rest (JPEG Annex F.2.2.3).
pub(super) struct Huffman {
    /// `(length << 8) | symbol` for codes of at most [`FAST_BITS`] bits; 0 elsewhere.
    pub(super) fast: [u16; 1 << FAST_BITS],
    /// Largest code of each length (right-aligned), -1 when there is none.
    pub(super) maxcode: [i32; 17],
    /// `values` index of a length's first code, minus that code.
    pub(super) valoffset: [i32; 17],
    pub(super) values: [u8; 256],
    /// For AC tables: a code and its extra bits together when they fit in [`FAST_BITS`]:
    /// `(value << 16) | (run << 8) | total length`; [`AC_EOB`] / [`AC_ZRL`] with the code
    /// length; [`AC_LONG`] `| (size << 16) | (run << 8) | code length` when only the code
    /// fits; 0 for longer codes.
    pub(super) fast_ac: [i32; 1 << FAST_BITS],
}

/// 10 bits, not stb_image's 9: more AC codes decode with their value bits in one lookup.
/// Measured on the CV benchmark's photos (`examples/window_decode.rs`): 9 → 10 bits made
/// full-size decodes 6–13% faster; 11 bits was slower again (bigger tables to build and
/// hold in L1 for every image).
pub(super) const FAST_BITS: u32 = 10;
/// `fast_ac` flags: end of block, and a run of 16 zeros.
pub(super) const AC_EOB: i32 = 1 << 12;
pub(super) const AC_ZRL: i32 = 1 << 13;
/// `fast_ac` flag: the code's value bits (their count in bits 16..) follow it.
pub(super) const AC_LONG: i32 = 1 << 14;

impl Huffman {
    pub(super) fn new(counts: &[u8; 16], symbols: &[u8]) -> Result<Huffman> {
        let mut h = Huffman {
            fast: [0; 1 << FAST_BITS],
            maxcode: [-1; 17],
            valoffset: [0; 17],
            values: [0; 256],
            fast_ac: [0; 1 << FAST_BITS],
        };
        if symbols.len() > 256 {
            return corrupt("Huffman table with more than 256 symbols");
        }
        h.values[..symbols.len()].copy_from_slice(symbols);
        let mut code: u32 = 0;
        let mut k = 0usize;
        for len in 1..=16u32 {
            let n = usize::from(counts[len as usize - 1]);
            if n > 0 {
                h.valoffset[len as usize] = k as i32 - code as i32;
                for _ in 0..n {
                    if code >= 1 << len {
                        return corrupt("bad Huffman table");
                    }
                    if len <= FAST_BITS {
                        let shift = FAST_BITS - len;
                        let entry = ((len as u16) << 8) | u16::from(symbols[k]);
                        let first = (code << shift) as usize;
                        h.fast[first..first + (1 << shift)].fill(entry);
                    }
                    code += 1;
                    k += 1;
                }
                h.maxcode[len as usize] = code as i32 - 1;
            }
            code <<= 1;
        }
        for (i, &e) in h.fast.iter().enumerate() {
            let (len, rs) = (u32::from(e >> 8), e & 0xFF);
            let (run, s) = (i32::from(rs >> 4), u32::from(rs & 15));
            if e == 0 {
                continue;
            }
            if s == 0 {
                // End of block (0x00) or a run of 16 zeros (0xF0).
                h.fast_ac[i] = match rs {
                    0x00 => AC_EOB | len as i32,
                    0xF0 => AC_ZRL | len as i32,
                    _ => 0,
                };
            } else if len + s <= FAST_BITS {
                let extra = (i as u32 >> (FAST_BITS - len - s)) & ((1 << s) - 1);
                let v = extra as i32;
                let v = if v < 1 << (s - 1) {
                    v - (1 << s) + 1
                } else {
                    v
                };
                h.fast_ac[i] = (v << 16) | (run << 8) | (len + s) as i32;
            } else {
                // The code fits, its value bits do not: the caller reads them next, without
                // looking the code up a second time.
                h.fast_ac[i] = AC_LONG | ((s as i32) << 16) | (run << 8) | len as i32;
            }
        }
        Ok(h)
    }

    /// Decodes one symbol; `bits` must hold at least 16 bits.
    #[inline(always)]
    pub(super) fn decode(&self, bits: &mut Bits<'_>) -> Result<u8> {
        let e = self.fast[bits.peek(FAST_BITS) as usize];
        if e != 0 {
            bits.consume(u32::from(e >> 8));
            return Ok(e as u8);
        }
        for len in FAST_BITS + 1..=16 {
            let code = bits.peek(len) as i32;
            if code <= self.maxcode[len as usize] {
                bits.consume(len);
                let i = self.valoffset[len as usize] + code;
                return match usize::try_from(i).ok().and_then(|i| self.values.get(i)) {
                    Some(&v) => Ok(v),
                    None => corrupt("bad Huffman code"),
                };
            }
        }
        corrupt("bad Huffman code")
    }
}

/// The entropy-coded bit stream: MSB-first in a 64-bit accumulator, byte stuffing undone;
/// at a marker (or the end) it feeds zeros, as libjpeg does with corrupt data.
#[derive(Clone, Copy)]
pub(super) struct Bits<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
    pub(super) acc: u64,
    pub(super) nbits: u32,
}

impl<'a> Bits<'a> {
    /// The stream starting at byte `pos` of `data`, nothing read yet.
    pub(super) fn new(data: &'a [u8], pos: usize) -> Self {
        Bits {
            data,
            pos,
            acc: 0,
            nbits: 0,
        }
    }

    #[inline(always)]
    pub(super) fn refill(&mut self) {
        // Fast path: the next 8 bytes at once when none is 0xFF (no stuffing, no marker).
        if let Some(next) = self.data.get(self.pos..self.pos + 8) {
            let w = u64::from_be_bytes(next.try_into().unwrap_or([0xFF; 8]));
            let x = !w; // a 0xFF byte of w is a zero byte of x
            let has_ff = x.wrapping_sub(0x0101_0101_0101_0101) & !x & 0x8080_8080_8080_8080;
            let k = (64 - self.nbits) / 8;
            if has_ff == 0 && k > 0 {
                self.acc |= (w >> (64 - 8 * k)) << (64 - self.nbits - 8 * k);
                self.pos += k as usize;
                self.nbits += 8 * k;
                return;
            }
        }
        while self.nbits <= 56 {
            let mut byte = 0u8;
            if let Some(&b) = self.data.get(self.pos) {
                if b != 0xFF {
                    self.pos += 1;
                    byte = b;
                } else if self.data.get(self.pos + 1) == Some(&0) {
                    self.pos += 2;
                    byte = 0xFF;
                }
            }
            self.acc |= u64::from(byte) << (56 - self.nbits);
            self.nbits += 8;
        }
    }
    #[inline(always)]
    pub(super) fn peek(&self, n: u32) -> u32 {
        (self.acc >> (64 - n)) as u32
    }
    #[inline(always)]
    pub(super) fn consume(&mut self, n: u32) {
        self.acc <<= n;
        self.nbits -= n;
    }
    /// Reads `s` (0..=15) bits as a signed coefficient (JPEG's RECEIVE + EXTEND).
    #[inline(always)]
    pub(super) fn receive_extend(&mut self, s: u32) -> i32 {
        if s == 0 {
            return 0;
        }
        let v = self.peek(s) as i32;
        self.consume(s);
        if v < 1 << (s - 1) {
            v - (1 << s) + 1
        } else {
            v
        }
    }
    /// At a restart interval: drops the buffered bits and skips the RSTn marker (or any
    /// junk before it).
    pub(super) fn restart(&mut self) {
        self.acc = 0;
        self.nbits = 0;
        while self.pos + 1 < self.data.len() {
            if self.data[self.pos] == 0xFF && (0xD0..=0xD7).contains(&self.data[self.pos + 1]) {
                self.pos += 2;
                return;
            }
            if self.data[self.pos] == 0xFF
                && self.data[self.pos + 1] != 0
                && self.data[self.pos + 1] != 0xFF
            {
                return; // another marker (EOI): keep feeding zeros
            }
            self.pos += 1;
        }
    }
}
