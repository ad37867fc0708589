//! `audio.mel`: mel projection of a power spectrogram (`librosa.feature.melspectrogram(S=...)`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample};

use super::plumbing::{
    check_output, check_rate, kernel_err, lock, meta, per_spectrogram, put, read_rate, spec_dims,
    take_f32, wrong_spec, Base, POOL_MAX_KEYS,
};
use super::{AudioSpec, SAMPLE_RATE_FIELD};
use crate::limits::{product, refuse};

pub(super) struct Mel {
    base: Base,
    /// `None`: read the `sample_rate` field.
    sample_rate: Option<u32>,
    /// `None`: from the spectrogram's rows.
    n_fft: Option<usize>,
    /// `sample_rate` / `n_fft` are filled per call when the spec leaves them open.
    template: ap::MelConfig,
    banks: Mutex<HashMap<(u32, usize), Arc<ap::MelFilterbank>>>,
    max_samples: u64,
}

impl Mel {
    /// The op of an `audio.mel` spec, its arguments checked; the filterbank is planned now
    /// when the spec fixes both the rate and the FFT size.
    pub(super) fn build(base: Base) -> Result<Self> {
        let AudioSpec::Mel {
            n_mels,
            sample_rate,
            n_fft,
            fmin,
            fmax,
            htk,
            ref norm,
            max_samples,
            ..
        } = base.spec
        else {
            return Err(wrong_spec(&base));
        };
        if n_mels == 0 {
            return Err(Error::invalid("n_mels must be > 0"));
        }
        // The filterbank holds n_mels x (n_fft/2 + 1) weights, the output n_mels a frame.
        let bins = n_fft.map_or(1, |n| (n / 2 + 1) as u64);
        let weights = product(&[n_mels as u64, bins]);
        if weights > max_samples {
            return Err(refuse(
                &format!("audio.{}", base.name),
                &match n_fft {
                    Some(n) => format!(
                        "n_mels={n_mels} with n_fft={n} makes a filterbank of {weights} weights"
                    ),
                    None => format!("n_mels={n_mels} makes {n_mels} values per frame"),
                },
                "max_samples",
                max_samples,
            ));
        }
        if let Some(r) = sample_rate {
            check_rate("sample_rate", r)?;
        }
        if n_fft == Some(0) {
            return Err(Error::invalid("n_fft must be > 0"));
        }
        if !(fmin.is_finite() && fmin >= 0.0) {
            return Err(Error::invalid(format!(
                "fmin must be finite and >= 0, got {fmin}"
            )));
        }
        if let Some(f) = fmax {
            if !(f.is_finite() && f > fmin) {
                return Err(Error::invalid(format!(
                    "fmax must be finite and > fmin, got {f}"
                )));
            }
        }
        let norm = match norm.as_deref() {
            None => ap::MelNorm::None,
            Some("slaney") => ap::MelNorm::Slaney,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "norm must be \"slaney\" or null, got {other:?}"
                )))
            }
        };
        let template = ap::MelConfig {
            sample_rate: sample_rate.unwrap_or(0),
            n_fft: n_fft.unwrap_or(0),
            n_mels,
            fmin,
            fmax,
            htk,
            norm,
        };
        let mel = Mel {
            base,
            sample_rate,
            n_fft,
            template,
            banks: Mutex::new(HashMap::new()),
            max_samples,
        };
        // Parameters fully known: plan the filterbank now (and report bad ones now).
        if let (Some(sr), Some(n)) = (sample_rate, n_fft) {
            mel.bank(sr, n)
                .map_err(|e| Error::invalid(e.root().to_string()))?;
        }
        Ok(mel)
    }

    /// The filterbank for `sample_rate` and `n_fft`, planned once per pair.
    fn bank(&self, sample_rate: u32, n_fft: usize) -> Result<Arc<ap::MelFilterbank>> {
        let key = (sample_rate, n_fft);
        if let Some(b) = lock(&self.banks).get(&key) {
            return Ok(b.clone());
        }
        let n_mels = self.template.n_mels;
        check_output(
            &[n_mels as u64, (n_fft / 2 + 1) as u64],
            self.max_samples,
            || {
                format!(
                    "n_mels={n_mels} with n_fft={n_fft} makes a filterbank of {n_mels} x {} \
                     weights",
                    n_fft / 2 + 1
                )
            },
        )?;
        let cfg = ap::MelConfig {
            sample_rate,
            n_fft,
            ..self.template
        };
        let bank = Arc::new(ap::MelFilterbank::new(cfg).map_err(kernel_err)?);
        let mut banks = lock(&self.banks);
        if banks.len() >= POOL_MAX_KEYS {
            banks.clear();
        }
        Ok(banks.entry(key).or_insert(bank).clone())
    }
}

