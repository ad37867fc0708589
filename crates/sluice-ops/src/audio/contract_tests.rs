//! The op contract for the audio ops: hostile sizes, input shapes and `out=`.

use serde_json::json;
use sluice_core::{Error, OpRef, Sample, Tensor, TensorData, Value};

use crate::testing::{cx, one};
use crate::OpSpec;

fn op(v: serde_json::Value) -> OpRef {
    OpSpec::from_value(v).unwrap().build().unwrap()
}

fn build_err(v: serde_json::Value) -> Error {
    match OpSpec::from_value(v.clone()) {
        Err(e) => e,
        Ok(spec) => spec.build().map(|o| o.name().to_string()).unwrap_err(),
    }
}

fn f32s(field: &str, shape: &[usize]) -> Sample {
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n).map(|i| 0.1 + (i % 13) as f32 * 0.1).collect();
    Sample::from_pairs([
        (
            field,
            Value::Tensor(Tensor::new(shape.to_vec(), TensorData::F32(data)).unwrap()),
        ),
        ("sample_rate", Value::Int(16000)),
    ])
}

fn shape_of(s: &Sample, f: &str) -> Vec<usize> {
    match s.get(f) {
        Some(Value::Tensor(t)) => t.shape().to_vec(),
        other => panic!("{f}: {other:?}"),
    }
}

/// Arguments that alone make an absurd output are refused when the op is made, naming the
/// op, the argument and the limit.
#[test]
fn absurd_arguments_are_refused_at_build_time() {
    for (v, want) in [
        (
            json!({"op": "audio.resample", "rate": 1_000_000_000u32}),
            "audio.resample: rate=1000000000 makes 1000000000 samples per second",
        ),
        (
            json!({"op": "audio.decode", "sample_rate": 1_000_000_000u32}),
            "audio.decode: sample_rate=1000000000",
        ),
        (
            json!({"op": "audio.spectrogram", "n_fft": 1_000_000_000u64}),
            "audio.spectrogram: n_fft and win_length must be at most",
        ),
        (
            json!({"op": "audio.spectrogram", "n_fft": 4096, "max_samples": 1000}),
            "audio.spectrogram: n_fft=4096 makes 2049 frequency bins",
        ),
        (
            json!({"op": "audio.time_stretch", "rate": 1e-12}),
            "audio.time_stretch: rate=0.000000000001 stretches one frame",
        ),
        (
            json!({"op": "audio.mel", "n_mels": 1_000_000_000u64}),
            "audio.mel: n_mels=1000000000 makes",
        ),
        (
            json!({"op": "audio.mel", "n_mels": 10000, "n_fft": 1_000_000, "sample_rate": 16000}),
            "audio.mel: n_mels=10000 with n_fft=1000000 makes a filterbank",
        ),
    ] {
        let e = build_err(v.clone());
        assert!(matches!(e, Error::InvalidArgument(_)), "{v}: {e:?}");
        assert!(e.to_string().starts_with(want), "{v}: {e}");
    }
    // The limit is an argument: raised, the same rate passes.
    op(json!({"op": "audio.resample", "rate": 1_000_000_000u32, "max_samples": 4_000_000_000u64}));
}

/// Sizes only the data makes absurd fail the sample before allocating.
#[test]
fn absurd_outputs_fail_the_sample_before_allocating() {
    let clip = f32s("audio", &[32000]);
    let limited = |v: serde_json::Value| {
        let mut v = v;
        v["max_samples"] = json!(200_000);
        op(v)
    };
    for (o, s, want) in [
        (
            limited(json!({"op": "audio.resample", "rate": 160_000})),
            clip.clone(),
            "rate=160000 on 32000 samples at 16000 Hz makes 320000 samples",
        ),
        (
            limited(json!({"op": "audio.spectrogram", "n_fft": 400, "hop_length": 1})),
            clip.clone(),
            "n_fft=400, hop_length=1 on 1 x 32000 samples makes 1 x 201 x 32001 values",
        ),
        (
            limited(json!({"op": "audio.time_stretch", "rate": 0.01})),
            f32s("spec", &[201, 100]),
            "rate=0.01 on 100 frames makes 1 x 201 x 10000 values",
        ),
        (
            limited(json!({"op": "audio.mel", "n_mels": 3000})),
            f32s("spec", &[201, 100]),
            "n_mels=3000 on 100 frames makes 1 x 3000 x 100 values",
        ),
        (
            limited(json!({"op": "audio.mel", "n_mels": 200})),
            f32s("spec", &[1025, 10]),
            "n_mels=200 with n_fft=2048 makes a filterbank of 200 x 1025 weights",
        ),
    ] {
        let e = o.apply(s, &cx(0, 0)).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{}: {e:?}", o.name());
        let msg = e.to_string();
        assert!(
            msg.contains(want) && msg.contains("above max_samples=200000"),
            "{msg}"
        );
    }
    // A resampler plan of gigabytes (1 Hz → 500 MHz) is refused before it is planned.
    let mut slow = f32s("audio", &[1]);
    slow.set("sample_rate", Value::Int(1));
    let o = op(json!({"op": "audio.resample", "rate": 500_000_000}));
    let e = o.apply(slow, &cx(0, 0)).unwrap_err();
    assert!(e.to_string().contains("a resampler from 1 Hz holds"), "{e}");
}

