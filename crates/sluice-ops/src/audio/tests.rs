use super::*;
use crate::testing::{cx, one};
use crate::OpSpec;
use serde_json::json;
use sluice_core::{OpKind, OpRef, Sample, Tensor, TensorData, Value};

const WAV: &[u8] = include_bytes!("../../../sluice-audioproc/tests/fixtures/chirp_16k_mono.wav");
const STEREO: &[u8] = include_bytes!("../../../sluice-audioproc/tests/fixtures/stereo_24bit.wav");
const MP3: &[u8] = include_bytes!("../../../sluice-audioproc/tests/fixtures/speech.mp3");

fn op(v: serde_json::Value) -> OpRef {
    let spec: OpSpec = serde_json::from_value(v).unwrap();
    spec.build().unwrap()
}

fn tensor<'a>(s: &'a Sample, f: &str) -> (&'a [usize], &'a [f32]) {
    match s.get(f) {
        Some(Value::Tensor(t)) => match t.data() {
            TensorData::F32(v) => (t.shape(), v.as_slice()),
            d => panic!("{d:?}"),
        },
        other => panic!("{f}: {other:?}"),
    }
}

fn file(bytes: &[u8], path: &str) -> Sample {
    Sample::from_pairs([
        ("path", Value::from(path)),
        ("bytes", Value::from(bytes.to_vec())),
    ])
}

fn spec_sample(rows: usize, cols: usize) -> Sample {
    let data: Vec<f32> = (0..rows * cols).map(|i| 1.0 + i as f32).collect();
    Sample::from_pairs([(
        "spec",
        Value::Tensor(Tensor::new(vec![rows, cols], TensorData::F32(data)).unwrap()),
    )])
}

fn all_specs() -> Vec<serde_json::Value> {
    vec![
        json!({"op": "audio.decode"}),
        json!({"op": "audio.decode", "sample_rate": 16000, "mono": false, "field": "b", "out": "a"}),
        json!({"op": "audio.resample", "rate": 16000}),
        json!({"op": "audio.resample", "rate": 8000, "field": "x", "out": "y"}),
        json!({"op": "audio.spectrogram"}),
        json!({"op": "audio.spectrogram", "n_fft": 512, "hop_length": 128, "win_length": 301,
               "window": "hamming", "power": 1.0, "center": false}),
        json!({"op": "audio.time_stretch", "rate": 0.8}),
        json!({"op": "audio.time_mask", "max_width": 80}),
        json!({"op": "audio.freq_mask", "max_width": 27, "fill": -1.0}),
        json!({"op": "audio.mel"}),
        json!({"op": "audio.mel", "n_mels": 40, "sample_rate": 22050, "n_fft": 512, "fmin": 20.0,
               "fmax": 8000.0, "htk": true, "norm": null}),
        json!({"op": "audio.log"}),
        json!({"op": "audio.power_to_db", "ref": "max", "top_db": null}),
        json!({"op": "audio.amplitude_to_db", "ref": 2.0, "amin": 1e-4}),
    ]
}

#[test]
fn spec_round_trips_for_every_op() {
    let mut names = std::collections::BTreeSet::new();
    for v in all_specs() {
        let spec: OpSpec = serde_json::from_value(v.clone()).unwrap();
        let op = spec.build().unwrap();
        names.insert(op.name().to_string());
        let back: OpSpec = serde_json::from_value(op.spec()).unwrap();
        assert_eq!(back, spec, "{v}");
        assert_eq!(op.spec()["op"], v["op"]);
        assert_eq!(format!("audio.{}", op.name()), v["op"].as_str().unwrap());
        let rebuilt = back.build().unwrap();
        assert_eq!(rebuilt.spec(), op.spec());
    }
    assert_eq!(names.len(), 10, "{names:?}");
}

