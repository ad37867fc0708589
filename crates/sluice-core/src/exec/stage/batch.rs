//! `batch(size)`: stacks consecutive items into one (reading the rows itself from a columnar
//! source when it follows the source directly); and unbatch, which splits map_batches'
//! output batches back into rows.

use crate::collate::{collate_fields, collate_with, uncollate};
use crate::error::{Error, Result};
use crate::exec::item::{Chunk, Item, RowAt, RowsAt, Transform};
use crate::exec::resume::{push_outer, Cursor, Restart, StageResume};
use crate::op::SlotWriter;
use crate::plan::physical::ChainOp;
use crate::sample::Sample;
use crate::source::SourceRef;
use crate::value::{Tensor, TensorData, Value};

use super::chain::{apply_op, read_items};

/// Stacks `size` consecutive items into one; with `per_epoch`, a batch never spans two epochs.
pub(super) struct Batch {
    /// The source this batch reads its rows from (column by column), if it reads.
    pub(super) read: Option<SourceRef>,
    /// Its outputs go straight to the consumer: the source may hand over its own columns.
    pub(super) columns: bool,
    /// Fields that do not stack become lists ([`crate::collate::collate_with`]).
    pub(super) ragged: bool,
    /// The consumer takes the rows of a batch that reads one by one (see
    /// [`crate::plan::rows`]): each keeps its place, and a batch that fails to read is read
    /// again as rows.
    pub(super) rows: bool,
    pub(super) resume: StageResume,
    pub(super) size: usize,
    pub(super) drop_last: bool,
    pub(super) per_epoch: bool,
    pub(super) pad: Vec<(String, f64)>,
    /// Ops that write their output straight into the batch ([`crate::plan::slots`]).
    pub(super) slots: Vec<ChainOp>,
    /// The iteration seed, for the slot ops' contexts.
    pub(super) seed: u64,
    pub(super) pending: Vec<Item>,
    /// When per-item work follows: batches are numbered (per epoch with `per_epoch`) and a
    /// resume rebuilds the batch it stopped in from its first row.
    pub(super) numbering: Option<BatchNumbers>,
}

pub(super) struct BatchNumbers {
    pub(super) slot: usize,
    pub(super) epoch: Option<u64>,
    pub(super) count: u64,
}

impl Batch {
    fn flush(&mut self, out: &mut Vec<Chunk>, is_last: bool) -> Result<()> {
        if self.pending.is_empty() || (is_last && self.drop_last && self.pending.len() < self.size)
        {
            self.pending.clear();
            return Ok(());
        }
        let items = std::mem::take(&mut self.pending);
        self.pending = Vec::with_capacity(self.size.min(1 << 12));
        if let (true, Some(src)) = (self.rows, &self.read) {
            return read_rows(src, items, out);
        }
        let (first, last) = (&items[0], &items[items.len() - 1]);
        let mut batch = Item::at(first.epoch, first.index, first.source_index, last.cursor);
        batch.sub = first.sub;
        batch.outer = last.outer.clone();
        if let Some(n) = &mut self.numbering {
            // Numbered per epoch of the input's cursors, the epoch its restart record names
            // (after a batch numbered across epochs, not the rows' epoch), so a resume
            // continues the count it saved.
            let epoch = if self.per_epoch {
                first.cursor.epoch
            } else {
                0
            };
            if n.epoch != Some(epoch) {
                n.epoch = Some(epoch);
                n.count = 0;
            }
            batch.cursor = Cursor {
                epoch,
                pos: n.count,
                ord: 0,
            };
            batch.outer = push_outer(
                &first.outer,
                Restart {
                    slot: n.slot,
                    input: first.cursor,
                    input_index: 0,
                    counter: n.count,
                },
            );
            n.count += 1;
        }
        batch.rows = items.iter().map(|i| i.rows).sum();
        let rows = (first.epoch, first.index, last.index);
        batch.sample = self.stack(items).map_err(|e| match e {
            // Name the samples: the error itself names the field and rows in the batch.
            Error::Type(m) => Error::Type(format!(
                "{m} (the batch of samples {}..={} of epoch {})",
                rows.1, rows.2, rows.0
            )),
            other => other,
        })?;
        out.push(vec![batch]);
        Ok(())
    }
}

