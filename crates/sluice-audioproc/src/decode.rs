//! Container/codec decoding via symphonia (WAV/PCM, FLAC, MP3, Ogg Vorbis, AAC in MP4/M4A).

use std::io::Cursor;
use std::panic::{catch_unwind, AssertUnwindSafe};

use symphonia::core::codecs::audio::well_known::{CODEC_ID_MP1, CODEC_ID_MP2, CODEC_ID_MP3};
use symphonia::core::codecs::audio::AudioDecoderOptions;
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::Hint;
use symphonia::core::formats::{FormatOptions, TrackType};
use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};
use symphonia::core::meta::MetadataOptions;

use crate::error::{AudioError, Result};

/// Decoded PCM audio.
///
/// `samples` is **channel-major** (`[ch][n]`, i.e. `samples[c * frames + i]`), matching
/// librosa's `(channels, n)` layout for `mono=False` and making per-channel kernels (resample,
/// STFT) operate on contiguous slices.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Audio {
    /// Frames per second of every channel.
    pub sample_rate: u32,
    /// Number of channels (≥ 1 for decoded audio).
    pub channels: usize,
    /// Samples in `[-1, 1]`, channel-major, `channels * frames()` long.
    pub samples: Vec<f32>,
}

impl Audio {
    /// Frames (samples per channel).
    pub fn frames(&self) -> usize {
        self.samples.len().checked_div(self.channels).unwrap_or(0)
    }

    /// Duration in seconds.
    pub fn duration_secs(&self) -> f64 {
        if self.sample_rate == 0 {
            0.0
        } else {
            self.frames() as f64 / f64::from(self.sample_rate)
        }
    }

    /// The samples of channel `c`, or `None` when `c >= channels`.
    pub fn channel(&self, c: usize) -> Option<&[f32]> {
        let n = self.frames();
        if c < self.channels {
            self.samples.get(c * n..(c + 1) * n)
        } else {
            None
        }
    }

    /// Downmix to one channel (see [`to_mono`]); a no-op for mono audio.
    pub fn into_mono(self) -> Audio {
        if self.channels <= 1 {
            return self;
        }
        let samples = to_mono(&self.samples, self.channels);
        Audio {
            sample_rate: self.sample_rate,
            channels: 1,
            samples,
        }
    }
}

/// Options for [`decode_with`]. The default is strict: any malformed or truncated packet is an
/// error, so a damaged file is reported instead of silently yielding shorter audio.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// Skip packets that fail to decode and keep what was read before a truncation, as media
    /// players (and mpg123/libsndfile) do, instead of returning [`AudioError::Corrupt`].
    /// A stream that yields no audio at all is still an error.
    pub lenient: bool,
    /// Refuse streams longer than this many frames per channel (guards against a small file
    /// that decodes to gigabytes). `None`: no limit.
    pub max_frames: Option<usize>,
}

impl DecodeOptions {
    /// Strict decoding with no length limit (same as `Default`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Set [`lenient`](Self::lenient).
    pub fn lenient(mut self, lenient: bool) -> Self {
        self.lenient = lenient;
        self
    }

    /// Set [`max_frames`](Self::max_frames).
    pub fn max_frames(mut self, max_frames: Option<usize>) -> Self {
        self.max_frames = max_frames;
        self
    }
}

