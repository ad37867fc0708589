//! The audio ops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample, Value};

use super::plumbing::*;
use super::{kernel_err, AudioSpec, SAMPLE_RATE_FIELD};

macro_rules! op_common {
    () => {
        fn name(&self) -> &str {
            self.base.name
        }
        fn spec(&self) -> serde_json::Value {
            self.base.spec_json()
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Ops

#[derive(Debug)]
pub(super) struct Decode {
    pub(super) base: Base,
    pub(super) resamplers: ResamplerPool,
}

impl Op for Decode {
    op_common!();
    fn meta(&self) -> OpMeta {
        let AudioSpec::Decode { field, out, .. } = &self.base.spec else {
            unreachable!()
        };
        meta(
            vec![field],
            vec![out, SAMPLE_RATE_FIELD],
            OpKind::Decode,
            false,
        )
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let AudioSpec::Decode {
            field,
            out,
            sample_rate,
            mono,
            max_samples,
        } = &self.base.spec
        else {
            unreachable!()
        };
        let v = s.require(field, "decode")?;
        let bytes = v.as_bytes().ok_or_else(|| {
            Error::type_error(format!("field '{field}' must be bytes, got {}", v.kind()))
        })?;
        let hint = ext_hint(&s);
        let mut audio = ap::decode(bytes, hint.as_deref()).map_err(kernel_err)?;
        if *mono && audio.channels > 1 {
            audio = audio.into_mono();
        }
        let channels = audio.channels.max(1);
        let mut rate = audio.sample_rate;
        let mut samples = audio.samples;
        if let Some(to) = sample_rate {
            samples = resample_with(
                &self.resamplers,
                samples,
                channels,
                rate,
                ("sample_rate", *to),
                *max_samples,
            )?;
            rate = *to;
        }
        let shape = if *mono {
            vec![samples.len()]
        } else {
            vec![channels, samples.len() / channels]
        };
        put(&mut s, out, shape, samples)?;
        s.set(SAMPLE_RATE_FIELD, Value::Int(rate as i64));
        Ok(Emit::One(s))
    }
}

#[derive(Debug)]
pub(super) struct Resample {
    pub(super) base: Base,
    pub(super) rate: u32,
    pub(super) resamplers: ResamplerPool,
}

impl Resample {
    fn max_samples(&self) -> u64 {
        match self.base.spec {
            AudioSpec::Resample { max_samples, .. } => max_samples,
            _ => unreachable!(),
        }
    }
}

impl Op for Resample {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = self.base.spec.io();
        // Opaque: whether it shrinks the data depends on the source rate, unknown statically.
        meta(
            vec![field, SAMPLE_RATE_FIELD],
            vec![out, SAMPLE_RATE_FIELD],
            OpKind::Opaque,
            false,
        )
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = self.base.spec.io();
        let from = read_rate(&s, "resample")?;
        let (shape, data) = take_f32(&mut s, field, out, "resample")?;
        let c = audio_channels(&shape, field)?;
        let to = ("rate", self.rate);
        let y = resample_with(&self.resamplers, data, c, from, to, self.max_samples())?;
        let shape = if shape.len() == 1 {
            vec![y.len()]
        } else {
            vec![c, y.len() / c]
        };
        let data = y;
        put(&mut s, out, shape, data)?;
        s.set(SAMPLE_RATE_FIELD, Value::Int(self.rate as i64));
        Ok(Emit::One(s))
    }
}

#[derive(Debug)]
pub(super) struct Spectrogram {
    pub(super) base: Base,
    pub(super) power: f32,
    /// Planned at build time; cloned (sharing the FFT plan) for each concurrent worker.
    pub(super) proto: ap::Stft,
    pub(super) pool: Pool<(), ap::Stft>,
    pub(super) n_fft: usize,
    pub(super) hop: usize,
    pub(super) center: bool,
    pub(super) max_samples: u64,
}

impl Spectrogram {
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
        let AudioSpec::Spectrogram { field, out, .. } = &self.base.spec else {
            unreachable!()
        };
        meta(vec![field], vec![out], OpKind::Opaque, false)
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let AudioSpec::Spectrogram { field, out, .. } = &self.base.spec else {
            unreachable!()
        };
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

#[derive(Debug)]
pub(super) struct TimeStretch {
    pub(super) base: Base,
    pub(super) rate: f64,
    pub(super) power: f32,
    pub(super) max_samples: u64,
}

impl Op for TimeStretch {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = self.base.spec.io();
        // Speeding up (rate > 1) shrinks the spectrogram, in place; slowing down grows it.
        let kind = if self.rate > 1.0 && field == out {
            OpKind::SizeReducing
        } else {
            OpKind::Opaque
        };
        meta(vec![field], vec![out], kind, false)
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = self.base.spec.io();
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

#[derive(Debug)]
pub(super) struct Mask {
    pub(super) base: Base,
    pub(super) max_width: usize,
    pub(super) fill: f32,
    /// Time (columns) or frequency (rows).
    pub(super) time: bool,
}

impl Op for Mask {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = self.base.spec.io();
        meta(vec![field], vec![out], OpKind::PixelWise, true)
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        let (field, out) = self.base.spec.io();
        let (shape, mut data) = take_f32(&mut s, field, out, self.base.name)?;
        let (_, rows, cols) = spec_dims(&shape, field)?;
        let mut rng = cx.rng();
        let size = if self.time { cols } else { rows };
        // One draw pair per sample (torchaudio's iid_masks=False): every channel gets the
        // same mask, and the random stream never depends on the data.
        let r = ap::mask_range(size, self.max_width, &mut || rng.uniform());
        if !r.is_empty() && rows * cols > 0 {
            for plane in data.chunks_exact_mut(rows * cols) {
                if self.time {
                    for row in plane.chunks_exact_mut(cols) {
                        row[r.clone()].fill(self.fill);
                    }
                } else {
                    plane[r.start * cols..r.end * cols].fill(self.fill);
                }
            }
        }
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

pub(super) struct Mel {
    pub(super) base: Base,
    /// `sample_rate` / `n_fft` are filled per call when the spec leaves them open.
    pub(super) template: ap::MelConfig,
    pub(super) banks: Mutex<HashMap<(u32, usize), Arc<ap::MelFilterbank>>>,
    pub(super) max_samples: u64,
}

impl Mel {
    fn fields(&self) -> (&str, &str, Option<u32>, Option<usize>) {
        let AudioSpec::Mel {
            field,
            out,
            sample_rate,
            n_fft,
            ..
        } = &self.base.spec
        else {
            unreachable!()
        };
        (field, out.as_deref().unwrap_or(field), *sample_rate, *n_fft)
    }

    pub(super) fn bank(&self, sample_rate: u32, n_fft: usize) -> Result<Arc<ap::MelFilterbank>> {
        let key = (sample_rate, n_fft);
        if let Some(b) = lock(&self.banks).get(&key) {
            return Ok(b.clone());
        }
        let n_mels = self.template.n_mels;
        check_output(
            &[n_mels as u64, (n_fft / 2 + 1) as u64],
            self.max_samples,
            || {
                format!("n_mels={n_mels} with n_fft={n_fft} makes a filterbank of {n_mels} x {} weights", n_fft / 2 + 1)
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
        let (field, out, sr, _) = self.fields();
        let mut reads = vec![field];
        if sr.is_none() {
            reads.push(SAMPLE_RATE_FIELD);
        }
        meta(reads, vec![out], OpKind::PixelWise, false)
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out, sr, n_fft) = self.fields();
        let sr = match sr {
            Some(r) => r,
            None => read_rate(&s, "mel")?,
        };
        let (shape, data) = take_f32(&mut s, field, out, "mel")?;
        let (lead, rows, cols) = spec_dims(&shape, field)?;
        let n_fft = match n_fft {
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

#[derive(Debug, Clone, Copy)]
pub(super) enum Compression {
    Log(f32),
    PowerDb(ap::DbRef, f32, Option<f32>),
    AmplitudeDb(ap::DbRef, f32, Option<f32>),
}

#[derive(Debug)]
pub(super) struct Compress {
    pub(super) base: Base,
    pub(super) how: Compression,
}

impl Op for Compress {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = self.base.spec.io();
        meta(vec![field], vec![out], OpKind::PixelWise, false)
    }
    fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
        let (field, out) = self.base.spec.io();
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
