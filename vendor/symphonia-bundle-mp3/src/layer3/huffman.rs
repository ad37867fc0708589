// Symphonia
// Copyright (c) 2019-2026 The Project Symphonia Developers.
// Modified for sluice (2026): a table-driven Huffman path over a 64-bit bit window.
//
// This Source Code Form is subject to the terms of the Mozilla Public
// License, v. 2.0. If a copy of the MPL was not distributed with this
// file, You can obtain one at https://mozilla.org/MPL/2.0/.

//! Huffman decoding of the spectral samples (part3), the hot loop of MP3 decoding.
//!
//! Same results as `requantize::read_huffman_samples` (kept as the reference and compared
//! against this one by the tests below), but the codes are read from a 64-bit register of
//! the main data, reloaded by one unaligned load only when it holds fewer bits than the
//! longest pair needs, instead of a byte-wise refill; one or two table look-ups (a root of up
//! to 10 bits and one sub-table) instead of up to three 8-bit steps; and the linbits and sign
//! bits taken from the same register without branching on the sample. Upstream's loop was
//! about half of an MPEG-2 clip's decode time (`perf` over sluice's ASR benchmark: 24 % of the
//! pipeline, decode ~50 %; sluice's docs/BENCHMARKS.md, "ASR past the decode-only limit").

use symphonia_core::errors::{Result, decode_error};

use lazy_static::lazy_static;
use log::info;

use super::GranuleChannel;
use super::codebooks::{CODEBOOK_LINBITS, MPEG_QUADS_TABLES, MPEG_TABLES, mpeg_gen_value};
use super::requantize::POW43;

/// Widest root table: codes up to this length take one look-up.
const MAX_ROOT_BITS: u32 = 10;
/// Marks a link entry: bits 0..5 the sub-table's width, bits 5..31 its offset.
const LINK: u32 = 1 << 31;

/// One Huffman code as a flat look-up: `entries[next root bits]` is a leaf (`len << 8 | value`,
/// `len` the whole code's length) or a link to a sub-table indexed by the bits after the root.
/// A zero entry is a bit pattern no code starts with.
struct Table {
    root: u32,
    /// The longest code's length.
    max_len: u32,
    entries: Vec<u32>,
}

impl Table {
    fn new(codes: &[u32], lens: &[u8], wrap: u16) -> Option<Table> {
        let max_len = u32::from(*lens.iter().max()?);
        let root = max_len.min(MAX_ROOT_BITS);
        let mut entries = vec![0u32; 1 << root];
        // Codes longer than the root, grouped by their root-bit prefix.
        let mut long: Vec<(u32, u32, u32, u32)> = Vec::new();
        for (i, (&code, &len)) in codes.iter().zip(lens).enumerate() {
            let len = u32::from(len);
            let leaf = (len << 8) | u32::from(mpeg_gen_value(i as u16, wrap));
            if len <= root {
                let first = (code << (root - len)) as usize;
                entries[first..first + (1 << (root - len))].fill(leaf);
            }
            else {
                long.push((code >> (len - root), code, len, leaf));
            }
        }
        long.sort_unstable();
        let mut start = 0;
        while start < long.len() {
            let prefix = long[start].0;
            let end = start + long[start..].iter().take_while(|c| c.0 == prefix).count();
            let sub = long[start..end].iter().map(|c| c.2).max().unwrap_or(root) - root;
            let offset = entries.len();
            entries.resize(offset + (1 << sub), 0);
            entries[prefix as usize] = LINK | ((offset as u32) << 5) | sub;
            for &(_, code, len, leaf) in &long[start..end] {
                let tail = code & ((1 << (len - root)) - 1);
                let first = offset + (tail << (sub - (len - root))) as usize;
                entries[first..first + (1 << (sub - (len - root)))].fill(leaf);
            }
            start = end;
        }
        Some(Table { root, max_len, entries })
    }

