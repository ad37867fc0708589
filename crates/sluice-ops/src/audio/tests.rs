//! What the audio ops share: spec round trips, defaults, argument and input errors, meta,
//! chains of ops and concurrent use. Each op's own behaviour is tested in its module.

use std::sync::Arc;

use serde_json::json;
use sluice_core::{Error, OpKind, OpRef, Sample, Tensor, TensorData, Value};

use super::test_util::{all_specs, file, op, tensor, MP3, WAV};
use super::{AudioSpec, WindowName};
use crate::testing::{cx, one};
use crate::OpSpec;

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