/// `items` read as one batch of the source's columns that keeps each row's place, or, when
/// that read fails, row by row: the rows before a bad one go out, then its error.
fn read_rows(src: &SourceRef, items: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
    let indices: Vec<u64> = items.iter().map(|it| it.source_index).collect();
    let Ok(sample) = src.get_columns(&indices) else {
        let (items, err) = read_items(src, items);
        out.push(items);
        return err.map_or(Ok(()), Err);
    };
    let (first, last) = (&items[0], &items[items.len() - 1]);
    let mut batch = Item::at(first.epoch, first.index, first.source_index, last.cursor);
    batch.outer = last.outer.clone();
    batch.rows = items.len() as u64;
    batch.sample = sample;
    let at = items.iter().map(|it| RowAt {
        cursor: it.cursor,
        epoch: it.epoch,
        index: it.index,
        source_index: it.source_index,
    });
    batch.rows_at = Some(Box::new(RowsAt(at.collect())));
    out.push(vec![batch]);
    Ok(())
}

impl Batch {
    /// The batch of `items`: read by the source as a whole when this batch reads, else (or
    /// when that fails, so the error names the sample) row by row, padded and collated. A
    /// ragged batch reads as a whole too: the whole read fails where a column does not stack,
    /// and where every column stacks, ragged and plain collating agree.
    fn stack(&self, items: Chunk) -> Result<Sample> {
        if let Some(src) = self.read.as_ref().filter(|_| self.pad.is_empty()) {
            let indices: Vec<u64> = items.iter().map(|it| it.source_index).collect();
            let whole = if self.columns {
                src.get_columns(&indices)
            } else {
                src.get_batch(&indices)
            };
            if let Ok(sample) = whole {
                return Ok(sample);
            }
        }
        let items = match &self.read {
            Some(src) => match read_items(src, items) {
                (items, None) => items,
                (_, Some(e)) => return Err(e),
            },
            None => items,
        };
        if !self.slots.is_empty() {
            return self.stack_into_slots(items);
        }
        let mut samples: Vec<Sample> = items.into_iter().map(|i| i.sample).collect();
        if !self.pad.is_empty() {
            crate::collate::pad_to_longest(&mut samples, &self.pad)?;
        }
        collate_with(&samples, self.ragged)
    }
}

impl Batch {
    /// `items` stacked, running the slot ops on the way: each writes its field's output
    /// straight into the batch when every sample's input has one output shape, and else
    /// runs on each sample first, as in its chain (so a bad input fails as it would there).
    fn stack_into_slots(&self, mut items: Chunk) -> Result<Sample> {
        let mut direct = Vec::new();
        for cop in &self.slots {
            let writer = cop.op.slot_writer();
            match writer.and_then(|w| Some((w, one_shape(w, &items)?))) {
                Some((writer, shape)) => direct.push((cop, writer, shape)),
                // Slot ops map and raise (`plan::slots`): one output per item, or the error.
                None => match apply_op(cop, self.seed, items) {
                    (_, Some(e), _) => return Err(e),
                    (out, None, _) => items = out,
                },
            }
        }
        let samples: Vec<Sample> = items
            .iter_mut()
            .map(|it| std::mem::take(&mut it.sample))
            .collect();
        collate_fields(&samples, self.ragged, |name, column| {
            let (cop, writer, shape) = direct.iter().find(|(_, w, _)| w.field() == name)?;
            let per: usize = shape.iter().product();
            let total = per * column.len();
            // Not zeroed first: the writers write every float. A buffer the consumer gave
            // back is already mapped: no page of it is zeroed again.
            let mut data: Vec<f32> = crate::recycle::take_f32(total);
            let slots = data.spare_capacity_mut()[..total].chunks_exact_mut(per.max(1));
            for ((v, out), it) in column.iter().zip(slots).zip(&items) {
                let cx = it.op_context(self.seed, cop.op_id);
                if let Err(e) = writer.write_slot(v, &cx, out) {
                    return Some(Err(it.failed_in(cop.op.name(), e)));
                }
            }
            // SAFETY: every slot's writer returned Ok, so wrote all of it (`SlotWriter`'s
            // contract), and the slots cover `total`.
            unsafe { data.set_len(total) };
            let full: Vec<usize> = std::iter::once(column.len())
                .chain(shape.iter().copied())
                .collect();
            Some(Tensor::new(full, TensorData::F32(data)).map(Value::Tensor))
        })
    }
}

/// The output shape `writer` gives every item's input, if they all have one and the same.
fn one_shape(writer: &dyn SlotWriter, items: &[Item]) -> Option<Vec<usize>> {
    let mut shapes = items
        .iter()
        .map(|it| writer.slot_shape(it.sample.get(writer.field())?));
    let first = shapes.next()??;
    shapes.all(|s| s.as_ref() == Some(&first)).then_some(first)
}

impl Transform for Batch {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        for it in chunk {
            if !self.resume.keep_input(&it.cursor) {
                continue;
            }
            if self.per_epoch && self.pending.first().is_some_and(|p| p.epoch != it.epoch) {
                self.flush(out, true)?;
            }
            self.pending.push(it);
            if self.pending.len() == self.size {
                self.flush(out, false)?;
            }
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Chunk>) -> Result<()> {
        self.flush(out, true)
    }
}

