//! Agreement with the reference libraries (soundfile/libsndfile, librosa) on committed
//! fixtures; see `tests/fixtures/gen_fixtures.py` for how each expected output was made.
//! Run with `--nocapture` to see the measured errors quoted in the README.

use std::path::PathBuf;

use sluice_audioproc::*;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn f32s(name: &str) -> Vec<f32> {
    fixture(name)
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn c64s(name: &str) -> Vec<Complex32> {
    f32s(name)
        .chunks_exact(2)
        .map(|p| Complex32::new(p[0], p[1]))
        .collect()
}

fn reference() -> serde_json::Value {
    serde_json::from_slice(&fixture("reference.json")).unwrap()
}

fn shape(v: &serde_json::Value) -> (usize, usize) {
    (
        v[0].as_u64().unwrap() as usize,
        v[1].as_u64().unwrap() as usize,
    )
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

/// max |a - b| / max |b| over complex values.
fn rel_max_err_c(a: &[Complex32], b: &[Complex32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let peak = b.iter().map(|v| f64::from(v.norm())).fold(0.0, f64::max);
    let err = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from((x - y).norm()))
        .fold(0.0, f64::max);
    err / peak
}

/// max |a - b| / max |b|.
fn rel_max_err(a: &[f32], b: &[f32]) -> f64 {
    let peak = b.iter().map(|v| f64::from(v.abs())).fold(0.0, f64::max);
    max_abs_diff(a, b) / peak
}

/// Σ|a - b| / Σ|b|.
fn rel_l1(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let num: f64 = a.iter().zip(b).map(|(x, y)| f64::from((x - y).abs())).sum();
    let den: f64 = b.iter().map(|y| f64::from(y.abs())).sum();
    num / den
}

#[test]
fn wav_and_flac_decode_equal_soundfile() {
    for ext in ["wav", "flac"] {
        let a = decode(&fixture(&format!("chirp_16k_mono.{ext}")), Some(ext)).unwrap();
        let want: Vec<f32> = fixture(&format!("chirp_16k_mono.{ext}.sf.i16"))
            .chunks_exact(2)
            .map(|b| f32::from(i16::from_le_bytes([b[0], b[1]])) / 32768.0)
            .collect();
        assert_eq!((a.sample_rate, a.channels), (16_000, 1));
        assert_eq!(a.samples.len(), want.len());
        let err = max_abs_diff(&a.samples, &want);
        println!("{ext} decode vs soundfile: max |diff| = {err:e}");
        assert!(err <= 1e-6);
    }
}

#[test]
fn ogg_vorbis_decode_close_to_soundfile() {
    let a = decode(&fixture("chirp_16k_mono.ogg"), Some("ogg")).unwrap();
    let want = f32s("chirp_16k_mono.ogg.sf.f32");
    assert_eq!((a.sample_rate, a.channels), (16_000, 1));
    assert_eq!(a.samples.len(), want.len());
    let err = max_abs_diff(&a.samples, &want);
    println!("ogg vorbis decode vs soundfile (libvorbis): max |diff| = {err:e}");
    // Both are float implementations of the same inverse MDCT; only rounding differs.
    assert!(err <= 1e-5, "{err}");
}

#[test]
fn stereo_24bit_wav_and_to_mono() {
    let r = reference();
    let a = decode(&fixture("stereo_24bit.wav"), None).unwrap();
    assert_eq!(
        a.sample_rate as u64,
        r["stereo"]["sample_rate"].as_u64().unwrap()
    );
    assert_eq!(a.channels, 2);
    assert_eq!(a.frames() as u64, r["stereo"]["frames"].as_u64().unwrap());
    let err = max_abs_diff(&a.samples, &f32s("stereo_24bit.sf.f32"));
    let mono = a.into_mono();
    let err_mono = max_abs_diff(&mono.samples, &f32s("stereo_24bit.mono.f32"));
    println!("24-bit stereo decode: max |diff| = {err:e}; to_mono vs librosa: {err_mono:e}");
    assert!(err <= 1e-6 && err_mono <= 1e-6);
}

#[test]
fn mp3_decode_close_to_soundfile() {
    let r = reference();
    let m = &r["speech_mp3"];
    let a = decode(&fixture("speech.mp3"), Some("mp3")).unwrap();
    assert_eq!(a.sample_rate as u64, m["sample_rate"].as_u64().unwrap());
    assert_eq!(a.channels, 1);
    // Same length as libsndfile (mpg123): encoder delay and padding trimmed the same way.
    assert_eq!(a.frames() as u64, m["frames"].as_u64().unwrap());
    let prefix = f32s("speech.sf.prefix.f32");
    let err = max_abs_diff(&a.samples[..prefix.len()], &prefix);
    let rms = (a.samples.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>()
        / a.samples.len() as f64)
        .sqrt();
    let rms_ref = m["rms"].as_f64().unwrap();
    let peak = a.samples.iter().fold(0.0f32, |p, v| p.max(v.abs()));
    let peak_ref = m["max_abs"].as_f64().unwrap();
    println!(
        "mp3 decode vs soundfile: prefix max |diff| = {err:e}, rms rel diff = {:e}, peak diff = {:e}",
        (rms - rms_ref).abs() / rms_ref,
        (f64::from(peak) - peak_ref).abs()
    );
    // Two conforming MPEG decoders differ only in float rounding of the synthesis
    // filterbank: ~1e-6 here, against a 16-bit LSB of 3e-5. 1e-5 leaves margin while still
    // catching any sample offset or gain error (those show up at >1e-2 on speech).
    assert!(err <= 1e-5, "{err}");
    assert!((rms - rms_ref).abs() / rms_ref <= 1e-5);
    assert!((f64::from(peak) - peak_ref).abs() <= 1e-5);
}

#[test]
fn mp3_with_id3_tags_decodes_the_same() {
    let mp3 = fixture("speech.mp3");
    let plain = decode(&mp3, Some("mp3")).unwrap();
    // ID3v2.3 tag with one TIT2 frame in front, ID3v1 tag behind: both common in the wild.
    let title = b"\0sluice";
    let mut frame = b"TIT2".to_vec();
    frame.extend_from_slice(&(title.len() as u32).to_be_bytes());
    frame.extend_from_slice(&[0, 0]);
    frame.extend_from_slice(title);
    let mut tagged = b"ID3\x03\x00\x00".to_vec();
    let n = frame.len() as u32; // syncsafe size (< 128 here)
    tagged.extend_from_slice(&[0, 0, (n >> 7) as u8 & 0x7f, n as u8 & 0x7f]);
    tagged.extend_from_slice(&frame);
    tagged.extend_from_slice(&mp3);
    let mut v1 = b"TAG".to_vec();
    v1.resize(128, 0);
    tagged.extend_from_slice(&v1);
    for hint in [Some("mp3"), None] {
        let a = decode(&tagged, hint).unwrap();
        assert_eq!(a, plain, "{hint:?}");
    }
}

#[test]
fn bad_files_give_typed_errors() {
    let mp3 = fixture("speech.mp3");
    assert_eq!(decode(&[], Some("mp3")), Err(AudioError::Empty));
    // Truncation at many points: header only, mid-frame, most of the file.
    for cut in [10, 100, 417, 1000, mp3.len() / 2, mp3.len() - 77] {
        let r = decode(&mp3[..cut], Some("mp3"));
        assert!(
            matches!(
                r,
                Err(AudioError::Corrupt(_) | AudioError::Empty | AudioError::Unsupported(_))
            ),
            "cut {cut}: {r:?}"
        );
    }
    // A cut mid-stream is specifically reported as corruption, and lenient mode salvages the
    // decodable part, identical to the strict decode of the full file up to there.
    let cut = mp3.len() / 2 + 13;
    assert!(matches!(
        decode(&mp3[..cut], Some("mp3")),
        Err(AudioError::Corrupt(_))
    ));
    let full = decode(&mp3, Some("mp3")).unwrap();
    let part = decode_with(
        &mp3[..cut],
        Some("mp3"),
        &DecodeOptions::new().lenient(true),
    )
    .unwrap();
    assert!(part.frames() > full.frames() / 3 && part.frames() < full.frames());
    // Pseudo-random bytes, with and without misleading hints.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let junk: Vec<u8> = (0..20_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    for hint in [
        None,
        Some("mp3"),
        Some("wav"),
        Some("flac"),
        Some("ogg"),
        Some("xyz"),
    ] {
        let r = decode(&junk, hint);
        assert!(
            matches!(
                r,
                Err(AudioError::Unsupported(_) | AudioError::Corrupt(_) | AudioError::Empty)
            ),
            "{hint:?}: {r:?}"
        );
    }
    // Corruption inside an otherwise valid file: flip bytes in every frame's payload.
    let mut damaged = mp3.clone();
    for i in (600..damaged.len()).step_by(97) {
        damaged[i] ^= 0x5a;
    }
    let _ = decode(&damaged, Some("mp3")); // any result, but no panic
    let mut flac = fixture("chirp_16k_mono.flac");
    let n = flac.len();
    flac.truncate(n - 1000);
    assert!(decode(&flac, Some("flac")).is_err());
}

#[test]
fn fuzz_regression_wav_channel_count_overflow_is_an_error() {
    // Found by fuzzing (fuzz/ target `audio_mp3`): a PCM `fmt ` chunk with 65,535 channels of
    // 32 bits overflows symphonia's block-align product (a panic under overflow checks, as
    // in this test build). The decoder's catch_unwind backstop makes it a typed error.
    let mut wav = Vec::new();
    let fmt: [u8; 16] = {
        let mut f = [0u8; 16];
        f[0..2].copy_from_slice(&1u16.to_le_bytes()); // PCM
        f[2..4].copy_from_slice(&u16::MAX.to_le_bytes()); // channels
        f[4..8].copy_from_slice(&16_000u32.to_le_bytes()); // sample rate
        f[8..12].copy_from_slice(&64_000u32.to_le_bytes()); // byte rate
        f[12..14].copy_from_slice(&4u16.to_le_bytes()); // block align
        f[14..16].copy_from_slice(&32u16.to_le_bytes()); // bits per sample
        f
    };
    let data = [0u8; 64];
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&((4 + 8 + fmt.len() + 8 + data.len()) as u32).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&(fmt.len() as u32).to_le_bytes());
    wav.extend_from_slice(&fmt);
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&(data.len() as u32).to_le_bytes());
    wav.extend_from_slice(&data);
    let r = decode(&wav, Some("wav"));
    assert!(
        matches!(r, Err(AudioError::Unsupported(_) | AudioError::Corrupt(_))),
        "{r:?}"
    );
}

