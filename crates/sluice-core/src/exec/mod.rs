//! The executor: runs a [`PhysicalPlan`] as threads joined by bounded channels.
//!
//! - Every chunk carries its place in the stream; a parallel stage hands each chunk to a worker
//!   together with a one-slot reply channel and queues the reply channels in input order, so
//!   output order equals input order for any number of threads, with no reorder buffer.
//! - Every channel is bounded: peak memory is set by queue depths and chunk sizes.
//! - Shutdown is a chain reaction: dropping the consumer end makes the last stage's send
//!   fail, it exits and drops its input, and so on up to the source; a cancel flag makes
//!   workers stop between chunks. Errors travel downstream in order like data.
//!
//! The parts: `start` wires a plan into threads (`source`, each stage's `threads`, the
//! `ordering` of a parallel stage's outputs); each stage kind's work is in `stage/`; positions
//! and resuming in `resume`, and the checkpoint format that saves them in [`checkpoint`].

pub mod autoplacement;
pub mod backend;
mod channel;
pub mod checkpoint;
mod control;
pub mod controller;
mod item;
mod memory;
mod ordering;
mod resume;
mod source;
mod stage;
mod start;
mod tail;
mod threads;
mod transient;

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use backend::{Backend, Backends, StageWork, ThreadBackend, Workers};
use control::Control;
pub use control::{cancelled, Threads};
use item::{is_interrupt, nonempty, Transform};
pub use item::{Chunk, Item, Partial, RowAt, RowsAt};
pub use memory::{default_memory_limit, MemoryCap, MemoryReport};
use ordering::{Input, Recv};
pub use resume::{Cursor, Outer, Restart, ResumePoint, Skip};
pub use source::{CHUNK_BYTES, CHUNK_WORK_NS};
pub use start::ExecOptions;
use start::Started;
pub use threads::WORKER_NICE;
pub use transient::hold_transient;

use crate::error::{Error, Result};
use crate::plan::physical::PhysicalPlan;
use crate::sample::Sample;
use crate::stats::{PipelineStats, StageCounters, StatsReport};

/// What [`Execution::next_timeout`] returns.
#[derive(Debug)]
pub enum Next {
    /// The next output (a sample, or a batch as a sample of stacked fields).
    Item(Sample),
    /// The next `n` outputs, rows read together for a consumer that takes rows in bulk
    /// ([`crate::Delivery::rows`]): a sample of columns holding them in order. Each row
    /// counts as delivered (for [`Execution::position`]) once [`Execution::deliver_rows`] has
    /// been told.
    Rows(Sample, usize),
    /// An error; the iteration is over after it.
    Err(Error),
    /// Nothing arrived within the timeout (the caller may check for interrupts and retry).
    Timeout,
    /// The pipeline is exhausted.
    End,
}

/// A running pipeline. Iterate with [`Execution::next_timeout`]; dropping it shuts the
/// threads down without waiting, [`Execution::close`] also waits for them.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(10)))));
/// let plan = lower(&src, &LowerOptions::default()).unwrap();
/// let mut run = Execution::start(&plan, ExecOptions::default()).unwrap();
/// let ids: Vec<i64> = std::iter::from_fn(|| run.next()).map(|s| s.unwrap().get("id").unwrap().as_int().unwrap()).collect();
/// assert_eq!(ids, (0..10).collect::<Vec<_>>());
/// ```
pub struct Execution {
    input: Option<Input>,
    tail: Vec<(usize, Box<dyn Transform>)>,
    ready: Ready,
    /// The error that ends the run, raised once the outputs before it in `ready` are out.
    failed: Option<Error>,
    finished: bool,
    ctl: Arc<Control>,
    stats: Arc<PipelineStats>,
    wait_started: Option<Instant>,
    position: Option<(Cursor, Outer)>,
    /// The rows of the last [`Next::Rows`] and how many of them were delivered.
    rows: Option<(Box<item::RowsAt>, Outer, usize)>,
    /// The source, which reads a row of a [`Next::Rows`] alone when it fails.
    source: crate::source::SourceRef,
    elastic: Option<crate::order::ElasticEpoch>,
    epoch: u64,
    /// Float32 batch buffers the consumer frees are kept for reuse while the run goes.
    _buffers: crate::recycle::Active,
}

impl Execution {
    /// Starts the threads of `plan`.
    pub fn start(plan: &PhysicalPlan, opts: ExecOptions) -> Result<Self> {
        let Started {
            input,
            tail,
            ctl,
            stats,
        } = start::start(plan, &opts)?;
        Ok(Execution {
            input: Some(input),
            tail,
            ready: VecDeque::new(),
            failed: None,
            finished: false,
            ctl,
            stats,
            wait_started: None,
            rows: None,
            source: plan.source.source.clone(),
            position: opts
                .resume
                .map(|rp| (rp.cursor, (!rp.outer.is_empty()).then(|| rp.outer.into()))),
            elastic: opts.elastic,
            epoch: opts.epoch,
            _buffers: crate::recycle::Active::new(),
        })
    }

