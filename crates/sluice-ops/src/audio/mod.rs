//! `sluice.audio` ops: decode, resample, spectrogram, time stretch, SpecAugment masks, mel and
//! log compression, wrapping the kernels of `sluice-audioproc`.
//!
//! Layouts: decoded audio is a float32 tensor `[n]` (mono) or `[channels, n]`; spectrograms are
//! float32 **freq × time** (`[n_fft/2 + 1, frames]`, librosa's layout), with a leading channel
//! axis (`[channels, freq, time]`) when the audio had one. Every spectrogram op accepts any
//! number of leading axes and treats the last two as freq × time. Decode and resample write the
//! integer field `sample_rate`; resample and mel (when not given a rate) read it.
//!
//! Defaults follow librosa (torchaudio for the masks). Planned kernels are built once:
//! the STFT and (when its parameters are known) the mel filterbank in [`build`], resamplers
//! lazily per `(from, to)` rate pair. Kernels with scratch buffers (`Stft`, `Resampler`) live
//! in small per-op pools, so concurrent workers each take their own instance for the duration
//! of one call and never wait on each other for the work itself.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sluice_audioproc as ap;
use sluice_core::{
    Emit, Error, Op, OpContext, OpKind, OpMeta, OpRef, Result, Sample, Shape, Tensor, TensorData,
    Value,
};

/// Field written by `audio.decode` / `audio.resample` and read by `audio.resample` /
/// `audio.mel`: the sample rate of the audio, in Hz.
pub const SAMPLE_RATE_FIELD: &str = "sample_rate";

fn d_bytes() -> String {
    "bytes".into()
}
fn d_audio() -> String {
    "audio".into()
}
fn d_spec() -> String {
    "spec".into()
}
fn d_true() -> bool {
    true
}
fn d_n_fft() -> usize {
    400
}
fn d_power() -> f32 {
    2.0
}
fn d_n_mels() -> usize {
    128
}
fn d_norm() -> Option<String> {
    Some("slaney".into())
}
fn d_eps() -> f32 {
    1e-6
}
fn d_ref() -> DbReference {
    DbReference::Value(1.0)
}
fn d_amin_power() -> f32 {
    1e-10
}
fn d_amin_amplitude() -> f32 {
    1e-5
}
fn d_top_db() -> Option<f32> {
    Some(80.0)
}

/// STFT window names (scipy's names; periodic windows as librosa uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowName {
    #[default]
    Hann,
    Hamming,
    Blackman,
    #[serde(alias = "rectangular", alias = "rect", alias = "ones")]
    Boxcar,
}

impl WindowName {
    fn kernel(self) -> ap::Window {
        match self {
            WindowName::Hann => ap::Window::Hann,
            WindowName::Hamming => ap::Window::Hamming,
            WindowName::Blackman => ap::Window::Blackman,
            WindowName::Boxcar => ap::Window::Rectangular,
        }
    }
}

/// The `ref` of the dB ops: a number or `"max"` (librosa's `ref=np.max`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DbReference {
    Value(f32),
    Named(String),
}

