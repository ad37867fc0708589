//! The executor: runs a [`PhysicalPlan`] as threads joined by bounded channels.
//!
//! - Every chunk carries its place in the stream; a parallel stage hands each chunk to a worker
//!   together with a one-slot reply channel and queues the reply channels in input order, so
//!   output order equals input order for any number of threads, with no reorder buffer.
//! - Every channel is bounded: peak memory is set by queue depths and chunk sizes.
//! - Shutdown is a chain reaction: dropping the consumer end makes the last stage's send
//!   fail, it exits and drops its input, and so on up to the source; a cancel flag makes
//!   workers stop between chunks. Errors travel downstream in order like data.

pub mod backend;
mod control;
pub mod controller;
mod item;
mod resume;
mod stage;

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

pub use backend::{Backend, Backends, StageWork, ThreadBackend, Workers};
use control::Control;
pub use control::{cancelled, Threads};
use item::{is_interrupt, nonempty, Transform};
pub use item::{Chunk, Item, Partial};
use resume::{drops, last_dropping_stage, StageResume};
pub use resume::{Cursor, Outer, Restart, ResumePoint, Skip};
use stage::{make_transform, Following};

use crate::error::{Error, Result};
use crate::plan::physical::{PhysicalPlan, SourceStage, StageKind, Variant};
use crate::sample::Sample;
use crate::stats::{PipelineStats, StageCounters, StageInfo, StatsReport};

type Msg = Result<Chunk>;

/// The receiving end of a stage: plain, or ordered reply slots from a parallel stage.
enum Input {
    Direct(Receiver<Msg>),
    /// A random-access source's items made in the consumer, when every stage runs there:
    /// no thread and no hand-off for what is only a run of indices.
    Inline {
        items: Box<OrderedItems>,
        stats: Arc<PipelineStats>,
    },
    /// A parallel stage's replies in input order; a reply whose chunk failed part-way is
    /// handed on as its outputs, then (`failed`) its error.
    Ordered {
        slots: Receiver<Receiver<Partial>>,
        waiting: Option<Receiver<Partial>>,
        failed: Option<Error>,
    },
}

enum Recv {
    Msg(Msg),
    Timeout,
    End,
}

impl Input {
    fn recv(&mut self) -> Option<Msg> {
        match self.recv_timeout(None) {
            Recv::Msg(m) => Some(m),
            _ => None,
        }
    }
    fn recv_timeout(&mut self, timeout: Option<Duration>) -> Recv {
        let wait = |rx: &Receiver<Msg>| match timeout {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => rx.recv_timeout(t),
        };
        match self {
            Input::Inline { items, stats } => match items.next_chunk(stats) {
                Some(chunk) => {
                    let c = stats.counters(0);
                    c.items_out.fetch_add(chunk.len() as u64, Relaxed);
                    Recv::Msg(Ok(chunk))
                }
                None => Recv::End,
            },
            Input::Direct(rx) => match wait(rx) {
                Ok(m) => Recv::Msg(m),
                Err(RecvTimeoutError::Timeout) => Recv::Timeout,
                Err(RecvTimeoutError::Disconnected) => Recv::End,
            },
            Input::Ordered {
                slots,
                waiting,
                failed,
            } => {
                if let Some(e) = failed.take() {
                    return Recv::Msg(Err(e));
                }
                let slot = match waiting.take() {
                    Some(s) => s,
                    None => {
                        let got = match timeout {
                            None => slots.recv().map_err(|_| RecvTimeoutError::Disconnected),
                            Some(t) => slots.recv_timeout(t),
                        };
                        match got {
                            Ok(s) => s,
                            Err(RecvTimeoutError::Timeout) => return Recv::Timeout,
                            Err(RecvTimeoutError::Disconnected) => return Recv::End,
                        }
                    }
                };
                let got = match timeout {
                    None => slot.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    Some(t) => slot.recv_timeout(t),
                };
                match got {
                    Ok((chunk, None)) => Recv::Msg(Ok(chunk)),
                    Ok((chunk, Some(e))) if chunk.is_empty() => Recv::Msg(Err(e)),
                    Ok((chunk, Some(e))) => {
                        *failed = Some(e);
                        Recv::Msg(Ok(chunk))
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        *waiting = Some(slot);
                        Recv::Timeout
                    }
                    // A worker died without replying (it panicked past catch_unwind).
                    Err(RecvTimeoutError::Disconnected) => Recv::Msg(Err(Error::Internal(
                        "a worker exited without producing its result".into(),
                    ))),
                }
            }
        }
    }
    fn len(&self) -> usize {
        match self {
            Input::Direct(rx) => rx.len(),
            Input::Ordered { slots, .. } => slots.len(),
            Input::Inline { .. } => 0,
        }
    }
}

