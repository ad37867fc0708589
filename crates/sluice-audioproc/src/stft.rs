//! Short-time Fourier transform with librosa semantics (`librosa.stft`, librosa ≥ 0.10).

use std::f64::consts::PI;
use std::sync::Arc;

use realfft::num_complex::Complex32;
use realfft::{RealFftPlanner, RealToComplex};

use crate::error::{invalid, Result};
use crate::spectrogram::Spectrogram;

/// Analysis window, computed like `scipy.signal.get_window(name, n, fftbins=True)`
/// (periodic: the DFT-even variant used for spectral analysis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Window {
    /// `"hann"`: `0.5 - 0.5 cos(2πn/N)`; librosa's default.
    #[default]
    Hann,
    /// `"hamming"`: `0.54 - 0.46 cos(2πn/N)`.
    Hamming,
    /// `"blackman"`: `0.42 - 0.5 cos(2πn/N) + 0.08 cos(4πn/N)`.
    Blackman,
    /// `"boxcar"` / `"rectangular"`: all ones.
    Rectangular,
}

impl Window {
    /// The periodic window of length `n` as `f32`.
    ///
    /// Evaluated in `f64` the way scipy's `general_cosine` does (cosine sums over
    /// `linspace(-π, π, n + 1)[:-1]`) and then rounded, so values match scipy's to the last
    /// `f32` bit in practice.
    ///
    /// ```
    /// use sluice_audioproc::Window;
    /// let w = Window::Hann.coefficients(4);
    /// assert_eq!(w, vec![0.0, 0.5, 1.0, 0.5]);
    /// ```
    pub fn coefficients(self, n: usize) -> Vec<f32> {
        let coeffs: &[f64] = match self {
            Window::Hann => &[0.5, 0.5],
            Window::Hamming => &[0.54, 0.46],
            Window::Blackman => &[0.42, 0.50, 0.08],
            Window::Rectangular => return vec![1.0; n],
        };
        if n == 0 {
            return Vec::new();
        }
        let step = 2.0 * PI / n as f64;
        (0..n)
            .map(|i| {
                let fac = -PI + i as f64 * step;
                let w: f64 = coeffs
                    .iter()
                    .enumerate()
                    .map(|(k, a)| a * (k as f64 * fac).cos())
                    .sum();
                w as f32
            })
            .collect()
    }
}

/// Parameters of an [`Stft`], named as in `librosa.stft`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StftConfig {
    /// FFT length; output has `1 + n_fft / 2` frequency rows.
    pub n_fft: usize,
    /// Samples between successive frames.
    pub hop_length: usize,
    /// Window length (≤ `n_fft`); the window is zero-padded to `n_fft`, centred.
    /// `None` means `n_fft`.
    pub win_length: Option<usize>,
    /// Window shape.
    pub window: Window,
    /// Pad `n_fft / 2` zeros on both sides so frame `t` is centred at sample `t * hop_length`
    /// (librosa's `center=True` with its ≥ 0.10 default `pad_mode="constant"`).
    pub center: bool,
}

impl StftConfig {
    /// librosa's defaults for a given `n_fft` / `hop_length`: Hann window of `n_fft` samples,
    /// `center=True`, zero padding.
    pub fn new(n_fft: usize, hop_length: usize) -> Self {
        Self {
            n_fft,
            hop_length,
            win_length: None,
            window: Window::Hann,
            center: true,
        }
    }
}