#[test]
fn stft_matches_librosa() {
    let r = reference();
    let y = f32s("dsp_input.f32");
    let want = c64s("stft_400_160.c64");
    let mut stft = Stft::new(400, 160, None, Window::Hann, true).unwrap();
    let got = stft.complex(&y).unwrap();
    assert_eq!(got.shape(), shape(&r["stft"]["shape"]));
    let err = rel_max_err_c(got.as_slice(), &want);
    let p_want: Vec<f32> = want.iter().map(|v| v.norm_sqr()).collect();
    let p_got = stft.power(&y, 2.0).unwrap();
    let p_err = rel_max_err(p_got.as_slice(), &p_want);
    println!("stft(400,160) vs librosa: max |diff|/max|X| = {err:e}; power: {p_err:e}");
    assert!(err <= 1e-4 && p_err <= 1e-4);

    // win_length < n_fft, hamming, center=False.
    let want2 = c64s("stft_512_128_w301_hamming_nocenter.c64");
    let mut stft2 = Stft::new(512, 128, Some(301), Window::Hamming, false).unwrap();
    let got2 = stft2.complex(&y[..1200]).unwrap();
    assert_eq!(got2.shape(), shape(&r["stft2"]["shape"]));
    let err2 = rel_max_err_c(got2.as_slice(), &want2);
    println!("stft(512,128,win 301,hamming,center=False) vs librosa: {err2:e}");
    assert!(err2 <= 1e-4);
}