/// What [`Execution::next_timeout`] returns.
#[derive(Debug)]
pub enum Next {
    /// The next output (a sample, or a batch as a sample of stacked fields).
    Item(Sample),
    /// An error; the iteration is over after it.
    Err(Error),
    /// Nothing arrived within the timeout (the caller may check for interrupts and retry).
    Timeout,
    /// The pipeline is exhausted.
    End,
}

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// The seed every random decision derives from.
    pub seed: u64,
    /// Resume after this output (from a saved [`Execution::position`]).
    pub resume: Option<ResumePoint>,
    /// Finish this epoch of a sharded run that ranks of another world size began.
    pub elastic: Option<crate::order::ElasticEpoch>,
    /// Worker pools beyond threads that stages with [`Variant::Pool`] run on.
    pub backends: Backends,
    /// Tune the workers of parallel stages at run time.
    pub controller: Option<controller::ControllerOptions>,
    /// The consumer takes [`crate::Column`]s in batches (the Python bindings and Arrow export
    /// do): a final batch that reads a columnar source then hands over the source's arrays.
    pub columns: bool,
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
    elastic: Option<crate::order::ElasticEpoch>,
}

impl Execution {
    /// Starts the threads of `plan`.
    pub fn start(plan: &PhysicalPlan, opts: ExecOptions) -> Result<Self> {
        let ctl = Arc::new(Control::default());
        // Inline stages run in the consumer; a stage is inline only if all after it are.
        let first_inline = plan
            .stages
            .iter()
            .rposition(|s| s.variant != Variant::Inline)
            .map_or(0, |i| i + 1);
        let inline_source = first_inline == 0 && plan.source.order.is_some();
        let mut infos = vec![StageInfo {
            name: format!("source: {}", plan.source.source.name()),
            threads: 1,
            inline: inline_source,
            queue_capacity: plan.source.queue_depth,
        }];
        for (i, st) in plan.stages.iter().enumerate() {
            let inline = i >= first_inline;
            infos.push(StageInfo {
                name: st.kind.label(),
                threads: if inline { 1 } else { st.variant.workers() },
                inline,
                queue_capacity: st.queue_depth,
            });
        }
        let stats = Arc::new(PipelineStats::new(infos));
        let source = &plan.source.source;
        stats.counters(0).skipped.store(source.skipped(), Relaxed);
        stats.set_source_report(source.report());

        let mut resumes = match &opts.resume {
            Some(rp) => rp.stage_resumes(plan)?,
            None => vec![StageResume::default(); plan.stages.len()],
        };
        let mut source_stage = plan.source.clone();
        if let Some(el) = &opts.elastic {
            let order = source_stage
                .order
                .as_mut()
                .ok_or_else(|| Error::invalid("an elastic resume needs a random-access source"))?;
            if !opts.resume.as_ref().is_none_or(|r| r.outer.is_empty()) {
                return Err(Error::invalid(
                    "an elastic resume cannot pass take, shuffle_buffer or map_batches",
                ));
            }
            order.elastic = Some(el.clone());
            let partial: Vec<Cursor> = el
                .partial_positions(order.len)
                .into_iter()
                .map(|(pos, ord)| Cursor {
                    epoch: el.epoch,
                    pos,
                    ord,
                })
                .collect();
            if let Some(last) = last_dropping_stage(plan) {
                resumes[last].drop.partial = partial;
            }
        }
        let mut start = opts.resume.as_ref().map(ResumePoint::source_start);
        if let (None, Some(el)) = (&opts.resume, &opts.elastic) {
            // A new rank that has delivered nothing yet starts at the elastic epoch.
            start = Some(Cursor {
                epoch: el.epoch,
                pos: 0,
                ord: 0,
            });
        }
        if let (Some(rp), None) = (&opts.resume, last_dropping_stage(plan)) {
            // No stage between the source and the consumer can drop what was delivered (a
            // stream straight into batch): the source skips it itself.
            start = Some(Cursor {
                pos: rp.cursor.pos + 1,
                ord: 0,
                ..rp.cursor
            });
        }
        let mut input = match OrderedItems::new(&source_stage, start).filter(|_| inline_source) {
            Some(items) => Input::Inline {
                items: Box::new(items),
                stats: stats.clone(),
            },
            None => spawn_source(&source_stage, start, opts.seed, &ctl, &stats)?,
        };
        let mut tail = Vec::new();
        let mut tuned: Vec<(usize, Arc<AtomicUsize>)> = Vec::new();
        for (i, st) in plan.stages.iter().enumerate() {
            let slot = i + 1;
            let skip = resumes[i].drop.clone();
            let t = make_transform(
                &st.kind,
                &plan.source.source,
                opts.seed,
                stats.clone(),
                slot,
                resumes[i].clone(),
                Following {
                    resequence: plan.stages[i + 1..].iter().any(|s| drops(&s.kind)),
                    columns: opts.columns
                        && plan.stages[i + 1..]
                            .iter()
                            .all(|s| matches!(s.kind, StageKind::Take { .. })),
                },
            );
            if i >= first_inline {
                tail.push((slot, t));
                continue;
            }
            // Under the controller, a one-thread chain stage runs on the parallel path too, so
            // it can be given more workers.
            let tunable =
                opts.controller.is_some() && matches!(st.variant, Variant::Threads { .. });
            input = match (&st.kind, &st.variant) {
                (StageKind::Chain { read, ops }, v)
                    if v.workers() > 1 || v.is_pool() || tunable =>
                {
                    let backend = match v {
                        Variant::Pool { backend, .. } => opts.backends.get(backend)?,
                        _ => Arc::new(ThreadBackend),
                    };
                    let work = StageWork {
                        read: read.then(|| plan.source.source.clone()),
                        ops: ops.clone(),
                        seed: opts.seed,
                        skip,
                        slot,
                        stats: stats.clone(),
                    };
                    // Under the controller, threads up to its maximum exist but only `active`
                    // of them take work; pools start the planned workers and grow on demand.
                    let (workers, threads, active): (Arc<dyn Workers>, _, _) =
                        match &opts.controller {
                            Some(c) => {
                                let planned = v.workers();
                                let max = planned.max(c.max_workers);
                                let w = backend.start_scalable(work, planned, max)?;
                                let active = Arc::new(AtomicUsize::new(planned));
                                stats.counters(slot).active.store(planned as u64, Relaxed);
                                tuned.push((slot, active.clone()));
                                (w.into(), max, Some(active))
                            }
                            None => {
                                let w: Arc<dyn Workers> = backend.start(work, v.workers())?.into();
                                let n = w.parallelism().max(1);
                                (w, n, None)
                            }
                        };
                    let par = Parallel {
                        threads,
                        active,
                        depth: st.queue_depth,
                        slot,
                    };
                    spawn_parallel(workers, par, input, &ctl, &stats)?
                }
                _ => spawn_sequential(t, st.queue_depth, input, &ctl, &stats, slot)?,
            };
        }
        if let (Some(c), false) = (&opts.controller, tuned.is_empty()) {
            spawn_controller(c.clone(), tuned, &ctl, &stats)?;
        }
        Ok(Execution {
            input: Some(input),
            tail,
            ready: VecDeque::new(),
            failed: None,
            finished: false,
            ctl,
            stats,
            wait_started: None,
            position: opts
                .resume
                .map(|rp| (rp.cursor, (!rp.outer.is_empty()).then(|| rp.outer.into()))),
            elastic: opts.elastic,
        })
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
                Next::Err(e) => return Some(Err(e)),
                Next::Timeout => continue,
                Next::End => return None,
            }
        }
    }

    /// The next output if one is already computed, without waiting (lets the bindings skip
    /// releasing the GIL when outputs are queued).
    pub fn try_ready(&mut self) -> Option<Sample> {
        let item = self.ready.pop_front()?;
        self.position = Some((item.cursor, item.outer));
        // A ready output cost the consumer no wait (unless an earlier call timed out).
        let waited = self
            .wait_started
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        self.stats.record_output(waited, item.rows);
        Some(item.sample)
    }

    /// The next output, waiting at most `timeout` for it.
    pub fn next_timeout(&mut self, timeout: Duration) -> Next {
        let started = *self.wait_started.get_or_insert_with(Instant::now);
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(item) = self.ready.pop_front() {
                self.wait_started = None;
                self.position = Some((item.cursor, item.outer));
                self.stats.record_output(started.elapsed(), item.rows);
                return Next::Item(item.sample);
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
        }
        self.failed = Some(e);
    }

    /// Ends the iteration: no more outputs after those already ready.
    fn stop(&mut self) {
        self.ctl.cancel.store(true, Relaxed);
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

/// Sends `msg`, accounting the time blocked; false if the receiver is gone.
fn send_counted(tx: &Sender<Msg>, msg: Msg, c: &StageCounters) -> bool {
    let items = msg.as_ref().map_or(0, |c| c.len() as u64);
    let t0 = Instant::now();
    c.record_occupancy(tx.len());
    let ok = tx.send(msg).is_ok();
    StageCounters::add(&c.wait_out_ns, t0.elapsed());
    c.items_out.fetch_add(items, Relaxed);
    ok
}

fn spawn_source(
    src: &SourceStage,
    resume: Option<Cursor>,
    seed: u64,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
) -> Result<Input> {
    let (tx, rx) = bounded::<Msg>(src.queue_depth.max(1));
    let src = src.clone();
    let (ctl2, stats) = (ctl.clone(), stats.clone());
    ctl.spawn("sluice-source".into(), move || {
        let c = stats.counters(0);
        if let Some(mut items) = OrderedItems::new(&src, resume) {
            while let Some(chunk) = items.next_chunk(&stats) {
                if ctl2.cancelled() || !send_counted(&tx, Ok(chunk), c) {
                    return;
                }
            }
            return;
        }
        // Streams cannot seek: resuming reads and drops the delivered prefix of the epoch.
        let mut sizer = ChunkSizer::new(&src);
        let mut epoch = resume.map_or(0, |r| r.epoch);
        let mut skip_to = resume.map_or(0, |r| r.pos);
        while src.stream_epochs.is_none_or(|e| epoch < e) {
            let stream = match src.source.stream_epoch(seed, epoch) {
                Ok(s) => s,
                Err(e) => {
                    send_counted(&tx, Err(e), c);
                    return;
                }
            };
            let mut chunk = sizer.next(&stats);
            let mut items = Vec::with_capacity(chunk as usize);
            let (mut any, mut seen) = (false, 0usize);
            let skip = std::mem::take(&mut skip_to) as usize;
            for (index, res) in stream.enumerate() {
                if ctl2.cancelled() {
                    return;
                }
                any = true;
                seen = index + 1;
                if index < skip {
                    continue;
                }
                match res {
                    Ok(sample) => {
                        let i = index as u64;
                        let cursor = Cursor {
                            epoch,
                            pos: i,
                            ord: 0,
                        };
                        items.push(Item::at(epoch, i, i, cursor).with_sample(sample))
                    }
                    Err(e) => {
                        if !items.is_empty() {
                            send_counted(&tx, Ok(std::mem::take(&mut items)), c);
                        }
                        send_counted(&tx, Err(e), c);
                        return;
                    }
                }
                if items.len() as u64 >= chunk {
                    if !send_counted(&tx, Ok(std::mem::take(&mut items)), c) {
                        return;
                    }
                    chunk = sizer.next(&stats);
                }
            }
            if !items.is_empty() && !send_counted(&tx, Ok(items), c) {
                return;
            }
            if seen < skip {
                // A checkpoint past the end would silently skip the rest of the data.
                let e = Error::invalid(format!(
                    "checkpoint: the stream resumes at position {skip} of epoch {epoch}, past \
                     its end ({seen} samples in that epoch)"
                ));
                send_counted(&tx, Err(e), c);
                return;
            }
            if !any && skip == 0 {
                return; // An empty stream repeated forever would spin.
            }
            epoch += 1;
        }
    })?;
    Ok(Input::Direct(rx))
}

/// A random-access source's items in its order (shuffle, shard, epochs), chunk by chunk,
/// with no sample read yet: reading is the first chain's work. Cheap enough to run in the
/// consumer when every stage does.
struct OrderedItems {
    order: crate::order::IndexOrder,
    epoch: u64,
    pos: u64,
    /// The elastic epoch's positions, once the producer is in that epoch.
    elastic: Option<crate::order::Positions>,
    sizer: ChunkSizer,
}

impl OrderedItems {
    /// From `resume` on; `None` for a streaming source.
    fn new(src: &SourceStage, resume: Option<Cursor>) -> Option<Self> {
        let order = src.order.clone()?;
        let (epoch, pos) = resume.map_or((0, 0), |r| (r.epoch, r.pos));
        let elastic = elastic_positions(&order, epoch, pos);
        Some(OrderedItems {
            order,
            epoch,
            pos,
            elastic,
            sizer: ChunkSizer::new(src),
        })
    }

    fn next_chunk(&mut self, stats: &PipelineStats) -> Option<Chunk> {
        let order = &self.order;
        loop {
            let more = order.epoch_len() > 0
                || order
                    .elastic
                    .as_ref()
                    .is_some_and(|e| e.epoch >= self.epoch);
            if order.is_done(self.epoch) || !more {
                return None;
            }
            let n = order.epoch_len_of(self.epoch);
            if self.pos >= n {
                self.epoch += 1;
                self.pos = 0;
                self.elastic = elastic_positions(order, self.epoch, 0);
                continue;
            }
            let (epoch, start) = (self.epoch, self.pos);
            let end = (start + self.sizer.next(stats)).min(n);
            let elastic = &mut self.elastic;
            let items = (start..end)
                .map(|p| {
                    let at = match elastic.as_mut().and_then(Iterator::next) {
                        Some(g) => order.at_global(epoch, g),
                        None => order.position(epoch, p),
                    };
                    let cursor = Cursor {
                        epoch,
                        pos: p,
                        ord: 0,
                    };
                    Item::at(epoch, at.index, at.source_index, cursor)
                })
                .collect();
            self.pos = end;
            return Some(items);
        }
    }
}

/// The elastic epoch's positions from local position `pos` on, if `epoch` is that epoch
/// (they are enumerated, not computed one by one).
fn elastic_positions(
    order: &crate::order::IndexOrder,
    epoch: u64,
    pos: u64,
) -> Option<crate::order::Positions> {
    order
        .elastic
        .as_ref()
        .filter(|e| e.epoch == epoch)
        .map(|e| e.positions(order.len, pos))
}

/// Downstream CPU each chunk should carry. A chunk's trip across threads costs wake-ups
/// (source → workers → batch → consumer): with chunks of ~250 µs the NLP benchmark's
/// two-thread plan spent 5–15% more CPU per line than its inline plan, with ~1 ms −4 to +4%
/// (`benchmarks/chunk_cost.py`, two runs). Costly items still travel alone or in small chunks.
/// The cost model sizes chunks the same way.
pub const CHUNK_WORK_NS: f64 = 1_000_000.0;
/// Chunks grow only while their largest items stay under this many bytes per chunk.
pub const CHUNK_BYTES: f64 = 8.0 * 1024.0 * 1024.0;

/// Sizes the source's chunks from the measured cost and size per item of the stages after
/// it, between `chunk_size` and `max_chunk`, at most doubling per chunk, and only once every
/// stage has measured a chunk's worth of items. Outputs never depend on chunking (order,
/// randomness and batches follow item positions), only hand-off overhead, latency and memory
/// do: costly items stay in small chunks, and big ones too (≤ 8 MiB a chunk).
struct ChunkSizer {
    size: u64,
    max: u64,
}

impl ChunkSizer {
    fn new(src: &SourceStage) -> Self {
        let size = src.chunk_size.max(1) as u64;
        ChunkSizer {
            size,
            max: (src.max_chunk as u64).max(size),
        }
    }
    fn next(&mut self, stats: &PipelineStats) -> u64 {
        if self.size >= self.max {
            return self.size;
        }
        // Measured once the first stage has seen a chunk's worth and every later stage
        // something (after a batch, a stage counts batches).
        let stages = &stats.stages[1..];
        let seen = |i: usize, (_, c): &(StageInfo, StageCounters)| {
            c.items_in.load(Relaxed) >= if i == 0 { self.size } else { 1 }
        };
        if !stages.iter().enumerate().all(|(i, st)| seen(i, st)) {
            return self.size; // Not measured yet (or a filter starves a stage): stay put.
        }
        // CPU per item summed over stages (each stage's busy time over what it received),
        // and the largest item size any stage produced.
        let (mut cpu, mut bytes) = (0.0f64, 0.0f64);
        for (_, c) in stages {
            cpu += c.busy_ns.load(Relaxed) as f64 / c.items_in.load(Relaxed) as f64;
            let out = c.items_out.load(Relaxed);
            if out > 0 {
                bytes = bytes.max(c.bytes_out.load(Relaxed) as f64 / out as f64);
            }
        }
        let want = (CHUNK_WORK_NS / cpu.max(1.0)).min(CHUNK_BYTES / bytes.max(1.0)) as u64;
        if want > self.size {
            self.size = want.min(self.size * 2).min(self.max);
        }
        self.size
    }
}

/// Runs `f`, turning a panic into an internal error so it never crosses into the consumer.
fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Internal(format!("an op panicked: {msg}")))
    })
}

