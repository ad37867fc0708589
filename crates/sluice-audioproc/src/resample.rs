//! Sample-rate conversion with rubato.

use rubato::audioadapter_buffers::direct::SequentialSlice;
use rubato::{
    Async, Fft, FixedAsync, FixedSync, SincInterpolationParameters, SincInterpolationType,
    WindowFunction,
};

use crate::decode::Audio;
use crate::error::{invalid, AudioError, Result};

/// Which rubato resampler a [`Resampler`] uses. Both apply a band-limiting windowed-sinc
/// (Blackman-Harris²) filter; they differ in how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResampleQuality {
    /// rubato's synchronous `Fft` resampler: the windowed-sinc anti-aliasing filter applied by
    /// FFT overlap-add at the exact rational ratio. Output is sample-aligned with the input
    /// (no fractional shift) and tones come out ≥ 60 dB SNR against the exact signal; also
    /// the fastest option. The default.
    #[default]
    Fft,
    /// rubato's asynchronous sinc interpolator: 256-tap windowed sinc, 1024× oversampled table,
    /// cubic interpolation between table points. Kept for parity with sinc-interpolation
    /// pipelines; slower, and rubato's table indexing shifts the output by 1/1024 of an input
    /// sample (a phase error of `2π·f/fs_in/1024`), which limits SNR on a pure tone to
    /// ≈ 60 dB at `f ≈ 0.15·fs_in` and less above. Inaudible, but not bit-for-bit aligned.
    Sinc,
}

/// Input chunk size handed to rubato's sinc resampler; only affects internal blocking, not
/// the result beyond float rounding.
const CHUNK: usize = 1024;

/// Sinc filter length (a multiple of 8, so rubato uses it as is).
const SINC_LEN: usize = 256;

/// Upper bound on the zeros prepended to make the sinc resampler's delay a whole number of
/// output samples (see [`Resampler::with_quality`]); only unusual rate pairs need more.
const MAX_ALIGN_PAD: usize = 8192;

/// Target FFT block (input side) for the FFT resampler, in input frames. 22.05 → 16 kHz
/// (blocks of 441·k frames) measured per 3.3 s clip on the reference VM: 882 frames 0.31–0.33
/// ms, 1,764 (this) 0.23–0.27 ms, 4,410 0.35 ms, 7,938 0.33 ms (`benchmarks/asr_steps.py`
/// rebuilt with each) — fewer calls per clip, and FFT sizes still made of small primes.
const FFT_BLOCK: usize = 2048;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A reusable mono sample-rate converter for one `(from_rate, to_rate)` pair.
///
/// Construction designs the filters (milliseconds), so build one per rate pair and
/// per worker and reuse it for every clip; [`process`](Self::process) resets its state first,
/// so clips never bleed into each other. The output of a whole clip is aligned with the input
/// (rubato's filter delay is trimmed) and is `ceil(len * to / from)` samples long, the length
/// `librosa.resample` produces.
///
/// ```
/// use sluice_audioproc::{Resampler, ResampleQuality};
/// let mut r = Resampler::with_quality(44_100, 16_000, ResampleQuality::Fft).unwrap();
/// let tone: Vec<f32> = (0..44_100).map(|i| (i as f32 * 0.01).sin()).collect();
/// let out = r.process(&tone).unwrap();
/// assert_eq!(out.len(), 16_000);
/// ```
pub struct Resampler {
    from_rate: u32,
    to_rate: u32,
    quality: ResampleQuality,
    /// `None` when the rates are equal: resampling is then an exact copy.
    inner: Option<Box<dyn rubato::Resampler<f32>>>,
    /// Zeros prepended to the input so the filter delay is a whole number of output samples.
    pre_pad: usize,
    /// Output samples to drop after rubato's own (integer) delay trimming.
    skip: usize,
    /// Zeros appended so rubato produces at least `skip + output_len` samples.
    post_pad: usize,
    /// Padded input, reused across clips.
    scratch_in: Vec<f32>,
    /// rubato writes a partial chunk past the wanted length, so it needs a larger output
    /// buffer than the result; reused across clips.
    scratch_out: Vec<f32>,
}

impl std::fmt::Debug for Resampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resampler")
            .field("from_rate", &self.from_rate)
            .field("to_rate", &self.to_rate)
            .field("quality", &self.quality)
            .finish_non_exhaustive()
    }
}

