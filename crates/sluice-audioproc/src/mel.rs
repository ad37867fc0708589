//! Mel filterbank (`librosa.filters.mel`) and its application to power spectrograms.

use crate::error::{invalid, Result};
use crate::spectrogram::Spectrogram;

/// Filter normalisation, as librosa's `norm` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MelNorm {
    /// `norm=None`: triangles peak at 1.
    None,
    /// `norm="slaney"` (default): each triangle is divided by its width in Hz
    /// (`2 / (f[i+2] - f[i])`), giving approximately constant energy per channel.
    #[default]
    Slaney,
}

/// Parameters of a mel filterbank; defaults follow `librosa.filters.mel`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MelConfig {
    /// Sample rate of the signal the spectrogram came from.
    pub sample_rate: u32,
    /// FFT size of that spectrogram (it has `1 + n_fft / 2` rows).
    pub n_fft: usize,
    /// Number of mel bands.
    pub n_mels: usize,
    /// Lowest band edge in Hz.
    pub fmin: f64,
    /// Highest band edge in Hz; `None` means `sample_rate / 2`.
    pub fmax: Option<f64>,
    /// Use the HTK formula `2595 log10(1 + f/700)` instead of the Slaney scale (linear below
    /// 1 kHz, logarithmic above), which is librosa's default (`htk=False`).
    pub htk: bool,
    /// Filter normalisation.
    pub norm: MelNorm,
}

impl MelConfig {
    /// librosa's defaults: `fmin=0`, `fmax=sr/2`, Slaney scale, Slaney norm.
    pub fn new(sample_rate: u32, n_fft: usize, n_mels: usize) -> Self {
        Self {
            sample_rate,
            n_fft,
            n_mels,
            fmin: 0.0,
            fmax: None,
            htk: false,
            norm: MelNorm::Slaney,
        }
    }
}

/// Hz → mel (`librosa.hz_to_mel`).
///
/// ```
/// use sluice_audioproc::hz_to_mel;
/// assert!((hz_to_mel(1000.0, false) - 15.0).abs() < 1e-12); // Slaney: linear to 1 kHz
/// assert!((hz_to_mel(700.0, true) - 2595.0 * 2f64.log10()).abs() < 1e-9);
/// ```
pub fn hz_to_mel(hz: f64, htk: bool) -> f64 {
    if htk {
        return 2595.0 * (1.0 + hz / 700.0).log10();
    }
    // Same operation order as librosa so results round identically.
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if hz >= min_log_hz {
        min_log_mel + (hz / min_log_hz).ln() / logstep
    } else {
        hz / f_sp
    }
}

/// Mel → Hz (`librosa.mel_to_hz`), the inverse of [`hz_to_mel`].
pub fn mel_to_hz(mel: f64, htk: bool) -> f64 {
    if htk {
        return 700.0 * (10f64.powf(mel / 2595.0) - 1.0);
    }
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if mel >= min_log_mel {
        min_log_hz * (logstep * (mel - min_log_mel)).exp()
    } else {
        f_sp * mel
    }
}

/// `np.linspace(start, stop, num)` including numpy's exact-endpoint rule.
fn linspace(start: f64, stop: f64, num: usize) -> Vec<f64> {
    if num == 1 {
        return vec![start];
    }
    let step = (stop - start) / (num - 1) as f64;
    let mut v: Vec<f64> = (0..num).map(|i| i as f64 * step + start).collect();
    if let Some(last) = v.last_mut() {
        *last = stop;
    }
    v
}

/// A mel filterbank: `n_mels × (1 + n_fft/2)` triangular weights, stored densely (for
/// inspection) and as per-band nonzero ranges (for a fast sparse projection: each band only
/// touches a handful of FFT bins).
///
/// ```
/// use sluice_audioproc::{MelConfig, MelFilterbank, Spectrogram};
/// let fb = MelFilterbank::new(MelConfig::new(16_000, 400, 80)).unwrap();
/// assert_eq!(fb.shape(), (80, 201));
/// let power = Spectrogram::from_vec(201, 3, vec![1.0f32; 201 * 3]).unwrap();
/// let mel = fb.apply(&power).unwrap();
/// assert_eq!(mel.shape(), (80, 3));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct MelFilterbank {
    cfg: MelConfig,
    n_freq: usize,
    /// Dense row-major weights, `n_mels * n_freq`.
    weights: Vec<f32>,
    /// Per band: first nonzero bin and the weights up to the last nonzero bin.
    bands: Vec<(usize, Vec<f32>)>,
}