#[test]
fn defaults_follow_librosa() {
    let spec: OpSpec = serde_json::from_value(json!({"op": "audio.spectrogram"})).unwrap();
    let OpSpec::Audio(AudioSpec::Spectrogram {
        n_fft,
        hop_length,
        window,
        power,
        center,
        field,
        out,
        ..
    }) = spec
    else {
        panic!()
    };
    assert_eq!((n_fft, hop_length, power, center), (400, None, 2.0, true));
    assert_eq!(
        (window, field.as_str(), out.as_str()),
        (WindowName::Hann, "audio", "spec")
    );
    let s = op(json!({"op": "audio.amplitude_to_db"})).spec();
    assert_eq!(
        (s["amin"].as_f64(), s["top_db"].as_f64()),
        (Some(1e-5f32 as f64), Some(80.0))
    );
    let s = op(json!({"op": "audio.power_to_db"})).spec();
    assert_eq!(
        (s["amin"].as_f64(), s["ref"].as_f64()),
        (Some(1e-10f32 as f64), Some(1.0))
    );
}

#[test]
fn bad_specs_are_rejected() {
    for v in [
        json!({"op": "audio.spectrogram", "n_ftt": 400}),
        json!({"op": "audio.spectrogram", "window": "kaiser"}),
        json!({"op": "audio.spectrogram", "n_fft": -1}),
        json!({"op": "audio.mel", "norm": 2}),
    ] {
        assert!(serde_json::from_value::<OpSpec>(v.clone()).is_err(), "{v}");
    }
    for v in [
        json!({"op": "audio.resample"}),
        json!({"op": "audio.resample", "rate": 0}),
        json!({"op": "audio.decode", "sample_rate": 0}),
        json!({"op": "audio.decode", "out": ""}),
        json!({"op": "audio.spectrogram", "n_fft": 0}),
        json!({"op": "audio.spectrogram", "n_fft": 2, "hop_length": null}),
        json!({"op": "audio.spectrogram", "win_length": 500}),
        json!({"op": "audio.spectrogram", "power": 0.0}),
        json!({"op": "audio.time_stretch"}),
        json!({"op": "audio.time_stretch", "rate": 0.0}),
        json!({"op": "audio.time_stretch", "rate": -1.0}),
        json!({"op": "audio.time_mask"}),
        json!({"op": "audio.freq_mask"}),
        json!({"op": "audio.mel", "n_mels": 0}),
        json!({"op": "audio.mel", "norm": "l2"}),
        json!({"op": "audio.mel", "fmin": 9000.0, "fmax": 8000.0}),
        json!({"op": "audio.mel", "sample_rate": 16000, "n_fft": 400, "fmax": -5.0}),
        json!({"op": "audio.log", "eps": -1.0}),
        json!({"op": "audio.power_to_db", "amin": 0.0}),
        json!({"op": "audio.power_to_db", "ref": "min"}),
        json!({"op": "audio.power_to_db", "top_db": -3.0}),
    ] {
        let spec: OpSpec = serde_json::from_value(v.clone()).unwrap();
        let e = spec.build().map(|o| o.name().to_string()).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{v}: {e:?}");
    }
}

#[test]
fn meta_declares_reads_writes_kind_random() {
    let m = op(json!({"op": "audio.decode"})).meta();
    assert_eq!(
        (m.reads, m.writes),
        (
            vec!["bytes".to_string()],
            vec!["audio".to_string(), "sample_rate".to_string()]
        )
    );
    assert_eq!(m.kind, OpKind::Decode);
    let m = op(json!({"op": "audio.mel"})).meta();
    assert_eq!(m.reads, ["spec", "sample_rate"]);
    assert_eq!(m.kind, OpKind::PixelWise);
    let m = op(json!({"op": "audio.mel", "sample_rate": 16000})).meta();
    assert_eq!(m.reads, ["spec"]);
    let m = op(json!({"op": "audio.time_mask", "max_width": 3})).meta();
    assert!(m.random && m.kind == OpKind::PixelWise && m.writes == ["spec"]);
    assert!(!op(json!({"op": "audio.log"})).meta().random);
    assert_eq!(
        op(json!({"op": "audio.time_stretch", "rate": 1.5}))
            .meta()
            .kind,
        OpKind::SizeReducing
    );
    let m = op(json!({"op": "audio.resample", "rate": 16000})).meta();
    assert_eq!(
        (m.reads, m.writes),
        (
            vec!["audio".to_string(), "sample_rate".to_string()],
            vec!["audio".to_string(), "sample_rate".to_string()]
        )
    );
}

