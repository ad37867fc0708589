//! `shuffle_buffer(size)`: a bounded-memory shuffle for streams whose order is a pure function
//! of (seed, epoch, position), so a checkpoint holds a position — never buffer contents.
//!
//! Two passes of window permutations. Pass A permutes each window of `w = size / 2`
//! consecutive inputs; pass B permutes windows of A's output offset by `w / 2`, so items mix
//! across A's window boundaries. Each window's permutation is a Feistel permutation keyed by
//! (seed, epoch, op, pass, window); the last, partial windows of an epoch use their own
//! length. At most `size` items are held (an A window and a B window), and an item moves at
//! most about `size` positions — the locality of tf.data's buffer shuffle, without its
//! unsaveable state (Grain's window shuffle makes the same trade).
//!
//! Resuming an output `p`: B rebuilds the window holding `p` from A's outputs starting at that
//! window's start `sB`; A rebuilds from the start of the A window holding `sB`. Every output
//! records that A-window start (its input cursor and index) and `sB` in a [`Restart`].

use crate::error::Result;
use crate::order::Permutation;
use crate::rng::combine;

use crate::exec::item::{Chunk, Item, Transform};
use crate::exec::resume::{push_outer, Cursor, Outer, Restart, StageResume};

/// Where an A window started: what a restart replays from (with the restart records of the
/// stages before, which replay up to that input).
#[derive(Debug, Clone)]
struct WindowStart {
    input: Cursor,
    input_index: u64,
    outer: Outer,
}

pub(crate) struct WindowShuffle {
    w: u64,
    seed: u64,
    op_id: u64,
    slot: usize,
    resume: StageResume,
    /// The data epoch of the input's cursor epoch 0 (the iteration's, see
    /// [`crate::order::first_epoch`]): windows are keyed by `first_epoch + epoch`.
    first_epoch: u64,
    epoch: Option<u64>,
    /// Inputs received this epoch (after resume drops).
    inputs: u64,
    /// A's current window: its start and its items in arrival order.
    a_start: Option<WindowStart>,
    a_buf: Vec<Item>,
    a_window: u64,
    /// A outputs produced this epoch (= position in A's output order).
    a_out: u64,
    /// B's current window: items in A-output order, each with the A window start it came
    /// from; and the B window's first A-output position.
    b_buf: Vec<(Item, WindowStart)>,
    b_start: u64,
    b_window: u64,
    /// A outputs before this position are replayed only to rebuild A and are not kept.
    skip_a_before: u64,
}

impl WindowShuffle {
    pub(crate) fn new(
        size: usize,
        seed: u64,
        op_id: u64,
        slot: usize,
        resume: StageResume,
    ) -> Self {
        let w = (size as u64 / 2).max(1);
        let (epoch, input_index, counter) = (resume.epoch, resume.input_index, resume.counter);
        let mut s = WindowShuffle {
            w,
            seed,
            op_id,
            slot,
            resume,
            first_epoch: 0,
            epoch: None,
            inputs: 0,
            a_start: None,
            // The window is the user's size (it may exceed the data): reserve a bounded part.
            a_buf: Vec::with_capacity(w.min(1 << 12) as usize),
            a_window: 0,
            a_out: 0,
            b_buf: Vec::with_capacity(w.min(1 << 12) as usize),
            b_start: 0,
            b_window: 0,
            skip_a_before: 0,
        };
        if let Some(e) = epoch {
            // Continue the epoch mid-way: A at the window the restart replays from, B at the
            // window holding the first output to make again.
            s.epoch = Some(e);
            s.inputs = input_index;
            s.a_window = input_index / w;
            s.a_out = input_index;
            s.b_window = s.b_window_of(counter);
            s.b_start = s.b_window_start(s.b_window);
            s.skip_a_before = s.b_start;
        }
        s
    }

    /// Keyed as the epochs of an iteration that starts at data epoch `first_epoch`.
    pub(crate) fn with_first_epoch(mut self, first_epoch: u64) -> Self {
        self.first_epoch = first_epoch;
        self
    }