/// Audio ops take `[n]` or `[channels, n]`; spectrogram ops `[freq, time]` or
/// `[channels, freq, time]`. Anything else is a type error naming the field and the shape.
#[test]
fn inputs_of_the_wrong_rank_name_the_field() {
    for (v, field, shape) in [
        (json!({"op": "audio.spectrogram"}), "audio", vec![3, 4, 5]),
        (json!({"op": "audio.spectrogram"}), "audio", vec![]),
        (json!({"op": "audio.spectrogram"}), "audio", vec![0, 400]),
        (
            json!({"op": "audio.resample", "rate": 8000}),
            "audio",
            vec![2, 2, 400],
        ),
        (
            json!({"op": "audio.time_stretch", "rate": 2.0}),
            "spec",
            vec![40],
        ),
        (
            json!({"op": "audio.time_stretch", "rate": 2.0}),
            "spec",
            vec![1, 2, 3, 4],
        ),
        (
            json!({"op": "audio.time_mask", "max_width": 3}),
            "spec",
            vec![40],
        ),
        (
            json!({"op": "audio.freq_mask", "max_width": 3}),
            "spec",
            vec![2, 2, 3, 4],
        ),
        (json!({"op": "audio.mel", "n_mels": 8}), "spec", vec![201]),
        (
            json!({"op": "audio.mel", "n_mels": 8}),
            "spec",
            vec![2, 2, 201, 3],
        ),
    ] {
        let o = op(v.clone());
        let e = o.apply(f32s(field, &shape), &cx(0, 0)).unwrap_err();
        assert!(matches!(e, Error::Type(_)), "{v} {shape:?}: {e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("field '{field}'")) && msg.contains(&format!("{shape:?}")),
            "{msg}"
        );
    }
    // The documented ranks work, with the channel axis kept.
    let s = one(op(json!({"op": "audio.spectrogram", "n_fft": 64}))
        .apply(f32s("audio", &[3, 640]), &cx(0, 0))
        .unwrap());
    assert_eq!(shape_of(&s, "spec"), [3, 33, 41]);
    // log and the dB ops are element-wise: any shape.
    let s = one(op(json!({"op": "audio.log", "field": "x"}))
        .apply(f32s("x", &[2, 3, 4, 5]), &cx(0, 0))
        .unwrap());
    assert_eq!(shape_of(&s, "x"), [2, 3, 4, 5]);
}

/// `out=` writes elsewhere and leaves the input field as it was; meta says so; draws are
/// the same as in place.
#[test]
fn out_leaves_the_input_untouched() {
    for v in [
        json!({"op": "audio.time_mask", "max_width": 20}),
        json!({"op": "audio.freq_mask", "max_width": 20}),
        json!({"op": "audio.time_stretch", "rate": 1.5}),
        json!({"op": "audio.mel", "n_mels": 16}),
        json!({"op": "audio.log"}),
        json!({"op": "audio.power_to_db"}),
    ] {
        let input = f32s("spec", &[2, 65, 30]);
        let mut with_out = v.clone();
        with_out["out"] = json!("aug");
        let o = op(with_out);
        let a = one(o.apply(input.clone(), &cx(0, 7)).unwrap());
        let b = one(op(v.clone()).apply(input.clone(), &cx(0, 7)).unwrap());
        assert_eq!(a.get("spec"), input.get("spec"), "{v}");
        assert_eq!(a.get("aug"), b.get("spec"), "{v}");
        let m = o.meta();
        assert_eq!(m.writes, ["aug"], "{v}");
        assert!(m.reads.contains(&"spec".to_string()) && !m.writes.contains(&"spec".to_string()));
        // Masks without `out` serialize as before.
        if v["op"] == "audio.time_mask" {
            assert!(op(v.clone()).spec().get("out").is_none());
        }
    }
}
