//! The [`Image`] container.

use crate::error::{invalid, Result};

/// An 8-bit image stored row-major, interleaved (HWC): the sample of row `y`,
/// column `x`, channel `c` is `data[(y * width + x) * channels + c]`.
///
/// `channels` is 1 (gray, Pillow mode "L") or 3 (RGB). The fields are public
/// so callers can move buffers in and out without copies; functions in this
/// crate check `data.len() == height * width * channels` and return
/// [`crate::ImageError::InvalidArgument`] rather than trusting it.
///
/// ```
/// use sluice_imgproc::Image;
/// let img = Image::new(2, 3, 3, vec![0u8; 2 * 3 * 3]).unwrap();
/// assert_eq!(img.pixel(1, 2), &[0, 0, 0]);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
    /// Samples per pixel: 1 or 3.
    pub channels: usize,
    /// `height * width * channels` bytes, HWC.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The pixel buffer is deliberately left out: it is huge and useless in logs.
        f.debug_struct("Image")
            .field("height", &self.height)
            .field("width", &self.width)
            .field("channels", &self.channels)
            .field("len", &self.data.len())
            .finish()
    }
}

impl Image {
    /// Wraps a buffer, checking the channel count and the length.
    pub fn new(height: usize, width: usize, channels: usize, data: Vec<u8>) -> Result<Image> {
        let img = Image {
            height,
            width,
            channels,
            data,
        };
        img.validate()?;
        Ok(img)
    }

    /// An all-zero image.
    pub fn zeros(height: usize, width: usize, channels: usize) -> Result<Image> {
        let len = checked_len(height, width, channels)?;
        Image::new(height, width, channels, vec![0; len])
    }

    /// Checks that `channels` is 1 or 3 and that `data` has exactly
    /// `height * width * channels` bytes.
    pub fn validate(&self) -> Result<()> {
        if self.channels != 1 && self.channels != 3 {
            return invalid(format!("channels must be 1 or 3, got {}", self.channels));
        }
        let len = checked_len(self.height, self.width, self.channels)?;
        if self.data.len() != len {
            return invalid(format!(
                "buffer has {} bytes, {}x{}x{} needs {}",
                self.data.len(),
                self.height,
                self.width,
                self.channels,
                len
            ));
        }
        Ok(())
    }

    /// Number of pixels (`height * width`).
    pub fn pixels(&self) -> usize {
        self.height * self.width
    }

    /// The samples of one pixel. Panics if `y`/`x` are out of range, like
    /// slice indexing; meant for tests and debugging, not hot loops.
    pub fn pixel(&self, y: usize, x: usize) -> &[u8] {
        let i = (y * self.width + x) * self.channels;
        &self.data[i..i + self.channels]
    }

    /// Bytes per row.
    pub fn stride(&self) -> usize {
        self.width * self.channels
    }
}

pub(crate) fn checked_len(height: usize, width: usize, channels: usize) -> Result<usize> {
    height
        .checked_mul(width)
        .and_then(|p| p.checked_mul(channels))
        .map_or_else(|| invalid("image size overflows usize"), Ok)
}
