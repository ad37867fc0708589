//! The JPEG entropy decoder: Huffman tables (with a 10-bit lookahead) and the bit reader.

use std::cell::{OnceCell, RefCell};
use std::rc::Rc;

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
    /// For blocks only read past: [`Huffman::skips`], made on first use.
    skips: OnceCell<Box<[u16]>>,
}

/// 10 bits, not stb_image's 9: more AC codes decode with their value bits in one lookup.
/// Measured on the CV benchmark's photos (`examples/window_decode.rs`): 9 → 10 bits made
/// full-size decodes 6–13% faster; 11 bits was slower again (bigger tables to build and
/// hold in L1 for every image).
pub(super) const FAST_BITS: u32 = 10;
/// Bits of lookahead of [`Huffman::skips`].
pub(super) const SKIP_BITS: u32 = 12;
/// [`Huffman::skips`] fields: bits to consume (low 4 bits), zigzag positions passed (from
/// bit 4), and the end of the block reached (this flag).
pub(super) const SKIP_EOB: u16 = 1 << 11;

/// `fast_ac` flags: end of block, and a run of 16 zeros.
pub(super) const AC_EOB: i32 = 1 << 12;
pub(super) const AC_ZRL: i32 = 1 << 13;
/// `fast_ac` flag: the code's value bits (their count in bits 16..) follow it.
pub(super) const AC_LONG: i32 = 1 << 14;

/// Tables a thread built lately, by their DHT bytes (counts, then symbols): most files
/// of a dataset come from one encoder with the same tables (libjpeg's defaults, unless
/// it optimised them), and building one takes longer than comparing its bytes.
const CACHED: usize = 8;

impl Huffman {
    /// [`Huffman::new`], or the same table built for an earlier file on this thread.
    pub(super) fn shared(counts: &[u8; 16], symbols: &[u8]) -> Result<Rc<Huffman>> {
        thread_local! {
            static RECENT: RefCell<Vec<(Vec<u8>, Rc<Huffman>)>> = const { RefCell::new(Vec::new()) };
        }
        let key = |k: &[u8]| {
            k.len() == 16 + symbols.len() && k[..16] == counts[..] && k[16..] == *symbols
        };
        if let Some(t) =
            RECENT.with_borrow(|r| r.iter().find(|(k, _)| key(k)).map(|(_, t)| t.clone()))
        {
            return Ok(t);
        }
        let t = Rc::new(Huffman::new(counts, symbols)?);
        RECENT.with_borrow_mut(|r| {
            if r.len() == CACHED {
                r.remove(0);
            }
            r.push(([&counts[..], symbols].concat(), t.clone()));
        });
        Ok(t)
    }