/// Decode an in-memory audio file (WAV/PCM, FLAC, MP3, Ogg Vorbis, AAC-LC in MP4/M4A) to `f32`
/// samples, keeping
/// every channel at the file's own sample rate. Strict: see [`decode_with`] for options.
///
/// `ext_hint` is the file extension (`"mp3"`, `".flac"`, case-insensitive) when known; it only
/// speeds up probing, the content decides. Gapless trimming of encoder delay/padding is on
/// (as in libsndfile/mpg123), so MP3 frame counts match `soundfile.read`.
///
/// Errors: zero bytes or zero decoded frames → [`AudioError::Empty`]; a malformed or truncated
/// stream → [`AudioError::Corrupt`]; an unrecognised container or codec →
/// [`AudioError::Unsupported`]. Truncation is detected from the container's declared length
/// (WAV, FLAC, Ogg, MP3 with a Xing/LAME header, which most encoders write); an MP3 without
/// one that is cut mid-stream decodes to the frames before the cut, as with mpg123.
///
/// ```
/// use sluice_audioproc::{decode, AudioError};
/// // A 44-byte WAV header followed by 2 frames of 16-bit mono PCM.
/// let mut wav = Vec::new();
/// wav.extend_from_slice(b"RIFF");
/// wav.extend_from_slice(&(36u32 + 4).to_le_bytes());
/// wav.extend_from_slice(b"WAVEfmt ");
/// wav.extend_from_slice(&16u32.to_le_bytes());
/// wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
/// wav.extend_from_slice(&1u16.to_le_bytes()); // mono
/// wav.extend_from_slice(&8000u32.to_le_bytes());
/// wav.extend_from_slice(&16000u32.to_le_bytes());
/// wav.extend_from_slice(&2u16.to_le_bytes());
/// wav.extend_from_slice(&16u16.to_le_bytes());
/// wav.extend_from_slice(b"data");
/// wav.extend_from_slice(&4u32.to_le_bytes());
/// wav.extend_from_slice(&16384i16.to_le_bytes());
/// wav.extend_from_slice(&(-32768i16).to_le_bytes());
/// let audio = decode(&wav, Some("wav")).unwrap();
/// assert_eq!((audio.sample_rate, audio.channels), (8000, 1));
/// assert_eq!(audio.samples, vec![0.5, -1.0]);
/// assert_eq!(decode(&[], None), Err(AudioError::Empty));
/// ```
pub fn decode(bytes: &[u8], ext_hint: Option<&str>) -> Result<Audio> {
    decode_with(bytes, ext_hint, &DecodeOptions::default())
}

/// [`decode`] with explicit [`DecodeOptions`].
pub fn decode_with(bytes: &[u8], ext_hint: Option<&str>, opts: &DecodeOptions) -> Result<Audio> {
    if bytes.is_empty() {
        return Err(AudioError::Empty);
    }
    // symphonia parses untrusted bitstreams; it is not supposed to panic, but a data loader
    // must not take down a worker because one file tripped an assertion in a third-party
    // parser, so a panic is reported as a corrupt file. (No effect under panic=abort.)
    match catch_unwind(AssertUnwindSafe(|| decode_inner(bytes, ext_hint, opts))) {
        Ok(result) => result,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(AudioError::Corrupt(format!("decoder panicked: {msg}")))
        }
    }
}

/// Map a symphonia error to ours. `during` says where it happened, for the message.
fn map_err(err: SymError, during: &str) -> AudioError {
    match err {
        SymError::Unsupported(what) => AudioError::Unsupported(format!("{during}: {what}")),
        SymError::IoError(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            AudioError::Corrupt(format!(
                "{during}: truncated stream (unexpected end of data)"
            ))
        }
        other => AudioError::Corrupt(format!("{during}: {other}")),
    }
}

