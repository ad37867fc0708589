//! The source thread: a random-access source's items in its order ([`OrderedItems`], also
//! run inline in the consumer), or a stream read epoch by epoch; and the sizing of the
//! chunks it hands on.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver};

use crate::clock::thread_cpu;
use crate::error::{Error, Result};
use crate::plan::physical::SourceStage;
use crate::stats::ops::read_time;
use crate::stats::{PipelineStats, StageCounters, StageInfo};

use super::channel::{send_counted, Msg};
use super::control::Control;
use super::item::{Chunk, Item};
use super::resume::Cursor;

/// Starts the source thread; its chunks (and the error that ends them) arrive on the
/// returned channel. A stream's epoch `e` is data epoch `first_epoch + e` (what its order and
/// the items' randomness derive from); cursors count epochs from 0.
pub(super) fn spawn_source(
    src: &SourceStage,
    resume: Option<Cursor>,
    seed: u64,
    first_epoch: u64,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
) -> Result<Receiver<Msg>> {
    let (tx, rx) = bounded::<Msg>(src.queue_depth.max(1));
    let src = src.clone();
    let (ctl2, stats) = (ctl.clone(), stats.clone());
    ctl.spawn("sluice-source".into(), move || {
        let c = stats.counters(0);
        // Under a memory cap a chunk waits until it fits ([`super::MemoryCap`]).
        let admit = |chunk: &Chunk| {
            if let (Some(cap), Some(last)) = (stats.memory(), chunk.last()) {
                let need = super::memory::ChunkNeed {
                    items: chunk.len() as u64,
                    last: (last.cursor.epoch, last.cursor.pos),
                };
                cap.admit(need, &stats, &ctl2);
            }
        };
        if let Some(mut items) = OrderedItems::new(&src, resume) {
            while let Some(chunk) = items.next_chunk(&stats) {
                admit(&chunk);
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
            let data_epoch = first_epoch.wrapping_add(epoch);
            let stream = match src.source.stream_epoch(seed, data_epoch) {
                Ok(s) => s,
                Err(e) => {
                    send_counted(&tx, Err(e), c);
                    return;
                }
            };
            let mut chunk = sizer.next(&stats);
            let mut items = Vec::with_capacity(chunk as usize);
            let mut timer = ReadTimer::start(&stats);
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
                        items.push(Item::at(data_epoch, i, i, cursor).with_sample(sample))
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
                    timer.chunk(&stats, &items);
                    admit(&items);
                    if !send_counted(&tx, Ok(std::mem::take(&mut items)), c) {
                        return;
                    }
                    timer = ReadTimer::start(&stats);
                    chunk = sizer.next(&stats);
                }
            }
            timer.chunk(&stats, &items);
            admit(&items);
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
    Ok(rx)
}

/// Times a stream's reading chunk by chunk when the run times its steps: the reader's thread
/// CPU between chunks is the read's (a blocked send costs none).
struct ReadTimer(Option<(Instant, Duration)>);

impl ReadTimer {
    fn start(stats: &PipelineStats) -> Self {
        ReadTimer(stats.op_times().map(|_| (Instant::now(), thread_cpu())))
    }
    /// Records `items`, read since the timer started (restarted after each send: the time a
    /// full queue blocks it is not the read's).
    fn chunk(&self, stats: &PipelineStats, items: &[Item]) {
        let (Some((t0, c0)), Some(times)) = (self.0, stats.op_times()) else {
            return;
        };
        if !items.is_empty() && times.wants(None) {
            let bytes = items.iter().map(|it| it.sample.nbytes() as u64).sum();
            let t = read_time(items.len() as u64, bytes, thread_cpu() - c0, t0.elapsed());
            times.record(None, &t);
        }
    }
}

/// A random-access source's items in its order (shuffle, shard, epochs), chunk by chunk,
/// with no sample read yet: reading is the first chain's work. Cheap enough to run in the
/// consumer when every stage does.
pub(super) struct OrderedItems {
    source: crate::source::SourceRef,
    order: crate::order::IndexOrder,
    epoch: u64,
    pos: u64,
    /// The elastic epoch's positions, once the producer is in that epoch.
    elastic: Option<crate::order::Positions>,
    sizer: ChunkSizer,
    /// Items named to [`crate::Source::will_need`] beyond the chunk just made, and the next
    /// (epoch, position) not yet named.
    ahead: u64,
    hinted: (u64, u64),
    /// Positions made into chunks and named, since this walk started.
    made: u64,
    named: u64,
}

impl OrderedItems {
    /// From `resume` on; `None` for a streaming source.
    pub(super) fn new(src: &SourceStage, resume: Option<Cursor>) -> Option<Self> {
        let order = src.order.clone()?;
        let (epoch, pos) = resume.map_or((0, 0), |r| (r.epoch, r.pos));
        let elastic = elastic_positions(&order, epoch, pos);
        // Elastic epochs enumerate their positions: no naming ahead there.
        let ahead = match order.elastic {
            Some(_) => 0,
            None => src.source.will_need_ahead(),
        };
        Some(OrderedItems {
            ahead,
            hinted: (epoch, pos),
            made: 0,
            named: 0,
            source: src.source.clone(),
            order,
            epoch,
            pos,
            elastic,
            sizer: ChunkSizer::new(src),
        })
    }

    pub(super) fn next_chunk(&mut self, stats: &PipelineStats) -> Option<Chunk> {
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
                    Item::at(at.epoch, at.index, at.source_index, cursor)
                })
                .collect::<Chunk>();
            self.pos = end;
            if self.ahead == 0 {
                let indices: Vec<u64> = items.iter().map(|it| it.source_index).collect();
                self.source.will_need(&indices);
            } else {
                self.name_ahead(end - start);
            }
            return Some(items);
        }
    }
}