fn spawn_sequential(
    mut t: Box<dyn Transform>,
    depth: usize,
    mut input: Input,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
    slot: usize,
) -> Result<Input> {
    let (tx, rx) = bounded::<Msg>(depth.max(1));
    let stats = stats.clone();
    ctl.spawn(format!("sluice-stage-{slot}"), move || {
        let c = stats.counters(slot);
        loop {
            let t0 = Instant::now();
            let msg = input.recv();
            StageCounters::add(&c.wait_in_ns, t0.elapsed());
            let t1 = Instant::now();
            // Outputs made before an error are handed on ahead of it.
            let mut outs = Vec::new();
            let (res, last) = match msg {
                Some(Ok(chunk)) => {
                    c.items_in.fetch_add(chunk.len() as u64, Relaxed);
                    let res = guarded(|| {
                        t.push(chunk, &mut outs)?;
                        if t.exhausted() {
                            t.finish(&mut outs)?;
                        }
                        Ok(())
                    });
                    let last = res.is_err() || t.exhausted();
                    (res, last)
                }
                Some(Err(e)) => (Err(e), true),
                None => (guarded(|| t.finish(&mut outs)), true),
            };
            StageCounters::add(&c.busy_ns, t1.elapsed());
            if res.as_ref().is_err_and(is_interrupt) {
                outs.clear();
            }
            nonempty(&mut outs);
            for o in outs {
                if !send_counted(&tx, Ok(o), c) {
                    return;
                }
            }
            if let Err(e) = res {
                send_counted(&tx, Err(e), c);
                return;
            }
            if last {
                return;
            }
        }
    })?;
    Ok(Input::Direct(rx))
}

