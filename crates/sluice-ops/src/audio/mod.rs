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
//!
//! Each op lives in its own module (`mask` holds both masks, `compress` `log` and the two dB
//! ops) with its struct, its argument checks (`build`), its [`sluice_core::Op`] impl and its
//! unit tests; `spec` is the serde form of them all, `plumbing` what they share.

// Every op's `name` and `spec`, from its `Base`.
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

mod compress;
#[cfg(test)]
mod contract_tests;
mod decode;
mod mask;
mod mel;
mod plumbing;
mod resample;
mod spec;
mod spectrogram;
#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests;
mod time_stretch;

use std::sync::Arc;

use sluice_core::{Error, OpRef, Result};

use plumbing::Base;
pub use spec::{AudioSpec, DbReference, WindowName};

/// Field written by `audio.decode` / `audio.resample` and read by `audio.resample` /
/// `audio.mel`: the sample rate of the audio, in Hz.
pub const SAMPLE_RATE_FIELD: &str = "sample_rate";

/// Builds an `audio.*` op, validating its arguments: a bad one is an error naming the op.
/// Each op's module checks its own arguments (`<op>::build`).
pub fn build(spec: &AudioSpec) -> Result<OpRef> {
    let base = Base::new(spec);
    // Every op reads `field` and writes `out`.
    let op: Result<OpRef> = base.check_fields().and_then(|()| match spec {
        AudioSpec::Decode { .. } => decode::Decode::build(base).map(|o| Arc::new(o) as OpRef),
        AudioSpec::Resample { .. } => resample::Resample::build(base).map(|o| Arc::new(o) as _),
        AudioSpec::Spectrogram { .. } => {
            spectrogram::Spectrogram::build(base).map(|o| Arc::new(o) as _)
        }
        AudioSpec::TimeStretch { .. } => {
            time_stretch::TimeStretch::build(base).map(|o| Arc::new(o) as _)
        }
        AudioSpec::TimeMask { .. } | AudioSpec::FreqMask { .. } => {
            mask::Mask::build(base).map(|o| Arc::new(o) as _)
        }
        AudioSpec::Mel { .. } => mel::Mel::build(base).map(|o| Arc::new(o) as _),
        AudioSpec::Log { .. } | AudioSpec::PowerToDb { .. } | AudioSpec::AmplitudeToDb { .. } => {
            compress::Compress::build(base).map(|o| Arc::new(o) as _)
        }
    });
    op.map_err(|e| match e {
        Error::InvalidArgument(m) if !m.starts_with("audio.") => {
            Error::InvalidArgument(format!("audio.{}: {m}", spec.name()))
        }
        other => other,
    })
}