/// Splits map_batches' output batches back into rows: a row keeps its batch's position
/// and takes its index in the batch as ordinal, so a resume inside a batch recomputes the
/// whole batch (its function saw all of it) and drops the rows already delivered.
pub(super) struct Unbatch {
    pub(super) resume: StageResume,
}

impl Transform for Unbatch {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut rows_out = Vec::new();
        for it in chunk {
            let rows = match uncollate(it.sample) {
                Ok(rows) => rows,
                Err(e) => {
                    out.push(rows_out);
                    return Err(e);
                }
            };
            for (r, sample) in rows.into_iter().enumerate() {
                let cursor = Cursor {
                    ord: r as u64,
                    ..it.cursor
                };
                if !self.resume.keep_output(&cursor) {
                    continue;
                }
                let mut row = Item::at(it.epoch, it.index + r as u64, it.source_index, cursor);
                row.sub = it.sub;
                row.outer = it.outer.clone();
                row.sample = sample;
                rows_out.push(row);
            }
        }
        out.push(rows_out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::exec::resume::Skip;
    use crate::op::{Emit, OpContext};
    use crate::value::Value;

    fn item(epoch: u64, pos: u64, id: Value) -> Item {
        let mut it = Item::at(epoch, pos, pos, Cursor { epoch, pos, ord: 0 });
        it.sample.set("id", id);
        it
    }

    fn items(epoch: u64, pos: std::ops::Range<u64>) -> Chunk {
        pos.map(|p| item(epoch, p, Value::Int(p as i64))).collect()
    }

    fn batch(size: usize, drop_last: bool, numbered: bool) -> Batch {
        Batch {
            read: None,
            columns: false,
            ragged: false,
            rows: false,
            resume: StageResume::default(),
            size,
            drop_last,
            per_epoch: true,
            pad: vec![],
            slots: vec![],
            seed: 0,
            pending: Vec::new(),
            numbering: numbered.then_some(BatchNumbers {
                slot: 2,
                epoch: None,
                count: 0,
            }),
        }
    }

    fn run(t: &mut dyn Transform, chunks: Vec<Chunk>) -> Result<Chunk> {
        let mut out = Vec::new();
        for c in chunks {
            t.push(c, &mut out)?;
        }
        t.finish(&mut out)?;
        Ok(out.into_iter().flatten().collect())
    }

    fn ids(s: &Sample) -> Vec<i64> {
        crate::collate::uncollate(s.clone())
            .unwrap()
            .iter()
            .map(|r| r.get("id").unwrap().as_int().unwrap())
            .collect()
    }

    /// Replaces `id` by the float32 `[id / 2 + 100 * op_id + index]`: straight into the batch
    /// for ints, and by `apply` for ints and floats.
    #[derive(Debug)]
    struct Half;

    impl Half {
        fn value(x: f64, cx: &OpContext) -> f32 {
            (x / 2.0) as f32 + 100.0 * cx.op_id as f32 + cx.index as f32
        }
    }

    // SAFETY: writes its one element whenever it returns Ok.
    unsafe impl SlotWriter for Half {
        fn field(&self) -> &str {
            "id"
        }
        fn slot_shape(&self, input: &Value) -> Option<Vec<usize>> {
            matches!(input, Value::Int(_)).then(|| vec![1])
        }
        fn write_slot(
            &self,
            input: &Value,
            cx: &OpContext,
            out: &mut [std::mem::MaybeUninit<f32>],
        ) -> Result<()> {
            out[0].write(Half::value(input.as_int().unwrap_or(0) as f64, cx));
            Ok(())
        }
    }

    impl crate::op::Op for Half {
        fn name(&self) -> &str {
            "half"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": "half"})
        }
        fn meta(&self) -> crate::op::OpMeta {
            crate::op::OpMeta::opaque(false)
        }
        fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
            let x = match s.require("id", "half")? {
                Value::Int(i) => *i as f64,
                Value::Float(f) => *f,
                other => {
                    return Err(Error::type_error(format!(
                        "half takes numbers, got {}",
                        other.kind()
                    )))
                }
            };
            let t = Tensor::new(vec![1], TensorData::F32(vec![Half::value(x, cx)]))?;
            s.set("id", Value::Tensor(t));
            Ok(Emit::One(s))
        }
        fn slot_writer(&self) -> Option<&dyn SlotWriter> {
            Some(self)
        }
    }

    fn halves(batch: &Sample) -> Vec<f32> {
        match batch.get("id") {
            Some(Value::Tensor(t)) => match t.data() {
                TensorData::F32(v) => {
                    assert_eq!(t.shape(), [v.len(), 1]);
                    v.clone()
                }
                _ => panic!("not float32"),
            },
            _ => panic!("no tensor"),
        }
    }