#[test]
fn decode_wav_and_stereo() {
    let s = one(op(json!({"op": "audio.decode"}))
        .apply(file(WAV, "x/chirp.wav"), &cx(0, 0))
        .unwrap());
    let (shape, y) = tensor(&s, "audio");
    assert_eq!(shape, &[4000]);
    assert_eq!(s.get("sample_rate"), Some(&Value::Int(16000)));
    assert!(y.iter().all(|v| v.abs() <= 1.0));
    assert!(s.get("bytes").is_some(), "input field is kept");

    let s = one(op(json!({"op": "audio.decode", "mono": false}))
        .apply(file(STEREO, "s.wav"), &cx(0, 0))
        .unwrap());
    assert_eq!(tensor(&s, "audio").0, &[2, 2205]);
    let m = one(op(json!({"op": "audio.decode"}))
        .apply(file(STEREO, "s.wav"), &cx(0, 0))
        .unwrap());
    let (_, st) = tensor(&s, "audio");
    let (_, mono) = tensor(&m, "audio");
    for i in 0..2205 {
        assert!((mono[i] - (st[i] + st[2205 + i]) / 2.0).abs() < 1e-6);
    }
    // Stereo resampled: both channels, ceil(2205 * 16000 / 22050) frames each.
    let r = one(
        op(json!({"op": "audio.decode", "mono": false, "sample_rate": 16000}))
            .apply(file(STEREO, "s.wav"), &cx(0, 0))
            .unwrap(),
    );
    assert_eq!(tensor(&r, "audio").0, &[2, 1600]);
    assert_eq!(r.get("sample_rate"), Some(&Value::Int(16000)));
}

#[test]
fn asr_chain_shapes_and_determinism() {
    let chain = [
        op(json!({"op": "audio.decode", "sample_rate": 16000})),
        op(json!({"op": "audio.spectrogram", "n_fft": 400, "hop_length": 160})),
        op(json!({"op": "audio.time_stretch", "rate": 0.8})),
        op(json!({"op": "audio.time_mask", "max_width": 80})),
        op(json!({"op": "audio.freq_mask", "max_width": 27})),
        op(json!({"op": "audio.mel", "n_mels": 80})),
        op(json!({"op": "audio.log"})),
    ];
    let run = |seed, index| {
        let mut s = file(MP3, "speech.mp3");
        for o in &chain {
            s = one(o.apply(s, &cx(seed, index)).unwrap());
        }
        s
    };
    let a = run(1, 5);
    // 54324 samples at 22.05 kHz → 39419 at 16 kHz → 247 frames → ceil(247 / 0.8) = 309.
    assert_eq!(tensor(&a, "audio").0, &[39419]);
    assert_eq!(tensor(&a, "spec").0, &[80, 309]);
    assert!(tensor(&a, "spec").1.iter().all(|v| v.is_finite()));
    assert_eq!(a, run(1, 5));
    assert_ne!(a, run(1, 6));
    assert_ne!(a, run(2, 5));
}

#[test]
fn masks_are_deterministic_per_seed_and_index_and_bounded() {
    let tm = op(json!({"op": "audio.time_mask", "max_width": 7}));
    let fm = op(json!({"op": "audio.freq_mask", "max_width": 5}));
    let mut widths = std::collections::BTreeSet::new();
    for index in 0..200 {
        let s = one(tm.apply(spec_sample(10, 50), &cx(9, index)).unwrap());
        assert_eq!(
            s,
            one(tm.apply(spec_sample(10, 50), &cx(9, index)).unwrap())
        );
        let (shape, d) = tensor(&s, "spec");
        assert_eq!(shape, &[10, 50]);
        let zero_cols: Vec<usize> = (0..50).filter(|&c| d[c] == 0.0).collect();
        for r in 0..10 {
            for c in 0..50 {
                assert_eq!(d[r * 50 + c] == 0.0, zero_cols.contains(&c));
            }
        }
        assert!(zero_cols.len() < 7);
        if let (Some(a), Some(b)) = (zero_cols.first(), zero_cols.last()) {
            assert_eq!(b - a + 1, zero_cols.len(), "contiguous");
        }
        widths.insert(zero_cols.len());

        let s = one(fm.apply(spec_sample(10, 50), &cx(9, index)).unwrap());
        let (_, d) = tensor(&s, "spec");
        let zero_rows = (0..10).filter(|&r| d[r * 50] == 0.0).count();
        assert!(zero_rows < 5);
        assert_eq!(d.iter().filter(|v| **v == 0.0).count(), zero_rows * 50);
    }
    assert!(widths.len() >= 6, "widths vary: {widths:?}");
    // Different seeds give different masks somewhere.
    let differs = (0..20).any(|i| {
        tm.apply(spec_sample(10, 50), &cx(1, i)).unwrap()
            != tm.apply(spec_sample(10, 50), &cx(2, i)).unwrap()
    });
    assert!(differs);
}

