//! `audio.decode`: file bytes → float32 samples (`[n]` or `[channels, n]`) and the
//! `sample_rate` field, optionally resampled.

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample, Value};

use super::plumbing::{
    check_rate, check_target_rate, ext_hint, kernel_err, meta, put, resample_with, wrong_spec,
    Base, ResamplerPool,
};
use super::{AudioSpec, SAMPLE_RATE_FIELD};

#[derive(Debug)]
pub(super) struct Decode {
    base: Base,
    /// The rate to resample to; `None` keeps the file's.
    sample_rate: Option<u32>,
    mono: bool,
    max_samples: u64,
    resamplers: ResamplerPool,
}

impl Decode {
    /// The op of an `audio.decode` spec, its arguments checked.
    pub(super) fn build(base: Base) -> Result<Self> {
        let AudioSpec::Decode {
            sample_rate,
            mono,
            max_samples,
            ..
        } = base.spec
        else {
            return Err(wrong_spec(&base));
        };
        if let Some(r) = sample_rate {
            check_rate("sample_rate", r)?;
            check_target_rate(base.name, "sample_rate", r, max_samples)?;
        }
        Ok(Decode {
            base,
            sample_rate,
            mono,
            max_samples,
            resamplers: ResamplerPool::default(),
        })
    }
}

impl Op for Decode {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = (&self.base.field, &self.base.out);
        meta(
            vec![field],
            vec![out, SAMPLE_RATE_FIELD],
            OpKind::Decode,
            false,
        )
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        let v = s.require(field, "decode")?;
        let bytes = v.as_bytes().ok_or_else(|| {
            Error::type_error(format!("field '{field}' must be bytes, got {}", v.kind()))
        })?;
        let hint = ext_hint(&s);
        let mut audio = ap::decode(bytes, hint.as_deref()).map_err(kernel_err)?;
        if self.mono && audio.channels > 1 {
            audio = audio.into_mono();
        }
        let channels = audio.channels.max(1);
        let mut rate = audio.sample_rate;
        let mut samples = audio.samples;
        if let Some(to) = self.sample_rate {
            samples = resample_with(
                &self.resamplers,
                samples,
                channels,
                rate,
                ("sample_rate", to),
                self.max_samples,
            )?;
            rate = to;
        }
        let shape = if self.mono {
            vec![samples.len()]
        } else {
            vec![channels, samples.len() / channels]
        };
        put(&mut s, out, shape, samples)?;
        s.set(SAMPLE_RATE_FIELD, Value::Int(rate as i64));
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_core::{Error, Sample, Value};

    use super::super::test_util::{file, op, tensor, MP3, STEREO, WAV};
    use crate::testing::{cx, one};

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
    fn bad_bytes_are_data_errors_and_other_values_type_errors() {
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
        let s = Sample::from_pairs([("bytes", Value::Int(3))]);
        assert!(matches!(
            dec.apply(s, &cx(0, 0)).unwrap_err(),
            Error::Type(_)
        ));
    }

    #[test]
    fn bad_arguments_name_the_op() {
        for (v, msg) in [
            (
                json!({"op": "audio.decode", "sample_rate": 0}),
                "audio.decode: sample_rate must be a positive sample rate in Hz, got 0",
            ),
            (
                json!({"op": "audio.decode", "out": ""}),
                "audio.decode: out must be a non-empty field name",
            ),
        ] {
            let spec: crate::OpSpec = serde_json::from_value(v.clone()).unwrap();
            let e = spec.build().unwrap_err();
            assert!(e.to_string().contains(msg), "{v}: {e}");
        }
    }
}
