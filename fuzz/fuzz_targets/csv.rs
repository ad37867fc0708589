//! `read_csv` on one file: the first byte picks the options (delimiter, header, error
//! policy, a declared column type); then every record is read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::Source;
use sluice_io::{CsvOnError, CsvOptions, CsvSource, CsvType};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let types = [CsvType::Int, CsvType::Float, CsvType::Bool, CsvType::Str];
    let opts = CsvOptions {
        schema: if flags & 0x40 != 0 {
            vec![("a".into(), types[(flags >> 4) as usize & 3])]
        } else {
            vec![]
        },
        delimiter: [b',', b';', b'\t', b'|'][flags as usize & 3],
        has_header: flags & 4 == 0,
        on_error: if flags & 8 != 0 { CsvOnError::Skip } else { CsvOnError::Raise },
    };
    let file = sluice_fuzz::ScratchFile::new("csv", body);
    let Ok(src) = CsvSource::open(&[file.0.clone()], &opts) else {
        return;
    };
    let _ = (src.schema(), src.ship(), src.spec(), src.fields());
    for i in 0..src.len().unwrap_or(0).min(10_000) {
        // A record the index holds must read back as one record of the header's width (a
        // value that does not parse as its column's type is a fair error).
        if let Err(e) = src.get(i) {
            assert!(!e.to_string().contains("changed since"), "record {i}: {e}");
        }
    }
});
