//! The markers before the scan: frame header, tables, restart interval, Adobe segment.

use super::corrupt;
use std::rc::Rc;

use super::huffman::Huffman;
use crate::decode::markers::{Marker, Markers, Sof, WalkError};
use crate::error::Result;

#[derive(Clone)]
pub(super) struct Component {
    pub(super) id: u8,
    pub(super) h: usize,
    pub(super) v: usize,
    pub(super) tq: usize,
    pub(super) td: usize,
    pub(super) ta: usize,
}

/// What the markers before the scan say.
pub(super) struct Frame {
    pub(super) height: usize,
    pub(super) width: usize,
    pub(super) comps: Vec<Component>,
    pub(super) qt: [Option<[i32; 64]>; 4],
    pub(super) dc: [Option<Rc<Huffman>>; 4],
    pub(super) ac: [Option<Rc<Huffman>>; 4],
    pub(super) restart: usize,
    pub(super) adobe: Option<u8>,
    /// Offset of the entropy-coded data of the (single) scan.
    pub(super) scan: usize,
}

pub(super) fn be16(d: &[u8], i: usize) -> Result<usize> {
    match d.get(i..i + 2) {
        Some(b) => Ok(usize::from(u16::from_be_bytes([b[0], b[1]]))),
        None => corrupt("truncated marker"),
    }
}

/// Walks the markers to the first scan; `None` for what this decoder does not handle.
pub(super) fn parse(data: &[u8]) -> Result<Option<Frame>> {
    let mut f = Frame {
        height: 0,
        width: 0,
        comps: Vec::new(),
        qt: [None; 4],
        dc: [None, None, None, None],
        ac: [None, None, None, None],
        restart: 0,
        adobe: None,
        scan: 0,
    };
    let mut markers = Markers::after_soi(data);
    loop {
        let seg = match markers.next_marker() {
            Ok(Marker::Segment(seg)) => seg,
            // SOI/EOI before the scan never get here: the header walk refuses them first.
            Ok(Marker::Standalone(0xD8 | 0xD9)) => return corrupt("no scan"),
            Ok(Marker::Standalone(_)) => continue,
            Err(WalkError::End) => return corrupt("no scan"),
            Err(WalkError::NoLength(_) | WalkError::PastEnd(_)) => {
                return corrupt("truncated marker")
            }
            Err(WalkError::BadLength(..)) => return corrupt("bad marker length"),
        };
        let (marker, end, seg) = (seg.marker, seg.end(), seg.payload);
        match marker {
            0xC0 | 0xC1 => {
                let Some(sof) = Sof::read(seg).filter(|s| s.precision == 8) else {
                    return Ok(None);
                };
                f.height = usize::from(sof.height);
                f.width = usize::from(sof.width);
                let specs = match sof.count {
                    1 | 3 => sof.components(seg),
                    _ => None,
                };
                let Some(specs) = specs else {
                    return Ok(None);
                };
                f.comps.extend(specs.map(|c| Component {
                    id: c.id,
                    h: usize::from(c.h),
                    v: usize::from(c.v),
                    tq: usize::from(c.tq & 3),
                    td: 0,
                    ta: 0,
                }));
            }
            // Progressive, lossless, arithmetic, hierarchical: not here.
            0xC2 | 0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => return Ok(None),
            0xC4 => {
                let mut p = 0;
                while p < seg.len() {
                    let (class, slot) = (seg[p] >> 4, usize::from(seg[p] & 15));
                    let Some(counts) = seg.get(p + 1..p + 17) else {
                        return corrupt("truncated DHT");
                    };
                    let counts: [u8; 16] = counts.try_into().unwrap_or([0; 16]);
                    let n: usize = counts.iter().map(|&c| usize::from(c)).sum();
                    let Some(symbols) = seg.get(p + 17..p + 17 + n) else {
                        return corrupt("truncated DHT");
                    };
                    if slot > 3 || class > 1 {
                        return corrupt("bad DHT");
                    }
                    let t = Huffman::shared(&counts, symbols)?;
                    if class == 0 {
                        f.dc[slot] = Some(t);
                    } else {
                        f.ac[slot] = Some(t);
                    }
                    p += 17 + n;
                }
            }
            0xDB => {
                let mut p = 0;
                while p < seg.len() {
                    let (precision, slot) = (seg[p] >> 4, usize::from(seg[p] & 15));
                    let size = if precision == 0 { 64 } else { 128 };
                    let Some(vals) = seg.get(p + 1..p + 1 + size) else {
                        return corrupt("truncated DQT");
                    };
                    if slot > 3 {
                        return corrupt("bad DQT");
                    }
                    let mut q = [0i32; 64];
                    for (k, q) in q.iter_mut().enumerate() {
                        *q = if precision == 0 {
                            i32::from(vals[k])
                        } else {
                            i32::from(u16::from_be_bytes([vals[2 * k], vals[2 * k + 1]]))
                        };
                    }
                    f.qt[slot] = Some(q);
                    p += 1 + size;
                }
            }
            0xDD => f.restart = be16(seg, 0)?,
            0xEE if seg.len() >= 12 && seg.starts_with(b"Adobe") => f.adobe = Some(seg[11]),
            0xDA => {
                let n = usize::from(*seg.first().unwrap_or(&0));
                // One scan with every component (baseline files with several scans exist
                // but are rare).
                if f.comps.is_empty() || n != f.comps.len() || seg.len() < 1 + 2 * n {
                    return Ok(None);
                }
                for (i, c) in f.comps.iter_mut().enumerate() {
                    let (id, tables) = (seg[1 + 2 * i], seg[2 + 2 * i]);
                    // MCUs follow the scan's component order; keep to the usual one.
                    if id != c.id {
                        return Ok(None);
                    }
                    c.td = usize::from(tables >> 4);
                    c.ta = usize::from(tables & 15);
                }
                f.scan = end;
                return Ok(Some(f));
            }
            _ => {}
        }
    }
}
