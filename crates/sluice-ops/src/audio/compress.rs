//! `audio.log`, `audio.power_to_db` and `audio.amplitude_to_db`: element-wise compression,
//! one op type for the three.

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample};

use super::plumbing::{kernel_err, meta, put, take_f32, wrong_spec, Base};
use super::{AudioSpec, DbReference};

#[derive(Debug, Clone, Copy)]
enum Compression {
    Log(f32),
    PowerDb(ap::DbRef, f32, Option<f32>),
    AmplitudeDb(ap::DbRef, f32, Option<f32>),
}

#[derive(Debug)]
pub(super) struct Compress {
    base: Base,
    how: Compression,
}

impl Compress {
    /// The op of an `audio.log`, `audio.power_to_db` or `audio.amplitude_to_db` spec, its
    /// arguments checked.
    pub(super) fn build(base: Base) -> Result<Self> {
        let how = match &base.spec {
            AudioSpec::Log { eps, .. } => {
                if !(eps.is_finite() && *eps >= 0.0) {
                    return Err(Error::invalid(format!(
                        "eps must be finite and >= 0, got {eps}"
                    )));
                }
                Compression::Log(*eps)
            }
            AudioSpec::PowerToDb {
                reference,
                amin,
                top_db,
                ..
            }
            | AudioSpec::AmplitudeToDb {
                reference,
                amin,
                top_db,
                ..
            } => {
                let reference = db_reference(reference)?;
                if !(amin.is_finite() && *amin > 0.0) {
                    return Err(Error::invalid(format!(
                        "amin must be finite and > 0, got {amin}"
                    )));
                }
                if let Some(t) = top_db {
                    if !(t.is_finite() && *t >= 0.0) {
                        return Err(Error::invalid(format!(
                            "top_db must be finite and >= 0, got {t}"
                        )));
                    }
                }
                if matches!(base.spec, AudioSpec::PowerToDb { .. }) {
                    Compression::PowerDb(reference, *amin, *top_db)
                } else {
                    Compression::AmplitudeDb(reference, *amin, *top_db)
                }
            }
            _ => return Err(wrong_spec(&base)),
        };
        Ok(Compress { base, how })
    }
}

fn db_reference(r: &DbReference) -> Result<ap::DbRef> {
    match r {
        DbReference::Value(v) if v.is_finite() && *v > 0.0 => Ok(ap::DbRef::Value(*v)),
        DbReference::Named(s) if s == "max" => Ok(ap::DbRef::Max),
        DbReference::Value(v) => Err(Error::invalid(format!(
            "ref must be a positive number or \"max\", got {v}"
        ))),
        DbReference::Named(s) => Err(Error::invalid(format!(
            "ref must be a positive number or \"max\", got \"{s}\""
        ))),
    }
}

impl Op for Compress {
    op_common!();
    fn meta(&self) -> OpMeta {
        meta(
            vec![&self.base.field],
            vec![&self.base.out],
            OpKind::PixelWise,
            false,
        )
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        let (shape, mut data) = take_f32(&mut s, field, out, self.base.name)?;
        match self.how {
            Compression::Log(eps) => ap::log(&mut data, eps),
            Compression::PowerDb(r, amin, top) => ap::power_to_db(&mut data, r, amin, top),
            Compression::AmplitudeDb(r, amin, top) => ap::amplitude_to_db(&mut data, r, amin, top),
        }
        .map_err(kernel_err)?;
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_core::{Sample, Tensor, TensorData, Value};

    use super::super::test_util::{op, spec_sample, tensor};
    use crate::testing::{cx, one};

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
    fn log_works_on_any_shape() {
        let s = Sample::from_pairs([(
            "audio",
            Value::Tensor(Tensor::new(vec![10], TensorData::F32(vec![1.0; 10])).unwrap()),
        )]);
        let s = one(op(json!({"op": "audio.log", "field": "audio"}))
            .apply(s, &cx(0, 0))
            .unwrap());
        assert_eq!(tensor(&s, "audio").0, &[10]);
        assert!(!op(json!({"op": "audio.log"})).meta().random);
    }
}