impl Resampler {
    /// A resampler with the default [`ResampleQuality`] (`Fft`) from `from_rate` to
    /// `to_rate` Hz.
    pub fn new(from_rate: u32, to_rate: u32) -> Result<Self> {
        Self::with_quality(from_rate, to_rate, ResampleQuality::default())
    }

    /// A resampler with an explicit [`ResampleQuality`].
    pub fn with_quality(from_rate: u32, to_rate: u32, quality: ResampleQuality) -> Result<Self> {
        if from_rate == 0 || to_rate == 0 {
            return Err(invalid!(
                "sample rates must be positive, got {from_rate} -> {to_rate}"
            ));
        }
        let mut me = Self {
            from_rate,
            to_rate,
            quality,
            inner: None,
            pre_pad: 0,
            skip: 0,
            post_pad: 0,
            scratch_in: Vec::new(),
            scratch_out: Vec::new(),
        };
        if from_rate == to_rate {
            return Ok(me);
        }
        let g = gcd(u64::from(from_rate), u64::from(to_rate));
        let (up, down) = (u64::from(to_rate) / g, u64::from(from_rate) / g);
        let err = |e: rubato::ResamplerConstructionError| AudioError::Resample(e.to_string());
        match quality {
            ResampleQuality::Sinc => {
                let ratio = f64::from(to_rate) / f64::from(from_rate);
                let params = SincInterpolationParameters {
                    sinc_len: SINC_LEN,
                    f_cutoff: None,
                    // 1024 rather than rubato's suggested 256: the table step is also the size
                    // of rubato's residual time shift (see `ResampleQuality::Sinc`).
                    oversampling_factor: 1024,
                    interpolation: SincInterpolationType::Cubic,
                    window: WindowFunction::BlackmanHarris2,
                };
                // max_resample_ratio_relative = 1.0: the ratio never changes.
                let inner =
                    Async::<f32>::new_sinc(ratio, 1.0, &params, CHUNK, 1, FixedAsync::Input)
                        .map_err(err)?;
                // rubato trims `output_delay() = floor(SINC_LEN/2 · ratio)` samples, but the
                // filter's true delay is `SINC_LEN/2 · ratio − 1` output samples (plus the
                // 1/1024-input-sample table offset; measured, and pinned by
                // `delay_is_compensated` below), generally not an integer: trimming
                // the floor leaves the whole clip shifted by a fraction of a sample (~-26 dB
                // error on a 3 kHz tone). Prepending `p` zeros adds `p · ratio`; choosing
                // `SINC_LEN/2 + p ≡ 0 (mod down)` makes the total delay an exact integer, so the
                // output is aligned with the input to float rounding.
                let half = (SINC_LEN / 2) as u64;
                let mut p = (down - half % down) % down;
                // Need p·ratio ≥ 1 so the exact delay is past rubato's own trim.
                while p * up < down {
                    p += down;
                }
                let rubato_trim = rubato::Resampler::output_delay(&inner) as u64;
                if p as usize <= MAX_ALIGN_PAD {
                    let total = (half + p) * up / down - 1;
                    me.pre_pad = p as usize;
                    me.skip = (total - rubato_trim) as usize;
                } else {
                    // Pathological rate pair (huge reduced denominator): align to the nearest
                    // sample, leaving at most half a sample of shift.
                    let p = down.div_ceil(up);
                    let total = ((half + p) as f64 * ratio - 1.0).round() as u64;
                    me.pre_pad = p as usize;
                    me.skip = total.saturating_sub(rubato_trim) as usize;
                }
                // Enough trailing zeros for rubato to emit `skip + output_len` samples.
                me.post_pad = 2 * (down.div_ceil(up) as usize) + 2;
                me.inner = Some(Box::new(inner));
            }
            ResampleQuality::Fft => {
                // rubato's FFT resampler centres its filter at `floor(fft_in / 2)` input
                // samples but trims `fft_out / 2` output samples; the two agree only when the
                // block holds an even number of minimal `down`-sample units, otherwise the
                // output is shifted by up to half a sample. So pick the block size ourselves:
                // an even number of units, about FFT_BLOCK input frames.
                let units = ((FFT_BLOCK as u64 / down).max(1)).div_ceil(2) * 2;
                let chunk = usize::try_from(units * down)
                    .map_err(|_| AudioError::Resample("rate pair too large".into()))?;
                let inner = Fft::<f32>::new_custom(
                    from_rate as usize,
                    to_rate as usize,
                    chunk,
                    1,
                    1,
                    WindowFunction::BlackmanHarris2,
                    FixedSync::Input,
                )
                .map_err(err)?;
                me.inner = Some(Box::new(inner));
            }
        }
        Ok(me)
    }