    pub(super) fn new(counts: &[u8; 16], symbols: &[u8]) -> Result<Huffman> {
        let mut h = Huffman {
            fast: [0; 1 << FAST_BITS],
            maxcode: [-1; 17],
            valoffset: [0; 17],
            values: [0; 256],
            fast_ac: [0; 1 << FAST_BITS],
            skips: OnceCell::new(),
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

    /// An AC table's multi-symbol lookahead for blocks whose coefficients are not wanted
    /// (beside or above a window): for the next [`SKIP_BITS`] bits, how many bits the whole
    /// AC symbols in them (codes and value bits) take, how many zigzag positions they pass
    /// (run + 1 each, 16 for a run of zeros) and whether one is the end of block, where it
    /// stops; 0 when not even one symbol fits. Such a block is read a few symbols per
    /// lookup instead of one.
    ///
    /// Making it costs about as much as reading ~2,000 blocks saves, so with `make` false
    /// it is only given when an earlier file (sharing the table) made it; else it is empty.
    pub(super) fn skips(&self, make: bool) -> &[u16] {
        if !make {
            return self.skips.get().map_or(&[], |t| t);
        }
        self.skips.get_or_init(|| {
            let mask = (1u32 << SKIP_BITS) - 1;
            (0..1u32 << SKIP_BITS)
                .map(|idx| {
                    let (mut used, mut passed) = (0u32, 0u16);
                    while used < SKIP_BITS {
                        let window = (idx << used) & mask;
                        let e = self.fast_ac[(window >> (SKIP_BITS - FAST_BITS)) as usize];
                        let len = (e & 0xFF) as u32;
                        if e == 0 || e & AC_LONG != 0 || len > SKIP_BITS - used {
                            break;
                        }
                        if e & AC_EOB != 0 {
                            return (used + len) as u16 | passed << 4 | SKIP_EOB;
                        }
                        let step = if e & AC_ZRL != 0 {
                            16
                        } else {
                            ((e >> 8) & 15) as u16 + 1
                        };
                        // Past 63 positions no block can use the entry (and the field
                        // stays in its 7 bits).
                        if passed + step > 63 {
                            break;
                        }
                        used += len;
                        passed += step;
                    }
                    used as u16 | passed << 4
                })
                .collect()
        })
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

/// Zero bytes after each restart segment of a [`Scan`]: a refill reads 8 bytes at once
/// and may start at a segment's end.
const PAD: usize = 8;

/// A scan's entropy-coded data with the byte stuffing undone (0xFF 0x00 is 0xFF), cut at
/// its markers into restart segments, each followed by [`PAD`] zero bytes. Done once per
/// image, it lets [`Bits::refill`] load 8 bytes without looking for markers in them.
pub(super) struct Scan {
    bytes: Vec<u8>,
    /// Each segment's `[start, end)` in `bytes`, in file order.
    segments: Vec<(usize, usize)>,
}

impl Scan {
    /// The scan starting at byte `at` of `data`. A segment ends at any marker (or the end
    /// of the data); the next one starts after the RSTn marker found from there, skipping
    /// any junk, as libjpeg resynchronises. Any other marker ends the scan: past it, and
    /// past the last segment, the bits are zeros, as libjpeg feeds them to corrupt data.
    pub(super) fn new(data: &[u8], at: usize) -> Scan {
        let mut bytes = Vec::with_capacity(data.len().saturating_sub(at) + PAD);
        let mut segments = Vec::new();
        let mut i = at.min(data.len());
        loop {
            let start = bytes.len();
            // Copy to the next marker: up to each 0xFF, which is data when a 0x00 follows.
            loop {
                let Some(j) = memchr::memchr(0xFF, &data[i..]) else {
                    bytes.extend_from_slice(&data[i..]);
                    i = data.len();
                    break;
                };
                bytes.extend_from_slice(&data[i..i + j]);
                i += j;
                if data.get(i + 1) != Some(&0) {
                    break;
                }
                bytes.push(0xFF);
                i += 2;
            }
            segments.push((start, bytes.len()));
            bytes.extend_from_slice(&[0; PAD]);
            // The next RSTn, past junk (a stuffed 0xFF, fill bytes); another marker ends.
            loop {
                let (Some(&a), Some(&b)) = (data.get(i), data.get(i + 1)) else {
                    return Scan { bytes, segments };
                };
                if a == 0xFF && (0xD0..=0xD7).contains(&b) {
                    i += 2;
                    break;
                }
                if a == 0xFF && b != 0 && b != 0xFF {
                    return Scan { bytes, segments };
                }
                i += 1;
            }
        }
    }

    /// A reader at the start of the scan.
    pub(super) fn bits(&self) -> Bits<'_> {
        let (pos, end) = self.segments.first().copied().unwrap_or((0, 0));
        Bits {
            data: &self.bytes,
            segments: &self.segments,
            seg: 0,
            pos,
            end,
            acc: 0,
            nbits: 0,
        }
    }
}

/// The entropy-coded bit stream of a [`Scan`]: MSB-first in a 64-bit accumulator whose
/// top `nbits` bits are the next ones; at the end of a segment it feeds zeros.
#[derive(Clone, Copy)]
pub(super) struct Bits<'a> {
    data: &'a [u8],
    segments: &'a [(usize, usize)],
    seg: usize,
    /// The next byte to load, and the end of the segment it is in.
    pos: usize,
    end: usize,
    pub(super) acc: u64,
    pub(super) nbits: u32,
}

impl Bits<'_> {
    /// Tops the accumulator up to 56–63 bits with one 8-byte load and no branch on the
    /// data (the bits below `nbits` it ORs in again are the same stream bits).
    #[inline(always)]
    pub(super) fn refill(&mut self) {
        // Past the segment's end the load reads its zero padding.
        let p = self.pos.min(self.end);
        let w = self
            .data
            .get(p..p + 8)
            .map_or(0, |b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])));
        self.acc |= w >> self.nbits;
        self.pos = p + ((63 - self.nbits) >> 3) as usize;
        self.nbits |= 56;
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
    /// Reads `s` (0..=15) bits as a signed coefficient (JPEG's RECEIVE + EXTEND), without
    /// a branch: the sign of a coefficient is a coin toss a branch would mispredict half
    /// the time.
    #[inline(always)]
    pub(super) fn receive_extend(&mut self, s: u32) -> i32 {
        let s = s & 15;
        // Two shifts, so that `s` = 0 reads nothing.
        let v = ((self.acc >> 32) >> (32 - s)) as i32;
        self.consume(s);
        let all = (1i32 << s) - 1;
        v - i32::from(v < (1 << s) >> 1) * all
    }
    /// At a restart interval: drops the buffered bits and moves to the next segment (the
    /// data after the next RSTn marker); after the last one, zeros.
    pub(super) fn restart(&mut self) {
        self.acc = 0;
        self.nbits = 0;
        match self.segments.get(self.seg + 1) {
            Some(&(start, end)) => {
                self.seg += 1;
                (self.pos, self.end) = (start, end);
            }
            None => self.pos = self.end,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `n` bytes, 8 bits at a time, refilling before each.
    fn read(bits: &mut Bits<'_>, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                bits.refill();
                let b = bits.peek(8) as u8;
                bits.consume(8);
                b
            })
            .collect()
    }

    /// Stuffed 0xFF bytes are undone; the data ends at a marker, after which (and after
    /// the end of the file) the reader feeds zeros; a restart moves to the data after the
    /// next RSTn, past junk and fill bytes, and after the last segment stays on zeros.
    #[test]
    fn a_scan_is_destuffed_and_cut_at_its_markers() {
        let data = [
            0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, // segment 0: 12 FF 34, RST0
            0x56, 0xFF, 0x00, 0xFF, 0x00, 0xAB, 0xFF, 0xFF,
            0xD1, // 56 FF FF, junk AB, fill, RST1
            0x78, 0xFF, 0xD9, // 78, EOI
            0xFF, 0xD2, 0x99, // after EOI: never read
        ];
        let scan = Scan::new(&data, 0);
        let mut bits = scan.bits();
        assert_eq!(read(&mut bits, 5), [0x12, 0xFF, 0x34, 0, 0]);
        bits.restart();
        // Only the first byte of this segment is read before the restart: the rest is
        // skipped, as is the junk before the next RSTn.
        assert_eq!(read(&mut bits, 1), [0x56]);
        bits.restart();
        assert_eq!(read(&mut bits, 12), [0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        bits.restart();
        assert_eq!(read(&mut bits, 3), [0, 0, 0]);
        // Reading far past a segment's end stays on zeros, and never panics.
        let short = Scan::new(&[0xAA, 0xFF], 0);
        let mut bits = short.bits();
        assert_eq!(read(&mut bits, 100)[..3], [0xAA, 0, 0]);
        // An empty or out-of-range scan is all zeros.
        assert_eq!(read(&mut Scan::new(&[], 0).bits(), 3), [0, 0, 0]);
        assert_eq!(read(&mut Scan::new(&[1, 2], 9).bits(), 3), [0, 0, 0]);
    }

    /// A table met again is the one built before; another table (even one of the same
    /// counts) is built anew, and a full cache drops its oldest.
    #[test]
    fn tables_are_shared_by_their_bytes() {
        let mut counts = [0u8; 16];
        counts[1] = 2;
        let a = Huffman::shared(&counts, &[1, 2]).unwrap();
        assert!(Rc::ptr_eq(&a, &Huffman::shared(&counts, &[1, 2]).unwrap()));
        let b = Huffman::shared(&counts, &[2, 1]).unwrap();
        assert!(!Rc::ptr_eq(&a, &b));
        assert_eq!((b.fast[0], a.fast[0]), ((2 << 8) | 2, (2 << 8) | 1));
        for n in 0..CACHED as u8 {
            Huffman::shared(&counts, &[10 + n, 11 + n]).unwrap();
        }
        assert!(!Rc::ptr_eq(&a, &Huffman::shared(&counts, &[1, 2]).unwrap()));
        assert!(Huffman::shared(&[3; 16], &[1, 2, 3]).is_err());
    }

    /// Every entry of the skip lookahead is what decoding its bits symbol by symbol (the
    /// canonical decoder, then the value bits) gives: the whole symbols in the window (of
    /// at most [`FAST_BITS`] each) up to an end of block, their bits and positions passed; on JPEG's example luminance
    /// table (Annex K.3) and on one with one- and two-bit end-of-block and ZRL codes.
    #[test]
    fn the_skip_lookahead_is_symbol_by_symbol_decoding() {
        let k3 = (
            [0u8, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d],
            [
                &[
                    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41,
                ][..],
                &[
                    0x06, 0x13, 0x51, 0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1,
                ],
                &[
                    0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0, 0x24, 0x33, 0x62,
                ],
                &[
                    0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27,
                ],
            ]
            .concat(),
        );
        let mut counts = [0u8; 16];
        (counts[0], counts[1], counts[2]) = (1, 1, 2);
        let short = (counts, vec![0x00, 0xF0, 0x01, 0x32]);
        for (counts, mut symbols) in [k3, short] {
            // The rest of K.3's 162 symbols: only their count matters past 12 bits.
            let n: usize = counts.iter().map(|&c| usize::from(c)).sum();
            symbols.resize(n, 0xFA);
            let t = Huffman::new(&counts, &symbols).unwrap();
            let skips = t.skips(true);
            for idx in 0..1u32 << SKIP_BITS {
                // The window's bits, then zeros (not through a Scan: 0xFF bytes would
                // read as a marker).
                let empty = Scan::new(&[], 0);
                let mut bits = empty.bits();
                (bits.acc, bits.nbits) = (u64::from(idx) << (64 - SKIP_BITS), 63);
                let (mut used, mut passed, mut end) = (0, 0, false);
                loop {
                    let before = bits.nbits;
                    let rs = t.decode(&mut bits).unwrap_or(0xFF);
                    let (run, size) = (u16::from(rs >> 4), u32::from(rs & 15));
                    // A symbol longer than the one-symbol lookahead is left to it.
                    let len = before - bits.nbits + size;
                    if rs == 0xFF || len > FAST_BITS || len > SKIP_BITS - used {
                        break;
                    }
                    let step = match rs {
                        0x00 => 0,
                        0xF0 => 16,
                        _ => run + 1,
                    };
                    if passed + step > 63 {
                        break;
                    }
                    used += len;
                    bits.consume(size);
                    passed += step;
                    if rs == 0x00 {
                        end = true;
                        break;
                    }
                }
                let want = used as u16 | passed << 4 | if end { SKIP_EOB } else { 0 };
                assert_eq!(skips[idx as usize], want, "{idx:012b}");
            }
        }
    }

    /// The branchless RECEIVE + EXTEND is JPEG's (F.2.2.1): every size and value.
    #[test]
    fn receive_extend_is_the_jpeg_definition() {
        for s in 0..=15u32 {
            for v in 0..1u32 << s {
                let want = if s == 0 {
                    0
                } else if v < 1 << (s - 1) {
                    v as i32 - (1 << s) + 1
                } else {
                    v as i32
                };
                // `v` in the top bits, then ones that must stay unread.
                let acc = if s == 0 {
                    !0
                } else {
                    (u64::from(v) << (64 - s)) | ((1 << (64 - s)) - 1)
                };
                let empty = Scan::new(&[], 0);
                let mut bits = empty.bits();
                (bits.acc, bits.nbits) = (acc, 63);
                assert_eq!(bits.receive_extend(s), want, "s {s} v {v}");
                assert_eq!((bits.acc, bits.nbits), (acc << s, 63 - s), "s {s} v {v}");
            }
        }
    }
}