/// The serde form of the `audio.*` ops (`{"op": "audio.<name>", ...params}`); every parameter
/// except `rate` / `max_width` has a default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", deny_unknown_fields)]
pub enum AudioSpec {
    /// Bytes (WAV/FLAC/MP3/Ogg Vorbis) → float32 `[n]` (mono) or `[channels, n]`, plus the
    /// integer field `sample_rate`; resampled to `sample_rate` when given.
    #[serde(rename = "audio.decode")]
    Decode {
        #[serde(default = "d_bytes")]
        field: String,
        #[serde(default = "d_audio")]
        out: String,
        #[serde(default)]
        sample_rate: Option<u32>,
        #[serde(default = "d_true")]
        mono: bool,
    },
    /// Resamples `field` from the `sample_rate` field's rate to `rate` and updates
    /// `sample_rate`.
    #[serde(rename = "audio.resample")]
    Resample {
        #[serde(default)]
        rate: Option<u32>,
        #[serde(default = "d_audio")]
        field: String,
        /// `None`: same as `field`.
        #[serde(default)]
        out: Option<String>,
    },
    /// `|STFT|^power` as float32 `[n_fft/2 + 1, frames]` (freq × time), like `librosa.stft`.
    #[serde(rename = "audio.spectrogram")]
    Spectrogram {
        #[serde(default = "d_n_fft")]
        n_fft: usize,
        /// `None`: `n_fft / 4` (librosa: `win_length / 4`).
        #[serde(default)]
        hop_length: Option<usize>,
        /// `None`: `n_fft`.
        #[serde(default)]
        win_length: Option<usize>,
        #[serde(default)]
        window: WindowName,
        #[serde(default = "d_power")]
        power: f32,
        #[serde(default = "d_true")]
        center: bool,
        #[serde(default = "d_audio")]
        field: String,
        #[serde(default = "d_spec")]
        out: String,
    },
    /// Phase-vocoder time stretch of a `|X|^power` spectrogram (librosa's
    /// `|phase_vocoder(X, rate)|^power`): `ceil(frames / rate)` frames.
    #[serde(rename = "audio.time_stretch")]
    TimeStretch {
        #[serde(default)]
        rate: Option<f64>,
        /// The exponent the spectrogram was computed with (`audio.spectrogram`'s `power`).
        #[serde(default = "d_power")]
        power: f32,
        #[serde(default = "d_spec")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
    /// SpecAugment time mask (torchaudio `TimeMasking`): up to `max_width` frames set to `fill`.
    #[serde(rename = "audio.time_mask")]
    TimeMask {
        #[serde(default)]
        max_width: Option<usize>,
        #[serde(default)]
        fill: f32,
        #[serde(default = "d_spec")]
        field: String,
    },
    /// SpecAugment frequency mask (torchaudio `FrequencyMasking`): up to `max_width` bins set
    /// to `fill`.
    #[serde(rename = "audio.freq_mask")]
    FreqMask {
        #[serde(default)]
        max_width: Option<usize>,
        #[serde(default)]
        fill: f32,
        #[serde(default = "d_spec")]
        field: String,
    },
    /// Mel projection of a power spectrogram (`librosa.feature.melspectrogram(S=...)`):
    /// `[n_mels, frames]`.
    #[serde(rename = "audio.mel")]
    Mel {
        #[serde(default = "d_n_mels")]
        n_mels: usize,
        /// `None`: read the `sample_rate` field.
        #[serde(default)]
        sample_rate: Option<u32>,
        /// `None`: `2 * (rows - 1)` of the input spectrogram.
        #[serde(default)]
        n_fft: Option<usize>,
        #[serde(default)]
        fmin: f64,
        /// `None`: `sample_rate / 2`.
        #[serde(default)]
        fmax: Option<f64>,
        #[serde(default)]
        htk: bool,
        /// `"slaney"` or `None`.
        #[serde(default = "d_norm")]
        norm: Option<String>,
        #[serde(default = "d_spec")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
    /// `ln(x + eps)`.
    #[serde(rename = "audio.log")]
    Log {
        #[serde(default = "d_eps")]
        eps: f32,
        #[serde(default = "d_spec")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
    /// `librosa.power_to_db`.
    #[serde(rename = "audio.power_to_db")]
    PowerToDb {
        #[serde(rename = "ref", default = "d_ref")]
        reference: DbReference,
        #[serde(default = "d_amin_power")]
        amin: f32,
        #[serde(default = "d_top_db")]
        top_db: Option<f32>,
        #[serde(default = "d_spec")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
    /// `librosa.amplitude_to_db`.
    #[serde(rename = "audio.amplitude_to_db")]
    AmplitudeToDb {
        #[serde(rename = "ref", default = "d_ref")]
        reference: DbReference,
        #[serde(default = "d_amin_amplitude")]
        amin: f32,
        #[serde(default = "d_top_db")]
        top_db: Option<f32>,
        #[serde(default = "d_spec")]
        field: String,
        #[serde(default)]
        out: Option<String>,
    },
}

impl AudioSpec {
    /// The API name (`spectrogram`, `time_mask`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            AudioSpec::Decode { .. } => "decode",
            AudioSpec::Resample { .. } => "resample",
            AudioSpec::Spectrogram { .. } => "spectrogram",
            AudioSpec::TimeStretch { .. } => "time_stretch",
            AudioSpec::TimeMask { .. } => "time_mask",
            AudioSpec::FreqMask { .. } => "freq_mask",
            AudioSpec::Mel { .. } => "mel",
            AudioSpec::Log { .. } => "log",
            AudioSpec::PowerToDb { .. } => "power_to_db",
            AudioSpec::AmplitudeToDb { .. } => "amplitude_to_db",
        }
    }
}

fn bad(op: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("audio.{op}: {msg}"))
}

fn check_field(op: &str, what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(bad(op, format!("{what} must be a non-empty field name")));
    }
    Ok(())
}