/// A planned STFT: FFT plan, padded window and scratch buffers are built once and reused for
/// every signal, so per-call work is just framing, windowing and the FFTs.
///
/// `Stft` is `Send` and cheap to clone (the FFT plan is shared); give each worker thread its
/// own clone, since the transform methods take `&mut self` for the scratch buffers.
///
/// Output is **freq × time** (`1 + n_fft/2` rows, `n_frames` columns) like librosa, with
/// `n_frames = 1 + (len + 2·pad - n_fft) / hop` where `pad = n_fft / 2` if `center` else 0.
///
/// ```
/// use sluice_audioproc::{Stft, Window};
/// let mut stft = Stft::new(400, 160, None, Window::Hann, true).unwrap();
/// let y = vec![0.1f32; 16_000];
/// let s = stft.power(&y, 2.0).unwrap();
/// assert_eq!(s.shape(), (201, 101));
/// ```
#[derive(Clone)]
pub struct Stft {
    cfg: StftConfig,
    /// Window zero-padded (centred) to `n_fft`.
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
    frame: Vec<f32>,
    spectrum: Vec<Complex32>,
    scratch: Vec<Complex32>,
    /// Time-major staging blocks for the transpose (see `run_blocked`).
    block_c: Vec<Complex32>,
    block_f: Vec<f32>,
}

/// Frames per transpose block: 16 frames of 201 complex bins is 25 KB, inside L1/L2.
const BLOCK: usize = 16;

