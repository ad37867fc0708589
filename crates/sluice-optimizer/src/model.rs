//! The cost model: predicts what a physical plan will sustain on this machine from a profile.
//!
//! - An op's CPU cost scales with the bytes it receives when it works on pixels/elements
//!   (pixel-wise, geometric and size-reducing ops); decoders and opaque ops cost what they
//!   cost. So moving a crop before a colour jitter shrinks the jitter's cost by the crop's
//!   size ratio — the effect AutoOrder exploits.
//! - A size-reducing, decoding or opaque op's output size is what the profile saw; pixel-wise
//!   and geometric ops keep their input/output size ratio.
//! - A stage of N workers sustains N / (CPU seconds per source sample); stages on threads or
//!   inline that run Python share one GIL; inline stages share the consumer thread, which
//!   also converts every output for Python ([`CONSUMER`], GIL held); and all CPU work shares
//!   the machine's cores. The prediction is the tightest of those bounds.
//! - A stage on remote workers ([`RemoteModel`], Ray actors) runs its ops' CPU there: an
//!   actor does one chunk at a time (`k` items: `k·c` of work plus its own per-chunk
//!   overhead, with `in_flight` chunks queued so the round trip overlaps). Here it costs the
//!   submitting and receiving per chunk (GIL held) and one copy of the reply; the bytes moved
//!   per sample (item coordinates or samples in, outputs back) are bounded by the link.
//!   On a single-node cluster the actors' CPU still counts against this machine's cores.

use std::collections::HashMap;

use sluice_core::exec::backend::RAY;
use sluice_core::exec::{CHUNK_BYTES, CHUNK_WORK_NS};
use sluice_core::{OpKind, PhysicalPlan, StageKind, Variant};

use crate::options::{OptimizerOptions, TransferCosts};
use crate::plan::{CachePoint, Prediction, StagePrediction};
use crate::profile::{OpProfile, Profile};

/// CPU seconds each executor stage adds per item it hands on (channel, reply slot, wakeup),
/// amortised over a chunk: `benchmarks/engine_overhead.py` measures 0.10 µs per sample for
/// source → op → batch → numpy, three hand-offs and the sample itself; rounded up.
pub const HANDOFF_S: f64 = 0.1e-6;
/// CPU seconds an inline stage (a call over the chunk in the consumer's thread: no channel,
/// no wake-up) adds per item: `benchmarks/engine_overhead.py` measures one more map at
/// 0.005–0.019 µs per sample. Charging inline stages [`HANDOFF_S`] put the NLP baseline
/// (six inline stages) 45% below its measured rate once tokenizing cost 0.6 µs a line.
pub const INLINE_STEP_S: f64 = 0.02e-6;
/// Collating costs about one memory copy of the batch, and a stage reading samples another
/// core made pays about as much for fetching them. `benchmarks/micro` measures a CV batch
/// (64 × 602 KB) at 21 GB/s into memory mimalloc reuses and 2 GB/s into fresh pages (system
/// allocator); in a pipeline (`benchmarks/batch_costs.py`, rows read cold, batches freed
/// by the consumer) 6.6–12.7 GB/s: 8 GB/s.
pub const COPY_BYTES_PER_S: f64 = 8e9;
/// Bytes a batch of at most this size is collated at [`SMALL_COLLATE_BYTES_PER_S`]: it stays
/// in the core's caches while it is gathered.
pub const SMALL_BATCH_BYTES: f64 = 2.0 * 1024.0 * 1024.0;
/// Collating a batch of up to [`SMALL_BATCH_BYTES`]: `benchmarks/batch_costs.py` measures
/// 12.7 GB/s for 16 × 96 KB spectrograms (1.5 MB) against 6.6 GB/s for 64 × 602 KB images.
/// At [`COPY_BYTES_PER_S`] the NLP cached plans (256 KB batches, bound by collating)
/// were predicted 20% below their measured rate.
pub const SMALL_COLLATE_BYTES_PER_S: f64 = 12e9;

/// The rate a batch of `batch_bytes` is collated at.
pub fn collate_bytes_per_s(batch_bytes: f64) -> f64 {
    if batch_bytes <= SMALL_BATCH_BYTES {
        SMALL_COLLATE_BYTES_PER_S
    } else {
        COPY_BYTES_PER_S
    }
}

