//! `pack(length)`: GPT-style packing. A 1-D integer field of consecutive samples is
//! concatenated (with a separator token after each sample, if set) and cut into blocks of
//! exactly `length` tokens; each block has `attention_mask` (1 for tokens, 0 for padding) and
//! `segment_ids` (1, 2, … for the samples a block holds, 0 for padding), so a model can keep
//! attention within documents. Packing restarts every epoch; an epoch's last, short block is
//! dropped or padded.
//!
//! It re-sequences: blocks are numbered per epoch, and each records where it starts — the
//! sample and the token offset in it — so a resume replays from that sample and skips the
//! offset, holding no tokens in the checkpoint.

use crate::error::{Error, Result};
use crate::plan::logical::PackSpec;
use crate::sample::Sample;
use crate::value::{Tensor, TensorData, Value};

use crate::exec::item::{Chunk, Item, Transform};
use crate::exec::resume::{push_outer, Cursor, Restart, StageResume};

pub(crate) struct Pack {
    spec: PackSpec,
    slot: usize,
    resume: StageResume,
    epoch: Option<u64>,
    /// Blocks made this epoch.
    blocks: u64,
    /// The block being filled: tokens, segment ids, and where it started.
    tokens: Vec<i64>,
    segments: Vec<i64>,
    segment: i64,
    start: Option<(Item, u64)>,
    /// Tokens of the first sample to skip (a resume that starts inside it).
    skip_tokens: u64,
}

impl Pack {
    pub(crate) fn new(spec: PackSpec, slot: usize, resume: StageResume) -> Self {
        let (epoch, blocks, skip) = (resume.epoch, resume.counter, resume.input_index);
        Pack {
            tokens: Vec::with_capacity(spec.length),
            segments: Vec::with_capacity(spec.length),
            spec,
            slot,
            resume,
            epoch,
            blocks,
            segment: 0,
            start: None,
            skip_tokens: if epoch.is_some() { skip } else { 0 },
        }
    }

    /// The sample's tokens (an integer tensor or list), with the separator appended.
    fn tokens_of(&self, it: &Item) -> Result<Vec<i64>> {
        let v = it.sample.require(&self.spec.field, "pack")?;
        let mut out: Vec<i64> = match v {
            Value::Tensor(t) if t.shape().len() <= 1 => match t.data() {
                TensorData::I64(x) => x.clone(),
                TensorData::I32(x) => x.iter().map(|&v| v as i64).collect(),
                TensorData::U32(x) => x.iter().map(|&v| v as i64).collect(),
                TensorData::U16(x) => x.iter().map(|&v| v as i64).collect(),
                TensorData::U8(x) => x.iter().map(|&v| v as i64).collect(),
                other => {
                    return Err(Error::type_error(format!(
                        "pack: field '{}' must hold integers, got {}",
                        self.spec.field,
                        other.dtype().name()
                    )))
                }
            },
            Value::List(xs) => xs
                .iter()
                .map(|x| {
                    x.as_int().ok_or_else(|| {
                        Error::type_error(format!(
                            "pack: field '{}' must hold integers",
                            self.spec.field
                        ))
                    })
                })
                .collect::<Result<_>>()?,
            other => {
                return Err(Error::type_error(format!(
                    "pack: field '{}' must be a 1-D integer array or list, got {}",
                    self.spec.field,
                    other.kind()
                )))
            }
        };
        out.extend(self.spec.separator);
        Ok(out)
    }