fn sparse_fb(name: &str, shape: (usize, usize)) -> Vec<f32> {
    let bytes = fixture(name);
    let nnz = bytes.len() / 8;
    let mut dense = vec![0.0f32; shape.0 * shape.1];
    for k in 0..nnz {
        let i = u32::from_le_bytes(bytes[4 * k..4 * k + 4].try_into().unwrap()) as usize;
        let o = 4 * nnz + 4 * k;
        dense[i] = f32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    }
    dense
}

#[test]
fn mel_filterbanks_match_librosa() {
    let r = reference();
    let fb = MelFilterbank::new(MelConfig::new(16_000, 400, 80)).unwrap();
    let want = sparse_fb("fb_slaney_16k_400_80.bin", shape(&r["fb_slaney"]["shape"]));
    let err = rel_max_err(fb.weights(), &want);

    let mut cfg = MelConfig::new(22_050, 512, 40);
    cfg.fmin = 20.0;
    cfg.fmax = Some(8000.0);
    cfg.htk = true;
    cfg.norm = MelNorm::None;
    let fb_htk = MelFilterbank::new(cfg).unwrap();
    let want_htk = sparse_fb("fb_htk_22k_512_40.bin", shape(&r["fb_htk"]["shape"]));
    let err_htk = rel_max_err(fb_htk.weights(), &want_htk);
    println!("mel filterbank vs librosa: slaney {err:e}, htk/no-norm {err_htk:e} (max rel)");
    assert!(err <= 1e-6 && err_htk <= 1e-6);
}