impl std::fmt::Debug for Mel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mel")
            .field("spec", &self.base.spec)
            .finish_non_exhaustive()
    }
}

impl Op for Mel {
    op_common!();
    fn meta(&self) -> OpMeta {
        let mut reads = vec![self.base.field.as_str()];
        if self.sample_rate.is_none() {
            reads.push(SAMPLE_RATE_FIELD);
        }
        meta(reads, vec![&self.base.out], OpKind::PixelWise, false)
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        let sr = match self.sample_rate {
            Some(r) => r,
            None => read_rate(&s, "mel")?,
        };
        let (shape, data) = take_f32(&mut s, field, out, "mel")?;
        let (lead, rows, cols) = spec_dims(&shape, field)?;
        let n_fft = match self.n_fft {
            Some(n) => n,
            None if rows >= 2 => 2 * (rows - 1),
            None => {
                return Err(Error::data(format!(
                    "field '{field}' has {rows} frequency rows; a spectrogram needs at least 2"
                )))
            }
        };
        let n_mels = self.template.n_mels as u64;
        let count = lead.iter().product::<usize>() as u64;
        check_output(&[count, n_mels, cols as u64], self.max_samples, || {
            format!("n_mels={n_mels} on {cols} frames makes {count} x {n_mels} x {cols} values")
        })?;
        let bank = self.bank(sr, n_fft)?;
        let (shape, data) = per_spectrogram(lead, rows, cols, data, |sp| {
            bank.apply(&sp).map_err(kernel_err)
        })?;
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_core::{Error, Sample, Tensor, TensorData, Value};

    use super::super::test_util::{op, spec_sample, tensor};
    use crate::testing::{cx, one};

    #[test]
    fn projects_rows_onto_n_mels() {
        let mut s = spec_sample(201, 3);
        s.set("sample_rate", Value::Int(16000));
        let s = one(op(json!({"op": "audio.mel", "n_mels": 40}))
            .apply(s, &cx(0, 0))
            .unwrap());
        assert_eq!(tensor(&s, "spec").0, &[40, 3]);
    }

    #[test]
    fn bad_input_is_a_type_or_data_error() {
        // A 1-D "spectrogram".
        let s = Sample::from_pairs([(
            "audio",
            Value::Tensor(Tensor::new(vec![10], TensorData::F32(vec![0.0; 10])).unwrap()),
        )]);
        let e = op(json!({"op": "audio.mel", "field": "audio", "sample_rate": 16000}))
            .apply(s, &cx(0, 0))
            .unwrap_err();
        assert!(matches!(e, Error::Type(_)), "{e:?}");
        // An explicit n_fft that disagrees with the spectrogram's rows.
        let mut s = spec_sample(201, 3);
        s.set("sample_rate", Value::Int(16000));
        let e = op(json!({"op": "audio.mel", "n_fft": 512}))
            .apply(s, &cx(0, 0))
            .unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e:?}");
        // A bad sample_rate field.
        let mut s = spec_sample(201, 3);
        s.set("sample_rate", Value::Int(-5));
        assert!(op(json!({"op": "audio.mel"})).apply(s, &cx(0, 0)).is_err());
    }
}
