//! The JPEG marker walk: splitting a stream into markers and segments up to the first scan,
//! and reading an SOF segment. The header reader ([`super::jpeg`]) and the scaled decoder's
//! frame reader (`dct/frame.rs`) both walk with it, so they cannot disagree on where a
//! segment starts or ends; each turns a [`WalkError`] into its own error.

/// Whether `data` starts with an SOI marker (`FF D8`).
pub(crate) fn starts_with_soi(data: &[u8]) -> bool {
    data.starts_with(&[0xFF, 0xD8])
}

/// One step of a [`Markers`] walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker<'a> {
    /// A marker without a length: TEM (`01`), RSTn (`D0`–`D7`), SOI (`D8`) or EOI (`D9`).
    Standalone(u8),
    /// A marker with a length and a payload.
    Segment(Segment<'a>),
}

/// A marker segment, its payload within the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment<'a> {
    /// The marker code (the byte after `FF`).
    pub marker: u8,
    /// Offset of the payload (just past the 2-byte length) in the stream.
    pub at: usize,
    /// The payload: the length's bytes less the 2 of the length itself.
    pub payload: &'a [u8],
}

impl Segment<'_> {
    /// Offset just past the segment: where a scan's entropy-coded data starts.
    // Only the scaled decoder reads it, and the `turbojpeg` build has none.
    #[cfg_attr(feature = "turbojpeg", allow(dead_code))]
    pub fn end(&self) -> usize {
        self.at + self.payload.len()
    }
}

/// Why a walk could not give another marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// The stream ends before another marker.
    End,
    /// The stream ends inside the 2-byte length of this marker.
    NoLength(u8),
    /// This marker declares a length below 2 (the length counts its own 2 bytes).
    BadLength(u8, usize),
    /// This marker's segment runs past the end of the stream.
    PastEnd(u8),
}

/// Walks the markers of a JPEG stream from just after its SOI. Entropy-coded data is not
/// skipped, so the walk is only meaningful up to the first SOS.
pub(crate) struct Markers<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Markers<'a> {
    /// A walk from offset 2, where the SOI ends; the caller decides how to treat a stream
    /// without one ([`starts_with_soi`]).
    pub fn after_soi(data: &'a [u8]) -> Self {
        Markers { data, pos: 2 }
    }

    /// The next marker, its segment consumed.
    pub fn next_marker(&mut self) -> Result<Marker<'a>, WalkError> {
        let data = self.data;
        // Bytes before the next 0xFF are junk that libjpeg skips with a warning; any run of
        // 0xFF before a marker code is fill.
        while data.get(self.pos).is_some_and(|&b| b != 0xFF) {
            self.pos += 1;
        }
        while data.get(self.pos) == Some(&0xFF) {
            self.pos += 1;
        }
        let Some(&marker) = data.get(self.pos) else {
            return Err(WalkError::End);
        };
        self.pos += 1;
        if matches!(marker, 0x01 | 0xD0..=0xD9) {
            return Ok(Marker::Standalone(marker));
        }
        let Some(len) = data.get(self.pos..self.pos + 2) else {
            return Err(WalkError::NoLength(marker));
        };
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        if len < 2 {
            return Err(WalkError::BadLength(marker, len));
        }
        let at = self.pos + 2;
        let Some(payload) = data.get(at..self.pos + len) else {
            return Err(WalkError::PastEnd(marker));
        };
        self.pos += len;
        Ok(Marker::Segment(Segment {
            marker,
            at,
            payload,
        }))
    }
}

/// True if an EOI (`FF D9`) follows `from`. Entropy-coded data stuffs every 0xFF with 0x00,
/// so `FF D9` cannot occur inside a scan; searching backwards finds it at once in normal
/// files (it is the last marker, perhaps followed by padding).
pub(crate) fn has_eoi_after(data: &[u8], from: usize) -> bool {
    let tail = &data[from.min(data.len())..];
    tail.windows(2).rev().any(|w| w == [0xFF, 0xD9])
}

/// The fixed fields of an SOF payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sof {
    /// Bits per sample.
    pub precision: u8,
    /// Lines (0: set later by a DNL marker).
    pub height: u16,
    /// Samples per line.
    pub width: u16,
    /// Number of components.
    pub count: u8,
}

