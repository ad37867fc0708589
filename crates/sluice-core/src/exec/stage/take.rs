//! `take(n)`: the first `n` items.

use crate::error::Result;
use crate::exec::item::{Chunk, Transform};
use crate::exec::resume::{push_outer, Cursor, Restart, StageResume};

/// The first `n` items. It re-sequences (outputs are numbered 0..n) so a resume knows how many
/// were taken; each output records its input cursor to replay from.
pub(super) struct Take {
    pub(super) slot: usize,
    pub(super) resume: StageResume,
    pub(super) left: u64,
    pub(super) taken: u64,
}

impl Transform for Take {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut kept = Vec::with_capacity(chunk.len().min(self.left as usize));
        for mut it in chunk {
            if self.left == 0 {
                break;
            }
            if !self.resume.keep_input(&it.cursor) {
                continue;
            }
            let t = self.taken;
            self.taken += 1;
            self.left -= 1;
            it.outer = push_outer(
                &it.outer,
                Restart {
                    slot: self.slot,
                    input: it.cursor,
                    input_index: t,
                    counter: t,
                },
            );
            it.cursor = Cursor {
                epoch: 0,
                pos: t,
                ord: 0,
            };
            if self.resume.keep_output(&it.cursor) {
                kept.push(it);
            }
        }
        out.push(kept);
        Ok(())
    }
    fn exhausted(&self) -> bool {
        self.left == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::item::Item;

    fn items(epoch: u64, pos: std::ops::Range<u64>) -> Chunk {
        pos.map(|p| {
            let cursor = Cursor {
                epoch,
                pos: p,
                ord: 0,
            };
            Item::at(epoch, p, p, cursor)
        })
        .collect()
    }

    fn take(n: u64, resume: StageResume) -> Take {
        Take {
            slot: 3,
            left: n.saturating_sub(resume.counter),
            taken: resume.counter,
            resume,
        }
    }

    fn run(t: &mut Take, chunks: Vec<Chunk>) -> Chunk {
        let mut out = Vec::new();
        for c in chunks {
            if t.exhausted() {
                break;
            }
            t.push(c, &mut out).unwrap();
        }
        out.into_iter().flatten().collect()
    }

    #[test]
    fn numbers_its_outputs_across_epochs_and_records_where_to_replay() {
        let mut t = take(5, StageResume::default());
        let out = run(&mut t, vec![items(0, 0..3), items(1, 0..3), items(2, 0..3)]);
        assert!(t.exhausted());
        let cursors: Vec<(u64, u64)> = out.iter().map(|i| (i.cursor.epoch, i.cursor.pos)).collect();
        assert_eq!(cursors, [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4)]);
        // Output 4 is input (epoch 1, pos 1), the fifth taken.
        let r = out[4].outer.as_deref().unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(
            r[0],
            Restart {
                slot: 3,
                input: Cursor {
                    epoch: 1,
                    pos: 1,
                    ord: 0
                },
                input_index: 4,
                counter: 4,
            }
        );
        assert_eq!(
            (out[4].epoch, out[4].index),
            (1, 1),
            "randomness coordinates kept"
        );
    }

    #[test]
    fn a_resume_replays_from_the_record_and_drops_what_was_delivered() {
        let full = run(&mut take(5, StageResume::default()), vec![items(0, 0..10)]);
        // Delivered up to output 2: restart at its record, drop it and what precedes it.
        let resume = StageResume::after(full[2].cursor, &full[2].outer);
        let mut again = take(5, resume);
        let rest = run(&mut again, vec![items(0, 0..10)]);
        let pos: Vec<u64> = rest.iter().map(|i| i.cursor.pos).collect();
        assert_eq!(pos, [3, 4]);
        assert_eq!(rest[0].index, full[3].index);
        assert!(again.exhausted());
    }
}
