//! The profiler: runs a sample of the pipeline op by op in one thread and records, per op,
//! CPU time (thread clock), wall time, bytes in and out and selectivity — what the cost model
//! and the rules need. Profiles are JSON so they can be saved, inspected and reused.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sluice_core::{
    Emit, Error, LogicalPlan, OnError, OpContext, OpKind, OpRef, Result, Sample, SampleRef,
};

use crate::clock::thread_cpu;
use sluice_core::stats::ops::python_objects;

mod run;
mod scaling;
use scaling::{efficiency, Scaling};

/// How much of the pipeline to run when profiling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProfileOptions {
    /// Source samples to run (spread evenly over a random-access source).
    pub samples: u64,
    /// Stop after this much wall time even if fewer samples ran.
    pub seconds: f64,
    /// Seed for random ops (their cost may depend on their draws).
    pub seed: u64,
    /// When above 0 and the source's length is known: run at most this share of one
    /// epoch's samples (but at least [`MIN_SHARE_SAMPLES`]), so that profiling before a run
    /// costs about that share of its first epoch (`iter(optimize=True)` uses 1%).
    pub epoch_share: f64,
}

/// Fewest samples an `epoch_share` profile runs: fewer leave the per-op medians to chance.
pub const MIN_SHARE_SAMPLES: u64 = 16;

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            samples: 200,
            seconds: 10.0,
            seed: 0,
            epoch_share: 0.0,
        }
    }
}

impl ProfileOptions {
    /// Source samples to run from a source of `len` samples (`None`: unknown length).
    ///
    /// ```
    /// use sluice_optimizer::ProfileOptions;
    /// let o = ProfileOptions { samples: 100, epoch_share: 0.01, ..Default::default() };
    /// assert_eq!(o.samples_of(Some(1_000_000)), 100);
    /// assert_eq!(o.samples_of(Some(5_000)), 50);
    /// assert_eq!(o.samples_of(Some(200)), 16);
    /// assert_eq!(o.samples_of(Some(10)), 10);
    /// assert_eq!(o.samples_of(None), 100);
    /// ```
    pub fn samples_of(&self, len: Option<u64>) -> u64 {
        let mut want = self.samples.max(1);
        if let (Some(len), true) = (len, self.epoch_share > 0.0) {
            let share = (len as f64 * self.epoch_share).ceil() as u64;
            want = want.min(share.max(MIN_SHARE_SAMPLES));
        }
        want.min(len.unwrap_or(u64::MAX))
    }
}

/// Facts about the machine the profile was taken on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Cores available to this process.
    pub cores: usize,
}

impl Machine {
    /// This machine.
    pub fn here() -> Self {
        Machine {
            cores: sluice_core::cores::cores(),
        }
    }
}

/// Measurements of one step (the source read, or one op).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpProfile {
    /// The op's id in the pipeline (`None` for the source read).
    pub op_id: Option<u64>,
    /// API name (`read_images`, `random_resized_crop`, ...).
    pub name: String,
    /// Kind declared by the op (`opaque` for the source).
    pub kind: OpKind,
    /// Runs Python code (GIL-bound).
    pub python: bool,
    /// Draws randomness.
    pub random: bool,
    /// Fields read and written, as declared.
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    /// Items that entered and left.
    pub items_in: u64,
    pub items_out: u64,
    /// Thread CPU time and wall time spent in the step, in seconds.
    pub cpu_s: f64,
    pub wall_s: f64,
    /// Sample bytes entering and leaving the step.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Bytes of the fields it writes, in its output: what an op writing in place copies
    /// when its input's buffers are shared (a memory cache's hit). 0 in profiles from
    /// before it was measured (the model then charges the whole sample).
    #[serde(default)]
    pub bytes_written: u64,
    /// CPU per item alone over CPU per item while every core runs the op at once, measured
    /// on the profile's last chunk: 1 when cores do not slow each other down, below 1 when
    /// they do (shared caches, memory bandwidth, hyperthread siblings: a BPE tokenizer gets
    /// 1.4× from 2 vCPUs here, not 2×). 1 for the source read and Python ops (the GIL keeps
    /// a Python op from running on two cores at once).
    #[serde(default = "one")]
    pub parallel_efficiency: f64,
}