    /// The code at the top of `window`: `(value, length)`, or `None` for no code.
    #[inline(always)]
    fn decode(&self, window: u64) -> Option<(u32, u32)> {
        let mut e = self.entries[(window >> (64 - self.root)) as usize];
        if e & LINK != 0 {
            let sub = e & 31;
            let offset = ((e & !LINK) >> 5) as usize;
            e = self.entries[offset + ((window << self.root) >> (64 - sub)) as usize];
        }
        let len = (e >> 8) & 31;
        if len == 0 { None } else { Some((e & 0xff, len)) }
    }
}

lazy_static! {
    /// The 18 distinct big_values tables (16..=23 share table 16, 24..=31 table 17); `None`
    /// for the empty ones (0, 4 and 14).
    static ref BIG_VALUE_TABLES: Vec<Option<Table>> =
        MPEG_TABLES.iter().map(|t| Table::new(t.codes, t.lens, t.wrap)).collect();
    /// The count1 (quadruples) tables A and B.
    static ref QUAD_TABLES: Vec<Option<Table>> =
        MPEG_QUADS_TABLES.iter().map(|t| Table::new(t.codes, t.lens, t.wrap)).collect();
}

/// MSB-first bits of `buf` from bit `pos`, the next ones held in a 64-bit register that is
/// reloaded by one unaligned load only when it holds fewer bits than the next code may take;
/// reads past the end see zeros, and consuming past it is an overrun.
struct Reader<'a> {
    buf: &'a [u8],
    start: usize,
    pos: usize,
    window: u64,
    /// Valid bits at the top of `window`.
    avail: u32,
}

impl<'a> Reader<'a> {
    /// The bits a fresh window surely holds: 64 less the offset in its first byte.
    const WINDOW: u32 = 57;

    fn new(buf: &'a [u8], start: usize) -> Self {
        Reader { buf, start, pos: start, window: 0, avail: 0 }
    }

    /// The next bits at the top of a word, at least `need` (≤ 57) of them valid.
    #[inline(always)]
    fn peek(&mut self, need: u32) -> u64 {
        if self.avail < need {
            let i = self.pos >> 3;
            let mut word = [0u8; 8];
            match self.buf.get(i..i + 8) {
                Some(b) => word.copy_from_slice(b),
                None => {
                    let tail = self.buf.get(i..).unwrap_or(&[]);
                    word[..tail.len()].copy_from_slice(tail);
                }
            }
            self.window = u64::from_be_bytes(word) << (self.pos & 7);
            self.avail = Self::WINDOW;
        }
        self.window
    }

    /// Consumes `used` bits of what [`peek`](Self::peek) promised; an overrun past the data.
    #[inline(always)]
    fn consume(&mut self, used: u32) -> Result<()> {
        self.window <<= used;
        self.avail -= used;
        self.pos += used as usize;
        if self.pos > self.buf.len() * 8 { overrun() } else { Ok(()) }
    }

    /// Bits consumed since `start`.
    fn read(&self) -> u32 {
        (self.pos - self.start) as u32
    }
}

/// One big_values sample `v` of the code at the top of `w`, `used` bits in: its linbits when
/// saturated, then its sign, `±v^(4/3)`. Whether a sample is zero is a coin toss, so the sign
/// is taken without branching: a zero sample reads no sign bit and stays +0.0 (`POW43[0]`).
#[inline(always)]
fn big_value(w: u64, used: &mut u32, mut v: usize, linbits: u32, pow43: &[f32]) -> f32 {
    if v == 15 && linbits > 0 {
        v += ((w << *used) >> (64 - linbits)) as usize;
        *used += linbits;
    }
    let nz = u32::from(v > 0);
    let sign = ((w << *used) >> 63) as u32 & nz;
    *used += nz;
    f32::from_bits(pow43[v].to_bits() | (sign << 31))
}

fn overrun<T>() -> Result<T> {
    decode_error("mpa: huffman decode overrun")
}

