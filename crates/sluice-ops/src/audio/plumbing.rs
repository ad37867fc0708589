//! What the audio ops share: kernel pools, reading and writing float32 fields, shape checks.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

use sluice_audioproc as ap;
use sluice_core::{Error, OpKind, OpMeta, Result, Sample, Shape, Tensor, TensorData, Value};

use super::{AudioSpec, SAMPLE_RATE_FIELD};
use crate::limits::{check, product, refuse};

/// What every audio op stores: its spec (for `spec()`), API name and fields.
#[derive(Debug)]
pub(super) struct Base {
    pub(super) spec: AudioSpec,
    pub(super) name: &'static str,
    /// The field the op reads.
    pub(super) field: String,
    /// The field it writes (`out`, else `field`).
    pub(super) out: String,
}

impl Base {
    pub(super) fn new(spec: &AudioSpec) -> Self {
        let (field, out) = spec.io();
        Base {
            name: spec.name(),
            field: field.to_string(),
            out: out.to_string(),
            spec: spec.clone(),
        }
    }

    pub(super) fn spec_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.spec).unwrap_or_default()
    }
}

/// An op's `build` handed another op's spec: a bug in [`super::build`]'s dispatch.
pub(super) fn wrong_spec(base: &Base) -> Error {
    Error::Internal(format!(
        "audio.{}: built from a spec of another op",
        base.name
    ))
}

// Argument checks. Their messages leave out the op: `super::build` prefixes it.

impl Base {
    /// Both field names are non-empty.
    pub(super) fn check_fields(&self) -> Result<()> {
        check_field("field", &self.field)?;
        check_field("out", &self.out)
    }
}

fn check_field(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!(
            "{what} must be a non-empty field name"
        )));
    }
    Ok(())
}

pub(super) fn check_rate(what: &str, rate: u32) -> Result<()> {
    if rate == 0 {
        return Err(Error::invalid(format!(
            "{what} must be a positive sample rate in Hz, got 0"
        )));
    }
    Ok(())
}

/// Refuses a target rate above `max_samples`: one second of audio would already exceed it.
pub(super) fn check_target_rate(op: &str, what: &str, rate: u32, max_samples: u64) -> Result<()> {
    if u64::from(rate) > max_samples {
        return Err(refuse(
            &format!("audio.{op}"),
            &format!("{what}={rate} makes {rate} samples per second of audio"),
            "max_samples",
            max_samples,
        ));
    }
    Ok(())
}

pub(super) fn kernel_err(e: ap::AudioError) -> Error {
    Error::data(e.to_string())
}

/// Idle planned kernels with scratch state, keyed by their parameters. A call takes one out
/// (or builds one), uses it without holding the lock, and puts it back; so the lock is held
/// only for a pop and a push and the pool holds at most one instance per concurrent worker.
pub(super) struct Pool<K, T> {
    pub(super) idle: Mutex<HashMap<K, Vec<T>>>,
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
pub(super) const POOL_MAX_IDLE: usize = 64;
/// Distinct keys kept (e.g. source sample rates); beyond that the pool is reset.
pub(super) const POOL_MAX_KEYS: usize = 32;

impl<K: Hash + Eq + Clone, T> Pool<K, T> {
    pub(super) fn with<R>(
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

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) type ResamplerPool = Pool<(u32, u32), ap::Resampler>;

/// Resamples channel-major `samples` (`channels` rows) from `from` to `to` Hz, the rate the
/// op's argument `arg` asked for. The output and the resampler's plan must each stay within
/// `max_samples` float32 values; both are checked before anything is allocated.
pub(super) fn resample_with(
    pool: &ResamplerPool,
    samples: Vec<f32>,
    channels: usize,
    from: u32,
    (arg, to): (&str, u32),
    max_samples: u64,
) -> Result<Vec<f32>> {
    if from == to {
        return Ok(samples);
    }
    let n = (samples.len() / channels.max(1)) as u64;
    let per_channel = (u128::from(n) * u128::from(to)).div_ceil(u128::from(from));
    let total = u64::try_from(per_channel)
        .unwrap_or(u64::MAX)
        .saturating_mul(channels.max(1) as u64);
    check(total, max_samples, "max_samples", || {
        format!("{arg}={to} on {n} samples at {from} Hz makes {per_channel} samples x {channels} channel(s)")
    })?;
    check(
        ap::Resampler::plan_len(from, to),
        max_samples,
        "max_samples",
        || {
            format!(
                "{arg}={to}: a resampler from {from} Hz holds ~{} values",
                ap::Resampler::plan_len(from, to)
            )
        },
    )?;
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
pub(super) fn read_rate(s: &Sample, op: &str) -> Result<u32> {
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
pub(super) fn take_f32(
    s: &mut Sample,
    field: &str,
    out: &str,
    op: &str,
) -> Result<(Shape, Vec<f32>)> {
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
pub(super) fn with_f32<R>(
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

/// Splits a spectrogram's shape, `[rows, cols]` or `[channels, rows, cols]`, into (leading
/// shape, rows, cols).
pub(super) fn spec_dims(shape: &[usize], field: &str) -> Result<(Vec<usize>, usize, usize)> {
    match shape {
        [rows, cols] => Ok((vec![], *rows, *cols)),
        [c, rows, cols] => Ok((vec![*c], *rows, *cols)),
        _ => Err(Error::type_error(format!(
            "field '{field}' must be a spectrogram [freq, time] or [channels, freq, time], got \
             shape {shape:?}"
        ))),
    }
}

/// The channels of audio of `shape`: `[n]` (mono) or `[channels, n]`.
pub(super) fn audio_channels(shape: &[usize], field: &str) -> Result<usize> {
    match shape {
        [_] => Ok(1),
        [c, _] if *c > 0 => Ok(*c),
        _ => Err(Error::type_error(format!(
            "field '{field}' must be audio [n] or [channels, n] with channels > 0, got shape \
             {shape:?}"
        ))),
    }
}

/// Fails the sample when an output of `dims` float32 values exceeds `max_samples`.
pub(super) fn check_output(
    dims: &[u64],
    max_samples: u64,
    what: impl FnOnce() -> String,
) -> Result<()> {
    check(product(dims), max_samples, "max_samples", what)
}

pub(super) fn put(
    s: &mut Sample,
    out: &str,
    shape: impl Into<Shape>,
    data: Vec<f32>,
) -> Result<()> {
    s.set(
        out,
        Value::Tensor(Tensor::new(shape, TensorData::F32(data))?),
    );
    Ok(())
}

/// Applies `f` to each `rows × cols` spectrogram of a `[..., rows, cols]` buffer and stacks
/// the results (which must all have the same shape) as `[..., rows', cols']`.
pub(super) fn per_spectrogram(
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

pub(super) fn meta(reads: Vec<&str>, writes: Vec<&str>, kind: OpKind, random: bool) -> OpMeta {
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
pub(super) fn ext_hint(s: &Sample) -> Option<String> {
    let path = s.get("path")?.as_str()?;
    let name = path.rsplit(['/', '\\']).next()?;
    let (stem, ext) = name.rsplit_once('.')?;
    (!stem.is_empty() && !ext.is_empty() && ext.len() <= 5).then(|| ext.to_ascii_lowercase())
}