/// One component of an SOF payload.
// The header reader checks only the sampling factors; the `turbojpeg` build has no scaled
// decoder to read the rest.
#[cfg_attr(feature = "turbojpeg", allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SofComponent {
    /// Component identifier (what the scan header refers to).
    pub id: u8,
    /// Horizontal sampling factor (the high nibble, unchecked).
    pub h: u8,
    /// Vertical sampling factor (the low nibble, unchecked).
    pub v: u8,
    /// Quantisation table selector (unchecked).
    pub tq: u8,
}

impl Sof {
    /// The fixed fields; `None` if the payload is shorter than their 6 bytes.
    pub fn read(payload: &[u8]) -> Option<Sof> {
        let f = payload.get(..6)?;
        Some(Sof {
            precision: f[0],
            height: u16::from_be_bytes([f[1], f[2]]),
            width: u16::from_be_bytes([f[3], f[4]]),
            count: f[5],
        })
    }

    /// The [`Sof::count`] components; `None` if the payload is too short for them.
    pub fn components(self, payload: &[u8]) -> Option<impl Iterator<Item = SofComponent> + '_> {
        let specs = payload.get(6..6 + 3 * usize::from(self.count))?;
        Some(specs.chunks_exact(3).map(|c| SofComponent {
            id: c[0],
            h: c[1] >> 4,
            v: c[1] & 15,
            tq: c[2],
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every marker of `data` up to the first error.
    fn walk(data: &[u8]) -> (Vec<Marker<'_>>, WalkError) {
        let mut m = Markers::after_soi(data);
        let mut got = Vec::new();
        loop {
            match m.next_marker() {
                Ok(x) => got.push(x),
                Err(e) => return (got, e),
            }
        }
    }

    fn seg(marker: u8, at: usize, payload: &[u8]) -> Marker<'_> {
        Marker::Segment(Segment {
            marker,
            at,
            payload,
        })
    }

    /// SOI, APP0, DQT, SOF0, DHT, SOS, a scan, EOI.
    const BASELINE: &[u8] = &[
        0xFF, 0xD8, // SOI
        0xFF, 0xE0, 0, 6, b'J', b'F', b'I', b'F', // APP0 (cut short, as a payload)
        0xFF, 0xDB, 0, 4, 0x00, 7, // DQT (one value; the walk does not read it)
        0xFF, 0xC0, 0, 11, 8, 0, 16, 0, 24, 1, 1, 0x21, 0, // SOF0: 16x24, 1 component
        0xFF, 0xC4, 0, 3, 0x10, // DHT
        0xFF, 0xDA, 0, 3, 1, // SOS
        0x12, 0xFF, 0x00, 0x34, // entropy-coded data with a stuffed 0xFF
        0xFF, 0xD9, // EOI
    ];

    #[test]
    fn walks_the_segments_of_a_baseline_stream() {
        let (got, _) = walk(BASELINE);
        assert_eq!(
            got[..5],
            [
                seg(0xE0, 6, b"JFIF"),
                seg(0xDB, 14, &[0x00, 7]),
                seg(0xC0, 20, &[8, 0, 16, 0, 24, 1, 1, 0x21, 0]),
                seg(0xC4, 33, &[0x10]),
                seg(0xDA, 38, &[1]),
            ]
        );
        let Marker::Segment(sos) = got[4] else {
            panic!("{got:?}")
        };
        assert_eq!(&BASELINE[sos.end()..sos.end() + 2], &[0x12, 0xFF]);
        // Past the SOS the stuffed `FF 00` reads as a marker: callers stop at the SOS.
        assert_eq!(got.len(), 5);
    }

    #[test]
    fn progressive_sof2_is_a_segment_like_any_other() {
        let data = [0xFF, 0xD8, 0xFF, 0xC2, 0, 8, 8, 0, 1, 0, 1, 0];
        let (got, e) = walk(&data);
        assert_eq!(got, [seg(0xC2, 6, &[8, 0, 1, 0, 1, 0])]);
        assert_eq!(e, WalkError::End);
    }

    #[test]
    fn standalone_markers_have_no_length() {
        // TEM, RST0, RST7, SOI, EOI: none is followed by a length.
        let data = [
            0xFF, 0xD8, 0xFF, 0x01, 0xFF, 0xD0, 0xFF, 0xD7, 0xFF, 0xD8, 0xFF, 0xD9,
        ];
        let (got, e) = walk(&data);
        let codes = [0x01, 0xD0, 0xD7, 0xD8, 0xD9].map(Marker::Standalone);
        assert_eq!(got, codes);
        assert_eq!(e, WalkError::End);
    }

    #[test]
    fn fill_bytes_and_junk_before_a_marker_are_skipped() {
        let data = [
            0xFF, 0xD8, 0x00, 0x17, 0xFF, 0xFF, 0xFF, 0xFE, 0, 3, b'c', 0xFF, 0xFF,
        ];
        let (got, e) = walk(&data);
        assert_eq!(got, [seg(0xFE, 10, b"c")]);
        // Fill bytes at the very end: no marker code follows them.
        assert_eq!(e, WalkError::End);
    }

    #[test]
    fn truncated_and_bad_lengths() {
        // The stream ends inside the length.
        assert_eq!(
            walk(&[0xFF, 0xD8, 0xFF, 0xE0, 0x00]),
            (vec![], WalkError::NoLength(0xE0))
        );
        assert_eq!(
            walk(&[0xFF, 0xD8, 0xFF, 0xE0]),
            (vec![], WalkError::NoLength(0xE0))
        );
        // Lengths 0 and 1 cannot cover the length itself.
        for len in [0, 1] {
            assert_eq!(
                walk(&[0xFF, 0xD8, 0xFF, 0xDB, 0, len, 0, 0]),
                (vec![], WalkError::BadLength(0xDB, usize::from(len)))
            );
        }
        // Length 2: an empty payload.
        assert_eq!(
            walk(&[0xFF, 0xD8, 0xFF, 0xDD, 0, 2]),
            (vec![seg(0xDD, 6, &[])], WalkError::End)
        );
        // A length past the end, by one byte and by a lot.
        assert_eq!(
            walk(&[0xFF, 0xD8, 0xFF, 0xC4, 0, 5, 1, 2]),
            (vec![], WalkError::PastEnd(0xC4))
        );
        assert_eq!(
            walk(&[0xFF, 0xD8, 0xFF, 0xC4, 0xFF, 0xFF, 1, 2]),
            (vec![], WalkError::PastEnd(0xC4))
        );
        // Exactly to the end is fine.
        assert_eq!(
            walk(&[0xFF, 0xD8, 0xFF, 0xC4, 0, 4, 1, 2]),
            (vec![seg(0xC4, 6, &[1, 2])], WalkError::End)
        );
    }

    #[test]
    fn soi_is_checked_by_the_caller() {
        assert!(starts_with_soi(BASELINE));
        assert!(!starts_with_soi(&[]));
        assert!(!starts_with_soi(&[0xFF]));
        assert!(!starts_with_soi(&[0xFF, 0xD9, 0xFF, 0xD8]));
        assert!(!starts_with_soi(b"\x89PNG\r\n\x1a\n"));
        // The walk itself starts at offset 2 whatever is there.
        let (got, _) = walk(&[0x00, 0x00, 0xFF, 0xFE, 0, 2]);
        assert_eq!(got, [seg(0xFE, 6, &[])]);
        assert_eq!(walk(&[]), (vec![], WalkError::End));
    }

    #[test]
    fn eoi_search() {
        assert!(has_eoi_after(BASELINE, 38));
        assert!(!has_eoi_after(&BASELINE[..BASELINE.len() - 1], 38));
        // An EOI before `from` does not count; `from` past the end is no EOI.
        assert!(!has_eoi_after(&[0xFF, 0xD9, 0, 0], 1));
        assert!(!has_eoi_after(&[0xFF, 0xD9], 9));
    }

    #[test]
    fn sof_fields_and_components() {
        let payload = [8, 0, 16, 0, 24, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1];
        let sof = Sof::read(&payload).unwrap();
        assert_eq!(
            sof,
            Sof {
                precision: 8,
                height: 16,
                width: 24,
                count: 3
            }
        );
        let comps: Vec<_> = sof.components(&payload).unwrap().collect();
        assert_eq!(
            comps[0],
            SofComponent {
                id: 1,
                h: 2,
                v: 2,
                tq: 0
            }
        );
        assert_eq!(
            (comps[2].id, comps[2].h, comps[2].v, comps[2].tq),
            (3, 1, 1, 1)
        );
        // Too short for the fixed fields, or for the components it declares.
        assert_eq!(Sof::read(&payload[..5]), None);
        assert!(sof.components(&payload[..14]).is_none());
        let none = Sof::read(&[8, 0, 1, 0, 1, 0]).unwrap();
        assert_eq!(none.components(&[8, 0, 1, 0, 1, 0]).unwrap().count(), 0);
    }
}