/// CPU seconds per sample a memory-cache hit costs: the lookup and the clone of the
/// sample's fields, whose buffers it shares (no bytes are copied; whoever reads them next
/// pays for fetching them). `benchmarks/micro` (`cache hit, chunk of 64 token samples`)
/// measures 0.10 µs per NLP sample on one thread.
pub const CACHE_HIT_S: f64 = 0.1e-6;
/// CPU seconds one chunk's trip from one thread to the next costs besides its items: the
/// sender's wake-up call, the receiver's spin, park and unpark, the caches it refills. With
/// the NLP two-thread plan (two such trips per chunk), chunks of ~250 µs of work cost 5% /
/// 15% more CPU per line than the inline plan and chunks of ~1 ms −4% / +4%
/// (`benchmarks/chunk_cost.py`, two runs on 2026-11-23): three more chunks per ms of work,
/// two trips each, ~10% of that ms — about 17 µs a trip.
pub const TRIP_S: f64 = 17e-6;
/// CPU seconds collating costs per field of each sample besides copying its bytes (the
/// column's values gathered, the sample's fields dropped): `PYTHONPATH=python python
/// benchmarks/batch_costs.py` (2026-11-23, two runs) measures 0.04–0.09 µs per extra
/// string field on top of 0.14–0.15 µs for a sample of one small tensor, and ~8.5 GB/s for
/// the tensors' bytes (6.6 GB/s for 64 × 602 KB image batches, 12.7 GB/s for 16 × 96 KB
/// spectrograms).
pub const COLLATE_FIELD_S: f64 = 0.05e-6;
/// Reading a cached sample back from the disk tier (page cache or SSD, plus decoding the
/// record): about one GB/s.
pub const DISK_BYTES_PER_S: f64 = 1e9;

/// What handing outputs to a Python consumer costs in its thread (GIL held): per output
/// (the iterator call, the dict), per field of an output (a numpy array or a list), per byte
/// of an output (freeing the one before, in the consumer's thread) and per string or bytes
/// value made a Python object. Fitted to `PYTHONPATH=python python benchmarks/batch_costs.py`
/// (2026-11-23, reference VM, outputs kept 32 ahead so the consumer never waits): an output
/// with no fields 0.72 µs; one int64 field of 32 KB 1.8 µs, 64 KB 1.7 µs, 256 KB 3.6 µs; two
/// of 256 KB 5.1 µs; a 1.5 MB spectrogram batch 5.9 µs, a 38.5 MB image batch 60 µs (large
/// buffers go back to the OS whole); each string 0.04–0.05 µs. At a million NLP lines a
/// second (a string and a token tensor per line) that is a tenth of the CPU, which the model
/// did not count before.
#[derive(Debug, Clone, Copy)]
pub struct ConsumerCosts {
    pub per_output_s: f64,
    pub per_field_s: f64,
    pub freed_bytes_per_s: f64,
    pub per_object_s: f64,
}

/// The measured [`ConsumerCosts`] (see there).
pub const CONSUMER: ConsumerCosts = ConsumerCosts {
    per_output_s: 0.8e-6,
    per_field_s: 1.0e-6,
    freed_bytes_per_s: 400e9,
    per_object_s: 0.045e-6,
};

impl ConsumerCosts {
    /// CPU seconds per row (one sample of an output of `rows`) of `bytes`, `fields` fields
    /// and `objects` Python objects.
    pub fn per_row(&self, rows: f64, bytes: f64, fields: f64, objects: f64) -> f64 {
        let rows = rows.max(1.0);
        (self.per_output_s + fields * self.per_field_s) / rows
            + bytes / self.freed_bytes_per_s
            + objects * self.per_object_s
    }
}