/// Reads the Huffman-coded spectral samples of one channel of a granule, starting `start` bits
/// into `main_data`, into `buf` (each raised to the 4/3 power), and returns the start of the
/// rzero partition. Same contract as `requantize::read_huffman_samples`; an error when the codes
/// or the part3 length run past the main data, or on a bit pattern no code starts with.
pub(super) fn read_huffman_samples(
    main_data: &[u8],
    start: usize,
    channel: &GranuleChannel,
    part3_bits: u32,
    buf: &mut [f32; 576],
) -> Result<usize> {
    if part3_bits == 0 {
        buf.fill(0.0);
        return Ok(0);
    }

    let pow43: &[f32] = &POW43[..];
    if start > main_data.len() * 8 {
        return overrun();
    }
    let mut bits = Reader::new(main_data, start);

    let mut i = 0;
    let big_values_len = 2 * channel.big_values as usize;
    let regions: [usize; 3] = [
        channel.region1_start.min(big_values_len),
        channel.region2_start.min(big_values_len),
        576.min(big_values_len),
    ];

    for (region_idx, &region_end) in regions.iter().enumerate() {
        let table_select = channel.table_select[region_idx] as usize;
        let table = match table_select {
            0..=15 => &BIG_VALUE_TABLES[table_select],
            16..=23 => &BIG_VALUE_TABLES[16],
            _ => &BIG_VALUE_TABLES[17],
        };
        let linbits = CODEBOOK_LINBITS[table_select];

        let Some(table) = table
        else {
            while i < region_end {
                buf[i] = 0.0;
                buf[i + 1] = 0.0;
                i += 2;
            }
            continue;
        };

        // A pair takes at most its code, two linbits fields and two signs.
        let need = table.max_len + 2 * (linbits + 1);
        while i < region_end && bits.read() < part3_bits {
            let w = bits.peek(need);
            let Some((value, mut used)) = table.decode(w)
            else {
                return overrun();
            };
            buf[i] = big_value(w, &mut used, (value >> 4) as usize, linbits, pow43);
            buf[i + 1] = big_value(w, &mut used, (value & 0xf) as usize, linbits, pow43);
            i += 2;
            bits.consume(used)?;
        }
    }

    let Some(quads) = &QUAD_TABLES[usize::from(channel.count1table_select)]
    else {
        return overrun();
    };

    // A quadruple takes at most its code and four signs.
    let need = quads.max_len + 4;
    while i <= 572 && bits.read() < part3_bits {
        let w = bits.peek(need);
        let Some((value, mut used)) = quads.decode(w)
        else {
            return overrun();
        };
        // One sign bit per non-zero sample, in sample order (value bit 3 is sample 0): the
        // same bits, in the same order, as upstream's single read of all of them.
        let mut rest = w << used;
        for k in 0..4 {
            let nz = (value >> (3 - k)) & 1;
            let sign = (rest >> 63) as u32 & nz;
            // ±1.0 or +0.0
            buf[i + k] = f32::from_bits((nz * 0x3f80_0000) | (sign << 31));
            rest <<= nz;
            used += nz;
        }
        i += 4;
        bits.consume(used)?;
    }

    let bits_read = bits.read();
    if bits_read < part3_bits {
        // The stuffing bits must still lie within the main data.
        if start + part3_bits as usize > main_data.len() * 8 {
            return overrun();
        }
    }
    // As upstream: an overrun into the count1 partition undoes its last quadruple (encoders
    // that stuff too few bits), one into big_values is only reported.
    else if bits_read > part3_bits && i > big_values_len {
        info!("count1 overrun, malformed bitstream");
        i -= 4;
    }
    else if bits_read > part3_bits {
        info!("big_values overrun, malformed bitstream");
    }

    buf[i..].fill(0.0);
    Ok(i)
}

#[cfg(test)]
mod tests {
    use symphonia_core::io::{BitReaderLtr, ReadBitsLtr};

    use super::*;
    use crate::layer3::requantize;