#[test]
fn mel_spectrogram_and_db_match_librosa() {
    let r = reference();
    let y = f32s("dsp_input.f32");
    let mut stft = Stft::new(400, 160, None, Window::Hann, true).unwrap();
    let fb = MelFilterbank::new(MelConfig::new(16_000, 400, 80)).unwrap();
    let mut mel = fb.apply(&stft.power(&y, 2.0).unwrap()).unwrap();
    assert_eq!(mel.shape(), shape(&r["mel"]["shape"]));
    let want = f32s("mel80.f32");
    let l1 = rel_l1(mel.as_slice(), &want);
    let mx = rel_max_err(mel.as_slice(), &want);

    power_to_db(mel.as_mut_slice(), DbRef::Value(1.0), 1e-10, Some(80.0)).unwrap();
    let db_err = max_abs_diff(mel.as_slice(), &f32s("mel80_db.f32"));
    println!("melspectrogram vs librosa: rel L1 = {l1:e}, max rel = {mx:e}; power_to_db max |diff| = {db_err:e} dB");
    assert!(l1 <= 1e-3 && mx <= 1e-3);
    assert!(db_err <= 1e-2);
}

#[test]
fn phase_vocoder_matches_librosa() {
    let r = reference();
    let (rows, cols) = shape(&r["stft"]["shape"]);
    let n_in = shape(&r["pv"]["in_shape"]).1;
    // librosa's own STFT values (first 13 frames) as input, so only the vocoder is compared.
    let full = c64s("stft_400_160.c64");
    let mut d = Vec::with_capacity(rows * n_in);
    for f in 0..rows {
        d.extend_from_slice(&full[f * cols..f * cols + n_in]);
    }
    let d = Spectrogram::from_vec(rows, n_in, d).unwrap();
    for (rate, file, key) in [
        (0.8, "pv_rate0.8.c64", "out_shape_0.8"),
        (1.7, "pv_rate1.7.c64", "out_shape_1.7"),
    ] {
        let want = c64s(file);
        let got = time_stretch(&d, rate, 160).unwrap();
        assert_eq!(got.shape(), shape(&r["pv"][key]));
        let err = rel_max_err_c(got.as_slice(), &want);
        let mag_want: Vec<f32> = want.iter().map(|v| v.norm()).collect();
        let mag_got: Vec<f32> = got.as_slice().iter().map(|v| v.norm()).collect();
        let mag_err = rel_max_err(&mag_got, &mag_want);
        let fast = time_stretch_magnitude(&d.map(|v| v.norm()), rate).unwrap();
        let fast_err = rel_max_err(fast.as_slice(), &mag_want);
        let pow = time_stretch_power(&d.map(|v| v.norm_sqr()), rate, 2.0).unwrap();
        let pow_want: Vec<f32> = want.iter().map(|v| v.norm_sqr()).collect();
        let pow_err = rel_max_err(pow.as_slice(), &pow_want);
        println!(
            "phase_vocoder(rate={rate}) vs librosa: complex max|diff|/max|X| = {err:e}, \
             magnitude {mag_err:e}, magnitude-only stretch {fast_err:e}, power stretch {pow_err:e}"
        );
        assert!(err <= 1e-4, "{err}");
        assert!(mag_err <= 1e-5 && fast_err <= 1e-5 && pow_err <= 1e-5);
    }
}