fn one() -> f64 {
    1.0
}

impl OpProfile {
    pub(crate) fn new(op_id: Option<u64>, name: &str) -> Self {
        OpProfile {
            op_id,
            name: name.to_string(),
            kind: OpKind::Opaque,
            python: false,
            random: false,
            reads: vec![],
            writes: vec![],
            items_in: 0,
            items_out: 0,
            cpu_s: 0.0,
            wall_s: 0.0,
            bytes_in: 0,
            bytes_out: 0,
            bytes_written: 0,
            parallel_efficiency: 1.0,
        }
    }
    pub(crate) fn for_op(op: &OpRef, op_id: u64) -> Self {
        let meta = op.meta();
        OpProfile {
            kind: meta.kind,
            python: meta.python,
            random: meta.random,
            reads: meta.reads,
            writes: meta.writes,
            ..OpProfile::new(Some(op_id), op.name())
        }
    }
    /// CPU seconds per input item.
    pub fn cpu_per_item(&self) -> f64 {
        self.cpu_s / self.items_in.max(1) as f64
    }
    /// Outputs per input (a filter is < 1, a flat_map may be > 1).
    pub fn selectivity(&self) -> f64 {
        if self.items_in == 0 {
            1.0
        } else {
            self.items_out as f64 / self.items_in as f64
        }
    }
    /// Mean bytes of an input item.
    pub fn bytes_in_per_item(&self) -> f64 {
        self.bytes_in as f64 / self.items_in.max(1) as f64
    }
    /// Mean bytes of an output item.
    pub fn bytes_out_per_item(&self) -> f64 {
        self.bytes_out as f64 / self.items_out.max(1) as f64
    }
    /// Bytes of the written fields per item out (`None` when not measured).
    pub fn written_per_item(&self) -> Option<f64> {
        (self.bytes_written > 0).then(|| self.bytes_written as f64 / self.items_out.max(1) as f64)
    }
    fn record(&mut self, cpu: Duration, wall: Duration) {
        self.cpu_s += cpu.as_secs_f64();
        self.wall_s += wall.as_secs_f64();
    }
}

/// What the profiled part of the pipeline hands on per sample: its fields, and the values
/// among them that the consumer turns into one Python object per row (strings, bytes, list
/// elements; numbers and tensors are collated into arrays). Converting outputs for Python
/// costs by these (the cost model's `CONSUMER` costs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputShape {
    pub items: u64,
    pub fields: u64,
    pub objects: u64,
}

impl OutputShape {
    fn add(&mut self, s: &Sample) {
        self.items += 1;
        self.fields += s.len() as u64;
        self.objects += s.iter().map(|(_, v)| python_objects(v)).sum::<u64>();
    }
    /// Mean fields per sample.
    pub fn fields_per_item(&self) -> f64 {
        self.fields as f64 / self.items.max(1) as f64
    }
    /// Mean Python objects per sample.
    pub fn objects_per_item(&self) -> f64 {
        self.objects as f64 / self.items.max(1) as f64
    }
}

/// A profile of a pipeline: the source read and every element-wise op before the first
/// stateful step (batch, shuffle buffer, take), measured on the same samples.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_optimizer::{profile, ProfileOptions};
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(1000)))));
/// let p = profile(&src, &ProfileOptions { samples: 50, ..Default::default() })?;
/// assert_eq!(p.source.items_out, 50);
/// let back: sluice_optimizer::Profile = serde_json::from_str(&p.to_json())?;
/// assert_eq!(back, p);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub version: u32,
    /// Fingerprint of the pipeline it was taken on (set by the caller; empty if unknown).
    pub pipeline: String,
    pub machine: Machine,
    /// Source samples run.
    pub samples: u64,
    /// Wall time of the whole profile run, in seconds.
    pub elapsed_s: f64,
    /// The source read.
    pub source: OpProfile,
    /// Element-wise ops in pipeline order.
    pub ops: Vec<OpProfile>,
    /// What the last profiled step hands on (empty in profiles saved before it was kept).
    #[serde(default)]
    pub output: OutputShape,
}