/// How much lower than the process the worker threads of parallel stages run (their nice
/// value, added; Linux, where nice is per thread). Workers do the bulk of the CPU work; the
/// threads that hand work on — the source, each stage's dispatcher, stateful stages such as
/// batch — and the consumer are light and wake often. At equal priority a woken hand-off
/// thread can wait behind busy workers for a scheduler slice while the workers wait for
/// it: on the 2-vCPU reference VM the ASR cached plan kept its cores 1.78 busy at equal
/// priority and 1.98 with workers at +5 (5,929 → 7,673 clips/s, 300 → 258 µs of CPU per
/// clip); NLP and CV plans gained 2–4%. The training loop in the consumer's thread gets
/// ahead of the workers the same way. `SLUICE_WORKER_NICE` overrides it (0: no change).
pub const WORKER_NICE: i32 = 5;

/// Lowers the calling worker thread's priority by [`WORKER_NICE`] (or `SLUICE_WORKER_NICE`).
fn lower_worker_priority() {
    #[cfg(target_os = "linux")]
    {
        let by = std::env::var("SLUICE_WORKER_NICE")
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .unwrap_or(WORKER_NICE);
        if by > 0 {
            // SAFETY: plain integer arguments. On Linux, PRIO_PROCESS with who = 0 reads and
            // sets the calling thread's nice value only, not the process's. A failure leaves
            // the priority as it was, which is harmless.
            unsafe {
                let now = libc::getpriority(libc::PRIO_PROCESS, 0);
                libc::setpriority(libc::PRIO_PROCESS, 0, (now + by).min(19));
            }
        }
    }
}

