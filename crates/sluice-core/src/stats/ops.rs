//! Each step's cost measured while a run goes ([`crate::Delivery::timed`]): a chain
//! times a chunk through its steps (`ChunkTimer`: the monotonic clock around each op, the
//! thread's CPU clock once at each end of the chunk) and a streaming source's reader times
//! each chunk it reads, until the chain's first step has seen [`TIMED_ITEMS`] items. The
//! optimizer plans from these (`sluice_optimizer::Profile::from_run`) instead of first
//! running samples of its own, which costs a share of the first epoch.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::thread_cpu;
use crate::plan::physical::ChainOp;
use crate::sample::Sample;
use crate::value::Value;

/// Items a chain's first step is timed on; after that the chain stops timing, so a run pays
/// for timing only at its start. Ten times what a profile runs (1% of an epoch, 16–100
/// samples).
pub const TIMED_ITEMS: u64 = 1_024;

/// What one step (the source read, or an op) cost over the items it was timed on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTime {
    pub items_in: u64,
    pub items_out: u64,
    /// Thread CPU and wall time in the step, summed over the threads that ran it.
    pub cpu_ns: u64,
    pub wall_ns: u64,
    /// Sample bytes entering and leaving the step.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Bytes of the fields the op writes, in its outputs.
    pub bytes_written: u64,
    /// Outputs whose fields and Python objects were counted (the last op of each chain:
    /// what a chain hands on), and those counts.
    pub shaped: u64,
    pub fields_out: u64,
    pub objects_out: u64,
}

impl StepTime {
    fn add(&mut self, o: &StepTime) {
        self.items_in += o.items_in;
        self.items_out += o.items_out;
        self.cpu_ns += o.cpu_ns;
        self.wall_ns += o.wall_ns;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.bytes_written += o.bytes_written;
        self.shaped += o.shaped;
        self.fields_out += o.fields_out;
        self.objects_out += o.objects_out;
    }
}

/// The run's step times, by op id (`None`: the source read).
#[derive(Debug, Default)]
pub struct OpTimes {
    steps: Mutex<BTreeMap<Option<u64>, StepTime>>,
}

impl OpTimes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Option<u64>, StepTime>> {
        self.steps.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Whether step `key` is still to be timed (fewer than [`TIMED_ITEMS`] items so far).
    pub fn wants(&self, key: Option<u64>) -> bool {
        self.lock()
            .get(&key)
            .is_none_or(|t| t.items_in < TIMED_ITEMS)
    }
    /// Adds `t` to step `key`.
    pub fn record(&self, key: Option<u64>, t: &StepTime) {
        self.lock().entry(key).or_default().add(t);
    }
    /// The steps timed so far.
    pub fn steps(&self) -> BTreeMap<Option<u64>, StepTime> {
        self.lock().clone()
    }
    /// Adds each of `steps` to its step.
    fn record_all(&self, steps: Vec<(Option<u64>, StepTime)>) {
        let mut map = self.lock();
        for (key, t) in steps {
            map.entry(key).or_default().add(&t);
        }
    }
}

/// The source read's step time for `items` samples of `bytes` read in `cpu` / `wall`.
pub(crate) fn read_time(items: u64, bytes: u64, cpu: Duration, wall: Duration) -> StepTime {
    StepTime {
        items_in: items,
        items_out: items,
        cpu_ns: cpu.as_nanos() as u64,
        wall_ns: wall.as_nanos() as u64,
        bytes_in: bytes,
        bytes_out: bytes,
        ..StepTime::default()
    }
}

/// Items and bytes of `samples`.
fn count<'s>(samples: impl Iterator<Item = &'s Sample>) -> (u64, u64) {
    samples.fold((0, 0), |(n, b), s| (n + 1, b + s.nbytes() as u64))
}

/// Times one chunk through a chain's steps: each step's wall time from the monotonic clock
/// (cheap), the chunk's CPU from the thread clock (a system call) once at each end, and each
/// step's CPU as its wall time at the chunk's CPU over wall rate (time the thread was
/// descheduled does not count). Counting bytes between steps is charged to none of them.
pub(crate) struct ChunkTimer<'a> {
    times: &'a OpTimes,
    cpu0: Duration,
    wall0: Instant,
    /// When the step being timed started.
    lap: Instant,
    /// Items and bytes the last step handed on.
    handed: Option<(u64, u64)>,
    steps: Vec<(Option<u64>, StepTime)>,
}