    /// The iteration's epoch ([`ExecOptions::epoch`]; part of its checkpoints).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The elastic epoch this run finishes, if any (part of its checkpoints until it ends).
    pub fn elastic(&self) -> Option<&crate::order::ElasticEpoch> {
        self.elastic.as_ref()
    }

    /// The position of the last output delivered (`None` before the first): what a
    /// checkpoint saves. Outputs prefetched but not delivered are not part of it.
    pub fn position(&self) -> Option<ResumePoint> {
        self.position.as_ref().map(|(cursor, outer)| ResumePoint {
            cursor: *cursor,
            outer: outer.as_deref().unwrap_or_default().to_vec(),
        })
    }

    /// The next output, blocking (until an [`crate::interrupt`] is requested).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Sample>> {
        loop {
            if crate::interrupt::requested() {
                self.stop();
                return Some(Err(Error::Cancelled));
            }
            match self.next_timeout(Duration::from_millis(100)) {
                Next::Item(s) => return Some(Ok(s)),
                Next::Rows(..) => {
                    return Some(Err(Error::invalid(
                        "rows in bulk (Delivery::rows) are taken with next_timeout",
                    )))
                }
                Next::Err(e) => return Some(Err(e)),
                Next::Timeout => continue,
                Next::End => return None,
            }
        }
    }

    /// The next output if one is already computed, without waiting (lets the bindings skip
    /// releasing the GIL when outputs are queued).
    pub fn try_ready(&mut self) -> Option<Next> {
        let item = self.ready.pop_front()?;
        // A ready output cost the consumer no wait (unless an earlier call timed out).
        match self.wait_started.take() {
            Some(t) => self.stats.record_output(t.elapsed(), first_rows(&item)),
            None => self.stats.record_ready_outputs(1, first_rows(&item)),
        }
        Some(self.hand_over(item))
    }

    /// `item` as the consumer's next output; the position moves to it, or for rows in bulk
    /// to each row as it is delivered.
    fn hand_over(&mut self, item: Item) -> Next {
        match item.rows_at {
            Some(at) => {
                let n = at.0.len();
                self.rows = Some((at, item.outer, 0));
                Next::Rows(item.sample, n)
            }
            None => {
                self.ctl.wait.reached(&item.source_cursor());
                self.position = Some((item.cursor, item.outer));
                Next::Item(item.sample)
            }
        }
    }

    /// The next `n` rows of the last [`Next::Rows`] were delivered: the position moves to
    /// the last of them. A consumer may count rows and tell them in one call before it needs
    /// the position (a checkpoint) or the next output.
    pub fn deliver_rows(&mut self, n: usize) {
        let Some((at, outer, done)) = &mut self.rows else {
            return;
        };
        let to = (*done + n).min(at.0.len());
        if to > *done {
            self.ctl.wait.reached(&at.0[to - 1].cursor);
            self.position = Some((at.0[to - 1].cursor, outer.clone()));
            // The first row's output was recorded with its batch, the rest were ready.
            let ready = to - (*done).max(1);
            self.stats.record_ready_outputs(ready as u64, ready as u64);
            *done = to;
        }
    }

    /// The error for row `row` of the last [`Next::Rows`], which could not be turned into a
    /// value for the consumer: the error reading that row alone gives (the plain read's,
    /// naming where it lies), else `e`, naming the row.
    pub fn row_error(&self, row: usize, e: Error) -> Error {
        let at = self.rows.as_ref().and_then(|(at, _, _)| at.0.get(row));
        let read = at.and_then(|r| self.source.get(r.source_index).err());
        Error::InSample {
            op: self.source.name().to_string(),
            sample: crate::error::SampleRef {
                epoch: at.map_or(0, |r| r.epoch),
                index: at.map_or(0, |r| r.index),
                path: None,
            },
            source: Box::new(read.unwrap_or(e)),
        }
    }

    /// The next output, waiting at most `timeout` for it.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        let started = *self.wait_started.get_or_insert_with(Instant::now);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(item) = self.ready.pop_front() {
                self.wait_started = None;
                self.ctl.wait.delivered();
                self.stats
                    .record_output(started.elapsed(), first_rows(&item));
                return self.hand_over(item);
            }
            if let Some(e) = self.failed.take() {
                self.wait_started = None;
                return Next::Err(e);
            }
            if self.finished {
                return Next::End;
            }
            let Some(input) = self.input.as_mut() else {
                self.finished = true;
                continue;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            self.ctl.wait.waiting();
            match input.recv_timeout(Some(left)) {
                Recv::Timeout => return Next::Timeout,
                // Inline stages keep what they hold (a partial batch is not delivered).
                Recv::Msg(Err(e)) => self.fail(e),
                Recv::Msg(Ok(chunk)) => {
                    if let Err(e) = self.run_tail(Some(chunk)) {
                        self.fail(e);
                    }
                }
                Recv::End => {
                    self.input = None;
                    if let Err(e) = self.run_tail(None) {
                        self.fail(e);
                    } else {
                        self.finished = true;
                    }
                }
            }
        }
    }

    /// Pushes a chunk (or the end of input) through the inline stages into `ready`. When a
    /// stage fails, the outputs it made before the failing input still go through the
    /// stages after it (which then do not finish: a partial batch is not delivered).
    fn run_tail(&mut self, chunk: Option<Chunk>) -> Result<()> {
        let ctl = self.ctl.clone();
        let _working = ctl.wait.working();
        let end = chunk.is_none();
        let mut chunks: Vec<Chunk> = chunk.into_iter().collect();
        let mut exhausted = false;
        let mut failed: Option<Error> = None;
        for (slot, t) in &mut self.tail {
            let c = self.stats.counters(*slot);
            let t0 = Instant::now();
            let mut out = Vec::new();
            let mut res = Ok(());
            for ch in chunks {
                c.items_in.fetch_add(ch.len() as u64, Relaxed);
                res = t.push(ch, &mut out);
                if res.is_err() {
                    break;
                }
            }
            // A stage that takes no more input (a `take` that is done) ends the stages
            // after it too: a batch flushes its last, partial batch.
            exhausted |= t.exhausted();
            if res.is_ok() && failed.is_none() && (end || exhausted) {
                res = t.finish(&mut out);
            }
            if let Err(e) = res {
                // It failed on an input that precedes the failure upstream, if any.
                failed = Some(e);
            }
            nonempty(&mut out);
            c.items_out
                .fetch_add(out.iter().map(|c| c.len() as u64).sum(), Relaxed);
            StageCounters::add(&c.busy_ns, t0.elapsed());
            chunks = out;
        }
        self.ready.extend(chunks.into_iter().flatten());
        if exhausted {
            self.stop();
        }
        failed.map_or(Ok(()), Err)
    }

    /// Ends the iteration with `e`, raised after the outputs already ready (they precede
    /// it) — unless it is an interrupt, which is raised at once.
    fn fail(&mut self, e: Error) {
        self.stop();
        if is_interrupt(&e) {
            self.ready.clear();
        } else {
            self.stats.record_error(&e);
        }
        self.failed = Some(e);
    }

    /// Ends the iteration: no more outputs after those already ready.
    fn stop(&mut self) {
        self.ctl.stop();
        self.input = None;
        self.finished = true;
    }

    /// Stops all threads and waits up to `timeout` for them to exit; true if they all did.
    /// Call without holding locks that workers may need (e.g. release the GIL first).
    pub fn close(&mut self, timeout: Duration) -> bool {
        self.stop();
        // What the run holds goes now, not when it is dropped: outputs ready, and the inline
        // stages' state (a shuffle buffer's samples, a partial batch).
        self.ready = VecDeque::new();
        self.tail.clear();
        self.failed = None;
        self.ctl.wait(timeout)
    }

    /// A handle that waits for this execution's threads, also after it is dropped (a run
    /// abandoned while a worker finishes a long call is waited for at interpreter exit).
    pub fn threads(&self) -> Threads {
        Threads(self.ctl.clone())
    }

    /// Statistics so far.
    pub fn stats(&self) -> StatsReport {
        self.stats.report()
    }

    /// The shared statistics (kept alive after the execution ends).
    pub fn stats_handle(&self) -> Arc<PipelineStats> {
        self.stats.clone()
    }
}

impl Iterator for Execution {
    type Item = Result<Sample>;
    fn next(&mut self) -> Option<Self::Item> {
        Execution::next(self)
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        // Do not wait here: the dropping thread may hold a lock (the GIL) a worker needs.
        self.stop();
    }
}

/// The samples an output counts when it is handed over: a batch of rows in bulk counts its
/// rows as they are delivered ([`Execution::deliver_rows`]).
fn first_rows(item: &Item) -> u64 {
    if item.rows_at.is_some() {
        1
    } else {
        item.rows
    }
}

/// Items in arrival order (for the consumer's ready queue).
type Ready = VecDeque<Item>;

/// Number of chunks waiting at the consumer (for tests of backpressure).
#[doc(hidden)]
pub fn queued(exec: &Execution) -> usize {
    exec.input.as_ref().map_or(0, Input::len)
}