/// Remote workers a plan may put stages on: the backend's name in plans, the CPUs its
/// cluster offers and what moving data costs.
///
/// ```
/// use sluice_optimizer::{OptimizerOptions, RemoteModel};
/// assert!(RemoteModel::from_options(&OptimizerOptions::default()).is_none());
/// let o = OptimizerOptions { remote_cpus: Some(64.0), ..Default::default() };
/// assert_eq!(RemoteModel::from_options(&o).unwrap().max_actors(), 64);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteModel {
    pub backend: String,
    pub cpus: f64,
    pub shares_local_cores: bool,
    pub actor_cpus: f64,
    pub max_actors: Option<usize>,
    pub costs: TransferCosts,
}

impl RemoteModel {
    /// The Ray cluster described by `o` (`None` without `remote_cpus`).
    pub fn from_options(o: &OptimizerOptions) -> Option<RemoteModel> {
        let cpus = o.remote_cpus.filter(|c| *c > 0.0)?;
        Some(RemoteModel {
            backend: RAY.into(),
            cpus,
            shares_local_cores: o.remote_shares_local_cores,
            actor_cpus: o.actor_cpus.max(0.0),
            max_actors: o.max_actors,
            costs: o.transfer.clone(),
        })
    }
    /// Actors the cluster can hold at once (an actor reserving no CPU still needs one to
    /// run on).
    pub fn max_actors(&self) -> usize {
        let by_cpus = (self.cpus / self.actor_cpus.max(1.0)).floor() as usize;
        self.max_actors.map_or(by_cpus, |m| m.min(by_cpus))
    }
}

/// Whether `op` rewrites its input's buffer in place (a pixel-wise op writing only fields it
/// reads). Samples served by a memory cache share their buffers with it, so the first such
/// op after a hit copies the buffer first (copy-on-write): a hit itself copies nothing.
pub fn writes_in_place(op: &sluice_core::OpRef) -> bool {
    let m = op.meta();
    m.kind == OpKind::PixelWise && m.writes.iter().all(|w| m.reads.contains(w))
}

/// What a sample of `bytes` served from a memory cache costs the op after the cache point
/// (`next`: the op and its id): when that op writes in place (see [`writes_in_place`]), the
/// copy of the fields it writes — their size as profiled, else the whole sample's. An ASR
/// sample after the phase vocoder holds 563 KB, of which `time_mask` copies the 301 KB of
/// features: charging the whole sample put the cached ASR plans 30% below their measured
/// rate.
pub fn after_hit(next: Option<(&sluice_core::OpRef, u64)>, profile: &Profile, bytes: f64) -> f64 {
    match next {
        Some((op, id)) if writes_in_place(op) => {
            let written = profile.op(id).and_then(OpProfile::written_per_item);
            written.unwrap_or(bytes).min(bytes) / COPY_BYTES_PER_S
        }
        _ => 0.0,
    }
}

/// The sizes and costs of ops as they flow, given an order.
#[derive(Debug, Clone)]
pub struct Flow<'a> {
    ops: HashMap<u64, &'a OpProfile>,
    /// Items per source sample entering the next op.
    pub items: f64,
    /// Bytes per item entering the next op.
    pub bytes: f64,
    /// How far the op costs are inflated for cores slowing each other down: 0 with one core
    /// busy, 1 with all of them ([`OpProfile::parallel_efficiency`] was measured then).
    contention: f64,
}

impl<'a> Flow<'a> {
    /// The flow right after the source read.
    pub fn new(profile: &'a Profile) -> Self {
        Flow {
            ops: profile
                .ops
                .iter()
                .filter_map(|o| o.op_id.map(|id| (id, o)))
                .collect(),
            items: 1.0,
            bytes: profile.source.bytes_out_per_item(),
            contention: 0.0,
        }
    }
    /// The flow with `busy` of `cores` cores working at once: each op's CPU per item rises
    /// from what it costs alone (one busy core) to what it cost with every core running it
    /// (all busy), linearly in between.
    pub fn contended(profile: &'a Profile, busy: f64, cores: f64) -> Self {
        Flow {
            contention: if cores > 1.0 {
                ((busy - 1.0) / (cores - 1.0)).clamp(0.0, 1.0)
            } else {
                0.0
            },
            ..Flow::new(profile)
        }
    }
    /// Passes op `op_id` over the flow; returns its CPU seconds per source sample (0 for an
    /// op the profile did not see, e.g. one after a batch).
    pub fn pass(&mut self, op_id: u64) -> f64 {
        let Some(p) = self.ops.get(&op_id) else {
            return 0.0;
        };
        let scales = matches!(
            p.kind,
            OpKind::PixelWise | OpKind::Geometric | OpKind::SizeReducing
        );
        let seen_in = p.bytes_in_per_item();
        let ratio = if seen_in > 0.0 {
            self.bytes / seen_in
        } else {
            1.0
        };
        let cost = if scales {
            p.cpu_per_item() * ratio
        } else {
            p.cpu_per_item()
        };
        let slowdown = 1.0 + self.contention * (1.0 / p.parallel_efficiency.clamp(0.1, 1.0) - 1.0);
        let cost = cost * self.items * slowdown;
        self.bytes = match p.kind {
            OpKind::PixelWise | OpKind::Geometric if seen_in > 0.0 => {
                self.bytes * p.bytes_out_per_item() / seen_in
            }
            _ => p.bytes_out_per_item(),
        };
        self.items *= p.selectivity();
        cost
    }
}