/// How a parallel stage is run.
struct Parallel {
    /// Executor threads calling the pool.
    threads: usize,
    /// Under the controller: how many of them may take work.
    active: Option<Arc<AtomicUsize>>,
    depth: usize,
    slot: usize,
}

fn spawn_parallel(
    pool: Arc<dyn Workers>,
    par: Parallel,
    mut input: Input,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
) -> Result<Input> {
    let Parallel {
        threads,
        active,
        depth,
        slot,
    } = par;
    let (work_tx, work_rx) = bounded::<(Chunk, Sender<Partial>)>(threads);
    let (slots_tx, slots_rx) = bounded::<Receiver<Partial>>(depth.max(1));
    // The last thread out stops the pool (remote workers must not outlive the stage).
    struct Stop(Arc<dyn Workers>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.shutdown();
        }
    }
    let stop = Arc::new(Stop(pool));
    for w in 0..threads {
        let (work_rx, stop, ctl2, stats, active) = (
            work_rx.clone(),
            stop.clone(),
            ctl.clone(),
            stats.clone(),
            active.clone(),
        );
        ctl.spawn(format!("sluice-stage-{slot}-w{w}"), move || {
            lower_worker_priority();
            let c = stats.counters(slot);
            loop {
                // A worker beyond the controller's current count sits out.
                while active.as_ref().is_some_and(|a| w >= a.load(Relaxed)) {
                    if ctl2.cancelled() {
                        return;
                    }
                    thread::sleep(Duration::from_millis(2));
                }
                let t0 = Instant::now();
                let Ok((chunk, reply)) = work_rx.recv() else {
                    return;
                };
                StageCounters::add(&c.wait_in_ns, t0.elapsed());
                if ctl2.cancelled() {
                    return;
                }
                let t1 = Instant::now();
                let n = chunk.len() as u64;
                let res = guarded(|| Ok(stop.0.run_partial(chunk)))
                    .unwrap_or_else(|e| (Vec::new(), Some(e)));
                StageCounters::add(&c.busy_ns, t1.elapsed());
                c.items_in.fetch_add(n, Relaxed);
                c.items_out.fetch_add(res.0.len() as u64, Relaxed);
                let _ = reply.send(res);
            }
        })?;
    }
    let stats = stats.clone();
    ctl.spawn(format!("sluice-stage-{slot}-dispatch"), move || {
        let c = stats.counters(slot);
        while let Some(msg) = input.recv() {
            let (reply_tx, reply_rx) = bounded::<Partial>(1);
            c.record_occupancy(slots_tx.len());
            let t0 = Instant::now();
            if slots_tx.send(reply_rx).is_err() {
                return;
            }
            StageCounters::add(&c.wait_out_ns, t0.elapsed());
            match msg {
                Ok(chunk) => {
                    if work_tx.send((chunk, reply_tx)).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = reply_tx.send((Vec::new(), Some(e)));
                    return;
                }
            }
        }
    })?;
    Ok(Input::Ordered {
        slots: slots_rx,
        waiting: None,
        failed: None,
    })
}

