//! Pure audio kernels for sluice's audio ops: decode, resample, STFT, mel filterbank,
//! decibel/log compression, phase-vocoder time stretch and SpecAugment masks.
//!
//! The kernels reproduce the reference libraries the ASR pipelines are written against —
//! soundfile for decoding, librosa for STFT / mel / dB / phase vocoder, torchaudio for the
//! masks — so a pipeline moved onto sluice yields the same features (measured agreement is in
//! the crate README). They are plain functions and reusable planned structs with no engine
//! dependency: the engine's op layer wraps them, keeps one planned [`Stft`], [`Resampler`]
//! and [`MelFilterbank`] per worker, and supplies the randomness.
//!
//! Nothing panics on bad input: every failure is an [`AudioError`].
//!
//! The ASR reference chain:
//!
//! ```
//! use sluice_audioproc::*;
//! # fn main() -> Result<(), AudioError> {
//! # let y22k: Vec<f32> = (0..22_050).map(|i| (i as f32 * 0.03).sin() * 0.3).collect();
//! # let audio = Audio { sample_rate: 22_050, channels: 1, samples: y22k };
//! // let audio = decode(&mp3_bytes, Some("mp3"))?.into_mono();
//! let mut resampler = Resampler::with_quality(audio.sample_rate, 16_000, ResampleQuality::Fft)?;
//! let y = resampler.process(&audio.samples)?;
//! let mut stft = Stft::new(400, 160, None, Window::Hann, true)?;
//! let fb = MelFilterbank::new(MelConfig::new(16_000, 400, 80))?;
//!
//! // Power STFT, then time_stretch: the phase vocoder's output power depends only on the
//! // interpolated magnitudes, so `time_stretch_power` gives librosa's
//! // `|phase_vocoder(stft)|²` without the complex STFT or any phase bookkeeping.
//! let power = stft.power(&y, 2.0)?;
//! let mut power = time_stretch_power(&power, 0.8, 2.0)?;
//! let mut draws = [0.3, 0.6, 0.9, 0.1].into_iter();
//! let mut u = || draws.next().unwrap_or(0.0);
//! time_mask(&mut power, 80, 0.0, &mut u);
//! freq_mask(&mut power, 27, 0.0, &mut u);
//! let mut mel = fb.apply(&power)?;
//! log(mel.as_mut_slice(), 1e-6)?;
//! assert_eq!(mel.shape(), (80, 127));
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod db;
mod decode;
mod error;
mod mask;
mod mel;
mod resample;
mod spectrogram;
mod stft;
mod vocoder;

pub use db::{amplitude_to_db, log, power_to_db, DbRef};
pub use decode::{decode, decode_with, to_mono, Audio, DecodeOptions};
pub use error::{AudioError, Result};
pub use mask::{freq_mask, mask_range, time_mask};
pub use mel::{hz_to_mel, mel_to_hz, MelConfig, MelFilterbank, MelNorm};
pub use realfft::num_complex::Complex32;
pub use resample::{resample, ResampleQuality, Resampler};
pub use spectrogram::Spectrogram;
pub use stft::{complex_to_power, Stft, StftConfig, Window};
pub use vocoder::{time_stretch, time_stretch_magnitude, time_stretch_power};

#[cfg(test)]
mod tests {
    /// The engine moves planned kernels into worker threads and shares filterbanks.
    #[test]
    fn kernels_are_thread_friendly() {
        fn send<T: Send>() {}
        fn sync<T: Sync>() {}
        send::<crate::Resampler>();
        send::<crate::Stft>();
        sync::<crate::Stft>();
        send::<crate::MelFilterbank>();
        sync::<crate::MelFilterbank>();
        send::<crate::AudioError>();
        sync::<crate::AudioError>();
    }
}