fn decode_inner(bytes: &[u8], ext_hint: Option<&str>, opts: &DecodeOptions) -> Result<Audio> {
    // A borrowed Cursor avoids copying the file; MediaSourceStream only needs Read + Seek.
    let mss = MediaSourceStream::new(
        Box::new(Cursor::new(bytes)),
        MediaSourceStreamOptions::default(),
    );
    let mut hint = Hint::new();
    if let Some(ext) = ext_hint {
        let ext = ext.trim_start_matches('.').to_ascii_lowercase();
        if !ext.is_empty() {
            hint.with_extension(&ext);
        }
    }
    let mut format = symphonia::default::get_probe()
        .probe(
            &hint,
            mss,
            FormatOptions::default(),
            MetadataOptions::default(),
        )
        .map_err(|e| match e {
            // An unrecognised byte stream: nothing matched, so "unsupported" is the honest
            // answer (random bytes land here too).
            // An MP4 whose index (moov, written last by most muxers) was cut off.
            SymError::Unsupported(what) if what.contains("missing moov") => {
                AudioError::Corrupt(format!("{what}: truncated MP4/M4A file?"))
            }
            SymError::Unsupported(what) => AudioError::Unsupported(what.to_string()),
            other => map_err(other, "probe"),
        })?;

    let track = format
        .default_track(TrackType::Audio)
        .ok_or_else(|| AudioError::Unsupported("no audio track".into()))?;
    let track_id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .ok_or_else(|| AudioError::Unsupported("track has no audio codec parameters".into()))?;
    let expected_frames = track.num_frames.and_then(|n| usize::try_from(n).ok());
    // For MPEG audio without a Xing/Info header symphonia *estimates* the length from the
    // first frames' sizes, which can overshoot on valid VBR or padded CBR files; the count is
    // exact only when a LAME/Xing tag gave it (signalled by the encoder delay being known).
    let is_mpeg = [CODEC_ID_MP1, CODEC_ID_MP2, CODEC_ID_MP3].contains(&params.codec);
    let exact_frames = if is_mpeg && track.delay.is_none() && track.padding.is_none() {
        None
    } else {
        expected_frames
    };
    if let (Some(n), Some(max)) = (expected_frames, opts.max_frames) {
        if n > max {
            return Err(AudioError::InvalidArgument(format!(
                "stream has {n} frames, more than max_frames={max}"
            )));
        }
    }
    let mut decoder = symphonia::default::get_codecs()
        .make_audio_decoder(params, &AudioDecoderOptions::default())
        .map_err(|e| map_err(e, "codec"))?;

    let mut sample_rate = params.sample_rate.unwrap_or(0);
    let mut channels = 0usize;
    let mut planes: Vec<Vec<f32>> = Vec::new();
    let mut frames = 0usize;

    loop {
        let packet = match format.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // Chained Ogg streams: we decode the first logical stream only.
            Err(SymError::ResetRequired) => break,
            Err(e) if opts.lenient => {
                let _ = e;
                break;
            }
            Err(e) => return Err(map_err(e, "demux")),
        };
        if packet.track_id != track_id {
            continue;
        }
        let buf = match decoder.decode(&packet) {
            Ok(buf) => buf,
            Err(SymError::DecodeError(_) | SymError::IoError(_)) if opts.lenient => continue,
            Err(e) => return Err(map_err(e, "decode")),
        };
        let n = buf.frames();
        if n == 0 {
            continue;
        }
        let rate = buf.spec().rate();
        let nch = buf.num_planes();
        if planes.is_empty() {
            if nch == 0 {
                return Err(AudioError::Corrupt("decoded audio has no channels".into()));
            }
            channels = nch;
            sample_rate = rate;
            let cap = expected_frames.unwrap_or(0).min(1 << 24);
            planes = (0..nch).map(|_| Vec::with_capacity(cap)).collect();
        } else if nch != channels || rate != sample_rate {
            // A mid-stream format change cannot be represented in one `Audio`.
            return Err(AudioError::Unsupported(format!(
                "stream changes from {channels} ch @ {sample_rate} Hz to {nch} ch @ {rate} Hz"
            )));
        }
        frames += n;
        if let Some(max) = opts.max_frames {
            if frames > max {
                return Err(AudioError::InvalidArgument(format!(
                    "stream decodes to more than max_frames={max} frames"
                )));
            }
        }
        // Convert straight into the tail of each channel's accumulator (no scratch copy).
        let old = frames - n;
        let mut dst: Vec<&mut [f32]> = planes
            .iter_mut()
            .map(|p| {
                p.resize(old + n, 0.0);
                &mut p[old..]
            })
            .collect();
        buf.copy_to_slice_planar::<f32, _>(&mut dst);
    }

    if frames == 0 || sample_rate == 0 {
        return Err(AudioError::Empty);
    }
    // symphonia's MP3 demuxer treats a partial last frame as a clean end of stream (and a
    // cut at a frame boundary is indistinguishable from one); the container's own length
    // (WAV data size, FLAC STREAMINFO, MP3 Xing/LAME frame count) exposes the truncation.
    // Gapless trimming is applied to both numbers, so they match exactly on an intact file.
    if let (Some(n), false) = (exact_frames, opts.lenient) {
        if frames < n {
            return Err(AudioError::Corrupt(format!(
                "truncated stream: decoded {frames} of {n} frames"
            )));
        }
    }
    // Concatenate the planes into the channel-major layout; for mono this is a move.
    let samples = if planes.len() == 1 {
        planes.pop().unwrap_or_default()
    } else {
        let mut out = Vec::with_capacity(frames * channels);
        for plane in &planes {
            out.extend_from_slice(plane);
        }
        out
    };
    Ok(Audio {
        sample_rate,
        channels,
        samples,
    })
}