/// Deterministic mutation sweep over every fixture format: truncations, byte flips, zeroed
/// runs, duplicated chunks. Every outcome must be `Ok` or a typed error, never a panic or a
/// hang; a panic inside symphonia would surface as `Corrupt("decoder panicked: …")`, which is
/// counted and reported.
#[test]
fn mutated_files_never_panic() {
    let files = [
        ("chirp_16k_mono.wav", "wav"),
        ("chirp_16k_mono.flac", "flac"),
        ("chirp_16k_mono.ogg", "ogg"),
        ("stereo_24bit.wav", "wav"),
        ("speech.mp3", "mp3"),
    ];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut ok, mut errs, mut panics) = (0, 0, 0);
    for (name, ext) in files {
        let orig = fixture(name);
        for round in 0..120 {
            let mut b = orig.clone();
            match round % 4 {
                0 => b.truncate((next() as usize) % b.len()),
                1 => {
                    for _ in 0..1 + next() % 8 {
                        let i = (next() as usize) % b.len();
                        b[i] ^= 1 << (next() % 8);
                    }
                }
                2 => {
                    let i = (next() as usize) % b.len();
                    let n = ((next() as usize) % 64).min(b.len() - i);
                    b[i..i + n].fill(0);
                }
                _ => {
                    let i = (next() as usize) % b.len();
                    let n = ((next() as usize) % 512).min(b.len() - i);
                    let chunk = b[i..i + n].to_vec();
                    b.splice(i..i, chunk);
                }
            }
            for opts in [DecodeOptions::new(), DecodeOptions::new().lenient(true)] {
                match decode_with(&b, Some(ext), &opts) {
                    Ok(a) => {
                        assert!(a.channels >= 1 && a.sample_rate > 0 && a.frames() > 0);
                        ok += 1;
                    }
                    Err(AudioError::Corrupt(m)) if m.contains("panicked") => {
                        eprintln!("{name} round {round}: {m}");
                        panics += 1;
                    }
                    Err(_) => errs += 1,
                }
            }
        }
    }
    println!("mutation sweep: {ok} ok, {errs} typed errors, {panics} caught decoder panics");
    assert_eq!(
        panics, 0,
        "symphonia panicked on mutated input (caught and typed)"
    );
}
