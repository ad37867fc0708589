//! `audio.time_stretch`: phase-vocoder time stretch of a power spectrogram.

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample};

use super::plumbing::{
    check_output, kernel_err, meta, per_spectrogram, put, spec_dims, take_f32, wrong_spec, Base,
};
use super::AudioSpec;
use crate::limits::refuse;

#[derive(Debug)]
pub(super) struct TimeStretch {
    base: Base,
    rate: f64,
    power: f32,
    max_samples: u64,
}

impl TimeStretch {
    /// The op of an `audio.time_stretch` spec, its arguments checked.
    pub(super) fn build(base: Base) -> Result<Self> {
        let AudioSpec::TimeStretch {
            rate,
            power,
            max_samples,
            ..
        } = base.spec
        else {
            return Err(wrong_spec(&base));
        };
        let rate = rate.ok_or_else(|| Error::invalid("rate is required"))?;
        if !(rate.is_finite() && rate > 0.0) {
            return Err(Error::invalid(format!(
                "rate must be finite and > 0, got {rate}"
            )));
        }
        if !(power.is_finite() && power > 0.0) {
            return Err(Error::invalid(format!(
                "power must be finite and > 0, got {power}"
            )));
        }
        // One frame becomes ceil(1 / rate) frames.
        let per_frame = (1.0 / rate).ceil();
        if per_frame > max_samples as f64 {
            return Err(refuse(
                &format!("audio.{}", base.name),
                &format!("rate={rate} stretches one frame to {per_frame} frames"),
                "max_samples",
                max_samples,
            ));
        }
        Ok(TimeStretch {
            base,
            rate,
            power,
            max_samples,
        })
    }
}

impl Op for TimeStretch {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = (&self.base.field, &self.base.out);
        // Speeding up (rate > 1) shrinks the spectrogram, in place; slowing down grows it.
        let kind = if self.rate > 1.0 && field == out {
            OpKind::SizeReducing
        } else {
            OpKind::Opaque
        };
        meta(vec![field], vec![out], kind, false)
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        let (shape, data) = take_f32(&mut s, field, out, "time_stretch")?;
        let (lead, rows, cols) = spec_dims(&shape, field)?;
        let frames = (cols as f64 / self.rate).ceil();
        let count = lead.iter().product::<usize>() as u64;
        check_output(
            &[count, rows as u64, frames.min(u64::MAX as f64) as u64],
            self.max_samples,
            || {
                format!(
                    "rate={} on {cols} frames makes {count} x {rows} x {frames} values",
                    self.rate
                )
            },
        )?;
        let (shape, data) = per_spectrogram(lead, rows, cols, data, |sp| {
            ap::time_stretch_power(&sp, self.rate, self.power).map_err(kernel_err)
        })?;
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_core::OpKind;

    use super::super::test_util::{op, spec_sample, tensor};
    use crate::testing::{cx, one};

    #[test]
    fn frames_become_ceil_frames_over_rate() {
        for (rate, frames) in [(2.0, 5), (0.8, 13), (1.0, 10), (3.0, 4)] {
            let s = one(op(json!({"op": "audio.time_stretch", "rate": rate}))
                .apply(spec_sample(3, 10), &cx(0, 0))
                .unwrap());
            assert_eq!(tensor(&s, "spec").0, &[3, frames], "rate {rate}");
        }
    }

    #[test]
    fn only_an_in_place_speed_up_is_size_reducing() {
        let kind = |v| op(v).meta().kind;
        assert_eq!(
            kind(json!({"op": "audio.time_stretch", "rate": 1.5})),
            OpKind::SizeReducing
        );
        assert_eq!(
            kind(json!({"op": "audio.time_stretch", "rate": 0.5})),
            OpKind::Opaque
        );
        assert_eq!(
            kind(json!({"op": "audio.time_stretch", "rate": 1.5, "out": "fast"})),
            OpKind::Opaque
        );
    }
}
