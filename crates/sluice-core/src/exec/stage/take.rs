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