    /// About how many float32 values the default (`Fft`) resampler for `from_rate` →
    /// `to_rate` holds in its plan (filter spectrum, FFT buffers and scratch), without building
    /// it: callers bound it before planning, since a rate pair with a large reduced ratio
    /// (16 kHz → 1 GHz) makes a plan of gigabytes. 0 for equal or zero rates.
    ///
    /// ```
    /// use sluice_audioproc::Resampler;
    /// assert!(Resampler::plan_len(44_100, 16_000) < 1 << 20);
    /// assert!(Resampler::plan_len(16_000, 1_000_000_000) > 1 << 27); // ~1 GB
    /// ```
    pub fn plan_len(from_rate: u32, to_rate: u32) -> u64 {
        if from_rate == to_rate || from_rate == 0 || to_rate == 0 {
            return 0;
        }
        let g = gcd(u64::from(from_rate), u64::from(to_rate));
        let (up, down) = (u64::from(to_rate) / g, u64::from(from_rate) / g);
        // The block `with_quality` picks: `units` minimal units of `down` input frames (and
        // `up` output frames); rubato keeps complex FFT buffers of twice each side.
        let units = ((FFT_BLOCK as u64 / down).max(1)).div_ceil(2) * 2;
        units
            .saturating_mul(up.saturating_add(down))
            .saturating_mul(8)
    }

    /// Input rate in Hz.
    pub fn from_rate(&self) -> u32 {
        self.from_rate
    }

    /// Output rate in Hz.
    pub fn to_rate(&self) -> u32 {
        self.to_rate
    }

    /// The resampler kind.
    pub fn quality(&self) -> ResampleQuality {
        self.quality
    }

    /// Output length for `input_len` input samples: `ceil(input_len * to / from)`.
    pub fn output_len(&self, input_len: usize) -> usize {
        // Integer arithmetic, so lengths are exact for any clip length.
        let num = input_len as u128 * u128::from(self.to_rate);
        num.div_ceil(u128::from(self.from_rate)) as usize
    }

    /// Resample one mono clip.
    pub fn process(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.process_into(samples, &mut out)?;
        Ok(out)
    }

    /// Resample one mono clip into `out` (cleared first), reusing its allocation.
    pub fn process_into(&mut self, samples: &[f32], out: &mut Vec<f32>) -> Result<()> {
        out.clear();
        let Some(inner) = self.inner.as_mut() else {
            out.extend_from_slice(samples);
            return Ok(());
        };
        if samples.is_empty() {
            return Ok(());
        }
        let want = {
            let num = samples.len() as u128 * u128::from(self.to_rate);
            num.div_ceil(u128::from(self.from_rate)) as usize
        };
        let err = |e: &dyn std::fmt::Display| AudioError::Resample(e.to_string());
        let input: &[f32] = if self.pre_pad == 0 && self.post_pad == 0 {
            samples
        } else {
            self.scratch_in.clear();
            self.scratch_in.resize(self.pre_pad, 0.0);
            self.scratch_in.extend_from_slice(samples);
            self.scratch_in
                .resize(self.pre_pad + samples.len() + self.post_pad, 0.0);
            &self.scratch_in
        };
        // process_all_into_buffer resets the resampler state only via process_all, so reset
        // here: clips must not bleed into each other.
        inner.reset();
        let needed = inner.process_all_needed_output_len(input.len());
        self.scratch_out.clear();
        self.scratch_out.resize(needed, 0.0);
        let in_adapter = SequentialSlice::new(input, 1, input.len()).map_err(|e| err(&e))?;
        let mut out_adapter =
            SequentialSlice::new_mut(&mut self.scratch_out, 1, needed).map_err(|e| err(&e))?;
        let (_, produced) = inner
            .process_all_into_buffer(&in_adapter, &mut out_adapter, input.len(), None)
            .map_err(|e| err(&e))?;
        // Take exactly `want` samples after the alignment skip; zero-fill if rubato produced
        // fewer (it only pads with zeros past the input anyway).
        let start = self.skip.min(produced);
        let end = (self.skip + want).min(produced);
        out.extend_from_slice(&self.scratch_out[start..end]);
        out.resize(want, 0.0);
        Ok(())
    }