impl std::fmt::Debug for Stft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stft")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl Stft {
    /// Plan an STFT; argument names and meaning follow `librosa.stft`.
    pub fn new(
        n_fft: usize,
        hop_length: usize,
        win_length: Option<usize>,
        window: Window,
        center: bool,
    ) -> Result<Self> {
        Self::from_config(StftConfig {
            n_fft,
            hop_length,
            win_length,
            window,
            center,
        })
    }

    /// Plan an STFT from a [`StftConfig`].
    pub fn from_config(cfg: StftConfig) -> Result<Self> {
        // The upper bound keeps a typo'd config an error instead of an allocation abort.
        if cfg.n_fft == 0 || cfg.n_fft > 1 << 24 {
            return Err(invalid!("n_fft must be in 1..=2^24, got {}", cfg.n_fft));
        }
        if cfg.hop_length == 0 {
            return Err(invalid!("hop_length must be positive"));
        }
        let win_length = cfg.win_length.unwrap_or(cfg.n_fft);
        if win_length == 0 || win_length > cfg.n_fft {
            return Err(invalid!(
                "win_length must be in 1..={}, got {win_length}",
                cfg.n_fft
            ));
        }
        // librosa.util.pad_center: left pad = (n_fft - win_length) // 2.
        let mut window = vec![0.0f32; cfg.n_fft];
        let lpad = (cfg.n_fft - win_length) / 2;
        window[lpad..lpad + win_length].copy_from_slice(&cfg.window.coefficients(win_length));
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(cfg.n_fft);
        let frame = fft.make_input_vec();
        let spectrum = fft.make_output_vec();
        let scratch = fft.make_scratch_vec();
        Ok(Self {
            cfg,
            window,
            fft,
            frame,
            spectrum,
            scratch,
            block_c: Vec::new(),
            block_f: Vec::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StftConfig {
        &self.cfg
    }

    /// Number of frequency rows, `1 + n_fft / 2`.
    pub fn n_freq(&self) -> usize {
        self.cfg.n_fft / 2 + 1
    }

    /// The `n_fft`-long (zero-padded) window actually applied to each frame.
    pub fn window(&self) -> &[f32] {
        &self.window
    }

    /// Number of frames for a signal of `len` samples, or an error when the signal is too
    /// short for even one frame (empty input, or `len < n_fft` with `center=false`), mirroring
    /// librosa's `ParameterError`.
    pub fn n_frames(&self, len: usize) -> Result<usize> {
        let pad = if self.cfg.center {
            self.cfg.n_fft / 2
        } else {
            0
        };
        let padded = len + 2 * pad;
        if len == 0 || padded < self.cfg.n_fft {
            return Err(invalid!(
                "signal of {len} samples is too short for n_fft={} (center={})",
                self.cfg.n_fft,
                self.cfg.center
            ));
        }
        Ok(1 + (padded - self.cfg.n_fft) / self.cfg.hop_length)
    }

    /// Transform one frame: window the `n_fft` samples starting at signal index `start`
    /// (may be negative or run past the end: those samples are the zero padding) and FFT
    /// into `self.spectrum`.
    fn frame_fft(&mut self, y: &[f32], start: isize) -> Result<()> {
        let n = self.cfg.n_fft as isize;
        let len = y.len() as isize;
        // In-range part of [start, start + n).
        let lo = start.max(0);
        let hi = (start + n).min(len);
        self.frame.fill(0.0);
        if lo < hi {
            let off = (lo - start) as usize;
            let src = &y[lo as usize..hi as usize];
            let dst = &mut self.frame[off..off + src.len()];
            let win = &self.window[off..off + src.len()];
            for ((d, s), w) in dst.iter_mut().zip(src).zip(win) {
                *d = s * w;
            }
        }
        self.fft
            .process_with_scratch(&mut self.frame, &mut self.spectrum, &mut self.scratch)
            .map_err(|e| invalid!("fft: {e}"))
    }

    /// Run the frames of `y`, handing each spectrum to `sink(frame_index, spectrum)`.
    ///
    /// Frames are converted with `conv` into a small time-major block and then transposed into
    /// the freq-major `out` (`n_freq × n_frames`) block by block: writing each spectrum
    /// straight into its column touches one cache line per bin per frame, which cost about as
    /// much as the FFTs themselves.
    fn run_blocked<T: Copy>(
        &mut self,
        y: &[f32],
        out: &mut [T],
        n_frames: usize,
        block: &mut Vec<T>,
        zero: T,
        conv: impl Fn(Complex32) -> T,
    ) -> Result<()> {
        let n_freq = self.n_freq();
        let hop = self.cfg.hop_length;
        let pad = if self.cfg.center {
            self.cfg.n_fft / 2
        } else {
            0
        } as isize;
        block.clear();
        block.resize(BLOCK * n_freq, zero);
        let mut t0 = 0;
        while t0 < n_frames {
            let len = BLOCK.min(n_frames - t0);
            for (j, row) in block.chunks_exact_mut(n_freq).take(len).enumerate() {
                self.frame_fft(y, ((t0 + j) * hop) as isize - pad)?;
                for (b, v) in row.iter_mut().zip(&self.spectrum) {
                    *b = conv(*v);
                }
            }
            for (f, dst) in out.chunks_exact_mut(n_frames).enumerate() {
                for (j, d) in dst[t0..t0 + len].iter_mut().enumerate() {
                    *d = block[j * n_freq + f];
                }
            }
            t0 += len;
        }
        Ok(())
    }

    /// Complex STFT of a mono signal (`librosa.stft(y, ...)`), freq × time.
    pub fn complex(&mut self, y: &[f32]) -> Result<Spectrogram<Complex32>> {
        let mut out = Spectrogram::default();
        self.complex_into(y, &mut out)?;
        Ok(out)
    }

    /// [`complex`](Self::complex) into a reused output buffer.
    pub fn complex_into(&mut self, y: &[f32], out: &mut Spectrogram<Complex32>) -> Result<()> {
        let n_frames = self.n_frames(y.len())?;
        let zero = Complex32::new(0.0, 0.0);
        out.reset(self.n_freq(), n_frames, zero);
        let mut block = std::mem::take(&mut self.block_c);
        let r = self.run_blocked(y, out.as_mut_slice(), n_frames, &mut block, zero, |v| v);
        self.block_c = block;
        r
    }

    /// `|STFT|^power` (`np.abs(librosa.stft(y, ...)) ** power`): `power = 2.0` is the power
    /// spectrogram, `1.0` the magnitude. Computed frame by frame without materialising the
    /// complex spectrogram.
    pub fn power(&mut self, y: &[f32], power: f32) -> Result<Spectrogram<f32>> {
        let mut out = Spectrogram::default();
        self.power_into(y, power, &mut out)?;
        Ok(out)
    }

    /// [`power`](Self::power) into a reused output buffer.
    pub fn power_into(&mut self, y: &[f32], power: f32, out: &mut Spectrogram<f32>) -> Result<()> {
        check_power(power)?;
        let n_frames = self.n_frames(y.len())?;
        out.reset(self.n_freq(), n_frames, 0.0);
        let data = out.as_mut_slice();
        let mut block = std::mem::take(&mut self.block_f);
        // One monomorphised loop per common exponent so the conversion vectorises.
        let r = if power == 2.0 {
            self.run_blocked(y, data, n_frames, &mut block, 0.0, |v| v.norm_sqr())
        } else if power == 1.0 {
            self.run_blocked(y, data, n_frames, &mut block, 0.0, fast_abs)
        } else {
            self.run_blocked(y, data, n_frames, &mut block, 0.0, |v| abs_pow(v, power))
        };
        self.block_f = block;
        r
    }
}

fn check_power(power: f32) -> Result<()> {
    if power.is_finite() && power > 0.0 {
        Ok(())
    } else {
        Err(invalid!("power must be finite and positive, got {power}"))
    }
}

/// `|v|` as `sqrt(re² + im²)`: several times faster than `Complex::norm` (libm `hypot`), and
/// `hypot`'s overflow protection is moot for spectra of audio in `[-1, 1]`.
#[inline]
pub(crate) fn fast_abs(v: Complex32) -> f32 {
    v.norm_sqr().sqrt()
}

/// `|v|^p`, with the two common exponents special-cased to skip `sqrt`/`powf`.
#[inline]
fn abs_pow(v: Complex32, p: f32) -> f32 {
    if p == 2.0 {
        v.norm_sqr()
    } else if p == 1.0 {
        fast_abs(v)
    } else {
        fast_abs(v).powf(p)
    }
}

/// `|X|^power` of a complex spectrogram (e.g. after [`time_stretch`](crate::time_stretch)).
///
/// ```
/// use sluice_audioproc::{complex_to_power, Complex32, Spectrogram};
/// let x = Spectrogram::from_vec(1, 1, vec![Complex32::new(3.0, 4.0)]).unwrap();
/// assert_eq!(complex_to_power(&x, 2.0).unwrap().as_slice(), &[25.0]);
/// assert_eq!(complex_to_power(&x, 1.0).unwrap().as_slice(), &[5.0]);
/// ```
pub fn complex_to_power(spec: &Spectrogram<Complex32>, power: f32) -> Result<Spectrogram<f32>> {
    check_power(power)?;
    Ok(spec.map(|v| abs_pow(v, power)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Direct O(n²) DFT of one windowed frame, in f64, as an independent reference.
    fn dft_frame(x: &[f64]) -> Vec<(f64, f64)> {
        let n = x.len();
        (0..=n / 2)
            .map(|k| {
                x.iter().enumerate().fold((0.0, 0.0), |(re, im), (i, v)| {
                    let a = -2.0 * PI * (k * i) as f64 / n as f64;
                    (re + v * a.cos(), im + v * a.sin())
                })
            })
            .collect()
    }

    #[test]
    fn windows_match_closed_forms() {
        let n = 16;
        for (w, f) in [
            (
                Window::Hann,
                (|x: f64| 0.5 - 0.5 * x.cos()) as fn(f64) -> f64,
            ),
            (Window::Hamming, |x: f64| 0.54 - 0.46 * x.cos()),
            (Window::Blackman, |x: f64| {
                0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos()
            }),
            (Window::Rectangular, |_| 1.0),
        ] {
            let c = w.coefficients(n);
            for (i, v) in c.iter().enumerate() {
                let want = f(2.0 * PI * i as f64 / n as f64);
                assert!((f64::from(*v) - want).abs() < 1e-7, "{w:?}[{i}]");
            }
        }
        assert!(Window::Hann.coefficients(0).is_empty());
    }

    #[test]
    fn frame_counts_follow_librosa() {
        let s = Stft::new(400, 160, None, Window::Hann, true).unwrap();
        assert_eq!(s.n_frames(16_000).unwrap(), 101);
        assert_eq!(s.n_frames(1).unwrap(), 1);
        assert!(s.n_frames(0).is_err());
        let s = Stft::new(400, 160, None, Window::Hann, false).unwrap();
        assert_eq!(s.n_frames(400).unwrap(), 1);
        assert_eq!(s.n_frames(559).unwrap(), 1);
        assert_eq!(s.n_frames(560).unwrap(), 2);
        assert!(s.n_frames(399).is_err());
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert!(Stft::new(0, 160, None, Window::Hann, true).is_err());
        assert!(Stft::new(usize::MAX, 160, None, Window::Hann, true).is_err());
        assert!(Stft::new(400, 0, None, Window::Hann, true).is_err());
        assert!(Stft::new(400, 160, Some(401), Window::Hann, true).is_err());
        assert!(Stft::new(400, 160, Some(0), Window::Hann, true).is_err());
        let mut s = Stft::new(8, 4, None, Window::Hann, true).unwrap();
        assert!(s.power(&[1.0; 8], 0.0).is_err());
        assert!(s.power(&[1.0; 8], f32::NAN).is_err());
        assert!(s.complex(&[]).is_err());
    }

    #[test]
    fn matches_direct_dft_with_padding_and_short_window() {
        // Odd n_fft, win_length < n_fft, center padding at both ends.
        let (n_fft, hop, win) = (15usize, 4usize, 10usize);
        let y: Vec<f32> = (0..37)
            .map(|i| ((i * 7919) % 23) as f32 / 23.0 - 0.5)
            .collect();
        let mut s = Stft::new(n_fft, hop, Some(win), Window::Hamming, true).unwrap();
        let spec = s.complex(&y).unwrap();
        let n_frames = 1 + (y.len() + 2 * (n_fft / 2) - n_fft) / hop;
        assert_eq!(spec.shape(), (n_fft / 2 + 1, n_frames));
        let w = s.window().to_vec();
        assert_eq!(w[..2], [0.0, 0.0]); // lpad = (15 - 10) / 2 = 2
        assert_eq!(w[12..], [0.0, 0.0, 0.0]);
        let pad = (n_fft / 2) as isize;
        for t in 0..n_frames {
            let frame: Vec<f64> = (0..n_fft)
                .map(|i| {
                    let j = (t * hop + i) as isize - pad;
                    let v = if j >= 0 && (j as usize) < y.len() {
                        y[j as usize]
                    } else {
                        0.0
                    };
                    f64::from(v) * f64::from(w[i])
                })
                .collect();
            for (f, (re, im)) in dft_frame(&frame).into_iter().enumerate() {
                let got = spec.get(f, t).unwrap();
                assert!((f64::from(got.re) - re).abs() < 1e-5, "re f={f} t={t}");
                assert!((f64::from(got.im) - im).abs() < 1e-5, "im f={f} t={t}");
            }
        }
        let p = s.power(&y, 2.0).unwrap();
        let m = s.power(&y, 1.0).unwrap();
        let q = s.power(&y, 1.5).unwrap();
        for ((c, (pv, mv)), qv) in spec
            .as_slice()
            .iter()
            .zip(p.as_slice().iter().zip(m.as_slice()))
            .zip(q.as_slice())
        {
            assert!((c.norm_sqr() - pv).abs() <= 1e-6 * (1.0 + pv));
            assert!((c.norm() - mv).abs() <= 1e-6 * (1.0 + mv));
            assert!((c.norm().powf(1.5) - qv).abs() <= 1e-5 * (1.0 + qv));
        }
    }

    #[test]
    fn reuse_gives_identical_results() {
        let mut s = Stft::new(64, 16, None, Window::Hann, true).unwrap();
        let a: Vec<f32> = (0..300).map(|i| (i as f32 * 0.1).sin()).collect();
        let b: Vec<f32> = (0..123).map(|i| (i as f32 * 0.37).cos()).collect();
        let first = s.power(&a, 2.0).unwrap();
        let _ = s.power(&b, 2.0).unwrap();
        let mut out = Spectrogram::default();
        s.power_into(&a, 2.0, &mut out).unwrap();
        assert_eq!(first, out);
        let mut c = s.clone();
        assert_eq!(c.power(&a, 2.0).unwrap(), first);
    }
}