impl Profile {
    /// The current format version.
    pub const VERSION: u32 = 1;

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
    /// Parses a saved profile.
    pub fn from_json(text: &str) -> Result<Self> {
        let p: Profile = serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("not a sluice profile: {e}")))?;
        if p.version != Self::VERSION {
            return Err(Error::invalid(format!(
                "profile version {} is not supported (expected {})",
                p.version,
                Self::VERSION
            )));
        }
        Ok(p)
    }
    /// The op with id `op_id`.
    pub fn op(&self, op_id: u64) -> Option<&OpProfile> {
        self.ops.iter().find(|o| o.op_id == Some(op_id))
    }
    /// Total CPU seconds per source sample of the profiled part of the pipeline.
    pub fn cpu_per_sample(&self) -> f64 {
        (self.source.cpu_s + self.ops.iter().map(|o| o.cpu_s).sum::<f64>())
            / self.samples.max(1) as f64
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "profile of {} samples on {} cores ({:.2} s)",
            self.samples, self.machine.cores, self.elapsed_s
        )?;
        writeln!(
            f,
            "{:<28} {:>12} {:>12} {:>12} {:>12} {:>8} {:>9}",
            "step", "cpu µs/item", "wall µs/item", "bytes in", "bytes out", "sel", "par. eff."
        )?;
        for o in std::iter::once(&self.source).chain(&self.ops) {
            writeln!(
                f,
                "{:<28} {:>12.1} {:>12.1} {:>12.0} {:>12.0} {:>8.3} {:>9.2}",
                o.name,
                o.cpu_per_item() * 1e6,
                o.wall_s / o.items_in.max(1) as f64 * 1e6,
                o.bytes_in_per_item(),
                o.bytes_out_per_item(),
                o.selectivity(),
                o.parallel_efficiency
            )?;
        }
        Ok(())
    }
}

pub(crate) struct Step {
    op: OpRef,
    on_error: OnError,
    op_id: u64,
}

/// The element-wise ops the profiler runs: those before the first stateful step.
pub(crate) fn profiled_steps(plan: &Arc<LogicalPlan>) -> Vec<Step> {
    let mut steps = Vec::new();
    for node in plan.chain() {
        match &*node {
            LogicalPlan::Map(n) => steps.push(Step {
                op: n.op.clone(),
                on_error: n.on_error,
                op_id: n.op_id,
            }),
            LogicalPlan::Batch(_)
            | LogicalPlan::MapBatches(_)
            | LogicalPlan::ShuffleBuffer(_)
            | LogicalPlan::Take(_) => break,
            _ => {}
        }
    }
    steps
}

/// Largest chunk of samples timed as one, the wall time a chunk may take before the next
/// one stops growing, and the bytes a chunk may hold at any step: large samples go one at a
/// time so each op finds its input in cache, as when a chain runs one item through all its
/// ops.
const MAX_CHUNK: usize = 64;
const CHUNK_WALL: Duration = Duration::from_millis(20);
const CHUNK_BYTES: u64 = 1 << 20;