fn check_rate(op: &str, what: &str, rate: u32) -> Result<()> {
    if rate == 0 {
        return Err(bad(
            op,
            format!("{what} must be a positive sample rate in Hz, got 0"),
        ));
    }
    Ok(())
}

fn kernel_err(e: ap::AudioError) -> Error {
    Error::data(e.to_string())
}

/// Builds an `audio.*` op, validating its arguments.
pub fn build(spec: &AudioSpec) -> Result<OpRef> {
    let name = spec.name();
    let base = Base {
        spec: spec.clone(),
        name,
    };
    Ok(match spec {
        AudioSpec::Decode {
            field,
            out,
            sample_rate,
            ..
        } => {
            check_field(name, "field", field)?;
            check_field(name, "out", out)?;
            if let Some(r) = sample_rate {
                check_rate(name, "sample_rate", *r)?;
            }
            Arc::new(Decode {
                base,
                resamplers: Pool::default(),
            })
        }
        AudioSpec::Resample { rate, field, out } => {
            let rate =
                rate.ok_or_else(|| bad(name, "rate (target sample rate in Hz) is required"))?;
            check_rate(name, "rate", rate)?;
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
            Arc::new(Resample {
                base,
                rate,
                resamplers: Pool::default(),
            })
        }
        AudioSpec::Spectrogram {
            n_fft,
            hop_length,
            win_length,
            window,
            power,
            center,
            field,
            out,
        } => {
            check_field(name, "field", field)?;
            check_field(name, "out", out)?;
            if !(power.is_finite() && *power > 0.0) {
                return Err(bad(
                    name,
                    format!("power must be finite and > 0, got {power}"),
                ));
            }
            let win = win_length.unwrap_or(*n_fft);
            let hop = hop_length.unwrap_or(win / 4);
            if *n_fft == 0 || hop == 0 {
                return Err(bad(
                    name,
                    format!(
                        "n_fft and hop_length must be > 0, got n_fft={n_fft}, hop_length={hop}"
                    ),
                ));
            }
            let stft = ap::Stft::new(*n_fft, hop, *win_length, window.kernel(), *center)
                .map_err(|e| bad(name, e))?;
            Arc::new(Spectrogram {
                base,
                power: *power,
                proto: stft,
                pool: Pool::default(),
            })
        }
        AudioSpec::TimeStretch {
            rate,
            power,
            field,
            out,
        } => {
            let rate = rate.ok_or_else(|| bad(name, "rate is required"))?;
            if !(rate.is_finite() && rate > 0.0) {
                return Err(bad(
                    name,
                    format!("rate must be finite and > 0, got {rate}"),
                ));
            }
            if !(power.is_finite() && *power > 0.0) {
                return Err(bad(
                    name,
                    format!("power must be finite and > 0, got {power}"),
                ));
            }
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
            Arc::new(TimeStretch {
                base,
                rate,
                power: *power,
            })
        }
        AudioSpec::TimeMask {
            max_width,
            fill,
            field,
        }
        | AudioSpec::FreqMask {
            max_width,
            fill,
            field,
        } => {
            let max_width =
                max_width.ok_or_else(|| bad(name, "max_width (in frames or bins) is required"))?;
            if !fill.is_finite() {
                return Err(bad(name, format!("fill must be finite, got {fill}")));
            }
            check_field(name, "field", field)?;
            Arc::new(Mask {
                base,
                max_width,
                fill: *fill,
                time: matches!(spec, AudioSpec::TimeMask { .. }),
            })
        }
        AudioSpec::Mel {
            n_mels,
            sample_rate,
            n_fft,
            fmin,
            fmax,
            htk,
            norm,
            field,
            out,
        } => {
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
            if *n_mels == 0 {
                return Err(bad(name, "n_mels must be > 0"));
            }
            if let Some(r) = sample_rate {
                check_rate(name, "sample_rate", *r)?;
            }
            if *n_fft == Some(0) {
                return Err(bad(name, "n_fft must be > 0"));
            }
            if !(fmin.is_finite() && *fmin >= 0.0) {
                return Err(bad(
                    name,
                    format!("fmin must be finite and >= 0, got {fmin}"),
                ));
            }
            if let Some(f) = fmax {
                if !(f.is_finite() && *f > *fmin) {
                    return Err(bad(
                        name,
                        format!("fmax must be finite and > fmin, got {f}"),
                    ));
                }
            }
            let norm = match norm.as_deref() {
                None => ap::MelNorm::None,
                Some("slaney") => ap::MelNorm::Slaney,
                Some(other) => {
                    return Err(bad(
                        name,
                        format!("norm must be \"slaney\" or null, got {other:?}"),
                    ))
                }
            };
            let template = ap::MelConfig {
                sample_rate: sample_rate.unwrap_or(0),
                n_fft: n_fft.unwrap_or(0),
                n_mels: *n_mels,
                fmin: *fmin,
                fmax: *fmax,
                htk: *htk,
                norm,
            };
            let mel = Mel {
                base,
                template,
                banks: Mutex::new(HashMap::new()),
            };
            // Parameters fully known: plan the filterbank now (and report bad ones now).
            if let (Some(sr), Some(n)) = (sample_rate, n_fft) {
                mel.bank(*sr, *n).map_err(|e| bad(name, e.root()))?;
            }
            Arc::new(mel)
        }
        AudioSpec::Log { eps, field, out } => {
            if !(eps.is_finite() && *eps >= 0.0) {
                return Err(bad(name, format!("eps must be finite and >= 0, got {eps}")));
            }
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
            Arc::new(Compress {
                base,
                how: Compression::Log(*eps),
            })
        }
        AudioSpec::PowerToDb {
            reference,
            amin,
            top_db,
            field,
            out,
        }
        | AudioSpec::AmplitudeToDb {
            reference,
            amin,
            top_db,
            field,
            out,
        } => {
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
            let reference = match reference {
                DbReference::Value(v) if v.is_finite() && *v > 0.0 => ap::DbRef::Value(*v),
                DbReference::Named(s) if s == "max" => ap::DbRef::Max,
                other => {
                    return Err(bad(
                        name,
                        format!("ref must be a positive number or \"max\", got {other:?}"),
                    ))
                }
            };
            if !(amin.is_finite() && *amin > 0.0) {
                return Err(bad(
                    name,
                    format!("amin must be finite and > 0, got {amin}"),
                ));
            }
            if let Some(t) = top_db {
                if !(t.is_finite() && *t >= 0.0) {
                    return Err(bad(
                        name,
                        format!("top_db must be finite and >= 0, got {t}"),
                    ));
                }
            }
            let how = if matches!(spec, AudioSpec::PowerToDb { .. }) {
                Compression::PowerDb(reference, *amin, *top_db)
            } else {
                Compression::AmplitudeDb(reference, *amin, *top_db)
            };
            Arc::new(Compress { base, how })
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Shared plumbing

/// What every audio op stores: its spec (for `spec()`) and API name.
#[derive(Debug)]
struct Base {
    spec: AudioSpec,
    name: &'static str,
}

impl AudioSpec {
    /// The field an op reads and the field it writes (`out`, defaulting to `field`).
    fn io(&self) -> (&str, &str) {
        match self {
            AudioSpec::Decode { field, out, .. } | AudioSpec::Spectrogram { field, out, .. } => {
                (field, out)
            }
            AudioSpec::Resample { field, out, .. }
            | AudioSpec::TimeStretch { field, out, .. }
            | AudioSpec::Mel { field, out, .. }
            | AudioSpec::Log { field, out, .. }
            | AudioSpec::PowerToDb { field, out, .. }
            | AudioSpec::AmplitudeToDb { field, out, .. } => {
                (field, out.as_deref().unwrap_or(field))
            }
            AudioSpec::TimeMask { field, .. } | AudioSpec::FreqMask { field, .. } => (field, field),
        }
    }
}

impl Base {
    fn spec_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

/// Idle planned kernels with scratch state, keyed by their parameters. A call takes one out
/// (or builds one), uses it without holding the lock, and puts it back; so the lock is held
/// only for a pop and a push and the pool holds at most one instance per concurrent worker.
struct Pool<K, T> {
    idle: Mutex<HashMap<K, Vec<T>>>,
}

impl<K, T> Default for Pool<K, T> {
    fn default() -> Self {
        Pool {
            idle: Mutex::new(HashMap::new()),
        }
    }
}

impl<K, T> std::fmt::Debug for Pool<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pool")
    }
}

/// Idle instances kept per key (more than the worker threads of any sane pipeline).
const POOL_MAX_IDLE: usize = 64;
/// Distinct keys kept (e.g. source sample rates); beyond that the pool is reset.
const POOL_MAX_KEYS: usize = 32;

impl<K: Hash + Eq + Clone, T> Pool<K, T> {
    fn with<R>(
        &self,
        key: &K,
        make: impl FnOnce() -> Result<T>,
        f: impl FnOnce(&mut T) -> Result<R>,
    ) -> Result<R> {
        let idle = lock(&self.idle).get_mut(key).and_then(Vec::pop);
        let mut item = match idle {
            Some(item) => item,
            None => make()?,
        };
        let r = f(&mut item);
        let mut idle = lock(&self.idle);
        if idle.len() >= POOL_MAX_KEYS && !idle.contains_key(key) {
            idle.clear();
        }
        let slot = idle.entry(key.clone()).or_default();
        if slot.len() < POOL_MAX_IDLE {
            slot.push(item);
        }
        r
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type ResamplerPool = Pool<(u32, u32), ap::Resampler>;

/// Resamples channel-major `samples` (`channels` rows) from `from` to `to` Hz.
fn resample_with(
    pool: &ResamplerPool,
    samples: Vec<f32>,
    channels: usize,
    from: u32,
    to: u32,
) -> Result<Vec<f32>> {
    if from == to {
        return Ok(samples);
    }
    pool.with(
        &(from, to),
        || ap::Resampler::new(from, to).map_err(kernel_err),
        |r| {
            if channels <= 1 {
                r.process(&samples).map_err(kernel_err)
            } else {
                let audio = ap::Audio {
                    sample_rate: from,
                    channels,
                    samples,
                };
                Ok(r.process_audio(&audio).map_err(kernel_err)?.samples)
            }
        },
    )
}

/// Reads the integer `sample_rate` field.
fn read_rate(s: &Sample, op: &str) -> Result<u32> {
    let v = s.require(SAMPLE_RATE_FIELD, op)?;
    match v.as_int() {
        Some(r) if r > 0 && r <= u32::MAX as i64 => Ok(r as u32),
        Some(r) => Err(Error::data(format!(
            "field '{SAMPLE_RATE_FIELD}' must be a positive sample rate, got {r}"
        ))),
        None => Err(Error::type_error(format!(
            "field '{SAMPLE_RATE_FIELD}' must be an int, got {}",
            v.kind()
        ))),
    }
}

/// The float32 tensor in `field` as (shape, data): moved out when the op overwrites the field
/// (no copy if the buffer is not shared), copied otherwise. float64 is converted.
fn take_f32(s: &mut Sample, field: &str, out: &str, op: &str) -> Result<(Shape, Vec<f32>)> {
    let v = if field == out {
        s.take(field, op)?
    } else {
        s.require(field, op)?.clone()
    };
    match v {
        Value::Tensor(t) => {
            let (shape, data) = t.into_parts();
            match data {
                TensorData::F32(v) => Ok((shape, v)),
                TensorData::F64(v) => Ok((shape, v.into_iter().map(|x| x as f32).collect())),
                other => Err(Error::type_error(format!(
                    "field '{field}' must be a float32 tensor, got {}",
                    other.dtype().name()
                ))),
            }
        }
        other => Err(Error::type_error(format!(
            "field '{field}' must be a float32 tensor, got {}",
            other.kind()
        ))),
    }
}

/// Runs `f` on the float32 tensor in `field` without copying it (float64 is converted).
fn with_f32<R>(
    s: &Sample,
    field: &str,
    op: &str,
    f: impl FnOnce(&[usize], &[f32]) -> Result<R>,
) -> Result<R> {
    let v = s.require(field, op)?;
    let kind = match v {
        Value::Tensor(t) => match t.data() {
            TensorData::F32(d) => return f(t.shape(), d),
            TensorData::F64(d) => {
                let d: Vec<f32> = d.iter().map(|&x| x as f32).collect();
                return f(t.shape(), &d);
            }
            other => other.dtype().name(),
        },
        other => other.kind(),
    };
    Err(Error::type_error(format!(
        "field '{field}' must be a float32 tensor, got {kind}"
    )))
}

/// Splits a `[..., rows, cols]` shape into (leading shape, rows, cols).
fn spec_dims(shape: &[usize], field: &str) -> Result<(Vec<usize>, usize, usize)> {
    match shape {
        [lead @ .., rows, cols] => Ok((lead.to_vec(), *rows, *cols)),
        _ => Err(Error::data(format!(
            "field '{field}' must be a spectrogram [..., freq, time], got shape {shape:?}"
        ))),
    }
}

fn put(s: &mut Sample, out: &str, shape: impl Into<Shape>, data: Vec<f32>) -> Result<()> {
    s.set(
        out,
        Value::Tensor(Tensor::new(shape, TensorData::F32(data))?),
    );
    Ok(())
}

/// Applies `f` to each `rows × cols` spectrogram of a `[..., rows, cols]` buffer and stacks
/// the results (which must all have the same shape) as `[..., rows', cols']`.
fn per_spectrogram(
    lead: Vec<usize>,
    rows: usize,
    cols: usize,
    data: Vec<f32>,
    mut f: impl FnMut(ap::Spectrogram<f32>) -> Result<ap::Spectrogram<f32>>,
) -> Result<(Vec<usize>, Vec<f32>)> {
    let count: usize = lead.iter().product();
    let finish = |lead: Vec<usize>, r: usize, c: usize, d: Vec<f32>| {
        let mut shape = lead;
        shape.extend([r, c]);
        (shape, d)
    };
    if count == 1 {
        let s = f(ap::Spectrogram::from_vec(rows, cols, data).map_err(kernel_err)?)?;
        let (r, c) = s.shape();
        return Ok(finish(lead, r, c, s.into_vec()));
    }
    let mut out = Vec::new();
    let mut out_shape = (rows, cols);
    for (i, chunk) in data
        .chunks_exact((rows * cols).max(1))
        .take(count)
        .enumerate()
    {
        let s = f(ap::Spectrogram::from_vec(rows, cols, chunk.to_vec()).map_err(kernel_err)?)?;
        if i == 0 {
            out_shape = s.shape();
            out.reserve(count * s.as_slice().len());
        }
        out.extend_from_slice(s.as_slice());
    }
    if rows * cols == 0 {
        return Err(Error::data("empty spectrogram"));
    }
    Ok(finish(lead, out_shape.0, out_shape.1, out))
}

fn meta(reads: Vec<&str>, writes: Vec<&str>, kind: OpKind, random: bool) -> OpMeta {
    let mut r: Vec<String> = Vec::new();
    for f in reads {
        if !r.iter().any(|x| x == f) {
            r.push(f.to_string());
        }
    }
    let mut w: Vec<String> = Vec::new();
    for f in writes {
        if !w.iter().any(|x| x == f) {
            w.push(f.to_string());
        }
    }
    OpMeta {
        reads: r,
        writes: w,
        kind,
        random,
        python: false,
    }
}

/// The extension of the sample's `path` field (decoder hint), if any.
fn ext_hint(s: &Sample) -> Option<String> {
    let path = s.get("path")?.as_str()?;
    let name = path.rsplit(['/', '\\']).next()?;
    let (stem, ext) = name.rsplit_once('.')?;
    (!stem.is_empty() && !ext.is_empty() && ext.len() <= 5).then(|| ext.to_ascii_lowercase())
}

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
struct Decode {
    base: Base,
    resamplers: ResamplerPool,
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
            samples = resample_with(&self.resamplers, samples, channels, rate, *to)?;
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
struct Resample {
    base: Base,
    rate: u32,
    resamplers: ResamplerPool,
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
        let (shape, data) = match shape.as_slice() {
            [_] => {
                let y = resample_with(&self.resamplers, data, 1, from, self.rate)?;
                (vec![y.len()], y)
            }
            [c, _] => {
                let c = *c;
                if c == 0 {
                    return Err(Error::data(format!("field '{field}' has 0 channels")));
                }
                let y = resample_with(&self.resamplers, data, c, from, self.rate)?;
                (vec![c, y.len() / c], y)
            }
            other => {
                return Err(Error::data(format!(
                    "field '{field}' must be audio [n] or [channels, n], got shape {other:?}"
                )))
            }
        };
        put(&mut s, out, shape, data)?;
        s.set(SAMPLE_RATE_FIELD, Value::Int(self.rate as i64));
        Ok(Emit::One(s))
    }
}

#[derive(Debug)]
struct Spectrogram {
    base: Base,
    power: f32,
    /// Planned at build time; cloned (sharing the FFT plan) for each concurrent worker.
    proto: ap::Stft,
    pool: Pool<(), ap::Stft>,
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
            let Some((&n, lead)) = shape.split_last() else {
                return Err(Error::data(format!(
                    "field '{field}' must be audio [..., n], got a scalar"
                )));
            };
            let count: usize = lead.iter().product();
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
struct TimeStretch {
    base: Base,
    rate: f64,
    power: f32,
}

impl Op for TimeStretch {
    op_common!();
    fn meta(&self) -> OpMeta {
        let (field, out) = self.base.spec.io();
        // Speeding up (rate > 1) shrinks the spectrogram; slowing down grows it.
        let kind = if self.rate > 1.0 {
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
        let (shape, data) = per_spectrogram(lead, rows, cols, data, |sp| {
            ap::time_stretch_power(&sp, self.rate, self.power).map_err(kernel_err)
        })?;
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

#[derive(Debug)]
struct Mask {
    base: Base,
    max_width: usize,
    fill: f32,
    /// Time (columns) or frequency (rows).
    time: bool,
}

impl Mask {
    fn field(&self) -> &str {
        match &self.base.spec {
            AudioSpec::TimeMask { field, .. } | AudioSpec::FreqMask { field, .. } => field,
            _ => unreachable!(),
        }
    }
}

impl Op for Mask {
    op_common!();
    fn meta(&self) -> OpMeta {
        let f = self.field();
        meta(vec![f], vec![f], OpKind::PixelWise, true)
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        let field = self.field();
        let (shape, mut data) = take_f32(&mut s, field, field, self.base.name)?;
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
        put(&mut s, field, shape, data)?;
        Ok(Emit::One(s))
    }
}

struct Mel {
    base: Base,
    /// `sample_rate` / `n_fft` are filled per call when the spec leaves them open.
    template: ap::MelConfig,
    banks: Mutex<HashMap<(u32, usize), Arc<ap::MelFilterbank>>>,
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

    fn bank(&self, sample_rate: u32, n_fft: usize) -> Result<Arc<ap::MelFilterbank>> {
        let key = (sample_rate, n_fft);
        if let Some(b) = lock(&self.banks).get(&key) {
            return Ok(b.clone());
        }
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
        let bank = self.bank(sr, n_fft)?;
        let (shape, data) = per_spectrogram(lead, rows, cols, data, |sp| {
            bank.apply(&sp).map_err(kernel_err)
        })?;
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

#[derive(Debug, Clone, Copy)]
enum Compression {
    Log(f32),
    PowerDb(ap::DbRef, f32, Option<f32>),
    AmplitudeDb(ap::DbRef, f32, Option<f32>),
}

#[derive(Debug)]
struct Compress {
    base: Base,
    how: Compression,
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

#[cfg(test)]
mod tests;
