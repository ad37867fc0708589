//! `audio.spectrogram`: `|STFT|^power` of audio as float32 freq × time.

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample};

use super::plumbing::{
    audio_channels, check_output, kernel_err, meta, put, with_f32, wrong_spec, Base, Pool,
};
use super::AudioSpec;
use crate::limits::{refuse, MAX_N_FFT};

#[derive(Debug)]
pub(super) struct Spectrogram {
    base: Base,
    power: f32,
    /// Planned at build time; cloned (sharing the FFT plan) for each concurrent worker.
    proto: ap::Stft,
    pool: Pool<(), ap::Stft>,
    n_fft: usize,
    hop: usize,
    center: bool,
    max_samples: u64,
}

impl Spectrogram {
    /// The op of an `audio.spectrogram` spec, its arguments checked and its STFT planned.
    pub(super) fn build(base: Base) -> Result<Self> {
        let AudioSpec::Spectrogram {
            n_fft,
            hop_length,
            win_length,
            window,
            power,
            center,
            max_samples,
            ..
        } = base.spec
        else {
            return Err(wrong_spec(&base));
        };
        if !(power.is_finite() && power > 0.0) {
            return Err(Error::invalid(format!(
                "power must be finite and > 0, got {power}"
            )));
        }
        let win = win_length.unwrap_or(n_fft);
        let hop = hop_length.unwrap_or(win / 4);
        if n_fft == 0 || hop == 0 {
            return Err(Error::invalid(format!(
                "n_fft and hop_length must be > 0, got n_fft={n_fft}, hop_length={hop}"
            )));
        }
        // The FFT plan and its buffers are a few times n_fft: capped, as kernel sizes are.
        if n_fft > MAX_N_FFT || win > MAX_N_FFT {
            return Err(Error::invalid(format!(
                "n_fft and win_length must be at most {MAX_N_FFT}, got n_fft={n_fft}, \
                 win_length={win}"
            )));
        }
        let rows = (n_fft / 2 + 1) as u64;
        if rows > max_samples {
            return Err(refuse(
                &format!("audio.{}", base.name),
                &format!("n_fft={n_fft} makes {rows} frequency bins per frame"),
                "max_samples",
                max_samples,
            ));
        }
        let proto = ap::Stft::new(n_fft, hop, win_length, window.kernel(), center)
            .map_err(|e| Error::invalid(e.to_string()))?;
        Ok(Spectrogram {
            base,
            power,
            proto,
            pool: Pool::default(),
            n_fft,
            hop,
            center,
            max_samples,
        })
    }

    /// Frames of a clip of `n` samples (0 when too short for one; the kernel reports that).
    fn frames(&self, n: usize) -> usize {
        let padded = n + if self.center { 2 * (self.n_fft / 2) } else { 0 };
        if padded < self.n_fft {
            0
        } else {
            1 + (padded - self.n_fft) / self.hop
        }
    }
}

impl Op for Spectrogram {
    op_common!();
    fn meta(&self) -> OpMeta {
        meta(
            vec![&self.base.field],
            vec![&self.base.out],
            OpKind::Opaque,
            false,
        )
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        // Borrowed, not taken: the audio usually stays in the sample (out != field).
        let (shape, spec) = with_f32(&s, field, "spectrogram", |shape, data| {
            let count = audio_channels(shape, field)?;
            let (n, lead) = (shape[shape.len() - 1], &shape[..shape.len() - 1]);
            let (rows, frames) = (self.n_fft / 2 + 1, self.frames(n));
            check_output(
                &[count as u64, rows as u64, frames as u64],
                self.max_samples,
                || {
                    format!(
                        "n_fft={}, hop_length={} on {count} x {n} samples makes {count} x {rows} x \
                         {frames} values",
                        self.n_fft, self.hop
                    )
                },
            )?;
            self.pool.with(
                &(),
                || Ok(self.proto.clone()),
                |stft| {
                    if count == 1 {
                        let p = stft.power(data, self.power).map_err(kernel_err)?;
                        let (r, c) = p.shape();
                        let mut shape = lead.to_vec();
                        shape.extend([r, c]);
                        return Ok((shape, p.into_vec()));
                    }
                    if n == 0 || count == 0 {
                        return Err(Error::data(format!("field '{field}' is empty")));
                    }
                    let mut all = Vec::new();
                    let mut dims = (0, 0);
                    for chunk in data.chunks_exact(n) {
                        let p = stft.power(chunk, self.power).map_err(kernel_err)?;
                        dims = p.shape();
                        all.extend_from_slice(p.as_slice());
                    }
                    let mut shape = lead.to_vec();
                    shape.extend([dims.0, dims.1]);
                    Ok((shape, all))
                },
            )
        })?;
        put(&mut s, out, shape, spec)?;
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sluice_core::{Error, Sample, Tensor, TensorData, Value};

    use super::super::test_util::{op, tensor};
    use crate::testing::{cx, one};

    fn audio(n: usize) -> Sample {
        let data: Vec<f32> = (0..n).map(|i| (i as f32 * 0.3).sin()).collect();
        Sample::from_pairs([(
            "audio",
            Value::Tensor(Tensor::new(vec![n], TensorData::F32(data)).unwrap()),
        )])
    }

    #[test]
    fn frames_follow_librosa_centering() {
        // center: 1 + n // hop frames; without: 1 + (n - n_fft) // hop.
        let s = one(
            op(json!({"op": "audio.spectrogram", "n_fft": 64, "hop_length": 16}))
                .apply(audio(1000), &cx(0, 0))
                .unwrap(),
        );
        assert_eq!(tensor(&s, "spec").0, &[33, 1 + 1000 / 16]);
        assert!(s.get("audio").is_some(), "the audio is kept");
        let s = one(op(
            json!({"op": "audio.spectrogram", "n_fft": 64, "hop_length": 16, "center": false}),
        )
        .apply(audio(1000), &cx(0, 0))
        .unwrap());
        assert_eq!(tensor(&s, "spec").0, &[33, 1 + (1000 - 64) / 16]);
    }

    #[test]
    fn bad_input_is_a_type_or_data_error() {
        let s = Sample::from_pairs([("audio", Value::from(vec![1u8, 2]))]);
        let e = op(json!({"op": "audio.spectrogram"}))
            .apply(s, &cx(0, 0))
            .unwrap_err();
        assert!(matches!(e, Error::Type(_)), "{e:?}");
        // Too short for a frame without centering.
        let e = op(json!({"op": "audio.spectrogram", "center": false}))
            .apply(audio(10), &cx(0, 0))
            .unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e:?}");
    }
}