/// Items per chunk once the executor has measured the stages (`exec::source`'s sizer):
/// ~[`CHUNK_WORK_NS`] of `work` (CPU seconds per item after the source), no more than
/// [`CHUNK_BYTES`] of items of `item_bytes`, within the plan's first
/// ([`PhysicalPlan::first_chunk`]) and largest chunk.
///
/// ```
/// use sluice_core::{lower, LogicalPlan, LowerOptions, RangeSource, SourceNode};
/// use std::sync::Arc;
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(9)))));
/// let plan = lower(&src, &LowerOptions::default()).unwrap();
/// // 10 µs an item: 100 items carry 1 ms; 2 s an item: one at a time.
/// assert_eq!(sluice_optimizer::model::steady_chunk(&plan, 10e-6, 100.0), 100.0);
/// assert_eq!(sluice_optimizer::model::steady_chunk(&plan, 2.0, 100.0), 1.0);
/// ```
pub fn steady_chunk(plan: &PhysicalPlan, work: f64, item_bytes: f64) -> f64 {
    let first = plan.first_chunk() as f64;
    let max_chunk = (plan.source.max_chunk.max(plan.source.chunk_size).max(1)) as f64;
    (CHUNK_WORK_NS * 1e-9 / work.max(1e-12))
        .min(CHUNK_BYTES / item_bytes.max(1.0))
        .clamp(first, max_chunk)
        .floor()
}

/// CPU seconds per source sample of running `order` after the source.
pub fn chain_cost(profile: &Profile, order: &[u64]) -> f64 {
    let mut flow = Flow::new(profile);
    order.iter().map(|&id| flow.pass(id)).sum()
}

/// Predicts the steady-state throughput of `plan` on `cores` cores (with a cache: from the
/// second epoch on, when the cache is warm).
pub fn predict(
    plan: &PhysicalPlan,
    profile: &Profile,
    cores: usize,
    cache: Option<&CachePoint>,
) -> Prediction {
    predict_with(plan, profile, cores, cache, None)
}

/// [`predict`], with stages on `remote`'s backend modelled as running there.
///
/// Ops cost more when cores are busy at once ([`OpProfile::parallel_efficiency`]): the plan
/// is predicted with every op at its cost alone, which says how many cores it keeps busy
/// (throughput × CPU per sample), then again with the ops' costs at that many busy cores.
pub fn predict_with(
    plan: &PhysicalPlan,
    profile: &Profile,
    cores: usize,
    cache: Option<&CachePoint>,
    remote: Option<&RemoteModel>,
) -> Prediction {
    let alone = predict_busy(plan, profile, cores, cache, remote, 1.0);
    let busy = (alone.throughput * alone.cpu_per_sample).min(cores as f64);
    if busy.is_finite() && busy > 1.0 {
        predict_busy(plan, profile, cores, cache, remote, busy)
    } else {
        alone
    }
}