    /// B windows: [0, w/2), then every `w` from there (aligned with A's when w = 1).
    fn b_window_of(&self, pos: u64) -> u64 {
        let half = self.w / 2;
        match half {
            0 => pos / self.w,
            _ if pos < half => 0,
            _ => (pos - half) / self.w + 1,
        }
    }
    fn b_window_start(&self, b: u64) -> u64 {
        let half = self.w / 2;
        match (half, b) {
            (0, _) => b * self.w,
            (_, 0) => 0,
            _ => half + (b - 1) * self.w,
        }
    }
    fn b_window_len(&self, b: u64) -> u64 {
        let half = self.w / 2;
        if half > 0 && b == 0 {
            half
        } else {
            self.w
        }
    }

    fn key(&self, epoch: u64, pass: u64, window: u64) -> u64 {
        combine(
            combine(
                combine(
                    combine(self.seed, self.first_epoch.wrapping_add(epoch)),
                    self.op_id,
                ),
                pass,
            ),
            window,
        )
    }

    fn reset_epoch(&mut self, epoch: u64) {
        self.epoch = Some(epoch);
        self.inputs = 0;
        self.a_start = None;
        self.a_buf.clear();
        self.a_window = 0;
        self.a_out = 0;
        self.b_buf.clear();
        self.b_start = 0;
        self.b_window = 0;
        self.skip_a_before = 0;
    }

    /// Emits A's window (permuted) into B.
    fn flush_a(&mut self, out: &mut Vec<Item>) {
        if self.a_buf.is_empty() {
            return;
        }
        let epoch = self.epoch.unwrap_or(0);
        let start = self.a_start.take().expect("an A window has a start");
        let n = self.a_buf.len() as u64;
        let perm = Permutation::new(n, self.key(epoch, 0, self.a_window));
        let mut slots: Vec<Option<Item>> = self.a_buf.drain(..).map(Some).collect();
        for k in 0..n {
            let it = slots[perm.apply(k) as usize].take().expect("a permutation");
            let pos = self.a_out;
            self.a_out += 1;
            if pos < self.skip_a_before {
                continue;
            }
            self.b_buf.push((it, start.clone()));
            if self.b_buf.len() as u64 == self.b_window_len(self.b_window) {
                self.flush_b(out);
            }
        }
        self.a_window += 1;
    }

    /// Emits B's window (permuted) as outputs.
    fn flush_b(&mut self, out: &mut Vec<Item>) {
        if self.b_buf.is_empty() {
            return;
        }
        let epoch = self.epoch.unwrap_or(0);
        let n = self.b_buf.len() as u64;
        let perm = Permutation::new(n, self.key(epoch, 1, self.b_window));
        // The restart for every output of this B window: rebuild A from the window holding
        // B's first item, then B from its start.
        let a_start = &self.b_buf[0].1;
        let outer = push_outer(
            &a_start.outer,
            Restart {
                slot: self.slot,
                input: a_start.input,
                input_index: a_start.input_index,
                counter: self.b_start,
            },
        );
        let mut slots: Vec<Option<Item>> = self.b_buf.drain(..).map(|(it, _)| Some(it)).collect();
        for k in 0..n {
            let mut it = slots[perm.apply(k) as usize].take().expect("a permutation");
            it.cursor = Cursor {
                epoch,
                pos: self.b_start + k,
                ord: 0,
            };
            if !self.resume.keep_output(&it.cursor) {
                continue;
            }
            it.outer = outer.clone();
            out.push(it);
        }
        self.b_start += n;
        self.b_window += 1;
    }
}