    fn emit(&mut self, out: &mut Vec<Item>, pad: bool) -> Result<()> {
        let Some((first, offset)) = self.start.take() else {
            return Ok(());
        };
        let n = self.tokens.len();
        if n < self.spec.length && !pad {
            self.tokens.clear();
            self.segments.clear();
            return Ok(());
        }
        let mut mask = vec![1i64; n];
        self.tokens.resize(self.spec.length, self.spec.pad_id);
        self.segments.resize(self.spec.length, 0);
        mask.resize(self.spec.length, 0);
        let len = self.spec.length;
        let mut s = Sample::with_capacity(3);
        let tensor = |v: Vec<i64>| Tensor::new(vec![len], TensorData::I64(v)).map(Value::Tensor);
        s.set(
            self.spec.field.as_str(),
            tensor(std::mem::replace(&mut self.tokens, Vec::with_capacity(len)))?,
        );
        s.set("attention_mask", tensor(mask)?);
        s.set(
            "segment_ids",
            tensor(std::mem::replace(
                &mut self.segments,
                Vec::with_capacity(len),
            ))?,
        );
        let cursor = Cursor {
            epoch: first.cursor.epoch,
            pos: self.blocks,
            ord: 0,
        };
        let outer = push_outer(
            &first.outer,
            Restart {
                slot: self.slot,
                input: first.cursor,
                input_index: offset,
                counter: self.blocks,
            },
        );
        self.blocks += 1;
        self.segment = 0;
        if self.resume.keep_output(&cursor) {
            let mut block = Item::at(first.epoch, first.index, first.source_index, cursor);
            block.sub = first.sub;
            block.outer = outer;
            block.sample = s;
            out.push(block);
        }
        Ok(())
    }
}