impl<'a> ChunkTimer<'a> {
    /// Starts timing a chunk (and the source read, when the chain reads).
    pub(crate) fn start(times: &'a OpTimes) -> Self {
        let now = Instant::now();
        ChunkTimer {
            times,
            cpu0: thread_cpu(),
            wall0: now,
            lap: now,
            handed: None,
            steps: Vec::new(),
        }
    }
    /// Ends the source read, which made `samples`.
    pub(crate) fn read<'s>(&mut self, samples: impl Iterator<Item = &'s Sample>) {
        let wall = self.lap.elapsed();
        let (n, bytes) = count(samples);
        self.steps
            .push((None, read_time(n, bytes, Duration::ZERO, wall)));
        self.handed = Some((n, bytes));
    }
    /// Starts an op over `samples`; what enters it.
    pub(crate) fn before<'s>(&mut self, samples: impl Iterator<Item = &'s Sample>) -> (u64, u64) {
        let inputs = self.handed.take().unwrap_or_else(|| count(samples));
        first_parts_begin();
        self.lap = Instant::now();
        inputs
    }
    /// Ends op `cop` (writing the fields `writes`), started by [`ChunkTimer::before`] with
    /// `inputs`, which made `outputs`; `last`: the chain's last op, whose outputs' shape is
    /// counted. A fused op ([`crate::Op::fused_second`]) is recorded as its two ops, its cost
    /// split where it said its first part ended ([`FirstPart`]).
    pub(crate) fn op<'s>(
        &mut self,
        cop: &ChainOp,
        writes: &[String],
        inputs: (u64, u64),
        outputs: impl Iterator<Item = &'s Sample>,
        last: bool,
    ) {
        let wall_ns = self.lap.elapsed().as_nanos() as u64;
        let (part_ns, part_bytes) = first_parts_end();
        let mut t = StepTime {
            items_in: inputs.0,
            bytes_in: inputs.1,
            wall_ns,
            ..StepTime::default()
        };
        for s in outputs {
            t.items_out += 1;
            t.bytes_out += s.nbytes() as u64;
            t.bytes_written += writes
                .iter()
                .filter_map(|w| s.get(w))
                .map(|v| v.nbytes() as u64)
                .sum::<u64>();
            if last {
                t.shaped += 1;
                t.fields_out += s.len() as u64;
                t.objects_out += s.iter().map(|(_, v)| python_objects(v)).sum::<u64>();
            }
        }
        self.handed = Some((t.items_out, t.bytes_out));
        let Some(second) = cop.op.fused_second() else {
            self.steps.push((Some(cop.op_id), t));
            return;
        };
        let share = if wall_ns == 0 {
            1.0
        } else {
            (part_ns as f64 / wall_ns as f64).min(1.0)
        };
        // What the first op would have handed on: the outputs' other fields and the bytes
        // the first part said it made (all of the output when it did not say).
        let handed = if part_bytes == 0 {
            t.bytes_out
        } else {
            t.bytes_out - t.bytes_written.min(t.bytes_out) + part_bytes
        };
        let first = StepTime {
            items_out: t.items_in,
            wall_ns: (wall_ns as f64 * share) as u64,
            bytes_out: handed,
            bytes_written: if part_bytes == 0 {
                t.bytes_written
            } else {
                part_bytes
            },
            shaped: 0,
            fields_out: 0,
            objects_out: 0,
            ..t.clone()
        };
        let rest = StepTime {
            items_in: t.items_in,
            wall_ns: wall_ns - first.wall_ns,
            bytes_in: handed,
            ..t
        };
        self.steps.push((Some(cop.op_id), first));
        self.steps.push((Some(second), rest));
    }
    /// Records the chunk's steps, each charged CPU for its wall time at the chunk's rate.
    pub(crate) fn finish(mut self) {
        let cpu = (thread_cpu() - self.cpu0).as_nanos() as f64;
        let wall = self.wall0.elapsed().as_nanos() as f64;
        let rate = if wall > 0.0 {
            (cpu / wall).min(1.0)
        } else {
            1.0
        };
        for (_, t) in &mut self.steps {
            t.cpu_ns = (t.wall_ns as f64 * rate) as u64;
        }
        self.times.record_all(self.steps);
    }
}

/// The Python objects the consumer makes for `v`: one per string or bytes value and list
/// element; numbers and tensors are collated into arrays. Converting outputs costs by these.
///
/// ```
/// use sluice_core::{stats::ops::python_objects, Value};
/// assert_eq!(python_objects(&Value::Str("a".into())), 1);
/// assert_eq!(python_objects(&Value::List(vec![Value::Int(1), Value::Int(2)])), 2);
/// assert_eq!(python_objects(&Value::Int(3)), 0);
/// ```
pub fn python_objects(v: &Value) -> u64 {
    match v {
        Value::Str(_) | Value::Bytes(_) => 1,
        Value::List(items) => items.iter().map(|v| python_objects(v).max(1)).sum(),
        _ => 0,
    }
}

thread_local! {
    /// While a chain times an op on this thread: the wall nanoseconds and bytes its first
    /// part reported so far.
    static FIRST_PART: Cell<Option<(u64, u64)>> = const { Cell::new(None) };
}

/// Starts timing, on this thread, a fused op's first parts over a chunk.
pub(crate) fn first_parts_begin() {
    FIRST_PART.with(|p| p.set(Some((0, 0))));
}

/// Stops timing first parts; what they reported.
pub(crate) fn first_parts_end() -> (u64, u64) {
    FIRST_PART.with(|p| p.take().unwrap_or_default())
}

/// The first of a fused op's two parts on one sample, timed when the run times its ops (a
/// thread-local read otherwise), so the run's timings can charge each fused op its share.
///
/// ```
/// use sluice_core::stats::ops::FirstPart;
/// let part = FirstPart::start();
/// let decoded = vec![0u8; 12]; // the first op's work
/// part.end(decoded.len() as u64); // the bytes the first op alone would hand on
/// ```
pub struct FirstPart(Option<Instant>);

impl FirstPart {
    /// Starts the first part.
    pub fn start() -> Self {
        FirstPart(FIRST_PART.with(|p| p.get().is_some()).then(Instant::now))
    }
    /// Ends it; `bytes`: what the first op alone would have handed on in the fields it writes.
    pub fn end(self, bytes: u64) {
        if let Some(t0) = self.0 {
            let ns = t0.elapsed().as_nanos() as u64;
            FIRST_PART.with(|p| {
                if let Some((n, b)) = p.get() {
                    p.set(Some((n + ns, b + bytes)));
                }
            });
        }
    }
}