/// Runs the controller every interval until the execution is cancelled.
fn spawn_controller(
    opts: controller::ControllerOptions,
    tuned: Vec<(usize, Arc<AtomicUsize>)>,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
) -> Result<()> {
    let (ctl2, stats) = (ctl.clone(), stats.clone());
    ctl.spawn("sluice-controller".into(), move || {
        let interval = opts.interval;
        let mut c = controller::Controller::new(opts);
        let busy = |slot: usize| stats.counters(slot).busy_ns.load(Relaxed);
        let mut last: Vec<u64> = tuned.iter().map(|(s, _)| busy(*s)).collect();
        let mut last_wait = stats.consumer_wait_ns.load(Relaxed);
        let mut last_samples = stats.consumer_samples.load(Relaxed);
        let mut t_last = Instant::now();
        loop {
            while t_last.elapsed() < interval {
                if ctl2.cancelled() {
                    return;
                }
                thread::sleep(Duration::from_millis(10).min(interval));
            }
            let dt = t_last.elapsed().as_secs_f64();
            t_last = Instant::now();
            let wait = stats.consumer_wait_ns.load(Relaxed);
            let samples = stats.consumer_samples.load(Relaxed);
            let mut stages = Vec::with_capacity(tuned.len());
            for (k, (slot, active)) in tuned.iter().enumerate() {
                let b = busy(*slot);
                let n = active.load(Relaxed).max(1);
                stages.push(controller::StageObs {
                    slot: *slot,
                    active: n,
                    busy: (b - last[k]) as f64 * 1e-9 / (dt * n as f64),
                });
                last[k] = b;
            }
            let obs = controller::Observation {
                consumer_wait: ((wait - last_wait) as f64 * 1e-9 / dt).min(1.0),
                throughput: (samples - last_samples) as f64 / dt,
                stages,
            };
            (last_wait, last_samples) = (wait, samples);
            if let Some((slot, workers, why)) = c.decide(&obs) {
                if let Some((_, a)) = tuned.iter().find(|(s, _)| *s == slot) {
                    a.store(workers, Relaxed);
                    stats.counters(slot).active.store(workers as u64, Relaxed);
                    let d = controller::Decision {
                        at_s: stats.elapsed().as_secs_f64(),
                        slot,
                        workers,
                        why,
                    };
                    stats
                        .decisions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(d);
                }
            }
        }
    })
}

