//! Fixtures and helpers the audio ops' unit tests share.

use serde_json::json;
use sluice_core::{OpRef, Sample, Tensor, TensorData, Value};

use crate::OpSpec;

pub(super) const WAV: &[u8] =
    include_bytes!("../../../sluice-audioproc/tests/fixtures/chirp_16k_mono.wav");
pub(super) const STEREO: &[u8] =
    include_bytes!("../../../sluice-audioproc/tests/fixtures/stereo_24bit.wav");
pub(super) const MP3: &[u8] = include_bytes!("../../../sluice-audioproc/tests/fixtures/speech.mp3");

/// The op of a JSON spec (which must be valid).
pub(super) fn op(v: serde_json::Value) -> OpRef {
    let spec: OpSpec = serde_json::from_value(v).unwrap();
    spec.build().unwrap()
}

/// The shape and values of the float32 tensor in field `f`.
pub(super) fn tensor<'a>(s: &'a Sample, f: &str) -> (&'a [usize], &'a [f32]) {
    match s.get(f) {
        Some(Value::Tensor(t)) => match t.data() {
            TensorData::F32(v) => (t.shape(), v.as_slice()),
            d => panic!("{d:?}"),
        },
        other => panic!("{f}: {other:?}"),
    }
}

/// A sample as `read_files` makes it.
pub(super) fn file(bytes: &[u8], path: &str) -> Sample {
    Sample::from_pairs([
        ("path", Value::from(path)),
        ("bytes", Value::from(bytes.to_vec())),
    ])
}

/// A `rows x cols` spectrogram `1, 2, 3, ...` in field `spec`.
pub(super) fn spec_sample(rows: usize, cols: usize) -> Sample {
    let data: Vec<f32> = (0..rows * cols).map(|i| 1.0 + i as f32).collect();
    Sample::from_pairs([(
        "spec",
        Value::Tensor(Tensor::new(vec![rows, cols], TensorData::F32(data)).unwrap()),
    )])
}

/// A spec of every op, with defaults and with every argument set.
pub(super) fn all_specs() -> Vec<serde_json::Value> {
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