impl Transform for Pack {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut blocks = Vec::new();
        for mut it in chunk {
            if !self.resume.keep_input(&it.cursor) {
                continue;
            }
            // Blocks are counted per epoch of the input's cursors, the epoch a resume's
            // restart record names: after a batch numbered across epochs that is one epoch,
            // though the items' own (randomness) epochs change.
            if self.epoch != Some(it.cursor.epoch) {
                if self.epoch.is_some() {
                    self.emit(&mut blocks, !self.spec.drop_remainder)?;
                }
                self.epoch = Some(it.cursor.epoch);
                self.blocks = 0;
            }
            let tokens = self.tokens_of(&it).map_err(|e| it.failed_in("pack", e))?;
            let skip = std::mem::take(&mut self.skip_tokens) as usize;
            let mut at = skip.min(tokens.len());
            it.sample = Sample::new();
            // A sample with no tokens (empty, no separator) is no segment.
            if at < tokens.len() {
                self.segment += 1;
            }
            while at < tokens.len() {
                if self.start.is_none() {
                    self.start = Some((it.clone(), at as u64));
                }
                let take = (self.spec.length - self.tokens.len()).min(tokens.len() - at);
                self.tokens.extend_from_slice(&tokens[at..at + take]);
                self.segments
                    .extend(std::iter::repeat_n(self.segment, take));
                at += take;
                if self.tokens.len() == self.spec.length {
                    self.emit(&mut blocks, false)?;
                    if at < tokens.len() {
                        // The rest of this sample opens the next block as its first segment.
                        self.segment = 1;
                    }
                }
            }
        }
        out.push(blocks);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Chunk>) -> Result<()> {
        let mut blocks = Vec::new();
        self.emit(&mut blocks, !self.spec.drop_remainder)?;
        out.push(blocks);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(i: u64, tokens: Vec<i64>) -> Item {
        let mut it = Item::at(
            0,
            i,
            i,
            Cursor {
                epoch: 0,
                pos: i,
                ord: 0,
            },
        );
        let n = tokens.len();
        it.sample.set(
            "ids",
            Value::Tensor(Tensor::new(vec![n], TensorData::I64(tokens)).unwrap()),
        );
        it
    }

    fn spec(length: usize, drop_remainder: bool) -> PackSpec {
        PackSpec {
            length,
            field: "ids".into(),
            separator: Some(0),
            drop_remainder,
            pad_id: -1,
        }
    }

    fn ints(s: &Sample, f: &str) -> Vec<i64> {
        match s.get(f) {
            Some(Value::Tensor(t)) => match t.data() {
                TensorData::I64(v) => v.clone(),
                _ => panic!(),
            },
            other => panic!("{other:?}"),
        }
    }

    fn run(p: &mut Pack, items: Vec<Item>) -> Vec<Item> {
        let mut out = vec![];
        p.push(items, &mut out).unwrap();
        p.finish(&mut out).unwrap();
        out.into_iter().flatten().collect()
    }

    #[test]
    fn concatenates_with_separators_and_cuts_blocks() {
        let mut p = Pack::new(spec(4, false), 1, StageResume::default());
        let out = run(
            &mut p,
            vec![
                item(0, vec![1, 2, 3]),
                item(1, vec![4, 5]),
                item(2, vec![6]),
            ],
        );
        // 1 2 3 0 | 4 5 0 6 | 0 pad pad pad
        let blocks: Vec<Vec<i64>> = out.iter().map(|b| ints(&b.sample, "ids")).collect();
        assert_eq!(
            blocks,
            [vec![1, 2, 3, 0], vec![4, 5, 0, 6], vec![0, -1, -1, -1]]
        );
        assert_eq!(ints(&out[1].sample, "segment_ids"), [1, 1, 1, 2]);
        assert_eq!(ints(&out[2].sample, "attention_mask"), [1, 0, 0, 0]);
        assert_eq!(ints(&out[2].sample, "segment_ids"), [1, 0, 0, 0]);
        // Each block records where it starts: sample 2's second token (offset 1) for block 2.
        let r = out[2].outer.as_deref().unwrap()[0];
        assert_eq!((r.input.pos, r.input_index, r.counter), (2, 1, 2));
        assert_eq!(out[2].cursor.pos, 2);
    }

    #[test]
    fn drops_the_short_tail_and_resumes_inside_a_sample() {
        let mut p = Pack::new(spec(4, true), 1, StageResume::default());
        let items = || vec![item(0, vec![1, 2, 3, 4, 5, 6, 7]), item(1, vec![8, 9])];
        let full = run(&mut p, items());
        assert_eq!(
            full.len(),
            2,
            "1..7 0 8 9 0 = 11 tokens: 2 blocks, tail dropped"
        );
        // Resume at block 1, which starts at token 4 of sample 0.
        let r = full[1].outer.as_deref().unwrap()[0];
        let resume = StageResume {
            drop_before: Some(r.input),
            epoch: Some(0),
            input_index: r.input_index,
            counter: r.counter,
            ..Default::default()
        };
        let mut again = Pack::new(spec(4, true), 1, resume);
        let rest = run(&mut again, items());
        assert_eq!(rest.len(), 1);
        assert_eq!(ints(&rest[0].sample, "ids"), ints(&full[1].sample, "ids"));
        assert_eq!(rest[0].cursor, full[1].cursor);
    }

    /// Without a separator an empty sample adds no tokens, so it takes no segment id.
    #[test]
    fn empty_samples_take_no_segment_id() {
        let no_sep = PackSpec {
            separator: None,
            pad_id: 0,
            ..spec(4, false)
        };
        let mut p = Pack::new(no_sep, 1, StageResume::default());
        let out = run(
            &mut p,
            vec![item(0, vec![1, 2]), item(1, vec![]), item(2, vec![3])],
        );
        assert_eq!(out.len(), 1);
        assert_eq!(ints(&out[0].sample, "ids"), [1, 2, 3, 0]);
        assert_eq!(ints(&out[0].sample, "segment_ids"), [1, 1, 2, 0]);
    }

    #[test]
    fn rejects_non_integer_fields() {
        let mut p = Pack::new(spec(4, true), 1, StageResume::default());
        let mut it = item(0, vec![]);
        it.sample.set("ids", Value::from("text"));
        let mut out = vec![];
        let err = p.push(vec![it], &mut out).unwrap_err().to_string();
        assert!(err.contains("1-D integer"), "{err}");
    }
}
