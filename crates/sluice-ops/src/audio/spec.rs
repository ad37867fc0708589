//! The serde form of the `audio.*` ops.

use serde::{Deserialize, Serialize};
use sluice_audioproc as ap;

use crate::limits::{default_max_samples, is_default_max_samples};

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
    pub(super) fn kernel(self) -> ap::Window {
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
    /// Bytes (WAV/FLAC/MP3/Ogg Vorbis/AAC in M4A) → float32 `[n]` (mono) or `[channels, n]`,
    /// plus the integer field `sample_rate`; resampled to `sample_rate` when given.
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
        /// The most float32 values the op may make for one sample ([`crate::limits`]).
        #[serde(
            default = "default_max_samples",
            skip_serializing_if = "is_default_max_samples"
        )]
        max_samples: u64,
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
        /// The most float32 values the op may make for one sample ([`crate::limits`]).
        #[serde(
            default = "default_max_samples",
            skip_serializing_if = "is_default_max_samples"
        )]
        max_samples: u64,
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
        /// The most float32 values the op may make for one sample ([`crate::limits`]).
        #[serde(
            default = "default_max_samples",
            skip_serializing_if = "is_default_max_samples"
        )]
        max_samples: u64,
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
        /// The most float32 values the op may make for one sample ([`crate::limits`]).
        #[serde(
            default = "default_max_samples",
            skip_serializing_if = "is_default_max_samples"
        )]
        max_samples: u64,
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
        /// `None`: same as `field`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
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
        /// `None`: same as `field`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
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
        /// The most float32 values the op may make for one sample ([`crate::limits`]).
        #[serde(
            default = "default_max_samples",
            skip_serializing_if = "is_default_max_samples"
        )]
        max_samples: u64,
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

impl AudioSpec {
    /// The field an op reads and the field it writes (`out`, defaulting to `field`).
    pub(super) fn io(&self) -> (&str, &str) {
        match self {
            AudioSpec::Decode { field, out, .. } | AudioSpec::Spectrogram { field, out, .. } => {
                (field, out)
            }
            AudioSpec::Resample { field, out, .. }
            | AudioSpec::TimeStretch { field, out, .. }
            | AudioSpec::TimeMask { field, out, .. }
            | AudioSpec::FreqMask { field, out, .. }
            | AudioSpec::Mel { field, out, .. }
            | AudioSpec::Log { field, out, .. }
            | AudioSpec::PowerToDb { field, out, .. }
            | AudioSpec::AmplitudeToDb { field, out, .. } => {
                (field, out.as_deref().unwrap_or(field))
            }
        }
    }
}