/// Profiles `plan` in the calling thread (so thread CPU time is the steps' own cost).
///
/// Samples go through in chunks, each step over the whole chunk, timed once per chunk — as
/// the executor runs them. Timing every call instead costs two clock reads per op and
/// sample (a system call for the thread clock: 0.48 µs each on the reference VM, measured by
/// `benchmarks/micro`, more than a cheap op itself): timed that way, `truncate` profiled at
/// 0.62 µs per call, timed per chunk at 0.11 µs (`benchmarks/optimizer.py`, NLP).
pub fn profile(plan: &Arc<LogicalPlan>, opts: &ProfileOptions) -> Result<Profile> {
    let source = plan.source().clone();
    let steps = profiled_steps(plan);
    let mut src_prof = OpProfile::new(None, source.name());
    let mut ops: Vec<OpProfile> = steps
        .iter()
        .map(|s| OpProfile::for_op(&s.op, s.op_id))
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.seconds.max(0.0));
    let len = source.len().unwrap_or(u64::MAX);
    let want = opts.samples_of(source.len());

    // Random access: runs of consecutive samples spread over the whole source (files differ
    // in size along a directory listing, and neighbours share words, sizes and cache lines
    // the way a run reading chunks sees them); streams: the first ones.
    let mut stream = if source.random_access() {
        None
    } else {
        Some(source.stream()?)
    };
    let mut done = 0u64;
    let mut chunk = 1usize;
    // The last chunk's source samples, to measure how each op scales once the loop is done.
    let mut last_chunk: Vec<(u64, u64, Sample)> = Vec::new();
    let mut output = OutputShape::default();
    let mut exhausted = false;
    while !exhausted && done < want && (done == 0 || Instant::now() < deadline) {
        let n = chunk.min((want - done) as usize);
        let (t0, c0) = (Instant::now(), thread_cpu());
        let mut got = Vec::with_capacity(n);
        for k in done..done + n as u64 {
            let (index, next) = match &mut stream {
                None => {
                    let index = spread(k, want, len);
                    (index, Some(source.get(index)))
                }
                Some(s) => (k, s.next()),
            };
            let Some(next) = next else {
                exhausted = true;
                break;
            };
            got.push((index, next));
        }
        src_prof.record(thread_cpu() - c0, t0.elapsed());
        let mut samples = Vec::with_capacity(got.len());
        for (index, r) in got {
            let sample = r.map_err(|e| in_sample(source.name(), index, None, e))?;
            src_prof.bytes_out += sample.nbytes() as u64;
            samples.push((index, 0u64, sample));
        }
        let n = samples.len() as u64;
        src_prof.items_in += n;
        src_prof.items_out += n;
        // Random access keeps only the indices (read again afterwards): a sample held here
        // would share its tensors with the one being timed, and an op that writes in place
        // would then be timed copying it first. A stream cannot be read again: its samples
        // are kept (its first op is a decoder that only reads them).
        last_chunk = match &stream {
            None => samples
                .iter()
                .map(|(i, _, _)| (*i, 0, Sample::new()))
                .collect(),
            Some(_) => samples.clone(),
        };
        let peak = run_steps(&steps, &mut ops, samples, opts.seed, &mut output)?;
        done += n;
        let fits = (CHUNK_BYTES * n / peak.max(1)).clamp(1, MAX_CHUNK as u64) as usize;
        chunk = if t0.elapsed() < CHUNK_WALL {
            (chunk * 2).min(fits)
        } else {
            chunk.min(fits)
        };
    }
    src_prof.bytes_in = src_prof.bytes_out;
    let machine = Machine::here();
    if machine.cores > 1 && !last_chunk.is_empty() {
        if stream.is_none() {
            // Random access: read the chunk again rather than hold it while it was timed.
            for (index, _, sample) in &mut last_chunk {
                *sample = source
                    .get(*index)
                    .map_err(|e| in_sample(source.name(), *index, None, e))?;
            }
        }
        let costs: Vec<f64> = ops.iter().map(OpProfile::cpu_per_item).collect();
        let scaling = Scaling::for_profile(opts.epoch_share > 0.0, started.elapsed(), &costs);
        let mut live = last_chunk;
        for (step, prof) in steps.iter().zip(&mut ops) {
            if live.is_empty() {
                break;
            }
            if !prof.python && scaling.measures(prof.cpu_per_item()) {
                prof.parallel_efficiency =
                    efficiency(step, &live, machine.cores, opts.seed, scaling);
            }
            let mut next = Vec::with_capacity(live.len());
            for (index, sub, res) in apply_step(step, live, opts.seed) {
                // Failures were met (and reported or skipped) in the timed run.
                if let Ok(emit) = res {
                    push_emitted(&mut next, index, sub, emit);
                }
            }
            live = next;
        }
    }
    Ok(Profile {
        version: Profile::VERSION,
        pipeline: String::new(),
        machine,
        samples: done,
        elapsed_s: started.elapsed().as_secs_f64(),
        source: src_prof,
        ops,
        output,
    })
}