    /// xorshift64*: the tests' only randomness, fixed by seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn every_table_is_a_complete_prefix_code() {
        // Kraft's sum is exactly 1, so no bit pattern is left without a code (upstream's
        // table walk would never end on one) and every root slot is filled.
        for t in MPEG_TABLES.iter().chain(MPEG_QUADS_TABLES.iter()) {
            if t.lens.is_empty() {
                continue;
            }
            let sum: u64 = t.lens.iter().map(|&l| 1u64 << (32 - l)).sum();
            assert_eq!(sum, 1 << 32);
        }
        for t in BIG_VALUE_TABLES.iter().chain(QUAD_TABLES.iter()).flatten() {
            assert!(t.entries.iter().all(|&e| e != 0));
        }
    }

    #[test]
    fn decodes_every_code_of_every_table() {
        for t in MPEG_TABLES.iter().chain(MPEG_QUADS_TABLES.iter()) {
            let Some(table) = Table::new(t.codes, t.lens, t.wrap) else { continue };
            for (i, (&code, &len)) in t.codes.iter().zip(t.lens).enumerate() {
                // The code at the top of the window, followed by ones.
                let window = (u64::from(code) << (64 - len)) | (u64::MAX >> len);
                let value = u32::from(mpeg_gen_value(i as u16, t.wrap));
                assert_eq!(table.decode(window), Some((value, u32::from(len))));
            }
        }
    }

    /// Upstream's reader and this one on the same random bits and side information: the same
    /// samples (bit for bit) and rzero start, or both an error.
    #[test]
    fn matches_upstream_on_random_bitstreams() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let mut agreed_ok = 0;
        for trial in 0..40_000 {
            let len = rng.below(700) as usize;
            let style = rng.below(4);
            let data: Vec<u8> = (0..len)
                .map(|_| match style {
                    0 => rng.next() as u8,
                    1 => (rng.next() as u8) & (rng.next() as u8) & (rng.next() as u8),
                    2 => (rng.next() as u8) | (rng.next() as u8),
                    _ => if rng.below(8) == 0 { rng.next() as u8 } else { 0 },
                })
                .collect();
            // Within the data: the scale factors before it were read from the same bits.
            let start = rng.below(len as u64 * 8 + 1) as usize;
            let mut ch = GranuleChannel::default();
            ch.big_values = rng.below(289) as u16;
            let mut r1 = 2 * rng.below(289) as usize;
            let mut r2 = 2 * rng.below(289) as usize;
            if r1 > r2 && rng.below(4) != 0 {
                std::mem::swap(&mut r1, &mut r2);
            }
            ch.region1_start = r1;
            ch.region2_start = r2;
            for t in &mut ch.table_select {
                *t = rng.below(32) as u8;
            }
            ch.count1table_select = rng.below(2) as u8;
            let part3 = match rng.below(3) {
                0 => rng.below(64) as u32,
                1 => rng.below(len as u64 * 8 + 100) as u32,
                _ => rng.below(5000) as u32,
            };

            let mut ours = [0f32; 576];
            let got = read_huffman_samples(&data, start, &ch, part3, &mut ours);

            let mut theirs = [0f32; 576];
            let want = (|| {
                let byte = start >> 3;
                if byte > data.len() {
                    return Err(());
                }
                let mut bs = BitReaderLtr::new(&data[byte..]);
                if start & 7 > 0 {
                    bs.ignore_bits((start & 7) as u32).map_err(|_| ())?;
                }
                requantize::read_huffman_samples(&mut bs, &ch, part3, &mut theirs).map_err(|_| ())
            })();

            match (got, want) {
                (Ok(a), Ok(b)) => {
                    assert_eq!(a, b, "trial {trial}: rzero");
                    let same = ours.iter().zip(&theirs).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "trial {trial}: samples differ");
                    agreed_ok += 1;
                }
                (Err(_), Err(())) => {}
                (a, b) => panic!(
                    "trial {trial}: ours {:?}, upstream {:?}; {} bytes from bit {start}, part3 {part3}, big_values {}, regions {r1} {r2}, tables {:?}/{}",
                    a.map(|_| ()), b, data.len(), ch.big_values, ch.table_select, ch.count1table_select
                ),
            }
        }
        // Most trials decode (not only errors on both sides).
        assert!(agreed_ok > 10_000, "only {agreed_ok} trials decoded");
    }
}
