//! `audio.time_mask` and `audio.freq_mask`: SpecAugment masks (torchaudio's `TimeMasking` /
//! `FrequencyMasking`), one op type for the two axes.

use sluice_audioproc as ap;
use sluice_core::{Emit, Error, Op, OpContext, OpKind, OpMeta, Result, Sample};

use super::plumbing::{meta, put, spec_dims, take_f32, wrong_spec, Base};
use super::AudioSpec;

#[derive(Debug)]
pub(super) struct Mask {
    base: Base,
    max_width: usize,
    fill: f32,
    /// Time (columns) or frequency (rows).
    time: bool,
}

impl Mask {
    /// The op of an `audio.time_mask` or `audio.freq_mask` spec, its arguments checked.
    pub(super) fn build(base: Base) -> Result<Self> {
        let (AudioSpec::TimeMask {
            max_width, fill, ..
        }
        | AudioSpec::FreqMask {
            max_width, fill, ..
        }) = base.spec
        else {
            return Err(wrong_spec(&base));
        };
        let max_width =
            max_width.ok_or_else(|| Error::invalid("max_width (in frames or bins) is required"))?;
        if !fill.is_finite() {
            return Err(Error::invalid(format!("fill must be finite, got {fill}")));
        }
        let time = matches!(base.spec, AudioSpec::TimeMask { .. });
        Ok(Mask {
            base,
            max_width,
            fill,
            time,
        })
    }
}

impl Op for Mask {
    op_common!();
    fn meta(&self) -> OpMeta {
        meta(
            vec![&self.base.field],
            vec![&self.base.out],
            OpKind::PixelWise,
            true,
        )
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        let (field, out) = (&self.base.field, &self.base.out);
        let (shape, mut data) = take_f32(&mut s, field, out, self.base.name)?;
        let (_, rows, cols) = spec_dims(&shape, field)?;
        let mut rng = cx.rng();
        let size = if self.time { cols } else { rows };
        // One draw pair per sample (torchaudio's iid_masks=False): every channel gets the
        // same mask, and the random stream never depends on the data.
        let r = ap::mask_range(size, self.max_width, &mut || rng.uniform());
        if !r.is_empty() && rows * cols > 0 {
            for plane in data.chunks_exact_mut(rows * cols) {
                if self.time {
                    for row in plane.chunks_exact_mut(cols) {
                        row[r.clone()].fill(self.fill);
                    }
                } else {
                    plane[r.start * cols..r.end * cols].fill(self.fill);
                }
            }
        }
        put(&mut s, out, shape, data)?;
        Ok(Emit::One(s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_util::{op, spec_sample, tensor};
    use crate::testing::{cx, one};

    #[test]
    fn masks_are_deterministic_per_seed_and_index_and_bounded() {
        let tm = op(json!({"op": "audio.time_mask", "max_width": 7}));
        let fm = op(json!({"op": "audio.freq_mask", "max_width": 5}));
        let mut widths = std::collections::BTreeSet::new();
        for index in 0..200 {
            let s = one(tm.apply(spec_sample(10, 50), &cx(9, index)).unwrap());
            assert_eq!(
                s,
                one(tm.apply(spec_sample(10, 50), &cx(9, index)).unwrap())
            );
            let (shape, d) = tensor(&s, "spec");
            assert_eq!(shape, &[10, 50]);
            let zero_cols: Vec<usize> = (0..50).filter(|&c| d[c] == 0.0).collect();
            for r in 0..10 {
                for c in 0..50 {
                    assert_eq!(d[r * 50 + c] == 0.0, zero_cols.contains(&c));
                }
            }
            assert!(zero_cols.len() < 7);
            if let (Some(a), Some(b)) = (zero_cols.first(), zero_cols.last()) {
                assert_eq!(b - a + 1, zero_cols.len(), "contiguous");
            }
            widths.insert(zero_cols.len());

            let s = one(fm.apply(spec_sample(10, 50), &cx(9, index)).unwrap());
            let (_, d) = tensor(&s, "spec");
            let zero_rows = (0..10).filter(|&r| d[r * 50] == 0.0).count();
            assert!(zero_rows < 5);
            assert_eq!(d.iter().filter(|v| **v == 0.0).count(), zero_rows * 50);
        }
        assert!(widths.len() >= 6, "widths vary: {widths:?}");
        // Different seeds give different masks somewhere.
        let differs = (0..20).any(|i| {
            tm.apply(spec_sample(10, 50), &cx(1, i)).unwrap()
                != tm.apply(spec_sample(10, 50), &cx(2, i)).unwrap()
        });
        assert!(differs);
    }

    #[test]
    fn masks_are_random_and_need_a_width() {
        let m = op(json!({"op": "audio.time_mask", "max_width": 3})).meta();
        assert!(m.random && m.writes == ["spec"]);
        for v in [
            json!({"op": "audio.time_mask"}),
            json!({"op": "audio.freq_mask"}),
        ] {
            let spec: crate::OpSpec = serde_json::from_value(v.clone()).unwrap();
            let e = spec.build().unwrap_err().to_string();
            assert!(
                e.contains("max_width (in frames or bins) is required"),
                "{v}: {e}"
            );
        }
    }
}