    /// Resample every channel of `audio` (which must be at `from_rate`).
    pub fn process_audio(&mut self, audio: &Audio) -> Result<Audio> {
        if audio.sample_rate != self.from_rate {
            return Err(invalid!(
                "audio is at {} Hz but the resampler expects {} Hz",
                audio.sample_rate,
                self.from_rate
            ));
        }
        if audio.channels == 0 {
            return Err(invalid!("audio has zero channels"));
        }
        let n = audio.frames();
        let mut samples = Vec::with_capacity(self.output_len(n) * audio.channels);
        let mut tmp = Vec::new();
        for c in 0..audio.channels {
            self.process_into(&audio.samples[c * n..(c + 1) * n], &mut tmp)?;
            samples.extend_from_slice(&tmp);
        }
        Ok(Audio {
            sample_rate: self.to_rate,
            channels: audio.channels,
            samples,
        })
    }
}

/// One-shot mono resampling with the default [`ResampleQuality`]. Builds the filters on every call:
/// reuse a [`Resampler`] in loops.
///
/// ```
/// let y = vec![0.0f32; 22_050];
/// let z = sluice_audioproc::resample(&y, 22_050, 16_000).unwrap();
/// assert_eq!(z.len(), 16_000);
/// ```
pub fn resample(samples: &[f32], from_rate: u32, to_rate: u32) -> Result<Vec<f32>> {
    Resampler::new(from_rate, to_rate)?.process(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    fn sine(freq: f64, rate: u32, n: usize, phase: f64) -> Vec<f64> {
        (0..n)
            .map(|i| (2.0 * PI * freq * i as f64 / f64::from(rate) + phase).sin())
            .collect()
    }

    /// SNR in dB of `got` against the exact analytic `want`, skipping `edge` samples at both
    /// ends (the filter sees implicit zeros beyond the clip there).
    fn snr_db(got: &[f32], want: &[f64], edge: usize) -> f64 {
        let (mut sig, mut err) = (0.0, 0.0);
        for i in edge..want.len() - edge {
            sig += want[i] * want[i];
            err += (f64::from(got[i]) - want[i]).powi(2);
        }
        10.0 * (sig / err).log10()
    }

    #[test]
    fn tones_meet_60db_snr() {
        // (from, to, tone Hz): down, up and the ASR 22.05k -> 16k case. The sinc interpolator
        // is held to 60 dB only up to ~0.15·fs_in (its documented residual shift).
        let cases = [
            (44_100, 16_000, 440.0, true),
            (44_100, 16_000, 3000.0, true),
            (22_050, 16_000, 440.0, true),
            (22_050, 16_000, 3000.0, true),
            (22_050, 16_000, 6000.0, false),
            (8_000, 16_000, 1000.0, true),
            (8_000, 16_000, 3500.0, false),
            (48_000, 44_100, 7000.0, true),
            (48_000, 44_100, 15_000.0, false),
        ];
        for quality in [ResampleQuality::Sinc, ResampleQuality::Fft] {
            for &(from, to, f, sinc_ok) in &cases {
                if quality == ResampleQuality::Sinc && !sinc_ok {
                    continue;
                }
                let n = from as usize; // 1 s
                let x: Vec<f32> = sine(f, from, n, 0.3).iter().map(|&v| v as f32).collect();
                let mut r = Resampler::with_quality(from, to, quality).unwrap();
                let y = r.process(&x).unwrap();
                assert_eq!(y.len(), r.output_len(n));
                let want = sine(f, to, y.len(), 0.3);
                let snr = snr_db(&y, &want, to as usize / 20);
                println!("{quality:?} {from}->{to} {f} Hz: SNR {snr:.1} dB");
                assert!(
                    snr >= 60.0,
                    "{quality:?} {from}->{to} {f} Hz: SNR {snr:.1} dB"
                );
                // Reuse must give identical output (state is reset per clip).
                assert_eq!(r.process(&x).unwrap(), y);
            }
        }
    }

    /// Phase of a steady tone in the output versus the analytic one, in output samples: the
    /// resampler must not shift the clip (rubato's integer delay trim alone leaves up to a
    /// sample of shift, which these pairs all exercise).
    #[test]
    fn delay_is_compensated() {
        for quality in [ResampleQuality::Sinc, ResampleQuality::Fft] {
            for (from, to, f) in [
                (44_100, 16_000, 440.0),
                (22_050, 16_000, 440.0),
                (8_000, 16_000, 1000.0),
                (48_000, 44_100, 1000.0),
                (16_000, 22_050, 300.0),
                (32_000, 16_000, 500.0),
            ] {
                let x: Vec<f32> = sine(f, from, from as usize / 2, 0.3)
                    .iter()
                    .map(|&v| v as f32)
                    .collect();
                let y = Resampler::with_quality(from, to, quality)
                    .unwrap()
                    .process(&x)
                    .unwrap();
                let (lo, hi) = (y.len() / 4, y.len() * 3 / 4);
                // Least-squares fit y ≈ a·cos(wi) + b·sin(wi) = A·sin(wi + φ), φ = atan2(a, b);
                // exact for a pure tone whatever the number of cycles in the window.
                let (mut cc, mut cs, mut ss, mut yc, mut ys) = (0.0, 0.0, 0.0, 0.0, 0.0);
                for (i, v) in y.iter().enumerate().take(hi).skip(lo) {
                    let w = 2.0 * PI * f * i as f64 / f64::from(to);
                    let (c, s, v) = (w.cos(), w.sin(), f64::from(*v));
                    (cc, cs, ss, yc, ys) =
                        (cc + c * c, cs + c * s, ss + s * s, yc + v * c, ys + v * s);
                }
                let det = cc * ss - cs * cs;
                let a = (yc * ss - ys * cs) / det;
                let b = (ys * cc - yc * cs) / det;
                let offset = (a.atan2(b) - 0.3) / (2.0 * PI * f / f64::from(to));
                // Sinc: rubato's 1/1024-input-sample table offset, in output samples.
                let tol = match quality {
                    ResampleQuality::Fft => 1e-4,
                    _ => 1.1 / 1024.0 * f64::from(to) / f64::from(from) + 1e-4,
                };
                assert!(
                    offset.abs() < tol,
                    "{quality:?} {from}->{to}: shifted by {offset} samples"
                );
            }
        }
    }

    #[test]
    fn identity_and_edge_cases() {
        let mut r = Resampler::new(16_000, 16_000).unwrap();
        assert_eq!(r.process(&[1.0, 2.0]).unwrap(), vec![1.0, 2.0]);
        let mut r = Resampler::new(22_050, 16_000).unwrap();
        assert!(r.process(&[]).unwrap().is_empty());
        assert_eq!(r.process(&[0.5]).unwrap().len(), 1);
        assert_eq!(r.output_len(22_050), 16_000);
        assert_eq!(r.output_len(22_051), 16_001);
        assert!(Resampler::new(0, 16_000).is_err());
        assert!(Resampler::new(16_000, 0).is_err());
    }

    #[test]
    fn multichannel_audio() {
        let x: Vec<f32> = sine(440.0, 22_050, 2205, 0.0)
            .into_iter()
            .chain(sine(880.0, 22_050, 2205, 0.0))
            .map(|v| v as f32)
            .collect();
        let audio = Audio {
            sample_rate: 22_050,
            channels: 2,
            samples: x,
        };
        let mut r = Resampler::with_quality(22_050, 16_000, ResampleQuality::Fft).unwrap();
        let out = r.process_audio(&audio).unwrap();
        assert_eq!(
            (out.sample_rate, out.channels, out.frames()),
            (16_000, 2, 1600)
        );
        let left = r.process(audio.channel(0).unwrap()).unwrap();
        assert_eq!(out.channel(0).unwrap(), &left[..]);
        let wrong = Audio {
            sample_rate: 8000,
            ..audio
        };
        assert!(r.process_audio(&wrong).is_err());
    }
}