/// Consecutive source samples the profile reads together.
const RUN: u64 = 16;

/// The source index of the `k`-th of `want` profiled samples out of `len`: runs of [`RUN`]
/// neighbours whose starts are spread evenly. Increasing in `k` and below `len`: the index
/// is at most `k * len / want`.
fn spread(k: u64, want: u64, len: u64) -> u64 {
    let start = k / RUN * RUN;
    (start as u128 * len as u128 / want as u128) as u64 + (k - start)
}

/// Runs a chunk of `(source index, sub-index, sample)` through the steps, timing each step
/// once over the whole chunk; returns the most bytes the chunk held after any step and adds
/// what the last step handed on to `output`.
fn run_steps(
    steps: &[Step],
    ops: &mut [OpProfile],
    mut live: Vec<(u64, u64, Sample)>,
    seed: u64,
    output: &mut OutputShape,
) -> Result<u64> {
    let mut peak: u64 = live.iter().map(|(_, _, s)| s.nbytes() as u64).sum();
    for (step, prof) in steps.iter().zip(ops.iter_mut()) {
        if live.is_empty() {
            break;
        }
        prof.items_in += live.len() as u64;
        prof.bytes_in += live.iter().map(|(_, _, s)| s.nbytes() as u64).sum::<u64>();
        // Paths for error messages, taken before the samples move into the op.
        let paths: Vec<Option<String>> = live.iter().map(|(_, _, s)| s.path()).collect();
        let (t0, c0) = (Instant::now(), thread_cpu());
        let results = apply_step(step, live, seed);
        prof.record(thread_cpu() - c0, t0.elapsed());
        let mut next = Vec::with_capacity(results.len());
        for ((index, sub, res), path) in results.into_iter().zip(paths) {
            match res {
                Ok(emit) => push_emitted(&mut next, index, sub, emit),
                Err(_) if step.on_error == OnError::Skip => {}
                Err(e) => return Err(in_sample(step.op.name(), index, path, e)),
            }
        }
        let bytes: u64 = next.iter().map(|(_, _, s)| s.nbytes() as u64).sum();
        prof.items_out += next.len() as u64;
        prof.bytes_out += bytes;
        prof.bytes_written += next
            .iter()
            .flat_map(|(_, _, s)| prof.writes.iter().filter_map(|w| s.get(w)))
            .map(|v| v.nbytes() as u64)
            .sum::<u64>();
        peak = peak.max(bytes);
        live = next;
    }
    for (_, _, s) in &live {
        output.add(s);
    }
    Ok(peak)
}

/// The context `step` sees for `(index, sub)` in the profile (epoch 0).
fn context(step: &Step, index: u64, sub: u64, seed: u64) -> OpContext {
    OpContext {
        seed,
        epoch: 0,
        index,
        sub,
        op_id: step.op_id,
    }
}

/// `step` over a chunk, one result per input.
fn apply_step(
    step: &Step,
    live: Vec<(u64, u64, Sample)>,
    seed: u64,
) -> Vec<(u64, u64, Result<Emit>)> {
    live.into_iter()
        .map(|(index, sub, s)| {
            (
                index,
                sub,
                step.op.apply(s, &context(step, index, sub, seed)),
            )
        })
        .collect()
}

