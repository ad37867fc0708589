//! A dense 2-D `rows × cols` array used for every spectrogram in the crate.

use crate::error::{invalid, Result};

/// A row-major `rows × cols` matrix; for spectrograms rows are frequency (or mel) bins and
/// columns are time frames, matching librosa's `(..., freq, time)` layout, so
/// `data[f * cols + t]` is bin `f` of frame `t`.
///
/// Freq-major storage keeps each bin's time series contiguous, which is what the mel
/// projection and the SpecAugment masks iterate over, and it converts to a numpy
/// `(freq, time)` array without a transpose.
///
/// ```
/// use sluice_audioproc::Spectrogram;
/// let s = Spectrogram::from_vec(2, 3, vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
/// assert_eq!(s.get(1, 0), Some(&4.0));
/// assert_eq!(s.row(0), &[1.0, 2.0, 3.0]);
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Spectrogram<T> {
    rows: usize,
    cols: usize,
    data: Vec<T>,
}

impl<T> Spectrogram<T> {
    /// Wrap `data` (row-major, `rows * cols` long) without copying.
    ///
    /// Errors with [`AudioError::InvalidArgument`](crate::AudioError::InvalidArgument) when the
    /// length does not match.
    pub fn from_vec(rows: usize, cols: usize, data: Vec<T>) -> Result<Self> {
        match rows.checked_mul(cols) {
            Some(n) if n == data.len() => Ok(Self { rows, cols, data }),
            _ => Err(invalid!(
                "spectrogram data has {} values, expected {rows} x {cols}",
                data.len()
            )),
        }
    }

    /// Number of rows (frequency or mel bins).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (time frames).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// `(rows, cols)`, the numpy shape of the array.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Element at `(row, col)`, `None` when out of range.
    pub fn get(&self, row: usize, col: usize) -> Option<&T> {
        if row < self.rows && col < self.cols {
            self.data.get(row * self.cols + col)
        } else {
            None
        }
    }

    /// One row (one bin over time). Panics if `row >= rows()`, like slice indexing.
    pub fn row(&self, row: usize) -> &[T] {
        &self.data[row * self.cols..(row + 1) * self.cols]
    }

    /// One row, mutably. Panics if `row >= rows()`, like slice indexing.
    pub fn row_mut(&mut self, row: usize) -> &mut [T] {
        &mut self.data[row * self.cols..(row + 1) * self.cols]
    }

    /// All values, row-major.
    pub fn as_slice(&self) -> &[T] {
        &self.data
    }

    /// All values, row-major, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        &mut self.data
    }

    /// Take the row-major buffer.
    pub fn into_vec(self) -> Vec<T> {
        self.data
    }

    /// Reshape in place to `rows × cols`, reusing the allocation; new values are `fill`.
    /// Used by the `*_into` kernels so a worker can recycle its output buffers.
    pub(crate) fn reset(&mut self, rows: usize, cols: usize, fill: T)
    where
        T: Clone,
    {
        self.rows = rows;
        self.cols = cols;
        self.data.clear();
        self.data.resize(rows * cols, fill);
    }
}

impl<T: Copy> Spectrogram<T> {
    /// Apply `f` to every value, producing a new spectrogram of the same shape.
    pub fn map<U>(&self, f: impl FnMut(T) -> U) -> Spectrogram<U> {
        Spectrogram {
            rows: self.rows,
            cols: self.cols,
            data: self.data.iter().copied().map(f).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vec_checks_length() {
        assert!(Spectrogram::from_vec(2, 2, vec![0.0f32; 3]).is_err());
        assert!(Spectrogram::from_vec(usize::MAX, 2, vec![0.0f32; 3]).is_err());
        let s = Spectrogram::from_vec(0, 5, Vec::<f32>::new()).unwrap();
        assert!(s.is_empty());
    }

    #[test]
    fn indexing_is_row_major() {
        let mut s = Spectrogram::from_vec(2, 3, (0..6).collect::<Vec<i32>>()).unwrap();
        assert_eq!(s.get(1, 2), Some(&5));
        assert_eq!(s.get(2, 0), None);
        assert_eq!(s.get(0, 3), None);
        s.row_mut(1)[0] = 42;
        assert_eq!(s.as_slice(), &[0, 1, 2, 42, 4, 5]);
        assert_eq!(s.map(|v| v * 2).row(0), &[0, 2, 4]);
        s.reset(1, 2, 7);
        assert_eq!(s.shape(), (1, 2));
        assert_eq!(s.into_vec(), vec![7, 7]);
    }
}