fn predict_busy(
    plan: &PhysicalPlan,
    profile: &Profile,
    cores: usize,
    cache: Option<&CachePoint>,
    remote: Option<&RemoteModel>,
    busy: f64,
) -> Prediction {
    let mut flow = Flow::contended(profile, busy, cores.max(1) as f64);
    let mut read_cpu = profile.source.cpu_per_item();
    // The op after a memory cache point, when it copies the shared buffers first.
    let first_op = plan.stages.iter().find_map(|s| match &s.kind {
        StageKind::Chain { ops, .. } => ops.first().map(|o| (&o.op, o.op_id)),
        _ => None,
    });
    if let Some(c) = cache {
        let computed: f64 = read_cpu + c.op_ids.iter().map(|&id| flow.pass(id)).sum::<f64>();
        let expected = c.expected_bytes.max(1) as f64;
        let memory = (c.budget as f64 / expected).min(1.0);
        let disk = (c.disk_budget as f64 / expected).min(1.0 - memory);
        read_cpu = memory * (CACHE_HIT_S + after_hit(first_op, profile, flow.bytes))
            + disk * flow.bytes / DISK_BYTES_PER_S
            + (1.0 - memory - disk) * computed;
    }
    let cores = cores.max(1) as f64;
    let first_inline = plan
        .stages
        .iter()
        .rposition(|s| s.variant != Variant::Inline)
        .map_or(0, |i| i + 1);
    let mut stages = Vec::new();
    let (mut gil, mut consumer, mut total) = (0.0, 0.0, 0.0);
    // Samples per output (batches stack them).
    let mut rows = 1.0;
    // Stages that receive from another thread (index in `stages`, rows per item then), and
    // the largest item any chain makes: what the executor sizes chunks by.
    let mut trips: Vec<(usize, f64)> = Vec::new();
    let mut item_bytes: f64 = 0.0;
    // Bytes per source sample crossing the link to and from remote workers.
    let mut link_bytes = 0.0;
    let source_ships = plan.source.source.ship().is_some();
    // The source thread: one position per sample plus the hand-off.
    let src_cpu = HANDOFF_S;
    stages.push(StagePrediction {
        label: format!("source: {}", plan.source.source.name()),
        variant: "threads=1".into(),
        cpu_per_sample: src_cpu,
        capacity: 1.0 / src_cpu,
    });
    total += src_cpu;
    for (i, st) in plan.stages.iter().enumerate() {
        let inline = i >= first_inline;
        let on_remote = remote.filter(
            |r| matches!(&st.variant, Variant::Pool { backend, .. } if *backend == r.backend),
        );
        if let (Some(r), StageKind::Chain { read, ops }) = (on_remote, &st.kind) {
            let bytes_in = if !*read {
                flow.bytes * flow.items
            } else if source_ships {
                r.costs.item_bytes
            } else {
                profile.source.bytes_out_per_item()
            };
            let mut cpu = if *read { read_cpu } else { 0.0 };
            cpu += ops.iter().map(|o| flow.pass(o.op_id)).sum::<f64>();
            let bytes_out = flow.bytes * flow.items;
            // The executor grows chunks to ~1 ms of all stages' work; this stage's own share
            // bounds that from above.
            let chunk = steady_chunk(plan, cpu, bytes_in.max(bytes_out));
            let p = remote_stage(r, cpu, bytes_in, bytes_out, chunk, st.variant.workers());
            link_bytes += bytes_in + bytes_out;
            gil += p.driver_gil;
            total += p.driver_cpu
                + if r.shares_local_cores {
                    p.remote_cpu
                } else {
                    0.0
                };
            stages.push(StagePrediction {
                label: st.kind.label(),
                variant: st.variant.to_string(),
                cpu_per_sample: cpu,
                capacity: p.capacity,
            });
            continue;
        }
        let mut cpu = if inline { INLINE_STEP_S } else { HANDOFF_S } * flow.items;
        let mut python = 0.0;
        // A threaded stage receives its items from another thread: chunk trips (priced once
        // the chunk size is known, below) and, for a chain that takes samples, their bytes
        // read from another core's cache.
        if !inline {
            trips.push((stages.len(), rows));
        }
        match &st.kind {
            StageKind::Chain { read, ops } => {
                if *read {
                    cpu += read_cpu;
                } else if !inline {
                    cpu += flow.bytes * flow.items / COPY_BYTES_PER_S;
                }
                item_bytes = item_bytes.max(flow.bytes);
                for o in ops {
                    let c = flow.pass(o.op_id);
                    cpu += c;
                    if o.op.meta().python {
                        python += c;
                    }
                    item_bytes = item_bytes.max(flow.bytes);
                }
            }
            StageKind::Batch { read, size, .. } => {
                if *read {
                    cpu += read_cpu;
                }
                let batch_bytes = flow.bytes * flow.items * *size as f64;
                cpu += flow.items
                    * (flow.bytes / collate_bytes_per_s(batch_bytes)
                        + COLLATE_FIELD_S * profile.output.fields_per_item());
                rows *= *size as f64;
            }
            StageKind::Unbatch => rows = 1.0,
            _ => {}
        }
        let workers = if inline { 1 } else { st.variant.workers() } as f64;
        let off_gil = matches!(&st.variant, Variant::Pool { .. }) && !inline;
        if !off_gil {
            gil += python;
        }
        if inline {
            consumer += cpu;
        }
        total += cpu;
        stages.push(StagePrediction {
            label: st.kind.label(),
            variant: if inline {
                "inline".into()
            } else {
                st.variant.to_string()
            },
            cpu_per_sample: cpu,
            capacity: workers / cpu.max(1e-12),
        });
    }
    // Chunks carry ~1 ms of the stages' work unless their items are large, as the executor
    // sizes them; after a batch, a trip carries at least a batch.
    if !trips.is_empty() {
        let work: f64 = stages[1..].iter().map(|s| s.cpu_per_sample).sum();
        let chunk = steady_chunk(plan, work, item_bytes);
        for &(i, rows) in &trips {
            let trip = TRIP_S / chunk.max(rows);
            let s = &mut stages[i];
            s.cpu_per_sample += trip;
            // `stages[0]` is the source thread.
            s.capacity = plan.stages[i - 1].variant.workers() as f64 / s.cpu_per_sample;
            total += trip;
        }
        // The consumer receives the last threaded stage's outputs.
        if first_inline > 0 {
            let trip = TRIP_S / chunk.max(rows);
            consumer += trip;
            total += trip;
        }
    }
    // The consumer thread converts each output for Python (priced when the profile recorded
    // what the outputs hold).
    let out = &profile.output;
    if out.items > 0 {
        let hand_over = flow.items
            * CONSUMER.per_row(
                rows,
                flow.bytes,
                out.fields_per_item(),
                out.objects_per_item(),
            );
        consumer += hand_over;
        gil += hand_over;
        total += hand_over;
    }
    let mut bounds: Vec<(f64, String)> = stages
        .iter()
        .map(|s| (s.capacity, s.label.clone()))
        .collect();
    bounds.push((cores / total.max(1e-12), "cores".into()));
    // The consumer first: when only its own Python work holds the GIL, it names the limit.
    if consumer > 0.0 {
        bounds.push((1.0 / consumer, "consumer".into()));
    }
    if gil > 0.0 {
        bounds.push((1.0 / gil, "gil".into()));
    }
    if let Some(r) = remote.filter(|_| link_bytes > 0.0) {
        bounds.push((r.costs.bandwidth / link_bytes, "link".into()));
    }
    let (throughput, bottleneck) = bounds
        .into_iter()
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((f64::INFINITY, "none".into()));
    Prediction {
        throughput,
        bottleneck,
        stages,
        cpu_per_sample: total,
    }
}