/// Average the channels of channel-major `samples` into one, as `librosa.to_mono`
/// (`np.mean(y, axis=0)`). Returns the input unchanged for `channels <= 1`; trailing samples
/// that do not fill a whole frame are ignored.
///
/// ```
/// use sluice_audioproc::to_mono;
/// // Two channels of two frames each: [1, 3] and [0, -1].
/// assert_eq!(to_mono(&[1.0, 3.0, 0.0, -1.0], 2), vec![0.5, 1.0]);
/// ```
pub fn to_mono(samples: &[f32], channels: usize) -> Vec<f32> {
    if channels <= 1 {
        return samples.to_vec();
    }
    let n = samples.len() / channels;
    // Sum in f32 in channel order then divide, as numpy's mean over the channel axis does for
    // float32 input (pairwise summation only kicks in along contiguous axes ≥ 8 elements).
    let mut out = samples[..n].to_vec();
    for c in 1..channels {
        for (o, s) in out.iter_mut().zip(&samples[c * n..(c + 1) * n]) {
            *o += *s;
        }
    }
    let inv = channels as f32;
    for o in &mut out {
        *o /= inv;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav_bytes(channels: u16, rate: u32, pcm16: &[i16]) -> Vec<u8> {
        let data_len = (pcm16.len() * 2) as u32;
        let mut w = Vec::new();
        w.extend_from_slice(b"RIFF");
        w.extend_from_slice(&(36 + data_len).to_le_bytes());
        w.extend_from_slice(b"WAVEfmt ");
        w.extend_from_slice(&16u32.to_le_bytes());
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&channels.to_le_bytes());
        w.extend_from_slice(&rate.to_le_bytes());
        w.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        w.extend_from_slice(&(channels * 2).to_le_bytes());
        w.extend_from_slice(&16u16.to_le_bytes());
        w.extend_from_slice(b"data");
        w.extend_from_slice(&data_len.to_le_bytes());
        for s in pcm16 {
            w.extend_from_slice(&s.to_le_bytes());
        }
        w
    }

    #[test]
    fn decodes_stereo_wav_channel_major() {
        // Interleaved L R L R L R.
        let wav = wav_bytes(2, 16000, &[100, -100, 200, -200, 300, -300]);
        let a = decode(&wav, Some(".WAV")).unwrap();
        assert_eq!((a.sample_rate, a.channels, a.frames()), (16000, 2, 3));
        let s = 1.0 / 32768.0;
        assert_eq!(a.channel(0).unwrap(), &[100.0 * s, 200.0 * s, 300.0 * s]);
        assert_eq!(a.channel(1).unwrap(), &[-100.0 * s, -200.0 * s, -300.0 * s]);
        assert_eq!(a.channel(2), None);
        let m = a.into_mono();
        assert_eq!((m.channels, m.samples), (1, vec![0.0; 3]));
    }

    #[test]
    fn empty_and_header_only_inputs() {
        assert_eq!(decode(&[], None), Err(AudioError::Empty));
        // A valid header with a zero-length data chunk decodes to nothing.
        let wav = wav_bytes(1, 8000, &[]);
        assert_eq!(decode(&wav, None), Err(AudioError::Empty));
    }

    #[test]
    fn truncated_wav_is_corrupt_unless_lenient() {
        let mut wav = wav_bytes(1, 8000, &[1000; 4000]);
        wav.truncate(wav.len() - 1001); // cut mid-sample, header still claims 8000 bytes
        match decode(&wav, Some("wav")) {
            Err(AudioError::Corrupt(_)) => {}
            other => panic!("expected Corrupt, got {other:?}"),
        }
        let a = decode_with(&wav, Some("wav"), &DecodeOptions::new().lenient(true)).unwrap();
        assert!(a.frames() > 3000 && a.frames() < 4000, "{}", a.frames());
    }

    #[test]
    fn max_frames_limit() {
        let wav = wav_bytes(1, 8000, &[1000; 4000]);
        let opts = DecodeOptions::new().max_frames(Some(100));
        assert!(matches!(
            decode_with(&wav, None, &opts),
            Err(AudioError::InvalidArgument(_))
        ));
    }

    #[test]
    fn garbage_is_typed_error() {
        let junk: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for hint in [None, Some("mp3"), Some("wav"), Some("flac"), Some("ogg")] {
            let r = decode(&junk, hint);
            assert!(
                matches!(
                    r,
                    Err(AudioError::Unsupported(_) | AudioError::Corrupt(_) | AudioError::Empty)
                ),
                "{hint:?}: {r:?}"
            );
        }
    }

    #[test]
    fn to_mono_means_channels() {
        assert_eq!(to_mono(&[1.0, 2.0], 1), vec![1.0, 2.0]);
        assert_eq!(to_mono(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3), vec![3.0, 4.0]);
        assert!(to_mono(&[], 2).is_empty());
    }
}
