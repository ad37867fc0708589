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

#[cfg(test)]
mod contract_tests;
mod ops;
mod plumbing;
mod spec;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sluice_audioproc as ap;
use sluice_core::{Error, OpRef, Result};

use crate::limits::{product, refuse, MAX_N_FFT};

use ops::*;
use plumbing::{Base, Pool};
pub use spec::{AudioSpec, DbReference, WindowName};

/// Field written by `audio.decode` / `audio.resample` and read by `audio.resample` /
/// `audio.mel`: the sample rate of the audio, in Hz.
pub const SAMPLE_RATE_FIELD: &str = "sample_rate";

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

/// Refuses a target rate above `max_samples`: one second of audio would already exceed it.
fn check_target_rate(op: &str, what: &str, rate: u32, max_samples: u64) -> Result<()> {
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
            max_samples,
            ..
        } => {
            check_field(name, "field", field)?;
            check_field(name, "out", out)?;
            if let Some(r) = sample_rate {
                check_rate(name, "sample_rate", *r)?;
                check_target_rate(name, "sample_rate", *r, *max_samples)?;
            }
            Arc::new(Decode {
                base,
                resamplers: Pool::default(),
            })
        }
        AudioSpec::Resample {
            rate,
            field,
            out,
            max_samples,
        } => {
            let rate =
                rate.ok_or_else(|| bad(name, "rate (target sample rate in Hz) is required"))?;
            check_rate(name, "rate", rate)?;
            check_target_rate(name, "rate", rate, *max_samples)?;
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
            max_samples,
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
            // The FFT plan and its buffers are a few times n_fft: capped, as kernel sizes are.
            if *n_fft > MAX_N_FFT || win > MAX_N_FFT {
                return Err(bad(
                    name,
                    format!("n_fft and win_length must be at most {MAX_N_FFT}, got n_fft={n_fft}, win_length={win}"),
                ));
            }
            let rows = (*n_fft / 2 + 1) as u64;
            if rows > *max_samples {
                return Err(refuse(
                    &format!("audio.{name}"),
                    &format!("n_fft={n_fft} makes {rows} frequency bins per frame"),
                    "max_samples",
                    *max_samples,
                ));
            }
            let stft = ap::Stft::new(*n_fft, hop, *win_length, window.kernel(), *center)
                .map_err(|e| bad(name, e))?;
            Arc::new(Spectrogram {
                base,
                power: *power,
                proto: stft,
                pool: Pool::default(),
                n_fft: *n_fft,
                hop,
                center: *center,
                max_samples: *max_samples,
            })
        }
        AudioSpec::TimeStretch {
            rate,
            power,
            field,
            out,
            max_samples,
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
            // One frame becomes ceil(1 / rate) frames.
            let per_frame = (1.0 / rate).ceil();
            if per_frame > *max_samples as f64 {
                return Err(refuse(
                    &format!("audio.{name}"),
                    &format!("rate={rate} stretches one frame to {per_frame} frames"),
                    "max_samples",
                    *max_samples,
                ));
            }
            Arc::new(TimeStretch {
                base,
                rate,
                power: *power,
                max_samples: *max_samples,
            })
        }
        AudioSpec::TimeMask {
            max_width,
            fill,
            field,
            out,
        }
        | AudioSpec::FreqMask {
            max_width,
            fill,
            field,
            out,
        } => {
            let max_width =
                max_width.ok_or_else(|| bad(name, "max_width (in frames or bins) is required"))?;
            if !fill.is_finite() {
                return Err(bad(name, format!("fill must be finite, got {fill}")));
            }
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
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
            max_samples,
        } => {
            check_field(name, "field", field)?;
            check_field(name, "out", out.as_deref().unwrap_or(field))?;
            if *n_mels == 0 {
                return Err(bad(name, "n_mels must be > 0"));
            }
            // The filterbank holds n_mels x (n_fft/2 + 1) weights, the output n_mels a frame.
            let bins = n_fft.map_or(1, |n| (n / 2 + 1) as u64);
            let weights = product(&[*n_mels as u64, bins]);
            if weights > *max_samples {
                return Err(refuse(
                    &format!("audio.{name}"),
                    &match n_fft {
                        Some(n) => format!("n_mels={n_mels} with n_fft={n} makes a filterbank of {weights} weights"),
                        None => format!("n_mels={n_mels} makes {n_mels} values per frame"),
                    },
                    "max_samples",
                    *max_samples,
                ));
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
                max_samples: *max_samples,
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