    #[test]
    fn slot_ops_write_straight_into_the_batch_or_run_per_sample_when_inputs_differ() {
        let mut b = batch(3, false, false);
        b.slots = vec![ChainOp {
            op: std::sync::Arc::new(Half),
            mode: crate::plan::logical::ElemMode::Map,
            on_error: crate::plan::logical::OnError::Raise,
            op_id: 7,
        }];
        // Ints: written straight in. With a float among them: `apply` per sample, same values.
        let mut mixed = items(0, 3..6);
        mixed[1].sample.set("id", Value::Float(4.0));
        let out = run(&mut b, vec![items(0, 0..3), mixed]).unwrap();
        assert_eq!(halves(&out[0].sample), [700.0, 701.5, 703.0]);
        assert_eq!(halves(&out[1].sample), [704.5, 706.0, 707.5]);
        // A bad input fails as the op would in its chain: naming the op and the sample.
        let mut bad = items(1, 0..3);
        bad[2].sample.set("id", Value::from("x"));
        match run(&mut b, vec![bad]).unwrap_err() {
            Error::InSample { op, sample, source } => {
                assert_eq!((op.as_str(), sample.epoch, sample.index), ("half", 1, 2));
                assert!(source.to_string().contains("half takes numbers, got str"));
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn batches_stay_in_their_epoch_and_the_short_tail_is_kept_or_dropped() {
        let input = || vec![items(0, 0..3), items(1, 0..4)];
        let out = run(&mut batch(2, false, false), input()).unwrap();
        let got: Vec<Vec<i64>> = out.iter().map(|b| ids(&b.sample)).collect();
        assert_eq!(got, [vec![0, 1], vec![2], vec![0, 1], vec![2, 3]]);
        let rows: Vec<u64> = out.iter().map(|b| b.rows).collect();
        assert_eq!(rows, [2, 1, 2, 2]);
        // Unnumbered, a batch stands where its last row does.
        assert_eq!(
            out[1].cursor,
            Cursor {
                epoch: 0,
                pos: 2,
                ord: 0
            }
        );
        let dropped = run(&mut batch(2, true, false), input()).unwrap();
        assert_eq!(dropped.len(), 3, "epoch 0's short batch is dropped");
    }

    #[test]
    fn numbered_batches_record_their_first_row_to_replay_from() {
        let out = run(
            &mut batch(2, false, true),
            vec![items(0, 0..3), items(1, 0..2)],
        )
        .unwrap();
        let cursors: Vec<(u64, u64)> = out.iter().map(|b| (b.cursor.epoch, b.cursor.pos)).collect();
        assert_eq!(cursors, [(0, 0), (0, 1), (1, 0)], "numbered per epoch");
        let r = out[1].outer.as_deref().unwrap()[0];
        assert_eq!(
            r,
            Restart {
                slot: 2,
                input: Cursor {
                    epoch: 0,
                    pos: 2,
                    ord: 0
                },
                input_index: 0,
                counter: 1,
            }
        );
    }

    #[test]
    fn a_batch_that_does_not_stack_names_its_samples() {
        let chunk = vec![item(0, 0, Value::Int(1)), item(0, 1, Value::from("x"))];
        let err = run(&mut batch(2, false, false), vec![chunk]).unwrap_err();
        assert!(matches!(err, Error::Type(_)), "{err:?}");
        assert!(
            err.to_string().contains("samples 0..=1 of epoch 0"),
            "{err}"
        );
    }

    #[test]
    fn unbatch_gives_rows_their_batchs_position_and_drops_rows_delivered() {
        let mut b = run(&mut batch(3, false, true), vec![items(0, 4..7)]).unwrap();
        let mut unbatch = Unbatch {
            resume: StageResume::default(),
        };
        let rows = run(&mut unbatch, vec![b.clone()]).unwrap();
        let got: Vec<(u64, u64, u64)> = rows
            .iter()
            .map(|r| (r.cursor.pos, r.cursor.ord, r.index))
            .collect();
        assert_eq!(got, [(0, 0, 4), (0, 1, 5), (0, 2, 6)]);
        assert_eq!(rows[2].outer, b[0].outer, "restart records pass through");
        // Resuming after row 1 of the batch recomputes the batch and drops rows 0 and 1.
        let mut resumed = Unbatch {
            resume: StageResume {
                drop: Skip {
                    upto: Some(rows[1].cursor),
                    partial: vec![],
                },
                ..Default::default()
            },
        };
        let rest = run(&mut resumed, vec![std::mem::take(&mut b)]).unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].sample.get("id"), Some(&Value::Int(6)));
    }
}