impl Transform for WindowShuffle {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut emitted = Vec::with_capacity(chunk.len());
        for it in chunk {
            if !self.resume.keep_input(&it.cursor) {
                continue;
            }
            // Windows restart with each epoch of the input's cursors — the epoch the restart
            // record names. After a stage that numbers across source epochs (`take`, a
            // `batch` after `repeat`) that is one epoch, not the rows' epochs.
            if self.epoch != Some(it.cursor.epoch) {
                if self.epoch.is_some() {
                    self.flush_a(&mut emitted);
                    self.flush_b(&mut emitted);
                }
                self.reset_epoch(it.cursor.epoch);
            }
            if self.a_buf.is_empty() {
                self.a_start = Some(WindowStart {
                    input: it.cursor,
                    input_index: self.inputs,
                    outer: it.outer.clone(),
                });
            }
            self.inputs += 1;
            self.a_buf.push(it);
            if self.a_buf.len() as u64 == self.w {
                self.flush_a(&mut emitted);
            }
        }
        out.push(emitted);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Chunk>) -> Result<()> {
        let mut rest = Vec::new();
        self.flush_a(&mut rest);
        self.flush_b(&mut rest);
        out.push(rest);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(epoch: u64, n: u64) -> Chunk {
        (0..n)
            .map(|p| {
                Item::at(
                    epoch,
                    p,
                    p,
                    Cursor {
                        epoch,
                        pos: p,
                        ord: 0,
                    },
                )
            })
            .collect()
    }

    fn run(size: usize, seed: u64, resume: StageResume, input: Vec<Chunk>) -> Chunk {
        let mut w = WindowShuffle::new(size, seed, 9, 1, resume);
        let mut out = Vec::new();
        for c in input {
            w.push(c, &mut out).unwrap();
        }
        w.finish(&mut out).unwrap();
        out.into_iter().flatten().collect()
    }

    /// (epoch, output position, the input position it came from).
    fn moves(out: &Chunk) -> Vec<(u64, u64, u64)> {
        out.iter()
            .map(|it| (it.cursor.epoch, it.cursor.pos, it.index))
            .collect()
    }

    #[test]
    fn each_epoch_is_a_seeded_permutation_that_moves_items_at_most_size_positions() {
        let input = || vec![items(0, 37), items(1, 37)];
        let out = run(8, 5, StageResume::default(), input());
        for epoch in 0..2 {
            let m: Vec<_> = moves(&out).into_iter().filter(|m| m.0 == epoch).collect();
            let pos: Vec<u64> = m.iter().map(|m| m.1).collect();
            assert_eq!(
                pos,
                (0..37).collect::<Vec<_>>(),
                "positions count anew each epoch"
            );
            let mut from: Vec<u64> = m.iter().map(|m| m.2).collect();
            assert!(
                m.iter().all(|&(_, to, from)| to.abs_diff(from) <= 8),
                "{m:?}"
            );
            assert_ne!(from, (0..37).collect::<Vec<_>>(), "shuffled");
            from.sort_unstable();
            assert_eq!(from, (0..37).collect::<Vec<_>>(), "a permutation");
        }
        assert_eq!(
            moves(&out),
            moves(&run(8, 5, StageResume::default(), input()))
        );
        assert_ne!(
            moves(&out),
            moves(&run(8, 6, StageResume::default(), input()))
        );
    }

    #[test]
    fn a_later_iteration_shuffles_its_epoch_zero_like_that_data_epoch() {
        let run_from = |first: u64, epoch: u64| {
            let mut w =
                WindowShuffle::new(8, 5, 9, 1, StageResume::default()).with_first_epoch(first);
            let mut out = Vec::new();
            w.push(items(epoch, 37), &mut out).unwrap();
            w.finish(&mut out).unwrap();
            let out: Chunk = out.into_iter().flatten().collect();
            out.iter().map(|it| it.index).collect::<Vec<_>>()
        };
        // Iteration epoch 0 starting at data epoch 3 = epoch 3 of an iteration from 0.
        assert_eq!(run_from(3, 0), run_from(0, 3));
        assert_ne!(run_from(3, 0), run_from(0, 0));
    }

    #[test]
    fn resuming_after_any_output_makes_the_rest_again() {
        let out = run(6, 1, StageResume::default(), vec![items(0, 23)]);
        for k in 0..out.len() {
            let resume = StageResume::after(out[k].cursor, &out[k].outer);
            let rest = run(6, 1, resume, vec![items(0, 23)]);
            assert_eq!(
                moves(&rest),
                moves(&out[k + 1..].to_vec()),
                "after output {k}"
            );
        }
    }
}