impl OrderedItems {
    /// Names to the source the positions after the last one named, up to `ahead` past the
    /// chunks made (the two walks start at the same position and cross epoch ends alike),
    /// at most 64 Ki per call.
    fn name_ahead(&mut self, made: u64) {
        self.made += made;
        let order = &self.order;
        let (mut e, mut p) = self.hinted;
        let mut indices = Vec::new();
        while self.named < self.made + self.ahead && indices.len() < 1 << 16 {
            if order.is_done(e) || order.epoch_len() == 0 {
                break;
            }
            if p >= order.epoch_len_of(e) {
                (e, p) = (e + 1, 0);
                continue;
            }
            indices.push(order.position(e, p).source_index);
            p += 1;
            self.named += 1;
        }
        self.hinted = (e, p);
        if !indices.is_empty() {
            self.source.will_need(&indices);
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
            pool: None,
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
    fn by_default_chunks_start_at_one_item_and_costly_ones_stay_there() {
        let first = crate::LowerOptions::default().chunk_size;
        assert_eq!(first, 1, "until items are measured, each travels alone");
        let mut s = ChunkSizer::new(&source(first, 1024));
        assert_eq!(s.next(&stats_after(0, 0)), 1, "no measurement yet");
        // A 2 s Python call per item: one item per chunk, so 8 threads start 8 of them.
        assert_eq!(s.next(&stats_after(4, 2_000_000_000)), 1);
        // 100 µs items grow to the 10 that carry 1 ms, doubling.
        let sizes: Vec<u64> = (0..6).map(|_| s.next(&stats_after(50, 100_000))).collect();
        assert_eq!(sizes, [2, 4, 8, 10, 10, 10]);
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
            pool: None,
        };
        let stats = PipelineStats::new(vec![info("source"), info("read"), info("udf")]);
        stats.counters(1).items_in.store(10_000, Relaxed);
        assert_eq!(ChunkSizer::new(&source(16, 1024)).next(&stats), 16);
        stats.counters(2).items_in.store(3, Relaxed);
        assert_eq!(ChunkSizer::new(&source(16, 1024)).next(&stats), 32);
    }
}