/// One remote stage's terms, per source sample.
struct RemoteStageCost {
    /// Samples per second its actors sustain.
    capacity: f64,
    /// CPU seconds here (GIL held) and in total here (plus the reply's copy).
    driver_gil: f64,
    driver_cpu: f64,
    /// CPU seconds on the actors.
    remote_cpu: f64,
}

fn remote_stage(
    r: &RemoteModel,
    cpu: f64,
    bytes_in: f64,
    bytes_out: f64,
    chunk: f64,
    actors: usize,
) -> RemoteStageCost {
    let c = &r.costs;
    let busy = chunk * cpu + c.actor_s_per_chunk;
    // An actor works on one chunk at a time; with `in_flight` queued, it idles only when the
    // round trip outlasts the queued work (Little's law on its queue).
    let per_actor = (chunk / busy).min(c.in_flight.max(1) as f64 * chunk / (busy + c.round_trip_s));
    RemoteStageCost {
        capacity: actors as f64 * per_actor,
        driver_gil: c.driver_s_per_chunk / chunk,
        driver_cpu: c.driver_s_per_chunk / chunk + (bytes_in + bytes_out) / COPY_BYTES_PER_S,
        remote_cpu: cpu + c.actor_s_per_chunk / chunk,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use sluice_core::{lower, BatchNode, LogicalPlan, LowerOptions};
    use std::sync::Arc;

    fn jitter_then_crop() -> std::sync::Arc<sluice_core::LogicalPlan> {
        pipeline(
            30,
            vec![
                TestOp {
                    ns_per_byte: 200.0,
                    ..TestOp::new("jitter", OpKind::PixelWise)
                },
                TestOp {
                    ns_per_byte: 20.0,
                    out_len: Some(100),
                    ..TestOp::new("crop", OpKind::SizeReducing)
                },
            ],
        )
    }

    #[test]
    fn pixel_ops_cost_less_after_a_size_reducing_op() {
        let plan = jitter_then_crop();
        let p = profiled(&plan, 30);
        let (jitter, crop) = (p.ops[0].op_id.unwrap(), p.ops[1].op_id.unwrap());
        let as_written = chain_cost(&p, &[jitter, crop]);
        let crop_first = chain_cost(&p, &[crop, jitter]);
        // The jitter now sees 100 bytes instead of 1000: ~10x cheaper.
        assert!(
            crop_first < 0.3 * as_written,
            "{crop_first} vs {as_written}"
        );
    }

    #[test]
    fn handing_outputs_to_python_costs_the_consumer() {
        // Samples of an int and a 1000-byte `img` (bytes: one Python object per row).
        let plan = pipeline(40, vec![busy_op("work", 1, OpKind::Opaque)]);
        let mut p = profiled(&plan, 40);
        assert_eq!(p.output.items, 40);
        assert_eq!(p.output.fields_per_item(), 2.0);
        assert_eq!(p.output.objects_per_item(), 1.0);
        let batched = Arc::new(LogicalPlan::Batch(
            BatchNode::try_new(plan.clone(), 100, false).unwrap(),
        ));
        let lowered = |plan: &Arc<LogicalPlan>| {
            lower(
                plan,
                &LowerOptions {
                    num_threads: 2,
                    ..Default::default()
                },
            )
            .unwrap()
        };
        let (rows, batches) = (lowered(&plan), lowered(&batched));
        // A consumer that must make a thousand strings per sample is the bottleneck, and
        // pays the per-output costs once per batch rather than once per sample.
        p.output.objects = 1000 * p.output.items;
        let one = predict(&rows, &p, 2, None);
        assert_eq!(one.bottleneck, "consumer");
        let bytes = p.ops[0].bytes_out_per_item();
        let per_row = CONSUMER.per_row(1.0, bytes, 2.0, 1000.0);
        // (Plus the chunks' trips into the consumer: well under 1% here.)
        assert!((one.throughput * per_row - 1.0).abs() < 0.01, "{one:?}");
        let many = predict(&batches, &p, 2, None);
        let per_row = CONSUMER.per_row(100.0, bytes, 2.0, 1000.0);
        assert!((many.throughput * per_row - 1.0).abs() < 0.01, "{many:?}");
        // A profile saved before outputs were recorded prices no conversion.
        p.output = Default::default();
        assert_ne!(predict(&rows, &p, 2, None).bottleneck, "consumer");
    }

    #[test]
    fn every_thread_a_sample_crosses_costs_a_trip_and_a_read_of_its_bytes() {
        let ops = ["a", "b", "c"]
            .map(|n| busy_op(n, 2, OpKind::Opaque))
            .to_vec();
        let plan = pipeline(40, ops);
        let p = profiled(&plan, 40);
        let fused = lower(&plan, &Default::default()).unwrap();
        // The same ops, each on threads of its own.
        let mut split = fused.clone();
        let StageKind::Chain { ops, .. } = split.stages.remove(0).kind else {
            panic!("{fused}");
        };
        for (i, op) in ops.into_iter().enumerate().rev() {
            let kind = StageKind::Chain {
                read: i == 0,
                ops: vec![op],
            };
            split.stages.insert(
                0,
                sluice_core::Stage {
                    kind,
                    ..fused.stages[0].clone()
                },
            );
        }
        assert_eq!(split.stages.len(), 3);
        let (a, b) = (predict(&fused, &p, 2, None), predict(&split, &p, 2, None));
        // Two more crossings, each: the hand-off, the sample's bytes read on another core and
        // a chunk's trip shared by the chunk's items (~1 ms of work: a few hundred of these).
        let bytes = p.ops[0].bytes_out_per_item();
        let per_crossing = HANDOFF_S + bytes / COPY_BYTES_PER_S;
        let extra = b.cpu_per_sample - a.cpu_per_sample;
        assert!(extra > 2.0 * per_crossing, "{extra} vs {per_crossing}");
        assert!(
            extra < 2.0 * (per_crossing + TRIP_S / 100.0),
            "{extra}: {b:?}"
        );
    }

    #[test]
    fn a_cache_hit_is_copied_only_by_an_op_that_writes_in_place() {
        let op = |t: TestOp| -> sluice_core::OpRef { std::sync::Arc::new(t) };
        let jitter = op(TestOp::new("jitter", OpKind::PixelWise));
        let crop = op(TestOp::new("crop", OpKind::SizeReducing));
        let to_float = op(TestOp {
            writes: vec!["float".into()],
            ..TestOp::new("to_float", OpKind::PixelWise)
        });
        let mb = 1e6;
        let plan = pipeline(4, vec![TestOp::new("jitter", OpKind::PixelWise)]);
        let mut prof = profiled(&plan, 4);
        // Not measured (an older profile): the whole sample is copied.
        prof.ops[0].bytes_written = 0;
        assert_eq!(
            after_hit(Some((&jitter, 0)), &prof, mb),
            mb / COPY_BYTES_PER_S
        );
        // Measured: only the fields it writes (a quarter of the sample here).
        let id = prof.ops[0].op_id.unwrap();
        prof.ops[0].bytes_written = prof.ops[0].items_out * 250_000;
        assert_eq!(
            after_hit(Some((&jitter, id)), &prof, mb),
            mb / 4.0 / COPY_BYTES_PER_S
        );
        assert_eq!(after_hit(Some((&crop, id)), &prof, mb), 0.0);
        assert_eq!(after_hit(Some((&to_float, id)), &prof, mb), 0.0);
        assert_eq!(after_hit(None, &prof, mb), 0.0);
    }

    #[test]
    fn threads_raise_capacity_until_cores_bind() {
        let plan = pipeline(20, vec![busy_op("work", 500, OpKind::Opaque)]);
        let mut p = profiled(&plan, 20);
        let one = lower(
            &plan,
            &LowerOptions {
                num_threads: 1,
                ..Default::default()
            },
        )
        .unwrap();
        let four = lower(
            &plan,
            &LowerOptions {
                num_threads: 4,
                ..Default::default()
            },
        )
        .unwrap();
        let (a, b) = (predict(&one, &p, 2, None), predict(&four, &p, 2, None));
        assert!(a.throughput > 1500.0 && a.throughput < 2100.0, "{a:?}");
        assert!(b.throughput / a.throughput > 1.8, "{b:?}");
        assert_eq!(b.bottleneck, "cores");
        // Cores that slow each other down (a tokenizer on hyperthread siblings: 1.44x from
        // two): with both busy the op costs 1/0.72 of its cost alone, so four threads gain
        // 1.44x; one thread keeps one core busy and pays nothing.
        p.ops[0].parallel_efficiency = 0.72;
        let (a2, b2) = (predict(&one, &p, 2, None), predict(&four, &p, 2, None));
        assert!((a2.throughput / a.throughput - 1.0).abs() < 0.02, "{a2:?}");
        let gain = b2.throughput / a2.throughput;
        assert!(gain > 1.3 && gain < 1.6, "{gain}: {b2:?}");
    }
}