/// Items in arrival order (for the consumer's ready queue).
type Ready = VecDeque<Item>;

/// Number of chunks waiting at the consumer (for tests of backpressure).
#[doc(hidden)]
pub fn queued(exec: &Execution) -> usize {
    exec.input.as_ref().map_or(0, Input::len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::RangeSource;

    fn source(chunk: usize, max: usize) -> SourceStage {
        SourceStage {
            source: Arc::new(RangeSource::new(10)),
            order: None,
            stream_epochs: Some(1),
            chunk_size: chunk,
            max_chunk: max,
            queue_depth: 1,
        }
    }

    fn stats_after(items: u64, busy_ns_per_item: u64) -> PipelineStats {
        sized_stats(items, busy_ns_per_item, 100)
    }

    fn sized_stats(items: u64, busy_ns_per_item: u64, bytes_per_item: u64) -> PipelineStats {
        let info = |name: &str| StageInfo {
            name: name.into(),
            threads: 1,
            inline: false,
            queue_capacity: 1,
        };
        let stats = PipelineStats::new(vec![info("source"), info("stage")]);
        stats.counters(1).items_in.store(items, Relaxed);
        stats.counters(1).items_out.store(items, Relaxed);
        stats
            .counters(1)
            .bytes_out
            .store(items * bytes_per_item, Relaxed);
        stats
            .counters(1)
            .busy_ns
            .store(items * busy_ns_per_item, Relaxed);
        stats
    }

    #[test]
    fn cheap_items_grow_chunks_to_the_cap_by_doubling() {
        let mut s = ChunkSizer::new(&source(16, 1024));
        assert_eq!(s.next(&stats_after(0, 0)), 16, "no measurement yet");
        let cheap = stats_after(10_000, 100);
        let sizes: Vec<u64> = (0..8).map(|_| s.next(&cheap)).collect();
        assert_eq!(sizes, [32, 64, 128, 256, 512, 1024, 1024, 1024]);
    }

    #[test]
    fn costly_items_and_fixed_sizes_keep_their_chunks() {
        // 2 ms per item: 1 ms of work is already under one item.
        let mut s = ChunkSizer::new(&source(16, 1024));
        assert_eq!(s.next(&stats_after(10_000, 2_000_000)), 16);
        // 100 µs per item: 10 items carry the target, fewer than the first size.
        assert_eq!(s.next(&stats_after(10_000, 100_000)), 16);
        // 4 µs per item: 250 items, reached by doubling.
        let mid = stats_after(10_000, 4_000);
        let sizes: Vec<u64> = (0..5).map(|_| s.next(&mid)).collect();
        assert_eq!(sizes, [32, 64, 128, 250, 250]);
        let mut fixed = ChunkSizer::new(&source(8, 8));
        assert_eq!(fixed.next(&stats_after(10_000, 1)), 8);
    }

    #[test]
    fn big_items_keep_chunks_small_and_every_stage_must_be_measured() {
        // Cheap 1 MiB items: 8 per chunk at most.
        let mut s = ChunkSizer::new(&source(4, 1024));
        let big = sized_stats(10_000, 100, 1 << 20);
        assert_eq!((s.next(&big), s.next(&big), s.next(&big)), (8, 8, 8));
        // A later stage that has not measured anything yet holds growth back.
        let info = |name: &str| StageInfo {
            name: name.into(),
            threads: 1,
            inline: false,
            queue_capacity: 1,
        };
        let stats = PipelineStats::new(vec![info("source"), info("read"), info("udf")]);
        stats.counters(1).items_in.store(10_000, Relaxed);
        assert_eq!(ChunkSizer::new(&source(16, 1024)).next(&stats), 16);
        stats.counters(2).items_in.store(3, Relaxed);
        assert_eq!(ChunkSizer::new(&source(16, 1024)).next(&stats), 32);
    }
}
