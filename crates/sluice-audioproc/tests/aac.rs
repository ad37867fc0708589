//! AAC in MP4 (`.m4a`): a committed fixture (`tests/fixtures/tone.m4a`, written by
//! `tests/fixtures/make_aac.py` with FFmpeg's AAC encoder through PyAV) decodes to the tone it
//! encodes, at its rate and length. (tests/python/test_audio_formats.py also compares it with
//! FFmpeg's decoder when PyAV is installed.)

use std::path::PathBuf;

use sluice_audioproc::*;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// What make_aac.py encodes: 0.5 s of 440 Hz + 1 kHz at 16 kHz.
fn tone() -> Vec<f32> {
    (0..8000)
        .map(|i| {
            let t = i as f64 / 16000.0;
            (0.3 * (2.0 * std::f64::consts::PI * 440.0 * t).sin()
                + 0.2 * (2.0 * std::f64::consts::PI * 1000.0 * t).sin()) as f32
        })
        .collect()
}

#[test]
fn m4a_decodes_to_its_tone() {
    let audio = decode(&fixture("tone.m4a"), Some("m4a")).unwrap();
    assert_eq!((audio.sample_rate, audio.channels), (16000, 1));
    // 8000 samples plus FFmpeg's 1024 priming samples, in whole 1024-sample AAC frames (the
    // file has no edit list to trim them; FFmpeg's own decoder gives the same 9216).
    assert_eq!(audio.samples.len(), 9216);
    let want = tone();
    let got = &audio.samples[1024..1024 + 8000];
    // Away from the ends (where the codec's windows ramp), the lossy copy is within 1/20 of
    // the signal's power: SNR > 13 dB at a 32 kbit/s rate.
    let (mut signal, mut noise) = (0.0f64, 0.0f64);
    for (g, w) in got[500..7500].iter().zip(&want[500..7500]) {
        signal += f64::from(*w).powi(2);
        noise += f64::from(g - w).powi(2);
    }
    let snr = 10.0 * (signal / noise).log10();
    assert!(snr > 13.0, "SNR {snr:.1} dB");
}

#[test]
fn truncated_m4a_is_a_typed_error() {
    let bytes = fixture("tone.m4a");
    // The muxer writes the index (moov) last: any cut loses it.
    for cut in [bytes.len() / 3, bytes.len() - 100] {
        let e = decode(&bytes[..cut], Some("m4a")).unwrap_err();
        assert!(
            matches!(&e, AudioError::Corrupt(m) if m.contains("truncated")),
            "cut at {cut}: {e}"
        );
    }
    let e = decode(&bytes[..16], Some("m4a")).unwrap_err();
    assert!(matches!(e, AudioError::Unsupported(_)), "{e}");
}