#[test]
fn channel_stacks_share_masks_and_keep_layout() {
    let data: Vec<f32> = (0..2 * 201 * 30).map(|i| 1.0 + (i % 97) as f32).collect();
    let s = Sample::from_pairs([
        (
            "spec",
            Value::Tensor(Tensor::new(vec![2, 201, 30], TensorData::F32(data)).unwrap()),
        ),
        ("sample_rate", Value::Int(16000)),
    ]);
    let s = one(op(json!({"op": "audio.time_mask", "max_width": 30}))
        .apply(s, &cx(0, 1))
        .unwrap());
    let (_, d) = tensor(&s, "spec");
    let plane = 201 * 30;
    for i in 0..plane {
        assert_eq!(d[i] == 0.0, d[plane + i] == 0.0);
    }
    let s = one(op(json!({"op": "audio.time_stretch", "rate": 2.0}))
        .apply(s, &cx(0, 1))
        .unwrap());
    assert_eq!(tensor(&s, "spec").0, &[2, 201, 15]);
    let s = one(op(json!({"op": "audio.mel", "n_mels": 64, "out": "mel"}))
        .apply(s, &cx(0, 1))
        .unwrap());
    assert_eq!(tensor(&s, "mel").0, &[2, 64, 15]);
    assert_eq!(
        tensor(&s, "spec").0,
        &[2, 201, 15],
        "input kept when out differs"
    );
}

#[test]
fn compression_matches_kernels() {
    let s = one(op(json!({"op": "audio.log", "eps": 0.0}))
        .apply(spec_sample(2, 2), &cx(0, 0))
        .unwrap());
    assert_eq!(
        tensor(&s, "spec").1,
        &[0.0, 2f32.ln(), 3f32.ln(), 4f32.ln()]
    );
    let s = one(op(json!({"op": "audio.power_to_db"}))
        .apply(spec_sample(1, 2), &cx(0, 0))
        .unwrap());
    assert_eq!(tensor(&s, "spec").1, &[0.0, 10.0 * 2f32.log10()]);
    let s = one(op(json!({"op": "audio.amplitude_to_db", "ref": "max"}))
        .apply(spec_sample(1, 2), &cx(0, 0))
        .unwrap());
    let d = tensor(&s, "spec").1;
    assert!(
        (d[0] + 20.0 * 2f32.log10()).abs() < 1e-5 && d[1] == 0.0,
        "{d:?}"
    );
}

#[test]
fn bad_input_is_a_data_error() {
    // Deterministic pseudo-random bytes.
    let mut x = 0x1234_5678_9abc_def0u64;
    let junk: Vec<u8> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let dec = op(json!({"op": "audio.decode"}));
    for path in ["junk.mp3", "junk.wav", "junk", "junk.flac"] {
        let e = dec.apply(file(&junk, path), &cx(0, 0)).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{path}: {e:?}");
    }
    let e = dec
        .apply(file(&MP3[..MP3.len() / 2], "cut.mp3"), &cx(0, 0))
        .unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    let e = dec.apply(file(&[], "empty.wav"), &cx(0, 0)).unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    // Wrong types.
    let s = Sample::from_pairs([("bytes", Value::Int(3))]);
    assert!(matches!(
        dec.apply(s, &cx(0, 0)).unwrap_err(),
        Error::Type(_)
    ));
    let s = Sample::from_pairs([("audio", Value::from(vec![1u8, 2]))]);
    let e = op(json!({"op": "audio.spectrogram"}))
        .apply(s, &cx(0, 0))
        .unwrap_err();
    assert!(matches!(e, Error::Type(_)), "{e:?}");
    // Too short for a frame without centering; a 1-D "spectrogram".
    let s = Sample::from_pairs([(
        "audio",
        Value::Tensor(Tensor::new(vec![10], TensorData::F32(vec![0.0; 10])).unwrap()),
    )]);
    let e = op(json!({"op": "audio.spectrogram", "center": false}))
        .apply(s.clone(), &cx(0, 0))
        .unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    let e = op(json!({"op": "audio.log", "field": "audio"})).apply(s.clone(), &cx(0, 0));
    assert!(e.is_ok(), "log works on any shape");
    let e = op(json!({"op": "audio.mel", "field": "audio", "sample_rate": 16000}))
        .apply(s, &cx(0, 0))
        .unwrap_err();
    assert!(matches!(e, Error::Type(_)), "{e:?}");
    // Mel with an explicit n_fft that disagrees with the spectrogram's rows.
    let mut s = spec_sample(201, 3);
    s.set("sample_rate", Value::Int(16000));
    let e = op(json!({"op": "audio.mel", "n_fft": 512}))
        .apply(s, &cx(0, 0))
        .unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e:?}");
    // Bad sample_rate field.
    let mut s = spec_sample(201, 3);
    s.set("sample_rate", Value::Int(-5));
    assert!(op(json!({"op": "audio.mel"})).apply(s, &cx(0, 0)).is_err());
}