impl MelFilterbank {
    /// Build the filterbank exactly as `librosa.filters.mel(sr=sample_rate, n_fft=n_fft,
    /// n_mels=n_mels, fmin=fmin, fmax=fmax, htk=htk, norm=norm)` (float64 design, float32
    /// weights).
    pub fn new(cfg: MelConfig) -> Result<Self> {
        if cfg.sample_rate == 0 || cfg.n_fft == 0 || cfg.n_mels == 0 {
            return Err(invalid!(
                "mel filterbank needs positive sample_rate, n_fft and n_mels, got {cfg:?}"
            ));
        }
        let sr = f64::from(cfg.sample_rate);
        let fmax = cfg.fmax.unwrap_or(sr / 2.0);
        if !(cfg.fmin.is_finite() && fmax.is_finite() && 0.0 <= cfg.fmin && cfg.fmin < fmax) {
            return Err(invalid!(
                "mel filterbank needs 0 <= fmin < fmax, got fmin={} fmax={fmax}",
                cfg.fmin
            ));
        }
        let n_freq = cfg.n_fft / 2 + 1;
        // A typo'd config (n_mels = 1e9) must be an error, not an allocation failure abort.
        if cfg.n_mels.checked_mul(n_freq).is_none_or(|n| n > 1 << 28) {
            return Err(invalid!(
                "mel filterbank of {} x {n_freq} weights is unreasonably large",
                cfg.n_mels
            ));
        }
        // np.fft.rfftfreq(n_fft, d=1/sr), same operation order.
        let val = 1.0 / (cfg.n_fft as f64 * (1.0 / sr));
        let fftfreqs: Vec<f64> = (0..n_freq).map(|k| k as f64 * val).collect();
        let mel_pts = linspace(
            hz_to_mel(cfg.fmin, cfg.htk),
            hz_to_mel(fmax, cfg.htk),
            cfg.n_mels + 2,
        );
        let mel_f: Vec<f64> = mel_pts.iter().map(|&m| mel_to_hz(m, cfg.htk)).collect();
        let fdiff: Vec<f64> = mel_f.windows(2).map(|w| w[1] - w[0]).collect();

        let mut weights = vec![0.0f32; cfg.n_mels * n_freq];
        for i in 0..cfg.n_mels {
            let enorm = match cfg.norm {
                MelNorm::Slaney => Some(2.0 / (mel_f[i + 2] - mel_f[i])),
                MelNorm::None => None,
            };
            let row = &mut weights[i * n_freq..(i + 1) * n_freq];
            for (k, w) in row.iter_mut().enumerate() {
                let lower = -(mel_f[i] - fftfreqs[k]) / fdiff[i];
                let upper = (mel_f[i + 2] - fftfreqs[k]) / fdiff[i + 1];
                // librosa stores the triangle into a float32 array first, then scales it in
                // float64 and rounds again; doing the same keeps the weights bit-identical.
                let tri = 0.0f64.max(lower.min(upper)) as f32;
                *w = match enorm {
                    Some(e) => (f64::from(tri) * e) as f32,
                    None => tri,
                };
            }
        }
        let bands = (0..cfg.n_mels)
            .map(|i| {
                let row = &weights[i * n_freq..(i + 1) * n_freq];
                match row.iter().position(|&w| w != 0.0) {
                    Some(first) => {
                        let last = row.iter().rposition(|&w| w != 0.0).unwrap_or(first);
                        (first, row[first..=last].to_vec())
                    }
                    // An empty band (too many mels for the FFT size); librosa warns, we just
                    // produce zeros for it.
                    None => (0, Vec::new()),
                }
            })
            .collect();
        Ok(Self {
            cfg,
            n_freq,
            weights,
            bands,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MelConfig {
        &self.cfg
    }

    /// `(n_mels, 1 + n_fft/2)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.cfg.n_mels, self.n_freq)
    }

    /// Dense weights, row-major `n_mels × n_freq` (librosa's matrix).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Project a `(1 + n_fft/2) × frames` power (or magnitude) spectrogram onto the mel
    /// bands: `weights @ spec` (`librosa.feature.melspectrogram(S=spec, ...)`).
    pub fn apply(&self, spec: &Spectrogram<f32>) -> Result<Spectrogram<f32>> {
        let mut out = Spectrogram::default();
        self.apply_into(spec, &mut out)?;
        Ok(out)
    }

    /// [`apply`](Self::apply) into a reused output buffer.
    pub fn apply_into(&self, spec: &Spectrogram<f32>, out: &mut Spectrogram<f32>) -> Result<()> {
        if spec.rows() != self.n_freq {
            return Err(invalid!(
                "spectrogram has {} frequency rows, the mel filterbank expects {} (n_fft={})",
                spec.rows(),
                self.n_freq,
                self.cfg.n_fft
            ));
        }
        let cols = spec.cols();
        out.reset(self.cfg.n_mels, cols, 0.0);
        // Row-by-row axpy over contiguous time series: vectorises, and only the nonzero bins
        // of each triangle are visited.
        for (m, (first, w)) in self.bands.iter().enumerate() {
            let dst = out.row_mut(m);
            for (k, &wk) in w.iter().enumerate() {
                let src = spec.row(first + k);
                for (d, s) in dst.iter_mut().zip(src) {
                    *d += wk * s;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mel_scale_roundtrips() {
        for htk in [false, true] {
            for hz in [0.0, 100.0, 999.0, 1000.0, 4000.0, 11025.0] {
                let back = mel_to_hz(hz_to_mel(hz, htk), htk);
                assert!((back - hz).abs() < 1e-9 * (1.0 + hz), "{hz} {htk}");
            }
        }
        // Slaney: 200/3 Hz per mel below 1 kHz.
        assert!((hz_to_mel(200.0, false) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn linspace_matches_numpy_rule() {
        assert_eq!(linspace(0.0, 1.0, 5), vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(linspace(2.0, 3.0, 1), vec![2.0]);
    }

    #[test]
    fn filters_are_triangles_with_slaney_area() {
        let fb = MelFilterbank::new(MelConfig::new(16_000, 512, 40)).unwrap();
        let (m, f) = fb.shape();
        assert_eq!((m, f), (40, 257));
        for i in 0..m {
            let row = &fb.weights()[i * f..(i + 1) * f];
            assert!(row.iter().all(|&w| w >= 0.0));
            assert!(row.iter().any(|&w| w > 0.0), "band {i} empty");
        }
        // With norm=None every triangle peaks at <= 1.
        let mut cfg = MelConfig::new(16_000, 512, 40);
        cfg.norm = MelNorm::None;
        let fb = MelFilterbank::new(cfg).unwrap();
        assert!(fb.weights().iter().all(|&w| w <= 1.0));
    }

    #[test]
    fn sparse_apply_equals_dense_product() {
        let fb = MelFilterbank::new(MelConfig::new(22_050, 256, 24)).unwrap();
        let (m, f) = fb.shape();
        let cols = 7;
        let data: Vec<f32> = (0..f * cols).map(|i| ((i * 31) % 17) as f32).collect();
        let spec = Spectrogram::from_vec(f, cols, data).unwrap();
        let out = fb.apply(&spec).unwrap();
        for i in 0..m {
            for t in 0..cols {
                let want: f64 = (0..f)
                    .map(|k| {
                        f64::from(fb.weights()[i * f + k]) * f64::from(*spec.get(k, t).unwrap())
                    })
                    .sum();
                let got = f64::from(*out.get(i, t).unwrap());
                assert!((got - want).abs() <= 1e-5 * (1.0 + want.abs()));
            }
        }
    }

    #[test]
    fn bad_config_and_shape() {
        assert!(MelFilterbank::new(MelConfig::new(0, 400, 80)).is_err());
        assert!(MelFilterbank::new(MelConfig::new(16_000, 0, 80)).is_err());
        assert!(MelFilterbank::new(MelConfig::new(16_000, 400, 0)).is_err());
        assert!(MelFilterbank::new(MelConfig::new(16_000, 400, usize::MAX)).is_err());
        assert!(MelFilterbank::new(MelConfig::new(16_000, 1 << 20, 1 << 10)).is_err());
        let mut cfg = MelConfig::new(16_000, 400, 80);
        cfg.fmin = 9000.0;
        assert!(MelFilterbank::new(cfg).is_err());
        cfg.fmin = f64::NAN;
        assert!(MelFilterbank::new(cfg).is_err());
        let fb = MelFilterbank::new(MelConfig::new(16_000, 400, 80)).unwrap();
        let wrong = Spectrogram::from_vec(200, 1, vec![0.0; 200]).unwrap();
        assert!(fb.apply(&wrong).is_err());
        // Too many mels for the resolution: empty bands produce zeros, no panic.
        let fb = MelFilterbank::new(MelConfig::new(16_000, 32, 64)).unwrap();
        let spec = Spectrogram::from_vec(17, 2, vec![1.0; 34]).unwrap();
        assert_eq!(fb.apply(&spec).unwrap().shape(), (64, 2));
    }
}
