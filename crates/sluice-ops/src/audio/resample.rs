//! `audio.resample`: audio from the rate in the `sample_rate` field to a fixed rate.

use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample, Value};

use super::plumbing::{
    audio_channels, check_rate, check_target_rate, meta, put, read_rate, resample_with, take_f32,
    wrong_spec, Base, ResamplerPool,
};
use super::{AudioSpec, SAMPLE_RATE_FIELD};

#[derive(Debug)]
pub(super) struct Resample {
    base: Base,
    rate: u32,
    max_samples: u64,
    resamplers: ResamplerPool,
}

impl Resample {
    /// The op of an `audio.resample` spec, its arguments checked.
    pub(super) fn build(base: Base) -> Result<Self> {
        let AudioSpec::Resample {
            rate, max_samples, ..
        } = base.spec
        else {
            return Err(wrong_spec(&base));
        };
        let rate =
            rate.ok_or_else(|| Error::invalid("rate (target sample rate in Hz) is required"))?;
        check_rate("rate", rate)?;
        check_target_rate(base.name, "rate", rate, max_samples)?;
        Ok(Resample {
            base,
            rate,
            max_samples,
            resamplers: ResamplerPool::default(),
        })
    }
}

impl Op for Resample {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = (&self.base.field, &self.base.out);
        // Opaque: whether it shrinks the data depends on the source rate, unknown statically.
        meta(
            vec![field, SAMPLE_RATE_FIELD],
            vec![out, SAMPLE_RATE_FIELD],
            OpKind::Opaque,
            false,
        )
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        let from = read_rate(&s, "resample")?;
        let (shape, data) = take_f32(&mut s, field, out, "resample")?;
        let c = audio_channels(&shape, field)?;
        let to = ("rate", self.rate);
        let y = resample_with(&self.resamplers, data, c, from, to, self.max_samples)?;
        let shape = if shape.len() == 1 {
            vec![y.len()]
        } else {
            vec![c, y.len() / c]
        };
        put(&mut s, out, shape, y)?;
        s.set(SAMPLE_RATE_FIELD, Value::Int(self.rate as i64));
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_core::Value;

    use super::super::test_util::{file, op, tensor, WAV};
    use crate::testing::{cx, one};

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
    fn a_missing_rate_names_the_op() {
        let spec: crate::OpSpec = serde_json::from_value(json!({"op": "audio.resample"})).unwrap();
        let e = spec.build().unwrap_err().to_string();
        assert!(
            e.contains("audio.resample: rate (target sample rate in Hz) is required"),
            "{e}"
        );
    }
}