#[test]
fn missing_fields_are_missing_field_errors() {
    for (v, field) in [
        (json!({"op": "audio.decode"}), "bytes"),
        (json!({"op": "audio.resample", "rate": 8000}), "sample_rate"),
        (json!({"op": "audio.spectrogram"}), "audio"),
        (json!({"op": "audio.time_stretch", "rate": 2.0}), "spec"),
        (json!({"op": "audio.time_mask", "max_width": 2}), "spec"),
        (json!({"op": "audio.freq_mask", "max_width": 2}), "spec"),
        (json!({"op": "audio.mel"}), "sample_rate"),
        (json!({"op": "audio.mel", "sample_rate": 16000}), "spec"),
        (json!({"op": "audio.log"}), "spec"),
        (json!({"op": "audio.power_to_db"}), "spec"),
        (json!({"op": "audio.amplitude_to_db"}), "spec"),
    ] {
        let o = op(v.clone());
        match o.apply(Sample::from_pairs([("x", Value::Int(1))]), &cx(0, 0)) {
            Err(Error::MissingField { field: f, op, .. }) => {
                assert_eq!((f.as_str(), op.as_str()), (field, o.name()), "{v}")
            }
            other => panic!("{v}: {other:?}"),
        }
    }
}

#[test]
fn resample_op_updates_rate_and_skips_equal_rates() {
    let s = one(op(json!({"op": "audio.decode"}))
        .apply(file(WAV, "c.wav"), &cx(0, 0))
        .unwrap());
    let r = one(op(json!({"op": "audio.resample", "rate": 8000}))
        .apply(s.clone(), &cx(0, 0))
        .unwrap());
    assert_eq!(tensor(&r, "audio").0, &[2000]);
    assert_eq!(r.get("sample_rate"), Some(&Value::Int(8000)));
    let same = one(op(json!({"op": "audio.resample", "rate": 16000}))
        .apply(s.clone(), &cx(0, 0))
        .unwrap());
    assert_eq!(same, s);
}

#[test]
fn concurrent_use_matches_sequential() {
    let chain: Arc<Vec<OpRef>> = Arc::new(vec![
        op(json!({"op": "audio.decode", "sample_rate": 16000})),
        op(json!({"op": "audio.spectrogram", "hop_length": 160})),
        op(json!({"op": "audio.mel", "n_mels": 80})),
    ]);
    let run = |chain: &[OpRef], i: u64| {
        let mut s = file(
            if i.is_multiple_of(2) { MP3 } else { WAV },
            if i.is_multiple_of(2) {
                "a.mp3"
            } else {
                "b.wav"
            },
        );
        for o in chain {
            s = one(o.apply(s, &cx(0, i)).unwrap());
        }
        s
    };
    let expected: Vec<Sample> = (0..8).map(|i| run(&chain, i)).collect();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let chain = chain.clone();
            std::thread::spawn(move || (0..8).map(|i| run(&chain, i)).collect::<Vec<_>>())
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), expected);
    }
}
