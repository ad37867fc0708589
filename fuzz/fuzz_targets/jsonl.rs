//! `read_jsonl` (and `read_text`) on one file: the first byte picks the options (error policy,
//! UTF-8 policy, declared field types); then every line is read into a sample.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_core::{OnError, Source};
use sluice_io::{CsvType, JsonlOptions, LinesFormat, LinesSource, Utf8Errors};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let types = [CsvType::Int, CsvType::Float, CsvType::Bool, CsvType::Str];
    let mut schema = Vec::new();
    if flags & 0x10 != 0 {
        schema.push(("a".to_string(), types[(flags >> 5) as usize & 3]));
    }
    if flags & 0x80 != 0 {
        schema.push(("b".to_string(), types[(flags >> 2) as usize & 3]));
    }
    let errors = if flags & 2 != 0 { Utf8Errors::Replace } else { Utf8Errors::Strict };
    let opts = JsonlOptions {
        schema,
        on_error: if flags & 1 != 0 { OnError::Skip } else { OnError::Raise },
        errors,
    };
    let file = sluice_fuzz::ScratchFile::new("jsonl", body);
    let paths = [file.0.clone()];
    if let Ok(src) = LinesSource::open_with(&paths, LinesFormat::Jsonl, &opts) {
        let _ = (src.ship(), src.spec());
        for i in 0..src.len().unwrap_or(0).min(10_000) {
            let got = src.get(i);
            // Under on_error=skip every line was parsed when the file was opened and bad
            // ones left out, so every line the index holds must read.
            if opts.on_error == OnError::Skip {
                assert!(got.is_ok(), "line {i}: {got:?}");
            }
        }
    }
    if flags & 0x0c == 0x0c {
        if let Ok(src) = LinesSource::open(&paths, LinesFormat::Text, errors) {
            for i in 0..src.len().unwrap_or(0).min(10_000) {
                let _ = src.get(i);
            }
        }
    }
});