/// Appends what an op emitted for `(index, sub)` (a flat_map's outputs get sub-indices).
fn push_emitted(next: &mut Vec<(u64, u64, Sample)>, index: u64, sub: u64, emit: Emit) {
    match emit {
        Emit::One(s) => next.push((index, sub, s)),
        Emit::Drop => {}
        Emit::Many(v) => next.extend(
            v.into_iter()
                .enumerate()
                .map(|(j, s)| (index, sluice_core::rng::combine(sub, j as u64 + 1), s)),
        ),
    }
}

fn in_sample(op: &str, index: u64, path: Option<String>, e: Error) -> Error {
    Error::InSample {
        op: op.to_string(),
        sample: SampleRef {
            epoch: 0,
            index,
            path,
        },
        source: Box::new(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{busy_op, pipeline};

    #[test]
    fn measures_cpu_bytes_and_selectivity_per_op() {
        // The one test that times real work: lower bounds only (a thread's CPU clock cannot
        // run slower than the work it did, however busy or slow the machine).
        let burning = |name, us| crate::testing::TestOp {
            burn: true,
            ..busy_op(name, us, OpKind::PixelWise)
        };
        let plan = pipeline(
            100,
            vec![
                burning("slow", 200),
                crate::testing::keep_even(),
                burning("fast", 20),
            ],
        );
        let p = profile(
            &plan,
            &ProfileOptions {
                samples: 40,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.samples, 40);
        assert_eq!(p.ops.len(), 3);
        let (slow, even, fast) = (&p.ops[0], &p.ops[1], &p.ops[2]);
        assert_eq!((slow.items_in, slow.items_out), (40, 40));
        assert_eq!(even.selectivity(), 0.5);
        assert_eq!(fast.items_in, 20);
        assert!(slow.cpu_per_item() >= 200e-6, "{}", slow.cpu_per_item());
        assert!(fast.cpu_per_item() >= 20e-6, "{}", fast.cpu_per_item());
        assert!(slow.bytes_in_per_item() > 0.0);
        assert!(p.to_string().contains("slow"));
    }

    #[test]
    fn samples_are_runs_of_neighbours_spread_over_the_whole_source() {
        for (want, len) in [(100, 1000), (1000, 1000), (37, 40), (1, 5), (200, 100_000)] {
            let idx: Vec<u64> = (0..want).map(|k| spread(k, want, len)).collect();
            assert!(idx.windows(2).all(|w| w[0] < w[1]), "{want}/{len}: {idx:?}");
            assert!(*idx.last().unwrap() < len);
            // Nothing is left out at the end beyond one run's spacing (the old chunked
            // spread stopped at 2/3 of the source).
            assert!(
                idx.last().unwrap() + RUN * len / want + 1 >= len,
                "{want}/{len}"
            );
            if want >= RUN && len > want {
                assert_eq!(idx[1], idx[0] + 1, "a run is consecutive");
            }
        }
        assert_eq!(spread(999, 1000, 1000), 999);
    }

    #[test]
    fn stops_at_the_first_stateful_step_and_rejects_bad_json() {
        let plan = pipeline(10, vec![busy_op("a", 1, OpKind::PixelWise)]);
        let batched = Arc::new(LogicalPlan::Batch(
            sluice_core::BatchNode::try_new(plan, 2, false).unwrap(),
        ));
        let p = profile(&batched, &ProfileOptions::default()).unwrap();
        assert_eq!(p.ops.len(), 1);
        assert_eq!(p.samples, 10);
        assert!(Profile::from_json("{}").is_err());
        let mut old = p.clone();
        old.version = 0;
        assert!(Profile::from_json(&old.to_json())
            .unwrap_err()
            .to_string()
            .contains("version"));
    }

    #[test]
    fn an_op_error_names_op_and_sample() {
        let plan = pipeline(10, vec![crate::testing::fail_at(3)]);
        let err = profile(&plan, &ProfileOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("fail_at") && msg.contains('3'), "{msg}");
    }
}
